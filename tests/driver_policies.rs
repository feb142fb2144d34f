//! The driver's policies on the embedded share group: acknowledge after flush, retry in
//! place, lock renewal during long puts, poison records at `max.delivery.attempts`.

mod support;

#[path = "support/flaky_converters.rs"]
#[allow(dead_code)]
mod flaky_converters;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::embedded::{
    AutoOffsetReset, ConsumerOptions, EmbeddedBroker, EmbeddedShareConsumer, GroupConfig,
    ProduceRecord, RecordState,
};
use kafka_share_sink::{
    AckPolicy, AcknowledgeType, AcknowledgementMode, CommitPolicy, CommitResults,
    ConsumerCapabilities, ConsumerError, ConsumerRecord, Delivered, DriverConfig, Durability,
    Error, ErrorHandling, GroupMetadata, PendingCommit, PutRetriablePolicy, RecordId,
    ShareConsumer, ShareSinkTask, SinkRecord, SinkTask, TaskConfig, TaskError,
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
    produce(&broker, 0..records);
    broker
}

fn produce(broker: &EmbeddedBroker, range: std::ops::Range<usize>) {
    for i in range {
        broker
            .produce("t", ProduceRecord::new().value(format!("{i}")))
            .unwrap();
    }
}

fn state(broker: &EmbeddedBroker, offset: i64) -> (RecordState, u16) {
    let view = broker.record_state(GROUP, "t", 0, offset).unwrap();
    (view.state(), view.delivery_count())
}

/// What a buffering sink has made durable, shared with the test.
#[derive(Debug, Default)]
struct Store {
    /// Records put, not yet flushed.
    buffer: Vec<RecordId>,
    /// Records flushed, in order, repeats included.
    durable: Vec<RecordId>,
    puts: usize,
}

/// Buffers in `put`; makes the buffer durable only in `pre_commit`, once it holds at least
/// `flush_at` records (or always when `flush_at` is 0).
struct BufferingSink {
    store: Arc<Mutex<Store>>,
    flush_at: usize,
}

#[async_trait]
impl SinkTask for BufferingSink {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        let mut store = self.store.lock().unwrap();
        store.puts += usize::from(!records.is_empty());
        store
            .buffer
            .extend(records.iter().map(|r| r.original_id().clone()));
        Ok(())
    }

    async fn pre_commit(&mut self, delivered: &Delivered) -> Result<Durability, TaskError> {
        let mut store = self.store.lock().unwrap();
        if store.buffer.len() < self.flush_at.max(1) {
            return Ok(Durability::Nothing);
        }
        let flushed = std::mem::take(&mut store.buffer);
        store.durable.extend(flushed);
        assert!(delivered.iter().all(|id| store.durable.contains(&id)));
        Ok(Durability::All)
    }
}

/// `ack.policy=after.flush` on topic `t`, a commit every iteration, polls of 10 ms.
fn after_flush() -> DriverConfig {
    DriverConfig::new(["t"])
        .commit_policy(CommitPolicy::every_iteration())
        .poll_timeout(Duration::from_millis(10))
        .ack_policy(AckPolicy::AfterFlush)
}

fn buffering(
    broker: &EmbeddedBroker,
    flush_at: usize,
    commit: CommitPolicy,
) -> (ShareSinkTask<EmbeddedShareConsumer>, Arc<Mutex<Store>>) {
    let store = Arc::new(Mutex::new(Store::default()));
    let sink = BufferingSink {
        store: Arc::clone(&store),
        flush_at,
    };
    let config = after_flush().commit_policy(commit);
    let consumer = broker.share_consumer_with(GROUP, ConsumerOptions::new().max_poll_records(10));
    (ShareSinkTask::new(Box::new(sink), consumer, config), store)
}

