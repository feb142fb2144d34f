//! The driver: [`ShareSinkTask`] runs a [`SinkTask`] over a [`ShareConsumer`].
//!
//! One [`iteration`](ShareSinkTask::iteration) is poll → build [`SinkRecord`]s → `put` →
//! acknowledge → commit when due. A record is ACCEPTed only after `put` returned `Ok` (and,
//! under [`AckPolicy::AfterFlush`], only once `pre_commit` said it is durable):
//!
//! | `put` returns | explicit mode (default) | implicit mode |
//! |---|---|---|
//! | `Ok` | ACCEPT every record of the batch (after flush, with `ack.policy=after.flush`) | accepted by the next poll or commit |
//! | retriable error | RELEASE the batch, after holding it for a backoff that grows with its delivery count (`redelivery.backoff.ms`; or retry it in place first, with `put.retriable.policy=retry.in.place`); a record at `max.delivery.attempts` is dead-lettered and REJECTed instead | keep the batch and `put` it again next iteration |
//! | fatal error | REJECT the batch (written to the dead-letter queue and ACCEPTed instead when a queue is set; RELEASEd when the dead-letter circuit breaker trips), commit, return the error; the driver stops | return the error; the driver stops and `close` releases the batch |
//!
//! A consumer error no retry fixes, such as credentials a broker refuses (also mid-run), stops
//! the driver too: see [`ShareSinkTask::iteration`], its "Authentication failures" section.
//!
//! # Where a process can die
//!
//! Acknowledgements are local until a poll or commit sends them, and the driver acknowledges
//! only after `put` (or after the flush), so a crash at any point leaves the records it had
//! not acknowledged acquired by a dead member: their locks expire and the group delivers them
//! again. Nothing is lost; a record written by `put` just before a crash is written again.
//! Records the driver holds across polls (waiting for a flush, or for another `put` attempt)
//! have their locks renewed at half their duration while the process lives.

mod backoff;
mod config;
mod dead_letter;
#[cfg(feature = "exactly-once")]
mod exactly_once;
mod export;
mod failure;
mod held;
mod lag;
mod metrics;
mod pipeline;
mod policy;
mod redelivered;
#[cfg(feature = "exactly-once")]
mod target_watch;

use std::collections::HashSet;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use self::backoff::PendingRelease;
pub(crate) use self::backoff::RedeliveryBackoff;
pub use self::backoff::{DEFAULT_REDELIVERY_BACKOFF, DEFAULT_REDELIVERY_BACKOFF_MAX};
pub use self::config::{CommitPolicy, DEFAULT_COMMIT_RECORDS, DriverConfig};
use self::failure::Failure;
use self::held::{HeldRecords, retry_backoff};
pub use self::metrics::DriverMetrics;
pub use self::policy::{
    AckPolicy, ErrorHandling, ErrorTolerance, ParsePolicyError, PutRetriablePolicy,
};
use crate::consumer::{
    AcknowledgeType, AcknowledgementMode, BrokerDeadLetterQueue, CommitResults, ConsumerCapability,
    DEFAULT_DELIVERY_COUNT_LIMIT, ShareConsumer,
};
use crate::delivered::Delivered;
use crate::dlq::{DeadLetterReason, DeadLetterRecord, ErrorContext};
use crate::error::{Error, ErrorChain, Result, TaskError, TaskStage};
use crate::record::{ConsumerRecord, RecordId, SinkRecord};
use crate::task::{Durability, SinkTask, SinkTaskContext};
use crate::time::deadline_after;

/// The lock duration assumed until the consumer reports one: the smallest a group may set.
const DEFAULT_LOCK: Duration = Duration::from_secs(15);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Created,
    Running,
    Failed,
    Closed,
}

/// What one [`iteration`](ShareSinkTask::iteration) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct IterationReport {
    /// Records in the batch handed to `put`.
    pub records: usize,
    /// Records accepted in this iteration: after a successful `put` (`ack.policy=after.put`),
    /// or found durable by `pre_commit` (`after.flush`), plus filtered records.
    pub accepted: usize,
    /// Records released (retriable error, failed dead-letter write).
    pub released: usize,
    /// Records rejected (fatal error, `max.delivery.attempts`, skipped under tolerance
    /// `all`) without a dead-letter queue of the driver's own, or written to it when the group
    /// is known to have no broker dead-letter queue.
    pub rejected: usize,
    /// Records kept for another `put` (implicit mode, or `retry.in.place`), or held for
    /// their redelivery backoff before they are released (`redelivery.backoff.ms`; the
    /// iteration that releases them counts them as released).
    pub retained: usize,
    /// Records written by `put` and waiting for `pre_commit` to call them durable
    /// (`after.flush`), after this iteration.
    pub awaiting_flush: usize,
    /// Records dropped by transforms (and accepted).
    pub filtered: usize,
    /// Records written to the dead-letter queue (then ACCEPTed, unless the group is known to
    /// have no broker dead-letter queue: one home per record).
    pub dead_lettered: usize,
    /// Whether the iteration ended with a commit.
    pub committed: bool,
    /// Records polled on their last allowed delivery (see
    /// [`DriverMetrics::records_last_delivery`]).
    pub last_delivery: usize,
    /// The iteration did not poll: more than
    /// [`max_awaiting_flush`](DriverConfig::max_awaiting_flush) waited for a flush that
    /// did not come.
    pub waited_for_flush: bool,
}

/// How far the batch of the last poll got before its iteration was dropped (see
/// `resume_unfinished`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unfinished {
    /// Records were polled and the batch was being built: some may not be in it.
    Converting,
    /// The batch was built whole and handed to `put`, which had not returned.
    Putting,
}

/// A batch that failed with a retriable error and is put again in place.
#[derive(Debug)]
struct RetryInPlace {
    first_failure: Instant,
    attempts: u32,
    next_attempt: Instant,
    /// The last failure, for the dead-letter queue if the driver closes before a retry.
    last_error: Option<TaskError>,
}

/// Drives a [`SinkTask`] from a [`ShareConsumer`], like Kafka Connect's `WorkerSinkTask`
/// with KIP-1302's share-group rules.
///
/// Call [`initialize`](Self::initialize) once, then [`iteration`](Self::iteration) from
/// your own loop (or use [`run`](Self::run)), then [`close`](Self::close).
///
/// ```
/// use std::time::Duration;
/// use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, GroupConfig, ProduceRecord};
/// use kafka_share_sink::{DriverConfig, ShareSinkTask, SinkRecord, SinkTask, TaskConfig, TaskError};
///
/// struct Count(usize);
/// #[async_trait::async_trait]
/// impl SinkTask for Count {
///     async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> { Ok(()) }
///     async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
///         self.0 += records.len();
///         Ok(())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let broker = EmbeddedBroker::new();
/// broker.create_topic("events", 1)?;
/// broker.set_group_config("sink", GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest))?;
/// broker.produce("events", ProduceRecord::new().value("e1"))?;
///
/// let config = DriverConfig::new(["events"]).poll_timeout(Duration::from_millis(10));
/// let mut driver = ShareSinkTask::new(Box::new(Count(0)), broker.share_consumer("sink"), config);
/// driver.initialize().await?;
/// let report = driver.iteration().await?;
/// assert_eq!(report.accepted, 1);
/// driver.close().await?;
/// # Ok(()) }
/// ```
pub struct ShareSinkTask<C: ShareConsumer = Box<dyn ShareConsumer>> {
    task: Box<dyn SinkTask>,
    consumer: C,
    config: DriverConfig,
    context: Option<SinkTaskContext>,
    state: State,
    /// The batch, reused between iterations to save its allocation.
    batch: Vec<SinkRecord>,
    /// The polled records of the batch, index for index, kept only when a dead-letter queue
    /// needs their original bytes.
    raw: Vec<ConsumerRecord>,
    /// When the batch's locks started (the poll that brought it began).
    batch_acquired: Instant,
    /// The batch is every record of the last poll, nothing acknowledged before `put`: a
    /// successful `put` may then accept the whole poll in one call.
    batch_is_poll: bool,
    /// Implicit mode: the batch is kept after a retriable error.
    retained: bool,
    /// Set while the records of a poll are being built into the batch and put; still set at
    /// the next call when the iteration was dropped in between.
    unfinished: Option<Unfinished>,
    /// Explicit mode, after an iteration dropped while its batch was being built: when the
    /// locks of that poll last started (its poll, or a renewal during a conversion retry).
    /// Records it renewed are presented again by the next poll with those locks, not new
    /// ones.
    presented_again_from: Option<Instant>,
    /// `ack.policy=after.flush`: the last wait for a flush left too much waiting for one, so
    /// no batch can be taken until the task flushes.
    flush_stalled: bool,
    /// Explicit mode, `retry.in.place`: the batch is held and put again.
    retry: Option<RetryInPlace>,
    /// Explicit mode: the batch failed with a retriable error and is held for its
    /// redelivery backoff, then released.
    redelivery: Option<PendingRelease>,
    /// Explicit mode: a poll that brought redelivered records, put in small batches.
    redelivered_arrivals: redelivered::RedeliveredArrivals,
    /// The consumer's [`given_back_at_limit`](ShareConsumer::given_back_at_limit) as last
    /// added to the metrics.
    given_back_seen: u64,
    /// Records put and not yet reported to `pre_commit` (after put), or put and not yet
    /// durable (after flush).
    delivered: Delivered,
    /// The original coordinates of `batch` when it is a whole poll (`batch_is_poll`), noted
    /// while polling, where the records are still in cache; empty otherwise.
    batch_delivered: Delivered,
    /// The size of each record of `delivered`, in its order (keys, values and headers as
    /// polled), for `max_awaiting_flush`: kept only under `after.flush` (explicit mode),
    /// empty otherwise.
    delivered_bytes: Vec<u64>,
    /// The size of each record of `batch`, index for index; kept only as `delivered_bytes`.
    batch_bytes: Vec<u64>,
    /// Records kept acquired across polls, with their lock start.
    held: HeldRecords,
    /// The dead-letter write under way: an iteration dropped during it leaves it to the
    /// next, or to `close`, which finish it.
    interrupted_write: Option<dead_letter::InterruptedWrite>,
    /// Records settled (put, filtered, acknowledged) since the last commit.
    acknowledged_since_commit: u64,
    last_commit: Instant,
    backoff_until: Option<Instant>,
    started: Instant,
    metrics: DriverMetrics,
    /// The share group's lag, read in the background (none when turned off or unknown).
    lag: Option<crate::lag::LagReader>,
    warned_partial_durability: bool,
    warned_no_renew: bool,
    /// The dead-letter circuit breaker's window, and the records finished otherwise (put or
    /// filtered) it was told of.
    breaker: crate::dlq::breaker::SharedBreakerWindow,
    breaker_observed: u64,
    #[cfg(feature = "exactly-once")]
    exactly_once: Option<Box<exactly_once::ExactlyOnce>>,
}

