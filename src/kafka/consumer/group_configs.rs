//! The share group's settings that decide what happens to a record whose deliveries run out:
//! its delivery-count limit and its dead-letter queue (KIP-1191), and its in-flight limit per
//! partition, which the sizing rule splits among the members; read with DescribeConfigs and
//! kept fresh in the background.
//!
//! # What is read, and from where
//!
//! - **The group** (resource type GROUP, any broker answers from the cluster metadata):
//!   `share.delivery.count.limit` (Kafka 4.3+; a 4.4 broker fills in its own
//!   `group.share.delivery.count.limit` when the group does not set one),
//!   `share.partition.max.record.locks` (4.3+, filled in the same way),
//!   `errors.deadletterqueue.topic.name` and `errors.deadletterqueue.copy.record.enable` (4.4).
//! - **A broker** (resource type BROKER, named by its own id, so asked of that broker):
//!   `group.share.delivery.count.limit` and `group.share.partition.max.record.locks`, for
//!   clusters whose groups have no limits of their own
//!   (4.1, 4.2); and, when the group names a dead-letter topic, the cluster's
//!   `errors.deadletterqueue.topic.name.prefix` (default `dlq.`) and
//!   `errors.deadletterqueue.auto.create.topics.enable` (default false).
//! - **The dead-letter topic** (resource type TOPIC): `errors.deadletterqueue.group.enable`.
//!
//! A 4.4 broker writes to a group's dead-letter topic only if `share.version` is 2 or more, the
//! topic exists with `errors.deadletterqueue.group.enable=true` (or does not exist and the
//! cluster auto-creates dead-letter topics), and its name starts with the prefix
//! (`ShareGroupDLQStateManager.validateDlqTopic` in Kafka 4.4). When one of these checks
//! fails, the broker archives the record without writing it anywhere, so the group has, in
//! effect, no dead-letter queue: that is reported as [`BrokerDeadLetterQueue::None`], and the
//! reason is logged as a warning. A check that cannot be made (no permission to describe the
//! brokers, say) is skipped.
//!
//! Every read runs on connections of its own, closed after it, so a slow or silent broker
//! holds up nothing else of the consumer.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::{ApiKey, DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::{Message, StrBytes};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::consumer::{BrokerDeadLetterQueue, DEFAULT_DELIVERY_COUNT_LIMIT};
use crate::kafka::cluster::metadata;
use crate::kafka::error::ClientError;
use crate::kafka::error::codes::{api_name, check};
use crate::kafka::error::{BrokerError, ProtocolError};
use crate::kafka::net::addresses::Addresses;
use crate::kafka::net::connection::{Connection, ConnectionConfig};
use crate::time::deadline_after;

/// DescribeConfigs resource type TOPIC.
pub(crate) const RESOURCE_TOPIC: i8 = 2;
/// DescribeConfigs resource type BROKER.
pub(crate) const RESOURCE_BROKER: i8 = 4;
/// DescribeConfigs (and IncrementalAlterConfigs) resource type GROUP.
pub(crate) const RESOURCE_GROUP: i8 = 32;

/// DescribeConfigs config source GROUP_CONFIG: the value was set on the group itself.
pub(crate) const SOURCE_GROUP_CONFIG: i8 = 8;

/// The group's delivery-count limit (Kafka 4.3+, KIP-1240).
pub(crate) const SHARE_DELIVERY_COUNT_LIMIT: &str = "share.delivery.count.limit";
/// The broker's delivery-count limit, the default of every group.
pub(crate) const GROUP_SHARE_DELIVERY_COUNT_LIMIT: &str = "group.share.delivery.count.limit";
/// The group's in-flight limit per partition (Kafka 4.3+, KIP-1240).
pub(crate) const SHARE_PARTITION_MAX_RECORD_LOCKS: &str = "share.partition.max.record.locks";
/// The broker's in-flight limit per partition, the default of every group.
pub(crate) const GROUP_SHARE_PARTITION_MAX_RECORD_LOCKS: &str =
    "group.share.partition.max.record.locks";
