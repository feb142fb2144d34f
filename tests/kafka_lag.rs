//! The share group's lag against a real Apache Kafka 4.4 broker (started by
//! `scripts/test.sh`): the exported lag gauges equal what Kafka's own
//! `kafka-share-groups.sh --describe` shows at the same moment (consumption paused while both
//! are read), and the lag falls to 0 within one refresh interval of the group finishing.
//!
//! Kafka's tool runs through `scripts/kafka.sh run-class` (java and the broker's jars); under
//! `KAFKA_REQUIRE_BROKER=1` a missing java or tool fails the test.
#![cfg(feature = "metrics")]

#[path = "support/prometheus.rs"]
mod recorder;

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::{
    CommitPolicy, DriverConfig, KafkaAdmin, KafkaShareConsumer, KafkaShareConsumerConfig,
    LagReader, ShareAcquireMode, ShareGroupLag, ShareSinkTask, SinkRecord, SinkTask, TaskConfig,
    TaskError,
};
use recorder::prometheus;
use tokio::sync::watch;
use tokio::time::Instant;

const PARTITIONS: i32 = 2;
const PER_PARTITION: usize = 60;
const RECORDS: usize = PER_PARTITION * PARTITIONS as usize;
const REFRESH: Duration = Duration::from_secs(1);
/// What one lag read on loopback may take, beyond the refresh interval.
const READ_SLACK: Duration = Duration::from_millis(500);
/// The class behind `kafka-share-groups.sh` in Kafka 4.4 (in `kafka-tools-4.4.0.jar`).
const TOOL: &str = "org.apache.kafka.tools.consumer.group.ShareGroupCommand";

type Lags = BTreeMap<(String, i32), i64>;

/// The exported lag gauges of `group`: per partition, and the sum.
fn scraped_lag(group: &str) -> (Lags, Option<i64>) {
    let text = prometheus().render();
    let mut partitions = Lags::new();
    let mut sum = None;
    let group_label = format!("group=\"{group}\"");
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Some((name, labels)) = series.split_once('{') else {
            continue;
        };
        let labels: BTreeMap<&str, &str> = labels
            .trim_end_matches('}')
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k, v.trim_matches('"')))
            .collect();
        if !series.contains(&group_label) {
            continue;
        }
        let value: f64 = value.parse().expect("a number");
        match name {
            "share_group_lag" => {
                partitions.insert(
                    (
                        labels["topic"].to_owned(),
                        labels["partition"].parse().unwrap(),
                    ),
                    value as i64,
                );
            }
            "share_group_lag_sum" => sum = Some(value as i64),
            _ => {}
        }
    }
    (partitions, sum)
}

/// Runs `kafka-share-groups.sh --describe --group <group>` (its class, through
/// `scripts/kafka.sh run-class`) and returns its LAG column by topic and partition; `None`
/// (after saying why) when the tool cannot run and the test may be skipped.
fn kafka_tool_lag(bootstrap: &str, group: &str) -> Option<Lags> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/kafka.sh");
    let output = std::process::Command::new(&script)
        .args([
            "run-class",
            TOOL,
            "--bootstrap-server",
            bootstrap,
            "--describe",
            "--group",
            group,
        ])
        .output();
    let required = std::env::var("KAFKA_REQUIRE_BROKER").as_deref() == Ok("1");
    let output = match output {
        Ok(output) if output.status.success() => output,
        other => {
            let why = match other {
                Ok(output) => format!(
                    "{}: {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                ),
                Err(e) => e.to_string(),
            };
            assert!(
                !required,
                "KAFKA_REQUIRE_BROKER=1 but Kafka's kafka-share-groups.sh ({TOOL} through \
                 scripts/kafka.sh run-class, which needs java) cannot run: {why}"
            );
            eprintln!("SKIPPED lag comparison: Kafka's share group tool cannot run: {why}");
            return None;
        }
    };
    let text = String::from_utf8_lossy(&output.stdout);
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines
        .by_ref()
        .find(|l| l.split_whitespace().any(|c| c == "LAG"))
        .unwrap_or_else(|| panic!("no LAG column in the tool's output:\n{text}"))
        .split_whitespace()
        .collect();
    let column = |name: &str| {
        header
            .iter()
            .position(|c| *c == name)
            .unwrap_or_else(|| panic!("no {name} column in {header:?}"))
    };
    let (topic, partition, lag) = (column("TOPIC"), column("PARTITION"), column("LAG"));
    let mut lags = Lags::new();
    for line in lines {
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells.len(), header.len(), "a row of the tool: {line}");
        let value = cells[lag]
            .parse()
            .unwrap_or_else(|_| panic!("the tool shows no lag (Kafka before 4.4?): {line}"));
        lags.insert(
            (cells[topic].to_owned(), cells[partition].parse().unwrap()),
            value,
        );
    }
    Some(lags)
}

