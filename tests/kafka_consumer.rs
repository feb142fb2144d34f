//! `KafkaShareConsumer` against a real Apache Kafka broker (started by `scripts/test.sh`).
//!
//! Each test makes its own topic and group. Test data is produced with rskafka.

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_share_sink::{
    AcknowledgeType, AcknowledgementMode, AcquisitionSizing, ConsumerRecord, DriverConfig,
    KafkaAdmin, KafkaShareConsumer, KafkaShareConsumerConfig, ShareAcquireMode, ShareConsumer,
    ShareSinkTask, SinkRecord, SinkTask, TaskConfig, TaskError,
};
use rskafka::client::partition::Compression;
use rskafka::record::Record;

const LOCK_MS: u64 = 2_000;

struct Fixture {
    bootstrap: String,
    topic: String,
    group: String,
}

/// A topic with `partitions` partitions and a group reading it from the earliest offset with
/// a short lock, or `None` when the broker tests are skipped.
async fn fixture(test: &str, partitions: i32) -> Option<Fixture> {
    fixture_with_lock(test, partitions, LOCK_MS).await
}

async fn fixture_with_lock(test: &str, partitions: i32, lock_ms: u64) -> Option<Fixture> {
    fixture_with(test, partitions, lock_ms, &[]).await
}

async fn fixture_with(
    test: &str,
    partitions: i32,
    lock_ms: u64,
    extra: &[(&str, &str)],
) -> Option<Fixture> {
    let bootstrap = support::bootstrap(test)?;
    let topic = support::unique(test);
    let group = support::unique(&format!("{test}-group"));
    let admin = KafkaAdmin::connect(&bootstrap)
        .await
        .expect("admin connects");
    admin
        .create_topic(&topic, partitions, 1)
        .await
        .expect("topic created");
    let lock = lock_ms.to_string();
    let mut configs = vec![
        ("share.auto.offset.reset", "earliest"),
        ("share.record.lock.duration.ms", lock.as_str()),
    ];
    configs.extend_from_slice(extra);
    admin
        .set_share_group_config(&group, &configs)
        .await
        .expect("group configured");
    Some(Fixture {
        bootstrap,
        topic,
        group,
    })
}

fn record(i: usize) -> Record {
    Record {
        key: Some(format!("key-{i}").into_bytes()),
        value: Some(format!("value-{i}").into_bytes()),
        headers: BTreeMap::new(),
        timestamp: chrono::Utc::now(),
    }
}

async fn produce(f: &Fixture, partition: i32, records: Vec<Record>, compression: Compression) {
    let partition = support::rskafka_partition(&f.bootstrap, &f.topic, partition).await;
    for chunk in records.chunks(500) {
        partition
            .produce(chunk.to_vec(), compression)
            .await
            .expect("produce");
    }
}

async fn consumer(f: &Fixture, mode: AcknowledgementMode) -> KafkaShareConsumer {
    consumer_with(f, |config| config.acknowledgement_mode(mode)).await
}

/// A consumer of the fixture's topic with `tweak` applied to its settings (200 ms fetch wait).
async fn consumer_with(
    f: &Fixture,
    tweak: impl FnOnce(KafkaShareConsumerConfig) -> KafkaShareConsumerConfig,
) -> KafkaShareConsumer {
    let config = tweak(
        KafkaShareConsumerConfig::new(&f.bootstrap, &f.group)
            .fetch_max_wait(Duration::from_millis(200)),
    );
    let mut c = KafkaShareConsumer::connect(config)
        .await
        .expect("consumer connects");
    c.subscribe(vec![f.topic.clone()]).await.expect("subscribe");
    c
}

/// A consumer in explicit mode acquiring at most `max.poll.records` (500) per fetch, as
/// Java's with `share.acquire.mode=record_limit`, and never ahead of a poll.
async fn consumer_record_limit(f: &Fixture) -> KafkaShareConsumer {
    consumer_with(f, |config| {
        config
            .acknowledgement_mode(AcknowledgementMode::Explicit)
            .share_acquire_mode(ShareAcquireMode::RecordLimit)
    })
    .await
}

/// Polls until `n` records arrived or `within` passed, acknowledging each with `ack`.
async fn drain(
    c: &mut KafkaShareConsumer,
    n: usize,
    within: Duration,
    ack: AcknowledgeType,
) -> Vec<ConsumerRecord> {
    let deadline = tokio::time::Instant::now() + within;
    let mut got = Vec::new();
    while got.len() < n && tokio::time::Instant::now() < deadline {
        let records = c.poll(Duration::from_millis(500)).await.expect("poll");
        for r in &records {
            c.acknowledge(r, ack).expect("acknowledge");
        }
        got.extend(records);
    }
    got
}

