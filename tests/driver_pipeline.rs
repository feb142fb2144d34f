//! The driver's conversion and transform stages on the embedded share group: converter
//! failures under `errors.tolerance` none and all, retries, transforms and predicates.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use kafka_share_sink::convert::{JsonConverter, StringConverter};
use kafka_share_sink::embedded::{
    AutoOffsetReset, EmbeddedBroker, EmbeddedShareConsumer, GroupConfig, ProduceRecord, RecordState,
};
use kafka_share_sink::transform::{
    Filter, HasHeaderKey, RecordIsTombstone, TopicNameMatches, transform_fn,
};
use kafka_share_sink::{
    CommitPolicy, Converters, DriverConfig, Error, ErrorHandling, ErrorTolerance, ShareSinkTask,
    SinkRecord, SinkTask, Stage, TaskConfig, TaskError, TransformChain, Value,
};

#[path = "support/slow_queue.rs"]
mod slow_queue;

use slow_queue::SlowQueue;

#[path = "support/flaky_converters.rs"]
mod flaky_converters;

use flaky_converters::{Flaky, SlowOne};

#[path = "support/broken_sink.rs"]
mod broken_sink;

use broken_sink::Broken;

const GROUP: &str = "sink";

fn broker(topic: &str, records: &[ProduceRecord]) -> EmbeddedBroker {
    let broker = EmbeddedBroker::new();
    broker.create_topic(topic, 1).unwrap();
    broker
        .set_group_config(
            GROUP,
            GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest),
        )
        .unwrap();
    for r in records {
        broker.produce(topic, r.clone()).unwrap();
    }
    broker
}

fn state(broker: &EmbeddedBroker, topic: &str, offset: i64) -> (RecordState, u16) {
    let view = broker.record_state(GROUP, topic, 0, offset).unwrap();
    (view.state(), view.delivery_count())
}

type Seen = Arc<Mutex<Vec<SinkRecord>>>;

struct Collect(Seen);

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

fn driver(
    broker: &EmbeddedBroker,
    topic: &str,
    config: impl FnOnce(DriverConfig) -> DriverConfig,
) -> (ShareSinkTask<EmbeddedShareConsumer>, Seen) {
    let seen = Seen::default();
    let config = config(
        DriverConfig::new([topic])
            .commit_policy(CommitPolicy::every_iteration())
            .poll_timeout(Duration::from_millis(10)),
    );
    let d = ShareSinkTask::new(
        Box::new(Collect(Arc::clone(&seen))),
        broker.share_consumer(GROUP),
        config,
    );
    (d, seen)
}

fn json_values() -> Converters {
    Converters::byte_array().with_value(Arc::new(JsonConverter::new().schemas_enable(false)))
}