/// The group's dead-letter topic (Kafka 4.4, KIP-1191); blank for none.
pub(crate) const DLQ_TOPIC_NAME: &str = "errors.deadletterqueue.topic.name";
/// Whether the group's dead-letter records carry the record's key and value.
pub(crate) const DLQ_COPY_RECORD_ENABLE: &str = "errors.deadletterqueue.copy.record.enable";
/// The topic config that lets a topic be a share group's dead-letter topic.
pub(crate) const DLQ_GROUP_ENABLE: &str = "errors.deadletterqueue.group.enable";
/// The cluster's required prefix of dead-letter topic names (default `dlq.`, `""` for none).
pub(crate) const DLQ_TOPIC_NAME_PREFIX: &str = "errors.deadletterqueue.topic.name.prefix";
/// Whether the cluster creates a missing dead-letter topic (default false).
pub(crate) const DLQ_AUTO_CREATE_TOPICS_ENABLE: &str =
    "errors.deadletterqueue.auto.create.topics.enable";

/// The `share.version` that turns on share-group dead-letter queues.
const SHARE_VERSION_WITH_DLQ: i16 = 2;

/// Kafka's UNKNOWN_TOPIC_OR_PARTITION error code.
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

/// The shortest pause between two background reads, whatever the setting: a read is a few
/// requests on new connections.
const MIN_REFRESH: Duration = Duration::from_millis(100);

/// The group configs a share consumer reads.
const GROUP_KEYS: &[&str] = &[
    SHARE_DELIVERY_COUNT_LIMIT,
    SHARE_PARTITION_MAX_RECORD_LOCKS,
    DLQ_TOPIC_NAME,
    DLQ_COPY_RECORD_ENABLE,
];

/// The broker configs a share consumer may need.
const BROKER_KEYS: &[&str] = &[
    GROUP_SHARE_DELIVERY_COUNT_LIMIT,
    GROUP_SHARE_PARTITION_MAX_RECORD_LOCKS,
    DLQ_TOPIC_NAME_PREFIX,
    DLQ_AUTO_CREATE_TOPICS_ENABLE,
];

/// One config of a described resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The value as the broker renders it; `None` for a sensitive config.
    pub(crate) value: Option<String>,
    /// Where the value comes from (DescribeConfigs `ConfigSource`, e.g.
    /// [`SOURCE_GROUP_CONFIG`]).
    pub(crate) source: i8,
}

/// The configs of one resource, as DescribeConfigs answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Described {
    pub(crate) entries: BTreeMap<String, Entry>,
}

impl Described {
    /// The value of `name`, when the answer has it and it is not sensitive.
    pub(crate) fn value(&self, name: &str) -> Option<&str> {
        self.entries.get(name)?.value.as_deref()
    }

    /// Whether the answer has `name` at all (a broker that does not know a key leaves it out).
    pub(crate) fn has(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }
}

/// A DescribeConfigs request for one resource; `keys` `None` asks for every config.
pub(crate) fn request(
    resource_type: i8,
    resource_name: &str,
    keys: Option<&[&str]>,
) -> DescribeConfigsRequest {
    let keys = keys.map(|keys| {
        keys.iter()
            .map(|k| StrBytes::from_string((*k).to_owned()))
            .collect()
    });
    DescribeConfigsRequest::default().with_resources(vec![
        DescribeConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(StrBytes::from_string(resource_name.to_owned()))
            .with_configuration_keys(keys),
    ])
}

