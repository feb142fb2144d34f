//! Group configs, e.g. those of share groups: IncrementalAlterConfigs and DescribeConfigs on
//! resource type GROUP, and the share group's dead-letter queue (KIP-1191).

use std::collections::BTreeMap;
use std::marker::PhantomData;

use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    ApiKey, DescribeConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{AdminError, Failure, KafkaAdmin, missing, negotiate_and_send};
use crate::kafka::consumer::group_configs::{
    self, DLQ_COPY_RECORD_ENABLE, DLQ_TOPIC_NAME, RESOURCE_GROUP, SHARE_DELIVERY_COUNT_LIMIT,
    SOURCE_GROUP_CONFIG, parse_bool, parse_limit,
};
use crate::kafka::error::codes::{api_name, check};

/// IncrementalAlterConfigs operation SET.
const CONFIG_OPERATION_SET: i8 = 0;

/// IncrementalAlterConfigs operation DELETE: back to the default.
const CONFIG_OPERATION_DELETE: i8 = 1;

/// The configs of one resource (a share group, a topic) as a broker describes them: every
/// config the broker knows for it, each with the value in force and whether the resource
/// sets it itself. Read as [`ShareGroupConfigs`] and [`TopicConfigs`](super::TopicConfigs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceConfigs<R> {
    /// Name → (value, whether the resource sets it itself).
    entries: BTreeMap<String, (Option<String>, bool)>,
    resource: PhantomData<R>,
}

impl<R> Default for ResourceConfigs<R> {
    fn default() -> Self {
        Self {
            entries: BTreeMap::new(),
            resource: PhantomData,
        }
    }
}

impl<R> ResourceConfigs<R> {
    /// The configs a DescribeConfigs answer described, each set on the resource itself when
    /// its source is `own_source`.
    pub(super) fn described(described: group_configs::Described, own_source: i8) -> Self {
        Self {
            entries: described
                .entries
                .into_iter()
                .map(|(name, entry)| (name, (entry.value, entry.source == own_source)))
                .collect(),
            resource: PhantomData,
        }
    }

    /// The value of config `name`, if the broker described it and the value is not
    /// sensitive.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries.get(name)?.0.as_deref()
    }

    /// True when the resource sets `name` itself, false for a default (or a config the
    /// broker does not know).
    pub fn is_set(&self, name: &str) -> bool {
        self.entries.get(name).is_some_and(|(_, set)| *set)
    }

    /// Every config, in name order, with its value.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        self.entries
            .iter()
            .map(|(name, (value, _))| (name.as_str(), value.as_deref()))
    }

    /// How many configs the broker described.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the broker described none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The kind of [`ShareGroupConfigs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupResource {}

/// The configs of a share group, as a broker describes them
/// ([`KafkaAdmin::share_group_config`]).
///
/// A value the group does not set itself is the broker's default, as the broker reports it:
/// a Kafka 4.4 broker fills in its own `group.share.*` settings (e.g.
/// `share.delivery.count.limit` from `group.share.delivery.count.limit`).
/// [`is_set_on_group`](Self::is_set_on_group) tells the two apart.
pub type ShareGroupConfigs = ResourceConfigs<GroupResource>;

impl ShareGroupConfigs {
    /// True when the group sets `name` itself (DescribeConfigs source `GROUP_CONFIG`), false
    /// when the value is a default, or the broker does not know the config.
    pub fn is_set_on_group(&self, name: &str) -> bool {
        self.is_set(name)
    }

    /// `share.delivery.count.limit` (Kafka 4.3+), when described and a whole number from 1
    /// to 65535.
    pub fn delivery_count_limit(&self) -> Option<u16> {
        self.get(SHARE_DELIVERY_COUNT_LIMIT).and_then(parse_limit)
    }

    /// `errors.deadletterqueue.topic.name` (Kafka 4.4), when set and not blank: the topic the
    /// broker writes archived records to.
    pub fn dead_letter_topic(&self) -> Option<&str> {
        self.get(DLQ_TOPIC_NAME)
            .map(str::trim)
            .filter(|name| !name.is_empty())
    }

