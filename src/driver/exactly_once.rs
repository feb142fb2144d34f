//! The exactly-once iteration (feature `exactly-once`).
//!
//! One iteration, in ledger mode (Kafka 4.2–4.4):
//!
//! ```text
//! poll ─▶ check: redelivered (count > 1, or appended under an older leader epoch)?
//!           └─ yes: read the ledger partition read_committed up to its high watermark
//!              sampled now; already claimed ─▶ ACCEPT, not processed again
//!      ─▶ convert, transform ─▶ put_transactional
//!      ─▶ begin ─▶ send outputs + dead letters + one claim per source partition ─▶ flush
//!      ─▶ RENEW every finished record (abort if any renewal fails: the lock was lost)
//!      ─▶ commit ─▶ ACCEPT (REJECT the dead-lettered ones), sent at once; their outcome is
//!         taken before the next renewal
//! ```
//!
//! With KIP-1289 (atomic acknowledgements), the RENEW, the claims and the ACCEPT after the
//! commit give way to acknowledgements staged into the transaction right after the sends.
//!
//! Where a process can die: before the commit, the transaction is aborted by its
//! coordinator (or fenced by the restarted task) and the records come back; after it, they
//! come back with a higher delivery count (or, after a leader change, from before the
//! current leader epoch), are found claimed, and are accepted without new outputs.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::dead_letter::GivenUp;
use super::failure::{Captured, Failure};
use super::pipeline::Converting;
use super::target_watch::{confirmed_partition_count, watch_targets};
use super::{ErrorChain, ErrorTolerance, IterationReport, ShareSinkTask, State, caught};
use crate::consumer::{
    AcknowledgeType, AcknowledgementMode, ConsumerCapabilities, ConsumerCapability, ConsumerError,
    ShareConsumer,
};
use crate::convert::StageFailure;
use crate::dlq::{DeadLetterReason, ErrorContext};
use crate::error::{Error, Result, TaskError, TaskStage};
use crate::exactly_once::ledger::Ledger;
use crate::exactly_once::{
    ClusterCapabilities, ExactlyOnceCluster, ExactlyOnceConfig, ExactlyOnceError, ExactlyOnceMode,
    ModePreference, OutputFailure, OutputTarget, RefusedOutput, TransactionalOutput, choose_mode,
    transactional_id,
};
use crate::kafka::error::ClientError;
use crate::producer::{DeliveryFuture, Producer, ProducerError, ProducerRecord};
use crate::record::{ConsumerRecord, RecordId, SinkRecord, TopicPartition};
use crate::stage::Stage;

/// A driver's exactly-once setup: the transactional producer, the cluster side, the settings,
/// and what `initialize` found (the mode, the ledger).
#[derive(Debug)]
pub(crate) struct ExactlyOnce {
    producer: Arc<dyn Producer>,
    cluster: Arc<dyn ExactlyOnceCluster>,
    config: ExactlyOnceConfig,
    mode: Option<ExactlyOnceMode>,
    ledger: Option<Ledger>,
    transactional_id: String,
    /// The producer must (re)initialize before the next transaction: at start, and after a
    /// commit whose outcome is unknown.
    needs_init: bool,
    /// The ACCEPTs after the last commit (ledger mode), sent at once so that the group
    /// persists them while the next transaction is sent; the next renewal takes their outcome.
    accepts: Option<crate::consumer::PendingCommit>,
}

impl ExactlyOnce {
    /// Initializes the producer if it must be (`needs_init`), once: it refuses a second
    /// `init_transactions` while no transaction is open.
    async fn init_if_needed(&mut self) -> std::result::Result<(), ProducerError> {
        if self.needs_init {
            self.producer.init_transactions().await?;
            self.needs_init = false;
        }
        Ok(())
    }
}

/// A record that went into the transaction, and how it is settled after the commit.
struct Finished {
    id: RecordId,
    ack: AcknowledgeType,
    /// The delivery the record is on.
    delivery: u16,
}

impl From<&Finished> for GivenUp {
    fn from(f: &Finished) -> Self {
        Self {
            id: f.id.clone(),
            delivery: f.delivery,
        }
    }
}

/// Records settled by one transaction: those put (`processed`, with their converted form in
/// `batch`, index for index) and those dead-lettered.
struct Unit {
    processed: Vec<ConsumerRecord>,
    batch: Vec<SinkRecord>,
    dead: Vec<(ConsumerRecord, Failure)>,
}

/// A fatal `put_transactional` error, held while the unit's last deliveries are written to
/// the dead-letter queue.
struct Stop {
    error: TaskError,
}

/// Whether a unit calls `put_transactional`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Put {
    /// Even with no record (as Connect calls `put` with an empty batch): a round's unit.
    Always,
    /// Only when it has records to put.
    IfAny,
}

/// How a unit ended without stopping the driver.
enum Settled {
    /// Committed, and its records settled.
    Committed,
    /// Not committed; its records were released (they are delivered again).
    Released,
    /// An output was refused for itself under `errors.tolerance=all`: the transaction was
    /// aborted and the unit's records are still held, to be isolated.
    Refused { unit: Unit, refused: RefusedOutput },
}

/// The lock duration assumed when the consumer does not know it (the group default).
const DEFAULT_LOCK: Duration = Duration::from_secs(30);

/// When the records waiting for their own transaction in an isolation are renewed next.
struct LockKeeper {
    due: Instant,
    every: Duration,
}

impl LockKeeper {
    /// Renewals every third of the lock, the first a third of the lock after the poll: well
    /// before a lock runs out, even after a transaction that took a while.
    fn new(polled: Instant, lock: Option<Duration>) -> Self {
        let every = lock
            .unwrap_or(DEFAULT_LOCK)
            .checked_div(3)
            .unwrap_or(Duration::ZERO);
        Self {
            due: polled.checked_add(every).unwrap_or(polled),
            every,
        }
    }

    /// A renewal's commit failed: the locks may not have moved, so the next renewal comes
    /// after [`RENEWAL_RETRY`](super::held::RENEWAL_RETRY) (half the interval if shorter),
    /// not a whole interval later.
    fn retry_soon(&mut self, now: Instant) {
        let wait = super::held::RENEWAL_RETRY.min(self.every / 2);
        self.due = crate::time::deadline_after(now, wait);
    }
}

/// Why the record whose output was refused is dead-lettered, for its
/// `__connect.errors.*` headers: stage `KAFKA_PRODUCE`, the sink task's class (the output is
/// the task's), the exception Kafka's producer raises, and the producer's error as the cause.
fn refused_output_failure(refused: &RefusedOutput) -> Failure {
    let exception_class = OutputFailure::java_exception(&refused.source);
    // RecordTooLargeException, RecordBatchTooLargeException.
    let reason = if exception_class.contains("TooLarge") {
        DeadLetterReason::RecordTooLarge
    } else {
        DeadLetterReason::OutputRefused
    };
    Failure {
        stage: Stage::KafkaProduce,
        class_name: ErrorContext::CONNECT_SINK_TASK_CLASS.to_owned(),
        exception_class,
        error: Captured::of(refused),
        reason,
    }
}

/// How long `initialize` tries the exactly-once setup again after retriable failures (Java's
/// admin client: `default.api.timeout.ms`, 60 s).
const SETUP_RETRY_TIMEOUT: Duration = Duration::from_secs(60);
/// The first pause before the setup is tried again; it doubles up to [`SETUP_BACKOFF_MAX`].
const SETUP_BACKOFF_FIRST: Duration = Duration::from_millis(100);
/// The longest pause between two tries of the setup.
const SETUP_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Whether a failed setup is tried again: a retriable error, but of the producer only one
/// retrying may fix (the iteration also counts as retriable what needs an abort, which a
/// setup has none of: a refused version, say, would fail every try), and of a cluster request
/// only what its own error says is retriable (the iteration retries any failed cluster
/// request; refused credentials or an unsupported request would fail every try of a setup).
fn set_up_again(error: &Error) -> bool {
    match error {
        Error::ExactlyOnce(ExactlyOnceError::Producer(e)) => {
            e.is_retriable() && error.is_retriable()
        }
        Error::ExactlyOnce(ExactlyOnceError::Cluster { source, .. }) => {
            if let Some(e) = source.downcast_ref::<crate::kafka::admin::AdminError>() {
                e.is_retriable()
            } else if let Some(e) = source.downcast_ref::<ProducerError>() {
                e.is_retriable()
            } else if let Some(e) = source.downcast_ref::<ClientError>() {
                e.is_retriable()
            } else {
                // Another cluster implementation's error: the variant says retriable.
                true
            }
        }
        other => other.is_retriable(),
    }
}