impl<C: ShareConsumer> std::fmt::Debug for ShareSinkTask<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareSinkTask")
            .field("state", &self.state)
            .field("topics", &self.config.topics)
            .field("held", &self.held.len())
            .field("metrics", &self.metrics)
            .finish_non_exhaustive()
    }
}

impl<C: ShareConsumer> ShareSinkTask<C> {
    /// A driver for `task` over `consumer`. Nothing happens until
    /// [`initialize`](Self::initialize).
    pub fn new(task: Box<dyn SinkTask>, consumer: C, config: DriverConfig) -> Self {
        let now = Instant::now();
        // What the consumer gave back before it was the driver's is not the driver's to count.
        let given_back_seen = consumer.given_back_at_limit();
        let breaker = Arc::new(std::sync::Mutex::new(
            crate::dlq::breaker::BreakerWindow::new(config.dead_letter_breaker, now),
        ));
        Self {
            task,
            consumer,
            config,
            context: None,
            state: State::Created,
            batch: Vec::new(),
            raw: Vec::new(),
            batch_acquired: now,
            batch_is_poll: false,
            retained: false,
            unfinished: None,
            presented_again_from: None,
            flush_stalled: false,
            retry: None,
            redelivery: None,
            redelivered_arrivals: redelivered::RedeliveredArrivals::default(),
            given_back_seen,
            delivered: Delivered::new(),
            batch_delivered: Delivered::new(),
            delivered_bytes: Vec::new(),
            batch_bytes: Vec::new(),
            held: HeldRecords::default(),
            interrupted_write: None,
            acknowledged_since_commit: 0,
            last_commit: now,
            backoff_until: None,
            started: now,
            metrics: DriverMetrics::default(),
            lag: None,
            warned_partial_durability: false,
            warned_no_renew: false,
            breaker,
            breaker_observed: 0,
            #[cfg(feature = "exactly-once")]
            exactly_once: None,
        }
    }

    /// Subscribes the consumer, then calls the task's `initialize` and `start`.
    ///
    /// Fails with [`Error::Config`] when `ack.policy=after.flush` meets a consumer in implicit
    /// acknowledgement mode, which cannot hold records back, or (feature `exactly-once`) when
    /// the task [requires the exactly-once iteration](SinkTask::requires_exactly_once) and
    /// the driver was not set up with `with_exactly_once`, and with
    /// [`Error::MissingCapability`] before subscribing when the consumer lacks a
    /// [capability](ShareConsumer#capabilities) the settings need (in explicit mode,
    /// `ack.policy=after.flush` and `put.retriable.policy=retry.in.place` need
    /// [`ConsumerCapability::Hold`]; the exactly-once modes are checked once the mode is
    /// chosen).
    ///
    /// With [`with_exactly_once`](Self::with_exactly_once) it also checks the cluster, chooses
    /// the mode, prepares the ledger, initializes the transactional producer and fences the
    /// producers of task slots that no longer exist. A retriable failure there (a broker
    /// killed a moment ago, a coordinator moving) is tried again, the whole setup, with a
    /// backoff of 100 ms doubling up to 2 s, until 60 s have passed (Java's admin client
    /// retries a call until `default.api.timeout.ms`, 60 s; one try may itself wait up to the
    /// request timeout); then, or at once for any other failure (refused credentials, a
    /// missing capability, an unfit target), the driver fails: close it and build a new one.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped after the subscription and before the task's `start`, the
    /// driver stays uninitialized with a subscribed consumer; call [`close`](Self::close).
    /// With exactly-once, dropped from the exactly-once setup on, the driver fails
    /// ([`Error::Failed`]): close it and build a new one. Dropped during the task's `start`,
    /// the driver fails too, and its close stops the task.
    pub async fn initialize(&mut self) -> Result<()> {
        match self.state {
            State::Created => {}
            State::Closed => return Err(Error::Closed),
            _ => return Err(Error::AlreadyInitialized),
        }
        if self.implicit() {
            if self.config.ack_policy == AckPolicy::AfterFlush {
                return Err(Error::Config {
                    key: "ack.policy",
                    reason: "after.flush needs share.acknowledgement.mode=explicit: in implicit \
                             mode the next poll accepts every record"
                        .to_owned(),
                });
            }
            if self.config.put_retriable_policy == PutRetriablePolicy::RetryInPlace {
                tracing::info!(
                    "put.retriable.policy=retry.in.place: implicit acknowledgement always keeps \
                     a failed batch and puts it again"
                );
            }
        }
        if !self.implicit()
            && self.config.put_retriable_policy == PutRetriablePolicy::RetryInPlace
            && self
                .config
                .errors
                .retry_timeout
                .is_some_and(|t| t.is_zero())
        {
            tracing::warn!(
                "put.retriable.policy=retry.in.place with errors.retry.timeout=0 (the default) \
                 retries nothing in place: a failed batch is released as with \
                 put.retriable.policy=release (after its redelivery backoff). Set \
                 errors.retry.timeout to how long to retry a put (-1: for ever)"
            );
        }
        #[cfg(feature = "exactly-once")]
        if !self.is_exactly_once() && self.task.requires_exactly_once() {
            return Err(Error::Config {
                key: "exactly.once",
                reason: "the task writes only in the exactly-once iteration \
                         (SinkTask::requires_exactly_once): set the driver up with \
                         with_exactly_once and call iteration_exactly_once (or \
                         run_exactly_once); iteration() would hand it records it cannot write"
                    .to_owned(),
            });
        }
        self.check_capabilities()?;
        self.log_redelivery_backoff();
        self.consumer.subscribe(self.config.topics.clone()).await?;
        self.warn_unknown_delivery_limit();
        self.check_broker_dead_letter_queue()?;
        #[cfg(feature = "exactly-once")]
        if self.is_exactly_once() {
            if let Err(e) = self.initialize_exactly_once().await {
                self.state = State::Failed;
                return Err(e);
            }
        }
        let context = SinkTaskContext::new(
            self.consumer.group_metadata().group_id(),
            self.config.task_config.clone(),
        );
        self.task.initialize(context.clone());
        self.context = Some(context);
        self.start_lag_reader();
        // Failed until the task started: dropped during `start`, the driver is not one that
        // a second `initialize` would start again.
        self.state = State::Failed;
        if let Err(source) = caught("start", self.task.start(&self.config.task_config)).await {
            return Err(Error::Task {
                stage: TaskStage::Start,
                source,
            });
        }
        self.state = State::Running;
        self.last_commit = Instant::now();
        self.started = self.last_commit;
        tracing::info!(
            topics = ?self.config.topics,
            group = %self.consumer.group_metadata().group_id(),
            ack_policy = %self.config.ack_policy,
            put_retriable_policy = %self.config.put_retriable_policy,
            "sink task started"
        );
        Ok(())
    }

    /// One round: poll → convert → `put` → acknowledge → commit when due.
    ///
    /// Runs in a DEBUG tracing span `iteration` (fields: see the
    /// [`telemetry`](crate::telemetry#tracing) module); with the feature `metrics` the
    /// counters are recorded after it.
    ///
    /// A retriable `put` error is handled here (the report says what was released or
    /// retained) and is not returned. A fatal error is returned once; every later call
    /// returns [`Error::Failed`]. Errors for which [`Error::is_retriable`] is true leave the
    /// driver usable.
    ///
    /// # Authentication failures
    ///
    /// The policy is to stop. When a broker refuses the consumer's credentials or
    /// certificate, also in the middle of a run (a password changed or a user removed on the
    /// broker, a certificate revoked, an OAUTHBEARER token provider that starts failing),
    /// the consumer's next `poll` or commit returns
    /// [`ConnectionError::Authentication`](crate::ConnectionError::Authentication) at once (see
    /// [`KafkaShareConsumer`](crate::KafkaShareConsumer#authentication-failures)), and this
    /// call returns it as [`Error::Consumer`], which is not retriable: the driver stops
    /// (later calls return [`Error::Failed`]; [`run`](Self::run) closes it and returns the
    /// error). There is no setting to keep trying: the same credentials are refused the
    /// same way, so fix them and build a new driver (a supervisor restarting it with backoff
    /// does the rest). Records handed to `put` whose acknowledgements could not be sent, and
    /// records fetched but not handed out, are delivered again when their locks expire:
    /// nothing is lost, and a record `put` wrote may be written again. Until the driver
    /// stops, the consumer dials a broker at most once per `reconnect.backoff.max.ms`
    /// (default 1 s) after an authentication failure.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe while it waits in the poll (the consumers' `poll` is: nothing is lost and,
    /// with [`KafkaShareConsumer`](crate::KafkaShareConsumer), no delivery is spent), and while
    /// it waits out the redelivery backoff of a failed batch
    /// ([`DriverConfig::redelivery_backoff`]): the batch stays held, and the next call waits
    /// for the rest of the backoff, then releases it; so too in the pause after a released
    /// batch ([`DriverConfig::retriable_backoff`]), whose rest the next call waits. Not cancel
    /// safe once the poll returned records: dropped during the conversion, the `put` or the
    /// acknowledgements, the batch stays unacknowledged, its records are delivered again
    /// when their locks expire or [`close`](Self::close) releases them (nothing is lost), and
    /// the next iteration puts the batch again when it was dropped during `put`, and fails
    /// when it was dropped while the batch was being built: with the consumer's
    /// `UnacknowledgedRecords` (unless a conversion retry had renewed the poll's locks: the
    /// consumer then presents the records again and the next iteration converts them anew),
    /// or in implicit acknowledgement mode (where the next poll or commit would accept those
    /// records) with [`Error::Interrupted`], after which `close` sends no commit, so the
    /// poll's records are released. To stop on a signal, use
    /// [`run`](Self::run), which never cuts an iteration short.
    pub async fn iteration(&mut self) -> Result<IterationReport> {
        match self.state {
            State::Running => {}
            State::Created => return Err(Error::NotInitialized),
            State::Failed => return Err(Error::Failed),
            State::Closed => return Err(Error::Closed),
        }
        #[cfg(feature = "exactly-once")]
        if self.is_exactly_once() {
            return Err(Error::Config {
                key: "exactly.once",
                reason: "this driver was set up with with_exactly_once: call \
                         iteration_exactly_once (or run_exactly_once)"
                    .to_owned(),
            });
        }
        // The fields are documented in the `telemetry` module.
        let span = tracing::debug_span!(
            "iteration",
            connector = %self.config.connector_name,
            task = self.config.task_id,
            group = %self.consumer.group_metadata().group_id(),
            records = tracing::field::Empty,
        );
        let result = self.iterate().instrument(span).await;
        self.observe_dead_letter_breaker();
        self.export_metrics();
        if let Err(error) = &result {
            if !error.is_retriable() {
                self.state = State::Failed;
            }
        }
        result
    }

