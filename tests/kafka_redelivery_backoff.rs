//! The redelivery backoff against a real Apache Kafka broker (started by `scripts/test.sh`):
//! a target down for 30 s, with the broker's default delivery-count limit of 5 (and a lock
//! shorter than the holds, renewed), costs no record: every record is written once in the
//! end, none is archived or dead-lettered. The topic holds eight polls' worth, more than one
//! poll, so that records wait in the group (and may be fetched ahead) while a batch is held.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::{
    AcknowledgementMode, DriverConfig, KafkaAdmin, KafkaShareConsumer, KafkaShareConsumerConfig,
    ShareConsumer, ShareSinkTask, SinkRecord, SinkTask, TaskConfig, TaskError,
};
use tokio::time::Instant;

const RECORDS: usize = 400;
const OUTAGE: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
struct Seen {
    /// Each failed put: its delivery counts.
    failed: Vec<u16>,
    /// Offset → how many times it was written, and the delivery count of the last write.
    written: BTreeMap<i64, (usize, u16)>,
}

/// A target that is down for `OUTAGE` from its first `put`.
struct DownFor30s {
    down_since: Option<Instant>,
    seen: Arc<Mutex<Seen>>,
}

#[async_trait]
impl SinkTask for DownFor30s {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        let since = *self.down_since.get_or_insert_with(Instant::now);
        let mut seen = self.seen.lock().unwrap();
        if since.elapsed() < OUTAGE {
            seen.failed
                .extend(records.iter().map(SinkRecord::delivery_count));
            return Err(TaskError::retriable("target down"));
        }
        for r in records {
            let entry = seen.written.entry(r.offset()).or_default();
            entry.0 += 1;
            entry.1 = r.delivery_count();
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_down_for_30_s_loses_nothing_at_the_default_delivery_limit() {
    let test = "redelivery_backoff";
    let Some(bootstrap) = support::bootstrap(test) else {
        return;
    };
    let topic = support::unique(test);
    let group = support::unique(&format!("{test}-group"));
    let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
    admin.create_topic(&topic, 1, 1).await.expect("topic");
    // Only the start offset: the delivery-count limit and the lock are the broker's.
    admin
        .set_share_group_config(&group, &[("share.auto.offset.reset", "earliest")])
        .await
        .expect("group config");
    let values = (0..RECORDS).map(|i| format!("v{i}").into_bytes());
    support::produce_values(&bootstrap, &topic, 0, values, 10).await;

    let config = KafkaShareConsumerConfig::new(&bootstrap, &group)
        .acknowledgement_mode(AcknowledgementMode::Explicit)
        .max_poll_records(50)
        .fetch_max_wait(Duration::from_millis(100));
    let mut consumer = KafkaShareConsumer::connect(config).await.expect("connect");
    consumer
        .subscribe(vec![topic.clone()])
        .await
        .expect("subscribe");
    assert!(consumer.supports_renew(), "Kafka 4.2+ supports RENEW");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let sink = DownFor30s {
        down_since: None,
        seen: Arc::clone(&seen),
    };
    // The driver's defaults otherwise: redelivery.backoff.ms 3000, max 60000.
    let driver_config = DriverConfig::new([topic.clone()]).poll_timeout(Duration::from_millis(200));
    let mut driver = ShareSinkTask::new(Box::new(sink), consumer, driver_config);
    driver.initialize().await.expect("initialize");
    assert_eq!(
        driver.consumer().delivery_count_limit().unwrap_or(5),
        5,
        "the broker's default delivery-count limit"
    );

    let deadline = Instant::now() + Duration::from_secs(150);
    while seen.lock().unwrap().written.len() < RECORDS {
        assert!(
            Instant::now() < deadline,
            "not every record written: {:?} {:?}",
            seen.lock().unwrap(),
            driver.metrics()
        );
        driver.iteration().await.expect("iteration");
    }
    // The test broker's lock (5 s) is shorter than the later holds: they live on RENEW.
    let lock = driver.consumer().acquisition_lock_timeout().expect("lock");
    assert!(lock < Duration::from_secs(12), "{lock:?}");
    let metrics = driver.metrics();
    driver.close().await.expect("close");

    {
        let seen = seen.lock().unwrap();
        assert!(
            seen.written.values().all(|(times, _)| *times == 1),
            "each record written once: {seen:?}"
        );
        assert!(!seen.failed.is_empty(), "the outage was seen");
        assert!(
            seen.failed.iter().all(|count| *count < 5),
            "no put failed on the last delivery: {:?}",
            seen.failed
        );
    }
    assert_eq!(metrics.records_released_at_limit, 0, "{metrics:?}");
    assert_eq!(metrics.records_dead_lettered, 0, "{metrics:?}");
    assert_eq!(metrics.records_rejected, 0, "{metrics:?}");
    assert_eq!(metrics.lock_losses, 0, "{metrics:?}");
    assert!(metrics.records_renewed > 0, "{metrics:?}");

    // The group agrees that nothing is left to do (KIP-1226 lag; the start offset may trail
    // records done past it). None was archived: every record reached the sink, which an
    // archived record never does.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let offsets = admin.share_group_offsets(&group).await.expect("offsets");
        let partition = offsets
            .iter()
            .find(|p| p.topic == topic && p.partition == 0)
            .expect("the group has state for the partition");
        if partition.lag == Some(0) {
            break;
        }
        assert!(Instant::now() < deadline, "group offsets: {offsets:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Each `put`: when, and its records' (offset, delivery count).
type Puts = Arc<Mutex<Vec<(Instant, Vec<(i64, u16)>)>>>;

/// A sink whose process dies in its first `put` (the put never returns; the test drops the
/// driver, which closes its connections) or, alive, records each `put`.
struct Recorder {
    dies: bool,
    puts: Puts,
}

#[async_trait]
impl SinkTask for Recorder {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        self.puts.lock().unwrap().push((
            Instant::now(),
            records
                .iter()
                .map(|r| (r.offset(), r.delivery_count()))
                .collect(),
        ));
        if self.dies {
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

async fn recorder_driver(
    bootstrap: &str,
    group: &str,
    topic: &str,
    dies: bool,
) -> (ShareSinkTask<KafkaShareConsumer>, Puts) {
    let config = KafkaShareConsumerConfig::new(bootstrap, group)
        .acknowledgement_mode(AcknowledgementMode::Explicit)
        .fetch_max_wait(Duration::from_millis(100));
    let mut consumer = KafkaShareConsumer::connect(config).await.expect("connect");
    consumer
        .subscribe(vec![topic.to_owned()])
        .await
        .expect("subscribe");
    let puts = Arc::default();
    let sink = Recorder {
        dies,
        puts: Arc::clone(&puts),
    };
    let driver_config =
        DriverConfig::new([topic.to_owned()]).poll_timeout(Duration::from_millis(200));
    let mut driver = ShareSinkTask::new(Box::new(sink), consumer, driver_config);
    driver.initialize().await.expect("initialize");
    (driver, puts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_crash_redelivered_records_are_put_first_in_small_batches() {
    let test = "redelivered_after_crash";
    let Some(bootstrap) = support::bootstrap(test) else {
        return;
    };
    let topic = support::unique(test);
    let group = support::unique(&format!("{test}-group"));
    let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
    admin.create_topic(&topic, 1, 1).await.expect("topic");
    admin
        .set_share_group_config(&group, &[("share.auto.offset.reset", "earliest")])
        .await
        .expect("group config");
    support::produce_values(
        &bootstrap,
        &topic,
        0,
        (0..8).map(|i| format!("v{i}").into_bytes()),
        8,
    )
    .await;

    // The first process dies in the middle of putting what it polled.
    let (mut dying, died_in) = recorder_driver(&bootstrap, &group, &topic, true).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while died_in.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "nothing polled");
        let _ = tokio::time::timeout(Duration::from_secs(1), dying.iteration()).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), dying.iteration()).await;
    let first: Vec<(i64, u16)> = died_in.lock().unwrap()[0].1.clone();
    // Dropped: its connections close and the broker releases what it held (Kafka 4.2+).
    drop(dying);

    let (mut driver, puts) = recorder_driver(&bootstrap, &group, &topic, false).await;
    let deadline = Instant::now() + Duration::from_secs(90);
    while puts
        .lock()
        .unwrap()
        .iter()
        .map(|(_, b)| b.len())
        .sum::<usize>()
        < 8
    {
        assert!(
            Instant::now() < deadline,
            "not every record written: {:?} {:?}",
            puts.lock().unwrap(),
            driver.metrics()
        );
        driver.iteration().await.expect("iteration");
    }
    let metrics = driver.metrics();
    driver.close().await.expect("close");

    let puts = puts.lock().unwrap();
    // Those the first process died with (and any it held unpolled) come back on their second
    // delivery and go first, at most half a poll of eight per batch.
    let redelivered: Vec<i64> = puts
        .iter()
        .flat_map(|(_, batch)| batch.iter().copied())
        .filter(|(_, count)| *count > 1)
        .map(|(offset, _)| offset)
        .collect();
    for (offset, _) in &first {
        assert!(
            redelivered.contains(offset),
            "{offset} redelivered: {puts:?}"
        );
    }
    assert_eq!(
        metrics.records_put_first,
        redelivered.len() as u64,
        "{metrics:?}"
    );
    // A batch holds redelivered records or first deliveries, never both, and the first put
    // is of redelivered ones.
    assert!(puts[0].1.iter().all(|(_, count)| *count == 2), "{puts:?}");
    for (_, batch) in puts.iter() {
        let redelivered = batch.iter().filter(|(_, count)| *count > 1).count();
        assert!(redelivered == 0 || redelivered == batch.len(), "{puts:?}");
        if redelivered > 0 {
            assert!(batch.len() <= 4, "{puts:?}");
        }
    }
    let mut written: Vec<i64> = puts
        .iter()
        .flat_map(|(_, batch)| batch.iter().map(|(offset, _)| *offset))
        .collect();
    written.sort_unstable();
    assert_eq!(written, (0..8).collect::<Vec<_>>(), "each written once");
    assert_eq!(metrics.records_released_at_limit, 0, "{metrics:?}");
}
