//! [`ConnectorConfig`]: a worker config and a connector config, resolved and checked.

use std::time::Duration;

use crate::consumer::AcknowledgementMode;
use crate::convert::Converters;
use crate::driver::{
    AckPolicy, CommitPolicy, DEFAULT_COMMIT_RECORDS, DriverConfig, ErrorHandling, ErrorTolerance,
    PutRetriablePolicy,
};
use crate::kafka::KafkaShareConsumerConfig;
use crate::kafka::net::backoff::DEFAULT_RECONNECT_BACKOFF;
use crate::plugins::{ChainStageSpec, Plugins};
use crate::task::TaskConfig;

use super::builder::ConnectorConfigBuilder;
use super::client::{Clients, ConsumerSettings};
use super::dead_letter_queue::DeadLetterQueueSettings;
use super::error::ConfigError;
use super::keys::{
    ACK_FLUSH_MAX_BYTES, ACK_FLUSH_MAX_RECORDS, ACK_POLICY, ADMIN_OVERRIDE_PREFIX, ADMIN_PREFIX,
    BOOTSTRAP_SERVERS, CONNECTOR_KEYS, CONSUMER_OVERRIDE_PREFIX, CONSUMER_PREFIX,
    DLQ_CONTEXT_HEADERS, DLQ_REPLICATION_FACTOR, DLQ_TOPIC, ERRORS_LOG_ENABLE,
    ERRORS_LOG_INCLUDE_MESSAGES, ERRORS_RETRY_DELAY_MAX_MS, ERRORS_RETRY_TIMEOUT, ERRORS_TOLERANCE,
    HEADER_CONVERTER, KEY_CONVERTER, MAX_DELIVERY_ATTEMPTS, NAME, OFFSET_FLUSH_INTERVAL_MS,
    OFFSET_FLUSH_TIMEOUT_MS, PRODUCER_OVERRIDE_PREFIX, PRODUCER_PREFIX, PUT_RETRIABLE_POLICY,
    SHARE_DLQ_REQUIRED, TASK_ID, TASKS_MAX, TOPICS, TOPICS_REGEX, VALUE_CONVERTER,
};
use super::override_policy::ClientOverridePolicy;
use super::plugin::{self, Chain, PluginSpec, PredicateSpec, TransformSpec};
use super::properties::Properties;
use super::secret::shown_key;
use super::value;

/// Connect's default `offset.flush.timeout.ms`.
const DEFAULT_COMMIT_TIMEOUT: Duration = Duration::from_millis(5000);

/// The configuration of one sink connector task: a Kafka Connect worker config and connector
/// config, resolved as Connect resolves them and checked for a share group.
///
/// # Resolution
///
/// - **Consumer.** The worker's `bootstrap.servers`, then the worker's `consumer.*`
///   settings, then the connector's `consumer.override.*` ones (prefixes removed), as
///   [`consumer_properties`](Self::consumer_properties) shows them.
///   - `group.protocol` (worker `consumer.group.protocol`, connector
///     `consumer.override.group.protocol`) is the Connect-side switch to share groups:
///     `share` (any case, also the default) is accepted and not passed on; any other value
///     is refused, as this crate only drives share groups.
///   - The share group is `share.group.id`, else `group.id` from the consumer settings,
///     else `connect-<name>`. The acknowledgement mode is `share.acknowledgement.mode`
///     (`explicit` by default, `implicit`), which the consumer settings may also set. A
///     `consumer.override.*` value that disagrees with the connector key is an error.
///   - The settings a share consumer refuses (`auto.offset.reset`, `enable.auto.commit`,
///     `auto.commit.interval.ms`, `group.instance.id`, `isolation.level`,
///     `partition.assignment.strategy`, `interceptor.classes`, `session.timeout.ms`,
///     `heartbeat.interval.ms`, `group.remote.assignor`) are errors that say what to use
///     instead, wherever they would reach the consumer.
/// - **TLS and SASL** with Java's keys (`security.protocol`, `ssl.*`, `sasl.*`; see
///   [`Security::from_properties`](crate::Security::from_properties)) are read from the
///   consumer settings and from the producer settings, and checked here: an inconsistent
///   combination (SASL without a mechanism, a client key without its certificate chain, a
///   JKS store, ...) is an error naming the key as written. Certificate and key files are
///   read when a client connects.
/// - **Dead-letter queue clients.** See [`DeadLetterQueueSettings`].
/// - **Override policy.** The worker's `connector.client.config.override.policy` (see
///   [`ClientOverridePolicy`]) is checked for every `consumer.override.*`,
///   `producer.override.*` and `admin.override.*` key.
/// - **Converters.** `key.converter`, `value.converter` and `header.converter`: the
///   connector's class wins, else the worker's, else
///   [`DEFAULT_CONVERTER`](super::DEFAULT_CONVERTER) (`ByteArrayConverter`: raw bytes pass
///   through; Connect's worker defaults `header.converter` to `SimpleHeaderConverter`
///   instead). A converter's settings come from the `<key>.` prefix of the config that
///   named its class.
/// - **Transforms and predicates** as Connect reads them (see [`TransformSpec`]).
/// - **`offset.flush.interval.ms` and `offset.flush.timeout.ms`**, worker settings in
///   Connect, may also be set by the connector, whose value wins.
///
/// Every key ending in `.ms`, in either config, must be a whole number. `topics.regex` is
/// refused: share consumers subscribe to a fixed topic list.
///
/// Keys this crate does not know (connector keys outside Connect's and ours, consumer keys
/// outside the Java share consumer's) are logged with `tracing::warn!` and listed by
/// [`unknown_keys`](Self::unknown_keys); a sink task's own settings show up there too.
///
/// Secret values (`sasl.jaas.config`, `*.password`, `basic.auth.user.info`, keys containing
/// `secret`) are shown as `[redacted]` in `Debug` and in errors, and never logged.
///
/// ```
/// use kafka_share_sink::{AckPolicy, ConnectorConfig, ErrorTolerance, Properties};
///
/// let worker = Properties::parse(
///     "bootstrap.servers=k1:9092,k2:9092\n\
///      consumer.max.poll.records=200\n\
///      value.converter=org.apache.kafka.connect.json.JsonConverter\n\
///      value.converter.schemas.enable=false\n",
/// )?;
/// let connector = Properties::parse(
///     "name=orders-sink\n\
///      topics=orders, payments\n\
///      errors.tolerance=all\n\
///      errors.deadletterqueue.topic.name=orders-dlq\n\
///      consumer.override.max.poll.records=50\n\
///      ack.policy=after.flush\n",
/// )?;
/// let config = ConnectorConfig::resolve(&worker, &connector)?;
/// assert_eq!(config.topics(), ["orders", "payments"]);
/// assert_eq!(config.share_group_id(), "connect-orders-sink");
/// assert_eq!(config.consumer_properties().get("max.poll.records"), Some("50"));
/// assert_eq!(config.value_converter().configs()["schemas.enable"], "false");
/// assert_eq!(config.error_handling().tolerance_value(), ErrorTolerance::All);
/// assert_eq!(config.ack_policy(), AckPolicy::AfterFlush);
/// let consumer = config.kafka_consumer_config()?;
/// assert_eq!(consumer.group_id(), "connect-orders-sink");
/// # Ok::<(), kafka_share_sink::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorConfig {
    name: String,
    topics: Vec<String>,
    tasks_max: u32,
    task_id: u32,
    share_group_id: String,
    acknowledgement_mode: AcknowledgementMode,
    ack_policy: AckPolicy,
    put_retriable_policy: PutRetriablePolicy,
    max_delivery_attempts: Option<u16>,
    redelivery_backoff: (Duration, Duration),
    flush_max_records: Option<i64>,
    flush_max_bytes: Option<i64>,
    require_broker_dead_letter_queue: bool,
    lag_refresh_interval: Duration,
    dead_letter_breaker: crate::dlq::DeadLetterBreaker,
    error_handling: ErrorHandling,
    dead_letter_queue: Option<DeadLetterQueueSettings>,
    commit_interval: Option<Duration>,
    commit_timeout: Duration,
    key_converter: PluginSpec,
    value_converter: PluginSpec,
    header_converter: PluginSpec,
    transforms: Vec<TransformSpec>,
    predicates: Vec<PredicateSpec>,
    override_policy: ClientOverridePolicy,
    consumer: Properties,
    consumer_settings: ConsumerSettings,
    connector: Properties,
    unknown_keys: Vec<String>,
}

