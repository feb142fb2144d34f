//! The embedded producer and log reader: the shared producer contract
//! (tests/support/producer_contract.rs) against the embedded broker, then what only the
//! embedded broker can show: transaction timeouts on paused time, share groups over
//! transactional data, lost commit answers, sticky partitions.

#[path = "support/producer_contract.rs"]
mod producer_contract;
mod support;

use std::time::Duration;

use kafka_share_sink::embedded::{
    AutoOffsetReset, EmbeddedBroker, EmbeddedProducerConfig, GroupConfig, LostCommit,
    ProduceRecord, RecordState,
};
use kafka_share_sink::producer::{
    IsolationLevel, LogReader, Producer, ProducerError, ProducerRecord,
};
use kafka_share_sink::{AcknowledgeType, ConsumerRecord, ShareConsumer};

use producer_contract::Backend;

struct Embedded(EmbeddedBroker);

#[async_trait::async_trait]
impl Backend for Embedded {
    async fn producer(&self, transactional_id: Option<&str>) -> Box<dyn Producer> {
        match transactional_id {
            None => Box::new(self.0.producer()),
            Some(id) => Box::new(self.0.transactional_producer(id).expect("producer")),
        }
    }

    async fn create_topic(&self, name: &str, partitions: i32) {
        self.0
            .create_topic(name, usize::try_from(partitions).unwrap())
            .expect("create topic");
    }

    async fn reader(&self) -> Box<dyn LogReader> {
        Box::new(self.0.clone())
    }
}

fn embedded() -> Embedded {
    Embedded(EmbeddedBroker::new())
}

macro_rules! contract {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test]
        async fn $name() {
            producer_contract::$name(&embedded()).await;
        }
    )*};
}

contract!(
    order_per_partition,
    headers_exact,
    keyed_records_go_to_murmur2_partitions,
    committed_visible_aborted_not,
    read_committed_stops_at_open_transaction,
    zombie_is_fenced,
    refused_sends_and_aborts,
    calls_out_of_turn_are_refused,
    init_again_aborts_the_open_transaction,
);

const NO_WAIT: Duration = Duration::ZERO;

fn values(records: &[ConsumerRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value().unwrap()).into_owned())
        .collect()
}

async fn send(producer: &dyn Producer, topic: &str, value: &'static str) -> i64 {
    producer
        .send(ProducerRecord::new(topic).partition(0).value(value))
        .unwrap()
        .await
        .unwrap()
        .offset
}

