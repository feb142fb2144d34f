//! What a member says about its membership. One that cannot reach its group says so: a run
//! of failed heartbeats is logged as a warning, where a few (a coordinator moving) stay at
//! debug level. Before, a heartbeat whose answers never decoded retried for ever at debug
//! level while every poll returned nothing. One that leaves with records on their last
//! delivery, which the group archives, warns (the embedded consumer counted them silently).
//!
//! Each test hits callsites no other test here does: tracing caches whether a callsite is
//! enabled when it is first hit, and another test thread hitting it with no subscriber could
//! turn it off for the capture.

#[path = "support/fake_broker.rs"]
mod fake_broker;
mod support;

use std::time::Duration;

use fake_broker::{FakeBroker, Reply};
use kafka_protocol::messages::ApiKey;
use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, GroupConfig, ProduceRecord};
use kafka_share_sink::{KafkaShareConsumer, KafkaShareConsumerConfig, ShareConsumer};

#[tokio::test(flavor = "current_thread")]
async fn a_run_of_failed_heartbeats_is_a_warning() {
    // The capture sees the heartbeat task: on a current-thread runtime it runs on this thread.
    let capture = support::Capture::default();
    let _guard = capture.set_default();
    let broker = FakeBroker::start().await;
    broker.add_topic("orders", 1);
    broker.on(ApiKey::ShareGroupHeartbeat, |_| Reply::Garbled);
    let mut consumer =
        KafkaShareConsumer::connect(KafkaShareConsumerConfig::new(broker.addr(), "g"))
            .await
            .expect("connects");
    consumer
        .subscribe(vec!["orders".to_owned()])
        .await
        .expect("subscribes");
    let warned = |lines: &[String]| {
        lines
            .iter()
            .any(|l| l.starts_with("WARN") && l.contains("share-group heartbeat keeps failing"))
    };
    // Backoffs of 0.1, 0.2, 0.4, 0.8 s: the fifth failure comes after about 1.5 s.
    let _ = consumer.poll(Duration::from_millis(500)).await;
    assert!(
        broker.count(ApiKey::ShareGroupHeartbeat) >= 1 && !warned(&capture.lines()),
        "a failure or two is routine, not a warning"
    );
    for _ in 0..10 {
        if warned(&capture.lines()) {
            break;
        }
        let records = consumer
            .poll(Duration::from_millis(500))
            .await
            .expect("a garbled heartbeat is retried, not an error");
        assert!(records.is_empty());
    }
    let lines = capture.lines();
    assert!(
        warned(&lines),
        "no warning after {} heartbeats: {lines:#?}",
        broker.count(ApiKey::ShareGroupHeartbeat)
    );
    consumer.close(Duration::from_secs(2)).await.ok();
}

/// The embedded consumer's close gives records on their last delivery back unacknowledged:
/// counted and said at WARN, as the Kafka consumer does; records with deliveries left are not.
#[tokio::test(flavor = "current_thread")]
async fn an_embedded_close_with_last_deliveries_unacknowledged_is_a_warning() {
    let capture = support::Capture::default();
    let _guard = capture.set_default();
    let broker = EmbeddedBroker::new();
    broker.create_topic("t", 1).expect("topic");
    broker
        .set_group_config(
            "g",
            GroupConfig::new()
                .auto_offset_reset(AutoOffsetReset::Earliest)
                .delivery_count_limit(2),
        )
        .expect("group config");
    for i in 0..3 {
        broker
            .produce("t", ProduceRecord::new().value(format!("{i}")))
            .expect("produce");
    }
    let warned = |lines: &[String]| {
        lines
            .iter()
            .filter(|l| l.starts_with("WARN") && l.contains("last allowed delivery"))
            .cloned()
            .collect::<Vec<_>>()
    };
    for delivery in 1..=2u64 {
        let mut consumer = broker.share_consumer("g");
        consumer
            .subscribe(vec!["t".to_owned()])
            .await
            .expect("subscribe");
        let records = consumer.poll(Duration::from_secs(1)).await.expect("poll");
        assert_eq!(records.len(), 3, "delivery {delivery}");
        consumer.close(Duration::from_secs(1)).await.expect("close");
        let at_limit = if delivery == 2 { 3 } else { 0 };
        assert_eq!(
            consumer.given_back_at_limit(),
            at_limit,
            "delivery {delivery}"
        );
        let lines = warned(&capture.lines());
        if delivery == 1 {
            assert!(lines.is_empty(), "deliveries left, no warning: {lines:#?}");
        } else {
            assert_eq!(lines.len(), 1, "{lines:#?}");
            assert!(lines[0].contains("records=3"), "{}", lines[0]);
        }
    }
}