    async fn iterate(&mut self) -> Result<IterationReport> {
        let mut report = IterationReport::default();
        self.finish_interrupted_write(&mut report).await?;
        self.resume_unfinished()?;
        self.release_after_backoff(&mut report).await?;
        if let Some(next_attempt) = self.retry.as_ref().map(|r| r.next_attempt) {
            self.sleep_renewing(next_attempt).await;
        } else if self.retained {
            // Cleared once waited out: an iteration dropped in the wait leaves the rest of it
            // to the next one.
            if let Some(until) = self.backoff_until {
                tokio::time::sleep_until(until).await;
                self.backoff_until = None;
            }
        } else {
            if let Some(until) = self.backoff_until {
                self.sleep_renewing(until).await;
                self.backoff_until = None;
            }
            let mut renewed = self.renew_due_held()?;
            if !self.flush_bound_reached() {
                // A commit since the last wait (of an interrupted write, a release) made room.
                self.flush_stalled = false;
            } else {
                // The renewals go first, on their own: the flush-wait commit sends nothing
                // when the task made nothing durable (or its `pre_commit` failed), and a
                // stalled driver does not poll, so they would wait for the flush while the
                // locks ran out.
                if !renewed.is_empty() {
                    if !self.commit_renewals().await {
                        self.renewals_lost(&renewed);
                    }
                    renewed.clear();
                }
                match self.wait_for_flush(&mut report).await {
                    Ok(true) => {}
                    Ok(false) => {
                        report.awaiting_flush = self.awaiting_flush();
                        return Ok(report);
                    }
                    Err(e) => return Err(e),
                }
            }
            if !self.take_queued_batch() {
                // The poll carries the renewals.
                if let Err(e) = self.poll_batch(&mut report).await {
                    self.renewals_lost(&renewed);
                    return Err(e);
                }
                if !self.implicit() && self.queue_redelivered()? {
                    self.take_queued_batch();
                }
            } else if !renewed.is_empty() && !self.commit_renewals().await {
                // No poll to carry them: held records are timed from now, so the renewals
                // must go now (left for the next commit, they could arrive after the locks).
                self.renewals_lost(&renewed);
            }
        }
        report.records = self.batch.len();
        tracing::Span::current().record("records", self.batch.len());

        let outcome = self.put_batch().await;
        // Whatever `put` answered, the batch is settled below (put again if kept).
        self.unfinished = None;
        self.redelivered_arrivals.put_returned();
        match outcome {
            Ok(()) => {
                self.redelivered_arrivals.put_succeeded();
                self.on_put_ok(&mut report)?;
                self.settle_last_deliveries(&mut report).await?;
            }
            Err(error) if error.is_retriable() => self.on_put_retriable(error, &mut report).await?,
            Err(error) if error.panicked().is_some() => return Err(self.on_put_panic(error).await),
            Err(error) => return Err(self.on_put_fatal(error).await),
        }

        // Implicit mode: a commit would accept a batch that is waiting for another put.
        if self.commit_wanted() && !self.retained {
            report.accepted += self.commit().await?;
            report.committed = true;
        }
        report.awaiting_flush = self.awaiting_flush();
        Ok(report)
    }

    /// After an iteration was dropped between its poll and the end of its `put`. A batch
    /// handed to `put` whole is put again (in explicit mode its records may be held, renewed
    /// while that `put` ran: left alone, they would stay held until close). Dropped while the
    /// batch was being built, records may be missing from it: in explicit mode the consumer's
    /// poll refuses (`UnacknowledgedRecords`), or, when a conversion retry renewed them (see
    /// `sleep_converting`), presents them again, their locks running from the last renewal
    /// (`presented_again_from`); in implicit mode, where the next poll or commit
    /// would accept them unwritten, the driver stops with [`Error::Interrupted`] and
    /// [`close`](Self::close), which then does not commit, leaves every record of that poll
    /// to be delivered again.
    fn resume_unfinished(&mut self) -> Result<()> {
        match self.unfinished {
            None => Ok(()),
            Some(Unfinished::Putting) => {
                tracing::warn!(
                    records = self.batch.len(),
                    "the last iteration was dropped before put returned; putting its batch again"
                );
                self.unfinished = None;
                if self.implicit() {
                    self.retained = true;
                } else {
                    self.redelivered_arrivals.put_again();
                }
                Ok(())
            }
            Some(Unfinished::Converting) if !self.implicit() => {
                self.unfinished = None;
                self.presented_again_from = Some(self.batch_acquired);
                Ok(())
            }
            Some(Unfinished::Converting) => Err(Error::Interrupted {
                stage: "building the batch of a poll",
            }),
        }
    }

    /// Whether to commit now: the task asked for it (the request is taken), or something
    /// waits and the commit policy says it is time.
    fn commit_wanted(&mut self) -> bool {
        let requested = self
            .context
            .as_ref()
            .is_some_and(SinkTaskContext::take_commit_request);
        // A batch of redelivered records is settled at once (see `redelivered`).
        let redelivered = self.redelivered_arrivals.take_commit_request();
        let waiting = self.acknowledged_since_commit > 0 || self.awaiting_flush() > 0;
        requested
            || (waiting
                && (redelivered
                    || self
                        .config
                        .commit_policy
                        .is_due(self.last_commit.elapsed(), self.acknowledged_since_commit)))
    }

    /// Whether record sizes are kept for `max_awaiting_flush`: under `after.flush` in
    /// explicit mode, the only case where records wait for a flush.
    fn tracks_flush_bytes(&self) -> bool {
        self.config.ack_policy == AckPolicy::AfterFlush && !self.implicit()
    }

    fn implicit(&self) -> bool {
        self.consumer.acknowledgement_mode() == AcknowledgementMode::Implicit
    }

    fn lock_duration(&self) -> Duration {
        self.consumer
            .acquisition_lock_timeout()
            .filter(|d| !d.is_zero())
            .unwrap_or(DEFAULT_LOCK)
    }

    /// Refuses a consumer that lacks a capability the (at-least-once) settings need: see
    /// [`ShareConsumer#capabilities`]. The exactly-once iteration checks its own once it
    /// has chosen its mode.
    fn check_capabilities(&self) -> Result<()> {
        #[cfg(feature = "exactly-once")]
        if self.is_exactly_once() {
            return Ok(());
        }
        if self.implicit() {
            // Nothing is held: a failed batch is kept by the consumer itself.
            return Ok(());
        }
        let capabilities = self.consumer.capabilities();
        let needs = [
            (
                self.config.ack_policy == AckPolicy::AfterFlush,
                ConsumerCapability::Hold,
                "ack.policy=after.flush",
            ),
            (
                self.config.put_retriable_policy == PutRetriablePolicy::RetryInPlace,
                ConsumerCapability::Hold,
                "put.retriable.policy=retry.in.place",
            ),
        ];
        for (needed, capability, needed_by) in needs {
            if needed && !capabilities.contains(capability) {
                return Err(Error::MissingCapability {
                    capability,
                    needed_by,
                });
            }
        }
        Ok(())
    }

    fn can_renew(&mut self) -> bool {
        if self.implicit() {
            return false;
        }
        if self
            .consumer
            .capabilities()
            .contains(ConsumerCapability::Renew)
        {
            return true;
        }
        if !self.warned_no_renew && !self.held.is_empty() {
            self.warned_no_renew = true;
            tracing::warn!(
                lock = ?self.lock_duration(),
                "the broker does not support RENEW (Kafka 4.2+): records held for a flush or \
                 a retry must be settled within the acquisition lock, or the group delivers \
                 them again"
            );
        }
        false
    }

    /// Queues a RENEW for every held record at half its lock, and returns the renewed records
    /// with their previous lock starts (empty: none was due); the next poll or commit sends
    /// them (the caller sends them at once when none follows soon: the records' lock times
    /// already count from now), and gives the starts back if that fails
    /// ([`renewals_lost`](Self::renewals_lost)).
    fn renew_due_held(&mut self) -> Result<Vec<(RecordId, Instant)>> {
        if self.held.is_empty() || !self.can_renew() {
            return Ok(Vec::new());
        }
        let lock = self.lock_duration();
        let now = Instant::now();
        let due = self.held.due(now, lock);
        renew(
            &mut self.consumer,
            &mut self.held,
            &due,
            now,
            &mut self.metrics,
        )
    }

    /// The request that was to carry the `renewed` records' RENEWs failed: they may not have
    /// reached the broker, so the records get their old lock starts back and are renewed
    /// again shortly ([`HeldRecords::renewal_failed`]).
    fn renewals_lost(&mut self, renewed: &[(RecordId, Instant)]) {
        if !renewed.is_empty() {
            let lock = self.lock_duration();
            self.held.renewal_failed(renewed, Instant::now(), lock);
        }
    }

    /// Sleeps until `until`, renewing held records (and committing the renewals at once)
    /// whenever one reaches half its lock on the way. Also the supervisor's backoff between
    /// iterations, so that what the driver holds keeps its locks. Cancel safe: dropped, the
    /// renewals queued so far go with the next commit or poll, and `close` reads no lock start.
    pub(crate) async fn sleep_renewing(&mut self, until: Instant) {
        let sleep = tokio::time::sleep_until(until);
        if self.held.is_empty() || !self.can_renew() {
            return sleep.await;
        }
        let Split { renewal, .. } = self.split_for_wait("a pause");
        renewal.around(sleep, None).await;
    }

    /// Sends queued renewals now; failures are logged (the records come back through the
    /// group), never returned. False when the commit itself failed.
    async fn commit_renewals(&mut self) -> bool {
        commit_renewals(
            &mut self.consumer,
            self.config.commit_timeout,
            &mut self.metrics,
        )
        .await
    }

    /// `put`, renewing the batch's locks (and those of held records) at half their duration
    /// while it runs, so a slow `put` does not lose them. A `put` is never cut short.
    async fn put_batch(&mut self) -> std::result::Result<(), TaskError> {
        let renewing = self.can_renew();
        let started = Instant::now();
        let Split {
            task,
            batch,
            batch_acquired,
            renewal,
            ..
        } = self.split_for_wait("put");
        let put = caught("put", task.put(batch));
        let outcome = if renewing {
            renewal
                .around(put, Some((Unheld::Hold(batch), batch_acquired)))
                .await
        } else {
            put.await
        };
        let elapsed = started.elapsed();
        match &outcome {
            Ok(()) => {
                self.metrics.put_batches += 1;
                self.metrics.put_time_total += elapsed;
                self.metrics.put_time_max = self.metrics.put_time_max.max(elapsed);
            }
            Err(_) => self.metrics.put_failures += 1,
        }
        outcome
    }

