//! Cost of one driver iteration on the embedded share group, with a `put` that does nothing.
//!
//! Producing the records is left out of the measurement; polling, converting, `put`,
//! acknowledging and committing are in. Throughput is reported per record.

// criterion's macros generate undocumented items.
#![allow(missing_docs)]

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kafka_share_sink::embedded::{
    AutoOffsetReset, ConsumerOptions, EmbeddedBroker, GroupConfig, ProduceRecord,
};
use kafka_share_sink::{DriverConfig, ShareSinkTask, SinkRecord, SinkTask, TaskConfig, TaskError};

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

fn iteration(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("iteration");
    for batch in [1_usize, 100, 500, 5_000] {
        group.throughput(Throughput::Elements(batch as u64));
        group.bench_with_input(BenchmarkId::from_parameter(batch), &batch, |b, &batch| {
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
            let value = bytes::Bytes::from(vec![b'x'; 1024]);
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    for _ in 0..batch {
                        broker
                            .produce(
                                "bench",
                                ProduceRecord::new().partition(0).value(value.clone()),
                            )
                            .expect("produce");
                    }
                    let started = Instant::now();
                    let report = rt.block_on(driver.iteration()).expect("iteration");
                    total += started.elapsed();
                    assert_eq!(report.accepted, batch);
                }
                total
            });
        });
    }
    group.finish();
}

criterion_group!(benches, iteration);
criterion_main!(benches);
