//! `MeteredConsumer` on the embedded share group: records, bytes, polls and acknowledgements
//! are counted, and acknowledgements a commit reports as failed are counted as errors.

use std::time::Duration;

use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, GroupConfig, ProduceRecord};
use kafka_share_sink::telemetry::{MeteredConsumer, MetricLabels};
use kafka_share_sink::{AcknowledgeType, ShareConsumer};

const LOCK: Duration = Duration::from_secs(15);

fn broker() -> EmbeddedBroker {
    let broker = EmbeddedBroker::new();
    broker.create_topic("t", 2).unwrap();
    broker
        .set_group_config(
            "g",
            GroupConfig::new()
                .auto_offset_reset(AutoOffsetReset::Earliest)
                .record_lock_duration(LOCK),
        )
        .unwrap();
    for (partition, value) in [(0, "abc"), (0, "de"), (1, "f")] {
        broker
            .produce(
                "t",
                ProduceRecord::new()
                    .partition(partition)
                    .key("k")
                    .value(value)
                    .header("h", "xy"),
            )
            .unwrap();
    }
    broker
}

fn metered(broker: &EmbeddedBroker) -> MeteredConsumer<impl ShareConsumer> {
    MeteredConsumer::new(broker.share_consumer("g"), MetricLabels::new("c", 0, "g"))
}

#[tokio::test(start_paused = true)]
async fn polls_records_bytes_and_acknowledgements_are_counted() {
    let broker = broker();
    let mut consumer = metered(&broker);
    let handle = consumer.handle();
    consumer.subscribe(vec!["t".to_owned()]).await.unwrap();
    let records = consumer.poll(Duration::from_secs(1)).await.unwrap();
    assert_eq!(records.len(), 3);
    for r in &records {
        consumer.acknowledge(r, AcknowledgeType::Accept).unwrap();
    }
    let results = consumer.commit_sync(Duration::from_secs(1)).await.unwrap();
    assert!(results.is_success());

    let m = handle.snapshot();
    assert_eq!(m.records_consumed, 3);
    // Key "k", header "h" = "xy", and the values: 3 × (1 + 3) + "abc" + "de" + "f".
    assert_eq!(m.bytes_consumed, 3 * 4 + 6);
    assert_eq!(m.polls, 1);
    assert_eq!(m.records_per_poll_max, 3);
    assert_eq!(m.records_per_poll_avg(), 3.0);
    assert_eq!(m.acknowledgements, 3);
    assert_eq!(m.acknowledgement_errors, 0);
    assert_eq!(m.commits, 1);
    assert_eq!(m.commit_failures, 0);
    assert_eq!(consumer.metrics(), m);
    let named = m.share_consumer_metrics();
    let get = |name: &str| named.iter().find(|(n, _)| *n == name).unwrap().1;
    assert_eq!(get("records-consumed-total"), 3.0);
    assert_eq!(get("acknowledgements-send-total"), 3.0);
}

#[tokio::test(start_paused = true)]
async fn acknowledgements_of_a_partition_whose_lock_was_lost_are_errors() {
    let broker = broker();
    let mut consumer = metered(&broker);
    consumer.subscribe(vec!["t".to_owned()]).await.unwrap();
    let records = consumer.poll(Duration::from_secs(1)).await.unwrap();
    assert_eq!(records.len(), 3);
    // The locks run out before the acknowledgements reach the group.
    tokio::time::advance(LOCK + Duration::from_millis(1)).await;
    for r in &records {
        consumer.acknowledge(r, AcknowledgeType::Accept).unwrap();
    }
    let results = consumer.commit_sync(Duration::from_secs(1)).await.unwrap();
    assert_eq!(
        results.failures().count(),
        2,
        "both partitions lost their locks"
    );

    let m = consumer.metrics();
    assert_eq!(m.acknowledgements, 3);
    assert_eq!(
        m.acknowledgement_errors, 3,
        "every acknowledgement sent failed"
    );
    assert_eq!(m.commits, 1);

    // The errors were settled by that commit: a later successful one adds none.
    let again = consumer.poll(Duration::from_secs(1)).await.unwrap();
    assert_eq!(again.len(), 3, "the expired records came back");
    for r in &again {
        consumer.acknowledge(r, AcknowledgeType::Accept).unwrap();
    }
    assert!(
        consumer
            .commit_sync(Duration::from_secs(1))
            .await
            .unwrap()
            .is_success()
    );
    let m = consumer.metrics();
    assert_eq!(
        (m.acknowledgements, m.acknowledgement_errors, m.commits),
        (6, 3, 2)
    );
}