impl ConnectorConfig {
    /// Resolves a connector config against the worker config it runs in; see the type's
    /// documentation for the rules. The first problem found is the error.
    pub fn resolve(worker: &Properties, connector: &Properties) -> Result<Self, ConfigError> {
        for (key, raw) in worker.iter().chain(connector.iter()) {
            value::check_ms_key(key, raw)?;
        }
        let name = name(connector)?;
        let topics = topics(connector)?;
        let override_policy = ClientOverridePolicy::from_worker(worker)?;
        let tasks_max = number(connector, TASKS_MAX, 1, i64::from(i32::MAX))?.unwrap_or(1);
        let task_id = number(connector, TASK_ID, 0, i64::from(i32::MAX))?.unwrap_or(0);
        let tasks_max = u32::try_from(tasks_max).unwrap_or(u32::MAX);
        let task_id = u32::try_from(task_id).unwrap_or(u32::MAX);

        let clients = Clients::resolve(worker, connector, &override_policy, &name, task_id)?;

        let error_handling = error_handling(connector)?;
        let dead_letter_queue = match connector.get(DLQ_TOPIC).map(str::trim) {
            None | Some("") => None,
            Some(topic) => {
                if topics.iter().any(|t| t == topic) {
                    return Err(ConfigError::DeadLetterQueueIsSource {
                        topic: topic.to_owned(),
                        topics,
                    });
                }
                Some(DeadLetterQueueSettings {
                    topic: topic.to_owned(),
                    replication_factor: replication_factor(connector)?,
                    context_headers: flag(connector, DLQ_CONTEXT_HEADERS)?,
                    producer: clients.producer.clone(),
                    admin: clients.admin.clone(),
                    security: clients.producer_security.clone(),
                })
            }
        };
        if dead_letter_queue.is_some() {
            for key in &clients.unused_by_dead_letter_queue {
                tracing::warn!(
                    connector = %name,
                    key = %key,
                    "not used by the dead-letter queue, which takes only bootstrap.servers, \
                     delivery.timeout.ms and the security settings from the producer settings, \
                     and creates its topic over the producer's connection: it has no effect"
                );
            }
        }
        if dead_letter_queue.is_none() {
            // Checked even without a queue, so a typo does not wait for the day it is set.
            replication_factor(connector)?;
            flag(connector, DLQ_CONTEXT_HEADERS)?;
        }

        let ack_policy = policy(connector, ACK_POLICY, "`after.put` or `after.flush`")?;
        let put_retriable_policy = policy(
            connector,
            PUT_RETRIABLE_POLICY,
            "`release` or `retry.in.place`",
        )?;
        let max_delivery_attempts = number(connector, MAX_DELIVERY_ATTEMPTS, 1, 10)?
            .map(|n| u16::try_from(n).unwrap_or(u16::MAX));
        let redelivery_backoff = super::redelivery_backoff::redelivery_backoff(connector)?;
        let flush_max_records = number(connector, ACK_FLUSH_MAX_RECORDS, 0, value::INT_MAX)?;
        let flush_max_bytes = number(connector, ACK_FLUSH_MAX_BYTES, 0, value::LONG_MAX)?;
        let require_broker_dead_letter_queue = flag(connector, SHARE_DLQ_REQUIRED)?;
        let lag_refresh_interval = connector
            .get(super::keys::SHARE_LAG_REFRESH_INTERVAL_MS)
            .map(|raw| {
                value::millis(
                    super::keys::SHARE_LAG_REFRESH_INTERVAL_MS,
                    raw,
                    0,
                    value::LONG_MAX,
                )
            })
            .transpose()?
            .unwrap_or(crate::lag::DEFAULT_LAG_REFRESH_INTERVAL);
        let dead_letter_breaker = super::dead_letter_breaker::dead_letter_breaker(connector)?;
        let flush_setting = |key: &str| connector.get(key).or_else(|| worker.get(key));
        let commit_interval = flush_setting(OFFSET_FLUSH_INTERVAL_MS)
            .map(|raw| value::millis(OFFSET_FLUSH_INTERVAL_MS, raw, 0, value::LONG_MAX))
            .transpose()?;
        let commit_timeout = flush_setting(OFFSET_FLUSH_TIMEOUT_MS)
            .map(|raw| value::millis(OFFSET_FLUSH_TIMEOUT_MS, raw, 1, value::LONG_MAX))
            .transpose()?
            .unwrap_or(DEFAULT_COMMIT_TIMEOUT);

        let key_converter = plugin::converter(KEY_CONVERTER, worker, connector);
        let value_converter = plugin::converter(VALUE_CONVERTER, worker, connector);
        let header_converter = plugin::converter(HEADER_CONVERTER, worker, connector);
        let chain = Chain::parse(connector)?;

        let mut unknown_keys: Vec<String> = connector
            .iter()
            .map(|(key, _)| key)
            .filter(|key| !is_known_connector_key(key, &chain))
            .map(str::to_owned)
            .collect();
        for key in &clients.unused {
            tracing::warn!(
                connector = %name,
                key = %key,
                "consumer setting accepted for Java compatibility but not used by the native \
                 share consumer: it has no effect"
            );
        }
        unknown_keys.extend(clients.unknown);
        unknown_keys.sort();
        unknown_keys.dedup();
        for key in &unknown_keys {
            let hint = misplaced_client_key(key, connector).unwrap_or(
                "a typo? (a sink task may still read its own settings from the task config)",
            );
            tracing::warn!(
                connector = %name,
                key = %shown_key(key),
                "unknown config key, not used by the share sink runtime: {hint}"
            );
        }

        Ok(Self {
            name,
            topics,
            tasks_max,
            task_id,
            share_group_id: clients.group_id,
            acknowledgement_mode: clients.acknowledgement_mode,
            ack_policy,
            put_retriable_policy,
            max_delivery_attempts,
            redelivery_backoff,
            flush_max_records,
            flush_max_bytes,
            require_broker_dead_letter_queue,
            lag_refresh_interval,
            dead_letter_breaker,
            error_handling,
            dead_letter_queue,
            commit_interval,
            commit_timeout,
            key_converter,
            value_converter,
            header_converter,
            transforms: chain.transforms,
            predicates: chain.predicates,
            override_policy,
            consumer: clients.consumer,
            consumer_settings: clients.consumer_settings,
            connector: connector.clone(),
            unknown_keys,
        })
    }