#[tokio::test(start_paused = true)]
async fn the_coordinator_aborts_a_transaction_open_past_its_timeout() {
    let broker = EmbeddedBroker::new();
    broker.create_topic("t", 1).unwrap();
    let producer = broker
        .producer_with(
            EmbeddedProducerConfig::new()
                .transactional_id("slow")
                .transaction_timeout(Duration::from_secs(10)),
        )
        .unwrap();
    producer.init_transactions().await.unwrap();
    producer.begin_transaction().unwrap();
    // The timeout counts from the first send, not from begin.
    tokio::time::advance(Duration::from_secs(30)).await;
    send(&producer, "t", "late").await;
    tokio::time::advance(Duration::from_millis(9_999)).await;
    assert_eq!(broker.last_stable_offset("t", 0).unwrap(), 0, "still open");

    // A read_committed reader waiting at the LSO is woken by the timeout, with no other call.
    let reader = broker.clone();
    let waiting = tokio::spawn(async move {
        reader
            .read(
                "t",
                0,
                0,
                IsolationLevel::ReadCommitted,
                Duration::from_secs(60),
            )
            .await
            .unwrap()
    });
    let read = waiting.await.unwrap();
    assert!(read.records.is_empty(), "aborted: nothing to read");
    assert_eq!(read.next_offset, 2, "past the record and its ABORT marker");
    assert_eq!(broker.last_stable_offset("t", 0).unwrap(), 2);

    let error = producer
        .send(ProducerRecord::new("t").value("more"))
        .unwrap_err();
    assert!(error.requires_abort() && !error.is_fatal(), "{error:?}");
    assert!(
        error.to_string().contains("transaction.timeout.ms"),
        "the error says why: {error}"
    );
    let commit = producer.commit_transaction().await.unwrap_err();
    assert!(
        matches!(commit, ProducerError::Abortable { .. }),
        "{commit:?}"
    );
    producer
        .abort_transaction()
        .await
        .expect("abort after the timeout");

    producer.begin_transaction().unwrap();
    send(&producer, "t", "next").await;
    producer.commit_transaction().await.unwrap();
    let committed = broker
        .read("t", 0, 0, IsolationLevel::ReadCommitted, NO_WAIT)
        .await
        .unwrap();
    assert_eq!(values(&committed.records), ["next"]);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_producer_whose_id_was_taken_over_is_fenced() {
    let broker = EmbeddedBroker::new();
    broker.create_topic("t", 1).unwrap();
    let config = EmbeddedProducerConfig::new()
        .transactional_id("tx")
        .transaction_timeout(Duration::from_secs(1));
    let old = broker.producer_with(config.clone()).unwrap();
    old.init_transactions().await.unwrap();
    old.begin_transaction().unwrap();
    send(&old, "t", "old").await;
    tokio::time::advance(Duration::from_secs(2)).await;
    let new = broker.producer_with(config).unwrap();
    new.init_transactions().await.unwrap();
    assert!(matches!(
        old.abort_transaction().await,
        Err(ProducerError::Fenced { .. })
    ));
}

async fn read_committed_group(broker: &EmbeddedBroker, group: &str, isolation: IsolationLevel) {
    broker
        .set_group_config(
            group,
            GroupConfig::new()
                .auto_offset_reset(AutoOffsetReset::Earliest)
                .isolation_level(isolation),
        )
        .unwrap();
}

async fn poll_values(
    consumer: &mut kafka_share_sink::embedded::EmbeddedShareConsumer,
    wait: Duration,
) -> Vec<ConsumerRecord> {
    let records = consumer.poll(wait).await.unwrap();
    for record in &records {
        consumer
            .acknowledge(record, AcknowledgeType::Accept)
            .unwrap();
    }
    records
}

#[tokio::test]
async fn a_read_committed_share_group_gets_committed_records_only() {
    let broker = EmbeddedBroker::new();
    broker.create_topic("t", 1).unwrap();
    read_committed_group(&broker, "g", IsolationLevel::ReadCommitted).await;
    let plain = broker.producer();
    let producer = broker.transactional_producer("tx").unwrap();
    producer.init_transactions().await.unwrap();

    send(&plain, "t", "plain-1").await; // 0
    producer.begin_transaction().unwrap();
    send(&producer, "t", "aborted").await; // 1
    producer.abort_transaction().await.unwrap(); // marker 2
    producer.begin_transaction().unwrap();
    send(&producer, "t", "committed").await; // 3
    producer.commit_transaction().await.unwrap(); // marker 4
    producer.begin_transaction().unwrap();
    send(&producer, "t", "open").await; // 5
    send(&plain, "t", "plain-2").await; // 6

    let mut consumer = broker.share_consumer("g");
    consumer.subscribe(vec!["t".into()]).await.unwrap();
    let got = poll_values(&mut consumer, Duration::from_secs(1)).await;
    assert_eq!(values(&got), ["plain-1", "committed"]);
    assert!(
        poll_values(&mut consumer, Duration::from_millis(50))
            .await
            .is_empty(),
        "nothing past the open transaction, not even plain-2"
    );
    assert_eq!(
        broker.share_partition_offsets("g", "t", 0),
        Some((5, 5)),
        "the group stops at the last stable offset"
    );
    for (offset, state) in [
        (1, RecordState::Archived),
        (2, RecordState::Archived),
        (4, RecordState::Archived),
    ] {
        assert_eq!(
            broker.record_state("g", "t", 0, offset).unwrap().state(),
            state,
            "offset {offset}: aborted records and markers are archived"
        );
    }

    // A consumer waiting at the LSO is woken by the commit.
    let waiting = tokio::spawn(async move {
        let records = poll_values(&mut consumer, Duration::from_secs(5)).await;
        (consumer, records)
    });
    tokio::task::yield_now().await;
    producer.commit_transaction().await.unwrap(); // marker 7
    let (mut consumer, got) = waiting.await.unwrap();
    assert_eq!(values(&got), ["open", "plain-2"]);
    assert!(
        consumer
            .commit_sync(Duration::from_secs(1))
            .await
            .unwrap()
            .is_success()
    );
    assert_eq!(broker.share_partition_offsets("g", "t", 0), Some((8, 8)));
}

#[tokio::test]
async fn a_read_uncommitted_share_group_gets_every_data_record_but_no_marker() {
    let broker = EmbeddedBroker::new();
    broker.create_topic("t", 1).unwrap();
    read_committed_group(&broker, "g", IsolationLevel::ReadUncommitted).await;
    let producer = broker.transactional_producer("tx").unwrap();
    producer.init_transactions().await.unwrap();
    producer.begin_transaction().unwrap();
    send(&producer, "t", "aborted").await; // 0
    producer.abort_transaction().await.unwrap(); // marker 1
    producer.begin_transaction().unwrap();
    send(&producer, "t", "committed").await; // 2
    producer.commit_transaction().await.unwrap(); // marker 3
    producer.begin_transaction().unwrap();
    send(&producer, "t", "open").await; // 4
    broker
        .produce("t", ProduceRecord::new().partition(0).value("plain"))
        .unwrap(); // 5

    let mut consumer = broker.share_consumer("g");
    consumer.subscribe(vec!["t".into()]).await.unwrap();
    let got = poll_values(&mut consumer, Duration::from_secs(1)).await;
    assert_eq!(values(&got), ["aborted", "committed", "open", "plain"]);
    assert_eq!(
        got.iter().map(ConsumerRecord::offset).collect::<Vec<_>>(),
        [0, 2, 4, 5]
    );
    assert!(
        consumer
            .commit_sync(Duration::from_secs(1))
            .await
            .unwrap()
            .is_success()
    );
    assert_eq!(broker.share_partition_offsets("g", "t", 0), Some((6, 6)));
    let counts = broker.state_counts("g");
    assert_eq!(
        (counts.acknowledged, counts.archived),
        (4, 2),
        "the markers"
    );
}

#[tokio::test]
async fn a_marker_is_never_delivered_even_when_it_is_all_a_poll_acquires() {
    let broker = EmbeddedBroker::new();
    broker.create_topic("t", 1).unwrap();
    read_committed_group(&broker, "g", IsolationLevel::ReadUncommitted).await;
    let producer = broker.transactional_producer("tx").unwrap();
    producer.init_transactions().await.unwrap();
    producer.begin_transaction().unwrap();
    send(&producer, "t", "a").await; // 0
    producer.commit_transaction().await.unwrap(); // marker 1
    send_plain(&broker, "b"); // 2

    let mut consumer = broker.share_consumer_with(
        "g",
        kafka_share_sink::embedded::ConsumerOptions::new().max_poll_records(1),
    );
    consumer.subscribe(vec!["t".into()]).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let got = poll_values(&mut consumer, Duration::from_millis(100)).await;
        seen.extend(got);
    }
    assert_eq!(
        seen.iter().map(ConsumerRecord::offset).collect::<Vec<_>>(),
        [0, 2]
    );
}

