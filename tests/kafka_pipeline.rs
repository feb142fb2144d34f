//! The driver's policies over `KafkaShareConsumer` against a real Apache Kafka broker
//! (started by `scripts/test.sh`): acknowledge after flush with RENEW past the lock duration,
//! also by a driver stalled at the flush bound.

mod support;

#[path = "support/flaky_converters.rs"]
#[allow(dead_code)]
mod flaky_converters;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::{
    AckPolicy, AcknowledgementMode, CommitPolicy, Delivered, DriverConfig, Durability, KafkaAdmin,
    KafkaShareConsumer, KafkaShareConsumerConfig, RecordId, ShareConsumer, ShareSinkTask,
    SinkRecord, SinkTask, TaskConfig, TaskError,
};
use rskafka::client::ClientBuilder;
use rskafka::client::partition::{Compression, UnknownTopicHandling};
use rskafka::record::Record;
use tokio::time::Instant;

const LOCK_MS: u64 = 2_000;

async fn setup(test: &str, records: usize) -> Option<(String, String, String)> {
    setup_with_lock(test, records, LOCK_MS).await
}

/// A topic of `records` values `v<i>` (written in batches of 100) and a group reading it
/// from the earliest record with locks of `lock_ms`.
async fn setup_with_lock(
    test: &str,
    records: usize,
    lock_ms: u64,
) -> Option<(String, String, String)> {
    let bootstrap = support::bootstrap(test)?;
    let topic = support::unique(test);
    let group = support::unique(&format!("{test}-group"));
    let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
    admin.create_topic(&topic, 1, 1).await.expect("topic");
    admin
        .set_share_group_config(
            &group,
            &[
                ("share.auto.offset.reset", "earliest"),
                ("share.record.lock.duration.ms", &lock_ms.to_string()),
            ],
        )
        .await
        .expect("group config");
    // As producers write them, in batches: a share fetch acquires whole batches.
    let values = (0..records).map(|i| format!("v{i}").into_bytes());
    support::produce_values(&bootstrap, &topic, 0, values, 100).await;
    Some((bootstrap, topic, group))
}

async fn consumer(bootstrap: &str, group: &str, topic: &str) -> KafkaShareConsumer {
    let config = KafkaShareConsumerConfig::new(bootstrap, group)
        .acknowledgement_mode(AcknowledgementMode::Explicit)
        .fetch_max_wait(Duration::from_millis(100));
    let mut c = KafkaShareConsumer::connect(config).await.expect("connect");
    c.subscribe(vec![topic.to_owned()])
        .await
        .expect("subscribe");
    c
}

#[derive(Debug, Default)]
struct Store {
    /// Every record put, with its delivery count.
    put: Vec<(i64, u16)>,
    buffer: Vec<RecordId>,
    flushed: usize,
}

/// Buffers in put; flushes only once `hold` has passed since its first put.
struct SlowFlushSink {
    store: Arc<Mutex<Store>>,
    first_put: Option<Instant>,
    hold: Duration,
}

#[async_trait]
impl SinkTask for SlowFlushSink {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }
    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        self.first_put.get_or_insert_with(Instant::now);
        let mut store = self.store.lock().unwrap();
        for r in records {
            store.put.push((r.offset(), r.delivery_count()));
            store.buffer.push(r.original_id().clone());
        }
        Ok(())
    }
    async fn pre_commit(&mut self, _: &Delivered) -> Result<Durability, TaskError> {
        if self.first_put.is_none_or(|t| t.elapsed() < self.hold) {
            return Ok(Durability::Nothing);
        }
        let mut store = self.store.lock().unwrap();
        store.flushed += store.buffer.len();
        store.buffer.clear();
        Ok(Durability::All)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_flush_renews_locks_past_the_lock_duration_until_the_flush() {
    after_flush_keeps_the_locks_until_the_flush("after_flush", None).await;
}

/// The same with the driver stalled at the flush bound (`max.awaiting.flush` of 50 records):
/// it polls no more, so its renewals go in commits of their own (they waited for the flush
/// before, and the locks ran out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_flush_stalled_at_the_flush_bound_renews_locks_until_the_flush() {
    after_flush_keeps_the_locks_until_the_flush("after_flush_stalled", Some(50)).await;
}

