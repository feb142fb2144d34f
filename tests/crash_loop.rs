//! The crash loop of the "nothing silently lost" report, in process on the embedded share
//! group: a sink that buffers in `put` and makes records durable only when asked to flush,
//! under `ack.policy=after.flush`, crashed (its driver and consumer dropped mid-flight, its
//! buffer lost) again and again on a random schedule and restarted. Every record must end in
//! the sink or in a dead-letter queue (the connector's, or the group's broker dead-letter
//! queue of KIP-1191, which saves a record whose last delivery a crash cut short); none may
//! be archived by the group without a trace.
//!
//! The schedules crash a sink every 50 ms to 1.2 s of (paused) time, with a 2 s lock and the
//! default delivery-count limit of 5: records reach their last delivery all the time. Before
//! the driver knew the last delivery, records were left buffered on it and archived at the
//! next crash.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::embedded::{
    AutoOffsetReset, ConsumerOptions, EmbeddedBroker, GroupConfig, ProduceRecord, RecordState,
};
use kafka_share_sink::{
    AckPolicy, CommitPolicy, Delivered, DriverConfig, Durability, ShareSinkTask, SinkRecord,
    SinkTask, TaskConfig, TaskError,
};
use proptest::prelude::*;

const GROUP: &str = "sink";
const LOCK: Duration = Duration::from_secs(2);
const RECORDS: usize = 60;

/// What survives a crash: the records the sink made durable.
type Durable = Arc<Mutex<BTreeSet<i64>>>;

/// Buffers in `put` (the buffer dies with the sink) and writes the buffer out when asked to
/// flush. Each step takes `step` (with 1 ms a crash can fall in the middle of a put or a
/// flush; with none, only between them).
struct BufferingSink {
    durable: Durable,
    buffer: Vec<i64>,
    step: Duration,
}

async fn take(step: Duration) {
    if !step.is_zero() {
        tokio::time::sleep(step).await;
    }
}

#[async_trait]
impl SinkTask for BufferingSink {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        take(self.step).await;
        self.buffer
            .extend(records.iter().map(|r| r.original_id().offset()));
        Ok(())
    }

    async fn pre_commit(&mut self, _: &Delivered) -> Result<Durability, TaskError> {
        take(self.step).await;
        self.durable.lock().unwrap().extend(self.buffer.drain(..));
        Ok(Durability::All)
    }
}

/// The topic, and a group with (or without) a broker dead-letter queue.
fn broker(broker_dlq: bool) -> EmbeddedBroker {
    let broker = EmbeddedBroker::new();
    broker.create_topic("t", 1).unwrap();
    broker.create_topic("dlq.t", 1).unwrap();
    let mut group = GroupConfig::new()
        .auto_offset_reset(AutoOffsetReset::Earliest)
        .record_lock_duration(LOCK);
    if broker_dlq {
        group = group.dead_letter_queue("dlq.t", true);
    }
    broker.set_group_config(GROUP, group).unwrap();
    for i in 0..RECORDS {
        broker
            .produce("t", ProduceRecord::new().value(format!("{i}")))
            .unwrap();
    }
    broker
}

fn sink_driver(
    broker: &EmbeddedBroker,
    durable: &Durable,
    step: Duration,
) -> ShareSinkTask<kafka_share_sink::embedded::EmbeddedShareConsumer> {
    let sink = BufferingSink {
        durable: Arc::clone(durable),
        buffer: Vec::new(),
        step,
    };
    let dlq = broker.dead_letter_queue("t-dlq").unwrap();
    // The sink flushes once a second, as Connect's offset.flush.interval.ms would ask it to.
    let config = DriverConfig::new(["t"])
        .poll_timeout(Duration::from_millis(20))
        .ack_policy(AckPolicy::AfterFlush)
        .commit_policy(CommitPolicy::interval(Duration::from_secs(1)))
        .dead_letter_queue(Arc::new(dlq), true);
    let consumer = broker.share_consumer_with(GROUP, ConsumerOptions::new().max_poll_records(5));
    ShareSinkTask::new(Box::new(sink), consumer, config)
}

