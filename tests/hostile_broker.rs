//! A broker (or anything between it and us) that announces more than it sends must not stop the
//! process: every response decoder is bounded by its input (the crate's codecs, `protocol/`;
//! what changed from kafka-protocol 0.18.0: `protocol/PATCHED.md`). `scripts/dependent.sh` also
//! builds this file against the packaged crate, as a service that depends on it compiles it.
//!
//! Each network test answers one call of the crate's clients with a body whose array count is
//! `u32::MAX` (a compact-array varint; `i32::MAX` for a version without compact arrays) and
//! nothing after it, and checks the call fails with a typed error. Against the published
//! kafka-protocol 0.18.0 each of them aborts the whole test binary ("memory allocation of
//! ... bytes failed"). The decode tests at the end cover the record-batch decoder and the
//! size of what an announced count may make a decoder allocate.

#[path = "support/fake_broker.rs"]
mod fake_broker;

use std::alloc::System;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use fake_broker::{FakeBroker, Reply};
use kafka_protocol::messages::{ApiKey, MetadataResponse};
use kafka_protocol::protocol::Decodable;
use kafka_protocol::records::RecordBatchDecoder;
use kafka_share_sink::ProtocolError;
use kafka_share_sink::producer::{
    DeliveryFuture, KafkaProducer, KafkaProducerConfig, Producer, ProducerError, ProducerRecord,
};
use kafka_share_sink::{
    AdminError, ClientError, ConsumerError, KafkaAdmin, KafkaShareConsumer,
    KafkaShareConsumerConfig, ShareConsumer,
};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

/// Counts the bytes the process allocates (no unsafe code of ours: the crate forbids it).
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// More than any call below allocates with bounded decoders (a few MiB), tests running
/// alongside included; far less than an announced count makes an unbounded decoder ask for.
const ALLOCATION_LIMIT: usize = 64 << 20;

const WAIT: Duration = Duration::from_secs(10);

/// The allocation counter counts the whole process: tests take turns, so one test's
/// allocations are not counted against another running beside it.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `zeros` zero bytes (the fields before the array: throttle time, error code), then an array
/// count of `u32::MAX` as a compact array's unsigned varint, or `i32::MAX` as a plain array's
/// int32 for a version that is not flexible. Nothing follows.
fn huge_array(zeros: usize, flexible: bool) -> Bytes {
    let mut body = BytesMut::zeroed(zeros);
    if flexible {
        body.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    } else {
        body.put_i32(i32::MAX);
    }
    body.freeze()
}

/// Asserts `error` is the retriable Garbled error of an undecodable `api` response (its
/// connection was closed), with the decoder's reason as its source.
#[track_caller]
fn assert_undecodable(error: &ConsumerError, api: &str) {
    let ConsumerError::Protocol(garbled) = error else {
        panic!("a Protocol error expected: {error:?}");
    };
    assert_garbled(garbled, api);
    assert!(
        error.is_retriable(),
        "the next call connects again: {error:?}"
    );
}

/// [`assert_undecodable`] for the cause the admin client carries.
#[track_caller]
fn assert_client_undecodable(error: &ClientError, api: &str) {
    let ClientError::Protocol(garbled) = error else {
        panic!("a Protocol error expected: {error:?}");
    };
    assert_garbled(garbled, api);
    assert!(
        error.is_retriable(),
        "the next call connects again: {error:?}"
    );
}

#[track_caller]
fn assert_garbled(error: &ProtocolError, api: &str) {
    assert!(
        matches!(error, ProtocolError::Garbled { api: a, source, .. }
            if *a == api && source.to_string().contains(&format!("cannot decode the {api} "))),
        "{error:?}"
    );
}

/// Asserts `error` is the admin's error for an undecodable `api` response during `call`: a
/// failed connect for the handshake, a broken connection otherwise (the answer could not be
/// decoded, so its connection was closed), the cause as its source; retriable, since the next
/// call connects again.
#[track_caller]
fn assert_admin_undecodable(error: &AdminError, call: &str, api: &str) {
    let source = match error {
        AdminError::Connect { source, .. } if api == "ApiVersions" => source,
        AdminError::Connection { source, .. } => source,
        other => panic!("a Connection error expected: {other:?}"),
    };
    assert_eq!(error.call(), call, "{error}");
    assert_client_undecodable(source, api);
    assert!(error.is_retriable());
}

/// Asserts the process allocated less than [`ALLOCATION_LIMIT`] since `region` began.
#[track_caller]
fn assert_small(region: &Region<'_, System>) {
    let allocated = region.change().bytes_allocated;
    assert!(
        allocated < ALLOCATION_LIMIT,
        "{allocated} bytes allocated, limit {ALLOCATION_LIMIT}"
    );
}