/// 50 records held for a flush three locks away, by a driver that polls on (`bound` none) or
/// stops polling at `bound` records awaiting the flush: none goes to a rival member, each
/// is put once and accepted at the flush.
async fn after_flush_keeps_the_locks_until_the_flush(test: &str, bound: Option<usize>) {
    let Some((bootstrap, topic, group)) = setup(test, 50).await else {
        return;
    };
    let store = Arc::new(Mutex::new(Store::default()));
    let sink = SlowFlushSink {
        store: Arc::clone(&store),
        first_put: None,
        hold: Duration::from_millis(LOCK_MS * 3),
    };
    let mut config = DriverConfig::new([topic.clone()])
        .poll_timeout(Duration::from_millis(200))
        .ack_policy(AckPolicy::AfterFlush)
        .commit_policy(CommitPolicy::interval(Duration::from_millis(300)));
    if let Some(records) = bound {
        config = config.max_awaiting_flush(records, 0);
    }
    let sink_consumer = consumer(&bootstrap, &group, &topic).await;
    assert!(sink_consumer.supports_renew(), "Kafka 4.2+ supports RENEW");
    let mut driver = ShareSinkTask::new(Box::new(sink), sink_consumer, config);
    driver.initialize().await.expect("initialize");
    let deadline = Instant::now() + Duration::from_secs(60);
    while driver.awaiting_flush() < 50 {
        assert!(
            Instant::now() < deadline,
            "records not delivered: {:?}",
            driver.metrics()
        );
        driver.iteration().await.expect("iteration");
    }
    // A rival member of the same group: it must get nothing while the sink holds the locks.
    let mut rival = consumer(&bootstrap, &group, &topic).await;
    let mut accepted = 0;
    while accepted < 50 {
        assert!(
            Instant::now() < deadline,
            "not done in time: {:?}",
            store.lock().unwrap()
        );
        let report = driver.iteration().await.expect("iteration");
        accepted += report.accepted;
        let stolen = rival
            .poll(Duration::from_millis(50))
            .await
            .expect("rival poll");
        assert!(
            stolen.is_empty(),
            "a held record went to another member: {:?} (after {:?})",
            stolen.iter().map(|r| r.offset()).collect::<Vec<_>>(),
            driver.metrics()
        );
    }
    // Released before close, whose pre_commit takes the same lock.
    {
        let store = store.lock().unwrap();
        assert_eq!(store.flushed, 50);
        assert_eq!(store.put.len(), 50, "each record put once: {:?}", store.put);
        assert!(
            store.put.iter().all(|(_, count)| *count == 1),
            "never redelivered: {:?}",
            store.put
        );
    }
    let metrics = driver.metrics();
    assert!(metrics.records_renewed >= 50 * 2, "{metrics:?}");
    assert_eq!(metrics.lock_losses, 0, "{metrics:?}");
    driver.close().await.expect("close");
    // Nothing left for anyone: all 50 were accepted.
    tokio::time::sleep(Duration::from_millis(LOCK_MS)).await;
    let left = rival
        .poll(Duration::from_millis(500))
        .await
        .expect("rival poll");
    assert!(
        left.is_empty(),
        "{:?}",
        left.iter().map(|r| r.offset()).collect::<Vec<_>>()
    );
    rival
        .close(Duration::from_secs(10))
        .await
        .expect("close rival");
}

struct Collect(Arc<Mutex<Vec<SinkRecord>>>);

