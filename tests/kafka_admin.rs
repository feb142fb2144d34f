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
use kafka_protocol::messages::share_group_describe_response::DescribedGroup;
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, DescribeConfigsRequest, DescribeShareGroupOffsetsRequest, GroupId,
    IncrementalAlterConfigsRequest, ShareGroupDescribeResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_share_sink::ConnectionError;
use kafka_share_sink::{
    AcknowledgeType, AdminError, ConsumerRecord, KafkaAdmin, KafkaShareConsumer,
    KafkaShareConsumerConfig, OffsetSpec, ResetTo, ShareConsumer, ShareGroupPartitionOffsets,
    ShareGroupState,
};
use kafka_share_sink::{BrokerError, ClientError};
use rskafka::client::partition::Compression;
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
                error: BrokerError {
                    api: "CreateTopics",
                    code: 36,
                    name: "TOPIC_ALREADY_EXISTS",
                    retriable: false,
                    ..
                },
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
                error: BrokerError {
                    name: "UNKNOWN_TOPIC_OR_PARTITION",
                    ..
                },
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
                error: BrokerError {
                    name: "INVALID_REPLICATION_FACTOR",
                    ..
                },
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
        matches!(&error, AdminError::Broker { error: BrokerError { name: "UNKNOWN_TOPIC_OR_PARTITION", message: Some(m), .. }, .. } if m.contains(&missing)),
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
        error:
            BrokerError {
                api,
                name,
                message,
                retriable,
                ..
            },
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
        matches!(&error, AdminError::Connect { call: "connect", source: ClientError::Connection(ConnectionError::Io { broker, .. }), .. } if *broker == addr),
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
        matches!(&error, AdminError::Connect { call: "connect", source: ClientError::Timeout(t), .. } if *t == timeout),
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
                error: BrokerError {
                    name: "INVALID_CONFIG",
                    ..
                },
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
        let partition = support::rskafka_partition(&self.bootstrap, &self.topic, 0).await;
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

// Share groups, offsets, partitions and records: what `kafka-share-groups.sh`,
// `kafka-configs.sh`, `kafka-topics.sh` and `kafka-delete-records.sh` do, against a real broker.

/// A topic of `partitions` partitions and a group reading it from the earliest offset.
struct ShareFixture {
    bootstrap: String,
    admin: KafkaAdmin,
    topic: String,
    group: String,
}

async fn share_fixture(test: &str, partitions: i32) -> Option<ShareFixture> {
    let bootstrap = support::bootstrap(test)?;
    let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
    let topic = support::unique(test);
    let group = support::unique(&format!("{test}-group"));
    admin
        .create_topic(&topic, partitions, 1)
        .await
        .expect("topic");
    admin
        .set_share_group_config(&group, &[("share.auto.offset.reset", "earliest")])
        .await
        .expect("group");
    support::share_group_config_until(&admin, &group, |c| {
        c.get("share.auto.offset.reset") == Some("earliest")
    })
    .await;
    Some(ShareFixture {
        bootstrap,
        admin,
        topic,
        group,
    })
}

impl ShareFixture {
    /// Produces `n` records `value-{from+i}` to `partition`, in one batch.
    async fn produce(&self, partition: i32, from: usize, n: usize) {
        let partition = support::rskafka_partition(&self.bootstrap, &self.topic, partition).await;
        let records = (from..from + n)
            .map(|i| Record {
                key: None,
                value: Some(format!("value-{i}").into_bytes()),
                headers: BTreeMap::new(),
                timestamp: chrono::Utc::now(),
            })
            .collect();
        partition
            .produce(records, Compression::NoCompression)
            .await
            .expect("produce");
    }

    async fn consumer(&self, client_id: &str) -> KafkaShareConsumer {
        let mut consumer = KafkaShareConsumer::connect(
            KafkaShareConsumerConfig::new(&self.bootstrap, &self.group)
                .client_id(client_id)
                .fetch_max_wait(Duration::from_millis(200)),
        )
        .await
        .expect("consumer");
        consumer
            .subscribe(vec![self.topic.clone()])
            .await
            .expect("subscribe");
        consumer
    }

