//! Producer "P" of `scripts/bench.sh` (see benches/BENCHMARKS.md): writes N records of S bytes (null
//! keys, one random payload of capital letters, as Java's `ProducerPerformance`) with the
//! crate's `KafkaProducer`, then prints the line Java's tool prints last, so the script reads
//! both alike.
//!
//! ```text
//! bench_producer --bootstrap HOST:PORT --topic T --records N --record-size S
//!                [--producer-property key=value]...
//! ```
//!
//! The clock starts before the first `send` and stops when every record is acknowledged
//! (`flush`), as Java's tool times from its first send to its close. The properties are Java
//! producer keys (`acks`, `linger.ms`, `batch.size`, `compression.type`, ...), read with
//! `KafkaProducerConfig::set`; without any the producer runs with Java's defaults (acks=all,
//! idempotence on, linger.ms 5, batch.size 16384).
//!
//! Output (stdout, one line):
//! `N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency.`
//!
//! Build with `cargo build --release --example bench_producer`; `scripts/bench.sh` does.

use std::error::Error;
use std::time::Instant;

use bytes::Bytes;
use futures::FutureExt;
use kafka_share_sink::producer::{KafkaProducer, KafkaProducerConfig, Producer, ProducerRecord};

type BoxResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

struct Args {
    bootstrap: String,
    topic: String,
    records: usize,
    size: usize,
    properties: Vec<(String, String)>,
}

fn parse(raw: &[String]) -> BoxResult<Args> {
    let mut bootstrap = None;
    let mut topic = None;
    let mut records = None;
    let mut size = None;
    let mut properties = Vec::new();
    let mut it = raw.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--bootstrap" => bootstrap = Some(value.clone()),
            "--topic" => topic = Some(value.clone()),
            "--records" => records = Some(value.parse()?),
            "--record-size" => size = Some(value.parse()?),
            "--producer-property" => {
                let (k, v) = value
                    .split_once('=')
                    .ok_or_else(|| format!("--producer-property {value}: expected key=value"))?;
                properties.push((k.to_owned(), v.to_owned()));
            }
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    Ok(Args {
        bootstrap: bootstrap.ok_or("--bootstrap is required")?,
        topic: topic.ok_or("--topic is required")?,
        records: records.ok_or("--records is required")?,
        size: size.ok_or("--record-size is required")?,
        properties,
    })
}

/// A payload of `size` capital letters from a small xorshift generator (no dependency).
fn payload(size: usize) -> Bytes {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..size)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            b'A' + (state % 26) as u8
        })
        .collect::<Vec<u8>>()
        .into()
}

#[tokio::main]
async fn main() -> BoxResult<()> {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let args = parse(&raw)?;
    let mut config = KafkaProducerConfig::new(&args.bootstrap);
    for (key, value) in &args.properties {
        config.set(key, value)?;
    }
    let producer = KafkaProducer::connect(config).await?;
    let value = payload(args.size);
    // One topic name for every record, as Java's tool passes one String: each record holds a
    // reference to it, not a copy.
    let topic: std::sync::Arc<str> = args.topic.as_str().into();
    let started = Instant::now();
    let mut pending = std::collections::VecDeque::new();
    let mut latency_sum = 0.0f64;
    let mut latency_max = 0.0f64;
    // As Java's tool, whose `send` blocks while `buffer.memory` is full: `ready` waits for
    // room before each send. The futures are read as they complete (Java's tool reads its
    // callbacks), from the oldest, and never more than 100,000 are held.
    for _ in 0..args.records {
        producer.ready().await?;
        let sent_at = Instant::now();
        let future = producer
            .send(ProducerRecord::new(std::sync::Arc::clone(&topic)).value(value.clone()))?;
        pending.push_back((sent_at, future));
        loop {
            let full = pending.len() >= 100_000;
            let Some((at, front)) = pending.front_mut() else {
                break;
            };
            let outcome = if full {
                Some(front.await)
            } else {
                // Outside tokio's cooperative budget, which this loop (never waiting while
                // there is room) would spend, leaving every later check `Pending`.
                tokio::task::unconstrained(&mut *front).now_or_never()
            };
            let Some(outcome) = outcome else { break };
            outcome?;
            let ms = at.elapsed().as_secs_f64() * 1000.0;
            latency_sum += ms;
            latency_max = latency_max.max(ms);
            pending.pop_front();
        }
    }
    while let Some((at, future)) = pending.pop_front() {
        future.await?;
        let ms = at.elapsed().as_secs_f64() * 1000.0;
        latency_sum += ms;
        latency_max = latency_max.max(ms);
    }
    producer.flush().await?;
    let seconds = started.elapsed().as_secs_f64();
    let rate = args.records as f64 / seconds;
    let mb = rate * args.size as f64 / (1024.0 * 1024.0);
    println!(
        "{} records sent, {:.1} records/sec ({:.2} MB/sec), {:.2} ms avg latency, {:.2} ms max latency.",
        args.records,
        rate,
        mb,
        latency_sum / args.records.max(1) as f64,
        latency_max
    );
    Ok(())
}
