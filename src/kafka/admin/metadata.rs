//! The Metadata request of the admin calls: the cluster's brokers, where partitions live, and
//! waiting until the metadata shows a change.

use std::time::Duration;

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::{
    MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse};
use kafka_protocol::protocol::{Message, VersionRange};
use tracing::debug;

use super::{AdminError, Failure, KafkaAdmin, negotiate, send, topic_name};
use crate::consumer::ConsumerError;
use crate::kafka::errors::{api_name, check};
use crate::kafka::net::connection::Connection;

/// The pause between two metadata checks while waiting.
const METADATA_POLL: Duration = Duration::from_millis(100);

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

impl KafkaAdmin {
    /// The ids of the live brokers of the cluster, in ascending order.
    ///
    /// # Errors
    ///
    /// Errors of the connection and of the Metadata call, e.g. [`AdminError::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn broker_ids(&self) -> Result<Vec<i32>, AdminError> {
        self.call("broker_ids", async {
            let connection = self.connection().await?;
            let response = request(&connection, Some(&[]), MetadataRequest::VERSIONS).await?;
            let mut ids: Vec<i32> = response.brokers.iter().map(|b| b.node_id.0).collect();
            ids.sort_unstable();
            Ok(ids)
        })
        .await
    }

    /// Where the partitions of `topic` live: leader, leader epoch, replicas and in-sync
    /// replicas, by partition index.
    ///
    /// # Errors
    ///
    /// An [`AdminError::Broker`] for the topic, e.g. `UNKNOWN_TOPIC_OR_PARTITION`; errors of
    /// the connection and of the Metadata call.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn partitions(&self, topic: &str) -> Result<Vec<PartitionPlacement>, AdminError> {
        self.call("partitions", self.placements(topic)).await
    }

    /// [`Self::partitions`], before the failure is named.
    pub(super) async fn placements(&self, topic: &str) -> Result<Vec<PartitionPlacement>, Failure> {
        let connection = self.connection().await?;
        let response = request(&connection, Some(&[topic]), MetadataRequest::VERSIONS).await?;
        let found = response
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
            .ok_or_else(|| super::missing(&connection, ApiKey::Metadata, topic))?;
        check(api_name(ApiKey::Metadata), found.error_code, None)
            .map_err(|error| super::with_topic(error, topic))?;
        let mut placements: Vec<PartitionPlacement> =
            found.partitions.iter().map(placement).collect();
        placements.sort_by_key(|p| p.partition);
        Ok(placements)
    }

    /// The Metadata of `topics` (`None`: all topics), at the highest version both sides
    /// support, for crate code that needs more than [`Self::topic_ids`] and reports
    /// [`ConsumerError`]s (the dead-letter queue).
    pub(crate) async fn metadata(
        &self,
        topics: Option<&[&str]>,
    ) -> Result<MetadataResponse, ConsumerError> {
        self.run(async {
            let connection = self.connection().await?;
            request(&connection, topics, MetadataRequest::VERSIONS).await
        })
        .await
        .map_err(Failure::into_consumer)
    }
}

/// Sends Metadata for `topics` (`None`: all; never auto-creates) at the highest version in
/// `ours` the broker offers. A top-level error (v13) is an error.
pub(super) async fn request(
    connection: &Connection,
    topics: Option<&[&str]>,
    ours: VersionRange,
) -> Result<MetadataResponse, Failure> {
    let key = ApiKey::Metadata;
    let version = negotiate(connection, key, ours)?;
    let topics = topics.map(|topics| {
        topics
            .iter()
            .map(|name| MetadataRequestTopic::default().with_name(Some(topic_name(name))))
            .collect()
    });
    let request = MetadataRequest::default()
        .with_topics(topics)
        .with_allow_auto_topic_creation(false);
    let response: MetadataResponse = send(connection, key, version, &request).await?;
    check(api_name(key), response.error_code, None)?;
    Ok(response)
}

/// Polls the metadata of `name` until `done` says so, for up to `wait`; `what` says what is
/// waited for, in the failure.
pub(super) async fn wait_for(
    connection: &Connection,
    name: &str,
    wait: Duration,
    what: impl FnOnce() -> String,
    done: impl Fn(Option<&MetadataResponseTopic>) -> bool,
) -> Result<(), Failure> {
    let start = tokio::time::Instant::now();
    loop {
        let response = request(connection, Some(&[name]), MetadataRequest::VERSIONS).await?;
        let topic = response
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == name));
        if done(topic) {
            return Ok(());
        }
        let waited = start.elapsed();
        if waited.saturating_add(METADATA_POLL) > wait {
            debug!(topic = name, "metadata did not settle in time");
            return Err(Failure::NotSettled {
                what: what(),
                waited,
            });
        }
        tokio::time::sleep(METADATA_POLL).await;
    }
}

/// A partition's placement from its Metadata entry.
fn placement(p: &MetadataResponsePartition) -> PartitionPlacement {
    PartitionPlacement {
        partition: p.partition_index,
        leader: (p.leader_id.0 >= 0).then_some(p.leader_id.0),
        leader_epoch: p.leader_epoch,
        replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
        isr: p.isr_nodes.iter().map(|b| b.0).collect(),
    }
}

/// The placement of `partition` in a topic's Metadata entry, if it is there without error.
pub(super) fn partition_of(
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
