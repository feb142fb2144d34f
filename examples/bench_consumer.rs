//! Client "A" of `scripts/bench.sh` (see benches/BENCHMARKS.md): drains a topic with
//! `KafkaShareConsumer` under `ShareSinkTask`, a sink that does nothing, and explicit
//! acknowledgements, then prints one `BENCH` line the script reads.
//!
//! ```text
//! bench_consumer create-topic  --bootstrap HOST:PORT --topic T --partitions P
//! bench_consumer group-config  --bootstrap HOST:PORT --group G [--set k=v]...
//! bench_consumer consume       --bootstrap HOST:PORT --topic T --group G --records N
//!                              [--drivers K] [--fetch-max-bytes B] [--max-poll-records R]
//!                              [--commit default|every|records:N|interval:MS] [--runtime multi|current]
//!                              [--workers W] [--idle-timeout-secs S] [--put-latency-ms MS]
//!                              [--client-config FILE] [--acquisition sized|fixed]
//!                              [--stop-when-idle-ms MS]
//! ```
//!
//! `consume` runs K drivers (each its own consumer, one group) until N records were put; with
//! `--put-latency-ms` the sink sleeps that long per batch instead of returning at once. The
//! clock starts when every driver has received its first records, so joining the group is
//! not measured; the records counted are those put from then on. It stops when the N-th
//! record's iteration (put, acknowledge, commit) has returned. Closing is not timed.
//!
//! With `--stop-when-idle-ms`, N counts the records of the whole group, which other processes
//! drain too (the script's distributed row): the process also stops once it has had records
//! and then none for MS, and its clock stops at the last iteration that put records.
//!
//! `--client-config` names a Java client `.properties` file whose security keys
//! (`security.protocol`, `ssl.truststore.location`, `sasl.*`, ...) the consumers use, read with
//! `Security::from_properties`; `scripts/bench.sh` gives the Java tool the same file for its TLS
//! row. The admin commands always connect in plaintext.
//!
//! Output (one line, `key=value` pairs, on stdout):
//! `BENCH client=A records=… bytes=… window_records=… window_bytes=… window_ms=… join_ms=…
//! redelivered=… drivers=… complete=0|1 window_start_unix_ms=… window_end_unix_ms=… polls=…
//! commits=…` (polls: iterations that put records). Bytes are key plus value lengths, as Java's
//! `ShareConsumerPerformance` counts them.
//!
//! Build with `cargo build --release --example bench_consumer`; `scripts/bench.sh` does.

use std::error::Error;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_share_sink::{
    AcquisitionSizing, CommitPolicy, DriverConfig, KafkaAdmin, KafkaShareConsumer,
    KafkaShareConsumerConfig, Properties, Security, ShareSinkTask, SinkRecord, SinkTask,
    TaskConfig, TaskError,
};

type BoxResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// `--key value` pairs after the command; `--set` may repeat.
#[derive(Debug, Default)]
struct Args {
    pairs: Vec<(String, String)>,
}

impl Args {
    fn parse(raw: &[String]) -> BoxResult<Self> {
        let mut pairs = Vec::new();
        let mut it = raw.iter();
        while let Some(flag) = it.next() {
            let Some(key) = flag.strip_prefix("--") else {
                return Err(format!("expected --flag, got {flag:?}").into());
            };
            let value = it.next().ok_or_else(|| format!("--{key} needs a value"))?;
            pairs.push((key.to_owned(), value.clone()));
        }
        Ok(Self { pairs })
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn all(&self, key: &str) -> impl Iterator<Item = &str> {
        self.pairs
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn required(&self, key: &str) -> BoxResult<&str> {
        self.get(key)
            .ok_or_else(|| format!("--{key} is required").into())
    }

    fn number<T: std::str::FromStr>(&self, key: &str, default: T) -> BoxResult<T>
    where
        T::Err: std::fmt::Display,
    {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|e| format!("--{key} {v:?}: {e}").into()),
        }
    }
}

