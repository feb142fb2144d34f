//! [`KafkaDeadLetterQueueConfig`]: where the dead-letter topic is and how to write to it.

use std::time::Duration;

use crate::dlq::DeadLetterError;
use crate::kafka::net::addresses::parse_bootstrap;
use crate::kafka::security::Security;
use crate::topic_name::topic_name_problem;

/// Java's `delivery.timeout.ms` default.
const DEFAULT_DELIVERY_TIMEOUT: Duration = Duration::from_secs(120);

/// Connect's `errors.deadletterqueue.topic.replication.factor` default.
const DEFAULT_REPLICATION_FACTOR: i16 = 3;

/// The client id when no connector is named.
const DEFAULT_CLIENT_ID: &str = "kafka-share-sink-dlq-producer";

/// Settings of a [`KafkaDeadLetterQueue`](super::KafkaDeadLetterQueue).
///
/// ```
/// use std::time::Duration;
/// use kafka_share_sink::KafkaDeadLetterQueueConfig;
///
/// let config = KafkaDeadLetterQueueConfig::new("broker1:9092,broker2:9092", "orders-dlq")
///     .connector("orders-sink", 2)
///     .replication_factor(1)
///     .delivery_timeout(Duration::from_secs(30));
/// assert_eq!(config.topic(), "orders-dlq");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaDeadLetterQueueConfig {
    bootstrap_servers: String,
    topic: String,
    replication_factor: i16,
    client_id: Option<String>,
    connector: Option<(String, i32)>,
    delivery_timeout: Duration,
    security: Security,
}

impl KafkaDeadLetterQueueConfig {
    /// The dead-letter topic `topic` (`errors.deadletterqueue.topic.name`) on the cluster of
    /// `bootstrap_servers` (comma-separated `host:port`), with replication factor 3 when it
    /// has to be created and a delivery timeout of 120 s.
    pub fn new(bootstrap_servers: impl Into<String>, topic: impl Into<String>) -> Self {
        Self {
            bootstrap_servers: bootstrap_servers.into(),
            topic: topic.into(),
            replication_factor: DEFAULT_REPLICATION_FACTOR,
            client_id: None,
            connector: None,
            delivery_timeout: DEFAULT_DELIVERY_TIMEOUT,
            security: Security::plaintext(),
        }
    }

    /// The replication factor of the topic if it has to be created
    /// (`errors.deadletterqueue.topic.replication.factor`, default 3, as in Connect); -1
    /// leaves it to the broker's `default.replication.factor` (CreateTopics v4+, Kafka 2.4
    /// and later). The topic is created with 1 partition, as Connect's worker does.
    pub fn replication_factor(mut self, replication_factor: i16) -> Self {
        self.replication_factor = replication_factor;
        self
    }

    /// The connector and task this queue belongs to; they make the default client id
    /// `connector-dlq-producer-<connector>-<task>`, as in Connect.
    pub fn connector(mut self, name: impl Into<String>, task_id: i32) -> Self {
        self.connector = Some((name.into(), task_id));
        self
    }

    /// The `client.id` of the producer's requests, instead of the default.
    pub fn client_id(mut self, client_id: impl Into<String>) -> Self {
        self.client_id = Some(client_id.into());
        self
    }

    /// How long connecting, and then each [`send`](crate::DeadLetterQueue::send), may take
    /// in all, retries included (Java's `delivery.timeout.ms`, default 120 s). Connect sets
    /// no bound for its dead-letter producer; a bound lets the driver release the records
    /// and go on. A timeout too long to add to the clock (e.g. [`Duration::MAX`]) is taken
    /// as about 30 years: no bound in practice, as in Connect.
    pub fn delivery_timeout(mut self, timeout: Duration) -> Self {
        self.delivery_timeout = timeout;
        self
    }

    /// `security.protocol` with its TLS and SASL settings (default `PLAINTEXT`), for the
    /// producer's connections and the one that creates the topic.
    pub fn security(mut self, security: Security) -> Self {
        self.security = security;
        self
    }

