//! The admin's side of Metadata (asked through [`crate::kafka::cluster::metadata`]): the
//! cluster's brokers, where partitions live, and waiting until the metadata shows a change.

use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::VersionRange;
use tracing::debug;

use super::{AdminError, Failure, KafkaAdmin, named};
use crate::kafka::cluster::metadata::{self, ANY_VERSION, Partition, Snapshot, Topic};
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
            let snapshot = self
                .metadata_on(&connection, Some(&[]), ANY_VERSION)
                .await?;
            Ok(snapshot.brokers.into_keys().collect())
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
        let snapshot = self
            .metadata_on(&connection, Some(&[topic]), ANY_VERSION)
            .await?;
        let found = known_topic(&connection, &snapshot, topic)?;
        Ok(found
            .partitions
            .iter()
            .map(|(index, p)| placement(*index, p))
            .collect())
    }
}

impl KafkaAdmin {
    /// [`metadata::fetch`] for an admin call on `connection` (a timeout names Metadata). The
    /// answer's brokers are where the admin client reconnects first.
    pub(super) async fn metadata_on(
        &self,
        connection: &Connection,
        topics: Option<&[&str]>,
        ours: VersionRange,
    ) -> Result<Snapshot, Failure> {
        let snapshot = request(connection, topics, ours).await?;
        self.link.addresses().learn(snapshot.brokers.values());
        Ok(snapshot)
    }
}

/// [`metadata::fetch`] for an admin call: a timeout names Metadata.
async fn request(
    connection: &Connection,
    topics: Option<&[&str]>,
    ours: VersionRange,
) -> Result<Snapshot, Failure> {
    metadata::fetch(connection, topics, ours)
        .await
        .map_err(|error| named(ApiKey::Metadata, error))
}

/// The entry of `topic` in `snapshot`, without error.
///
/// # Errors
///
/// A protocol error when the answer has no entry for it; the topic's error, naming it.
pub(super) fn known_topic<'s>(
    connection: &Connection,
    snapshot: &'s Snapshot,
    topic: &str,
) -> Result<&'s Topic, Failure> {
    let found = snapshot
        .topic(topic)
        .ok_or_else(|| super::missing(connection, ApiKey::Metadata, topic))?;
    match found.error(topic) {
        Some(error) => Err(Failure::Client(error)),
        None => Ok(found),
    }
}

/// Polls the metadata of `name` until `done` says so, for up to `wait`; `what` says what is
/// waited for, in the failure.
pub(super) async fn wait_for(
    connection: &Connection,
    name: &str,
    wait: Duration,
    what: impl FnOnce() -> String,
    done: impl Fn(Option<&Topic>) -> bool,
) -> Result<(), Failure> {
    let start = tokio::time::Instant::now();
    loop {
        let snapshot = request(connection, Some(&[name]), ANY_VERSION).await?;
        if done(snapshot.topic(name)) {
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

/// The placement of partition `index` from its Metadata entry.
fn placement(index: i32, p: &Partition) -> PartitionPlacement {
    PartitionPlacement {
        partition: index,
        leader: p.leader,
        leader_epoch: p.leader_epoch,
        replicas: p.replicas.clone(),
        isr: p.isr.clone(),
    }
}

/// The placement of `partition` in a topic's Metadata entry, if it is there without error.
pub(super) fn partition_of(topic: Option<&Topic>, partition: i32) -> Option<PartitionPlacement> {
    topic
        .filter(|t| t.error_code == 0)?
        .partitions
        .get(&partition)
        .filter(|p| p.error_code == 0)
        .map(|p| placement(partition, p))
}
