//! [`ConnectorConfigBuilder`]: typed setters that write Connect's string keys.

use std::time::Duration;

use crate::consumer::AcknowledgementMode;
use crate::driver::{AckPolicy, ErrorTolerance, PutRetriablePolicy};

use super::connector::ConnectorConfig;
use super::error::ConfigError;
use super::keys::{
    ACK_FLUSH_MAX_BYTES, ACK_FLUSH_MAX_RECORDS, ACK_POLICY, ACKNOWLEDGEMENT_MODE,
    ADMIN_OVERRIDE_PREFIX, BOOTSTRAP_SERVERS, CONSUMER_OVERRIDE_PREFIX, DLQ_CONTEXT_HEADERS,
    DLQ_REPLICATION_FACTOR, DLQ_TOPIC, ERRORS_LOG_ENABLE, ERRORS_LOG_INCLUDE_MESSAGES,
    ERRORS_RETRY_DELAY_MAX_MS, ERRORS_RETRY_TIMEOUT, ERRORS_TOLERANCE, HEADER_CONVERTER,
    KEY_CONVERTER, MAX_DELIVERY_ATTEMPTS, NAME, OFFSET_FLUSH_INTERVAL_MS, OFFSET_FLUSH_TIMEOUT_MS,
    PREDICATES, PRODUCER_OVERRIDE_PREFIX, PUT_RETRIABLE_POLICY, SHARE_DLQ_REQUIRED, SHARE_GROUP_ID,
    TASK_ID, TASKS_MAX, TRANSFORMS, VALUE_CONVERTER,
};
use super::properties::Properties;

/// Builds a [`ConnectorConfig`] with typed setters. Each setter writes the connector key
/// Connect would read (or, for [`bootstrap_servers`](Self::bootstrap_servers), the worker
/// key), and [`build`](Self::build) runs [`ConnectorConfig::resolve`] on them, so a built
/// config equals one resolved from the same keys.
///
/// Durations are written in whole milliseconds, at most `i64::MAX` (Kafka's largest `LONG`,
/// what those keys take): a longer one, such as [`Duration::MAX`], is written as that and
/// means "forever" in practice.
///
/// ```
/// use kafka_share_sink::{AckPolicy, ConnectorConfig, ErrorTolerance};
///
/// let config = ConnectorConfig::builder("orders-sink")
///     .bootstrap_servers("k1:9092")
///     .topics(["orders", "payments"])
///     .ack_policy(AckPolicy::AfterFlush)
///     .errors_tolerance(ErrorTolerance::All)
///     .dead_letter_queue_topic("orders-dlq")
///     .value_converter("org.apache.kafka.connect.json.JsonConverter", &[("schemas.enable", "false")])
///     .transform("route", "org.apache.kafka.connect.transforms.RegexRouter", &[("regex", ".*"), ("replacement", "all")])
///     .consumer_override("max.poll.records", "100")
///     .set("connection.url", "postgres://db/orders")
///     .build()?;
/// assert_eq!(config.consumer_properties().get("max.poll.records"), Some("100"));
/// assert_eq!(config.connector_properties().get("errors.tolerance"), Some("all"));
/// assert_eq!(config.transforms()[0].alias(), "route");
/// # Ok::<(), kafka_share_sink::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ConnectorConfigBuilder {
    worker: Properties,
    connector: Properties,
}

impl ConnectorConfigBuilder {
    pub(crate) fn new(name: impl Into<String>) -> Self {
        let mut connector = Properties::new();
        connector.insert(NAME, name);
        Self {
            worker: Properties::new(),
            connector,
        }
    }

    /// The worker config to resolve against (empty by default). Replaces the worker
    /// settings written so far, such as [`bootstrap_servers`](Self::bootstrap_servers).
    pub fn worker(mut self, worker: Properties) -> Self {
        self.worker = worker;
        self
    }

    /// Any connector key, written as is.
    pub fn set(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.connector.insert(key, value);
        self
    }

    /// `topics`.
    pub fn topics<I, S>(self, topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let list = join(topics);
        self.set(super::keys::TOPICS, list)
    }

    /// The worker's `bootstrap.servers` (comma-separated `host:port`), which the consumer
    /// and the dead-letter queue clients use unless they override it.
    pub fn bootstrap_servers(mut self, servers: impl Into<String>) -> Self {
        self.worker.insert(BOOTSTRAP_SERVERS, servers);
        self
    }

    /// `share.group.id` (default `connect-<name>`).
    pub fn share_group_id(self, group: impl Into<String>) -> Self {
        self.set(SHARE_GROUP_ID, group)
    }