    /// Polls until `n` records came or `within` passed, accepting and committing each.
    async fn accept(
        consumer: &mut KafkaShareConsumer,
        n: usize,
        within: Duration,
    ) -> Vec<(i32, i64)> {
        let deadline = tokio::time::Instant::now() + within;
        let mut got = Vec::new();
        while got.len() < n && tokio::time::Instant::now() < deadline {
            let records = consumer
                .poll(Duration::from_millis(500))
                .await
                .expect("poll");
            for record in &records {
                consumer
                    .acknowledge(record, AcknowledgeType::Accept)
                    .expect("ack");
                got.push((record.partition(), record.offset()));
            }
            if !records.is_empty() {
                let results = consumer
                    .commit_sync(Duration::from_secs(10))
                    .await
                    .expect("commit");
                assert!(results.is_success(), "{results:?}");
            }
        }
        got.sort_unstable();
        got
    }

    /// Reads the group's offsets until `done` holds (the share coordinator writes them a
    /// moment after the acknowledgements), for at most 20 s.
    async fn offsets_until(
        &self,
        done: impl Fn(&[ShareGroupPartitionOffsets]) -> bool,
    ) -> Vec<ShareGroupPartitionOffsets> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let offsets = self
                .admin
                .share_group_offsets(&self.group)
                .await
                .expect("offsets");
            if done(&offsets) {
                return offsets;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the group's offsets never showed the change: {offsets:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn clean_up(&self) {
        self.admin.delete_topic(&self.topic).await.expect("delete");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_a_share_group_with_two_live_members() {
    let Some(f) = share_fixture("admin_describe_group", 2).await else {
        return;
    };
    let unknown = support::unique("admin-no-such-group");
    let error = f
        .admin
        .describe_share_group(&unknown)
        .await
        .expect_err("no such group");
    assert!(
        matches!(&error, AdminError::GroupNotFound { call: "describe_share_group", group, .. } if *group == unknown),
        "{error:?}"
    );
    assert!(error.to_string().contains(&unknown), "{error}");

    f.produce(0, 0, 2).await;
    f.produce(1, 2, 2).await;
    let mut a = f.consumer("member-a").await;
    let mut b = f.consumer("member-b").await;
    // Both members poll (and so heartbeat) until the group shows both with an assignment.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let description = loop {
        let _ = a.poll(Duration::from_millis(100)).await.expect("poll a");
        let _ = b.poll(Duration::from_millis(100)).await.expect("poll b");
        let description = f
            .admin
            .describe_share_group(&f.group)
            .await
            .expect("describe");
        if description.members.len() == 2
            && description.members.iter().all(|m| !m.assignment.is_empty())
            && description.assignment_epoch == description.group_epoch
        {
            break description;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the group never showed two assigned members: {description:?}"
        );
    };
    eprintln!("{description:#?}");
    assert_eq!(description.group_id, f.group);
    assert_eq!(description.state, ShareGroupState::Stable);
    assert!(description.group_epoch > 0, "{description:?}");
    let mut client_ids: Vec<&str> = description
        .members
        .iter()
        .map(|m| m.client_id.as_str())
        .collect();
    client_ids.sort_unstable();
    assert_eq!(client_ids, ["member-a", "member-b"]);
    let mut assigned = std::collections::BTreeSet::new();
    for member in &description.members {
        assert!(!member.member_id.is_empty());
        assert!(member.host.contains("127.0.0.1"), "{member:?}");
        assert!(member.member_epoch > 0, "{member:?}");
        assert_eq!(member.subscribed_topics, std::slice::from_ref(&f.topic));
        assert_eq!(
            member.assignment.keys().collect::<Vec<_>>(),
            [&f.topic],
            "{member:?}"
        );
        assigned.extend(member.assignment[&f.topic].iter().copied());
    }
    assert_eq!(assigned.into_iter().collect::<Vec<_>>(), [0, 1]);

    for consumer in [&mut a, &mut b] {
        consumer
            .close(Duration::from_secs(10))
            .await
            .expect("close");
    }
    let after = f
        .admin
        .describe_share_group(&f.group)
        .await
        .expect("describe");
    assert_eq!(after.state, ShareGroupState::Empty, "{after:?}");
    assert!(after.members.is_empty());
    f.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_group_offsets_show_start_offset_and_lag_after_part_is_consumed() {
    let Some(f) = share_fixture("admin_offsets_lag", 1).await else {
        return;
    };
    f.produce(0, 0, 4).await;
    let mut consumer = f.consumer("lag").await;
    let got = ShareFixture::accept(&mut consumer, 4, Duration::from_secs(30)).await;
    assert_eq!(got, [(0, 0), (0, 1), (0, 2), (0, 3)]);
    consumer
        .close(Duration::from_secs(10))
        .await
        .expect("close");
    f.produce(0, 4, 6).await;

    // Ten records, four of them accepted: six to go. The start offset need not move past
    // the accepted ones at once (the broker records them as done past the start offset,
    // which the lag counts), but it never passes what was done.
    let offsets = f
        .offsets_until(|o| o.len() == 1 && o[0].lag == Some(6))
        .await;
    let p = &offsets[0];
    assert!(
        p.start_offset.is_some_and(|s| (0..=4).contains(&s)),
        "{p:?}"
    );
    assert_eq!((p.topic.as_str(), p.partition), (f.topic.as_str(), 0));
    assert!(p.leader_epoch.is_some_and(|e| e >= 0), "{p:?}");
    eprintln!("{offsets:?}");

    let error = f
        .admin
        .share_group_offsets(&support::unique("admin-no-offsets"))
        .await;
    // A group that never existed: the broker either knows nothing (not found) or reports no
    // partitions; either way no offsets.
    match error {
        Ok(offsets) => assert!(offsets.is_empty(), "{offsets:?}"),
        Err(e) => assert!(matches!(e, AdminError::GroupNotFound { .. }), "{e:?}"),
    }
    f.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn altering_resetting_and_deleting_offsets_need_an_empty_group() {
    let Some(f) = share_fixture("admin_alter_offsets", 2).await else {
        return;
    };
    f.produce(0, 0, 5).await;
    f.produce(1, 5, 3).await;
    let mut consumer = f.consumer("alter").await;
    let got = ShareFixture::accept(&mut consumer, 8, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 8, "{got:?}");

    // A member is still in the group: every change is refused, saying what to do.
    let error = f
        .admin
        .alter_share_group_offsets(&f.group, &[(&f.topic, 0, 0)])
        .await
        .expect_err("group not empty");
    assert!(
        matches!(&error, AdminError::GroupNotEmpty { call: "alter_share_group_offsets", group, .. } if *group == f.group),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("stop") && error.to_string().contains(&f.group),
        "{error}"
    );
    eprintln!("{error}");
    let error = f
        .admin
        .reset_share_group_offsets(&f.group, &f.topic, ResetTo::Earliest)
        .await
        .expect_err("group not empty");
    assert!(
        matches!(
            &error,
            AdminError::GroupNotEmpty {
                call: "reset_share_group_offsets",
                ..
            }
        ),
        "{error:?}"
    );
    let error = f
        .admin
        .delete_share_group_offsets(&f.group, &[&f.topic])
        .await
        .expect_err("group not empty");
    assert!(
        matches!(
            &error,
            AdminError::GroupNotEmpty {
                call: "delete_share_group_offsets",
                ..
            }
        ),
        "{error:?}"
    );

    consumer
        .close(Duration::from_secs(10))
        .await
        .expect("close");

    // Empty now: alter one partition, then reset the topic three ways.
    f.admin
        .alter_share_group_offsets(&f.group, &[(&f.topic, 0, 2)])
        .await
        .expect("alter");
    f.offsets_until(|o| {
        o.iter()
            .any(|p| p.partition == 0 && p.start_offset == Some(2))
    })
    .await;
    let set = f
        .admin
        .reset_share_group_offsets(&f.group, &f.topic, ResetTo::Latest)
        .await
        .expect("to latest");
    assert_eq!(set, BTreeMap::from([(0, 5), (1, 3)]));
    f.offsets_until(|o| {
        o.iter()
            .map(|p| (p.partition, p.start_offset, p.lag))
            .collect::<Vec<_>>()
            == [(0, Some(5), Some(0)), (1, Some(3), Some(0))]
    })
    .await;
    let set = f
        .admin
        .reset_share_group_offsets(&f.group, &f.topic, ResetTo::Offset(4))
        .await
        .expect("to offset");
    assert_eq!(
        set,
        BTreeMap::from([(0, 4), (1, 3)]),
        "kept within each log"
    );
    let set = f
        .admin
        .reset_share_group_offsets(&f.group, &f.topic, ResetTo::Earliest)
        .await
        .expect("to earliest");
    assert_eq!(set, BTreeMap::from([(0, 0), (1, 0)]));
    f.offsets_until(|o| o.iter().all(|p| p.start_offset == Some(0)) && o.len() == 2)
        .await;

    let error = f
        .admin
        .reset_share_group_offsets(&f.group, &f.topic, ResetTo::Offset(-3))
        .await
        .expect_err("negative");
    assert!(
        matches!(&error, AdminError::InvalidArgument { .. }),
        "{error:?}"
    );
    let error = f
        .admin
        .alter_share_group_offsets(&f.group, &[(&f.topic, 7, 0)])
        .await
        .expect_err("no partition 7");
    eprintln!("{error}");
    assert!(
        matches!(&error, AdminError::Broker { error: BrokerError { message: Some(m), .. }, .. } if m.contains("partition 7")),
        "{error:?}"
    );

    f.admin
        .delete_share_group_offsets(&f.group, &[&f.topic])
        .await
        .expect("delete");
    f.offsets_until(|o| o.iter().all(|p| p.topic != f.topic))
        .await;
    f.clean_up().await;
}

/// Issue 16: a consumer that was closed but not dropped kept its connections open, and a new
/// member got nothing for 30 s after the group's offsets were reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_close_a_reset_to_earliest_redelivers_to_a_new_member_at_once() {
    let Some(f) = share_fixture("admin_reset_after_close", 1).await else {
        return;
    };
    f.produce(0, 0, 5).await;
    let mut a = f.consumer("first").await;
    let got = ShareFixture::accept(&mut a, 5, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 5, "{got:?}");
    a.close(Duration::from_secs(10)).await.expect("close");
    // `a` stays alive (closed, not dropped) until the end of the test.

    let set = f
        .admin
        .reset_share_group_offsets(&f.group, &f.topic, ResetTo::Earliest)
        .await
        .expect("reset");
    assert_eq!(set, BTreeMap::from([(0, 0)]));

    let mut b = f.consumer("second").await;
    let again = ShareFixture::accept(&mut b, 5, Duration::from_secs(10)).await;
    assert_eq!(
        again,
        [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4)],
        "the new member got the records again within 10 s"
    );
    b.close(Duration::from_secs(10)).await.expect("close b");
    drop(a);
    f.clean_up().await;
}

#[tokio::test]
async fn create_a_topic_with_configs_and_read_them_back() {
    let Some(admin) = admin("create_topic_with_configs").await else {
        return;
    };
    let topic = support::unique("admin-compact");
    admin
        .create_topic_with(
            &topic,
            2,
            1,
            &[("cleanup.policy", "compact"), ("retention.ms", "3600000")],
        )
        .await
        .expect("create");
    let configs = admin.topic_config(&topic).await.expect("describe");
    assert_eq!(configs.get("cleanup.policy"), Some("compact"));
    assert!(configs.is_set_on_topic("cleanup.policy"));
    assert_eq!(configs.get("retention.ms"), Some("3600000"));
    assert!(configs.get("segment.bytes").is_some(), "defaults too");
    assert!(!configs.is_set_on_topic("segment.bytes"));
    assert_eq!(admin.partitions(&topic).await.expect("partitions").len(), 2);

    let error = admin
        .create_topic_with(
            &support::unique("admin-bad-config"),
            1,
            1,
            &[("cleanup.policy", "sometimes")],
        )
        .await
        .expect_err("bad value");
    assert!(
        matches!(
            &error,
            AdminError::Broker {
                call: "create_topic_with",
                error: BrokerError {
                    name: "INVALID_CONFIG",
                    ..
                },
                ..
            }
        ),
        "{error:?}"
    );
    let missing = support::unique("admin-no-topic");
    let error = admin.topic_config(&missing).await.expect_err("no topic");
    assert!(
        matches!(
            &error,
            AdminError::Broker {
                error: BrokerError {
                    name: "UNKNOWN_TOPIC_OR_PARTITION",
                    ..
                },
                ..
            }
        ),
        "{error:?}"
    );
    admin.delete_topic(&topic).await.expect("delete");
}

#[tokio::test]
async fn create_partitions_grows_a_topic() {
    let Some(admin) = admin("create_partitions").await else {
        return;
    };
    let topic = support::unique("admin-grow");
    admin.create_topic(&topic, 1, 1).await.expect("create");
    admin.create_partitions(&topic, 3).await.expect("grow");
    let placements = admin.partitions(&topic).await.expect("partitions");
    assert_eq!(
        placements.iter().map(|p| p.partition).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert!(placements.iter().all(|p| p.leader.is_some()));
    let error = admin
        .create_partitions(&topic, 2)
        .await
        .expect_err("cannot shrink");
    assert!(
        matches!(
            &error,
            AdminError::Broker {
                call: "create_partitions",
                error: BrokerError {
                    name: "INVALID_PARTITIONS",
                    ..
                },
                ..
            }
        ),
        "{error:?}"
    );
    admin.delete_topic(&topic).await.expect("delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_records_moves_the_log_start_and_a_share_consumer_skips_them() {
    let Some(f) = share_fixture("admin_delete_records", 1).await else {
        return;
    };
    f.produce(0, 0, 4).await;
    f.produce(0, 4, 6).await;
    assert_eq!(
        f.admin
            .list_offsets(&f.topic, OffsetSpec::Earliest)
            .await
            .expect("earliest"),
        BTreeMap::from([(0, 0)])
    );
    let low = f
        .admin
        .delete_records(&f.topic, &[(0, 6)])
        .await
        .expect("delete records");
    assert_eq!(low, BTreeMap::from([(0, 6)]));
    assert_eq!(
        f.admin
            .list_offsets(&f.topic, OffsetSpec::Earliest)
            .await
            .expect("earliest"),
        BTreeMap::from([(0, 6)])
    );
    assert_eq!(
        f.admin
            .list_offsets(&f.topic, OffsetSpec::Latest)
            .await
            .expect("latest"),
        BTreeMap::from([(0, 10)])
    );
    let error = f
        .admin
        .delete_records(&f.topic, &[(0, 50)])
        .await
        .expect_err("past the end");
    assert!(
        matches!(&error, AdminError::Broker { error: BrokerError { name: "OFFSET_OUT_OF_RANGE", message: Some(m), .. }, .. } if m.contains("partition 0")),
        "{error:?}"
    );
    let error = f
        .admin
        .delete_records(&f.topic, &[(9, 1)])
        .await
        .expect_err("no partition 9");
    assert!(
        matches!(
            &error,
            AdminError::Broker {
                error: BrokerError {
                    name: "UNKNOWN_TOPIC_OR_PARTITION",
                    ..
                },
                ..
            }
        ),
        "{error:?}"
    );

    let mut consumer = f.consumer("after-delete").await;
    let got = ShareFixture::accept(&mut consumer, 4, Duration::from_secs(30)).await;
    assert_eq!(
        got,
        [(0, 6), (0, 7), (0, 8), (0, 9)],
        "the deleted ones skipped"
    );
    let more = ShareFixture::accept(&mut consumer, 1, Duration::from_secs(2)).await;
    assert!(more.is_empty(), "{more:?}");
    consumer
        .close(Duration::from_secs(10))
        .await
        .expect("close");

    // -1: everything written so far.
    let low = f
        .admin
        .delete_records(&f.topic, &[(0, -1)])
        .await
        .expect("delete all");
    assert_eq!(low, BTreeMap::from([(0, 10)]));
    f.clean_up().await;
}

// Share-group answers a real broker does not give, against the fake broker.

#[tokio::test]
async fn a_hostile_share_group_offsets_answer_is_an_error_not_a_panic() {
    let broker = FakeBroker::start().await;
    broker.advertise(ApiKey::DescribeShareGroupOffsets, 0, 1);
    // Throttle time, then a Groups count of u32::MAX - 1 (a 5-byte varint) and nothing more.
    broker.on(ApiKey::DescribeShareGroupOffsets, |_| {
        Reply::Body(bytes::Bytes::from_static(&[
            0, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff, 0x0f,
        ]))
    });
    let admin = KafkaAdmin::connect(&broker.addr()).await.expect("connect");
    let error = admin
        .share_group_offsets("g")
        .await
        .expect_err("undecodable");
    assert!(
        matches!(
            &error,
            AdminError::Connection {
                call: "share_group_offsets",
                ..
            } | AdminError::Protocol {
                call: "share_group_offsets",
                ..
            }
        ),
        "{error:?}"
    );
    let [request] = broker
        .requests_of(ApiKey::DescribeShareGroupOffsets)
        .try_into()
        .expect("one request");
    assert_eq!(request.version(), 1, "v1, for the lag");
    let body: DescribeShareGroupOffsetsRequest = {
        // v1 requests are v0 bytes.
        let mut bytes = request.body.clone();
        kafka_protocol::protocol::Decodable::decode(&mut bytes, 0).expect("decodes")
    };
    assert_eq!(body.groups[0].group_id.as_str(), "g");
    assert_eq!(body.groups[0].topics, None, "every topic");
}

#[tokio::test]
async fn a_loading_coordinator_is_asked_again_and_a_missing_group_is_a_protocol_error() {
    let broker = FakeBroker::start().await;
    broker.advertise(ApiKey::ShareGroupDescribe, 1, 1);
    let described = |code: i16, state: &'static str| {
        ShareGroupDescribeResponse::default().with_groups(vec![
            DescribedGroup::default()
                .with_group_id(GroupId(StrBytes::from_static_str("g")))
                .with_error_code(code)
                .with_group_state(StrBytes::from_static_str(state))
                .with_group_epoch(3)
                .with_assignment_epoch(3),
        ])
    };
    let loading = described(14, "");
    broker.once(ApiKey::ShareGroupDescribe, move |_| {
        Reply::message(&loading, 1)
    });
    let stable = described(0, "Stable");
    broker.once(ApiKey::ShareGroupDescribe, move |_| {
        Reply::message(&stable, 1)
    });
    broker.once(ApiKey::ShareGroupDescribe, |_| {
        Reply::message(&ShareGroupDescribeResponse::default(), 1)
    });
    let admin = KafkaAdmin::connect(&broker.addr()).await.expect("connect");
    let group = admin.describe_share_group("g").await.expect("asked again");
    assert_eq!(group.state, ShareGroupState::Stable);
    assert_eq!((group.group_epoch, group.assignment_epoch), (3, 3));
    assert!(group.members.is_empty());
    assert_eq!(broker.count(ApiKey::ShareGroupDescribe), 2);
    assert_eq!(broker.count(ApiKey::FindCoordinator), 2, "found again");

    let error = admin
        .describe_share_group("g")
        .await
        .expect_err("no entry for the group");
    assert!(
        matches!(
            &error,
            AdminError::Protocol {
                call: "describe_share_group",
                ..
            }
        ),
        "{error:?}"
    );
}
