//! The dead-letter circuit breaker, the reason header and one dead-letter home per record, on
//! the embedded share group, whose groups model the broker's dead-letter queue (KIP-1191):
//! records that fail conversion under `errors.tolerance=all`, set up from Connect-style keys.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::dlq::headers;
use kafka_share_sink::embedded::{
    AutoOffsetReset, ConsumerOptions, EmbeddedBroker, EmbeddedShareConsumer, GroupConfig,
    ProduceRecord, RecordState,
};
use kafka_share_sink::{
    BreakerLimit, ConnectorConfig, Error, ErrorTolerance, Plugins, ShareSinkTask, SinkRecord,
    SinkTask, TaskConfig, TaskError,
};

const GROUP: &str = "sink";
const OWN_DLQ: &str = "own-dlq";
const BROKER_DLQ: &str = "dlq.t";

struct Discard;

#[async_trait]
impl SinkTask for Discard {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, _: &[SinkRecord]) -> Result<(), TaskError> {
        Ok(())
    }
}

/// A topic of `n` records, one in `bad_every` not JSON (`1`, `x`, `1`, `x`, ... for 2); a
/// group reading from the earliest offset, with a broker dead-letter queue when `broker_dlq`.
fn broker(n: usize, bad_every: usize, broker_dlq: bool) -> EmbeddedBroker {
    let broker = EmbeddedBroker::new();
    broker.create_topic("t", 1).unwrap();
    let mut group = GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest);
    if broker_dlq {
        broker.create_topic(BROKER_DLQ, 1).unwrap();
        group = group.dead_letter_queue(BROKER_DLQ, true);
    }
    broker.set_group_config(GROUP, group).unwrap();
    for i in 0..n {
        let value = if i % bad_every == bad_every - 1 {
            "x"
        } else {
            "1"
        };
        broker
            .produce("t", ProduceRecord::new().value(value))
            .unwrap();
    }
    broker
}

/// A driver with the JSON converter, `errors.tolerance=all`, the driver's own dead-letter
/// queue and `breaker` settings as connector keys; four records per poll.
fn driver(broker: &EmbeddedBroker, breaker: &[(&str, &str)]) -> ShareSinkTask {
    let mut builder = ConnectorConfig::builder("breaker-sink")
        .topics(["t"])
        .value_converter(
            "org.apache.kafka.connect.json.JsonConverter",
            &[("schemas.enable", "false")],
        )
        .errors_tolerance(ErrorTolerance::All);
    for (key, value) in breaker {
        builder = builder.set(*key, *value);
    }
    let config = builder
        .build()
        .unwrap()
        .build_driver_config(&Plugins::new())
        .unwrap()
        .poll_timeout(Duration::from_millis(10))
        .dead_letter_queue(Arc::new(broker.dead_letter_queue(OWN_DLQ).unwrap()), false);
    let consumer = broker.share_consumer_with(GROUP, ConsumerOptions::new().max_poll_records(4));
    ShareSinkTask::new(Box::new(Discard), Box::new(consumer), config)
}

fn state(broker: &EmbeddedBroker, offset: i64) -> (RecordState, u16) {
    let view = broker.record_state(GROUP, "t", 0, offset).unwrap();
    (view.state(), view.delivery_count())
}

fn reasons(broker: &EmbeddedBroker) -> Vec<Option<String>> {
    broker
        .read_log(OWN_DLQ, 0)
        .unwrap()
        .iter()
        .map(|r| {
            r.headers()
                .last(headers::REASON)
                .and_then(|h| h.value())
                .map(|v| String::from_utf8_lossy(v).into_owned())
        })
        .collect()
}

#[tokio::test]
async fn the_breaker_releases_the_poll_that_would_pass_its_bound_and_stops() {
    let b = broker(12, 2, true);
    let mut d = driver(
        &b,
        &[
            ("errors.deadletterqueue.breaker.max.records", "5"),
            ("errors.deadletterqueue.breaker.max.ratio", "1"),
        ],
    );
    d.initialize().await.unwrap();
    for _ in 0..2 {
        let report = d.iteration().await.expect("within the bound");
        assert_eq!((report.records, report.dead_lettered), (2, 2));
        assert_eq!(report.rejected, 0, "one home: ACCEPTed after the write");
    }
    let error = d.iteration().await.expect_err("6 > 5");
    let Error::DeadLetterBreaker(tripped) = &error else {
        panic!("{error:?}");
    };
    assert_eq!(tripped.limit, BreakerLimit::Records { max: 5 });
    assert_eq!(tripped.given_up, 6);
    assert!(
        error
            .source_chain_text()
            .contains("errors.deadletterqueue.breaker.max.records=5"),
        "{error}"
    );
    assert_eq!(d.metrics().dead_letter_breaker_trips, 1);
    assert!(matches!(d.iteration().await, Err(Error::Failed)));
    d.close().await.unwrap();

    assert_eq!(reasons(&b), vec![Some("conversion".to_owned()); 4]);
    assert!(
        b.read_log(BROKER_DLQ, 0).unwrap().is_empty(),
        "the broker's queue has none of them"
    );
    for offset in 0..8 {
        assert_eq!(state(&b, offset).0, RecordState::Acknowledged, "{offset}");
    }
    // The poll that would have passed the bound, good records and bad: released, with
    // their first delivery spent; the rest never delivered.
    for offset in 8..12 {
        assert_eq!(state(&b, offset).0, RecordState::Available, "{offset}");
    }
}

