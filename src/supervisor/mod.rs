//! Several tasks of one connector in one process, like a Kafka Connect worker.
//!
//! A [`Supervisor`] runs `tasks.max` drivers, each with its own consumer in the same share
//! group (a share group spreads records over its members, so tasks scale past the partition
//! count). A factory builds the sink task and consumer of each task id. A task that fails is
//! built again and restarted after a bounded exponential backoff ([`SupervisorConfig`]); a
//! panic in a task counts as a failure. A task stopped by the dead-letter circuit breaker
//! ([`Error::DeadLetterBreaker`]) is not restarted: each
//! restart would spend a delivery of the records it released; and a task's breaker window
//! is kept across its restarts, so failing and restarting does not reset it. Nor is a task
//! whose settings are at fault ([`Error::is_config`]): every restart would fail the same way. On the shutdown signal every task finishes its
//! iteration and closes: its accepted records are committed and every other record is
//! released for the group to deliver again.
//!
//! ```
//! use std::time::Duration;
//! use kafka_share_sink::embedded::{EmbeddedBroker, GroupConfig, AutoOffsetReset, ProduceRecord};
//! use kafka_share_sink::supervisor::{Supervisor, SupervisorConfig, TaskParts};
//! use kafka_share_sink::{DriverConfig, SinkRecord, SinkTask, TaskConfig, TaskError};
//!
//! struct Discard;
//! #[async_trait::async_trait]
//! impl SinkTask for Discard {
//!     async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> { Ok(()) }
//!     async fn put(&mut self, _: &[SinkRecord]) -> Result<(), TaskError> { Ok(()) }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let broker = EmbeddedBroker::new();
//! broker.create_topic("events", 2)?;
//! broker.set_group_config("sink", GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest))?;
//! for i in 0..10 {
//!     broker.produce("events", ProduceRecord::new().value(format!("{i}")))?;
//! }
//! let group = broker.clone();
//! let supervisor = Supervisor::new("discard", SupervisorConfig::new(2), move |_task_id| {
//!     let consumer = group.share_consumer("sink");
//!     async move {
//!         let config = DriverConfig::new(["events"]).poll_timeout(Duration::from_millis(20));
//!         Ok(TaskParts::new(Box::new(Discard), consumer, config))
//!     }
//! });
//! let handle = supervisor.handle();
//! // Stop once every record was read.
//! let shutdown = async move {
//!     while handle.statuses().iter().map(|s| s.driver.records_read).sum::<u64>() < 10 {
//!         tokio::time::sleep(Duration::from_millis(10)).await;
//!     }
//! };
//! supervisor.run(shutdown).await?;
//! # Ok(()) }
//! ```

mod config;

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

pub use self::config::{MAX_TASKS, SupervisorConfig};
use crate::consumer::ShareConsumer;
use crate::driver::{DriverConfig, DriverMetrics, ShareSinkTask};
use crate::error::{BoxError, Error, ErrorChain};
use crate::lag::{LagReader, ShareGroupLag};
use crate::task::SinkTask;
use crate::telemetry::{ConsumerMetrics, MeteredConsumer, MetricLabels};
use crate::time::deadline_after;

/// What a [`Supervisor`]'s factory builds for one task: the sink task, its consumer (in the
/// connector's share group), and the driver config. The supervisor sets the config's
/// connector name and task id.
#[non_exhaustive]
pub struct TaskParts<C> {
    /// The sink.
    pub task: Box<dyn SinkTask>,
    /// Its own consumer.
    pub consumer: C,
    /// The driver config.
    pub config: DriverConfig,
}

impl<C> std::fmt::Debug for TaskParts<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskParts")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<C: ShareConsumer> TaskParts<C> {
    /// The parts of one task.
    pub fn new(task: Box<dyn SinkTask>, consumer: C, config: DriverConfig) -> Self {
        Self {
            task,
            consumer,
            config,
        }
    }
}