    /// `errors.deadletterqueue.copy.record.enable` (Kafka 4.4; false when not described):
    /// whether dead-letter records carry the record's key and value.
    pub fn dead_letter_copy_record(&self) -> bool {
        self.get(DLQ_COPY_RECORD_ENABLE)
            .and_then(parse_bool)
            .unwrap_or(false)
    }
}

impl KafkaAdmin {
    /// Sets configs of the group `group_id` (IncrementalAlterConfigs, resource type GROUP,
    /// operation SET), e.g. `share.auto.offset.reset=earliest`, `share.isolation.level`,
    /// `share.record.lock.duration.ms`. The group need not exist yet.
    ///
    /// # Errors
    ///
    /// The group's [`AdminError::Broker`] error, e.g. `INVALID_CONFIG` with the broker's
    /// explanation for an unknown key or a bad value; [`AdminError::Timeout`] and the other
    /// errors of the connection and the request.
    ///
    /// # Cancel safety
    ///
    /// The admin stays usable, but once the request was sent the configs may be set whether
    /// or not the future is dropped. Setting the same values again is harmless.
    pub async fn set_share_group_config(
        &self,
        group_id: &str,
        configs: &[(&str, &str)],
    ) -> Result<(), AdminError> {
        let configs = configs
            .iter()
            .map(|(name, value)| set(name, value))
            .collect();
        self.call(
            "set_share_group_config",
            self.alter_group(group_id, configs),
        )
        .await
    }