#[tokio::test]
async fn by_default_a_deployment_that_fails_every_record_is_stopped_by_the_share() {
    // Every record fails: the default share bound (half, judged from 100 records on)
    // stops the task before the 101st dead letter.
    let b = broker(200, 1, false);
    let mut d = driver(&b, &[]);
    d.initialize().await.unwrap();
    let error = loop {
        match d.iteration().await {
            Ok(_) => {}
            Err(e) => break e,
        }
    };
    let Error::DeadLetterBreaker(tripped) = &error else {
        panic!("{error:?}");
    };
    assert_eq!(
        tripped.limit,
        BreakerLimit::Ratio {
            max: 0.5,
            min_records: 100
        }
    );
    let written = b.read_log(OWN_DLQ, 0).unwrap().len();
    assert_eq!(
        written, 96,
        "24 polls of 4, the 25th would reach 100 of 100"
    );
    d.close().await.unwrap();
    // Without a broker queue in the group, the dead letters are REJECTed (archived).
    assert_eq!(state(&b, 0).0, RecordState::Archived);
    assert_eq!(state(&b, 96).0, RecordState::Available);
    assert_eq!(state(&b, 199).0, RecordState::Available);
}

#[tokio::test]
async fn records_that_pass_dilute_the_share() {
    // A third of the records fail: under half, so the default never trips.
    let b = broker(300, 3, false);
    let mut d = driver(&b, &[]);
    d.initialize().await.unwrap();
    let mut dead_lettered = 0;
    for _ in 0..75 {
        let report = d.iteration().await.expect("a third is less than half");
        dead_lettered += report.dead_lettered;
        assert_eq!(
            report.rejected, report.dead_lettered,
            "no broker queue: REJECTed"
        );
    }
    assert_eq!(dead_lettered, 100);
    assert_eq!(d.metrics().dead_letter_breaker_trips, 0);
    d.close().await.unwrap();
}

/// The error and its sources as one line.
trait ChainText {
    fn source_chain_text(&self) -> String;
}

impl ChainText for Error {
    fn source_chain_text(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    }
}

/// A target that is always down: every `put` fails with a retriable error.
struct AlwaysDown;

#[async_trait]
impl SinkTask for AlwaysDown {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        Err(TaskError::retriable("target down"))
    }
}

/// `records` records in a group whose delivery-count limit is 2; a driver with no dead-letter
/// queue of its own, the connector `settings`, four records per poll and a sink that is always
/// down, iterated until it stops. The broker, the driver and the error it stopped with.
async fn always_down_until_it_stops(
    records: usize,
    settings: &[(&str, &str)],
) -> (
    EmbeddedBroker,
    ShareSinkTask<Box<EmbeddedShareConsumer>>,
    Error,
) {
    let b = EmbeddedBroker::new();
    b.create_topic("t", 1).unwrap();
    b.set_group_config(
        GROUP,
        GroupConfig::new()
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .delivery_count_limit(2),
    )
    .unwrap();
    for _ in 0..records {
        b.produce("t", ProduceRecord::new().value("1")).unwrap();
    }
    let mut builder = ConnectorConfig::builder("archived-sink")
        .topics(["t"])
        .set("redelivery.backoff.ms", "0");
    for (key, value) in settings {
        builder = builder.set(*key, *value);
    }
    let config = builder
        .build()
        .unwrap()
        .build_driver_config(&Plugins::new())
        .unwrap()
        .poll_timeout(Duration::from_millis(10));
    let consumer = b.share_consumer_with(GROUP, ConsumerOptions::new().max_poll_records(4));
    let mut d = ShareSinkTask::new(Box::new(AlwaysDown), Box::new(consumer), config);
    d.initialize().await.unwrap();
    for _ in 0..100 {
        if let Err(error) = d.iteration().await {
            return (b, d, error);
        }
    }
    panic!("the breaker did not stop the task");
}

#[tokio::test(start_paused = true)]
async fn records_the_group_archives_at_the_delivery_limit_count_for_the_breaker() {
    // No dead-letter queue of the driver's: records whose last delivery fails are released
    // and the group archives them. Those count as given up on: the breaker stops the task
    // after the first poll's worth instead of archiving the whole topic.
    let (b, d, error) =
        always_down_until_it_stops(40, &[("errors.deadletterqueue.breaker.max.records", "5")])
            .await;
    let Error::DeadLetterBreaker(tripped) = &error else {
        panic!("{error:?}");
    };
    assert!(
        matches!(tripped.limit, BreakerLimit::Records { max: 5 }),
        "{tripped:?}"
    );
    let counts = b.state_counts(GROUP);
    assert_eq!(
        counts.archived, 8,
        "two polls archived, the breaker stopped the third"
    );
    assert_eq!(d.metrics().records_released_at_limit, 8);
    assert_eq!(d.metrics().dead_letter_breaker_trips, 1);
}

/// A poll the breaker refuses whose records are on their last delivery (and at
/// `max.delivery.attempts`, so the driver would reject them), without a dead-letter queue of
/// the driver's: they are released and the group archives them, and
/// `records_released_at_limit` counts them (the driver keeps no copy of the polled records
/// then, and counted them as first deliveries).
#[tokio::test(start_paused = true)]
async fn a_tripping_poll_on_its_last_delivery_is_counted_as_released_at_the_limit() {
    // First deliveries fail and are released; the second (last) ones reach
    // max.delivery.attempts, so the driver would reject them, but they would pass the bound.
    let (b, d, error) = always_down_until_it_stops(
        4,
        &[
            ("max.delivery.attempts", "2"),
            ("errors.deadletterqueue.breaker.max.records", "3"),
        ],
    )
    .await;
    assert!(matches!(error, Error::DeadLetterBreaker(_)), "{error:?}");
    assert_eq!(
        b.state_counts(GROUP).archived,
        4,
        "released on their last delivery"
    );
    assert_eq!(d.metrics().records_released_at_limit, 4);
}