/// One try of the exactly-once setup of `initialize`: the checks, the mode, the ledger, the
/// producer's epoch and the fencing of orphans.
async fn set_up(
    eos: &mut ExactlyOnce,
    group: &str,
    implicit: bool,
    consumer_capabilities: ConsumerCapabilities,
    topics: &[String],
    outputs: &[(String, Vec<OutputTarget>)],
) -> Result<()> {
    eos.config.validate()?;
    if implicit {
        return Err(Error::Config {
            key: "share.acknowledgement.mode",
            reason: "the exactly-once iteration settles records one by one after its \
                     transaction: use explicit acknowledgement"
                .to_owned(),
        });
    }
    let Some(id) = eos.producer.transactional_id().map(str::to_owned) else {
        return Err(ExactlyOnceError::Config {
            key: "transactional.id",
            reason: format!(
                "the exactly-once iteration needs a transactional producer: set \
                 transactional.id={}",
                eos.config.transactional_id()
            ),
        }
        .into());
    };
    if id != eos.config.transactional_id() {
        tracing::warn!(
            transactional_id = %id,
            expected = %eos.config.transactional_id(),
            "the producer's transactional.id is not <connector>-eos-<task>: a restarted \
             task fences its predecessor only if it keeps the same id"
        );
    }
    // What an earlier try chose is chosen again (the cluster may answer otherwise now).
    eos.ledger = None;
    eos.mode = None;
    check_targets(&*eos.cluster, outputs).await?;
    let capabilities = eos.cluster.capabilities(group).await?;
    let mode = choose_mode(&capabilities, eos.config.mode)
        .map_err(|capability| ExactlyOnceError::MissingCapability { capability })?;
    let mode = fit_mode_to_consumer(mode, eos.config.mode, &capabilities, consumer_capabilities)?;
    if mode == ExactlyOnceMode::Ledger {
        eos.ledger = Some(prepare_ledger(&*eos.cluster, &eos.config, topics).await?);
    }
    // A later try (after the fencing failed, say) finds the producer initialized.
    eos.init_if_needed()
        .await
        .map_err(ExactlyOnceError::Producer)?;
    if eos.config.fence_orphans && eos.config.task_id == 0 {
        fence_orphans(&*eos.cluster, &eos.config).await?;
    }
    eos.mode = Some(mode);
    tracing::info!(
        %mode,
        transactional_id = %id,
        ledger = eos.ledger.as_ref().map(Ledger::topic),
        strict = eos.config.strict,
        ?capabilities,
        "exactly-once iteration ready"
    );
    Ok(())
}

/// The mode chosen for the cluster, checked against what the consumer can do (see
/// [`ShareConsumer#capabilities`]): atomic acknowledgements need
/// [`ConsumerCapability::TransactionalAcknowledgements`] (under `exactly.once.mode=auto` the
/// ledger is used instead when the cluster allows it); the ledger needs
/// [`ConsumerCapability::Hold`] and [`ConsumerCapability::Renew`].
fn fit_mode_to_consumer(
    mode: ExactlyOnceMode,
    preference: ModePreference,
    cluster: &ClusterCapabilities,
    consumer: ConsumerCapabilities,
) -> Result<ExactlyOnceMode> {
    let mut mode = mode;
    if mode == ExactlyOnceMode::AtomicAcknowledgements
        && !consumer.contains(ConsumerCapability::TransactionalAcknowledgements)
    {
        if preference == ModePreference::Auto && cluster.ledger_missing().is_none() {
            tracing::info!(
                "the cluster has atomic acknowledgements (KIP-1289) but the share consumer cannot \
                 stage its acknowledgements into a transaction: using the ledger"
            );
            mode = ExactlyOnceMode::Ledger;
        } else {
            return Err(Error::MissingCapability {
                capability: ConsumerCapability::TransactionalAcknowledgements,
                needed_by: if preference == ModePreference::Atomic {
                    "exactly.once.mode=atomic"
                } else {
                    "exactly-once delivery on this cluster (it has atomic acknowledgements, but \
                     lacks what the ledger mode needs)"
                },
            });
        }
    }
    if mode == ExactlyOnceMode::Ledger {
        if let Some(capability) =
            consumer.missing(&[ConsumerCapability::Hold, ConsumerCapability::Renew])
        {
            return Err(Error::MissingCapability {
                capability,
                needed_by: if preference == ModePreference::Ledger {
                    "exactly.once.mode=ledger"
                } else {
                    "the exactly-once ledger mode (chosen by exactly.once.mode=auto)"
                },
            });
        }
    }
    Ok(mode)
}

impl<C: ShareConsumer> ShareSinkTask<C> {
    /// Sets the driver up for the exactly-once iteration: `producer` must be transactional
    /// (its `transactional.id` should be [`ExactlyOnceConfig::transactional_id`]), `cluster`
    /// answers what the iteration asks of the cluster besides consuming and producing
    /// ([`KafkaExactlyOnceCluster`](crate::exactly_once::KafkaExactlyOnceCluster), or the
    /// [`EmbeddedBroker`](crate::embedded::EmbeddedBroker)). [`initialize`](Self::initialize)
    /// then chooses the mode; call
    /// [`iteration_exactly_once`](Self::iteration_exactly_once) (or
    /// [`run_exactly_once`](Self::run_exactly_once)) instead of `iteration`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, GroupConfig, ProduceRecord};
    /// use kafka_share_sink::exactly_once::{ExactlyOnceConfig, MirrorTask};
    /// use kafka_share_sink::{DriverConfig, ShareSinkTask};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let broker = EmbeddedBroker::new();
    /// broker.create_topic("orders", 1)?;
    /// broker.create_topic("backup.orders", 1)?;
    /// broker.set_group_config("mirror", GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest))?;
    /// broker.produce("orders", ProduceRecord::new().value("o1"))?;
    ///
    /// let eos = ExactlyOnceConfig::new("mirror", 0, 1);
    /// let producer = broker.transactional_producer(&eos.transactional_id())?;
    /// let config = DriverConfig::new(["orders"]).poll_timeout(Duration::from_millis(10));
    /// let mut driver = ShareSinkTask::new(
    ///     Box::new(MirrorTask::with_prefix("backup.")),
    ///     broker.share_consumer("mirror"),
    ///     config,
    /// )
    /// .with_exactly_once(Arc::new(producer), Arc::new(broker.clone()), eos);
    /// driver.initialize().await?;
    /// let report = driver.iteration_exactly_once().await?;
    /// assert_eq!(report.accepted, 1);
    /// driver.close().await?;
    /// # Ok(()) }
    /// ```
    pub fn with_exactly_once(
        mut self,
        producer: Arc<dyn Producer>,
        cluster: Arc<dyn ExactlyOnceCluster>,
        config: ExactlyOnceConfig,
    ) -> Self {
        let transactional_id = producer
            .transactional_id()
            .map_or_else(|| config.transactional_id(), str::to_owned);
        self.exactly_once = Some(Box::new(ExactlyOnce {
            producer,
            cluster,
            config,
            mode: None,
            ledger: None,
            transactional_id,
            needs_init: true,
            accepts: None,
        }));
        self
    }

    /// The exactly-once mode chosen at [`initialize`](Self::initialize); `None` before, or
    /// without [`with_exactly_once`](Self::with_exactly_once).
    pub fn exactly_once_mode(&self) -> Option<ExactlyOnceMode> {
        self.exactly_once.as_ref().and_then(|e| e.mode)
    }

    pub(super) fn is_exactly_once(&self) -> bool {
        self.exactly_once.is_some()
    }

    /// Checks the cluster and the settings, chooses the mode, prepares the ledger and the
    /// producer, and fences the orphans of a shrunk task count.
    pub(super) async fn initialize_exactly_once(&mut self) -> Result<()> {
        let group = self.consumer.group_metadata().group_id().to_owned();
        let implicit = self.consumer.acknowledgement_mode() == AcknowledgementMode::Implicit;
        let consumer_capabilities = self.consumer.capabilities();
        let topics = self.config.topics.clone();
        let outputs: Vec<(String, Vec<OutputTarget>)> = topics
            .iter()
            .map(|t| (t.clone(), self.task.transactional_outputs(t)))
            .collect();
        let mut eos = self.exactly_once.take().ok_or(Error::NotInitialized)?;
        // Dropped from here on, the driver has no exactly-once setup: it must not pass for a
        // driver without one (a second initialize, then iteration() at least once). Running
        // once initialize has finished; Failed when it fails.
        self.state = State::Failed;
        // A retriable failure (a broker killed a moment ago, a coordinator moving) is tried
        // again, the whole setup (each step may be repeated: reads, a ledger topic created if
        // missing, the producer initialized if it is not yet, fencing), until
        // SETUP_RETRY_TIMEOUT has passed, as Java's admin client retries a call until its
        // default.api.timeout.ms (one try may itself wait up to the request timeout).
        let deadline = crate::time::deadline_after(Instant::now(), SETUP_RETRY_TIMEOUT);
        let mut backoff = SETUP_BACKOFF_FIRST;
        let result = loop {
            // Nothing of `self` is borrowed inside: the future stays Send for any consumer.
            let attempt = set_up(
                &mut eos,
                &group,
                implicit,
                consumer_capabilities,
                &topics,
                &outputs,
            )
            .await;
            match attempt {
                Err(error) if set_up_again(&error) => {
                    let again = crate::time::deadline_after(Instant::now(), backoff);
                    if again >= deadline {
                        break Err(error);
                    }
                    tracing::warn!(error = %ErrorChain(&error), ?backoff, "exactly-once setup failed; trying again");
                    tokio::time::sleep_until(again).await;
                    backoff = backoff.saturating_mul(2).min(SETUP_BACKOFF_MAX);
                }
                other => break other,
            }
        };
        self.exactly_once = Some(eos);
        result
    }

