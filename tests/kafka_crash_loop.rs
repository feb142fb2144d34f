//! The crash loop of the "nothing silently lost" report, on a real Kafka 4.4 broker (started by
//! `scripts/test.sh`): two sink processes in one share group, `ack.policy=after.flush` with a
//! task that buffers in `put` and writes its buffer out on each flush (once a second), each
//! crashed again and again on a random schedule and restarted. A crash is the task being
//! aborted: its connections close, so the broker releases what it held, and its buffer is
//! gone. The group has a broker dead-letter queue (KIP-1191). Every record must end in the
//! sink or in that queue; before, about 1% of them were archived without a trace.

mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::{
    AckPolicy, BrokerDeadLetterQueue, CommitPolicy, Delivered, DriverConfig, Durability,
    KafkaAdmin, KafkaShareConsumer, KafkaShareConsumerConfig, ShareConsumer, ShareSinkTask,
    SinkRecord, SinkTask, TaskConfig, TaskError,
};
use tokio::time::Instant;

const PARTITIONS: i32 = 2;
const RECORDS_PER_PARTITION: usize = 150;
const LOCK_MS: u64 = 2_000;
/// How long the sinks keep crashing.
const CRASHING: Duration = Duration::from_secs(15);

/// What survived the crashes: (partition, offset) of every record the sink made durable.
type Durable = Arc<Mutex<BTreeSet<(i32, i64)>>>;

struct BufferingSink {
    durable: Durable,
    buffer: Vec<(i32, i64)>,
}

#[async_trait]
impl SinkTask for BufferingSink {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        self.buffer.extend(
            records
                .iter()
                .map(|r| (r.original_id().partition(), r.original_id().offset())),
        );
        Ok(())
    }

    async fn pre_commit(&mut self, _: &Delivered) -> Result<Durability, TaskError> {
        self.durable.lock().unwrap().extend(self.buffer.drain(..));
        Ok(Durability::All)
    }
}

/// A small deterministic generator of crash times (no dependency for three numbers).
struct Lcg(u64);

impl Lcg {
    fn next_ms(&mut self, from: u64, to: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        from + (self.0 >> 33) % (to - from)
    }
}

