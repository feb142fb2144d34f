//! Nothing silently lost at the delivery-count limit, on the embedded share group: a record on
//! its last allowed delivery is not left buffered, written-but-not-durable data is bounded,
//! and the driver says at `initialize` what archived records will do.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::embedded::{
    AutoOffsetReset, ConsumerOptions, EmbeddedBroker, EmbeddedShareConsumer, GroupConfig,
    ProduceRecord, RecordState,
};
use kafka_share_sink::{
    AckPolicy, CommitPolicy, Delivered, DriverConfig, Durability, Error, RecordId, ShareConsumer,
    ShareSinkTask, SinkRecord, SinkTask, TaskConfig, TaskError,
};

const GROUP: &str = "sink";
const LOCK: Duration = Duration::from_secs(30);

fn broker(records: usize) -> EmbeddedBroker {
    let broker = EmbeddedBroker::new();
    broker.create_topic("t", 1).unwrap();
    broker
        .set_group_config(
            GROUP,
            GroupConfig::new()
                .auto_offset_reset(AutoOffsetReset::Earliest)
                .record_lock_duration(LOCK),
        )
        .unwrap();
    for i in 0..records {
        broker
            .produce("t", ProduceRecord::new().value(format!("{i}")))
            .unwrap();
    }
    broker
}

fn state(broker: &EmbeddedBroker, offset: i64) -> (RecordState, u16) {
    let view = broker.record_state(GROUP, "t", 0, offset).unwrap();
    (view.state(), view.delivery_count())
}

/// What the sink made durable, and whether it may flush; shared with the test.
#[derive(Debug, Default)]
struct Store {
    buffer: Vec<RecordId>,
    durable: Vec<RecordId>,
    /// `pre_commit` flushes only while this is true.
    flush: bool,
    pre_commits: usize,
    /// Every `put` fails retriably while this is true.
    fail_puts: bool,
}

/// Buffers in `put`, flushes in `pre_commit` when the test allows it.
struct Sink(Arc<Mutex<Store>>);

#[async_trait]
impl SinkTask for Sink {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        let mut store = self.0.lock().unwrap();
        if store.fail_puts && !records.is_empty() {
            return Err(TaskError::retriable("the sink is down"));
        }
        store
            .buffer
            .extend(records.iter().map(|r| r.original_id().clone()));
        Ok(())
    }

    async fn pre_commit(&mut self, _: &Delivered) -> Result<Durability, TaskError> {
        let mut store = self.0.lock().unwrap();
        store.pre_commits += 1;
        if !store.flush {
            return Ok(Durability::Nothing);
        }
        let flushed = std::mem::take(&mut store.buffer);
        store.durable.extend(flushed);
        Ok(Durability::All)
    }
}

/// A driver acknowledging after flush, committing (so asking for a flush) only once an hour.
fn driver(
    broker: &EmbeddedBroker,
    configure: impl FnOnce(DriverConfig) -> DriverConfig,
) -> (ShareSinkTask<EmbeddedShareConsumer>, Arc<Mutex<Store>>) {
    let store = Arc::new(Mutex::new(Store::default()));
    let config = DriverConfig::new(["t"])
        .poll_timeout(Duration::from_millis(10))
        .retriable_backoff(Duration::from_millis(10))
        .ack_policy(AckPolicy::AfterFlush)
        .commit_policy(CommitPolicy::interval(Duration::from_secs(3600)));
    let consumer = broker.share_consumer_with(GROUP, ConsumerOptions::new().max_poll_records(10));
    let driver = ShareSinkTask::new(
        Box::new(Sink(Arc::clone(&store))),
        consumer,
        configure(config),
    );
    (driver, store)
}

