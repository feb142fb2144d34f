//! Topics with configs: creating a topic with topic configs, and reading a topic's configs back
//! (DescribeConfigs on resource type TOPIC), as `kafka-topics.sh --create --config` and
//! `kafka-configs.sh --describe --entity-type topics` do.

use kafka_protocol::messages::ApiKey;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::protocol::StrBytes;

use super::configs::ResourceConfigs;
use super::{AdminError, KafkaAdmin, named, topic_name};
use crate::kafka::consumer::group_configs::{self, RESOURCE_TOPIC};
use crate::kafka::error::ClientError;
use crate::kafka::net::connection::Connection;

/// DescribeConfigs config source TOPIC_CONFIG: set on the topic itself.
const SOURCE_TOPIC_CONFIG: i8 = 1;

/// The kind of [`TopicConfigs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicResource {}

/// The configs of a topic as a broker describes them ([`KafkaAdmin::topic_config`]): every
/// topic config, each with the value in force.
pub type TopicConfigs = ResourceConfigs<TopicResource>;

impl TopicConfigs {
    /// True when the topic sets `name` itself (source `TOPIC_CONFIG`), false for a default.
    pub fn is_set_on_topic(&self, name: &str) -> bool {
        self.is_set(name)
    }
}

impl KafkaAdmin {
    /// Creates a topic with topic configs, e.g. `[("cleanup.policy", "compact")]`, and waits
    /// (up to 30 s) until the metadata shows all its partitions with a leader.
    ///
    /// # Errors
    ///
    /// As [`Self::create_topic`]; `INVALID_CONFIG` (with the broker's explanation) for an
    /// unknown config or a bad value.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), kafka_share_sink::AdminError> {
    /// # let admin = kafka_share_sink::KafkaAdmin::connect("127.0.0.1:9092").await?;
    /// admin
    ///     .create_topic_with("customers", 3, 1, &[("cleanup.policy", "compact")])
    ///     .await?;
    /// assert_eq!(admin.topic_config("customers").await?.get("cleanup.policy"), Some("compact"));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As [`Self::create_topic`].
    pub async fn create_topic_with(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &[(&str, &str)],
    ) -> Result<(), AdminError> {
        let configs = configs
            .iter()
            .map(|(key, value)| {
                CreatableTopicConfig::default()
                    .with_name(StrBytes::from_string((*key).to_owned()))
                    .with_value(Some(StrBytes::from_string((*value).to_owned())))
            })
            .collect();
        let topic = CreatableTopic::default()
            .with_name(topic_name(name))
            .with_num_partitions(partitions)
            .with_replication_factor(replication_factor)
            .with_configs(configs);
        self.call("create_topic_with", self.create(name, topic, partitions))
            .await
    }

    /// The configs of `topic` as a broker describes them (DescribeConfigs, resource type
    /// TOPIC): every topic config, those the topic does not set with the broker's defaults.
    ///
    /// # Errors
    ///
    /// The topic's [`AdminError::Broker`] error, e.g. `UNKNOWN_TOPIC_OR_PARTITION`;
    /// [`AdminError::Timeout`] and the other errors of the connection and the request.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn topic_config(&self, topic: &str) -> Result<TopicConfigs, AdminError> {
        self.call("topic_config", async {
            let connection = self.connection().await?;
            describe(&connection, topic)
                .await
                .map_err(|error| named(ApiKey::DescribeConfigs, error))
        })
        .await
    }
}

/// DescribeConfigs of `topic` on `connection`: [`KafkaAdmin::topic_config`], and the
/// producer's read of a topic's `max.message.bytes`.
pub(crate) async fn describe(
    connection: &Connection,
    topic: &str,
) -> Result<TopicConfigs, ClientError> {
    let described = group_configs::describe(connection, RESOURCE_TOPIC, topic, None).await?;
    Ok(TopicConfigs::described(described, SOURCE_TOPIC_CONFIG))
}
