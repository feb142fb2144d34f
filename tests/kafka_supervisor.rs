//! The supervisor against a real Apache Kafka broker (started by `scripts/test.sh`): three
//! tasks, each its own `KafkaShareConsumer` in one share group, drain a topic with a single
//! partition; a task that fails to start is built again; the shutdown closes every task.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::supervisor::{Supervisor, SupervisorConfig, TaskParts, TaskState};
use kafka_share_sink::{
    KafkaAdmin, Plugins, Properties, SinkRecord, SinkTask, TaskConfig, TaskError,
};

const RECORDS: usize = 600;

#[derive(Default)]
struct Store {
    /// Offset → (times written, by which tasks).
    written: HashMap<i64, Vec<u32>>,
    /// Task ids whose sink's start was called.
    started: Vec<u32>,
    stopped: Vec<u32>,
}

struct Sink {
    task: u32,
    store: Arc<Mutex<Store>>,
    fail_start: bool,
}

#[async_trait]
impl SinkTask for Sink {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        self.store.lock().unwrap().started.push(self.task);
        if self.fail_start {
            return Err(TaskError::fatal("warehouse not reachable yet"));
        }
        Ok(())
    }
    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        // A slow sink: one task alone would take seconds, long enough for every member to
        // be assigned the partition.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut store = self.store.lock().unwrap();
        for r in records {
            store
                .written
                .entry(r.original_offset())
                .or_default()
                .push(self.task);
        }
        Ok(())
    }
    async fn stop(&mut self) -> Result<(), TaskError> {
        self.store.lock().unwrap().stopped.push(self.task);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_supervised_tasks_drain_one_partition_with_a_restart_and_stop_cleanly() {
    let Some(bootstrap) = support::bootstrap("supervisor") else {
        return;
    };
    let topic = support::unique("supervisor");
    let group = support::unique("supervisor-group");
    let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
    admin.create_topic(&topic, 1, 1).await.expect("topic");
    admin
        .set_share_group_config(
            &group,
            &[
                ("share.auto.offset.reset", "earliest"),
                // Members learn their assignment within half a second.
                ("share.heartbeat.interval.ms", "500"),
            ],
        )
        .await
        .expect("group config");
    let values = (0..RECORDS).map(|i| format!("v{i}").into_bytes());
    support::produce_values(&bootstrap, &topic, 0, values, 20).await;

    let worker = Properties::from_iter([("bootstrap.servers", bootstrap.as_str())]);
    let connector = Properties::from_iter([
        ("name", "warehouse"),
        ("tasks.max", "3"),
        ("topics", topic.as_str()),
        ("share.group.id", group.as_str()),
        ("consumer.override.max.poll.records", "20"),
        // Acquisitions of at most 20 records, the leader's members taking turns: a consumer that
        // fetches ahead (or takes whole batches) may take most of the partition's 600 records at
        // once, and the spread below would not be tested.
        ("consumer.override.share.acquire.mode", "record_limit"),
        ("consumer.override.fetch.max.wait.ms", "100"),
    ]);
    let store = Arc::new(Mutex::new(Store::default()));
    let builds_of_task_0 = Arc::new(AtomicU32::new(0));
    let (sinks, builds) = (Arc::clone(&store), Arc::clone(&builds_of_task_0));
    let config = kafka_share_sink::ConnectorConfig::resolve(&worker, &connector).unwrap();
    let supervisor = Supervisor::new(
        config.name(),
        SupervisorConfig::from_connector(&config)
            .restart_backoff(Duration::from_millis(100), Duration::from_secs(1)),
        move |task| {
            let (worker, connector, store) =
                (worker.clone(), connector.clone(), Arc::clone(&sinks));
            let fail_start = task == 0 && builds.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                let sink = Box::new(Sink {
                    task,
                    store,
                    fail_start,
                });
                Ok(TaskParts::connect(&worker, &connector, task, &Plugins::new(), sink).await?)
            }
        },
    );
    let handle = supervisor.handle();
    let watched = Arc::clone(&store);
    tokio::time::timeout(
        Duration::from_secs(120),
        supervisor.run(async move {
            loop {
                // Every sink expected to be stopped below started: a shutdown before a
                // task's start does not start it (and so does not stop it).
                let done = {
                    let store = watched.lock().unwrap();
                    let starts = |task: u32| store.started.iter().filter(|t| **t == task).count();
                    store.written.len() == RECORDS
                        && starts(0) >= 2
                        && starts(1) >= 1
                        && starts(2) >= 1
                };
                if done {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }),
    )
    .await
    .expect("the records were drained within two minutes")
    .expect("every task stops cleanly");

    let store = store.lock().unwrap();
    assert_eq!(store.written.len(), RECORDS);
    assert!(
        store.written.values().all(|tasks| tasks.len() == 1),
        "no failed put, so no record was written twice"
    );
    let mut by_task = [0usize; 3];
    for tasks in store.written.values() {
        by_task[tasks[0] as usize] += 1;
    }
    eprintln!("records written per task: {by_task:?}");
    assert!(
        by_task.iter().filter(|n| **n > 0).count() >= 2,
        "the share group spread one partition's records over several tasks: {by_task:?}"
    );
    let statuses = handle.statuses();
    assert!(statuses.iter().all(|s| s.state == TaskState::Stopped));
    assert_eq!(statuses[0].restarts, 1);
    let error = statuses[0].last_error.as_deref().unwrap();
    assert!(error.contains("warehouse not reachable yet"), "{error}");
    let put: u64 = statuses.iter().map(|s| s.driver.records_put).sum();
    assert_eq!(put as usize, RECORDS);
    for s in &statuses {
        assert_eq!(s.driver.records_put as usize, by_task[s.task as usize]);
        assert_eq!(s.consumer.records_consumed, s.driver.records_read);
    }
    // Task 0's first sink (failed start) and every task's last one were stopped.
    let mut stopped = store.stopped.clone();
    stopped.sort_unstable();
    assert_eq!(stopped, [0, 0, 1, 2]);
}