/// The configs of the resource asked for in `response`, from `broker`. The resource's error
/// code is a [`ClientError::Broker`] naming the resource; a response without the resource
/// is a [`ClientError::Protocol`] error.
pub(crate) fn parse(
    broker: &str,
    response: DescribeConfigsResponse,
    resource_type: i8,
    resource_name: &str,
) -> Result<Described, ClientError> {
    let key = ApiKey::DescribeConfigs;
    let result = response
        .results
        .into_iter()
        .find(|r| r.resource_type == resource_type && r.resource_name.as_str() == resource_name)
        .ok_or_else(|| {
            ClientError::Protocol(ProtocolError::Malformed {
                broker: broker.to_owned(),
                reason: format!(
                    "the {} response has no entry for `{resource_name}`",
                    api_name(key)
                ),
            })
        })?;
    check(
        api_name(key),
        result.error_code,
        result.error_message.as_ref(),
    )
    .map_err(|error| match error {
        ClientError::Broker(BrokerError {
            api,
            code,
            name,
            message,
            retriable,
        }) => ClientError::Broker(BrokerError {
            api,
            code,
            name,
            message: Some(message.unwrap_or_else(|| format!("resource `{resource_name}`"))),
            retriable,
        }),
        other => other,
    })?;
    let entries = result
        .configs
        .into_iter()
        .map(|c| {
            (
                c.name.as_str().to_owned(),
                Entry {
                    value: c.value.map(|v| v.as_str().to_owned()),
                    source: c.config_source,
                },
            )
        })
        .collect();
    Ok(Described { entries })
}

/// DescribeConfigs of one resource on `connection`, within its request timeout.
pub(crate) async fn describe(
    connection: &Connection,
    resource_type: i8,
    resource_name: &str,
    keys: Option<&[&str]>,
) -> Result<Described, ClientError> {
    let key = ApiKey::DescribeConfigs;
    let version = connection.negotiate(key, DescribeConfigsRequest::VERSIONS)?;
    let response: DescribeConfigsResponse = connection
        .request(key, version, &request(resource_type, resource_name, keys))
        .await?;
    parse(connection.broker(), response, resource_type, resource_name)
}

/// A delivery-count limit as a config renders it: a whole number from 1 to 65535.
pub(crate) fn parse_limit(raw: &str) -> Option<u16> {
    raw.trim().parse::<u16>().ok().filter(|limit| *limit >= 1)
}

/// A record-lock limit as Kafka renders it: a positive integer.
pub(crate) fn parse_locks(raw: &str) -> Option<usize> {
    raw.trim().parse().ok().filter(|locks| *locks > 0)
}

/// A boolean config as Kafka renders it (`true`/`false`, any case).
pub(crate) fn parse_bool(raw: &str) -> Option<bool> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// What is known of the group's settings; `None` and
/// [`BrokerDeadLetterQueue::Unknown`] where nothing is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GroupSettings {
    pub(crate) delivery_count_limit: Option<u16>,
    /// The group's `share.partition.max.record.locks`, or else (a cluster before 4.3) the
    /// broker's `group.share.partition.max.record.locks`.
    pub(crate) max_record_locks: Option<usize>,
    pub(crate) dead_letter_queue: BrokerDeadLetterQueue,
}

/// One read: the settings, and why a dead-letter topic the group names is not used.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Reading {
    pub(crate) settings: GroupSettings,
    pub(crate) unusable_topic: Option<String>,
}

/// Where the dead-letter topic stands, as far as known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TopicFacts {
    /// It exists; `errors.deadletterqueue.group.enable` as described (`None`: not answered).
    Exists { group_enable: Option<bool> },
    /// The cluster has no such topic.
    Missing,
    /// It could not be described.
    Unknown,
}

/// What decides whether the broker writes to the group's dead-letter topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeadLetterFacts {
    /// `errors.deadletterqueue.topic.name`, trimmed, when not blank.
    pub(crate) name: Option<String>,
    /// `errors.deadletterqueue.copy.record.enable`.
    pub(crate) copy_record: bool,
    /// The finalized `share.version`, when the broker reported it.
    pub(crate) share_version: Option<i16>,
    /// The topic.
    pub(crate) topic: TopicFacts,
    /// `errors.deadletterqueue.topic.name.prefix`, when described.
    pub(crate) prefix: Option<String>,
    /// `errors.deadletterqueue.auto.create.topics.enable`, when described.
    pub(crate) auto_create: Option<bool>,
}