#[tokio::test(start_paused = true)]
async fn a_value_converter_failure_under_tolerance_none_releases_the_poll_and_stops() {
    let b = broker(
        "t",
        &[
            ProduceRecord::new().value(r#"{"id":1}"#),
            ProduceRecord::new().value("{not json"),
            ProduceRecord::new().value(r#"{"id":3}"#),
        ],
    );
    let (mut d, seen) = driver(&b, "t", |c| c.converters(json_values()));
    d.initialize().await.unwrap();
    let err = d.iteration().await.unwrap_err();
    let Error::Record { record, source } = &err else {
        panic!("expected a record error, got {err:?}");
    };
    assert_eq!(record.offset(), 1);
    assert_eq!(source.stage(), Stage::ValueConverter);
    assert_eq!(
        source.class_name(),
        "org.apache.kafka.connect.json.JsonConverter"
    );
    assert!(err.to_string().contains("errors.tolerance=none"), "{err}");
    assert!(seen.lock().unwrap().is_empty(), "nothing was put");
    for offset in 0..3 {
        assert_eq!(
            state(&b, "t", offset).0,
            RecordState::Available,
            "offset {offset} released: nothing lost"
        );
    }
    assert!(matches!(d.iteration().await, Err(Error::Failed)));
    assert_eq!(d.metrics().record_errors, 1);
}

/// The same failure, task restarted each time, under a group limit of 2: on the second
/// delivery the poll is released on its last delivery and archived, the failing record and
/// the good ones beside it. Not silently: counted as released at the limit (use
/// `errors.tolerance=all` with a dead-letter queue to keep the good ones).
#[tokio::test(start_paused = true)]
async fn a_poll_released_by_a_record_error_on_its_last_delivery_is_counted() {
    let b = broker(
        "t",
        &[
            ProduceRecord::new().value(r#"{"id":1}"#),
            ProduceRecord::new().value("{not json"),
            ProduceRecord::new().value(r#"{"id":3}"#),
        ],
    );
    b.set_group_config(
        GROUP,
        GroupConfig::new()
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .delivery_count_limit(2),
    )
    .unwrap();
    for delivery in 1..=2u16 {
        let (mut d, _) = driver(&b, "t", |c| c.converters(json_values()));
        d.initialize().await.unwrap();
        assert!(matches!(d.iteration().await, Err(Error::Record { .. })));
        let at_limit = if delivery == 2 { 3 } else { 0 };
        assert_eq!(d.metrics().records_released_at_limit, at_limit);
        let expected = if delivery == 2 {
            RecordState::Archived
        } else {
            RecordState::Available
        };
        for offset in 0..3 {
            assert_eq!(state(&b, "t", offset), (expected, delivery));
        }
        d.close().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn bad_utf8_under_tolerance_all_skips_the_record_and_writes_the_rest() {
    let b = broker(
        "t",
        &[
            ProduceRecord::new().key("k0").value("ok 0"),
            ProduceRecord::new()
                .key("k1")
                .value(Bytes::from_static(&[0x66, 0xff, 0xfe])),
            ProduceRecord::new().key("k2").value("ok 2"),
        ],
    );
    // string.strict: by default, as in Connect, bad UTF-8 becomes U+FFFD and nothing fails.
    let strings = Converters::byte_array()
        .with_key(Arc::new(StringConverter::new().strict(true)))
        .with_value(Arc::new(StringConverter::new().strict(true)));
    let (mut d, seen) = driver(&b, "t", |c| {
        c.converters(strings).errors(
            ErrorHandling::new()
                .tolerance(ErrorTolerance::All)
                .log(true, true),
        )
    });
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!(
        (report.records, report.accepted, report.rejected),
        (2, 2, 1)
    );
    let values: Vec<Value> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.value().clone())
        .collect();
    assert_eq!(
        values,
        vec![Value::String("ok 0".into()), Value::String("ok 2".into())]
    );
    assert_eq!(
        state(&b, "t", 1).0,
        RecordState::Archived,
        "skipped: rejected"
    );
    assert_eq!(state(&b, "t", 0).0, RecordState::Acknowledged);
    let m = d.metrics();
    assert_eq!(
        (
            m.record_errors,
            m.record_failures,
            m.records_skipped,
            m.errors_logged
        ),
        (1, 1, 1, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn key_and_header_converter_failures_name_their_stage() {
    let b = broker(
        "t",
        &[ProduceRecord::new()
            .key(Bytes::from_static(&[0xc3]))
            .value("v")],
    );
    let (mut d, _) = driver(&b, "t", |c| {
        c.converters(
            Converters::byte_array().with_key(Arc::new(StringConverter::new().strict(true))),
        )
    });
    d.initialize().await.unwrap();
    let Err(Error::Record { source, .. }) = d.iteration().await else {
        panic!("expected a record error");
    };
    assert_eq!(source.stage(), Stage::KeyConverter);

    let b = broker(
        "h",
        &[ProduceRecord::new()
            .header("trace", Bytes::from_static(&[0xff]))
            .value("v")],
    );
    let (mut d, _) = driver(&b, "h", |c| {
        c.converters(
            Converters::byte_array().with_header(Arc::new(StringConverter::new().strict(true))),
        )
    });
    d.initialize().await.unwrap();
    let Err(Error::Record { source, .. }) = d.iteration().await else {
        panic!("expected a record error");
    };
    assert_eq!(source.stage(), Stage::HeaderConverter);
}

#[tokio::test(start_paused = true)]
async fn retriable_conversion_failures_are_retried_until_errors_retry_timeout() {
    let b = broker("t", &[ProduceRecord::new().value("v")]);
    let (mut d, seen) = driver(&b, "t", |c| {
        c.converters(Converters::byte_array().with_value(Arc::new(Flaky(AtomicUsize::new(3)))))
            .errors(ErrorHandling::new().retry_timeout(Some(Duration::from_secs(10))))
    });
    d.initialize().await.unwrap();
    let start = tokio::time::Instant::now();
    let report = d.iteration().await.unwrap();
    assert_eq!(report.accepted, 1);
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert!(start.elapsed() >= Duration::from_millis(300 + 600 + 1200));
    let m = d.metrics();
    assert_eq!((m.retries, m.record_failures, m.record_errors), (3, 3, 0));

    // With the default errors.retry.timeout (0), the first failure is final.
    let b = broker("t", &[ProduceRecord::new().value("v")]);
    let (mut d, _) = driver(&b, "t", |c| {
        c.converters(Converters::byte_array().with_value(Arc::new(Flaky(AtomicUsize::new(1)))))
    });
    d.initialize().await.unwrap();
    assert!(matches!(d.iteration().await, Err(Error::Record { .. })));
}

/// Implicit mode: an iteration dropped while it built its batch (here waiting to retry a
/// conversion) may have left records out of it, and the next poll or commit would accept
/// them unwritten. The next iteration refuses instead, and close releases the poll's records.
#[tokio::test(start_paused = true)]
async fn implicit_mode_an_iteration_dropped_while_converting_stops_and_releases() {
    use kafka_share_sink::AcknowledgementMode;
    use kafka_share_sink::embedded::ConsumerOptions;
    let b = broker(
        "t",
        &[
            ProduceRecord::new().value("a"),
            ProduceRecord::new().value("b"),
        ],
    );
    let seen = Seen::default();
    let config = DriverConfig::new(["t"])
        .commit_policy(CommitPolicy::every_iteration())
        .poll_timeout(Duration::from_millis(10))
        .converters(Converters::byte_array().with_value(Arc::new(Flaky(AtomicUsize::new(100)))))
        .errors(ErrorHandling::new().retry_timeout(Some(Duration::from_secs(3600))));
    let consumer = b.share_consumer_with(
        GROUP,
        ConsumerOptions::new().acknowledgement_mode(AcknowledgementMode::Implicit),
    );
    let mut d = ShareSinkTask::new(Box::new(Collect(Arc::clone(&seen))), consumer, config);
    d.initialize().await.unwrap();
    let dropped = tokio::time::timeout(Duration::from_secs(5), d.iteration()).await;
    assert!(dropped.is_err(), "the conversion is still retrying");
    let err = d
        .iteration()
        .await
        .expect_err("the batch may be incomplete");
    assert!(matches!(err, Error::Interrupted { .. }), "{err:?}");
    assert!(!err.is_retriable());
    d.close().await.unwrap();
    assert!(seen.lock().unwrap().is_empty());
    for offset in 0..2 {
        assert_eq!(
            state(&b, "t", offset),
            (RecordState::Available, 1),
            "offset {offset}: released, not accepted"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_errors_retry_timeout_of_duration_max_retries_conversions_like_forever() {
    let b = broker("t", &[ProduceRecord::new().value("v")]);
    let (mut d, seen) = driver(&b, "t", |c| {
        c.converters(Converters::byte_array().with_value(Arc::new(Flaky(AtomicUsize::new(2)))))
            .errors(ErrorHandling::new().retry_timeout(Some(Duration::MAX)))
    });
    d.initialize().await.unwrap();
    let start = tokio::time::Instant::now();
    let report = d.iteration().await.unwrap();
    assert_eq!(report.accepted, 1);
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert!(start.elapsed() >= Duration::from_millis(300 + 600));
    assert_eq!(d.metrics().retries, 2);
}

#[tokio::test(start_paused = true)]
async fn transforms_and_predicates_filter_and_change_records_in_order() {
    let b = broker(
        "orders",
        &[
            ProduceRecord::new().value("keep"),
            ProduceRecord::new()
                .header("drop-me", "1")
                .value("dropped by header"),
            ProduceRecord::new(), // a tombstone
            ProduceRecord::new().value("keep too"),
        ],
    );
    let chain = TransformChain::new()
        .then_if(Filter, HasHeaderKey::new("drop-me"), false)
        .then_if(Filter, RecordIsTombstone, false)
        // Negated: runs only on topics that do NOT match, so never here.
        .then_if(Filter, TopicNameMatches::new("ord.*").unwrap(), true)
        .then(transform_fn(|r: SinkRecord| {
            Ok(Some(r.with_topic_partition("orders-copy", 0)))
        }));
    let (mut d, seen) = driver(&b, "orders", |c| c.transforms(chain));
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!(
        (report.records, report.filtered, report.accepted),
        (2, 2, 4)
    );
    let seen = seen.lock().unwrap();
    let got: Vec<(&str, &str, i64)> = seen
        .iter()
        .map(|r| (r.topic(), r.original_topic(), r.original_offset()))
        .collect();
    assert_eq!(
        got,
        vec![("orders-copy", "orders", 0), ("orders-copy", "orders", 3)]
    );
    for offset in 0..4 {
        assert_eq!(
            state(&b, "orders", offset).0,
            RecordState::Acknowledged,
            "filtered records are accepted, as Connect advances past them"
        );
    }
    assert_eq!(d.metrics().records_filtered, 2);
    assert_eq!(d.metrics().records_put, 2);
}

#[tokio::test(start_paused = true)]
async fn a_connector_config_builds_the_pipeline_from_class_names() {
    use kafka_share_sink::{ConfigError, ConnectorConfig, Plugins, Properties};
    let connector: Properties = "name=orders-sink\n\
         topics=t\n\
         value.converter=org.apache.kafka.connect.json.JsonConverter\n\
         value.converter.schemas.enable=false\n\
         transforms=dropTombstones\n\
         transforms.dropTombstones.type=org.apache.kafka.connect.transforms.Filter\n\
         transforms.dropTombstones.predicate=isTombstone\n\
         predicates=isTombstone\n\
         predicates.isTombstone.type=org.apache.kafka.connect.transforms.predicates.RecordIsTombstone\n\
         errors.tolerance=all\n"
        .parse()
        .unwrap();
    let config = ConnectorConfig::from_properties(&connector).unwrap();
    let driver_config = config
        .build_driver_config(&Plugins::new())
        .unwrap()
        .poll_timeout(Duration::from_millis(10));
    let b = broker(
        "t",
        &[
            ProduceRecord::new().value(r#"{"sku":"a-1","qty":2}"#),
            ProduceRecord::new(),
            ProduceRecord::new().value("not json"),
        ],
    );
    let seen = Seen::default();
    let mut d = ShareSinkTask::new(
        Box::new(Collect(Arc::clone(&seen))),
        b.share_consumer(GROUP),
        driver_config,
    );
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!(
        (report.records, report.filtered, report.rejected),
        (1, 1, 1),
        "{report:?}"
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0].value().get("qty"), Some(&Value::Int(2)));

    let bad: Properties = "name=x\ntopics=t\nvalue.converter=com.example.Avro\n"
        .parse()
        .unwrap();
    let err = ConnectorConfig::from_properties(&bad)
        .unwrap()
        .build_driver_config(&Plugins::new())
        .unwrap_err();
    assert!(matches!(err, ConfigError::Plugin { .. }));
    assert_eq!(err.key(), Some("value.converter"));
    let chain = std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source())
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ");
    assert!(chain.contains("com.example.Avro"), "{chain}");
}

/// The value of the last header `key` of a dead-letter record, as text.
fn header(record: &kafka_share_sink::ConsumerRecord, key: &str) -> Option<String> {
    record
        .headers()
        .last(key)
        .and_then(|h| h.value())
        .map(|v| String::from_utf8(v.to_vec()).unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_skipped_record_goes_to_the_dead_letter_queue_byte_for_byte_then_is_rejected() {
    let bad = Bytes::from_static(b"{\"sku\": \xff");
    let b = broker(
        "t",
        &[
            ProduceRecord::new().value(r#"{"ok":true}"#),
            ProduceRecord::new()
                .key(Bytes::from_static(&[0, 1, 2]))
                .value(bad.clone())
                .header("trace", "a")
                .header("trace", "b")
                .null_header("empty")
                .timestamp(1_700_000_000_000),
        ],
    );
    let dlq = b.dead_letter_queue("t-dlq").unwrap();
    let (mut d, seen) = driver(&b, "t", |c| {
        c.converters(json_values())
            .errors(ErrorHandling::new().tolerance(ErrorTolerance::All))
            .dead_letter_queue(Arc::new(dlq), true)
            .connector("orders-sink", 3)
    });
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!(
        (report.records, report.dead_lettered, report.rejected),
        (1, 1, 1)
    );
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert_eq!(state(&b, "t", 1).0, RecordState::Archived);

    let letters = b.read_log("t-dlq", 0).unwrap();
    assert_eq!(letters.len(), 1);
    let letter = &letters[0];
    assert_eq!(letter.key().map(|k| k.as_ref()), Some(&[0u8, 1, 2][..]));
    assert_eq!(
        letter.value(),
        Some(&bad),
        "the original bytes, not converted"
    );
    assert_eq!(letter.timestamp(), 1_700_000_000_000);
    let original: Vec<(&str, Option<&[u8]>)> = letter
        .headers()
        .iter()
        .take(3)
        .map(|h| (h.key(), h.value().map(|v| v.as_ref())))
        .collect();
    assert_eq!(
        original,
        vec![
            ("trace", Some(&b"a"[..])),
            ("trace", Some(&b"b"[..])),
            ("empty", None)
        ]
    );
    let expect = [
        ("__connect.errors.topic", "t"),
        ("__connect.errors.partition", "0"),
        ("__connect.errors.offset", "1"),
        ("__connect.errors.connector.name", "orders-sink"),
        ("__connect.errors.task.id", "3"),
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
    ];
    for (key, value) in expect {
        assert_eq!(header(letter, key).as_deref(), Some(value), "{key}");
    }
    let trace = header(letter, "__connect.errors.exception.stacktrace").unwrap();
    let lines: Vec<&str> = trace.lines().collect();
    assert_eq!(
        lines[0],
        "org.apache.kafka.connect.errors.DataException: Converting byte[] to Kafka Connect data \
         failed due to serialization error: "
    );
    assert!(
        lines[1].starts_with(
            "Caused by: org.apache.kafka.common.errors.SerializationException: \
             com.fasterxml.jackson.core."
        ),
        "{trace}"
    );
    assert!(
        lines[2].starts_with("Caused by: com.fasterxml.jackson.core."),
        "{trace}"
    );
    let m = d.metrics();
    assert_eq!(
        (
            m.dlq_produce_requests,
            m.dlq_produce_failures,
            m.records_dead_lettered,
            m.records_skipped
        ),
        (1, 0, 1, 1)
    );
}

/// Implicit mode, `errors.tolerance=all` with a dead-letter queue: a record that cannot be
/// converted is written to the queue before the next poll accepts it; when the write fails,
/// the driver stops instead of letting a poll or commit accept it, and close releases it.
#[tokio::test(start_paused = true)]
async fn implicit_mode_skipped_records_go_to_the_dead_letter_queue_before_they_are_accepted() {
    use kafka_share_sink::AcknowledgementMode;
    use kafka_share_sink::embedded::ConsumerOptions;
    let implicit_driver =
        |b: &EmbeddedBroker, dlq: &kafka_share_sink::embedded::EmbeddedDeadLetterQueue| {
            let config = DriverConfig::new(["t"])
                .commit_policy(CommitPolicy::every_iteration())
                .poll_timeout(Duration::from_millis(10))
                .converters(json_values())
                .errors(ErrorHandling::new().tolerance(ErrorTolerance::All))
                .dead_letter_queue(Arc::new(dlq.clone()), false);
            let consumer = b.share_consumer_with(
                GROUP,
                ConsumerOptions::new().acknowledgement_mode(AcknowledgementMode::Implicit),
            );
            ShareSinkTask::new(Box::new(Collect(Seen::default())), consumer, config)
        };
    let records = [
        ProduceRecord::new().value(r#"{"ok":true}"#),
        ProduceRecord::new().value("not json"),
    ];

    let b = broker("t", &records);
    let dlq = b.dead_letter_queue("t-dlq").unwrap();
    let mut d = implicit_driver(&b, &dlq);
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!((report.records, report.dead_lettered), (1, 1));
    let letters = b.read_log("t-dlq", 0).unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(
        letters[0].value().map(|v| v.as_ref()),
        Some(&b"not json"[..])
    );
    d.close().await.unwrap();
    assert_eq!(state(&b, "t", 1).0, RecordState::Acknowledged);

    let b = broker("t", &records);
    let dlq = b.dead_letter_queue("t-dlq").unwrap();
    dlq.fail_next(usize::MAX);
    let mut d = implicit_driver(&b, &dlq);
    d.initialize().await.unwrap();
    let err = d
        .iteration()
        .await
        .expect_err("the dead-letter write failed");
    assert!(matches!(err, Error::DeadLetterUnreleasable(_)), "{err:?}");
    assert!(!err.is_retriable(), "the driver stopped: {err:?}");
    assert!(matches!(d.iteration().await, Err(Error::Failed)));
    d.close().await.unwrap();
    assert!(b.read_log("t-dlq", 0).unwrap().is_empty());
    assert_eq!(
        state(&b, "t", 1),
        (RecordState::Available, 1),
        "released, not accepted"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_dead_letter_write_releases_the_record_instead_of_dropping_it() {
    let b = broker("t", &[ProduceRecord::new().value("not json")]);
    let dlq = b.dead_letter_queue("t-dlq").unwrap();
    dlq.fail_next(usize::MAX);
    let (mut d, _) = driver(&b, "t", |c| {
        c.converters(json_values())
            .errors(ErrorHandling::new().tolerance(ErrorTolerance::All))
            .dead_letter_queue(Arc::new(dlq.clone()), false)
    });
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!(
        (report.released, report.rejected, report.dead_lettered),
        (1, 0, 0)
    );
    assert_eq!(
        state(&b, "t", 0),
        (RecordState::Available, 1),
        "released, not lost"
    );
    assert!(b.read_log("t-dlq", 0).unwrap().is_empty());
    assert_eq!(d.metrics().dlq_produce_failures, 1);

    dlq.fail_next(0);
    let report = d.iteration().await.unwrap();
    assert_eq!((report.dead_lettered, report.rejected), (1, 1));
    assert_eq!(state(&b, "t", 0), (RecordState::Archived, 2));
    let letters = b.read_log("t-dlq", 0).unwrap();
    assert_eq!(letters.len(), 1);
    let names: Vec<&str> = letters[0].headers().iter().map(|h| h.key()).collect();
    assert_eq!(
        names,
        ["__connect.errors.reason"],
        "context headers are off: the original (empty) headers and the reason only"
    );
    assert_eq!(
        header(&letters[0], "__connect.errors.reason").as_deref(),
        Some("conversion")
    );
}

/// Records whose dead-letter write failed are released and come back: the breaker does not
/// count them as given up on at each failed write (a short outage of the queue would trip it,
/// blaming the records). Released on their last delivery, the group archives them: those
/// count.
#[tokio::test(start_paused = true)]
async fn a_failed_dead_letter_write_counts_for_the_breaker_only_on_the_last_delivery() {
    let b = broker(
        "t",
        &[
            ProduceRecord::new().value("not json"),
            ProduceRecord::new().value("nor this"),
        ],
    );
    let dlq = b.dead_letter_queue("t-dlq").unwrap();
    dlq.fail_next(usize::MAX);
    let (mut d, _) = driver(&b, "t", |c| {
        c.converters(json_values())
            .errors(ErrorHandling::new().tolerance(ErrorTolerance::All))
            .dead_letter_queue(Arc::new(dlq.clone()), false)
            .dead_letter_breaker(
                kafka_share_sink::dlq::DeadLetterBreaker::disabled().max_records(Some(3)),
            )
    });
    d.initialize().await.unwrap();
    // Five deliveries (the group's limit), each write failing: two records counted, at the
    // last one only.
    for delivery in 1..=5 {
        let report = d
            .iteration()
            .await
            .unwrap_or_else(|e| panic!("delivery {delivery}: {e:?}"));
        assert_eq!(report.released, 2, "delivery {delivery}: {report:?}");
    }
    assert_eq!(d.metrics().dlq_produce_failures, 10);
    assert_eq!(d.metrics().dead_letter_breaker_trips, 0);
    assert_eq!(state(&b, "t", 0), (RecordState::Archived, 5));
    assert_eq!(d.metrics().records_released_at_limit, 2);
}

/// Fails every put, retriably or fatally.
struct Failing {
    fatal: bool,
}

#[async_trait]
impl SinkTask for Failing {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }
    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        match (records.is_empty(), self.fatal) {
            (true, _) => Ok(()),
            (false, true) => Err(TaskError::fatal("table dropped")),
            (false, false) => Err(TaskError::retriable("database busy")),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn poison_and_fatal_put_records_are_dead_lettered_before_the_rejection() {
    let b = broker("t", &[ProduceRecord::new().value("v0")]);
    let dlq = b.dead_letter_queue("t-dlq").unwrap();
    let config = DriverConfig::new(["t"])
        .commit_policy(CommitPolicy::every_iteration())
        .poll_timeout(Duration::from_millis(10))
        .retriable_backoff(Duration::from_millis(10))
        .max_delivery_attempts(Some(2))
        .dead_letter_queue(Arc::new(dlq), true);
    let mut d = ShareSinkTask::new(
        Box::new(Failing { fatal: false }),
        b.share_consumer(GROUP),
        config,
    );
    d.initialize().await.unwrap();
    // Held for its redelivery backoff; the next iteration releases it and gets it back.
    assert_eq!(d.iteration().await.unwrap().retained, 1);
    let report = d.iteration().await.unwrap();
    assert_eq!((report.dead_lettered, report.rejected), (1, 1));
    assert_eq!(state(&b, "t", 0), (RecordState::Archived, 2));
    let letters = b.read_log("t-dlq", 0).unwrap();
    assert_eq!(
        header(&letters[0], "__connect.errors.stage").as_deref(),
        Some("TASK_PUT")
    );
    assert_eq!(
        header(&letters[0], "__connect.errors.class.name").as_deref(),
        Some("org.apache.kafka.connect.sink.SinkTask")
    );
    assert_eq!(
        header(&letters[0], "__connect.errors.exception.class.name").as_deref(),
        Some("org.apache.kafka.connect.errors.RetriableException")
    );
    assert_eq!(
        header(&letters[0], "__connect.errors.exception.message").as_deref(),
        Some("database busy"),
        "the task's own message, as a Java task's exception has it"
    );

    let b = broker(
        "t",
        &[
            ProduceRecord::new().value("v0"),
            ProduceRecord::new().value("v1"),
        ],
    );
    let dlq = b.dead_letter_queue("t-dlq").unwrap();
    let config = DriverConfig::new(["t"])
        .commit_policy(CommitPolicy::every_iteration())
        .poll_timeout(Duration::from_millis(10))
        .dead_letter_queue(Arc::new(dlq), false);
    let mut d = ShareSinkTask::new(
        Box::new(Failing { fatal: true }),
        b.share_consumer(GROUP),
        config,
    );
    d.initialize().await.unwrap();
    assert!(matches!(d.iteration().await, Err(Error::Task { .. })));
    assert_eq!(b.read_log("t-dlq", 0).unwrap().len(), 2);
    assert_eq!(state(&b, "t", 1).0, RecordState::Archived);
}

#[tokio::test(start_paused = true)]
async fn every_converter_fails_the_task_under_none_and_dead_letters_under_all() {
    let cases: Vec<(&str, Converters, Bytes)> = vec![
        (
            "string",
            Converters::byte_array().with_value(Arc::new(StringConverter::new().strict(true))),
            Bytes::from_static(&[b'a', 0xc0, 0x80]),
        ),
        (
            "json without schemas",
            json_values(),
            Bytes::from_static(b"[1, 2"),
        ),
        (
            "json with schemas",
            Converters::byte_array().with_value(Arc::new(JsonConverter::new())),
            Bytes::from_static(br#"{"id": 1}"#),
        ),
    ];
    for (name, converters, bad) in cases {
        let b = broker("t", &[ProduceRecord::new().value(bad.clone())]);
        let (mut d, _) = driver(&b, "t", |c| c.converters(converters.clone()));
        d.initialize().await.unwrap();
        match d.iteration().await {
            Err(Error::Record { source, .. }) => {
                assert_eq!(source.stage(), Stage::ValueConverter, "{name}");
            }
            other => panic!("{name}: expected a record error, got {other:?}"),
        }
        assert_eq!(state(&b, "t", 0).0, RecordState::Available, "{name}");

        let b = broker("t", &[ProduceRecord::new().value(bad.clone())]);
        let dlq = b.dead_letter_queue("dlq").unwrap();
        let (mut d, seen) = driver(&b, "t", |c| {
            c.converters(converters)
                .errors(ErrorHandling::new().tolerance(ErrorTolerance::All))
                .dead_letter_queue(Arc::new(dlq), false)
        });
        d.initialize().await.unwrap();
        let report = d.iteration().await.unwrap();
        assert_eq!((report.dead_lettered, report.rejected), (1, 1), "{name}");
        assert!(seen.lock().unwrap().is_empty(), "{name}");
        let letters = b.read_log("dlq", 0).unwrap();
        assert_eq!(letters[0].value(), Some(&bad), "{name}");
    }
}

/// Records "1", "x" (not JSON) and "2" under `errors.tolerance=all`, with a dead-letter
/// queue that takes 70 s per write, over twice the group's 30 s lock.
fn slow_dead_letter_driver() -> (EmbeddedBroker, ShareSinkTask<EmbeddedShareConsumer>, Seen) {
    let b = broker(
        "t",
        &[
            ProduceRecord::new().value("1"),
            ProduceRecord::new().value("x"),
            ProduceRecord::new().value("2"),
        ],
    );
    let queue = SlowQueue {
        inner: Arc::new(b.dead_letter_queue("t-dlq").unwrap()),
        delay: Duration::from_secs(70),
    };
    let (d, seen) = driver(&b, "t", |c| {
        c.converters(json_values())
            .errors(ErrorHandling::new().tolerance(ErrorTolerance::All))
            .dead_letter_queue(Arc::new(queue), false)
    });
    (b, d, seen)
}

#[tokio::test(start_paused = true)]
async fn a_dead_letter_write_longer_than_the_lock_keeps_the_poll_acquired() {
    let (b, mut d, seen) = slow_dead_letter_driver();
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!(
        (report.records, report.dead_lettered, report.rejected),
        (2, 1, 1)
    );
    assert_eq!(seen.lock().unwrap().len(), 2);
    assert_eq!(b.read_log("t-dlq", 0).unwrap().len(), 1);
    // Each record delivered once, settled by this member: no lock ran out during the write.
    assert_eq!(state(&b, "t", 0), (RecordState::Acknowledged, 1));
    assert_eq!(state(&b, "t", 1), (RecordState::Archived, 1));
    assert_eq!(state(&b, "t", 2), (RecordState::Acknowledged, 1));
    let m = d.metrics();
    assert_eq!(m.lock_losses, 0);
    assert!(m.records_renewed >= 3, "renewed: {}", m.records_renewed);
}

/// Dropped during the dead-letter write of a skipped record, the iteration leaves the write
/// to the next one: that one releases the records converted beside it (never put), writes
/// the skipped record again and settles it, then polls and puts the released ones. Nothing
/// stays held.
#[tokio::test(start_paused = true)]
async fn an_iteration_dropped_during_a_dead_letter_write_leaves_it_to_the_next() {
    let (b, mut d, seen) = slow_dead_letter_driver();
    d.initialize().await.unwrap();
    let dropped = tokio::time::timeout(Duration::from_secs(40), d.iteration()).await;
    assert!(dropped.is_err(), "still writing after 40 s");
    // Held and renewed while the write ran: the lock of 30 s has not run out.
    assert_eq!(state(&b, "t", 0), (RecordState::Acquired, 1));
    assert!(b.read_log("t-dlq", 0).unwrap().is_empty());
    let report = d.iteration().await.unwrap();
    assert_eq!((report.released, report.dead_lettered), (2, 1));
    assert_eq!(b.read_log("t-dlq", 0).unwrap().len(), 1, "written once");
    assert_eq!(state(&b, "t", 1), (RecordState::Archived, 1));
    let mut put = seen.lock().unwrap().len();
    for _ in 0..3 {
        if put == 2 {
            break;
        }
        d.iteration().await.unwrap();
        put = seen.lock().unwrap().len();
    }
    assert_eq!(put, 2);
    assert_eq!(state(&b, "t", 0), (RecordState::Acknowledged, 2));
    assert_eq!(state(&b, "t", 2), (RecordState::Acknowledged, 2));
    assert_eq!(b.state_counts(GROUP).acquired, 0);
    assert_eq!(d.metrics().dead_letter_breaker_trips, 0);
}

/// A fatal `put` fails the driver, which then dead-letters the batch; dropped during that
/// write, the driver is failed and runs no more iterations, and `close` finishes the write
/// before the consumer would release the records.
#[tokio::test(start_paused = true)]
async fn close_finishes_the_dead_letter_write_of_a_failed_driver() {
    let b = broker(
        "t",
        &[
            ProduceRecord::new().value("1"),
            ProduceRecord::new().value("2"),
        ],
    );
    let queue = SlowQueue {
        inner: Arc::new(b.dead_letter_queue("t-dlq").unwrap()),
        delay: Duration::from_secs(70),
    };
    let config = DriverConfig::new(["t"])
        .commit_policy(CommitPolicy::every_iteration())
        .poll_timeout(Duration::from_millis(10))
        .dead_letter_queue(Arc::new(queue), false);
    let mut d = ShareSinkTask::new(Box::new(Broken), b.share_consumer(GROUP), config);
    d.initialize().await.unwrap();
    let dropped = tokio::time::timeout(Duration::from_secs(40), d.iteration()).await;
    assert!(dropped.is_err(), "still writing after 40 s");
    assert!(matches!(d.iteration().await, Err(Error::Failed)));
    assert!(b.read_log("t-dlq", 0).unwrap().is_empty());
    d.close().await.unwrap();
    assert_eq!(b.read_log("t-dlq", 0).unwrap().len(), 2);
    for offset in 0..2 {
        assert_eq!(state(&b, "t", offset), (RecordState::Archived, 1));
    }
    assert_eq!(d.metrics().records_dead_lettered, 2);
}

/// A poll of `x`, `bad`, `slow`, `y` whose `slow` fails retriably `failures` times, retried
/// after 0.3 s, then twice as long each time, under `errors.tolerance=all` with no
/// dead-letter queue.
fn slow_conversion_driver(
    failures: usize,
) -> (EmbeddedBroker, ShareSinkTask<EmbeddedShareConsumer>, Seen) {
    let values = ["x", "bad", "slow", "y"];
    let records: Vec<ProduceRecord> = values
        .iter()
        .map(|v| ProduceRecord::new().value(*v))
        .collect();
    let b = broker("t", &records);
    let (d, seen) = driver(&b, "t", |c| {
        c.converters(Converters::byte_array().with_value(Arc::new(SlowOne::new("slow", failures))))
            .errors(
                ErrorHandling::new()
                    .tolerance(ErrorTolerance::All)
                    .retry_timeout(Some(Duration::from_secs(600))),
            )
    });
    (b, d, seen)
}

fn values(seen: &Seen) -> Vec<Vec<u8>> {
    seen.lock()
        .unwrap()
        .iter()
        .map(|r| match r.value() {
            Value::Bytes(b) => b.to_vec(),
            other => panic!("not bytes: {other:?}"),
        })
        .collect()
}

/// A conversion retried for 76 s, far past the 30 s lock: the records of the poll (those
/// converted before it, the failed one, the one retried, those after it) are renewed
/// meanwhile, so each is delivered once and settled by this member.
#[tokio::test(start_paused = true)]
async fn conversion_retries_longer_than_the_lock_keep_the_poll_acquired() {
    let (b, mut d, seen) = slow_conversion_driver(8);
    d.initialize().await.unwrap();
    let start = tokio::time::Instant::now();
    let report = d.iteration().await.unwrap();
    assert!(start.elapsed() > Duration::from_secs(70));
    assert_eq!((report.records, report.rejected), (3, 1));
    assert_eq!(
        values(&seen),
        [b"x".to_vec(), b"slow".to_vec(), b"y".to_vec()]
    );
    for (offset, settled) in [
        RecordState::Acknowledged,
        RecordState::Archived,
        RecordState::Acknowledged,
        RecordState::Acknowledged,
    ]
    .into_iter()
    .enumerate()
    {
        assert_eq!(
            state(&b, "t", offset as i64),
            (settled, 1),
            "offset {offset}"
        );
    }
    let m = d.metrics();
    assert_eq!(m.lock_losses, 0);
    assert!(m.records_renewed >= 4 * 4, "renewed: {}", m.records_renewed);
}

/// Dropped during a conversion retry that renewed the poll's locks, the iteration leaves the
/// records acquired; the consumer presents them again, and the next iteration converts and
/// puts them: each written once, none delivered twice. Dropped at 44 s (last renewal at
/// 30 s) and called again 2 s later, the next iteration's retries (19 s) outlast the locks
/// unless it renews them by the last renewal, not by its own poll.
#[tokio::test(start_paused = true)]
async fn an_iteration_dropped_during_a_conversion_retry_converts_the_poll_again() {
    // Eight failures in the first 44 s, six more (18.9 s) in the next iteration.
    let (b, mut d, seen) = slow_conversion_driver(14);
    d.initialize().await.unwrap();
    let dropped = tokio::time::timeout(Duration::from_secs(44), d.iteration()).await;
    assert!(dropped.is_err(), "still retrying after 44 s");
    assert!(seen.lock().unwrap().is_empty());
    // Renewed while the retries ran: the lock of 30 s has not run out.
    assert_eq!(state(&b, "t", 0), (RecordState::Acquired, 1));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let start = tokio::time::Instant::now();
    let report = d.iteration().await.unwrap();
    assert!(start.elapsed() > Duration::from_secs(18));
    assert_eq!((report.records, report.rejected), (3, 1));
    assert_eq!(
        values(&seen),
        [b"x".to_vec(), b"slow".to_vec(), b"y".to_vec()]
    );
    for offset in [0, 2, 3] {
        assert_eq!(state(&b, "t", offset), (RecordState::Acknowledged, 1));
    }
    assert_eq!(state(&b, "t", 1), (RecordState::Archived, 1));
    assert_eq!(d.metrics().lock_losses, 0);
}