#[tokio::test(start_paused = true)]
async fn after_flush_holds_records_while_polling_on_and_renews_them_past_the_lock() {
    let b = broker(25);
    let (mut d, store) = buffering(&b, 26, CommitPolicy::every_iteration());
    d.initialize().await.unwrap();
    // Three polls of at most 10 bring all 25: held records do not block the next poll.
    let mut put = 0;
    for _ in 0..3 {
        let report = d.iteration().await.unwrap();
        assert_eq!(report.accepted, 0, "nothing is durable before the flush");
        put += report.records;
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    assert_eq!(put, 25);
    assert_eq!(state(&b, 0), (RecordState::Acquired, 1));
    // The sink flushes once it holds 26; nothing more to poll for 100 s, over three lock
    // durations: the locks must be renewed.
    for _ in 0..10 {
        tokio::time::advance(Duration::from_secs(10)).await;
        let report = d.iteration().await.unwrap();
        assert_eq!((report.records, report.accepted), (0, 0));
        assert_eq!(report.awaiting_flush, 25);
    }
    for offset in 0..25 {
        assert_eq!(
            state(&b, offset),
            (RecordState::Acquired, 1),
            "offset {offset}: held past the lock without being delivered again"
        );
    }
    assert!(
        d.metrics().records_renewed >= 25 * 3,
        "renewed: {}",
        d.metrics().records_renewed
    );
    // One more record fills the buffer: everything becomes durable and is accepted.
    produce(&b, 25..26);
    let report = d.iteration().await.unwrap();
    assert_eq!((report.records, report.accepted), (1, 26));
    assert_eq!(report.awaiting_flush, 0);
    assert_eq!(b.state_counts(GROUP).acknowledged, 26);
    assert_eq!(store.lock().unwrap().durable.len(), 26);
    d.close().await.unwrap();
}

/// Records held for a flush stay acquired while the next poll's conversion is retried for
/// 76 s, past the 30 s lock, and are accepted with it at the flush.
#[tokio::test(start_paused = true)]
async fn after_flush_held_records_are_renewed_during_a_conversion_retry() {
    use kafka_share_sink::Converters;
    let b = broker(1);
    let store = Arc::new(Mutex::new(Store::default()));
    let sink = BufferingSink {
        store: Arc::clone(&store),
        flush_at: 2,
    };
    let slow = flaky_converters::SlowOne::new("slow", 8);
    let config = after_flush()
        .converters(Converters::byte_array().with_value(Arc::new(slow)))
        .errors(ErrorHandling::new().retry_timeout(Some(Duration::from_secs(600))));
    let mut d = ShareSinkTask::new(Box::new(sink), b.share_consumer(GROUP), config);
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!((report.records, report.awaiting_flush), (1, 1));
    b.produce("t", ProduceRecord::new().value("slow")).unwrap();
    let start = tokio::time::Instant::now();
    let report = d.iteration().await.unwrap();
    assert!(start.elapsed() > Duration::from_secs(70));
    assert_eq!((report.records, report.accepted), (1, 2));
    for offset in 0..2 {
        assert_eq!(
            state(&b, offset),
            (RecordState::Acknowledged, 1),
            "offset {offset}"
        );
    }
    assert_eq!(store.lock().unwrap().durable.len(), 2);
    assert_eq!(d.metrics().lock_losses, 0);
    d.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn after_flush_crash_before_the_flush_loses_nothing() {
    let b = broker(8);
    let (mut crashing, store) = buffering(&b, 100, CommitPolicy::every_iteration());
    crashing.initialize().await.unwrap();
    assert_eq!(crashing.iteration().await.unwrap().records, 8);
    assert_eq!(store.lock().unwrap().buffer.len(), 8);
    drop(crashing); // dies with the buffer in memory: never flushed, never acknowledged
    assert_eq!(b.state_counts(GROUP).acknowledged, 0);

    let (mut survivor, store) = buffering(&b, 0, CommitPolicy::every_iteration());
    survivor.initialize().await.unwrap();
    tokio::time::advance(LOCK).await;
    // Redelivered after the crash: put in batches of half the poll, each flushed and
    // committed at once.
    let mut batches = Vec::new();
    for _ in 0..2 {
        let report = survivor.iteration().await.unwrap();
        batches.push((report.records, report.accepted, report.committed));
    }
    assert_eq!(batches, [(4, 4, true), (4, 4, true)]);
    assert_eq!(b.state_counts(GROUP).acknowledged, 8, "nothing lost");
    assert_eq!(state(&b, 7), (RecordState::Acknowledged, 2));
    assert_eq!(store.lock().unwrap().durable.len(), 8);
}

/// Buffers everything; says offsets below 2 of partition 0 are durable.
struct DurableBelowTwo;

#[async_trait]
impl SinkTask for DurableBelowTwo {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }
    async fn put(&mut self, _: &[SinkRecord]) -> Result<(), TaskError> {
        Ok(())
    }
    async fn pre_commit(&mut self, _: &Delivered) -> Result<Durability, TaskError> {
        Ok(Durability::Below(
            [(kafka_share_sink::TopicPartition::new("t", 0), 2)]
                .into_iter()
                .collect(),
        ))
    }
}

#[tokio::test(start_paused = true)]
async fn after_flush_close_accepts_what_is_durable_and_releases_the_rest() {
    let b = broker(4);
    let config = after_flush().commit_policy(CommitPolicy::interval(Duration::from_secs(60)));
    let mut d = ShareSinkTask::new(Box::new(DurableBelowTwo), b.share_consumer(GROUP), config);
    d.initialize().await.unwrap();
    assert_eq!(d.iteration().await.unwrap().records, 4);
    assert_eq!(d.awaiting_flush(), 4);
    d.close().await.unwrap();
    assert_eq!(state(&b, 0).0, RecordState::Acknowledged);
    assert_eq!(state(&b, 1).0, RecordState::Acknowledged);
    for offset in 2..4 {
        assert_eq!(
            state(&b, offset).0,
            RecordState::Available,
            "offset {offset}: not durable, released at close, not lost"
        );
    }
}

/// Flushes in `pre_commit`, but its first `pre_commit` never returns.
struct FirstFlushHangs {
    calls: usize,
}

#[async_trait]
impl SinkTask for FirstFlushHangs {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, _: &[SinkRecord]) -> Result<(), TaskError> {
        Ok(())
    }

    async fn pre_commit(&mut self, _: &Delivered) -> Result<Durability, TaskError> {
        self.calls += 1;
        if self.calls == 1 {
            std::future::pending::<()>().await;
        }
        Ok(Durability::All)
    }
}

/// `after.flush`: an iteration dropped while `pre_commit` runs leaves the records that wait
/// for their flush to the next commit, which accepts them (they were forgotten, held and
/// renewed until close, then delivered again).
#[tokio::test(start_paused = true)]
async fn after_flush_an_iteration_dropped_in_pre_commit_leaves_the_records_to_the_next_commit() {
    let b = broker(4);
    let config = after_flush();
    let sink = FirstFlushHangs { calls: 0 };
    let mut d = ShareSinkTask::new(Box::new(sink), b.share_consumer(GROUP), config);
    d.initialize().await.unwrap();
    let dropped = tokio::time::timeout(Duration::from_secs(5), d.iteration()).await;
    assert!(
        dropped.is_err(),
        "pre_commit hangs until the iteration is dropped"
    );
    assert_eq!(d.awaiting_flush(), 4);
    let report = d.iteration().await.unwrap();
    assert!(report.committed);
    assert_eq!(report.accepted, 4);
    assert_eq!(d.awaiting_flush(), 0);
    for offset in 0..4 {
        assert_eq!(
            state(&b, offset),
            (RecordState::Acknowledged, 1),
            "offset {offset}"
        );
    }
    d.close().await.unwrap();
}

