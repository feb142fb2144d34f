//! The exactly-once iteration against a real Kafka 4.4 broker, in ledger mode: the mode is
//! chosen from the cluster's features, a mirror is exactly once with two tasks sharing the
//! work, and a task that dies after its commit (before its ACCEPTs) or before its commit
//! neither duplicates nor loses records. A group with RENEW turned off is refused, task 0
//! fences the transactional ids of task slots a shrunk task count left (found with
//! ListTransactions), and dead letters are written in the transaction, also those of a fatal
//! `put_transactional` on the records' last delivery. The output is read
//! `read_committed` by the test's own Fetch reader (`support/read_committed.rs`),
//! independent of the crate's.
#![cfg(feature = "exactly-once")]

#[path = "support/dies_at_commit.rs"]
mod dies_at_commit;
#[path = "support/eos.rs"]
mod eos;
#[path = "support/read_committed.rs"]
mod read_committed;
#[allow(unreachable_pub)]
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use dies_at_commit::DiesAtCommit;
use kafka_share_sink::BrokerError;
use kafka_share_sink::convert::{Converters, JsonConverter};
use kafka_share_sink::dlq::{DeadLetterError, DeadLetterQueue, DeadLetterRecord};
use kafka_share_sink::exactly_once::TransactionalOutput;
use kafka_share_sink::exactly_once::{
    ExactlyOnceConfig, ExactlyOnceError, ExactlyOnceMode, KafkaExactlyOnceCluster, MirrorTask,
};
use kafka_share_sink::producer::{
    KafkaProducer, KafkaProducerConfig, Producer, ProducerError, ProducerRecord,
};
use kafka_share_sink::{
    AdminError, DriverConfig, Error, ErrorHandling, ErrorTolerance, KafkaAdmin, KafkaShareConsumer,
    KafkaShareConsumerConfig, ShareSinkTask, SinkRecord, SinkTask, TaskConfig, TaskError,
};

async fn driver(
    s: &eos::Setup,
    task: u32,
    tasks: u32,
    wrap: impl FnOnce(KafkaProducer) -> Arc<dyn Producer>,
) -> ShareSinkTask<KafkaShareConsumer> {
    let mut driver = build(s, task, tasks, wrap, |c| c).await;
    driver.initialize().await.expect("initialize");
    driver
}

/// Task `task` of `tasks` mirroring `s.source` to `copy.<source>`, not yet initialized.
async fn build(
    s: &eos::Setup,
    task: u32,
    tasks: u32,
    wrap: impl FnOnce(KafkaProducer) -> Arc<dyn Producer>,
    config: impl FnOnce(DriverConfig) -> DriverConfig,
) -> ShareSinkTask<KafkaShareConsumer> {
    let mirror = Box::new(MirrorTask::with_prefix("copy."));
    build_task(s, task, tasks, mirror, wrap, config).await
}

/// Task `task` of `tasks` running `sink` on `s.source` in the exactly-once iteration (a
/// transactional producer with a 10 s transaction timeout, polls of at most 200 records),
/// not yet initialized.
async fn build_task(
    s: &eos::Setup,
    task: u32,
    tasks: u32,
    sink: Box<dyn SinkTask>,
    wrap: impl FnOnce(KafkaProducer) -> Arc<dyn Producer>,
    config: impl FnOnce(DriverConfig) -> DriverConfig,
) -> ShareSinkTask<KafkaShareConsumer> {
    let eos = ExactlyOnceConfig::new(s.group.clone(), task, tasks)
        .with_barrier_timeout(Duration::from_secs(30));
    let producer_config = KafkaProducerConfig::new(s.bootstrap.clone())
        .transactional_id(eos.transactional_id())
        .transaction_timeout(Duration::from_secs(10));
    let cluster = KafkaExactlyOnceCluster::connect(&producer_config)
        .await
        .expect("cluster");
    let producer = KafkaProducer::connect(producer_config)
        .await
        .expect("producer");
    let consumer = KafkaShareConsumer::connect(
        KafkaShareConsumerConfig::new(s.bootstrap.clone(), s.group.clone()).max_poll_records(200),
    )
    .await
    .expect("consumer");
    let config =
        config(DriverConfig::new([s.source.clone()]).poll_timeout(Duration::from_millis(300)));
    ShareSinkTask::new(sink, consumer, config).with_exactly_once(
        wrap(producer),
        Arc::new(cluster),
        eos,
    )
}

