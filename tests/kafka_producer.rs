//! The crate's `KafkaProducer` against a real single-node broker: idempotent sends in order
//! without duplicates, every codec, headers, transactions (commit visible, abort not),
//! fencing, and a transaction the coordinator aborts after `transaction.timeout.ms`.
//!
//! Records are read back with rskafka (read_uncommitted, an independent decoder) and with
//! `support/read_committed.rs` (Fetch isolation_level=1 with aborted-transaction filtering).

#[path = "support/read_committed.rs"]
mod read_committed;
#[allow(unreachable_pub)]
mod support;

use std::time::Duration;

use kafka_share_sink::KafkaAdmin;
use kafka_share_sink::producer::{
    IsolationLevel, KafkaLogReader, KafkaProducer, KafkaProducerConfig, LogReader, Producer,
    ProducerError, ProducerRecord,
};
use rskafka::record::RecordAndOffset;

async fn topic(bootstrap: &str, prefix: &str, partitions: i32) -> String {
    let name = support::unique(prefix);
    let admin = KafkaAdmin::connect(bootstrap).await.expect("admin");
    admin
        .create_topic(&name, partitions, 1)
        .await
        .expect("create topic");
    name
}

async fn read_all(bootstrap: &str, topic: &str, partition: i32) -> Vec<RecordAndOffset> {
    let partition = support::rskafka_partition(bootstrap, topic, partition).await;
    let mut out: Vec<RecordAndOffset> = Vec::new();
    loop {
        let next = out.last().map_or(0, |r| r.offset + 1);
        let (records, high) = partition
            .fetch_records(next, 1..10_000_000, 500)
            .await
            .expect("fetch");
        out.extend(records);
        if out.last().map_or(0, |r| r.offset + 1) >= high {
            return out;
        }
    }
}

fn value(r: &RecordAndOffset) -> String {
    String::from_utf8(r.record.value.clone().unwrap_or_default()).expect("utf8")
}

#[tokio::test]
async fn idempotent_sends_keep_order_per_partition_without_duplicates() {
    let Some(bootstrap) = support::bootstrap("idempotent_sends") else {
        return;
    };
    let topic = topic(&bootstrap, "producer-idem", 3).await;
    let producer = KafkaProducer::connect(
        KafkaProducerConfig::new(&bootstrap)
            .linger(Duration::from_millis(2))
            .batch_size(512),
    )
    .await
    .expect("connect");
    let mut futures = Vec::new();
    for i in 0..600 {
        let key = format!("k{}", i % 7);
        let record = ProducerRecord::new(topic.as_str())
            .key(key)
            .value(format!("{}:{i}", i % 7));
        futures.push(producer.send(record).expect("queued"));
    }
    producer.flush().await.expect("flush");
    let mut by_partition = std::collections::HashMap::<i32, Vec<i64>>::new();
    for f in futures {
        let meta = f.await.expect("delivered");
        by_partition
            .entry(meta.partition)
            .or_default()
            .push(meta.offset);
    }
    for offsets in by_partition.values() {
        assert!(
            offsets.windows(2).all(|w| w[0] < w[1]),
            "offsets increase in send order"
        );
    }
    let mut total = 0;
    for partition in 0..3 {
        let records = read_all(&bootstrap, &topic, partition).await;
        total += records.len();
        // Per key, values arrive in send order, each once.
        let mut last = std::collections::HashMap::<String, i64>::new();
        for r in &records {
            let v = value(r);
            let (k, i) = v.split_once(':').expect("k:i");
            let i: i64 = i.parse().expect("number");
            if let Some(prev) = last.insert(k.to_owned(), i) {
                assert!(prev < i, "key {k}: {i} after {prev}");
            }
        }
    }
    assert_eq!(total, 600, "every record once");
}

