//! The supervisor on the embedded share group: several tasks drain one group, failed tasks are
//! restarted with backoff or left failed, and a shutdown closes every task.

use std::collections::HashMap;
use std::future::Ready;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::embedded::{
    AutoOffsetReset, EmbeddedBroker, EmbeddedShareConsumer, GroupConfig, ProduceRecord,
};
use kafka_share_sink::supervisor::{
    Supervisor, SupervisorConfig, SupervisorError, SupervisorHandle, TaskParts, TaskState,
};
use kafka_share_sink::{
    AckPolicy, AcknowledgeType, AcknowledgementMode, BoxError, CommitResults, ConsumerCapabilities,
    ConsumerError, ConsumerRecord, Delivered, DriverConfig, Durability, GroupMetadata,
    PendingCommit, RecordId, ShareConsumer, SinkRecord, SinkTask, TaskConfig, TaskError,
};
use tokio::time::Instant;

const GROUP: &str = "sink";
const TOPIC: &str = "events";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// `start` fails.
    FailStart,
    /// The first non-empty put panics.
    PanicOnFirstPut,
    /// `start` never finishes (a target not reachable yet).
    HangStart,
    /// Nothing put is ever made durable (`pre_commit` says so): under
    /// `ack.policy=after.flush` the driver holds it all.
    NeverFlush,
}

#[derive(Debug, Default)]
struct Store {
    /// How many times each record was written.
    written: HashMap<RecordId, u32>,
    /// Task ids whose sink's start was called.
    started: Vec<u32>,
    /// Task ids whose sink was stopped.
    stopped: Vec<u32>,
}

struct Sink {
    task: u32,
    store: Arc<Mutex<Store>>,
    fault: Fault,
}

#[async_trait]
impl SinkTask for Sink {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        self.store.lock().unwrap().started.push(self.task);
        if self.fault == Fault::FailStart {
            return Err(TaskError::fatal("the database went away"));
        }
        if self.fault == Fault::HangStart {
            std::future::pending::<()>().await;
        }
        Ok(())
    }
    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        if self.fault == Fault::PanicOnFirstPut {
            self.fault = Fault::None;
            panic!("a bug in the sink");
        }
        let mut store = self.store.lock().unwrap();
        for r in records {
            *store.written.entry(r.original_id().clone()).or_default() += 1;
        }
        Ok(())
    }
    async fn pre_commit(&mut self, _: &Delivered) -> Result<Durability, TaskError> {
        Ok(if self.fault == Fault::NeverFlush {
            Durability::Nothing
        } else {
            Durability::All
        })
    }
    async fn stop(&mut self) -> Result<(), TaskError> {
        self.store.lock().unwrap().stopped.push(self.task);
        Ok(())
    }
}

/// The embedded consumer, whose second poll fails (retriably: a timeout).
struct FailsSecondPoll {
    inner: EmbeddedShareConsumer,
    /// Polls so far, shared with the test.
    polls: Arc<AtomicU32>,
}

