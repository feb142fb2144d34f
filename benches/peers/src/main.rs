//! Client "C" of `scripts/bench.sh`: krafka's share consumer draining a topic with explicit
//! acknowledgements, measured the way client A (`examples/bench_consumer.rs`) is.
//!
//! ```text
//! krafka_share_consumer --bootstrap HOST:PORT --topic T --group G --records N
//!     [--fetch-max-bytes B] [--max-poll-records R] [--commit every|none]
//!     [--runtime multi|current] [--workers W] [--idle-timeout-secs S]
//! ```
//!
//! Each poll's records are counted (key plus value bytes), each is acknowledged (ACCEPT),
//! and with `--commit every` (the default, like A's driver) the acknowledgements are
//! committed before the next poll; with `none` they ride on the next fetch. The clock starts
//! when the first records arrive (group join is not measured) and stops when the poll that
//! brought the N-th record has been acknowledged and committed. Closing is not timed.
//!
//! Prints the same `BENCH` line as client A, with `client=C`.

use std::error::Error;
use std::time::{Duration, Instant};

use krafka::Kafka;
use krafka::share_consumer::AcknowledgementMode;

type BoxResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

fn flag<'a>(args: &'a [String], key: &str) -> Option<&'a str> {
    args.windows(2)
        .rev()
        .find(|w| w[0] == format!("--{key}"))
        .map(|w| w[1].as_str())
}

fn required<'a>(args: &'a [String], key: &str) -> BoxResult<&'a str> {
    flag(args, key).ok_or_else(|| format!("--{key} is required").into())
}

async fn consume(args: &[String]) -> BoxResult<()> {
    let process_start = Instant::now();
    let bootstrap = required(args, "bootstrap")?;
    let topic = required(args, "topic")?;
    let group = required(args, "group")?;
    let target: u64 = required(args, "records")?.parse()?;
    let idle = Duration::from_secs(flag(args, "idle-timeout-secs").unwrap_or("60").parse()?);
    let commit_every = match flag(args, "commit").unwrap_or("every") {
        "every" => true,
        "none" => false,
        other => return Err(format!("--commit {other:?}: use every or none").into()),
    };

    let kafka = Kafka::builder(bootstrap)
        .client_id("bench-c-1")
        .connect()
        .await?;
    let mut builder = kafka
        .share_consumer(group)
        .acknowledgement_mode(AcknowledgementMode::Explicit);
    if let Some(b) = flag(args, "fetch-max-bytes") {
        builder = builder.fetch_max_bytes(b.parse()?);
    }
    if let Some(r) = flag(args, "max-poll-records") {
        builder = builder.max_poll_records(r.parse()?);
    }
    let consumer = builder.build().await?;
    consumer.subscribe([topic]).await?;

    let (mut records, mut bytes, mut redelivered) = (0u64, 0u64, 0u64);
    let (mut polls, mut commits) = (0u64, 0u64);
    let mut first: Option<Instant> = None;
    let mut last_progress = Instant::now();
    let outcome: BoxResult<()> = async {
        while records < target {
            let batch = consumer.poll(Duration::from_millis(500)).await?;
            if batch.is_empty() {
                if last_progress.elapsed() >= idle {
                    return Err(
                        format!("no records for {idle:?} after {records} of {target}").into(),
                    );
                }
                continue;
            }
            first.get_or_insert_with(Instant::now);
            last_progress = Instant::now();
            for r in &batch {
                bytes += r.key.as_ref().map_or(0, |k| k.len()) as u64;
                bytes += r.value.as_ref().map_or(0, |v| v.len()) as u64;
                redelivered += u64::from(r.delivery_count.unwrap_or(1) > 1);
                consumer.ack(r)?;
            }
            records += batch.len() as u64;
            polls += 1;
            if commit_every {
                commits += 1;
                for (partition, result) in consumer.commit().await? {
                    if let Err(e) = result {
                        eprintln!("commit failed for {partition:?}: {e}");
                    }
                }
            }
        }
        Ok(())
    }
    .await;
    let end = Instant::now();
    let start = first.unwrap_or(process_start);
    println!(
        "BENCH client=C records={records} bytes={bytes} window_records={records} \
         window_bytes={bytes} window_ms={:.3} join_ms={} redelivered={redelivered} drivers=1 \
         complete={} window_start_unix_ms={} window_end_unix_ms={} polls={polls} \
         commits={commits}",
        (end - start).as_secs_f64() * 1000.0,
        first.map_or(0, |f| (f - process_start).as_millis()),
        u8::from(records >= target),
        unix_ms(start),
        unix_ms(end),
    );
    let closed = consumer.close().await;
    outcome?;
    closed?;
    Ok(())
}

/// Wall-clock milliseconds of an instant, for matching the script's CPU samples.
fn unix_ms(at: Instant) -> u128 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (now.saturating_sub(at.elapsed())).as_millis()
}

fn main() -> BoxResult<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut builder = match flag(&args, "runtime").unwrap_or("multi") {
        "multi" => tokio::runtime::Builder::new_multi_thread(),
        "current" => tokio::runtime::Builder::new_current_thread(),
        other => return Err(format!("--runtime {other:?}: use multi or current").into()),
    };
    if let Some(w) = flag(&args, "workers") {
        builder.worker_threads(w.parse()?);
    }
    builder.enable_all().build()?.block_on(consume(&args))
}
