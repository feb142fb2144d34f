//! `KafkaShareConsumer::delivery_count_limit` and `broker_dead_letter_queue`: the share group's
//! configs read with DescribeConfigs at connect and again in the background. Against the
//! scriptable fake broker, and against a real broker (skipped without `KAFKA_BOOTSTRAP`).
//!
//! Before these were read, both getters answered "not known" (`None`, `Unknown`) whatever
//! the group said: every test here that expects a value failed.

// `support` is shared with other test targets; its `pub` items are reachable only here.
#[allow(unreachable_pub)]
mod support;

#[path = "support/fake_broker.rs"]
mod fake_broker;

use std::time::Duration;

use fake_broker::{FakeBroker, NODE_ID, RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC, Reply};
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::{ApiKey, DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_share_sink::{
    BrokerDeadLetterQueue, DEFAULT_DELIVERY_COUNT_LIMIT, KafkaAdmin, KafkaShareConsumer,
    KafkaShareConsumerConfig, ShareConsumer,
};
use tokio::time::Instant;

const GROUP: &str = "orders-sink";

/// What a refresh may take beyond its interval on a loaded machine.
const WAIT: Duration = Duration::from_secs(10);

fn config(broker: &FakeBroker) -> KafkaShareConsumerConfig {
    KafkaShareConsumerConfig::new(broker.addr(), GROUP)
}

fn topic(name: &str, copy_record: bool) -> BrokerDeadLetterQueue {
    BrokerDeadLetterQueue::Topic {
        name: name.to_owned(),
        copy_record,
    }
}

/// A fake Kafka 4.4 cluster: DescribeConfigs answered, `share.version` 2, the broker's
/// defaults for the dead-letter checks, and a dead-letter topic `dlq.orders` with
/// `errors.deadletterqueue.group.enable=true`.
async fn cluster() -> FakeBroker {
    let broker = FakeBroker::start().await;
    broker.describe_configs();
    broker.set_feature("share.version", Some(2));
    let node = NODE_ID.to_string();
    for (key, value) in [
        ("group.share.delivery.count.limit", "5"),
        ("errors.deadletterqueue.topic.name.prefix", "dlq."),
        ("errors.deadletterqueue.auto.create.topics.enable", "false"),
    ] {
        broker.set_config(RESOURCE_BROKER, &node, key, Some(value));
    }
    broker.add_topic("dlq.orders", 1);
    broker.set_config(
        RESOURCE_TOPIC,
        "dlq.orders",
        "errors.deadletterqueue.group.enable",
        Some("true"),
    );
    broker
}

fn set_group(broker: &FakeBroker, key: &str, value: Option<&str>) {
    broker.set_config(RESOURCE_GROUP, GROUP, key, value);
}

/// The DescribeConfigs requests received, as (resource type, resource name).
fn described(broker: &FakeBroker) -> Vec<(i8, String)> {
    broker
        .requests_of(ApiKey::DescribeConfigs)
        .iter()
        .flat_map(|r| {
            let request: DescribeConfigsRequest = r.decode().expect("decodes");
            request
                .resources
                .into_iter()
                .map(|r| (r.resource_type, r.resource_name.to_string()))
        })
        .collect()
}

#[tokio::test]
async fn the_groups_own_limit_and_dead_letter_queue_are_read_at_connect() {
    let broker = cluster().await;
    set_group(&broker, "share.delivery.count.limit", Some("3"));
    set_group(
        &broker,
        "errors.deadletterqueue.topic.name",
        Some("dlq.orders"),
    );
    set_group(
        &broker,
        "errors.deadletterqueue.copy.record.enable",
        Some("true"),
    );
    let consumer = KafkaShareConsumer::connect(config(&broker))
        .await
        .expect("connect");
    assert_eq!(consumer.delivery_count_limit(), Some(3));
    assert_eq!(
        consumer.broker_dead_letter_queue(),
        topic("dlq.orders", true)
    );
    // Through a box, as the driver holds it.
    let boxed: Box<dyn ShareConsumer> = Box::new(consumer);
    assert_eq!(boxed.delivery_count_limit(), Some(3));
    assert_eq!(boxed.broker_dead_letter_queue(), topic("dlq.orders", true));
    let asked = described(&broker);
    assert_eq!(asked[0], (RESOURCE_GROUP, GROUP.to_owned()), "{asked:?}");
    assert!(
        asked.contains(&(RESOURCE_TOPIC, "dlq.orders".to_owned())),
        "{asked:?}"
    );
}

#[tokio::test]
async fn without_a_group_limit_the_brokers_limit_then_kafkas_default_apply() {
    // A 4.2 cluster: groups have no delivery-count limit of their own.
    let broker = cluster().await;
    broker.set_config(
        RESOURCE_BROKER,
        &NODE_ID.to_string(),
        "group.share.delivery.count.limit",
        Some("7"),
    );
    let consumer = KafkaShareConsumer::connect(config(&broker))
        .await
        .expect("connect");
    assert_eq!(consumer.delivery_count_limit(), Some(7));
    assert_eq!(
        consumer.broker_dead_letter_queue(),
        BrokerDeadLetterQueue::None,
        "the group names no topic"
    );
    assert!(
        described(&broker).contains(&(RESOURCE_BROKER, NODE_ID.to_string())),
        "the broker is asked by its own id"
    );

    broker.set_config(
        RESOURCE_BROKER,
        &NODE_ID.to_string(),
        "group.share.delivery.count.limit",
        None,
    );
    let consumer = KafkaShareConsumer::connect(config(&broker))
        .await
        .expect("connect");
    assert_eq!(
        consumer.delivery_count_limit(),
        Some(DEFAULT_DELIVERY_COUNT_LIMIT)
    );
}

#[tokio::test]
async fn a_topic_the_broker_would_not_write_to_is_no_dead_letter_queue() {
    let broker = cluster().await;
    set_group(&broker, "share.delivery.count.limit", Some("4"));

    // No prefix.
    broker.add_topic("orders-dlq", 1);
    broker.set_config(
        RESOURCE_TOPIC,
        "orders-dlq",
        "errors.deadletterqueue.group.enable",
        Some("true"),
    );
    set_group(
        &broker,
        "errors.deadletterqueue.topic.name",
        Some("orders-dlq"),
    );
    let consumer = KafkaShareConsumer::connect(config(&broker))
        .await
        .expect("connect");
    assert_eq!(
        consumer.broker_dead_letter_queue(),
        BrokerDeadLetterQueue::None
    );
    assert_eq!(consumer.delivery_count_limit(), Some(4), "still read");

    // Missing, and the cluster does not create it.
    set_group(
        &broker,
        "errors.deadletterqueue.topic.name",
        Some("dlq.missing"),
    );
    let consumer = KafkaShareConsumer::connect(config(&broker))
        .await
        .expect("connect");
    assert_eq!(
        consumer.broker_dead_letter_queue(),
        BrokerDeadLetterQueue::None
    );
    // It does create it: then it is the queue.
    broker.set_config(
        RESOURCE_BROKER,
        &NODE_ID.to_string(),
        "errors.deadletterqueue.auto.create.topics.enable",
        Some("true"),
    );
    let consumer = KafkaShareConsumer::connect(config(&broker))
        .await
        .expect("connect");
    assert_eq!(
        consumer.broker_dead_letter_queue(),
        topic("dlq.missing", false)
    );

    // A cluster whose share.version is 1: no dead-letter queues at all.
    set_group(
        &broker,
        "errors.deadletterqueue.topic.name",
        Some("dlq.orders"),
    );
    broker.set_feature("share.version", Some(1));
    let consumer = KafkaShareConsumer::connect(config(&broker))
        .await
        .expect("connect");
    assert_eq!(
        consumer.broker_dead_letter_queue(),
        BrokerDeadLetterQueue::None
    );
}

#[tokio::test]
async fn a_broker_that_does_not_describe_configs_leaves_them_unknown() {
    let broker = FakeBroker::start().await; // DescribeConfigs not advertised
    let consumer = KafkaShareConsumer::connect(config(&broker))
        .await
        .expect("connect");
    assert_eq!(consumer.delivery_count_limit(), None);
    assert_eq!(
        consumer.broker_dead_letter_queue(),
        BrokerDeadLetterQueue::Unknown
    );
    assert_eq!(broker.count(ApiKey::DescribeConfigs), 0);
}

#[tokio::test]
async fn an_error_for_the_group_leaves_it_unknown_and_the_consumer_works() {
    let broker = cluster().await;
    broker.on(ApiKey::DescribeConfigs, |request| {
        let asked: DescribeConfigsRequest = request.decode().expect("decodes");
        let resource = &asked.resources[0];
        let denied = DescribeConfigsResult::default()
            .with_error_code(30) // GROUP_AUTHORIZATION_FAILED
            .with_error_message(Some(StrBytes::from_static_str("denied")))
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        Reply::message(
            &DescribeConfigsResponse::default().with_results(vec![denied]),
            request.version(),
        )
    });
    broker.add_topic("orders", 1);
    let mut consumer = KafkaShareConsumer::connect(config(&broker))
        .await
        .expect("connect");
    assert_eq!(consumer.delivery_count_limit(), None);
    assert_eq!(
        consumer.broker_dead_letter_queue(),
        BrokerDeadLetterQueue::Unknown
    );
    consumer
        .subscribe(vec!["orders".to_owned()])
        .await
        .expect("subscribe");
    assert!(consumer.poll(Duration::from_millis(200)).await.is_ok());
}

#[tokio::test]
async fn a_silent_broker_delays_connect_by_at_most_the_request_timeout() {
    let broker = cluster().await;
    broker.on(ApiKey::DescribeConfigs, |_| Reply::Never);
    let timeout = Duration::from_millis(500);
    let started = Instant::now();
    let consumer = KafkaShareConsumer::connect(config(&broker).request_timeout(timeout))
        .await
        .expect("connect");
    let took = started.elapsed();
    assert!(took >= timeout, "it waited for the answer: {took:?}");
    assert!(took < timeout + Duration::from_secs(2), "took {took:?}");
    assert_eq!(consumer.delivery_count_limit(), None);
    assert_eq!(
        consumer.broker_dead_letter_queue(),
        BrokerDeadLetterQueue::Unknown
    );
}

#[tokio::test]
async fn a_hostile_answer_is_survived_and_leaves_the_configs_unknown() {
    let broker = cluster().await;
    // ThrottleTimeMs, then a Results array claiming 2^31 - 1 entries.
    broker.on(ApiKey::DescribeConfigs, |request| {
        let mut body = vec![0; 4];
        if request.version() >= 4 {
            body.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        } else {
            body.extend_from_slice(&i32::MAX.to_be_bytes());
        }
        Reply::Body(body.into())
    });
    let consumer = KafkaShareConsumer::connect(config(&broker))
        .await
        .expect("connect");
    assert_eq!(consumer.delivery_count_limit(), None);
}

/// Polls `check` until it holds or [`WAIT`] passes.
async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "{what} within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_operators_change_is_seen_and_a_failed_read_keeps_the_last_values() {
    let broker = cluster().await;
    set_group(&broker, "share.delivery.count.limit", Some("3"));
    let mut consumer = KafkaShareConsumer::connect(
        config(&broker).group_config_refresh(Duration::from_millis(200)),
    )
    .await
    .expect("connect");
    assert_eq!(consumer.delivery_count_limit(), Some(3));
    assert_eq!(
        consumer.broker_dead_letter_queue(),
        BrokerDeadLetterQueue::None
    );

    set_group(&broker, "share.delivery.count.limit", Some("8"));
    set_group(
        &broker,
        "errors.deadletterqueue.topic.name",
        Some("dlq.orders"),
    );
    eventually("the new limit and queue", || {
        consumer.delivery_count_limit() == Some(8)
            && consumer.broker_dead_letter_queue() == topic("dlq.orders", false)
    })
    .await;

    // The broker stops answering: the last values stay.
    broker.on(ApiKey::DescribeConfigs, |_| Reply::Close);
    let before = broker.count(ApiKey::DescribeConfigs);
    broker
        .wait_for(ApiKey::DescribeConfigs, before + 2, WAIT)
        .await;
    assert_eq!(consumer.delivery_count_limit(), Some(8));
    assert_eq!(
        consumer.broker_dead_letter_queue(),
        topic("dlq.orders", false)
    );

    // Closing stops the reads.
    consumer
        .close(Duration::from_secs(5))
        .await
        .expect("closes");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after_close = broker.count(ApiKey::DescribeConfigs);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(broker.count(ApiKey::DescribeConfigs), after_close);
}