/// A small xorshift generator: random moments without a dependency.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cuts_while_pipelining_lose_and_reorder_nothing() {
    let Some(bootstrap) = support::bootstrap("connection_cuts") else {
        return;
    };
    let topic = topic(&bootstrap, "producer-cuts", 3).await;
    let producer = std::sync::Arc::new(
        KafkaProducer::connect(
            KafkaProducerConfig::new(&bootstrap)
                .linger(Duration::from_millis(1))
                .batch_size(1024)
                .max_in_flight(5)
                .delivery_timeout(Duration::from_secs(60)),
        )
        .await
        .expect("connect"),
    );
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    println!("seed {seed}");
    let cutter = {
        let producer = std::sync::Arc::clone(&producer);
        let mut seed = next_random(&mut seed);
        tokio::spawn(async move {
            let mut cuts = 0;
            for _ in 0..25 {
                let pause = 5 + next_random(&mut seed) % 20;
                tokio::time::sleep(Duration::from_millis(pause)).await;
                producer.disconnect();
                cuts += 1;
            }
            cuts
        })
    };
    const RECORDS: usize = 4000;
    let mut futures = Vec::with_capacity(RECORDS);
    for i in 0..RECORDS {
        let record = ProducerRecord::new(topic.as_str())
            .key(format!("k{}", i % 13))
            .value(i.to_string());
        futures.push(producer.send(record).expect("queued"));
        if i % 20 == 19 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let cuts = cutter.await.expect("cutter");
    assert!(cuts >= 20, "{cuts} cuts");
    tokio::time::timeout(Duration::from_secs(90), producer.flush())
        .await
        .expect("flush in time")
        .expect("flush");
    // What each partition must hold: the records sent to it, in send order, once.
    let mut expected = std::collections::HashMap::<i32, Vec<usize>>::new();
    for (i, future) in futures.into_iter().enumerate() {
        let meta = future.await.expect("delivered despite the cuts");
        expected.entry(meta.partition).or_default().push(i);
    }
    assert_eq!(expected.len(), 3, "keys spread over the partitions");
    let reader = KafkaLogReader::builder(&bootstrap)
        .client_id("producer-cuts-check")
        .connect()
        .await
        .expect("reader");
    for (partition, sent) in &expected {
        let end = reader
            .end_offset(&topic, *partition, IsolationLevel::ReadUncommitted)
            .await
            .expect("end offset");
        let read: Vec<usize> = reader
            .read_until(
                &topic,
                *partition,
                0,
                end,
                IsolationLevel::ReadUncommitted,
                Duration::from_secs(30),
            )
            .await
            .expect("read back")
            .iter()
            .map(|r| {
                String::from_utf8(r.value().expect("a value").to_vec())
                    .expect("utf8")
                    .parse()
                    .expect("a number")
            })
            .collect();
        assert_eq!(
            &read, sent,
            "partition {partition}: every record once, in send order (KafkaLogReader)"
        );
        let read: Vec<usize> = read_all(&bootstrap, &topic, *partition)
            .await
            .iter()
            .map(|r| value(r).parse().expect("a number"))
            .collect();
        assert_eq!(
            &read, sent,
            "partition {partition}: every record once, in send order (rskafka)"
        );
    }
}

