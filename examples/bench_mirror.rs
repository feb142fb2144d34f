//! Client "F" of the mirror row of `scripts/bench.sh` (see benches/BENCHMARKS.md): the at-least-once
//! twin of `eos_mirror`. `ShareSinkTask` drains a topic into a sink whose `put` copies each
//! record with `MirrorTask::mirror` (same key, value, headers, timestamp and partition, topic
//! `<prefix><topic>`), sends it through the crate's idempotent `KafkaProducer` and waits for
//! every acknowledgement before returning; the driver acknowledges after `put`.
//!
//! ```text
//! bench_mirror mirror --bootstrap HOST:PORT --topic T --group G --prefix P --records N
//!                     [--max-poll-records R] [--commit default|every] [--idle-timeout-secs S]
//! bench_mirror count  --bootstrap HOST:PORT --topic T --partitions P
//! ```
//!
//! `mirror` stops once N records were put; the clock starts when the first batch reaches
//! `put` (joining the group is not timed) and stops when the N-th record's iteration (put,
//! acknowledge, commit) has returned. It prints one `BENCH` line as `bench_consumer` does.
//! `count` reads every partition of T `read_committed` from offset 0 to its last stable
//! offset and prints `COUNT <records>`: the script checks each mirror run with it.
//!
//! Build with `cargo build --release --features exactly-once --example bench_mirror`.

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_share_sink::exactly_once::MirrorTask;
use kafka_share_sink::producer::{
    IsolationLevel, KafkaLogReader, KafkaProducer, KafkaProducerConfig, LogReader, Producer,
};
use kafka_share_sink::{
    CommitPolicy, DriverConfig, KafkaShareConsumer, KafkaShareConsumerConfig, ShareSinkTask,
    SinkRecord, SinkTask, TaskConfig, TaskError,
};

type BoxResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// `--key value` pairs after the command.
struct Args(Vec<(String, String)>);

impl Args {
    fn parse(raw: &[String]) -> BoxResult<Self> {
        let mut pairs = Vec::new();
        let mut it = raw.iter();
        while let Some(flag) = it.next() {
            let key = flag
                .strip_prefix("--")
                .ok_or_else(|| format!("expected --flag, got {flag:?}"))?;
            let value = it.next().ok_or_else(|| format!("--{key} needs a value"))?;
            pairs.push((key.to_owned(), value.clone()));
        }
        Ok(Self(pairs))
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
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
        self.get(key).map_or(Ok(default), |v| {
            v.parse().map_err(|e| format!("--{key} {v:?}: {e}").into())
        })
    }
}

/// What the sink counts; the window opens at the first batch.
#[derive(Default)]
struct Progress {
    records: u64,
    bytes: u64,
    redelivered: u64,
    start: Option<Instant>,
}

/// Copies each record to the target topic and returns once all copies are acknowledged.
struct MirrorSink {
    mirror: MirrorTask,
    producer: Arc<KafkaProducer>,
    progress: Arc<std::sync::Mutex<Progress>>,
}

#[async_trait::async_trait]
impl SinkTask for MirrorSink {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        {
            let mut p = self.progress.lock().unwrap_or_else(|e| e.into_inner());
            p.start.get_or_insert_with(Instant::now);
        }
        let mut deliveries = Vec::with_capacity(records.len());
        let (mut bytes, mut redelivered) = (0u64, 0u64);
        for record in records {
            let copy = self.mirror.mirror(record)?;
            bytes += copy.key_bytes().map_or(0, |b| b.len()) as u64;
            bytes += copy.value_bytes().map_or(0, |b| b.len()) as u64;
            redelivered += u64::from(record.delivery_count() > 1);
            deliveries.push(self.producer.send(copy).map_err(TaskError::retriable)?);
        }
        self.producer.flush().await.map_err(TaskError::retriable)?;
        for delivery in deliveries {
            delivery.await.map_err(TaskError::retriable)?;
        }
        let mut p = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        p.records += records.len() as u64;
        p.bytes += bytes;
        p.redelivered += redelivered;
        Ok(())
    }
}

