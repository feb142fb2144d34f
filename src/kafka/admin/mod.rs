//! [`KafkaAdmin`]: the few admin calls that setting up a share group needs, and moving a
//! partition's leader.

use std::collections::HashMap;
use std::time::Duration;

use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey, BrokerId,
    CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    ElectLeadersRequest, ElectLeadersResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::{Message, StrBytes, VersionRange};
use tokio::sync::Mutex;
use tracing::debug;

use crate::consumer::ConsumerError;
use crate::kafka::errors::{api_name, check};
use crate::kafka::net::connection::{Connection, ConnectionConfig};

/// Kafka's UNKNOWN_TOPIC_OR_PARTITION error code.
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

/// IncrementalAlterConfigs resource type GROUP (group configs, e.g. of share groups).
const RESOURCE_TYPE_GROUP: i8 = 32;

/// IncrementalAlterConfigs operation SET.
const CONFIG_OPERATION_SET: i8 = 0;

/// ElectLeaders election type PREFERRED: the first replica of the list becomes the leader.
const ELECTION_PREFERRED: i8 = 0;

/// ElectLeaders: the preferred replica is not in sync (yet).
const PREFERRED_LEADER_NOT_AVAILABLE: i16 = 80;

/// ElectLeaders: the preferred replica already leads.
const ELECTION_NOT_NEEDED: i16 = 84;

/// How long [`KafkaAdmin::move_leader`] waits for the new replica list and the new leader.
const LEADER_MOVE_WAIT: Duration = Duration::from_secs(60);

/// How long the broker may take over CreateTopics and DeleteTopics (below the request timeout).
const BROKER_TIMEOUT_MS: i32 = 25_000;

/// How long [`KafkaAdmin::create_topic`] and [`KafkaAdmin::delete_topic`] wait for the metadata
/// to show the change.
const METADATA_WAIT: Duration = Duration::from_secs(30);

/// The pause between two metadata checks while waiting.
const METADATA_POLL: Duration = Duration::from_millis(100);

/// The Metadata versions with topic ids.
const METADATA_WITH_TOPIC_IDS: VersionRange = VersionRange {
    min: 10,
    max: MetadataRequest::VERSIONS.max,
};

/// Where one partition of a topic lives, as the cluster metadata says
/// ([`KafkaAdmin::partitions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionPlacement {
    /// The partition index.
    pub partition: i32,
    /// The broker id of the leader; `None` while the partition has none (an election).
    pub leader: Option<i32>,
    /// The leader epoch, which grows with every leader change.
    pub leader_epoch: i32,
    /// The broker ids of the replicas, the preferred leader first.
    pub replicas: Vec<i32>,
    /// The broker ids of the in-sync replicas.
    pub isr: Vec<i32>,
}

/// An admin client for a Kafka cluster: create and delete topics, set share-group configs,
/// resolve topic ids, see where partitions live and move a partition's leader.
///
/// It keeps one connection to a bootstrap broker and sends everything there: in KRaft mode
/// brokers forward CreateTopics, DeleteTopics, IncrementalAlterConfigs,
/// AlterPartitionReassignments and ElectLeaders to the controller.
/// A closed connection is replaced on the next call.
///
/// Errors are [`ConsumerError`]s: a broker error code is a [`ConsumerError::Broker`] named as
/// Kafka names it (for example `TOPIC_ALREADY_EXISTS`).
///
/// # Example
///
/// ```no_run
/// use kafka_share_sink::KafkaAdmin;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), kafka_share_sink::ConsumerError> {
/// let admin = KafkaAdmin::connect("127.0.0.1:9092").await?;
/// admin.create_topic("orders", 3, 1).await?;
/// admin
///     .set_share_group_config("order-sink", &[("share.auto.offset.reset", "earliest")])
///     .await?;
/// let ids = admin.topic_ids(&["orders"]).await?;
/// assert_eq!(ids.len(), 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct KafkaAdmin {
    /// Where to reconnect: the bootstrap list, then the brokers learnt from Metadata.
    addresses: String,
    /// Settings of the connection.
    config: ConnectionConfig,
    /// The connection, replaced when it closes.
    connection: Mutex<Connection>,
    /// The controller id the Metadata of `connect` reported (in KRaft, a random live broker).
    controller_id: i32,
}

