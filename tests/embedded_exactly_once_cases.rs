//! The exactly-once iteration on the embedded group, one behaviour per test, where the
//! property test (`embedded_exactly_once.rs`) does not pin it down: the refusals at
//! `initialize` (each naming what is missing), the mode chosen, the fencing of orphaned
//! transactional ids when the task count shrinks, strict mode, the leader-epoch gate after a
//! commit whose acknowledgements were lost, and dead letters written inside the transaction.
#![cfg(feature = "exactly-once")]

#[path = "support/dies_at_commit.rs"]
mod dies_at_commit;
#[path = "support/flaky_converters.rs"]
#[allow(dead_code)]
mod flaky_converters;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::{BufMut, Bytes, BytesMut};
use dies_at_commit::DiesAtCommit;
use kafka_share_sink::convert::{Converters, JsonConverter};
use kafka_share_sink::embedded::{
    AutoOffsetReset, ConsumerOptions, EmbeddedBroker, EmbeddedProducer, EmbeddedShareConsumer,
    GroupConfig, ProduceRecord, RecordState,
};
use kafka_share_sink::exactly_once::{
    ClusterCapabilities, ExactlyOnceCluster, ExactlyOnceConfig, ExactlyOnceError, ExactlyOnceMode,
    MirrorTask, ModePreference, TransactionalOutput,
};
use kafka_share_sink::producer::{
    DeliveryFuture, IsolationLevel, LogReader, Producer, ProducerError, ProducerRecord,
};
use kafka_share_sink::{
    AcknowledgementMode, CommitPolicy, DriverConfig, Error, ErrorHandling, ErrorTolerance,
    ShareSinkTask, SinkRecord, SinkTask, TaskConfig, TaskError,
};

const GROUP: &str = "mirror";
const CONNECTOR: &str = "mirror";
const LEDGER: &str = "mirror.eos-ledger";
const LOCK: Duration = Duration::from_secs(30);

type Driver = ShareSinkTask<EmbeddedShareConsumer>;

/// Topics `in` and `out` (one partition each) and `n` inputs `v<i>`; group `mirror` from the
/// earliest record with 30 s locks. Capabilities are the embedded default (KIP-1289).
fn broker(n: usize) -> EmbeddedBroker {
    broker_with(n.try_into().expect("small"), |i| {
        ProduceRecord::new().value(format!("v{i}"))
    })
}

fn broker_with(n: i64, record: impl Fn(i64) -> ProduceRecord) -> EmbeddedBroker {
    let broker = EmbeddedBroker::new();
    broker.create_topic("in", 1).expect("in");
    broker.create_topic("out", 1).expect("out");
    broker
        .set_group_config(GROUP, group_config(5))
        .expect("group");
    for i in 0..n {
        broker.produce("in", record(i)).expect("produce");
    }
    broker
}

/// Group `mirror`'s settings: from the earliest record, 30 s locks, `delivery_limit`
/// deliveries.
fn group_config(delivery_limit: u16) -> GroupConfig {
    GroupConfig::new()
        .auto_offset_reset(AutoOffsetReset::Earliest)
        .record_lock_duration(LOCK)
        .delivery_count_limit(delivery_limit)
}

/// What Kafka 4.4 offers: transactions v2 and RENEW, no KIP-1289.
fn kafka_4_4() -> ClusterCapabilities {
    ClusterCapabilities::none()
        .with_share_version(2)
        .with_transaction_version(2)
        .with_renew(true, true)
}

/// Copies input offset `o` to `out` as `out-<o>`, whatever the value converted to; sleeps
/// `slow_first` in its first `put_transactional` (a sink slower than the record locks), or
/// panics there after its sends with `panic_first` (a sink with a bug).
#[derive(Default)]
struct CopyOffsets {
    slow_first: Option<Duration>,
    panic_first: bool,
    /// Fails its first call retriably (a sink briefly away).
    away_first: bool,
    calls: usize,
    /// How many times `start` and `stop` were called.
    starts: Arc<AtomicUsize>,
    stops: Arc<AtomicUsize>,
}

#[async_trait]
impl SinkTask for CopyOffsets {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        self.starts.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    async fn stop(&mut self) -> Result<(), TaskError> {
        self.stops.fetch_add(1, Ordering::SeqCst);
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
        self.calls += 1;
        if let (1, Some(slow)) = (self.calls, self.slow_first) {
            tokio::time::sleep(slow).await;
        }
        for record in records {
            output.send(ProducerRecord::new("out").value(format!("out-{}", record.offset())));
        }
        if self.calls == 1 && self.panic_first {
            panic!("a bug in the sink");
        }
        if self.calls == 1 && self.away_first {
            return Err(TaskError::retriable("the sink is away"));
        }
        Ok(())
    }
}

fn eos(task: u32, tasks: u32) -> ExactlyOnceConfig {
    ExactlyOnceConfig::new(CONNECTOR, task, tasks).with_barrier_timeout(Duration::from_secs(10))
}

fn config() -> DriverConfig {
    // A commit every iteration: the tests look at the group right after one.
    DriverConfig::new(["in"])
        .poll_timeout(Duration::from_millis(10))
        .commit_policy(CommitPolicy::every_iteration())
}

fn transactional(broker: &EmbeddedBroker, eos: &ExactlyOnceConfig) -> EmbeddedProducer {
    broker
        .transactional_producer(&eos.transactional_id())
        .expect("producer")
}

fn driver_with(
    broker: &EmbeddedBroker,
    task: CopyOffsets,
    consumer: EmbeddedShareConsumer,
    producer: Arc<dyn Producer>,
    eos: ExactlyOnceConfig,
    config: DriverConfig,
) -> Driver {
    ShareSinkTask::new(Box::new(task), consumer, config).with_exactly_once(
        producer,
        Arc::new(broker.clone()),
        eos,
    )
}

/// The task `eos` names, with its transactional producer and the default driver settings.
fn driver(broker: &EmbeddedBroker, eos: ExactlyOnceConfig) -> Driver {
    let producer = transactional(broker, &eos);
    driver_with(
        broker,
        CopyOffsets::default(),
        broker.share_consumer(GROUP),
        Arc::new(producer),
        eos,
        config(),
    )
}

/// The values of a topic's partition 0 as a reader at `isolation` sees them.
async fn values(broker: &EmbeddedBroker, topic: &str, isolation: IsolationLevel) -> Vec<String> {
    let read = broker
        .read(topic, 0, 0, isolation, Duration::ZERO)
        .await
        .expect("read");
    read.records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value().expect("value")).into_owned())
        .collect()
}

async fn committed(broker: &EmbeddedBroker, topic: &str) -> Vec<String> {
    values(broker, topic, IsolationLevel::ReadCommitted).await
}

fn state(broker: &EmbeddedBroker, offset: i64) -> (RecordState, u16) {
    let view = broker
        .record_state(GROUP, "in", 0, offset)
        .expect("the group read the record");
    (view.state(), view.delivery_count())
}

/// An error with its sources, as a log line shows it.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

/// `initialize` must fail for want of a capability whose description contains `needle`.
async fn assert_missing(driver: &mut Driver, needle: &str) {
    let error = driver
        .initialize()
        .await
        .expect_err("initialize must refuse");
    match &error {
        Error::ExactlyOnce(ExactlyOnceError::MissingCapability { capability }) => {
            assert!(
                capability.contains(needle),
                "the error should name `{needle}`: {capability}"
            );
        }
        other => panic!("expected a missing capability, got {other:?}"),
    }
    let chain = chain(&error);
    assert!(chain.contains(needle), "the message names it: {chain}");
    assert_eq!(driver.exactly_once_mode(), None);
    assert!(
        matches!(driver.iteration_exactly_once().await, Err(Error::Failed)),
        "a refused driver does not iterate"
    );
}

// ---- 1. Refusals at initialize ------------------------------------------------------------

#[tokio::test]
async fn kafka_4_1_is_refused_for_want_of_renew() {
    let broker = broker(1);
    broker.set_capabilities(kafka_4_4().with_share_version(1).with_renew(false, false));
    let mut d = driver(&broker, eos(0, 1));
    assert_missing(&mut d, "RENEW acknowledgements (Kafka 4.2 or newer").await;
    assert_eq!(
        broker.partition_count(LEDGER).await.unwrap(),
        None,
        "no ledger topic is created for a refused mode"
    );
}

