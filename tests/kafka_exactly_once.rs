//! The exactly-once iteration against a real Kafka 4.4 broker, in ledger mode: the mode is
//! chosen from the cluster's features, a mirror is exactly once with two tasks sharing the
//! work, and a task that dies after its commit (before its ACCEPTs) or before its commit
//! neither duplicates nor loses records. The output is read `read_committed` by the test's
//! own Fetch reader (`support/read_committed.rs`), independent of the crate's.
#![cfg(feature = "exactly-once")]

#[path = "support/read_committed.rs"]
mod read_committed;
#[allow(unreachable_pub)]
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::exactly_once::{
    ExactlyOnceConfig, ExactlyOnceMode, KafkaExactlyOnceCluster, MirrorTask,
};
use kafka_share_sink::producer::{
    DeliveryFuture, KafkaProducer, KafkaProducerConfig, Producer, ProducerError, ProducerRecord,
};
use kafka_share_sink::{
    DriverConfig, KafkaAdmin, KafkaShareConsumer, KafkaShareConsumerConfig, ShareSinkTask,
};

struct Setup {
    bootstrap: String,
    source: String,
    target: String,
    group: String,
}

const PARTITIONS: i32 = 3;

async fn setup(bootstrap: String, records: usize) -> Setup {
    let source = support::unique("eos-src");
    let target = format!("copy.{source}");
    let group = support::unique("eos-group");
    let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
    admin
        .create_topic(&source, PARTITIONS, 1)
        .await
        .expect("source");
    admin
        .create_topic(&target, PARTITIONS, 1)
        .await
        .expect("target");
    admin
        .set_share_group_config(&group, &[("share.auto.offset.reset", "earliest")])
        .await
        .expect("group config");
    let producer = KafkaProducer::connect(KafkaProducerConfig::new(bootstrap.clone()))
        .await
        .expect("producer");
    let mut sends = Vec::with_capacity(records);
    for i in 0..records {
        let partition = i32::try_from(i).expect("small") % PARTITIONS;
        sends.push(
            producer
                .send(
                    ProducerRecord::new(source.as_str())
                        .partition(partition)
                        .value(format!("r-{i}")),
                )
                .expect("send"),
        );
    }
    producer.flush().await.expect("flush");
    for s in sends {
        s.await.expect("delivered");
    }
    Setup {
        bootstrap,
        source,
        target,
        group,
    }
}

/// Every value of the target, read `read_committed`, with how often it was seen.
async fn output(s: &Setup) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for p in 0..PARTITIONS {
        for record in read_committed::read_committed(&s.bootstrap, &s.target, p).await {
            let value = String::from_utf8(record.value.map(|v| v.to_vec()).unwrap_or_default())
                .expect("utf8");
            *seen.entry(value).or_insert(0) += 1;
        }
    }
    seen
}

fn assert_exactly_once(seen: &BTreeMap<String, usize>, records: usize) {
    let duplicates: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicates.is_empty(),
        "duplicates in the output: {duplicates:?}"
    );
    let missing: Vec<usize> = (0..records)
        .filter(|i| !seen.contains_key(&format!("r-{i}")))
        .collect();
    assert!(
        missing.is_empty(),
        "{} records missing, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    assert_eq!(seen.len(), records, "unexpected values in the output");
}

async fn driver(
    s: &Setup,
    task: u32,
    tasks: u32,
    wrap: impl FnOnce(KafkaProducer) -> Arc<dyn Producer>,
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
    let config = DriverConfig::new([s.source.clone()]).poll_timeout(Duration::from_millis(300));
    let mut driver =
        ShareSinkTask::new(Box::new(MirrorTask::with_prefix("copy.")), consumer, config)
            .with_exactly_once(wrap(producer), Arc::new(cluster), eos);
    driver.initialize().await.expect("initialize");
    driver
}

/// Whether the group has finished every source record (share-group lag 0 everywhere).
async fn settled(s: &Setup) -> bool {
    let admin = KafkaAdmin::connect(&s.bootstrap).await.expect("admin");
    let offsets = admin.share_group_offsets(&s.group).await.expect("offsets");
    offsets.len() == PARTITIONS as usize && offsets.iter().all(|o| o.lag == Some(0))
}

/// Runs the drivers until the output has `records` values and the group finished every
/// source record (or 60 s pass).
async fn drain(s: &Setup, drivers: &mut [ShareSinkTask<KafkaShareConsumer>], records: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        for d in drivers.iter_mut() {
            match d.iteration_exactly_once().await {
                Ok(_) => {}
                Err(e) if e.is_retriable() => eprintln!("retriable: {e}"),
                Err(e) => panic!("iteration failed: {e:?}"),
            }
        }
        let seen = output(s).await;
        if seen.len() >= records && settled(s).await {
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
async fn ledger_mode_on_kafka_4_4_mirrors_exactly_once_with_two_tasks() {
    let Some(bootstrap) =
        support::bootstrap("ledger_mode_on_kafka_4_4_mirrors_exactly_once_with_two_tasks")
    else {
        return;
    };
    let records = 3_000;
    let s = setup(bootstrap, records).await;
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
    assert_exactly_once(&output(&s).await, records);
    let ledger = KafkaAdmin::connect(&s.bootstrap)
        .await
        .expect("admin")
        .partitions(&format!("{}.eos-ledger", s.group))
        .await
        .expect("the ledger topic was created");
    assert_eq!(
        ledger.len(),
        PARTITIONS as usize,
        "one ledger partition per source partition"
    );
}

/// A producer that stops answering (as a killed process would) at the first commit, before
/// or after passing it on.
#[derive(Debug)]
struct DiesAtCommit {
    inner: KafkaProducer,
    after: bool,
    died: AtomicBool,
}

#[async_trait]
impl Producer for DiesAtCommit {
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
        if !self.after {
            self.died.store(true, Ordering::SeqCst);
            return std::future::pending().await;
        }
        self.inner.commit_transaction().await?;
        self.died.store(true, Ordering::SeqCst);
        std::future::pending().await
    }
    async fn abort_transaction(&self) -> Result<(), ProducerError> {
        self.inner.abort_transaction().await
    }
}

async fn dies_at_commit(after: bool, test: &str) {
    let Some(bootstrap) = support::bootstrap(test) else {
        return;
    };
    let records = 600;
    let s = setup(bootstrap, records).await;
    let mut first = driver(&s, 0, 1, |inner| {
        Arc::new(DiesAtCommit {
            inner,
            after,
            died: AtomicBool::new(false),
        })
    })
    .await;
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
    assert_exactly_once(&output(&s).await, records);
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