#[async_trait]
impl SinkTask for Collect {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }
    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        self.0.lock().unwrap().extend_from_slice(records);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_the_converter_rejects_lands_in_the_dead_letter_topic_byte_for_byte() {
    use kafka_share_sink::{ConnectorConfig, Plugins};
    let Some(bootstrap) = support::bootstrap("dlq_pipeline") else {
        return;
    };
    let topic = support::unique("dlq_pipeline");
    let group = support::unique("dlq_pipeline-group");
    let dlq_topic = format!("{topic}-dlq");
    let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
    admin.create_topic(&topic, 1, 1).await.expect("topic");
    for g in [&group, &format!("{group}-reader")] {
        admin
            .set_share_group_config(g, &[("share.auto.offset.reset", "earliest")])
            .await
            .expect("group config");
    }
    let bad_key = vec![0u8, 159, 146, 150];
    let bad_value = b"{\"sku\": \xff\xfe}".to_vec();
    let timestamp = chrono::DateTime::from_timestamp_millis(1_700_000_000_123).unwrap();
    let headers: BTreeMap<String, Vec<u8>> = [
        ("binary".to_owned(), vec![0u8, 255, 7]),
        ("empty".to_owned(), Vec::new()),
        ("trace".to_owned(), b"abc".to_vec()),
    ]
    .into_iter()
    .collect();
    let records = vec![
        Record {
            key: None,
            value: Some(br#"{"sku":"a-1"}"#.to_vec()),
            headers: BTreeMap::new(),
            timestamp,
        },
        Record {
            key: Some(bad_key.clone()),
            value: Some(bad_value.clone()),
            headers: headers.clone(),
            timestamp,
        },
        Record {
            key: None,
            value: Some(br#"{"sku":"a-3"}"#.to_vec()),
            headers: BTreeMap::new(),
            timestamp,
        },
    ];
    let client = ClientBuilder::new(vec![bootstrap.clone()])
        .build()
        .await
        .expect("rskafka");
    client
        .partition_client(topic.clone(), 0, UnknownTopicHandling::Retry)
        .await
        .expect("partition client")
        .produce(records, Compression::NoCompression)
        .await
        .expect("produce");

    let config = ConnectorConfig::builder("orders-sink")
        .bootstrap_servers(bootstrap.clone())
        .topics([topic.clone()])
        .share_group_id(group.clone())
        .task_id(2)
        .value_converter(
            "org.apache.kafka.connect.json.JsonConverter",
            &[("schemas.enable", "false")],
        )
        .errors_tolerance(kafka_share_sink::ErrorTolerance::All)
        .dead_letter_queue_topic(dlq_topic.clone())
        .dead_letter_queue_replication_factor(1)
        .dead_letter_queue_context_headers(true)
        .build()
        .expect("config");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut driver = ShareSinkTask::connect(
        &config,
        &Plugins::new(),
        Box::new(Collect(Arc::clone(&seen))),
    )
    .await
    .expect("connect");
    driver.initialize().await.expect("initialize");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut dead_lettered = 0;
    while seen.lock().unwrap().len() < 2 || dead_lettered < 1 {
        assert!(
            Instant::now() < deadline,
            "not done: {:?}",
            driver.metrics()
        );
        dead_lettered += driver.iteration().await.expect("iteration").dead_lettered;
    }
    driver.close().await.expect("close");
    assert_eq!(driver.metrics().records_dead_lettered, 1);

    // Read the dead-letter topic back with a share consumer of our own.
    let mut reader = consumer(&bootstrap, &format!("{group}-reader"), &dlq_topic).await;
    let mut letters = Vec::new();
    while letters.is_empty() {
        assert!(Instant::now() < deadline, "nothing in {dlq_topic}");
        letters = reader.poll(Duration::from_millis(500)).await.expect("poll");
    }
    for r in &letters {
        reader
            .acknowledge(r, kafka_share_sink::AcknowledgeType::Accept)
            .unwrap();
    }
    reader
        .close(Duration::from_secs(10))
        .await
        .expect("close reader");
    assert_eq!(letters.len(), 1);
    let letter = &letters[0];
    assert_eq!(letter.key().map(|k| k.to_vec()), Some(bad_key));
    assert_eq!(letter.value().map(|v| v.to_vec()), Some(bad_value));
    assert_eq!(letter.timestamp(), 1_700_000_000_123);
    let got: Vec<(String, Option<Vec<u8>>)> = letter
        .headers()
        .iter()
        .map(|h| (h.key().to_owned(), h.value().map(|v| v.to_vec())))
        .collect();
    let mut want: Vec<(String, Option<Vec<u8>>)> =
        headers.into_iter().map(|(k, v)| (k, Some(v))).collect();
    for (k, v) in [
        ("__connect.errors.topic", topic.as_str()),
        ("__connect.errors.partition", "0"),
        ("__connect.errors.offset", "1"),
        ("__connect.errors.connector.name", "orders-sink"),
        ("__connect.errors.task.id", "2"),
        ("__connect.errors.stage", "VALUE_CONVERTER"),
        (
            "__connect.errors.class.name",
            "org.apache.kafka.connect.json.JsonConverter",
        ),
        (
            "__connect.errors.exception.class.name",
            "org.apache.kafka.connect.errors.DataException",
        ),
        (
            "__connect.errors.exception.message",
            "Converting byte[] to Kafka Connect data failed due to serialization error: ",
        ),
    ] {
        want.push((k.to_owned(), Some(v.as_bytes().to_vec())));
    }
    assert_eq!(
        &got[..want.len()],
        &want[..],
        "original headers, then context"
    );
    let rest: Vec<&str> = got[want.len()..].iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        rest,
        vec![
            "__connect.errors.exception.stacktrace",
            "__connect.errors.reason"
        ]
    );
    assert_eq!(
        got.last().and_then(|(_, v)| v.as_deref()),
        Some(&b"conversion"[..])
    );
}

/// Counts what it is given, writes nothing.
struct Counting(Arc<Mutex<usize>>);

#[async_trait]
impl SinkTask for Counting {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }
    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        *self.0.lock().unwrap() += records.len();
        Ok(())
    }
}