    /// The security settings.
    pub(super) fn security_value(&self) -> &Security {
        &self.security
    }

    /// The bootstrap servers.
    pub fn bootstrap_servers(&self) -> &str {
        &self.bootstrap_servers
    }

    /// The dead-letter topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The replication factor used if the topic has to be created.
    pub(super) fn replication_factor_value(&self) -> i16 {
        self.replication_factor
    }

    /// The client id: the one set, else `connector-dlq-producer-<connector>-<task>` when a
    /// connector is named, else `kafka-share-sink-dlq-producer`.
    pub(super) fn effective_client_id(&self) -> String {
        match (&self.client_id, &self.connector) {
            (Some(id), _) => id.clone(),
            (None, Some((name, task))) => format!("connector-dlq-producer-{name}-{task}"),
            (None, None) => DEFAULT_CLIENT_ID.to_owned(),
        }
    }

    /// The delivery timeout.
    pub(super) fn delivery_timeout_value(&self) -> Duration {
        self.delivery_timeout
    }

    /// Checks what can be checked without a cluster.
    pub(super) fn validate(&self) -> Result<(), DeadLetterError> {
        let invalid = |key, reason: String| Err(DeadLetterError::Config { key, reason });
        if let Err(reason) = parse_bootstrap(&self.bootstrap_servers) {
            return invalid("bootstrap.servers", reason);
        }
        if let Err(reason) = check_topic_name(&self.topic) {
            return invalid("errors.deadletterqueue.topic.name", reason);
        }
        if self.replication_factor == 0 || self.replication_factor < -1 {
            return invalid(
                "errors.deadletterqueue.topic.replication.factor",
                format!(
                    "{} is not a replication factor: use 1 or more, or -1 for the broker default",
                    self.replication_factor
                ),
            );
        }
        if self.delivery_timeout.is_zero() {
            return invalid(
                "delivery.timeout.ms",
                "the delivery timeout must be above zero".to_owned(),
            );
        }
        Ok(())
    }
}

/// Kafka's topic name rules (see [`topic_name_problem`]).
fn check_topic_name(name: &str) -> Result<(), String> {
    match topic_name_problem(name) {
        Some(problem) => Err(format!("`{name}` is not a topic name: {problem}")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(config: &KafkaDeadLetterQueueConfig) -> Option<&'static str> {
        match config.validate() {
            Err(DeadLetterError::Config { key, .. }) => Some(key),
            _ => None,
        }
    }

    #[test]
    fn defaults_follow_connect_and_java() {
        let config = KafkaDeadLetterQueueConfig::new("k:9092", "dlq");
        assert_eq!(config.replication_factor_value(), 3);
        assert_eq!(config.delivery_timeout_value(), Duration::from_secs(120));
        assert_eq!(
            config.effective_client_id(),
            "kafka-share-sink-dlq-producer"
        );
        let named = config.clone().connector("sink", 4);
        assert_eq!(named.effective_client_id(), "connector-dlq-producer-sink-4");
        assert_eq!(named.client_id("mine").effective_client_id(), "mine");
        assert_eq!(key_of(&config), None);
    }

    #[test]
    fn invalid_settings_name_their_key() {
        let base = || KafkaDeadLetterQueueConfig::new("k:9092", "dlq");
        assert_eq!(
            key_of(&KafkaDeadLetterQueueConfig::new(" , ", "dlq")),
            Some("bootstrap.servers")
        );
        for topic in ["", ".", "..", "a b", "dlq/1", &"x".repeat(250)] {
            assert_eq!(
                key_of(&KafkaDeadLetterQueueConfig::new("k:9092", topic)),
                Some("errors.deadletterqueue.topic.name"),
                "{topic}"
            );
        }
        for rf in [0, -2] {
            assert_eq!(
                key_of(&base().replication_factor(rf)),
                Some("errors.deadletterqueue.topic.replication.factor")
            );
        }
        assert_eq!(key_of(&base().replication_factor(-1)), None);
        assert_eq!(
            key_of(&base().delivery_timeout(Duration::ZERO)),
            Some("delivery.timeout.ms")
        );
    }
}
