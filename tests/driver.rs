//! The driver on the embedded share group: the put → acknowledge rules, crashes, commit policy,
//! life cycle errors.

#[path = "support/prompt_shutdown.rs"]
mod prompt_shutdown;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::ProtocolError;
use kafka_share_sink::embedded::{
    AutoOffsetReset, ConsumerOptions, EmbeddedBroker, EmbeddedShareConsumer, GroupConfig, OnDrop,
    ProduceRecord, RecordState,
};
use kafka_share_sink::{
    AckPolicy, AcknowledgeType, AcknowledgementMode, CommitPolicy, CommitResults,
    ConsumerCapabilities, ConsumerCapability, ConsumerError, ConsumerRecord, Delivered,
    DriverConfig, Durability, Error, GroupMetadata, PendingCommit, PutRetriablePolicy, RecordId,
    ShareConsumer, ShareSinkTask, SinkRecord, SinkTask, SinkTaskContext, TaskConfig, TaskError,
    TaskStage,
};

const GROUP: &str = "sink";
const LOCK: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy)]
enum Outcome {
    Ok,
    Retriable,
    /// A retriable error that asks for this pause (`TaskError::with_backoff`).
    RetriableWithBackoff(Duration),
    Fatal,
    /// Panic, as a sink with a bug does.
    Panic,
    /// Write the records, then never return: the process dies before acknowledging.
    WriteThenHang,
}

/// What a scripted sink saw and did.
#[derive(Debug, Default)]
struct Log {
    /// Every record written, with the delivery count it arrived with.
    written: Vec<(RecordId, u16)>,
    /// Every non-empty batch handed to put.
    batches: Vec<Vec<(RecordId, u16)>>,
    pre_commits: Vec<Vec<RecordId>>,
    started: bool,
    stopped: bool,
}

struct ScriptedSink {
    log: Arc<Mutex<Log>>,
    /// Outcomes of the next non-empty puts; `Ok` once exhausted.
    script: VecDeque<Outcome>,
    context: Option<SinkTaskContext>,
    request_commit_on_put: bool,
    fail_start: bool,
    /// `start` never finishes (a target that cannot be reached yet).
    hang_start: bool,
}

impl ScriptedSink {
    fn new(script: &[Outcome]) -> (Self, Arc<Mutex<Log>>) {
        let log = Arc::new(Mutex::new(Log::default()));
        let sink = Self {
            log: Arc::clone(&log),
            script: script.iter().copied().collect(),
            context: None,
            request_commit_on_put: false,
            fail_start: false,
            hang_start: false,
        };
        (sink, log)
    }
}

#[async_trait]
impl SinkTask for ScriptedSink {
    fn initialize(&mut self, context: SinkTaskContext) {
        self.context = Some(context);
    }

    async fn start(&mut self, _config: &TaskConfig) -> Result<(), TaskError> {
        if self.fail_start {
            return Err(TaskError::fatal("cannot reach the database"));
        }
        if self.hang_start {
            std::future::pending::<()>().await;
        }
        self.log.lock().unwrap().started = true;
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        let batch: Vec<(RecordId, u16)> = records
            .iter()
            .map(|r| (r.original_id().clone(), r.delivery_count()))
            .collect();
        self.log.lock().unwrap().batches.push(batch.clone());
        match self.script.pop_front().unwrap_or(Outcome::Ok) {
            Outcome::Ok => {
                self.log.lock().unwrap().written.extend(batch);
                if self.request_commit_on_put {
                    if let Some(ctx) = &self.context {
                        ctx.request_commit();
                    }
                }
                Ok(())
            }
            Outcome::Retriable => Err(TaskError::retriable("downstream busy")),
            Outcome::RetriableWithBackoff(backoff) => {
                Err(TaskError::retriable("downstream busy").with_backoff(backoff))
            }
            Outcome::Fatal => Err(TaskError::fatal("schema mismatch")),
            Outcome::Panic => panic!("index out of bounds in the sink"),
            Outcome::WriteThenHang => {
                self.log.lock().unwrap().written.extend(batch);
                std::future::pending::<()>().await;
                unreachable!("pending never completes")
            }
        }
    }

    async fn pre_commit(&mut self, delivered: &Delivered) -> Result<Durability, TaskError> {
        self.log
            .lock()
            .unwrap()
            .pre_commits
            .push(delivered.iter().collect());
        Ok(Durability::All)
    }

    async fn stop(&mut self) -> Result<(), TaskError> {
        self.log.lock().unwrap().stopped = true;
        Ok(())
    }
}

fn broker(records: usize, partitions: usize) -> EmbeddedBroker {
    let broker = EmbeddedBroker::new();
    broker.create_topic("t", partitions).unwrap();
    let config = GroupConfig::new()
        .auto_offset_reset(AutoOffsetReset::Earliest)
        .record_lock_duration(LOCK);
    broker.set_group_config(GROUP, config).unwrap();
    for i in 0..records {
        broker
            .produce(
                "t",
                ProduceRecord::new()
                    .partition(i32::try_from(i % partitions).unwrap())
                    .value(format!("{i}")),
            )
            .unwrap();
    }
    broker
}

fn config() -> DriverConfig {
    // These tests follow one iteration at a time, commit included.
    DriverConfig::new(["t"])
        .commit_policy(CommitPolicy::every_iteration())
        .poll_timeout(Duration::from_millis(10))
        .retriable_backoff(Duration::from_millis(100))
}

fn driver(
    broker: &EmbeddedBroker,
    sink: ScriptedSink,
    options: ConsumerOptions,
) -> ShareSinkTask<EmbeddedShareConsumer> {
    ShareSinkTask::new(
        Box::new(sink),
        broker.share_consumer_with(GROUP, options),
        config(),
    )
}

