//! `KafkaAdmin` against a real broker (skipped without `KAFKA_BOOTSTRAP`), and its timeouts and
//! settings against the fake broker of `support/fake_broker.rs`.
//!
//! The real-broker tests of a share group's dead-letter queue (KIP-1191) need Kafka 4.4 with
//! `share.version` 2, the default of a fresh 4.4.0 cluster (`scripts/kafka.sh start`).

// `support` is shared with other test targets; its `pub` items are reachable only here.
#[allow(unreachable_pub)]
mod support;

#[path = "support/fake_broker.rs"]
mod fake_broker;

use std::collections::BTreeMap;
use std::time::Duration;

use fake_broker::{FakeBroker, RESOURCE_GROUP, RESOURCE_TOPIC, Reply};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, DescribeConfigsRequest, IncrementalAlterConfigsRequest,
};
use kafka_share_sink::{
    AcknowledgeType, AdminError, ConsumerError, ConsumerRecord, KafkaAdmin, KafkaShareConsumer,
    KafkaShareConsumerConfig, ShareConsumer,
};
use rskafka::client::ClientBuilder;
use rskafka::client::partition::{Compression, UnknownTopicHandling};
use rskafka::record::Record;

/// The admin client of the test broker, or `None` to skip.
async fn admin(test: &str) -> Option<KafkaAdmin> {
    let bootstrap = support::bootstrap(test)?;
    Some(
        KafkaAdmin::connect(&bootstrap)
            .await
            .expect("connect to the test broker"),
    )
}