/// The group's dead-letter queue as the broker will use it, and, when the group names a topic
/// the broker will not write to, why. The checks follow Kafka 4.4's own, in its order; one
/// whose facts are unknown is skipped.
pub(crate) fn judge(facts: &DeadLetterFacts) -> (BrokerDeadLetterQueue, Option<String>) {
    let Some(name) = facts.name.as_deref() else {
        return (BrokerDeadLetterQueue::None, None);
    };
    let unusable = |why: String| {
        (
            BrokerDeadLetterQueue::None,
            Some(format!(
                "the share group names `{name}` as its dead-letter topic, but the broker will \
                 not write there: {why}; records archived at the delivery-count limit are lost"
            )),
        )
    };
    if let Some(level) = facts
        .share_version
        .filter(|level| *level < SHARE_VERSION_WITH_DLQ)
    {
        return unusable(format!(
            "the cluster's share.version is {level}, and dead-letter queues need 2 \
             (kafka-features.sh upgrade --feature share.version=2)"
        ));
    }
    if name.starts_with("__") {
        return unusable("a dead-letter topic name may not start with `__`".to_owned());
    }
    match facts.topic {
        TopicFacts::Exists {
            group_enable: Some(false),
        } => {
            return unusable(format!(
                "the topic lacks the topic config {DLQ_GROUP_ENABLE}=true"
            ));
        }
        TopicFacts::Missing if facts.auto_create == Some(false) => {
            return unusable(format!(
                "the topic does not exist and the cluster does not create it \
                 ({DLQ_AUTO_CREATE_TOPICS_ENABLE}=false); create it with \
                 KafkaAdmin::create_dead_letter_topic"
            ));
        }
        _ => {}
    }
    if let Some(prefix) = facts.prefix.as_deref().filter(|p| !p.is_empty()) {
        if !name.starts_with(prefix) {
            return unusable(format!(
                "the name does not start with the cluster's {DLQ_TOPIC_NAME_PREFIX} `{prefix}`"
            ));
        }
    }
    (
        BrokerDeadLetterQueue::Topic {
            name: name.to_owned(),
            copy_record: facts.copy_record,
        },
        None,
    )
}

/// Where to read the settings of which group.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    /// Where to connect: the consumer's addresses (the brokers it knows, then the bootstrap
    /// list).
    pub(crate) addresses: Addresses,
    /// The settings of the connections.
    pub(crate) config: ConnectionConfig,
    /// The share group.
    pub(crate) group_id: String,
}

