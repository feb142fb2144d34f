//! The driver: [`ShareSinkTask`] runs a [`SinkTask`] over a [`ShareConsumer`].
//!
//! One [`iteration`](ShareSinkTask::iteration) is poll → build [`SinkRecord`]s → `put` →
//! acknowledge → commit when due. A record is ACCEPTed only after `put` returned `Ok`:
//!
//! | `put` returns | explicit mode (default) | implicit mode |
//! |---|---|---|
//! | `Ok` | ACCEPT every record of the batch | accepted by the next poll or commit |
//! | retriable error | RELEASE the batch: redelivered with delivery count + 1 | keep the batch and `put` it again next iteration |
//! | fatal error | REJECT the batch, commit, return the error; the driver stops | return the error; the driver stops and `close` releases the batch |
//!
//! # Where a process can die
//!
//! Acknowledgements are local until a poll or commit sends them, and the driver acknowledges
//! only after `put`, so a crash at any point leaves the records it had not acknowledged
//! acquired by a dead member: their locks expire and the group delivers them again. Nothing
//! is lost; a record written by `put` just before a crash is written again.

mod config;
mod metrics;
mod policy;

use std::future::Future;
use std::pin::pin;

use tokio::time::Instant;
use tracing::Instrument;

pub use self::config::{CommitPolicy, DriverConfig};
pub use self::metrics::DriverMetrics;
pub use self::policy::{
    AckPolicy, ErrorHandling, ErrorTolerance, ParsePolicyError, PutRetriablePolicy,
};
use crate::consumer::{AcknowledgeType, AcknowledgementMode, ShareConsumer};
use crate::error::{Error, Result, TaskStage};
use crate::record::{RecordId, SinkRecord};
use crate::task::{Durability, SinkTask, SinkTaskContext};

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
    /// Records accepted after a successful `put`.
    pub accepted: usize,
    /// Records released after a retriable error.
    pub released: usize,
    /// Records kept for another `put` (implicit mode, retriable error).
    pub retained: usize,
    /// Whether the iteration ended with a commit.
    pub committed: bool,
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
    /// Implicit mode: the batch is kept after a retriable error.
    retained: bool,
    /// Records put since the last commit, for `pre_commit`.
    delivered: Vec<RecordId>,
    /// Acknowledgements made since the last commit.
    acknowledged_since_commit: u64,
    last_commit: Instant,
    backoff_until: Option<Instant>,
    metrics: DriverMetrics,
    warned_partial_durability: bool,
}

impl<C: ShareConsumer> std::fmt::Debug for ShareSinkTask<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareSinkTask")
            .field("state", &self.state)
            .field("topics", &self.config.topics)
            .field("metrics", &self.metrics)
            .finish_non_exhaustive()
    }
}

impl<C: ShareConsumer> ShareSinkTask<C> {
    /// A driver for `task` over `consumer`. Nothing happens until
    /// [`initialize`](Self::initialize).
    pub fn new(task: Box<dyn SinkTask>, consumer: C, config: DriverConfig) -> Self {
        Self {
            task,
            consumer,
            config,
            context: None,
            state: State::Created,
            batch: Vec::new(),
            retained: false,
            delivered: Vec::new(),
            acknowledged_since_commit: 0,
            last_commit: Instant::now(),
            backoff_until: None,
            metrics: DriverMetrics::default(),
            warned_partial_durability: false,
        }
    }

    /// Subscribes the consumer, then calls the task's `initialize` and `start`.
    pub async fn initialize(&mut self) -> Result<()> {
        match self.state {
            State::Created => {}
            State::Closed => return Err(Error::Closed),
            _ => return Err(Error::AlreadyInitialized),
        }
        self.consumer.subscribe(self.config.topics.clone()).await?;
        let context = SinkTaskContext::new(
            self.consumer.group_metadata().group_id(),
            self.config.task_config.clone(),
        );
        self.task.initialize(context.clone());
        self.context = Some(context);
        if let Err(source) = self.task.start(&self.config.task_config).await {
            self.state = State::Failed;
            return Err(Error::Task {
                stage: TaskStage::Start,
                source,
            });
        }
        self.state = State::Running;
        self.last_commit = Instant::now();
        tracing::info!(topics = ?self.config.topics, group = %self.consumer.group_metadata().group_id(), "sink task started");
        Ok(())
    }