impl TaskParts<crate::KafkaShareConsumer> {
    /// Task `task_id` of the connector `connector` describes (the same config for every
    /// task; `task.id` is set here): its Kafka share consumer (client id
    /// `connector-consumer-<name>-<task>`), dead-letter queue when configured, converters
    /// and transforms from `plugins`, around `task`.
    ///
    /// # Errors
    ///
    /// A config that does not resolve, a dead-letter queue or consumer that cannot connect.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped, the clients connected so far are dropped with it; nothing was
    /// subscribed or acquired yet.
    pub async fn connect(
        worker: &crate::Properties,
        connector: &crate::Properties,
        task_id: u32,
        plugins: &crate::Plugins,
        task: Box<dyn SinkTask>,
    ) -> crate::Result<Self> {
        let mut connector = connector.clone();
        connector.insert("task.id", task_id.to_string());
        let config = crate::ConnectorConfig::resolve(worker, &connector)?;
        let (consumer, driver_config) = crate::driver::connect_parts(&config, plugins).await?;
        Ok(Self::new(task, consumer, driver_config))
    }
}

/// Where a supervised task stands, as Connect's task `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskState {
    /// Not started yet.
    Unassigned,
    /// Being built or running.
    Running,
    /// Failed, waiting for its restart.
    Restarting,
    /// Failed more often in a row than allowed; it stays down.
    Failed,
    /// Stopped by the shutdown signal.
    Stopped,
}

impl TaskState {
    /// The state as Connect writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unassigned => "unassigned",
            Self::Running => "running",
            Self::Restarting => "restarting",
            Self::Failed => "failed",
            Self::Stopped => "stopped",
        }
    }
}

/// One task's status, counters and last error.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TaskStatus {
    /// The task id, from 0.
    pub task: u32,
    /// Where it stands.
    pub state: TaskState,
    /// Restarts so far.
    pub restarts: u64,
    /// The last failure, with its causes.
    pub last_error: Option<String>,
    /// The counters of its current (or last) driver, after its last iteration: they start
    /// again at zero when the task is restarted.
    pub driver: DriverMetrics,
    /// The counters of its current (or last) consumer.
    pub consumer: ConsumerMetrics,
}

/// Reads the statuses of a running [`Supervisor`]'s tasks from anywhere.
#[derive(Debug, Clone)]
pub struct SupervisorHandle(Arc<Shared>);

impl SupervisorHandle {
    /// Every task's status, by task id.
    pub fn statuses(&self) -> Vec<TaskStatus> {
        self.0.lock().clone()
    }

    /// The lag of each share group the tasks read from (one, unless the factory gives tasks
    /// different groups), as last read; a group is left out before its first read answered.
    ///
    /// The supervisor reads each group's lag once for all its tasks, in the background,
    /// every [`lag_refresh_interval`](DriverConfig::lag_refresh_interval) of the first task
    /// built for the group, from the time that task starts until [`run`](Supervisor::run)
    /// returns; never while a task waits for it. With the feature `metrics` every read is
    /// exported (see [`LagReader`]).
    pub fn lag(&self) -> Vec<ShareGroupLag> {
        self.0
            .lag_readers()
            .iter()
            .filter_map(LagReader::snapshot)
            .collect()
    }
}

#[derive(Debug)]
struct Shared {
    connector: String,
    statuses: Mutex<Vec<TaskStatus>>,
    /// One lag reader per share group, shared by the tasks of the group.
    lag: Mutex<Vec<LagReader>>,
    /// Each task's dead-letter circuit breaker window, kept across its restarts.
    breakers: Mutex<Vec<(u32, crate::dlq::breaker::SharedBreakerWindow)>>,
}