/// Reads the group's settings (see the module docs). Never fails: what cannot be read is left
/// unknown, and why is logged at debug level.
pub(crate) async fn read(source: &Source) -> Reading {
    let connection = match source.addresses.connect(&source.config).await {
        Ok(connection) => connection,
        Err(error) => {
            debug!(
                group = %source.group_id,
                %error,
                "cannot read the share group's configs: no connection"
            );
            return Reading::default();
        }
    };
    let group = match describe(
        &connection,
        RESOURCE_GROUP,
        &source.group_id,
        Some(GROUP_KEYS),
    )
    .await
    {
        Ok(group) => group,
        Err(error) => {
            debug!(
                group = %source.group_id,
                %error,
                "cannot read the share group's configs"
            );
            return Reading::default();
        }
    };
    let name = group
        .value(DLQ_TOPIC_NAME)
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_owned);
    let copy_record = group
        .value(DLQ_COPY_RECORD_ENABLE)
        .and_then(parse_bool)
        .unwrap_or(false);
    let group_has_limit = group.has(SHARE_DELIVERY_COUNT_LIMIT);

    let broker = if !group_has_limit || name.is_some() {
        match broker_configs(&connection, &source.config).await {
            Ok(broker) => Some(broker),
            Err(error) => {
                debug!(
                    group = %source.group_id,
                    %error,
                    "cannot read the brokers' share-group configs"
                );
                None
            }
        }
    } else {
        None
    };

    let delivery_count_limit = if group_has_limit {
        let limit = group
            .value(SHARE_DELIVERY_COUNT_LIMIT)
            .and_then(parse_limit);
        if limit.is_none() {
            debug!(
                group = %source.group_id,
                value = ?group.value(SHARE_DELIVERY_COUNT_LIMIT),
                "unreadable share.delivery.count.limit"
            );
        }
        limit
    } else {
        broker.as_ref().and_then(|(configs, _)| {
            match configs.value(GROUP_SHARE_DELIVERY_COUNT_LIMIT) {
                Some(raw) => parse_limit(raw),
                None => Some(DEFAULT_DELIVERY_COUNT_LIMIT),
            }
        })
    };

    // A 4.3+ group has its own limit (the broker's filled in); an older cluster's is the
    // broker's, read along with its delivery-count limit (both came in 4.3).
    let max_record_locks = match group.value(SHARE_PARTITION_MAX_RECORD_LOCKS) {
        Some(raw) => parse_locks(raw),
        None => broker.as_ref().and_then(|(configs, _)| {
            configs
                .value(GROUP_SHARE_PARTITION_MAX_RECORD_LOCKS)
                .and_then(parse_locks)
        }),
    };

    let (dead_letter_queue, unusable_topic) = match name {
        None => (BrokerDeadLetterQueue::None, None),
        Some(name) => {
            let topic = match describe(
                &connection,
                RESOURCE_TOPIC,
                &name,
                Some(&[DLQ_GROUP_ENABLE]),
            )
            .await
            {
                Ok(configs) => TopicFacts::Exists {
                    group_enable: configs.value(DLQ_GROUP_ENABLE).and_then(parse_bool),
                },
                Err(ClientError::Broker(BrokerError {
                    code: UNKNOWN_TOPIC_OR_PARTITION,
                    ..
                })) => TopicFacts::Missing,
                Err(error) => {
                    debug!(topic = %name, %error, "cannot describe the dead-letter topic");
                    TopicFacts::Unknown
                }
            };
            let share_version = broker
                .as_ref()
                .and_then(|(_, level)| *level)
                .or_else(|| connection.finalized_feature("share.version"));
            let (prefix, auto_create) = broker.as_ref().map_or((None, None), |(configs, _)| {
                (
                    configs.value(DLQ_TOPIC_NAME_PREFIX).map(str::to_owned),
                    configs
                        .value(DLQ_AUTO_CREATE_TOPICS_ENABLE)
                        .and_then(parse_bool),
                )
            });
            judge(&DeadLetterFacts {
                name: Some(name),
                copy_record,
                share_version,
                topic,
                prefix,
                auto_create,
            })
        }
    };
    Reading {
        settings: GroupSettings {
            delivery_count_limit,
            max_record_locks,
            dead_letter_queue,
        },
        unusable_topic,
    }
}

/// The share-group configs of one broker, asked of that broker (a broker describes only its
/// own configs), and the `share.version` it reports. The broker `connection` reached is used
/// when the metadata names it by the address it was reached at; otherwise the broker with the
/// lowest id, on a connection of its own.
async fn broker_configs(
    connection: &Connection,
    config: &ConnectionConfig,
) -> Result<(Described, Option<i16>), ClientError> {
    let snapshot = metadata::fetch(connection, Some(&[]), metadata::ANY_VERSION).await?;
    let here = snapshot
        .brokers
        .iter()
        .find(|(_, address)| address.as_str() == connection.broker());
    let (id, via) = match here {
        Some((id, _)) => (*id, connection.clone()),
        None => {
            // The brokers are in ascending id order: the first has the lowest.
            let (id, address) = snapshot.brokers.iter().next().ok_or_else(|| {
                ClientError::Protocol(ProtocolError::Malformed {
                    broker: connection.broker().to_owned(),
                    reason: "the Metadata response lists no broker".to_owned(),
                })
            })?;
            let via = Connection::connect(address, config).await?;
            (*id, via)
        }
    };
    let configs = describe(&via, RESOURCE_BROKER, &id.to_string(), Some(BROKER_KEYS)).await?;
    Ok((configs, via.finalized_feature("share.version")))
}

/// The group's settings as last read, shared with the task that reads them again every
/// refresh interval. Dropping it stops the task.
#[derive(Debug)]
pub(crate) struct GroupConfigWatch {
    shared: Arc<Mutex<Known>>,
    task: Option<JoinHandle<()>>,
}

/// What the watch knows.
#[derive(Debug, Default)]
struct Known {
    settings: GroupSettings,
    unusable_topic: Option<String>,
}