    /// Resolves a connector config alone (an empty worker config): no worker
    /// `bootstrap.servers`, so the consumer needs `consumer.override.bootstrap.servers`
    /// before [`kafka_consumer_config`](Self::kafka_consumer_config) can be used.
    ///
    /// ```
    /// use kafka_share_sink::{ConnectorConfig, Properties};
    /// let connector: Properties = [("name", "s"), ("topics", "a,,b,a")].into_iter().collect();
    /// let config = ConnectorConfig::from_properties(&connector)?;
    /// assert_eq!(config.topics(), ["a", "b"]);
    /// assert!(config.kafka_consumer_config().is_err()); // no bootstrap.servers
    /// # Ok::<(), kafka_share_sink::ConfigError>(())
    /// ```
    pub fn from_properties(connector: &Properties) -> Result<Self, ConfigError> {
        Self::resolve(&Properties::new(), connector)
    }

    /// A typed builder for the connector `name`, which writes the same string keys and
    /// checks them the same way; see [`ConnectorConfigBuilder`].
    pub fn builder(name: impl Into<String>) -> ConnectorConfigBuilder {
        ConnectorConfigBuilder::new(name)
    }

    /// `name`: the connector's name (trimmed).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `topics`: the topics to drain, without empty entries or repeats.
    pub fn topics(&self) -> &[String] {
        &self.topics
    }

    /// `tasks.max` (default 1).
    pub fn tasks_max(&self) -> u32 {
        self.tasks_max
    }

    /// `task.id` (default 0): this task's number, used in client ids and dead-letter
    /// headers.
    pub fn task_id(&self) -> u32 {
        self.task_id
    }

    /// The share group: `share.group.id`, else the consumer's `group.id`, else
    /// `connect-<name>`.
    pub fn share_group_id(&self) -> &str {
        &self.share_group_id
    }

    /// `share.acknowledgement.mode` (default explicit).
    pub fn acknowledgement_mode(&self) -> AcknowledgementMode {
        self.acknowledgement_mode
    }

    /// `ack.policy` (default `after.put`).
    pub fn ack_policy(&self) -> AckPolicy {
        self.ack_policy
    }

    /// `put.retriable.policy` (default `release`).
    pub fn put_retriable_policy(&self) -> PutRetriablePolicy {
        self.put_retriable_policy
    }

    /// `max.delivery.attempts` (1 to 10, unset by default): a record whose `put` fails on
    /// this delivery or a later one goes to the dead-letter queue (when one is set) and is
    /// rejected, instead of being released again. Keep it below the group's
    /// `share.delivery.count.limit` (default 5), so the driver routes a poison record to the
    /// dead-letter queue before the broker archives it. `None` leaves it to the broker.
    pub fn max_delivery_attempts(&self) -> Option<u16> {
        self.max_delivery_attempts
    }

    /// `redelivery.backoff.ms` and `redelivery.backoff.max.ms` (defaults 3000 and 60000; 0
    /// turns the backoff off): how long a batch whose `put` failed with a retriable error is
    /// held before it is released, doubled per delivery up to the cap; see
    /// [`DriverConfig::redelivery_backoff`]. `redelivery.backoff.ms` set alone above the
    /// default cap raises the cap to it; a cap set below it is an error.
    pub fn redelivery_backoff(&self) -> (Duration, Duration) {
        self.redelivery_backoff
    }