impl Shared {
    /// Task `task`'s breaker window: the one of its previous runs, so that a restart does
    /// not open the breaker again, unless its settings changed.
    fn dead_letter_breaker(
        &self,
        task: u32,
        settings: crate::DeadLetterBreaker,
    ) -> crate::dlq::breaker::SharedBreakerWindow {
        let mut breakers = self.breakers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, window)) = breakers.iter().find(|(t, w)| {
            *t == task && w.lock().unwrap_or_else(PoisonError::into_inner).settings() == settings
        }) {
            return Arc::clone(window);
        }
        let window = Arc::new(Mutex::new(crate::dlq::breaker::BreakerWindow::new(
            settings,
            tokio::time::Instant::now(),
        )));
        breakers.retain(|(t, _)| *t != task);
        breakers.push((task, Arc::clone(&window)));
        window
    }

    fn lag_readers(&self) -> std::sync::MutexGuard<'_, Vec<LagReader>> {
        self.lag.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lag reader of `consumer`'s group, started for the first task of the group; `None`
    /// when reading is off (`interval` zero) or the consumer cannot tell.
    fn lag_reader(&self, consumer: &impl ShareConsumer, interval: Duration) -> Option<LagReader> {
        if interval.is_zero() {
            return None;
        }
        let metadata = consumer.group_metadata();
        let group = metadata.group_id();
        let mut readers = self.lag_readers();
        if let Some(reader) = readers.iter().find(|r| r.group() == group) {
            return Some(reader.clone());
        }
        let reader = LagReader::of_consumer(consumer, interval)?;
        readers.push(reader.clone());
        Some(reader)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<TaskStatus>> {
        self.statuses.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn update(&self, task: u32, f: impl FnOnce(&mut TaskStatus)) {
        let mut statuses = self.lock();
        if let Some(status) = statuses.get_mut(task as usize) {
            f(status);
            #[cfg(feature = "metrics")]
            crate::telemetry::export::task_status(
                &self.connector,
                task,
                status.state.as_str(),
                status.restarts,
            );
        }
    }
}

/// Why [`Supervisor::run`] ended without a shutdown.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SupervisorError {
    /// More tasks than one supervisor runs ([`MAX_TASKS`]); none was started.
    #[error(
        "connector {connector}: tasks.max={tasks} is more than one process runs (at most \
         {max}: each task is a share consumer with its own connections); lower tasks.max, or \
         run several processes in the same share group"
    )]
    TooManyTasks {
        /// The connector.
        connector: String,
        /// The tasks asked for.
        tasks: u32,
        /// The most one supervisor runs.
        max: u32,
    },
    /// Tasks failed more often in a row than allowed, or failed to close.
    #[error(
        "connector {connector}: tasks {tasks:?} failed and were not restarted (see their \
         statuses and the log); the first failure: {source}"
    )]
    TasksFailed {
        /// The connector.
        connector: String,
        /// The failed tasks.
        tasks: Vec<u32>,
        /// The first task's last error.
        #[source]
        source: BoxError,
    },
}

/// Runs the tasks of one connector; see the [module documentation](self).
pub struct Supervisor<F> {
    config: SupervisorConfig,
    factory: Arc<F>,
    shared: Arc<Shared>,
}

