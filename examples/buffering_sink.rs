//! Acknowledge after flush: a sink that buffers writes in `put` and makes them durable in
//! batches, on the embedded share group (no broker needed).
//!
//! ```sh
//! cargo run --example buffering_sink
//! ```
//!
//! With `ack.policy=after.flush` the driver ACCEPTs a record only once the task's
//! `pre_commit` says it is durable; until then it holds the record (its lock is renewed at
//! half its duration) and goes on polling. Halfway through, the first driver "crashes" with
//! records in its buffer: nothing was acknowledged, so the share group delivers them again to
//! the second driver once their locks expire. Every record ends up durable; none is lost.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, GroupConfig, ProduceRecord};
use kafka_share_sink::{
    AckPolicy, CommitPolicy, Delivered, DriverConfig, Durability, RecordId, ShareSinkTask,
    SinkRecord, SinkTask, TaskConfig, TaskError,
};

const TOPIC: &str = "events";
const GROUP: &str = "buffering-sink";
const RECORDS: usize = 2_000;
const LOCK: Duration = Duration::from_secs(30);

/// Stands for an external store: how many times each record was made durable.
type Durable = Arc<Mutex<HashMap<RecordId, u32>>>;

/// Buffers records in memory and writes them out only on flush.
struct BufferingSink {
    name: &'static str,
    buffer: Vec<RecordId>,
    durable: Durable,
    flush_at: usize,
}

#[async_trait::async_trait]
impl SinkTask for BufferingSink {
    async fn start(&mut self, _config: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        self.buffer
            .extend(records.iter().map(|r| r.original_id().clone()));
        Ok(())
    }

    async fn pre_commit(&mut self, _delivered: &Delivered) -> Result<Durability, TaskError> {
        if self.buffer.len() < self.flush_at {
            // Not worth a write yet: nothing is durable, nothing is acknowledged.
            return Ok(Durability::Nothing);
        }
        let mut durable = self
            .durable
            .lock()
            .map_err(|_| TaskError::fatal("store lock poisoned"))?;
        for id in self.buffer.drain(..) {
            *durable.entry(id).or_default() += 1;
        }
        println!("{}: flushed, {} records durable", self.name, durable.len());
        Ok(Durability::All)
    }

    async fn flush(&mut self) -> Result<(), TaskError> {
        self.flush_at = 0;
        self.pre_commit(&Delivered::new()).await.map(|_| ())
    }
}

fn driver(
    broker: &EmbeddedBroker,
    name: &'static str,
    durable: &Durable,
) -> ShareSinkTask<kafka_share_sink::embedded::EmbeddedShareConsumer> {
    let sink = BufferingSink {
        name,
        buffer: Vec::new(),
        durable: Arc::clone(durable),
        flush_at: 300,
    };
    let config = DriverConfig::new([TOPIC])
        .poll_timeout(Duration::from_millis(20))
        .ack_policy(AckPolicy::AfterFlush)
        // pre_commit runs once a second; the sink decides whether to flush.
        .commit_policy(CommitPolicy::interval(Duration::from_secs(1)));
    ShareSinkTask::new(Box::new(sink), broker.share_consumer(GROUP), config)
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let broker = EmbeddedBroker::new();
    broker.create_topic(TOPIC, 2)?;
    broker.set_group_config(
        GROUP,
        GroupConfig::new()
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .record_lock_duration(LOCK),
    )?;
    for i in 0..RECORDS {
        broker.produce(TOPIC, ProduceRecord::new().value(format!("event {i}")))?;
    }
    let durable: Durable = Arc::default();

    // The first driver takes some records, buffers them, and dies before flushing them.
    let mut doomed = driver(&broker, "doomed", &durable);
    doomed.initialize().await?;
    for _ in 0..3 {
        doomed.iteration().await?;
    }
    println!(
        "doomed: crashing with {} records buffered and not acknowledged",
        doomed.awaiting_flush()
    );
    drop(doomed);

    // The second driver gets everything else at once, and the doomed driver's records once
    // their locks expire.
    let mut survivor = driver(&broker, "survivor", &durable);
    survivor.initialize().await?;
    while broker.state_counts(GROUP).acknowledged < RECORDS as u64 {
        survivor.iteration().await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    survivor.close().await?;

    let durable = durable.lock().map_err(|_| "store lock poisoned")?.clone();
    let metrics = survivor.metrics();
    println!(
        "{} of {RECORDS} records durable, none lost; {} redelivered after the crash, {} lock renewals",
        durable.len(),
        metrics.records_redelivered,
        metrics.records_renewed,
    );
    assert_eq!(durable.len(), RECORDS, "every record is durable");
    Ok(())
}
