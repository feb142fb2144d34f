//! The fake broker of `tests/support/fake_broker.rs` drives the crate's own clients, and its
//! scripted replies do what they say. No real broker needed.

#[path = "support/fake_broker.rs"]
mod fake_broker;

use std::time::Duration;

use fake_broker::{FakeBroker, Reply};
use kafka_protocol::messages::{ApiKey, IncrementalAlterConfigsRequest, MetadataResponse};
use kafka_share_sink::ProtocolError;
use kafka_share_sink::{
    ConsumerError, KafkaAdmin, KafkaShareConsumer, KafkaShareConsumerConfig, ShareConsumer,
};

const WAIT: Duration = Duration::from_secs(10);

/// An error and its sources, one after the other.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn config(broker: &FakeBroker) -> KafkaShareConsumerConfig {
    KafkaShareConsumerConfig::new(broker.addr(), "fake-group")
        .fetch_max_wait(Duration::from_millis(50))
}

#[tokio::test]
async fn a_share_consumer_joins_fetches_and_leaves() {
    let broker = FakeBroker::start().await;
    let topic_id = broker.add_topic("orders", 2);
    broker.set_heartbeat_interval(Duration::from_millis(200));
    let mut consumer = KafkaShareConsumer::connect(config(&broker))
        .await
        .expect("connect");
    consumer
        .subscribe(vec!["orders".to_owned()])
        .await
        .expect("subscribe");
    let deadline = tokio::time::Instant::now() + WAIT;
    while broker.count(ApiKey::ShareFetch) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "no ShareFetch");
        let records = consumer
            .poll(Duration::from_millis(200))
            .await
            .expect("poll");
        assert!(records.is_empty(), "the fake broker has no records");
    }

    let join = &broker.requests_of(ApiKey::ShareGroupHeartbeat)[0];
    let join: kafka_protocol::messages::ShareGroupHeartbeatRequest =
        join.decode().expect("heartbeat decodes");
    assert_eq!(join.member_epoch, 0);
    assert_eq!(join.group_id.0.as_str(), "fake-group");

    let fetch = &broker.requests_of(ApiKey::ShareFetch)[0];
    let body = fetch.share_fetch().expect("ShareFetch decodes");
    assert_eq!(
        body.request.group_id.as_ref().map(|g| g.0.as_str()),
        Some("fake-group")
    );
    assert_eq!(body.request.share_session_epoch, 0, "opens a session");
    let [topic] = body.request.topics.as_slice() else {
        panic!("one topic: {:?}", body.request.topics)
    };
    assert_eq!(topic.topic_id, topic_id);
    let mut partitions: Vec<i32> = topic.partitions.iter().map(|p| p.partition_index).collect();
    partitions.sort_unstable();
    assert_eq!(partitions, [0, 1]);

    consumer.close(WAIT).await.expect("close");
    let leave = broker
        .requests_of(ApiKey::ShareGroupHeartbeat)
        .last()
        .expect("heartbeats")
        .decode::<kafka_protocol::messages::ShareGroupHeartbeatRequest>()
        .expect("decodes");
    assert_eq!(leave.member_epoch, -1, "close leaves the group");
}

#[tokio::test]
async fn admin_calls_change_the_fake_cluster() {
    let broker = FakeBroker::start().await;
    let admin = KafkaAdmin::connect(&broker.addr()).await.expect("connect");
    admin.create_topic("a", 3, 1).await.expect("create");
    let ids = admin.topic_ids(&["a"]).await.expect("ids");
    assert_eq!(ids["a"], *broker.topic_id("a").expect("created").as_bytes());
    admin
        .set_share_group_config("g", &[("share.auto.offset.reset", "earliest")])
        .await
        .expect("config");
    let [alter] = broker
        .requests_of(ApiKey::IncrementalAlterConfigs)
        .try_into()
        .expect("one IncrementalAlterConfigs");
    let alter: IncrementalAlterConfigsRequest = alter.decode().expect("decodes");
    assert_eq!(alter.resources[0].resource_name.as_str(), "g");
    assert_eq!(
        alter.resources[0].configs[0].name.as_str(),
        "share.auto.offset.reset"
    );
    admin.delete_topic("a").await.expect("delete");
    assert_eq!(broker.topic_id("a"), None);
}

#[tokio::test]
async fn once_goes_first_then_on_then_the_default_after_reset() {
    let broker = FakeBroker::start().await;
    let admin = KafkaAdmin::connect(&broker.addr()).await.expect("connect");
    broker.add_topic("t", 1);
    // A typed answer of the test's own: the topic is unknown this once.
    broker.once(ApiKey::Metadata, |request| {
        Reply::message(
            &MetadataResponse::default().with_topics(vec![
                kafka_protocol::messages::metadata_response::MetadataResponseTopic::default()
                    .with_name(Some(kafka_protocol::messages::TopicName(
                        kafka_protocol::protocol::StrBytes::from_static_str("t"),
                    )))
                    .with_error_code(3),
            ]),
            request.version(),
        )
    });
    broker.on(ApiKey::Metadata, |_| Reply::Garbled);
    let first = admin.topic_ids(&["t"]).await.expect_err("scripted once");
    assert!(
        first.to_string().contains("UNKNOWN_TOPIC_OR_PARTITION"),
        "{first}"
    );
    let second = admin.topic_ids(&["t"]).await.expect_err("garbled");
    assert!(
        chain(&second).contains("cannot decode the Metadata"),
        "{second:?}"
    );
    broker.reset(ApiKey::Metadata);
    admin.topic_ids(&["t"]).await.expect("default again");
}