    /// One round: poll → convert → `put` → acknowledge → commit when due.
    ///
    /// A retriable `put` error is handled here (the report says what was released) and is
    /// not returned. A fatal error is returned once; every later call returns
    /// [`Error::Failed`]. Errors for which [`Error::is_retriable`] is true leave the driver
    /// usable.
    pub async fn iteration(&mut self) -> Result<IterationReport> {
        match self.state {
            State::Running => {}
            State::Created => return Err(Error::NotInitialized),
            State::Failed => return Err(Error::Failed),
            State::Closed => return Err(Error::Closed),
        }
        let span =
            tracing::debug_span!("iteration", group = %self.consumer.group_metadata().group_id());
        let result = self.iterate().instrument(span).await;
        if let Err(error) = &result {
            if !error.is_retriable() {
                self.state = State::Failed;
            }
        }
        result
    }

    async fn iterate(&mut self) -> Result<IterationReport> {
        if let Some(until) = self.backoff_until.take() {
            tokio::time::sleep_until(until).await;
        }
        if !self.retained {
            self.poll_batch().await?;
        }
        let mut report = IterationReport {
            records: self.batch.len(),
            ..IterationReport::default()
        };

        let started = Instant::now();
        let outcome = self.task.put(&self.batch).await;
        let elapsed = started.elapsed();
        match outcome {
            Ok(()) => {
                self.metrics.put_batches += 1;
                self.metrics.put_time_total += elapsed;
                self.metrics.put_time_max = self.metrics.put_time_max.max(elapsed);
                self.acknowledge_batch(AcknowledgeType::Accept)?;
                self.metrics.records_put += self.batch.len() as u64;
                self.delivered
                    .extend(self.batch.iter().map(|r| r.original_id().clone()));
                report.accepted = self.batch.len();
                self.retained = false;
            }
            Err(error) if error.is_retriable() => {
                self.metrics.put_failures += 1;
                tracing::warn!(records = self.batch.len(), error = %ErrorChain(&error), "put failed, will retry");
                self.backoff_until =
                    Some(Instant::now() + error.backoff().unwrap_or(self.config.retriable_backoff));
                if self.implicit() {
                    self.retained = true;
                    report.retained = self.batch.len();
                } else {
                    self.acknowledge_batch(AcknowledgeType::Release)?;
                    self.metrics.records_released += self.batch.len() as u64;
                    report.released = self.batch.len();
                }
            }
            Err(error) => {
                self.metrics.put_failures += 1;
                tracing::error!(records = self.batch.len(), error = %ErrorChain(&error), "put failed fatally, stopping");
                self.state = State::Failed;
                if !self.implicit() {
                    self.acknowledge_batch(AcknowledgeType::Reject)?;
                    self.metrics.records_rejected += self.batch.len() as u64;
                    // Make the rejection durable now; the caller may never close us.
                    self.commit_acknowledgements().await?;
                }
                return Err(Error::Task {
                    stage: TaskStage::Put,
                    source: error,
                });
            }
        }

        let requested = self
            .context
            .as_ref()
            .is_some_and(SinkTaskContext::take_commit_request);
        let due = self.acknowledged_since_commit > 0
            && self
                .config
                .commit_policy
                .is_due(self.last_commit.elapsed(), self.acknowledged_since_commit);
        // Implicit mode: a commit would accept a batch that is waiting for another put.
        if (requested || due) && !self.retained {
            self.commit().await?;
            report.committed = true;
        }
        Ok(report)
    }

    fn implicit(&self) -> bool {
        self.consumer.acknowledgement_mode() == AcknowledgementMode::Implicit
    }

    async fn poll_batch(&mut self) -> Result<()> {
        let records = self.consumer.poll(self.config.poll_timeout).await?;
        self.batch.clear();
        self.batch.reserve(records.len());
        self.metrics.records_read += records.len() as u64;
        for record in records {
            if record.delivery_count() > 1 {
                self.metrics.records_redelivered += 1;
            }
            self.batch.push(SinkRecord::from_consumer_record(record));
        }
        Ok(())
    }