// Against a real broker.

/// A fresh group on the test broker, with `configs` set, or `None` to skip.
async fn real(test: &str) -> Option<(String, KafkaAdmin, String)> {
    let bootstrap = support::bootstrap(test)?;
    let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
    Some((bootstrap, admin, support::unique(test)))
}

/// Whether the test broker knows share-group dead-letter queues (Kafka 4.4+): it describes
/// their group config. Says why it skips when not.
async fn knows_dead_letter_queues(admin: &KafkaAdmin, group: &str, test: &str) -> bool {
    let configs = admin.share_group_config(group).await.expect("describe");
    let known = configs.get("errors.deadletterqueue.topic.name").is_some();
    if !known {
        eprintln!("SKIPPED {test}: the broker has no share-group dead-letter queues (Kafka 4.4+)");
    }
    known
}

/// Any Kafka 4.1+ broker: a group that sets nothing has the broker's limit (Kafka's default
/// on the test broker), read from the group on 4.4 and from a broker before 4.3.
#[tokio::test]
async fn a_real_broker_tells_the_consumer_the_limit_of_a_group_that_sets_none() {
    let Some((bootstrap, _admin, group)) =
        real("a_real_broker_tells_the_consumer_the_limit_of_a_group_that_sets_none").await
    else {
        return;
    };
    let consumer = KafkaShareConsumer::connect(KafkaShareConsumerConfig::new(&bootstrap, &group))
        .await
        .expect("connect");
    assert_eq!(
        consumer.delivery_count_limit(),
        Some(DEFAULT_DELIVERY_COUNT_LIMIT)
    );
    assert_eq!(
        consumer.broker_dead_letter_queue(),
        BrokerDeadLetterQueue::None
    );
}