/// Runs the drivers until the output has `records` values and the group finished every
/// source record (or 60 s pass).
async fn drain(s: &eos::Setup, drivers: &mut [ShareSinkTask<KafkaShareConsumer>], records: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        for d in drivers.iter_mut() {
            match d.iteration_exactly_once().await {
                Ok(_) => {}
                Err(e) if e.is_retriable() => eprintln!("retriable: {e}"),
                Err(e) => panic!("iteration failed: {e:?}"),
            }
        }
        let seen = eos::output(s).await;
        if seen.len() >= records && eos::settled(s).await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} of {records} outputs after 60 s",
            seen.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_mode_mirrors_exactly_once_with_two_tasks() {
    let Some(bootstrap) = support::bootstrap("ledger_mode_mirrors_exactly_once_with_two_tasks")
    else {
        return;
    };
    let records = 3_000;
    let s = eos::setup(bootstrap, records, 1).await;
    let mut drivers = vec![
        driver(&s, 0, 2, |p| Arc::new(p)).await,
        driver(&s, 1, 2, |p| Arc::new(p)).await,
    ];
    assert_eq!(
        drivers[0].exactly_once_mode(),
        Some(ExactlyOnceMode::Ledger)
    );
    drain(&s, &mut drivers, records).await;
    for d in &mut drivers {
        d.close().await.expect("close");
    }
    eos::assert_exactly_once(&eos::output(&s).await, records);
    let ledger = KafkaAdmin::connect(&s.bootstrap)
        .await
        .expect("admin")
        .partitions(&format!("{}.eos-ledger", s.group))
        .await
        .expect("the ledger topic was created");
    assert_eq!(
        ledger.len(),
        eos::PARTITIONS as usize,
        "one ledger partition per source partition"
    );
}