/// What every driver of one run shares: counters and the measuring window.
#[derive(Debug)]
struct Progress {
    drivers: usize,
    target: u64,
    records: AtomicU64,
    bytes: AtomicU64,
    redelivered: AtomicU64,
    /// Iterations that put records, and commits, over all drivers (from `DriverMetrics`).
    batches: AtomicU64,
    commits: AtomicU64,
    lock_losses: AtomicU64,
    /// ShareFetch requests, those carrying acknowledgements, and ShareAcknowledge requests,
    /// over all consumers (from `KafkaShareConsumer::request_counts`).
    share_fetches: AtomicU64,
    fetches_with_acks: AtomicU64,
    share_acknowledges: AtomicU64,
    /// Drivers that have received records.
    started: AtomicUsize,
    process_start: Instant,
    window: Mutex<Window>,
}

#[derive(Debug, Default)]
struct Window {
    /// When the first records arrived at any driver.
    first: Option<Instant>,
    /// Clock start, and the counters just before it.
    start: Option<(Instant, u64, u64)>,
    /// Clock stop, and the counters then.
    end: Option<(Instant, u64, u64)>,
    /// The last iteration after which the counters had moved, and the counters then.
    last: Option<(Instant, u64, u64)>,
}

/// How long the clock waits for the last driver's first records before it starts anyway.
const JOIN_GRACE: Duration = Duration::from_secs(5);

impl Progress {
    fn done(&self) -> bool {
        self.records.load(Ordering::Relaxed) >= self.target
    }

    /// Called by a driver's sink with a non-empty batch, before it is counted.
    fn batch_arrives(&self, first_of_driver: bool) {
        let started = if first_of_driver {
            self.started.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            self.started.load(Ordering::Relaxed)
        };
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let first = *w.first.get_or_insert(now);
        if w.start.is_none() && (started >= self.drivers || now - first >= JOIN_GRACE) {
            w.start = Some((
                now,
                self.records.load(Ordering::Relaxed),
                self.bytes.load(Ordering::Relaxed),
            ));
        }
    }

    /// Called by a driver after an iteration: stops the clock once the target is reached.
    fn iteration_done(&self) {
        if !self.done() {
            let records = self.records.load(Ordering::Relaxed);
            let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
            if w.last.is_none_or(|(_, seen, _)| seen != records) {
                w.last = Some((Instant::now(), records, self.bytes.load(Ordering::Relaxed)));
            }
            return;
        }
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        if w.end.is_none() {
            w.end = Some((
                Instant::now(),
                self.records.load(Ordering::Relaxed),
                self.bytes.load(Ordering::Relaxed),
            ));
        }
    }
}

/// The no-op sink: counts what it is given, nothing else.
struct NoOpSink {
    progress: Arc<Progress>,
    seen_records: bool,
    /// `--put-latency-ms`: a sink that waits this long per batch, as one writing elsewhere
    /// would (zero: no wait).
    latency: Duration,
}

#[async_trait::async_trait]
impl SinkTask for NoOpSink {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        self.progress.batch_arrives(!self.seen_records);
        self.seen_records = true;
        let mut bytes = 0u64;
        let mut redelivered = 0u64;
        for r in records {
            bytes += r.key().as_bytes().map_or(0, <[u8]>::len) as u64;
            bytes += r.value().as_bytes().map_or(0, <[u8]>::len) as u64;
            redelivered += u64::from(r.delivery_count() > 1);
        }
        let p = &self.progress;
        p.bytes.fetch_add(bytes, Ordering::Relaxed);
        p.redelivered.fetch_add(redelivered, Ordering::Relaxed);
        p.records.fetch_add(records.len() as u64, Ordering::Relaxed);
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        Ok(())
    }
}

/// `None`: the driver's default.
fn commit_policy(spec: &str) -> BoxResult<Option<CommitPolicy>> {
    if spec == "default" {
        return Ok(None);
    }
    commit_policy_given(spec).map(Some)
}

fn commit_policy_given(spec: &str) -> BoxResult<CommitPolicy> {
    if spec == "every" {
        return Ok(CommitPolicy::every_iteration());
    }
    if let Some(n) = spec.strip_prefix("records:") {
        return Ok(CommitPolicy::records(n.parse()?));
    }
    if let Some(ms) = spec.strip_prefix("interval:") {
        return Ok(CommitPolicy::interval(Duration::from_millis(ms.parse()?)));
    }
    Err(format!("--commit {spec:?}: use default, every, records:N or interval:MS").into())
}