/// Every batch a sink was handed: (offset, delivery count) per record.
type Puts = Arc<Mutex<Vec<Vec<(i64, u16)>>>>;

/// Fails `put` retriably a given number of times, then writes.
struct Flaky {
    failures_left: usize,
    puts: Puts,
    put_time: Duration,
}

#[async_trait]
impl SinkTask for Flaky {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        self.puts.lock().unwrap().push(
            records
                .iter()
                .map(|r| (r.offset(), r.delivery_count()))
                .collect(),
        );
        tokio::time::sleep(self.put_time).await;
        if self.failures_left > 0 {
            self.failures_left -= 1;
            return Err(TaskError::retriable("downstream busy"));
        }
        Ok(())
    }
}

fn flaky(
    broker: &EmbeddedBroker,
    failures: usize,
    put_time: Duration,
    config: DriverConfig,
) -> (ShareSinkTask<EmbeddedShareConsumer>, Puts) {
    let puts = Arc::new(Mutex::new(Vec::new()));
    let sink = Flaky {
        failures_left: failures,
        puts: Arc::clone(&puts),
        put_time,
    };
    let consumer = broker.share_consumer(GROUP);
    (ShareSinkTask::new(Box::new(sink), consumer, config), puts)
}

fn retry_in_place(timeout: Duration) -> DriverConfig {
    DriverConfig::new(["t"])
        .commit_policy(CommitPolicy::every_iteration())
        .poll_timeout(Duration::from_millis(10))
        .put_retriable_policy(PutRetriablePolicy::RetryInPlace)
        .errors(ErrorHandling::new().retry_timeout(Some(timeout)))
}

#[tokio::test(start_paused = true)]
async fn retry_in_place_puts_the_same_batch_again_with_growing_backoff() {
    let b = broker(3);
    let (mut d, puts) = flaky(
        &b,
        2,
        Duration::ZERO,
        retry_in_place(Duration::from_secs(60)),
    );
    d.initialize().await.unwrap();
    let start = tokio::time::Instant::now();
    let first = d.iteration().await.unwrap();
    assert_eq!((first.records, first.retained, first.released), (3, 3, 0));
    assert_eq!(
        state(&b, 0),
        (RecordState::Acquired, 1),
        "kept, not released"
    );
    let second = d.iteration().await.unwrap();
    assert_eq!(second.retained, 3);
    assert!(start.elapsed() >= Duration::from_millis(300));
    let third = d.iteration().await.unwrap();
    assert_eq!((third.records, third.accepted), (3, 3));
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "300 ms then 600 ms"
    );
    let puts = puts.lock().unwrap();
    assert_eq!(puts.len(), 3);
    assert!(
        puts.iter().all(|batch| batch == &puts[0]),
        "the same batch, delivery count 1: {puts:?}"
    );
    assert_eq!(b.state_counts(GROUP).acknowledged, 3);
    assert_eq!(d.metrics().put_retries, 2);
}

#[tokio::test(start_paused = true)]
async fn retry_in_place_renews_locks_while_backing_off_then_releases_at_the_timeout() {
    let b = broker(2);
    // Fails for longer than the retry timeout (100 s, over three lock durations).
    let (mut d, puts) = flaky(
        &b,
        usize::MAX,
        Duration::ZERO,
        retry_in_place(Duration::from_secs(100)),
    );
    d.initialize().await.unwrap();
    let start = tokio::time::Instant::now();
    loop {
        let report = d.iteration().await.unwrap();
        if report.released > 0 {
            assert_eq!(report.released, 2);
            break;
        }
        assert_eq!(report.retained, 2);
        assert_eq!(
            state(&b, 0),
            (RecordState::Acquired, 1),
            "renewed, never expired"
        );
    }
    assert!(start.elapsed() >= Duration::from_secs(100));
    assert!(
        start.elapsed() < Duration::from_secs(170),
        "{:?}",
        start.elapsed()
    );
    assert!(d.metrics().records_renewed > 0);
    assert!(puts.lock().unwrap().len() >= 5);
    // Released: the group delivers it again with a higher count.
    assert_eq!(state(&b, 0).0, RecordState::Available);
}

#[tokio::test(start_paused = true)]
async fn a_put_longer_than_the_lock_keeps_its_records() {
    let b = broker(3);
    let config = DriverConfig::new(["t"])
        .commit_policy(CommitPolicy::every_iteration())
        .poll_timeout(Duration::from_millis(10));
    let (mut d, _) = flaky(&b, 0, Duration::from_secs(100), config);
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!(report.accepted, 3);
    for offset in 0..3 {
        assert_eq!(state(&b, offset), (RecordState::Acknowledged, 1));
    }
    assert!(
        d.metrics().records_renewed >= 3 * 6,
        "renewed at half the lock during the put"
    );
    assert_eq!(d.metrics().lock_losses, 0);
}

