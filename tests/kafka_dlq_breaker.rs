//! The dead-letter circuit breaker, the reason header and one dead-letter home per record, on
//! a real Kafka 4.4 broker whose share group has a dead-letter queue of its own (KIP-1191).
//!
//! A sink whose `put` always fails fatally runs under a [`Supervisor`]: each run dead-letters
//! its batch and stops, the supervisor starts it again, until the breaker (whose window the
//! supervisor keeps across restarts) refuses the next batch: released, not dead-lettered, and
//! the task stays failed. Then a healthy sink drains the group. Every record must be in
//! exactly one place: the driver's dead-letter queue, the broker's, or the healthy sink.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::supervisor::{Supervisor, SupervisorConfig, TaskParts};
use kafka_share_sink::{
    BoxError, DeadLetterBreaker, DriverConfig, KafkaAdmin, KafkaDeadLetterQueue,
    KafkaDeadLetterQueueConfig, KafkaShareConsumer, KafkaShareConsumerConfig, ShareSinkTask,
    SinkRecord, SinkTask, TaskConfig, TaskError,
};
use tokio::time::Instant;

#[path = "support/broken_sink.rs"]
mod broken_sink;

use broken_sink::Broken;

const RECORDS: usize = 40;
const PER_POLL: i32 = 4;
/// The breaker's count bound.
const MAX_DEAD_LETTERS: u64 = 10;

/// Takes everything, noting each record's offset.
struct Healthy(Arc<Mutex<Vec<i64>>>);

#[async_trait]
impl SinkTask for Healthy {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        let mut taken = self.0.lock().unwrap();
        taken.extend(records.iter().map(|r| r.original_id().offset()));
        Ok(())
    }
}

struct Fixture {
    bootstrap: String,
    admin: KafkaAdmin,
    topic: String,
    group: String,
    /// The group's (the broker's) dead-letter topic.
    broker_dlq: String,
    /// The driver's own dead-letter topic, when the test gives it one.
    own_dlq: Option<String>,
}

async fn fixture(test: &str, own_dlq: bool) -> Option<Fixture> {
    let bootstrap = support::bootstrap(test)?;
    let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
    let topic = support::unique(test);
    let group = support::unique(&format!("{test}-group"));
    let broker_dlq = format!("dlq.{topic}");
    admin.create_topic(&topic, 1, 1).await.expect("topic");
    admin
        .create_dead_letter_topic(&broker_dlq, 1, 1)
        .await
        .expect("broker dead-letter topic");
    admin
        .set_share_group_config(&group, &[("share.auto.offset.reset", "earliest")])
        .await
        .expect("group config");
    admin
        .set_share_group_dead_letter_queue(&group, &broker_dlq, true)
        .await
        .expect("broker dead-letter queue");
    support::share_group_config_until(&admin, &group, |c| {
        c.dead_letter_topic() == Some(broker_dlq.as_str())
            && c.get("share.auto.offset.reset") == Some("earliest")
    })
    .await;
    let values = (0..RECORDS).map(|i| format!("v-{i}").into_bytes());
    // One record per produce batch: a share fetch acquires whole batches.
    support::produce_values(&bootstrap, &topic, 0, values, 1).await;
    let own_dlq = own_dlq.then(|| support::unique(&format!("{test}-own-dlq")));
    Some(Fixture {
        bootstrap,
        admin,
        topic,
        group,
        broker_dlq,
        own_dlq,
    })
}

/// Every record of `topic` partition 0 as (headers by name, last value wins).
async fn read_all(bootstrap: &str, topic: &str) -> Vec<BTreeMap<String, String>> {
    let partition = support::rskafka_partition(bootstrap, topic, 0).await;
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let (records, high_watermark) = partition
            .fetch_records(offset, 1..10_000_000, 500)
            .await
            .expect("fetch");
        for r in &records {
            out.push(
                r.record
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
                    .collect(),
            );
            offset = offset.max(r.offset + 1);
        }
        if records.is_empty() || offset >= high_watermark {
            return out;
        }
    }
}

/// The source offsets of the dead letters of `topic`, read from `offset_header`.
fn offsets(letters: &[BTreeMap<String, String>], offset_header: &str) -> Vec<i64> {
    letters
        .iter()
        .map(|h| {
            h.get(offset_header)
                .and_then(|o| o.parse().ok())
                .unwrap_or_else(|| panic!("no {offset_header} header: {h:?}"))
        })
        .collect()
}