async fn consume(args: &Args) -> BoxResult<()> {
    let bootstrap = args.required("bootstrap")?;
    let topic = args.required("topic")?;
    let group = args.required("group")?;
    let target: u64 = args.number("records", 0)?;
    let drivers: usize = args.number("drivers", 1)?;
    let idle = Duration::from_secs(args.number("idle-timeout-secs", 60)?);
    let policy = commit_policy(args.get("commit").unwrap_or("default"))?;
    let latency = Duration::from_millis(args.number("put-latency-ms", 0)?);
    let stop_when_idle = args
        .get("stop-when-idle-ms")
        .map(|ms| ms.parse().map(Duration::from_millis))
        .transpose()?;
    if target == 0 || drivers == 0 {
        return Err("--records and --drivers must be at least 1".into());
    }
    let security = match args.get("client-config") {
        None => Security::plaintext(),
        Some(path) => Security::from_properties(&Properties::from_file(path)?)
            .map_err(|e| format!("--client-config {path:?}: {e}"))?,
    };
    let progress = Arc::new(Progress {
        drivers,
        target,
        records: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        redelivered: AtomicU64::new(0),
        batches: AtomicU64::new(0),
        commits: AtomicU64::new(0),
        lock_losses: AtomicU64::new(0),
        share_fetches: AtomicU64::new(0),
        fetches_with_acks: AtomicU64::new(0),
        share_acknowledges: AtomicU64::new(0),
        started: AtomicUsize::new(0),
        process_start: Instant::now(),
        window: Mutex::new(Window::default()),
    });

    let mut tasks = Vec::new();
    for i in 0..drivers {
        let mut config = KafkaShareConsumerConfig::new(bootstrap, group)
            .client_id(format!("bench-a-{}", i + 1))
            .security(security.clone());
        if let Some(b) = args.get("fetch-max-bytes") {
            config = config.fetch_max_bytes(b.parse()?);
        }
        if let Some(r) = args.get("max-poll-records") {
            config = config.max_poll_records(r.parse()?);
        }
        if let Some(b) = args.get("acquisition-max-bytes") {
            config = config.acquisition_max_bytes(b.parse()?);
        }
        config = config.acquisition_sizing(match args.get("acquisition").unwrap_or("sized") {
            "sized" => AcquisitionSizing::Sized,
            "fixed" => AcquisitionSizing::Fixed,
            other => return Err(format!("--acquisition {other:?}: use sized or fixed").into()),
        });
        let consumer = KafkaShareConsumer::connect(config).await?;
        let sink = NoOpSink {
            progress: Arc::clone(&progress),
            seen_records: false,
            latency,
        };
        let mut driver_config = DriverConfig::new([topic]);
        if let Some(policy) = policy {
            driver_config = driver_config.commit_policy(policy);
        }
        let mut driver = ShareSinkTask::new(Box::new(sink), consumer, driver_config);
        let progress = Arc::clone(&progress);
        tasks.push(tokio::spawn(async move {
            driver.initialize().await?;
            let mut last_progress = Instant::now();
            let mut seen = progress.records.load(Ordering::Relaxed);
            let outcome: BoxResult<()> = loop {
                if progress.done() {
                    break Ok(());
                }
                match driver.iteration().await {
                    Ok(_) => {}
                    Err(e) if e.is_retriable() => eprintln!("driver {}: {e}", i + 1),
                    Err(e) => break Err(e.into()),
                }
                progress.iteration_done();
                let now = progress.records.load(Ordering::Relaxed);
                if now != seen {
                    seen = now;
                    last_progress = Instant::now();
                } else if let Some(stop) = stop_when_idle
                    && now > 0
                    && last_progress.elapsed() >= stop
                {
                    // The other processes of the group took the rest.
                    break Ok(());
                } else if last_progress.elapsed() >= idle {
                    break Err(format!(
                        "no records for {idle:?} after {now} of {} records",
                        progress.target
                    )
                    .into());
                }
            };
            let metrics = driver.metrics();
            progress
                .batches
                .fetch_add(metrics.put_batches, Ordering::Relaxed);
            progress
                .commits
                .fetch_add(metrics.commits, Ordering::Relaxed);
            progress
                .lock_losses
                .fetch_add(metrics.lock_losses, Ordering::Relaxed);
            let requests = driver.consumer().request_counts();
            progress
                .share_fetches
                .fetch_add(requests.share_fetches, Ordering::Relaxed);
            progress.fetches_with_acks.fetch_add(
                requests.share_fetches_with_acknowledgements,
                Ordering::Relaxed,
            );
            progress
                .share_acknowledges
                .fetch_add(requests.share_acknowledges, Ordering::Relaxed);
            let closed = driver.close().await;
            outcome?;
            closed?;
            BoxResult::Ok(())
        }));
    }
    let mut first_error = None;
    for t in tasks {
        let outcome = match t.await {
            Ok(r) => r,
            Err(join) => Err(join.into()),
        };
        if let Err(e) = outcome {
            first_error.get_or_insert(e);
        }
    }

    let w = progress.window.lock().unwrap_or_else(|p| p.into_inner());
    let records = progress.records.load(Ordering::Relaxed);
    let bytes = progress.bytes.load(Ordering::Relaxed);
    let (start, r0, b0) = w.start.unwrap_or((progress.process_start, 0, 0));
    let (end, r1, b1) = w
        .end
        .or(w.last.filter(|_| stop_when_idle.is_some()))
        .unwrap_or((Instant::now(), records, bytes));
    let join_ms = w
        .first
        .map_or(0, |f| (f - progress.process_start).as_millis());
    println!(
        "BENCH client=A records={records} bytes={bytes} window_records={} window_bytes={} \
         window_ms={:.3} join_ms={join_ms} redelivered={} drivers={drivers} complete={} \
         window_start_unix_ms={} window_end_unix_ms={} polls={} commits={} lock_losses={} \
         share_fetches={} fetches_with_acks={} share_acknowledges={}",
        r1 - r0,
        b1 - b0,
        (end - start).as_secs_f64() * 1000.0,
        progress.redelivered.load(Ordering::Relaxed),
        u8::from(records >= target),
        unix_ms(start),
        unix_ms(end),
        progress.batches.load(Ordering::Relaxed),
        progress.commits.load(Ordering::Relaxed),
        progress.lock_losses.load(Ordering::Relaxed),
        progress.share_fetches.load(Ordering::Relaxed),
        progress.fetches_with_acks.load(Ordering::Relaxed),
        progress.share_acknowledges.load(Ordering::Relaxed),
    );
    first_error.map_or(Ok(()), Err)
}