impl KafkaAdmin {
    /// Connects to the first reachable broker of `bootstrap` (comma-separated `host:port`
    /// addresses) and reads the cluster metadata.
    ///
    /// # Errors
    ///
    /// [`ConsumerError::Connection`] when no broker can be reached, or any error of the
    /// Metadata call.
    pub async fn connect(bootstrap: &str) -> Result<Self, ConsumerError> {
        let config = ConnectionConfig::default();
        let connection = Connection::connect_any(bootstrap, &config).await?;
        let metadata = metadata(&connection, Some(&[]), MetadataRequest::VERSIONS).await?;
        let mut addresses = bootstrap.to_owned();
        for broker in &metadata.brokers {
            addresses.push_str(&format!(",{}:{}", broker.host.as_str(), broker.port));
        }
        debug!(
            broker = connection.broker(),
            brokers = metadata.brokers.len(),
            controller = metadata.controller_id.0,
            "admin connected"
        );
        Ok(Self {
            addresses,
            config,
            connection: Mutex::new(connection),
            controller_id: metadata.controller_id.0,
        })
    }

    /// Creates a topic and waits (up to 30 s) until the metadata shows all its partitions
    /// with a leader.
    ///
    /// # Errors
    ///
    /// A [`ConsumerError::Broker`] for the topic's error code, e.g. `TOPIC_ALREADY_EXISTS`,
    /// `INVALID_REPLICATION_FACTOR` or `INVALID_PARTITIONS`; [`ConsumerError::Timeout`] when
    /// the partitions have no leaders in time; connection and protocol errors.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
    ) -> Result<(), ConsumerError> {
        let topic = CreatableTopic::default()
            .with_name(topic_name(name))
            .with_num_partitions(partitions)
            .with_replication_factor(replication_factor);
        self.create(name, topic, partitions).await
    }

    /// Creates a topic whose partition `i` lives on the brokers `replicas[i]`, the first of
    /// them its (preferred) leader, and waits (up to 30 s) until the metadata shows every
    /// partition with a leader.
    ///
    /// # Errors
    ///
    /// As [`Self::create_topic`]; `INVALID_REPLICA_ASSIGNMENT` for an unknown broker id or a
    /// broker named twice; [`ConsumerError::Config`] for an empty list.
    pub async fn create_topic_with_replicas(
        &self,
        name: &str,
        replicas: &[Vec<i32>],
    ) -> Result<(), ConsumerError> {
        let partitions = i32::try_from(replicas.len()).unwrap_or(i32::MAX);
        if replicas.is_empty() || replicas.iter().any(Vec::is_empty) {
            return Err(ConsumerError::Config {
                key: "replicas".to_owned(),
                reason: "give one or more partitions, each with one or more broker ids".to_owned(),
            });
        }
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
    }

    /// Sends CreateTopics for `topic` and waits for its `partitions` partitions to have leaders.
    async fn create(
        &self,
        name: &str,
        topic: CreatableTopic,
        partitions: i32,
    ) -> Result<(), ConsumerError> {
        let connection = self.connection().await?;
        let key = ApiKey::CreateTopics;
        let version = connection.negotiate(key, CreateTopicsRequest::VERSIONS)?;
        let request = CreateTopicsRequest::default()
            .with_topics(vec![topic])
            .with_timeout_ms(BROKER_TIMEOUT_MS);
        let response: CreateTopicsResponse = connection.request(key, version, &request).await?;
        let result = response
            .topics
            .iter()
            .find(|t| t.name.0.as_str() == name)
            .ok_or_else(|| missing(&connection, key, name))?;
        check(
            api_name(key),
            result.error_code,
            result.error_message.as_ref(),
        )?;
        let expected = usize::try_from(partitions).ok();
        wait_for_metadata(&connection, name, METADATA_WAIT, |topic| {
            // Not yet known to this broker, or some partition has no leader yet: keep waiting.
            topic.is_some_and(|topic| {
                topic.error_code == 0
                    && Some(topic.partitions.len()) == expected
                    && topic
                        .partitions
                        .iter()
                        .all(|p| p.error_code == 0 && p.leader_id.0 >= 0)
            })
        })
        .await
    }

    /// Deletes a topic and waits (up to 30 s) until the metadata no longer shows it.
    ///
    /// # Errors
    ///
    /// A [`ConsumerError::Broker`] for the topic's error code, e.g.
    /// `UNKNOWN_TOPIC_OR_PARTITION`; [`ConsumerError::Timeout`]; connection and protocol errors.
    pub async fn delete_topic(&self, name: &str) -> Result<(), ConsumerError> {
        let connection = self.connection().await?;
        let key = ApiKey::DeleteTopics;
        let version = connection.negotiate(key, DeleteTopicsRequest::VERSIONS)?;
        let request = if version >= 6 {
            DeleteTopicsRequest::default().with_topics(vec![
                DeleteTopicState::default().with_name(Some(topic_name(name))),
            ])
        } else {
            DeleteTopicsRequest::default().with_topic_names(vec![topic_name(name)])
        }
        .with_timeout_ms(BROKER_TIMEOUT_MS);
        let response: DeleteTopicsResponse = connection.request(key, version, &request).await?;
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
        wait_for_metadata(&connection, name, METADATA_WAIT, |topic| {
            topic.is_none_or(|topic| topic.error_code == UNKNOWN_TOPIC_OR_PARTITION)
        })
        .await
    }

    /// Sets configs of the group `group_id` (IncrementalAlterConfigs, resource type GROUP,
    /// operation SET), e.g. `share.auto.offset.reset=earliest`, `share.isolation.level`,
    /// `share.record.lock.duration.ms`. The group need not exist yet.
    ///
    /// # Errors
    ///
    /// The group's [`ConsumerError::Broker`] error, e.g. `INVALID_CONFIG` with the broker's
    /// explanation for an unknown key or a bad value; connection and protocol errors.
    pub async fn set_share_group_config(
        &self,
        group_id: &str,
        configs: &[(&str, &str)],
    ) -> Result<(), ConsumerError> {
        let connection = self.connection().await?;
        let key = ApiKey::IncrementalAlterConfigs;
        let version = connection.negotiate(key, IncrementalAlterConfigsRequest::VERSIONS)?;
        let configs = configs
            .iter()
            .map(|(name, value)| {
                AlterableConfig::default()
                    .with_name(StrBytes::from_string((*name).to_owned()))
                    .with_config_operation(CONFIG_OPERATION_SET)
                    .with_value(Some(StrBytes::from_string((*value).to_owned())))
            })
            .collect();
        let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(RESOURCE_TYPE_GROUP)
                .with_resource_name(StrBytes::from_string(group_id.to_owned()))
                .with_configs(configs),
        ]);
        let response: IncrementalAlterConfigsResponse =
            connection.request(key, version, &request).await?;
        let result = response
            .responses
            .iter()
            .find(|r| {
                r.resource_type == RESOURCE_TYPE_GROUP && r.resource_name.as_str() == group_id
            })
            .ok_or_else(|| missing(&connection, key, group_id))?;
        check(
            api_name(key),
            result.error_code,
            result.error_message.as_ref(),
        )
    }

    /// The topic ids (16 bytes, as on the wire) of `topics`, from Metadata v10 or later.
    ///
    /// # Errors
    ///
    /// A [`ConsumerError::Broker`] naming the first topic that cannot be resolved, e.g.
    /// `UNKNOWN_TOPIC_OR_PARTITION`; [`ConsumerError::Unsupported`] for a broker without
    /// Metadata v10; connection and protocol errors.
    pub async fn topic_ids(
        &self,
        topics: &[&str],
    ) -> Result<HashMap<String, [u8; 16]>, ConsumerError> {
        let connection = self.connection().await?;
        let response = metadata(&connection, Some(topics), METADATA_WITH_TOPIC_IDS).await?;
        let mut ids = HashMap::with_capacity(topics.len());
        for name in topics {
            let topic = response
                .topics
                .iter()
                .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == *name))
                .ok_or_else(|| missing(&connection, ApiKey::Metadata, name))?;
            check(api_name(ApiKey::Metadata), topic.error_code, None)
                .map_err(|error| with_topic(error, name))?;
            ids.insert((*name).to_owned(), topic.topic_id.into_bytes());
        }
        Ok(ids)
    }

    /// The ids of the live brokers of the cluster, in ascending order.
    ///
    /// # Errors
    ///
    /// Connection and protocol errors of the Metadata call.
    pub async fn broker_ids(&self) -> Result<Vec<i32>, ConsumerError> {
        let connection = self.connection().await?;
        let response = metadata(&connection, Some(&[]), MetadataRequest::VERSIONS).await?;
        let mut ids: Vec<i32> = response.brokers.iter().map(|b| b.node_id.0).collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// Where the partitions of `topic` live: leader, leader epoch, replicas and in-sync
    /// replicas, by partition index.
    ///
    /// # Errors
    ///
    /// A [`ConsumerError::Broker`] for the topic, e.g. `UNKNOWN_TOPIC_OR_PARTITION`;
    /// connection and protocol errors.
    pub async fn partitions(&self, topic: &str) -> Result<Vec<PartitionPlacement>, ConsumerError> {
        let connection = self.connection().await?;
        let response = metadata(&connection, Some(&[topic]), MetadataRequest::VERSIONS).await?;
        let found = response
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
            .ok_or_else(|| missing(&connection, ApiKey::Metadata, topic))?;
        check(api_name(ApiKey::Metadata), found.error_code, None)
            .map_err(|error| with_topic(error, topic))?;
        let mut placements: Vec<PartitionPlacement> =
            found.partitions.iter().map(placement).collect();
        placements.sort_by_key(|p| p.partition);
        Ok(placements)
    }

    /// Moves the leadership of `partition` of `topic` to broker `to` while producers and
    /// consumers keep running, as `kafka-reassign-partitions.sh` followed by
    /// `kafka-leader-election.sh --election-type PREFERRED` would.
    ///
    /// The replica list is reordered with `to` first (AlterPartitionReassignments); if `to` is
    /// not a replica yet it takes the place of the last one, and the partition's data is copied
    /// to it first. Then the preferred replica is elected (ElectLeaders). Returns once the
    /// metadata of every live broker names `to` the leader (so the old leader refuses the
    /// partition's fetches and acknowledgements from then on); at once if `to` already leads.
    /// Gives up after 60 s.
    ///
    /// # Errors
    ///
    /// A [`ConsumerError::Broker`] of either request, e.g. `INVALID_REPLICA_ASSIGNMENT` for
    /// an unknown broker, `UNKNOWN_TOPIC_OR_PARTITION`, or `PREFERRED_LEADER_NOT_AVAILABLE`
    /// when `to` never joins the in-sync replicas; [`ConsumerError::Timeout`] when the
    /// metadata does not show the move in time; connection and protocol errors.
    pub async fn move_leader(
        &self,
        topic: &str,
        partition: i32,
        to: i32,
    ) -> Result<(), ConsumerError> {
        let deadline = tokio::time::Instant::now() + LEADER_MOVE_WAIT;
        let current = self
            .partitions(topic)
            .await?
            .into_iter()
            .find(|p| p.partition == partition)
            .ok_or_else(|| ConsumerError::Broker {
                api: api_name(ApiKey::Metadata),
                code: UNKNOWN_TOPIC_OR_PARTITION,
                name: "UNKNOWN_TOPIC_OR_PARTITION",
                message: Some(format!("topic `{topic}` has no partition {partition}")),
                retriable: true,
            })?;
        if current.leader == Some(to) {
            return Ok(());
        }
        let connection = self.connection().await?;
        if current.replicas.first() != Some(&to) {
            let mut target = vec![to];
            target.extend(current.replicas.iter().copied().filter(|r| *r != to));
            target.truncate(current.replicas.len().max(1));
            reassign(&connection, topic, partition, &target).await?;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            wait_for_metadata(&connection, topic, left, |t| {
                partition_of(t, partition)
                    .is_some_and(|p| p.replicas == target && p.isr.contains(&to))
            })
            .await?;
        }
        elect_preferred(&connection, topic, partition, deadline).await?;
        let moved = |t: Option<&MetadataResponseTopic>| {
            partition_of(t, partition).is_some_and(|p| p.leader == Some(to))
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        wait_for_metadata(&connection, topic, left, moved).await?;
        // Every broker applies the change on its own: until the old leader has, it still takes
        // fetches and acknowledgements for the partition. Wait until each live broker knows.
        let brokers = metadata(&connection, Some(&[]), MetadataRequest::VERSIONS)
            .await?
            .brokers;
        for broker in brokers {
            let address = format!("{}:{}", broker.host.as_str(), broker.port);
            let Ok(other) = Connection::connect(&address, &self.config).await else {
                debug!(broker = address, "unreachable; it serves nothing either");
                continue;
            };
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            wait_for_metadata(&other, topic, left, moved).await?;
        }
        Ok(())
    }

    /// The Metadata of `topics` (`None`: all topics), at the highest version both sides
    /// support, for crate code that needs more than [`Self::topic_ids`].
    #[allow(dead_code, reason = "for the share consumer's topic-id resolution")]
    pub(crate) async fn metadata(
        &self,
        topics: Option<&[&str]>,
    ) -> Result<MetadataResponse, ConsumerError> {
        let connection = self.connection().await?;
        metadata(&connection, topics, MetadataRequest::VERSIONS).await
    }

    /// The controller id reported when connecting (in KRaft mode, a random live broker).
    #[allow(dead_code, reason = "kept for diagnostics")]
    pub(crate) fn controller_id(&self) -> i32 {
        self.controller_id
    }

    /// The connection, reconnected first if it closed.
    async fn connection(&self) -> Result<Connection, ConsumerError> {
        let mut connection = self.connection.lock().await;
        if connection.is_closed() {
            debug!(
                broker = connection.broker(),
                "admin connection closed, reconnecting"
            );
            *connection = Connection::connect_any(&self.addresses, &self.config).await?;
        }
        Ok(connection.clone())
    }
}

/// Polls the metadata of `name` until `done` says so, for up to `wait`.
async fn wait_for_metadata(
    connection: &Connection,
    name: &str,
    wait: Duration,
    done: impl Fn(Option<&MetadataResponseTopic>) -> bool,
) -> Result<(), ConsumerError> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let response = metadata(connection, Some(&[name]), MetadataRequest::VERSIONS).await?;
        let topic = response
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == name));
        if done(topic) {
            return Ok(());
        }
        if tokio::time::Instant::now() + METADATA_POLL > deadline {
            debug!(topic = name, "metadata did not settle in time");
            return Err(ConsumerError::Timeout(wait));
        }
        tokio::time::sleep(METADATA_POLL).await;
    }
}