#[tokio::test]
async fn transaction_version_1_is_refused() {
    let broker = broker(1);
    broker.set_capabilities(kafka_4_4().with_transaction_version(1));
    let mut d = driver(&broker, eos(0, 1));
    assert_missing(&mut d, "transaction.version 2").await;
    assert_eq!(broker.partition_count(LEDGER).await.unwrap(), None);
}

#[tokio::test]
async fn renew_disabled_for_the_group_is_refused_in_ledger_mode() {
    let broker = broker(1);
    broker.set_capabilities(kafka_4_4());
    broker
        .set_group_config(
            GROUP,
            GroupConfig::new()
                .auto_offset_reset(AutoOffsetReset::Earliest)
                .renew_acknowledge_enable(false),
        )
        .unwrap();
    let caps = broker.capabilities(GROUP).await.unwrap();
    assert!(
        caps.renew && !caps.renew_enabled_for_group,
        "the cluster reports RENEW supported but off for the group: {caps:?}"
    );
    let mut d = driver(&broker, eos(0, 1));
    assert_missing(&mut d, "share.renew.acknowledge.enable=true").await;
}

#[tokio::test]
async fn renew_disabled_for_the_group_does_not_matter_with_atomic_acknowledgements() {
    // KIP-1289 settles inside the transaction: no RENEW is sent.
    let broker = broker(1);
    broker
        .set_group_config(
            GROUP,
            GroupConfig::new()
                .auto_offset_reset(AutoOffsetReset::Earliest)
                .renew_acknowledge_enable(false),
        )
        .unwrap();
    let mut d = driver(&broker, eos(0, 1));
    d.initialize().await.expect("initialize");
    assert_eq!(
        d.exactly_once_mode(),
        Some(ExactlyOnceMode::AtomicAcknowledgements)
    );
}

#[tokio::test]
async fn atomic_mode_required_on_a_kafka_4_4_cluster_is_refused() {
    let broker = broker(1);
    broker.set_capabilities(kafka_4_4());
    let mut d = driver(&broker, eos(0, 1).with_mode(ModePreference::Atomic));
    assert_missing(&mut d, "share.version 3").await;
}

#[tokio::test]
async fn implicit_acknowledgement_is_refused() {
    let broker = broker(1);
    let eos = eos(0, 1);
    let producer = transactional(&broker, &eos);
    let consumer = broker.share_consumer_with(
        GROUP,
        ConsumerOptions::new().acknowledgement_mode(AcknowledgementMode::Implicit),
    );
    let mut d = driver_with(
        &broker,
        CopyOffsets::default(),
        consumer,
        Arc::new(producer),
        eos,
        config(),
    );
    let error = d.initialize().await.expect_err("refused");
    assert!(
        matches!(
            &error,
            Error::Config {
                key: "share.acknowledgement.mode",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("explicit"), "{error}");
}

#[tokio::test]
async fn a_producer_without_a_transactional_id_is_refused() {
    let broker = broker(1);
    let mut d = driver_with(
        &broker,
        CopyOffsets::default(),
        broker.share_consumer(GROUP),
        Arc::new(broker.producer()),
        eos(0, 1),
        config(),
    );
    let error = d.initialize().await.expect_err("refused");
    match &error {
        Error::ExactlyOnce(ExactlyOnceError::Config { key, reason }) => {
            assert_eq!(*key, "transactional.id");
            assert!(
                reason.contains("transactional.id=mirror-eos-0"),
                "says which id to set: {reason}"
            );
        }
        other => panic!("expected a config error, got {other:?}"),
    }
}

#[tokio::test]
async fn iteration_is_refused_on_an_exactly_once_driver_and_the_other_way_round() {
    let broker = broker(2);
    let mut eos_driver = driver(&broker, eos(0, 1));
    eos_driver.initialize().await.expect("initialize");
    let error = eos_driver.iteration().await.expect_err("refused");
    assert!(
        matches!(&error, Error::Config { key: "exactly.once", reason } if reason.contains("iteration_exactly_once")),
        "{error:?}"
    );
    assert_eq!(
        broker.state_counts(GROUP).acquired,
        0,
        "nothing was polled by the refused call"
    );
    // The refusal does not break the driver.
    let report = eos_driver.iteration_exactly_once().await.expect("iterates");
    assert_eq!(report.accepted, 2);

    let mut plain = ShareSinkTask::new(
        Box::new(CopyOffsets::default()),
        broker.share_consumer(GROUP),
        config(),
    );
    plain.initialize().await.expect("initialize");
    let error = plain.iteration_exactly_once().await.expect_err("refused");
    assert!(
        matches!(&error, Error::Config { key: "exactly.once", reason } if reason.contains("with_exactly_once")),
        "{error:?}"
    );
    assert_eq!(plain.exactly_once_mode(), None);
}

// ---- 2. The mode chosen and reported ------------------------------------------------------

#[tokio::test]
async fn the_embedded_default_gets_atomic_acknowledgements() {
    let broker = broker(3);
    let mut d = driver(&broker, eos(0, 1));
    assert_eq!(d.exactly_once_mode(), None, "not before initialize");
    d.initialize().await.expect("initialize");
    assert_eq!(
        d.exactly_once_mode(),
        Some(ExactlyOnceMode::AtomicAcknowledgements)
    );
    assert_eq!(
        broker.partition_count(LEDGER).await.unwrap(),
        None,
        "no ledger in atomic mode"
    );
    let report = d.iteration_exactly_once().await.expect("iteration");
    assert_eq!(report.accepted, 3);
    assert_eq!(d.metrics().records_renewed, 0, "no RENEW in atomic mode");
    assert_eq!(committed(&broker, "out").await, ["out-0", "out-1", "out-2"]);
}

#[tokio::test]
async fn kafka_4_4_capabilities_get_the_ledger() {
    let broker = broker(3);
    broker.set_capabilities(kafka_4_4());
    let mut d = driver(&broker, eos(0, 1));
    d.initialize().await.expect("initialize");
    assert_eq!(d.exactly_once_mode(), Some(ExactlyOnceMode::Ledger));
    assert_eq!(
        broker.partition_count(LEDGER).await.unwrap(),
        Some(1),
        "the ledger topic is created with the source's partition count"
    );
    let report = d.iteration_exactly_once().await.expect("iteration");
    assert_eq!(report.accepted, 3);
    assert_eq!(d.metrics().records_renewed, 3, "renewed before the commit");
    assert_eq!(committed(&broker, "out").await, ["out-0", "out-1", "out-2"]);
    assert_eq!(
        committed(&broker, LEDGER).await.len(),
        1,
        "one claim for the one source partition"
    );
}

/// The embedded cluster, whose first `capability_failures` capability reads fail as a read on
/// a connection to a broker killed a moment ago does (retriable), and whose ledger topic
/// creation fails for good when `ledger_refused`.
#[derive(Debug)]
struct FlakyCluster {
    inner: EmbeddedBroker,
    capability_failures: AtomicUsize,
    capability_reads: AtomicUsize,
    /// What a failing capability read returns.
    capability_error: fn() -> ExactlyOnceError,
    ledger_refused: bool,
    ledger_creations: AtomicUsize,
    /// How many transactional-id listings (the orphan fencing, after the producer's
    /// initialization) fail retriably first.
    listing_failures: AtomicUsize,
    /// How many partition counts of `unknown_topic` answer that it does not exist first (a
    /// broker restarted a moment ago, whose metadata has not caught up).
    unknown_answers: AtomicUsize,
    unknown_topic: &'static str,
}

/// A request cut by a broker killed a moment ago: retriable.
fn cut_request() -> ExactlyOnceError {
    ExactlyOnceError::Cluster {
        operation: "reading the cluster's features",
        source: Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "the broker went away mid-request",
        )),
    }
}

impl FlakyCluster {
    fn new(inner: &EmbeddedBroker, capability_failures: usize, ledger_refused: bool) -> Self {
        Self {
            inner: inner.clone(),
            capability_failures: AtomicUsize::new(capability_failures),
            capability_reads: AtomicUsize::new(0),
            capability_error: cut_request,
            ledger_refused,
            ledger_creations: AtomicUsize::new(0),
            listing_failures: AtomicUsize::new(0),
            unknown_answers: AtomicUsize::new(0),
            unknown_topic: "",
        }
    }
}