fn as_lags(lag: &ShareGroupLag) -> Lags {
    lag.partitions
        .iter()
        .map(|p| {
            let value = p.lag.expect("a 4.4 broker reports every partition's lag");
            (
                (p.topic.clone(), p.partition),
                i64::try_from(value).unwrap(),
            )
        })
        .collect()
}

/// A sink that takes 20 ms per batch and stops in `put` while its gate is shut.
struct Gated {
    gate: watch::Receiver<bool>,
    blocked: watch::Sender<bool>,
    written: Arc<Mutex<BTreeSet<(i32, i64)>>>,
}

#[async_trait]
impl SinkTask for Gated {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }
    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        if !*self.gate.borrow() {
            self.blocked.send_replace(true);
            let _ = self.gate.wait_for(|open| *open).await;
            self.blocked.send_replace(false);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut written = self.written.lock().unwrap();
        for r in records {
            written.insert((r.original_partition(), r.original_offset()));
        }
        Ok(())
    }
}

/// Waits until `done` holds, polling every 20 ms, for at most `within`.
async fn until(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits for the reader's next two reads: the second began after this call.
async fn fresh_read(reads: &mut watch::Receiver<Option<ShareGroupLag>>) -> ShareGroupLag {
    reads.borrow_and_update();
    for _ in 0..2 {
        tokio::time::timeout(REFRESH * 10, reads.changed())
            .await
            .expect("the lag is read every refresh interval")
            .expect("the reader runs");
    }
    reads.borrow().clone().expect("a read")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lag_gauges_match_kafkas_tool_and_fall_to_zero_within_a_refresh() {
    let Some(bootstrap) = support::bootstrap("kafka_lag") else {
        return;
    };
    prometheus();
    let topic = support::unique("lag");
    let group = support::unique("lag-group");
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
                ("share.heartbeat.interval.ms", "500"),
                // The pause below (two JVM starts of the tool) stays well within the locks.
                ("share.record.lock.duration.ms", "60000"),
            ],
        )
        .await
        .expect("group config");
    support::share_group_config_until(&admin, &group, |c| {
        c.get("share.record.lock.duration.ms") == Some("60000")
    })
    .await;
    for partition in 0..PARTITIONS {
        let values = (0..PER_PARTITION).map(|i| format!("p{partition}-{i}").into_bytes());
        support::produce_values(&bootstrap, &topic, partition, values, 10).await;
    }

    let consumer = KafkaShareConsumer::connect(
        KafkaShareConsumerConfig::new(&bootstrap, &group)
            .max_poll_records(10)
            .share_acquire_mode(ShareAcquireMode::RecordLimit)
            .fetch_max_wait(Duration::from_millis(100)),
    )
    .await
    .expect("consumer");
    let (gate, gate_rx) = watch::channel(true);
    let (blocked_tx, mut blocked) = watch::channel(false);
    let written = Arc::new(Mutex::new(BTreeSet::new()));
    let sink = Gated {
        gate: gate_rx,
        blocked: blocked_tx,
        written: Arc::clone(&written),
    };
    let config = DriverConfig::new([topic.as_str()])
        .poll_timeout(Duration::from_millis(200))
        .commit_policy(CommitPolicy::every_iteration())
        .lag_refresh_interval(REFRESH);
    let mut driver = ShareSinkTask::new(Box::new(sink), consumer, config);
    driver.initialize().await.expect("initialize");
    let reader: LagReader = driver
        .lag_reader()
        .expect("the driver reads the lag")
        .clone();
    let mut reads = reader.subscribe();
    // Each iteration's end (its acknowledgements committed), with the records written by then.
    let (iterated_tx, mut iterated) = watch::channel(0usize);
    let (stop, stopping) = watch::channel(false);
    let done_writing = Arc::clone(&written);
    let running = tokio::spawn(async move {
        while !*stopping.borrow() {
            driver.iteration().await.expect("iteration");
            iterated_tx.send_replace(done_writing.lock().unwrap().len());
        }
        driver.close().await.expect("close");
    });

    // Some progress first, then the sink stops in `put`: nothing is acknowledged meanwhile.
    until(
        Duration::from_secs(60),
        "a third of the records written",
        || written.lock().unwrap().len() >= RECORDS / 3,
    )
    .await;
    gate.send_replace(false);
    tokio::time::timeout(Duration::from_secs(30), blocked.wait_for(|b| *b))
        .await
        .expect("the sink stops in put")
        .unwrap();

    // Kafka's tool, then a read of ours that began after it, then the tool again: when both
    // tool reads agree, the broker's lag stood still across ours, which must then equal it.
    let deadline = Instant::now() + Duration::from_secs(90);
    let (tool, ours) = loop {
        let Some(before) = kafka_tool_lag(&bootstrap, &group) else {
            gate.send_replace(true);
            let _ = stop.send(true);
            running.await.unwrap();
            return;
        };
        let ours = fresh_read(&mut reads).await;
        let after = kafka_tool_lag(&bootstrap, &group).expect("the tool ran a moment ago");
        if before == after {
            break (after, ours);
        }
        eprintln!("the lag moved while reading ({before:?} then {after:?}); reading again");
        assert!(
            Instant::now() < deadline,
            "the lag never stood still while consumption was paused"
        );
    };
    eprintln!(
        "paused: kafka-share-groups.sh {tool:?}, ours {:?}",
        as_lags(&ours)
    );
    assert_eq!(tool.len(), PARTITIONS as usize, "{tool:?}");
    assert_eq!(as_lags(&ours), tool, "our read equals Kafka's tool");
    let (gauges, sum) = scraped_lag(&group);
    assert_eq!(gauges, tool, "the per-partition gauges equal Kafka's tool");
    let tool_total: i64 = tool.values().sum();
    assert_eq!(
        sum,
        Some(tool_total),
        "the sum gauge equals the tool's total"
    );
    let remaining = RECORDS - written.lock().unwrap().len();
    assert!(
        tool_total >= i64::try_from(remaining).unwrap() && tool_total > 0,
        "records not written yet are lag: {tool_total} < {remaining}"
    );

    // Resume; once the last record's acknowledgement is committed, the next read shows 0.
    gate.send_replace(true);
    let finished = tokio::time::timeout(
        Duration::from_secs(120),
        iterated.wait_for(|written| *written == RECORDS),
    )
    .await
    .expect("every record written and committed within two minutes")
    .map(|_| Instant::now())
    .unwrap();
    tokio::time::timeout(
        REFRESH + READ_SLACK,
        reads.wait_for(|lag| {
            lag.as_ref()
                .is_some_and(|l| l.read_at > finished && l.total() == 0)
        }),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the lag did not read 0 within one refresh interval of the group finishing: {:?}",
            reader.snapshot()
        )
    })
    .unwrap();
    let (gauges, sum) = scraped_lag(&group);
    assert_eq!(sum, Some(0), "the sum gauge fell to 0");
    assert!(gauges.values().all(|l| *l == 0), "{gauges:?}");
    assert_eq!(reader.errors(), 0, "no read failed");

    let _ = stop.send(true);
    running.await.unwrap();
    let tool = kafka_tool_lag(&bootstrap, &group).expect("the tool ran before");
    assert!(
        tool.values().all(|l| *l == 0),
        "Kafka's tool agrees: {tool:?}"
    );
    admin.delete_topic(&topic).await.expect("delete topic");
}