    /// One exactly-once round: poll → (ledger mode: skip what is already claimed) → convert →
    /// [`put_transactional`](crate::SinkTask::put_transactional) → one transaction with the
    /// outputs and what settles the batch → settle. See the [module
    /// documentation](crate::exactly_once) and the README for the guarantee and its
    /// exceptions.
    ///
    /// A retriable error of the task, the producer or a lost lock aborts the transaction and
    /// releases the batch (it is delivered again and checked); it is reported, not returned.
    /// A fenced producer (another instance with the same transactional id took over) and a
    /// fatal task error stop the driver. So does an output that retrying cannot write (the
    /// target has no such partition, the topic is gone, writing it is not authorized, or,
    /// under `errors.tolerance=none`, a record is too large or invalid): the transaction is
    /// aborted, the batch released — not delivered again until the broker archives it at the
    /// delivery-count limit — and [`ExactlyOnceError::OutputRefused`] names the topic and
    /// partition.
    ///
    /// Under `errors.tolerance=all` an output record refused for itself (larger than
    /// `max.request.size` or the topic's `max.message.bytes`, invalid, a timestamp out of
    /// range) does not stop the task. The error does not say which source record the output
    /// came from, so after the abort the driver processes the batch again one record per
    /// transaction (each with its claim or staged acknowledgement, as any transaction), and
    /// dead-letters the source record whose outputs are refused in a transaction of its own
    /// (REJECTed after it, with `__connect.errors.stage` `KAFKA_PRODUCE` and the producer's
    /// error in the headers; without a dead-letter queue it is only REJECTed, as any record
    /// skipped under `all`). The records waiting for their turn are renewed every third of
    /// the lock duration; one whose lock is lost nevertheless is counted in
    /// [`lock_losses`](crate::DriverMetrics::lock_losses) and delivered again later.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped mid-way, the open transaction is aborted by its coordinator
    /// after `transaction.timeout.ms` (or when the task starts again), the records come back,
    /// and nothing is lost or duplicated; but this driver fails from then on
    /// ([`Error::Failed`]): close it and build a new one. Use
    /// [`run_exactly_once`](Self::run_exactly_once) to stop on a signal.
    pub async fn iteration_exactly_once(&mut self) -> Result<IterationReport> {
        match self.state {
            State::Running => {}
            State::Created => return Err(Error::NotInitialized),
            State::Failed => return Err(Error::Failed),
            State::Closed => return Err(Error::Closed),
        }
        let Some(mut eos) = self.exactly_once.take() else {
            return Err(Error::Config {
                key: "exactly.once",
                reason: "this driver has no exactly-once setup: call with_exactly_once before \
                         initialize, or use iteration()"
                    .to_owned(),
            });
        };
        // Until the round ends the driver counts as failed: a round dropped half-way leaves
        // a transaction and records this driver can no longer account for.
        self.state = State::Failed;
        let span = tracing::debug_span!(
            "iteration_exactly_once",
            group = %self.consumer.group_metadata().group_id(),
            mode = ?eos.mode,
            records = tracing::field::Empty,
        );
        let result = tracing::Instrument::instrument(self.round(&mut eos), span).await;
        self.exactly_once = Some(eos);
        self.observe_dead_letter_breaker();
        self.export_metrics();
        self.state = match &result {
            Err(error) if !error.is_retriable() => State::Failed,
            _ => State::Running,
        };
        result
    }

