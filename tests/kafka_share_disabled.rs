//! A cluster without share groups: the consumer must say so clearly, not hang or fail obscurely.
//!
//! Needs a broker formatted with `share.version=0`, which `scripts/test.sh` starts for this test
//! alone (`KAFKA_SHARE_VERSION=0 scripts/kafka.sh start`), so the test is ignored in the main run.

mod support;

use kafka_share_sink::ProtocolError;
use kafka_share_sink::{ConsumerError, KafkaShareConsumer, KafkaShareConsumerConfig};

#[tokio::test]
#[ignore = "needs a broker with share.version=0; scripts/test.sh runs it against one"]
async fn a_cluster_without_share_groups_gives_a_clear_error() {
    let bootstrap =
        support::bootstrap("share_disabled").expect("this test always needs its broker");
    let err = KafkaShareConsumer::connect(KafkaShareConsumerConfig::new(&bootstrap, "g"))
        .await
        .expect_err("share groups are disabled on this cluster");
    assert!(
        matches!(
            err,
            ConsumerError::Protocol(ProtocolError::Unsupported { .. })
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("share.version"), "{text}");
    assert!(text.contains("Kafka 4.1"), "{text}");
}
