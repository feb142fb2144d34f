//! The exactly-once iteration against a real Kafka 4.4 broker, in ledger mode: the mode is
//! chosen from the cluster's features, a mirror is exactly once with two tasks sharing the
//! work, and a task that dies after its commit (before its ACCEPTs) or before its commit
//! neither duplicates nor loses records. The output is read `read_committed` by the test's
//! own Fetch reader (`support/read_committed.rs`), independent of the crate's.
#![cfg(feature = "exactly-once")]

#[path = "support/eos.rs"]
mod eos;
#[path = "support/read_committed.rs"]
mod read_committed;
#[allow(unreachable_pub)]
mod support;

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

async fn driver(
    s: &eos::Setup,
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
async fn ledger_mode_on_kafka_4_4_mirrors_exactly_once_with_two_tasks() {
    let Some(bootstrap) =
        support::bootstrap("ledger_mode_on_kafka_4_4_mirrors_exactly_once_with_two_tasks")
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
    let s = eos::setup(bootstrap, records, 1).await;
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