#[tokio::test]
async fn create_topic_then_duplicate_fails() {
    let Some(admin) = admin("create_topic_then_duplicate_fails").await else {
        return;
    };
    let topic = support::unique("admin-create");
    admin.create_topic(&topic, 3, 1).await.expect("create");

    let ids = admin.topic_ids(&[&topic]).await.expect("topic ids");
    assert_eq!(ids.len(), 1);
    assert_ne!(ids[&topic], [0; 16], "a real topic id");

    let error = admin
        .create_topic(&topic, 3, 1)
        .await
        .expect_err("duplicate");
    assert!(
        matches!(
            &error,
            AdminError::Broker {
                call: "create_topic",
                api: "CreateTopics",
                code: 36,
                name: "TOPIC_ALREADY_EXISTS",
                retriable: false,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("TOPIC_ALREADY_EXISTS"),
        "{error}"
    );

    admin.delete_topic(&topic).await.expect("delete");
    let error = admin.topic_ids(&[&topic]).await.expect_err("deleted");
    assert!(
        matches!(
            &error,
            AdminError::Broker {
                call: "topic_ids",
                name: "UNKNOWN_TOPIC_OR_PARTITION",
                ..
            }
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn invalid_topic_settings_are_broker_errors() {
    let Some(admin) = admin("invalid_topic_settings_are_broker_errors").await else {
        return;
    };
    let error = admin
        .create_topic(&support::unique("admin-rf"), 1, 5)
        .await
        .expect_err("replication factor 5 on one broker");
    assert!(
        matches!(
            &error,
            AdminError::Broker {
                name: "INVALID_REPLICATION_FACTOR",
                ..
            }
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn topic_ids_of_several_topics() {
    let Some(admin) = admin("topic_ids_of_several_topics").await else {
        return;
    };
    let (a, b) = (
        support::unique("admin-ids-a"),
        support::unique("admin-ids-b"),
    );
    admin.create_topic(&a, 1, 1).await.expect("create a");
    admin.create_topic(&b, 2, 1).await.expect("create b");
    let ids = admin.topic_ids(&[&a, &b]).await.expect("topic ids");
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[&a], ids[&b]);

    let missing = support::unique("admin-missing");
    let error = admin
        .topic_ids(&[&a, &missing])
        .await
        .expect_err("unknown topic");
    assert!(
        matches!(&error, AdminError::Broker { name: "UNKNOWN_TOPIC_OR_PARTITION", message: Some(m), .. } if m.contains(&missing)),
        "{error:?}"
    );
    admin.delete_topic(&a).await.expect("delete a");
    admin.delete_topic(&b).await.expect("delete b");
}

#[tokio::test]
async fn share_group_config() {
    let Some(admin) = admin("share_group_config").await else {
        return;
    };
    let group = support::unique("admin-group");
    admin
        .set_share_group_config(
            &group,
            &[
                ("share.auto.offset.reset", "earliest"),
                ("share.isolation.level", "read_committed"),
                ("share.record.lock.duration.ms", "15000"),
            ],
        )
        .await
        .expect("valid group configs");

    let error = admin
        .set_share_group_config(&group, &[("share.auto.offset.reset", "sometimes")])
        .await
        .expect_err("invalid value");
    let AdminError::Broker {
        call,
        api,
        name,
        message,
        retriable,
        ..
    } = &error
    else {
        panic!("expected a broker error, got {error:?}");
    };
    assert_eq!(
        (*call, *api, *name, *retriable),
        (
            "set_share_group_config",
            "IncrementalAlterConfigs",
            "INVALID_CONFIG",
            false
        )
    );
    let message = message.as_deref().unwrap_or_default();
    assert!(
        message.contains("sometimes") || message.contains("share.auto.offset.reset"),
        "{message}"
    );
    eprintln!("invalid value: {error}");
}

#[tokio::test]
async fn connect_to_a_closed_port_is_a_connection_error() {
    // No broker needed: a loopback port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    drop(listener);
    let error = KafkaAdmin::connect(&addr).await.expect_err("closed port");
    assert!(
        matches!(&error, AdminError::Connect { call: "connect", source: ConsumerError::Connection { broker, .. }, .. } if *broker == addr),
        "{error:?}"
    );
    assert!(error.is_retriable());
}

// Settings and timeouts, against the fake broker.

#[tokio::test]
async fn a_hung_call_fails_with_the_admins_own_timeout_naming_the_call() {
    let broker = FakeBroker::start().await;
    let timeout = Duration::from_millis(300);
    let admin = KafkaAdmin::builder(broker.addr())
        .request_timeout(timeout)
        .connect()
        .await
        .expect("connect");
    broker.on(ApiKey::CreateTopics, |_| Reply::Never);
    let started = tokio::time::Instant::now();
    let error = admin
        .create_topic("orders", 1, 1)
        .await
        .expect_err("no answer");
    let took = started.elapsed();
    assert!(
        matches!(
            &error,
            AdminError::Timeout { call: "create_topic", api: "CreateTopics", timeout: t } if *t == timeout
        ),
        "{error:?}"
    );
    assert!(
        took >= timeout && took < Duration::from_secs(5),
        "the configured {timeout:?}, not the default 30 s: took {took:?}"
    );
    assert!(error.is_retriable());
    let message = error.to_string();
    assert!(
        message.contains("KafkaAdmin::create_topic")
            && message.contains("CreateTopics")
            && message.contains("request_timeout"),
        "{message}"
    );

    // The hung connection is left behind: the next call is answered on a new one.
    broker.reset(ApiKey::CreateTopics);
    let connections = broker.connections();
    admin.create_topic("orders", 1, 1).await.expect("answered");
    assert_eq!(broker.connections(), connections + 1);
}

#[tokio::test]
async fn a_broker_that_never_completes_the_handshake_fails_the_connect_in_time() {
    let broker = FakeBroker::start().await;
    broker.on(ApiKey::ApiVersions, |_| Reply::Never);
    let timeout = Duration::from_millis(200);
    let started = tokio::time::Instant::now();
    let error = KafkaAdmin::builder(broker.addr())
        .connect_timeout(timeout)
        .connect()
        .await
        .expect_err("no handshake");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        matches!(&error, AdminError::Connect { call: "connect", source: ConsumerError::Timeout(t), .. } if *t == timeout),
        "{error:?}"
    );
    assert!(error.is_retriable());
}

#[tokio::test]
async fn the_broker_gets_five_sixths_of_the_request_timeout_and_the_client_id() {
    let broker = FakeBroker::start().await;
    let admin = KafkaAdmin::builder(broker.addr())
        .request_timeout(Duration::from_millis(6_000))
        .client_id("orders-setup")
        .connect()
        .await
        .expect("connect");
    admin.create_topic("orders", 2, 1).await.expect("create");
    let [create] = broker
        .requests_of(ApiKey::CreateTopics)
        .try_into()
        .expect("one CreateTopics");
    let request: CreateTopicsRequest = create.decode().expect("decodes");
    assert_eq!(request.timeout_ms, 5_000);
    assert!(
        broker
            .requests()
            .iter()
            .all(|r| r.header.client_id.as_deref() == Some("orders-setup")),
        "every request carries the client id"
    );
}

#[tokio::test]
async fn timeouts_of_duration_max_saturate() {
    let broker = FakeBroker::start().await;
    let admin = KafkaAdmin::builder(broker.addr())
        .connect_timeout(Duration::MAX)
        .request_timeout(Duration::MAX)
        .connect()
        .await
        .expect("connect");
    admin.create_topic("orders", 1, 1).await.expect("create");
    admin.delete_topic("orders").await.expect("delete");
    let create: CreateTopicsRequest = broker.requests_of(ApiKey::CreateTopics)[0]
        .decode()
        .expect("decodes");
    assert_eq!(create.timeout_ms, i32::MAX);
}

#[tokio::test]
async fn invalid_settings_are_refused_before_connecting() {
    let error = KafkaAdmin::builder("127.0.0.1:9")
        .client_id("x".repeat(40_000))
        .connect()
        .await
        .expect_err("client id too long");
    assert!(
        matches!(&error, AdminError::InvalidArgument { call: "connect", reason } if reason.contains("client id")),
        "{error:?}"
    );
    let error = KafkaAdmin::connect(" , ").await.expect_err("no address");
    assert!(
        matches!(
            &error,
            AdminError::InvalidArgument {
                call: "connect",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(!error.is_retriable());
}

// A share group's configs and its dead-letter queue, against the fake broker.

#[tokio::test]
async fn share_group_config_reads_back_what_was_set() {
    let broker = FakeBroker::start().await;
    broker.describe_configs();
    let admin = KafkaAdmin::connect(&broker.addr()).await.expect("connect");
    admin
        .set_share_group_config(
            "g",
            &[
                ("share.delivery.count.limit", "3"),
                ("share.auto.offset.reset", "earliest"),
            ],
        )
        .await
        .expect("set");
    admin
        .set_share_group_dead_letter_queue("g", " dlq.orders ", true)
        .await
        .expect("queue");
    let configs = admin.share_group_config("g").await.expect("read");
    assert_eq!(configs.delivery_count_limit(), Some(3));
    assert_eq!(configs.get("share.auto.offset.reset"), Some("earliest"));
    assert!(configs.is_set_on_group("share.auto.offset.reset"));
    assert_eq!(configs.dead_letter_topic(), Some("dlq.orders"), "trimmed");
    assert!(configs.dead_letter_copy_record());
    assert_eq!(configs.len(), 4);
    let [describe] = broker
        .requests_of(ApiKey::DescribeConfigs)
        .try_into()
        .expect("one DescribeConfigs");
    let request: DescribeConfigsRequest = describe.decode().expect("decodes");
    let resource = &request.resources[0];
    assert_eq!(
        (resource.resource_type, resource.resource_name.as_str()),
        (RESOURCE_GROUP, "g")
    );
    assert_eq!(resource.configuration_keys, None, "every config");

    admin
        .remove_share_group_dead_letter_queue("g")
        .await
        .expect("removed");
    let alter = broker.requests_of(ApiKey::IncrementalAlterConfigs);
    let removal: IncrementalAlterConfigsRequest = alter[2].decode().expect("decodes");
    let operations: Vec<(String, i8, Option<String>)> = removal.resources[0]
        .configs
        .iter()
        .map(|c| {
            (
                c.name.to_string(),
                c.config_operation,
                c.value.as_ref().map(ToString::to_string),
            )
        })
        .collect();
    assert_eq!(
        operations,
        [
            ("errors.deadletterqueue.topic.name".to_owned(), 1, None),
            (
                "errors.deadletterqueue.copy.record.enable".to_owned(),
                1,
                None
            ),
        ],
        "DELETE operations"
    );
    let configs = admin.share_group_config("g").await.expect("read");
    assert_eq!(configs.dead_letter_topic(), None);
    assert!(!configs.dead_letter_copy_record());
    assert_eq!(configs.delivery_count_limit(), Some(3));
}

#[tokio::test]
async fn a_dead_letter_topic_name_kafka_would_refuse_is_refused_before_sending() {
    let broker = FakeBroker::start().await;
    let admin = KafkaAdmin::connect(&broker.addr()).await.expect("connect");
    for topic in ["", "  ", "__dlq"] {
        let error = admin
            .set_share_group_dead_letter_queue("g", topic, false)
            .await
            .expect_err("refused");
        assert!(
            matches!(
                &error,
                AdminError::InvalidArgument {
                    call: "set_share_group_dead_letter_queue",
                    ..
                }
            ),
            "{error:?}"
        );
    }
    assert_eq!(broker.count(ApiKey::IncrementalAlterConfigs), 0);
}

#[tokio::test]
async fn a_dead_letter_topic_is_created_with_the_topic_config_the_broker_requires() {
    let broker = FakeBroker::start().await;
    let admin = KafkaAdmin::connect(&broker.addr()).await.expect("connect");
    admin
        .create_dead_letter_topic("dlq.orders", 3, 1)
        .await
        .expect("created");
    let create: CreateTopicsRequest = broker.requests_of(ApiKey::CreateTopics)[0]
        .decode()
        .expect("decodes");
    let topic = &create.topics[0];
    assert_eq!((topic.num_partitions, topic.replication_factor), (3, 1));
    assert_eq!(
        broker.configs(RESOURCE_TOPIC, "dlq.orders"),
        BTreeMap::from([
            (
                "errors.deadletterqueue.group.enable".to_owned(),
                "true".to_owned()
            ),
            ("message.timestamp.type".to_owned(), "CreateTime".to_owned()),
        ])
    );
}

#[tokio::test]
async fn reading_group_configs_names_the_call_on_errors() {
    let broker = FakeBroker::start().await;
    let admin = KafkaAdmin::connect(&broker.addr()).await.expect("connect");
    let error = admin
        .share_group_config("g")
        .await
        .expect_err("not advertised");
    assert!(
        matches!(
            &error,
            AdminError::Unsupported {
                call: "share_group_config",
                api: "DescribeConfigs",
                ..
            }
        ),
        "{error:?}"
    );
    broker.describe_configs();
    broker.on(ApiKey::DescribeConfigs, |_| Reply::Never);
    let admin = KafkaAdmin::builder(broker.addr())
        .request_timeout(Duration::from_millis(200))
        .connect()
        .await
        .expect("connect");
    let error = admin.share_group_config("g").await.expect_err("no answer");
    assert!(
        matches!(
            &error,
            AdminError::Timeout {
                call: "share_group_config",
                api: "DescribeConfigs",
                ..
            }
        ),
        "{error:?}"
    );
}

// A share group's dead-letter queue on a real Kafka 4.4 broker.

#[tokio::test]
async fn share_group_dead_letter_queue_set_and_read_back() {
    let Some(admin) = admin("share_group_dead_letter_queue_set_and_read_back").await else {
        return;
    };
    let group = support::unique("admin-dlq-group");
    let before = admin.share_group_config(&group).await.expect("read");
    if before.get("errors.deadletterqueue.topic.name").is_none() {
        eprintln!("SKIPPED share_group_dead_letter_queue_set_and_read_back: Kafka 4.4+ only");
        return;
    }
    assert_eq!(before.dead_letter_topic(), None, "blank by default");
    assert!(!before.dead_letter_copy_record());
    assert!(!before.is_set_on_group("share.delivery.count.limit"));
    assert_eq!(
        before.delivery_count_limit(),
        Some(5),
        "a 4.4 broker fills in its own group.share.delivery.count.limit"
    );

    admin
        .set_share_group_config(&group, &[("share.delivery.count.limit", "3")])
        .await
        .expect("limit");
    admin
        .set_share_group_dead_letter_queue(&group, "dlq.orders", true)
        .await
        .expect("queue");
    let after = support::share_group_config_until(&admin, &group, |c| {
        c.delivery_count_limit() == Some(3) && c.dead_letter_topic().is_some()
    })
    .await;
    assert_eq!(after.delivery_count_limit(), Some(3));
    assert!(after.is_set_on_group("share.delivery.count.limit"));
    assert_eq!(after.dead_letter_topic(), Some("dlq.orders"));
    assert!(after.dead_letter_copy_record());
    assert!(after.is_set_on_group("errors.deadletterqueue.topic.name"));
    assert_eq!(
        after.get("share.auto.offset.reset"),
        Some("latest"),
        "defaults are described too"
    );

    admin
        .remove_share_group_dead_letter_queue(&group)
        .await
        .expect("removed");
    let removed =
        support::share_group_config_until(&admin, &group, |c| c.dead_letter_topic().is_none())
            .await;
    assert_eq!(removed.dead_letter_topic(), None);
    assert!(!removed.is_set_on_group("errors.deadletterqueue.topic.name"));

    // The broker itself refuses an internal topic name; the admin refuses it first.
    let error = admin
        .set_share_group_config(&group, &[("errors.deadletterqueue.topic.name", "__x")])
        .await
        .expect_err("refused by the broker");
    assert!(
        matches!(
            &error,
            AdminError::Broker {
                name: "INVALID_CONFIG",
                ..
            }
        ),
        "{error:?}"
    );
}

/// A DLQ end to end: a source topic, a dead-letter topic, a group reading the one with the
/// other as its queue, and what the broker wrote there read back by a second group.
struct DeadLetterFixture {
    bootstrap: String,
    admin: KafkaAdmin,
    topic: String,
    dlq: String,
    group: String,
}

/// The fixture, or `None` without a broker or on a broker without share-group dead-letter
/// queues (before Kafka 4.4: it does not describe their group config).
/// Waits until the broker describes the group with its dead-letter queue.
async fn wait_for_group_dead_letter_queue(admin: &KafkaAdmin, group: &str, dlq: &str) {
    support::share_group_config_until(admin, group, |c| c.dead_letter_topic() == Some(dlq)).await;
}

async fn dead_letter_fixture(test: &str, copy_record: bool) -> Option<DeadLetterFixture> {
    let bootstrap = support::bootstrap(test)?;
    let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
    let topic = support::unique(test);
    let dlq = format!("dlq.{topic}");
    let group = support::unique(&format!("{test}-group"));
    let configs = admin.share_group_config(&group).await.expect("describe");
    if configs.get("errors.deadletterqueue.topic.name").is_none() {
        eprintln!("SKIPPED {test}: the broker has no share-group dead-letter queues (Kafka 4.4+)");
        return None;
    }
    admin.create_topic(&topic, 1, 1).await.expect("topic");
    admin
        .create_dead_letter_topic(&dlq, 1, 1)
        .await
        .expect("dead-letter topic");
    admin
        .set_share_group_config(
            &group,
            &[
                ("share.auto.offset.reset", "earliest"),
                ("share.record.lock.duration.ms", "2000"),
                ("share.delivery.count.limit", "2"),
            ],
        )
        .await
        .expect("group");
    admin
        .set_share_group_dead_letter_queue(&group, &dlq, copy_record)
        .await
        .expect("queue");
    wait_for_group_dead_letter_queue(&admin, &group, &dlq).await;
    Some(DeadLetterFixture {
        bootstrap,
        admin,
        topic,
        dlq,
        group,
    })
}

impl DeadLetterFixture {
    /// Produces `n` records, `key-i`/`value-i` with a header `source: web`.
    async fn produce(&self, n: usize) {
        let client = ClientBuilder::new(vec![self.bootstrap.clone()])
            .build()
            .await
            .expect("rskafka client");
        let partition = client
            .partition_client(self.topic.clone(), 0, UnknownTopicHandling::Retry)
            .await
            .expect("partition client");
        let records = (0..n)
            .map(|i| Record {
                key: Some(format!("key-{i}").into_bytes()),
                value: Some(format!("value-{i}").into_bytes()),
                headers: BTreeMap::from([("source".to_owned(), b"web".to_vec())]),
                timestamp: chrono::Utc::now(),
            })
            .collect();
        partition
            .produce(records, Compression::NoCompression)
            .await
            .expect("produce");
    }

    async fn consumer(&self, group: &str, topic: &str) -> KafkaShareConsumer {
        let mut consumer = KafkaShareConsumer::connect(
            KafkaShareConsumerConfig::new(&self.bootstrap, group)
                .fetch_max_wait(Duration::from_millis(200)),
        )
        .await
        .expect("consumer");
        consumer
            .subscribe(vec![topic.to_owned()])
            .await
            .expect("subscribe");
        consumer
    }

    /// Polls until `n` records came (each acknowledged with `ack`, committed) or 30 s passed.
    async fn take(
        consumer: &mut KafkaShareConsumer,
        n: usize,
        ack: impl Fn(&ConsumerRecord) -> AcknowledgeType,
    ) -> Vec<ConsumerRecord> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut got = Vec::new();
        while got.len() < n && tokio::time::Instant::now() < deadline {
            let records = consumer
                .poll(Duration::from_millis(500))
                .await
                .expect("poll");
            for record in &records {
                consumer.acknowledge(record, ack(record)).expect("ack");
            }
            let results = consumer
                .commit_sync(Duration::from_secs(10))
                .await
                .expect("commit");
            assert!(results.is_success(), "{results:?}");
            got.extend(records);
        }
        got
    }

    /// What the broker wrote to the dead-letter topic, read by a group of its own.
    async fn dead_letters(&self, n: usize) -> Vec<ConsumerRecord> {
        let reader = support::unique("dlq-reader");
        self.admin
            .set_share_group_config(&reader, &[("share.auto.offset.reset", "earliest")])
            .await
            .expect("reader group");
        let mut consumer = self.consumer(&reader, &self.dlq).await;
        let got = Self::take(&mut consumer, n, |_| AcknowledgeType::Accept).await;
        consumer
            .close(Duration::from_secs(10))
            .await
            .expect("close");
        got
    }

    async fn clean_up(&self) {
        for topic in [&self.topic, &self.dlq] {
            self.admin.delete_topic(topic).await.expect("delete");
        }
    }
}

/// The headers of a record, in order, as text.
fn headers(record: &ConsumerRecord) -> Vec<(String, String)> {
    record
        .headers()
        .iter()
        .map(|h| {
            let value = h
                .value()
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_else(|| "<null>".to_owned());
            (h.key().to_owned(), value)
        })
        .collect()
}

fn text(bytes: Option<&bytes::Bytes>) -> Option<String> {
    bytes.map(|b| String::from_utf8_lossy(b).into_owned())
}

fn dead_letter_headers(
    f: &DeadLetterFixture,
    offset: i64,
    delivery_count: u16,
    message: &str,
) -> Vec<(String, String)> {
    [
        ("__dlq.errors.topic", f.topic.clone()),
        ("__dlq.errors.partition", "0".to_owned()),
        ("__dlq.errors.offset", offset.to_string()),
        ("__dlq.errors.group", f.group.clone()),
        ("__dlq.errors.delivery.count", delivery_count.to_string()),
        ("__dlq.errors.message", message.to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_released_until_the_limit_lands_in_the_brokers_dead_letter_queue() {
    let test = "dlq_release_until_limit";
    let Some(f) = dead_letter_fixture(test, true).await else {
        return;
    };
    let started = chrono::Utc::now().timestamp_millis();
    f.produce(2).await;
    let mut consumer = f.consumer(&f.group, &f.topic).await;
    assert_eq!(consumer.delivery_count_limit(), Some(2));
    assert_eq!(
        consumer.broker_dead_letter_queue(),
        kafka_share_sink::BrokerDeadLetterQueue::Topic {
            name: f.dlq.clone(),
            copy_record: true
        }
    );
    // Offset 0 is released on each of its two deliveries; offset 1 is rejected at once.
    let ack = |r: &ConsumerRecord| {
        if r.offset() == 0 {
            AcknowledgeType::Release
        } else {
            AcknowledgeType::Reject
        }
    };
    let first = DeadLetterFixture::take(&mut consumer, 2, ack).await;
    assert_eq!(first.len(), 2, "both delivered");
    let second = DeadLetterFixture::take(&mut consumer, 1, ack).await;
    assert_eq!(
        second
            .iter()
            .map(|r| (r.offset(), r.delivery_count()))
            .collect::<Vec<_>>(),
        [(0, 2)],
        "the released record came back, on its last delivery"
    );
    let never = DeadLetterFixture::take(&mut consumer, 1, ack).await;
    assert!(never.is_empty(), "archived: {never:?}");
    consumer
        .close(Duration::from_secs(10))
        .await
        .expect("close");

    let mut letters = f.dead_letters(2).await;
    letters.sort_by_key(|r| {
        r.headers()
            .last("__dlq.errors.offset")
            .and_then(|h| h.value().cloned())
    });
    for letter in &letters {
        eprintln!(
            "dead letter at {}-{}@{}: key {:?}, value {:?}, timestamp {} ({:?}), headers {:?}",
            letter.topic(),
            letter.partition(),
            letter.offset(),
            text(letter.key()),
            text(letter.value()),
            letter.timestamp(),
            letter.timestamp_type(),
            headers(letter)
        );
    }
    assert_eq!(letters.len(), 2, "one dead letter per record");
    let released = &letters[0];
    assert_eq!(text(released.key()).as_deref(), Some("key-0"));
    assert_eq!(text(released.value()).as_deref(), Some("value-0"));
    assert_eq!(
        headers(released),
        dead_letter_headers(&f, 0, 2, "Offset delivery count exceeded the threshold."),
        "the broker's context headers, and not the record's own"
    );
    let rejected = &letters[1];
    assert_eq!(text(rejected.key()).as_deref(), Some("key-1"));
    assert_eq!(
        headers(rejected),
        dead_letter_headers(&f, 1, 1, "Offset rejected by client.")
    );
    for letter in &letters {
        assert_eq!(letter.partition(), 0);
        assert!(
            letter.timestamp() >= started,
            "the time of the dead-letter write, not of the record: {}",
            letter.timestamp()
        );
    }
    f.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_copy_record_a_dead_letter_has_only_the_context_headers() {
    let test = "dlq_no_copy";
    let Some(f) = dead_letter_fixture(test, false).await else {
        return;
    };
    f.produce(1).await;
    let mut consumer = f.consumer(&f.group, &f.topic).await;
    let delivered = DeadLetterFixture::take(&mut consumer, 2, |_| AcknowledgeType::Release).await;
    assert_eq!(
        delivered
            .iter()
            .map(ConsumerRecord::delivery_count)
            .collect::<Vec<_>>(),
        [1, 2]
    );
    consumer
        .close(Duration::from_secs(10))
        .await
        .expect("close");
    let letters = f.dead_letters(1).await;
    assert_eq!(letters.len(), 1);
    let letter = &letters[0];
    assert_eq!((letter.key(), letter.value()), (None, None));
    assert_eq!(
        headers(letter),
        dead_letter_headers(&f, 0, 2, "Offset delivery count exceeded the threshold.")
    );
    f.clean_up().await;
}