impl<F> std::fmt::Debug for Supervisor<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("connector", &self.shared.connector)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Aborts a spawned attempt when the supervisor's future is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<F, Fut, C> Supervisor<F>
where
    F: Fn(u32) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<TaskParts<C>, BoxError>> + Send + 'static,
    C: ShareConsumer + 'static,
{
    /// A supervisor of `config.tasks()` tasks of `connector`, each built by `factory` with
    /// its task id (0, 1, ...) when it starts and again at every restart. The future the
    /// factory returns is dropped when the shutdown comes before it completes: it should
    /// hold nothing that needs more than a drop to let go.
    pub fn new(connector: impl Into<String>, config: SupervisorConfig, factory: F) -> Self {
        // Too many tasks: `run` refuses before anything is built (no status either, so an
        // absurd count allocates nothing).
        let tasks = if config.tasks() <= MAX_TASKS {
            config.tasks()
        } else {
            0
        };
        let statuses = (0..tasks)
            .map(|task| TaskStatus {
                task,
                state: TaskState::Unassigned,
                restarts: 0,
                last_error: None,
                driver: DriverMetrics::default(),
                consumer: ConsumerMetrics::default(),
            })
            .collect();
        Self {
            config,
            factory: Arc::new(factory),
            shared: Arc::new(Shared {
                connector: connector.into(),
                statuses: Mutex::new(statuses),
                lag: Mutex::new(Vec::new()),
                breakers: Mutex::new(Vec::new()),
            }),
        }
    }

    /// A handle on the tasks' statuses, usable while [`run`](Self::run) runs.
    pub fn handle(&self) -> SupervisorHandle {
        SupervisorHandle(Arc::clone(&self.shared))
    }

    /// Runs every task until `shutdown` completes (a signal, say), then stops them all
    /// gracefully, each after its current iteration (a task still starting is stopped at
    /// once: its `start` is cut short and its sink stopped; a task the factory is still
    /// building is not built: the factory's future is dropped). Returns early when every task
    /// failed for good.
    ///
    /// Each task runs on its own tokio task (`tokio::spawn`), so a multi-threaded runtime
    /// runs them in parallel.
    ///
    /// # Errors
    ///
    /// [`SupervisorError::TasksFailed`] when a task failed more often in a row than
    /// [`SupervisorConfig::max_restarts`] allows, or failed while stopping.
    ///
    /// # Cancel safety
    ///
    /// Pass the signal as `shutdown` rather than dropping this future: dropped, it aborts
    /// every task in the middle of what it does, without a close; their unacknowledged
    /// records are delivered again once their locks expire.
    pub async fn run(
        &self,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), SupervisorError> {
        if self.config.tasks() > MAX_TASKS {
            return Err(SupervisorError::TooManyTasks {
                connector: self.shared.connector.clone(),
                tasks: self.config.tasks(),
                max: MAX_TASKS,
            });
        }
        let (stop, stopping) = watch::channel(false);
        let tasks = futures::future::join_all(
            (0..self.config.tasks()).map(|task| self.supervise(task, stopping.clone())),
        );
        let mut tasks = pin!(tasks);
        let results = tokio::select! {
            results = &mut tasks => results,
            () = shutdown => {
                tracing::info!(connector = %self.shared.connector, "shutting down every task");
                let _ = stop.send(true);
                tasks.await
            }
        };
        // Every task is done: stop reading the lag.
        self.shared.lag_readers().clear();
        let mut failed = Vec::new();
        let mut first = None;
        for (task, result) in (0..).zip(results) {
            if let Err(e) = result {
                failed.push(task);
                first.get_or_insert(e);
            }
        }
        match first {
            None => Ok(()),
            Some(source) => Err(SupervisorError::TasksFailed {
                connector: self.shared.connector.clone(),
                tasks: failed,
                source,
            }),
        }
    }

    /// Runs task `task` until the shutdown or until it failed for good.
    async fn supervise(&self, task: u32, stopping: watch::Receiver<bool>) -> Result<(), BoxError> {
        let connector = self.shared.connector.clone();
        let mut failures = 0u32;
        loop {
            if *stopping.borrow() {
                self.shared.update(task, |s| s.state = TaskState::Stopped);
                return Ok(());
            }
            self.shared.update(task, |s| s.state = TaskState::Running);
            let started = Instant::now();
            // Its own tokio task: a panic in the sink ends the attempt, not the supervisor.
            let mut running = AbortOnDrop(tokio::spawn(attempt(
                Arc::clone(&self.factory),
                Arc::clone(&self.shared),
                task,
                stopping.clone(),
            )));
            let joined = (&mut running.0).await;
            let error: BoxError = match joined {
                Ok(Ok(())) => {
                    self.shared.update(task, |s| s.state = TaskState::Stopped);
                    return Ok(());
                }
                Ok(Err(e)) => e,
                Err(join) if join.is_panic() => format!("the task panicked: {join}").into(),
                Err(join) => join.into(),
            };
            let message = ErrorChain(&*error).to_string();
            if *stopping.borrow() {
                tracing::warn!(%connector, task, error = %message, "task failed while stopping");
                self.shared.update(task, |s| {
                    s.state = TaskState::Failed;
                    s.last_error = Some(message);
                });
                return Err(error);
            }
            if started.elapsed() >= self.config.healthy_duration() {
                failures = 0;
            }
            failures = failures.saturating_add(1);
            // The dead-letter circuit breaker opened: a restart would only spend a delivery
            // of the records it released (and trip again), so the task waits for someone.
            let driver_error = error.downcast_ref::<Error>();
            let tripped = driver_error.is_some_and(|e| matches!(e, Error::DeadLetterBreaker(_)));
            // A setting at fault fails every restart the same way: say so now, not after
            // every restart's backoff.
            let misconfigured = driver_error.is_some_and(Error::is_config);
            if tripped || misconfigured {
                if tripped {
                    tracing::error!(
                        %connector, task, error = %message,
                        "the dead-letter circuit breaker stopped the task; it stays failed until it is started again"
                    );
                } else {
                    tracing::error!(
                        %connector, task, error = %message,
                        "the task's settings are at fault; it stays failed (a restart would fail the same way)"
                    );
                }
                self.shared.update(task, |s| {
                    s.state = TaskState::Failed;
                    s.last_error = Some(message);
                });
                return Err(error);
            }
            if self
                .config
                .restarts_allowed()
                .is_some_and(|max| failures > max)
            {
                tracing::error!(
                    %connector, task, error = %message,
                    "task failed {failures} times in a row; it stays failed"
                );
                self.shared.update(task, |s| {
                    s.state = TaskState::Failed;
                    s.last_error = Some(message);
                });
                return Err(error);
            }
            let delay = self.config.backoff_for(failures);
            tracing::warn!(
                %connector, task, error = %message, ?delay,
                "task failed; restarting it after the backoff"
            );
            self.shared.update(task, |s| {
                s.state = TaskState::Restarting;
                s.restarts = s.restarts.saturating_add(1);
                s.last_error = Some(message);
            });
            let mut stopping = stopping.clone();
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                _ = stopping.wait_for(|stop| *stop) => {}
            }
        }
    }
}