    /// The configs of the group `group_id` as a broker describes them (DescribeConfigs,
    /// resource type GROUP): every group config the broker knows, those the group does not
    /// set with their defaults. The group need not exist.
    ///
    /// # Errors
    ///
    /// The group's [`AdminError::Broker`] error, e.g. `GROUP_AUTHORIZATION_FAILED` without
    /// the DESCRIBE_CONFIGS permission on the group, or `INVALID_REQUEST` from a broker that
    /// does not describe groups (before Kafka 4.0); [`AdminError::Timeout`] and the other errors
    /// of the connection and the request.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn share_group_config(
        &self,
        group_id: &str,
    ) -> Result<ShareGroupConfigs, AdminError> {
        self.call("share_group_config", async {
            let connection = self.connection().await?;
            let request = group_configs::request(RESOURCE_GROUP, group_id, None);
            let response: DescribeConfigsResponse =
                negotiate_and_send(&connection, ApiKey::DescribeConfigs, &request).await?;
            let described =
                group_configs::parse(connection.broker(), response, RESOURCE_GROUP, group_id)?;
            Ok(ShareGroupConfigs::described(described, SOURCE_GROUP_CONFIG))
        })
        .await
    }

    /// Gives the share group `group_id` a dead-letter queue of the broker's own (KIP-1191,
    /// Kafka 4.4): sets the group configs `errors.deadletterqueue.topic.name=topic` and
    /// `errors.deadletterqueue.copy.record.enable=copy_record`. From then on, a record the
    /// group archives because its deliveries ran out, or because a consumer REJECTed it, is
    /// written to `topic` by the broker before it is archived.
    ///
    /// The broker writes there only when the cluster's `share.version` is 2 or more, and
    /// `topic` starts with the cluster's `errors.deadletterqueue.topic.name.prefix` (default
    /// `dlq.`) and exists with the topic config `errors.deadletterqueue.group.enable=true`
    /// ([`Self::create_dead_letter_topic`] makes one), unless the cluster creates missing
    /// dead-letter topics (`errors.deadletterqueue.auto.create.topics.enable`, off by
    /// default). None of that is checked when the configs are set: a group whose topic
    /// fails a check has its records archived without a trace, as if it had no queue.
    /// [`KafkaShareConsumer`](crate::KafkaShareConsumer) checks it when it reads the group's
    /// configs, and reports such a queue as
    /// [`BrokerDeadLetterQueue::None`](crate::BrokerDeadLetterQueue::None).
    ///
    /// # Errors
    ///
    /// [`AdminError::InvalidArgument`] for a blank topic or one starting with `__` (nothing is
    /// sent); the group's [`AdminError::Broker`] error, e.g. `INVALID_CONFIG` from a broker
    /// before 4.4, which does not know the configs; [`AdminError::Timeout`] and the other
    /// errors of the connection and the request.
    ///
    /// # Cancel safety
    ///
    /// As [`Self::set_share_group_config`].
    pub async fn set_share_group_dead_letter_queue(
        &self,
        group_id: &str,
        topic: &str,
        copy_record: bool,
    ) -> Result<(), AdminError> {
        self.call("set_share_group_dead_letter_queue", async {
            let topic = topic.trim();
            if topic.is_empty() {
                return Err(Failure::InvalidArgument(
                    "give the dead-letter topic's name (remove_share_group_dead_letter_queue \
                     takes the queue away)"
                        .to_owned(),
                ));
            }
            if topic.starts_with("__") {
                return Err(Failure::InvalidArgument(format!(
                    "`{topic}`: a dead-letter topic name may not start with `__`, the prefix of \
                     Kafka's internal topics"
                )));
            }
            let copy = if copy_record { "true" } else { "false" };
            self.alter_group(
                group_id,
                vec![
                    set(DLQ_TOPIC_NAME, topic),
                    set(DLQ_COPY_RECORD_ENABLE, copy),
                ],
            )
            .await
        })
        .await
    }

    /// Takes the share group's dead-letter queue away: deletes its group configs
    /// `errors.deadletterqueue.topic.name` and `errors.deadletterqueue.copy.record.enable`,
    /// so records archived from then on are not written anywhere. The topic is left as it is.
    ///
    /// # Errors
    ///
    /// As [`Self::set_share_group_dead_letter_queue`].
    ///
    /// # Cancel safety
    ///
    /// As [`Self::set_share_group_config`].
    pub async fn remove_share_group_dead_letter_queue(
        &self,
        group_id: &str,
    ) -> Result<(), AdminError> {
        self.call(
            "remove_share_group_dead_letter_queue",
            self.alter_group(
                group_id,
                vec![delete(DLQ_TOPIC_NAME), delete(DLQ_COPY_RECORD_ENABLE)],
            ),
        )
        .await
    }

    /// IncrementalAlterConfigs of `configs` on the group `group_id`.
    async fn alter_group(
        &self,
        group_id: &str,
        configs: Vec<AlterableConfig>,
    ) -> Result<(), Failure> {
        let connection = self.connection().await?;
        let key = ApiKey::IncrementalAlterConfigs;
        let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(RESOURCE_GROUP)
                .with_resource_name(StrBytes::from_string(group_id.to_owned()))
                .with_configs(configs),
        ]);
        let response: IncrementalAlterConfigsResponse =
            negotiate_and_send(&connection, key, &request).await?;
        let result = response
            .responses
            .iter()
            .find(|r| r.resource_type == RESOURCE_GROUP && r.resource_name.as_str() == group_id)
            .ok_or_else(|| missing(&connection, key, group_id))?;
        Ok(check(
            api_name(key),
            result.error_code,
            result.error_message.as_ref(),
        )?)
    }
}

/// Operation SET of `name` to `value`.
fn set(name: &str, value: &str) -> AlterableConfig {
    AlterableConfig::default()
        .with_name(StrBytes::from_string(name.to_owned()))
        .with_config_operation(CONFIG_OPERATION_SET)
        .with_value(Some(StrBytes::from_string(value.to_owned())))
}

/// Operation DELETE of `name`.
fn delete(name: &str) -> AlterableConfig {
    AlterableConfig::default()
        .with_name(StrBytes::from_string(name.to_owned()))
        .with_config_operation(CONFIG_OPERATION_DELETE)
        .with_value(None)
}