    fn on_put_ok(&mut self, report: &mut IterationReport) -> Result<()> {
        self.retained = false;
        self.retry = None;
        let n = self.batch.len();
        self.metrics.records_put += n as u64;
        self.acknowledged_since_commit += n as u64;
        if self.implicit() {
            // The next poll or commit accepts the batch. The sizes matter only under
            // after.flush (explicit).
            self.deliver_batch();
            self.batch.clear();
            report.accepted += n;
            return Ok(());
        }
        match self.config.ack_policy {
            AckPolicy::AfterPut => {
                // The whole poll, nothing held: one call accepts it, when the consumer can.
                // It accepts what is not held and has no final acknowledgement, which then
                // is the batch; a count that differs falls back to record by record (which
                // repeats an ACCEPT already made, harmlessly).
                let at_once = self.batch_is_poll
                    && self.held.is_empty()
                    && self
                        .consumer
                        .acknowledge_remaining(AcknowledgeType::Accept)?
                        == Some(n);
                let mut accepted = n;
                if !at_once {
                    for record in &self.batch {
                        if !accept(&mut self.consumer, record.original_id())? {
                            accepted -= 1;
                        }
                    }
                }
                if !self.held.is_empty() {
                    // Held during a long put.
                    for record in &self.batch {
                        self.held.remove(record.original_id());
                    }
                }
                report.accepted += accepted;
                // Settled: nothing reads the batch again. The sizes matter only under
                // after.flush.
                self.deliver_batch();
                self.batch.clear();
                return Ok(());
            }
            AckPolicy::AfterFlush => {
                // Durable only once pre_commit says so: hold the records until then.
                for record in &self.batch {
                    let id = record.original_id();
                    if self.held.insert(id.clone(), self.batch_acquired) {
                        self.consumer
                            .hold_offset(id.topic(), id.partition(), id.offset())?;
                    }
                }
            }
        }
        self.deliver_batch();
        self.delivered_bytes
            .extend(sizes(&self.batch_bytes, self.batch.len()));
        Ok(())
    }

    /// Notes the batch's records as delivered, for the next `pre_commit`.
    fn deliver_batch(&mut self) {
        if self.batch_is_poll && self.batch_delivered.len() == self.batch.len() {
            // Noted while polling.
            self.delivered.append(&mut self.batch_delivered);
        } else {
            self.delivered.extend_from_batch(&self.batch);
        }
    }

    async fn on_put_retriable(
        &mut self,
        error: TaskError,
        report: &mut IterationReport,
    ) -> Result<()> {
        let n = self.batch.len();
        if self.implicit() {
            tracing::warn!(records = n, error = %ErrorChain(&error), "put failed, will put the batch again");
            let backoff = error.backoff().unwrap_or(self.config.retriable_backoff);
            self.backoff_until = Some(deadline_after(Instant::now(), backoff));
            self.retained = true;
            report.retained = n;
            return Ok(());
        }
        let now = Instant::now();
        // When this delivery first failed: the redelivery backoff counts from there.
        let mut since = now;
        if self.config.put_retriable_policy == PutRetriablePolicy::RetryInPlace {
            let retry = self.retry.get_or_insert(RetryInPlace {
                first_failure: now,
                attempts: 0,
                next_attempt: now,
                last_error: None,
            });
            retry.attempts += 1;
            let deadline = self
                .config
                .errors
                .retry_timeout
                .map(|t| deadline_after(retry.first_failure, t));
            if deadline.is_none_or(|d| now < d) {
                let mut delay = error.backoff().unwrap_or_else(|| {
                    retry_backoff(retry.attempts, self.config.errors.retry_delay_max)
                });
                if let Some(d) = deadline {
                    delay = delay.min(d.saturating_duration_since(now));
                }
                retry.next_attempt = deadline_after(now, delay);
                tracing::warn!(records = n, attempt = retry.attempts, ?delay, error = %ErrorChain(&error), "put failed, retrying in place");
                for record in &self.batch {
                    let id = record.original_id();
                    if self.held.insert(id.clone(), self.batch_acquired) {
                        self.consumer
                            .hold_offset(id.topic(), id.partition(), id.offset())?;
                    }
                }
                self.metrics.put_retries += 1;
                report.retained = n;
                retry.last_error = Some(error);
                return Ok(());
            }
            tracing::warn!(
                records = n,
                attempts = retry.attempts,
                "put kept failing for errors.retry.timeout; releasing the batch"
            );
            since = retry.first_failure;
            self.retry = None;
        } else {
            tracing::warn!(records = n, error = %ErrorChain(&error), "put failed, releasing the batch");
        }
        let Some(error) = self.hold_for_redelivery(error, since, report).await? else {
            return Ok(());
        };
        self.release_failed_batch(&error, &HashSet::new(), report)
            .await
    }

    /// RELEASEs the batch that failed with `error` (retriable, or a panic: at once, or after
    /// its redelivery backoff); a record on its last allowed delivery is dead-lettered and
    /// REJECTed instead when the settings say so. The records of `given_up` are left alone:
    /// they were given up on when the batch was held for its backoff.
    ///
    /// Dropped during the dead-letter write, the next iteration writes those records again
    /// (`interrupted_write`); the releases are made before it.
    async fn release_failed_batch(
        &mut self,
        error: &TaskError,
        given_up: &HashSet<RecordId>,
        report: &mut IterationReport,
    ) -> Result<()> {
        let now = Instant::now();
        let backoff = error.backoff().unwrap_or(self.config.retriable_backoff);
        self.backoff_until = Some(deadline_after(now, backoff));
        let group_limit = self.group_delivery_limit();
        let last_deliveries = self.last_deliveries(given_up);
        let mut released = 0;
        let mut at_limit = 0;
        let mut last = last_deliveries.iter().peekable();
        for (i, record) in self.batch.iter().enumerate() {
            let id = record.original_id();
            if last.next_if_eq(&&i).is_some() || given_up.contains(id) {
                continue;
            }
            self.held.remove(id);
            if !settle(&mut self.consumer, id, AcknowledgeType::Release)? {
                continue;
            }
            self.redelivered_arrivals.note_released(id);
            released += 1;
            if record.delivery_count() >= group_limit {
                at_limit += 1;
            }
        }
        self.note_released_at_limit(at_limit);
        self.metrics.records_released += released as u64;
        report.released += released;
        self.acknowledged_since_commit += released as u64;
        let failure = Failure::of_put(error, DeadLetterReason::DeliveryLimit);
        self.give_up_last_deliveries(&last_deliveries, failure, report)
            .await?;
        if at_limit > 0 {
            // Released on their last delivery, the group archives them: given up on as surely
            // as a REJECT, so the dead-letter circuit breaker counts them. It cannot save
            // these (held or released, they are archived), but it stops the task before more
            // follow.
            if let Err(tripped) = self.admit_dead_letters(at_limit) {
                if let Err(e) = self.commit_acknowledgements().await {
                    tracing::warn!(error = %ErrorChain(&e), "could not commit the releases");
                }
                return Err(Error::DeadLetterBreaker(tripped));
            }
        }
        Ok(())
    }