#[async_trait]
impl ShareConsumer for FailsSecondPoll {
    async fn subscribe(&mut self, topics: Vec<String>) -> Result<(), ConsumerError> {
        self.inner.subscribe(topics).await
    }
    fn subscription(&self) -> Vec<String> {
        self.inner.subscription()
    }
    async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ConsumerError> {
        if self.polls.fetch_add(1, Ordering::SeqCst) == 1 {
            return Err(ConsumerError::Timeout(timeout));
        }
        self.inner.poll(timeout).await
    }
    fn last_poll_acquired_at(&self) -> Option<Instant> {
        self.inner.last_poll_acquired_at()
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

fn broker(records: usize) -> EmbeddedBroker {
    let broker = EmbeddedBroker::new();
    broker.create_topic(TOPIC, 2).unwrap();
    broker
        .set_group_config(
            GROUP,
            GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest),
        )
        .unwrap();
    for i in 0..records {
        broker
            .produce(
                TOPIC,
                ProduceRecord::new()
                    .partition((i % 2) as i32)
                    .value(format!("v{i}")),
            )
            .unwrap();
    }
    broker
}

fn driver_config() -> DriverConfig {
    DriverConfig::new([TOPIC])
        .poll_timeout(Duration::from_millis(20))
        .retriable_backoff(Duration::from_millis(10))
}

/// A factory of tasks that each write to `store` with the fault `fault` gives their task id,
/// on `broker`'s group.
fn sinks(
    broker: &EmbeddedBroker,
    store: &Arc<Mutex<Store>>,
    fault: impl Fn(u32) -> Fault + Send + Sync + 'static,
) -> impl Fn(u32) -> Ready<Result<TaskParts<EmbeddedShareConsumer>, BoxError>> + Send + Sync + 'static
{
    let (broker, store) = (broker.clone(), Arc::clone(store));
    move |task| {
        let sink = Sink {
            task,
            store: Arc::clone(&store),
            fault: fault(task),
        };
        let consumer = broker.share_consumer(GROUP);
        std::future::ready(Ok(TaskParts::new(
            Box::new(sink),
            consumer,
            driver_config(),
        )))
    }
}

/// Completes once `done` holds for the statuses (checked every 5 ms).
async fn until(handle: SupervisorHandle, done: impl Fn(&SupervisorHandle) -> bool) {
    while !done(&handle) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Fails the test instead of hanging it.
async fn within<T>(run: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the supervisor ran for a minute: a task is stuck")
}

fn distinct_written(store: &Arc<Mutex<Store>>) -> usize {
    store.lock().unwrap().written.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_tasks_drain_one_group_and_a_shutdown_closes_them_all() {
    let broker = broker(300);
    let store = Arc::new(Mutex::new(Store::default()));
    let factory = sinks(&broker, &store, |_| Fault::None);
    let supervisor = Supervisor::new("drain", SupervisorConfig::new(3), factory);
    let handle = supervisor.handle();
    assert!(
        handle
            .statuses()
            .iter()
            .all(|s| s.state == TaskState::Unassigned)
    );
    let watched = Arc::clone(&store);
    within(supervisor.run(async move {
        while distinct_written(&watched) < 300 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }))
    .await
    .expect("every task stops cleanly");

    let store = store.lock().unwrap();
    assert_eq!(store.written.len(), 300);
    assert!(
        store.written.values().all(|n| *n == 1),
        "no failure, so no record is written twice"
    );
    // A task the shutdown found still starting up is not started at all.
    let mut stopped = store.stopped.clone();
    stopped.sort_unstable();
    let mut started = store.started.clone();
    started.sort_unstable();
    assert!(!started.is_empty());
    assert_eq!(stopped, started, "every started task's sink was stopped");
    let statuses = handle.statuses();
    assert_eq!(statuses.len(), 3);
    for (i, status) in statuses.iter().enumerate() {
        assert_eq!(status.task as usize, i);
        assert_eq!(status.state, TaskState::Stopped);
        assert_eq!(status.restarts, 0);
        assert!(status.last_error.is_none());
        assert_eq!(
            status.driver.records_read, status.consumer.records_consumed,
            "the metered consumer saw what the driver read"
        );
    }
    let put: u64 = statuses.iter().map(|s| s.driver.records_put).sum();
    assert_eq!(put, 300);
    // The close committed everything: nothing is left acquired or available.
    let counts = broker.state_counts(GROUP);
    assert_eq!(counts.acknowledged, 300, "{counts:?}");
}

/// A shutdown while a task's `start` waits stops it: the supervisor returns, and each task
/// whose start was called is stopped (it waited for ever before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_while_the_tasks_start_stops_them() {
    let broker = broker(10);
    let store = Arc::new(Mutex::new(Store::default()));
    let factory = sinks(&broker, &store, |_| Fault::HangStart);
    let supervisor = Supervisor::new("hang", SupervisorConfig::new(2), factory);
    let handle = supervisor.handle();
    let watched = Arc::clone(&store);
    within(supervisor.run(async move {
        while watched.lock().unwrap().started.len() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }))
    .await
    .expect("a clean stop");
    let store = store.lock().unwrap();
    assert!(store.written.is_empty());
    let mut stopped = store.stopped.clone();
    stopped.sort_unstable();
    assert_eq!(stopped, [0, 1], "each started task was stopped");
    assert!(
        handle
            .statuses()
            .iter()
            .all(|s| s.state == TaskState::Stopped)
    );
}

/// A shutdown while the factory builds the tasks (connecting to a cluster that does not
/// answer, say) stops the builds: the supervisor returns, and no task was started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_while_the_tasks_are_built_stops_the_builds() {
    let builds = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&builds);
    let supervisor = Supervisor::new("unbuilt", SupervisorConfig::new(2), move |_task| {
        counter.fetch_add(1, Ordering::SeqCst);
        std::future::pending::<Result<TaskParts<EmbeddedShareConsumer>, BoxError>>()
    });
    let handle = supervisor.handle();
    within(supervisor.run(async move {
        while builds.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }))
    .await
    .expect("a clean stop");
    let statuses = handle.statuses();
    assert!(
        statuses.iter().all(|s| s.state == TaskState::Stopped),
        "{statuses:?}"
    );
}