    fn acknowledge_batch(&mut self, ack: AcknowledgeType) -> Result<()> {
        if self.implicit() {
            // The next poll or commit accepts the batch.
            self.acknowledged_since_commit += self.batch.len() as u64;
            return Ok(());
        }
        for record in &self.batch {
            let id = record.original_id();
            self.consumer
                .acknowledge_offset(id.topic(), id.partition(), id.offset(), ack)?;
        }
        self.acknowledged_since_commit += self.batch.len() as u64;
        Ok(())
    }

    /// `pre_commit`, then `commit_sync`.
    async fn commit(&mut self) -> Result<()> {
        let delivered = std::mem::take(&mut self.delivered);
        match self.task.pre_commit(&delivered).await {
            Ok(Durability::All) => {}
            Ok(_) if !self.warned_partial_durability => {
                self.warned_partial_durability = true;
                tracing::warn!(
                    "pre_commit reported records as not yet durable, but they were accepted when \
                     put returned: a task that buffers must flush in put"
                );
            }
            Ok(_) => {}
            Err(source) if source.is_retriable() => {
                tracing::warn!(error = %ErrorChain(&source), "pre_commit failed; committing what put accepted");
            }
            Err(source) => {
                return Err(Error::Task {
                    stage: TaskStage::PreCommit,
                    source,
                });
            }
        }
        self.commit_acknowledgements().await
    }

    async fn commit_acknowledgements(&mut self) -> Result<()> {
        let results = self
            .consumer
            .commit_sync(self.config.commit_timeout)
            .await?;
        for (partition, error) in results.failures() {
            self.metrics.commit_partition_failures += 1;
            tracing::warn!(%partition, %error, "acknowledgements not committed; the records will be delivered again");
        }
        self.metrics.commits += 1;
        self.acknowledged_since_commit = 0;
        self.last_commit = Instant::now();
        Ok(())
    }

    /// Ends the driver: a final `pre_commit` and commit of what was accepted, the task's
    /// `stop`, and the consumer's `close`, which releases every record not acknowledged.
    /// Every step is attempted; the first error is returned. Closing twice is a no-op.
    pub async fn close(&mut self) -> Result<()> {
        let previous = self.state;
        if previous == State::Closed {
            return Ok(());
        }
        self.state = State::Closed;
        let mut first_error: Option<Error> = None;
        if previous == State::Running && !self.retained {
            if let Err(e) = self.commit().await {
                first_error.get_or_insert(e);
            }
        }
        if previous != State::Created {
            if let Err(source) = self.task.stop().await {
                first_error.get_or_insert(Error::Task {
                    stage: TaskStage::Stop,
                    source,
                });
            }
        }
        if let Err(e) = self.consumer.close(self.config.close_timeout).await {
            first_error.get_or_insert(e.into());
        }
        self.batch.clear();
        tracing::info!(metrics = ?self.metrics, "sink task closed");
        first_error.map_or(Ok(()), Err)
    }

    /// Initializes if needed, then iterates until `shutdown` completes or a fatal error, and
    /// closes in both cases.
    ///
    /// Shutdown is checked between iterations, so it takes effect within one poll timeout
    /// plus one `put`; a `put` is never cut short. Retriable errors are logged and the loop
    /// goes on after the retriable backoff.
    pub async fn run(&mut self, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
        let mut shutdown = pin!(shutdown);
        let result = async {
            if self.state == State::Created {
                self.initialize().await?;
            }
            loop {
                if futures::poll!(shutdown.as_mut()).is_ready() {
                    return Ok(());
                }
                match self.iteration().await {
                    Ok(_) => {}
                    Err(e) if e.is_retriable() => {
                        tracing::warn!(error = %ErrorChain(&e), "iteration failed, retrying");
                        tokio::time::sleep(self.config.retriable_backoff).await;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        .await;
        let closed = self.close().await;
        result.and(closed)
    }

    /// The driver's counters.
    pub fn metrics(&self) -> DriverMetrics {
        self.metrics
    }

    /// The consumer, for inspection.
    pub fn consumer(&self) -> &C {
        &self.consumer
    }
}

/// Displays an error with its whole `source` chain, for logs.
struct ErrorChain<'a>(&'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
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