/// Takes one from `n` if it is above zero: whether this call fails.
fn failing(n: &AtomicUsize) -> bool {
    n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

#[async_trait]
impl LogReader for FlakyCluster {
    async fn read(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        isolation: IsolationLevel,
        max_wait: Duration,
    ) -> Result<kafka_share_sink::producer::LogRead, kafka_share_sink::ConsumerError> {
        self.inner
            .read(topic, partition, from, isolation, max_wait)
            .await
    }

    async fn end_offset(
        &self,
        topic: &str,
        partition: i32,
        isolation: IsolationLevel,
    ) -> Result<i64, kafka_share_sink::ConsumerError> {
        self.inner.end_offset(topic, partition, isolation).await
    }
}

#[async_trait]
impl ExactlyOnceCluster for FlakyCluster {
    async fn capabilities(&self, group_id: &str) -> Result<ClusterCapabilities, ExactlyOnceError> {
        self.capability_reads.fetch_add(1, Ordering::SeqCst);
        if failing(&self.capability_failures) {
            return Err((self.capability_error)());
        }
        self.inner.capabilities(group_id).await
    }

    async fn partition_count(&self, topic: &str) -> Result<Option<i32>, ExactlyOnceError> {
        if topic == self.unknown_topic && failing(&self.unknown_answers) {
            return Ok(None);
        }
        self.inner.partition_count(topic).await
    }

    async fn create_ledger_topic(
        &self,
        topic: &str,
        partitions: i32,
    ) -> Result<(), ExactlyOnceError> {
        self.ledger_creations.fetch_add(1, Ordering::SeqCst);
        if self.ledger_refused {
            return Err(ExactlyOnceError::Ledger {
                topic: topic.to_owned(),
                reason: "not allowed here".to_owned(),
            });
        }
        self.inner.create_ledger_topic(topic, partitions).await
    }

    async fn topic_config(
        &self,
        topic: &str,
        key: &str,
    ) -> Result<Option<String>, ExactlyOnceError> {
        self.inner.topic_config(topic, key).await
    }

    async fn leader_epochs(
        &self,
        partitions: &[kafka_share_sink::TopicPartition],
    ) -> Result<std::collections::HashMap<kafka_share_sink::TopicPartition, i32>, ExactlyOnceError>
    {
        self.inner.leader_epochs(partitions).await
    }

    async fn share_partition_start_offsets(
        &self,
        group_id: &str,
        topic: &str,
    ) -> Result<std::collections::HashMap<i32, i64>, ExactlyOnceError> {
        self.inner
            .share_partition_start_offsets(group_id, topic)
            .await
    }

    async fn ledger_start_offset(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<i64, ExactlyOnceError> {
        self.inner.ledger_start_offset(topic, partition).await
    }

    async fn transactional_ids(&self, prefix: &str) -> Result<Vec<String>, ExactlyOnceError> {
        if failing(&self.listing_failures) {
            return Err(ExactlyOnceError::Cluster {
                operation: "listing transactions",
                source: Box::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "a coordinator did not answer in time",
                )),
            });
        }
        self.inner.transactional_ids(prefix).await
    }

    async fn fence_transactional_id(&self, transactional_id: &str) -> Result<(), ExactlyOnceError> {
        self.inner.fence_transactional_id(transactional_id).await
    }
}

/// The driver of task 0 of 1 on `cluster`.
fn driver_on(broker: &EmbeddedBroker, cluster: Arc<FlakyCluster>) -> Driver {
    driver_of(broker, cluster, CopyOffsets::default())
}

/// The driver of `task`, task 0 of 1 on `cluster`.
fn driver_of(
    broker: &EmbeddedBroker,
    cluster: Arc<FlakyCluster>,
    task: impl SinkTask + 'static,
) -> Driver {
    let eos = eos(0, 1);
    let producer = transactional(broker, &eos);
    ShareSinkTask::new(Box::new(task), broker.share_consumer(GROUP), config()).with_exactly_once(
        Arc::new(producer),
        cluster,
        eos,
    )
}

/// A driver of `MirrorTask` to `copy.<source>` on `broker`, whose cluster answers that `topic`
/// does not exist `answers` times first.
fn mirror_after_unknown(broker: &EmbeddedBroker, topic: &'static str, answers: usize) -> Driver {
    broker.set_capabilities(kafka_4_4());
    let mut cluster = FlakyCluster::new(broker, 0, false);
    cluster.unknown_topic = topic;
    cluster.unknown_answers = AtomicUsize::new(answers);
    driver_of(broker, Arc::new(cluster), MirrorTask::with_prefix("copy."))
}

/// A broker killed a moment ago fails a request of the setup: `initialize` tries the setup
/// again (it used to fail the driver for good), then the iteration copies as usual.
#[tokio::test]
async fn initialize_tries_the_setup_again_after_a_retriable_cluster_failure() {
    let broker = broker(3);
    broker.set_capabilities(kafka_4_4());
    let cluster = Arc::new(FlakyCluster::new(&broker, 3, false));
    let task = CopyOffsets::default();
    let (starts, stops) = (Arc::clone(&task.starts), Arc::clone(&task.stops));
    let mut d = driver_of(&broker, Arc::clone(&cluster), task);
    d.initialize()
        .await
        .expect("initialize after three failed reads");
    assert_eq!(cluster.capability_reads.load(Ordering::SeqCst), 4);
    assert_eq!(d.exactly_once_mode(), Some(ExactlyOnceMode::Ledger));
    let report = d.iteration_exactly_once().await.expect("iteration");
    assert_eq!(report.records, 3);
    assert_eq!(committed(&broker, "out").await, ["out-0", "out-1", "out-2"]);
    d.close().await.expect("close");
    assert_eq!(
        (starts.load(Ordering::SeqCst), stops.load(Ordering::SeqCst)),
        (1, 1),
        "the task is started once, after the setup, and stopped at close"
    );
}

/// A declared target that a broker restarted a moment ago does not know yet (one
/// UNKNOWN_TOPIC_OR_PARTITION answer) is asked about again, not refused for good; one that
/// stays unknown is refused, naming it.
#[tokio::test]
async fn a_target_unknown_for_a_moment_is_asked_about_again_at_the_setup() {
    for (unknown_answers, refused) in [(1, false), (usize::MAX, true)] {
        let broker = broker(3);
        broker.create_topic("copy.in", 1).expect("target");
        let mut d = mirror_after_unknown(&broker, "copy.in", unknown_answers);
        let outcome = d.initialize().await;
        if refused {
            let Err(Error::ExactlyOnce(ExactlyOnceError::UnfitTarget { target, reason, .. })) =
                &outcome
            else {
                panic!("expected UnfitTarget, got {outcome:?}");
            };
            assert_eq!(target, "copy.in");
            assert!(reason.contains("does not exist"), "{reason}");
            continue;
        }
        outcome.expect("initialize after one unknown answer");
        let report = d.iteration_exactly_once().await.expect("iteration");
        assert_eq!(report.records, 3);
        assert_eq!(committed(&broker, "copy.in").await, ["v0", "v1", "v2"]);
    }
}

/// A source that a broker restarted a moment ago does not know yet is asked about again: its
/// partition count is what a target that keeps the source partition is checked against (taken
/// for missing, the check was skipped and the narrow target accepted).
#[tokio::test]
async fn a_source_unknown_for_a_moment_still_has_its_targets_checked() {
    let broker = EmbeddedBroker::new();
    broker.create_topic("in", 2).expect("source");
    broker.create_topic("copy.in", 1).expect("narrow target");
    broker
        .set_group_config(GROUP, group_config(5))
        .expect("group");
    let mut d = mirror_after_unknown(&broker, "in", 1);
    let outcome = d.initialize().await;
    let Err(Error::ExactlyOnce(ExactlyOnceError::UnfitTarget { reason, .. })) = &outcome else {
        panic!("expected UnfitTarget, got {outcome:?}");
    };
    assert!(
        reason.contains("it has 1 partition and the source 2"),
        "{reason}"
    );
}

