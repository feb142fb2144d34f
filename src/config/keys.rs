//! The names of settings: Connect's, ours, the Java consumer's and the consumer settings a
//! share group refuses. The security settings are `crate::kafka::security::keys`'.

// Connector settings (Connect's `ConnectorConfig` and `SinkConnectorConfig`).
pub(crate) const NAME: &str = "name";
pub(crate) const TASKS_MAX: &str = "tasks.max";
pub(crate) const TOPICS: &str = "topics";
pub(crate) const TOPICS_REGEX: &str = "topics.regex";
pub(crate) const KEY_CONVERTER: &str = "key.converter";
pub(crate) const VALUE_CONVERTER: &str = "value.converter";
pub(crate) const HEADER_CONVERTER: &str = "header.converter";
pub(crate) const TRANSFORMS: &str = "transforms";
pub(crate) const PREDICATES: &str = "predicates";
pub(crate) const ERRORS_TOLERANCE: &str = "errors.tolerance";
pub(crate) const ERRORS_RETRY_TIMEOUT: &str = "errors.retry.timeout";
pub(crate) const ERRORS_RETRY_DELAY_MAX_MS: &str = "errors.retry.delay.max.ms";
pub(crate) const ERRORS_LOG_ENABLE: &str = "errors.log.enable";
pub(crate) const ERRORS_LOG_INCLUDE_MESSAGES: &str = "errors.log.include.messages";
pub(crate) const DLQ_TOPIC: &str = "errors.deadletterqueue.topic.name";
pub(crate) const DLQ_REPLICATION_FACTOR: &str = "errors.deadletterqueue.topic.replication.factor";
pub(crate) const DLQ_CONTEXT_HEADERS: &str = "errors.deadletterqueue.context.headers.enable";

// Worker settings (Connect's `WorkerConfig`); the offset flush ones may also be set per
// connector here.
pub(crate) const BOOTSTRAP_SERVERS: &str = "bootstrap.servers";
pub(crate) const OVERRIDE_POLICY: &str = "connector.client.config.override.policy";
pub(crate) const OVERRIDE_ALLOWLIST: &str = "connector.client.config.override.allowlist";
pub(crate) const OFFSET_FLUSH_INTERVAL_MS: &str = "offset.flush.interval.ms";
pub(crate) const OFFSET_FLUSH_TIMEOUT_MS: &str = "offset.flush.timeout.ms";

// Our own connector settings.
pub(crate) const TASK_ID: &str = "task.id";
pub(crate) const SHARE_GROUP_ID: &str = "share.group.id";
pub(crate) const ACK_POLICY: &str = "ack.policy";
pub(crate) const PUT_RETRIABLE_POLICY: &str = "put.retriable.policy";
pub(crate) const MAX_DELIVERY_ATTEMPTS: &str = "max.delivery.attempts";
// Not `retry.backoff.ms`: that is the consumer's own request backoff.
pub(crate) const REDELIVERY_BACKOFF_MS: &str = "redelivery.backoff.ms";
pub(crate) const REDELIVERY_BACKOFF_MAX_MS: &str = "redelivery.backoff.max.ms";
pub(crate) const ACK_FLUSH_MAX_RECORDS: &str = "ack.flush.max.records";
pub(crate) const ACK_FLUSH_MAX_BYTES: &str = "ack.flush.max.bytes";
pub(crate) const SHARE_DLQ_REQUIRED: &str = "share.dead.letter.queue.required";
pub(crate) const SHARE_LAG_REFRESH_INTERVAL_MS: &str = "share.lag.refresh.interval.ms";
pub(crate) use crate::dlq::breaker::{
    MAX_RATIO_KEY as DLQ_BREAKER_MAX_RATIO, MAX_RECORDS_KEY as DLQ_BREAKER_MAX_RECORDS,
    MIN_RECORDS_KEY as DLQ_BREAKER_MIN_RECORDS, WINDOW_MS_KEY as DLQ_BREAKER_WINDOW_MS,
};

// Client prefixes.
pub(crate) const CONSUMER_PREFIX: &str = "consumer.";
pub(crate) const PRODUCER_PREFIX: &str = "producer.";
pub(crate) const ADMIN_PREFIX: &str = "admin.";
pub(crate) const CONSUMER_OVERRIDE_PREFIX: &str = "consumer.override.";
pub(crate) const PRODUCER_OVERRIDE_PREFIX: &str = "producer.override.";
pub(crate) const ADMIN_OVERRIDE_PREFIX: &str = "admin.override.";

// Consumer settings the resolution reads.
pub(crate) const GROUP_PROTOCOL: &str = "group.protocol";
pub(crate) const GROUP_ID: &str = "group.id";
pub(crate) const CLIENT_ID: &str = "client.id";
pub(crate) const ACKNOWLEDGEMENT_MODE: &str = "share.acknowledgement.mode";

