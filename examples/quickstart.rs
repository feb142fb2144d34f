//! Quickstart: two drivers share one embedded share group, with a sink that sometimes fails.
//!
//! ```sh
//! cargo run --example quickstart
//! ```
//!
//! No broker is needed: the share group runs in process. Every fifth `put` of each sink fails
//! with a retriable error, so its batch is released and delivered again (possibly to the other
//! driver). At the end every record has been written at least once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, GroupConfig, ProduceRecord};
use kafka_share_sink::lag::LagSource;
use kafka_share_sink::{
    DriverConfig, DriverMetrics, RecordId, ShareGroupLag, ShareSinkTask, SinkRecord, SinkTask,
    TaskConfig, TaskError,
};

const TOPIC: &str = "orders";
const GROUP: &str = "quickstart-sink";
const PARTITIONS: usize = 4;
const RECORDS: usize = 5_000;

/// Stands for an external system: how many times each record was written.
type Store = Arc<Mutex<HashMap<RecordId, u32>>>;

struct FlakySink {
    name: &'static str,
    store: Store,
    puts: u64,
}

#[async_trait::async_trait]
impl SinkTask for FlakySink {
    async fn start(&mut self, _config: &TaskConfig) -> Result<(), TaskError> {
        println!("{} started", self.name);
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        self.puts += 1;
        if self.puts % 5 == 0 {
            return Err(TaskError::retriable(format!(
                "{}: downstream busy",
                self.name
            )));
        }
        let mut store = self
            .store
            .lock()
            .map_err(|_| TaskError::fatal("store lock poisoned"))?;
        for record in records {
            *store.entry(record.original_id().clone()).or_default() += 1;
        }
        Ok(())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let broker = EmbeddedBroker::new();
    broker.create_topic(TOPIC, PARTITIONS)?;
    broker.set_group_config(
        GROUP,
        GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest),
    )?;
    for i in 0..RECORDS {
        broker.produce(
            TOPIC,
            ProduceRecord::new()
                .key(format!("customer-{}", i % 97))
                .value(format!(r#"{{"order":{i}}}"#)),
        )?;
    }
    println!("produced {RECORDS} records over {PARTITIONS} partitions");

    let store: Store = Arc::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut drivers = ["sink-a", "sink-b"].map(|name| {
        let sink = FlakySink {
            name,
            store: Arc::clone(&store),
            puts: 0,
        };
        let config = DriverConfig::new([TOPIC])
            .poll_timeout(Duration::from_millis(20))
            .retriable_backoff(Duration::from_millis(10));
        ShareSinkTask::new(Box::new(sink), broker.share_consumer(GROUP), config)
    });
    let shutdown = || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };
    let watcher = async {
        loop {
            let counts = broker.state_counts(GROUP);
            if counts.acknowledged + counts.archived == RECORDS as u64 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = stop_tx.send(true);
    };
    let [a, b] = &mut drivers;
    let (ra, rb, ()) = tokio::join!(a.run(shutdown()), b.run(shutdown()), watcher);
    ra?;
    rb?;

    let metrics: Vec<DriverMetrics> = drivers.iter().map(ShareSinkTask::metrics).collect();
    let sum = |f: fn(&DriverMetrics) -> u64| metrics.iter().map(f).sum::<u64>();
    // The group's lag, as a Kafka 4.4 broker reports it (and an autoscaler reads it): 0 once
    // every record is done.
    let partitions = broker.share_group_lag(GROUP).await;
    let lag = ShareGroupLag::new(GROUP, partitions.map_err(|e| e.to_string())?);
    let store = store.lock().map_err(|_| "store lock poisoned")?;
    let written_twice = store.values().filter(|n| **n > 1).count();
    let counts = broker.state_counts(GROUP);

    println!(
        "delivered:   {} distinct records written ({written_twice} of them more than once)",
        store.len()
    );
    println!(
        "redelivered: {} deliveries with a delivery count above 1",
        sum(|m| m.records_redelivered)
    );
    println!(
        "released:    {} records after retriable put errors",
        sum(|m| m.records_released)
    );
    println!("rejected:    {}", sum(|m| m.records_rejected));
    println!(
        "archived:    {} (delivery-count limit reached)",
        counts.archived
    );
    for (name, m) in ["sink-a", "sink-b"].iter().zip(&metrics) {
        println!(
            "  {name}: {} records put in {} batches",
            m.records_put, m.put_batches
        );
    }
    println!("lag:         {} records left to finish", lag.total());
    println!("time taken:  {:?}", started.elapsed());

    let missing = RECORDS as u64 - counts.acknowledged - counts.archived;
    if store.len() + counts.archived as usize != RECORDS || missing != 0 {
        return Err(format!(
            "lost records: {} written, {} archived of {RECORDS}",
            store.len(),
            counts.archived
        )
        .into());
    }
    Ok(())
}