fn consumer_config(broker: &FakeBroker) -> KafkaShareConsumerConfig {
    KafkaShareConsumerConfig::new(broker.addr(), "hostile-group")
        .fetch_max_wait(Duration::from_millis(50))
        .request_timeout(Duration::from_secs(5))
}

#[tokio::test]
async fn api_versions_during_connect() {
    let _turn = SERIAL.lock().await;
    let broker = FakeBroker::start().await;
    broker.on(ApiKey::ApiVersions, |request| {
        // Error code, then ApiKeys: with the 4-byte length and the correlation id, 15 bytes.
        Reply::Body(huge_array(2, request.version() >= 3))
    });
    let region = Region::new(GLOBAL);
    let error = KafkaShareConsumer::connect(consumer_config(&broker))
        .await
        .expect_err("an undecodable handshake");
    assert_undecodable(&error, "ApiVersions");
    let error = KafkaAdmin::connect(&broker.addr())
        .await
        .expect_err("an undecodable handshake");
    assert_admin_undecodable(&error, "connect", "ApiVersions");
    assert_small(&region);
}

#[tokio::test]
async fn metadata_of_the_admin_client() {
    let _turn = SERIAL.lock().await;
    let broker = FakeBroker::start().await;
    // ThrottleTimeMs, then Brokers.
    broker.on(ApiKey::Metadata, |request| {
        Reply::Body(huge_array(4, request.version() >= 9))
    });
    let region = Region::new(GLOBAL);
    let error = KafkaAdmin::connect(&broker.addr())
        .await
        .expect_err("undecodable metadata");
    assert_admin_undecodable(&error, "connect", "Metadata");
    assert_small(&region);
}

#[tokio::test]
async fn metadata_of_the_share_consumer() {
    let _turn = SERIAL.lock().await;
    let broker = FakeBroker::start().await;
    broker.add_topic("orders", 1);
    broker.on(ApiKey::Metadata, |request| {
        Reply::Body(huge_array(4, request.version() >= 9))
    });
    let region = Region::new(GLOBAL);
    let mut consumer = KafkaShareConsumer::connect(consumer_config(&broker))
        .await
        .expect("connect");
    consumer
        .subscribe(vec!["orders".to_owned()])
        .await
        .expect("subscribe");
    // The assignment arrives, the consumer looks up its leaders: it may report the error or
    // try again, but the process goes on.
    poll_until(&mut consumer, &broker, ApiKey::Metadata, 2, "Metadata").await;
    let _ = consumer.close(WAIT).await;
    assert_small(&region);
}

#[tokio::test]
async fn find_coordinator_of_the_background_heartbeat() {
    let _turn = SERIAL.lock().await;
    let broker = FakeBroker::start().await;
    broker.add_topic("orders", 1);
    // ThrottleTimeMs, then Coordinators (v4+; older versions have no array).
    broker.on(ApiKey::FindCoordinator, |request| {
        assert!(request.version() >= 4, "v{}", request.version());
        Reply::Body(huge_array(4, true))
    });
    let region = Region::new(GLOBAL);
    let mut consumer = KafkaShareConsumer::connect(consumer_config(&broker))
        .await
        .expect("connect");
    consumer
        .subscribe(vec!["orders".to_owned()])
        .await
        .expect("subscribe");
    // Two lookups: the heartbeat task got the first answer and carried on.
    poll_until(
        &mut consumer,
        &broker,
        ApiKey::FindCoordinator,
        2,
        "FindCoordinator",
    )
    .await;
    let _ = consumer.close(WAIT).await;
    assert_small(&region);
}

#[tokio::test]
async fn share_group_heartbeat_after_subscribe_returned() {
    let _turn = SERIAL.lock().await;
    let broker = FakeBroker::start().await;
    broker.add_topic("orders", 1);
    broker.on(ApiKey::ShareGroupHeartbeat, |_| {
        let mut body = BytesMut::new();
        body.put_i32(0); // ThrottleTimeMs
        body.put_i16(0); // ErrorCode
        body.put_u8(0); // ErrorMessage: null
        body.put_u8(0); // MemberId: null
        body.put_i32(1); // MemberEpoch
        body.put_i32(1_000); // HeartbeatIntervalMs
        body.put_i8(1); // Assignment: present
        body.put_slice(&huge_array(0, true)); // Assignment.TopicPartitions
        Reply::Body(body.freeze())
    });
    let region = Region::new(GLOBAL);
    let mut consumer = KafkaShareConsumer::connect(consumer_config(&broker))
        .await
        .expect("connect");
    consumer
        .subscribe(vec!["orders".to_owned()])
        .await
        .expect("subscribe returns before the first heartbeat is answered");
    poll_until(
        &mut consumer,
        &broker,
        ApiKey::ShareGroupHeartbeat,
        2,
        "ShareGroupHeartbeat",
    )
    .await;
    // The leave heartbeat gets the same answer: close reports it, or not, but returns.
    let _ = consumer.close(WAIT).await;
    assert_small(&region);
}

