//! Dead-letter records and the embedded dead-letter queue (no broker needed): Kafka
//! Connect's context headers byte for byte, the original record kept as it was, failures on
//! demand.

use std::time::Duration;

use bytes::Bytes;
use kafka_share_sink::dlq::headers;
use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, EmbeddedError, GroupConfig};
use kafka_share_sink::{
    AcknowledgeType, ConsumerRecord, DeadLetterError, DeadLetterQueue, DeadLetterRecord,
    ErrorContext, Headers, KafkaDeadLetterQueue, KafkaDeadLetterQueueConfig, ShareConsumer, Stage,
    TaskError, TimestampType,
};

/// A converter error with a cause, as a plugin would return it.
#[derive(Debug, thiserror::Error)]
#[error("value is not JSON")]
struct NotJson(#[source] std::io::Error);

/// An error whose message is empty: Connect writes a null message header for it.
#[derive(Debug, thiserror::Error)]
#[error("")]
struct Silent;

/// The original record: binary key and value, a repeated header key, a null and an empty
/// header value, a create time.
fn original() -> ConsumerRecord {
    let mut h = Headers::new();
    h.push("trace", Some(Bytes::from_static(b"a")));
    h.push("trace", Some(Bytes::from_static(b"b")));
    h.push("gone", None);
    h.push("empty", Some(Bytes::new()));
    h.push("bin", Some(Bytes::from_static(&[0x00, 0xff, 0x80])));
    ConsumerRecord::new("orders", 2, 41)
        .with_key(Some(Bytes::from_static(&[0x00, 0x01, 0xfe])))
        .with_value(Some(Bytes::from_static(&[0xff, 0x00, 0x7b])))
        .with_headers(h)
        .with_timestamp(1_700_000_000_123, TimestampType::CreateTime)
        .with_delivery_count(3)
}

/// Every header as (key, value bytes) for exact comparison.
fn pairs(headers: &Headers) -> Vec<(String, Option<Vec<u8>>)> {
    headers
        .iter()
        .map(|h| (h.key().to_owned(), h.value().map(|v| v.to_vec())))
        .collect()
}

fn pair(key: &str, value: Option<&str>) -> (String, Option<Vec<u8>>) {
    (key.to_owned(), value.map(|v| v.as_bytes().to_vec()))
}

/// The single record of a one-partition topic's log.
fn only_record(broker: &EmbeddedBroker, topic: &str) -> ConsumerRecord {
    let mut log = broker.read_log(topic, 0).expect("the topic exists");
    assert_eq!(log.len(), 1, "{log:?}");
    log.remove(0)
}

#[tokio::test]
async fn context_headers_are_connects_byte_for_byte() {
    let broker = EmbeddedBroker::new();
    let dlq = broker.dead_letter_queue("orders-dlq").unwrap();
    let consumed = original();
    let error = NotJson(std::io::Error::other("expected value at line 1 column 1"));
    let context = ErrorContext::new(
        "orders-sink",
        7,
        Stage::ValueConverter,
        "org.apache.kafka.connect.json.JsonConverter",
        &error,
    )
    .with_exception_class_name("org.apache.kafka.connect.errors.DataException");
    dlq.send(vec![
        DeadLetterRecord::new(&consumed).with_context(&context),
    ])
    .await
    .unwrap();

    let written = only_record(&broker, "orders-dlq");
    let mut expected = pairs(consumed.headers());
    expected.extend([
        pair(headers::TOPIC, Some("orders")),
        pair(headers::PARTITION, Some("2")),
        pair(headers::OFFSET, Some("41")),
        pair(headers::CONNECTOR_NAME, Some("orders-sink")),
        pair(headers::TASK_ID, Some("7")),
        pair(headers::STAGE, Some("VALUE_CONVERTER")),
        pair(
            headers::CLASS_NAME,
            Some("org.apache.kafka.connect.json.JsonConverter"),
        ),
        pair(
            headers::EXCEPTION_CLASS_NAME,
            Some("org.apache.kafka.connect.errors.DataException"),
        ),
        pair(headers::EXCEPTION_MESSAGE, Some("value is not JSON")),
        pair(
            headers::EXCEPTION_STACKTRACE,
            Some(
                "org.apache.kafka.connect.errors.DataException: value is not JSON\n\
                 Caused by: std::io::Error: expected value at line 1 column 1\n",
            ),
        ),
    ]);
    assert_eq!(pairs(written.headers()), expected);
    assert_eq!(written.key(), consumed.key());
    assert_eq!(written.value(), consumed.value());
    assert_eq!(written.timestamp(), 1_700_000_000_123);
    assert_eq!(written.topic(), "orders-dlq");
}

#[test]
fn header_names_are_connects() {
    assert_eq!(
        [
            headers::TOPIC,
            headers::PARTITION,
            headers::OFFSET,
            headers::CONNECTOR_NAME,
            headers::TASK_ID,
            headers::STAGE,
            headers::CLASS_NAME,
            headers::EXCEPTION_CLASS_NAME,
            headers::EXCEPTION_MESSAGE,
            headers::EXCEPTION_STACKTRACE,
        ],
        [
            "__connect.errors.topic",
            "__connect.errors.partition",
            "__connect.errors.offset",
            "__connect.errors.connector.name",
            "__connect.errors.task.id",
            "__connect.errors.stage",
            "__connect.errors.class.name",
            "__connect.errors.exception.class.name",
            "__connect.errors.exception.message",
            "__connect.errors.exception.stacktrace",
        ]
    );
}

#[test]
fn put_errors_name_the_sink_task_and_connects_exception() {
    let error = TaskError::fatal("row rejected by constraint");
    let context = ErrorContext::new(
        "s",
        0,
        Stage::TaskPut,
        ErrorContext::CONNECT_SINK_TASK_CLASS,
        &error,
    );
    let record = DeadLetterRecord::new(&ConsumerRecord::new("t", 0, 0)).with_context(&context);
    let value = |key| {
        record
            .headers()
            .last(key)
            .and_then(|h| h.value())
            .map(|v| String::from_utf8(v.to_vec()).unwrap())
    };
    assert_eq!(value(headers::STAGE).as_deref(), Some("TASK_PUT"));
    assert_eq!(
        value(headers::CLASS_NAME).as_deref(),
        Some("org.apache.kafka.connect.sink.SinkTask")
    );
    // The task's error is the exception a Java sink task would report: Connect's
    // ConnectException (RetriableException when retriable) with the cause's message.
    assert_eq!(
        value(headers::EXCEPTION_CLASS_NAME).as_deref(),
        Some("org.apache.kafka.connect.errors.ConnectException")
    );
    assert_eq!(
        value(headers::EXCEPTION_MESSAGE).as_deref(),
        Some("row rejected by constraint")
    );
    assert_eq!(
        value(headers::EXCEPTION_STACKTRACE).as_deref(),
        Some("org.apache.kafka.connect.errors.ConnectException: row rejected by constraint\n")
    );
    // A name given by the caller wins.
    let named = context.with_exception_class_name("com.example.ConstraintViolation");
    let record = DeadLetterRecord::new(&ConsumerRecord::new("t", 0, 0)).with_context(&named);
    let trace = record.headers().last(headers::EXCEPTION_STACKTRACE);
    assert_eq!(
        trace.and_then(|h| h.value()).map(|v| v.as_ref()),
        Some(&b"com.example.ConstraintViolation: row rejected by constraint\n"[..])
    );
}

#[test]
fn an_empty_message_is_a_null_header() {
    let dyn_error: Box<dyn std::error::Error + Send + Sync> = Box::new(Silent);
    let context = ErrorContext::new_dyn(
        "s",
        1,
        Stage::Transformation,
        "com.example.Mask",
        dyn_error.as_ref(),
        "com.example.MaskError",
    );
    let record = DeadLetterRecord::new(&ConsumerRecord::new("t", 0, 9)).with_context(&context);
    let message = record
        .headers()
        .last(headers::EXCEPTION_MESSAGE)
        .expect("the header is written");
    assert_eq!(message.value(), None);
    let trace = record
        .headers()
        .last(headers::EXCEPTION_STACKTRACE)
        .and_then(|h| h.value())
        .unwrap();
    assert_eq!(trace.as_ref(), b"com.example.MaskError\n");
}

#[tokio::test]
async fn without_context_the_original_is_kept_as_it_was() {
    let broker = EmbeddedBroker::new();
    let dlq = broker.dead_letter_queue("dlq").unwrap();
    let consumed = original();
    let record = DeadLetterRecord::new(&consumed);
    assert_eq!(record.original(), &consumed.id());
    assert_eq!(record.timestamp(), Some(1_700_000_000_123));
    dlq.send(vec![record]).await.unwrap();

    let written = only_record(&broker, "dlq");
    assert_eq!(pairs(written.headers()), pairs(consumed.headers()));
    assert_eq!(written.key(), consumed.key());
    assert_eq!(written.value(), consumed.value());
    assert_eq!(written.timestamp(), consumed.timestamp());
}

#[tokio::test]
async fn null_key_value_and_missing_timestamp() {
    let broker = EmbeddedBroker::new();
    let dlq = broker.dead_letter_queue("dlq").unwrap();
    let tombstone =
        ConsumerRecord::new("t", 0, 0).with_timestamp(-1, TimestampType::NoTimestampType);
    let record = DeadLetterRecord::new(&tombstone);
    assert_eq!(record.timestamp(), None);
    let before = now_ms();
    dlq.send(vec![record]).await.unwrap();
    let after = now_ms();

    let written = only_record(&broker, "dlq");
    assert_eq!((written.key(), written.value()), (None, None));
    assert!(
        (before..=after).contains(&written.timestamp()),
        "stamped when written: {before} <= {} <= {after}",
        written.timestamp()
    );
}

#[tokio::test]
async fn injected_failures_write_nothing_then_the_queue_recovers() {
    let broker = EmbeddedBroker::new();
    let dlq = broker.dead_letter_queue("dlq").unwrap();
    let batch = || {
        (0..3)
            .map(|o| DeadLetterRecord::new(&ConsumerRecord::new("t", 0, o)))
            .collect::<Vec<_>>()
    };
    // A clone shares the failure count, as a test keeps one while the driver owns another.
    let handle = dlq.clone();
    handle.fail_next(2);
    for _ in 0..2 {
        let error = dlq.send(batch()).await.unwrap_err();
        assert!(
            matches!(&error, DeadLetterError::Injected { topic } if topic == "dlq"),
            "{error:?}"
        );
        assert!(error.is_retriable());
    }
    assert!(broker.read_log("dlq", 0).unwrap().is_empty());
    dlq.send(batch()).await.unwrap();
    assert_eq!(broker.read_log("dlq", 0).unwrap().len(), 3);

    handle.fail_next(usize::MAX);
    for _ in 0..5 {
        assert!(dlq.send(batch()).await.is_err());
    }
    handle.fail_next(0);
    dlq.send(batch()).await.unwrap();
    assert_eq!(broker.read_log("dlq", 0).unwrap().len(), 6);
}

#[tokio::test]
async fn a_share_consumer_reads_the_dead_letter_topic() {
    let broker = EmbeddedBroker::new();
    let dlq = broker.dead_letter_queue("dlq").unwrap();
    assert_eq!(dlq.topic(), "dlq");
    broker
        .set_group_config(
            "dlq-reader",
            GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest),
        )
        .unwrap();
    let consumed = original();
    dlq.send(vec![DeadLetterRecord::new(&consumed)])
        .await
        .unwrap();

    let mut consumer = broker.share_consumer("dlq-reader");
    consumer.subscribe(vec!["dlq".into()]).await.unwrap();
    let records = consumer.poll(Duration::from_secs(1)).await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].value(), consumed.value());
    assert_eq!(pairs(records[0].headers()), pairs(consumed.headers()));
    consumer
        .acknowledge(&records[0], AcknowledgeType::Accept)
        .unwrap();
}

