//! The behaviour every [`Producer`] and [`LogReader`] of the crate shares, as functions that
//! take a [`Backend`]: the embedded broker (tests/producer_embedded.rs) and a Kafka cluster
//! run the same functions.
//!
//! Include it with `mod support;` and
//! `#[path = "support/producer_contract.rs"] mod producer_contract;`. Each function asserts
//! one behaviour, on topics of its own (`support::unique`), and waits for what it expects
//! (up to 30 s) instead of assuming a write is visible at once: a cluster writes transaction
//! markers after the commit returns.

#![allow(dead_code)]

use std::time::Duration;

use kafka_share_sink::ConsumerRecord;
use kafka_share_sink::Headers;
use kafka_share_sink::producer::{
    IsolationLevel, LogReader, Producer, ProducerError, ProducerRecord,
};
use tokio::time::Instant;

use crate::support::unique;

/// Where the contract runs: makes producers, topics and readers.
#[async_trait::async_trait]
pub(crate) trait Backend: Send + Sync {
    /// A producer: idempotent without an id, transactional with one.
    async fn producer(&self, transactional_id: Option<&str>) -> Box<dyn Producer>;
    /// Creates a topic (and waits until producers and readers can use it).
    async fn create_topic(&self, name: &str, partitions: i32);
    /// A reader of the backend's topics.
    async fn reader(&self) -> Box<dyn LogReader>;
}

const PATIENCE: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_millis(200);

/// Every record of a partition a reader of `isolation` sees, from offset 0 to its end offset
/// at the call.
async fn read_all(
    reader: &dyn LogReader,
    topic: &str,
    partition: i32,
    isolation: IsolationLevel,
) -> Vec<ConsumerRecord> {
    let end = reader
        .end_offset(topic, partition, isolation)
        .await
        .expect("end offset");
    let mut records = Vec::new();
    let mut from = 0;
    let give_up = Instant::now() + PATIENCE;
    while from < end {
        let read = reader
            .read(topic, partition, from, isolation, WAIT)
            .await
            .expect("read");
        assert!(read.next_offset >= from, "a read never goes back");
        records.extend(read.records);
        from = read.next_offset;
        assert!(
            Instant::now() < give_up,
            "{topic}/{partition}: never reached {end}"
        );
    }
    records
}

/// Reads the partition until `done` holds for what a reader of `isolation` sees, for at
/// most 30 s, and returns it.
async fn read_until(
    reader: &dyn LogReader,
    topic: &str,
    partition: i32,
    isolation: IsolationLevel,
    done: impl Fn(&[ConsumerRecord]) -> bool,
) -> Vec<ConsumerRecord> {
    let give_up = Instant::now() + PATIENCE;
    loop {
        let records = read_all(reader, topic, partition, isolation).await;
        if done(&records) {
            return records;
        }
        assert!(
            Instant::now() < give_up,
            "{topic}/{partition} ({isolation:?}) never showed what was expected: {:?}",
            values(&records)
        );
        tokio::time::sleep(WAIT).await;
    }
}

fn values(records: &[ConsumerRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| {
            r.value().map_or_else(
                || "<null>".to_owned(),
                |v| String::from_utf8_lossy(v).into_owned(),
            )
        })
        .collect()
}

fn has(value: &'static str) -> impl Fn(&[ConsumerRecord]) -> bool {
    move |records| values(records).iter().any(|v| v == value)
}

/// A record of `value` for partition 0 of `topic`.
fn on_partition_0(topic: &str, value: &'static str) -> ProducerRecord {
    ProducerRecord::new(topic).partition(0).value(value)
}

async fn send(producer: &dyn Producer, record: ProducerRecord) -> i64 {
    producer
        .send(record)
        .expect("send queued")
        .await
        .expect("send written")
        .offset
}

/// Records of one partition are written, and read back, in the order of the sends, at
/// rising offsets.
pub(crate) async fn order_per_partition(backend: &dyn Backend) {
    let topic = unique("contract-order");
    backend.create_topic(&topic, 2).await;
    let producer = backend.producer(None).await;
    let mut futures = Vec::new();
    for i in 0..20 {
        let record = ProducerRecord::new(topic.as_str())
            .partition(i % 2)
            .value(format!("v{i}"));
        futures.push((i % 2, producer.send(record).expect("queued")));
    }
    producer.flush().await.expect("flush");
    let mut last = [-1_i64; 2];
    for (partition, future) in futures {
        let written = future.await.expect("written");
        assert_eq!(written.partition, partition);
        let slot = &mut last[usize::try_from(partition).unwrap()];
        assert!(written.offset > *slot, "offsets rise in send order");
        *slot = written.offset;
    }
    let reader = backend.reader().await;
    for partition in 0..2 {
        let expected: Vec<String> = (0..20)
            .filter(|i| i % 2 == partition)
            .map(|i| format!("v{i}"))
            .collect();
        let got = read_until(
            &*reader,
            &topic,
            partition,
            IsolationLevel::ReadUncommitted,
            |r| r.len() >= 10,
        )
        .await;
        assert_eq!(values(&got), expected, "partition {partition}");
    }
}