    /// `share.acknowledgement.mode` (default explicit).
    pub fn acknowledgement_mode(self, mode: AcknowledgementMode) -> Self {
        self.set(ACKNOWLEDGEMENT_MODE, mode.to_string())
    }

    /// `ack.policy`.
    pub fn ack_policy(self, policy: AckPolicy) -> Self {
        self.set(ACK_POLICY, policy.to_string())
    }

    /// `put.retriable.policy`.
    pub fn put_retriable_policy(self, policy: PutRetriablePolicy) -> Self {
        self.set(PUT_RETRIABLE_POLICY, policy.to_string())
    }

    /// `max.delivery.attempts` (1 to 10); see
    /// [`ConnectorConfig::max_delivery_attempts`].
    pub fn max_delivery_attempts(self, attempts: u16) -> Self {
        self.set(MAX_DELIVERY_ATTEMPTS, attempts.to_string())
    }

    /// `redelivery.backoff.ms` and `redelivery.backoff.max.ms`; see
    /// [`ConnectorConfig::redelivery_backoff`].
    pub fn redelivery_backoff(self, initial: Duration, max: Duration) -> Self {
        self.set(super::keys::REDELIVERY_BACKOFF_MS, millis(initial))
            .set(super::keys::REDELIVERY_BACKOFF_MAX_MS, millis(max))
    }

    /// `ack.flush.max.records` and `ack.flush.max.bytes` (0: no bound); see
    /// [`ConnectorConfig::max_awaiting_flush`].
    pub fn max_awaiting_flush(self, records: u32, bytes: u64) -> Self {
        self.set(ACK_FLUSH_MAX_RECORDS, records.to_string())
            .set(ACK_FLUSH_MAX_BYTES, bytes.to_string())
    }

    /// `share.dead.letter.queue.required`; see
    /// [`ConnectorConfig::require_broker_dead_letter_queue`].
    pub fn require_broker_dead_letter_queue(self, required: bool) -> Self {
        self.set(SHARE_DLQ_REQUIRED, required.to_string())
    }

    /// `share.lag.refresh.interval.ms` (zero: off); see
    /// [`ConnectorConfig::lag_refresh_interval`].
    pub fn lag_refresh_interval(self, interval: Duration) -> Self {
        self.set(super::keys::SHARE_LAG_REFRESH_INTERVAL_MS, millis(interval))
    }

    /// `tasks.max`.
    pub fn tasks_max(self, tasks: u32) -> Self {
        self.set(TASKS_MAX, tasks.to_string())
    }

    /// `task.id`.
    pub fn task_id(self, id: u32) -> Self {
        self.set(TASK_ID, id.to_string())
    }

    /// `offset.flush.interval.ms`: how often acknowledgements are committed.
    pub fn commit_interval(self, interval: Duration) -> Self {
        self.set(OFFSET_FLUSH_INTERVAL_MS, millis(interval))
    }

    /// `offset.flush.timeout.ms`: how long a commit may take.
    pub fn commit_timeout(self, timeout: Duration) -> Self {
        self.set(OFFSET_FLUSH_TIMEOUT_MS, millis(timeout))
    }

    /// `errors.tolerance`.
    pub fn errors_tolerance(self, tolerance: ErrorTolerance) -> Self {
        self.set(ERRORS_TOLERANCE, tolerance.to_string())
    }

    /// `errors.retry.timeout`; `None` retries forever (`-1`).
    pub fn errors_retry_timeout(self, timeout: Option<Duration>) -> Self {
        let value = timeout.map_or_else(|| "-1".to_owned(), millis);
        self.set(ERRORS_RETRY_TIMEOUT, value)
    }

    /// `errors.retry.delay.max.ms`.
    pub fn errors_retry_delay_max(self, max: Duration) -> Self {
        self.set(ERRORS_RETRY_DELAY_MAX_MS, millis(max))
    }

    /// `errors.log.enable` and `errors.log.include.messages`.
    pub fn errors_log(self, enable: bool, include_messages: bool) -> Self {
        self.set(ERRORS_LOG_ENABLE, enable.to_string())
            .set(ERRORS_LOG_INCLUDE_MESSAGES, include_messages.to_string())
    }

    /// `errors.deadletterqueue.topic.name`.
    pub fn dead_letter_queue_topic(self, topic: impl Into<String>) -> Self {
        self.set(DLQ_TOPIC, topic)
    }

    /// `errors.deadletterqueue.topic.replication.factor`.
    pub fn dead_letter_queue_replication_factor(self, factor: i16) -> Self {
        self.set(DLQ_REPLICATION_FACTOR, factor.to_string())
    }