impl Fixture {
    async fn consumer(&self) -> KafkaShareConsumer {
        let config = KafkaShareConsumerConfig::new(&self.bootstrap, &self.group)
            .fetch_max_wait(Duration::from_millis(100))
            .max_poll_records(PER_POLL);
        KafkaShareConsumer::connect(config).await.expect("consumer")
    }

    /// Runs the broken sink under a supervisor until it stays failed; returns its last error.
    async fn run_broken(&self) -> String {
        let fixture = Arc::new(self.parts());
        let factory = move |_task: u32| {
            let fixture = Arc::clone(&fixture);
            async move {
                let (bootstrap, group, topic, own_dlq) = &*fixture;
                let consumer = KafkaShareConsumer::connect(
                    KafkaShareConsumerConfig::new(bootstrap, group)
                        .fetch_max_wait(Duration::from_millis(100))
                        .max_poll_records(PER_POLL),
                )
                .await?;
                let mut config = DriverConfig::new([topic.as_str()])
                    .poll_timeout(Duration::from_millis(200))
                    .dead_letter_breaker(
                        DeadLetterBreaker::disabled()
                            .max_records(Some(MAX_DEAD_LETTERS))
                            .window(Duration::from_secs(600)),
                    );
                if let Some(dlq) = own_dlq {
                    let queue = KafkaDeadLetterQueue::connect(
                        KafkaDeadLetterQueueConfig::new(bootstrap, dlq)
                            .replication_factor(1)
                            .delivery_timeout(Duration::from_secs(30)),
                    )
                    .await?;
                    config = config.dead_letter_queue(Arc::new(queue), true);
                }
                Ok::<_, BoxError>(TaskParts::new(Box::new(Broken), consumer, config))
            }
        };
        let supervisor = Supervisor::new(
            "breaker-sink",
            SupervisorConfig::new(1)
                .restart_backoff(Duration::from_millis(20), Duration::from_millis(200))
                .max_restarts(Some(30)),
            factory,
        );
        let handle = supervisor.handle();
        let outcome = tokio::time::timeout(
            Duration::from_secs(120),
            supervisor.run(std::future::pending()),
        )
        .await
        .expect("the supervisor gives up within 2 minutes");
        assert!(outcome.is_err(), "the task failed for good");
        let status = handle.statuses().remove(0);
        let last = status.last_error.clone().expect("a last error");
        eprintln!(
            "broken sink: {} restarts, last error: {last}",
            status.restarts
        );
        assert!(
            status.restarts < 30,
            "the tripped breaker is not restarted: {} restarts",
            status.restarts
        );
        last
    }

    fn parts(&self) -> (String, String, String, Option<String>) {
        (
            self.bootstrap.clone(),
            self.group.clone(),
            self.topic.clone(),
            self.own_dlq.clone(),
        )
    }

    /// Drains the group with a healthy sink until `expected` records were taken (or 60 s);
    /// returns the offsets taken.
    async fn drain(&self, expected: usize) -> Vec<i64> {
        let taken = Arc::new(Mutex::new(Vec::new()));
        let config = DriverConfig::new([self.topic.as_str()])
            .poll_timeout(Duration::from_millis(200))
            .dead_letter_breaker(DeadLetterBreaker::disabled());
        let mut driver = ShareSinkTask::new(
            Box::new(Healthy(Arc::clone(&taken))),
            self.consumer().await,
            config,
        );
        driver.initialize().await.expect("initialize");
        let deadline = Instant::now() + Duration::from_secs(60);
        while taken.lock().unwrap().len() < expected && Instant::now() < deadline {
            driver.iteration().await.expect("iteration");
        }
        driver.close().await.expect("close");
        let mut taken = taken.lock().unwrap().clone();
        taken.sort_unstable();
        taken
    }

    async fn clean_up(&self) {
        let mut topics = vec![self.topic.clone(), self.broker_dlq.clone()];
        topics.extend(self.own_dlq.clone());
        for topic in topics {
            let _ = self.admin.delete_topic(&topic).await;
        }
    }
}