#[tokio::test]
async fn late_answers_arrive_late_and_closed_connections_are_reconnected() {
    let broker = FakeBroker::start().await;
    broker.add_topic("t", 1);
    let admin = KafkaAdmin::connect(&broker.addr()).await.expect("connect");
    broker.once(ApiKey::Metadata, |_| {
        Reply::late(Duration::from_millis(300))
    });
    let started = tokio::time::Instant::now();
    admin.topic_ids(&["t"]).await.expect("late answer");
    assert!(started.elapsed() >= Duration::from_millis(300));

    broker.once(ApiKey::Metadata, |_| Reply::Close);
    let error = admin.topic_ids(&["t"]).await.expect_err("closed");
    assert!(error.to_string().contains("connection"), "{error}");
    let connections = broker.connections();
    admin.topic_ids(&["t"]).await.expect("reconnected");
    assert_eq!(broker.connections(), connections + 1);
}

#[tokio::test]
async fn a_broker_that_never_answers_the_handshake_times_out_the_connect() {
    let broker = FakeBroker::start().await;
    broker.on(ApiKey::ApiVersions, |_| Reply::Never);
    let error =
        KafkaShareConsumer::connect(config(&broker).connect_timeout(Duration::from_millis(200)))
            .await
            .expect_err("no handshake");
    assert!(matches!(error, ConsumerError::Timeout(_)), "{error:?}");
    broker.wait_for(ApiKey::ApiVersions, 1, WAIT).await;
}

#[tokio::test]
async fn raw_bytes_are_written_as_they_are() {
    let broker = FakeBroker::start().await;
    // A negative frame length: the client must refuse the frame, not read it.
    broker.on(ApiKey::ApiVersions, |_| {
        Reply::Raw(bytes::Bytes::from_static(&[0xff, 0xff, 0xff, 0xfe]))
    });
    let error = KafkaShareConsumer::connect(config(&broker))
        .await
        .expect_err("hostile frame");
    let mut chain = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        chain.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    assert!(
        matches!(
            error,
            ConsumerError::Protocol(ProtocolError::Garbled { .. })
        ) && chain.contains("negative frame length"),
        "{chain}"
    );
}

#[tokio::test]
async fn scripted_records_are_delivered_and_acknowledged_with_share_acknowledge() {
    use kafka_share_sink::AcknowledgeType;

    let broker = FakeBroker::start().await;
    broker.add_topic("orders", 1);
    broker.once(ApiKey::ShareFetch, |request| {
        let body = request.share_fetch().expect("ShareFetch decodes");
        let topic = &body.request.topics[0];
        Reply::share_fetch_acquired(topic.topic_id, 0..3)
    });
    let mut consumer = KafkaShareConsumer::connect(config(&broker))
        .await
        .expect("connect");
    consumer
        .subscribe(vec!["orders".to_owned()])
        .await
        .expect("subscribe");
    let mut records = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while records.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "no records");
        records = consumer
            .poll(Duration::from_millis(200))
            .await
            .expect("poll");
    }
    let values: Vec<&[u8]> = records
        .iter()
        .map(|r| r.value().expect("value").as_ref())
        .collect();
    assert_eq!(values, [b"v0", b"v1", b"v2"]);
    for record in &records {
        consumer
            .acknowledge(record, AcknowledgeType::Accept)
            .expect("acknowledge");
    }
    let results = consumer.commit_sync(WAIT).await.expect("commit");
    assert_eq!(results.failures().count(), 0, "{results:?}");
    assert_eq!(results.iter().count(), 1, "{results:?}");

    let [ack] = broker
        .requests_of(ApiKey::ShareAcknowledge)
        .try_into()
        .expect("one ShareAcknowledge");
    assert_eq!(
        ack.version(),
        2,
        "the consumer takes the highest version offered"
    );
    let body = ack.share_acknowledge().expect("ShareAcknowledge decodes");
    let batches = &body.request.topics[0].partitions[0].acknowledgement_batches;
    assert_eq!(
        (batches[0].first_offset, batches[0].last_offset),
        (0, 2),
        "{batches:?}"
    );
    assert_eq!(batches[0].acknowledge_types, [1], "ACCEPT");
    assert!(!body.is_renew_ack);
    consumer.close(WAIT).await.expect("close");
}