/// A partition's placement from its Metadata entry.
fn placement(
    p: &kafka_protocol::messages::metadata_response::MetadataResponsePartition,
) -> PartitionPlacement {
    PartitionPlacement {
        partition: p.partition_index,
        leader: (p.leader_id.0 >= 0).then_some(p.leader_id.0),
        leader_epoch: p.leader_epoch,
        replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
        isr: p.isr_nodes.iter().map(|b| b.0).collect(),
    }
}

/// The placement of `partition` in a topic's Metadata entry, if it is there without error.
fn partition_of(
    topic: Option<&MetadataResponseTopic>,
    partition: i32,
) -> Option<PartitionPlacement> {
    topic
        .filter(|t| t.error_code == 0)?
        .partitions
        .iter()
        .find(|p| p.partition_index == partition && p.error_code == 0)
        .map(placement)
}

/// AlterPartitionReassignments of one partition to `replicas`.
async fn reassign(
    connection: &Connection,
    topic: &str,
    partition: i32,
    replicas: &[i32],
) -> Result<(), ConsumerError> {
    let key = ApiKey::AlterPartitionReassignments;
    let version = connection.negotiate(key, AlterPartitionReassignmentsRequest::VERSIONS)?;
    let request = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(BROKER_TIMEOUT_MS)
        .with_topics(vec![
            ReassignableTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(vec![
                    ReassignablePartition::default()
                        .with_partition_index(partition)
                        .with_replicas(Some(replicas.iter().copied().map(BrokerId).collect())),
                ]),
        ]);
    let response: AlterPartitionReassignmentsResponse =
        connection.request(key, version, &request).await?;
    check(
        api_name(key),
        response.error_code,
        response.error_message.as_ref(),
    )?;
    let result = response
        .responses
        .iter()
        .filter(|t| t.name.0.as_str() == topic)
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == partition)
        .ok_or_else(|| missing(connection, key, topic))?;
    check(
        api_name(key),
        result.error_code,
        result.error_message.as_ref(),
    )
}

