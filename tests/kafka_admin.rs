//! `KafkaAdmin` against a real broker (skipped without `KAFKA_BOOTSTRAP`).

// `support` is shared with other test targets; its `pub` items are reachable only here.
#[allow(unreachable_pub)]
mod support;

use kafka_share_sink::{ConsumerError, KafkaAdmin};

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
            ConsumerError::Broker {
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
            ConsumerError::Broker {
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
            ConsumerError::Broker {
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
        matches!(&error, ConsumerError::Broker { name: "UNKNOWN_TOPIC_OR_PARTITION", message: Some(m), .. } if m.contains(&missing)),
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
    let ConsumerError::Broker {
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
        (*api, *name, *retriable),
        ("IncrementalAlterConfigs", "INVALID_CONFIG", false)
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
        matches!(&error, ConsumerError::Connection { broker, .. } if *broker == addr),
        "{error:?}"
    );
    assert!(error.is_retriable());
}