/// Builds task `task` and runs it until the shutdown (`Ok`) or a failure; closes it in both
/// cases.
async fn attempt<F, Fut, C>(
    factory: Arc<F>,
    shared: Arc<Shared>,
    task: u32,
    mut stopping: watch::Receiver<bool>,
) -> Result<(), BoxError>
where
    F: Fn(u32) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<TaskParts<C>, BoxError>> + Send + 'static,
    C: ShareConsumer + 'static,
{
    // A shutdown while the task is built (its factory connecting to a cluster that does not
    // answer, say) drops the build: nothing was started, so nothing needs closing.
    let parts = tokio::select! {
        biased;
        _ = stopping.wait_for(|stop| *stop) => return Ok(()),
        parts = factory(task) => parts?,
    };
    let labels = MetricLabels::new(
        shared.connector.clone(),
        task,
        parts.consumer.group_metadata().group_id(),
    );
    let consumer = MeteredConsumer::new(parts.consumer, labels);
    let consumer_metrics = consumer.handle();
    let task_id = i32::try_from(task).unwrap_or(i32::MAX);
    let config = parts.config.connector(shared.connector.clone(), task_id);
    let backoff = config.retriable_backoff;
    let lag = shared.lag_reader(&consumer, config.lag_refresh_interval);
    let breaker = shared.dead_letter_breaker(task, config.dead_letter_breaker);
    let mut driver = ShareSinkTask::new(parts.task, consumer, config);
    driver.share_dead_letter_breaker(breaker);
    if let Some(reader) = lag {
        driver.use_lag_reader(reader);
    }
    let result: Result<(), Error> = async {
        // A shutdown while the task starts (a sink that cannot reach its target yet) stops
        // the start: the close below stops the task.
        tokio::select! {
            biased;
            _ = stopping.wait_for(|stop| *stop) => return Ok(()),
            initialized = driver.initialize() => initialized?,
        }
        while !*stopping.borrow() {
            let outcome = driver.iteration().await;
            let (d, c) = (driver.metrics(), consumer_metrics.snapshot());
            shared.update(task, |s| {
                s.driver = d;
                s.consumer = c;
            });
            match outcome {
                Ok(_) => {}
                Err(e) if e.is_retriable() => {
                    tracing::warn!(task, error = %ErrorChain(&e), "iteration failed, retrying");
                    // Renewing what the driver holds (records awaiting a flush, a batch
                    // waiting for its retry): a backoff longer than half a lock would
                    // otherwise let their locks run out.
                    let until = deadline_after(Instant::now(), backoff);
                    tokio::select! {
                        () = driver.sleep_renewing(until) => {}
                        _ = stopping.wait_for(|stop| *stop) => {}
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
    .await;
    let closed = driver.close().await;
    let (d, c) = (driver.metrics(), consumer_metrics.snapshot());
    shared.update(task, |s| {
        s.driver = d;
        s.consumer = c;
    });
    result.and(closed).map_err(BoxError::from)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::embedded::EmbeddedBroker;

    #[tokio::test]
    async fn one_lag_reader_per_group_shared_by_its_tasks() {
        let broker = EmbeddedBroker::new();
        let supervisor = Supervisor::new("c", SupervisorConfig::new(1), |_task| async {
            Err::<TaskParts<crate::embedded::EmbeddedShareConsumer>, BoxError>("never built".into())
        });
        let shared = &supervisor.shared;
        let interval = Duration::from_secs(10);
        let first = shared
            .lag_reader(&broker.share_consumer("a"), interval)
            .expect("the embedded consumer tells the lag");
        let second = shared
            .lag_reader(&broker.share_consumer("a"), interval)
            .unwrap();
        assert!(
            first.is_same(&second),
            "the tasks of group a share one reader"
        );
        let other = shared
            .lag_reader(&broker.share_consumer("b"), interval)
            .unwrap();
        assert!(!first.is_same(&other));
        assert_eq!(shared.lag_readers().len(), 2);
        assert!(
            shared
                .lag_reader(&broker.share_consumer("c"), Duration::ZERO)
                .is_none(),
            "0 turns reading off"
        );
        assert_eq!(shared.lag_readers().len(), 2);
    }
}