impl Known {
    /// Takes in a reading: what it knows replaces what was known, what it does not know
    /// keeps the last value read (a failed read says nothing about a change). Logs changes.
    fn apply(&mut self, group_id: &str, reading: Reading) {
        let Reading {
            settings,
            unusable_topic,
        } = reading;
        let before = self.settings.clone();
        if settings.delivery_count_limit.is_some() {
            self.settings.delivery_count_limit = settings.delivery_count_limit;
        }
        if settings.max_record_locks.is_some() {
            self.settings.max_record_locks = settings.max_record_locks;
        }
        if settings.dead_letter_queue != BrokerDeadLetterQueue::Unknown {
            self.settings.dead_letter_queue = settings.dead_letter_queue;
            if unusable_topic != self.unusable_topic {
                if let Some(why) = &unusable_topic {
                    warn!(group = group_id, "{why}");
                }
                self.unusable_topic = unusable_topic;
            }
        }
        if self.settings != before {
            info!(
                group = group_id,
                delivery_count_limit = ?self.settings.delivery_count_limit,
                max_record_locks = ?self.settings.max_record_locks,
                dead_letter_queue = ?self.settings.dead_letter_queue,
                "share group settings read"
            );
        }
    }
}

impl GroupConfigWatch {
    /// Reads the settings once, giving up after `first_within` (they stay unknown), then
    /// starts the task that reads them again every `refresh` (at least 100 ms), each read
    /// bounded by `first_within` too. Needs a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes starts no task and leaves nothing behind but
    /// the connections of the read, which close.
    pub(crate) async fn start(source: Source, refresh: Duration, first_within: Duration) -> Self {
        let shared = Arc::new(Mutex::new(Known::default()));
        let first = read_within(&source, first_within).await;
        lock(&shared).apply(&source.group_id, first);
        let task = tokio::spawn(refresh_loop(
            source,
            refresh.max(MIN_REFRESH),
            first_within,
            Arc::clone(&shared),
        ));
        Self {
            shared,
            task: Some(task),
        }
    }

    /// The group's delivery-count limit, if known.
    pub(crate) fn delivery_count_limit(&self) -> Option<u16> {
        lock(&self.shared).settings.delivery_count_limit
    }

    /// The group's in-flight limit per partition, if known.
    pub(crate) fn max_record_locks(&self) -> Option<usize> {
        lock(&self.shared).settings.max_record_locks
    }

    /// The group's dead-letter queue, as far as known.
    pub(crate) fn dead_letter_queue(&self) -> BrokerDeadLetterQueue {
        lock(&self.shared).settings.dead_letter_queue.clone()
    }