/// Key, value and headers come back exactly: header order, repeated keys, null values, an
/// empty key and value; a null value (tombstone) stays null; the timestamp given is kept.
pub(crate) async fn headers_exact(backend: &dyn Backend) {
    let topic = unique("contract-headers");
    backend.create_topic(&topic, 1).await;
    let producer = backend.producer(None).await;
    let mut headers = Headers::new();
    headers.push("a", Some("1".into()));
    headers.push("b", None);
    headers.push("a", Some("2".into()));
    headers.push("", Some("".into()));
    send(
        &*producer,
        ProducerRecord::new(topic.as_str())
            .key("k")
            .value("v")
            .with_headers(headers.clone())
            .timestamp(1_700_000_000_123),
    )
    .await;
    send(&*producer, ProducerRecord::new(topic.as_str()).key("gone")).await;
    let reader = backend.reader().await;
    let got = read_until(&*reader, &topic, 0, IsolationLevel::ReadUncommitted, |r| {
        r.len() == 2
    })
    .await;
    assert_eq!(got[0].key().unwrap().as_ref(), b"k");
    assert_eq!(got[0].value().unwrap().as_ref(), b"v");
    assert_eq!(got[0].headers(), &headers);
    assert_eq!(got[0].timestamp(), 1_700_000_000_123);
    assert_eq!(got[1].value(), None, "a tombstone stays null");
    assert!(got[1].headers().is_empty());
}

/// A keyed record without a partition goes where Kafka's Java producer puts it:
/// `toPositive(murmur2(key)) % partitions`.
pub(crate) async fn keyed_records_go_to_murmur2_partitions(backend: &dyn Backend) {
    // Kafka's own murmur2 test vectors (UtilsTest.testMurmur2).
    const JAVA: [(&str, i32); 4] = [
        ("21", -973_932_308),
        ("foobar", -790_332_482),
        ("a-little-bit-long-string", -985_981_536),
        ("abc", 479_470_107),
    ];
    let topic = unique("contract-keys");
    backend.create_topic(&topic, 7).await;
    let producer = backend.producer(None).await;
    let mut partitions = std::collections::BTreeSet::new();
    for (key, hash) in JAVA {
        let expected = (hash & 0x7fff_ffff) % 7;
        let written = producer
            .send(ProducerRecord::new(topic.as_str()).key(key).value(key))
            .expect("queued")
            .await
            .expect("written");
        assert_eq!(written.partition, expected, "key {key}");
        partitions.insert(expected);
        let reader = backend.reader().await;
        let got = read_until(
            &*reader,
            &topic,
            expected,
            IsolationLevel::ReadUncommitted,
            |r| {
                r.iter()
                    .any(|r| r.key().is_some_and(|k| k.as_ref() == key.as_bytes()))
            },
        )
        .await;
        assert!(!got.is_empty());
    }
    assert!(partitions.len() > 1, "the vectors spread over partitions");
}

/// Records of a committed transaction are visible to `read_committed` readers; those of an
/// aborted one are not, though `read_uncommitted` readers see both.
pub(crate) async fn committed_visible_aborted_not(backend: &dyn Backend) {
    let topic = unique("contract-commit");
    backend.create_topic(&topic, 1).await;
    let producer = backend.producer(Some(&unique("contract-commit-tx"))).await;
    producer.init_transactions().await.expect("init");

    producer.begin_transaction().expect("begin");
    send(&*producer, on_partition_0(&topic, "c1")).await;
    send(&*producer, on_partition_0(&topic, "c2")).await;
    producer.commit_transaction().await.expect("commit");

    producer.begin_transaction().expect("begin");
    send(&*producer, on_partition_0(&topic, "a1")).await;
    producer.abort_transaction().await.expect("abort");

    producer.begin_transaction().expect("begin");
    send(&*producer, on_partition_0(&topic, "c3")).await;
    producer.commit_transaction().await.expect("commit");

    let reader = backend.reader().await;
    let committed = read_until(
        &*reader,
        &topic,
        0,
        IsolationLevel::ReadCommitted,
        has("c3"),
    )
    .await;
    assert_eq!(values(&committed), ["c1", "c2", "c3"]);
    let everything = read_all(&*reader, &topic, 0, IsolationLevel::ReadUncommitted).await;
    assert_eq!(values(&everything), ["c1", "c2", "a1", "c3"]);
    // Markers take offsets: the records are not contiguous.
    assert!(everything[3].offset() > everything[2].offset() + 1);
}

