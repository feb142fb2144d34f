//! Connect-style configuration: `.properties` parsing, resolution of a worker and a connector
//! config, the client override policy, the settings a share consumer refuses, typed values,
//! converters, transforms and predicates, the builder, and redaction of secrets.

mod support;

use std::fmt::Write as _;
use std::time::Duration;
use support::captured;

use kafka_share_sink::config::{
    ClientOverridePolicy, DEFAULT_CONVERTER, PluginSpec, PredicateSpec, TransformSpec,
};
use kafka_share_sink::{
    AckPolicy, AcknowledgementMode, ConfigError, ConnectorConfig, ErrorHandling, ErrorTolerance,
    Properties, PutRetriablePolicy, SecurityProtocol, TaskConfig,
};

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

fn props(pairs: &[(&str, &str)]) -> Properties {
    pairs.iter().copied().collect()
}

/// A valid connector config plus `extra`.
fn connector(extra: &[(&str, &str)]) -> Properties {
    let mut p = props(&[("name", "orders-sink"), ("topics", "orders")]);
    p.extend(extra.iter().copied());
    p
}

fn resolve(worker: &[(&str, &str)], extra: &[(&str, &str)]) -> ConnectorConfig {
    ConnectorConfig::resolve(&props(worker), &connector(extra))
        .unwrap_or_else(|e| panic!("expected a valid config: {e}"))
}

fn error(worker: &[(&str, &str)], extra: &[(&str, &str)]) -> ConfigError {
    match ConnectorConfig::resolve(&props(worker), &connector(extra)) {
        Ok(config) => panic!("expected an error, got {config:?}"),
        Err(e) => e,
    }
}

/// Asserts that the error is about `key` and that its message names it.
#[track_caller]
fn assert_names_key(err: &ConfigError, key: &str) {
    assert_eq!(err.key(), Some(key), "{err}");
    assert!(err.to_string().contains(key), "`{key}` not in: {err}");
}

/// Every text a value could leak through.
fn all_text(err: &ConfigError) -> String {
    let mut text = format!("{err} {err:?}");
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        write!(text, " {s} {s:?}").unwrap();
        source = s.source();
    }
    text
}

// ---------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------

#[test]
fn properties_parse_a_worker_file() {
    let text = "\
# Kafka Connect worker
! another comment style
bootstrap.servers = k1:9092,\\
                    k2:9092
key.converter: org.apache.kafka.connect.storage.StringConverter
value.converter org.apache.kafka.connect.json.JsonConverter
  consumer.max.poll.records=200
path=C:\\\\plugins\\\\share
greeting=caf\\u00e9\\tbar\\n
weird\\ key\\:\\=name=x
empty=
only.key
";
    let p = Properties::parse(text).unwrap();
    let got: Vec<(&str, &str)> = p.iter().collect();
    assert_eq!(
        got,
        [
            ("bootstrap.servers", "k1:9092,k2:9092"),
            (
                "key.converter",
                "org.apache.kafka.connect.storage.StringConverter"
            ),
            (
                "value.converter",
                "org.apache.kafka.connect.json.JsonConverter"
            ),
            ("consumer.max.poll.records", "200"),
            ("path", "C:\\plugins\\share"),
            ("greeting", "café\tbar\n"),
            ("weird key:=name", "x"),
            ("empty", ""),
            ("only.key", ""),
        ]
    );
    assert_eq!(text.parse::<Properties>().unwrap(), p);
}

#[test]
fn properties_handle_crlf_and_trailing_backslash_edge_cases() {
    let p = Properties::parse("a=1\r\nb=two\\\r\n   parts\r\nc=\\\\\r\nd=end\\").unwrap();
    assert_eq!(p.get("a"), Some("1"));
    assert_eq!(p.get("b"), Some("twoparts"));
    assert_eq!(p.get("c"), Some("\\"));
    assert_eq!(p.get("d"), Some("end"));
    assert_eq!(p.len(), 4);
}