/// With the defaults, acknowledgements ride on the fetches the next polls make: a
/// ShareAcknowledge of their own is the exception (a commit, or acknowledgements no fetch
/// carried in time), not a round trip per batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_defaults_acknowledgements_ride_on_fetches() {
    const RECORDS: usize = 20_000;
    let Some((bootstrap, topic, group)) = setup("acks_ride_on_fetches", RECORDS).await else {
        return;
    };
    let consumer = KafkaShareConsumer::connect(KafkaShareConsumerConfig::new(&bootstrap, &group))
        .await
        .expect("connect");
    let put = Arc::new(Mutex::new(0));
    let mut driver = ShareSinkTask::new(
        Box::new(Counting(Arc::clone(&put))),
        consumer,
        DriverConfig::new([topic.as_str()]),
    );
    driver.initialize().await.expect("initialize");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut accepted = 0;
    while accepted < RECORDS {
        assert!(
            Instant::now() < deadline,
            "{accepted} of {RECORDS} accepted in 60 s"
        );
        accepted += driver.iteration().await.expect("iteration").accepted;
    }
    // One more poll carries the last batch's acknowledgements.
    driver.iteration().await.expect("iteration");
    let counts = driver.consumer().request_counts();
    let commits = driver.metrics().commits;
    driver.close().await.expect("close");
    println!("{counts:?}, {commits} commits");
    assert_eq!(*put.lock().unwrap(), RECORDS, "each record put once");
    let acknowledged = counts.offsets_acknowledged_on_fetch + counts.offsets_acknowledged_alone;
    assert!(
        acknowledged >= RECORDS as u64,
        "every record acknowledged before close: {counts:?}"
    );
    assert!(
        counts.offsets_acknowledged_on_fetch * 10 >= acknowledged * 9,
        "at least 90 % of the acknowledgements rode on fetches: {counts:?}"
    );
    assert!(
        counts.share_acknowledges <= commits + 2,
        "a ShareAcknowledge of its own only for a commit (and at most two that waited too \
         long for a fetch): {counts:?}, {commits} commits"
    );
}

/// The value converter of the conversion-retry test: [`flaky_converters::SlowOne`], saying
/// when it is first called (the driver's poll has returned its records by then).
#[derive(Debug)]
struct SaysStarted {
    inner: flaky_converters::SlowOne,
    started: Arc<std::sync::atomic::AtomicBool>,
}

impl kafka_share_sink::convert::Converter for SaysStarted {
    fn to_sink_data(
        &self,
        topic: &str,
        headers: &kafka_share_sink::Headers,
        data: Option<&bytes::Bytes>,
    ) -> Result<kafka_share_sink::convert::SchemaAndValue, kafka_share_sink::convert::ConvertError>
    {
        self.started
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.inner.to_sink_data(topic, headers, data)
    }
}

