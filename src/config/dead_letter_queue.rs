//! [`DeadLetterQueueSettings`]: where records that failed go, and with which clients.

use super::keys::BOOTSTRAP_SERVERS;
use super::properties::Properties;
use crate::kafka::security::Security;

/// The dead-letter queue of a connector (`errors.deadletterqueue.*`), with the settings of
/// the producer that writes to it and of the admin client that creates it.
///
/// The producer settings are resolved as Connect resolves them: Connect's defaults for a
/// dead-letter queue producer (`bootstrap.servers` from the worker,
/// `client.id=connector-dlq-producer-<name>-<task.id>`, `acks=all`,
/// `enable.idempotence=false`, `max.in.flight.requests.per.connection=1`, and
/// `max.block.ms` and `delivery.timeout.ms` at their maximum, so a write is retried rather
/// than lost), then the worker's `producer.*`, then the connector's `producer.override.*`.
/// The admin settings are every worker key without a client prefix (with
/// `client.id=connector-dlq-adminclient-`), then the worker's `admin.*`, then the
/// connector's `admin.override.*`. Prefixes are removed. `Debug` redacts secrets.
///
/// ```
/// use kafka_share_sink::{ConnectorConfig, Properties};
///
/// let worker: Properties = [("bootstrap.servers", "k1:9092"), ("producer.linger.ms", "5")].into_iter().collect();
/// let connector: Properties = [
///     ("name", "orders-sink"),
///     ("topics", "orders"),
///     ("errors.deadletterqueue.topic.name", " orders-dlq "),
///     ("producer.override.linger.ms", "10"),
/// ]
/// .into_iter()
/// .collect();
/// let config = ConnectorConfig::resolve(&worker, &connector)?;
/// let dlq = config.dead_letter_queue().expect("a dead-letter queue is set");
/// assert_eq!(dlq.topic(), "orders-dlq");
/// assert_eq!(dlq.replication_factor(), 3);
/// assert_eq!(dlq.producer_properties().get("linger.ms"), Some("10"));
/// assert_eq!(dlq.bootstrap_servers(), Some("k1:9092"));
/// # Ok::<(), kafka_share_sink::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterQueueSettings {
    pub(crate) topic: String,
    pub(crate) replication_factor: i16,
    pub(crate) context_headers: bool,
    pub(crate) producer: Properties,
    pub(crate) admin: Properties,
    /// The producer's `security.protocol` with its `ssl.*` and `sasl.*` settings.
    pub(crate) security: Security,
}

impl DeadLetterQueueSettings {
    /// The topic (`errors.deadletterqueue.topic.name`, trimmed, never empty).
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The replication factor used when the topic is created
    /// (`errors.deadletterqueue.topic.replication.factor`, default 3; -1 is the broker's
    /// default).
    pub fn replication_factor(&self) -> i16 {
        self.replication_factor
    }

    /// Whether records carry the `__connect.errors.*` context headers
    /// (`errors.deadletterqueue.context.headers.enable`, default false).
    pub fn context_headers(&self) -> bool {
        self.context_headers
    }

    /// The producer's settings.
    pub fn producer_properties(&self) -> &Properties {
        &self.producer
    }

    /// The admin client's settings.
    pub fn admin_properties(&self) -> &Properties {
        &self.admin
    }

    /// The producer's security settings (`security.protocol`, `ssl.*`, `sasl.*` of the
    /// producer settings), which the dead-letter queue's connections use.
    pub fn security(&self) -> &Security {
        &self.security
    }

    /// The producer's `bootstrap.servers`, if any config set one.
    pub fn bootstrap_servers(&self) -> Option<&str> {
        self.producer.get(BOOTSTRAP_SERVERS)
    }
}