/// The orphan fencing (task 0) fails retriably after the producer was initialized: the next
/// try does not initialize it again (the producer would refuse, and that refusal would stop
/// the driver for good).
#[tokio::test]
async fn a_retried_setup_initializes_the_producer_once() {
    let broker = broker(3);
    broker.set_capabilities(kafka_4_4());
    let cluster = Arc::new(FlakyCluster::new(&broker, 0, false));
    cluster.listing_failures.store(2, Ordering::SeqCst);
    let mut d = driver_on(&broker, Arc::clone(&cluster));
    d.initialize()
        .await
        .expect("initialize after two failed listings");
    assert_eq!(cluster.listing_failures.load(Ordering::SeqCst), 0);
    assert_eq!(cluster.capability_reads.load(Ordering::SeqCst), 3);
    let report = d.iteration_exactly_once().await.expect("iteration");
    assert_eq!(report.records, 3);
    assert_eq!(committed(&broker, "out").await, ["out-0", "out-1", "out-2"]);
}

/// A cluster request whose own error no retry changes (here a client setting the cluster
/// refused) is tried once, although the iteration would count a failed request retriable.
#[tokio::test]
async fn a_cluster_request_refused_for_good_is_tried_once() {
    let broker = broker(3);
    broker.set_capabilities(kafka_4_4());
    let mut flaky = FlakyCluster::new(&broker, 5, false);
    flaky.capability_error = || ExactlyOnceError::Cluster {
        operation: "reading the cluster's features",
        source: Box::new(kafka_share_sink::ClientError::Config {
            key: "sasl.jaas.config".to_owned(),
            reason: "not a JAAS line".to_owned(),
        }),
    };
    let cluster = Arc::new(flaky);
    let mut d = driver_on(&broker, Arc::clone(&cluster));
    let error = d.initialize().await.expect_err("refused");
    assert!(
        matches!(error, Error::ExactlyOnce(ExactlyOnceError::Cluster { .. })),
        "{error:?}"
    );
    assert_eq!(cluster.capability_reads.load(Ordering::SeqCst), 1);
}

/// `initialize` dropped while its exactly-once setup waits to try again: the driver is
/// failed, not a driver without exactly-once that a second `initialize` would start.
#[tokio::test]
async fn initialize_dropped_during_the_setup_leaves_the_driver_failed() {
    let broker = broker(3);
    broker.set_capabilities(kafka_4_4());
    let cluster = Arc::new(FlakyCluster::new(&broker, usize::MAX, false));
    let mut d = driver_on(&broker, Arc::clone(&cluster));
    tokio::time::timeout(Duration::from_millis(300), d.initialize())
        .await
        .expect_err("still trying the setup");
    assert!(cluster.capability_reads.load(Ordering::SeqCst) >= 2);
    assert!(
        matches!(d.initialize().await, Err(Error::AlreadyInitialized)),
        "a second initialize must not start the driver"
    );
    assert!(matches!(d.iteration().await, Err(Error::Failed)));
    assert!(matches!(
        d.iteration_exactly_once().await,
        Err(Error::Failed)
    ));
    d.close().await.expect("close");
    assert!(committed(&broker, "out").await.is_empty());
}

/// A shutdown while the exactly-once setup waits for the cluster stops `run_exactly_once`
/// at once (it used to wait out the setup's retries, up to a minute) and closes the driver;
/// nothing was read or written.
#[tokio::test]
async fn a_shutdown_during_the_setup_stops_the_run() {
    let broker = broker(3);
    broker.set_capabilities(kafka_4_4());
    let cluster = Arc::new(FlakyCluster::new(&broker, usize::MAX, false));
    let mut d = driver_on(&broker, Arc::clone(&cluster));
    let run = d.run_exactly_once(tokio::time::sleep(Duration::from_millis(300)));
    tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("the shutdown stops the setup")
        .expect("a clean stop");
    assert!(cluster.capability_reads.load(Ordering::SeqCst) >= 1);
    assert!(matches!(
        d.iteration_exactly_once().await,
        Err(Error::Closed)
    ));
    assert!(committed(&broker, "out").await.is_empty());
}

/// What no retry changes fails `initialize` at once, tried once.
#[tokio::test]
async fn initialize_does_not_try_again_what_no_retry_changes() {
    let broker = broker(3);
    broker.set_capabilities(kafka_4_4());
    let cluster = Arc::new(FlakyCluster::new(&broker, 0, true));
    let task = CopyOffsets::default();
    let (starts, stops) = (Arc::clone(&task.starts), Arc::clone(&task.stops));
    let mut d = driver_of(&broker, Arc::clone(&cluster), task);
    let error = d.initialize().await.expect_err("the ledger is refused");
    assert!(
        matches!(error, Error::ExactlyOnce(ExactlyOnceError::Ledger { .. })),
        "{error:?}"
    );
    assert_eq!(cluster.ledger_creations.load(Ordering::SeqCst), 1);
    assert_eq!(cluster.capability_reads.load(Ordering::SeqCst), 1);
    // The setup failed before the task's turn: it was never started, so it is not stopped
    // (as Connect calls stop only on a task it started).
    let _ = d.close().await;
    assert_eq!(
        (starts.load(Ordering::SeqCst), stops.load(Ordering::SeqCst)),
        (0, 0)
    );
}

// ---- 3. Orphan fencing when tasks.max shrinks ---------------------------------------------

/// A producer with `id`, in an open transaction with one record sent.
async fn open_transaction(broker: &EmbeddedBroker, id: &str) -> EmbeddedProducer {
    let producer = broker.transactional_producer(id).expect("producer");
    producer.init_transactions().await.expect("init");
    producer.begin_transaction().expect("begin");
    producer
        .send(ProducerRecord::new("out").value(id.to_owned()))
        .expect("send")
        .await
        .expect("written");
    producer
}

#[tokio::test]
async fn task_0_fences_the_producers_of_task_slots_at_and_above_tasks_max() {
    let broker = broker(0);
    // Four tasks ran before; now tasks.max is 2. The producers of slots 2 and 3 are
    // orphaned, each with a transaction still open.
    let orphan = open_transaction(&broker, "mirror-eos-3").await;
    let orphan_2 = open_transaction(&broker, "mirror-eos-2").await;
    let other_connector = open_transaction(&broker, "other-eos-3").await;

    // Task 1 fences nothing but its own predecessor: only task 0 fences orphans.
    let mut task_1 = driver(&broker, eos(1, 2));
    task_1.initialize().await.expect("initialize task 1");
    orphan
        .send(ProducerRecord::new("out").value("still alive"))
        .expect("not fenced yet")
        .await
        .expect("written");
    // A producer of task slot 1 (below tasks.max) with an open transaction.
    let live = open_transaction(&broker, "mirror-eos-1").await;

    let mut task_0 = driver(&broker, eos(0, 2));
    task_0.initialize().await.expect("initialize task 0");

    for (name, producer) in [("mirror-eos-3", &orphan), ("mirror-eos-2", &orphan_2)] {
        let error = producer.commit_transaction().await.expect_err(name);
        assert!(
            matches!(error, ProducerError::Fenced { .. }),
            "{name}: {error:?}"
        );
    }
    live.commit_transaction()
        .await
        .expect("task slot 1 is below tasks.max");
    other_connector
        .commit_transaction()
        .await
        .expect("another connector's id");
    assert_eq!(
        committed(&broker, "out").await,
        ["other-eos-3", "mirror-eos-1"],
        "the orphans' records are not visible read_committed"
    );
}

// ---- 4. Strict mode -------------------------------------------------------------------------

/// A claim record as the ledger stores it (the layout documented in
/// `src/exactly_once/ledger/claim.rs`, version 1).
fn claim(topic: &str, partition: i32, first: i64, last: i64, id: &str) -> Bytes {
    let mut out = BytesMut::new();
    out.put_slice(b"KSSC");
    out.put_u8(1);
    out.put_u16(u16::try_from(topic.len()).unwrap());
    out.put_slice(topic.as_bytes());
    out.put_i32(partition);
    out.put_u32(1);
    out.put_i64(first);
    out.put_i64(last);
    out.put_u16(u16::try_from(id.len()).unwrap());
    out.put_slice(id.as_bytes());
    out.freeze()
}

