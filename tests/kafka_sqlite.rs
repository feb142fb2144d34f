//! The SQLite sink example (examples/sinks/sqlite.rs) against a real Apache Kafka broker
//! (started by `scripts/test.sh`), through the supervisor: a crash test. The sink runs in a
//! child process (this test binary, re-run on its ignored `child` test), which is killed with
//! SIGKILL mid-run and started again; the table then holds every produced record exactly once.

mod support;

#[allow(dead_code)]
#[path = "../examples/sinks/sqlite.rs"]
mod sqlite;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::supervisor::{Supervisor, SupervisorConfig, TaskParts};
use kafka_share_sink::{
    Delivered, Durability, KafkaAdmin, Plugins, Properties, SinkRecord, SinkTask, TaskConfig,
    TaskError,
};
use rskafka::client::ClientBuilder;
use rskafka::client::partition::{Compression, UnknownTopicHandling};
use rskafka::record::Record;

const PARTITIONS: i32 = 3;
const LOCK_MS: u64 = 2_000;
const CHILD_ENV: &str = "KSS_SQLITE_CHILD";

/// The SQLite sink, with a pause between its database commit and the acknowledgement of
/// the records (and then a slower `put`): a SIGKILL then most likely lands after the rows are
/// in the table and before the group knows, the window the idempotent upsert is for.
struct AckLater {
    sink: sqlite::SqliteSink,
    pause: Duration,
}

#[async_trait]
impl SinkTask for AckLater {
    async fn start(&mut self, config: &TaskConfig) -> Result<(), TaskError> {
        self.sink.start(config).await
    }
    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if !self.pause.is_zero() && !records.is_empty() {
            // The slow run also writes slowly (10 ms a poll of 25): its table fills in steps of
            // a few hundred rows per commit, so the SIGKILL lands mid-run. At full speed one
            // commit per task could write all 3,000 rows between two looks of the parent.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.sink.put(records).await
    }
    async fn pre_commit(&mut self, delivered: &Delivered) -> Result<Durability, TaskError> {
        let durable = self.sink.pre_commit(delivered).await?;
        if !delivered.is_empty() {
            tokio::time::sleep(self.pause).await;
        }
        Ok(durable)
    }
    async fn stop(&mut self) -> Result<(), TaskError> {
        self.sink.stop().await
    }
}

/// The child process: two supervised SQLite sink tasks until stdin closes (or a SIGKILL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of sqlite_sink_keeps_every_record_exactly_once_across_a_sigkill"]
async fn child() {
    let settings = std::env::var(CHILD_ENV).expect("run by the parent test");
    let [bootstrap, topic, group, db, pause]: [&str; 5] = settings
        .split('|')
        .collect::<Vec<_>>()
        .try_into()
        .expect("bootstrap|topic|group|db|pause-ms");
    let pause = Duration::from_millis(pause.parse().expect("pause in ms"));
    let worker = Properties::from_iter([("bootstrap.servers", bootstrap)]);
    let connector = Properties::from_iter([
        ("name", "sqlite-crash"),
        ("connector.class", sqlite::CLASS),
        ("tasks.max", "2"),
        ("topics", topic),
        ("share.group.id", group),
        ("ack.policy", "after.flush"),
        ("sqlite.path", db),
        ("consumer.override.max.poll.records", "25"),
        ("consumer.override.fetch.max.wait.ms", "100"),
        // Rows reach the table at each commit (pre_commit is the database transaction):
        // commits every 100 ms make the table fill in steps, so the parent's SIGKILL lands
        // mid-run. At the default second, one commit could write all 3,000 rows at once.
        ("offset.flush.interval.ms", "100"),
    ]);
    let supervisor = Supervisor::new(
        "sqlite-crash",
        SupervisorConfig::new(2)
            .restart_backoff(Duration::from_millis(100), Duration::from_secs(1)),
        move |task_id| {
            let (worker, connector) = (worker.clone(), connector.clone());
            async move {
                let sink = Box::new(AckLater {
                    sink: sqlite::SqliteSink::default(),
                    pause,
                });
                Ok(TaskParts::connect(&worker, &connector, task_id, &Plugins::new(), sink).await?)
            }
        },
    );
    // The parent holds our stdin: when it goes away, so do we.
    let (closed, stdin_closed) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        let _ = closed.send(());
    });
    supervisor
        .run(async move {
            let _ = stdin_closed.await;
        })
        .await
        .expect("the child's tasks stop cleanly");
}

/// Kills the child when the parent test ends, whatever happens.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_child(settings: &str) -> ChildGuard {
    let exe = std::env::current_exe().expect("this test binary");
    let child = Command::new(exe)
        .args(["--exact", "child", "--ignored", "--nocapture"])
        .env(CHILD_ENV, settings)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn the child");
    ChildGuard(child)
}