    /// `ack.flush.max.records` and `ack.flush.max.bytes` (defaults 10,000 and 64 MiB; 0: no
    /// bound): how much written data may wait for a flush under `ack.policy=after.flush`
    /// before the driver stops polling and asks the task to flush; see
    /// [`DriverConfig::max_awaiting_flush`].
    pub fn max_awaiting_flush(&self) -> (Option<u64>, Option<u64>) {
        let unsigned = |n: Option<i64>| n.and_then(|n| u64::try_from(n).ok());
        (
            unsigned(self.flush_max_records),
            unsigned(self.flush_max_bytes),
        )
    }

    /// `share.dead.letter.queue.required` (`true` or `false`, default false): whether the
    /// share group must have a dead-letter queue of the broker's own (KIP-1191, Kafka 4.4:
    /// the group config `errors.deadletterqueue.topic.name`, see
    /// [`KafkaAdmin::set_share_group_dead_letter_queue`](crate::KafkaAdmin::set_share_group_dead_letter_queue)).
    ///
    /// Records whose deliveries run out without ACCEPT or REJECT (a sink process that dies,
    /// a lock that expires) are archived by the broker: without a broker dead-letter queue
    /// they are gone without a trace. With `true` the task refuses to start when the
    /// consumer reports the group has no such queue
    /// ([`BrokerDeadLetterQueue::None`](crate::BrokerDeadLetterQueue::None)) or cannot tell;
    /// with `false` it logs a warning and runs. See
    /// [`DriverConfig::require_broker_dead_letter_queue`].
    pub fn require_broker_dead_letter_queue(&self) -> bool {
        self.require_broker_dead_letter_queue
    }

    /// `share.lag.refresh.interval.ms` (default 10000; 0 turns it off): how often the share
    /// group's lag is read in the background; see [`DriverConfig::lag_refresh_interval`]
    /// and [`lag`](crate::lag).
    pub fn lag_refresh_interval(&self) -> Duration {
        self.lag_refresh_interval
    }

    /// The dead-letter circuit breaker (`errors.deadletterqueue.breaker.max.records`,
    /// `.max.ratio`, `.min.records`, `.window.ms`; see
    /// [`DeadLetterBreaker`](crate::DeadLetterBreaker) for what they bound and their defaults).
    ///
    /// ```
    /// use kafka_share_sink::{ConnectorConfig, Properties};
    /// let connector: Properties = [
    ///     ("name", "s"),
    ///     ("topics", "t"),
    ///     ("errors.deadletterqueue.breaker.max.records", "500"),
    ///     ("errors.deadletterqueue.breaker.window.ms", "60000"),
    /// ]
    /// .into_iter()
    /// .collect();
    /// let config = ConnectorConfig::from_properties(&connector)?;
    /// assert_eq!(config.dead_letter_breaker().max_records_value(), Some(500));
    /// # Ok::<(), kafka_share_sink::ConfigError>(())
    /// ```
    pub fn dead_letter_breaker(&self) -> crate::dlq::DeadLetterBreaker {
        self.dead_letter_breaker
    }

    /// `errors.tolerance`, `errors.retry.timeout` (`-1` is forever), `errors.retry.delay.max.ms`,
    /// `errors.log.enable` and `errors.log.include.messages`, with Connect's defaults.
    pub fn error_handling(&self) -> ErrorHandling {
        self.error_handling
    }

    /// The dead-letter queue, when `errors.deadletterqueue.topic.name` is set.
    pub fn dead_letter_queue(&self) -> Option<&DeadLetterQueueSettings> {
        self.dead_letter_queue.as_ref()
    }

    /// `offset.flush.interval.ms`: how often acknowledgements are committed; `None` (unset)
    /// is the driver's default, once a second. Either way the driver also commits every
    /// [`DEFAULT_COMMIT_RECORDS`] records.
    pub fn commit_interval(&self) -> Option<Duration> {
        self.commit_interval
    }

    /// `offset.flush.timeout.ms`: how long a commit may take (default 5000 ms, Connect's
    /// default; a [`DriverConfig`] built without this crate's config waits 60 s).
    pub fn commit_timeout(&self) -> Duration {
        self.commit_timeout
    }

    /// `key.converter` and its settings.
    pub fn key_converter(&self) -> &PluginSpec {
        &self.key_converter
    }

    /// `value.converter` and its settings.
    pub fn value_converter(&self) -> &PluginSpec {
        &self.value_converter
    }

    /// `header.converter` and its settings.
    pub fn header_converter(&self) -> &PluginSpec {
        &self.header_converter
    }

    /// The transform chain, in the order of `transforms`.
    pub fn transforms(&self) -> &[TransformSpec] {
        &self.transforms
    }

    /// The predicates, in the order of `predicates`.
    pub fn predicates(&self) -> &[PredicateSpec] {
        &self.predicates
    }

    /// The worker's client override policy.
    pub fn override_policy(&self) -> &ClientOverridePolicy {
        &self.override_policy
    }

    /// The share consumer's settings, with Java's names: `bootstrap.servers` (the worker's,
    /// unless a consumer setting names its own), `group.id` (the share group),
    /// `client.id` (default `connector-consumer-<name>-<task.id>`),
    /// `share.acknowledgement.mode`, then the worker's `consumer.*` and the connector's
    /// `consumer.override.*` settings, without `group.protocol`.
    pub fn consumer_properties(&self) -> &Properties {
        &self.consumer
    }

