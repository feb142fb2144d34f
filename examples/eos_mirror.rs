//! Exactly-once mirroring of a topic through a share group (feature `exactly-once`).
//!
//! ```text
//! cargo run --features exactly-once --example eos_mirror -- \
//!     --bootstrap 127.0.0.1:9092 --topic orders --group mirror --prefix backup. \
//!     [--connector mirror] [--task 0] [--tasks 1] [--transaction-timeout-ms 10000] \
//!     [--idle-exit-secs 0] [--strict false] [--max-poll-records 500] [--pause-ms 0] \
//!     [--exit-after-records 0]
//! ```
//!
//! Each record of `--topic` is copied to `<prefix><topic>` in a transaction that also claims
//! it in the ledger topic `<connector>.eos-ledger`; a `read_committed` reader of the target sees
//! every record exactly once however often this process is killed and started again. Run
//! several with different `--task` numbers (and the same `--tasks`) to share the work. Stops
//! on Ctrl-C, or after `--idle-exit-secs` seconds without records when set.
//!
//! With `--exit-after-records N` it stops once N records were copied and committed and prints
//! one `BENCH` line for `scripts/bench.sh` (its mirror row, client E): the clock starts when
//! the first iteration that copied records has returned (so joining the group is not timed)
//! and counts the records after it; `ledger_ms`, `send_ms`, `renew_ms` and `commit_ms` are
//! the driver's time in ledger checks, sends up to the last acknowledgement, lock renewals
//! and commits inside that window (`DriverMetrics`). At exit it always prints the
//! transactions and those times over the whole run.

use std::collections::HashMap;
use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kafka_share_sink::exactly_once::{ExactlyOnceConfig, KafkaExactlyOnceCluster, MirrorTask};
use kafka_share_sink::producer::{KafkaProducer, KafkaProducerConfig};
use kafka_share_sink::{
    DriverConfig, DriverMetrics, KafkaShareConsumer, KafkaShareConsumerConfig, ShareSinkTask,
};

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
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // The whole chain, for the logs of whoever started this process.
            eprintln!("eos_mirror: stopped: {error}");
            let mut cause = error.source();
            while let Some(inner) = cause {
                eprintln!("  caused by: {inner}");
                cause = inner.source();
            }
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> BoxResult<()> {
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
    let exit_after: u64 = args
        .get("exit-after-records")
        .map_or(Ok(0), |v| v.parse())?;

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
    let mut copied: u64 = 0;
    let mut window = Window::default();
    let outcome: BoxResult<()> = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        if exit_after > 0 && copied >= exit_after {
            window.end = Some((Instant::now(), copied, driver.metrics()));
            break Ok(());
        }
        match driver.iteration_exactly_once().await {
            Ok(report) => {
                if report.records > 0 || report.accepted > 0 {
                    last_records = Instant::now();
                }
                copied += report.records as u64;
                if report.records > 0 && window.start.is_none() {
                    window.start = Some((Instant::now(), copied, driver.metrics()));
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
        "eos_mirror task {task}: done; committed {} transactions, aborted {}, {} records already claimed; \
         time in ledger checks {:?}, sends {:?}, renewals {:?}, commits {:?}",
        metrics.transactions_committed,
        metrics.transactions_aborted,
        metrics.records_already_claimed,
        metrics.ledger_check_time,
        metrics.transaction_send_time,
        metrics.transaction_renew_time,
        metrics.transaction_commit_time,
    );
    if exit_after > 0 {
        window.print(copied, exit_after);
    }
    outcome
}

/// The measuring window of `--exit-after-records`: when it opened and closed, the records
/// copied and the driver's counters then.
#[derive(Default)]
struct Window {
    start: Option<(Instant, u64, DriverMetrics)>,
    end: Option<(Instant, u64, DriverMetrics)>,
}

impl Window {
    /// The `BENCH` line `scripts/bench.sh` reads (key=value pairs on stdout).
    fn print(&self, copied: u64, target: u64) {
        let now = Instant::now();
        let (start, r0, m0) = self.start.unwrap_or((now, 0, DriverMetrics::default()));
        let (end, r1, m1) = self.end.unwrap_or((now, copied, DriverMetrics::default()));
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!(
            "BENCH client=E records={copied} window_records={} window_ms={:.3} complete={} \
             window_start_unix_ms={} window_end_unix_ms={} drivers=1 transactions={} aborted={} \
             ledger_ms={:.1} send_ms={:.1} renew_ms={:.1} commit_ms={:.1} ledger_checks={} \
             already_claimed={}",
            r1.saturating_sub(r0),
            ms(end.saturating_duration_since(start)),
            u8::from(copied >= target && self.end.is_some()),
            unix_ms(start),
            unix_ms(end),
            m1.transactions_committed
                .saturating_sub(m0.transactions_committed),
            m1.transactions_aborted
                .saturating_sub(m0.transactions_aborted),
            ms(m1.ledger_check_time.saturating_sub(m0.ledger_check_time)),
            ms(m1
                .transaction_send_time
                .saturating_sub(m0.transaction_send_time)),
            ms(m1
                .transaction_renew_time
                .saturating_sub(m0.transaction_renew_time)),
            ms(m1
                .transaction_commit_time
                .saturating_sub(m0.transaction_commit_time)),
            m1.ledger_checks.saturating_sub(m0.ledger_checks),
            m1.records_already_claimed
                .saturating_sub(m0.records_already_claimed),
        );
    }
}

/// Wall-clock milliseconds of an instant, for matching the script's CPU samples.
fn unix_ms(at: Instant) -> u128 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    now.saturating_sub(at.elapsed()).as_millis()
}