/// `read_committed` readers stop at the first record of a transaction still open (the last
/// stable offset), even for records written after it outside the transaction; once it
/// commits they read on.
pub(crate) async fn read_committed_stops_at_open_transaction(backend: &dyn Backend) {
    let topic = unique("contract-lso");
    backend.create_topic(&topic, 1).await;
    let plain = backend.producer(None).await;
    let transactional = backend.producer(Some(&unique("contract-lso-tx"))).await;
    transactional.init_transactions().await.expect("init");

    let before = send(&*plain, on_partition_0(&topic, "before")).await;
    transactional.begin_transaction().expect("begin");
    let open = send(&*transactional, on_partition_0(&topic, "open")).await;
    send(&*plain, on_partition_0(&topic, "after")).await;

    let reader = backend.reader().await;
    let everything = read_until(
        &*reader,
        &topic,
        0,
        IsolationLevel::ReadUncommitted,
        has("after"),
    )
    .await;
    assert_eq!(values(&everything), ["before", "open", "after"]);
    assert_eq!(
        reader
            .end_offset(&topic, 0, IsolationLevel::ReadCommitted)
            .await
            .expect("lso"),
        open,
        "the last stable offset is the open transaction's first offset"
    );
    let committed = read_all(&*reader, &topic, 0, IsolationLevel::ReadCommitted).await;
    assert_eq!(values(&committed), ["before"]);
    assert_eq!(committed[0].offset(), before);
    let stuck = reader
        .read(&topic, 0, open, IsolationLevel::ReadCommitted, WAIT)
        .await
        .expect("read at the lso");
    assert!(stuck.records.is_empty());
    assert_eq!(
        stuck.next_offset, open,
        "no progress past an open transaction"
    );
    assert!(stuck.last_stable_offset <= open && stuck.high_watermark > open);

    transactional.commit_transaction().await.expect("commit");
    let committed = read_until(
        &*reader,
        &topic,
        0,
        IsolationLevel::ReadCommitted,
        has("after"),
    )
    .await;
    assert_eq!(values(&committed), ["before", "open", "after"]);
}

/// A second producer with the same transactional id fences the first: the transaction the
/// first left open is aborted, and the first can commit nothing more (it reports
/// [`ProducerError::Fenced`], at the latest when it tries to end the transaction).
pub(crate) async fn zombie_is_fenced(backend: &dyn Backend) {
    let topic = unique("contract-zombie");
    backend.create_topic(&topic, 1).await;
    let id = unique("contract-zombie-tx");
    let zombie = backend.producer(Some(&id)).await;
    zombie.init_transactions().await.expect("init");
    zombie.begin_transaction().expect("begin");
    send(&*zombie, on_partition_0(&topic, "zombie")).await;

    let successor = backend.producer(Some(&id)).await;
    successor
        .init_transactions()
        .await
        .expect("init of the successor");

    let commit = zombie.commit_transaction().await;
    let mut errors = vec![commit.expect_err("a fenced producer cannot commit")];
    if !matches!(errors[0], ProducerError::Fenced { .. }) {
        // A client may report the transaction abortable first; its abort meets the fence.
        errors.push(
            zombie
                .abort_transaction()
                .await
                .expect_err("the abort is fenced too"),
        );
    }
    let fenced = errors.last().unwrap();
    assert!(matches!(fenced, ProducerError::Fenced { .. }), "{errors:?}");
    assert!(fenced.is_fatal());

    successor.begin_transaction().expect("begin");
    send(&*successor, on_partition_0(&topic, "successor")).await;
    successor.commit_transaction().await.expect("commit");
    let reader = backend.reader().await;
    let committed = read_until(
        &*reader,
        &topic,
        0,
        IsolationLevel::ReadCommitted,
        has("successor"),
    )
    .await;
    assert_eq!(
        values(&committed),
        ["successor"],
        "the zombie's record was aborted"
    );
}