#[tokio::test(start_paused = true)]
async fn a_record_failing_on_its_last_allowed_delivery_is_rejected_not_released() {
    let b = broker(1);
    let config = DriverConfig::new(["t"])
        .commit_policy(CommitPolicy::every_iteration())
        .poll_timeout(Duration::from_millis(10))
        .retriable_backoff(Duration::from_millis(10))
        .max_delivery_attempts(Some(3));
    let (mut d, puts) = flaky(&b, usize::MAX, Duration::ZERO, config);
    d.initialize().await.unwrap();
    let mut reports = Vec::new();
    for _ in 0..5 {
        reports.push(d.iteration().await.unwrap());
    }
    let released: usize = reports.iter().map(|r| r.released).sum();
    let rejected: usize = reports.iter().map(|r| r.rejected).sum();
    assert_eq!((released, rejected), (2, 1));
    assert_eq!(state(&b, 0), (RecordState::Archived, 3));
    let counts: Vec<u16> = puts.lock().unwrap().iter().map(|b| b[0].1).collect();
    assert_eq!(
        counts,
        vec![1, 2, 3],
        "never delivered again after the rejection"
    );
}

#[tokio::test(start_paused = true)]
async fn without_renew_a_held_record_whose_lock_ran_out_is_held_again_not_written_twice() {
    let b = broker(2);
    let store = Arc::new(Mutex::new(Store::default()));
    let sink = BufferingSink {
        store: Arc::clone(&store),
        flush_at: 100,
    };
    let config = after_flush();
    let consumer = b.share_consumer_with(GROUP, ConsumerOptions::new().renew(false));
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
    d.initialize().await.unwrap();
    assert_eq!(d.iteration().await.unwrap().records, 2);
    tokio::time::advance(LOCK).await;
    // The locks expired; the group hands the records to us again.
    let report = d.iteration().await.unwrap();
    assert_eq!(report.records, 0, "already written: not put again");
    assert_eq!(state(&b, 0), (RecordState::Acquired, 2));
    assert_eq!(d.metrics().lock_losses, 2);
    assert_eq!(store.lock().unwrap().puts, 1);
    // Once durable they are accepted under the new acquisition.
    store
        .lock()
        .unwrap()
        .buffer
        .resize(100, RecordId::new("t", 0, 0));
    let report = d.iteration().await.unwrap();
    assert_eq!(report.accepted, 2);
    assert_eq!(b.state_counts(GROUP).acknowledged, 2);
}