#[tokio::test]
async fn a_real_broker_tells_the_consumer_its_groups_limit_and_queue() {
    let test = "a_real_broker_tells_the_consumer_its_groups_limit_and_queue";
    let Some((bootstrap, admin, group)) = real(test).await else {
        return;
    };
    if !knows_dead_letter_queues(&admin, &group, test).await {
        return;
    }
    let connect = |group: &str| {
        KafkaShareConsumer::connect(
            KafkaShareConsumerConfig::new(&bootstrap, group)
                .group_config_refresh(Duration::from_millis(300)),
        )
    };

    // A group that sets nothing: the broker's limit (Kafka's default here), no queue.
    let consumer = connect(&group).await.expect("connect");
    assert_eq!(
        consumer.delivery_count_limit(),
        Some(DEFAULT_DELIVERY_COUNT_LIMIT)
    );
    assert_eq!(
        consumer.broker_dead_letter_queue(),
        BrokerDeadLetterQueue::None
    );

    let dlq = format!("dlq.{group}");
    admin
        .create_dead_letter_topic(&dlq, 1, 1)
        .await
        .expect("dead-letter topic");
    admin
        .set_share_group_config(&group, &[("share.delivery.count.limit", "3")])
        .await
        .expect("limit");
    admin
        .set_share_group_dead_letter_queue(&group, &dlq, true)
        .await
        .expect("queue");
    // The running consumer sees the change.
    eventually("the operator's change", || {
        consumer.delivery_count_limit() == Some(3)
            && consumer.broker_dead_letter_queue() == topic(&dlq, true)
    })
    .await;
    // And a new one reads it at connect.
    let fresh = connect(&group).await.expect("connect");
    assert_eq!(fresh.delivery_count_limit(), Some(3));
    assert_eq!(fresh.broker_dead_letter_queue(), topic(&dlq, true));

    // A topic the broker would not write to: no prefix, no topic config.
    let plain = format!("{group}-dlq");
    admin.create_topic(&plain, 1, 1).await.expect("topic");
    admin
        .set_share_group_dead_letter_queue(&group, &plain, false)
        .await
        .expect("queue");
    // The broker's view of a group config follows the controller a moment later.
    support::share_group_config_until(&admin, &group, |c| {
        c.dead_letter_topic() == Some(plain.as_str())
    })
    .await;
    let misconfigured = connect(&group).await.expect("connect");
    assert_eq!(
        misconfigured.broker_dead_letter_queue(),
        BrokerDeadLetterQueue::None
    );

    admin
        .remove_share_group_dead_letter_queue(&group)
        .await
        .expect("removed");
    support::share_group_config_until(&admin, &group, |c| c.dead_letter_topic().is_none()).await;
    let without = connect(&group).await.expect("connect");
    assert_eq!(
        without.broker_dead_letter_queue(),
        BrokerDeadLetterQueue::None
    );
    assert_eq!(without.delivery_count_limit(), Some(3));
    for topic in [&dlq, &plain] {
        admin.delete_topic(topic).await.expect("delete");
    }
}