    /// The native share consumer's config: `bootstrap.servers` (required here), the share
    /// group, `client.id`, the acknowledgement mode, the security settings
    /// (`security.protocol`, `ssl.*`, `sasl.*`), and `max.poll.records`,
    /// `fetch.min.bytes`, `fetch.max.bytes`, `fetch.max.wait.ms`, `request.timeout.ms` and
    /// `socket.connection.setup.timeout.ms`, `reconnect.backoff.ms` and
    /// `reconnect.backoff.max.ms` (`reconnect.backoff.ms` alone sets both, as in Java's
    /// client) when set. Other consumer settings are not used by
    /// the native consumer yet.
    pub fn kafka_consumer_config(&self) -> Result<KafkaShareConsumerConfig, ConfigError> {
        let bootstrap = self
            .consumer
            .get(BOOTSTRAP_SERVERS)
            .map(str::trim)
            .filter(|servers| !servers.is_empty())
            .ok_or_else(|| {
                ConfigError::missing(
                    BOOTSTRAP_SERVERS,
                    "set it in the worker config (or as `consumer.bootstrap.servers` there, or \
                     `consumer.override.bootstrap.servers` in the connector config)",
                )
            })?;
        let s = &self.consumer_settings;
        let mut config = KafkaShareConsumerConfig::new(bootstrap, self.share_group_id.clone())
            .client_id(s.client_id.clone())
            .acknowledgement_mode(self.acknowledgement_mode)
            .security(s.security.clone());
        if let Some(n) = s.max_poll_records {
            config = config.max_poll_records(n);
        }
        if let Some(mode) = s.share_acquire_mode {
            config = config.share_acquire_mode(mode);
        }
        if let Some(bytes) = s.max_partition_fetch_bytes {
            config = config.max_partition_fetch_bytes(bytes);
        }
        if let Some(n) = s.fetch_min_bytes {
            config = config.fetch_min_bytes(n);
        }
        if let Some(n) = s.fetch_max_bytes {
            config = config.fetch_max_bytes(n);
        }
        if let Some(d) = s.fetch_max_wait {
            config = config.fetch_max_wait(d);
        }
        if let Some(d) = s.request_timeout {
            config = config.request_timeout(d);
        }
        if let Some(d) = s.connect_timeout {
            config = config.connect_timeout(d);
        }
        // As Java's client: `reconnect.backoff.ms` alone also sets the maximum (no doubling).
        match (s.reconnect_backoff, s.reconnect_backoff_max) {
            (Some(initial), max) => {
                config = config.reconnect_backoff(initial, max.unwrap_or(initial));
            }
            (None, Some(max)) => {
                config = config.reconnect_backoff(DEFAULT_RECONNECT_BACKOFF, max);
            }
            (None, None) => {}
        }
        Ok(config)
    }

    /// The connector's settings, as given (secrets included: a task may need its own), for
    /// [`SinkTask::start`](crate::SinkTask::start).
    pub fn task_config(&self) -> TaskConfig {
        self.connector.iter().collect()
    }

    /// A driver config with everything this config decides: the topics, the task config,
    /// the commit interval (`offset.flush.interval.ms`, the driver's once a second when unset;
    /// also every [`DEFAULT_COMMIT_RECORDS`] records) and
    /// timeout, `ack.policy`, `put.retriable.policy`, `max.delivery.attempts`,
    /// `redelivery.backoff.ms` and `redelivery.backoff.max.ms`,
    /// `share.dead.letter.queue.required`, the `errors.*` settings (the dead-letter circuit
    /// breaker's included), and the connector name and
    /// task number.
    ///
    /// The converters and transforms are plugin objects, built from
    /// [`key_converter`](Self::key_converter), [`value_converter`](Self::value_converter),
    /// [`header_converter`](Self::header_converter) and [`chain_stages`](Self::chain_stages)
    /// with a [`Plugins`] registry and set with
    /// [`DriverConfig::converters`] and [`DriverConfig::transforms`].
    pub fn driver_config(&self) -> DriverConfig {
        let config = DriverConfig::new(self.topics.iter().cloned())
            .task_config(self.task_config())
            .commit_timeout(self.commit_timeout)
            .ack_policy(self.ack_policy)
            .put_retriable_policy(self.put_retriable_policy)
            .max_delivery_attempts(self.max_delivery_attempts)
            .redelivery_backoff(self.redelivery_backoff.0, self.redelivery_backoff.1)
            .require_broker_dead_letter_queue(self.require_broker_dead_letter_queue)
            .lag_refresh_interval(self.lag_refresh_interval)
            .dead_letter_breaker(self.dead_letter_breaker)
            .errors(self.error_handling)
            .connector(
                self.name.clone(),
                i32::try_from(self.task_id).unwrap_or(i32::MAX),
            );
        let defaults = DriverConfig::new(Vec::<String>::new());
        let (records, bytes) = self.max_awaiting_flush();
        let config = config.max_awaiting_flush(
            records.map_or(defaults.max_awaiting_flush_records, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            }),
            bytes.unwrap_or(defaults.max_awaiting_flush_bytes),
        );
        match self.commit_interval {
            // Also bounded in records, as the driver's default: what waits for a commit would
            // otherwise grow with the interval (Connect's default is a minute).
            Some(interval) => config
                .commit_policy(CommitPolicy::interval(interval).or_records(DEFAULT_COMMIT_RECORDS)),
            None => config,
        }
    }

    /// The transform chain as [`Plugins::build_chain`](crate::Plugins::build_chain) takes
    /// it: each transform, in order, with its predicate.
    ///
    /// ```
    /// use kafka_share_sink::{ConnectorConfig, Plugins};
    /// let config = ConnectorConfig::builder("s")
    ///     .topics(["t"])
    ///     .predicate("isTombstone", "RecordIsTombstone", &[])
    ///     .transform("drop", "Filter", &[])
    ///     .transform_predicate("drop", "isTombstone", false)
    ///     .build()?;
    /// let chain = Plugins::new().build_chain(config.chain_stages())?;
    /// # let _ = chain;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn chain_stages(&self) -> Vec<ChainStageSpec<'_>> {
        self.transforms
            .iter()
            .map(|t| {
                let stage = ChainStageSpec::new(t.alias(), t.class(), t.configs());
                let predicate = t
                    .predicate()
                    .and_then(|alias| self.predicates.iter().find(|p| p.alias() == alias));
                match predicate {
                    Some(p) => stage.with_predicate(p.alias(), p.class(), p.configs(), t.negate()),
                    None => stage,
                }
            })
            .collect()
    }

    /// [`driver_config`](Self::driver_config) with the converters and the transform chain
    /// built from their class names by `plugins` (Connect's names, short aliases, or your
    /// own registered types).
    ///
    /// ```
    /// use kafka_share_sink::{ConnectorConfig, Plugins};
    /// let config = ConnectorConfig::builder("orders-sink")
    ///     .topics(["orders"])
    ///     .value_converter("org.apache.kafka.connect.json.JsonConverter", &[("schemas.enable", "false")])
    ///     .transform("dropTombstones", "Filter", &[])
    ///     .predicate("isTombstone", "RecordIsTombstone", &[])
    ///     .transform_predicate("dropTombstones", "isTombstone", false)
    ///     .build()?;
    /// let driver_config = config.build_driver_config(&Plugins::new())?;
    /// # let _ = driver_config;
    /// # Ok::<(), kafka_share_sink::ConfigError>(())
    /// ```
    pub fn build_driver_config(&self, plugins: &Plugins) -> Result<DriverConfig, ConfigError> {
        let plugin_error = |key: &str| {
            let key = key.to_owned();
            move |source| ConfigError::Plugin { key, source }
        };
        let key = plugins
            .build_converter(
                self.key_converter.class(),
                self.key_converter.configs(),
                true,
            )
            .map_err(plugin_error("key.converter"))?;
        let value = plugins
            .build_converter(
                self.value_converter.class(),
                self.value_converter.configs(),
                false,
            )
            .map_err(plugin_error("value.converter"))?;
        let header = plugins
            .build_header_converter(
                self.header_converter.class(),
                self.header_converter.configs(),
            )
            .map_err(plugin_error("header.converter"))?;
        let transforms = plugins
            .build_chain(self.chain_stages())
            .map_err(plugin_error("transforms"))?;
        Ok(self
            .driver_config()
            .converters(Converters::new(key, value, header))
            .transforms(transforms))
    }

    /// The settings of the Kafka dead-letter queue, when `errors.deadletterqueue.topic.name`
    /// is set: its bootstrap servers (the producer's), topic, replication factor, Connect's
    /// producer client id, the producer's security settings, and `delivery.timeout.ms` from
    /// the producer settings.
    pub fn dead_letter_queue_config(
        &self,
    ) -> Result<Option<crate::dlq::KafkaDeadLetterQueueConfig>, ConfigError> {
        let Some(settings) = self.dead_letter_queue() else {
            return Ok(None);
        };
        let Some(bootstrap) = settings.bootstrap_servers() else {
            return Err(ConfigError::missing(
                "bootstrap.servers",
                "the dead-letter queue needs the cluster's address: set bootstrap.servers in the \
                 worker config, or producer.override.bootstrap.servers",
            ));
        };
        let task_id = i32::try_from(self.task_id).unwrap_or(i32::MAX);
        let mut config = crate::dlq::KafkaDeadLetterQueueConfig::new(bootstrap, settings.topic())
            .replication_factor(settings.replication_factor())
            .connector(self.name.clone(), task_id)
            .security(settings.security().clone());
        if let Some(raw) = settings.producer_properties().get("delivery.timeout.ms") {
            let timeout = value::millis("delivery.timeout.ms", raw, 1, value::INT_MAX)?;
            config = config.delivery_timeout(timeout);
        }
        Ok(Some(config))
    }

    /// The connector's settings, as given.
    pub fn connector_properties(&self) -> &Properties {
        &self.connector
    }

    /// The keys this crate does not know, sorted: connector keys as written, and consumer
    /// keys with their `consumer.` or `consumer.override.` prefix. Each was logged with
    /// `tracing::warn!`.
    pub fn unknown_keys(&self) -> &[String] {
        &self.unknown_keys
    }
}

