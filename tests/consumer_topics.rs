//! What a subscription to a topic that cannot be read does, against the scriptable fake
//! broker: a name Kafka would refuse fails `subscribe`, a topic the client may not read fails
//! the next poll naming it, and a topic that does not exist yet is waited for (said once at
//! INFO), as Java's consumer does. A consumer that subscribes again after `unsubscribe` waits
//! for its next poll before it fetches, as after its first `subscribe`.

#[path = "support/fake_broker.rs"]
mod fake_broker;
mod support;

use std::time::Duration;

use fake_broker::{FakeBroker, Reply};
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::{
    ApiKey, MetadataRequest, MetadataResponse, ShareGroupHeartbeatRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_share_sink::BrokerError;
use kafka_share_sink::{
    AcknowledgeType, AcquisitionSizing, ConsumerError, KafkaShareConsumer,
    KafkaShareConsumerConfig, ShareConsumer,
};

const TOPIC_AUTHORIZATION_FAILED: i16 = 29;

async fn consumer(broker: &FakeBroker) -> KafkaShareConsumer {
    let config = KafkaShareConsumerConfig::new(broker.addr(), "g");
    KafkaShareConsumer::connect(config).await.expect("connects")
}

#[tokio::test]
async fn a_name_kafka_refuses_fails_subscribe_naming_it() {
    let broker = FakeBroker::start().await;
    broker.add_topic("orders", 1);
    let mut consumer = consumer(&broker).await;
    for bad in ["topic abc", "..", "a/b"] {
        let error = consumer
            .subscribe(vec!["orders".to_owned(), bad.to_owned()])
            .await
            .expect_err("an invalid topic name is refused");
        assert!(
            matches!(&error, ConsumerError::InvalidSubscription { reason } if reason.contains(&format!("`{bad}`"))),
            "{error}"
        );
    }
    // A name given twice counts once, as in Java.
    consumer
        .subscribe(vec!["orders".to_owned(), "orders".to_owned()])
        .await
        .expect("duplicates are merged");
}

#[tokio::test]
async fn a_topic_the_client_may_not_read_fails_the_poll_naming_it() {
    let broker = FakeBroker::start().await;
    broker.add_topic("orders", 1);
    broker.on(ApiKey::Metadata, |request| {
        let asked: MetadataRequest = request.decode().expect("a Metadata request");
        let topics = asked
            .topics
            .unwrap_or_default()
            .into_iter()
            .map(|t| {
                MetadataResponseTopic::default()
                    .with_name(t.name.or(Some(TopicName(StrBytes::from_static_str("?")))))
                    .with_error_code(TOPIC_AUTHORIZATION_FAILED)
            })
            .collect();
        Reply::message(
            &MetadataResponse::default().with_topics(topics),
            request.version(),
        )
    });
    let mut consumer = consumer(&broker).await;
    consumer
        .subscribe(vec!["orders".to_owned()])
        .await
        .expect("subscribes");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let error = loop {
        match consumer.poll(Duration::from_millis(200)).await {
            Err(error) => break error,
            Ok(records) => assert!(records.is_empty()),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no poll reported the refused topic"
        );
    };
    assert!(
        matches!(&error, ConsumerError::Broker(BrokerError { name: "TOPIC_AUTHORIZATION_FAILED", message: Some(m), .. }) if m.contains("`orders`")),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_missing_topic_is_waited_for_and_said_once() {
    let capture = support::Capture::default();
    let _guard = capture.set_default();
    let broker = FakeBroker::start().await;
    let mut consumer = consumer(&broker).await;
    consumer
        .subscribe(vec!["later".to_owned()])
        .await
        .expect("a valid name of a topic not there yet is accepted");
    for _ in 0..5 {
        let records = consumer
            .poll(Duration::from_millis(200))
            .await
            .expect("a missing topic is not an error");
        assert!(records.is_empty());
    }
    let said: Vec<String> = capture
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("INFO") && l.contains("does not exist (yet)"))
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("later"), "{said:?}");
}

/// Polls for `window`, each poll empty or with records (not an error).
async fn poll_for(consumer: &mut KafkaShareConsumer, window: Duration) {
    let until = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < until {
        consumer
            .poll(Duration::from_millis(100))
            .await
            .expect("polls");
    }
}

/// A topic dropped from the subscription, or one the cluster answers with an error every time
/// (deleted while subscribed), does not make the consumer ask for Metadata again and again at
/// the speed of the network: refreshes are spaced by the retry backoff (100 ms, doubling to
/// 1 s while a topic keeps erroring), as Java's metadata refresh backoff.
#[tokio::test]
async fn metadata_is_not_asked_again_and_again_for_a_topic_left_or_deleted() {
    const WINDOW: Duration = Duration::from_secs(2);
    // At most one refresh per 100 ms, and a few more for the change itself.
    const MOST: usize = 25;
    for how in ["unsubscribed", "deleted"] {
        let broker = FakeBroker::start().await;
        broker.add_topic("orders", 1);
        broker.add_topic("audit", 1);
        let mut consumer = consumer(&broker).await;
        consumer
            .subscribe(vec!["orders".to_owned(), "audit".to_owned()])
            .await
            .expect("subscribes");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while broker.count(ApiKey::ShareFetch) == 0 {
            assert!(tokio::time::Instant::now() < deadline, "{how}: no fetch");
            consumer
                .poll(Duration::from_millis(100))
                .await
                .expect("polls");
        }
        if how == "unsubscribed" {
            consumer
                .subscribe(vec!["orders".to_owned()])
                .await
                .expect("subscribes");
        } else {
            let admin = kafka_share_sink::KafkaAdmin::connect(&broker.addr())
                .await
                .expect("admin");
            admin.delete_topic("audit").await.expect("deleted");
            // A broker that closed its connections sends the consumer for fresh metadata,
            // which names the deleted topic with an error (so does a fetch of it, from Kafka).
            let asked = broker.count(ApiKey::Metadata);
            broker.disconnect_all();
            while broker.count(ApiKey::Metadata) < asked + 2 {
                assert!(tokio::time::Instant::now() < deadline, "{how}: no fetch");
                consumer
                    .poll(Duration::from_millis(100))
                    .await
                    .expect("polls");
            }
        }
        let before = broker.count(ApiKey::Metadata);
        poll_for(&mut consumer, WINDOW).await;
        let asked = broker.count(ApiKey::Metadata) - before;
        assert!(
            asked <= MOST,
            "{how}: {asked} Metadata requests in {WINDOW:?}, at most {MOST} expected"
        );
    }
}

/// A consumer that leaves with `unsubscribe` and joins again with `subscribe` fetches nothing
/// until it is polled again, as on its first join: a fetch ahead would acquire records (and
/// count a delivery of each) that no poll may take for a while, keeping them from the other
/// members of the group until their locks ran out. Both acquisitions: fixed with records
/// fetched ahead, and sized after a poll that handed records out.
#[tokio::test]
async fn a_consumer_that_subscribes_again_fetches_nothing_before_its_next_poll() {
    for sizing in [AcquisitionSizing::Fixed, AcquisitionSizing::Sized] {
        let broker = FakeBroker::start().await;
        let topic_id = broker.add_topic("orders", 1);
        broker.set_heartbeat_interval(Duration::from_millis(100));
        // Every fetch acquires the next five records, so a sized acquisition fetches ahead
        // too (an empty answer would send it to wait for the next poll by itself).
        let next = std::sync::atomic::AtomicI64::new(0);
        broker.on(ApiKey::ShareFetch, move |_| {
            let from = next.fetch_add(5, std::sync::atomic::Ordering::Relaxed);
            Reply::share_fetch_acquired(topic_id, from..from + 5)
        });
        let config = KafkaShareConsumerConfig::new(broker.addr(), "g")
            .fetch_max_wait(Duration::from_millis(50))
            .acquisition_sizing(sizing)
            .prefetch_records(100);
        let mut consumer = KafkaShareConsumer::connect(config).await.expect("connects");
        let topics = vec!["orders".to_owned()];
        consumer
            .subscribe(topics.clone())
            .await
            .expect("subscribes");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{sizing:?}: no records"
            );
            let records = consumer
                .poll(Duration::from_millis(100))
                .await
                .expect("polls");
            if !records.is_empty() {
                for record in &records {
                    consumer
                        .acknowledge(record, AcknowledgeType::Accept)
                        .expect("acknowledges");
                }
                break;
            }
        }
        consumer.unsubscribe().await.expect("unsubscribes");
        let fetches = broker.count(ApiKey::ShareFetch);
        let heartbeats = broker.count(ApiKey::ShareGroupHeartbeat);
        consumer.subscribe(topics).await.expect("subscribes again");
        // Joined again (epoch 0), and a few heartbeats later: the assignment long taken.
        let joined = loop {
            let requests = broker.requests_of(ApiKey::ShareGroupHeartbeat);
            let rejoin = requests.iter().skip(heartbeats).position(|r| {
                let heartbeat: ShareGroupHeartbeatRequest = r.decode().expect("a heartbeat");
                heartbeat.member_epoch == 0
            });
            if let Some(at) = rejoin {
                break heartbeats + at + 1;
            }
            broker
                .wait_for(
                    ApiKey::ShareGroupHeartbeat,
                    requests.len() + 1,
                    Duration::from_secs(5),
                )
                .await;
        };
        broker
            .wait_for(
                ApiKey::ShareGroupHeartbeat,
                joined + 5,
                Duration::from_secs(5),
            )
            .await;
        assert_eq!(
            broker.count(ApiKey::ShareFetch),
            fetches,
            "{sizing:?}: the member fetched after joining again, before any poll"
        );
        // The next poll fetches.
        while broker.count(ApiKey::ShareFetch) == fetches {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{sizing:?}: no fetch after the poll"
            );
            consumer
                .poll(Duration::from_millis(100))
                .await
                .expect("polls");
        }
    }
}