/// A record the producer refuses at once (a partition the topic does not have) is not part of
/// the transaction and does not spoil it, as with Java's producer: `send` itself fails, the
/// caller knows, and the transaction still commits what was sent. An aborted transaction
/// leaves nothing visible, and the next one commits.
pub(crate) async fn refused_sends_and_aborts(backend: &dyn Backend) {
    let topic = unique("contract-refused-send");
    backend.create_topic(&topic, 1).await;
    let producer = backend
        .producer(Some(&unique("contract-refused-send-tx")))
        .await;
    producer.init_transactions().await.expect("init");

    producer.begin_transaction().expect("begin");
    send(&*producer, on_partition_0(&topic, "kept")).await;
    let refused = producer
        .send(
            ProducerRecord::new(topic.as_str())
                .partition(99)
                .value("nowhere"),
        )
        .expect_err("partition 99 does not exist: refused at once");
    assert!(
        matches!(
            refused,
            ProducerError::UnknownPartition { partition: 99, .. }
        ),
        "{refused:?}"
    );
    producer.commit_transaction().await.expect("commit");

    producer.begin_transaction().expect("begin");
    send(&*producer, on_partition_0(&topic, "dropped")).await;
    producer.abort_transaction().await.expect("abort");

    producer.begin_transaction().expect("begin after the abort");
    send(&*producer, on_partition_0(&topic, "next")).await;
    producer.commit_transaction().await.expect("commit");
    let reader = backend.reader().await;
    let committed = read_until(
        &*reader,
        &topic,
        0,
        IsolationLevel::ReadCommitted,
        has("next"),
    )
    .await;
    assert_eq!(values(&committed), ["kept", "next"]);
}

/// `init_transactions` called again with a transaction open (as after an abort the
/// coordinator did not answer) aborts that transaction: its records are never committed,
/// and the producer goes on with the next one under the new epoch.
pub(crate) async fn init_again_aborts_the_open_transaction(backend: &dyn Backend) {
    let topic = unique("contract-init-again");
    backend.create_topic(&topic, 1).await;
    let producer = backend
        .producer(Some(&unique("contract-init-again-tx")))
        .await;
    producer.init_transactions().await.expect("init");
    producer.begin_transaction().expect("begin");
    send(&*producer, on_partition_0(&topic, "left-open")).await;
    producer
        .init_transactions()
        .await
        .expect("init again, a transaction open");
    producer.begin_transaction().expect("begin after it");
    send(&*producer, on_partition_0(&topic, "next")).await;
    producer.commit_transaction().await.expect("commit");
    let reader = backend.reader().await;
    let committed = read_until(
        &*reader,
        &topic,
        0,
        IsolationLevel::ReadCommitted,
        has("next"),
    )
    .await;
    assert_eq!(
        values(&committed),
        ["next"],
        "the open transaction was aborted"
    );
}

/// Calls out of turn fail with [`ProducerError::TransactionState`] and change nothing; a
/// transaction call on a producer without a transactional id fails with
/// [`ProducerError::NotTransactional`].
pub(crate) async fn calls_out_of_turn_are_refused(backend: &dyn Backend) {
    let topic = unique("contract-state");
    backend.create_topic(&topic, 1).await;
    let producer = backend.producer(Some(&unique("contract-state-tx"))).await;
    producer.init_transactions().await.expect("init");
    let is_state =
        |r: Result<(), ProducerError>| matches!(r, Err(ProducerError::TransactionState { .. }));

    let outside = producer.send(ProducerRecord::new(topic.as_str()).value("outside"));
    assert!(
        matches!(outside, Err(ProducerError::TransactionState { .. })),
        "send outside a transaction: {outside:?}"
    );
    assert!(
        is_state(producer.commit_transaction().await),
        "commit without begin"
    );
    assert!(
        is_state(producer.abort_transaction().await),
        "abort without begin"
    );

    producer.begin_transaction().expect("begin");
    assert!(is_state(producer.begin_transaction()), "begin twice");
    send(&*producer, on_partition_0(&topic, "inside")).await;
    producer
        .commit_transaction()
        .await
        .expect("the transaction is intact");

    let plain = backend.producer(None).await;
    assert_eq!(plain.transactional_id(), None);
    assert!(matches!(
        plain.init_transactions().await,
        Err(ProducerError::NotTransactional { .. })
    ));
    assert!(matches!(
        plain.begin_transaction(),
        Err(ProducerError::NotTransactional { .. })
    ));

    let reader = backend.reader().await;
    let committed = read_until(
        &*reader,
        &topic,
        0,
        IsolationLevel::ReadCommitted,
        has("inside"),
    )
    .await;
    assert_eq!(
        values(&committed),
        ["inside"],
        "the refused send wrote nothing"
    );
}