    /// Stops reading the settings again; what is known stays.
    pub(crate) fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for GroupConfigWatch {
    fn drop(&mut self) {
        self.stop();
    }
}

fn lock(shared: &Mutex<Known>) -> MutexGuard<'_, Known> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// [`read`], bounded by `within`; a read that takes longer knows nothing.
async fn read_within(source: &Source, within: Duration) -> Reading {
    match tokio::time::timeout_at(deadline_after(Instant::now(), within), read(source)).await {
        Ok(reading) => reading,
        Err(_) => {
            debug!(
                group = %source.group_id,
                ?within,
                "reading the share group's configs timed out"
            );
            Reading::default()
        }
    }
}

async fn refresh_loop(
    source: Source,
    refresh: Duration,
    within: Duration,
    shared: Arc<Mutex<Known>>,
) {
    loop {
        tokio::time::sleep_until(deadline_after(Instant::now(), refresh)).await;
        let reading = read_within(&source, within).await;
        lock(&shared).apply(&source.group_id, reading);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(name: &str) -> DeadLetterFacts {
        DeadLetterFacts {
            name: Some(name.to_owned()),
            copy_record: true,
            share_version: Some(2),
            topic: TopicFacts::Exists {
                group_enable: Some(true),
            },
            prefix: Some("dlq.".to_owned()),
            auto_create: Some(false),
        }
    }

    fn topic(name: &str, copy_record: bool) -> BrokerDeadLetterQueue {
        BrokerDeadLetterQueue::Topic {
            name: name.to_owned(),
            copy_record,
        }
    }

    #[test]
    fn a_topic_the_broker_accepts_is_the_dead_letter_queue() {
        assert_eq!(
            judge(&facts("dlq.orders")),
            (topic("dlq.orders", true), None)
        );
        let no_name = DeadLetterFacts {
            name: None,
            ..facts("x")
        };
        assert_eq!(judge(&no_name), (BrokerDeadLetterQueue::None, None));
    }

    #[test]
    fn each_rule_of_the_broker_turns_the_queue_off_and_says_why() {
        let cases = [
            (
                DeadLetterFacts {
                    share_version: Some(1),
                    ..facts("dlq.a")
                },
                "share.version is 1",
            ),
            (facts("__dlq"), "`__`"),
            (
                DeadLetterFacts {
                    topic: TopicFacts::Exists {
                        group_enable: Some(false),
                    },
                    ..facts("dlq.a")
                },
                "errors.deadletterqueue.group.enable=true",
            ),
            (
                DeadLetterFacts {
                    topic: TopicFacts::Missing,
                    ..facts("dlq.a")
                },
                "does not exist",
            ),
            (facts("orders-dlq"), "prefix `dlq.`"),
        ];
        for (facts, reason) in cases {
            let (queue, why) = judge(&facts);
            assert_eq!(queue, BrokerDeadLetterQueue::None, "{facts:?}");
            let why = why.expect("a reason");
            assert!(why.contains(reason), "{why}");
        }
    }

    #[test]
    fn checks_that_cannot_be_made_are_skipped() {
        let unknown = DeadLetterFacts {
            share_version: None,
            topic: TopicFacts::Unknown,
            prefix: None,
            auto_create: None,
            ..facts("anything")
        };
        assert_eq!(judge(&unknown), (topic("anything", true), None));
        // A missing topic the cluster creates, and a prefix turned off.
        let created = DeadLetterFacts {
            topic: TopicFacts::Missing,
            auto_create: Some(true),
            prefix: Some(String::new()),
            ..facts("orders-dlq")
        };
        assert_eq!(judge(&created), (topic("orders-dlq", true), None));
    }

    #[test]
    fn values_parse_as_kafka_renders_them() {
        assert_eq!(parse_limit(" 7 "), Some(7));
        assert_eq!(parse_limit("0"), None);
        assert_eq!(parse_limit("-3"), None);
        assert_eq!(parse_limit("70000"), None);
        assert_eq!(parse_limit("five"), None);
        assert_eq!(parse_bool("TRUE"), Some(true));
        assert_eq!(parse_bool("false"), Some(false));
        assert_eq!(parse_bool("yes"), None);
        assert_eq!(parse_locks("2000"), Some(2000));
        assert_eq!(parse_locks(" 100 "), Some(100));
        assert_eq!(parse_locks("0"), None);
        assert_eq!(parse_locks("-1"), None);
        assert_eq!(parse_locks("many"), None);
    }

    #[test]
    fn a_failed_read_keeps_what_was_known() {
        let mut known = Known::default();
        let good = Reading {
            settings: GroupSettings {
                delivery_count_limit: Some(3),
                max_record_locks: Some(100),
                dead_letter_queue: topic("dlq.a", false),
            },
            unusable_topic: None,
        };
        known.apply("g", good.clone());
        known.apply("g", Reading::default());
        assert_eq!(known.settings, good.settings);
        // A read that knows better replaces it, the queue turned off included.
        known.apply(
            "g",
            Reading {
                settings: GroupSettings {
                    delivery_count_limit: Some(4),
                    max_record_locks: Some(2000),
                    dead_letter_queue: BrokerDeadLetterQueue::None,
                },
                unusable_topic: None,
            },
        );
        assert_eq!(known.settings.delivery_count_limit, Some(4));
        assert_eq!(known.settings.max_record_locks, Some(2000));
        assert_eq!(
            known.settings.dead_letter_queue,
            BrokerDeadLetterQueue::None
        );
    }
}