fn state(broker: &EmbeddedBroker, partition: i32, offset: i64) -> (RecordState, u16) {
    let view = broker.record_state(GROUP, "t", partition, offset).unwrap();
    (view.state(), view.delivery_count())
}

/// The ids of every record the sink wrote, in write order, repeats included.
fn written_ids(log: &Mutex<Log>) -> Vec<RecordId> {
    log.lock()
        .unwrap()
        .written
        .iter()
        .map(|(id, _)| id.clone())
        .collect()
}

fn all_acknowledged(broker: &EmbeddedBroker, records: u64) -> bool {
    broker.state_counts(GROUP).acknowledged == records
}

#[tokio::test(start_paused = true)]
async fn records_are_put_then_accepted_and_committed() {
    let b = broker(6, 2);
    let (sink, log) = ScriptedSink::new(&[]);
    let mut d = driver(&b, sink, ConsumerOptions::new());
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!(
        (report.records, report.accepted, report.released),
        (6, 6, 0)
    );
    assert!(report.committed);
    assert!(all_acknowledged(&b, 6));
    let log = log.lock().unwrap();
    assert!(log.started);
    assert_eq!(log.written.len(), 6);
    assert_eq!(
        log.pre_commits.len(),
        1,
        "pre_commit runs before the commit"
    );
    let written: Vec<RecordId> = log.written.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(
        log.pre_commits[0], written,
        "pre_commit hears of the records put, in the order put"
    );
    let m = d.metrics();
    assert_eq!(
        (m.records_read, m.records_put, m.put_batches, m.commits),
        (6, 6, 1, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn crash_between_put_and_acknowledge_redelivers_after_the_lock_timeout() {
    let b = broker(5, 1);
    let (sink, crashed_log) = ScriptedSink::new(&[Outcome::WriteThenHang]);
    // A process that hangs, still connected: its records wait for their locks to expire
    // (a process that dies closes its connections and the broker releases them at once).
    let mut crashing = driver(&b, sink, ConsumerOptions::new().on_drop(OnDrop::Stall));
    crashing.initialize().await.unwrap();
    let hung = tokio::time::timeout(Duration::from_secs(1), crashing.iteration()).await;
    assert!(hung.is_err(), "put never returned");
    drop(crashing); // the process hangs for good: no acknowledgement, no close
    assert_eq!(
        crashed_log.lock().unwrap().written.len(),
        5,
        "the sink wrote before dying"
    );
    assert_eq!(
        state(&b, 0, 0).0,
        RecordState::Acquired,
        "nothing was acknowledged"
    );

    let (sink, log) = ScriptedSink::new(&[]);
    let mut survivor = driver(&b, sink, ConsumerOptions::new());
    survivor.initialize().await.unwrap();
    assert_eq!(
        survivor.iteration().await.unwrap().records,
        0,
        "still locked by the dead member"
    );
    tokio::time::advance(LOCK).await;
    // Redelivered after a crash: put first in small batches (half the poll), each committed.
    let mut accepted = 0;
    for _ in 0..10 {
        accepted += survivor.iteration().await.unwrap().accepted;
    }
    assert_eq!(accepted, 5);
    let log = log.lock().unwrap();
    assert!(
        log.written.iter().all(|(_, dc)| *dc == 2),
        "redelivered: {:?}",
        log.written
    );
    assert!(all_acknowledged(&b, 5), "nothing lost");
}

/// An iteration dropped while it waits out the retriable backoff leaves the rest of the wait
/// to the next one: a caller that cancels iterations on a timer does not poll (and spend
/// deliveries) faster than the backoff allows.
#[tokio::test(start_paused = true)]
async fn an_iteration_dropped_during_the_retriable_backoff_leaves_the_wait_to_the_next() {
    let b = broker(3, 1);
    let (sink, log) = ScriptedSink::new(&[Outcome::Retriable]);
    let config = config()
        .redelivery_backoff(Duration::ZERO, Duration::ZERO)
        .retriable_backoff(Duration::from_millis(250));
    let mut d = ShareSinkTask::new(Box::new(sink), b.share_consumer(GROUP), config);
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!(report.released, 3);
    let failed = tokio::time::Instant::now();
    let cut = tokio::time::timeout(Duration::from_millis(10), d.iteration()).await;
    assert!(cut.is_err(), "dropped while backing off");
    let report = d.iteration().await.unwrap();
    assert_eq!(report.accepted, 3);
    assert!(
        failed.elapsed() >= Duration::from_millis(250),
        "put again {:?} after the failure",
        failed.elapsed()
    );
    assert_eq!(log.lock().unwrap().batches.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn retriable_error_releases_the_batch_and_it_comes_back_with_count_two() {
    let b = broker(3, 1);
    let (sink, log) = ScriptedSink::new(&[Outcome::Retriable]);
    // Released at once: without the redelivery backoff (driver_redelivery_backoff.rs).
    let config = config().redelivery_backoff(Duration::ZERO, Duration::ZERO);
    let mut d = ShareSinkTask::new(Box::new(sink), b.share_consumer(GROUP), config);
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!(
        (report.records, report.accepted, report.released),
        (3, 0, 3)
    );
    assert_eq!(
        state(&b, 0, 0),
        (RecordState::Available, 1),
        "released, not accepted"
    );

    let before = tokio::time::Instant::now();
    let report = d.iteration().await.unwrap();
    assert!(
        before.elapsed() >= Duration::from_millis(100),
        "the driver backs off first"
    );
    assert_eq!(report.accepted, 3);
    let log = log.lock().unwrap();
    assert_eq!(log.batches.len(), 2);
    assert!(log.batches[1].iter().all(|(_, dc)| *dc == 2));
    assert!(all_acknowledged(&b, 3));
    assert_eq!(d.metrics().records_released, 3);
    assert_eq!(d.metrics().records_redelivered, 3);
}

#[tokio::test(start_paused = true)]
async fn fatal_error_rejects_the_batch_surfaces_and_stops_the_driver() {
    let b = broker(3, 1);
    let (sink, log) = ScriptedSink::new(&[Outcome::Fatal]);
    let mut d = driver(&b, sink, ConsumerOptions::new());
    d.initialize().await.unwrap();
    let err = d.iteration().await.unwrap_err();
    match &err {
        Error::Task { stage, source } => {
            assert_eq!(*stage, TaskStage::Put);
            assert!(!source.is_retriable());
            assert_eq!(source.cause().to_string(), "schema mismatch");
        }
        other => panic!("expected a task error, got {other:?}"),
    }
    assert!(!err.is_retriable());
    for offset in 0..3 {
        assert_eq!(
            state(&b, 0, offset),
            (RecordState::Archived, 1),
            "rejected and committed"
        );
    }
    assert!(matches!(d.iteration().await, Err(Error::Failed)));
    d.close().await.unwrap();
    assert!(log.lock().unwrap().stopped, "stop runs after a failure too");
    assert!(log.lock().unwrap().written.is_empty());
    assert_eq!(d.metrics().records_rejected, 3);
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_put_releases_the_batch_and_stops_the_driver() {
    let b = broker(3, 1);
    let (sink, log) = ScriptedSink::new(&[Outcome::Panic]);
    let mut d = driver(&b, sink, ConsumerOptions::new());
    d.initialize().await.unwrap();
    // The panic does not unwind through `iteration`: it is the task's error.
    let err = d.iteration().await.unwrap_err();
    match &err {
        Error::Task { stage, source } => {
            assert_eq!(*stage, TaskStage::Put);
            assert!(!source.is_retriable());
            let panicked = source.panicked().expect("the error says it was a panic");
            assert_eq!(panicked.method, "put");
            assert_eq!(panicked.message, "index out of bounds in the sink");
        }
        other => panic!("expected a task error, got {other:?}"),
    }
    // Released, not rejected: the records are delivered again.
    for offset in 0..3 {
        assert_eq!(
            state(&b, 0, offset),
            (RecordState::Available, 1),
            "released and committed"
        );
    }
    assert_eq!(d.metrics().records_released, 3);
    assert_eq!(d.metrics().records_rejected, 0);
    assert!(matches!(d.iteration().await, Err(Error::Failed)));
    d.close().await.unwrap();
    assert!(log.lock().unwrap().stopped, "stop runs after a panic too");
}

/// Panics in the named method (`start`, `pre_commit` or `stop`); everything else succeeds.
struct PanicsIn(&'static str);

#[async_trait]
impl SinkTask for PanicsIn {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        if self.0 == "start" {
            panic!("a bug in start");
        }
        Ok(())
    }

    async fn put(&mut self, _: &[SinkRecord]) -> Result<(), TaskError> {
        Ok(())
    }

    async fn pre_commit(&mut self, _: &Delivered) -> Result<Durability, TaskError> {
        if self.0 == "pre_commit" {
            panic!("a bug in pre_commit");
        }
        Ok(Durability::All)
    }

    async fn stop(&mut self) -> Result<(), TaskError> {
        if self.0 == "stop" {
            panic!("a bug in stop");
        }
        Ok(())
    }
}

/// Asserts that `error` is the task's error of `stage`, a caught panic in `method`.
fn assert_panicked(error: &Error, stage: TaskStage, method: &str) {
    match error {
        Error::Task { stage: s, source } if *s == stage => {
            let panicked = source.panicked().expect("the error says it was a panic");
            assert_eq!(panicked.method, method);
            assert_eq!(panicked.message, format!("a bug in {method}"));
        }
        other => panic!("expected the task's error in {method}, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_start_pre_commit_or_stop_is_that_stage_s_task_error() {
    let b = broker(3, 1);
    let consumer = || b.share_consumer_with(GROUP, ConsumerOptions::new());

    // start: initialize fails with it; nothing was read.
    let mut d = ShareSinkTask::new(Box::new(PanicsIn("start")), consumer(), config());
    assert_panicked(
        &d.initialize().await.unwrap_err(),
        TaskStage::Start,
        "start",
    );
    d.close().await.unwrap();

    // pre_commit under after.flush: the iteration fails with it, nothing put is accepted,
    // and close gives the records back.
    let config_after_flush = config().ack_policy(AckPolicy::AfterFlush);
    let mut d = ShareSinkTask::new(
        Box::new(PanicsIn("pre_commit")),
        consumer(),
        config_after_flush,
    );
    d.initialize().await.unwrap();
    assert_panicked(
        &d.iteration().await.unwrap_err(),
        TaskStage::PreCommit,
        "pre_commit",
    );
    assert!(matches!(d.iteration().await, Err(Error::Failed)));
    let _ = d.close().await;
    for offset in 0..3 {
        assert_eq!(state(&b, 0, offset), (RecordState::Available, 1));
    }

    // stop: close reports it, and still closes the consumer.
    let b = broker(3, 1);
    let consumer = || b.share_consumer_with(GROUP, ConsumerOptions::new());
    let mut d = ShareSinkTask::new(Box::new(PanicsIn("stop")), consumer(), config());
    d.initialize().await.unwrap();
    assert_eq!(d.iteration().await.unwrap().accepted, 3);
    assert_panicked(&d.close().await.unwrap_err(), TaskStage::Stop, "stop");
    assert_eq!(
        d.consumer().group_metadata().member_epoch(),
        -1,
        "the consumer was closed"
    );
}

/// A consumer with a flaw (see [`Flaw`]), and the default `hold_offset` and `capabilities`:
/// the driver must not hide what follows.
struct ForgetfulConsumer(EmbeddedShareConsumer, Flaw);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flaw {
    /// It loses every acknowledgement.
    Forgets,
    /// Its polls time out, as when the cluster is out of reach.
    Unreachable,
}

#[async_trait]
impl ShareConsumer for ForgetfulConsumer {
    async fn subscribe(&mut self, topics: Vec<String>) -> Result<(), ConsumerError> {
        self.0.subscribe(topics).await
    }
    fn subscription(&self) -> Vec<String> {
        self.0.subscription()
    }
    async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ConsumerError> {
        if self.1 == Flaw::Unreachable {
            return Err(ConsumerError::Timeout(timeout));
        }
        self.0.poll(timeout).await
    }
    fn acknowledge_offset(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        ack: AcknowledgeType,
    ) -> Result<(), ConsumerError> {
        if self.1 == Flaw::Forgets {
            return Ok(());
        }
        self.0.acknowledge_offset(topic, partition, offset, ack)
    }
    async fn commit_sync(&mut self, timeout: Duration) -> Result<CommitResults, ConsumerError> {
        self.0.commit_sync(timeout).await
    }
    fn commit_async(&mut self) -> Result<PendingCommit, ConsumerError> {
        self.0.commit_async()
    }
    async fn close(&mut self, timeout: Duration) -> Result<(), ConsumerError> {
        self.0.close(timeout).await
    }
    fn acquisition_lock_timeout(&self) -> Option<Duration> {
        self.0.acquisition_lock_timeout()
    }
    fn group_metadata(&self) -> GroupMetadata {
        self.0.group_metadata()
    }
    fn acknowledgement_mode(&self) -> AcknowledgementMode {
        self.0.acknowledgement_mode()
    }
}

/// `run` takes a shutdown during the backoff after a failed iteration, not after it.
#[tokio::test(start_paused = true)]
async fn run_takes_a_shutdown_during_the_backoff_after_a_failed_iteration() {
    let b = broker(1, 1);
    let (sink, _) = ScriptedSink::new(&[]);
    let consumer = ForgetfulConsumer(b.share_consumer(GROUP), Flaw::Unreachable);
    let config = config().retriable_backoff(Duration::from_secs(3600));
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
    prompt_shutdown::run_until_shutdown_at_5_s(&mut d).await;
}

/// `run` takes a shutdown while the task's `start` waits (a target not reachable yet): it
/// stops, and the close stops the started task (as Connect's does); nothing was polled.
#[tokio::test(start_paused = true)]
async fn run_takes_a_shutdown_while_the_task_starts_and_stops_the_task() {
    let b = broker(1, 1);
    let (mut sink, log) = ScriptedSink::new(&[]);
    sink.hang_start = true;
    let mut d = driver(&b, sink, ConsumerOptions::new());
    prompt_shutdown::run_until_shutdown_at_5_s(&mut d).await;
    {
        let log = log.lock().unwrap();
        assert!(!log.started, "start never finished");
        assert!(log.stopped, "the started task was stopped");
        assert!(log.batches.is_empty());
    }
    assert!(matches!(d.initialize().await, Err(Error::Closed)));
}

/// A consumer that cannot hold records across polls (`ForgetfulConsumer` keeps the default
/// `hold_offset` and `capabilities`) is refused at `initialize` by the settings that hold
/// records, with the capability and the setting named, before the task starts; it initializes
/// with the defaults, and in implicit mode, where nothing is held.
#[tokio::test(start_paused = true)]
async fn settings_that_hold_records_refuse_a_consumer_that_cannot_hold_at_initialize() {
    let b = broker(2, 1);
    let refusing = [
        (
            config().ack_policy(AckPolicy::AfterFlush),
            "ack.policy=after.flush",
        ),
        (
            config().put_retriable_policy(PutRetriablePolicy::RetryInPlace),
            "put.retriable.policy=retry.in.place",
        ),
    ];
    for (config, setting) in refusing {
        let (sink, log) = ScriptedSink::new(&[]);
        let consumer = ForgetfulConsumer(b.share_consumer(GROUP), Flaw::Forgets);
        assert!(!consumer.capabilities().contains(ConsumerCapability::Hold));
        let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
        let err = d.initialize().await.unwrap_err();
        assert!(
            matches!(
                &err,
                Error::MissingCapability {
                    capability: ConsumerCapability::Hold,
                    needed_by,
                    ..
                } if *needed_by == setting
            ),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(
            message.contains("hold_offset") && message.contains(setting),
            "{message}"
        );
        assert!(!err.is_retriable());
        assert!(!log.lock().unwrap().started, "the task was not started");
        assert!(
            matches!(d.iteration().await, Err(Error::NotInitialized)),
            "not started"
        );
    }

    let (sink, _log) = ScriptedSink::new(&[]);
    let consumer: Box<dyn ShareConsumer> =
        Box::new(ForgetfulConsumer(b.share_consumer(GROUP), Flaw::Forgets));
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config());
    d.initialize().await.expect("after.put needs no capability");
    d.close().await.unwrap();

    let implicit = ConsumerOptions::new().acknowledgement_mode(AcknowledgementMode::Implicit);
    let (sink, _log) = ScriptedSink::new(&[]);
    let consumer = ForgetfulConsumer(b.share_consumer_with(GROUP, implicit), Flaw::Forgets);
    let config = config().put_retriable_policy(PutRetriablePolicy::RetryInPlace);
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
    d.initialize().await.expect("implicit mode holds nothing");
    d.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn explicit_mode_rule_is_enforced_and_surfaces_as_a_typed_error() {
    let b = broker(2, 1);
    let (sink, _log) = ScriptedSink::new(&[]);
    let consumer: Box<dyn ShareConsumer> =
        Box::new(ForgetfulConsumer(b.share_consumer(GROUP), Flaw::Forgets));
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config());
    d.initialize().await.unwrap();
    d.iteration().await.unwrap();
    let err = d.iteration().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Consumer(ConsumerError::UnacknowledgedRecords { count: 2, .. })
        ),
        "{err:?}"
    );
    assert!(matches!(d.iteration().await, Err(Error::Failed)));
    d.close().await.unwrap();
    assert_eq!(
        state(&b, 0, 0),
        (RecordState::Available, 1),
        "close released what was never acknowledged"
    );
}

#[tokio::test(start_paused = true)]
async fn the_real_driver_acknowledges_every_record_so_explicit_polls_never_fail() {
    let b = broker(50, 3);
    let (sink, log) = ScriptedSink::new(&[
        Outcome::Ok,
        Outcome::Retriable,
        Outcome::Ok,
        Outcome::Retriable,
    ]);
    let mut d = driver(&b, sink, ConsumerOptions::new().max_poll_records(7));
    d.initialize().await.unwrap();
    for _ in 0..30 {
        d.iteration().await.unwrap();
        if all_acknowledged(&b, 50) {
            break;
        }
    }
    assert!(all_acknowledged(&b, 50));
    let mut distinct = written_ids(&log);
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 50);
}

#[tokio::test(start_paused = true)]
async fn implicit_mode_accepts_after_put_and_retries_in_place() {
    let b = broker(4, 1);
    let (sink, log) = ScriptedSink::new(&[Outcome::Retriable]);
    let options = ConsumerOptions::new().acknowledgement_mode(AcknowledgementMode::Implicit);
    let mut d = driver(&b, sink, options);
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!(
        (report.retained, report.accepted, report.committed),
        (4, 0, false)
    );
    assert_eq!(
        state(&b, 0, 0).0,
        RecordState::Acquired,
        "kept, not accepted"
    );
    let report = d.iteration().await.unwrap();
    assert_eq!(report.accepted, 4);
    assert!(all_acknowledged(&b, 4));
    let log = log.lock().unwrap();
    assert_eq!(log.batches.len(), 2);
    assert_eq!(log.batches[0], log.batches[1], "the same batch, put again");
}

/// Implicit mode: the next poll or commit accepts what the last poll brought. An iteration
/// dropped while `put` had not returned must not let them accept a batch that may not have
/// been written: the next iteration puts it again, and a close right after the drop
/// releases it.
#[tokio::test(start_paused = true)]
async fn implicit_mode_an_iteration_dropped_during_put_never_accepts_its_batch() {
    let implicit = || ConsumerOptions::new().acknowledgement_mode(AcknowledgementMode::Implicit);
    // Dropped, then iterated again: the same batch is put again before anything is accepted.
    let b = broker(4, 1);
    let (sink, log) = ScriptedSink::new(&[Outcome::WriteThenHang]);
    let mut d = driver(&b, sink, implicit());
    d.initialize().await.unwrap();
    let dropped = tokio::time::timeout(Duration::from_secs(5), d.iteration()).await;
    assert!(dropped.is_err(), "put hangs until the iteration is dropped");
    let report = d.iteration().await.expect("the batch is put again");
    assert_eq!(report.accepted, 4);
    {
        let log = log.lock().unwrap();
        assert_eq!(log.batches.len(), 2, "{:?}", log.batches);
        assert_eq!(log.batches[0], log.batches[1], "the same batch, put again");
    }
    d.close().await.unwrap();
    assert!(all_acknowledged(&b, 4));

    // Dropped, then closed: no final commit accepts the batch; it is released.
    let b = broker(4, 1);
    let (sink, _log) = ScriptedSink::new(&[Outcome::WriteThenHang]);
    let mut d = driver(&b, sink, implicit());
    d.initialize().await.unwrap();
    let dropped = tokio::time::timeout(Duration::from_secs(5), d.iteration()).await;
    assert!(dropped.is_err());
    d.close().await.unwrap();
    for offset in 0..4 {
        assert_eq!(
            state(&b, 0, offset),
            (RecordState::Available, 1),
            "offset {offset}: released, not accepted"
        );
    }
}

/// Explicit mode: a `put` that runs past half the lock has its batch held (and renewed).
/// Dropped then, the next iteration puts that batch again and accepts it; before, the held
/// records were neither put nor acknowledged, renewed until close.
#[tokio::test(start_paused = true)]
async fn explicit_mode_an_iteration_dropped_during_a_long_put_puts_the_batch_again() {
    let b = broker(4, 1);
    let (sink, log) = ScriptedSink::new(&[Outcome::WriteThenHang]);
    let mut d = driver(&b, sink, ConsumerOptions::new());
    d.initialize().await.unwrap();
    let dropped = tokio::time::timeout(LOCK, d.iteration()).await;
    assert!(dropped.is_err(), "put hangs until the iteration is dropped");
    let report = d.iteration().await.expect("the batch is put again");
    assert_eq!((report.records, report.accepted), (4, 4));
    {
        let log = log.lock().unwrap();
        assert_eq!(log.batches.len(), 2, "{:?}", log.batches);
        assert_eq!(log.batches[0], log.batches[1], "the same batch, put again");
    }
    assert!(all_acknowledged(&b, 4));
    d.close().await.unwrap();
}

/// Implicit mode: `close` with a batch kept after a retriable error sends no commit (it would
/// accept that batch), but the task still flushes in `pre_commit` the records put before,
/// which the last poll accepted.
#[tokio::test(start_paused = true)]
async fn implicit_mode_close_with_a_kept_batch_still_flushes_what_was_put() {
    let b = broker(2, 1);
    let (sink, log) = ScriptedSink::new(&[Outcome::Ok, Outcome::Retriable]);
    let options = ConsumerOptions::new().acknowledgement_mode(AcknowledgementMode::Implicit);
    let mut d = ShareSinkTask::new(
        Box::new(sink),
        b.share_consumer_with(GROUP, options.max_poll_records(1)),
        config_hourly(),
    );
    d.initialize().await.unwrap();
    assert_eq!(d.iteration().await.unwrap().records, 1);
    let kept = d.iteration().await.unwrap();
    assert_eq!((kept.records, kept.retained), (1, 1));
    assert!(log.lock().unwrap().pre_commits.is_empty(), "no commit yet");
    d.close().await.unwrap();
    let log = log.lock().unwrap();
    assert_eq!(log.pre_commits.len(), 1, "flushed at close");
    assert_eq!(log.pre_commits[0], [log.batches[0][0].0.clone()]);
    drop(log);
    assert_eq!(
        state(&b, 0, 0).0,
        RecordState::Acknowledged,
        "accepted by the second poll"
    );
    assert_eq!(
        state(&b, 0, 1).0,
        RecordState::Available,
        "kept, not accepted: released"
    );
}

fn config_hourly() -> DriverConfig {
    config().commit_policy(CommitPolicy::interval(Duration::from_secs(3600)))
}

#[tokio::test(start_paused = true)]
async fn implicit_mode_fatal_error_leaves_the_batch_to_be_released() {
    let b = broker(2, 1);
    let (sink, _log) = ScriptedSink::new(&[Outcome::Fatal]);
    let options = ConsumerOptions::new().acknowledgement_mode(AcknowledgementMode::Implicit);
    let mut d = driver(&b, sink, options);
    d.initialize().await.unwrap();
    assert!(matches!(
        d.iteration().await,
        Err(Error::Task {
            stage: TaskStage::Put,
            ..
        })
    ));
    d.close().await.unwrap();
    assert_eq!(
        state(&b, 0, 0),
        (RecordState::Available, 1),
        "never accepted without a successful put"
    );
}

/// Implicit mode: a batch on its last delivery that is never put — its put failed for good,
/// or retriably and the driver closed with it kept — goes back to the group with the
/// consumer's close, which archives it: the close counts it in `records_released_at_limit`.
#[tokio::test(start_paused = true)]
async fn implicit_mode_a_batch_given_back_at_close_on_its_last_delivery_is_counted() {
    for outcome in [Outcome::Fatal, Outcome::Retriable] {
        let b = broker(2, 1);
        let limit_two = GroupConfig::new()
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .record_lock_duration(LOCK)
            .delivery_count_limit(2);
        b.set_group_config(GROUP, limit_two).unwrap();
        // A first delivery, given back by a consumer that goes away.
        let mut first = b.share_consumer(GROUP);
        first.subscribe(vec!["t".to_owned()]).await.unwrap();
        assert_eq!(
            first.poll(Duration::from_millis(10)).await.unwrap().len(),
            2
        );
        drop(first);
        assert_eq!(state(&b, 0, 1), (RecordState::Available, 1));

        let (sink, _log) = ScriptedSink::new(&[outcome]);
        let options = ConsumerOptions::new().acknowledgement_mode(AcknowledgementMode::Implicit);
        let mut d = driver(&b, sink, options);
        d.initialize().await.unwrap();
        let result = d.iteration().await;
        match outcome {
            Outcome::Fatal => assert!(result.is_err(), "{result:?}"),
            _ => assert_eq!(result.unwrap().retained, 2),
        }
        assert_eq!(d.metrics().records_released_at_limit, 0, "{outcome:?}");
        d.close().await.unwrap();
        assert_eq!(
            d.metrics().records_released_at_limit,
            2,
            "{outcome:?}: given back by the consumer's close, on their last delivery"
        );
        for offset in 0..2 {
            assert_eq!(
                state(&b, 0, offset),
                (RecordState::Archived, 2),
                "{outcome:?}"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn life_cycle_misuse_returns_errors_not_panics() {
    let b = broker(1, 1);
    let (sink, _log) = ScriptedSink::new(&[]);
    let mut d = driver(&b, sink, ConsumerOptions::new());
    assert!(matches!(d.iteration().await, Err(Error::NotInitialized)));
    d.initialize().await.unwrap();
    assert!(matches!(
        d.initialize().await,
        Err(Error::AlreadyInitialized)
    ));
    d.close().await.unwrap();
    assert!(matches!(d.iteration().await, Err(Error::Closed)));
    d.close().await.expect("closing twice is a no-op");

    let (mut sink, _log) = ScriptedSink::new(&[]);
    sink.fail_start = true;
    let mut d = driver(&b, sink, ConsumerOptions::new());
    let err = d.initialize().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Task {
                stage: TaskStage::Start,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(matches!(d.iteration().await, Err(Error::Failed)));
}

#[tokio::test(start_paused = true)]
async fn record_count_commit_policy_commits_only_when_enough_were_acknowledged() {
    let b = broker(12, 1);
    let (sink, log) = ScriptedSink::new(&[]);
    let consumer = b.share_consumer_with(GROUP, ConsumerOptions::new().max_poll_records(3));
    let config = config().commit_policy(CommitPolicy::records(6));
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
    d.initialize().await.unwrap();
    let mut committed = Vec::new();
    let mut acknowledged = Vec::new();
    for _ in 0..4 {
        committed.push(d.iteration().await.unwrap().committed);
        acknowledged.push(b.state_counts(GROUP).acknowledged);
    }
    assert_eq!(committed, vec![false, true, false, true]);
    assert_eq!(
        log.lock()
            .unwrap()
            .pre_commits
            .iter()
            .map(Vec::len)
            .collect::<Vec<_>>(),
        vec![6, 6]
    );
    // Acknowledgements stay local until a poll or a commit carries them.
    assert_eq!(acknowledged, vec![0, 6, 6, 12]);
}

#[tokio::test(start_paused = true)]
async fn interval_commit_policy_and_commit_requests() {
    let b = broker(0, 1);
    let (mut sink, _log) = ScriptedSink::new(&[]);
    sink.request_commit_on_put = true;
    let config = config().commit_policy(CommitPolicy::interval(Duration::from_secs(60)));
    let mut d = ShareSinkTask::new(Box::new(sink), b.share_consumer(GROUP), config);
    d.initialize().await.unwrap();
    b.produce("t", ProduceRecord::new().value("x")).unwrap();
    assert!(
        d.iteration().await.unwrap().committed,
        "the task asked for a commit"
    );

    let (sink, _log) = ScriptedSink::new(&[]);
    let config = DriverConfig::new(["t"])
        .poll_timeout(Duration::from_millis(10))
        .commit_policy(CommitPolicy::interval(Duration::from_secs(60)));
    let mut d = ShareSinkTask::new(Box::new(sink), b.share_consumer(GROUP), config);
    d.initialize().await.unwrap();
    b.produce("t", ProduceRecord::new().value("y")).unwrap();
    assert!(!d.iteration().await.unwrap().committed);
    tokio::time::advance(Duration::from_secs(60)).await;
    b.produce("t", ProduceRecord::new().value("z")).unwrap();
    assert!(d.iteration().await.unwrap().committed);
}

#[tokio::test(start_paused = true)]
async fn run_stops_on_shutdown_and_closes() {
    let b = broker(20, 2);
    let (sink, log) = ScriptedSink::new(&[]);
    let mut d = driver(&b, sink, ConsumerOptions::new().max_poll_records(5));
    let watcher = b.clone();
    let shutdown = async move {
        while !all_acknowledged(&watcher, 20) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    d.run(shutdown).await.unwrap();
    assert!(log.lock().unwrap().stopped);
    assert_eq!(log.lock().unwrap().written.len(), 20);
    assert!(matches!(d.iteration().await, Err(Error::Closed)));
}

#[tokio::test(start_paused = true)]
async fn run_returns_a_fatal_error_after_closing() {
    let b = broker(3, 1);
    let (sink, log) = ScriptedSink::new(&[Outcome::Fatal]);
    let mut d = driver(&b, sink, ConsumerOptions::new());
    let err = d.run(std::future::pending()).await.unwrap_err();
    assert!(matches!(
        err,
        Error::Task {
            stage: TaskStage::Put,
            ..
        }
    ));
    assert!(log.lock().unwrap().stopped);
}

#[tokio::test(start_paused = true)]
async fn two_drivers_share_a_partition_without_losing_records() {
    let b = broker(200, 1);
    let (sa, log_a) = ScriptedSink::new(&[Outcome::Retriable, Outcome::Ok, Outcome::Retriable]);
    let (sb, log_b) = ScriptedSink::new(&[Outcome::Ok, Outcome::Retriable]);
    let mut a = driver(&b, sa, ConsumerOptions::new().max_poll_records(10));
    let mut c = driver(&b, sb, ConsumerOptions::new().max_poll_records(10));
    a.initialize().await.unwrap();
    c.initialize().await.unwrap();
    for _ in 0..100 {
        a.iteration().await.unwrap();
        c.iteration().await.unwrap();
        if all_acknowledged(&b, 200) {
            break;
        }
    }
    assert!(all_acknowledged(&b, 200));
    let mut written = written_ids(&log_a);
    written.extend(written_ids(&log_b));
    assert!(!log_a.lock().unwrap().written.is_empty() && !log_b.lock().unwrap().written.is_empty());
    written.sort();
    let total = written.len();
    written.dedup();
    assert_eq!(written.len(), 200, "every record written");
    assert_eq!(
        total, 200,
        "only released records were handed out twice, and they were not written"
    );
}

/// Whether the driver's next iteration is still waiting after an hour: a saturated backoff
/// is a wait that never ends in practice.
async fn still_backing_off_after_an_hour(d: &mut ShareSinkTask<EmbeddedShareConsumer>) -> bool {
    tokio::time::timeout(Duration::from_secs(3600), d.iteration())
        .await
        .is_err()
}

#[tokio::test(start_paused = true)]
async fn retriable_backoff_of_duration_max_waits_instead_of_panicking() {
    let b = broker(3, 1);
    let (sink, log) = ScriptedSink::new(&[Outcome::Retriable]);
    let consumer = b.share_consumer(GROUP);
    let config = config()
        .retriable_backoff(Duration::MAX)
        .redelivery_backoff(Duration::ZERO, Duration::ZERO);
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!((report.records, report.released), (3, 3));
    assert!(still_backing_off_after_an_hour(&mut d).await);
    assert_eq!(
        log.lock().unwrap().batches.len(),
        1,
        "no put while backing off"
    );
}

#[tokio::test(start_paused = true)]
async fn a_task_backoff_of_duration_max_waits_instead_of_panicking() {
    for mode in [AcknowledgementMode::Explicit, AcknowledgementMode::Implicit] {
        let b = broker(2, 1);
        let (sink, log) =
            ScriptedSink::new(&[Outcome::RetriableWithBackoff(Duration::MAX), Outcome::Ok]);
        let mut d = driver(&b, sink, ConsumerOptions::new().acknowledgement_mode(mode));
        d.initialize().await.unwrap();
        let report = d.iteration().await.unwrap();
        assert_eq!(report.records, 2, "{mode:?}");
        assert_eq!(report.released + report.retained, 2, "{mode:?}");
        assert!(still_backing_off_after_an_hour(&mut d).await, "{mode:?}");
        assert_eq!(log.lock().unwrap().batches.len(), 1, "{mode:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_poll_timeout_of_duration_max_returns_the_records_there_are() {
    let b = broker(4, 2);
    let (sink, log) = ScriptedSink::new(&[]);
    let config = config().poll_timeout(Duration::MAX);
    let mut d = ShareSinkTask::new(Box::new(sink), b.share_consumer(GROUP), config);
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!((report.records, report.accepted), (4, 4));
    assert!(all_acknowledged(&b, 4));
    assert_eq!(log.lock().unwrap().written.len(), 4);
}

/// A consumer whose first polls and commits fail as if a broker's response had been garbled
/// (the native consumer drops that connection and raises `ProtocolError::Garbled`).
struct GarblingConsumer {
    inner: EmbeddedShareConsumer,
    poll_failures: usize,
    commit_failures: usize,
    polls: Arc<Mutex<Vec<tokio::time::Instant>>>,
}

impl GarblingConsumer {
    fn new(inner: EmbeddedShareConsumer, poll_failures: usize, commit_failures: usize) -> Self {
        Self {
            inner,
            poll_failures,
            commit_failures,
            polls: Arc::default(),
        }
    }
}

fn garbled(api: &'static str) -> ConsumerError {
    ConsumerError::Protocol(ProtocolError::Garbled {
        broker: "127.0.0.1:9092".to_owned(),
        api,
        source: "cannot decode the ShareFetch v1 response: unexpected end of buffer".into(),
    })
}

#[async_trait]
impl ShareConsumer for GarblingConsumer {
    async fn subscribe(&mut self, topics: Vec<String>) -> Result<(), ConsumerError> {
        self.inner.subscribe(topics).await
    }
    fn subscription(&self) -> Vec<String> {
        self.inner.subscription()
    }
    async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ConsumerError> {
        self.polls.lock().unwrap().push(tokio::time::Instant::now());
        if self.poll_failures > 0 {
            self.poll_failures -= 1;
            return Err(garbled("ShareFetch"));
        }
        self.inner.poll(timeout).await
    }
    fn acknowledge_offset(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        ack: AcknowledgeType,
    ) -> Result<(), ConsumerError> {
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
        if self.commit_failures > 0 {
            self.commit_failures -= 1;
            return Err(garbled("ShareAcknowledge"));
        }
        self.inner.commit_sync(timeout).await
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

/// The distinct records the sink wrote, and whether any was written twice.
fn distinct_written(log: &Mutex<Log>) -> (usize, bool) {
    let mut ids = written_ids(log);
    let total = ids.len();
    ids.sort();
    ids.dedup();
    (ids.len(), ids.len() != total)
}

#[tokio::test(start_paused = true)]
async fn a_garbled_response_to_a_poll_is_retriable_and_the_next_iteration_delivers() {
    let b = broker(10, 2);
    let (sink, log) = ScriptedSink::new(&[]);
    let consumer = GarblingConsumer::new(b.share_consumer(GROUP), 1, 0);
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config());
    d.initialize().await.unwrap();
    let err = d.iteration().await.unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Consumer(ConsumerError::Protocol(ProtocolError::Garbled {
                api: "ShareFetch",
                ..
            }))
        ),
        "{err:?}"
    );
    assert!(err.is_retriable(), "{err:?}");
    let report = d.iteration().await.expect("the driver is still running");
    assert_eq!((report.records, report.accepted), (10, 10));
    assert!(all_acknowledged(&b, 10));
    assert_eq!(distinct_written(&log), (10, false));
    d.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_garbled_response_to_a_commit_is_retriable_and_loses_no_acknowledgement() {
    let b = broker(6, 1);
    let (sink, log) = ScriptedSink::new(&[]);
    let consumer = GarblingConsumer::new(b.share_consumer(GROUP), 0, 1);
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config());
    d.initialize().await.unwrap();
    let err = d.iteration().await.unwrap_err();
    assert!(err.is_retriable(), "{err:?}");
    assert!(!all_acknowledged(&b, 6), "the commit did not happen");
    // The acknowledgements were kept: the next poll carries them and the commit follows.
    let report = d.iteration().await.expect("the driver is still running");
    assert!(report.committed);
    assert!(all_acknowledged(&b, 6));
    assert_eq!(
        distinct_written(&log),
        (6, false),
        "nothing delivered twice"
    );
    d.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn run_keeps_running_through_garbled_responses_and_backs_off_between_them() {
    let b = broker(20, 2);
    let (sink, log) = ScriptedSink::new(&[]);
    let consumer = GarblingConsumer::new(b.share_consumer(GROUP), 3, 0);
    let polls = Arc::clone(&consumer.polls);
    let config = config().retriable_backoff(Duration::from_millis(250));
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
    let watcher = b.clone();
    let shutdown = async move {
        while !all_acknowledged(&watcher, 20) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    d.run(shutdown)
        .await
        .expect("garbled responses do not stop the task");
    assert_eq!(distinct_written(&log), (20, false));
    assert!(log.lock().unwrap().stopped);
    let polls = polls.lock().unwrap();
    // Each of the three failed polls is followed by the retriable backoff, not a hot loop.
    for pair in polls.windows(2).take(3) {
        assert!(
            pair[1] - pair[0] >= Duration::from_millis(250),
            "polls at {polls:?}"
        );
    }
    assert!(polls.len() <= 6, "{} polls", polls.len());
}