async fn mirror(args: &Args) -> BoxResult<()> {
    let bootstrap = args.required("bootstrap")?;
    let topic = args.required("topic")?;
    let group = args.required("group")?;
    let prefix = args.required("prefix")?;
    let target: u64 = args.number("records", 0)?;
    let idle = Duration::from_secs(args.number("idle-timeout-secs", 60)?);
    if target == 0 {
        return Err("--records must be at least 1".into());
    }
    let producer = Arc::new(
        KafkaProducer::connect(KafkaProducerConfig::new(bootstrap).client_id("bench-f")).await?,
    );
    let consumer = KafkaShareConsumer::connect(
        KafkaShareConsumerConfig::new(bootstrap, group)
            .client_id("bench-f")
            .max_poll_records(args.number("max-poll-records", 500)?),
    )
    .await?;
    let mut config = DriverConfig::new([topic]);
    match args.get("commit").unwrap_or("default") {
        "default" => {}
        "every" => config = config.commit_policy(CommitPolicy::every_iteration()),
        other => return Err(format!("--commit {other:?}: use default or every").into()),
    }
    let progress = Arc::new(std::sync::Mutex::new(Progress::default()));
    let sink = MirrorSink {
        mirror: MirrorTask::with_prefix(prefix),
        producer: Arc::clone(&producer),
        progress: Arc::clone(&progress),
    };
    let mut driver = ShareSinkTask::new(Box::new(sink), consumer, config);
    driver.initialize().await?;
    let process_start = Instant::now();
    let records = || progress.lock().unwrap_or_else(|e| e.into_inner()).records;
    let mut last_progress = Instant::now();
    let mut seen = 0;
    let outcome: BoxResult<()> = loop {
        if records() >= target {
            break Ok(());
        }
        match driver.iteration().await {
            Ok(_) => {}
            Err(e) if e.is_retriable() => eprintln!("bench_mirror: {e}"),
            Err(e) => break Err(e.into()),
        }
        let now = records();
        if now != seen {
            seen = now;
            last_progress = Instant::now();
        } else if last_progress.elapsed() >= idle {
            break Err(format!("no records for {idle:?} after {now} of {target}").into());
        }
    };
    let end = Instant::now();
    let metrics = driver.metrics();
    let closed = driver.close().await;
    let p = progress.lock().unwrap_or_else(|e| e.into_inner());
    let start = p.start.unwrap_or(process_start);
    println!(
        "BENCH client=F records={} bytes={} window_records={} window_bytes={} window_ms={:.3} \
         join_ms={} redelivered={} drivers=1 complete={} window_start_unix_ms={} \
         window_end_unix_ms={} polls={} commits={} lock_losses={}",
        p.records,
        p.bytes,
        p.records,
        p.bytes,
        (end - start).as_secs_f64() * 1000.0,
        (start - process_start).as_millis(),
        p.redelivered,
        u8::from(p.records >= target),
        unix_ms(start),
        unix_ms(end),
        metrics.put_batches,
        metrics.commits,
        metrics.lock_losses,
    );
    outcome?;
    closed?;
    Ok(())
}

/// Records of `topic` a `read_committed` reader sees, over all its partitions.
async fn count(args: &Args) -> BoxResult<()> {
    let topic = args.required("topic")?;
    let partitions: i32 = args.number("partitions", 1)?;
    let reader = KafkaLogReader::builder(args.required("bootstrap")?)
        .connect()
        .await?;
    let mut total = 0u64;
    for partition in 0..partitions {
        // The last commit returned once decided; its markers may still be being written:
        // count once no transaction is open on the partition (at most 30 s).
        let give_up = std::time::Instant::now() + Duration::from_secs(30);
        let end = loop {
            let stable = reader
                .end_offset(topic, partition, IsolationLevel::ReadCommitted)
                .await?;
            let high = reader
                .end_offset(topic, partition, IsolationLevel::ReadUncommitted)
                .await?;
            if stable == high || std::time::Instant::now() >= give_up {
                break stable;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let mut next = 0;
        while next < end {
            let read = reader
                .read(
                    topic,
                    partition,
                    next,
                    IsolationLevel::ReadCommitted,
                    Duration::from_secs(1),
                )
                .await?;
            if read.next_offset <= next {
                return Err(
                    format!("{topic}/{partition}: no progress at offset {next} of {end}").into(),
                );
            }
            total += read.records.iter().filter(|r| r.offset() < end).count() as u64;
            next = read.next_offset;
        }
    }
    println!("COUNT {total}");
    Ok(())
}

/// Wall-clock milliseconds of an instant, for matching the script's CPU samples.
fn unix_ms(at: Instant) -> u128 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    now.saturating_sub(at.elapsed()).as_millis()
}

#[tokio::main]
async fn main() -> BoxResult<()> {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = raw.split_first() else {
        return Err("usage: bench_mirror mirror|count --flag value ...".into());
    };
    let args = Args::parse(rest)?;
    match command.as_str() {
        "mirror" => mirror(&args).await,
        "count" => count(&args).await,
        other => Err(format!("unknown command {other:?}").into()),
    }
}