fn send_plain(broker: &EmbeddedBroker, value: &'static str) {
    broker
        .produce("t", ProduceRecord::new().partition(0).value(value))
        .unwrap();
}

#[tokio::test]
async fn a_lost_commit_answer_reports_the_outcome_unknown_either_way() {
    for (lost, visible) in [(LostCommit::Committed, true), (LostCommit::Aborted, false)] {
        let broker = EmbeddedBroker::new();
        broker.create_topic("t", 1).unwrap();
        let producer = broker.transactional_producer("tx").unwrap();
        producer.init_transactions().await.unwrap();
        producer.begin_transaction().unwrap();
        send(&producer, "t", "v").await;
        broker.fail_next_commit(lost);
        let error = producer.commit_transaction().await.unwrap_err();
        assert!(
            matches!(error, ProducerError::CommitOutcomeUnknown { .. }),
            "{error:?}"
        );
        let read = broker
            .read("t", 0, 0, IsolationLevel::ReadCommitted, NO_WAIT)
            .await
            .unwrap();
        assert_eq!(read.records.len() == 1, visible, "{lost:?}");
        assert!(
            matches!(
                producer.begin_transaction(),
                Err(ProducerError::TransactionState { .. })
            ),
            "init_transactions is needed again"
        );
        producer.init_transactions().await.unwrap();
        producer.begin_transaction().unwrap();
        send(&producer, "t", "after").await;
        producer
            .commit_transaction()
            .await
            .expect("the fault is used up");
    }
}