fn is_known_connector_key(key: &str, chain: &Chain) -> bool {
    CONNECTOR_KEYS.contains(&key)
        || super::keys::is_exactly_once_key(key)
        || [
            CONSUMER_OVERRIDE_PREFIX,
            PRODUCER_OVERRIDE_PREFIX,
            ADMIN_OVERRIDE_PREFIX,
        ]
        .iter()
        .any(|prefix| key.starts_with(prefix))
        || [KEY_CONVERTER, VALUE_CONVERTER, HEADER_CONVERTER]
            .iter()
            .any(|converter| {
                key.strip_prefix(converter)
                    .is_some_and(|rest| rest.starts_with('.'))
            })
        || chain.owns(key)
}

/// A hint for a connector key that looks like a worker's client setting (`consumer.x`
/// instead of `consumer.override.x`).
fn misplaced_client_key(key: &str, connector: &Properties) -> Option<&'static str> {
    let top_level = connector.contains_key(key);
    let client = [CONSUMER_PREFIX, PRODUCER_PREFIX, ADMIN_PREFIX]
        .iter()
        .any(|prefix| key.starts_with(prefix));
    let overridden = [
        CONSUMER_OVERRIDE_PREFIX,
        PRODUCER_OVERRIDE_PREFIX,
        ADMIN_OVERRIDE_PREFIX,
    ]
    .iter()
    .any(|prefix| key.starts_with(prefix));
    (top_level && client && !overridden).then_some(
        "in a connector config, client settings take the `consumer.override.`, \
         `producer.override.` or `admin.override.` prefix (`consumer.`, `producer.` and \
         `admin.` are worker prefixes)",
    )
}

/// `name`: required, trimmed, not empty, no ISO control characters.
fn name(connector: &Properties) -> Result<String, ConfigError> {
    let raw = connector.get(NAME).ok_or_else(|| {
        ConfigError::missing(
            NAME,
            "name the connector; the name makes the default share group (`connect-<name>`) and the client ids",
        )
    })?;
    let name = raw.trim();
    if name.is_empty() {
        return Err(ConfigError::invalid(NAME, raw, "a non-empty name"));
    }
    if name.chars().any(char::is_control) {
        return Err(ConfigError::invalid(
            NAME,
            raw,
            "a name without ISO control characters",
        ));
    }
    Ok(name.to_owned())
}