/// Every top-level key of a connector config this crate knows (besides the prefixes
/// `consumer.override.`, `producer.override.`, `admin.override.`, the converters' and the
/// transforms' and predicates' own).
pub(crate) const CONNECTOR_KEYS: &[&str] = &[
    NAME,
    "connector.class",
    "connector.plugin.version",
    TASKS_MAX,
    "tasks.max.enforce",
    TOPICS,
    TOPICS_REGEX,
    KEY_CONVERTER,
    VALUE_CONVERTER,
    HEADER_CONVERTER,
    TRANSFORMS,
    PREDICATES,
    "config.action.reload",
    ERRORS_TOLERANCE,
    ERRORS_RETRY_TIMEOUT,
    ERRORS_RETRY_DELAY_MAX_MS,
    ERRORS_LOG_ENABLE,
    ERRORS_LOG_INCLUDE_MESSAGES,
    DLQ_TOPIC,
    DLQ_REPLICATION_FACTOR,
    DLQ_CONTEXT_HEADERS,
    OFFSET_FLUSH_INTERVAL_MS,
    OFFSET_FLUSH_TIMEOUT_MS,
    TASK_ID,
    SHARE_GROUP_ID,
    ACKNOWLEDGEMENT_MODE,
    ACK_POLICY,
    PUT_RETRIABLE_POLICY,
    MAX_DELIVERY_ATTEMPTS,
    REDELIVERY_BACKOFF_MS,
    REDELIVERY_BACKOFF_MAX_MS,
    ACK_FLUSH_MAX_RECORDS,
    ACK_FLUSH_MAX_BYTES,
    SHARE_DLQ_REQUIRED,
    SHARE_LAG_REFRESH_INTERVAL_MS,
    DLQ_BREAKER_MAX_RECORDS,
    DLQ_BREAKER_MAX_RATIO,
    DLQ_BREAKER_MIN_RECORDS,
    DLQ_BREAKER_WINDOW_MS,
];

// The exactly-once iteration's connector settings (feature `exactly-once`).
#[cfg(feature = "exactly-once")]
pub(crate) const EXACTLY_ONCE_MODE: &str = "exactly.once.mode";
#[cfg(feature = "exactly-once")]
pub(crate) const EXACTLY_ONCE_STRICT: &str = "exactly.once.strict";
#[cfg(feature = "exactly-once")]
pub(crate) const EXACTLY_ONCE_LEDGER_TOPIC: &str = "exactly.once.ledger.topic";
#[cfg(feature = "exactly-once")]
pub(crate) const EXACTLY_ONCE_LEDGER_PARTITIONS: &str = "exactly.once.ledger.partitions";
#[cfg(feature = "exactly-once")]
pub(crate) const EXACTLY_ONCE_PRUNE_INTERVAL_MS: &str = "exactly.once.ledger.prune.interval.ms";
#[cfg(feature = "exactly-once")]
pub(crate) const EXACTLY_ONCE_BARRIER_TIMEOUT_MS: &str = "exactly.once.barrier.timeout.ms";
#[cfg(feature = "exactly-once")]
pub(crate) const EXACTLY_ONCE_ORPHAN_FENCING: &str = "exactly.once.orphan.fencing";

/// The exactly-once iteration's connector settings, read by
/// [`ExactlyOnceConfig::from_properties`](crate::exactly_once::ExactlyOnceConfig::from_properties)
/// (with the `exactly-once` feature; without it they do nothing and are reported as unknown).
#[cfg(feature = "exactly-once")]
const EXACTLY_ONCE_KEYS: &[&str] = &[
    EXACTLY_ONCE_MODE,
    EXACTLY_ONCE_STRICT,
    EXACTLY_ONCE_LEDGER_TOPIC,
    EXACTLY_ONCE_LEDGER_PARTITIONS,
    EXACTLY_ONCE_PRUNE_INTERVAL_MS,
    EXACTLY_ONCE_BARRIER_TIMEOUT_MS,
    EXACTLY_ONCE_ORPHAN_FENCING,
];

/// True if `key` is a connector setting of the exactly-once iteration this build has.
pub(crate) fn is_exactly_once_key(key: &str) -> bool {
    #[cfg(feature = "exactly-once")]
    return EXACTLY_ONCE_KEYS.contains(&key);
    #[cfg(not(feature = "exactly-once"))]
    {
        let _ = key;
        false
    }
}

/// The Java consumer's settings that apply to a share consumer (`ShareConsumerConfig` and
/// the common client settings) and that the native share consumer uses; with
/// [`CONSUMER_KEYS_UNUSED`], the keys it knows. A consumer key outside both lists, the
/// prefixes below, the security keys and [`share_unsupported`] is reported as unknown, so
/// that a typo is caught.
const CONSUMER_KEYS: &[&str] = &[
    BOOTSTRAP_SERVERS,
    GROUP_ID,
    CLIENT_ID,
    ACKNOWLEDGEMENT_MODE,
    "share.acquire.mode",
    "max.poll.records",
    "fetch.min.bytes",
    "fetch.max.bytes",
    "fetch.max.wait.ms",
    "max.partition.fetch.bytes",
    "request.timeout.ms",
    "reconnect.backoff.ms",
    "reconnect.backoff.max.ms",
    "socket.connection.setup.timeout.ms",
];