#[tokio::test]
async fn strict_mode_checks_first_deliveries_against_the_ledger() {
    let broker = broker(4);
    broker.set_capabilities(kafka_4_4());
    let mut d = driver(&broker, eos(0, 1).with_strict(true));
    d.initialize().await.expect("initialize");
    let report = d.iteration_exactly_once().await.expect("iteration");
    assert_eq!(report.accepted, 4);
    let m = d.metrics();
    assert_eq!(m.records_redelivered, 0, "first deliveries only: {m:?}");
    assert!(m.ledger_checks > 0, "strict: checked all the same: {m:?}");
    assert_eq!(m.records_already_claimed, 0);
    assert_eq!(committed(&broker, "out").await.len(), 4);
}

#[tokio::test]
async fn without_strict_mode_first_deliveries_are_not_checked() {
    let broker = broker(4);
    broker.set_capabilities(kafka_4_4());
    let mut d = driver(&broker, eos(0, 1));
    d.initialize().await.expect("initialize");
    let report = d.iteration_exactly_once().await.expect("iteration");
    assert_eq!(report.accepted, 4);
    let m = d.metrics();
    assert_eq!(
        (m.records_redelivered, m.ledger_checks),
        (0, 0),
        "a clean run reads no ledger: {m:?}"
    );
}

/// A claim committed by another task for records that come back as first deliveries under
/// the same leader epoch (a share partition reloaded without a leader change, the residual
/// risk F6 of the README): strict mode finds it, the default does not look.
async fn first_deliveries_already_claimed(strict: bool) -> (Vec<String>, u64) {
    let broker = broker(4);
    broker.set_capabilities(kafka_4_4());
    broker.create_ledger_topic(LEDGER, 1).await.unwrap();
    let other = broker.transactional_producer("mirror-eos-1").unwrap();
    other.init_transactions().await.unwrap();
    other.begin_transaction().unwrap();
    other
        .send(
            ProducerRecord::new(LEDGER)
                .partition(0)
                .value(claim("in", 0, 0, 1, "mirror-eos-1")),
        )
        .unwrap()
        .await
        .unwrap();
    other.commit_transaction().await.unwrap();

    let mut d = driver(&broker, eos(0, 2).with_strict(strict));
    d.initialize().await.expect("initialize");
    let report = d.iteration_exactly_once().await.expect("iteration");
    assert_eq!(report.accepted, 4, "all settled either way");
    (
        committed(&broker, "out").await,
        d.metrics().records_already_claimed,
    )
}

#[tokio::test]
async fn strict_mode_skips_first_deliveries_another_task_claimed() {
    let (out, claimed) = first_deliveries_already_claimed(true).await;
    assert_eq!(claimed, 2);
    assert_eq!(out, ["out-2", "out-3"], "claimed records are not processed");
    let (out, claimed) = first_deliveries_already_claimed(false).await;
    assert_eq!(claimed, 0);
    assert_eq!(
        out.len(),
        4,
        "without strict mode the claim is not looked at"
    );
}

// ---- 5. The leader-epoch gate -------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn records_committed_before_a_fail_over_come_back_at_count_1_and_are_found_claimed() {
    let broker = broker(4);
    broker.set_capabilities(kafka_4_4());
    let eos_0 = eos(0, 1);
    let producer = Arc::new(DiesAtCommit::new(transactional(&broker, &eos_0), true));
    let mut first = driver_with(
        &broker,
        CopyOffsets::default(),
        broker.share_consumer(GROUP),
        Arc::clone(&producer) as Arc<dyn Producer>,
        eos_0,
        config(),
    );
    first.initialize().await.expect("initialize");
    let hung = tokio::time::timeout(Duration::from_secs(5), first.iteration_exactly_once()).await;
    assert!(
        hung.is_err() && producer.died(),
        "the iteration hangs after its commit"
    );
    assert_eq!(committed(&broker, "out").await.len(), 4, "committed");
    assert_eq!(
        state(&broker, 0),
        (RecordState::Acquired, 1),
        "not accepted"
    );

    // The share-partition leader changes before the ACCEPTs: the acquisitions are forgotten
    // (never persisted), so the records come back as first deliveries.
    assert_eq!(broker.fail_over("in", 0).unwrap(), 1);
    drop(first);
    assert_eq!(state(&broker, 0), (RecordState::Available, 0));
    // Two records appended under the new epoch.
    for i in 4..6 {
        broker
            .produce("in", ProduceRecord::new().value(format!("v{i}")))
            .unwrap();
    }

    let mut again = driver(&broker, eos(0, 1));
    again.initialize().await.expect("initialize");
    let report = again.iteration_exactly_once().await.expect("iteration");
    assert_eq!(report.accepted, 6);
    let m = again.metrics();
    assert_eq!(
        m.records_redelivered, 0,
        "delivery count 1: the count alone would not have caught them: {m:?}"
    );
    assert_eq!(m.ledger_checks, 1, "{m:?}");
    assert_eq!(
        m.records_already_claimed, 4,
        "the records from before the new leader epoch are found claimed: {m:?}"
    );
    for offset in 0..4 {
        assert_eq!(
            state(&broker, offset),
            (RecordState::Acknowledged, 1),
            "offset {offset}"
        );
    }
    assert_eq!(
        committed(&broker, "out").await,
        ["out-0", "out-1", "out-2", "out-3", "out-4", "out-5"],
        "each output once"
    );
}

// ---- 6. Dead letters inside the transaction ----------------------------------------------

/// Values `"a"`, `{bad` (not JSON) and `"c"`, a JSON value converter, errors.tolerance=all
/// and the dead-letter queue `dlq`.
fn dead_letter_setup(
    mode: ExactlyOnceMode,
    task: CopyOffsets,
    wrap: impl FnOnce(EmbeddedProducer, &EmbeddedBroker) -> Arc<dyn Producer>,
) -> (EmbeddedBroker, Driver) {
    dead_letter_setup_with(mode, task, wrap, |c| c)
}