/// ElectLeaders (PREFERRED) of one partition, retried while the preferred replica is not in
/// sync yet, until `deadline`. ELECTION_NOT_NEEDED counts as done.
async fn elect_preferred(
    connection: &Connection,
    topic: &str,
    partition: i32,
    deadline: tokio::time::Instant,
) -> Result<(), ConsumerError> {
    let key = ApiKey::ElectLeaders;
    let version = connection.negotiate(key, ElectLeadersRequest::VERSIONS)?;
    let request = ElectLeadersRequest::default()
        .with_election_type(ELECTION_PREFERRED)
        .with_timeout_ms(BROKER_TIMEOUT_MS)
        .with_topic_partitions(Some(vec![
            TopicPartitions::default()
                .with_topic(topic_name(topic))
                .with_partitions(vec![partition]),
        ]));
    loop {
        let response: ElectLeadersResponse = connection.request(key, version, &request).await?;
        check(api_name(key), response.error_code, None)?;
        let result = response
            .replica_election_results
            .iter()
            .filter(|t| t.topic.0.as_str() == topic)
            .flat_map(|t| t.partition_result.iter())
            .find(|p| p.partition_id == partition)
            .ok_or_else(|| missing(connection, key, topic))?;
        match result.error_code {
            0 | ELECTION_NOT_NEEDED => return Ok(()),
            PREFERRED_LEADER_NOT_AVAILABLE
                if tokio::time::Instant::now() + METADATA_POLL < deadline =>
            {
                debug!(
                    topic,
                    partition, "preferred replica not in sync yet; electing again"
                );
                tokio::time::sleep(METADATA_POLL).await;
            }
            code => return check(api_name(key), code, result.error_message.as_ref()),
        }
    }
}