/// Polls until `n` requests of `api` arrived. Each poll may return nothing or the typed error
/// of the undecodable `name` response; nothing else.
async fn poll_until(
    consumer: &mut KafkaShareConsumer,
    broker: &FakeBroker,
    api: ApiKey,
    n: usize,
    name: &str,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while broker.count(api) < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} {api:?} request(s) in {WAIT:?}, {n} expected",
            broker.count(api)
        );
        match consumer.poll(Duration::from_millis(200)).await {
            Ok(records) => assert!(records.is_empty()),
            Err(error) => assert_undecodable(&error, name),
        }
    }
}

/// An admin client of `broker`, with the default answers to connect.
async fn admin(broker: &FakeBroker) -> KafkaAdmin {
    KafkaAdmin::connect(&broker.addr()).await.expect("connect")
}

/// A request the broker never answers: the call ends at the request timeout, naming the
/// request; its connection is left behind (a broker answers in order, so later requests would
/// wait behind it), and the next calls, two at once, are answered on one new connection.
#[tokio::test]
async fn an_unanswered_admin_request_times_out_and_the_next_call_connects_again() {
    let _turn = SERIAL.lock().await;
    let broker = FakeBroker::start().await;
    let admin = KafkaAdmin::builder(broker.addr())
        .request_timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("connect");
    broker.once(ApiKey::CreateTopics, |_| Reply::Never);
    let before = broker.connections();
    let error = admin
        .create_topic("orders", 1, 1)
        .await
        .expect_err("no answer");
    assert!(
        matches!(
            error,
            AdminError::Timeout {
                call: "create_topic",
                api: "CreateTopics",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.is_retriable());
    let (orders, payments) = tokio::join!(
        admin.create_topic("orders", 1, 1),
        admin.create_topic("payments", 1, 1)
    );
    orders.expect("answered on a new connection");
    payments.expect("answered on a new connection");
    assert_eq!(
        broker.connections(),
        before + 1,
        "one new connection for both calls"
    );
}

#[tokio::test]
async fn create_topics_of_the_admin_client() {
    let _turn = SERIAL.lock().await;
    let broker = FakeBroker::start().await;
    let admin = admin(&broker).await;
    // ThrottleTimeMs, then Topics.
    broker.on(ApiKey::CreateTopics, |request| {
        Reply::Body(huge_array(4, request.version() >= 5))
    });
    let region = Region::new(GLOBAL);
    let error = admin
        .create_topic("orders", 1, 1)
        .await
        .expect_err("undecodable");
    assert_admin_undecodable(&error, "create_topic", "CreateTopics");
    assert_small(&region);
}

#[tokio::test]
async fn incremental_alter_configs_of_the_admin_client() {
    let _turn = SERIAL.lock().await;
    let broker = FakeBroker::start().await;
    let admin = admin(&broker).await;
    // ThrottleTimeMs, then Responses.
    broker.on(ApiKey::IncrementalAlterConfigs, |request| {
        Reply::Body(huge_array(4, request.version() >= 1))
    });
    let region = Region::new(GLOBAL);
    let error = admin
        .set_share_group_config("group", &[("share.auto.offset.reset", "earliest")])
        .await
        .expect_err("undecodable");
    assert_admin_undecodable(&error, "set_share_group_config", "IncrementalAlterConfigs");
    assert_small(&region);
}

#[tokio::test]
async fn delete_topics_of_the_admin_client() {
    let _turn = SERIAL.lock().await;
    let broker = FakeBroker::start().await;
    broker.add_topic("orders", 1);
    let admin = admin(&broker).await;
    // ThrottleTimeMs, then Responses.
    broker.on(ApiKey::DeleteTopics, |request| {
        Reply::Body(huge_array(4, request.version() >= 4))
    });
    let region = Region::new(GLOBAL);
    let error = admin.delete_topic("orders").await.expect_err("undecodable");
    assert_admin_undecodable(&error, "delete_topic", "DeleteTopics");
    assert_small(&region);
}

/// A producer of `broker` that gives up a record after a few seconds.
async fn producer(broker: &FakeBroker) -> KafkaProducer {
    broker.advertise(ApiKey::InitProducerId, 0, 5);
    broker.advertise(ApiKey::Produce, 3, 12);
    KafkaProducer::connect(
        KafkaProducerConfig::new(broker.addr())
            .linger(Duration::from_millis(1))
            .retry_backoff(Duration::from_millis(10), Duration::from_millis(50))
            .delivery_timeout(Duration::from_secs(3)),
    )
    .await
    .expect("connect")
}

/// Asserts the record of `delivery` fails, within its delivery timeout, with a typed error:
/// its own timeout or the client error of the undecodable answer.
async fn assert_fails_typed(delivery: DeliveryFuture) {
    let error = tokio::time::timeout(WAIT, delivery)
        .await
        .expect("settled within the delivery timeout")
        .expect_err("no answer could be used");
    assert!(
        matches!(
            error,
            ProducerError::Timeout { .. } | ProducerError::Kafka { .. }
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn metadata_of_the_producer() {
    let _turn = SERIAL.lock().await;
    let broker = FakeBroker::start().await;
    broker.add_topic("out", 1);
    let producer = producer(&broker).await;
    // ThrottleTimeMs, then Brokers.
    broker.on(ApiKey::Metadata, |request| {
        Reply::Body(huge_array(4, request.version() >= 9))
    });
    let region = Region::new(GLOBAL);
    // The leader stays unknown: the record fails at its delivery timeout, typed.
    if let Ok(delivery) = producer.send(ProducerRecord::new("out").value("v")) {
        assert_fails_typed(delivery).await;
    }
    assert!(broker.count(ApiKey::Metadata) >= 1, "asked for metadata");
    assert_small(&region);
}

#[tokio::test]
async fn produce_of_the_producer() {
    let _turn = SERIAL.lock().await;
    let broker = FakeBroker::start().await;
    broker.add_topic("out", 1);
    let producer = producer(&broker).await;
    // Responses first (ThrottleTimeMs comes last in every version).
    broker.on(ApiKey::Produce, |request| {
        Reply::Body(huge_array(0, request.version() >= 9))
    });
    let region = Region::new(GLOBAL);
    let delivery = producer
        .send(ProducerRecord::new("out").partition(0).value("v"))
        .expect("queued");
    assert_fails_typed(delivery).await;
    assert!(broker.count(ApiKey::Produce) >= 1, "the record was sent");
    assert_small(&region);
}

#[tokio::test]
async fn share_fetch_of_the_share_consumer() {
    let _turn = SERIAL.lock().await;
    let broker = FakeBroker::start().await;
    broker.add_topic("orders", 1);
    // The crate's own v1/v2 codec: ThrottleTimeMs, ErrorCode, ErrorMessage (null),
    // AcquisitionLockTimeoutMs, then Responses.
    broker.on(ApiKey::ShareFetch, |_| Reply::Body(huge_array(11, true)));
    let region = Region::new(GLOBAL);
    let mut consumer = KafkaShareConsumer::connect(consumer_config(&broker))
        .await
        .expect("connect");
    consumer
        .subscribe(vec!["orders".to_owned()])
        .await
        .expect("subscribe");
    poll_until(&mut consumer, &broker, ApiKey::ShareFetch, 2, "ShareFetch").await;
    let _ = consumer.close(WAIT).await;
    assert_small(&region);
}

/// A ShareFetch answer that names one partition twice: its records reach the application once
/// (the second entry is not read), and each offset is acknowledged once.
#[tokio::test]
async fn a_partition_named_twice_in_one_share_fetch_answer_is_delivered_once() {
    use std::sync::atomic::{AtomicBool, Ordering};

    let _turn = SERIAL.lock().await;
    let broker = FakeBroker::start().await;
    let topic_id = broker.add_topic("orders", 1);
    let answered = std::sync::Arc::new(AtomicBool::new(false));
    broker.on(ApiKey::ShareFetch, move |request| {
        let body = request.share_fetch().expect("ShareFetch decodes");
        if body.request.topics.is_empty() || answered.swap(true, Ordering::SeqCst) {
            return Reply::Default;
        }
        let entry = fake_broker::acquired_partition(0, 0..3);
        Reply::share_fetch_partitions(topic_id, vec![entry.clone(), entry])
    });
    let mut consumer = KafkaShareConsumer::connect(consumer_config(&broker))
        .await
        .expect("connect");
    consumer
        .subscribe(vec!["orders".to_owned()])
        .await
        .expect("subscribe");
    let mut offsets = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    // Past the answer: polls until a few fetches after it came back empty.
    let mut fetches_after = None;
    while fetches_after.is_none_or(|n| broker.count(ApiKey::ShareFetch) < n) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} ShareFetch requests in {WAIT:?}; offsets polled: {offsets:?}",
            broker.count(ApiKey::ShareFetch)
        );
        let records = consumer
            .poll(Duration::from_millis(200))
            .await
            .expect("poll");
        for record in &records {
            consumer
                .acknowledge(record, kafka_share_sink::AcknowledgeType::Accept)
                .expect("acknowledge");
            offsets.push(record.offset());
        }
        if fetches_after.is_none() && !offsets.is_empty() {
            fetches_after = Some(broker.count(ApiKey::ShareFetch) + 3);
        }
    }
    assert_eq!(offsets, [0, 1, 2], "each record once");
    let results = consumer.commit_sync(WAIT).await.expect("commit");
    assert_eq!(results.failures().count(), 0, "{results:?}");
    let mut acknowledged: Vec<i64> = broker
        .requests()
        .iter()
        .flat_map(fake_broker::Request::acknowledgement_batches)
        .flat_map(|(first, last, _)| first..=last)
        .collect();
    acknowledged.sort_unstable();
    assert_eq!(acknowledged, [0, 1, 2], "each offset acknowledged once");
    let _ = consumer.close(WAIT).await;
}

// The decoders themselves, without a network.

#[test]
fn an_announced_count_allocates_no_more_than_the_input() {
    let _turn = SERIAL.blocking_lock();
    // Metadata v12: ThrottleTimeMs, then Brokers announcing four million entries, then 4 MiB
    // of zeros, which fail to decode as the first broker. Room for four million brokers up
    // front would be hundreds of MiB: a bound in elements (`count.min(bytes left)`) is not
    // enough when an element is larger in memory than on the wire.
    let mut body = BytesMut::new();
    body.put_i32(0);
    body.put_slice(&[0x81, 0x92, 0xf4, 0x01]); // unsigned varint 4_000_001: 4_000_000 entries
    body.put_bytes(0, 4 << 20);
    let mut body = body.freeze();
    let region = Region::new(GLOBAL);
    let result = MetadataResponse::decode(&mut body, 12);
    assert!(result.is_err(), "zeros are no broker entry");
    let allocated = region.change().bytes_allocated;
    assert!(
        allocated <= 8 << 20,
        "{allocated} bytes allocated to decode 4 MiB"
    );
}

/// A v2 record batch without compression: `records_count` announced, `records` after the
/// header. The CRC is right, so decoding gets to the records.
fn record_batch(records_count: i32, records: &[u8]) -> Bytes {
    let mut after_crc = BytesMut::new();
    after_crc.put_i16(0); // attributes: no compression
    after_crc.put_i32(0); // lastOffsetDelta
    after_crc.put_i64(0); // baseTimestamp
    after_crc.put_i64(0); // maxTimestamp
    after_crc.put_i64(-1); // producerId
    after_crc.put_i16(-1); // producerEpoch
    after_crc.put_i32(-1); // baseSequence
    after_crc.put_i32(records_count);
    after_crc.put_slice(records);
    let mut batch = BytesMut::new();
    batch.put_i64(0); // baseOffset
    batch.put_i32(i32::try_from(4 + 1 + 4 + after_crc.len()).expect("small")); // batchLength
    batch.put_i32(0); // partitionLeaderEpoch
    batch.put_i8(2); // magic
    batch.put_u32(crc32c::crc32c(&after_crc));
    batch.put_slice(&after_crc);
    batch.freeze()
}

#[test]
fn a_record_count_larger_than_the_batch_fails_the_batch() {
    let _turn = SERIAL.blocking_lock();
    let region = Region::new(GLOBAL);
    let result = RecordBatchDecoder::decode(&mut record_batch(i32::MAX, &[]));
    assert!(result.is_err(), "no record follows");
    assert_small(&region);
}

#[test]
fn a_header_count_larger_than_the_record_fails_the_batch() {
    let _turn = SERIAL.blocking_lock();
    // One record: size 10, attributes, timestamp delta 0, offset delta 0, null key, null
    // value, then a header count of i32::MAX (zigzag varint) and no header.
    let record = [
        0x14, 0x00, 0x00, 0x00, 0x01, 0x01, 0xfe, 0xff, 0xff, 0xff, 0x0f,
    ];
    let region = Region::new(GLOBAL);
    let result = RecordBatchDecoder::decode(&mut record_batch(1, &record));
    assert!(result.is_err(), "no header follows");
    assert_small(&region);
}