fn ids(records: &[ConsumerRecord]) -> Vec<(i32, i64)> {
    records
        .iter()
        .map(|r| (r.partition(), r.offset()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumes_ten_thousand_records_accepted_exactly_once() {
    let Some(f) = fixture("accept_once", 3).await else {
        return;
    };
    for p in 0..3 {
        produce(
            &f,
            p,
            (0..3334).map(record).collect(),
            Compression::NoCompression,
        )
        .await;
    }
    let mut c = consumer(&f, AcknowledgementMode::Explicit).await;
    let got = drain(
        &mut c,
        10_002,
        Duration::from_secs(60),
        AcknowledgeType::Accept,
    )
    .await;
    let results = c
        .commit_sync(Duration::from_secs(10))
        .await
        .expect("commit");
    assert!(results.is_success(), "{results:?}");
    let distinct: HashSet<(i32, i64)> = ids(&got).into_iter().collect();
    assert_eq!(got.len(), 10_002, "every record once");
    assert_eq!(distinct.len(), 10_002, "no record twice");
    assert!(got.iter().all(|r| r.delivery_count() == 1));
    assert!(c.group_metadata().member_epoch() > 0);
    assert_eq!(
        c.acquisition_lock_timeout(),
        Some(Duration::from_millis(LOCK_MS))
    );
    let again = drain(&mut c, 1, Duration::from_secs(3), AcknowledgeType::Accept).await;
    assert!(
        again.is_empty(),
        "accepted records never come back: {:?}",
        ids(&again)
    );
    c.close(Duration::from_secs(10)).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_redelivers_with_count_two_and_reject_never_again() {
    let Some(f) = fixture("release_reject", 1).await else {
        return;
    };
    produce(
        &f,
        0,
        (0..4).map(record).collect(),
        Compression::NoCompression,
    )
    .await;
    let mut c = consumer(&f, AcknowledgementMode::Explicit).await;
    let first = drain(&mut c, 4, Duration::from_secs(30), AcknowledgeType::Accept).await;
    // Replace the accepts before they are sent: two released, two rejected.
    for r in &first {
        let ack = if r.offset() % 2 == 0 {
            AcknowledgeType::Release
        } else {
            AcknowledgeType::Reject
        };
        c.acknowledge(r, ack).unwrap();
    }
    assert!(
        c.commit_sync(Duration::from_secs(10))
            .await
            .unwrap()
            .is_success()
    );
    let again = drain(&mut c, 2, Duration::from_secs(30), AcknowledgeType::Accept).await;
    assert_eq!(
        ids(&again),
        vec![(0, 0), (0, 2)],
        "only the released records come back"
    );
    assert!(again.iter().all(|r| r.delivery_count() == 2));
    c.commit_sync(Duration::from_secs(10)).await.unwrap();
    assert!(
        drain(&mut c, 1, Duration::from_secs(3), AcknowledgeType::Accept)
            .await
            .is_empty()
    );
    c.close(Duration::from_secs(10)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_expiry_redelivers_to_another_member_and_the_late_commit_fails() {
    let Some(f) = fixture("lock_expiry", 1).await else {
        return;
    };
    produce(
        &f,
        0,
        (0..3).map(record).collect(),
        Compression::NoCompression,
    )
    .await;
    let mut slow = consumer(&f, AcknowledgementMode::Explicit).await;
    let held = slow.poll(Duration::from_secs(20)).await.unwrap();
    assert!(!held.is_empty());
    tokio::time::sleep(Duration::from_millis(LOCK_MS + 1_000)).await;
    let mut other = consumer(&f, AcknowledgementMode::Explicit).await;
    let taken = drain(
        &mut other,
        held.len(),
        Duration::from_secs(30),
        AcknowledgeType::Accept,
    )
    .await;
    assert_eq!(ids(&taken), ids(&held));
    assert!(taken.iter().all(|r| r.delivery_count() == 2));
    for r in &held {
        slow.acknowledge(r, AcknowledgeType::Accept).unwrap();
    }
    let results = slow.commit_sync(Duration::from_secs(10)).await.unwrap();
    let (_, error) = results
        .failures()
        .next()
        .expect("the late acknowledgement fails");
    assert!(error.is_lock_lost(), "{error}");
    other.commit_sync(Duration::from_secs(10)).await.unwrap();
    slow.close(Duration::from_secs(10)).await.unwrap();
    other.close(Duration::from_secs(10)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_makes_unacknowledged_records_available_at_once() {
    let Some(f) = fixture_with_lock("close_releases", 1, 20_000).await else {
        return;
    };
    produce(
        &f,
        0,
        (0..5).map(record).collect(),
        Compression::NoCompression,
    )
    .await;
    let mut holder = consumer(&f, AcknowledgementMode::Explicit).await;
    let held = holder.poll(Duration::from_secs(20)).await.unwrap();
    assert!(!held.is_empty());
    // Accept the first; close must send that and release the rest.
    holder
        .acknowledge(&held[0], AcknowledgeType::Accept)
        .unwrap();
    holder.close(Duration::from_secs(10)).await.unwrap();
    let started = tokio::time::Instant::now();
    let mut taker = consumer(&f, AcknowledgementMode::Explicit).await;
    let got = drain(
        &mut taker,
        held.len() - 1,
        Duration::from_secs(15),
        AcknowledgeType::Accept,
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "well before the 20 s lock would expire"
    );
    assert_eq!(
        ids(&got),
        ids(&held[1..]),
        "released records, not the accepted one"
    );
    assert!(got.iter().all(|r| r.delivery_count() == 2));
    taker.close(Duration::from_secs(10)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_null_values_headers_timestamps_and_every_codec_arrive_intact() {
    let Some(f) = fixture("payloads", 1).await else {
        return;
    };
    let ts = chrono::DateTime::from_timestamp_millis(1_700_000_000_123).unwrap();
    let mut expected = Vec::new();
    for (i, compression) in [
        Compression::NoCompression,
        Compression::Gzip,
        Compression::Lz4,
        Compression::Snappy,
        Compression::Zstd,
    ]
    .into_iter()
    .enumerate()
    {
        let records: Vec<Record> = (0..3)
            .map(|j| Record {
                key: (j != 1).then(|| format!("k{i}-{j}").into_bytes()),
                value: (j != 2).then(|| vec![b'x'; 100 * (j + 1)]),
                headers: [
                    ("codec".to_owned(), format!("{compression:?}").into_bytes()),
                    ("empty".to_owned(), Vec::new()),
                ]
                .into_iter()
                .collect(),
                timestamp: ts,
            })
            .collect();
        expected.extend(records.clone());
        produce(&f, 0, records, compression).await;
    }
    let mut c = consumer(&f, AcknowledgementMode::Explicit).await;
    let got = drain(
        &mut c,
        expected.len(),
        Duration::from_secs(30),
        AcknowledgeType::Accept,
    )
    .await;
    assert_eq!(got.len(), expected.len());
    for (r, e) in got.iter().zip(&expected) {
        assert_eq!(r.key().map(|k| k.to_vec()), e.key, "key at {}", r.offset());
        assert_eq!(
            r.value().map(|v| v.to_vec()),
            e.value,
            "value at {}",
            r.offset()
        );
        let headers: HashMap<String, Option<Vec<u8>>> = r
            .headers()
            .iter()
            .map(|h| (h.key().to_owned(), h.value().map(|v| v.to_vec())))
            .collect();
        let want: HashMap<String, Option<Vec<u8>>> = e
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect();
        assert_eq!(headers, want, "headers at {}", r.offset());
        assert_eq!(r.timestamp(), 1_700_000_000_123);
    }
    c.commit_sync(Duration::from_secs(10)).await.unwrap();
    c.close(Duration::from_secs(10)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn implicit_mode_accepts_on_the_next_poll() {
    let Some(f) = fixture("implicit", 1).await else {
        return;
    };
    produce(
        &f,
        0,
        (0..10).map(record).collect(),
        Compression::NoCompression,
    )
    .await;
    let mut c = consumer(&f, AcknowledgementMode::Implicit).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut got = Vec::new();
    while got.len() < 10 && tokio::time::Instant::now() < deadline {
        got.extend(c.poll(Duration::from_millis(500)).await.unwrap());
    }
    assert_eq!(got.len(), 10);
    assert!(c.acknowledge(&got[0], AcknowledgeType::Accept).is_err());
    assert!(
        c.commit_sync(Duration::from_secs(10))
            .await
            .unwrap()
            .is_success()
    );
    c.close(Duration::from_secs(10)).await.unwrap();
    let mut other = consumer(&f, AcknowledgementMode::Explicit).await;
    assert!(
        drain(
            &mut other,
            1,
            Duration::from_secs(3),
            AcknowledgeType::Accept
        )
        .await
        .is_empty()
    );
    other.close(Duration::from_secs(10)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_share_one_partition_without_overlap() {
    let Some(f) = fixture("two_members", 1).await else {
        return;
    };
    produce(
        &f,
        0,
        (0..2_000).map(record).collect(),
        Compression::NoCompression,
    )
    .await;
    // A strict max.poll.records per fetch (record_limit, which also turns fetching ahead
    // off): with the sized default, the first member to fetch may take the whole partition
    // ahead of the second one's assignment, and sharing is what this test looks at.
    let mut a = consumer_record_limit(&f).await;
    let mut b = consumer_record_limit(&f).await;
    let mut seen: Vec<(i32, i64)> = Vec::new();
    let (mut from_a, mut from_b) = (0, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen.len() < 2_000 && tokio::time::Instant::now() < deadline {
        let ra = a.poll(Duration::from_millis(300)).await.unwrap();
        let rb = b.poll(Duration::from_millis(300)).await.unwrap();
        from_a += ra.len();
        from_b += rb.len();
        for r in &ra {
            a.acknowledge(r, AcknowledgeType::Accept).unwrap();
        }
        for r in &rb {
            b.acknowledge(r, AcknowledgeType::Accept).unwrap();
        }
        seen.extend(ids(&ra));
        seen.extend(ids(&rb));
    }
    let distinct: HashSet<(i32, i64)> = seen.iter().copied().collect();
    assert_eq!(distinct.len(), 2_000);
    assert_eq!(seen.len(), 2_000, "no record held by both");
    assert!(
        from_a > 0 && from_b > 0,
        "both members got records: {from_a} / {from_b}"
    );
    a.close(Duration::from_secs(10)).await.unwrap();
    b.close(Duration::from_secs(10)).await.unwrap();
}

/// A sink whose `put` never returns: the application gives up on the iteration.
struct Hanging;

#[async_trait::async_trait]
impl SinkTask for Hanging {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }
    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        std::future::pending().await
    }
}

/// Implicit mode against a broker: an iteration dropped while `put` had not returned, then
/// `close` — the batch is not accepted by close's commit, so the group delivers it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn implicit_mode_driver_dropped_during_put_then_closed_releases_the_batch() {
    let Some(f) = fixture("implicit_dropped_put", 1).await else {
        return;
    };
    produce(
        &f,
        0,
        (0..10).map(record).collect(),
        Compression::NoCompression,
    )
    .await;
    let implicit = consumer(&f, AcknowledgementMode::Implicit).await;
    let config = DriverConfig::new([f.topic.clone()]).poll_timeout(Duration::from_millis(500));
    let mut d = ShareSinkTask::new(Box::new(Hanging), implicit, config);
    d.initialize().await.expect("initialize");
    // Iterate until a poll brings records and `put` hangs on them; then give up on it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        assert!(tokio::time::Instant::now() < deadline, "no records polled");
        match tokio::time::timeout(Duration::from_secs(2), d.iteration()).await {
            Err(_) => break,
            Ok(report) => assert_eq!(report.expect("iteration").records, 0),
        }
    }
    d.close().await.expect("close");
    let mut other = consumer(&f, AcknowledgementMode::Explicit).await;
    let again = drain(
        &mut other,
        10,
        Duration::from_secs(30),
        AcknowledgeType::Accept,
    )
    .await;
    other.close(Duration::from_secs(10)).await.unwrap();
    let offsets: BTreeSet<i64> = again.iter().map(ConsumerRecord::offset).collect();
    assert_eq!(offsets, (0..10).collect(), "every record delivered again");
    assert!(again.iter().all(|r| r.delivery_count() == 2), "{again:?}");
}

struct Collect(Arc<Mutex<Vec<(i32, i64)>>>);

#[async_trait::async_trait]
impl SinkTask for Collect {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }
    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        let mut seen = self.0.lock().map_err(|_| TaskError::fatal("poisoned"))?;
        seen.extend(
            records
                .iter()
                .map(|r| (r.original_partition(), r.original_offset())),
        );
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hundred_thousand_records_through_two_drivers_none_lost() {
    let Some(f) = fixture("end_to_end", 4).await else {
        return;
    };
    const N: usize = 100_000;
    for p in 0..4 {
        produce(&f, p, (0..N / 4).map(record).collect(), Compression::Lz4).await;
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut drivers = Vec::new();
    for _ in 0..2 {
        let consumer = KafkaShareConsumer::connect(
            KafkaShareConsumerConfig::new(&f.bootstrap, &f.group)
                .fetch_max_wait(Duration::from_millis(200)),
        )
        .await
        .unwrap();
        let config = DriverConfig::new([f.topic.clone()]).poll_timeout(Duration::from_millis(500));
        drivers.push(ShareSinkTask::new(
            Box::new(Collect(Arc::clone(&seen))),
            consumer,
            config,
        ));
    }
    let done = {
        let seen = Arc::clone(&seen);
        move || {
            let seen = seen.lock().unwrap();
            seen.iter().copied().collect::<HashSet<_>>().len() >= N
        }
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    let mut handles = Vec::new();
    for mut d in drivers {
        let done = done.clone();
        handles.push(tokio::spawn(async move {
            let shutdown = async move {
                while !done() && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            };
            let result = d.run(shutdown).await;
            (result, d.metrics())
        }));
    }
    let mut put_by = Vec::new();
    for h in handles {
        let (result, metrics) = h.await.unwrap();
        result.expect("driver ran cleanly");
        put_by.push(metrics.records_put);
    }
    let seen = seen.lock().unwrap();
    let distinct: HashSet<(i32, i64)> = seen.iter().copied().collect();
    assert_eq!(distinct.len(), N, "every record put at least once");
    assert!(
        put_by.iter().all(|n| *n > 0),
        "both drivers worked: {put_by:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delivery_count_limit_archives_a_record_released_too_often() {
    let limit = [("share.delivery.count.limit", "2")];
    let Some(f) = fixture_with("delivery_limit", 1, LOCK_MS, &limit).await else {
        return;
    };
    produce(&f, 0, vec![record(0)], Compression::NoCompression).await;
    let mut c = consumer(&f, AcknowledgementMode::Explicit).await;
    for attempt in 1..=2_u16 {
        let got = drain(&mut c, 1, Duration::from_secs(30), AcknowledgeType::Release).await;
        assert_eq!(ids(&got), vec![(0, 0)], "attempt {attempt}");
        assert_eq!(got[0].delivery_count(), attempt);
        assert!(
            c.commit_sync(Duration::from_secs(10))
                .await
                .unwrap()
                .is_success()
        );
    }
    let after = drain(
        &mut c,
        1,
        Duration::from_millis(LOCK_MS * 2),
        AcknowledgeType::Release,
    )
    .await;
    assert!(after.is_empty(), "archived at the limit: {:?}", ids(&after));
    c.close(Duration::from_secs(10)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_keeps_a_record_past_the_lock_duration() {
    let Some(f) = fixture("renew", 1).await else {
        return;
    };
    produce(&f, 0, vec![record(0)], Compression::NoCompression).await;
    let mut holder = consumer(&f, AcknowledgementMode::Explicit).await;
    let mut other = consumer(&f, AcknowledgementMode::Explicit).await;
    let mut held = drain(
        &mut holder,
        1,
        Duration::from_secs(30),
        AcknowledgeType::Renew,
    )
    .await;
    assert_eq!(ids(&held), vec![(0, 0)]);
    let started = tokio::time::Instant::now();
    // Keep renewing for twice the lock duration; the record must stay with `holder`.
    while started.elapsed() < Duration::from_millis(LOCK_MS * 2) {
        tokio::time::sleep(Duration::from_millis(LOCK_MS / 4)).await;
        held = holder.poll(Duration::from_millis(100)).await.unwrap();
        assert_eq!(
            ids(&held),
            vec![(0, 0)],
            "a renewed record is presented again"
        );
        assert_eq!(held[0].delivery_count(), 1, "renewal is not a redelivery");
        holder
            .acknowledge(&held[0], AcknowledgeType::Renew)
            .unwrap();
        let stolen = other.poll(Duration::from_millis(10)).await.unwrap();
        assert!(stolen.is_empty(), "the lock held: {:?}", ids(&stolen));
    }
    held = holder.poll(Duration::from_millis(100)).await.unwrap();
    holder
        .acknowledge(&held[0], AcknowledgeType::Accept)
        .unwrap();
    let results = holder.commit_sync(Duration::from_secs(10)).await.unwrap();
    assert!(results.is_success(), "{results:?}");
    tokio::time::sleep(Duration::from_millis(LOCK_MS)).await;
    assert!(
        drain(
            &mut other,
            1,
            Duration::from_secs(2),
            AcknowledgeType::Accept
        )
        .await
        .is_empty()
    );
    holder.close(Duration::from_secs(10)).await.unwrap();
    other.close(Duration::from_secs(10)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_async_reports_per_partition_and_keeps_session_epochs_in_order() {
    let Some(f) = fixture("commit_async", 2).await else {
        return;
    };
    for p in 0..2 {
        produce(
            &f,
            p,
            (0..50).map(record).collect(),
            Compression::NoCompression,
        )
        .await;
    }
    let mut c = consumer(&f, AcknowledgementMode::Explicit).await;
    let mut seen = HashSet::new();
    let mut pending = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen.len() < 100 && tokio::time::Instant::now() < deadline {
        let records = c.poll(Duration::from_millis(500)).await.unwrap();
        for r in &records {
            c.acknowledge(r, AcknowledgeType::Accept).unwrap();
            seen.insert((r.partition(), r.offset()));
        }
        // Several commits in flight at once, interleaved with polls on the same sessions.
        pending.push(c.commit_async().unwrap());
    }
    assert_eq!(seen.len(), 100);
    let mut partitions = HashSet::new();
    for commit in pending {
        let results = commit.await.unwrap();
        assert!(results.is_success(), "{results:?}");
        partitions.extend(results.iter().map(|(tp, _)| tp.partition()));
    }
    assert_eq!(
        partitions.len(),
        2,
        "both partitions' acknowledgements were reported"
    );
    let again = drain(&mut c, 1, Duration::from_secs(3), AcknowledgeType::Accept).await;
    assert!(
        again.is_empty(),
        "committed asynchronously, never redelivered: {:?}",
        ids(&again)
    );
    c.close(Duration::from_secs(10)).await.unwrap();
}

/// Polls cut short by a caller's timeout (as a `select!` with a shutdown signal would) must
/// not cost deliveries: what the consumer acquired for them goes to a later poll, with the
/// delivery count it had. Before the fetch engine, each cancelled poll lost the records its
/// answer carried until their lock expired, and three cancelled polls left a record at
/// delivery count 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_polls_cost_no_delivery() {
    let Some(f) = fixture("cancelled_polls", 1).await else {
        return;
    };
    produce(
        &f,
        0,
        (0..3).map(record).collect(),
        Compression::NoCompression,
    )
    .await;
    let mut c = consumer(&f, AcknowledgementMode::Explicit).await;
    let mut got = Vec::new();
    let mut cancelled = 0;
    // Three lock durations of polls cut short after 20 ms.
    let until = tokio::time::Instant::now() + Duration::from_millis(3 * LOCK_MS);
    while tokio::time::Instant::now() < until {
        match tokio::time::timeout(Duration::from_millis(20), c.poll(Duration::from_secs(5))).await
        {
            Err(_) => cancelled += 1,
            Ok(records) => {
                let records = records.expect("poll");
                for r in &records {
                    c.acknowledge(r, AcknowledgeType::Accept).unwrap();
                }
                got.extend(records);
            }
        }
    }
    assert!(cancelled >= 10, "the polls were cut short ({cancelled})");
    let results = c
        .commit_sync(Duration::from_secs(10))
        .await
        .expect("commit");
    assert!(results.is_success(), "{results:?}");
    assert_eq!(ids(&got), vec![(0, 0), (0, 1), (0, 2)], "each record once");
    let counts: Vec<u16> = got.iter().map(ConsumerRecord::delivery_count).collect();
    assert_eq!(
        counts,
        vec![1, 1, 1],
        "no delivery was spent on a cancelled poll"
    );
    c.close(Duration::from_secs(10)).await.expect("close");
}

/// Acknowledgements handed to a poll that is then dropped are sent all the same, and the next
/// commit reports them. Before, they were marked sent and lost: the commit returned no
/// results and the records came back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_poll_loses_no_acknowledgement() {
    let Some(f) = fixture("dropped_poll_acks", 1).await else {
        return;
    };
    produce(
        &f,
        0,
        (0..3).map(record).collect(),
        Compression::NoCompression,
    )
    .await;
    let mut c = consumer(&f, AcknowledgementMode::Explicit).await;
    let first = drain(&mut c, 3, Duration::from_secs(30), AcknowledgeType::Accept).await;
    assert_eq!(first.len(), 3);
    // The poll carries the three ACCEPTs and is dropped at once.
    let dropped = tokio::time::timeout(Duration::from_millis(1), c.poll(Duration::from_secs(5)));
    assert!(dropped.await.is_err(), "the poll was cut short");
    let results = c
        .commit_async()
        .expect("commit_async")
        .await
        .expect("commit");
    let tp = kafka_share_sink::TopicPartition::new(f.topic.as_str(), 0);
    assert_eq!(results.get(&tp), Some(&Ok(())), "{results:?}");
    c.close(Duration::from_secs(10)).await.expect("close");
    // Accepted, so never delivered again, not even after the lock duration.
    let mut other = consumer(&f, AcknowledgementMode::Explicit).await;
    let again = drain(
        &mut other,
        1,
        Duration::from_millis(2 * LOCK_MS + 2_000),
        AcknowledgeType::Accept,
    )
    .await;
    assert!(again.is_empty(), "came back: {:?}", ids(&again));
    other.close(Duration::from_secs(10)).await.expect("close");
}

/// A subscription to a topic created later is waited for, as Java's consumer waits, and then
/// read; a name Kafka refuses fails `subscribe` at once, naming it (it used to be accepted,
/// and every poll returned nothing, forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_created_after_subscribe_is_read_and_an_invalid_name_is_refused() {
    let Some(bootstrap) = support::bootstrap("topic_created_later") else {
        return;
    };
    let f = Fixture {
        topic: support::unique("created-later"),
        group: support::unique("created-later-group"),
        bootstrap,
    };
    let admin = KafkaAdmin::connect(&f.bootstrap).await.expect("admin");
    admin
        .set_share_group_config(&f.group, &[("share.auto.offset.reset", "earliest")])
        .await
        .expect("group configured");
    let config = KafkaShareConsumerConfig::new(&f.bootstrap, &f.group)
        .fetch_max_wait(Duration::from_millis(200));
    let mut c = KafkaShareConsumer::connect(config).await.expect("connects");
    let error = c
        .subscribe(vec!["topic abc".to_owned()])
        .await
        .expect_err("an invalid name is refused");
    assert!(error.to_string().contains("`topic abc`"), "{error}");

    c.subscribe(vec![f.topic.clone()]).await.expect("subscribe");
    for _ in 0..3 {
        let records = c
            .poll(Duration::from_millis(300))
            .await
            .expect("a missing topic is waited for");
        assert!(records.is_empty());
    }
    admin.create_topic(&f.topic, 1, 1).await.expect("created");
    produce(
        &f,
        0,
        (0..5).map(record).collect(),
        Compression::NoCompression,
    )
    .await;
    let got = drain(&mut c, 5, Duration::from_secs(60), AcknowledgeType::Accept).await;
    assert_eq!(ids(&got), (0..5).map(|o| (0, o)).collect::<Vec<_>>());
    c.close(Duration::from_secs(10)).await.expect("close");
}

/// After the group's `share.record.lock.duration.ms` changes, the poll that presents renewed
/// records reports the lock duration the RENEW's answer carries, as Java's does; it used to
/// report the duration of the earlier fetch, and the driver renewed a shortened lock too late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_duration_after_a_renew_is_the_groups_new_one() {
    let Some(f) = fixture_with_lock("renew_lock_duration", 1, 20_000).await else {
        return;
    };
    produce(&f, 0, vec![record(0)], Compression::NoCompression).await;
    let mut c = consumer(&f, AcknowledgementMode::Explicit).await;
    let held = drain(&mut c, 1, Duration::from_secs(30), AcknowledgeType::Renew).await;
    assert_eq!(ids(&held), vec![(0, 0)]);
    assert_eq!(c.acquisition_lock_timeout(), Some(Duration::from_secs(20)));
    let admin = KafkaAdmin::connect(&f.bootstrap).await.expect("admin");
    admin
        .set_share_group_config(&f.group, &[("share.record.lock.duration.ms", "7000")])
        .await
        .expect("lock duration changed");
    support::share_group_config_until(&admin, &f.group, |c| {
        c.get("share.record.lock.duration.ms") == Some("7000")
    })
    .await;
    // The RENEW was queued by `drain`; this poll sends it and presents the record again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let again = c.poll(Duration::from_millis(500)).await.expect("poll");
        assert_eq!(ids(&again), vec![(0, 0)], "the renewed record is presented");
        if c.acquisition_lock_timeout() == Some(Duration::from_secs(7)) {
            break;
        }
        // The broker may answer the first RENEW before it sees the new config: renew again.
        assert!(
            tokio::time::Instant::now() < deadline,
            "still {:?} after the change",
            c.acquisition_lock_timeout()
        );
        c.acknowledge(&again[0], AcknowledgeType::Renew)
            .expect("renew");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    c.close(Duration::from_secs(10)).await.expect("close");
}

/// `share.acquire.mode=record_limit` (KIP-1206): a strict `max.poll.records`. One log batch of
/// 20 records, `max.poll.records=3`: each poll returns at most 3, and a second member gets
/// records of the same batch while the first holds its 3 (batch-optimized acquisition hands
/// the whole batch to the first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_limit_makes_max_poll_records_strict() {
    let Some(f) = fixture_with_lock("record_limit", 1, 30_000).await else {
        return;
    };
    produce(
        &f,
        0,
        (0..20).map(record).collect(),
        Compression::NoCompression,
    )
    .await;
    let strict = |f: &Fixture| {
        KafkaShareConsumerConfig::new(&f.bootstrap, &f.group)
            .max_poll_records(3)
            .share_acquire_mode(ShareAcquireMode::RecordLimit)
            .fetch_max_wait(Duration::from_millis(200))
    };
    let mut first = KafkaShareConsumer::connect(strict(&f))
        .await
        .expect("connects");
    first
        .subscribe(vec![f.topic.clone()])
        .await
        .expect("subscribe");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let held = loop {
        let records = first.poll(Duration::from_millis(500)).await.expect("poll");
        if !records.is_empty() {
            break records;
        }
        assert!(tokio::time::Instant::now() < deadline, "no records");
    };
    assert!(held.len() <= 3, "{} records in one poll", held.len());
    let mut second = KafkaShareConsumer::connect(strict(&f))
        .await
        .expect("connects");
    second
        .subscribe(vec![f.topic.clone()])
        .await
        .expect("subscribe");
    let got = drain(
        &mut second,
        17,
        Duration::from_secs(30),
        AcknowledgeType::Accept,
    )
    .await;
    assert!(!got.is_empty(), "the second member got none of the batch");
    let mut all: Vec<i64> = held
        .iter()
        .chain(&got)
        .map(ConsumerRecord::offset)
        .collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), held.len() + got.len(), "no record went to both");
    for r in &held {
        first.acknowledge(r, AcknowledgeType::Accept).expect("ack");
    }
    first.close(Duration::from_secs(10)).await.expect("close");
    second.close(Duration::from_secs(10)).await.expect("close");
}

/// `max.partition.fetch.bytes`: ShareFetch has no per-partition limit since v1, and the
/// broker splits a request's `MaxBytes` evenly over its partitions, so the consumer asks for
/// at most this much per partition. 40 batches of 10 records of about 1 KiB in one partition:
/// with 16 KiB per partition a fetch gets a couple of batches, not the 500 records
/// `max.poll.records` and `fetch.max.bytes` would allow. Without fetching ahead (at most one
/// answer waits between polls), each poll holds at most two answers, also when the test polls
/// slowly on a busy machine (fetched ahead, 24 answers waited for one poll).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_partition_fetch_bytes_bounds_what_one_fetch_returns() {
    let Some(f) = fixture_with_lock("partition_fetch_bytes", 1, 30_000).await else {
        return;
    };
    let big = |i: usize| Record {
        key: None,
        value: Some(vec![b'v'; 1000 + i % 7]),
        headers: BTreeMap::new(),
        timestamp: chrono::Utc::now(),
    };
    for batch in 0..40 {
        produce(
            &f,
            0,
            (batch * 10..batch * 10 + 10).map(big).collect(),
            Compression::NoCompression,
        )
        .await;
    }
    let config = KafkaShareConsumerConfig::new(&f.bootstrap, &f.group)
        .max_partition_fetch_bytes(16 * 1024)
        .fetch_max_wait(Duration::from_millis(200))
        .acquisition_sizing(AcquisitionSizing::Fixed)
        .prefetch_records(0);
    let mut c = KafkaShareConsumer::connect(config).await.expect("connects");
    c.subscribe(vec![f.topic.clone()]).await.expect("subscribe");
    let mut sizes = Vec::new();
    let mut total = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while total < 400 {
        assert!(tokio::time::Instant::now() < deadline, "got {total} of 400");
        let records = c.poll(Duration::from_millis(500)).await.expect("poll");
        for r in &records {
            c.acknowledge(r, AcknowledgeType::Accept).expect("ack");
        }
        if !records.is_empty() {
            sizes.push(records.len());
            total += records.len();
        }
    }
    assert_eq!(total, 400);
    assert!(
        sizes.iter().all(|n| *n <= 40),
        "each fetch about 16 KiB of 1 KiB records: {sizes:?}"
    );
    c.close(Duration::from_secs(10)).await.expect("close");
}

async fn consumer_polling(f: &Fixture, max_poll_records: i32) -> KafkaShareConsumer {
    consumer_with(f, |config| {
        config
            .acknowledgement_mode(AcknowledgementMode::Explicit)
            .max_poll_records(max_poll_records)
    })
    .await
}

/// Sized acquisition (the default) acquires whole log batches of 500 and more, but a poll
/// hands out at most `max.poll.records`, and every record comes exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sized_acquisition_hands_out_at_most_max_poll_records_each_record_once() {
    let Some(f) = fixture_with_lock("sized_polls", 3, 30_000).await else {
        return;
    };
    for p in 0..3 {
        produce(
            &f,
            p,
            (0..1000).map(record).collect(),
            Compression::NoCompression,
        )
        .await;
    }
    let mut c = consumer_polling(&f, 100).await;
    let mut seen = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen.len() < 3000 && tokio::time::Instant::now() < deadline {
        let records = c.poll(Duration::from_millis(500)).await.expect("poll");
        assert!(records.len() <= 100, "a poll of {} records", records.len());
        for r in &records {
            assert_eq!(r.delivery_count(), 1, "{:?}", (r.partition(), r.offset()));
            assert!(seen.insert((r.partition(), r.offset())), "twice: {r:?}");
            c.acknowledge(r, AcknowledgeType::Accept).unwrap();
        }
    }
    assert_eq!(seen.len(), 3000);
    let results = c.commit_sync(Duration::from_secs(10)).await.unwrap();
    assert!(results.is_success(), "{results:?}");
    c.close(Duration::from_secs(10)).await.unwrap();
}

/// Records fetched ahead that wait unpolled past their lock are not handed out (the broker
/// gave them back to the group): they come again with a higher delivery count, and every
/// acknowledgement the application makes is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_fetched_ahead_are_not_handed_out_after_their_lock_ran_out() {
    let Some(f) = fixture("stale_ahead", 1).await else {
        return;
    };
    produce(
        &f,
        0,
        (0..2000).map(record).collect(),
        Compression::NoCompression,
    )
    .await;
    let mut c = consumer_polling(&f, 100).await;
    let mut seen = BTreeSet::new();
    // A few quick polls: the pace is fast, so the consumer acquires far ahead.
    for _ in 0..4 {
        for r in c.poll(Duration::from_secs(10)).await.expect("poll") {
            seen.insert(r.offset());
            c.acknowledge(&r, AcknowledgeType::Accept).unwrap();
        }
    }
    let results = c.commit_sync(Duration::from_secs(10)).await.unwrap();
    assert!(results.is_success(), "{results:?}");
    // The application stalls past the lock.
    tokio::time::sleep(Duration::from_millis(LOCK_MS + 1000)).await;
    let mut redelivered = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen.len() < 2000 && tokio::time::Instant::now() < deadline {
        for r in c.poll(Duration::from_millis(500)).await.expect("poll") {
            redelivered += usize::from(r.delivery_count() > 1);
            seen.insert(r.offset());
            c.acknowledge(&r, AcknowledgeType::Accept).unwrap();
        }
        let results = c.commit_sync(Duration::from_secs(10)).await.unwrap();
        assert!(
            results.is_success(),
            "an expired record was handed out: {results:?}"
        );
    }
    assert_eq!(seen.len(), 2000);
    assert!(
        redelivered > 0,
        "records acquired ahead before the stall came again"
    );
    c.close(Duration::from_secs(10)).await.unwrap();
}

/// The records of the tests of a batch on its last delivery.
const BATCH: usize = 40;

/// A group with a delivery-count limit of 2 (seen by the broker) and locks of `lock_ms`, and a
/// topic of one log batch of [`BATCH`] records (acquired whole) that a first member took in one
/// poll and released: their next delivery is their last.
async fn one_batch_on_its_last_delivery(test: &str, lock_ms: u64) -> Option<Fixture> {
    let limit = [("share.delivery.count.limit", "2")];
    let f = fixture_with(test, 1, lock_ms, &limit).await?;
    let admin = KafkaAdmin::connect(&f.bootstrap).await.expect("admin");
    support::share_group_config_until(&admin, &f.group, |c| c.delivery_count_limit() == Some(2))
        .await;
    produce(
        &f,
        0,
        (0..BATCH).map(record).collect(),
        Compression::NoCompression,
    )
    .await;
    release_one_poll(&f, BATCH as i32).await;
    Some(f)
}

/// Polls and ACCEPTs until the record at `marker` (produced last) comes, commits, and returns
/// how many records came before it: a fetch acquires the records available before the marker
/// first, so what has not come by then is not available (archived, or still locked).
async fn accept_up_to(c: &mut KafkaShareConsumer, marker: i64) -> usize {
    let mut taken = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the record produced last ({marker}) never came"
        );
        let mut seen = false;
        for r in c.poll(Duration::from_millis(500)).await.expect("poll") {
            c.acknowledge(&r, AcknowledgeType::Accept).unwrap();
            if r.offset() == marker {
                seen = true;
            } else {
                taken += 1;
            }
        }
        if seen {
            break;
        }
    }
    let results = c.commit_sync(Duration::from_secs(10)).await.unwrap();
    assert!(results.is_success(), "{results:?}");
    taken
}

/// A member that takes what one poll of up to `max_poll_records` brings (no fetch ahead),
/// releases it and leaves: the next delivery of those records is their second.
async fn release_one_poll(f: &Fixture, max_poll_records: i32) {
    let config = KafkaShareConsumerConfig::new(&f.bootstrap, &f.group)
        .acknowledgement_mode(AcknowledgementMode::Explicit)
        .acquisition_sizing(AcquisitionSizing::Fixed)
        .share_acquire_mode(ShareAcquireMode::RecordLimit)
        .max_poll_records(max_poll_records);
    let mut first = KafkaShareConsumer::connect(config).await.expect("connects");
    first
        .subscribe(vec![f.topic.clone()])
        .await
        .expect("subscribe");
    let mut released = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while released.is_empty() && tokio::time::Instant::now() < deadline {
        released = first.poll(Duration::from_millis(500)).await.expect("poll");
    }
    assert!(!released.is_empty(), "nothing acquired");
    for r in &released {
        first.acknowledge(r, AcknowledgeType::Release).unwrap();
    }
    let results = first.commit_sync(Duration::from_secs(10)).await.unwrap();
    assert!(results.is_success(), "{results:?}");
    first.close(Duration::from_secs(10)).await.unwrap();
}

/// Records fetched ahead that wait unpolled for half their lock are released, except those on
/// their last allowed delivery: released, the group would archive them unseen. Those are
/// handed out, and every record comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_on_their_last_delivery_are_not_released_from_the_buffer() {
    let limit = [("share.delivery.count.limit", "2")];
    let Some(f) = fixture_with("last_delivery_ahead", 1, LOCK_MS, &limit).await else {
        return;
    };
    produce(
        &f,
        0,
        (0..200).map(record).collect(),
        Compression::NoCompression,
    )
    .await;
    // A first member takes what it can in one poll and releases it: delivered once, the next
    // delivery of those records is their last.
    release_one_poll(&f, 200).await;

    // The second member polls quickly (so it acquires ahead), then stalls past half the lock.
    let mut c = consumer_polling(&f, 50).await;
    let mut seen = BTreeSet::new();
    for _ in 0..2 {
        let mut records = Vec::new();
        while records.is_empty() {
            records = c.poll(Duration::from_secs(10)).await.expect("poll");
        }
        for r in &records {
            seen.insert(r.offset());
            c.acknowledge(r, AcknowledgeType::Accept).unwrap();
        }
        assert!(
            c.commit_sync(Duration::from_secs(10))
                .await
                .unwrap()
                .is_success()
        );
    }
    tokio::time::sleep(Duration::from_millis(LOCK_MS * 6 / 10)).await;
    let mut last_deliveries_after_the_stall = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while seen.len() < 200 && tokio::time::Instant::now() < deadline {
        for r in c.poll(Duration::from_millis(500)).await.expect("poll") {
            last_deliveries_after_the_stall += usize::from(r.delivery_count() >= 2);
            seen.insert(r.offset());
            c.acknowledge(&r, AcknowledgeType::Accept).unwrap();
        }
        let results = c.commit_sync(Duration::from_secs(10)).await.unwrap();
        assert!(results.is_success(), "{results:?}");
    }
    let missing: Vec<i64> = (0..200).filter(|o| !seen.contains(o)).collect();
    assert!(missing.is_empty(), "archived unseen: {missing:?}");
    assert!(
        last_deliveries_after_the_stall > 0,
        "no record on its last delivery waited through the stall: the test tested nothing"
    );
    c.close(Duration::from_secs(10)).await.unwrap();
}

/// A driver that stops right after its first put gives back what its consumer fetched ahead:
/// on their last allowed delivery, the group archives those records unseen. The consumer's
/// close counts them and the driver adds them to `records_released_at_limit`, next to the
/// records of its own poll it released: every record is put, taken by a later member, or
/// counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_counts_the_last_deliveries_it_gives_back_unseen() {
    let Some(f) = one_batch_on_its_last_delivery("unseen_at_limit", 30_000).await else {
        return;
    };

    // The driver: sized acquisition (the default) fetches the batch whole and a poll hands
    // out 10, the rest waits in the consumer. Redelivered, the 10 are put one by one; the
    // driver stops after its first put, releasing the 9 it queued (counted by the driver),
    // and its consumer's close gives back the 30 it fetched ahead (counted by the consumer).
    let seen = Arc::new(Mutex::new(Vec::new()));
    let consumer = KafkaShareConsumer::connect(
        KafkaShareConsumerConfig::new(&f.bootstrap, &f.group).max_poll_records(10),
    )
    .await
    .expect("connects");
    let config = DriverConfig::new([f.topic.clone()]).poll_timeout(Duration::from_millis(500));
    let mut driver = ShareSinkTask::new(Box::new(Collect(Arc::clone(&seen))), consumer, config);
    driver.initialize().await.expect("initialize");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while seen.lock().unwrap().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "nothing polled");
        driver.iteration().await.expect("iteration");
    }
    driver.close().await.expect("close");
    let put = seen.lock().unwrap().len();
    let unseen = driver.metrics().records_released_at_limit;

    // A last member takes what is left, up to a record produced after the close: a fetch
    // acquires the records available before it first, so what has not come by then was
    // archived.
    produce(&f, 0, vec![record(BATCH)], Compression::NoCompression).await;
    let config = KafkaShareConsumerConfig::new(&f.bootstrap, &f.group)
        .acknowledgement_mode(AcknowledgementMode::Explicit)
        .acquisition_sizing(AcquisitionSizing::Fixed)
        .prefetch_records(0);
    let mut last = KafkaShareConsumer::connect(config).await.expect("connects");
    last.subscribe(vec![f.topic.clone()])
        .await
        .expect("subscribe");
    let taken = accept_up_to(&mut last, BATCH as i64).await;
    last.close(Duration::from_secs(10)).await.unwrap();
    let archived = BATCH - put - taken;
    assert!(
        archived > 10,
        "no record fetched ahead past the driver's one poll of 10 was given back at close \
         (put {put}, taken {taken}): the test tested nothing"
    );
    assert_eq!(
        unseen, archived as u64,
        "archived unseen at close, counted (put {put}, taken {taken})"
    );
}

/// Records fetched ahead on their last allowed delivery that wait unpolled past their lock
/// are archived by the group before a poll can hand them out: the consumer counts them in
/// `given_back_at_limit` when it drops them. Every record is polled, taken after the stall,
/// or counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_deliveries_fetched_ahead_past_their_lock_are_counted() {
    let Some(f) = one_batch_on_its_last_delivery("expired_at_limit", LOCK_MS).await else {
        return;
    };
    // Sized acquisition (the default) fetches the batch whole; a poll hands out 10, the rest
    // waits in the buffer while the application stalls past the lock.
    let mut c = consumer_polling(&f, 10).await;
    let mut polled = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while polled.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "nothing polled");
        polled = c.poll(Duration::from_millis(500)).await.expect("poll");
    }
    for r in &polled {
        c.acknowledge(r, AcknowledgeType::Accept).unwrap();
    }
    assert!(
        c.commit_sync(Duration::from_secs(10))
            .await
            .unwrap()
            .is_success()
    );
    assert_eq!(
        c.delivery_count_limit(),
        Some(2),
        "the group's limit as read"
    );
    assert_eq!(c.given_back_at_limit(), 0);
    tokio::time::sleep(Duration::from_millis(LOCK_MS + 1000)).await;
    // Then it polls on, up to a record produced after the stall.
    produce(&f, 0, vec![record(BATCH)], Compression::NoCompression).await;
    let taken = accept_up_to(&mut c, BATCH as i64).await;
    let archived = BATCH - polled.len() - taken;
    assert!(
        archived > 0,
        "nothing fetched ahead waited past its lock (polled {}, taken {taken}): the test \
         tested nothing",
        polled.len()
    );
    assert_eq!(
        c.given_back_at_limit(),
        archived as u64,
        "dropped past their lock on their last delivery, counted (polled {}, taken {taken})",
        polled.len()
    );
    c.close(Duration::from_secs(10)).await.unwrap();
}