/// The rows of the table: (partition, offset) → (value, writes).
fn rows(db: &Path) -> BTreeMap<(i32, i64), (String, i64)> {
    let Ok(conn) = rusqlite::Connection::open_with_flags(
        db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    ) else {
        return BTreeMap::new();
    };
    let Ok(mut query) = conn.prepare(
        "SELECT kafka_partition, kafka_offset, CAST(record_value AS TEXT), writes FROM records",
    ) else {
        // Not created yet.
        return BTreeMap::new();
    };
    query
        .query_map([], |row| {
            Ok((
                (row.get::<_, i32>(0)?, row.get::<_, i64>(1)?),
                (row.get::<_, String>(2)?, row.get::<_, i64>(3)?),
            ))
        })
        .expect("query")
        .map(|row| row.expect("row"))
        .collect()
}

async fn wait_for_rows(db: &Path, at_least: usize, what: &str) -> usize {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let n = rows(db).len();
        if n >= at_least {
            return n;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: only {n} of {at_least} rows after two minutes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn produce(bootstrap: &str, topic: &str, values: std::ops::Range<usize>) {
    let client = ClientBuilder::new(vec![bootstrap.to_owned()])
        .build()
        .await
        .expect("rskafka");
    for partition in 0..PARTITIONS {
        let batch: Vec<Record> = values
            .clone()
            .filter(|i| *i as i32 % PARTITIONS == partition)
            .map(|i| Record {
                key: Some(i.to_string().into_bytes()),
                value: Some(format!("record {i}").into_bytes()),
                headers: BTreeMap::new(),
                timestamp: chrono::Utc::now(),
            })
            .collect();
        let partition = client
            .partition_client(topic.to_owned(), partition, UnknownTopicHandling::Retry)
            .await
            .expect("partition client");
        // Small batches: a share fetch acquires whole batches, so this keeps what a member
        // holds at a time (and loses at the SIGKILL) small.
        for chunk in batch.chunks(50) {
            partition
                .produce(chunk.to_vec(), Compression::NoCompression)
                .await
                .expect("produce");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_sink_keeps_every_record_exactly_once_across_a_sigkill() {
    let Some(bootstrap) = support::bootstrap("sqlite_sink_crash") else {
        return;
    };
    let topic = support::unique("sqlite-crash");
    let group = support::unique("sqlite-crash-group");
    let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
    admin
        .create_topic(&topic, PARTITIONS, 1)
        .await
        .expect("topic");
    admin
        .set_share_group_config(
            &group,
            &[
                ("share.auto.offset.reset", "earliest"),
                ("share.record.lock.duration.ms", &LOCK_MS.to_string()),
            ],
        )
        .await
        .expect("group config");
    const FIRST: usize = 3_000;
    const TOTAL: usize = 4_000;
    produce(&bootstrap, &topic, 0..FIRST).await;

    let dir = std::env::temp_dir().join(support::unique("kss-sqlite"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let db = dir.join("sink.db");
    let settings = format!("{bootstrap}|{topic}|{group}|{}", db.display());

    // First run, slow to acknowledge: killed with SIGKILL once a few batches are in the table.
    let mut first = spawn_child(&format!("{settings}|200"));
    wait_for_rows(&db, 300, "first run").await;
    first.0.kill().expect("SIGKILL the child");
    let status = first.0.wait().expect("reap the child");
    assert!(!status.success(), "the child was killed: {status}");
    let at_kill = rows(&db).len();
    assert!(
        at_kill < FIRST,
        "the child was killed mid-run ({at_kill} of {FIRST} rows were written)"
    );

    // Records keep arriving while the sink is down.
    produce(&bootstrap, &topic, FIRST..TOTAL).await;

    // Second run: the records the dead member held come back once their locks expire.
    let second = spawn_child(&format!("{settings}|0"));
    wait_for_rows(&db, TOTAL, "second run").await;
    // Let in-flight redeliveries land, then stop it the hard way too.
    tokio::time::sleep(Duration::from_millis(2 * LOCK_MS)).await;
    drop(second);

    let table = rows(&db);
    assert_eq!(table.len(), TOTAL, "one row per record");
    let values: BTreeSet<&str> = table.values().map(|(v, _)| v.as_str()).collect();
    let expected: BTreeSet<String> = (0..TOTAL).map(|i| format!("record {i}")).collect();
    assert_eq!(
        values,
        expected.iter().map(String::as_str).collect(),
        "every produced record, each once"
    );
    for partition in 0..PARTITIONS {
        let offsets: Vec<i64> = table
            .keys()
            .filter(|(p, _)| *p == partition)
            .map(|(_, o)| *o)
            .collect();
        let n = offsets.len() as i64;
        assert_eq!(
            offsets,
            (0..n).collect::<Vec<_>>(),
            "partition {partition}: every offset from 0, no gap"
        );
    }
    let rewritten = table.values().filter(|(_, writes)| *writes > 1).count();
    eprintln!(
        "{at_kill} rows at the SIGKILL; {rewritten} records were written again after it \
         (redelivered, upserted in place)"
    );
    assert!(
        rewritten > 0,
        "the SIGKILL landed between a database commit and its acknowledgement, so some \
         records came back and were upserted again"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
