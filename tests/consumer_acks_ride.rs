//! Acknowledgements made before a poll ride on the ShareFetch that poll sends, on the fake
//! broker: no ShareAcknowledge of their own, each offset acknowledged once.
//!
//! With Java's acquisition (one fetch per poll, nothing fetched ahead) every poll's fetch can
//! carry what the application acknowledged since the last one. (Under the sized default with
//! fetch ahead, whether a fetch planned while acknowledgements are on their way to the engine
//! carries them depends on the order the engine takes events in: `scripts/bench.sh` measures
//! that, a one-thread test here could not make it happen.)

#[path = "support/fake_broker.rs"]
mod fake_broker;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use fake_broker::{FakeBroker, Reply};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::messages::ShareFetchResponse;
use kafka_share_sink::{
    AcknowledgeType, AcquisitionSizing, KafkaShareConsumer, KafkaShareConsumerConfig, ShareConsumer,
};

const WAIT: Duration = Duration::from_secs(10);
/// Polls whose records are acknowledged before the next poll.
const CYCLES: i64 = 12;
const PER_FETCH: i64 = 3;

/// The offsets the batches acknowledge.
fn acknowledged(batches: &[(i64, i64, Vec<i8>)]) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|(first, last, _)| *first..=*last)
        .collect()
}

#[tokio::test]
async fn acknowledgements_made_before_a_poll_ride_on_its_fetch() {
    let broker = FakeBroker::start().await;
    broker.add_topic("orders", 1);
    // Each fetch acquires the next PER_FETCH records, CYCLES times; then nothing.
    let next = Arc::new(AtomicI64::new(0));
    let served = Arc::clone(&next);
    broker.on(ApiKey::ShareFetch, move |request| {
        let body = request.share_fetch().expect("ShareFetch decodes");
        let Some(topic) = body.request.topics.first() else {
            return Reply::share_fetch(&ShareFetchResponse::default());
        };
        let base = served.load(Ordering::SeqCst);
        let end = (base + PER_FETCH).min(CYCLES * PER_FETCH);
        served.store(end, Ordering::SeqCst);
        Reply::share_fetch_acquired(topic.topic_id, base..end)
    });
    // Java's acquisition (one fetch per poll, nothing fetched ahead), so that each poll's
    // fetch is the one its acknowledgements can ride on.
    let config = KafkaShareConsumerConfig::new(broker.addr(), "fake-group")
        .fetch_max_wait(Duration::from_millis(50))
        .acquisition_sizing(AcquisitionSizing::Fixed);
    let mut consumer = KafkaShareConsumer::connect(config).await.expect("connect");
    consumer
        .subscribe(vec!["orders".to_owned()])
        .await
        .expect("subscribe");

    let mut polled = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while polled.len() < usize::try_from(CYCLES * PER_FETCH).expect("small") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "got {} records",
            polled.len()
        );
        let records = consumer
            .poll(Duration::from_millis(200))
            .await
            .expect("poll");
        for record in &records {
            consumer
                .acknowledge(record, AcknowledgeType::Accept)
                .expect("acknowledge");
            polled.push(record.offset());
        }
    }
    // The last poll's acknowledgements go with the next poll's fetch too.
    consumer
        .poll(Duration::from_millis(200))
        .await
        .expect("poll");
    let results = consumer.commit_sync(WAIT).await.expect("commit");
    assert_eq!(results.failures().count(), 0, "{results:?}");

    let on_fetches: Vec<i64> = broker
        .requests_of(ApiKey::ShareFetch)
        .iter()
        .flat_map(|request| {
            let batches = request.acknowledgement_batches();
            assert!(
                batches.iter().all(|(_, _, types)| types == &[1]),
                "only ACCEPTs: {batches:?}"
            );
            acknowledged(&batches)
        })
        .collect();
    let alone: Vec<i64> = broker
        .requests_of(ApiKey::ShareAcknowledge)
        .iter()
        .flat_map(|request| acknowledged(&request.acknowledgement_batches()))
        .collect();
    assert!(
        alone.is_empty(),
        "acknowledged by ShareAcknowledge instead of riding on a fetch: {alone:?}"
    );
    assert_eq!(
        on_fetches,
        (0..CYCLES * PER_FETCH).collect::<Vec<_>>(),
        "each offset acknowledged once, on the fetch of the poll after it was polled"
    );
    consumer.close(WAIT).await.expect("close");
}
