//! `KafkaAdmin` against a real broker (skipped without `KAFKA_BOOTSTRAP`), and its timeouts and
//! settings against the fake broker of `support/fake_broker.rs`.

// `support` is shared with other test targets; its `pub` items are reachable only here.
#[allow(unreachable_pub)]
mod support;

#[path = "support/fake_broker.rs"]
mod fake_broker;

use std::time::Duration;

use fake_broker::{FakeBroker, Reply};
use kafka_protocol::messages::{ApiKey, CreateTopicsRequest};
use kafka_share_sink::{AdminError, ConsumerError, KafkaAdmin};

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