/// Wall-clock milliseconds of an instant, for matching the script's CPU samples.
fn unix_ms(at: Instant) -> u128 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (now.saturating_sub(at.elapsed())).as_millis()
}

async fn admin(command: &str, args: &Args) -> BoxResult<()> {
    let admin = KafkaAdmin::connect(args.required("bootstrap")?).await?;
    match command {
        "create-topic" => {
            let topic = args.required("topic")?;
            admin
                .create_topic(topic, args.number("partitions", 1)?, 1)
                .await?;
        }
        "group-config" => {
            let group = args.required("group")?;
            let pairs: Vec<(&str, &str)> = args
                .all("set")
                .map(|kv| {
                    kv.split_once('=')
                        .ok_or_else(|| format!("--set {kv:?}: use k=v"))
                })
                .collect::<Result<_, _>>()?;
            admin.set_share_group_config(group, &pairs).await?;
        }
        _ => unreachable!(),
    }
    Ok(())
}

fn main() -> BoxResult<()> {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = raw.split_first() else {
        return Err(
            "usage: bench_consumer create-topic|group-config|consume --flag value ...".into(),
        );
    };
    let args = Args::parse(rest)?;
    let mut builder = match args.get("runtime").unwrap_or("multi") {
        "multi" => tokio::runtime::Builder::new_multi_thread(),
        "current" => tokio::runtime::Builder::new_current_thread(),
        other => return Err(format!("--runtime {other:?}: use multi or current").into()),
    };
    if let Some(w) = args.get("workers") {
        builder.worker_threads(w.parse()?);
    }
    let runtime = builder.enable_all().build()?;
    match command.as_str() {
        "consume" => runtime.block_on(consume(&args)),
        "create-topic" | "group-config" => runtime.block_on(admin(command, &args)),
        other => Err(format!("unknown command {other:?}").into()),
    }
}