#[tokio::test]
async fn every_codec_round_trips_and_headers_keep_order_and_nulls() {
    let Some(bootstrap) = support::bootstrap("every_codec") else {
        return;
    };
    let topic = topic(&bootstrap, "producer-codecs", 1).await;
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let producer = KafkaProducer::connect(
            KafkaProducerConfig::new(&bootstrap)
                .compression(codec)
                .expect("codec"),
        )
        .await
        .expect("connect");
        for i in 0..20 {
            let record = ProducerRecord::new(topic.as_str())
                .partition(0)
                .key(format!("{codec}-{i}"))
                .value(format!("{codec} value {i} {}", "x".repeat(100)))
                .header("first", codec.to_owned())
                .null_header("nothing")
                .header("last", "z");
            drop(producer.send(record).expect("queued"));
        }
        producer.flush().await.expect("flush");
    }
    // Read with kafka-protocol's decoder (rskafka refuses null header values).
    let committed = read_committed::read_committed(&bootstrap, &topic, 0).await;
    assert_eq!(committed.len(), 100);
    for (n, r) in committed.iter().enumerate() {
        let codec = ["none", "gzip", "snappy", "lz4", "zstd"][n / 20];
        let i = n % 20;
        assert_eq!(
            r.value.as_deref(),
            Some(format!("{codec} value {i} {}", "x".repeat(100)).as_bytes())
        );
        let headers: Vec<(String, Option<Vec<u8>>)> = r
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_ref().map(|b| b.to_vec())))
            .collect();
        assert_eq!(headers.len(), 3);
        assert_eq!(
            headers[0],
            ("first".to_owned(), Some(codec.as_bytes().to_vec()))
        );
        assert_eq!(headers[1], ("nothing".to_owned(), None));
        assert_eq!(headers[2], ("last".to_owned(), Some(b"z".to_vec())));
    }
}

fn txn_config(bootstrap: &str, id: &str) -> KafkaProducerConfig {
    KafkaProducerConfig::new(bootstrap)
        .transactional_id(id)
        .delivery_timeout(Duration::from_secs(30))
}

#[tokio::test]
async fn committed_transactions_are_visible_and_aborted_ones_are_not() {
    let Some(bootstrap) = support::bootstrap("committed_transactions") else {
        return;
    };
    let topic = topic(&bootstrap, "producer-txn", 2).await;
    let producer = KafkaProducer::connect(txn_config(&bootstrap, &support::unique("txn")))
        .await
        .expect("connect");
    assert!(matches!(
        producer.send(ProducerRecord::new(topic.as_str()).value("x")),
        Err(ProducerError::TransactionState { .. })
    ));
    producer.init_transactions().await.expect("init");
    assert!(matches!(
        producer.send(ProducerRecord::new(topic.as_str()).value("x")),
        Err(ProducerError::TransactionState { .. })
    ));
    for round in 0..3 {
        producer.begin_transaction().expect("begin");
        assert!(producer.begin_transaction().is_err(), "begin while open");
        for p in 0..2 {
            for i in 0..5 {
                drop(
                    producer
                        .send(
                            ProducerRecord::new(topic.as_str())
                                .partition(p)
                                .value(format!("commit-{round}-{i}")),
                        )
                        .expect("queued"),
                );
            }
        }
        producer.commit_transaction().await.expect("commit");
        producer.begin_transaction().expect("begin");
        let delivered = producer
            .send(
                ProducerRecord::new(topic.as_str())
                    .partition(0)
                    .value(format!("abort-{round}")),
            )
            .expect("queued");
        producer.flush().await.expect("flush");
        delivered.await.expect("written before the abort");
        producer.abort_transaction().await.expect("abort");
    }
    for p in 0..2 {
        let visible: Vec<String> = read_committed::read_committed(&bootstrap, &topic, p)
            .await
            .iter()
            .map(|r| String::from_utf8(r.value.clone().unwrap_or_default().to_vec()).unwrap())
            .collect();
        let expected: Vec<String> = (0..3)
            .flat_map(|round| (0..5).map(move |i| format!("commit-{round}-{i}")))
            .collect();
        assert_eq!(visible, expected, "partition {p}: committed only, in order");
    }
}

