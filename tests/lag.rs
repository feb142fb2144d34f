//! The share group's lag on the embedded broker: what it counts (acquired records are lag,
//! acknowledged and archived ones are not), the driver's reader, and the supervisor's one
//! reader per group reported on its handle (and exported, with the feature `metrics`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, GroupConfig, ProduceRecord};
use kafka_share_sink::lag::LagReader;
use kafka_share_sink::supervisor::{Supervisor, SupervisorConfig, TaskParts};
use kafka_share_sink::{
    AcknowledgeType, DriverConfig, ShareConsumer, SinkRecord, SinkTask, TaskConfig, TaskError,
};

fn broker(topic: &str, partitions: usize, group: &str) -> EmbeddedBroker {
    let broker = EmbeddedBroker::new();
    broker.create_topic(topic, partitions).unwrap();
    broker
        .set_group_config(
            group,
            GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest),
        )
        .unwrap();
    broker
}

#[tokio::test]
async fn the_embedded_lag_counts_what_the_group_has_not_finished() {
    let broker = broker("t", 2, "g");
    for i in 0..6i32 {
        let partition = i % 2i32;
        broker
            .produce("t", ProduceRecord::new().partition(partition).value("v"))
            .unwrap();
    }
    let mut consumer = broker.share_consumer("g");
    consumer.subscribe(vec!["t".into()]).await.unwrap();
    let reader = LagReader::spawn(
        consumer
            .lag_source()
            .expect("the embedded consumer tells the lag"),
        "g",
        Duration::from_secs(3600),
    );
    let records = consumer.poll(Duration::from_millis(50)).await.unwrap();
    assert_eq!(records.len(), 6);
    let lag = reader.refresh().await.unwrap();
    assert_eq!(lag.total(), 6, "acquired records are lag: {lag:?}");
    // Accept one, reject one (archived), release one (available again) in partition 0; the
    // rest stay acquired.
    let p0: Vec<_> = records.iter().filter(|r| r.partition() == 0).collect();
    consumer
        .acknowledge(p0[1], AcknowledgeType::Accept)
        .unwrap();
    consumer
        .acknowledge(p0[0], AcknowledgeType::Reject)
        .unwrap();
    consumer
        .acknowledge(p0[2], AcknowledgeType::Release)
        .unwrap();
    consumer.commit_sync(Duration::from_secs(1)).await.unwrap();
    let lag = reader.refresh().await.unwrap();
    assert_eq!(lag.partition("t", 0), Some(1), "{lag:?}");
    assert_eq!(lag.partition("t", 1), Some(3), "{lag:?}");
    assert_eq!(lag.total(), 4);
    // More records are lag too.
    broker
        .produce("t", ProduceRecord::new().partition(0).value("w"))
        .unwrap();
    assert_eq!(reader.refresh().await.unwrap().partition("t", 0), Some(2));
    assert_eq!(reader.errors(), 0);
}

struct Count(Arc<AtomicUsize>);

#[async_trait]
impl SinkTask for Count {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }
    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        self.0.fetch_add(records.len(), Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_supervisor_reports_one_lag_per_group_falling_to_zero() {
    const RECORDS: usize = 40;
    let broker = broker("events", 2, "sink");
    for i in 0..RECORDS {
        broker
            .produce("events", ProduceRecord::new().value(format!("{i}")))
            .unwrap();
    }
    let written = Arc::new(AtomicUsize::new(0));
    let (group, sinks) = (broker.clone(), Arc::clone(&written));
    let supervisor = Supervisor::new("lagging", SupervisorConfig::new(2), move |_task| {
        let consumer = group.share_consumer("sink");
        let count = Box::new(Count(Arc::clone(&sinks)));
        async move {
            let config = DriverConfig::new(["events"])
                .poll_timeout(Duration::from_millis(20))
                .lag_refresh_interval(Duration::from_millis(100));
            Ok(TaskParts::new(count, consumer, config))
        }
    });
    let handle = supervisor.handle();
    let watched = handle.clone();
    let shutdown = async move {
        loop {
            let lag = watched.lag();
            if written.load(Ordering::SeqCst) >= RECORDS
                && lag.len() == 1
                && lag[0].total() == 0
                && lag[0].partitions.len() == 2
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), supervisor.run(shutdown))
        .await
        .expect("drained, and the lag read 0, within 30 s")
        .unwrap();
    assert!(
        handle.lag().is_empty(),
        "the readers stop with the supervisor"
    );
}