    /// The indexes in the batch, ascending, of the records a failed batch gives up on rather
    /// than releasing, but for those of `given_up`: at `max.delivery.attempts` the driver
    /// rejects; at the group's own limit it saves the record to its dead-letter queue first
    /// when it has one. Released there, the group would archive it: gone, unless the group
    /// has a broker dead-letter queue.
    pub(super) fn last_deliveries(&self, given_up: &HashSet<RecordId>) -> Vec<usize> {
        let max = self.config.max_delivery_attempts;
        let group = self
            .config
            .dead_letter
            .is_some()
            .then(|| self.group_delivery_limit());
        self.batch
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                let count = r.delivery_count();
                max.is_some_and(|max| count >= max) || group.is_some_and(|limit| count >= limit)
            })
            .filter(|(_, r)| !given_up.contains(r.original_id()))
            .map(|(i, _)| i)
            .collect()
    }

    /// Gives up on the records of the batch at `indexes` (see
    /// [`last_deliveries`](Self::last_deliveries)), failed with `failure`: dead-lettered,
    /// then REJECTed or ACCEPTed (see `dead_letter_then_reject`), and no longer held.
    pub(super) async fn give_up_last_deliveries(
        &mut self,
        indexes: &[usize],
        failure: Failure,
        report: &mut IterationReport,
    ) -> Result<()> {
        if indexes.is_empty() {
            return Ok(());
        }
        tracing::warn!(
            records = indexes.len(),
            max_delivery_attempts = self.config.max_delivery_attempts,
            "records failed on their last allowed delivery; rejecting them"
        );
        let records = indexes
            .iter()
            .map(|&i| (self.polled_record(i), failure.clone()))
            .collect();
        self.dead_letter_then_reject(records, false, report).await?;
        Ok(())
    }

    /// `put` panicked: the task crashed, the records are not to blame. The batch is
    /// RELEASEd (a record on its last allowed delivery dead-lettered as after a retriable
    /// failure), the release committed, and the driver stops.
    async fn on_put_panic(&mut self, error: TaskError) -> Error {
        tracing::error!(records = self.batch.len(), error = %ErrorChain(&error), "put panicked; releasing the batch and stopping");
        self.state = State::Failed;
        self.retry = None;
        if !self.implicit() {
            let mut report = IterationReport::default();
            if let Err(e) = self
                .release_failed_batch(&error, &HashSet::new(), &mut report)
                .await
            {
                return e;
            }
            if let Err(e) = self.commit_acknowledgements().await {
                // The records come back when their locks expire: nothing is lost.
                tracing::warn!(error = %ErrorChain(&e), "could not commit the releases");
            }
        }
        Error::Task {
            stage: TaskStage::Put,
            source: error,
        }
    }

    async fn on_put_fatal(&mut self, error: TaskError) -> Error {
        tracing::error!(records = self.batch.len(), error = %ErrorChain(&error), "put failed fatally, stopping");
        self.state = State::Failed;
        self.retry = None;
        if !self.implicit() {
            let failure = Failure::of_put(&error, DeadLetterReason::Put);
            let records: Vec<(ConsumerRecord, Failure)> = self
                .batch
                .iter()
                .enumerate()
                .map(|(i, _)| (self.polled_record(i), failure.clone()))
                .collect();
            let mut report = IterationReport::default();
            if let Err(e) = self
                .dead_letter_then_reject(records, false, &mut report)
                .await
            {
                return e;
            }
            // Make the rejection durable now; the caller may never close us.
            if let Err(e) = self.commit_acknowledgements().await {
                // The task's own error matters more. Rejections that did not reach the broker
                // expire with their locks and the records come back: nothing is lost.
                tracing::warn!(error = %ErrorChain(&e), "could not commit the rejections");
            }
        }
        Error::Task {
            stage: TaskStage::Put,
            source: error,
        }
    }

    /// Counts and says that `n` records were RELEASEd on their last allowed delivery: the
    /// group archives them, into its broker dead-letter queue if it has one.
    pub(super) fn note_released_at_limit(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        self.metrics.records_released_at_limit += n as u64;
        tracing::warn!(
            records = n,
            delivery_count_limit = self.group_delivery_limit(),
            broker_dead_letter_queue = ?self.consumer.broker_dead_letter_queue(),
            "released on their last allowed delivery: the group archives them \
             (into its broker dead-letter queue, if it has one)"
        );
    }

    /// Polls the consumer for the iteration's records, then counts what it gave back on the
    /// last delivery meanwhile (also when the poll fails).
    ///
    /// # Cancel safety
    ///
    /// As the consumer's `poll`: what a dropped poll gave back is counted by the next one.
    pub(super) async fn poll_consumer(&mut self) -> Result<Vec<ConsumerRecord>> {
        // A poll waits no longer than the first held record's renewal: a long poll timeout
        // must not let held locks run out.
        let mut timeout = self.config.poll_timeout;
        if !self.held.is_empty() && self.can_renew() {
            if let Some(due) = self.held.next_due(self.lock_duration()) {
                timeout = timeout.min(due.saturating_duration_since(Instant::now()));
            }
        }
        let records = self.consumer.poll(timeout).await;
        self.note_given_back_by_consumer();
        Ok(records?)
    }

    /// Adds to `records_released_at_limit` what the consumer gave back on the last delivery
    /// since it was last asked (it says so itself, at WARN): records it fetched ahead whose
    /// locks ran out before a poll, and at close what had no final acknowledgement.
    pub(super) fn note_given_back_by_consumer(&mut self) {
        let total = self.consumer.given_back_at_limit();
        let new = total.saturating_sub(self.given_back_seen);
        self.given_back_seen = total;
        self.metrics.records_released_at_limit =
            self.metrics.records_released_at_limit.saturating_add(new);
    }

    /// [`note_released_at_limit`](Self::note_released_at_limit) for records RELEASEd on
    /// these `deliveries`: those at the group's limit or past it.
    pub(super) fn note_released_among(&mut self, deliveries: impl IntoIterator<Item = u16>) {
        let last = self.group_delivery_limit();
        let n = deliveries.into_iter().filter(|d| *d >= last).count();
        self.note_released_at_limit(n);
    }

    /// The group's delivery-count limit as the consumer reports it, else Kafka's default.
    fn group_delivery_limit(&self) -> u16 {
        self.consumer
            .delivery_count_limit()
            .unwrap_or(DEFAULT_DELIVERY_COUNT_LIMIT)
            .max(1)
    }

    /// The delivery that is a record's last: the group's limit, or `max.delivery.attempts`
    /// when lower.
    pub(super) fn last_delivery_limit(&self) -> u16 {
        let group = self.group_delivery_limit();
        self.config
            .max_delivery_attempts
            .map_or(group, |max| max.min(group))
    }

    /// True when more than `max_awaiting_flush` waits for a flush.
    fn flush_bound_reached(&self) -> bool {
        if self.config.ack_policy != AckPolicy::AfterFlush || self.implicit() {
            return false;
        }
        self.delivered.len() >= self.config.max_awaiting_flush_records
            || self
                .delivered_bytes
                .iter()
                .fold(0u64, |sum, b| sum.saturating_add(*b))
                >= self.config.max_awaiting_flush_bytes
    }

    /// Asks the task to flush because too much waits for one. Returns whether the driver may
    /// poll again; if not, it waits one poll timeout, renewing what it holds.
    async fn wait_for_flush(&mut self, report: &mut IterationReport) -> Result<bool> {
        self.metrics.flush_waits += 1;
        report.accepted += self.commit().await?;
        report.committed = true;
        self.flush_stalled = self.flush_bound_reached();
        if !self.flush_stalled {
            return Ok(true);
        }
        tracing::debug!(
            awaiting = self.delivered.len(),
            "waiting for the task to flush before polling more"
        );
        report.waited_for_flush = true;
        let until = deadline_after(Instant::now(), self.config.poll_timeout);
        self.sleep_renewing(until).await;
        Ok(false)
    }

    /// The short path of records on their last allowed delivery under `ack.policy=after.flush`:
    /// they are not left waiting for the next flush, where a crash would cost them their last
    /// life and the group would archive them. The task is asked to flush at once; what that
    /// makes durable is accepted. What it does not is written to the dead-letter queue and
    /// rejected when one is set; otherwise it stays held, its lock renewed, until a flush.
    async fn settle_last_deliveries(&mut self, report: &mut IterationReport) -> Result<()> {
        if self.implicit() || self.config.ack_policy != AckPolicy::AfterFlush {
            return Ok(());
        }
        let last = self.last_delivery_limit();
        if !self.batch.iter().any(|r| r.delivery_count() >= last) {
            return Ok(());
        }
        report.accepted += self.commit().await?;
        report.committed = true;
        let not_durable: Vec<usize> = self
            .batch
            .iter()
            .enumerate()
            .filter(|(_, r)| r.delivery_count() >= last && self.delivered.contains(r.original_id()))
            .map(|(i, _)| i)
            .collect();
        if not_durable.is_empty() {
            return Ok(());
        }
        if self.config.dead_letter.is_none() {
            tracing::warn!(
                records = not_durable.len(),
                "records on their last allowed delivery were written but the flush did not make \
                 them durable: they stay held, their locks renewed, until a flush does; a crash \
                 before that lets the group archive them"
            );
            return Ok(());
        }
        let error = TaskError::retriable(
            "written on the record's last allowed delivery, but the flush that followed did not make it durable",
        );
        let failure = Failure::of_put(&error, DeadLetterReason::Flush);
        let mut records = Vec::with_capacity(not_durable.len());
        for i in not_durable {
            let id = self.batch[i].original_id().clone();
            if let Some(at) = self.delivered.remove(&id) {
                if at < self.delivered_bytes.len() {
                    self.delivered_bytes.remove(at);
                }
            }
            // Still held (and renewed) during the dead-letter write, which forgets it after.
            records.push((self.polled_record(i), failure.clone()));
        }
        self.dead_letter_then_reject(records, false, report).await?;
        self.commit_acknowledgements().await
    }

    /// At `initialize`: a group whose delivery-count limit the consumer could not read, with
    /// no `max.delivery.attempts` below Kafka's default to stand in for it, is taken to have
    /// Kafka's default. Said as a warning, because a lower real limit makes a put that fails
    /// retriably on a record's real last delivery a release the group archives, without the
    /// driver's dead-letter queue or its breaker's count.
    fn warn_unknown_delivery_limit(&self) {
        let assumed = self.group_delivery_limit();
        // A max.delivery.attempts below the assumed limit is the last delivery whatever the
        // group's limit is (up to it); at or above, the assumption stands.
        if self.consumer.delivery_count_limit().is_some()
            || self
                .config
                .max_delivery_attempts
                .is_some_and(|max| max < assumed)
        {
            return;
        }
        tracing::warn!(
            assumed_delivery_count_limit = assumed,
            "the share group's delivery-count limit is not known (the consumer could not read \
             it: reading needs DESCRIBE_CONFIGS on the group, or on the cluster before Kafka \
             4.3; or the read timed out; or the consumer does not report it); the driver \
             takes delivery {assumed} (Kafka's default) as a record's last. If the group's \
             limit is lower, a record whose put fails on its real last delivery is released \
             and archived by the group instead of going to the dead-letter queue: grant the \
             permission, or set max.delivery.attempts to the group's \
             share.delivery.count.limit"
        );
    }

    /// At `initialize`: what happens to a record whose deliveries all end without an
    /// acknowledgement (crashes, lock expiries), and whether that is allowed.
    fn check_broker_dead_letter_queue(&self) -> Result<()> {
        let limit = self.group_delivery_limit();
        let queue = self.consumer.broker_dead_letter_queue();
        let problem = match &queue {
            BrokerDeadLetterQueue::Topic { name, copy_record } => {
                tracing::info!(
                    topic = %name,
                    copy_record,
                    delivery_count_limit = limit,
                    "records archived at the delivery-count limit go to the group's broker dead-letter queue"
                );
                return Ok(());
            }
            BrokerDeadLetterQueue::None => "the share group has no broker dead-letter queue",
            _ => {
                "whether the share group has a broker dead-letter queue is not known (its configuration could not be read)"
            }
        };
        let consequence = format!(
            "{problem}: a record delivered {limit} times without being acknowledged (the task \
             crashed or stalled each time) is archived by the broker and lost without a trace; \
             on Kafka 4.4 set the group's errors.deadletterqueue.topic.name \
             (KafkaAdmin::set_share_group_dead_letter_queue)"
        );
        if self.config.require_broker_dead_letter_queue {
            return Err(Error::Config {
                key: "share.dead.letter.queue.required",
                reason: consequence,
            });
        }
        tracing::warn!(delivery_count_limit = limit, "{consequence}");
        Ok(())
    }

    /// The polled record behind `batch[i]`: the original, kept when a dead-letter queue needs
    /// its bytes, or else a record with its coordinates and delivery count only, enough to
    /// acknowledge it.
    fn polled_record(&self, i: usize) -> ConsumerRecord {
        self.raw.get(i).cloned().unwrap_or_else(|| {
            let record = &self.batch[i];
            let id = record.original_id();
            // Its delivery count too: a record on its last delivery is counted when released.
            ConsumerRecord::new(id.topic_name().clone(), id.partition(), id.offset())
                .with_delivery_count(record.delivery_count())
        })
    }

    /// Whether the polled records are kept beside the batch for the dead-letter queue.
    fn keeps_raw(&self) -> bool {
        self.config.dead_letter.is_some()
    }

    /// The dead letters of `records`, with Connect's context headers when configured and
    /// the reason header always.
    pub(super) fn dead_letters(
        &self,
        records: &[(ConsumerRecord, Failure)],
    ) -> Vec<DeadLetterRecord> {
        records
            .iter()
            .map(|(record, failure)| {
                let letter = DeadLetterRecord::new(record);
                let letter = if self.config.dead_letter_context_headers {
                    let context = ErrorContext::new_dyn(
                        &self.config.connector_name,
                        self.config.task_id,
                        failure.stage,
                        &failure.class_name,
                        &failure.error,
                        failure.exception_class,
                    );
                    letter.with_context(&context)
                } else {
                    letter
                };
                // Always, also without the context headers: see `dlq::headers::REASON`.
                letter.with_reason(failure.reason)
            })
            .collect()
    }

    /// Settles records that will not be processed: written to the dead-letter queue first
    /// when one is set (and RELEASEd instead if that write fails, so nothing is dropped),
    /// then ACCEPTed (one home: see `acknowledgement_after_dead_letter`), or REJECTed
    /// without a queue of its own. The dead-letter circuit breaker is asked first: when it
    /// trips, they are RELEASEd and the error stops the driver. Returns how many were
    /// settled.
    ///
    /// While the queue writes them (up to its delivery timeout, longer than a lock), the
    /// records are held and renewed, with the held records and, when `batch_waits`, the
    /// batch (records converted beside them, not yet put); afterwards they are no longer
    /// held, whatever became of them.
    async fn dead_letter_then_reject(
        &mut self,
        records: Vec<(ConsumerRecord, Failure)>,
        batch_waits: bool,
        report: &mut IterationReport,
    ) -> Result<usize> {
        if self.implicit() {
            return self.dead_letter_implicit(records, report).await;
        }
        let settled = self
            .dead_letter_then_settle(&records, batch_waits, report)
            .await;
        for (record, _) in &records {
            self.held.remove(&record.id());
        }
        settled
    }

    /// `dead_letter_then_reject` in explicit mode, but for forgetting the records' holds.
    async fn dead_letter_then_settle(
        &mut self,
        records: &[(ConsumerRecord, Failure)],
        batch_waits: bool,
        report: &mut IterationReport,
    ) -> Result<usize> {
        let n = records.len();
        let admitted_at = match self.admit_dead_letters(n) {
            Ok(at) => at,
            Err(tripped) => {
                let given_up = records.iter().map(|(r, _)| r.into()).collect();
                return Err(self.trip_dead_letter_breaker(tripped, given_up).await);
            }
        };
        let mut settle = AcknowledgeType::Reject;
        if let Some(queue) = self.config.dead_letter.clone() {
            let letters = self.dead_letters(records);
            self.metrics.dlq_produce_requests += n as u64;
            if let Err(error) = self
                .renewing_beside(queue.send(letters), records, batch_waits, admitted_at)
                .await
            {
                self.metrics.dlq_produce_failures += n as u64;
                tracing::warn!(
                    records = n,
                    topic = queue.topic(),
                    error = %ErrorChain(&error),
                    "dead-letter write failed; releasing the records instead of rejecting them"
                );
                let given_up: Vec<dead_letter::GivenUp> =
                    records.iter().map(|(r, _)| r.into()).collect();
                // Not dead-lettered after all: those that come back are not given up on.
                self.refund_dead_letters(admitted_at, &given_up);
                let released = self.release_given_up(&given_up);
                report.released += usize::try_from(released).unwrap_or(usize::MAX);
                return Ok(0);
            }
            self.metrics.records_dead_lettered += n as u64;
            report.dead_lettered += n;
            settle = self.acknowledgement_after_dead_letter();
        }
        let mut settled = 0;
        for (record, failure) in records {
            tracing::debug!(record = %record.id(), stage = %failure.stage, reason = %failure.reason, ack = ?settle, "settling a record given up on");
            match self.consumer.acknowledge(record, settle) {
                Ok(()) => settled += 1,
                // Its lock ran out during the write (or it was settled already): the group
                // has it, and delivers it again unless this was its last delivery.
                Err(e) if e.is_not_held() => {
                    tracing::debug!(record = %record.id(), error = %ErrorChain(&e), "dead-lettered, but no longer ours to settle");
                }
                Err(e) => return Err(e.into()),
            }
        }
        if settle == AcknowledgeType::Reject {
            self.metrics.records_rejected += settled as u64;
            report.rejected += settled;
        }
        self.acknowledged_since_commit += settled as u64;
        Ok(settled)
    }

    /// `work` (a dead-letter write of `records`, admitted to the breaker at `admitted_at`),
    /// with `records` held and renewed while it runs, beside the held records and, when
    /// `batch_waits`, the batch. Noted as under way while it runs (`interrupted_write`).
    async fn renewing_beside<T>(
        &mut self,
        work: impl Future<Output = T>,
        records: &[(ConsumerRecord, Failure)],
        batch_waits: bool,
        admitted_at: Instant,
    ) -> T {
        let renewing = self.can_renew();
        let mut beside = Vec::new();
        if renewing {
            for (record, _) in records {
                let id = record.id();
                if self.held.contains(&id) {
                    continue;
                }
                match self
                    .consumer
                    .hold_offset(id.topic(), id.partition(), id.offset())
                {
                    Ok(()) => {
                        self.held.insert(id, self.batch_acquired);
                    }
                    Err(e) => {
                        tracing::debug!(record = %id, error = %ErrorChain(&e), "not held during the dead-letter write");
                    }
                }
            }
        }
        if batch_waits {
            let held = &self.held;
            beside.extend(
                self.batch
                    .iter()
                    .filter(|r| !held.contains(r.original_id()))
                    .map(dead_letter::GivenUp::from),
            );
        }
        self.interrupted_write = Some(dead_letter::InterruptedWrite {
            letters: records.to_vec(),
            admitted_at,
            beside,
        });
        let Split {
            batch,
            batch_acquired,
            renewal,
            ..
        } = self.split_for_wait("a dead-letter write");
        let outcome = if renewing {
            let batch = batch_waits.then_some((Unheld::Hold(batch), batch_acquired));
            renewal.around(work, batch).await
        } else {
            work.await
        };
        self.interrupted_write = None;
        outcome
    }

    /// Implicit mode's `dead_letter_then_reject`: nothing can be rejected or released one by
    /// one, and the next poll accepts the records. With a dead-letter queue they are written
    /// there first. When that cannot be done (the breaker tripped, the write failed) the
    /// driver stops before any poll or commit accepts them: `close` sends no commit, so the
    /// poll's records are released. Without a queue they are skipped (accepted), as Connect
    /// skips under `errors.tolerance=all`.
    async fn dead_letter_implicit(
        &mut self,
        records: Vec<(ConsumerRecord, Failure)>,
        report: &mut IterationReport,
    ) -> Result<usize> {
        let n = records.len();
        let Some(queue) = self.config.dead_letter.clone() else {
            tracing::warn!(
                records = n,
                "implicit acknowledgement and no dead-letter queue: skipped records are \
                 accepted by the next poll"
            );
            return Ok(0);
        };
        let admitted_at = match self.admit_dead_letters(n) {
            Ok(at) => at,
            Err(tripped) => {
                self.state = State::Failed;
                return Err(Error::DeadLetterBreaker(tripped));
            }
        };
        let letters = self.dead_letters(&records);
        self.metrics.dlq_produce_requests += n as u64;
        if let Err(error) = queue.send(letters).await {
            self.metrics.dlq_produce_failures += n as u64;
            self.state = State::Failed;
            // Released at close, they come back (but those on their last delivery).
            let given_up: Vec<dead_letter::GivenUp> =
                records.iter().map(|(r, _)| r.into()).collect();
            self.refund_dead_letters(admitted_at, &given_up);
            tracing::error!(
                records = n,
                topic = queue.topic(),
                error = %ErrorChain(&error),
                "dead-letter write failed; implicit acknowledgement cannot release records one \
                 by one, so the driver stops and close releases the poll"
            );
            return Err(Error::DeadLetterUnreleasable(error));
        }
        self.metrics.records_dead_lettered += n as u64;
        report.dead_lettered += n;
        // Accepted by the next poll or commit, like the rest of the batch.
        self.acknowledged_since_commit += n as u64;
        Ok(n)
    }

    /// `pre_commit`, accepting what it calls durable under `after.flush`, then `commit_sync`.
    /// Returns the records accepted here.
    async fn commit(&mut self) -> Result<usize> {
        let after_flush = self.config.ack_policy == AckPolicy::AfterFlush && !self.implicit();
        // Taken only once `pre_commit` returned: dropped while it runs, the commit leaves the
        // list for the next one (taken before, the records waiting for a flush were
        // forgotten, held and renewed until close).
        // Records held for this flush keep their locks while it runs.
        let renewing = self.can_renew();
        let Split {
            task,
            delivered,
            renewal,
            ..
        } = self.split_for_wait("pre_commit");
        let pre_commit = caught("pre_commit", task.pre_commit(delivered));
        let outcome = if renewing {
            renewal.around(pre_commit, None).await
        } else {
            pre_commit.await
        };
        let durability = match outcome {
            Ok(d) => d,
            Err(source) if source.is_retriable() => {
                tracing::warn!(error = %ErrorChain(&source), "pre_commit failed; trying again at the next commit");
                if after_flush {
                    self.metrics.commit_skips += 1;
                    self.last_commit = Instant::now();
                    return Ok(0);
                }
                Durability::All
            }
            Err(source) => {
                if !after_flush {
                    // Reported: accepted when put returned, nothing waits on them.
                    self.delivered.clear();
                    self.delivered_bytes.clear();
                }
                return Err(Error::Task {
                    stage: TaskStage::PreCommit,
                    source,
                });
            }
        };
        let delivered = std::mem::take(&mut self.delivered);
        let delivered_bytes = std::mem::take(&mut self.delivered_bytes);
        let mut accepted = 0;
        if after_flush {
            let mut waiting = Delivered::new();
            let mut waiting_bytes = Vec::new();
            for (i, id) in delivered.iter().enumerate() {
                if !durability.covers(&id) {
                    waiting.push(&id);
                    waiting_bytes.push(delivered_bytes.get(i).copied().unwrap_or(0));
                } else if self.held.remove(&id) && accept(&mut self.consumer, &id)? {
                    accepted += 1;
                }
                // A covered record that is no longer held was settled already (or lost
                // its lock and was put again): nothing to accept.
            }
            self.delivered = waiting;
            self.delivered_bytes = waiting_bytes;
            if accepted == 0 && self.acknowledged_since_commit == 0 {
                self.metrics.commit_skips += 1;
                self.last_commit = Instant::now();
                return Ok(0);
            }
        } else {
            if durability != Durability::All && !self.warned_partial_durability {
                self.warned_partial_durability = true;
                tracing::warn!(
                    "pre_commit reported records as not yet durable, but they were accepted \
                     when put returned: use ack.policy=after.flush for a task that buffers"
                );
            }
            // Reported: keep the buffer for the next batches.
            let mut delivered = delivered;
            delivered.clear();
            self.delivered = delivered;
            let mut delivered_bytes = delivered_bytes;
            delivered_bytes.clear();
            self.delivered_bytes = delivered_bytes;
        }
        self.commit_acknowledgements().await?;
        Ok(accepted)
    }

    async fn commit_acknowledgements(&mut self) -> Result<()> {
        #[cfg(feature = "exactly-once")]
        if let Some(accepts) = self.take_accepts() {
            self.settle_accepts(accepts).await;
        }
        let results = self
            .consumer
            .commit_sync(self.config.commit_timeout)
            .await?;
        count_failures(&results, &mut self.metrics);
        self.metrics.commits += 1;
        self.acknowledged_since_commit = 0;
        self.last_commit = Instant::now();
        if tracing::enabled!(target: "kafka_share_sink::metrics", tracing::Level::DEBUG) {
            // Connect's metric names have dashes, which tracing field names cannot: the
            // event's message carries them by name.
            let named = self
                .connect_metrics()
                .into_iter()
                .map(|(name, value)| format!("{name}={value}"))
                .collect::<Vec<_>>()
                .join(" ");
            tracing::debug!(
                target: "kafka_share_sink::metrics",
                group = %self.consumer.group_metadata().group_id(),
                "{named}"
            );
        }
        Ok(())
    }

    /// Ends the driver: a final `pre_commit` and commit of what was accepted, the task's
    /// `stop`, and the consumer's `close`, which releases every record not acknowledged
    /// (held ones included). A batch whose `put` failed and that waits for a retry in place
    /// or for its redelivery backoff is given up first as after a final failure, also by a
    /// driver that failed: a record on its last delivery goes to the dead-letter queue
    /// (released, the group would archive it), the rest is released. A dead-letter write an
    /// iteration was dropped in is finished first, also by a driver that failed (its records
    /// written and settled, which may take up to the queue's delivery timeout). A driver
    /// that failed runs no final `pre_commit` or commit (its acknowledgements go with the
    /// consumer's close). Every step is attempted; the first error is returned, except
    /// that a cluster out of reach does not fail the close (as Java's consumer `close`): a
    /// retriable error of the last commit and the consumer's close problems are logged at
    /// WARN, and what was not acknowledged is redelivered once its locks expire. Closing
    /// twice is a no-op.
    ///
    /// # Cancel safety
    ///
    /// The driver is closed once this is called. Dropped before the end, the remaining steps
    /// do not run: what was not committed is delivered again once its locks expire (with
    /// [`KafkaShareConsumer`](crate::KafkaShareConsumer), a dropped consumer close still sends
    /// the final acknowledgements in the background).
    pub async fn close(&mut self) -> Result<()> {
        let previous = self.state;
        if previous == State::Closed {
            return Ok(());
        }
        self.state = State::Closed;
        let mut first_error: Option<Error> = None;
        // Implicit mode: a commit would accept the records of a poll never put.
        let unput = self.unfinished.is_some() && self.implicit();
        if unput {
            tracing::info!(
                records = self.batch.len(),
                "closing with the records of the last poll not put (the iteration was dropped); \
                 no final commit, so they are released"
            );
        }
        // A dead-letter write an iteration dropped, also one of a driver that failed (a
        // fatal put, a panic): finished, or its records would be released, and archived on
        // their last delivery, without it.
        if previous != State::Created && !self.implicit() {
            let mut report = IterationReport::default();
            if let Err(e) = self.finish_interrupted_write(&mut report).await {
                first_error.get_or_insert(e);
            }
        }
        let gives_up = !self.retained && !unput;
        if gives_up && matches!(previous, State::Running | State::Failed) {
            // Given up on now as if its last attempt had failed for good: released, but a
            // record on its last delivery goes to the dead-letter queue first (released, the
            // group would archive it). Also by a driver that failed after the batch was held
            // (its commit or pre_commit failed): the task has no part in it.
            let mut given_up = None;
            let mut settled_at_hold = HashSet::new();
            if let Some(retry) = self.retry.take() {
                tracing::info!(
                    records = self.batch.len(),
                    attempts = retry.attempts,
                    "closing during a retry in place; the batch is released"
                );
                given_up = Some(retry.last_error.unwrap_or_else(|| {
                    TaskError::retriable("the driver closed during a retry in place")
                }));
            }
            if let Some(pending) = self.redelivery.take() {
                tracing::info!(
                    records = self.batch.len(),
                    "closing during a redelivery backoff; the batch is released"
                );
                given_up = Some(pending.error);
                settled_at_hold = pending.given_up;
            }
            if let Some(error) = given_up {
                let mut report = IterationReport::default();
                if let Err(e) = self
                    .release_failed_batch(&error, &settled_at_hold, &mut report)
                    .await
                {
                    first_error.get_or_insert(e);
                }
            }
            // Released, a queued record on its last delivery is archived by the group:
            // counted and said.
            let queued = self.redelivered_arrivals.clear_queue();
            if !queued.is_empty() {
                tracing::info!(
                    records = queued.len(),
                    "closing with redelivered records queued; they are released"
                );
                self.release_given_up(&queued);
            }
        }
        if gives_up && previous == State::Running {
            match self.commit().await {
                Ok(_) => {}
                // As the consumer's close: a cluster out of reach is no reason to fail the
                // close; the records not acknowledged come back when their locks expire.
                Err(e) if e.is_retriable() => tracing::warn!(
                    error = %ErrorChain(&e),
                    "the last commit of close failed; its records are redelivered once their \
                     locks expire"
                ),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        } else if previous == State::Running && self.implicit() {
            // Implicit mode with a batch not put (kept after a retriable error, or its
            // iteration dropped): no commit, which would accept it; the records put before
            // were accepted by the last poll, and the task still flushes them.
            if let Err(source) = caught("pre_commit", self.task.pre_commit(&self.delivered)).await {
                first_error.get_or_insert(Error::Task {
                    stage: TaskStage::PreCommit,
                    source,
                });
            }
            self.delivered.clear();
        }
        // Stopped once its start was called (as Connect's close does, also after a start that
        // failed or was cut short); never a task that was not started (a driver closed before
        // `initialize`, or whose exactly-once setup failed before the task's turn).
        if self.context.is_some() {
            if let Err(source) = caught("stop", self.task.stop()).await {
                first_error.get_or_insert(Error::Task {
                    stage: TaskStage::Stop,
                    source,
                });
            }
        }
        if let Err(e) = self.consumer.close(self.config.close_timeout).await {
            first_error.get_or_insert(e.into());
        }
        // What the consumer's close gave back without a final acknowledgement, archived on
        // its last delivery: fetched ahead, or left with the consumer (a batch not put in
        // implicit mode, records held for a flush that did not come, a failed driver's).
        self.note_given_back_by_consumer();
        // Stops the driver's own reading (a supervisor's reader goes on for its other tasks).
        self.lag = None;
        self.batch.clear();
        self.held.clear();
        tracing::info!(metrics = ?self.metrics, "sink task closed");
        self.export_metrics();
        first_error.map_or(Ok(()), Err)
    }

    /// Initializes if needed, then iterates until `shutdown` completes or a fatal error, and
    /// closes in both cases.
    ///
    /// Shutdown is checked between iterations, so it takes effect within one poll timeout
    /// plus one `put`; a `put` is never cut short. During the redelivery backoff of a failed
    /// batch, or the wait before a retry in place, it takes effect at once, and the close
    /// releases the batch. After a poll that brought redelivered records, which the driver
    /// puts in small batches, the rest of that poll is put first (released at close, a
    /// record of it on its last delivery would be archived), unless a batch of it waits for
    /// a retry in place or records awaiting a flush hold the next one back. Retriable errors
    /// are logged and the loop goes on after the retriable backoff. A shutdown during the
    /// initialization (the exactly-once setup retries a cluster that is not ready for up to a
    /// minute) stops it at once, and the driver closes without having started.
    ///
    /// # Cancel safety
    ///
    /// Pass the shutdown signal as `shutdown` instead of dropping this future: dropped, it
    /// cuts the current iteration short (see [`iteration`](Self::iteration)) and skips the
    /// close.
    pub async fn run(&mut self, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
        self.run_loop(shutdown, false).await
    }

    /// [`run`](Self::run), with `iteration_exactly_once` when `exactly_once` is set.
    async fn run_loop(
        &mut self,
        shutdown: impl Future<Output = ()> + Send,
        exactly_once: bool,
    ) -> Result<()> {
        let mut shutdown = pin!(shutdown);
        let result = async {
            if self.state == State::Created {
                // A shutdown during the start (the exactly-once setup may retry for up to a
                // minute) stops it: the close below settles what the dropped start left.
                tokio::select! {
                    biased;
                    () = shutdown.as_mut() => return Ok(()),
                    initialized = self.initialize() => initialized?,
                }
            }
            loop {
                if !self.drains_before_shutdown() && futures::poll!(shutdown.as_mut()).is_ready() {
                    return Ok(());
                }
                if self.redelivery.is_some() {
                    // Cancel safe: a shutdown during the backoff closes at once, which
                    // releases the held batch.
                    tokio::select! {
                        () = shutdown.as_mut() => return Ok(()),
                        () = self.wait_redelivery_backoff() => {}
                    }
                }
                if let Some(next_attempt) = self.retry.as_ref().map(|r| r.next_attempt) {
                    // So too before a retry in place: close gives the batch up (its last
                    // deliveries to the dead-letter queue) and releases it.
                    if self
                        .sleep_unless_shutdown(next_attempt, shutdown.as_mut())
                        .await
                    {
                        return Ok(());
                    }
                }
                #[cfg(feature = "exactly-once")]
                let outcome = if exactly_once {
                    self.iteration_exactly_once().await
                } else {
                    self.iteration().await
                };
                #[cfg(not(feature = "exactly-once"))]
                let outcome = {
                    let _ = exactly_once;
                    self.iteration().await
                };
                match outcome {
                    Ok(_) => {}
                    Err(e) if e.is_retriable() => {
                        tracing::warn!(error = %ErrorChain(&e), "iteration failed, retrying");
                        // A failing iteration does not hold a shutdown back, also while a
                        // poll of redelivered records drains (the cluster may be down); nor
                        // does its backoff, during which held records keep their locks.
                        let until = deadline_after(Instant::now(), self.config.retriable_backoff);
                        if self.sleep_unless_shutdown(until, shutdown.as_mut()).await {
                            return Ok(());
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        .await;
        let closed = self.close().await;
        result.and(closed)
    }

    /// `sleep_renewing` until `until`, unless `shutdown` comes first (checked first): then
    /// true. Cancel safe, as `sleep_renewing` is.
    async fn sleep_unless_shutdown<S: Future<Output = ()>>(
        &mut self,
        until: Instant,
        shutdown: Pin<&mut S>,
    ) -> bool {
        tokio::select! {
            biased;
            () = shutdown => true,
            () = self.sleep_renewing(until) => false,
        }
    }

    /// Whether `run` puts the rest of a poll that brought redelivered records before it
    /// takes a shutdown: released at close, a record of it on its last delivery would be
    /// archived. Only while its batches go through: not while one waits for a retry in
    /// place (which may last `errors.retry.timeout`, or for ever), nor once a wait for a
    /// flush found the records awaiting one still keeping the next batch from being taken.
    fn drains_before_shutdown(&self) -> bool {
        self.redelivered_arrivals.is_draining()
            && self.retry.is_none()
            && !(self.flush_stalled && self.flush_bound_reached())
    }

    /// The driver's counters.
    pub fn metrics(&self) -> DriverMetrics {
        self.metrics
    }

    /// The counters under Kafka Connect's metric names, with rates since
    /// [`initialize`](Self::initialize).
    pub fn connect_metrics(&self) -> Vec<(&'static str, f64)> {
        self.metrics.connect_metrics(self.started.elapsed())
    }

    /// Records written and waiting for `pre_commit` to call them durable
    /// (`ack.policy=after.flush`).
    pub fn awaiting_flush(&self) -> usize {
        if self.config.ack_policy == AckPolicy::AfterFlush {
            self.delivered.len()
        } else {
            0
        }
    }

    /// The consumer, for inspection.
    pub fn consumer(&self) -> &C {
        &self.consumer
    }
}

impl ShareSinkTask<crate::kafka::KafkaShareConsumer> {
    /// Everything a [`ConnectorConfig`](crate::ConnectorConfig) describes, connected: the
    /// native share consumer, the dead-letter queue when one is configured (its topic is
    /// created when missing), the converters and transforms built by `plugins`, and the
    /// driver around `task`. Call [`initialize`](Self::initialize) or [`run`](Self::run)
    /// next.
    pub async fn connect(
        config: &crate::ConnectorConfig,
        plugins: &crate::Plugins,
        task: Box<dyn SinkTask>,
    ) -> Result<Self> {
        let (consumer, driver_config) = connect_parts(config, plugins).await?;
        Ok(Self::new(task, consumer, driver_config))
    }
}

/// The native share consumer and the driver's config (with its dead-letter queue, when one
/// is configured) that `config` describes, connected: what [`ShareSinkTask::connect`] and
/// the supervisor's tasks are built from.
pub(crate) async fn connect_parts(
    config: &crate::ConnectorConfig,
    plugins: &crate::Plugins,
) -> Result<(crate::kafka::KafkaShareConsumer, DriverConfig)> {
    let mut driver_config = config.build_driver_config(plugins)?;
    if let Some(dlq) = config.dead_letter_queue_config()? {
        let context_headers = config
            .dead_letter_queue()
            .is_some_and(|s| s.context_headers());
        let queue = crate::dlq::KafkaDeadLetterQueue::connect(dlq).await?;
        driver_config = driver_config.dead_letter_queue(Arc::new(queue), context_headers);
    }
    let consumer =
        crate::kafka::KafkaShareConsumer::connect(config.kafka_consumer_config()?).await?;
    Ok((consumer, driver_config))
}

/// Queues a RENEW for each of `ids` and restarts their lock clocks; returns when each
/// renewed lock had started before, for [`HeldRecords::renewal_failed`].
fn renew<C: ShareConsumer>(
    consumer: &mut C,
    held: &mut HeldRecords,
    ids: &[RecordId],
    now: Instant,
    metrics: &mut DriverMetrics,
) -> Result<Vec<(RecordId, Instant)>> {
    let mut previous = Vec::with_capacity(ids.len());
    for id in ids {
        if settle(consumer, id, AcknowledgeType::Renew)? {
            if let Some(since) = held.since(id) {
                previous.push((id.clone(), since));
            }
            held.touch(id, now);
            metrics.records_renewed += 1;
        } else {
            // Nothing to renew, and nothing to hold; if the group delivers it again, it is
            // put again.
            held.remove(id);
        }
    }
    if !ids.is_empty() {
        tracing::debug!(records = ids.len(), "renewing acquisition locks");
    }
    Ok(previous)
}

/// Queues a RENEW for each of `ids`, records of the last poll that are not held (one the
/// consumer no longer has is skipped: the group delivers it again).
fn renew_unheld<C: ShareConsumer>(
    consumer: &mut C,
    ids: &[RecordId],
    metrics: &mut DriverMetrics,
) -> Result<()> {
    for id in ids {
        if settle(consumer, id, AcknowledgeType::Renew)? {
            metrics.records_renewed += 1;
        }
    }
    if !ids.is_empty() {
        tracing::debug!(
            records = ids.len(),
            "renewing the locks of a poll being converted"
        );
    }
    Ok(())
}

impl Unheld<'_> {
    fn is_empty(&self) -> bool {
        match self {
            Self::Hold(records) => records.is_empty(),
            Self::Renew(ids) => ids.is_empty(),
        }
    }
}

/// The driver's fields split for a wait that renews locks: what the work borrows, and the
/// [`Renewal`] that keeps records acquired meanwhile.
struct Split<'a, C> {
    task: &'a mut Box<dyn SinkTask>,
    batch: &'a [SinkRecord],
    batch_acquired: &'a mut Instant,
    delivered: &'a Delivered,
    renewal: Renewal<'a, C>,
}

impl<C: ShareConsumer> ShareSinkTask<C> {
    fn split_for_wait(&mut self, during: &'static str) -> Split<'_, C> {
        let lock = self.lock_duration();
        let Self {
            task,
            batch,
            batch_acquired,
            delivered,
            consumer,
            held,
            metrics,
            config,
            ..
        } = self;
        Split {
            task,
            batch,
            batch_acquired,
            delivered,
            renewal: Renewal {
                consumer,
                held,
                metrics,
                lock,
                commit_timeout: config.commit_timeout,
                during,
            },
        }
    }
}

/// What keeps records acquired while the driver waits on something slow (`put`,
/// `pre_commit`, a dead-letter write): the held records are renewed at half their lock, and
/// the renewals sent at once.
struct Renewal<'a, C> {
    consumer: &'a mut C,
    held: &'a mut HeldRecords,
    metrics: &'a mut DriverMetrics,
    lock: Duration,
    commit_timeout: Duration,
    /// What the wait is, for the log.
    during: &'static str,
}

/// Records of the last poll neither held nor settled, that a [`Renewal`] keeps acquired
/// beside the held ones.
enum Unheld<'b> {
    /// A batch built whole: at half its lock each record is held, and renewed as held from
    /// then on.
    Hold(&'b [SinkRecord]),
    /// A poll still being built into a batch: renewed in place, never held (the build loop
    /// takes a held record for one written already and handed again). The consumer presents
    /// them again at its next poll unless they are acknowledged before it.
    Renew(&'b [RecordId]),
}

impl<C: ShareConsumer> Renewal<'_, C> {
    /// `work`, renewing while it runs. `unheld`: records of the last poll neither held nor
    /// settled, and when their locks started; at half their lock they are renewed (see
    /// [`Unheld`]) and the instant moves to the renewal. `work` is never cut short; a
    /// renewal the consumer refuses ends the renewing (the records come back through the
    /// group when their locks run out).
    async fn around<T>(
        self,
        work: impl Future<Output = T>,
        mut unheld: Option<(Unheld<'_>, &mut Instant)>,
    ) -> T {
        let Self {
            consumer,
            held,
            metrics,
            lock,
            commit_timeout,
            during,
        } = self;
        let mut work = pin!(work);
        loop {
            let batch_due = unheld
                .as_ref()
                .filter(|(records, _)| !records.is_empty())
                .map(|(_, acquired)| held.held_off(deadline_after(**acquired, lock / 2)));
            let due = match (batch_due, held.next_due(lock)) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) | (None, Some(a)) => a,
                (None, None) => break,
            };
            tokio::select! {
                outcome = &mut work => return outcome,
                () = tokio::time::sleep_until(due) => {
                    let now = Instant::now();
                    let mut renewed = Ok(());
                    // The batch's lock start before this renewal, if it moved.
                    let mut batch_before = None;
                    if let Some((records, acquired)) = unheld.as_mut().filter(|_| batch_due.is_some_and(|d| d <= now)) {
                        match records {
                            Unheld::Hold(records) => {
                                for record in records.iter() {
                                    let id = record.original_id();
                                    if !held.contains(id) {
                                        if let Err(e) = consumer.hold_offset(id.topic(), id.partition(), id.offset()) {
                                            tracing::warn!(record = %id, during, error = %ErrorChain(&e), "cannot hold a record while waiting");
                                            continue;
                                        }
                                        held.insert(id.clone(), **acquired);
                                    }
                                }
                            }
                            Unheld::Renew(ids) => renewed = renew_unheld(consumer, ids, metrics),
                        }
                        if renewed.is_ok() {
                            batch_before = Some(**acquired);
                            **acquired = now;
                        }
                    }
                    let due = held.due(now, lock);
                    let previous = match renewed.and_then(|()| renew(consumer, held, &due, now, metrics)) {
                        Ok(previous) => previous,
                        Err(e) => {
                            tracing::warn!(during, error = %ErrorChain(&e), "cannot renew locks; the records come back through the group if their locks run out");
                            break;
                        }
                    };
                    if !commit_renewals(consumer, commit_timeout, metrics).await {
                        // The locks may not have moved: keep their old starts and try again
                        // shortly, rather than half a lock later, when they may have run out.
                        held.renewal_failed(&previous, Instant::now(), lock);
                        if let (Some((_, acquired)), Some(before)) = (unheld.as_mut(), batch_before) {
                            **acquired = before;
                        }
                    }
                }
            }
        }
        work.await
    }
}

/// The first `n` record sizes of a batch (0 for any the batch lacks).
fn sizes(batch_bytes: &[u64], n: usize) -> impl Iterator<Item = u64> + '_ {
    (0..n).map(|i| batch_bytes.get(i).copied().unwrap_or(0))
}

/// Sends queued acknowledgements (renewals) at once; failures are logged, never returned:
/// a record whose renewal failed comes back through the group. False when the commit itself
/// failed (a timeout, a lost connection), so that the renewals may not have taken.
async fn commit_renewals<C: ShareConsumer>(
    consumer: &mut C,
    timeout: Duration,
    metrics: &mut DriverMetrics,
) -> bool {
    match consumer.commit_sync(timeout).await {
        Ok(results) => {
            count_failures(&results, metrics);
            true
        }
        Err(e) => {
            tracing::warn!(error = %ErrorChain(&e), "could not send lock renewals; trying again shortly");
            false
        }
    }
}

/// ACCEPTs the record `id` of the last poll; false when the consumer no longer has it (see
/// [`settle`]).
fn accept<C: ShareConsumer>(consumer: &mut C, id: &RecordId) -> Result<bool> {
    settle(consumer, id, AcknowledgeType::Accept)
}

/// `future`, a call of the task's `method`, with a panic in it caught as the fatal
/// [`TaskError`] that stands for it ([`TaskError::panicked`]). The driver does not call the
/// task again after one, but `close` (its `stop`).
pub(crate) async fn caught<F, T>(
    method: &'static str,
    future: F,
) -> std::result::Result<T, TaskError>
where
    F: Future<Output = std::result::Result<T, TaskError>>,
{
    use futures::FutureExt;
    std::panic::AssertUnwindSafe(future)
        .catch_unwind()
        .await
        .unwrap_or_else(|payload| Err(TaskError::from_panic(method, &*payload)))
}

/// Acknowledges `id` with `ack`; false when the consumer no longer has it (its lock was lost
/// and the group may deliver it again, or it was settled already): nothing to do.
fn settle<C: ShareConsumer>(consumer: &mut C, id: &RecordId, ack: AcknowledgeType) -> Result<bool> {
    match consumer.acknowledge_offset(id.topic(), id.partition(), id.offset(), ack) {
        Ok(()) => Ok(true),
        Err(e) if e.is_not_held() => {
            tracing::debug!(record = %id, ?ack, error = %ErrorChain(&e), "no longer ours; not acknowledged");
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

fn count_failures(results: &CommitResults, metrics: &mut DriverMetrics) {
    for (partition, error) in results.failures() {
        metrics.commit_partition_failures += 1;
        if error.is_lock_lost() {
            metrics.lock_losses += 1;
        }
        tracing::warn!(%partition, %error, "acknowledgements not committed; the records will be delivered again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::TaskError;

    #[test]
    fn error_chain_shows_every_cause_once() {
        let err = Error::Task {
            stage: TaskStage::Put,
            source: TaskError::fatal("disk full"),
        };
        assert_eq!(
            ErrorChain(&err).to_string(),
            "sink task failed in put: fatal sink task error: disk full"
        );
    }
}