/// Families of consumer settings too large to list one by one.
const CONSUMER_PREFIXES: &[&str] = &["metrics.context."];

/// The consumer settings Java's share consumer knows (and [`CONSUMER_PREFIXES`]) that the
/// native share consumer accepts, as Java's would, but does nothing with: its own behaviour stands
/// (CRCs always checked, Metadata every five minutes, the retry backoff of Java's defaults,
/// metrics through this crate's own reporting, records as bytes for the converters).
const CONSUMER_KEYS_UNUSED: &[&str] = &[
    "client.dns.lookup",
    "client.rack",
    "max.poll.interval.ms",
    "check.crcs",
    "key.deserializer",
    "value.deserializer",
    "allow.auto.create.topics",
    "exclude.internal.topics",
    "default.api.timeout.ms",
    "connections.max.idle.ms",
    "send.buffer.bytes",
    "receive.buffer.bytes",
    "retry.backoff.ms",
    "retry.backoff.max.ms",
    "socket.connection.setup.timeout.max.ms",
    "metadata.max.age.ms",
    "metadata.recovery.strategy",
    "metadata.recovery.rebootstrap.trigger.ms",
    "metric.reporters",
    "metrics.num.samples",
    "metrics.sample.window.ms",
    "metrics.recording.level",
    "enable.metrics.push",
];

/// True if `name` (without prefix) is a consumer setting the native share consumer accepts
/// and does not use (see [`CONSUMER_KEYS_UNUSED`]).
pub(crate) fn is_unused_consumer_key(name: &str) -> bool {
    CONSUMER_KEYS_UNUSED.contains(&name) || CONSUMER_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// True if `name` (without prefix) is a consumer setting a share consumer knows.
pub(crate) fn is_known_consumer_key(name: &str) -> bool {
    CONSUMER_KEYS.contains(&name)
        || is_unused_consumer_key(name)
        || crate::kafka::security::keys::is_known(name)
}

/// For a consumer setting a share consumer refuses (Java's `SHARE_GROUP_UNSUPPORTED_CONFIGS`
/// without `group.protocol`, which is handled on its own), what to do instead.
pub(crate) fn share_unsupported(name: &str) -> Option<&'static str> {
    Some(match name {
        "auto.offset.reset" => {
            "where a share group starts reading is the group config `share.auto.offset.reset` \
             (latest by default); set it once with `KafkaAdmin::set_share_group_config`"
        }
        "enable.auto.commit" | "auto.commit.interval.ms" => {
            "acknowledgements are committed by the driver; set how often with \
             `offset.flush.interval.ms`"
        }
        "group.instance.id" => "static membership does not exist in share groups; remove the key",
        "isolation.level" => {
            "the isolation level of a share group is the group config `share.isolation.level`; \
             set it with `KafkaAdmin::set_share_group_config`"
        }
        "partition.assignment.strategy" | "group.remote.assignor" => {
            "the broker assigns partitions to share-group members itself (broker config \
             `group.share.assignors`); remove the key"
        }
        "interceptor.classes" => {
            "share consumers take no interceptors; use a transform (`transforms`) instead"
        }
        "session.timeout.ms" => {
            "the session timeout of a share group is the broker config \
             `group.share.session.timeout.ms` (group config `share.session.timeout.ms`)"
        }
        "heartbeat.interval.ms" => {
            "the heartbeat interval of a share group is the broker config \
             `group.share.heartbeat.interval.ms` (group config `share.heartbeat.interval.ms`)"
        }
        _ => return None,
    })
}

/// The settings the deprecated `Principal` override policy allows.
pub(crate) const PRINCIPAL_KEYS: &[&str] =
    &["sasl.jaas.config", "sasl.mechanism", "security.protocol"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unsupported_key_has_advice_and_none_is_also_known() {
        for key in [
            "auto.offset.reset",
            "enable.auto.commit",
            "auto.commit.interval.ms",
            "group.instance.id",
            "isolation.level",
            "partition.assignment.strategy",
            "interceptor.classes",
            "session.timeout.ms",
            "heartbeat.interval.ms",
            "group.remote.assignor",
        ] {
            assert!(share_unsupported(key).is_some(), "{key}");
            assert!(!is_known_consumer_key(key), "{key}");
        }
        assert!(share_unsupported("max.poll.records").is_none());
        assert!(!is_known_consumer_key("max.pol.records"));
    }

    #[test]
    fn security_settings_are_known_and_typos_are_not() {
        for key in [
            "security.protocol",
            "ssl.truststore.location",
            "ssl.keystore.key",
            "sasl.mechanism",
            "sasl.jaas.config",
        ] {
            assert!(is_known_consumer_key(key), "{key}");
        }
        assert!(!is_known_consumer_key("ssl.trustore.location"));
        assert!(!is_known_consumer_key("sasl.mechanisms"));
    }
}