/// Runs a sink for `life`, then crashes it: the driver and its consumer are dropped wherever
/// they are, the buffer with them, and the locks they held expire.
async fn live_and_crash(
    broker: &EmbeddedBroker,
    durable: &Durable,
    step: Duration,
    life: Duration,
) {
    let mut driver = sink_driver(broker, durable, step);
    let _ = tokio::time::timeout(life, async {
        driver.initialize().await.expect("initialize");
        loop {
            driver.iteration().await.expect("iteration");
        }
    })
    .await;
    drop(driver);
}

/// The offsets in a dead-letter topic: the connector's carries the record's own value, the
/// broker's names the offset in its `__dlq.errors.offset` header.
fn dead_letters(broker: &EmbeddedBroker, topic: &str) -> BTreeSet<i64> {
    broker
        .read_log(topic, 0)
        .unwrap()
        .iter()
        .filter_map(|r| {
            let text = match r
                .headers()
                .iter()
                .find(|h| h.key() == "__dlq.errors.offset")
            {
                Some(h) => h.value()?.clone(),
                None => r.value()?.clone(),
            };
            std::str::from_utf8(&text).ok()?.parse().ok()
        })
        .collect()
}

/// Every record ended somewhere: in the sink, or in a dead-letter queue. Returns the lost
/// offsets: archived by the group with no copy anywhere.
fn lost(broker: &EmbeddedBroker, durable: &Durable) -> Vec<i64> {
    let durable = durable.lock().unwrap().clone();
    let connector = dead_letters(broker, "t-dlq");
    let group = dead_letters(broker, "dlq.t");
    (0..RECORDS as i64)
        .filter(|o| !durable.contains(o) && !connector.contains(o) && !group.contains(o))
        .collect()
}

/// Plays a crash schedule and returns the records lost.
fn play(lives: Vec<u64>, broker_dlq: bool, step: Duration) -> Vec<i64> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        let broker = broker(broker_dlq);
        let durable = Durable::default();
        for life in lives {
            live_and_crash(&broker, &durable, step, Duration::from_millis(life)).await;
            // The crashed sink's locks run out.
            tokio::time::sleep(LOCK + Duration::from_millis(100)).await;
        }
        // A last sink that does not crash drains what is left and closes.
        let mut last = sink_driver(&broker, &durable, step);
        last.initialize().await.unwrap();
        for _ in 0..200 {
            last.iteration().await.unwrap();
            tokio::time::advance(Duration::from_millis(50)).await;
        }
        last.close().await.unwrap();
        for offset in 0..RECORDS as i64 {
            let view = broker.record_state(GROUP, "t", 0, offset).unwrap();
            assert!(
                matches!(
                    view.state(),
                    RecordState::Acknowledged | RecordState::Archived
                ),
                "offset {offset} unsettled: {:?}",
                view.state()
            );
        }
        lost(&broker, &durable)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Crashes between steps (a put or a flush is never cut in half): the driver alone keeps
    /// every record, with no broker dead-letter queue, since a record on its last delivery is
    /// flushed in the step that puts it.
    #[test]
    fn crashes_between_steps_lose_nothing_even_without_a_broker_queue(
        lives in proptest::collection::vec(50u64..1200, 4..30)
    ) {
        let lost = play(lives, false, Duration::ZERO);
        prop_assert!(lost.is_empty(), "archived without a trace: {:?}", lost);
    }

    /// Crashes anywhere, also in the middle of the put and flush of a last delivery: what the
    /// driver cannot save, the group's broker dead-letter queue does.
    #[test]
    fn crashes_anywhere_lose_nothing_with_a_broker_queue(
        lives in proptest::collection::vec(50u64..1200, 4..30)
    ) {
        let lost = play(lives, true, Duration::from_millis(1));
        prop_assert!(lost.is_empty(), "archived without a trace: {:?}", lost);
    }
}