#[tokio::test(start_paused = true)]
async fn after_flush_needs_explicit_acknowledgement() {
    let b = broker(1);
    let store = Arc::new(Mutex::new(Store::default()));
    let sink = BufferingSink { store, flush_at: 0 };
    let consumer = b.share_consumer_with(
        GROUP,
        ConsumerOptions::new().acknowledgement_mode(AcknowledgementMode::Implicit),
    );
    let config = DriverConfig::new(["t"])
        .commit_policy(CommitPolicy::every_iteration())
        .ack_policy(AckPolicy::AfterFlush);
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
    let err = d.initialize().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Config {
                key: "ack.policy",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("explicit"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn connect_metric_names_are_reported() {
    let b = broker(2);
    let (mut d, _) = flaky(
        &b,
        0,
        Duration::ZERO,
        DriverConfig::new(["t"])
            .commit_policy(CommitPolicy::every_iteration())
            .poll_timeout(Duration::from_millis(10)),
    );
    d.initialize().await.unwrap();
    tokio::time::advance(Duration::from_secs(1)).await;
    d.iteration().await.unwrap();
    let named = d.connect_metrics();
    let get = |name: &str| named.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
    assert_eq!(get("sink-record-read-total"), Some(2.0));
    assert_eq!(get("sink-record-send-total"), Some(2.0));
    assert_eq!(get("offset-commit-completion-total"), Some(1.0));
    assert!(get("sink-record-read-rate").unwrap() > 0.0);
    assert_eq!(get("deadletterqueue-produce-requests"), Some(0.0));
    produce(&b, 2..3);
}

#[tokio::test(start_paused = true)]
async fn retry_in_place_with_a_retry_timeout_of_duration_max_retries_like_forever() {
    let b = broker(3);
    let (mut d, puts) = flaky(&b, 2, Duration::ZERO, retry_in_place(Duration::MAX));
    d.initialize().await.unwrap();
    let start = tokio::time::Instant::now();
    assert_eq!(d.iteration().await.unwrap().retained, 3);
    assert_eq!(d.iteration().await.unwrap().retained, 3);
    let third = d.iteration().await.unwrap();
    assert_eq!((third.records, third.accepted), (3, 3));
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "Connect's backoff, 300 ms then 600 ms: {:?}",
        start.elapsed()
    );
    assert_eq!(puts.lock().unwrap().len(), 3);
    assert_eq!(b.state_counts(GROUP).acknowledged, 3);
}

#[tokio::test(start_paused = true)]
async fn a_lock_of_duration_max_is_held_and_renewed_without_overflow() {
    // The consumer reports the group's lock duration; a huge one (a garbage value from a
    // broker, or a test's "never expire") must not overflow the renewal deadlines.
    let b = EmbeddedBroker::new();
    b.create_topic("t", 1).unwrap();
    b.set_group_config(
        GROUP,
        GroupConfig::new()
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .record_lock_duration(Duration::MAX),
    )
    .unwrap();
    produce(&b, 0..5);
    let (mut d, store) = buffering(&b, 6, CommitPolicy::every_iteration());
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!((report.records, report.awaiting_flush), (5, 5));
    // A day passes: the records stay acquired by this member and are not delivered again.
    tokio::time::advance(Duration::from_secs(86_400)).await;
    let report = d.iteration().await.unwrap();
    assert_eq!((report.records, report.awaiting_flush), (0, 5));
    assert_eq!(state(&b, 0), (RecordState::Acquired, 1));
    produce(&b, 5..6);
    let report = d.iteration().await.unwrap();
    assert_eq!((report.records, report.accepted), (1, 6));
    assert_eq!(b.state_counts(GROUP).acknowledged, 6);
    assert_eq!(store.lock().unwrap().durable.len(), 6);
    d.close().await.unwrap();
}

/// The embedded consumer with a twist for one test: `fetched_ahead`, its first poll acquires
/// records and keeps them, the next hands them out, saying when they were acquired;
/// `lost_at(offset, ack)`, the record at `offset` is no longer the consumer's by the time it
/// is first acknowledged with `ack` (its lock was lost): that acknowledgement fails with
/// `NotInBatch`, and the record is left to its lock, for the group to deliver again.
struct Wrapped {
    inner: EmbeddedShareConsumer,
    fetch_ahead: bool,
    buffered: Vec<ConsumerRecord>,
    acquired: Option<tokio::time::Instant>,
    lost_at: Option<(i64, AcknowledgeType)>,
    /// How many of the next `commit_sync` calls fail (a timeout) without sending anything.
    failing_commits: usize,
    /// When each RENEW was made, shared with the test.
    renewed_at: Arc<Mutex<Vec<tokio::time::Instant>>>,
    /// The next poll, or commit, after a RENEW fails (a timeout) without sending anything,
    /// once.
    failing_renewal_poll: bool,
    failing_renewal_commit: bool,
    /// RENEWs were made since the last poll or commit.
    renewed_unsent: bool,
    /// When a poll or commit went through carrying RENEWs, shared with the test.
    renewals_sent_at: Arc<Mutex<Vec<tokio::time::Instant>>>,
}

impl Wrapped {
    fn new(inner: EmbeddedShareConsumer) -> Self {
        Self {
            inner,
            fetch_ahead: false,
            buffered: Vec::new(),
            acquired: None,
            lost_at: None,
            failing_commits: 0,
            renewed_at: Arc::default(),
            failing_renewal_poll: false,
            failing_renewal_commit: false,
            renewed_unsent: false,
            renewals_sent_at: Arc::default(),
        }
    }

    /// Notes that a request carrying RENEWs went through.
    fn sent_renewals<T>(&self, carried: bool, outcome: &Result<T, ConsumerError>) {
        if carried && outcome.is_ok() {
            self.renewals_sent_at
                .lock()
                .unwrap()
                .push(tokio::time::Instant::now());
        }
    }

    async fn poll_inner(
        &mut self,
        timeout: Duration,
    ) -> Result<Vec<ConsumerRecord>, ConsumerError> {
        if !self.fetch_ahead {
            return self.inner.poll(timeout).await;
        }
        if self.acquired.is_none() {
            self.buffered = self.inner.poll(timeout).await?;
            self.acquired = Some(tokio::time::Instant::now());
            return Ok(Vec::new());
        }
        Ok(std::mem::take(&mut self.buffered))
    }

    fn failing_renewal_commit(mut self) -> Self {
        self.failing_renewal_commit = true;
        self
    }

    fn failing_renewal_poll(mut self) -> Self {
        self.failing_renewal_poll = true;
        self
    }

    fn failing_commits(mut self, n: usize) -> Self {
        self.failing_commits = n;
        self
    }

    fn fetched_ahead(mut self) -> Self {
        self.fetch_ahead = true;
        self
    }

    fn lost_at(mut self, offset: i64, ack: AcknowledgeType) -> Self {
        self.lost_at = Some((offset, ack));
        self
    }
}

#[async_trait]
impl ShareConsumer for Wrapped {
    async fn subscribe(&mut self, topics: Vec<String>) -> Result<(), ConsumerError> {
        self.inner.subscribe(topics).await
    }
    fn subscription(&self) -> Vec<String> {
        self.inner.subscription()
    }
    async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ConsumerError> {
        let carried = std::mem::take(&mut self.renewed_unsent);
        if carried && self.failing_renewal_poll {
            self.failing_renewal_poll = false;
            return Err(ConsumerError::Timeout(timeout));
        }
        let polled = self.poll_inner(timeout).await;
        self.sent_renewals(carried, &polled);
        polled
    }
    fn last_poll_acquired_at(&self) -> Option<tokio::time::Instant> {
        if self.fetch_ahead {
            self.acquired
        } else {
            self.inner.last_poll_acquired_at()
        }
    }
    fn acknowledge_offset(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        ack: AcknowledgeType,
    ) -> Result<(), ConsumerError> {
        if self.lost_at == Some((offset, ack)) {
            self.lost_at = None;
            // Held (it may be already): out of the next poll's way, left to its lock.
            let _ = self.inner.hold_offset(topic, partition, offset);
            return Err(ConsumerError::NotInBatch {
                record: RecordId::new(topic, partition, offset),
            });
        }
        if ack == AcknowledgeType::Renew {
            self.renewed_unsent = true;
            self.renewed_at
                .lock()
                .unwrap()
                .push(tokio::time::Instant::now());
        }
        self.inner.acknowledge_offset(topic, partition, offset, ack)
    }
    fn hold_offset(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<(), ConsumerError> {
        self.inner.hold_offset(topic, partition, offset)
    }
    fn supports_renew(&self) -> bool {
        self.inner.supports_renew()
    }
    fn capabilities(&self) -> ConsumerCapabilities {
        self.inner.capabilities()
    }
    async fn commit_sync(&mut self, timeout: Duration) -> Result<CommitResults, ConsumerError> {
        let carried = std::mem::take(&mut self.renewed_unsent);
        if carried && self.failing_renewal_commit {
            self.failing_renewal_commit = false;
            return Err(ConsumerError::Timeout(timeout));
        }
        if self.failing_commits > 0 {
            self.failing_commits -= 1;
            return Err(ConsumerError::Timeout(timeout));
        }
        let committed = self.inner.commit_sync(timeout).await;
        self.sent_renewals(carried, &committed);
        committed
    }
    fn commit_async(&mut self) -> Result<PendingCommit, ConsumerError> {
        self.inner.commit_async()
    }
    async fn close(&mut self, timeout: Duration) -> Result<(), ConsumerError> {
        self.inner.close(timeout).await
    }
    fn acquisition_lock_timeout(&self) -> Option<Duration> {
        self.inner.acquisition_lock_timeout()
    }
    fn group_metadata(&self) -> GroupMetadata {
        self.inner.group_metadata()
    }
    fn acknowledgement_mode(&self) -> AcknowledgementMode {
        self.inner.acknowledgement_mode()
    }
}

#[tokio::test(start_paused = true)]
async fn records_fetched_ahead_are_renewed_by_their_acquisition_not_by_the_poll() {
    let b = broker(3);
    let sink = Flaky {
        failures_left: 0,
        puts: Arc::default(),
        // Ends 12 s after the poll, 32 s after the acquisition: past the 30 s lock.
        put_time: Duration::from_secs(12),
    };
    let consumer = Wrapped::new(b.share_consumer(GROUP)).fetched_ahead();
    let config = DriverConfig::new(["t"])
        .commit_policy(CommitPolicy::every_iteration())
        .poll_timeout(Duration::from_millis(10));
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!(report.records, 0, "acquired, kept in the consumer's buffer");
    tokio::time::advance(Duration::from_secs(20)).await;
    let report = d.iteration().await.unwrap();
    assert_eq!(report.accepted, 3);
    // Timed from the poll, the first renewal would have been due 15 s after it, after the
    // put and after the lock had expired.
    assert!(
        d.metrics().records_renewed >= 3,
        "renewed during the put: {}",
        d.metrics().records_renewed
    );
    assert_eq!(d.metrics().lock_losses, 0);
    for offset in 0..3 {
        assert_eq!(state(&b, offset), (RecordState::Acknowledged, 1));
    }
}

/// The commit of a renewal during a slow `put` fails (a timeout): the locks did not move, so
/// the renewal is tried again a second later, not half a lock later, when the locks run out.
/// The records stay acquired, on their first delivery, through a put of 50 s.
#[tokio::test(start_paused = true)]
async fn a_renewal_whose_commit_failed_is_tried_again_soon() {
    let b = broker(3);
    let sink = Flaky {
        failures_left: 0,
        puts: Arc::default(),
        put_time: Duration::from_secs(50),
    };
    let consumer = Wrapped::new(b.share_consumer(GROUP)).failing_commits(1);
    let renewed_at = Arc::clone(&consumer.renewed_at);
    let config = DriverConfig::new(["t"])
        .commit_policy(CommitPolicy::every_iteration())
        .poll_timeout(Duration::from_millis(10));
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
    d.initialize().await.unwrap();
    let start = tokio::time::Instant::now();
    let report = d.iteration().await.unwrap();
    assert_eq!((report.records, report.accepted), (3, 3));
    let renewals: Vec<Duration> = renewed_at
        .lock()
        .unwrap()
        .iter()
        .map(|at| at.duration_since(start))
        .collect();
    // Three records: the failed renewal at half the lock, its retry a second later (before,
    // the next one came at 30 s, when the locks ran out), then half a lock after the retry.
    assert!(renewals.len() >= 9, "{renewals:?}");
    let (failed, retried) = (renewals[0], renewals[3]);
    assert!(
        failed >= LOCK / 2 && failed < LOCK / 2 + Duration::from_secs(1),
        "{renewals:?}"
    );
    assert!(
        retried > failed && retried <= failed + Duration::from_secs(2),
        "{renewals:?}"
    );
    assert_eq!(d.metrics().lock_losses, 0);
    for offset in 0..3 {
        assert_eq!(state(&b, offset), (RecordState::Acknowledged, 1));
    }
}

/// The request that was to carry the renewals of held records (`ack.policy=after.flush`, the
/// sink not flushed yet) fails: the poll (the iteration fails), or the commit that a driver
/// stalled at the flush bound (`max.awaiting.flush` reached) sends them with (the iteration
/// waits for the flush as usual). The RENEWs may not have reached the broker, so the records
/// are renewed again a second or so later, not half a lock later, when their locks run out.
#[tokio::test(start_paused = true)]
async fn held_records_whose_renewing_request_failed_are_renewed_again_soon() {
    for fails in ["poll", "flush-wait commit"] {
        let b = broker(3);
        let sink = BufferingSink {
            store: Arc::default(),
            flush_at: 100,
        };
        let (consumer, config) = if fails == "poll" {
            let consumer = Wrapped::new(b.share_consumer(GROUP)).failing_renewal_poll();
            (consumer, after_flush())
        } else {
            let consumer = Wrapped::new(b.share_consumer(GROUP)).failing_renewal_commit();
            (consumer, after_flush().max_awaiting_flush(3, 0))
        };
        let renewed_at = Arc::clone(&consumer.renewed_at);
        let sent_at = Arc::clone(&consumer.renewals_sent_at);
        let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
        d.initialize().await.unwrap();
        assert_eq!(d.iteration().await.unwrap().awaiting_flush, 3, "{fails}");
        tokio::time::advance(LOCK / 2 + Duration::from_secs(1)).await;
        let failed_at = tokio::time::Instant::now();
        let outcome = d.iteration().await;
        if fails == "poll" {
            let error = outcome.expect_err("the poll failed");
            assert!(error.is_retriable(), "{error:?}");
        } else {
            assert!(outcome.expect("a stalled iteration").waited_for_flush);
        }
        assert_eq!(
            renewed_at.lock().unwrap().len(),
            3,
            "{fails}: renewed first"
        );
        tokio::time::advance(Duration::from_millis(1500)).await;
        let report = d.iteration().await.expect("the next iteration");
        assert_eq!(report.awaiting_flush, 3, "{fails}");
        let renewals: Vec<Duration> = renewed_at
            .lock()
            .unwrap()
            .iter()
            .map(|at| at.duration_since(failed_at))
            .collect();
        assert_eq!(renewals.len(), 6, "{fails}: renewed again: {renewals:?}");
        assert!(
            renewals[3..].iter().all(|at| *at <= Duration::from_secs(2)),
            "{fails}: {renewals:?}"
        );
        // Queued again and sent: a poll or commit carried them.
        let sent: Vec<Duration> = sent_at
            .lock()
            .unwrap()
            .iter()
            .map(|at| at.saturating_duration_since(failed_at))
            .collect();
        assert!(
            sent.iter()
                .any(|at| *at > Duration::ZERO && *at <= Duration::from_secs(2)),
            "{fails}: renewals sent {sent:?}"
        );
        for offset in 0..3 {
            assert_eq!(state(&b, offset), (RecordState::Acquired, 1), "{fails}");
        }
    }
}

/// A held record the consumer no longer has (its lock was lost) is forgotten when its
/// renewal comes, and the others are renewed: the iteration goes on. Before, the RENEW's
/// `NotInBatch` failed the iteration, and stopped the driver.
#[tokio::test(start_paused = true)]
async fn a_held_record_the_consumer_lost_is_forgotten_at_its_renewal() {
    let b = broker(3);
    let store = Arc::new(Mutex::new(Store::default()));
    let sink = BufferingSink {
        store: Arc::clone(&store),
        flush_at: 100,
    };
    let config = after_flush();
    let consumer = Wrapped::new(b.share_consumer(GROUP)).lost_at(0, AcknowledgeType::Renew);
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
    d.initialize().await.unwrap();
    assert_eq!(d.iteration().await.unwrap().awaiting_flush, 3);
    // Past half the lock: the held records are due for renewal.
    tokio::time::advance(LOCK / 2 + Duration::from_secs(1)).await;
    let report = d.iteration().await.expect("the lost record is forgotten");
    assert_eq!(report.awaiting_flush, 3, "still waiting for the flush");
    assert_eq!(d.metrics().records_renewed, 2);
    assert_eq!(state(&b, 1), (RecordState::Acquired, 1));
}

/// After `put` (`ack.policy=after.put`), a record the consumer no longer has when its ACCEPT
/// comes (its lock ran out during the put) is skipped: the others are accepted and committed,
/// the report counts only those, and the group delivers the lost one again, to be put again.
#[tokio::test(start_paused = true)]
async fn a_record_lost_before_its_accept_is_skipped_and_delivered_again() {
    let b = broker(3);
    let puts = Puts::default();
    let sink = Flaky {
        failures_left: 0,
        puts: Arc::clone(&puts),
        put_time: Duration::ZERO,
    };
    let config = DriverConfig::new(["t"])
        .commit_policy(CommitPolicy::every_iteration())
        .poll_timeout(Duration::from_millis(10));
    let consumer = Wrapped::new(b.share_consumer(GROUP)).lost_at(1, AcknowledgeType::Accept);
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
    d.initialize().await.unwrap();
    let report = d.iteration().await.expect("the lost record is skipped");
    assert_eq!((report.records, report.accepted), (3, 2));
    assert_eq!(state(&b, 0), (RecordState::Acknowledged, 1));
    assert_eq!(state(&b, 1), (RecordState::Acquired, 1), "left to its lock");
    assert_eq!(state(&b, 2), (RecordState::Acknowledged, 1));

    tokio::time::advance(LOCK + Duration::from_secs(1)).await;
    let report = d.iteration().await.expect("delivered again");
    assert_eq!((report.records, report.accepted), (1, 1));
    assert_eq!(state(&b, 1), (RecordState::Acknowledged, 2));
    assert_eq!(
        *puts.lock().unwrap(),
        vec![vec![(0, 1), (1, 1), (2, 1)], vec![(1, 2)]]
    );
}

/// Under `after.flush`, a held record the consumer no longer has when `pre_commit` found it
/// durable is skipped, and not counted as accepted; the others are accepted.
#[tokio::test(start_paused = true)]
async fn after_flush_a_record_lost_before_its_accept_is_not_counted_as_accepted() {
    let b = broker(3);
    let store = Arc::new(Mutex::new(Store::default()));
    let sink = BufferingSink {
        store: Arc::clone(&store),
        flush_at: 0,
    };
    let config = after_flush();
    let consumer = Wrapped::new(b.share_consumer(GROUP)).lost_at(1, AcknowledgeType::Accept);
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
    d.initialize().await.unwrap();
    let report = d.iteration().await.expect("the lost record is skipped");
    assert_eq!(
        (report.records, report.accepted, report.awaiting_flush),
        (3, 2, 0)
    );
    assert_eq!(store.lock().unwrap().durable.len(), 3);
    assert_eq!(state(&b, 0), (RecordState::Acknowledged, 1));
    assert_eq!(state(&b, 1), (RecordState::Acquired, 1), "left to its lock");
    assert_eq!(state(&b, 2), (RecordState::Acknowledged, 1));
}

/// A retriable `put` failure releases the batch: a record the consumer no longer has is
/// skipped (the group has it already), the others are released, and the iteration goes on.
#[tokio::test(start_paused = true)]
async fn a_record_lost_before_its_release_is_skipped_and_the_others_released() {
    let b = broker(3);
    let sink = Flaky {
        failures_left: 1,
        puts: Puts::default(),
        put_time: Duration::ZERO,
    };
    let config = DriverConfig::new(["t"])
        .commit_policy(CommitPolicy::every_iteration())
        .poll_timeout(Duration::from_millis(10))
        .redelivery_backoff(Duration::ZERO, Duration::ZERO);
    let consumer = Wrapped::new(b.share_consumer(GROUP)).lost_at(1, AcknowledgeType::Release);
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
    d.initialize().await.unwrap();
    let report = d.iteration().await.expect("the lost record is skipped");
    assert_eq!((report.records, report.released), (3, 2));
    assert_eq!(d.metrics().records_released, 2);
    assert_eq!(state(&b, 0), (RecordState::Available, 1));
    assert_eq!(state(&b, 1), (RecordState::Acquired, 1), "left to its lock");
    assert_eq!(state(&b, 2), (RecordState::Available, 1));
}

/// The WARN about an unknown delivery-count limit that `initialize` logs, if any.
async fn unknown_limit_warning<C: ShareConsumer>(
    consumer: C,
    config: DriverConfig,
) -> Option<String> {
    let capture = support::Capture::default();
    let guard = capture.set_default();
    let sink = Flaky {
        failures_left: 0,
        puts: Puts::default(),
        put_time: Duration::ZERO,
    };
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
    d.initialize().await.unwrap();
    drop(guard);
    capture
        .lines()
        .into_iter()
        .find(|l| l.starts_with("WARN") && l.contains("delivery-count limit is not known"))
}

/// A group whose delivery-count limit the consumer could not read (`Wrapped` does not say,
/// as a Kafka consumer denied DESCRIBE_CONFIGS) is warned about at `initialize`, with the
/// limit the driver assumes; not when `max.delivery.attempts` stands in for it, nor when the
/// consumer knows the limit.
#[tokio::test(start_paused = true)]
async fn an_unknown_delivery_count_limit_is_warned_about_at_initialize() {
    let b = broker(1);
    let config = || DriverConfig::new(["t"]);
    let line = unknown_limit_warning(Wrapped::new(b.share_consumer(GROUP)), config())
        .await
        .expect("warned");
    assert!(
        line.contains("assumed_delivery_count_limit=5") && line.contains("max.delivery.attempts"),
        "{line}"
    );
    let stand_in = config().max_delivery_attempts(Some(3));
    assert_eq!(
        unknown_limit_warning(Wrapped::new(b.share_consumer(GROUP)), stand_in).await,
        None
    );
    // Not below the assumed limit: the assumption still decides the last delivery.
    let above = config().max_delivery_attempts(Some(7));
    assert!(
        unknown_limit_warning(Wrapped::new(b.share_consumer(GROUP)), above)
            .await
            .is_some()
    );
    assert_eq!(
        unknown_limit_warning(b.share_consumer(GROUP), config()).await,
        None,
        "the embedded group says its limit"
    );
}

/// Buffers in `put`; `pre_commit` takes `flush` (a slow flush), then calls everything durable.
struct SlowFlushSink {
    flush: Duration,
}

#[async_trait]
impl SinkTask for SlowFlushSink {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, _: &[SinkRecord]) -> Result<(), TaskError> {
        Ok(())
    }

    async fn pre_commit(&mut self, _: &Delivered) -> Result<Durability, TaskError> {
        tokio::time::sleep(self.flush).await;
        Ok(Durability::All)
    }
}

/// `after.flush`: records waiting for a `pre_commit` that takes three lock durations keep
/// their locks (renewed while it runs), so the flush's records are accepted on their first
/// delivery instead of going back to the group mid-flush.
#[tokio::test(start_paused = true)]
async fn after_flush_a_slow_pre_commit_keeps_the_locks_of_the_records_it_flushes() {
    let b = broker(5);
    let config = after_flush();
    let consumer = b.share_consumer_with(GROUP, ConsumerOptions::new().max_poll_records(10));
    let sink = SlowFlushSink { flush: LOCK * 3 };
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!((report.records, report.accepted), (5, 5), "{report:?}");
    for offset in 0..5 {
        assert_eq!(
            state(&b, offset),
            (RecordState::Acknowledged, 1),
            "offset {offset}: accepted on its first delivery"
        );
    }
    assert!(d.metrics().records_renewed >= 5 * 3, "{:?}", d.metrics());
    d.close().await.unwrap();
}

/// `after.flush` with a poll timeout longer than the lock: a poll that finds nothing waits no
/// longer than the first held record's renewal, so held records are renewed in time instead
/// of going back to the group while the driver waits for more.
#[tokio::test(start_paused = true)]
async fn a_poll_timeout_longer_than_the_lock_does_not_let_held_locks_run_out() {
    let b = broker(5);
    let store = Arc::new(Mutex::new(Store::default()));
    let sink = BufferingSink {
        store: Arc::clone(&store),
        flush_at: 100,
    };
    let config = after_flush().poll_timeout(LOCK * 3);
    let consumer = b.share_consumer_with(GROUP, ConsumerOptions::new().max_poll_records(10));
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
    d.initialize().await.unwrap();
    let started = tokio::time::Instant::now();
    let mut put = 0;
    while started.elapsed() < LOCK * 4 {
        put += d.iteration().await.unwrap().records;
    }
    assert_eq!(put, 5, "each record put once");
    for offset in 0..5 {
        assert_eq!(
            state(&b, offset),
            (RecordState::Acquired, 1),
            "offset {offset}: still held on its first delivery"
        );
    }
    assert_eq!(d.metrics().lock_losses, 0);
    d.close().await.unwrap();
}