/// `topics`, without empty entries or repeats (first occurrence kept); `topics.regex` is
/// refused.
fn topics(connector: &Properties) -> Result<Vec<String>, ConfigError> {
    if connector
        .get(TOPICS_REGEX)
        .is_some_and(|regex| !regex.trim().is_empty())
    {
        return Err(ConfigError::Unsupported {
            key: TOPICS_REGEX.to_owned(),
            reason: "share consumers subscribe to a fixed topic list; list the topics in `topics` \
                     instead"
                .to_owned(),
        });
    }
    let mut topics: Vec<String> = Vec::new();
    for topic in connector.get(TOPICS).map(value::list).unwrap_or_default() {
        if !topic.is_empty() && !topics.contains(&topic) {
            topics.push(topic);
        }
    }
    if topics.is_empty() {
        return Err(ConfigError::missing(
            TOPICS,
            "list the topics to drain, comma-separated",
        ));
    }
    Ok(topics)
}

/// An optional whole number in `min..=max`.
fn number(
    connector: &Properties,
    key: &str,
    min: i64,
    max: i64,
) -> Result<Option<i64>, ConfigError> {
    connector
        .get(key)
        .map(|raw| value::whole(key, raw, min, max, &value::range_text(min, max)))
        .transpose()
}

/// An optional boolean, false by default.
fn flag(connector: &Properties, key: &str) -> Result<bool, ConfigError> {
    connector
        .get(key)
        .map_or(Ok(false), |raw| value::boolean(key, raw))
}

/// A policy enum from its `FromStr`, default when unset.
fn policy<T>(connector: &Properties, key: &str, expected: &str) -> Result<T, ConfigError>
where
    T: std::str::FromStr + Default,
    T::Err: Into<crate::error::BoxError>,
{
    connector.get(key).map_or(Ok(T::default()), |raw| {
        raw.parse::<T>()
            .map_err(|e| ConfigError::invalid_because(key, raw, expected, e))
    })
}

fn replication_factor(connector: &Properties) -> Result<i16, ConfigError> {
    let Some(raw) = connector.get(DLQ_REPLICATION_FACTOR) else {
        return Ok(3);
    };
    let expected = "-1 (the broker's default) or a whole number from 1 to 32767";
    let factor = value::whole(
        DLQ_REPLICATION_FACTOR,
        raw,
        -1,
        i64::from(i16::MAX),
        expected,
    )?;
    if factor == 0 {
        return Err(ConfigError::invalid(DLQ_REPLICATION_FACTOR, raw, expected));
    }
    Ok(i16::try_from(factor).unwrap_or(i16::MAX))
}