/// Acquires every available record with a consumer that then dies: each record's delivery
/// count goes up by one once the lock expires.
async fn crash_once(broker: &EmbeddedBroker) {
    let mut c = broker.share_consumer(GROUP);
    c.subscribe(vec!["t".to_owned()]).await.unwrap();
    let got = c.poll(Duration::from_millis(10)).await.unwrap();
    assert!(!got.is_empty());
    drop(c);
    tokio::time::advance(LOCK + Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_record_on_its_last_delivery_is_flushed_at_once_not_left_buffered() {
    let b = broker(1);
    crash_once(&b).await;
    // The second delivery is the last one allowed.
    let (mut d, store) = driver(&b, |c| c.max_delivery_attempts(Some(2)));
    store.lock().unwrap().flush = true;
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!((report.records, report.last_delivery), (1, 1));
    assert!(report.committed, "a flush was asked for at once");
    assert_eq!(report.accepted, 1);
    assert_eq!(report.awaiting_flush, 0);
    assert_eq!(state(&b, 0), (RecordState::Acknowledged, 2));
    assert_eq!(d.metrics().records_last_delivery, 1);
    d.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_record_with_deliveries_left_waits_for_the_flush_as_before() {
    let b = broker(1);
    let (mut d, store) = driver(&b, |c| c.max_delivery_attempts(Some(2)));
    store.lock().unwrap().flush = true;
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!((report.records, report.last_delivery), (1, 0));
    assert!(!report.committed);
    assert_eq!(report.awaiting_flush, 1);
    assert_eq!(store.lock().unwrap().pre_commits, 0);
    assert_eq!(state(&b, 0), (RecordState::Acquired, 1));
    d.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_last_delivery_the_flush_does_not_make_durable_goes_to_the_dead_letter_queue() {
    let b = broker(1);
    crash_once(&b).await;
    let dlq = b.dead_letter_queue("t-dlq").unwrap();
    let (mut d, store) = driver(&b, |c| {
        c.max_delivery_attempts(Some(2))
            .dead_letter_queue(Arc::new(dlq), true)
    });
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!(
        store.lock().unwrap().pre_commits,
        1,
        "the flush was asked for"
    );
    assert_eq!((report.dead_lettered, report.rejected), (1, 1));
    assert_eq!(report.awaiting_flush, 0);
    assert_eq!(state(&b, 0).0, RecordState::Archived);
    let letters = b.read_log("t-dlq", 0).unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].value().map(|v| v.as_ref()), Some(&b"0"[..]));
    d.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn without_a_dead_letter_queue_a_last_delivery_stays_held_until_a_flush() {
    let b = broker(1);
    crash_once(&b).await;
    let (mut d, store) = driver(&b, |c| c.max_delivery_attempts(Some(2)));
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!(
        report.awaiting_flush, 1,
        "not rejected without a copy elsewhere"
    );
    // Held past its lock, then flushed.
    for _ in 0..4 {
        tokio::time::advance(Duration::from_secs(10)).await;
        d.iteration().await.unwrap();
    }
    assert_eq!(state(&b, 0), (RecordState::Acquired, 2));
    store.lock().unwrap().flush = true;
    d.close().await.unwrap();
    assert_eq!(state(&b, 0), (RecordState::Acknowledged, 2));
}

/// A last delivery still held for a flush that has not come when the driver closes goes back
/// to the group with the consumer's close, which archives it: counted in
/// `records_released_at_limit`.
#[tokio::test(start_paused = true)]
async fn a_last_delivery_still_held_for_a_flush_at_close_is_counted() {
    let b = broker(1);
    let limit_two = GroupConfig::new()
        .auto_offset_reset(AutoOffsetReset::Earliest)
        .record_lock_duration(LOCK)
        .delivery_count_limit(2);
    b.set_group_config(GROUP, limit_two).unwrap();
    crash_once(&b).await;
    let (mut d, _store) = driver(&b, |c| c);
    d.initialize().await.unwrap();
    assert_eq!(d.iteration().await.unwrap().awaiting_flush, 1);
    d.close().await.unwrap();
    assert_eq!(d.metrics().records_released_at_limit, 1);
    assert_eq!(state(&b, 0), (RecordState::Archived, 2));
}

#[tokio::test(start_paused = true)]
async fn past_the_flush_bound_the_driver_stops_polling_until_the_task_flushes() {
    let b = broker(30);
    let (mut d, store) = driver(&b, |c| c.max_awaiting_flush(10, 0));
    d.initialize().await.unwrap();
    let first = d.iteration().await.unwrap();
    assert_eq!((first.records, first.awaiting_flush), (10, 10));
    // The bound is reached: the task is asked to flush, declines, and nothing more is polled.
    for _ in 0..3 {
        let report = d.iteration().await.unwrap();
        assert!(report.waited_for_flush);
        assert_eq!(report.records, 0);
    }
    assert_eq!(state(&b, 10), (RecordState::Available, 0), "not acquired");
    assert!(store.lock().unwrap().pre_commits >= 3);
    assert!(d.metrics().flush_waits >= 3);
    // Once the task flushes, the driver accepts and polls on.
    store.lock().unwrap().flush = true;
    let report = d.iteration().await.unwrap();
    assert!(!report.waited_for_flush);
    assert_eq!((report.accepted, report.records), (10, 10));
    d.close().await.unwrap();
}

/// A driver stalled at the flush bound keeps the locks of what it holds: the RENEWs it queues
/// at half a lock go out even though the flush-wait commit has nothing to accept. Before,
/// that commit was skipped, nothing else was sent while stalled, and the records were
/// delivered again when their locks ran out (archived on their last delivery).
#[tokio::test(start_paused = true)]
async fn a_driver_stalled_at_the_flush_bound_keeps_the_locks_of_what_it_holds() {
    let b = broker(30);
    let (mut d, store) = driver(&b, |c| c.max_awaiting_flush(10, 0));
    d.initialize().await.unwrap();
    assert_eq!(d.iteration().await.unwrap().awaiting_flush, 10);
    // Three locks' time without a flush.
    for _ in 0..20 {
        tokio::time::advance(Duration::from_secs(5)).await;
        let report = d.iteration().await.unwrap();
        assert!(report.waited_for_flush);
    }
    assert_eq!(d.metrics().lock_losses, 0);
    for offset in 0..10 {
        assert_eq!(
            state(&b, offset),
            (RecordState::Acquired, 1),
            "offset {offset}"
        );
    }
    store.lock().unwrap().flush = true;
    let report = d.iteration().await.unwrap();
    assert_eq!(report.accepted, 10);
    for offset in 0..10 {
        assert_eq!(
            state(&b, offset),
            (RecordState::Acknowledged, 1),
            "offset {offset}"
        );
    }
    d.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_byte_bound_counts_keys_values_and_headers() {
    let b = broker(30);
    // The first ten values are one byte each: ten records make 10 bytes, over the bound of 8.
    let (mut d, _store) = driver(&b, |c| c.max_awaiting_flush(0, 8));
    d.initialize().await.unwrap();
    assert_eq!(d.iteration().await.unwrap().records, 10);
    assert!(d.iteration().await.unwrap().waited_for_flush);
    d.close().await.unwrap();
}

/// At the group's own limit (Kafka's default 5, with no `max.delivery.attempts`), a failed
/// `put` no longer RELEASEs the record into the broker's archive: with a dead-letter queue it
/// is written there and rejected.
#[tokio::test(start_paused = true)]
async fn a_put_failing_at_the_group_limit_goes_to_the_dead_letter_queue() {
    let b = broker(1);
    let dlq = b.dead_letter_queue("t-dlq").unwrap();
    let (mut d, store) = driver(&b, |c| {
        c.ack_policy(AckPolicy::AfterPut)
            .dead_letter_queue(Arc::new(dlq), true)
    });
    store.lock().unwrap().fail_puts = true;
    d.initialize().await.unwrap();
    let mut released = 0;
    let mut dead_lettered = 0;
    for _ in 0..5 {
        let report = d.iteration().await.unwrap();
        released += report.released;
        dead_lettered += report.dead_lettered;
        tokio::time::advance(Duration::from_millis(20)).await;
    }
    assert_eq!((released, dead_lettered), (4, 1));
    assert_eq!(b.read_log("t-dlq", 0).unwrap().len(), 1);
    d.close().await.unwrap();
    assert_eq!(state(&b, 0), (RecordState::Archived, 5), "rejected");
}

#[tokio::test(start_paused = true)]
async fn without_a_dead_letter_queue_a_release_at_the_limit_is_counted() {
    let b = broker(1);
    let (mut d, store) = driver(&b, |c| c.ack_policy(AckPolicy::AfterPut));
    store.lock().unwrap().fail_puts = true;
    d.initialize().await.unwrap();
    for _ in 0..5 {
        d.iteration().await.unwrap();
        tokio::time::advance(Duration::from_millis(20)).await;
    }
    let metrics = d.metrics();
    assert_eq!(metrics.records_released_at_limit, 1);
    assert_eq!(metrics.records_last_delivery, 1);
    assert!(
        d.connect_metrics()
            .iter()
            .any(|(n, v)| *n == "share-records-released-at-limit-total" && *v == 1.0)
    );
    d.close().await.unwrap();
    assert_eq!(
        state(&b, 0),
        (RecordState::Archived, 5),
        "released at the limit"
    );
}

#[tokio::test(start_paused = true)]
async fn a_group_without_a_broker_dead_letter_queue_is_refused_when_one_is_required() {
    let b = broker(1);
    let (mut d, _store) = driver(&b, |c| c.require_broker_dead_letter_queue(true));
    match d.initialize().await {
        Err(Error::Config { key, reason }) => {
            assert_eq!(key, "share.dead.letter.queue.required");
            assert!(
                reason.contains("errors.deadletterqueue.topic.name"),
                "says what to set: {reason}"
            );
        }
        other => panic!("refused expected: {other:?}"),
    }
    // Not required (the default): a warning only.
    let (mut d, _store) = driver(&b, |c| c);
    d.initialize().await.unwrap();
    d.close().await.unwrap();
}
