//! Cost of one driver iteration on the embedded share group, with a `put` that does nothing.
//!
//! Producing the records is left out of the measurement; polling, converting, `put`,
//! acknowledging and committing are in. Throughput is reported per record. A counting
//! allocator also reports heap allocations per record (printed once per batch size, not timed).

// criterion's macros generate undocumented items.
#![allow(missing_docs)]

use std::alloc::System;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kafka_share_sink::embedded::{
    AutoOffsetReset, ConsumerOptions, EmbeddedBroker, GroupConfig, ProduceRecord,
};
use kafka_share_sink::{DriverConfig, ShareSinkTask, SinkRecord, SinkTask, TaskConfig, TaskError};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

/// Counts every allocation the process makes (no unsafe code of ours: the crate forbids it).
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn allocations() -> u64 {
    let stats = GLOBAL.stats();
    (stats.allocations + stats.reallocations) as u64
}

struct NoOp;

#[async_trait::async_trait]
impl SinkTask for NoOp {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }
    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        std::hint::black_box(records);
        Ok(())
    }
}

/// A broker, a driver on it, and the payload of the records produced for each round.
struct Rig {
    broker: EmbeddedBroker,
    driver: ShareSinkTask<kafka_share_sink::embedded::EmbeddedShareConsumer>,
    value: bytes::Bytes,
    batch: usize,
}

fn rig(rt: &tokio::runtime::Runtime, batch: usize) -> Rig {
    let broker = EmbeddedBroker::new();
    broker.create_topic("bench", 1).expect("topic");
    let config = GroupConfig::new()
        .auto_offset_reset(AutoOffsetReset::Earliest)
        .partition_max_record_locks(batch.max(100) * 2);
    broker
        .set_group_config("bench", config)
        .expect("group config");
    let consumer =
        broker.share_consumer_with("bench", ConsumerOptions::new().max_poll_records(batch));
    let config = DriverConfig::new(["bench"]).poll_timeout(Duration::ZERO);
    let mut driver = ShareSinkTask::new(Box::new(NoOp), consumer, config);
    rt.block_on(driver.initialize()).expect("initialize");
    Rig {
        broker,
        driver,
        value: bytes::Bytes::from(vec![b'x'; 1024]),
        batch,
    }
}

/// Produces one batch (not measured), then runs one iteration; returns its time and the
/// allocations it made.
fn round(rt: &tokio::runtime::Runtime, rig: &mut Rig) -> (Duration, u64) {
    for _ in 0..rig.batch {
        rig.broker
            .produce(
                "bench",
                ProduceRecord::new().partition(0).value(rig.value.clone()),
            )
            .expect("produce");
    }
    let before = allocations();
    let started = Instant::now();
    let report = rt.block_on(rig.driver.iteration()).expect("iteration");
    let elapsed = started.elapsed();
    let allocated = allocations() - before;
    assert_eq!(report.accepted, rig.batch);
    (elapsed, allocated)
}

fn iteration(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("iteration");
    for batch in [1_usize, 100, 500, 5_000] {
        // Allocations per record, counted once over warm iterations (not timed).
        let mut counting = rig(&rt, batch);
        round(&rt, &mut counting);
        let rounds = 20;
        let allocated: u64 = (0..rounds).map(|_| round(&rt, &mut counting).1).sum();
        println!(
            "iteration/{batch}: {:.3} heap allocations per record",
            allocated as f64 / (rounds * batch) as f64
        );

        group.throughput(Throughput::Elements(batch as u64));
        group.bench_with_input(BenchmarkId::from_parameter(batch), &batch, |b, &batch| {
            let mut rig = rig(&rt, batch);
            b.iter_custom(|iters| (0..iters).map(|_| round(&rt, &mut rig).0).sum());
        });
    }
    group.finish();
}

criterion_group!(benches, iteration);
criterion_main!(benches);