fn error_handling(connector: &Properties) -> Result<ErrorHandling, ConfigError> {
    let tolerance: ErrorTolerance = policy(connector, ERRORS_TOLERANCE, "`none` or `all`")?;
    let mut errors = ErrorHandling::new().tolerance(tolerance);
    if let Some(raw) = connector.get(ERRORS_RETRY_TIMEOUT) {
        let ms = value::whole(
            ERRORS_RETRY_TIMEOUT,
            raw,
            -1,
            i64::MAX,
            "a whole number of milliseconds, 0 or more, or -1 to retry forever",
        )?;
        errors = errors.retry_timeout(u64::try_from(ms).ok().map(Duration::from_millis));
    }
    if let Some(raw) = connector.get(ERRORS_RETRY_DELAY_MAX_MS) {
        let max = value::millis(ERRORS_RETRY_DELAY_MAX_MS, raw, 0, value::LONG_MAX)?;
        errors = errors.retry_delay_max(max);
    }
    Ok(errors.log(
        flag(connector, ERRORS_LOG_ENABLE)?,
        flag(connector, ERRORS_LOG_INCLUDE_MESSAGES)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::ShareAcquireMode;

    fn props(pairs: &[(&str, &str)]) -> Properties {
        pairs.iter().copied().collect()
    }

    #[test]
    fn kafka_consumer_config_maps_the_java_settings() {
        let worker = props(&[
            ("bootstrap.servers", " k1:9092,k2:9092 "),
            ("consumer.fetch.max.wait.ms", "200"),
            ("consumer.max.poll.records", "999"),
        ]);
        let connector = props(&[
            ("name", "n"),
            ("topics", "t"),
            ("task.id", "2"),
            ("share.acknowledgement.mode", "implicit"),
            ("consumer.override.max.poll.records", "10"),
            ("consumer.override.share.acquire.mode", "record_limit"),
            ("consumer.override.max.partition.fetch.bytes", "65536"),
            ("consumer.override.fetch.min.bytes", "5"),
            ("consumer.override.fetch.max.bytes", "1000"),
            ("consumer.override.request.timeout.ms", "7000"),
            (
                "consumer.override.socket.connection.setup.timeout.ms",
                "3000",
            ),
        ]);
        let config = ConnectorConfig::resolve(&worker, &connector).unwrap();
        let c = config.kafka_consumer_config().unwrap();
        assert_eq!(c.bootstrap, "k1:9092,k2:9092");
        assert_eq!(c.group_id, "connect-n");
        assert_eq!(c.client_id, "connector-consumer-n-2");
        assert_eq!(c.max_poll_records.get(), 10);
        assert_eq!(c.fetch_min_bytes, 5);
        assert_eq!(c.fetch_max_bytes, 1000);
        assert_eq!(c.fetch_max_wait, Duration::from_millis(200));
        assert_eq!(c.request_timeout, Duration::from_secs(7));
        assert_eq!(c.connect_timeout, Duration::from_secs(3));
        assert_eq!(c.acknowledgement_mode, AcknowledgementMode::Implicit);
        assert_eq!(c.share_acquire_mode, ShareAcquireMode::RecordLimit);
        assert_eq!(c.max_partition_fetch_bytes, Some(65_536));
        // Not set: Java's defaults.
        assert_eq!(
            (c.reconnect_backoff.initial, c.reconnect_backoff.max),
            (Duration::from_millis(50), Duration::from_secs(1))
        );
    }

    #[test]
    fn the_reconnect_backoff_is_read_as_javas_client_reads_it() {
        let worker = props(&[("bootstrap.servers", "k:9092")]);
        let backoff = |pairs: &[(&str, &str)]| {
            let mut connector = vec![("name", "n"), ("topics", "t")];
            connector.extend_from_slice(pairs);
            let config = ConnectorConfig::resolve(&worker, &props(&connector)).unwrap();
            let c = config.kafka_consumer_config().unwrap();
            (c.reconnect_backoff.initial, c.reconnect_backoff.max)
        };
        let ms = Duration::from_millis;
        assert_eq!(
            backoff(&[
                ("consumer.override.reconnect.backoff.ms", "100"),
                ("consumer.override.reconnect.backoff.max.ms", "5000"),
            ]),
            (ms(100), ms(5000))
        );
        // The initial pause alone turns the doubling off.
        assert_eq!(
            backoff(&[("consumer.override.reconnect.backoff.ms", "200")]),
            (ms(200), ms(200))
        );
        assert_eq!(
            backoff(&[("consumer.override.reconnect.backoff.max.ms", "3000")]),
            (ms(50), ms(3000))
        );
        let connector = props(&[
            ("name", "n"),
            ("topics", "t"),
            ("consumer.override.reconnect.backoff.max.ms", "soon"),
        ]);
        let error = ConnectorConfig::resolve(&worker, &connector).unwrap_err();
        assert_eq!(
            error.key(),
            Some("consumer.override.reconnect.backoff.max.ms")
        );
    }

    #[test]
    fn an_unknown_share_acquire_mode_is_refused_naming_the_key() {
        let worker = props(&[("bootstrap.servers", "k:9092")]);
        let connector = props(&[
            ("name", "n"),
            ("topics", "t"),
            ("consumer.override.share.acquire.mode", "strict"),
        ]);
        let error = ConnectorConfig::resolve(&worker, &connector).unwrap_err();
        assert_eq!(error.key(), Some("consumer.override.share.acquire.mode"));
        assert!(error.to_string().contains("record_limit"), "{error}");
    }

    #[test]
    fn kafka_consumer_config_keeps_java_defaults_for_what_is_not_set() {
        let worker = props(&[("bootstrap.servers", "k:9092")]);
        let config =
            ConnectorConfig::resolve(&worker, &props(&[("name", "n"), ("topics", "t")])).unwrap();
        let c = config.kafka_consumer_config().unwrap();
        let java = KafkaShareConsumerConfig::new("k:9092", "connect-n");
        assert_eq!(c.max_poll_records, java.max_poll_records);
        assert_eq!(c.fetch_max_wait, java.fetch_max_wait);
        assert_eq!(c.acknowledgement_mode, AcknowledgementMode::Explicit);
        assert_eq!(c.share_acquire_mode, ShareAcquireMode::BatchOptimized);
    }

    #[test]
    fn driver_config_takes_the_commit_settings() {
        let connector = props(&[
            ("name", "n"),
            ("topics", "a,b"),
            ("offset.flush.interval.ms", "250"),
            ("offset.flush.timeout.ms", "9000"),
        ]);
        let driver = ConnectorConfig::from_properties(&connector)
            .unwrap()
            .driver_config();
        assert_eq!(
            driver.commit_policy,
            CommitPolicy::interval(Duration::from_millis(250)).or_records(DEFAULT_COMMIT_RECORDS)
        );
        assert_eq!(driver.commit_timeout, Duration::from_secs(9));
        assert_eq!(driver.task_config.get("topics"), Some("a,b"));
        assert_eq!(driver.connector_name, "n");
        let connector = props(&[
            ("name", "n"),
            ("topics", "a"),
            ("task.id", "7"),
            ("ack.policy", "after.flush"),
            ("put.retriable.policy", "retry.in.place"),
            ("max.delivery.attempts", "3"),
            ("errors.tolerance", "all"),
        ]);
        let config = ConnectorConfig::from_properties(&connector).unwrap();
        let driver = config.driver_config();
        assert_eq!(driver.task_id, 7);
        assert_eq!(driver.ack_policy, AckPolicy::AfterFlush);
        assert_eq!(
            driver.put_retriable_policy,
            PutRetriablePolicy::RetryInPlace
        );
        assert_eq!(driver.max_delivery_attempts, Some(3));
        assert!(!driver.require_broker_dead_letter_queue, "off by default");
        assert_eq!(driver.errors, config.error_handling());
        let driver = ConnectorConfig::from_properties(&props(&[("name", "n"), ("topics", "a")]))
            .unwrap()
            .driver_config();
        assert_eq!(
            driver.commit_policy,
            CommitPolicy::interval(Duration::from_secs(1)).or_records(DEFAULT_COMMIT_RECORDS)
        );
        assert_eq!(driver.commit_timeout, DEFAULT_COMMIT_TIMEOUT);
    }

    #[test]
    fn the_driver_config_carries_whether_a_broker_dead_letter_queue_is_required() {
        let config = ConnectorConfig::from_properties(&props(&[
            ("name", "n"),
            ("topics", "a"),
            ("share.dead.letter.queue.required", " TRUE "),
        ]))
        .unwrap();
        assert!(config.require_broker_dead_letter_queue());
        assert!(config.driver_config().require_broker_dead_letter_queue);
        let built = config.build_driver_config(&crate::Plugins::new()).unwrap();
        assert!(built.require_broker_dead_letter_queue);
    }

    #[test]
    fn the_lag_refresh_interval_is_read_checked_and_carried_to_the_driver() {
        let config = |value: Option<&str>| {
            let mut pairs = vec![("name", "n"), ("topics", "a")];
            if let Some(value) = value {
                pairs.push(("share.lag.refresh.interval.ms", value));
            }
            ConnectorConfig::from_properties(&props(&pairs))
        };
        let default = config(None).unwrap();
        assert_eq!(default.lag_refresh_interval(), Duration::from_secs(10));
        assert_eq!(
            default.driver_config().lag_refresh_interval,
            Duration::from_secs(10)
        );
        let set = config(Some("2500")).unwrap();
        assert_eq!(
            set.driver_config().lag_refresh_interval,
            Duration::from_millis(2500)
        );
        assert_eq!(
            config(Some("0")).unwrap().lag_refresh_interval(),
            Duration::ZERO,
            "0 turns it off"
        );
        for bad in ["-1", "ten"] {
            let error = config(Some(bad)).unwrap_err();
            assert_eq!(error.key(), Some("share.lag.refresh.interval.ms"), "{bad}");
        }
    }
}