#[tokio::test]
async fn unkeyed_records_stick_to_a_partition_then_move_on() {
    let broker = EmbeddedBroker::new();
    broker.create_topic("t", 3).unwrap();
    let producer = broker
        .producer_with(
            EmbeddedProducerConfig::new()
                .transactional_id("tx")
                .sticky_records(2),
        )
        .unwrap();
    producer.init_transactions().await.unwrap();
    let mut partitions = Vec::new();
    for _ in 0..2 {
        producer.begin_transaction().unwrap();
        for _ in 0..3 {
            let written = producer
                .send(ProducerRecord::new("t").value("x"))
                .unwrap()
                .await
                .unwrap();
            partitions.push(written.partition);
        }
        producer.commit_transaction().await.unwrap();
    }
    // Two records a partition, and a new partition at each transaction.
    assert_eq!(partitions, [0, 0, 1, 2, 2, 0]);
}

#[tokio::test]
async fn idempotent_producer_writes_at_once_and_refuses_unknown_partitions() {
    let broker = EmbeddedBroker::new();
    broker.create_topic("t", 2).unwrap();
    let producer = broker.producer();
    let written = producer
        .send(
            ProducerRecord::new("t")
                .partition(1)
                .value("v")
                .timestamp(7),
        )
        .unwrap()
        .await
        .unwrap();
    assert_eq!(
        (written.partition, written.offset, written.timestamp),
        (1, 0, 7)
    );
    assert_eq!(
        broker.read_log("t", 1).unwrap().len(),
        1,
        "before any flush"
    );
    assert_eq!(broker.last_stable_offset("t", 1).unwrap(), 1);
    assert!(matches!(
        producer.send(ProducerRecord::new("t").partition(2)),
        Err(ProducerError::UnknownPartition { partition: 2, .. })
    ));
    assert!(matches!(
        producer.send(ProducerRecord::new("nope")),
        Err(ProducerError::UnknownPartition { partition: -1, .. })
    ));
    producer.flush().await.unwrap();
}

#[tokio::test]
async fn read_log_is_read_uncommitted_without_markers() {
    let broker = EmbeddedBroker::new();
    broker.create_topic("t", 1).unwrap();
    let producer = broker.transactional_producer("tx").unwrap();
    producer.init_transactions().await.unwrap();
    producer.begin_transaction().unwrap();
    send(&producer, "t", "aborted").await;
    producer.abort_transaction().await.unwrap();
    producer.begin_transaction().unwrap();
    send(&producer, "t", "open").await;
    let log = broker.read_log("t", 0).unwrap();
    assert_eq!(values(&log), ["aborted", "open"]);
    assert_eq!(
        log.iter().map(ConsumerRecord::offset).collect::<Vec<_>>(),
        [0, 2]
    );
    assert_eq!(broker.log_end_offset("t", 0).unwrap(), 3);
    assert_eq!(broker.last_stable_offset("t", 0).unwrap(), 2);
    assert_eq!(
        broker
            .end_offset("t", 0, IsolationLevel::ReadUncommitted)
            .await
            .unwrap(),
        3
    );
}

#[tokio::test]
async fn a_reader_refuses_unknown_partitions_and_offsets_out_of_range() {
    let broker = EmbeddedBroker::new();
    broker.create_topic("t", 1).unwrap();
    let unknown = broker
        .read("t", 1, 0, IsolationLevel::ReadCommitted, NO_WAIT)
        .await
        .unwrap_err();
    assert!(
        unknown.to_string().contains("UNKNOWN_TOPIC_OR_PARTITION"),
        "{unknown}"
    );
    let past = broker
        .read("t", 0, 1, IsolationLevel::ReadCommitted, NO_WAIT)
        .await
        .unwrap_err();
    assert!(past.to_string().contains("OFFSET_OUT_OF_RANGE"), "{past}");
    let at_end = broker
        .read("t", 0, 0, IsolationLevel::ReadCommitted, NO_WAIT)
        .await
        .unwrap();
    assert_eq!((at_end.records.len(), at_end.next_offset), (0, 0));
}

#[tokio::test]
async fn invalid_producer_configs_are_refused() {
    let broker = EmbeddedBroker::new();
    for config in [
        EmbeddedProducerConfig::new().transactional_id(""),
        EmbeddedProducerConfig::new()
            .transactional_id("tx")
            .transaction_timeout(Duration::ZERO),
        EmbeddedProducerConfig::new()
            .transactional_id("tx")
            .transaction_timeout(Duration::from_secs(901)),
    ] {
        let error = broker.producer_with(config).unwrap_err();
        assert!(matches!(error, ProducerError::Config { .. }), "{error:?}");
    }
    let uninitialised = broker.transactional_producer("tx").unwrap();
    assert!(matches!(
        uninitialised.begin_transaction(),
        Err(ProducerError::TransactionState { .. })
    ));
}