/// The backoff after a retriable iteration error keeps the locks of what the task holds:
/// records put under `ack.policy=after.flush` and not yet flushed stay with it through a
/// backoff longer than their lock (40 s against 30 s), and are written once. Before, the
/// backoff was a plain sleep: the locks ran out and the group delivered the records again.
#[tokio::test(start_paused = true)]
async fn the_backoff_after_a_failed_iteration_keeps_the_locks_of_held_records() {
    let broker = broker(4);
    let store = Arc::new(Mutex::new(Store::default()));
    let polls = Arc::new(AtomicU32::new(0));
    let (group, sinks, counter) = (broker.clone(), Arc::clone(&store), Arc::clone(&polls));
    let supervisor = Supervisor::new("held", SupervisorConfig::new(1), move |task| {
        let consumer = FailsSecondPoll {
            inner: group.share_consumer(GROUP),
            polls: Arc::clone(&counter),
        };
        let sink = Sink {
            task,
            store: Arc::clone(&sinks),
            fault: Fault::NeverFlush,
        };
        let config = driver_config()
            .ack_policy(AckPolicy::AfterFlush)
            .retriable_backoff(Duration::from_secs(40));
        std::future::ready(Ok::<_, BoxError>(TaskParts::new(
            Box::new(sink),
            consumer,
            config,
        )))
    });
    let watched = Arc::clone(&store);
    let handle = supervisor.handle();
    within(supervisor.run(async move {
        while distinct_written(&watched) < 4 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Past the backoff, and a few iterations after it.
        tokio::time::sleep(Duration::from_secs(45)).await;
    }))
    .await
    .expect("a clean stop");
    let status = &handle.statuses()[0];
    assert_eq!(status.restarts, 0, "{status:?}");
    let driver = &status.driver;
    assert!(
        polls.load(Ordering::SeqCst) > 2,
        "polled on after the failed poll: {status:?}"
    );
    assert_eq!(
        (driver.records_read, driver.records_put),
        (4, 4),
        "held records were delivered again: {driver:?}"
    );
    assert_eq!(
        (driver.lock_losses, driver.records_redelivered),
        (0, 0),
        "{driver:?}"
    );
    assert!(driver.records_renewed >= 4, "{driver:?}");
    let store = store.lock().unwrap();
    assert_eq!(store.written.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_task_is_built_again_and_restarted_after_the_backoff() {
    let broker = broker(100);
    let store = Arc::new(Mutex::new(Store::default()));
    let builds = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&builds);
    let config =
        SupervisorConfig::new(2).restart_backoff(Duration::from_millis(50), Duration::from_secs(1));
    // Task 1's first build fails to start; its rebuilds do not.
    let factory = sinks(&broker, &store, move |task| {
        if task == 1 && counter.fetch_add(1, Ordering::SeqCst) == 0 {
            Fault::FailStart
        } else {
            Fault::None
        }
    });
    let supervisor = Supervisor::new("restart", config, factory);
    let handle = supervisor.handle();
    let watched = Arc::clone(&store);
    let restarted = handle.clone();
    let rebuilt = Arc::clone(&builds);
    within(supervisor.run(async move {
        until(restarted, |h| h.statuses()[1].restarts == 1).await;
        while rebuilt.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        while distinct_written(&watched) < 100 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }))
    .await
    .expect("the restarted task stops cleanly");

    let statuses = handle.statuses();
    assert_eq!(statuses[0].restarts, 0);
    assert_eq!(statuses[1].restarts, 1);
    assert_eq!(statuses[1].state, TaskState::Stopped);
    let error = statuses[1]
        .last_error
        .as_deref()
        .expect("the failure is kept");
    assert!(error.contains("the database went away"), "{error}");
    assert_eq!(builds.load(Ordering::SeqCst), 2, "task 1 was built twice");
    assert_eq!(distinct_written(&store), 100, "every record arrived");
    // The failed sink is stopped by its driver's close (as Connect stops a task whose start
    // failed), the rebuilt one at the shutdown.
    let stopped = store.lock().unwrap().stopped.clone();
    assert_eq!(
        stopped.iter().filter(|t| **t == 1).count(),
        2,
        "{stopped:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_task_is_restarted_and_its_records_come_back() {
    let broker = broker(40);
    let store = Arc::new(Mutex::new(Store::default()));
    let builds = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&builds);
    let config = SupervisorConfig::new(1)
        .restart_backoff(Duration::from_millis(10), Duration::from_millis(10));
    let factory = sinks(&broker, &store, move |_| {
        if counter.fetch_add(1, Ordering::SeqCst) == 0 {
            Fault::PanicOnFirstPut
        } else {
            Fault::None
        }
    });
    let supervisor = Supervisor::new("panics", config, factory);
    let handle = supervisor.handle();
    let watched = Arc::clone(&store);
    within(supervisor.run(async move {
        while distinct_written(&watched) < 40 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }))
    .await
    .expect("the restarted task stops cleanly");
    let status = &handle.statuses()[0];
    assert_eq!(status.restarts, 1);
    let error = status.last_error.as_deref().unwrap();
    assert!(error.contains("panicked"), "{error}");
    // The driver caught the panic and released the batch (and the group gives back what
    // else the member held when its consumer is dropped): the new task writes them all.
    assert_eq!(distinct_written(&store), 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_failing_every_time_stays_failed_after_max_restarts_and_the_others_go_on() {
    let broker = broker(60);
    let store = Arc::new(Mutex::new(Store::default()));
    let (group, sinks) = (broker.clone(), Arc::clone(&store));
    let config = SupervisorConfig::new(2)
        .restart_backoff(Duration::from_millis(20), Duration::from_secs(10))
        .max_restarts(Some(2));
    let supervisor = Supervisor::new("broken", config, move |task| {
        let consumer = group.share_consumer(GROUP);
        let store = Arc::clone(&sinks);
        async move {
            if task == 0 {
                return Err("cannot reach the database at db:5432".into());
            }
            let sink = Sink {
                task,
                store,
                fault: Fault::None,
            };
            Ok(TaskParts::new(Box::new(sink), consumer, driver_config()))
        }
    });
    let handle = supervisor.handle();
    let failed = handle.clone();
    let watched = Arc::clone(&store);
    let started = Instant::now();
    let error = within(supervisor.run(async move {
        until(failed, |h| h.statuses()[0].state == TaskState::Failed).await;
        while distinct_written(&watched) < 60 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }))
    .await
    .expect_err("task 0 failed for good");
    let SupervisorError::TasksFailed {
        connector,
        tasks,
        source,
    } = &error
    else {
        panic!("{error:?}")
    };
    assert_eq!(connector, "broken");
    assert_eq!(tasks, &[0]);
    assert!(source.to_string().contains("db:5432"), "{source}");
    // Two restarts, after 20 ms then 40 ms.
    assert!(started.elapsed() >= Duration::from_millis(60));
    let statuses = handle.statuses();
    assert_eq!(statuses[0].state, TaskState::Failed);
    assert_eq!(statuses[0].restarts, 2);
    assert_eq!(statuses[1].state, TaskState::Stopped);
    assert_eq!(
        distinct_written(&store),
        60,
        "task 1 drained the group alone"
    );
}

/// An absurd `tasks.max` (the connector config takes up to `i32::MAX`) is refused by `run`
/// with the count and the bound, before anything is built; before, one status per task was
/// allocated up front (about 1 TB for this count) and the process aborted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_tasks_than_one_process_runs_are_refused_before_anything_is_built() {
    use kafka_share_sink::supervisor::MAX_TASKS;
    let broker = broker(0);
    let builds = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&builds);
    let tasks = i32::MAX as u32;
    let supervisor = Supervisor::new("huge", SupervisorConfig::new(tasks), move |task| {
        counter.fetch_add(1, Ordering::SeqCst);
        let consumer = broker.share_consumer(GROUP);
        async move {
            let sink = Sink {
                task,
                store: Arc::default(),
                fault: Fault::None,
            };
            Ok(TaskParts::new(Box::new(sink), consumer, driver_config()))
        }
    });
    let error = within(supervisor.run(std::future::pending()))
        .await
        .expect_err("refused");
    assert!(
        matches!(&error, SupervisorError::TooManyTasks { tasks: t, max, .. } if *t == tasks && *max == MAX_TASKS),
        "{error:?}"
    );
    assert!(error.to_string().contains("tasks.max"), "{error}");
    assert_eq!(builds.load(Ordering::SeqCst), 0);
    assert!(supervisor.handle().statuses().is_empty());
}

/// A task whose settings are at fault (here a driver setting the consumer cannot serve) is
/// not restarted: every restart would fail the same way, only after its backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_with_settings_at_fault_is_not_restarted() {
    let broker = broker(0);
    let store = Arc::new(Mutex::new(Store::default()));
    let builds = Arc::new(AtomicU32::new(0));
    let (group, sinks, counter) = (broker.clone(), Arc::clone(&store), Arc::clone(&builds));
    let config = SupervisorConfig::new(1)
        .restart_backoff(Duration::from_millis(10), Duration::from_millis(10))
        .max_restarts(Some(5));
    let supervisor = Supervisor::new("misconfigured", config, move |task| {
        counter.fetch_add(1, Ordering::SeqCst);
        let consumer = group.share_consumer_with(
            GROUP,
            kafka_share_sink::embedded::ConsumerOptions::new()
                .acknowledgement_mode(kafka_share_sink::AcknowledgementMode::Implicit),
        );
        let store = Arc::clone(&sinks);
        async move {
            let sink = Sink {
                task,
                store,
                fault: Fault::None,
            };
            // after.flush needs explicit acknowledgement: initialize refuses.
            let config = driver_config().ack_policy(kafka_share_sink::AckPolicy::AfterFlush);
            Ok(TaskParts::new(Box::new(sink), consumer, config))
        }
    });
    let handle = supervisor.handle();
    let error = within(supervisor.run(std::future::pending()))
        .await
        .expect_err("the task failed for good");
    assert!(
        matches!(&error, SupervisorError::TasksFailed { tasks, .. } if tasks == &[0]),
        "{error:?}"
    );
    let status = &handle.statuses()[0];
    assert_eq!((status.state, status.restarts), (TaskState::Failed, 0));
    assert!(
        status
            .last_error
            .as_deref()
            .unwrap()
            .contains("after.flush"),
        "{:?}",
        status.last_error
    );
    assert_eq!(
        builds.load(Ordering::SeqCst),
        1,
        "built once, not restarted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_task_failed_for_good_run_returns_without_a_shutdown() {
    let config = SupervisorConfig::new(2)
        .restart_backoff(Duration::from_millis(1), Duration::from_millis(1))
        .max_restarts(Some(0));
    let supervisor = Supervisor::new("doomed", config, |_task| async {
        Err::<TaskParts<kafka_share_sink::embedded::EmbeddedShareConsumer>, _>(
            "no such table".into(),
        )
    });
    let error = within(supervisor.run(std::future::pending()))
        .await
        .expect_err("both failed");
    let SupervisorError::TasksFailed { tasks, .. } = error else {
        unreachable!()
    };
    assert_eq!(tasks, [0, 1]);
}

#[test]
fn the_backoff_doubles_up_to_its_bound() {
    let config = SupervisorConfig::new(1)
        .restart_backoff(Duration::from_millis(300), Duration::from_secs(5));
    let delays: Vec<_> = (1..=6).map(|n| config.backoff_for(n)).collect();
    assert_eq!(
        delays,
        [300, 600, 1200, 2400, 4800, 5000].map(Duration::from_millis)
    );
    assert_eq!(config.backoff_for(u32::MAX), Duration::from_secs(5));
    assert_eq!(SupervisorConfig::new(0).tasks(), 1, "at least one task");
}