#[tokio::test]
async fn a_second_producer_with_the_same_id_fences_the_first() {
    let Some(bootstrap) = support::bootstrap("fencing") else {
        return;
    };
    let topic = topic(&bootstrap, "producer-fence", 1).await;
    let id = support::unique("fence");
    let first = KafkaProducer::connect(txn_config(&bootstrap, &id))
        .await
        .expect("connect");
    first.init_transactions().await.expect("init");
    first.begin_transaction().expect("begin");
    let sent = first
        .send(ProducerRecord::new(topic.as_str()).value("from the first"))
        .expect("queued");
    first.flush().await.expect("flush");
    sent.await.expect("written");
    let second = KafkaProducer::connect(txn_config(&bootstrap, &id))
        .await
        .expect("connect");
    second
        .init_transactions()
        .await
        .expect("the second takes over");
    let error = first.commit_transaction().await.expect_err("fenced");
    assert!(matches!(error, ProducerError::Fenced { .. }), "{error:?}");
    assert!(error.is_fatal());
    assert!(
        first
            .send(ProducerRecord::new(topic.as_str()).value("late"))
            .is_err()
    );
    // The second works, and the first's record is not visible.
    second.begin_transaction().expect("begin");
    drop(
        second
            .send(ProducerRecord::new(topic.as_str()).value("from the second"))
            .expect("queued"),
    );
    second.commit_transaction().await.expect("commit");
    let visible: Vec<_> = read_committed::read_committed(&bootstrap, &topic, 0)
        .await
        .iter()
        .map(|r| r.value.clone().unwrap_or_default().to_vec())
        .collect();
    assert_eq!(visible, vec![b"from the second".to_vec()]);
}

#[tokio::test]
async fn a_transaction_past_its_timeout_is_aborted_by_the_coordinator_and_reported() {
    let Some(bootstrap) = support::bootstrap("txn_timeout") else {
        return;
    };
    let topic = topic(&bootstrap, "producer-txn-timeout", 1).await;
    let producer = KafkaProducer::connect(
        txn_config(&bootstrap, &support::unique("timeout"))
            .transaction_timeout(Duration::from_millis(2000)),
    )
    .await
    .expect("connect");
    producer.init_transactions().await.expect("init");
    producer.begin_transaction().expect("begin");
    let first = producer
        .send(ProducerRecord::new(topic.as_str()).value("too slow"))
        .expect("queued");
    producer.flush().await.expect("flush");
    first.await.expect("written");
    // The coordinator checks every second (scripts/kafka.sh); wait well past the timeout.
    tokio::time::sleep(Duration::from_millis(5000)).await;
    let late = producer.send(ProducerRecord::new(topic.as_str()).value("late"));
    let error = match late {
        Err(error) => error,
        Ok(future) => match producer.commit_transaction().await {
            Err(error) => {
                // The late send failed too.
                assert!(future.await.is_err());
                error
            }
            Ok(()) => panic!("a transaction aborted by the coordinator committed"),
        },
    };
    assert!(error.requires_abort(), "{error:?}");
    let text = format!("{error}");
    assert!(text.contains("abort"), "{text}");
    producer.abort_transaction().await.expect("abort recovers");
    producer.begin_transaction().expect("begin again");
    drop(
        producer
            .send(ProducerRecord::new(topic.as_str()).value("after"))
            .expect("queued"),
    );
    producer.commit_transaction().await.expect("commit");
    let visible: Vec<_> = read_committed::read_committed(&bootstrap, &topic, 0)
        .await
        .iter()
        .map(|r| r.value.clone().unwrap_or_default().to_vec())
        .collect();
    assert_eq!(visible, vec![b"after".to_vec()]);
}

#[tokio::test]
async fn batches_grow_no_larger_than_the_topic_takes() {
    // A burst to one partition backs it up, and its open batch grows past batch.size toward
    // max.request.size (1 MiB): on a topic whose max.message.bytes is 64 KiB it must stop
    // there, or the broker refuses the batch (MESSAGE_TOO_LARGE) and its records fail.
    let Some(bootstrap) = support::bootstrap("batches_grow_no_larger_than_the_topic_takes") else {
        return;
    };
    let name = support::unique("producer-topic-max");
    let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
    admin
        .create_topic_with(&name, 1, 1, &[("max.message.bytes", "65536")])
        .await
        .expect("create topic");
    burst_of_1000_reaches_a_64_kib_topic(&bootstrap, &name).await;
}