async fn sink(bootstrap: &str, group: &str, topic: &str, durable: &Durable) {
    let config = KafkaShareConsumerConfig::new(bootstrap, group)
        .fetch_max_wait(Duration::from_millis(100))
        .max_poll_records(20);
    let consumer = KafkaShareConsumer::connect(config)
        .await
        .expect("consumer connects");
    let task = BufferingSink {
        durable: Arc::clone(durable),
        buffer: Vec::new(),
    };
    let driver_config = DriverConfig::new([topic])
        .poll_timeout(Duration::from_millis(100))
        .ack_policy(AckPolicy::AfterFlush)
        .commit_policy(CommitPolicy::interval(Duration::from_secs(1)))
        .require_broker_dead_letter_queue(true);
    let mut driver = ShareSinkTask::new(Box::new(task), consumer, driver_config);
    driver.initialize().await.expect("initialize");
    assert!(matches!(
        driver.consumer().broker_dead_letter_queue(),
        BrokerDeadLetterQueue::Topic { .. }
    ));
    loop {
        if let Err(e) = driver.iteration().await {
            assert!(e.is_retriable(), "{e}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The (partition, offset) of every record the broker wrote to the dead-letter topic.
async fn dead_letters(bootstrap: &str, dlq: &str) -> BTreeSet<(i32, i64)> {
    let partition = support::rskafka_partition(bootstrap, dlq, 0).await;
    let mut out = BTreeSet::new();
    let mut offset = 0;
    loop {
        let (records, high_watermark) = partition
            .fetch_records(offset, 1..10_000_000, 500)
            .await
            .expect("fetch dead letters");
        for r in &records {
            let header = |name: &str| -> Option<i64> {
                let raw = r.record.headers.get(name)?;
                std::str::from_utf8(raw).ok()?.parse().ok()
            };
            let p = header("__dlq.errors.partition").expect("partition header");
            let o = header("__dlq.errors.offset").expect("offset header");
            out.insert((i32::try_from(p).expect("a partition"), o));
            offset = offset.max(r.offset + 1);
        }
        if records.is_empty() || offset >= high_watermark {
            return out;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sinks_crashing_before_they_flush_lose_nothing() {
    let Some(bootstrap) = support::bootstrap("crash_loop") else {
        return;
    };
    let topic = support::unique("crash-loop");
    let group = support::unique("crash-loop-group");
    let dlq = format!("dlq.{topic}");
    let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
    admin
        .create_topic(&topic, PARTITIONS, 1)
        .await
        .expect("topic");
    admin
        .create_dead_letter_topic(&dlq, 1, 1)
        .await
        .expect("dead-letter topic");
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
    admin
        .set_share_group_dead_letter_queue(&group, &dlq, true)
        .await
        .expect("broker dead-letter queue");
    support::share_group_config_until(&admin, &group, |c| {
        c.dead_letter_topic() == Some(dlq.as_str())
    })
    .await;
    for p in 0..PARTITIONS {
        let values = (0..RECORDS_PER_PARTITION).map(|i| format!("{p}-{i}").into_bytes());
        support::produce_values(&bootstrap, &topic, p, values, RECORDS_PER_PARTITION).await;
    }

    let durable = Durable::default();
    // Two sink processes, each crashed every 0.2 to 1.2 s and started again.
    let mut crashers = Vec::new();
    for seed in [7_u64, 11] {
        let (bootstrap, group, topic, durable) = (
            bootstrap.clone(),
            group.clone(),
            topic.clone(),
            Arc::clone(&durable),
        );
        crashers.push(tokio::spawn(async move {
            let mut rng = Lcg(seed);
            let mut crashes = 0;
            let until = Instant::now() + CRASHING;
            while Instant::now() < until {
                let (b, g, t, d) = (
                    bootstrap.clone(),
                    group.clone(),
                    topic.clone(),
                    Arc::clone(&durable),
                );
                let process = tokio::spawn(async move { sink(&b, &g, &t, &d).await });
                tokio::time::sleep(Duration::from_millis(rng.next_ms(200, 1_200))).await;
                process.abort();
                let _ = process.await;
                crashes += 1;
            }
            crashes
        }));
    }
    let mut crashes = 0;
    for c in crashers {
        crashes += c.await.expect("crasher");
    }
    assert!(crashes >= 20, "the sinks crashed {crashes} times");

    // One sink that lives drains the rest: everything ends in the sink or the queue.
    let all: BTreeSet<(i32, i64)> = (0..PARTITIONS)
        .flat_map(|p| (0..RECORDS_PER_PARTITION as i64).map(move |o| (p, o)))
        .collect();
    let survivor = {
        let (b, g, t, d) = (
            bootstrap.clone(),
            group.clone(),
            topic.clone(),
            Arc::clone(&durable),
        );
        tokio::spawn(async move { sink(&b, &g, &t, &d).await })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let (missing, dead) = loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let dead = dead_letters(&bootstrap, &dlq).await;
        let durable = durable.lock().unwrap().clone();
        let missing: Vec<(i32, i64)> = all
            .iter()
            .filter(|r| !durable.contains(r) && !dead.contains(r))
            .copied()
            .collect();
        if missing.is_empty() || Instant::now() >= deadline {
            break (missing, dead);
        }
    };
    survivor.abort();
    eprintln!(
        "crash loop: {crashes} crashes, {} records durable, {} in the broker's dead-letter queue",
        durable.lock().unwrap().len(),
        dead.len()
    );
    assert!(
        missing.is_empty(),
        "{} records neither in the sink nor in a dead-letter queue: {:?}",
        missing.len(),
        missing
    );
}