    /// [`run`](Self::run) with [`iteration_exactly_once`](Self::iteration_exactly_once):
    /// initializes if needed, iterates until `shutdown` completes or a fatal error, and
    /// closes in both cases.
    ///
    /// # Cancel safety
    ///
    /// Pass the shutdown signal as `shutdown` instead of dropping this future: dropped, it
    /// cuts the current iteration short and skips the close (nothing is lost or duplicated).
    pub async fn run_exactly_once(
        &mut self,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<()> {
        self.run_loop(shutdown, true).await
    }

    async fn round(&mut self, eos: &mut ExactlyOnce) -> Result<IterationReport> {
        let mut report = IterationReport::default();
        let mode = eos.mode.ok_or(Error::NotInitialized)?;
        eos.init_if_needed()
            .await
            .map_err(ExactlyOnceError::Producer)?;
        if let Some(ledger) = eos.ledger.as_mut() {
            if ledger.prune_due(eos.config.prune_interval) {
                prune(
                    ledger,
                    &*eos.cluster,
                    self.consumer.group_metadata().group_id(),
                    &self.config.topics,
                )
                .await;
            }
        }
        let poll_started = Instant::now();
        let records = self.poll_consumer().await?;
        let polled = Instant::now();
        // For renewals during conversion retries.
        self.note_poll_acquired(poll_started);
        self.metrics.records_read += records.len() as u64;
        let last_delivery = self.last_delivery_limit();
        let last = records
            .iter()
            .filter(|r| r.delivery_count() >= last_delivery)
            .count();
        self.metrics.records_last_delivery += last as u64;
        report.last_delivery += last;
        tracing::Span::current().record("records", records.len());
        if records.is_empty() {
            self.commit_if_due(&mut report).await?;
            return Ok(report);
        }
        let mut records = records;
        if let Some(ledger) = eos.ledger.as_mut() {
            let claimed = self
                .settle_claimed(
                    ledger,
                    &*eos.cluster,
                    eos.config.strict,
                    eos.config.barrier_timeout,
                    &mut records,
                )
                .await;
            match claimed {
                Ok(n) => report.accepted += n,
                Err(error) => {
                    // The check could not finish: process nothing unchecked.
                    self.release_all(records.iter().map(GivenUp::from), &mut report)?;
                    return Err(error.into());
                }
            }
        }

        // Convert and transform, as the at-least-once iteration does.
        let mut batch: Vec<SinkRecord> = Vec::with_capacity(records.len());
        let mut raw: Vec<ConsumerRecord> = Vec::with_capacity(records.len());
        let mut failed: Vec<(ConsumerRecord, StageFailure)> = Vec::new();
        let mut records = records.into_iter();
        while let Some(record) = records.next() {
            if record.delivery_count() > 1 {
                self.metrics.records_redelivered += 1;
            }
            let poll = Converting {
                batch: false,
                converted: &raw,
                failed: &failed,
                rest: records.as_slice(),
            };
            match self.process(&record, poll).await {
                Ok(Some(sink)) => {
                    batch.push(sink);
                    raw.push(record);
                }
                Ok(None) => {
                    // No output either way: accepted at once.
                    self.metrics.records_filtered += 1;
                    report.filtered += 1;
                    report.accepted += 1;
                    self.acknowledged_since_commit += 1;
                    self.consumer
                        .acknowledge(&record, AcknowledgeType::Accept)?;
                }
                Err(failure) => {
                    self.metrics.record_errors += 1;
                    self.log_error(&record, &failure);
                    if self.config.errors.tolerance == ErrorTolerance::None {
                        let rest: Vec<ConsumerRecord> = raw.drain(..).chain(records).collect();
                        self.batch.clear();
                        return Err(self.stop_on_record_error(record, failure, rest).await);
                    }
                    failed.push((record, failure));
                }
            }
        }
        report.records = batch.len();
        let dead: Vec<(ConsumerRecord, Failure)> = failed
            .into_iter()
            .map(|(r, f)| {
                let failure = Failure::of_stage(&f);
                (r, failure)
            })
            .collect();
        let unit = Unit {
            processed: raw,
            batch,
            dead,
        };
        match self
            .settle_unit(eos, mode, unit, Put::Always, &mut report)
            .await?
        {
            Settled::Committed => {}
            Settled::Released => return Ok(report),
            Settled::Refused { unit, refused } => {
                if !self
                    .isolate(eos, mode, unit, refused, polled, &mut report)
                    .await?
                {
                    return Ok(report);
                }
            }
        }
        self.commit_if_due(&mut report).await?;
        Ok(report)
    }

    /// Puts `unit`'s records (as `put` says), and writes their outputs, its dead letters and
    /// what settles them in one transaction; settles them after its commit.
    ///
    /// `Err` stops the driver; the unit's records were released (or are the group's again
    /// through the abort). [`Settled::Refused`] hands the unit back, still held, when an
    /// output was refused for itself under `errors.tolerance=all`. A fatal `put` error
    /// releases the unit and stops the driver; with a dead-letter queue, the unit's records
    /// on their last delivery are first written to it in a transaction of their own
    /// (released, the group would archive them).
    async fn settle_unit(
        &mut self,
        eos: &mut ExactlyOnce,
        mode: ExactlyOnceMode,
        unit: Unit,
        put: Put,
        report: &mut IterationReport,
    ) -> Result<Settled> {
        let mut stop = None;
        let settled = self
            .settle_unit_or_stop(eos, mode, unit, put, report, &mut stop)
            .await;
        let Some(Stop { error }) = stop else {
            return settled;
        };
        // `put_transactional` failed fatally: the unit was released, its last deliveries (if
        // any) went to the dead-letter queue in a transaction of their own. Whatever became
        // of it, the driver stops with the task's error (or the breaker's, had it tripped).
        if let Some(tripped) = self.after_last_letters(settled, report).await? {
            return Err(tripped);
        }
        Err(Error::Task {
            stage: TaskStage::Put,
            source: error,
        })
    }

    /// After the transaction that dead-letters the last deliveries of a task that stops
    /// (`settled`, its outcome): releases what it left held (a record released on its last
    /// delivery is counted where it is released), and commits the releases. Returns a tripped
    /// dead-letter breaker's error, which stops the driver in the task error's place.
    async fn after_last_letters(
        &mut self,
        settled: Result<Settled>,
        report: &mut IterationReport,
    ) -> Result<Option<Error>> {
        let tripped = match settled {
            Ok(Settled::Committed | Settled::Released) => None,
            Ok(Settled::Refused { unit, refused }) => {
                tracing::error!(error = %ErrorChain(&refused.source), "a dead letter was refused");
                let given_up = unit.dead.iter().map(|(r, _)| r.into());
                self.release_all(given_up, report)?;
                None
            }
            Err(e @ Error::DeadLetterBreaker(_)) => Some(e),
            Err(e) => {
                tracing::error!(error = %ErrorChain(&e), "could not write the dead letters");
                None
            }
        };
        if let Err(e) = self.commit_acknowledgements().await {
            tracing::warn!(error = %ErrorChain(&e), "could not commit the releases");
        }
        Ok(tripped)
    }

    /// Atomic mode, before a transaction that follows releases: a transaction carries only
    /// ACCEPT and REJECT, so the RELEASEs are committed first.
    async fn commit_releases_before_transaction(&mut self, mode: ExactlyOnceMode) {
        if mode != ExactlyOnceMode::AtomicAcknowledgements {
            return;
        }
        if let Err(e) = self.commit_acknowledgements().await {
            tracing::warn!(error = %ErrorChain(&e), "could not commit the releases before the transaction");
        }
    }

    /// [`settle_unit`](Self::settle_unit); after a fatal `put` error, writes only the unit's
    /// last deliveries to the dead-letter queue (when it has one and they have any) and
    /// leaves the error in `stop`.
    async fn settle_unit_or_stop(
        &mut self,
        eos: &mut ExactlyOnce,
        mode: ExactlyOnceMode,
        unit: Unit,
        put: Put,
        report: &mut IterationReport,
        stop: &mut Option<Stop>,
    ) -> Result<Settled> {
        let Unit {
            mut processed,
            batch,
            mut dead,
        } = unit;
        let mut output = TransactionalOutput::new();
        if put == Put::Always || !batch.is_empty() {
            let started = Instant::now();
            let result = caught(
                "put_transactional",
                self.task.put_transactional(&batch, &mut output),
            )
            .await;
            let elapsed = started.elapsed();
            if let Err(error) = result {
                self.metrics.put_failures += 1;
                if !error.is_retriable() {
                    tracing::error!(records = processed.len() + dead.len(), error = %ErrorChain(&error), "put_transactional failed fatally; releasing the batch and stopping");
                    dead = self.release_on_fatal(processed.drain(..), dead, &error, report)?;
                    *stop = Some(Stop { error });
                    if dead.is_empty() {
                        return Ok(Settled::Released);
                    }
                    // Those on their last delivery are dead-lettered in a transaction of
                    // their own (nothing the task staged goes with them); then the driver
                    // stops.
                    self.commit_releases_before_transaction(mode).await;
                    output = TransactionalOutput::new();
                } else {
                    // Released for another attempt, except records on their last allowed
                    // delivery when a dead-letter queue is set: released, the group would archive
                    // them (lost), so they are dead-lettered in this transaction instead.
                    let failure = Failure::of_put(&error, DeadLetterReason::DeliveryLimit);
                    let (letters, released) = self.split_last_deliveries(
                        processed.drain(..).map(|r| (r, None)),
                        self.last_delivery_limit(),
                        &failure,
                    );
                    dead.extend(letters);
                    tracing::warn!(records = released.len(), last_delivery = dead.len(), error = %ErrorChain(&error), "put_transactional failed; releasing the batch");
                    let any_released = !released.is_empty();
                    self.release_all(released.into_iter(), report)?;
                    if dead.is_empty() {
                        tokio::time::sleep(
                            error.backoff().unwrap_or(self.config.retriable_backoff),
                        )
                        .await;
                        return Ok(Settled::Released);
                    }
                    if any_released {
                        self.commit_releases_before_transaction(mode).await;
                    }
                    output = TransactionalOutput::new();
                }
            } else {
                self.metrics.put_batches += 1;
                self.metrics.put_time_total += elapsed;
                self.metrics.put_time_max = self.metrics.put_time_max.max(elapsed);
            }
        }

        // What goes into the transaction.
        let mut sends: Vec<ProducerRecord> = output.take();
        let outputs = sends.len();
        let mut finished: Vec<Finished> = processed
            .iter()
            .map(|r| Finished {
                id: r.id(),
                ack: AcknowledgeType::Accept,
                delivery: r.delivery_count(),
            })
            .collect();
        let mut dead_lettered = 0;
        if !dead.is_empty() {
            if let Err(tripped) = self.admit_dead_letters(dead.len()) {
                // Nothing of the unit is written: all of it is released.
                let given_up = processed
                    .iter()
                    .chain(dead.iter().map(|(r, _)| r))
                    .map(GivenUp::from)
                    .collect();
                return Err(self.trip_dead_letter_breaker(tripped, given_up).await);
            }
            // One home: a record in the queue of its own is ACCEPTed after the commit (see
            // `acknowledgement_after_dead_letter`); without one, REJECTed.
            let mut ack = AcknowledgeType::Reject;
            if let Some(queue) = self.config.dead_letter.clone() {
                for letter in self.dead_letters(&dead) {
                    sends.push(letter.into_producer_record(queue.topic()));
                }
                self.metrics.dlq_produce_requests += dead.len() as u64;
                dead_lettered = dead.len();
                ack = self.acknowledgement_after_dead_letter();
            }
            finished.extend(dead.iter().map(|(r, _)| Finished {
                id: r.id(),
                ack,
                delivery: r.delivery_count(),
            }));
        }
        match self.transact(eos, mode, sends, &finished).await {
            Ok(()) => {
                self.metrics.transactions_committed += 1;
                self.metrics.records_put += processed.len() as u64;
                self.metrics.records_dead_lettered += dead_lettered as u64;
                // Counted once committed: an aborted transaction's records come back.
                self.metrics.records_skipped += dead.len() as u64;
                report.dead_lettered += dead_lettered;
                let mut rejected = 0;
                let mut settled = 0;
                for (i, f) in finished.iter().enumerate() {
                    // A record the consumer no longer has (its lock ran out after the renewal,
                    // its session was reset) is skipped: its claim is committed, so the
                    // ledger check ACCEPTs it when the group delivers it again.
                    if mode == ExactlyOnceMode::Ledger
                        && !super::settle(&mut self.consumer, &f.id, f.ack)?
                    {
                        if f.ack == AcknowledgeType::Reject {
                            // The claim does not say REJECT: the record the task gave up on
                            // is accepted when it comes back, and reaches no broker
                            // dead-letter queue. Say so where it can be found.
                            tracing::warn!(
                                record = %f.id,
                                "a record given up on (put failed) could not be rejected after \
                                 its transaction committed: the consumer no longer holds it; \
                                 delivered again, it is accepted by its claim in the ledger"
                            );
                        }
                        continue;
                    }
                    settled += 1;
                    match f.ack {
                        AcknowledgeType::Reject => rejected += 1,
                        // The dead-lettered ones (after the processed ones) are counted as
                        // such, not as accepted.
                        _ if i >= processed.len() => {}
                        _ => report.accepted += 1,
                    }
                }
                if mode == ExactlyOnceMode::Ledger && !finished.is_empty() {
                    // Sent now, not with the next poll: the group persists them (a share-state
                    // write) while the next transaction is sent, instead of inside its
                    // renewal. Their outcome is taken before that renewal (or at the next
                    // commit of acknowledgements, or at close).
                    if let Some(earlier) = eos.accepts.take() {
                        self.settle_accepts(earlier).await;
                    }
                    match self.consumer.commit_async() {
                        Ok(pending) => eos.accepts = Some(pending),
                        Err(e) => {
                            tracing::debug!(error = %ErrorChain(&e), "the ACCEPTs go with the next poll");
                        }
                    }
                }
                report.rejected += rejected;
                self.metrics.records_rejected += rejected as u64;
                // Atomic mode staged every acknowledgement in the transaction.
                if mode != ExactlyOnceMode::Ledger {
                    settled = finished.len();
                }
                self.acknowledged_since_commit += settled as u64;
                tracing::debug!(records = finished.len(), outputs, "transaction committed");
                Ok(Settled::Committed)
            }
            Err(abort) => {
                self.metrics.transactions_aborted += 1;
                match abort {
                    Aborted::Retry(error) => {
                        tracing::warn!(records = finished.len(), error = %ErrorChain(&error), "transaction aborted; the records are delivered again");
                        // Ledger mode: the records are still ours (held). Atomic mode: those
                        // staged are available again through the abort; those the transaction
                        // failed before staging are still in the consumer's hands, released
                        // here (the others are no longer the consumer's to release).
                        let before = report.released;
                        self.release_all(finished.iter().map(GivenUp::from), report)?;
                        if mode == ExactlyOnceMode::AtomicAcknowledgements {
                            report.released = before + finished.len();
                        }
                        Ok(Settled::Released)
                    }
                    Aborted::Refused { refused, isolable }
                        if isolable && self.config.errors.tolerance == ErrorTolerance::All =>
                    {
                        Ok(Settled::Refused {
                            unit: Unit {
                                processed,
                                batch,
                                dead,
                            },
                            refused,
                        })
                    }
                    Aborted::Refused { refused, isolable } => {
                        if !isolable
                            && self.config.errors.tolerance == ErrorTolerance::All
                            && OutputFailure::of(&refused.source) == OutputFailure::RecordRefused
                        {
                            tracing::warn!(
                                "the refused transaction had staged its acknowledgements: its records are the group's again, and the record whose output was refused cannot be found here"
                            );
                        }
                        let given_up = finished.iter().map(GivenUp::from).collect();
                        Err(self.refused_stop(mode, given_up, refused, report).await)
                    }
                    Aborted::Fatal(error) => {
                        // Ledger mode: still held. Atomic mode: staged, they went back with
                        // the abort (skipped here, counted all the same); not staged, or
                        // ACCEPTed by a staging cut short, the RELEASE replaces what was not
                        // sent, so the consumer's close neither sends an ACCEPT of an aborted
                        // transaction nor counts them a second time.
                        let _ = self.release_all(finished.iter().map(GivenUp::from), report);
                        if let Err(e) = self.commit_acknowledgements().await {
                            tracing::warn!(error = %ErrorChain(&e), "could not commit the releases");
                        }
                        Err(error)
                    }
                }
            }
        }
    }

    /// `errors.tolerance=all`, after a transaction was refused for one of its output records:
    /// finds the source record whose output it was, by settling the unit again one record per
    /// transaction (its dead letters first, in a transaction of their own), and dead-letters
    /// that record (REJECTs it, without a dead-letter queue) in a transaction of its own, with
    /// its claim; every other record is processed and settled exactly once as usual. The
    /// records waiting for their turn are renewed so that their locks do not run out
    /// meanwhile.
    ///
    /// `Ok(true)`: every record was settled; `Ok(false)`: a transaction was aborted for a
    /// reason a later attempt may not have, and the records not yet settled were released.
    /// `Err` stops the driver, the records not yet settled released.
    async fn isolate(
        &mut self,
        eos: &mut ExactlyOnce,
        mode: ExactlyOnceMode,
        unit: Unit,
        cause: RefusedOutput,
        polled: Instant,
        report: &mut IterationReport,
    ) -> Result<bool> {
        let Unit {
            processed,
            batch,
            dead,
        } = unit;
        tracing::warn!(
            records = processed.len(),
            dead_letters = dead.len(),
            error = %ErrorChain(&cause),
            "an output record was refused for itself; processing the batch again one record per \
             transaction to find whose"
        );
        // One record and no dead letters: its outputs alone were refused.
        let single = processed.len() == 1 && dead.is_empty();
        let mut queue: VecDeque<(ConsumerRecord, SinkRecord)> =
            processed.into_iter().zip(batch).collect();
        let mut locks = LockKeeper::new(polled, self.consumer.acquisition_lock_timeout());
        if !dead.is_empty() {
            let unit = Unit {
                processed: Vec::new(),
                batch: Vec::new(),
                dead,
            };
            match self.settle_unit(eos, mode, unit, Put::IfAny, report).await {
                Ok(Settled::Committed) => {}
                other => return self.end_isolation(eos, mode, other, queue, report).await,
            }
        }
        while let Some((record, sink)) = queue.pop_front() {
            let (record, refused) = if single {
                (record, cause.clone())
            } else {
                let waiting: Vec<RecordId> = std::iter::once(record.id())
                    .chain(queue.iter().map(|(r, _)| r.id()))
                    .collect();
                self.keep_locks(&mut locks, &waiting).await;
                let unit = Unit {
                    processed: vec![record],
                    batch: vec![sink],
                    dead: Vec::new(),
                };
                match self.settle_unit(eos, mode, unit, Put::IfAny, report).await {
                    Ok(Settled::Committed) => continue,
                    Ok(Settled::Refused { unit, refused }) => {
                        let Some(record) = unit.processed.into_iter().next() else {
                            continue;
                        };
                        (record, refused)
                    }
                    other => return self.end_isolation(eos, mode, other, queue, report).await,
                }
            };
            tracing::warn!(record = %record.id(), error = %ErrorChain(&refused), "an output of this record is refused for itself: dead-lettering the record (errors.tolerance=all)");
            let unit = Unit {
                processed: Vec::new(),
                batch: Vec::new(),
                dead: vec![(record, refused_output_failure(&refused))],
            };
            match self.settle_unit(eos, mode, unit, Put::IfAny, report).await {
                Ok(Settled::Committed) => {}
                other => return self.end_isolation(eos, mode, other, queue, report).await,
            }
        }
        Ok(true)
    }

    /// Ends an isolation after a unit that did not commit: releases the records still
    /// waiting (after a fatal `put`, their last deliveries dead-lettered first, see
    /// [`release_on_fatal`](Self::release_on_fatal)), and stops when the unit's outcome says
    /// so (a dead letter refused in turn stops the task: there is nothing left to isolate).
    async fn end_isolation(
        &mut self,
        eos: &mut ExactlyOnce,
        mode: ExactlyOnceMode,
        settled: Result<Settled>,
        queue: VecDeque<(ConsumerRecord, SinkRecord)>,
        report: &mut IterationReport,
    ) -> Result<bool> {
        let waiting: Vec<GivenUp> = queue.iter().map(|(r, _)| r.into()).collect();
        match settled {
            Ok(Settled::Committed) => Ok(true),
            Ok(Settled::Released) => {
                self.release_all(waiting.into_iter(), report)?;
                Ok(false)
            }
            Ok(Settled::Refused { unit, refused }) => {
                let given_up = unit
                    .processed
                    .iter()
                    .chain(unit.dead.iter().map(|(r, _)| r))
                    .map(GivenUp::from)
                    .chain(waiting)
                    .collect();
                Err(self.refused_stop(mode, given_up, refused, report).await)
            }
            Err(Error::Task {
                stage: TaskStage::Put,
                source,
            }) if !queue.is_empty() => {
                // A fatal put: the records waiting are released as the unit was, their last
                // deliveries dead-lettered first.
                let records = queue.into_iter().map(|(r, _)| r);
                let dead = self.release_on_fatal(records, Vec::new(), &source, report)?;
                let settled = if dead.is_empty() {
                    Ok(Settled::Released)
                } else {
                    self.commit_releases_before_transaction(mode).await;
                    let unit = Unit {
                        processed: Vec::new(),
                        batch: Vec::new(),
                        dead,
                    };
                    self.settle_unit(eos, mode, unit, Put::IfAny, report).await
                };
                if let Some(tripped) = self.after_last_letters(settled, report).await? {
                    return Err(tripped);
                }
                Err(Error::Task {
                    stage: TaskStage::Put,
                    source,
                })
            }
            Err(error) => {
                if !waiting.is_empty() {
                    let _ = self.release_all(waiting.into_iter(), report);
                    if let Err(e) = self.commit_acknowledgements().await {
                        tracing::warn!(error = %ErrorChain(&e), "could not commit the releases");
                    }
                }
                Err(error)
            }
        }
    }

    /// Stops the driver after a transaction refused for an output retrying cannot write:
    /// releases `ids` (nothing is rejected: they wait in the group until the output is
    /// fixed) and names the target.
    async fn refused_stop(
        &mut self,
        mode: ExactlyOnceMode,
        records: Vec<GivenUp>,
        refused: RefusedOutput,
        report: &mut IterationReport,
    ) -> Error {
        let RefusedOutput {
            topic,
            partition,
            source: error,
        } = refused;
        tracing::error!(topic, partition, ?mode, error = %ErrorChain(&error), "an output of the transaction cannot be written and retrying would not help; the transaction was aborted, the records are released and the task stops");
        let _ = self.release_all(records.into_iter(), report);
        if let Err(e) = self.commit_acknowledgements().await {
            tracing::warn!(error = %ErrorChain(&e), "could not commit the releases");
        }
        ExactlyOnceError::OutputRefused {
            topic,
            partition,
            source: error,
        }
        .into()
    }

    /// Renews the locks of the records waiting for their own transaction in an isolation,
    /// when due. A lock that could not be renewed is counted (`lock_losses`) and logged: its
    /// record is delivered again later (not lost), and its transaction here aborts at its own
    /// renewal (ledger mode) or staging (atomic mode).
    async fn keep_locks(&mut self, locks: &mut LockKeeper, waiting: &[RecordId]) {
        let now = Instant::now();
        if waiting.is_empty()
            || now < locks.due
            || !self
                .consumer
                .capabilities()
                .contains(ConsumerCapability::Renew)
        {
            return;
        }
        locks.due = now.checked_add(locks.every).unwrap_or(now);
        // Acknowledgements sent earlier first (the ACCEPTs of the records settled so far): a
        // failure among them must not be taken for a lost lock of a waiting record.
        match self.consumer.commit_sync(self.config.commit_timeout).await {
            Ok(earlier) => {
                for (tp, error) in earlier.failures() {
                    tracing::debug!(partition = %tp, %error, "an earlier acknowledgement failed (the record comes back and is checked)");
                }
            }
            Err(e) => {
                tracing::warn!(error = %ErrorChain(&e), "could not send the acknowledgements before renewing the waiting records; trying again shortly");
                locks.retry_soon(Instant::now());
                return;
            }
        }
        let mut renewed = 0u64;
        for id in waiting {
            let result = self.hold_and_renew(id);
            match result {
                Ok(()) => renewed += 1,
                Err(e) => {
                    tracing::debug!(record = %id, error = %ErrorChain(&e), "waiting record not renewed");
                }
            }
        }
        self.metrics.records_renewed += renewed;
        match self.consumer.commit_sync(self.config.commit_timeout).await {
            Ok(results) => {
                for (tp, error) in results.failures() {
                    let records = waiting
                        .iter()
                        .filter(|id| id.topic_partition() == *tp)
                        .count();
                    if records > 0 {
                        self.metrics.lock_losses += 1;
                        tracing::warn!(partition = %tp, records, %error, "the locks of records waiting for their own transaction could not all be renewed: a record whose lock ran out is delivered again later (not lost)");
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %ErrorChain(&e), "the renewal of the waiting records was not answered; trying again shortly (a record whose lock runs out is delivered again later, not lost)");
                locks.retry_soon(Instant::now());
            }
        }
    }

    /// Ledger mode: checks the records that may have been finished before, accepts those
    /// already claimed and removes them from `records`. Returns how many were accepted. A
    /// claimed record no longer held is skipped (its claim settles it when it comes back); on
    /// any other error, `records` keeps every record not settled, for the caller to release.
    async fn settle_claimed(
        &mut self,
        ledger: &mut Ledger,
        cluster: &dyn ExactlyOnceCluster,
        strict: bool,
        timeout: std::time::Duration,
        records: &mut Vec<ConsumerRecord>,
    ) -> std::result::Result<usize, ExactlyOnceError> {
        // The current leader epochs, sampled after the acquisition: a record appended under
        // an older epoch may have been acquired (and finished) under a leader that forgot it.
        let epochs = if strict || records.iter().all(|r| r.delivery_count() > 1) {
            Default::default()
        } else {
            let mut partitions: Vec<TopicPartition> =
                records.iter().map(|r| r.topic_partition()).collect();
            partitions.sort();
            partitions.dedup();
            match cluster.leader_epochs(&partitions).await {
                Ok(epochs) => epochs,
                Err(error) => {
                    tracing::warn!(error = %ErrorChain(&error), "leader epochs unknown; checking every record against the ledger");
                    Default::default()
                }
            }
        };
        let needs_check = |r: &ConsumerRecord| {
            strict
                || r.delivery_count() > 1
                || match (r.leader_epoch(), epochs.get(&r.topic_partition())) {
                    (Some(appended), Some(current)) => appended < *current,
                    _ => true,
                }
        };
        let mut to_read: Vec<i32> = records
            .iter()
            .filter(|r| needs_check(r))
            .map(|r| ledger.ledger_partition(r.partition()))
            .collect();
        to_read.sort_unstable();
        to_read.dedup();
        let started = Instant::now();
        for partition in to_read {
            ledger.catch_up(cluster, partition, timeout).await?;
            self.metrics.ledger_checks += 1;
        }
        self.metrics.ledger_check_time += started.elapsed();
        let mut accepted = 0;
        let mut kept = Vec::with_capacity(records.len());
        let mut pending = std::mem::take(records).into_iter();
        let mut failed = None;
        while let Some(record) = pending.next() {
            let tp = record.topic_partition();
            if !ledger.is_claimed(&tp, record.offset()) {
                kept.push(record);
                continue;
            }
            tracing::debug!(record = %record.id(), delivery_count = record.delivery_count(), "already claimed by a committed transaction; accepting without processing");
            match self.consumer.acknowledge(&record, AcknowledgeType::Accept) {
                Ok(()) => accepted += 1,
                // Its lock ran out or its session was reset since the poll: the group
                // delivers it again, and this check accepts it then.
                Err(error) if error.is_not_held() => {
                    tracing::debug!(record = %record.id(), error = %ErrorChain(&error), "claimed, but no longer ours; accepted when delivered again");
                }
                Err(error) => {
                    // Hand this record and every one not looked at back to the caller, which
                    // releases them: none may stay held, unprocessed, until the lock expires.
                    kept.push(record);
                    kept.extend(pending.by_ref());
                    failed = Some(ExactlyOnceError::Read(error));
                }
            }
        }
        *records = kept;
        self.metrics.records_already_claimed += accepted as u64;
        self.acknowledged_since_commit += accepted as u64;
        match failed {
            None => Ok(accepted),
            Some(error) => Err(error),
        }
    }

    /// The transaction of one round. `Ok`: committed.
    async fn transact(
        &mut self,
        eos: &mut ExactlyOnce,
        mode: ExactlyOnceMode,
        mut sends: Vec<ProducerRecord>,
        finished: &[Finished],
    ) -> std::result::Result<(), Aborted> {
        if finished.is_empty() && sends.is_empty() {
            return Ok(());
        }
        // After an abort that failed earlier in this round (an isolation goes on after it).
        if let Err(e) = eos.init_if_needed().await {
            return Err(self.producer_failed(eos, e));
        }
        let producer = Arc::clone(&eos.producer);
        producer
            .begin_transaction()
            .map_err(|e| self.producer_failed(eos, e))?;
        if let Some(ledger) = &eos.ledger {
            let ids: Vec<RecordId> = finished.iter().map(|f| f.id.clone()).collect();
            let claims = ledger
                .claims(&ids, &eos.transactional_id)
                .map_err(|e| Aborted::Fatal(e.into()))?;
            sends.extend(claims);
        }
        let sending = Instant::now();
        let mut deliveries: Vec<DeliveryFuture> = Vec::with_capacity(sends.len());
        // The worst failure of the transaction decides what happens to its records.
        let mut failure: Option<ProducerError> = None;
        // Where the record refused by `send` itself was going (its error may not say).
        let mut refused_send: Option<(String, Option<i32>)> = None;
        let mut targets: Vec<String> = sends.iter().map(|r| r.topic.to_string()).collect();
        targets.sort_unstable();
        targets.dedup();
        for record in sends {
            let target = (record.topic.to_string(), record.partition);
            match producer.send(record) {
                Ok(d) => deliveries.push(d),
                Err(e) => {
                    failure = Some(e);
                    refused_send = Some(target);
                    break;
                }
            }
        }
        let mut staged = false;
        // Whether `failure` is the staging's: about the input's acknowledgements (a lock
        // lost, a member epoch moved), never the output.
        let mut stage_failed = false;
        if failure.is_none() && mode == ExactlyOnceMode::AtomicAcknowledgements {
            // Staged right after the sends (a lock must not run out before staging).
            staged = true;
            if let Err(e) = self.stage(&*producer, finished).await {
                failure = Some(e);
                stage_failed = true;
            }
        }
        let flush = failure.is_none();
        let outcomes = async {
            let flushed = if flush {
                producer.flush().await.err()
            } else {
                None
            };
            let mut failed = Vec::new();
            for delivery in deliveries {
                if let Err(e) = delivery.await {
                    failed.push(e);
                }
            }
            (flushed, failed)
        };
        // A target deleted meanwhile would keep the sends retrying until the delivery
        // timeout, and the next transaction again: watch for it while they are slow.
        let waited = tokio::select! {
            biased;
            outcomes = outcomes => Ok(outcomes),
            gone = watch_targets(&*eos.cluster, &targets) => Err(gone),
        };
        let failed = match waited {
            Ok((flushed, failed)) => {
                if let Some(e) = flushed {
                    failure = Some(e);
                }
                failed
            }
            Err(topic) => {
                tracing::error!(%topic, "a target of the transaction no longer exists");
                vec![ProducerError::UnknownPartition {
                    topic,
                    partition: -1,
                }]
            }
        };
        for e in failed {
            let worse = match &failure {
                None => true,
                Some(_) if stage_failed => {
                    e.is_fatal() || OutputFailure::of(&e) > OutputFailure::Transient
                }
                Some(f) => severity(&e) > severity(f),
            };
            if worse {
                failure = Some(e);
                refused_send = None;
                stage_failed = false;
            }
        }
        self.metrics.transaction_send_time += sending.elapsed();
        if let Some(error) = failure {
            let output = if stage_failed {
                Output::NotConcerned
            } else {
                Output::Concerned
            };
            return Err(match self.abort(eos, error, output).await {
                Aborted::Refused {
                    mut refused,
                    isolable,
                } => {
                    if let (None, Some((topic, partition))) = (&refused.topic, refused_send) {
                        refused.topic = Some(topic);
                        refused.partition = partition;
                    }
                    Aborted::Refused {
                        refused,
                        // Staged acknowledgements went back to the group with the abort.
                        isolable: isolable && !staged,
                    }
                }
                aborted => aborted,
            });
        }
        if mode == ExactlyOnceMode::Ledger {
            // The claims are durable: now make sure every record is still ours.
            let renewing = Instant::now();
            let renewed = self.renew_finished(eos.accepts.take(), finished).await;
            self.metrics.transaction_renew_time += renewing.elapsed();
            if let Err(reason) = renewed {
                let error = ProducerError::Abortable {
                    reason,
                    source: None,
                };
                return Err(self.abort(eos, error, Output::NotConcerned).await);
            }
        }
        let committing = Instant::now();
        let committed = producer.commit_transaction().await;
        let outcome = match committed {
            Ok(()) => Ok(()),
            Err(error) => Err(self.abort(eos, error, Output::Concerned).await),
        };
        self.metrics.transaction_commit_time += committing.elapsed();
        outcome
    }

    /// Takes the outcome of the ACCEPTs sent after a commit (within the commit timeout) and
    /// counts their failures as any commit's: a record whose ACCEPT failed comes back and is
    /// found claimed. Never fails the caller: a late answer leaves its outcome to the next
    /// commit.
    pub(super) async fn settle_accepts(&mut self, accepts: crate::consumer::PendingCommit) {
        let timeout = self.config.commit_timeout;
        match tokio::time::timeout(timeout, accepts).await {
            Ok(Ok(results)) => super::count_failures(&results, &mut self.metrics),
            Ok(Err(e)) => {
                tracing::warn!(error = %ErrorChain(&e), "the ACCEPTs after a commit were not answered; their records come back and are found claimed");
            }
            Err(_) => {
                tracing::debug!(
                    ?timeout,
                    "the ACCEPTs after a commit are not answered yet: the next commit reports them"
                );
            }
        }
    }

    /// The ACCEPTs after the last commit, if still unsettled (outside a round).
    pub(super) fn take_accepts(&mut self) -> Option<crate::consumer::PendingCommit> {
        self.exactly_once.as_mut().and_then(|e| e.accepts.take())
    }

    /// KIP-1289: acknowledges the finished records locally, takes them out of the consumer
    /// and stages them into the transaction.
    async fn stage(
        &mut self,
        producer: &dyn Producer,
        finished: &[Finished],
    ) -> std::result::Result<(), ProducerError> {
        // The cluster's cause stays the abort's source; the consumer's own errors are told in
        // the reason.
        let to_producer = |e: ConsumerError| match ClientError::from_consumer(e) {
            Ok(cause) => ProducerError::Abortable {
                reason: "the consumer could not hand its acknowledgements over".to_owned(),
                source: Some(Arc::new(ProducerError::kafka(cause))),
            },
            Err(own) => ProducerError::Abortable {
                reason: format!("the consumer could not hand its acknowledgements over: {own}"),
                source: None,
            },
        };
        for f in finished {
            self.consumer
                .acknowledge_offset(f.id.topic(), f.id.partition(), f.id.offset(), f.ack)
                .map_err(to_producer)?;
        }
        let acknowledgements = self
            .consumer
            .take_acknowledgements_for_transaction()
            .map_err(to_producer)?;
        if acknowledgements.is_empty() {
            return Ok(());
        }
        let group = self.consumer.group_metadata();
        producer
            .send_share_acknowledgements(&acknowledgements, &group)
            .await
    }

    /// Holds `id` (it is not settled with the poll) and RENEWs its lock with the next
    /// acknowledgements sent.
    fn hold_and_renew(&mut self, id: &RecordId) -> std::result::Result<(), ConsumerError> {
        self.consumer
            .hold_offset(id.topic(), id.partition(), id.offset())
            .and_then(|()| {
                self.consumer.acknowledge_offset(
                    id.topic(),
                    id.partition(),
                    id.offset(),
                    AcknowledgeType::Renew,
                )
            })
    }

    /// Ledger mode: RENEW every finished record and wait for the answer. `Err` names what
    /// was lost.
    async fn renew_finished(
        &mut self,
        accepts: Option<crate::consumer::PendingCommit>,
        finished: &[Finished],
    ) -> std::result::Result<(), String> {
        // The last commit's ACCEPTs, sent right after it: their outcome first, so that a
        // failure among them is not taken for a failed renewal below.
        if let Some(accepts) = accepts {
            self.settle_accepts(accepts).await;
        }
        // Acknowledgements sent earlier (the last round's RELEASEs, which go out with the
        // poll; this round's ACCEPTs of records found claimed) report their outcome
        // at the next commit. Take them first: a failure among them (a lock lost after a
        // commit, a release of a record whose lock ran out) is harmless, and must not be
        // taken for a failed renewal of this batch's partition.
        let earlier = self
            .consumer
            .commit_sync(self.config.commit_timeout)
            .await
            .map_err(|e| {
                format!(
                    "the acknowledgements before the renewal were not answered: {}",
                    ErrorChain(&e)
                )
            })?;
        for (tp, error) in earlier.failures() {
            tracing::debug!(partition = %tp, %error, "an earlier acknowledgement failed (the record comes back and is checked)");
        }
        for f in finished {
            let id = &f.id;
            let renewed = self.hold_and_renew(id);
            if let Err(e) = renewed {
                return Err(format!(
                    "could not renew the lock of {id}: {}",
                    ErrorChain(&e)
                ));
            }
        }
        self.metrics.records_renewed += finished.len() as u64;
        let results = self
            .consumer
            .commit_sync(self.config.commit_timeout)
            .await
            .map_err(|e| {
                format!(
                    "the renewal of the batch's locks failed: {}",
                    ErrorChain(&e)
                )
            })?;
        let partitions: std::collections::HashSet<TopicPartition> =
            finished.iter().map(|f| f.id.topic_partition()).collect();
        for (tp, error) in results.failures() {
            if partitions.contains(tp) {
                self.metrics.lock_losses += 1;
                return Err(format!(
                    "the renewal of records of {tp} failed ({error}): another consumer may hold them now"
                ));
            }
        }
        Ok(())
    }

    /// Aborts the open transaction after `error`; says whether the driver can go on.
    async fn abort(
        &mut self,
        eos: &mut ExactlyOnce,
        error: ProducerError,
        output: Output,
    ) -> Aborted {
        if let ProducerError::CommitOutcomeUnknown { .. } = error {
            // The records are released; whoever gets them next waits for the outcome in the
            // ledger read (or the coordinator resolves the staged acknowledgements).
            eos.needs_init = true;
            return Aborted::retry(error);
        }
        if error.is_fatal() {
            return self.producer_failed(eos, error);
        }
        if let Err(abort_error) = eos.producer.abort_transaction().await {
            tracing::warn!(error = %ErrorChain(&abort_error), "could not abort the transaction; initializing the producer again, which aborts it");
            eos.needs_init = true;
            if abort_error.is_fatal() {
                return self.producer_failed(eos, abort_error);
            }
        }
        let failure = match output {
            Output::Concerned => OutputFailure::of(&error),
            Output::NotConcerned => OutputFailure::Transient,
        };
        match failure {
            OutputFailure::Transient => Aborted::retry(error),
            // Delivering the records again would fail the same way each time, until the
            // broker archives them at the delivery-count limit: stop (releasing them), or
            // find the record whose output was refused.
            OutputFailure::RecordRefused => Aborted::Refused {
                refused: RefusedOutput::new(error),
                isolable: true,
            },
            OutputFailure::TargetUnwritable => Aborted::Refused {
                refused: RefusedOutput::new(error),
                isolable: false,
            },
        }
    }

    fn producer_failed(&mut self, eos: &mut ExactlyOnce, error: ProducerError) -> Aborted {
        if error.is_fatal() {
            tracing::error!(transactional_id = %eos.transactional_id, error = %ErrorChain(&error), "the transactional producer failed for good (fenced by another instance with the same transactional id?); stopping");
            return Aborted::Fatal(ExactlyOnceError::Producer(error).into());
        }
        eos.needs_init = true;
        Aborted::retry(error)
    }

    /// After a fatal `put_transactional` error: RELEASEs the unit's records (the task failed,
    /// not they), except those on the group's last delivery when a dead-letter queue is set,
    /// which are returned to be dead-lettered (released, the group would archive them). Without
    /// a queue those are released too, counted and said.
    fn release_on_fatal(
        &mut self,
        processed: impl Iterator<Item = ConsumerRecord>,
        dead: Vec<(ConsumerRecord, Failure)>,
        error: &TaskError,
        report: &mut IterationReport,
    ) -> Result<Vec<(ConsumerRecord, Failure)>> {
        let failure = Failure::of_put(error, DeadLetterReason::DeliveryLimit);
        let unit = processed
            .map(|r| (r, None))
            .chain(dead.into_iter().map(|(r, f)| (r, Some(f))));
        let (letters, released) =
            self.split_last_deliveries(unit, self.group_delivery_limit(), &failure);
        self.release_all(released.into_iter(), report)?;
        Ok(letters)
    }

    /// Splits records whose `put` failed into those to dead-letter (on their `last` delivery
    /// or past it, when a dead-letter queue is set: released, the group would archive them),
    /// each with its own failure or else `failure`, and those to release.
    fn split_last_deliveries(
        &self,
        records: impl Iterator<Item = (ConsumerRecord, Option<Failure>)>,
        last: u16,
        failure: &Failure,
    ) -> (Vec<(ConsumerRecord, Failure)>, Vec<GivenUp>) {
        let dead_letter = self.config.dead_letter.is_some();
        let mut letters = Vec::new();
        let mut released = Vec::new();
        for (record, own) in records {
            if dead_letter && record.delivery_count() >= last {
                letters.push((record, own.unwrap_or_else(|| failure.clone())));
            } else {
                released.push(GivenUp::from(&record));
            }
        }
        (letters, released)
    }

    /// RELEASEs records of the last poll (or held ones).
    fn release_all(
        &mut self,
        records: impl Iterator<Item = GivenUp>,
        report: &mut IterationReport,
    ) -> Result<()> {
        // A record not ours any more (a failed renewal, a staged record) is skipped: the
        // group has it (and one on its last delivery is counted all the same).
        let records: Vec<GivenUp> = records.collect();
        let n = self.release_given_up(&records);
        report.released += usize::try_from(n).unwrap_or(usize::MAX);
        Ok(())
    }

    /// Commits the acknowledgements when the commit policy says so (they ride on the next
    /// poll otherwise).
    async fn commit_if_due(&mut self, report: &mut IterationReport) -> Result<()> {
        if self.commit_wanted() {
            self.commit_acknowledgements().await?;
            report.committed = true;
        }
        Ok(())
    }
}

/// Why a transaction did not commit.
enum Aborted {
    /// Aborted (or to be resolved by the coordinator); the records are delivered again.
    Retry(Error),
    /// Aborted after an output retrying cannot write
    /// ([`OutputFailure::RecordRefused`] or [`OutputFailure::TargetUnwritable`]).
    /// `isolable`: the refusal was a record's ([`OutputFailure::RecordRefused`]) and the
    /// records are still this consumer's, so the record can be found; otherwise the driver
    /// stops.
    Refused {
        refused: RefusedOutput,
        isolable: bool,
    },
    /// The driver cannot go on.
    Fatal(Error),
}

/// Whether a transaction's error may be about its outputs (a send, a flush, a commit), or is
/// about the input (a renewal or a staging of acknowledgements that failed: a lock lost, a
/// member epoch moved), which another delivery may not meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    Concerned,
    NotConcerned,
}

/// How much of a round a transaction's error condemns: fatal errors first, then
/// [`OutputFailure`]'s order.
fn severity(error: &ProducerError) -> (bool, OutputFailure) {
    (error.is_fatal(), OutputFailure::of(error))
}

impl Aborted {
    /// Aborted after the producer's `error`.
    fn retry(error: ProducerError) -> Self {
        Self::Retry(ExactlyOnceError::Producer(error).into())
    }
}

/// Refuses a declared target that cannot take what the task will write. A target or source
/// found unknown is asked about again ([`confirmed_partition_count`]): a broker that restarted a
/// moment ago may not know a topic that exists yet.
async fn check_targets(
    cluster: &dyn ExactlyOnceCluster,
    outputs: &[(String, Vec<OutputTarget>)],
) -> std::result::Result<(), ExactlyOnceError> {
    for (source, targets) in outputs {
        if targets.is_empty() {
            continue;
        }
        // Asked again when unknown too: a source taken for missing skips the partition check.
        let source_partitions = confirmed_partition_count(cluster, source).await?;
        for target in targets {
            let unfit = |reason: String| ExactlyOnceError::UnfitTarget {
                source_topic: source.clone(),
                target: target.topic().to_owned(),
                reason,
            };
            match (
                confirmed_partition_count(cluster, target.topic()).await?,
                source_partitions,
            ) {
                (None, _) => {
                    return Err(unfit(format!(
                        "it does not exist: create it first{} (a topic the broker creates on the \
                         first write gets its default partition count)",
                        match source_partitions {
                            Some(n) if target.keeps_partitions() => {
                                format!(" with at least {}, as the source has", partitions(n))
                            }
                            _ => String::new(),
                        }
                    )));
                }
                (Some(have), Some(need)) if target.keeps_partitions() && have < need => {
                    return Err(unfit(format!(
                        "it has {} and the source {need}, and each output keeps \
                         its source partition: records of partitions {have} to {} could not be \
                         written; add partitions to the target, or let the producer pick them \
                         (MirrorTask::keep_partition(false))",
                        partitions(have),
                        need - 1
                    )));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// "1 partition", "3 partitions".
fn partitions(n: i32) -> String {
    if n == 1 {
        "1 partition".to_owned()
    } else {
        format!("{n} partitions")
    }
}

/// Finds or creates the ledger topic.
async fn prepare_ledger(
    cluster: &dyn ExactlyOnceCluster,
    config: &ExactlyOnceConfig,
    sources: &[String],
) -> std::result::Result<Ledger, ExactlyOnceError> {
    let topic = config.ledger_topic();
    let mut widest = 1;
    for source in sources {
        if let Some(n) = cluster.partition_count(source).await? {
            widest = widest.max(n);
        }
    }
    let partitions = match cluster.partition_count(&topic).await? {
        Some(n) => {
            check_ledger_settings(cluster, &topic).await?;
            if n < widest {
                tracing::warn!(ledger = %topic, partitions = n, source_partitions = widest, "the ledger topic has fewer partitions than the source: source partitions share ledger partitions, and redelivery checks wait for more transactions");
            }
            n
        }
        None => {
            let n = config.ledger_partitions.unwrap_or(widest);
            tracing::info!(ledger = %topic, partitions = n, "creating the exactly-once ledger topic");
            cluster.create_ledger_topic(&topic, n).await?;
            n
        }
    };
    Ok(Ledger::new(topic, partitions))
}

/// Refuses a compacted ledger and warns of a short retention.
async fn check_ledger_settings(
    cluster: &dyn ExactlyOnceCluster,
    topic: &str,
) -> std::result::Result<(), ExactlyOnceError> {
    if let Some(policy) = cluster.topic_config(topic, "cleanup.policy").await? {
        if policy.contains("compact") {
            return Err(ExactlyOnceError::Ledger {
                topic: topic.to_owned(),
                reason: format!(
                    "its cleanup.policy is `{policy}`: compaction keeps only the last claim of \
                     each source partition and forgets the others, so redelivered records \
                     would be processed twice; set cleanup.policy=delete"
                ),
            });
        }
    }
    if let Some(retention) = cluster.topic_config(topic, "retention.ms").await? {
        let week = 7 * 24 * 3600 * 1000;
        if retention
            .parse::<i64>()
            .is_ok_and(|ms| (0..week).contains(&ms))
        {
            tracing::warn!(
                ledger = %topic,
                retention_ms = %retention,
                "the ledger keeps claims for less than a week: a record redelivered after its \
                 claim was deleted is processed again (a duplicate); keep claims longer than \
                 any consumer outage"
            );
        }
    }
    Ok(())
}

/// Fences the transactional ids of task slots at and above `tasks.max`.
async fn fence_orphans(
    cluster: &dyn ExactlyOnceCluster,
    config: &ExactlyOnceConfig,
) -> std::result::Result<(), ExactlyOnceError> {
    let prefix = format!("{}-eos-", config.connector);
    for id in cluster.transactional_ids(&prefix).await? {
        let Some(slot) = id.strip_prefix(&prefix).and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if slot >= config.tasks_max && id == transactional_id(&config.connector, slot) {
            tracing::info!(transactional_id = %id, tasks_max = config.tasks_max, "fencing the producer of a task slot that no longer exists");
            cluster.fence_transactional_id(&id).await?;
        }
    }
    Ok(())
}

/// Forgets claims below the share-partition start offsets; failures only delay pruning.
async fn prune(
    ledger: &mut Ledger,
    cluster: &dyn ExactlyOnceCluster,
    group: &str,
    topics: &[String],
) {
    for topic in topics {
        match cluster.share_partition_start_offsets(group, topic).await {
            Ok(starts) => ledger.prune(topic, &starts),
            Err(error) => {
                tracing::debug!(%topic, error = %ErrorChain(&error), "share-partition start offsets unknown; pruning the ledger index later");
            }
        }
    }
    ledger.pruned_now();
    tracing::debug!(ranges = ledger.indexed_ranges(), "ledger index pruned");
}