#[tokio::test]
async fn a_batch_refused_as_too_large_is_split_when_the_topic_limit_cannot_be_read() {
    // As above, but an ACL denies DESCRIBE_CONFIGS on the topic: the producer cannot read
    // its max.message.bytes, its grown batches are refused with MESSAGE_TOO_LARGE, and it
    // splits them and sends them again (Java's splitAndReenqueue): every record arrives, in
    // order. Needs the broker's ACL authorizer (`KAFKA_ACLS=1`).
    let Some(bootstrap) =
        support::bootstrap_with_acls("a_batch_refused_as_too_large_is_split_when_the_topic_limit")
    else {
        return;
    };
    let name = support::unique("producer-topic-max-denied");
    let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
    admin
        .create_topic_with(&name, 1, 1, &[("max.message.bytes", "65536")])
        .await
        .expect("create topic");
    // Once a topic has an ACL the open default no longer applies to it: allow everything,
    // then deny the plaintext listener's principal DESCRIBE_CONFIGS (a DENY wins).
    support::acls(
        &bootstrap,
        &[
            "--allow-principal",
            "User:*",
            "--operation",
            "All",
            "--topic",
            &name,
        ],
    );
    support::acls(
        &bootstrap,
        &[
            "--deny-principal",
            "User:ANONYMOUS",
            "--operation",
            "DescribeConfigs",
            "--topic",
            &name,
        ],
    );
    let denied = admin.topic_config(&name).await.expect_err("configs denied");
    assert_eq!(
        denied.broker_error().map(|e| e.name),
        Some("TOPIC_AUTHORIZATION_FAILED"),
        "{denied:?}"
    );
    burst_of_1000_reaches_a_64_kib_topic(&bootstrap, &name).await;

    // In a transaction too: the split parts go in the same transaction, which commits with
    // every record. (A batch in flight behind the split one, sent again rather than given up,
    // depends on timing here; the accumulator's unit test covers it.)
    let producer = KafkaProducer::connect(txn_config(&bootstrap, &support::unique("split-txn")))
        .await
        .expect("connect");
    producer.init_transactions().await.expect("init");
    producer.begin_transaction().expect("begin");
    // One record confirmed first: the partition then pipelines (up to five batches in
    // flight), as it does in a long-running transactional producer.
    let first = producer
        .send(
            ProducerRecord::new(name.as_str())
                .partition(0)
                .value("first"),
        )
        .expect("queued");
    producer.flush().await.expect("flush");
    first.await.expect("the first record");
    let payload = "y".repeat(1024);
    let futures: Vec<_> = (0..1000)
        .map(|i| {
            let record = ProducerRecord::new(name.as_str())
                .partition(0)
                .value(format!("{i}:{payload}"));
            producer.send(record).expect("queued")
        })
        .collect();
    producer.flush().await.expect("flush");
    for (i, f) in futures.into_iter().enumerate() {
        f.await
            .unwrap_or_else(|e| panic!("record {i} of the transaction delivered: {e:?}"));
    }
    producer.commit_transaction().await.expect("commit");
    let committed = read_committed::read_committed(&bootstrap, &name, 0).await;
    let ours: Vec<usize> = committed
        .iter()
        .filter_map(|r| {
            let value =
                String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
            let (index, rest) = value.split_once(':')?;
            rest.starts_with('y').then(|| index.parse().expect("index"))
        })
        .collect();
    assert_eq!(
        ours,
        (0..1000).collect::<Vec<_>>(),
        "the transaction's records, in order"
    );
}