#[test]
fn properties_syntax_errors_give_the_line_but_not_the_value() {
    let err = Properties::parse("a=1\n\n# c\nsasl.jaas.config=Login password=\"hunter2\\u00\"")
        .unwrap_err();
    assert!(
        matches!(err, ConfigError::Syntax { line: 4, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("sasl.jaas.config"), "{err}");
    assert!(!all_text(&err).contains("hunter2"));
}

#[test]
fn properties_from_file_reads_and_names_a_missing_path() {
    let dir = std::env::temp_dir();
    let path = dir.join(format!(
        "kafka-share-sink-config-{}.properties",
        std::process::id()
    ));
    std::fs::write(&path, "name=from-file\ntopics=a\n").unwrap();
    let p = Properties::from_file(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(p.get("name"), Some("from-file"));

    let err = Properties::from_file(&path).unwrap_err();
    assert!(matches!(err, ConfigError::Io { .. }));
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert!(std::error::Error::source(&err).is_some());
}

#[test]
fn properties_insert_get_iter_and_from_iterator() {
    let mut p: Properties = [("b", "1"), ("a", "2")].into_iter().collect();
    assert_eq!(p.insert("b", "3"), Some("1".to_owned()));
    assert_eq!(p.insert("c", "4"), None);
    assert_eq!(
        p.iter().collect::<Vec<_>>(),
        [("b", "3"), ("a", "2"), ("c", "4")]
    );
    assert!(p.contains_key("a"));
    assert_eq!(p.get("z"), None);
    assert_eq!((&p).into_iter().count(), 3);
    assert!(!p.is_empty());
}

// ---------------------------------------------------------------------------------------
// name and topics
// ---------------------------------------------------------------------------------------

#[test]
fn name_is_required_non_empty_and_free_of_control_characters() {
    let err = ConnectorConfig::from_properties(&props(&[("topics", "t")])).unwrap_err();
    assert_names_key(&err, "name");
    assert!(matches!(err, ConfigError::Missing { .. }));
    let err = error(&[], &[("name", "   ")]);
    assert_names_key(&err, "name");
    let err = error(&[], &[("name", "bad\u{7}name")]);
    assert_names_key(&err, "name");
    assert!(err.to_string().contains("control"), "{err}");
    assert_eq!(resolve(&[], &[("name", " spaced ")]).name(), "spaced");
}

#[test]
fn topics_are_required_deduplicated_and_without_empty_entries() {
    let err = ConnectorConfig::from_properties(&props(&[("name", "n")])).unwrap_err();
    assert_names_key(&err, "topics");
    let err = error(&[], &[("topics", " , ,")]);
    assert_names_key(&err, "topics");
    let config = resolve(&[], &[("topics", "b, a,,b , c,a")]);
    assert_eq!(config.topics(), ["b", "a", "c"]);
}

#[test]
fn topics_regex_is_refused_with_advice() {
    let err = error(&[], &[("topics.regex", "orders-.*")]);
    assert_names_key(&err, "topics.regex");
    assert!(err.to_string().contains("fixed topic list"), "{err}");
    assert!(err.to_string().contains("`topics`"), "{err}");
    // Blank is unset, as in Connect.
    resolve(&[], &[("topics.regex", " ")]);
}

#[test]
fn dead_letter_queue_topic_may_not_be_a_source_topic() {
    let err = error(
        &[],
        &[
            ("topics", "orders,payments"),
            ("errors.deadletterqueue.topic.name", " payments "),
        ],
    );
    assert!(
        err.to_string().starts_with(
            "The DLQ topic 'payments' may not be included in the list of topics ('topics=[orders, payments]') consumed by the connector"
        ),
        "{err}"
    );
    assert_eq!(err.key(), Some("topics"));
}

// ---------------------------------------------------------------------------------------
// group.protocol and the settings a share consumer refuses
// ---------------------------------------------------------------------------------------

#[test]
fn group_protocol_share_is_accepted_and_not_passed_on() {
    let config = resolve(
        &[("consumer.group.protocol", "SHARE")],
        &[("consumer.override.group.protocol", " share ")],
    );
    assert!(config.consumer_properties().get("group.protocol").is_none());
    assert!(
        config.unknown_keys().is_empty(),
        "{:?}",
        config.unknown_keys()
    );
}

#[test]
fn group_protocol_other_than_share_is_refused_naming_the_key() {
    let err = error(&[("consumer.group.protocol", "classic")], &[]);
    assert_names_key(&err, "consumer.group.protocol");
    assert!(
        err.to_string().contains("only drives share groups"),
        "{err}"
    );
    assert!(err.to_string().contains("classic"), "{err}");
    let err = error(&[], &[("consumer.override.group.protocol", "consumer")]);
    assert_names_key(&err, "consumer.override.group.protocol");
    assert!(matches!(err, ConfigError::NotShareGroup { .. }));
}

#[test]
fn every_share_unsupported_setting_is_refused_from_worker_and_connector() {
    let cases = [
        ("auto.offset.reset", "earliest", "share.auto.offset.reset"),
        ("enable.auto.commit", "false", "committed by the driver"),
        ("auto.commit.interval.ms", "1000", "committed by the driver"),
        ("group.instance.id", "i-1", "static membership"),
        ("isolation.level", "read_committed", "share.isolation.level"),
        ("partition.assignment.strategy", "range", "broker assigns"),
        ("interceptor.classes", "x.Y", "transform"),
        (
            "session.timeout.ms",
            "45000",
            "group.share.session.timeout.ms",
        ),
        (
            "heartbeat.interval.ms",
            "3000",
            "group.share.heartbeat.interval.ms",
        ),
        ("group.remote.assignor", "uniform", "broker assigns"),
    ];
    for (setting, value, advice) in cases {
        let worker_key = format!("consumer.{setting}");
        let err = error(&[(worker_key.as_str(), value)], &[]);
        assert_names_key(&err, &worker_key);
        assert!(err.to_string().contains(advice), "{err}");
        assert!(matches!(err, ConfigError::UnsupportedByShareGroup { .. }));

        let override_key = format!("consumer.override.{setting}");
        let err = error(&[], &[(override_key.as_str(), value)]);
        assert_names_key(&err, &override_key);
        assert!(err.to_string().contains(advice), "{err}");
    }
    let err = error(&[], &[("consumer.override.auto.offset.reset", "earliest")]);
    assert!(
        err.to_string()
            .contains("KafkaAdmin::set_share_group_config"),
        "{err}"
    );
}

#[test]
fn unsupported_settings_outside_the_consumer_are_not_refused() {
    // The dead-letter queue producer is a producer: consumer-only names are not its problem.
    let config = resolve(
        &[("producer.enable.auto.commit", "false")],
        &[
            ("producer.override.isolation.level", "read_committed"),
            ("errors.deadletterqueue.topic.name", "dlq"),
        ],
    );
    let producer = config.dead_letter_queue().unwrap().producer_properties();
    assert_eq!(producer.get("isolation.level"), Some("read_committed"));
    assert_eq!(producer.get("enable.auto.commit"), Some("false"));
}

// ---------------------------------------------------------------------------------------
// TLS and SASL: Java's keys, read for the consumer and the dead-letter queue producer
// ---------------------------------------------------------------------------------------

const PLAIN_JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
                          username=\"alice\" password=\"alice-secret\";";

#[test]
fn security_settings_reach_the_consumer_and_the_dead_letter_queue() {
    let config = resolve(
        &[
            ("bootstrap.servers", "k:9093"),
            ("consumer.security.protocol", "SSL"),
            ("consumer.ssl.truststore.location", "/etc/kafka/ca.pem"),
            ("producer.security.protocol", "SASL_SSL"),
            ("producer.sasl.mechanism", "PLAIN"),
            ("producer.sasl.jaas.config", PLAIN_JAAS),
        ],
        &[
            (
                "consumer.override.ssl.keystore.location",
                "/etc/kafka/client.pem",
            ),
            ("errors.deadletterqueue.topic.name", "dlq"),
        ],
    );
    assert!(
        config.unknown_keys().is_empty(),
        "{:?}",
        config.unknown_keys()
    );
    let consumer = config.kafka_consumer_config().unwrap();
    let debug = format!("{consumer:?}");
    assert!(
        debug.contains("Ssl") && debug.contains("client.pem"),
        "{debug}"
    );
    let dlq = config.dead_letter_queue().unwrap();
    assert_eq!(dlq.security().protocol(), SecurityProtocol::SaslSsl);
    assert_eq!(dlq.security().sasl().unwrap().mechanism(), "PLAIN");
    // Secrets stay out of Debug, wherever the settings went.
    for shown in [
        format!("{config:?}"),
        format!("{consumer:?}"),
        format!("{:?}", config.dead_letter_queue_config().unwrap()),
    ] {
        assert!(!shown.contains("alice-secret"), "{shown}");
    }
}

#[test]
fn inconsistent_security_settings_name_the_key_as_written() {
    let err = error(&[], &[("consumer.override.security.protocol", "SASL_SSL")]);
    assert_names_key(&err, "consumer.override.sasl.mechanism");
    assert!(err.to_string().contains("GSSAPI"), "{err}");
    let err = error(&[("consumer.security.protocol", "TLS")], &[]);
    assert_names_key(&err, "consumer.security.protocol");
    let dlq = ("errors.deadletterqueue.topic.name", "orders-dlq");
    let err = error(
        &[
            ("producer.security.protocol", "SSL"),
            ("producer.ssl.truststore.type", "JKS"),
        ],
        &[dlq],
    );
    assert_names_key(&err, "producer.ssl.truststore.type");
    assert!(err.to_string().contains("keytool"), "{err}");
    let err = error(
        &[],
        &[
            dlq,
            ("producer.override.security.protocol", "SASL_PLAINTEXT"),
            ("producer.override.sasl.mechanism", "GSSAPI"),
            ("producer.override.sasl.jaas.config", PLAIN_JAAS),
        ],
    );
    assert_names_key(&err, "producer.override.sasl.mechanism");
    assert!(!format!("{err} {err:?}").contains("alice-secret"));
}

#[test]
fn the_workers_own_tls_settings_do_not_reach_the_clients() {
    // Top-level ssl.* may be Connect's REST server's; the clients take prefixed settings.
    let config = resolve(
        &[
            ("security.protocol", "PLAINTEXT"),
            ("ssl.keystore.location", "/etc/connect/rest.pem"),
            ("ssl.keystore.type", "JKS"),
        ],
        &[],
    );
    assert!(
        config.unknown_keys().is_empty(),
        "{:?}",
        config.unknown_keys()
    );
}

#[test]
fn security_protocol_plaintext_is_accepted_in_any_case_everywhere() {
    let config = resolve(
        &[
            ("bootstrap.servers", "k:9092"),
            ("security.protocol", "PLAINTEXT"),
            ("consumer.security.protocol", "plaintext"),
            ("producer.security.protocol", "PlainText"),
            ("admin.security.protocol", "PLAINTEXT"),
        ],
        &[
            ("consumer.override.security.protocol", " PLAINTEXT "),
            ("producer.override.security.protocol", "plaintext"),
            ("admin.override.security.protocol", "Plaintext"),
            ("errors.deadletterqueue.topic.name", "dlq"),
        ],
    );
    assert!(
        config.unknown_keys().is_empty(),
        "{:?}",
        config.unknown_keys()
    );
    assert_eq!(
        config.consumer_properties().get("security.protocol"),
        Some(" PLAINTEXT ")
    );
    config
        .kafka_consumer_config()
        .expect("a plaintext consumer");
    config
        .dead_letter_queue_config()
        .expect("a plaintext producer");
}

#[test]
fn refused_security_secrets_are_never_shown() {
    let jaas = format!("org.example.Login required password=\"{SECRET}\";");
    for (key, value) in [
        ("consumer.override.sasl.jaas.config", jaas.as_str()),
        ("producer.override.sasl.jaas.config", "unterminated \"x"),
    ] {
        let client = key.split('.').next().unwrap();
        let err = error(
            &[],
            &[
                ("errors.deadletterqueue.topic.name", "dlq"),
                (&format!("{client}.override.security.protocol"), "SASL_SSL"),
                (&format!("{client}.override.sasl.mechanism"), "PLAIN"),
                (key, value),
            ],
        );
        assert_names_key(&err, key);
        assert!(!all_text(&err).contains(SECRET), "{err:?}");
    }
    let err = error(
        &[],
        &[
            ("consumer.override.security.protocol", "SSL"),
            ("consumer.override.ssl.keystore.location", "/k.pem"),
            ("consumer.override.ssl.keystore.key", SECRET),
        ],
    );
    assert!(!all_text(&err).contains(SECRET), "{err:?}");
    assert!(err.to_string().contains("[redacted]"), "{err}");
}

#[test]
fn the_builder_checks_security_overrides_too() {
    let err = ConnectorConfig::builder("orders-sink")
        .topics(["orders"])
        .consumer_override("security.protocol", "SASL_SSL")
        .build()
        .unwrap_err();
    assert_names_key(&err, "consumer.override.sasl.mechanism");
}

// ---------------------------------------------------------------------------------------
// Resolution order
// ---------------------------------------------------------------------------------------

#[test]
fn consumer_settings_worker_then_connector_override() {
    let worker = [
        ("bootstrap.servers", "w:9092"),
        ("consumer.max.poll.records", "200"),
        ("consumer.fetch.min.bytes", "10"),
    ];
    let config = resolve(&worker, &[("consumer.override.max.poll.records", "50")]);
    let c = config.consumer_properties();
    assert_eq!(c.get("max.poll.records"), Some("50"));
    assert_eq!(c.get("fetch.min.bytes"), Some("10"));
    assert_eq!(c.get("bootstrap.servers"), Some("w:9092"));
    assert_eq!(c.get("group.id"), Some("connect-orders-sink"));
    assert_eq!(c.get("client.id"), Some("connector-consumer-orders-sink-0"));
    assert_eq!(c.get("share.acknowledgement.mode"), Some("explicit"));
    // Connect's consumer defaults that a share consumer refuses are not added.
    assert!(c.get("enable.auto.commit").is_none());
    assert!(c.get("auto.offset.reset").is_none());
}

#[test]
fn bootstrap_servers_top_level_then_consumer_then_override() {
    let top = [("bootstrap.servers", "top:9092")];
    assert_eq!(
        resolve(&top, &[])
            .consumer_properties()
            .get("bootstrap.servers"),
        Some("top:9092")
    );
    let worker = [
        ("bootstrap.servers", "top:9092"),
        ("consumer.bootstrap.servers", "consumer:9092"),
    ];
    assert_eq!(
        resolve(&worker, &[])
            .consumer_properties()
            .get("bootstrap.servers"),
        Some("consumer:9092")
    );
    let config = resolve(
        &worker,
        &[("consumer.override.bootstrap.servers", "override:9092")],
    );
    assert_eq!(
        config.consumer_properties().get("bootstrap.servers"),
        Some("override:9092")
    );
    assert!(config.kafka_consumer_config().is_ok());
}

#[test]
fn kafka_consumer_config_needs_bootstrap_servers() {
    let err = resolve(&[], &[]).kafka_consumer_config().unwrap_err();
    assert_names_key(&err, "bootstrap.servers");
    let config = resolve(
        &[("bootstrap.servers", "k:9092")],
        &[("share.group.id", "g")],
    );
    assert_eq!(config.kafka_consumer_config().unwrap().group_id(), "g");
}

#[test]
fn share_group_id_connector_key_then_override_then_worker_then_default() {
    assert_eq!(resolve(&[], &[]).share_group_id(), "connect-orders-sink");
    let worker = [("consumer.group.id", "worker-group")];
    assert_eq!(resolve(&worker, &[]).share_group_id(), "worker-group");
    let config = resolve(&worker, &[("consumer.override.group.id", "override-group")]);
    assert_eq!(config.share_group_id(), "override-group");
    let config = resolve(&worker, &[("share.group.id", " own-group ")]);
    assert_eq!(config.share_group_id(), "own-group");
    assert_eq!(
        config.consumer_properties().get("group.id"),
        Some("own-group")
    );
    // The same value twice is fine; two different ones are not.
    resolve(
        &[],
        &[("share.group.id", "g"), ("consumer.override.group.id", "g")],
    );
    let err = error(
        &[],
        &[
            ("share.group.id", "g1"),
            ("consumer.override.group.id", "g2"),
        ],
    );
    assert_names_key(&err, "share.group.id");
    assert!(
        err.to_string().contains("consumer.override.group.id"),
        "{err}"
    );
    let err = error(&[], &[("share.group.id", " ")]);
    assert_names_key(&err, "share.group.id");
}

#[test]
fn acknowledgement_mode_defaults_to_explicit() {
    assert_eq!(
        resolve(&[], &[]).acknowledgement_mode(),
        AcknowledgementMode::Explicit
    );
    let config = resolve(&[], &[("share.acknowledgement.mode", "IMPLICIT")]);
    assert_eq!(config.acknowledgement_mode(), AcknowledgementMode::Implicit);
    assert_eq!(
        config
            .consumer_properties()
            .get("share.acknowledgement.mode"),
        Some("implicit")
    );
    let err = error(&[], &[("share.acknowledgement.mode", "auto")]);
    assert_names_key(&err, "share.acknowledgement.mode");
    assert!(err.to_string().contains("auto"), "{err}");
    // The same mode in another case is no conflict; another mode is.
    resolve(
        &[],
        &[
            ("share.acknowledgement.mode", "implicit"),
            ("consumer.override.share.acknowledgement.mode", "IMPLICIT"),
        ],
    );
    let err = error(
        &[],
        &[
            ("share.acknowledgement.mode", "implicit"),
            ("consumer.override.share.acknowledgement.mode", "explicit"),
        ],
    );
    assert!(matches!(err, ConfigError::Conflict { .. }), "{err}");
    let err = error(&[("consumer.share.acknowledgement.mode", "auto")], &[]);
    assert_names_key(&err, "consumer.share.acknowledgement.mode");
}

#[test]
fn client_id_default_names_connector_and_task() {
    let config = resolve(&[], &[("task.id", "3")]);
    assert_eq!(config.task_id(), 3);
    assert_eq!(
        config.consumer_properties().get("client.id"),
        Some("connector-consumer-orders-sink-3")
    );
    let config = resolve(&[], &[("consumer.override.client.id", "mine")]);
    assert_eq!(config.consumer_properties().get("client.id"), Some("mine"));
}

#[test]
fn dead_letter_queue_producer_and_admin_resolved_like_connect() {
    let worker = [
        ("bootstrap.servers", "w:9092"),
        ("security.protocol", "PLAINTEXT"),
        ("group.id", "connect-cluster"),
        ("producer.linger.ms", "5"),
        ("producer.acks", "1"),
        ("admin.request.timeout.ms", "1000"),
        ("consumer.max.poll.records", "7"),
    ];
    let config = resolve(
        &worker,
        &[
            ("errors.deadletterqueue.topic.name", "dlq"),
            ("errors.deadletterqueue.topic.replication.factor", "-1"),
            ("errors.deadletterqueue.context.headers.enable", "TRUE"),
            ("producer.override.linger.ms", "20"),
            ("admin.override.request.timeout.ms", "2000"),
            ("task.id", "2"),
        ],
    );
    let dlq = config.dead_letter_queue().unwrap();
    assert_eq!(dlq.topic(), "dlq");
    assert_eq!(dlq.replication_factor(), -1);
    assert!(dlq.context_headers());
    assert_eq!(dlq.bootstrap_servers(), Some("w:9092"));

    let p = dlq.producer_properties();
    assert_eq!(p.get("linger.ms"), Some("20"));
    assert_eq!(p.get("acks"), Some("1"));
    assert_eq!(
        p.get("client.id"),
        Some("connector-dlq-producer-orders-sink-2")
    );
    assert_eq!(p.get("max.in.flight.requests.per.connection"), Some("1"));
    assert_eq!(p.get("enable.idempotence"), Some("false"));
    assert!(p.get("security.protocol").is_none());
    assert!(p.get("max.poll.records").is_none());

    let a = dlq.admin_properties();
    assert_eq!(a.get("request.timeout.ms"), Some("2000"));
    assert_eq!(a.get("security.protocol"), Some("PLAINTEXT"));
    assert_eq!(a.get("bootstrap.servers"), Some("w:9092"));
    assert_eq!(a.get("client.id"), Some("connector-dlq-adminclient-"));
    assert!(a.get("linger.ms").is_none());
    assert!(a.get("max.poll.records").is_none());
    assert!(a.get("producer.linger.ms").is_none());
}

#[test]
fn dead_letter_queue_defaults_and_blank_topic_is_off() {
    let config = resolve(&[], &[("errors.deadletterqueue.topic.name", "d")]);
    let dlq = config.dead_letter_queue().unwrap();
    assert_eq!(dlq.replication_factor(), 3);
    assert!(!dlq.context_headers());
    assert!(
        resolve(&[], &[("errors.deadletterqueue.topic.name", "  ")])
            .dead_letter_queue()
            .is_none()
    );
}

#[test]
fn offset_flush_settings_connector_over_worker_with_connect_timeout_default() {
    let config = resolve(&[], &[]);
    assert_eq!(config.commit_interval(), None);
    assert_eq!(config.commit_timeout(), Duration::from_millis(5000));
    let worker = [
        ("offset.flush.interval.ms", "60000"),
        ("offset.flush.timeout.ms", "7000"),
    ];
    let config = resolve(&worker, &[]);
    assert_eq!(config.commit_interval(), Some(Duration::from_secs(60)));
    assert_eq!(config.commit_timeout(), Duration::from_secs(7));
    let config = resolve(&worker, &[("offset.flush.interval.ms", "100")]);
    assert_eq!(config.commit_interval(), Some(Duration::from_millis(100)));
}

// ---------------------------------------------------------------------------------------
// Override policy
// ---------------------------------------------------------------------------------------

const POLICY: &str = "connector.client.config.override.policy";
const ALLOWLIST: &str = "connector.client.config.override.allowlist";

#[test]
fn policy_all_is_the_default() {
    let config = resolve(
        &[],
        &[
            ("consumer.override.max.poll.records", "5"),
            ("producer.override.acks", "1"),
            ("admin.override.retries", "1"),
        ],
    );
    assert_eq!(config.override_policy(), &ClientOverridePolicy::All);
}

#[test]
fn policy_none_refuses_every_client_override_with_connects_wording() {
    for key in [
        "consumer.override.max.poll.records",
        "producer.override.acks",
        "admin.override.retries",
    ] {
        let err = error(&[(POLICY, "None")], &[(key, "1")]);
        assert_names_key(&err, key);
        let name = key.split_once(".override.").unwrap().1;
        let wording = format!(
            "The 'None' policy does not allow '{name}' to be overridden in the connector configuration."
        );
        assert!(err.to_string().contains(&wording), "{err}");
        assert!(matches!(err, ConfigError::OverrideNotAllowed { .. }));
    }
    // Without overrides, None is fine.
    resolve(&[(POLICY, "None")], &[]);
}

#[test]
fn policy_principal_allows_only_the_principal_settings() {
    let worker = [(POLICY, "Principal")];
    let config = resolve(
        &worker,
        &[
            ("consumer.override.security.protocol", "PLAINTEXT"),
            ("producer.override.security.protocol", "plaintext"),
        ],
    );
    assert_eq!(config.override_policy().name(), "Principal");
    let err = error(&worker, &[("consumer.override.client.rack", "r1")]);
    assert_names_key(&err, "consumer.override.client.rack");
    assert!(err.to_string().contains("'Principal' policy"), "{err}");
    // The policy allows the SASL settings, which the client uses.
    resolve(
        &worker,
        &[
            ("consumer.override.security.protocol", "SASL_PLAINTEXT"),
            ("consumer.override.sasl.mechanism", "PLAIN"),
            ("consumer.override.sasl.jaas.config", PLAIN_JAAS),
        ],
    );
}

#[test]
fn policy_allowlist_allows_only_the_listed_settings() {
    let worker = [
        (POLICY, "Allowlist"),
        (ALLOWLIST, "max.poll.records, linger.ms"),
    ];
    let config = resolve(
        &worker,
        &[
            ("consumer.override.max.poll.records", "5"),
            ("producer.override.linger.ms", "5"),
        ],
    );
    assert_eq!(
        config.override_policy(),
        &ClientOverridePolicy::Allowlist(vec!["max.poll.records".into(), "linger.ms".into()])
    );
    let err = error(&worker, &[("admin.override.max.poll.records.x", "5")]);
    assert_names_key(&err, "admin.override.max.poll.records.x");
    assert!(err.to_string().contains("'Allowlist' policy"), "{err}");
    // The allowlist is empty by default: nothing may be overridden.
    let err = error(
        &[(POLICY, "Allowlist")],
        &[("consumer.override.client.rack", "r")],
    );
    assert_names_key(&err, "consumer.override.client.rack");
}

#[test]
fn policy_accepts_connect_class_names_and_refuses_unknown_ones() {
    for (class, name) in [
        (
            "org.apache.kafka.connect.connector.policy.AllConnectorClientConfigOverridePolicy",
            "All",
        ),
        (
            "org.apache.kafka.connect.connector.policy.NoneConnectorClientConfigOverridePolicy",
            "None",
        ),
        (
            "org.apache.kafka.connect.connector.policy.PrincipalConnectorClientConfigOverridePolicy",
            "Principal",
        ),
        (
            "org.apache.kafka.connect.connector.policy.AllowlistConnectorClientConfigOverridePolicy",
            "Allowlist",
        ),
        ("AllowlistConnectorClientConfigOverridePolicy", "Allowlist"),
    ] {
        assert_eq!(
            resolve(&[(POLICY, class)], &[]).override_policy().name(),
            name
        );
    }
    let err = error(&[(POLICY, "Everything")], &[]);
    assert_names_key(&err, POLICY);
    assert!(err.to_string().contains("Everything"), "{err}");
}

#[test]
fn share_refusals_come_before_the_policy() {
    // Whatever the policy, the advice about the share group is what helps.
    let err = error(
        &[(POLICY, "None")],
        &[("consumer.override.auto.offset.reset", "earliest")],
    );
    assert!(matches!(err, ConfigError::UnsupportedByShareGroup { .. }));
}

// ---------------------------------------------------------------------------------------
// Typed values
// ---------------------------------------------------------------------------------------

#[test]
fn defaults() {
    let config = resolve(&[], &[]);
    assert_eq!(config.tasks_max(), 1);
    assert_eq!(config.task_id(), 0);
    assert_eq!(config.ack_policy(), AckPolicy::AfterPut);
    assert_eq!(config.put_retriable_policy(), PutRetriablePolicy::Release);
    assert_eq!(config.max_delivery_attempts(), None);
    assert!(!config.require_broker_dead_letter_queue());
    assert_eq!(config.error_handling(), ErrorHandling::new());
    assert!(config.dead_letter_queue().is_none());
    assert!(config.transforms().is_empty());
    assert!(config.predicates().is_empty());
}

#[test]
fn typed_values_are_read() {
    let config = resolve(
        &[],
        &[
            ("tasks.max", "4"),
            ("task.id", "2"),
            ("ack.policy", "after.flush"),
            ("put.retriable.policy", "retry.in.place"),
            ("max.delivery.attempts", "4"),
            ("share.dead.letter.queue.required", "True"),
            ("errors.tolerance", "all"),
            ("errors.retry.timeout", "-1"),
            ("errors.retry.delay.max.ms", "1000"),
            ("errors.log.enable", "true"),
            ("errors.log.include.messages", "True"),
        ],
    );
    assert_eq!(config.tasks_max(), 4);
    assert_eq!(config.task_id(), 2);
    assert_eq!(config.ack_policy(), AckPolicy::AfterFlush);
    assert_eq!(
        config.put_retriable_policy(),
        PutRetriablePolicy::RetryInPlace
    );
    assert_eq!(config.max_delivery_attempts(), Some(4));
    assert!(config.require_broker_dead_letter_queue());
    assert!(
        config.unknown_keys().is_empty(),
        "a key of this crate: {:?}",
        config.unknown_keys()
    );
    let errors = config.error_handling();
    assert_eq!(errors.tolerance_value(), ErrorTolerance::All);
    assert_eq!(errors.retry_timeout_value(), None);
    assert_eq!(errors.retry_delay_max_value(), Duration::from_secs(1));
    assert_eq!(errors.log_value(), (true, true));
    let config = resolve(&[], &[("errors.retry.timeout", "30000")]);
    assert_eq!(
        config.error_handling().retry_timeout_value(),
        Some(Duration::from_secs(30))
    );
}

#[test]
fn malformed_values_name_the_key_the_value_and_the_form() {
    let cases: &[(&str, &str, &str)] = &[
        ("errors.tolerance", "some", "`none` or `all`"),
        ("errors.retry.timeout", "-2", "-1 to retry forever"),
        ("errors.retry.timeout", "soon", "-1 to retry forever"),
        ("errors.retry.delay.max.ms", "-1", "milliseconds"),
        ("errors.log.enable", "yes", "`true` or `false`"),
        ("errors.log.include.messages", "1", "`true` or `false`"),
        ("errors.deadletterqueue.topic.replication.factor", "0", "-1"),
        (
            "errors.deadletterqueue.topic.replication.factor",
            "40000",
            "32767",
        ),
        (
            "errors.deadletterqueue.context.headers.enable",
            "on",
            "`true` or `false`",
        ),
        ("ack.policy", "after.commit", "after.flush"),
        ("put.retriable.policy", "retry", "retry.in.place"),
        ("max.delivery.attempts", "0", "from 1 to 10"),
        ("max.delivery.attempts", "11", "from 1 to 10"),
        ("ack.flush.max.records", "-1", "from 0"),
        ("ack.flush.max.records", "3000000000", "2147483647"),
        ("ack.flush.max.bytes", "many", "whole number"),
        (
            "share.dead.letter.queue.required",
            "yes",
            "`true` or `false`",
        ),
        ("offset.flush.interval.ms", "-5", "milliseconds"),
        ("offset.flush.timeout.ms", "0", "at least 1"),
        ("tasks.max", "0", "from 1"),
        ("task.id", "-1", "from 0"),
        ("consumer.override.max.poll.records", "0", "from 1"),
        ("consumer.override.fetch.max.bytes", "lots", "whole number"),
        ("transforms", "a,,b", "without empty entries"),
    ];
    for &(key, value, form) in cases {
        let err = error(&[], &[(key, value)]);
        assert_names_key(&err, key);
        let text = err.to_string();
        assert!(text.contains(&format!("`{value}`")), "{text}");
        assert!(text.contains(form), "{key}: {text}");
    }
}

#[test]
fn policy_parse_errors_keep_their_source() {
    let err = error(&[], &[("ack.policy", "never")]);
    let source = std::error::Error::source(&err).expect("the ParsePolicyError");
    assert!(source.to_string().contains("ack.policy"), "{source}");
}

#[test]
fn every_ms_key_must_be_a_number_wherever_it_is() {
    for (worker, connector, key) in [
        (
            vec![("consumer.fetch.max.wait.ms", "5s")],
            vec![],
            "consumer.fetch.max.wait.ms",
        ),
        (
            vec![],
            vec![("consumer.override.request.timeout.ms", "30 s")],
            "consumer.override.request.timeout.ms",
        ),
        (
            vec![],
            vec![("producer.override.linger.ms", "short")],
            "producer.override.linger.ms",
        ),
        (
            vec![("offset.flush.interval.ms", "1m")],
            vec![],
            "offset.flush.interval.ms",
        ),
        (vec![], vec![("batch.linger.ms", "fast")], "batch.linger.ms"),
    ] {
        let err = error(&worker, &connector);
        assert_names_key(&err, key);
        assert!(err.to_string().contains("milliseconds"), "{err}");
    }
}

#[test]
fn ms_values_beyond_the_kafka_type_of_their_key_are_refused_naming_the_key() {
    // Kafka types these `INT`: a value over 2147483647 is refused, as Kafka refuses it.
    for (worker, connector, key) in [
        (
            vec![("consumer.fetch.max.wait.ms", "2147483648")],
            vec![],
            "consumer.fetch.max.wait.ms",
        ),
        (
            vec![],
            vec![(
                "consumer.override.request.timeout.ms",
                "9223372036854775807",
            )],
            "consumer.override.request.timeout.ms",
        ),
    ] {
        let err = error(&worker, &connector);
        assert_names_key(&err, key);
        assert!(err.to_string().contains("from 0 to 2147483647"), "{err}");
    }
    let worker = [("bootstrap.servers", "k:9092")];
    let config = resolve(
        &worker,
        &[("consumer.override.request.timeout.ms", "2147483647")],
    );
    config
        .kafka_consumer_config()
        .expect("the largest INT is accepted");
    // The dead-letter producer's `delivery.timeout.ms`, also an `INT`.
    let dlq = [("errors.deadletterqueue.topic.name", "dlq")];
    let too_long = [
        dlq[0],
        ("producer.override.delivery.timeout.ms", "2147483648"),
    ];
    let err = resolve(&worker, &too_long)
        .dead_letter_queue_config()
        .unwrap_err();
    assert_names_key(&err, "delivery.timeout.ms");
    let longest = [
        dlq[0],
        ("producer.override.delivery.timeout.ms", "2147483647"),
    ];
    assert!(
        resolve(&worker, &longest)
            .dead_letter_queue_config()
            .is_ok()
    );
    // Beyond any number Kafka reads: refused by name too.
    let err = error(&[], &[("offset.flush.interval.ms", "9223372036854775808")]);
    assert_names_key(&err, "offset.flush.interval.ms");
}

#[test]
fn ms_values_at_the_largest_long_are_accepted_and_mean_forever() {
    // Kafka types these `LONG` (Connect itself writes `max.block.ms=9223372036854775807`):
    // the largest is accepted, and every deadline built from it saturates.
    const LONGEST: &str = "9223372036854775807";
    let longest = Duration::from_millis(i64::MAX.unsigned_abs());
    let config = resolve(
        &[
            ("bootstrap.servers", "k:9092"),
            ("consumer.socket.connection.setup.timeout.ms", LONGEST),
        ],
        &[
            ("offset.flush.interval.ms", LONGEST),
            ("offset.flush.timeout.ms", LONGEST),
            ("errors.retry.timeout", LONGEST),
            ("errors.retry.delay.max.ms", LONGEST),
        ],
    );
    assert_eq!(config.commit_interval(), Some(longest));
    assert_eq!(config.commit_timeout(), longest);
    let errors = config.error_handling();
    assert_eq!(errors.retry_timeout_value(), Some(longest));
    assert_eq!(errors.retry_delay_max_value(), longest);
    config.kafka_consumer_config().expect("a consumer config");

    // The builder writes a duration too long for a `LONG` as the largest one.
    let built = ConnectorConfig::builder("orders-sink")
        .topics(["orders"])
        .commit_interval(Duration::MAX)
        .commit_timeout(Duration::MAX)
        .errors_retry_timeout(Some(Duration::MAX))
        .errors_retry_delay_max(Duration::MAX)
        .build()
        .expect("Duration::MAX is a valid setting");
    assert_eq!(built.commit_interval(), Some(longest));
    assert_eq!(built.error_handling().retry_timeout_value(), Some(longest));
}

// ---------------------------------------------------------------------------------------
// Converters
// ---------------------------------------------------------------------------------------

#[test]
fn converters_default_to_byte_array_for_keys_values_and_headers() {
    let config = resolve(&[], &[]);
    for spec in [
        config.key_converter(),
        config.value_converter(),
        config.header_converter(),
    ] {
        assert_eq!(spec.class(), DEFAULT_CONVERTER);
        assert!(spec.configs().is_empty());
    }
    assert_eq!(
        DEFAULT_CONVERTER,
        "org.apache.kafka.connect.converters.ByteArrayConverter"
    );
}

#[test]
fn converter_class_and_settings_come_from_the_same_config() {
    let worker = [
        ("key.converter", "WorkerKey"),
        ("key.converter.a", "w"),
        ("value.converter", "WorkerValue"),
        ("value.converter.schemas.enable", "true"),
        ("header.converter", "WorkerHeader"),
    ];
    let (config, logs) = captured(|| {
        ConnectorConfig::resolve(
            &props(&worker),
            &connector(&[
                // The connector names its own value converter: its settings are used.
                ("value.converter", "ConnectorValue"),
                ("value.converter.schemas.enable", "false"),
                // No key converter class here: the worker's class and settings win.
                ("key.converter.a", "ignored"),
            ]),
        )
        .unwrap()
    });
    assert_eq!(
        config.key_converter(),
        &PluginSpec::new("WorkerKey", [("a", "w")])
    );
    assert_eq!(
        config.value_converter(),
        &PluginSpec::new("ConnectorValue", [("schemas.enable", "false")])
    );
    assert_eq!(
        config.header_converter(),
        &PluginSpec::new("WorkerHeader", [] as [(&str, &str); 0])
    );
    assert!(
        logs.iter()
            .any(|l| l.starts_with("WARN") && l.contains("key.converter.a")),
        "{logs:?}"
    );
    // The worker's value.converter.* settings are ignored as well, and said so.
    assert!(
        logs.iter()
            .any(|l| l.contains("value.converter.schemas.enable")),
        "{logs:?}"
    );
    assert!(config.unknown_keys().is_empty());
}

// ---------------------------------------------------------------------------------------
// Transforms and predicates
// ---------------------------------------------------------------------------------------

#[test]
fn transforms_and_predicates_are_read_in_order() {
    let config = resolve(
        &[],
        &[
            ("transforms", "mask, route"),
            (
                "transforms.route.type",
                "org.apache.kafka.connect.transforms.RegexRouter",
            ),
            ("transforms.route.regex", "(.*)"),
            ("transforms.route.replacement", "$1-out"),
            ("transforms.route.predicate", "isBig"),
            ("transforms.route.negate", "true"),
            ("transforms.mask.type", "MaskField$Value"),
            ("transforms.mask.fields", "ssn"),
            ("predicates", "isBig,unused"),
            ("predicates.isBig.type", "HasHeaderKey"),
            ("predicates.isBig.name", "big"),
            ("predicates.unused.type", "RecordIsTombstone"),
        ],
    );
    let t: &[TransformSpec] = config.transforms();
    assert_eq!(t.len(), 2);
    assert_eq!(t[0].alias(), "mask");
    assert_eq!(t[0].class(), "MaskField$Value");
    assert_eq!(t[0].predicate(), None);
    assert!(!t[0].negate());
    assert_eq!(t[0].configs().len(), 1);
    assert_eq!(t[1].alias(), "route");
    assert_eq!(t[1].predicate(), Some("isBig"));
    assert!(t[1].negate());
    assert_eq!(
        t[1].configs().keys().collect::<Vec<_>>(),
        ["regex", "replacement"]
    );
    let p: &[PredicateSpec] = config.predicates();
    assert_eq!(p[0].alias(), "isBig");
    assert_eq!(p[0].class(), "HasHeaderKey");
    assert_eq!(p[0].configs()["name"], "big");
    assert_eq!(p[1].alias(), "unused");
    assert!(
        config.unknown_keys().is_empty(),
        "{:?}",
        config.unknown_keys()
    );
}

#[test]
fn duplicate_aliases_are_refused() {
    let err = error(
        &[],
        &[
            ("transforms", "a,b,a"),
            ("transforms.a.type", "A"),
            ("transforms.b.type", "B"),
        ],
    );
    assert_names_key(&err, "transforms");
    assert!(
        err.to_string().contains("Duplicate alias provided."),
        "{err}"
    );
    let err = error(&[], &[("predicates", "p, p"), ("predicates.p.type", "P")]);
    assert_names_key(&err, "predicates");
    assert!(matches!(err, ConfigError::DuplicateAlias { .. }));
}

#[test]
fn every_alias_needs_a_type() {
    let err = error(&[], &[("transforms", "a"), ("transforms.a.x", "1")]);
    assert_names_key(&err, "transforms.a.type");
    let err = error(&[], &[("predicates", "p"), ("predicates.p.type", " ")]);
    assert_names_key(&err, "predicates.p.type");
}

#[test]
fn negate_without_predicate_uses_connects_message() {
    let err = error(
        &[],
        &[
            ("transforms", "a"),
            ("transforms.a.type", "A"),
            ("transforms.a.negate", "false"),
        ],
    );
    assert_eq!(
        err.to_string(),
        "Config 'transforms.a.negate' was provided but there is no config 'transforms.a.predicate' defining a predicate to be negated."
    );
    assert_eq!(err.key(), Some("transforms.a.negate"));
}

#[test]
fn a_transform_naming_an_undefined_predicate_is_refused_naming_both() {
    let err = error(
        &[],
        &[
            ("transforms", "route"),
            ("transforms.route.type", "R"),
            ("transforms.route.predicate", "missing"),
            ("predicates", "other"),
            ("predicates.other.type", "P"),
        ],
    );
    assert_names_key(&err, "transforms.route.predicate");
    let text = err.to_string();
    assert!(
        text.contains("`route`") && text.contains("`missing`"),
        "{text}"
    );
    assert!(matches!(err, ConfigError::UndefinedPredicate { .. }));
}

#[test]
fn negate_must_be_a_boolean() {
    let err = error(
        &[],
        &[
            ("transforms", "a"),
            ("transforms.a.type", "A"),
            ("transforms.a.predicate", "p"),
            ("transforms.a.negate", "maybe"),
            ("predicates", "p"),
            ("predicates.p.type", "P"),
        ],
    );
    assert_names_key(&err, "transforms.a.negate");
}

// ---------------------------------------------------------------------------------------
// Unknown keys
// ---------------------------------------------------------------------------------------

#[test]
fn unknown_keys_are_listed_and_warned_about() {
    let (config, logs) = captured(|| {
        ConnectorConfig::resolve(
            &props(&[("consumer.max.pol.records", "5"), ("some.worker.key", "x")]),
            &connector(&[
                ("consumer.override.fetch.max.byte", "1"),
                ("conection.url", "jdbc:x"),
                ("transforms.ghost.type", "G"),
                ("consumer.override.max.poll.records", "5"),
                ("errors.tolerance", "all"),
            ]),
        )
        .unwrap()
    });
    assert_eq!(
        config.unknown_keys(),
        [
            "conection.url",
            "consumer.max.pol.records",
            "consumer.override.fetch.max.byte",
            "transforms.ghost.type",
        ]
    );
    for key in config.unknown_keys() {
        assert!(
            logs.iter()
                .any(|l| l.starts_with("WARN") && l.contains(key.as_str())),
            "{key} not warned: {logs:?}"
        );
    }
}

#[test]
fn worker_client_prefixes_in_a_connector_config_get_a_hint() {
    let (config, logs) = captured(|| {
        ConnectorConfig::resolve(
            &Properties::new(),
            &connector(&[("consumer.max.poll.records", "5")]),
        )
        .unwrap()
    });
    assert_eq!(config.unknown_keys(), ["consumer.max.poll.records"]);
    // Not applied: Connect reads only `consumer.override.*` from a connector.
    assert!(
        config
            .consumer_properties()
            .get("max.poll.records")
            .is_none()
    );
    assert!(
        logs.iter()
            .any(|l| l.contains("consumer.max.poll.records") && l.contains("consumer.override.")),
        "{logs:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------------------

const SECRET: &str = "hunter2-s3cr3t";

#[test]
fn secrets_never_appear_in_debug() {
    let jaas = format!("org.example.Login required password=\"{SECRET}\";");
    let worker = props(&[
        ("bootstrap.servers", "k:9092"),
        ("listeners.https.ssl.key.password", SECRET),
        ("consumer.bearer.auth.token", SECRET),
        ("producer.basic.auth.user.info", &jaas),
        ("value.converter", "Avro"),
        ("value.converter.basic.auth.user.info", SECRET),
    ]);
    let connector = connector(&[
        ("consumer.override.bearer.auth.token", &jaas),
        ("admin.override.vault.password", SECRET),
        ("errors.deadletterqueue.topic.name", "dlq"),
        ("connection.password", SECRET),
        ("oauth.client.secret", SECRET),
        ("transforms", "t"),
        ("transforms.t.type", "T"),
        ("transforms.t.api.secret", SECRET),
        ("predicates", "p"),
        ("predicates.p.type", "P"),
        ("predicates.p.token.password", SECRET),
    ]);
    let (config, logs) = captured(|| ConnectorConfig::resolve(&worker, &connector).unwrap());
    let task = config.task_config();
    assert_eq!(
        task.get("connection.password"),
        Some(SECRET),
        "tasks get secrets"
    );
    for text in [
        format!("{worker:?}"),
        format!("{connector:?}"),
        format!("{config:?}"),
        format!("{:?}", config.dead_letter_queue()),
        format!("{:?}", config.value_converter()),
        format!("{:?}", config.transforms()),
        format!("{:?}", config.predicates()),
        format!("{task:?}"),
        format!("{:?}", config.consumer_properties()),
        format!(
            "{:?}",
            ConnectorConfig::builder("x").set("a.password", SECRET)
        ),
        logs.join("\n"),
    ] {
        assert!(!text.contains(SECRET), "secret leaked: {text}");
    }
    assert!(format!("{config:?}").contains("[redacted]"));
}

#[test]
fn secrets_never_appear_in_errors() {
    let err = error(&[], &[("vault.secret.refresh.ms", SECRET)]);
    assert_names_key(&err, "vault.secret.refresh.ms");
    assert!(!all_text(&err).contains(SECRET), "{err:?}");
    assert!(err.to_string().contains("[redacted]"), "{err}");

    let err = error(
        &[("connector.client.config.override.policy", "None")],
        &[("consumer.override.sasl.jaas.config", SECRET)],
    );
    assert!(!all_text(&err).contains(SECRET));

    // A typo'd secret key is reported by name, never by value.
    let (config, logs) = captured(|| {
        ConnectorConfig::resolve(
            &Properties::new(),
            &connector(&[("consumer.override.bearer.auth.tokn", SECRET)]),
        )
        .unwrap()
    });
    assert_eq!(
        config.unknown_keys(),
        ["consumer.override.bearer.auth.tokn"]
    );
    assert!(!logs.join("\n").contains(SECRET));
}

#[test]
fn task_config_debug_redacts_secrets() {
    let task = TaskConfig::new()
        .with("sasl.jaas.config", SECRET)
        .with("db.password", SECRET)
        .with("value.converter.basic.auth.user.info", SECRET)
        .with("client_secret", SECRET)
        .with("table", "orders");
    let text = format!("{task:?}");
    assert!(!text.contains(SECRET), "{text}");
    assert!(text.contains("orders"), "{text}");
}

// ---------------------------------------------------------------------------------------
// Builder
// ---------------------------------------------------------------------------------------

#[test]
fn builder_and_properties_give_equal_configs() {
    let built = ConnectorConfig::builder("orders-sink")
        .bootstrap_servers("k1:9092,k2:9092")
        .topics(["orders", "payments"])
        .share_group_id("orders")
        .acknowledgement_mode(AcknowledgementMode::Explicit)
        .ack_policy(AckPolicy::AfterFlush)
        .put_retriable_policy(PutRetriablePolicy::RetryInPlace)
        .max_delivery_attempts(4)
        .require_broker_dead_letter_queue(true)
        .tasks_max(3)
        .task_id(1)
        .commit_interval(Duration::from_secs(5))
        .commit_timeout(Duration::from_secs(10))
        .errors_tolerance(ErrorTolerance::All)
        .errors_retry_timeout(None)
        .errors_retry_delay_max(Duration::from_secs(2))
        .errors_log(true, false)
        .dead_letter_queue_topic("orders-dlq")
        .dead_letter_queue_replication_factor(1)
        .dead_letter_queue_context_headers(true)
        .key_converter("org.apache.kafka.connect.storage.StringConverter", &[])
        .value_converter(
            "org.apache.kafka.connect.json.JsonConverter",
            &[("schemas.enable", "false")],
        )
        .header_converter(
            "org.apache.kafka.connect.storage.SimpleHeaderConverter",
            &[("a", "b")],
        )
        .predicate("isTombstone", "RecordIsTombstone", &[])
        .transform("drop", "Filter", &[])
        .transform_predicate("drop", "isTombstone", false)
        .transform(
            "route",
            "RegexRouter",
            &[("regex", "(.*)"), ("replacement", "$1-x")],
        )
        .consumer_override("max.poll.records", "100")
        .producer_override("linger.ms", "5")
        .admin_override("request.timeout.ms", "1000")
        .set("connection.url", "postgres://db")
        .build()
        .unwrap();

    let worker = Properties::parse("bootstrap.servers=k1:9092,k2:9092").unwrap();
    let connector = Properties::parse(
        "\
name=orders-sink
topics=orders,payments
share.group.id=orders
share.acknowledgement.mode=explicit
ack.policy=after.flush
put.retriable.policy=retry.in.place
max.delivery.attempts=4
share.dead.letter.queue.required=true
tasks.max=3
task.id=1
offset.flush.interval.ms=5000
offset.flush.timeout.ms=10000
errors.tolerance=all
errors.retry.timeout=-1
errors.retry.delay.max.ms=2000
errors.log.enable=true
errors.log.include.messages=false
errors.deadletterqueue.topic.name=orders-dlq
errors.deadletterqueue.topic.replication.factor=1
errors.deadletterqueue.context.headers.enable=true
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
value.converter.schemas.enable=false
header.converter=org.apache.kafka.connect.storage.SimpleHeaderConverter
header.converter.a=b
predicates=isTombstone
predicates.isTombstone.type=RecordIsTombstone
transforms=drop,route
transforms.drop.type=Filter
transforms.drop.predicate=isTombstone
transforms.drop.negate=false
transforms.route.type=RegexRouter
transforms.route.regex=(.*)
transforms.route.replacement=$1-x
consumer.override.max.poll.records=100
producer.override.linger.ms=5
admin.override.request.timeout.ms=1000
connection.url=postgres://db
",
    )
    .unwrap();
    let parsed = ConnectorConfig::resolve(&worker, &connector).unwrap();
    assert_eq!(built, parsed);
    assert_eq!(built.unknown_keys(), ["connection.url"]);
    assert_eq!(built.commit_interval(), Some(Duration::from_secs(5)));
    assert_eq!(built.error_handling().retry_timeout_value(), None);
}

#[test]
fn builder_runs_the_same_checks() {
    let err = ConnectorConfig::builder("s")
        .topics(["t"])
        .consumer_override("isolation.level", "read_committed")
        .build()
        .unwrap_err();
    assert_names_key(&err, "consumer.override.isolation.level");
    let err = ConnectorConfig::builder("s")
        .topics(["t"])
        .max_delivery_attempts(11)
        .build()
        .unwrap_err();
    assert_names_key(&err, "max.delivery.attempts");
    let err = ConnectorConfig::builder("s")
        .topics(["t"])
        .dead_letter_queue_topic("t")
        .build()
        .unwrap_err();
    assert!(matches!(err, ConfigError::DeadLetterQueueIsSource { .. }));
    let err = ConnectorConfig::builder("s").build().unwrap_err();
    assert_names_key(&err, "topics");
}

// ---------------------------------------------------------------------------------------
// Handing the config on
// ---------------------------------------------------------------------------------------

#[test]
fn task_and_driver_configs_carry_the_connector_settings() {
    let config = resolve(&[], &[("connection.url", "jdbc:x"), ("topics", "a,b")]);
    let task = config.task_config();
    assert_eq!(task.get("connection.url"), Some("jdbc:x"));
    assert_eq!(task.get("name"), Some("orders-sink"));
    let driver = config.driver_config();
    assert_eq!(driver.topics(), ["a".to_owned(), "b".to_owned()]);
}

// ---------------------------------------------------------------------------------------
// Properties: generated text
// ---------------------------------------------------------------------------------------

/// Writes a key or value in `.properties` syntax, escaping what the reader would otherwise
/// take as syntax (as `java.util.Properties.store` does).
fn escape(text: &str, is_key: bool) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{c}' => out.push_str("\\f"),
            ' ' if is_key || i == 0 => out.push_str("\\ "),
            '=' | ':' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

fn text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let chars = prop_oneof![
        4 => proptest::char::range('a', 'e'),
        1 => prop::sample::select(vec![' ', '\t', '\n', '\r', '\u{c}', '\\', '=', ':', '#', '!', 'é', '😀']),
        1 => any::<char>(),
    ];
    prop::collection::vec(chars, 0..10).prop_map(String::from_iter)
}

proptest::proptest! {
    #[test]
    fn parse_never_panics_on_any_text(input in proptest::collection::vec(proptest::prelude::any::<char>(), 0..200)) {
        let input = String::from_iter(input);
        let _ = Properties::parse(&input);
    }

    #[test]
    fn escaped_entries_read_back_as_written(
        entries in proptest::collection::vec((text(), text()), 0..8),
        crlf in proptest::prelude::any::<bool>(),
    ) {
        let newline = if crlf { "\r\n" } else { "\n" };
        let written: String = entries
            .iter()
            .map(|(k, v)| format!("{}={}{newline}", escape(k, true), escape(v, false)))
            .collect();
        let expected: Properties = entries.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let parsed = Properties::parse(&written).unwrap();
        proptest::prop_assert_eq!(parsed, expected);
    }
}

#[test]
fn chain_stages_hand_transforms_and_their_predicates_to_the_plugin_registry() {
    let config = resolve(
        &[],
        &[
            ("transforms", "drop,keep"),
            ("transforms.drop.type", "Filter"),
            ("transforms.drop.predicate", "isTombstone"),
            ("transforms.keep.type", "Filter"),
            ("predicates", "isTombstone"),
            ("predicates.isTombstone.type", "RecordIsTombstone"),
        ],
    );
    let stages = config.chain_stages();
    assert_eq!(
        stages.iter().map(|s| s.alias()).collect::<Vec<_>>(),
        ["drop", "keep"]
    );
    kafka_share_sink::Plugins::new()
        .build_chain(stages)
        .expect("Connect's built-in Filter and RecordIsTombstone");
}

#[test]
fn the_flush_bounds_are_read_and_unset_by_default() {
    let config = resolve(&[], &[]);
    assert_eq!(config.max_awaiting_flush(), (None, None));
    let config = resolve(
        &[],
        &[
            ("ack.flush.max.records", "500"),
            ("ack.flush.max.bytes", "0"),
        ],
    );
    assert_eq!(config.max_awaiting_flush(), (Some(500), Some(0)));
    assert!(
        config.unknown_keys().is_empty(),
        "{:?}",
        config.unknown_keys()
    );
    let built = ConnectorConfig::builder("s")
        .topics(["t"])
        .max_awaiting_flush(7, 1024)
        .build()
        .unwrap();
    assert_eq!(built.max_awaiting_flush(), (Some(7), Some(1024)));
}

/// The log capture these tests use keeps this thread's events at a call site another thread
/// reached first. With a scoped subscriber as the only one registered, tracing cached such a
/// call site as unwanted (it asked the other thread's subscriber, none), and the events were
/// lost: a log assertion failed whenever a test running beside it got to the call site first.
#[test]
fn a_capture_keeps_events_at_a_call_site_another_thread_reached_first() {
    fn log(n: u32) {
        tracing::info!(n, "the call site of this test");
    }
    let ((), lines) = captured(|| {
        std::thread::spawn(|| log(1)).join().expect("thread");
        log(2);
    });
    let at_site: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("the call site of this test"))
        .collect();
    assert_eq!(at_site.len(), 1, "{lines:?}");
    assert!(at_site[0].contains("n=2"), "{lines:?}");
}

/// A `bootstrap.servers` entry without a port (or with one out of range) is a config error
/// naming the key, from every client, at once: it was a retriable connection error (an
/// address that does not resolve), so clients and the supervisor retried it for ever. A
/// listener-name prefix, as Java's clients accept, is read past.
#[tokio::test]
async fn a_malformed_bootstrap_server_is_a_config_error_for_every_client() {
    use kafka_share_sink::producer::{KafkaProducer, KafkaProducerConfig};
    use kafka_share_sink::{
        ConsumerError, KafkaAdmin, KafkaShareConsumer, KafkaShareConsumerConfig,
    };
    let names_key = |text: String| {
        assert!(
            text.contains("bootstrap.servers") && text.contains("broker-without-port"),
            "{text}"
        );
    };
    let consumer =
        KafkaShareConsumer::connect(KafkaShareConsumerConfig::new("broker-without-port", "g"))
            .await
            .expect_err("no port");
    assert!(
        matches!(&consumer, ConsumerError::Config { key, .. } if key == "bootstrap.servers"),
        "{consumer:?}"
    );
    assert!(!consumer.is_retriable());
    names_key(consumer.to_string());
    let admin = KafkaAdmin::connect("broker-without-port")
        .await
        .expect_err("no port");
    assert!(!admin.is_retriable(), "{admin:?}");
    names_key(format!("{admin} {admin:?}"));
    let producer = KafkaProducer::connect(KafkaProducerConfig::new("broker-without-port"))
        .await
        .expect_err("no port");
    assert!(!producer.is_retriable(), "{producer:?}");
    names_key(format!("{producer} {producer:?}"));
}

/// A consumer setting Java's share consumer knows but the native one does not use is
/// accepted (a Java config works as it is) and named in a WARN saying it has no effect; one
/// it uses is not.
#[test]
fn consumer_settings_the_native_consumer_ignores_are_warned_about() {
    let (config, logs) = captured(|| {
        resolve(
            &[
                ("bootstrap.servers", "k:9092"),
                ("consumer.check.crcs", "false"),
            ],
            &[
                ("consumer.override.client.rack", "eu-1a"),
                ("consumer.override.max.poll.records", "100"),
            ],
        )
    });
    assert!(
        config.unknown_keys().is_empty(),
        "{:?}",
        config.unknown_keys()
    );
    let unused: Vec<&String> = logs
        .iter()
        .filter(|l| l.starts_with("WARN") && l.contains("has no effect"))
        .collect();
    assert_eq!(unused.len(), 2, "{logs:#?}");
    assert!(unused.iter().any(|l| l.contains("consumer.check.crcs")));
    assert!(
        unused
            .iter()
            .any(|l| l.contains("consumer.override.client.rack"))
    );
    assert!(
        !logs.iter().any(|l| l.contains("max.poll.records")),
        "{logs:#?}"
    );
}

/// With a dead-letter queue, the producer and admin settings it does not use (all but the
/// address, the delivery timeout and security) are named in a WARN saying they have no
/// effect; they were accepted without a word. Without a queue nothing is said.
#[test]
fn dead_letter_queue_settings_it_does_not_use_are_warned_about() {
    let worker = [
        ("bootstrap.servers", "k:9092"),
        ("producer.linger.ms", "10"),
        ("admin.request.timeout.ms", "5000"),
    ];
    let connector_keys = [
        ("producer.override.compression.type", "zstd"),
        ("producer.override.delivery.timeout.ms", "30000"),
        ("producer.override.security.protocol", "PLAINTEXT"),
        ("admin.override.client.id", "x"),
    ];
    let with_queue: Vec<(&str, &str)> = connector_keys
        .iter()
        .copied()
        .chain([("errors.deadletterqueue.topic.name", "dlq")])
        .collect();
    let warned = |logs: &[String]| -> Vec<String> {
        logs.iter()
            .filter(|l| l.starts_with("WARN") && l.contains("not used by the dead-letter queue"))
            .cloned()
            .collect()
    };
    let worker_all = [("connector.client.config.override.policy", "All")];
    let worker: Vec<(&str, &str)> = worker.iter().chain(worker_all.iter()).copied().collect();
    let (_, logs) = captured(|| resolve(&worker, &with_queue));
    let warned_keys = warned(&logs);
    for key in [
        "producer.linger.ms",
        "admin.request.timeout.ms",
        "producer.override.compression.type",
        "admin.override.client.id",
    ] {
        assert!(
            warned_keys
                .iter()
                .any(|l| l.contains(&format!("key={key} "))),
            "{key}: {logs:#?}"
        );
    }
    assert_eq!(warned_keys.len(), 4, "{warned_keys:#?}");
    let (_, logs) = captured(|| resolve(&worker, &connector_keys));
    assert!(warned(&logs).is_empty(), "{logs:#?}");
}

/// The exactly-once iteration's settings are the runtime's own: with the feature, `resolve`
/// does not report them as unknown ("a typo?"), which it did.
#[cfg(feature = "exactly-once")]
#[test]
fn exactly_once_settings_are_known_connector_keys() {
    let config = resolve(
        &[("bootstrap.servers", "k:9092")],
        &[
            ("exactly.once.mode", "ledger"),
            ("exactly.once.strict", "true"),
            ("exactly.once.ledger.topic", "orders-ledger"),
            ("exactly.once.ledger.partitions", "3"),
            ("exactly.once.ledger.prune.interval.ms", "60000"),
            ("exactly.once.barrier.timeout.ms", "30000"),
            ("exactly.once.orphan.fencing", "true"),
            ("exactly.once.typo", "x"),
        ],
    );
    assert_eq!(config.unknown_keys(), ["exactly.once.typo"]);
}
