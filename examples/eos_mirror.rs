//! Exactly-once mirroring of a topic through a share group (feature `exactly-once`).
//!
//! ```text
//! cargo run --features exactly-once --example eos_mirror -- \
//!     --bootstrap 127.0.0.1:9092 --topic orders --group mirror --prefix backup. \
//!     [--connector mirror] [--task 0] [--tasks 1] [--transaction-timeout-ms 10000] \
//!     [--idle-exit-secs 0] [--strict false] [--max-poll-records 500] [--pause-ms 0]
//! ```
//!
//! Each record of `--topic` is copied to `<prefix><topic>` in a transaction that also claims
//! it in the ledger topic `<connector>.eos-ledger`; a `read_committed` reader of the target sees
//! every record exactly once however often this process is killed and started again. Run
//! several with different `--task` numbers (and the same `--tasks`) to share the work. Stops
//! on Ctrl-C, or after `--idle-exit-secs` seconds without records when set.

use std::collections::HashMap;
use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kafka_share_sink::exactly_once::{ExactlyOnceConfig, KafkaExactlyOnceCluster, MirrorTask};
use kafka_share_sink::producer::{KafkaProducer, KafkaProducerConfig};
use kafka_share_sink::{DriverConfig, KafkaShareConsumer, KafkaShareConsumerConfig, ShareSinkTask};

type BoxResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

fn args() -> BoxResult<HashMap<String, String>> {
    let mut out = HashMap::new();
    let mut it = std::env::args().skip(1);
    while let Some(key) = it.next() {
        let Some(name) = key.strip_prefix("--") else {
            return Err(format!("unexpected argument `{key}`: use --name value").into());
        };
        let value = it.next().ok_or_else(|| format!("--{name} needs a value"))?;
        out.insert(name.to_owned(), value);
    }
    Ok(out)
}

#[tokio::main]
async fn main() -> BoxResult<()> {
    let args = args()?;
    let get = |k: &str| -> BoxResult<String> {
        args.get(k)
            .cloned()
            .ok_or_else(|| format!("--{k} is required").into())
    };
    let bootstrap = get("bootstrap")?;
    let topic = get("topic")?;
    let group = get("group")?;
    let prefix = get("prefix")?;
    let connector = args
        .get("connector")
        .cloned()
        .unwrap_or_else(|| group.clone());
    let task: u32 = args.get("task").map_or(Ok(0), |v| v.parse())?;
    let tasks: u32 = args.get("tasks").map_or(Ok(1), |v| v.parse())?;
    let txn_timeout: u64 = args
        .get("transaction-timeout-ms")
        .map_or(Ok(10_000), |v| v.parse())?;
    let idle_exit: u64 = args.get("idle-exit-secs").map_or(Ok(0), |v| v.parse())?;
    let strict: bool = args.get("strict").map_or(Ok(false), |v| v.parse())?;
    let max_poll_records: i32 = args
        .get("max-poll-records")
        .map_or(Ok(500), |v| v.parse())?;
    // A pause after each iteration: a slower pipeline, for crash tests that must kill it
    // while it works.
    let pause = Duration::from_millis(args.get("pause-ms").map_or(Ok(0), |v| v.parse())?);

    let eos = ExactlyOnceConfig::new(connector, task, tasks).with_strict(strict);
    let producer_config = KafkaProducerConfig::new(bootstrap.clone())
        .client_id(format!("eos-mirror-{task}"))
        .transactional_id(eos.transactional_id())
        .transaction_timeout(Duration::from_millis(txn_timeout));
    let cluster = KafkaExactlyOnceCluster::connect(&producer_config).await?;
    let producer = KafkaProducer::connect(producer_config).await?;
    let consumer = KafkaShareConsumer::connect(
        KafkaShareConsumerConfig::new(bootstrap, group)
            .client_id(format!("eos-mirror-{task}"))
            .max_poll_records(max_poll_records),
    )
    .await?;
    let config = DriverConfig::new([topic]).poll_timeout(Duration::from_millis(500));
    let mut driver =
        ShareSinkTask::new(Box::new(MirrorTask::with_prefix(prefix)), consumer, config)
            .with_exactly_once(Arc::new(producer), Arc::new(cluster), eos);
    driver.initialize().await?;
    eprintln!(
        "eos_mirror task {task}: mode {:?}",
        driver.exactly_once_mode()
    );

    // Ctrl-C is checked between iterations: an iteration is never cut short.
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            flag.store(true, Ordering::Relaxed);
        }
    });
    let mut last_records = Instant::now();
    let outcome: BoxResult<()> = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        match driver.iteration_exactly_once().await {
            Ok(report) => {
                if report.records > 0 || report.accepted > 0 {
                    last_records = Instant::now();
                }
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
            }
            Err(e) if e.is_retriable() => {
                eprintln!("eos_mirror task {task}: {e}, retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => break Err(e.into()),
        }
        if idle_exit > 0 && last_records.elapsed() >= Duration::from_secs(idle_exit) {
            break Ok(());
        }
    };
    let metrics = driver.metrics();
    driver.close().await?;
    eprintln!(
        "eos_mirror task {task}: done; committed {} transactions, aborted {}, {} records already claimed",
        metrics.transactions_committed,
        metrics.transactions_aborted,
        metrics.records_already_claimed
    );
    outcome
}