#[tokio::test]
async fn an_existing_topic_is_used_as_it_is() {
    let broker = EmbeddedBroker::new();
    broker.create_topic("dlq", 3).unwrap();
    let dlq = broker.dead_letter_queue("dlq").unwrap();
    dlq.send(
        (0..6)
            .map(|o| DeadLetterRecord::new(&ConsumerRecord::new("t", 0, o)))
            .collect(),
    )
    .await
    .unwrap();
    let total: usize = (0..3)
        .map(|p| broker.read_log("dlq", p).unwrap().len())
        .sum();
    assert_eq!(total, 6);
    assert_eq!(broker.topic_partitions().len(), 3);
}

#[test]
fn bad_names_and_unknown_logs_are_errors() {
    let broker = EmbeddedBroker::new();
    assert!(matches!(
        broker.dead_letter_queue("no spaces"),
        Err(EmbeddedError::InvalidTopic { .. })
    ));
    assert_eq!(
        broker.read_log("missing", 0).unwrap_err(),
        EmbeddedError::UnknownTopic("missing".into())
    );
    broker.create_topic("t", 1).unwrap();
    assert!(matches!(
        broker.read_log("t", 1),
        Err(EmbeddedError::UnknownPartition { partition: 1, .. })
    ));
    assert!(matches!(
        broker.read_log("t", -1),
        Err(EmbeddedError::UnknownPartition { partition: -1, .. })
    ));
    assert!(broker.read_log("t", 0).unwrap().is_empty());
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap())
        .unwrap()
}

#[tokio::test]
async fn a_delivery_timeout_of_duration_max_fails_to_connect_without_panicking() {
    // A loopback port nobody listens on: connecting fails at once, with a retriable error.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let config = KafkaDeadLetterQueueConfig::new(addr, "dlq").delivery_timeout(Duration::MAX);
    let error = KafkaDeadLetterQueue::connect(config)
        .await
        .expect_err("nothing listens there");
    assert!(
        matches!(error, DeadLetterError::Kafka { .. }),
        "the connection error, not a timeout: {error:?}"
    );
    assert!(error.is_retriable(), "{error:?}");
}