/// Checks that every source record is in exactly one of `homes`.
fn assert_one_home(homes: &[(&str, &[i64])]) {
    let mut seen: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
    for (home, offsets) in homes {
        for offset in *offsets {
            seen.entry(*offset).or_default().push(home);
        }
    }
    let all: Vec<i64> = (0..RECORDS as i64).collect();
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        all,
        "every record somewhere: {seen:?}"
    );
    let twice: Vec<_> = seen.iter().filter(|(_, h)| h.len() > 1).collect();
    assert!(
        twice.is_empty(),
        "records in more than one place: {twice:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_that_always_fails_trips_the_breaker_and_each_dead_letter_has_one_home() {
    let Some(f) = fixture("dlq_breaker_own_queue", true).await else {
        return;
    };
    let last_error = f.run_broken().await;
    assert!(
        last_error.contains("dead-letter circuit breaker")
            && last_error.contains("errors.deadletterqueue.breaker.max.records=10"),
        "{last_error}"
    );

    let own_dlq = f.own_dlq.as_deref().expect("own queue");
    let ours = read_all(&f.bootstrap, own_dlq).await;
    assert!(
        !ours.is_empty() && ours.len() as u64 <= MAX_DEAD_LETTERS,
        "at most the breaker's bound is dead-lettered: {}",
        ours.len()
    );
    for letter in &ours {
        assert_eq!(
            letter.get("__connect.errors.reason").map(String::as_str),
            Some("put"),
            "the reason beside Connect's headers: {letter:?}"
        );
        assert_eq!(
            letter.get("__connect.errors.stage").map(String::as_str),
            Some("TASK_PUT")
        );
    }
    let ours = offsets(&ours, "__connect.errors.offset");

    // ACCEPTed after the driver's own write: the broker wrote none of them to its queue, and
    // the records the breaker released are not archived either.
    let theirs = offsets(
        &read_all(&f.bootstrap, &f.broker_dlq).await,
        "__dlq.errors.offset",
    );
    assert!(theirs.is_empty(), "the broker's queue: {theirs:?}");

    let drained = f.drain(RECORDS - ours.len()).await;
    eprintln!(
        "{} dead-lettered by the driver, {} drained afterwards",
        ours.len(),
        drained.len()
    );
    assert_one_home(&[
        ("the driver's queue", &ours),
        ("the broker's queue", &theirs),
        ("the healthy sink", &drained),
    ]);
    let theirs = offsets(
        &read_all(&f.bootstrap, &f.broker_dlq).await,
        "__dlq.errors.offset",
    );
    assert!(theirs.is_empty(), "nothing archived meanwhile: {theirs:?}");
    f.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_queue_of_its_own_rejects_go_to_the_brokers_queue_under_the_same_breaker() {
    let Some(f) = fixture("dlq_breaker_broker_queue", false).await else {
        return;
    };
    let last_error = f.run_broken().await;
    assert!(
        last_error.contains("dead-letter circuit breaker"),
        "{last_error}"
    );
    // REJECTed: the broker writes them to the group's queue; the breaker bounds them as well.
    let deadline = Instant::now() + Duration::from_secs(30);
    let theirs = loop {
        let letters = read_all(&f.bootstrap, &f.broker_dlq).await;
        if !letters.is_empty() || Instant::now() >= deadline {
            break letters;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        !theirs.is_empty() && theirs.len() as u64 <= MAX_DEAD_LETTERS,
        "at most the breaker's bound in the broker's queue: {}",
        theirs.len()
    );
    for letter in &theirs {
        assert_eq!(
            letter.get("__dlq.errors.message").map(String::as_str),
            Some("Offset rejected by client."),
            "{letter:?}"
        );
    }
    let drained = f.drain(RECORDS - theirs.len()).await;
    // Read again: the broker writes its dead letters after the REJECTs, at its own pace.
    let theirs = read_all(&f.bootstrap, &f.broker_dlq).await;
    assert!(theirs.len() as u64 <= MAX_DEAD_LETTERS, "{}", theirs.len());
    let theirs = offsets(&theirs, "__dlq.errors.offset");
    assert_one_home(&[
        ("the broker's queue", &theirs),
        ("the healthy sink", &drained),
    ]);
    f.clean_up().await;
}