/// [`dead_letter_setup`], with `configure` applied to the driver config last.
fn dead_letter_setup_with(
    mode: ExactlyOnceMode,
    task: CopyOffsets,
    wrap: impl FnOnce(EmbeddedProducer, &EmbeddedBroker) -> Arc<dyn Producer>,
    configure: impl FnOnce(DriverConfig) -> DriverConfig,
) -> (EmbeddedBroker, Driver) {
    let values = [r#""a""#, "{bad", r#""c""#];
    let broker = broker_with(3, |i| {
        ProduceRecord::new().value(values[usize::try_from(i).unwrap()])
    });
    if mode == ExactlyOnceMode::Ledger {
        broker.set_capabilities(kafka_4_4());
    }
    let dlq = broker.dead_letter_queue("dlq").expect("dlq");
    let config = config()
        .converters(
            Converters::byte_array()
                .with_value(Arc::new(JsonConverter::new().schemas_enable(false))),
        )
        .errors(ErrorHandling::new().tolerance(ErrorTolerance::All))
        .dead_letter_queue(Arc::new(dlq), true);
    let config = configure(config);
    let eos = eos(0, 1);
    let producer = wrap(transactional(&broker, &eos), &broker);
    let d = driver_with(
        &broker,
        task,
        broker.share_consumer(GROUP),
        producer,
        eos,
        config,
    );
    (broker, d)
}

/// Passes everything on; at the commit, notes what the group and the readers see.
#[derive(Debug)]
struct WatchesCommit {
    inner: EmbeddedProducer,
    broker: EmbeddedBroker,
    at_commit: Mutex<Vec<(RecordState, usize, usize)>>,
}

#[async_trait]
impl Producer for WatchesCommit {
    fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture, ProducerError> {
        self.inner.send(record)
    }
    async fn flush(&self) -> Result<(), ProducerError> {
        self.inner.flush().await
    }
    fn transactional_id(&self) -> Option<&str> {
        self.inner.transactional_id()
    }
    async fn init_transactions(&self) -> Result<(), ProducerError> {
        self.inner.init_transactions().await
    }
    fn begin_transaction(&self) -> Result<(), ProducerError> {
        self.inner.begin_transaction()
    }
    async fn commit_transaction(&self) -> Result<(), ProducerError> {
        let bad = self
            .broker
            .record_state(GROUP, "in", 0, 1)
            .expect("read")
            .state();
        let uncommitted = values(&self.broker, "dlq", IsolationLevel::ReadUncommitted)
            .await
            .len();
        let committed = committed(&self.broker, "dlq").await.len();
        self.at_commit
            .lock()
            .unwrap()
            .push((bad, uncommitted, committed));
        self.inner.commit_transaction().await
    }
    async fn abort_transaction(&self) -> Result<(), ProducerError> {
        self.inner.abort_transaction().await
    }
    async fn send_share_acknowledgements(
        &self,
        acknowledgements: &kafka_share_sink::exactly_once::ShareAcknowledgements,
        group: &kafka_share_sink::GroupMetadata,
    ) -> Result<(), ProducerError> {
        self.inner
            .send_share_acknowledgements(acknowledgements, group)
            .await
    }
}

async fn a_dead_letter_is_written_in_the_transaction(mode: ExactlyOnceMode) {
    let mut watcher = None;
    let (broker, mut d) = dead_letter_setup(mode, CopyOffsets::default(), |inner, broker| {
        let w = Arc::new(WatchesCommit {
            inner,
            broker: broker.clone(),
            at_commit: Mutex::default(),
        });
        watcher = Some(Arc::clone(&w));
        w
    });
    let w = watcher.expect("watcher");
    d.initialize().await.expect("initialize");
    assert_eq!(d.exactly_once_mode(), Some(mode));
    let report = d.iteration_exactly_once().await.expect("iteration");
    assert_eq!(
        (report.accepted, report.rejected, report.dead_lettered),
        (2, 1, 1),
        "{report:?}"
    );
    let at_commit = w.at_commit.lock().unwrap().clone();
    let staged_or_held = match mode {
        // Ledger mode: REJECTed only after the commit.
        ExactlyOnceMode::Ledger => RecordState::Acquired,
        // KIP-1289: the REJECT is staged in the transaction.
        _ => RecordState::TxPending,
    };
    assert_eq!(
        at_commit,
        [(staged_or_held, 1, 0)],
        "at the commit: the bad record not yet settled, its dead letter written but not committed"
    );
    assert_eq!(state(&broker, 1).0, RecordState::Archived, "rejected");
    assert_eq!(state(&broker, 0).0, RecordState::Acknowledged);
    assert_eq!(
        committed(&broker, "dlq").await,
        ["{bad"],
        "exactly once, read_committed"
    );
    let letters = broker.read_log("dlq", 0).unwrap();
    let letter = letters
        .iter()
        .find(|r| r.value().is_some_and(|v| v == "{bad"))
        .expect("the dead letter");
    assert!(
        letter
            .headers()
            .iter()
            .any(|h| h.key() == "__connect.errors.topic" && h.value().is_some_and(|v| v == "in")),
        "with Connect's context headers: {:?}",
        letter.headers()
    );
    assert_eq!(committed(&broker, "out").await, ["out-0", "out-2"]);
}

#[tokio::test]
async fn ledger_mode_writes_dead_letters_in_the_transaction_and_rejects_after_the_commit() {
    a_dead_letter_is_written_in_the_transaction(ExactlyOnceMode::Ledger).await;
}

#[tokio::test]
async fn atomic_mode_writes_dead_letters_in_the_transaction_and_stages_the_reject() {
    a_dead_letter_is_written_in_the_transaction(ExactlyOnceMode::AtomicAcknowledgements).await;
}

async fn an_aborted_dead_letter_is_not_visible(mode: ExactlyOnceMode) {
    // The first put outlasts the locks: the renewal (ledger) or the staging (KIP-1289)
    // fails, and the transaction with the dead letter in it is aborted.
    let task = CopyOffsets {
        slow_first: Some(LOCK + Duration::from_secs(1)),
        ..CopyOffsets::default()
    };
    let (broker, mut d) = dead_letter_setup(mode, task, |p, _| Arc::new(p));
    d.initialize().await.expect("initialize");
    let report = d
        .iteration_exactly_once()
        .await
        .expect("aborted, not failed");
    assert_eq!(
        (report.accepted, report.rejected, report.dead_lettered),
        (0, 0, 0),
        "{report:?}"
    );
    assert_eq!(d.metrics().transactions_aborted, 1);
    assert_eq!(
        values(&broker, "dlq", IsolationLevel::ReadUncommitted).await,
        ["{bad"],
        "the dead letter was written in the transaction"
    );
    assert!(
        committed(&broker, "dlq").await.is_empty(),
        "and is not visible read_committed after the abort"
    );
    assert!(committed(&broker, "out").await.is_empty());
    assert_eq!(
        state(&broker, 1),
        (RecordState::Available, 1),
        "not rejected"
    );

    // The next iteration (the records come back with count 2) commits: one dead letter.
    let report = d.iteration_exactly_once().await.expect("iteration");
    assert_eq!(
        (report.accepted, report.rejected, report.dead_lettered),
        (2, 1, 1),
        "{report:?}"
    );
    assert_eq!(committed(&broker, "dlq").await, ["{bad"]);
    assert_eq!(state(&broker, 1), (RecordState::Archived, 2));
    assert_eq!(committed(&broker, "out").await, ["out-0", "out-2"]);
}

#[tokio::test(start_paused = true)]
async fn ledger_mode_an_aborted_transaction_takes_its_dead_letter_with_it() {
    an_aborted_dead_letter_is_not_visible(ExactlyOnceMode::Ledger).await;
}

#[tokio::test(start_paused = true)]
async fn atomic_mode_an_aborted_transaction_takes_its_dead_letter_with_it() {
    an_aborted_dead_letter_is_not_visible(ExactlyOnceMode::AtomicAcknowledgements).await;
}

// ---- Earlier acknowledgements are not the renewal ------------------------------------------

/// Two records, one driver in ledger mode through `producer` (built around the group's
/// transactional producer) that commits acknowledgements of its own only hourly, after its
/// first transaction (which took both records).
async fn after_one_transaction(
    producer: impl FnOnce(EmbeddedProducer) -> Arc<dyn Producer>,
) -> (EmbeddedBroker, Driver) {
    let broker = broker(2);
    broker.set_capabilities(kafka_4_4());
    let eos = eos(0, 1);
    let producer = producer(transactional(&broker, &eos));
    let config = config().commit_policy(CommitPolicy::interval(Duration::from_secs(3600)));
    let mut d = driver_with(
        &broker,
        CopyOffsets::default(),
        broker.share_consumer(GROUP),
        producer,
        eos,
        config,
    );
    d.initialize().await.expect("initialize");
    assert_eq!(d.iteration_exactly_once().await.unwrap().accepted, 2);
    (broker, d)
}

#[tokio::test(start_paused = true)]
async fn the_accepts_after_a_commit_are_sent_at_once_not_with_the_next_poll() {
    let (broker, mut d) = after_one_transaction(|p| Arc::new(p)).await;
    // Sent with the commit: the group has them before the next poll (which, with the
    // share-state write they cost on a real broker, no longer sits in the next renewal).
    assert_eq!(state(&broker, 0), (RecordState::Acknowledged, 1));
    assert_eq!(state(&broker, 1), (RecordState::Acknowledged, 1));
    // Long after (the locks of an unsent ACCEPT would have run out): the next transaction
    // takes their outcome before its renewal and commits.
    tokio::time::sleep(LOCK + Duration::from_secs(1)).await;
    for i in 2..4 {
        broker
            .produce("in", ProduceRecord::new().value(format!("v{i}")))
            .unwrap();
    }
    let report = d.iteration_exactly_once().await.expect("iteration");
    assert_eq!(report.accepted, 2, "{report:?}");
    let m = d.metrics();
    assert_eq!(
        (
            m.transactions_committed,
            m.transactions_aborted,
            m.lock_losses,
            m.records_already_claimed
        ),
        (2, 0, 0, 0),
        "nothing came back: {m:?}"
    );
    assert_eq!(
        committed(&broker, "out").await,
        ["out-0", "out-1", "out-2", "out-3"]
    );
}

/// A producer whose commits go through and then take longer than the acquisition lock (a
/// stalled process): the ACCEPTs sent after them find the locks gone.
#[derive(Debug)]
struct SlowCommit<P>(P);

#[async_trait::async_trait]
impl<P: Producer> Producer for SlowCommit<P> {
    fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture, ProducerError> {
        self.0.send(record)
    }
    async fn ready(&self) -> Result<(), ProducerError> {
        self.0.ready().await
    }
    async fn flush(&self) -> Result<(), ProducerError> {
        self.0.flush().await
    }
    fn transactional_id(&self) -> Option<&str> {
        self.0.transactional_id()
    }
    async fn init_transactions(&self) -> Result<(), ProducerError> {
        self.0.init_transactions().await
    }
    fn begin_transaction(&self) -> Result<(), ProducerError> {
        self.0.begin_transaction()
    }
    async fn commit_transaction(&self) -> Result<(), ProducerError> {
        self.0.commit_transaction().await?;
        tokio::time::sleep(LOCK + Duration::from_secs(1)).await;
        Ok(())
    }
    async fn abort_transaction(&self) -> Result<(), ProducerError> {
        self.0.abort_transaction().await
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_accept_after_a_commit_is_counted_and_does_not_abort_the_next_transaction() {
    let (broker, mut d) = after_one_transaction(|p| Arc::new(SlowCommit(p))).await;
    // The locks ran out during the commit: the ACCEPTs failed, the records are the group's
    // again. The next round finds them claimed and accepts them without new outputs.
    let report = d.iteration_exactly_once().await.expect("iteration");
    let m = d.metrics();
    assert_eq!(m.transactions_aborted, 0, "{m:?}");
    assert_eq!(m.records_already_claimed, 2, "{report:?} {m:?}");
    // The failed ACCEPTs' outcome is not lost: the close takes it, and counts it.
    d.close().await.expect("close");
    let m = d.metrics();
    assert!(
        m.commit_partition_failures >= 1 && m.lock_losses >= 1,
        "the failed ACCEPTs are counted: {m:?}"
    );
    assert_eq!(state(&broker, 0).0, RecordState::Acknowledged);
    assert_eq!(state(&broker, 1).0, RecordState::Acknowledged);
    assert_eq!(committed(&broker, "out").await, ["out-0", "out-1"]);
}

// ---- One dead-letter home per record, and the dead-letter circuit breaker -------------------

async fn with_a_broker_queue_the_dead_letter_is_accepted(mode: ExactlyOnceMode) {
    let (broker, mut d) = dead_letter_setup(mode, CopyOffsets::default(), |p, _| Arc::new(p));
    // The group has a broker dead-letter queue: a REJECT would be written there too.
    broker.create_topic("dlq.in", 1).expect("broker dlq");
    broker
        .set_group_config(GROUP, group_config(5).dead_letter_queue("dlq.in", true))
        .expect("group");
    d.initialize().await.expect("initialize");
    let report = d.iteration_exactly_once().await.expect("iteration");
    assert_eq!(
        (report.accepted, report.rejected, report.dead_lettered),
        (2, 0, 1),
        "{mode}: {report:?}"
    );
    assert_eq!(state(&broker, 1).0, RecordState::Acknowledged, "{mode}");
    assert_eq!(committed(&broker, "dlq").await, ["{bad"], "{mode}");
    assert!(
        broker.read_log("dlq.in", 0).unwrap().is_empty(),
        "{mode}: one home, the connector's queue"
    );
    let letters = broker.read_log("dlq", 0).unwrap();
    let reason = letters
        .iter()
        .find(|r| r.value().is_some_and(|v| v == "{bad"))
        .and_then(|r| r.headers().last("__connect.errors.reason"))
        .and_then(|h| h.value().cloned());
    assert_eq!(reason.as_deref(), Some(&b"conversion"[..]), "{mode}");
}

#[tokio::test]
async fn ledger_mode_accepts_a_dead_letter_when_the_group_has_a_broker_queue() {
    with_a_broker_queue_the_dead_letter_is_accepted(ExactlyOnceMode::Ledger).await;
}

#[tokio::test]
async fn atomic_mode_accepts_a_dead_letter_when_the_group_has_a_broker_queue() {
    with_a_broker_queue_the_dead_letter_is_accepted(ExactlyOnceMode::AtomicAcknowledgements).await;
}

async fn the_breaker_releases_the_unit_instead_of_writing_its_dead_letters(mode: ExactlyOnceMode) {
    let (broker, mut d) = dead_letter_setup_with(
        mode,
        CopyOffsets::default(),
        |p, _| Arc::new(p),
        |c| {
            c.dead_letter_breaker(
                kafka_share_sink::DeadLetterBreaker::disabled().max_records(Some(0)),
            )
        },
    );
    d.initialize().await.expect("initialize");
    let error = d
        .iteration_exactly_once()
        .await
        .expect_err("the breaker trips");
    assert!(
        matches!(error, Error::DeadLetterBreaker(_)),
        "{mode}: {error:?}"
    );
    assert_eq!(d.metrics().dead_letter_breaker_trips, 1, "{mode}");
    assert_eq!(d.metrics().transactions_committed, 0, "{mode}");
    for offset in 0..3 {
        assert_eq!(
            state(&broker, offset),
            (RecordState::Available, 1),
            "{mode}: released, not rejected or dead-lettered"
        );
    }
    assert!(committed(&broker, "dlq").await.is_empty(), "{mode}");
    assert!(committed(&broker, "out").await.is_empty(), "{mode}");
}

#[tokio::test]
async fn ledger_mode_the_breaker_releases_the_unit() {
    the_breaker_releases_the_unit_instead_of_writing_its_dead_letters(ExactlyOnceMode::Ledger)
        .await;
}

#[tokio::test]
async fn atomic_mode_the_breaker_releases_the_unit() {
    the_breaker_releases_the_unit_instead_of_writing_its_dead_letters(
        ExactlyOnceMode::AtomicAcknowledgements,
    )
    .await;
}

// ---- A panic in put_transactional -------------------------------------------------------

/// Task 0 of 1 with its transactional producer, whose first `put_transactional` panics.
fn panicking_driver(broker: &EmbeddedBroker) -> Driver {
    panicking_driver_with(broker, config())
}

/// [`panicking_driver`] with the driver settings `config`.
fn panicking_driver_with(broker: &EmbeddedBroker, config: DriverConfig) -> Driver {
    let eos = eos(0, 1);
    let producer = transactional(broker, &eos);
    let task = CopyOffsets {
        panic_first: true,
        ..CopyOffsets::default()
    };
    driver_with(
        broker,
        task,
        broker.share_consumer(GROUP),
        Arc::new(producer),
        eos,
        config,
    )
}

#[tokio::test]
async fn a_panic_in_put_transactional_releases_the_batch_and_stops() {
    // KIP-1289 (the embedded default) and ledger mode (Kafka 4.4).
    for ledger in [false, true] {
        let broker = broker(3);
        if ledger {
            broker.set_capabilities(kafka_4_4());
        }
        let mut d = panicking_driver(&broker);
        d.initialize().await.expect("initialize");
        // The panic does not unwind through the iteration: it is the task's error.
        match d.iteration_exactly_once().await {
            Err(Error::Task { source, .. }) => {
                let panicked = source.panicked().expect("the error says it was a panic");
                assert_eq!(panicked.method, "put_transactional", "ledger {ledger}");
                assert_eq!(panicked.message, "a bug in the sink");
            }
            other => panic!("ledger {ledger}: expected the task's error, got {other:?}"),
        }
        // Released, nothing written: the records are delivered again.
        for offset in 0..3 {
            assert_eq!(
                state(&broker, offset),
                (RecordState::Available, 1),
                "ledger {ledger}, offset {offset}"
            );
        }
        assert!(
            committed(&broker, "out").await.is_empty(),
            "ledger {ledger}"
        );
        assert!(matches!(
            d.iteration_exactly_once().await,
            Err(Error::Failed)
        ));
    }
}

#[tokio::test]
async fn a_panic_on_the_last_delivery_is_counted_as_released_at_the_limit() {
    let broker = broker(3);
    broker.set_capabilities(kafka_4_4());
    broker
        .set_group_config(GROUP, group_config(2))
        .expect("group");
    // Two tasks in turn, each panicking in its first put: the records' first and last
    // deliveries.
    for delivery in 1..=2u16 {
        let mut d = panicking_driver(&broker);
        d.initialize().await.expect("initialize");
        assert!(matches!(
            d.iteration_exactly_once().await,
            Err(Error::Task { .. })
        ));
        let (at_limit, expected) = match delivery {
            1 => (0, RecordState::Available),
            // Released on their last delivery: the group archives them, and the driver says so.
            _ => (3, RecordState::Archived),
        };
        assert_eq!(
            d.metrics().records_released_at_limit,
            at_limit,
            "delivery {delivery}"
        );
        for offset in 0..3 {
            assert_eq!(
                state(&broker, offset),
                (expected, delivery),
                "delivery {delivery}"
            );
        }
        d.close().await.expect("close");
    }
}

/// Three records panicked on twice under a delivery limit of 2, with a dead-letter queue
/// (and `breaker` as its circuit breaker); a fourth record arrives between the two
/// deliveries, so the second poll mixes last and first deliveries. Returns the driver after
/// its second iteration's error.
async fn panic_twice_with_a_queue(
    broker: &EmbeddedBroker,
    mode: ExactlyOnceMode,
    breaker: kafka_share_sink::DeadLetterBreaker,
) -> (Driver, Error) {
    if mode == ExactlyOnceMode::Ledger {
        broker.set_capabilities(kafka_4_4());
    }
    broker
        .set_group_config(GROUP, group_config(2))
        .expect("group");
    let mut last = None;
    for delivery in 1..=2u16 {
        if delivery == 2 {
            broker
                .produce("in", ProduceRecord::new().value("v3"))
                .expect("produce");
        }
        let dlq = broker.dead_letter_queue("dlq").expect("dlq");
        let config = config()
            .dead_letter_queue(Arc::new(dlq), true)
            .dead_letter_breaker(breaker);
        let mut d = panicking_driver_with(broker, config);
        d.initialize().await.expect("initialize");
        let error = d.iteration_exactly_once().await.expect_err("the panic");
        assert!(
            matches!(d.iteration_exactly_once().await, Err(Error::Failed)),
            "{mode:?}: stopped"
        );
        if delivery == 1 {
            // Released: delivered again.
            assert!(matches!(error, Error::Task { .. }), "{mode:?}: {error:?}");
            assert!(committed(broker, "dlq").await.is_empty(), "{mode:?}");
            for offset in 0..3 {
                assert_eq!(state(broker, offset), (RecordState::Available, 1));
            }
            d.close().await.expect("close");
        } else {
            last = Some((d, error));
        }
    }
    // Nothing the task staged before it panicked was written.
    assert!(committed(broker, "out").await.is_empty(), "{mode:?}");
    last.expect("the second delivery")
}

#[tokio::test]
async fn a_panic_on_the_last_delivery_dead_letters_the_records_when_a_queue_is_set() {
    for mode in [
        ExactlyOnceMode::AtomicAcknowledgements,
        ExactlyOnceMode::Ledger,
    ] {
        let broker = broker(3);
        let breaker = kafka_share_sink::DeadLetterBreaker::disabled();
        let (mut d, error) = panic_twice_with_a_queue(&broker, mode, breaker).await;
        // The driver stops with the task's panic.
        match &error {
            Error::Task { source, .. } => assert!(source.panicked().is_some(), "{source:?}"),
            other => panic!("{mode:?}: {other:?}"),
        }
        // The last deliveries: written to the queue in a transaction (committed), then
        // rejected, not released for the group to archive unseen. The first delivery
        // among them: released.
        let m = d.metrics();
        assert_eq!(committed(&broker, "dlq").await.len(), 3, "{mode:?}");
        assert_eq!(m.records_dead_lettered, 3, "{mode:?}");
        assert_eq!(m.records_released_at_limit, 0, "{mode:?}");
        for offset in 0..3 {
            assert_eq!(
                state(&broker, offset),
                (RecordState::Archived, 2),
                "{mode:?}, offset {offset}"
            );
        }
        assert_eq!(state(&broker, 3), (RecordState::Available, 1), "{mode:?}");
        d.close().await.expect("close");
    }
}

#[tokio::test]
async fn a_breaker_that_trips_on_a_panic_s_last_deliveries_is_the_error_stopped_with() {
    for mode in [
        ExactlyOnceMode::AtomicAcknowledgements,
        ExactlyOnceMode::Ledger,
    ] {
        let broker = broker(3);
        let breaker = kafka_share_sink::DeadLetterBreaker::disabled().max_records(Some(0));
        let (mut d, error) = panic_twice_with_a_queue(&broker, mode, breaker).await;
        assert!(
            matches!(error, Error::DeadLetterBreaker(_)),
            "{mode:?}: {error:?}"
        );
        // Nothing written; released on their last delivery, said and counted.
        let m = d.metrics();
        assert!(committed(&broker, "dlq").await.is_empty(), "{mode:?}");
        assert_eq!(m.records_released_at_limit, 3, "{mode:?}");
        for offset in 0..3 {
            assert_eq!(state(&broker, offset), (RecordState::Archived, 2));
        }
        assert_eq!(state(&broker, 3), (RecordState::Available, 1), "{mode:?}");
        d.close().await.expect("close");
    }
}

/// A retriable `put_transactional` failure on the records' last delivery, without a
/// dead-letter queue: released, the group archives them; counted, not silent.
#[tokio::test]
async fn a_retriable_failure_on_the_last_delivery_without_a_queue_is_counted() {
    for mode in [
        ExactlyOnceMode::AtomicAcknowledgements,
        ExactlyOnceMode::Ledger,
    ] {
        let broker = broker(3);
        if mode == ExactlyOnceMode::Ledger {
            broker.set_capabilities(kafka_4_4());
        }
        broker
            .set_group_config(GROUP, group_config(2))
            .expect("group");
        for delivery in 1..=2u16 {
            let eos = eos(0, 1);
            let producer = transactional(&broker, &eos);
            let task = CopyOffsets {
                away_first: true,
                ..CopyOffsets::default()
            };
            let config = config().retriable_backoff(Duration::from_millis(1));
            let consumer = broker.share_consumer(GROUP);
            let mut d = driver_with(&broker, task, consumer, Arc::new(producer), eos, config);
            d.initialize().await.expect("initialize");
            let report = d.iteration_exactly_once().await.expect("retriable");
            assert_eq!(report.released, 3, "{mode:?}");
            let (at_limit, expected) = match delivery {
                1 => (0, RecordState::Available),
                _ => (3, RecordState::Archived),
            };
            assert_eq!(d.metrics().records_released_at_limit, at_limit, "{mode:?}");
            // The releases go with the close's commit.
            d.close().await.expect("close");
            for offset in 0..3 {
                assert_eq!(state(&broker, offset), (expected, delivery), "{mode:?}");
            }
        }
    }
}

/// A conversion retried for 76 s, past the 30 s locks: the round renews the poll's records
/// meanwhile, and commits each once.
#[tokio::test(start_paused = true)]
async fn a_conversion_retried_past_the_lock_keeps_the_poll_acquired() {
    for mode in [
        ExactlyOnceMode::AtomicAcknowledgements,
        ExactlyOnceMode::Ledger,
    ] {
        let broker = broker(3);
        if mode == ExactlyOnceMode::Ledger {
            broker.set_capabilities(kafka_4_4());
        }
        let eos = eos(0, 1);
        let producer = transactional(&broker, &eos);
        let flaky = flaky_converters::Flaky(AtomicUsize::new(8));
        let config = config()
            .converters(Converters::byte_array().with_value(Arc::new(flaky)))
            .errors(ErrorHandling::new().retry_timeout(Some(Duration::from_secs(600))));
        let consumer = broker.share_consumer(GROUP);
        let task = CopyOffsets::default();
        let mut d = driver_with(&broker, task, consumer, Arc::new(producer), eos, config);
        d.initialize().await.expect("initialize");
        assert_eq!(d.exactly_once_mode(), Some(mode));
        let start = tokio::time::Instant::now();
        let report = d.iteration_exactly_once().await.expect("iteration");
        assert!(start.elapsed() > Duration::from_secs(70), "{mode:?}");
        assert_eq!(report.accepted, 3, "{mode:?}: {report:?}");
        assert_eq!(
            committed(&broker, "out").await,
            ["out-0", "out-1", "out-2"],
            "{mode:?}"
        );
        for offset in 0..3 {
            assert_eq!(
                state(&broker, offset),
                (RecordState::Acknowledged, 1),
                "{mode:?}: offset {offset}"
            );
        }
        let m = d.metrics();
        assert_eq!(m.lock_losses, 0, "{mode:?}");
        // Every 15 s for 76 s: at least four rounds of the three records.
        assert!(
            m.records_renewed >= 3 * 4,
            "{mode:?}: {}",
            m.records_renewed
        );
        d.close().await.expect("close");
    }
}