/// Sends 1,000 records of 1 KiB at once to partition 0 of `name` (whose `max.message.bytes`
/// is 64 KiB) and checks that each arrived once, in order.
async fn burst_of_1000_reaches_a_64_kib_topic(bootstrap: &str, name: &str) {
    let producer = KafkaProducer::connect(KafkaProducerConfig::new(bootstrap))
        .await
        .expect("connect");
    let payload = "x".repeat(1024);
    let mut futures = Vec::new();
    for i in 0..1000 {
        let record = ProducerRecord::new(name)
            .partition(0)
            .value(format!("{i}:{payload}"));
        futures.push(producer.send(record).expect("queued"));
    }
    producer.flush().await.expect("flush");
    for (i, f) in futures.into_iter().enumerate() {
        f.await
            .unwrap_or_else(|e| panic!("record {i} delivered: {e:?}"));
    }
    let read: Vec<usize> = read_all(bootstrap, name, 0)
        .await
        .iter()
        .map(|r| {
            let value = r.record.value.as_deref().unwrap_or_default();
            let text = String::from_utf8_lossy(value);
            text.split(':')
                .next()
                .unwrap_or_default()
                .parse()
                .expect("index")
        })
        .collect();
    assert_eq!(
        read,
        (0..1000).collect::<Vec<_>>(),
        "each record once, in order"
    );
}

/// `buffer.memory` bounds the records waiting in the producer when the sender calls `ready`
/// before each `send`, as Java's `send` blocks: after each `ready`, the records sent and not
/// yet written hold less than `buffer.memory`, and every record is still written once, in
/// order. A record larger than the whole buffer is refused at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_keeps_the_records_waiting_within_buffer_memory() {
    use futures::FutureExt;
    let Some(bootstrap) = support::bootstrap("ready_buffer_memory") else {
        return;
    };
    let topic = topic(&bootstrap, "producer-buffer", 1).await;
    const VALUE: usize = 1_000;
    const BUFFER: usize = 16 * 1_024;
    let producer = KafkaProducer::connect(
        KafkaProducerConfig::new(&bootstrap)
            .linger(Duration::from_millis(20))
            .buffer_memory(BUFFER)
            .max_block(Duration::from_secs(30)),
    )
    .await
    .expect("connect");
    let too_large = producer.send(ProducerRecord::new(topic.as_str()).value(vec![b'x'; BUFFER]));
    assert!(
        matches!(
            too_large,
            Err(ProducerError::RecordTooLarge {
                key: "buffer.memory",
                max: BUFFER,
                ..
            })
        ),
        "{too_large:?}"
    );
    let mut pending: std::collections::VecDeque<kafka_share_sink::producer::DeliveryFuture> =
        std::collections::VecDeque::new();
    let mut offsets = Vec::new();
    let mut most_waiting = 0;
    for i in 0..1_000u32 {
        producer.ready().await.expect("room within max.block.ms");
        // Every future already complete is read; those left are the records still waiting.
        let mut waiting = 0;
        let mut still = std::collections::VecDeque::new();
        for mut future in pending.drain(..) {
            match tokio::task::unconstrained(&mut future).now_or_never() {
                Some(outcome) => offsets.push(outcome.expect("delivered").offset),
                None => {
                    waiting += 1;
                    still.push_back(future);
                }
            }
        }
        pending = still;
        most_waiting = most_waiting.max(waiting);
        let value = format!("{i:0>VALUE$}");
        pending.push_back(
            producer
                .send(ProducerRecord::new(topic.as_str()).value(value))
                .expect("queued"),
        );
    }
    for future in pending {
        offsets.push(future.await.expect("delivered").offset);
    }
    // Each record counts a little more than its value (its header and framing).
    assert!(
        most_waiting * VALUE < BUFFER,
        "{most_waiting} records of {VALUE} bytes waited, buffer.memory {BUFFER}"
    );
    // And the buffer did fill: `ready` had records to wait for.
    assert!(
        most_waiting >= BUFFER / (VALUE + 100),
        "at most {most_waiting} records waited: the buffer never filled"
    );
    offsets.sort_unstable();
    assert_eq!(offsets, (0..1_000).collect::<Vec<i64>>());
    let written = read_all(&bootstrap, &topic, 0).await;
    assert_eq!(written.len(), 1_000);
    assert!(
        written
            .iter()
            .enumerate()
            .all(|(i, r)| value(r) == format!("{i:0>VALUE$}")),
        "in order, once each"
    );
}