/// Sends Metadata for `topics` (`None`: all; never auto-creates) at the highest version in
/// `ours` the broker offers. A top-level error (v13) is an error.
async fn metadata(
    connection: &Connection,
    topics: Option<&[&str]>,
    ours: VersionRange,
) -> Result<MetadataResponse, ConsumerError> {
    let key = ApiKey::Metadata;
    let version = connection.negotiate(key, ours)?;
    let topics = topics.map(|topics| {
        topics
            .iter()
            .map(|name| MetadataRequestTopic::default().with_name(Some(topic_name(name))))
            .collect()
    });
    let request = MetadataRequest::default()
        .with_topics(topics)
        .with_allow_auto_topic_creation(false);
    let response: MetadataResponse = connection.request(key, version, &request).await?;
    check(api_name(key), response.error_code, None)?;
    Ok(response)
}

/// A topic name for a request.
fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

/// The error for a response that lacks the entry of what was asked about.
fn missing(connection: &Connection, key: ApiKey, name: &str) -> ConsumerError {
    ConsumerError::Protocol {
        broker: connection.broker().to_owned(),
        reason: format!("the {} response has no entry for `{name}`", api_name(key)),
    }
}

/// Adds the topic name to a broker error without a message.
fn with_topic(error: ConsumerError, topic: &str) -> ConsumerError {
    match error {
        ConsumerError::Broker {
            api,
            code,
            name,
            message: None,
            retriable,
        } => ConsumerError::Broker {
            api,
            code,
            name,
            message: Some(format!("topic `{topic}`")),
            retriable,
        },
        other => other,
    }
}
