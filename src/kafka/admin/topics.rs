//! Creating and deleting topics, and resolving topic ids.

use std::collections::HashMap;
use std::time::Duration;

use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest,
    DeleteTopicsResponse,
};
use kafka_protocol::protocol::{Message, StrBytes};

use super::{
    AdminError, Failure, KafkaAdmin, metadata, missing, missing_entry, named, negotiate, send,
    topic_name,
};
use crate::kafka::cluster::metadata::{UNKNOWN_TOPIC_OR_PARTITION, WITH_TOPIC_IDS};
use crate::kafka::consumer::group_configs::DLQ_GROUP_ENABLE;
use crate::kafka::error::ClientError;
use crate::kafka::error::codes::{api_name, check};
use crate::kafka::net::connection::Connection;

/// The topic config of the timestamp a topic keeps.
const MESSAGE_TIMESTAMP_TYPE: &str = "message.timestamp.type";

/// How long [`KafkaAdmin::create_topic`] and [`KafkaAdmin::delete_topic`] wait for the metadata
/// to show the change.
const METADATA_WAIT: Duration = Duration::from_secs(30);

impl KafkaAdmin {
    /// Creates a topic and waits (up to 30 s) until the metadata shows all its partitions
    /// with a leader.
    ///
    /// # Errors
    ///
    /// An [`AdminError::Broker`] for the topic's error code, e.g. `TOPIC_ALREADY_EXISTS`,
    /// `INVALID_REPLICATION_FACTOR` or `INVALID_PARTITIONS`; [`AdminError::NotSettled`] when
    /// the partitions have no leaders in time; [`AdminError::Timeout`] and the other errors of
    /// the connection and the requests.
    ///
    /// # Cancel safety
    ///
    /// The admin stays usable, but once CreateTopics was sent the topic may be created
    /// whether or not the future is dropped. [`Self::topic_ids`] tells; creating it again
    /// fails with `TOPIC_ALREADY_EXISTS`.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
    ) -> Result<(), AdminError> {
        let topic = CreatableTopic::default()
            .with_name(topic_name(name))
            .with_num_partitions(partitions)
            .with_replication_factor(replication_factor);
        self.call("create_topic", self.create(name, topic, partitions))
            .await
    }

    /// Creates a topic for a share group's dead-letter queue of the broker's own (KIP-1191,
    /// Kafka 4.4), and waits (up to 30 s) until the metadata shows all its partitions with a
    /// leader: a topic with the topic config `errors.deadletterqueue.group.enable=true`,
    /// without which a broker refuses to write a share group's dead-letter records to it, and
    /// `message.timestamp.type=CreateTime`, which keeps the time the broker gives each record
    /// (when it wrote it to the queue), as on a topic the broker creates itself.
    ///
    /// Give `name` the cluster's `errors.deadletterqueue.topic.name.prefix` (default `dlq.`):
    /// the broker writes to no dead-letter topic without it, though it creates the topic.
    /// The broker writes a record whose source partition is `p` to partition
    /// `p % partitions`. Then point a group at it with
    /// [`Self::set_share_group_dead_letter_queue`].
    ///
    /// # Errors
    ///
    /// As [`Self::create_topic`]; `INVALID_CONFIG` from a broker before 4.4, which does not
    /// know the topic config.
    ///
    /// # Cancel safety
    ///
    /// As [`Self::create_topic`].
    pub async fn create_dead_letter_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
    ) -> Result<(), AdminError> {
        let config = |name: &str, value: &str| {
            CreatableTopicConfig::default()
                .with_name(StrBytes::from_string(name.to_owned()))
                .with_value(Some(StrBytes::from_string(value.to_owned())))
        };
        let topic = CreatableTopic::default()
            .with_name(topic_name(name))
            .with_num_partitions(partitions)
            .with_replication_factor(replication_factor)
            .with_configs(vec![
                config(DLQ_GROUP_ENABLE, "true"),
                config(MESSAGE_TIMESTAMP_TYPE, "CreateTime"),
            ]);
        self.call(
            "create_dead_letter_topic",
            self.create(name, topic, partitions),
        )
        .await
    }

    /// Creates a topic whose partition `i` lives on the brokers `replicas[i]`, the first of
    /// them its (preferred) leader, and waits (up to 30 s) until the metadata shows every
    /// partition with a leader.
    ///
    /// # Errors
    ///
    /// As [`Self::create_topic`]; `INVALID_REPLICA_ASSIGNMENT` for an unknown broker id or a
    /// broker named twice; [`AdminError::InvalidArgument`] for an empty list.
    ///
    /// # Cancel safety
    ///
    /// As [`Self::create_topic`].
    pub async fn create_topic_with_replicas(
        &self,
        name: &str,
        replicas: &[Vec<i32>],
    ) -> Result<(), AdminError> {
        self.call("create_topic_with_replicas", async {
            if replicas.is_empty() || replicas.iter().any(Vec::is_empty) {
                return Err(Failure::InvalidArgument(
                    "give one or more partitions, each with one or more broker ids".to_owned(),
                ));
            }
            let partitions = i32::try_from(replicas.len()).map_err(|_| {
                Failure::InvalidArgument(format!(
                    "{} partitions are more than a topic can have",
                    replicas.len()
                ))
            })?;
            let assignments = (0..partitions)
                .zip(replicas)
                .map(|(partition, brokers)| {
                    CreatableReplicaAssignment::default()
                        .with_partition_index(partition)
                        .with_broker_ids(brokers.iter().copied().map(BrokerId).collect())
                })
                .collect();
            // With an explicit assignment the count and the factor must be -1.
            let topic = CreatableTopic::default()
                .with_name(topic_name(name))
                .with_num_partitions(-1)
                .with_replication_factor(-1)
                .with_assignments(assignments);
            self.create(name, topic, partitions).await
        })
        .await
    }

    /// Sends CreateTopics for `topic` and waits for its `partitions` partitions to have leaders.
    pub(super) async fn create(
        &self,
        name: &str,
        topic: CreatableTopic,
        partitions: i32,
    ) -> Result<(), Failure> {
        let connection = self.connection().await?;
        create_topic(&connection, topic, self.broker_timeout_ms())
            .await
            .map_err(|error| named(ApiKey::CreateTopics, error))?;
        metadata::wait_for(
            &connection,
            name,
            METADATA_WAIT,
            || format!("topic `{name}` with {partitions} partition(s), each with a leader,"),
            // Not yet known to this broker, or some partition has no leader yet: keep waiting.
            |topic| topic.is_some_and(|topic| topic.all_led(partitions)),
        )
        .await
    }

    /// Deletes a topic and waits (up to 30 s) until the metadata no longer shows it.
    ///
    /// # Errors
    ///
    /// An [`AdminError::Broker`] for the topic's error code, e.g.
    /// `UNKNOWN_TOPIC_OR_PARTITION`; [`AdminError::NotSettled`] when the topic still shows
    /// after 30 s; [`AdminError::Timeout`] and the other errors of the connection and the
    /// requests.
    ///
    /// # Cancel safety
    ///
    /// The admin stays usable, but once DeleteTopics was sent the topic may be deleted
    /// whether or not the future is dropped; deleting it again then fails with
    /// `UNKNOWN_TOPIC_OR_PARTITION`.
    pub async fn delete_topic(&self, name: &str) -> Result<(), AdminError> {
        self.call("delete_topic", async {
            let connection = self.connection().await?;
            let key = ApiKey::DeleteTopics;
            let version = negotiate(&connection, key, DeleteTopicsRequest::VERSIONS)?;
            let request = if version >= 6 {
                DeleteTopicsRequest::default().with_topics(vec![
                    DeleteTopicState::default().with_name(Some(topic_name(name))),
                ])
            } else {
                DeleteTopicsRequest::default().with_topic_names(vec![topic_name(name)])
            }
            .with_timeout_ms(self.broker_timeout_ms());
            let response: DeleteTopicsResponse = send(&connection, key, version, &request).await?;
            let result = response
                .responses
                .iter()
                .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == name))
                .ok_or_else(|| missing(&connection, key, name))?;
            check(
                api_name(key),
                result.error_code,
                result.error_message.as_ref(),
            )?;
            metadata::wait_for(
                &connection,
                name,
                METADATA_WAIT,
                || format!("the deletion of topic `{name}`"),
                |topic| topic.is_none_or(|topic| topic.error_code == UNKNOWN_TOPIC_OR_PARTITION),
            )
            .await
        })
        .await
    }

    /// The topic ids (16 bytes, as on the wire) of `topics`, from Metadata v10 or later.
    ///
    /// # Errors
    ///
    /// An [`AdminError::Broker`] naming the first topic that cannot be resolved, e.g.
    /// `UNKNOWN_TOPIC_OR_PARTITION`; [`AdminError::Unsupported`] for a broker without
    /// Metadata v10; errors of the connection and of the Metadata call.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn topic_ids(
        &self,
        topics: &[&str],
    ) -> Result<HashMap<String, [u8; 16]>, AdminError> {
        self.call("topic_ids", async {
            let connection = self.connection().await?;
            let snapshot = self
                .metadata_on(&connection, Some(topics), WITH_TOPIC_IDS)
                .await?;
            let mut ids = HashMap::with_capacity(topics.len());
            for name in topics {
                let topic = metadata::known_topic(&connection, &snapshot, name)?;
                ids.insert((*name).to_owned(), topic.id.into_bytes());
            }
            Ok(ids)
        })
        .await
    }
}

/// CreateTopics of `topic` on `connection`, the broker given `timeout_ms`, and its result
/// checked: [`KafkaAdmin`]'s creates, and the dead-letter queue's, which waits for the leaders
/// itself.
pub(crate) async fn create_topic(
    connection: &Connection,
    topic: CreatableTopic,
    timeout_ms: i32,
) -> Result<(), ClientError> {
    let key = ApiKey::CreateTopics;
    let version = connection.negotiate(key, CreateTopicsRequest::VERSIONS)?;
    let name = topic.name.0.to_string();
    let request = CreateTopicsRequest::default()
        .with_topics(vec![topic])
        .with_timeout_ms(timeout_ms);
    let response: CreateTopicsResponse = connection.request(key, version, &request).await?;
    let result = response
        .topics
        .iter()
        .find(|t| t.name.0.as_str() == name)
        .ok_or_else(|| missing_entry(connection, key, &name))?;
    check(
        api_name(key),
        result.error_code,
        result.error_message.as_ref(),
    )
}