/// The broker cuts what it acquires into ranges at log batch starts, each at least the
/// ShareFetch `BatchSize` long, and tracks each range as one in-flight batch until an
/// acknowledgement covers only part of it (then per offset, at far more cost). With batches
/// of 7 records and `max.poll.records` 20, the consumer asks for ranges of one batch (a
/// batch is wider than a quarter of a poll) and hands them out whole: every poll ends where
/// a log batch ends, the first one included. (With Java's `BatchSize` of `max.poll.records`,
/// every range is 21 records and every poll of 20 splits one: 1 poll in 7 ends on a batch
/// end.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_poll_ends_where_a_log_batch_ends() {
    // A long lock: a record fetched ahead is never released unpolled on a slow machine.
    let Some(f) = fixture_with_lock("polls-whole-ranges", 1, 30_000).await else {
        return;
    };
    let partition = support::rskafka_partition(&f.bootstrap, &f.topic, 0).await;
    for batch in 0..60 {
        let records = (0..7).map(|i| record(batch * 7 + i)).collect();
        partition
            .produce(records, Compression::NoCompression)
            .await
            .expect("produce one batch");
    }
    let mut c = consumer_with(&f, |config| {
        config
            .acknowledgement_mode(AcknowledgementMode::Explicit)
            .max_poll_records(20)
    })
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut polls: Vec<Vec<i64>> = Vec::new();
    while polls.iter().map(Vec::len).sum::<usize>() < 420 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} of 420 records within 60 s",
            polls.iter().map(Vec::len).sum::<usize>()
        );
        let records = c.poll(Duration::from_millis(500)).await.expect("poll");
        if records.is_empty() {
            continue;
        }
        for r in &records {
            c.acknowledge(r, AcknowledgeType::Accept)
                .expect("acknowledge");
        }
        c.commit_sync(Duration::from_secs(10))
            .await
            .expect("commit");
        polls.push(records.iter().map(ConsumerRecord::offset).collect());
    }
    let all: Vec<i64> = polls.iter().flatten().copied().collect();
    assert_eq!(
        all,
        (0..420).collect::<Vec<_>>(),
        "each record once, in order"
    );
    assert!(polls.iter().all(|p| p.len() <= 20), "{polls:?}");
    let whole = polls
        .iter()
        .filter(|p| p.last().is_some_and(|last| last % 7 == 6))
        .count();
    // Every answer ends on a log batch's end (whole batches are acquired), and every
    // range fits a poll with room to spare, so no poll has to split one.
    assert_eq!(
        whole,
        polls.len(),
        "polls (first offset, records): {:?}",
        polls.iter().map(|p| (p[0], p.len())).collect::<Vec<_>>()
    );
    c.close(Duration::from_secs(10)).await.expect("close");
}