/// A conversion retried for about 19 s, past three locks of 6 s: the driver renews the
/// poll's records meanwhile, so a member that joins the group during the retries gets none of
/// them, and each record is put once, on its first delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversion_retries_past_the_lock_keep_the_poll_from_other_members() {
    use std::sync::atomic::{AtomicBool, Ordering};

    use kafka_share_sink::{Converters, ErrorHandling};
    const RECORDS: usize = 10;
    const LOCK: u64 = 6_000;
    // Written in one batch, which one ShareFetch acquires whole: the driver's first poll
    // has every record.
    let Some((bootstrap, topic, group)) = setup_with_lock("conversion_retry", RECORDS, LOCK).await
    else {
        return;
    };
    let started = Arc::new(AtomicBool::new(false));
    // v3 fails six times: retried after 0.3, 0.6, 1.2, 2.4, 4.8 and 9.6 s.
    let converter = SaysStarted {
        inner: flaky_converters::SlowOne::new("v3", 6),
        started: Arc::clone(&started),
    };
    let config = DriverConfig::new([topic.clone()])
        .poll_timeout(Duration::from_millis(500))
        .commit_policy(CommitPolicy::every_iteration())
        .converters(Converters::byte_array().with_value(Arc::new(converter)))
        .errors(ErrorHandling::new().retry_timeout(Some(Duration::from_secs(60))));
    let sink_consumer = consumer(&bootstrap, &group, &topic).await;
    assert!(sink_consumer.supports_renew(), "Kafka 4.2+ supports RENEW");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut driver =
        ShareSinkTask::new(Box::new(Collect(Arc::clone(&seen))), sink_consumer, config);
    driver.initialize().await.expect("initialize");
    // A rival member joins once the driver's poll has its records and a lock has run out,
    // and polls until the driver is done.
    let done = Arc::new(AtomicBool::new(false));
    let rival = tokio::spawn({
        let (bootstrap, group, topic) = (bootstrap.clone(), group.clone(), topic.clone());
        let (started, done) = (Arc::clone(&started), Arc::clone(&done));
        async move {
            while !started.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(Duration::from_millis(LOCK * 3 / 2)).await;
            let mut rival = consumer(&bootstrap, &group, &topic).await;
            let mut stolen = Vec::new();
            while !done.load(Ordering::SeqCst) {
                let records = match rival.poll(Duration::from_millis(200)).await {
                    Ok(records) => records,
                    Err(e) => {
                        // A join or coordinator hiccup: not what this test is about.
                        eprintln!("rival poll: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                stolen.extend(records.iter().map(|r| r.offset()));
                for record in &records {
                    // Released, so that the driver can still finish if the locks were lost.
                    rival
                        .acknowledge(record, kafka_share_sink::AcknowledgeType::Release)
                        .expect("release");
                }
            }
            rival
                .close(Duration::from_secs(10))
                .await
                .expect("close rival");
            stolen
        }
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    while seen.lock().unwrap().len() < RECORDS {
        assert!(
            Instant::now() < deadline,
            "records not put in time: {:?}",
            driver.metrics()
        );
        let report = driver.iteration().await.expect("iteration");
        if report.records > 0 {
            assert!(report.committed, "{report:?}");
        }
    }
    done.store(true, Ordering::SeqCst);
    let stolen = rival.await.expect("rival");
    let put: Vec<(i64, u16)> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| (r.offset(), r.delivery_count()))
        .collect();
    let expected: Vec<(i64, u16)> = (0..RECORDS as i64).map(|o| (o, 1)).collect();
    assert_eq!(put, expected, "each record put once, on its first delivery");
    assert!(
        stolen.is_empty(),
        "records went to another member: {stolen:?}"
    );
    let metrics = driver.metrics();
    assert_eq!(
        (metrics.retries, metrics.lock_losses),
        (6, 0),
        "{metrics:?}"
    );
    assert!(metrics.records_renewed >= RECORDS as u64 * 3, "{metrics:?}");
    driver.close().await.expect("close");
}
