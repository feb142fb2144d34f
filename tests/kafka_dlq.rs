//! `KafkaDeadLetterQueue` against a real broker (skipped without `KAFKA_BOOTSTRAP`), plus
//! its connection failures on loopback ports (always run).
//!
//! Records are read back two ways: with rskafka, an independent decoder, where its lossy
//! header map allows (unique keys, no null values), and with the crate's share consumer,
//! which keeps header order, repeated keys and null values.

// `support` is shared with other test targets; its `pub` items are reachable only here.
#[allow(unreachable_pub)]
mod support;

#[path = "support/fake_broker.rs"]
mod fake_broker;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_share_sink::dlq::headers;
use kafka_share_sink::{
    AcknowledgeType, ConsumerRecord, DeadLetterError, DeadLetterQueue, DeadLetterRecord,
    ErrorContext, Headers, KafkaAdmin, KafkaDeadLetterQueue, KafkaDeadLetterQueueConfig,
    KafkaShareConsumer, KafkaShareConsumerConfig, ShareConsumer, Stage, TimestampType,
};
use kafka_share_sink::{BrokerError, ClientError, ConnectionError};
use rskafka::client::ClientBuilder;
use rskafka::record::RecordAndOffset;

/// A converter error with a cause.
#[derive(Debug, thiserror::Error)]
#[error("value is not JSON")]
struct NotJson(#[source] std::io::Error);

/// An error without a message.
#[derive(Debug, thiserror::Error)]
#[error("")]
struct Silent;

fn config(bootstrap: &str, topic: &str) -> KafkaDeadLetterQueueConfig {
    KafkaDeadLetterQueueConfig::new(bootstrap, topic)
        .connector("orders-sink", 3)
        .replication_factor(1)
        .delivery_timeout(Duration::from_secs(30))
}

fn pairs(headers: &Headers) -> Vec<(String, Option<Vec<u8>>)> {
    headers
        .iter()
        .map(|h| (h.key().to_owned(), h.value().map(|v| v.to_vec())))
        .collect()
}

fn text(key: &str, value: &str) -> (String, Option<Vec<u8>>) {
    (key.to_owned(), Some(value.as_bytes().to_vec()))
}

/// The ten context headers for `record` consumed at `orders-2@41`.
fn context_pairs(
    stage: &str,
    class: &str,
    exception: &str,
    message: Option<&str>,
    trace: &str,
) -> Vec<(String, Option<Vec<u8>>)> {
    vec![
        text(headers::TOPIC, "orders"),
        text(headers::PARTITION, "2"),
        text(headers::OFFSET, "41"),
        text(headers::CONNECTOR_NAME, "orders-sink"),
        text(headers::TASK_ID, "3"),
        text(headers::STAGE, stage),
        text(headers::CLASS_NAME, class),
        text(headers::EXCEPTION_CLASS_NAME, exception),
        (
            headers::EXCEPTION_MESSAGE.to_owned(),
            message.map(|m| m.as_bytes().to_vec()),
        ),
        text(headers::EXCEPTION_STACKTRACE, trace),
    ]
}

/// Reads every record of a partition with rskafka.
async fn read_with_rskafka(bootstrap: &str, topic: &str, partition: i32) -> Vec<RecordAndOffset> {
    let partition = support::rskafka_partition(bootstrap, topic, partition).await;
    let (records, _high_watermark) = partition
        .fetch_records(0, 1..10_000_000, 1_000)
        .await
        .expect("fetch");
    records
}

/// Reads `n` records of `topic` with a share group starting at the earliest offset.
async fn read_with_share_consumer(bootstrap: &str, topic: &str, n: usize) -> Vec<ConsumerRecord> {
    let group = support::unique("dlq-reader");
    KafkaAdmin::connect(bootstrap)
        .await
        .expect("admin")
        .set_share_group_config(&group, &[("share.auto.offset.reset", "earliest")])
        .await
        .expect("group config");
    let mut consumer = KafkaShareConsumer::connect(
        KafkaShareConsumerConfig::new(bootstrap, &group).fetch_max_wait(Duration::from_millis(200)),
    )
    .await
    .expect("consumer connects");
    consumer
        .subscribe(vec![topic.to_owned()])
        .await
        .expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        let records = consumer
            .poll(Duration::from_millis(500))
            .await
            .expect("poll");
        for r in &records {
            consumer
                .acknowledge(r, AcknowledgeType::Accept)
                .expect("ack");
        }
        got.extend(records);
    }
    consumer
        .close(Duration::from_secs(10))
        .await
        .expect("close");
    got.sort_by_key(|r| (r.partition(), r.offset()));
    got
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_topic_is_created_and_context_headers_arrive_byte_for_byte() {
    let Some(bootstrap) =
        support::bootstrap("the_topic_is_created_and_context_headers_arrive_byte_for_byte")
    else {
        return;
    };
    let topic = support::unique("dlq-created");
    let dlq = KafkaDeadLetterQueue::connect(config(&bootstrap, &topic))
        .await
        .expect("connects and creates the topic");
    assert_eq!(dlq.topic(), topic);

    let client = ClientBuilder::new(vec![bootstrap.clone()])
        .build()
        .await
        .expect("rskafka client");
    let topics = client.list_topics().await.expect("list topics");
    let created = topics
        .iter()
        .find(|t| t.name == topic)
        .expect("the topic was created");
    assert_eq!(
        created.partitions.iter().copied().collect::<Vec<_>>(),
        vec![0],
        "one partition, as Connect creates it"
    );

    // Binary key and value, unique non-null headers: rskafka can read it back too.
    let mut original_headers = Headers::new();
    original_headers.push("source", Some(Bytes::from_static(b"web")));
    original_headers.push("bin", Some(Bytes::from_static(&[0x00, 0xff, 0x80])));
    let consumed = ConsumerRecord::new("orders", 2, 41)
        .with_key(Some(Bytes::from_static(&[0x00, 0x01, 0xfe, 0xff])))
        .with_value(Some(Bytes::from_static(&[0xff, 0x00, 0x7b, 0x22])))
        .with_headers(original_headers.clone())
        .with_timestamp(1_700_000_000_123, TimestampType::CreateTime);
    let error = NotJson(std::io::Error::other("expected value at line 1 column 1"));
    let context = ErrorContext::new(
        "orders-sink",
        3,
        Stage::ValueConverter,
        "org.apache.kafka.connect.json.JsonConverter",
        &error,
    )
    .with_exception_class_name("org.apache.kafka.connect.errors.DataException");
    dlq.send(vec![
        DeadLetterRecord::new(&consumed).with_context(&context),
    ])
    .await
    .expect("written");

    let mut expected = pairs(&original_headers);
    expected.extend(context_pairs(
        "VALUE_CONVERTER",
        "org.apache.kafka.connect.json.JsonConverter",
        "org.apache.kafka.connect.errors.DataException",
        Some("value is not JSON"),
        "org.apache.kafka.connect.errors.DataException: value is not JSON\n\
         Caused by: std::io::Error: expected value at line 1 column 1\n",
    ));

    let read = read_with_rskafka(&bootstrap, &topic, 0).await;
    assert_eq!(read.len(), 1);
    let record = &read[0].record;
    assert_eq!(record.key.as_deref(), Some(&[0x00, 0x01, 0xfe, 0xff][..]));
    assert_eq!(record.value.as_deref(), Some(&[0xff, 0x00, 0x7b, 0x22][..]));
    assert_eq!(record.timestamp.timestamp_millis(), 1_700_000_000_123);
    let expected_map: BTreeMap<String, Vec<u8>> = expected
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().unwrap()))
        .collect();
    assert_eq!(record.headers, expected_map);

    // The share consumer shows the order too.
    let read = read_with_share_consumer(&bootstrap, &topic, 1).await;
    assert_eq!(read.len(), 1);
    assert_eq!(pairs(read[0].headers()), expected);
    assert_eq!(read[0].key(), consumed.key());
    assert_eq!(read[0].value(), consumed.value());
    assert_eq!(read[0].timestamp(), 1_700_000_000_123);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_and_null_headers_and_missing_timestamps_survive() {
    let Some(bootstrap) =
        support::bootstrap("repeated_and_null_headers_and_missing_timestamps_survive")
    else {
        return;
    };
    let topic = support::unique("dlq-headers");
    let dlq = KafkaDeadLetterQueue::connect(config(&bootstrap, &topic))
        .await
        .expect("connects");

    let mut original_headers = Headers::new();
    original_headers.push("trace", Some(Bytes::from_static(b"a")));
    original_headers.push("trace", Some(Bytes::from_static(b"b")));
    original_headers.push("gone", None);
    original_headers.push("empty", Some(Bytes::new()));
    let tombstone = ConsumerRecord::new("orders", 2, 41)
        .with_headers(original_headers.clone())
        .with_timestamp(-1, TimestampType::NoTimestampType);
    let error = Silent;
    let context = ErrorContext::new(
        "orders-sink",
        3,
        Stage::TaskPut,
        ErrorContext::CONNECT_SINK_TASK_CLASS,
        &error,
    )
    .with_exception_class_name("com.example.Silent");
    let keyed = ConsumerRecord::new("orders", 0, 5)
        .with_key(Some(Bytes::from_static(b"k")))
        .with_value(Some(Bytes::from_static(b"v")))
        .with_timestamp(1_600_000_000_000, TimestampType::LogAppendTime);

    let before = now_ms();
    dlq.send(vec![
        DeadLetterRecord::new(&tombstone).with_context(&context),
        DeadLetterRecord::new(&keyed),
    ])
    .await
    .expect("written");
    let after = now_ms();

    let read = read_with_share_consumer(&bootstrap, &topic, 2).await;
    assert_eq!(read.len(), 2, "{read:?}");
    let mut expected = pairs(&original_headers);
    expected.extend(context_pairs(
        "TASK_PUT",
        "org.apache.kafka.connect.sink.SinkTask",
        "com.example.Silent",
        None,
        "com.example.Silent\n",
    ));
    assert_eq!(pairs(read[0].headers()), expected);
    assert_eq!((read[0].key(), read[0].value()), (None, None));
    assert!(
        (before..=after).contains(&read[0].timestamp()),
        "no original timestamp: stamped when written ({before} <= {} <= {after})",
        read[0].timestamp()
    );
    assert_eq!(read[1].key().map(|k| k.as_ref()), Some(&b"k"[..]));
    assert!(read[1].headers().is_empty());
    assert_eq!(read[1].timestamp(), 1_600_000_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_topic_with_several_partitions_is_spread_like_the_java_producer() {
    let Some(bootstrap) = support::bootstrap(
        "an_existing_topic_with_several_partitions_is_spread_like_the_java_producer",
    ) else {
        return;
    };
    let topic = support::unique("dlq-spread");
    let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
    admin.create_topic(&topic, 4, 1).await.expect("topic");
    // An existing topic is used as it is: this replication factor is never asked for.
    let dlq = KafkaDeadLetterQueue::connect(config(&bootstrap, &topic).replication_factor(5))
        .await
        .expect("an existing topic is fine");

    // Kafka's UtilsTest.testMurmur2 hashes, toPositive, modulo 4.
    let java: [(&str, i32); 6] = [
        ("21", 0),                                               // -973932308
        ("foobar", 2),                                           // -790332482
        ("a-little-bit-long-string", 0),                         // -985981536
        ("a-little-bit-longer-string", 3),                       // -1486304829
        ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", 1), // -58897971
        ("abc", 3),                                              // 479470107
    ];
    let keyed: Vec<DeadLetterRecord> = java
        .iter()
        .map(|(key, _)| {
            DeadLetterRecord::new(
                &ConsumerRecord::new("orders", 0, 0)
                    .with_key(Some(Bytes::from(key.as_bytes().to_vec())))
                    .with_value(Some(Bytes::from_static(b"keyed"))),
            )
        })
        .collect();
    dlq.send(keyed).await.expect("keyed records written");

    // Unkeyed records: one partition per send, another one for the next send.
    let unkeyed = |tag: &'static [u8]| {
        (0..3)
            .map(|_| {
                DeadLetterRecord::new(
                    &ConsumerRecord::new("orders", 0, 0).with_value(Some(Bytes::from_static(tag))),
                )
            })
            .collect::<Vec<_>>()
    };
    dlq.send(unkeyed(b"first"))
        .await
        .expect("first unkeyed send");
    dlq.send(unkeyed(b"second"))
        .await
        .expect("second unkeyed send");

    let mut placed: Vec<(String, i32)> = Vec::new();
    let mut unkeyed_at: BTreeMap<Vec<u8>, Vec<i32>> = BTreeMap::new();
    for partition in 0..4 {
        for r in read_with_rskafka(&bootstrap, &topic, partition).await {
            match r.record.key {
                Some(key) => placed.push((String::from_utf8(key).unwrap(), partition)),
                None => unkeyed_at
                    .entry(r.record.value.unwrap())
                    .or_default()
                    .push(partition),
            }
        }
    }
    placed.sort();
    let mut expected: Vec<(String, i32)> =
        java.iter().map(|(k, p)| ((*k).to_owned(), *p)).collect();
    expected.sort();
    assert_eq!(placed, expected);

    let first = &unkeyed_at[&b"first".to_vec()];
    let second = &unkeyed_at[&b"second".to_vec()];
    assert_eq!(first.len(), 3);
    assert_eq!(second.len(), 3);
    assert!(
        first.iter().all(|p| *p == first[0]),
        "sticky within a send: {first:?}"
    );
    assert!(
        second.iter().all(|p| *p == second[0]),
        "sticky within a send: {second:?}"
    );
    assert_ne!(first[0], second[0], "the next send moves on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_factors_the_cluster_cannot_place_are_refused_with_advice() {
    let Some(bootstrap) =
        support::bootstrap("replication_factors_the_cluster_cannot_place_are_refused_with_advice")
    else {
        return;
    };
    let topic = support::unique("dlq-rf");
    let error = KafkaDeadLetterQueue::connect(config(&bootstrap, &topic).replication_factor(3))
        .await
        .expect_err("three replicas on one broker");
    let DeadLetterError::CreateTopic {
        topic: named,
        hint,
        source,
    } = &error
    else {
        panic!("expected CreateTopic, got {error:?}");
    };
    assert_eq!(named, &topic);
    assert!(
        matches!(
            source,
            ClientError::Broker(BrokerError {
                name: "INVALID_REPLICATION_FACTOR",
                ..
            })
        ),
        "{source:?}"
    );
    assert!(
        hint.contains("errors.deadletterqueue.topic.replication.factor"),
        "{hint}"
    );
    assert!(!error.is_retriable());

    // -1: the broker's default.replication.factor (1 on the test broker).
    let dlq = KafkaDeadLetterQueue::connect(config(&bootstrap, &topic).replication_factor(-1))
        .await
        .expect("the broker default");
    dlq.send(vec![DeadLetterRecord::new(&ConsumerRecord::new("t", 0, 0))])
        .await
        .expect("written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_records_fail_at_once_and_a_deleted_topic_within_the_timeout() {
    let Some(bootstrap) =
        support::bootstrap("refused_records_fail_at_once_and_a_deleted_topic_within_the_timeout")
    else {
        return;
    };
    let topic = support::unique("dlq-refused");
    let timeout = Duration::from_secs(3);
    let dlq = KafkaDeadLetterQueue::connect(config(&bootstrap, &topic).delivery_timeout(timeout))
        .await
        .expect("connects");

    // Above the broker's message.max.bytes (1 MiB by default): refused, not retried.
    let huge = ConsumerRecord::new("t", 0, 0).with_value(Some(Bytes::from(vec![7u8; 2 << 20])));
    let started = Instant::now();
    let error = dlq
        .send(vec![DeadLetterRecord::new(&huge)])
        .await
        .expect_err("too large");
    assert!(
        matches!(
            &error,
            DeadLetterError::Rejected {
                partition: 0,
                source: ClientError::Broker(BrokerError {
                    name: "MESSAGE_TOO_LARGE",
                    ..
                }),
                ..
            }
        ),
        "{error:?}"
    );
    assert!(!error.is_retriable());
    assert!(started.elapsed() < timeout, "not retried");

    // A topic deleted under the queue: retried until the delivery timeout, then a typed error.
    KafkaAdmin::connect(&bootstrap)
        .await
        .expect("admin")
        .delete_topic(&topic)
        .await
        .expect("deleted");
    let started = Instant::now();
    let error = dlq
        .send(vec![DeadLetterRecord::new(&ConsumerRecord::new("t", 0, 0))])
        .await
        .expect_err("no topic");
    let elapsed = started.elapsed();
    assert!(
        matches!(&error, DeadLetterError::Timeout { timeout: t, last: Some(_) } if *t == timeout),
        "{error:?}"
    );
    assert!(error.is_retriable());
    assert!(
        elapsed >= timeout && elapsed < timeout + Duration::from_secs(2),
        "{elapsed:?}"
    );
}

#[tokio::test]
async fn an_unreachable_bootstrap_is_a_typed_error_within_the_timeout() {
    // No broker needed: a loopback port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    drop(listener);
    let timeout = Duration::from_secs(5);
    let started = Instant::now();
    let error = KafkaDeadLetterQueue::connect(
        KafkaDeadLetterQueueConfig::new(&addr, "dlq").delivery_timeout(timeout),
    )
    .await
    .expect_err("closed port");
    assert!(started.elapsed() < timeout);
    assert!(
        matches!(
            &error,
            DeadLetterError::Kafka { topic, source: ClientError::Connection(ConnectionError::Io { broker, .. }) }
                if topic == "dlq" && *broker == addr
        ),
        "{error:?}"
    );
    assert!(error.is_retriable());
}

#[tokio::test]
async fn a_broker_that_never_answers_times_out() {
    // No broker needed: a loopback port that accepts connections and says nothing.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let timeout = Duration::from_millis(1_500);
    let started = Instant::now();
    let error = KafkaDeadLetterQueue::connect(
        KafkaDeadLetterQueueConfig::new(&addr, "dlq").delivery_timeout(timeout),
    )
    .await
    .expect_err("no answer");
    let elapsed = started.elapsed();
    silent.abort();
    assert!(error.is_retriable(), "{error:?}");
    assert!(
        matches!(
            &error,
            DeadLetterError::Timeout { .. }
                | DeadLetterError::Kafka {
                    source: ClientError::Timeout(_),
                    ..
                }
        ),
        "{error:?}"
    );
    assert!(elapsed < timeout + Duration::from_secs(1), "{elapsed:?}");
}

#[tokio::test]
async fn invalid_settings_fail_before_connecting() {
    let error = KafkaDeadLetterQueue::connect(
        KafkaDeadLetterQueueConfig::new("127.0.0.1:1", "dlq").replication_factor(0),
    )
    .await
    .expect_err("replication factor 0");
    assert!(
        matches!(
            &error,
            DeadLetterError::Config {
                key: "errors.deadletterqueue.topic.replication.factor",
                ..
            }
        ),
        "{error:?}"
    );
}

/// Metadata and CreateTopics of the queue go out with its client id, and the broker is asked to
/// create the topic within the queue's request timeout (the delivery timeout here), not the
/// admin client's default.
#[tokio::test]
async fn the_topic_is_created_with_the_queues_client_id_and_timeout() {
    use kafka_protocol::messages::{ApiKey, CreateTopicsRequest};

    let broker = fake_broker::FakeBroker::start().await;
    // The queue's idempotent producer asks for a producer id (the fake broker answers it).
    broker.advertise(ApiKey::InitProducerId, 0, 5);
    let _dlq = KafkaDeadLetterQueue::connect(
        KafkaDeadLetterQueueConfig::new(broker.addr(), "dlq")
            .client_id("orders-dlq")
            .delivery_timeout(Duration::from_secs(6)),
    )
    .await
    .expect("connect to the fake broker");
    let [create] = broker
        .requests_of(ApiKey::CreateTopics)
        .try_into()
        .expect("one CreateTopics");
    let request: CreateTopicsRequest = create.decode().expect("decodes");
    assert_eq!(request.topics[0].name.0.as_str(), "dlq");
    assert_eq!(request.timeout_ms, 5_000, "5/6 of the 6 s request timeout");
    let requests = broker.requests();
    assert!(
        requests
            .iter()
            .all(|r| r.header.client_id.as_deref() == Some("orders-dlq")),
        "{:?}",
        requests
            .iter()
            .map(|r| (r.api_key(), r.header.client_id.clone()))
            .collect::<Vec<_>>()
    );
}

/// A retriable error while setting the queue up (here CreateTopics answered REQUEST_TIMED_OUT
/// once) is tried again within the delivery timeout, as a topic not ready yet is, instead of
/// failing `connect` at once.
#[tokio::test]
async fn a_retriable_error_while_creating_the_topic_is_tried_again() {
    use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
    use kafka_protocol::messages::{ApiKey, CreateTopicsResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;

    let broker = fake_broker::FakeBroker::start().await;
    // The queue's idempotent producer asks for a producer id (the fake broker answers it).
    broker.advertise(ApiKey::InitProducerId, 0, 5);
    broker.once(ApiKey::CreateTopics, |r| {
        let timed_out = CreatableTopicResult::default()
            .with_name(TopicName(StrBytes::from_static_str("dlq")))
            .with_error_code(7);
        fake_broker::Reply::message(
            &CreateTopicsResponse::default().with_topics(vec![timed_out]),
            r.version(),
        )
    });
    KafkaDeadLetterQueue::connect(
        KafkaDeadLetterQueueConfig::new(broker.addr(), "dlq")
            .delivery_timeout(Duration::from_secs(6)),
    )
    .await
    .expect("set up after the retriable error");
    assert_eq!(broker.count(ApiKey::CreateTopics), 2);
}