    /// `errors.deadletterqueue.context.headers.enable`.
    pub fn dead_letter_queue_context_headers(self, enable: bool) -> Self {
        self.set(DLQ_CONTEXT_HEADERS, enable.to_string())
    }

    /// `key.converter` and its settings (`key.converter.*`).
    pub fn key_converter(self, class: impl Into<String>, configs: &[(&str, &str)]) -> Self {
        self.plugin(KEY_CONVERTER, class, configs)
    }

    /// `value.converter` and its settings (`value.converter.*`).
    pub fn value_converter(self, class: impl Into<String>, configs: &[(&str, &str)]) -> Self {
        self.plugin(VALUE_CONVERTER, class, configs)
    }

    /// `header.converter` and its settings (`header.converter.*`).
    pub fn header_converter(self, class: impl Into<String>, configs: &[(&str, &str)]) -> Self {
        self.plugin(HEADER_CONVERTER, class, configs)
    }

    /// Appends `alias` to `transforms`, with `transforms.<alias>.type` and its settings.
    pub fn transform(
        self,
        alias: &str,
        class: impl Into<String>,
        configs: &[(&str, &str)],
    ) -> Self {
        self.append(TRANSFORMS, alias)
            .set(format!("{TRANSFORMS}.{alias}.type"), class)
            .plugin_configs(&format!("{TRANSFORMS}.{alias}"), configs)
    }

    /// Applies the transform `alias` only to records matching the predicate `predicate`
    /// (`transforms.<alias>.predicate`), or not matching it when `negate`
    /// (`transforms.<alias>.negate`).
    pub fn transform_predicate(self, alias: &str, predicate: &str, negate: bool) -> Self {
        self.set(format!("{TRANSFORMS}.{alias}.predicate"), predicate)
            .set(format!("{TRANSFORMS}.{alias}.negate"), negate.to_string())
    }

    /// Appends `alias` to `predicates`, with `predicates.<alias>.type` and its settings.
    pub fn predicate(
        self,
        alias: &str,
        class: impl Into<String>,
        configs: &[(&str, &str)],
    ) -> Self {
        self.append(PREDICATES, alias)
            .set(format!("{PREDICATES}.{alias}.type"), class)
            .plugin_configs(&format!("{PREDICATES}.{alias}"), configs)
    }

    /// `consumer.override.<key>`: a share-consumer setting for this connector.
    pub fn consumer_override(self, key: &str, value: impl Into<String>) -> Self {
        self.set(format!("{CONSUMER_OVERRIDE_PREFIX}{key}"), value)
    }

    /// `producer.override.<key>`: a setting of the dead-letter queue producer.
    pub fn producer_override(self, key: &str, value: impl Into<String>) -> Self {
        self.set(format!("{PRODUCER_OVERRIDE_PREFIX}{key}"), value)
    }

    /// `admin.override.<key>`: a setting of the dead-letter queue admin client.
    pub fn admin_override(self, key: &str, value: impl Into<String>) -> Self {
        self.set(format!("{ADMIN_OVERRIDE_PREFIX}{key}"), value)
    }

    /// The connector settings written so far.
    pub fn connector_properties(&self) -> &Properties {
        &self.connector
    }

    /// The worker settings written so far.
    pub fn worker_properties(&self) -> &Properties {
        &self.worker
    }

    /// Resolves and checks the settings, exactly as [`ConnectorConfig::resolve`] does.
    pub fn build(&self) -> Result<ConnectorConfig, ConfigError> {
        ConnectorConfig::resolve(&self.worker, &self.connector)
    }

    fn plugin(self, key: &str, class: impl Into<String>, configs: &[(&str, &str)]) -> Self {
        self.set(key, class).plugin_configs(key, configs)
    }

    fn plugin_configs(mut self, prefix: &str, configs: &[(&str, &str)]) -> Self {
        for (k, v) in configs {
            self.connector.insert(format!("{prefix}.{k}"), *v);
        }
        self
    }

    fn append(mut self, key: &str, alias: &str) -> Self {
        let list = match self.connector.get(key).map(str::trim) {
            Some(existing) if !existing.is_empty() => format!("{existing},{alias}"),
            _ => alias.to_owned(),
        };
        self.connector.insert(key, list);
        self
    }
}

fn join<I, S>(items: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    items
        .into_iter()
        .map(|s| s.as_ref().to_owned())
        .collect::<Vec<_>>()
        .join(",")
}

/// Whole milliseconds, at most Kafka's largest `LONG` (what the keys written with it take):
/// a longer duration, such as [`Duration::MAX`], means the same, forever in practice.
fn millis(d: Duration) -> String {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).to_string()
}