async fn dies_at_commit(after: bool, test: &str) {
    let Some(bootstrap) = support::bootstrap(test) else {
        return;
    };
    let records = 600;
    let s = eos::setup(bootstrap, records, 1).await;
    let mut first = driver(&s, 0, 1, |inner| Arc::new(DiesAtCommit::new(inner, after))).await;
    // The first iteration hangs at its commit: the task dies there (the driver, its consumer
    // and its producer are dropped, as a killed process's connections close).
    // Iterations before the group hands out records return.
    let mut hung = false;
    for _ in 0..50 {
        if tokio::time::timeout(Duration::from_secs(5), first.iteration_exactly_once())
            .await
            .is_err()
        {
            hung = true;
            break;
        }
    }
    assert!(hung, "an iteration should have hung at the commit");
    drop(first);

    // The task starts again with the same transactional id.
    let mut again = driver(&s, 0, 1, |p| Arc::new(p)).await;
    drain(&s, std::slice::from_mut(&mut again), records).await;
    let metrics = again.metrics();
    again.close().await.expect("close");
    eos::assert_exactly_once(&eos::output(&s).await, records);
    if after {
        assert!(
            metrics.records_already_claimed > 0,
            "the records committed before the crash should have been found claimed: {metrics:?}"
        );
    } else {
        assert_eq!(
            metrics.records_already_claimed, 0,
            "nothing committed before the crash: {metrics:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_dies_after_its_commit_is_not_duplicated() {
    dies_at_commit(true, "a_task_that_dies_after_its_commit_is_not_duplicated").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_dies_before_its_commit_is_fenced_and_its_records_redone() {
    dies_at_commit(
        false,
        "a_task_that_dies_before_its_commit_is_fenced_and_its_records_redone",
    )
    .await;
}

/// Kafka 4.3+: `share.renew.acknowledge.enable=false` on the group is refused, naming the
/// setting. Kafka 4.2 has no such config (RENEW is always on): there the ledger is chosen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_with_renew_disabled_is_refused_at_initialize() {
    let Some(bootstrap) =
        support::bootstrap("a_group_with_renew_disabled_is_refused_at_initialize")
    else {
        return;
    };
    let s = eos::setup(bootstrap, 1, 1).await;
    let admin = KafkaAdmin::connect(&s.bootstrap).await.expect("admin");
    match admin
        .set_share_group_config(&s.group, &[("share.renew.acknowledge.enable", "false")])
        .await
    {
        Ok(()) => {}
        Err(AdminError::Broker {
            error:
                BrokerError {
                    name: "INVALID_CONFIG",
                    ..
                },
            ..
        }) => {
            // Kafka 4.2: the config came in 4.3, and RENEW cannot be turned off. Its absence
            // reads as on.
            let mut d = driver(&s, 0, 1, |p| Arc::new(p)).await;
            assert_eq!(d.exactly_once_mode(), Some(ExactlyOnceMode::Ledger));
            d.close().await.expect("close");
            return;
        }
        Err(e) => panic!("group config: {e:?}"),
    }
    support::share_group_config_until(&admin, &s.group, |c| {
        c.get("share.renew.acknowledge.enable") == Some("false")
    })
    .await;
    let mut d = build(&s, 0, 1, |p| Arc::new(p), |c| c).await;
    let error = d.initialize().await.expect_err("refused");
    match &error {
        Error::ExactlyOnce(ExactlyOnceError::MissingCapability { capability }) => assert!(
            capability.contains("share.renew.acknowledge.enable=true"),
            "{capability}"
        ),
        other => panic!("expected a missing capability, got {other:?}"),
    }
    assert_eq!(d.exactly_once_mode(), None);
}

/// A producer with `id`, in an open transaction with one record sent to the target.
async fn open_transaction(s: &eos::Setup, id: &str) -> KafkaProducer {
    let producer = KafkaProducer::connect(
        KafkaProducerConfig::new(s.bootstrap.clone())
            .transactional_id(id)
            .transaction_timeout(Duration::from_secs(60)),
    )
    .await
    .expect("producer");
    producer.init_transactions().await.expect("init");
    producer.begin_transaction().expect("begin");
    producer
        .send(
            ProducerRecord::new(s.target.as_str())
                .partition(0)
                .value(id.to_owned()),
        )
        .expect("send")
        .await
        .expect("written");
    producer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_0_fences_the_orphaned_transactional_ids_of_a_shrunk_task_count() {
    let Some(bootstrap) =
        support::bootstrap("task_0_fences_the_orphaned_transactional_ids_of_a_shrunk_task_count")
    else {
        return;
    };
    let s = eos::setup(bootstrap, 0, 1).await;
    // The connector ran 4 tasks; now it runs 2. Slot 3's producer is orphaned with its
    // transaction open; slot 1's is a live task's.
    let orphan = open_transaction(&s, &format!("{}-eos-3", s.group)).await;
    let live = open_transaction(&s, &format!("{}-eos-1", s.group)).await;

    let mut task_0 = driver(&s, 0, 2, |p| Arc::new(p)).await;
    assert_eq!(task_0.exactly_once_mode(), Some(ExactlyOnceMode::Ledger));

    let error = orphan.commit_transaction().await.expect_err("fenced");
    assert!(matches!(error, ProducerError::Fenced { .. }), "{error:?}");
    live.commit_transaction()
        .await
        .expect("slot 1 is below tasks.max: not fenced");
    task_0.close().await.expect("close");
    let seen = eos::output(&s).await;
    assert_eq!(
        seen.keys().collect::<Vec<_>>(),
        [&format!("{}-eos-1", s.group)],
        "the orphan's record is not visible read_committed"
    );
}

/// A dead-letter queue that only names its topic: in the exactly-once iteration the dead
/// letters go through the transactional producer, never through the queue's own writes.
#[derive(Debug)]
struct TopicOnly {
    topic: String,
    sends: AtomicUsize,
}

#[async_trait]
impl DeadLetterQueue for TopicOnly {
    fn topic(&self) -> &str {
        &self.topic
    }
    async fn send(&self, _: Vec<DeadLetterRecord>) -> Result<(), DeadLetterError> {
        self.sends.fetch_add(1, Ordering::SeqCst);
        Err(DeadLetterError::Config {
            key: "test",
            reason: "only names its topic".to_owned(),
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_mode_writes_dead_letters_in_the_transaction() {
    let Some(bootstrap) = support::bootstrap("ledger_mode_writes_dead_letters_in_the_transaction")
    else {
        return;
    };
    let s = eos::setup(bootstrap, 0, 1).await;
    let dlq = format!("{}.dlq", s.source);
    let admin = KafkaAdmin::connect(&s.bootstrap).await.expect("admin");
    admin.create_topic(&dlq, 1, 1).await.expect("dlq topic");
    let producer = KafkaProducer::connect(KafkaProducerConfig::new(s.bootstrap.clone()))
        .await
        .expect("producer");
    for value in [r#""a""#, "{bad", r#""c""#] {
        producer
            .send(
                ProducerRecord::new(s.source.as_str())
                    .partition(0)
                    .value(value),
            )
            .expect("send")
            .await
            .expect("written");
    }
    let queue = Arc::new(TopicOnly {
        topic: dlq.clone(),
        sends: AtomicUsize::new(0),
    });
    let json =
        Converters::byte_array().with_value(Arc::new(JsonConverter::new().schemas_enable(false)));
    let mut d = build(
        &s,
        0,
        1,
        |p| Arc::new(p),
        |c| {
            c.converters(json)
                .errors(ErrorHandling::new().tolerance(ErrorTolerance::All))
                .dead_letter_queue(Arc::clone(&queue) as Arc<dyn DeadLetterQueue>, true)
        },
    )
    .await;
    d.initialize().await.expect("initialize");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut rejected = 0;
    while rejected == 0 {
        assert!(tokio::time::Instant::now() < deadline, "no record rejected");
        rejected += d
            .iteration_exactly_once()
            .await
            .expect("iteration")
            .rejected;
    }
    let m = d.metrics();
    d.close().await.expect("close");
    assert_eq!(rejected, 1);
    assert_eq!(
        (m.transactions_committed, m.transactions_aborted),
        (1, 0),
        "{m:?}"
    );
    assert_eq!(
        queue.sends.load(Ordering::SeqCst),
        0,
        "not written outside the transaction"
    );
    let letters = read_committed::read_committed(&s.bootstrap, &dlq, 0).await;
    assert_eq!(letters.len(), 1, "exactly once: {letters:?}");
    assert_eq!(letters[0].value.as_deref(), Some(&b"{bad"[..]));
    assert!(
        letters[0]
            .headers
            .iter()
            .find(|(k, _)| k.as_str() == "__connect.errors.topic")
            .map(|(_, v)| v)
            .is_some_and(|v| v.as_deref() == Some(s.source.as_bytes())),
        "with the context headers: {:?}",
        letters[0].headers
    );
    let seen = eos::output(&s).await;
    assert_eq!(seen.len(), 2, "the two good records mirrored: {seen:?}");
    assert!(seen.values().all(|n| *n == 1), "{seen:?}");
}

/// A target with fewer partitions than the source, mirrored with `keep_partition`: every
/// transaction holding a record of source partition 2 cannot be written, however often it is
/// tried. The task stops with a typed error naming the target within one transaction timeout,
/// and releases what it held: no record is archived at the delivery-count limit (each source
/// record is either in the output or still waiting in the group).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_without_the_partition_stops_the_task_and_archives_nothing() {
    let Some(bootstrap) =
        support::bootstrap("a_target_without_the_partition_stops_the_task_and_archives_nothing")
    else {
        return;
    };
    let records = 600;
    let s = eos::setup(bootstrap, records, 1).await;
    let narrow = format!("narrow.{}", s.source);
    let admin = KafkaAdmin::connect(&s.bootstrap).await.expect("admin");
    admin
        .create_topic(&narrow, eos::PARTITIONS - 1, 1)
        .await
        .expect("narrow target");
    // A task that does not declare its targets (MirrorTask does, and is refused at
    // initialize: the next test), so the refusal comes from the broker, transaction by
    // transaction.
    let undeclared = Box::new(Undeclared(MirrorTask::with_prefix("narrow.")));
    let mut d = build_task(&s, 0, 1, undeclared, |p| Arc::new(p), |c| c).await;
    d.initialize().await.expect("initialize");

    let (topic, partition) = refused_once(&mut d).await;
    assert_eq!(topic.as_deref(), Some(narrow.as_str()));
    assert_eq!(partition, Some(eos::PARTITIONS - 1));
    drop(d);

    // Nothing archived: what is not in the output is still waiting in the group.
    let mut written = 0;
    for p in 0..eos::PARTITIONS - 1 {
        written += read_committed::read_committed(&s.bootstrap, &narrow, p)
            .await
            .len();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let offsets = admin.share_group_offsets(&s.group).await.expect("offsets");
        let lag: i64 = offsets.iter().filter_map(|o| o.lag).sum();
        if usize::try_from(lag).expect("lag") + written == records {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{written} written and a lag of {lag}: {} records archived or lost",
            records as i64 - lag - written as i64
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A task that writes what `MirrorTask` writes but declares no targets.
struct Undeclared(MirrorTask);

#[async_trait]
impl SinkTask for Undeclared {
    async fn start(&mut self, config: &TaskConfig) -> Result<(), TaskError> {
        self.0.start(config).await
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        self.0.put(records).await
    }

    async fn put_transactional(
        &mut self,
        records: &[SinkRecord],
        output: &mut TransactionalOutput,
    ) -> Result<(), TaskError> {
        self.0.put_transactional(records, output).await
    }
}

/// `MirrorTask` declares its target: one with fewer partitions than the source, with the
/// source partition kept, or one that does not exist, is refused at `initialize`, before
/// anything is read, and says what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_task_refuses_a_target_it_cannot_fill_at_initialize() {
    let Some(bootstrap) =
        support::bootstrap("mirror_task_refuses_a_target_it_cannot_fill_at_initialize")
    else {
        return;
    };
    let s = eos::setup(bootstrap, 0, 1).await;
    let admin = KafkaAdmin::connect(&s.bootstrap).await.expect("admin");
    admin
        .create_topic(&format!("narrow.{}", s.source), eos::PARTITIONS - 1, 1)
        .await
        .expect("narrow target");
    for (task, wanted) in [
        (
            MirrorTask::with_prefix("narrow."),
            format!(
                "it has {} partitions and the source {}",
                eos::PARTITIONS - 1,
                eos::PARTITIONS
            ),
        ),
        (
            MirrorTask::with_prefix("absent."),
            format!(
                "it does not exist: create it first with at least {} partitions",
                eos::PARTITIONS
            ),
        ),
    ] {
        let mut d = build_task(&s, 0, 1, Box::new(task), |p| Arc::new(p), |c| c).await;
        let error = d.initialize().await.expect_err("refused");
        let Error::ExactlyOnce(ExactlyOnceError::UnfitTarget { reason, .. }) = &error else {
            panic!("expected UnfitTarget, got {error:?}");
        };
        assert!(reason.contains(&wanted), "{reason}");
        assert!(!error.is_retriable());
    }
    // Letting the producer pick the partition fits the narrow target.
    let free = Box::new(MirrorTask::with_prefix("narrow.").keep_partition(false));
    let mut d = build_task(&s, 0, 1, free, |p| Arc::new(p), |c| c).await;
    d.initialize()
        .await
        .expect("a target the producer partitions is fine");
    d.close().await.expect("close");
}

/// The target's `max.message.bytes` in the tests of a record refused for itself: above a
/// full batch of small records (`batch.size` 16384), below the one large output.
const TARGET_MAX_MESSAGE_BYTES: usize = 20_000;
/// The source record whose output is larger than the target takes.
const LARGE: usize = 42;

/// Mirrors each source record to `target`, same partition, except that the output of
/// `r-<LARGE>` is padded past the target's `max.message.bytes` (well below the producer's
/// `max.request.size`, so the broker refuses it, MESSAGE_TOO_LARGE).
struct MirrorOneLarge {
    target: String,
}

#[async_trait]
impl SinkTask for MirrorOneLarge {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, _: &[SinkRecord]) -> Result<(), TaskError> {
        Err(TaskError::fatal("exactly-once only"))
    }

    async fn put_transactional(
        &mut self,
        records: &[SinkRecord],
        output: &mut TransactionalOutput,
    ) -> Result<(), TaskError> {
        for record in records {
            let mut value = record
                .value()
                .as_bytes()
                .ok_or_else(|| TaskError::fatal("bytes values only"))?
                .to_vec();
            if value == format!("r-{LARGE}").as_bytes() {
                value.resize(TARGET_MAX_MESSAGE_BYTES * 3, b'x');
            }
            output.send(
                ProducerRecord::new(self.target.as_str())
                    .partition(record.partition())
                    .value(value),
            );
        }
        Ok(())
    }
}

/// A `MirrorOneLarge` driver into `big.<source>` (created with a small `max.message.bytes`),
/// with `errors.tolerance` `tolerance` and the dead-letter queue `<source>.dlq`, initialized.
async fn one_large_driver(
    s: &eos::Setup,
    tolerance: ErrorTolerance,
) -> (ShareSinkTask<KafkaShareConsumer>, String, String) {
    let target = format!("big.{}", s.source);
    let dlq = format!("{}.dlq", s.source);
    let admin = KafkaAdmin::connect(&s.bootstrap).await.expect("admin");
    let limit = TARGET_MAX_MESSAGE_BYTES.to_string();
    admin
        .create_topic_with(
            &target,
            eos::PARTITIONS,
            1,
            &[("max.message.bytes", limit.as_str())],
        )
        .await
        .expect("target");
    admin.create_topic(&dlq, 1, 1).await.expect("dlq topic");
    let queue = Arc::new(TopicOnly {
        topic: dlq.clone(),
        sends: AtomicUsize::new(0),
    });
    let sink = Box::new(MirrorOneLarge {
        target: target.clone(),
    });
    let mut d = build_task(
        s,
        0,
        1,
        sink,
        |p| Arc::new(p),
        |c| {
            c.errors(ErrorHandling::new().tolerance(tolerance))
                .dead_letter_queue(queue as Arc<dyn DeadLetterQueue>, true)
        },
    )
    .await;
    d.initialize().await.expect("initialize");
    (d, target, dlq)
}

/// The values committed to `topic`, all partitions, with how often each was seen.
async fn committed(s: &eos::Setup, topic: &str, partitions: i32) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for p in 0..partitions {
        for record in read_committed::read_committed(&s.bootstrap, topic, p).await {
            let value = String::from_utf8(record.value.map(|v| v.to_vec()).unwrap_or_default())
                .expect("utf8");
            *seen.entry(value).or_insert(0) += 1;
        }
    }
    seen
}

/// Nothing archived: every source record is in `written` or still waiting in the group
/// (waits for the group to count the releases). A partition the group has no state for yet
/// (never fetched) waits whole: `eos::setup` spreads the records evenly.
async fn nothing_archived(s: &eos::Setup, written: usize, records: usize) {
    let admin = KafkaAdmin::connect(&s.bootstrap).await.expect("admin");
    let per_partition = i64::try_from(records).expect("records") / i64::from(eos::PARTITIONS);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let offsets = admin.share_group_offsets(&s.group).await.expect("offsets");
        let started: Vec<_> = offsets
            .iter()
            .filter(|o| o.start_offset.is_some())
            .collect();
        let lag: i64 = started.iter().filter_map(|o| o.lag).sum::<i64>()
            + per_partition * (i64::from(eos::PARTITIONS) - started.len() as i64);
        if usize::try_from(lag).expect("lag") + written == records {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{written} written and a lag of {lag}: {} records archived or lost ({offsets:?})",
            records as i64 - lag - written as i64
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One output over the target's `max.message.bytes` (the broker answers MESSAGE_TOO_LARGE),
/// `errors.tolerance=all`: the source record is dead-lettered once (in a committed
/// transaction, with the reason in Connect's headers), every other record mirrored exactly
/// once, and the group finishes every record: none archived unwritten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_over_the_target_max_message_bytes_is_dead_lettered_alone() {
    let Some(bootstrap) =
        support::bootstrap("a_record_over_the_target_max_message_bytes_is_dead_lettered_alone")
    else {
        return;
    };
    let records = 300;
    let s = eos::setup(bootstrap, records, 1).await;
    let (mut d, target, dlq) = one_large_driver(&s, ErrorTolerance::All).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let mut dead_lettered = 0;
    loop {
        match d.iteration_exactly_once().await {
            Ok(report) => dead_lettered += report.dead_lettered,
            Err(e) if e.is_retriable() => eprintln!("retriable: {e}"),
            Err(e) => panic!("iteration failed: {e:?}"),
        }
        if dead_lettered > 0 && eos::settled(&s).await {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not settled after 90 s ({dead_lettered} dead-lettered)"
        );
    }
    let m = d.metrics();
    d.close().await.expect("close");
    assert_eq!(dead_lettered, 1, "{m:?}");
    assert_eq!(m.records_dead_lettered, 1, "{m:?}");
    assert_eq!(m.lock_losses, 0, "{m:?}");
    let letters = read_committed::read_committed(&s.bootstrap, &dlq, 0).await;
    assert_eq!(letters.len(), 1, "dead-lettered once: {letters:?}");
    assert_eq!(
        letters[0].value.as_deref(),
        Some(format!("r-{LARGE}").as_bytes())
    );
    let header = |key: &str| {
        letters[0]
            .headers
            .iter()
            .find(|(k, _)| k.as_str() == key)
            .and_then(|(_, v)| v.as_deref())
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    assert_eq!(
        header("__connect.errors.stage").as_deref(),
        Some("KAFKA_PRODUCE")
    );
    assert_eq!(
        header("__connect.errors.exception.class.name").as_deref(),
        Some("org.apache.kafka.common.errors.RecordTooLargeException")
    );
    let trace = header("__connect.errors.exception.stacktrace").unwrap_or_default();
    assert!(trace.contains("MESSAGE_TOO_LARGE"), "{trace}");
    assert!(trace.contains(&target), "names the target: {trace}");
    let seen = committed(&s, &target, eos::PARTITIONS).await;
    let duplicates: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(duplicates.is_empty(), "duplicates: {duplicates:?}");
    let missing: Vec<usize> = (0..records)
        .filter(|i| *i != LARGE && !seen.contains_key(&format!("r-{i}")))
        .collect();
    assert!(missing.is_empty(), "missing: {missing:?}");
    assert_eq!(seen.len(), records - 1, "nothing else in the target");
}

/// The same under `errors.tolerance=none`: the task stops with `OutputRefused` naming the
/// target partition within one transaction timeout, and nothing is archived (every source
/// record is in the target or still waiting in the group).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_over_the_target_max_message_bytes_stops_the_task_under_tolerance_none() {
    let Some(bootstrap) = support::bootstrap(
        "a_record_over_the_target_max_message_bytes_stops_the_task_under_tolerance_none",
    ) else {
        return;
    };
    let records = 300;
    let s = eos::setup(bootstrap, records, 1).await;
    let (mut d, target, dlq) = one_large_driver(&s, ErrorTolerance::None).await;
    let (topic, partition) = refused_once(&mut d).await;
    assert_eq!(topic.as_deref(), Some(target.as_str()));
    assert_eq!(partition, Some(LARGE as i32 % eos::PARTITIONS));
    drop(d);
    assert!(
        read_committed::read_committed(&s.bootstrap, &dlq, 0)
            .await
            .is_empty(),
        "nothing dead-lettered"
    );
    let written = committed(&s, &target, eos::PARTITIONS).await.len();
    nothing_archived(&s, written, records).await;
}

/// The target topic is deleted while the task runs ("topic gone"). The producer alone would
/// retry UNKNOWN_TOPIC_OR_PARTITION until its delivery timeout (120 s), then the driver would
/// abort, release the batch and try again, each time spending a delivery attempt until the
/// group archived the records. The task stops with `OutputRefused` naming the topic within
/// one transaction timeout, and nothing is archived: every source record is in the output
/// read before the deletion or still waiting in the group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_deleted_mid_run_stops_the_task_and_archives_nothing() {
    let Some(bootstrap) =
        support::bootstrap("a_target_deleted_mid_run_stops_the_task_and_archives_nothing")
    else {
        return;
    };
    let records = 600;
    let s = eos::setup(bootstrap, records, 1).await;
    let (mut d, written) = mirrored_a_little(&s, records).await;
    let admin = KafkaAdmin::connect(&s.bootstrap).await.expect("admin");
    admin
        .delete_topic(&s.target)
        .await
        .expect("delete the target");
    let (topic, _) = refused_once(&mut d).await;
    assert_eq!(topic.as_deref(), Some(s.target.as_str()));
    drop(d);
    nothing_archived(&s, written, records).await;
}

/// The broker refuses the task's writes to the target (an ACL denies WRITE on it:
/// TOPIC_AUTHORIZATION_FAILED). Retrying cannot fix it: the task stops with `OutputRefused`
/// naming the topic within one transaction timeout, aborting once, and nothing is archived.
/// Needs the test broker's ACL authorizer (`scripts/kafka.sh`, `KAFKA_ACLS=1`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_the_task_may_not_write_stops_the_task_and_archives_nothing() {
    let Some(bootstrap) = support::bootstrap_with_acls(
        "a_target_the_task_may_not_write_stops_the_task_and_archives_nothing",
    ) else {
        return;
    };
    let records = 600;
    let s = eos::setup(bootstrap, records, 1).await;
    let (mut d, written) = mirrored_a_little(&s, records).await;
    // Everyone may do anything with the target but the plaintext listener's principal, the
    // task's, may not write it (a DENY wins over an ALLOW).
    let topic = ["--topic", s.target.as_str()];
    support::acls(
        &s.bootstrap,
        &[
            &["--allow-principal", "User:*", "--operation", "All"],
            &topic[..],
        ]
        .concat(),
    );
    support::acls(
        &s.bootstrap,
        &[
            &["--deny-principal", "User:ANONYMOUS", "--operation", "Write"],
            &topic[..],
        ]
        .concat(),
    );
    let (refused, _) = refused_once(&mut d).await;
    assert_eq!(refused.as_deref(), Some(s.target.as_str()));
    drop(d);
    nothing_archived(&s, written, records).await;
}

/// A task of `s` that has mirrored some of its `records` (one transaction committed at
/// least, not all of them), and how many the output holds.
async fn mirrored_a_little(
    s: &eos::Setup,
    records: usize,
) -> (ShareSinkTask<KafkaShareConsumer>, usize) {
    let mut d = build(s, 0, 1, |p| Arc::new(p), |c| c).await;
    d.initialize().await.expect("initialize");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while d.metrics().transactions_committed == 0 {
        assert!(tokio::time::Instant::now() < deadline, "nothing committed");
        d.iteration_exactly_once().await.expect("iteration");
    }
    let written = eos::output(s).await.len();
    assert!(written > 0 && written < records, "{written}");
    (d, written)
}

/// Runs `d` until it stops (at most 60 s); asserts it stopped with
/// `ExactlyOnceError::OutputRefused`, not retriable, within one transaction timeout (10 s,
/// plus 5 s of slack) and after aborting once, not retrying; returns the target it names.
async fn refused_once(d: &mut ShareSinkTask<KafkaShareConsumer>) -> (Option<String>, Option<i32>) {
    let started = tokio::time::Instant::now();
    let error = loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the task did not stop"
        );
        match d.iteration_exactly_once().await {
            Ok(_) => {}
            Err(e) => break e,
        }
    };
    let waited = started.elapsed();
    assert!(!error.is_retriable(), "{error:?}");
    assert!(
        waited < Duration::from_secs(10) + Duration::from_secs(5),
        "stopped after {waited:?}, more than one transaction timeout"
    );
    let m = d.metrics();
    assert_eq!(
        m.transactions_aborted, 1,
        "aborted once, not retried: {m:?}"
    );
    match error {
        Error::ExactlyOnce(ExactlyOnceError::OutputRefused {
            topic, partition, ..
        }) => (topic, partition),
        other => panic!("expected OutputRefused, got {other:?}"),
    }
}

/// A sink that cannot work: every `put_transactional` fails fatally, after staging an output.
struct AlwaysFails {
    target: String,
}

#[async_trait]
impl SinkTask for AlwaysFails {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, _: &[SinkRecord]) -> Result<(), TaskError> {
        Err(TaskError::fatal("exactly-once only"))
    }

    async fn put_transactional(
        &mut self,
        records: &[SinkRecord],
        output: &mut TransactionalOutput,
    ) -> Result<(), TaskError> {
        for record in records {
            output
                .send(ProducerRecord::new(self.target.as_str()).value(record.offset().to_string()));
        }
        Err(TaskError::fatal("the sink's schema does not match"))
    }
}

/// A fatal `put_transactional` error under a group limit of 2 deliveries: each task stops at
/// its first batch and releases it, but records on their last delivery are written to the
/// dead-letter queue in a transaction first, not released for the group to archive. Tasks
/// are started until the group finished every record: each source record is in the queue
/// exactly once, none was released at its limit, and nothing the task staged was written.
/// One source partition, so that each task's first poll holds every record (records a
/// consumer fetched ahead and never handed out go back with its close, see
/// `KafkaShareConsumer::close`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_put_on_the_last_delivery_dead_letters_the_records() {
    let Some(bootstrap) =
        support::bootstrap("a_fatal_put_on_the_last_delivery_dead_letters_the_records")
    else {
        return;
    };
    let s = eos::Setup {
        source: support::unique("eos-fatal"),
        target: support::unique("eos-fatal-out"),
        group: support::unique("eos-fatal-group"),
        bootstrap,
    };
    let admin = KafkaAdmin::connect(&s.bootstrap).await.expect("admin");
    let dlq = format!("{}.dlq", s.source);
    for topic in [&s.source, &s.target, &dlq] {
        admin.create_topic(topic, 1, 1).await.expect("topic");
    }
    admin
        .set_share_group_config(
            &s.group,
            &[
                ("share.auto.offset.reset", "earliest"),
                ("share.delivery.count.limit", "2"),
            ],
        )
        .await
        .expect("group config");
    // The tasks must read the limit when they connect.
    support::share_group_config_until(&admin, &s.group, |c| c.delivery_count_limit() == Some(2))
        .await;
    let records = 30;
    let producer = KafkaProducer::connect(KafkaProducerConfig::new(s.bootstrap.clone()))
        .await
        .expect("producer");
    let sends: Vec<_> = (0..records)
        .map(|i| {
            producer
                .send(ProducerRecord::new(s.source.as_str()).value(format!("r-{i}")))
                .expect("send")
        })
        .collect();
    for send in sends {
        send.await.expect("written");
    }
    let settled = || async {
        let offsets = admin.share_group_offsets(&s.group).await.expect("offsets");
        offsets.len() == 1 && offsets[0].lag == Some(0)
    };
    let queue = Arc::new(TopicOnly {
        topic: dlq.clone(),
        sends: AtomicUsize::new(0),
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let (mut stops, mut dead_lettered, mut at_limit) = (0, 0, 0);
    while !settled().await {
        let sink = Box::new(AlwaysFails {
            target: s.target.clone(),
        });
        let queue = Arc::clone(&queue) as Arc<dyn DeadLetterQueue>;
        let mut d = build_task(
            &s,
            0,
            1,
            sink,
            |p| Arc::new(p),
            |c| c.dead_letter_queue(queue, true),
        )
        .await;
        d.initialize().await.expect("initialize");
        loop {
            assert!(
                tokio::time::Instant::now() < deadline,
                "not settled after 120 s: {stops} stops, {dead_lettered} dead-lettered"
            );
            match d.iteration_exactly_once().await {
                Err(Error::Task { source, .. }) => {
                    assert!(!source.is_retriable(), "{source:?}");
                    stops += 1;
                    break;
                }
                Err(e) if e.is_retriable() => eprintln!("retriable: {e}"),
                Err(e) => panic!("iteration failed: {e:?}"),
                Ok(_) if settled().await => break,
                Ok(_) => {}
            }
        }
        let m = d.metrics();
        dead_lettered += m.records_dead_lettered;
        at_limit += m.records_released_at_limit;
        d.close().await.expect("close");
    }
    assert!(stops >= 2, "a first and a last delivery: {stops}");
    assert_eq!(at_limit, 0, "none released on its last delivery");
    let letters = committed(&s, &dlq, 1).await;
    assert_eq!(dead_lettered, records as u64, "{letters:?}");
    assert_eq!(
        queue.sends.load(Ordering::SeqCst),
        0,
        "not written outside a transaction"
    );
    assert_eq!(letters.len(), records, "{letters:?}");
    assert!(letters.values().all(|n| *n == 1), "once each: {letters:?}");
    assert!(
        (0..records).all(|i| letters.contains_key(&format!("r-{i}"))),
        "{letters:?}"
    );
    assert!(
        committed(&s, &s.target, 1).await.is_empty(),
        "the staged outputs were not written"
    );
}
