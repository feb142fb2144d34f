//! [`ExactlyOnceCluster`]: what the exactly-once iteration asks of the cluster besides
//! consuming and producing.

use std::collections::HashMap;

use async_trait::async_trait;

use super::{ClusterCapabilities, ExactlyOnceError};
use crate::producer::LogReader;
use crate::record::TopicPartition;

/// The cluster side of the exactly-once iteration: capabilities, the ledger topic, leader
/// epochs, share-partition start offsets and fencing. Reads of the ledger go through the
/// [`LogReader`] supertrait.
///
/// Implemented by [`KafkaExactlyOnceCluster`](super::KafkaExactlyOnceCluster) for a real
/// cluster and by [`EmbeddedBroker`](crate::embedded::EmbeddedBroker) in process.
#[async_trait]
pub trait ExactlyOnceCluster: LogReader {
    /// What the cluster offers for exactly-once, for `group_id`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn capabilities(&self, group_id: &str) -> Result<ClusterCapabilities, ExactlyOnceError>;

    /// The number of partitions of `topic`, or `None` when it does not exist.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn partition_count(&self, topic: &str) -> Result<Option<i32>, ExactlyOnceError>;

    /// Creates the ledger topic with `partitions` partitions, as a compact-free
    /// (`cleanup.policy=delete`) topic. A topic that already exists is not an error.
    ///
    /// # Cancel safety
    ///
    /// Dropped, the topic may or may not have been created; calling again is harmless.
    async fn create_ledger_topic(
        &self,
        topic: &str,
        partitions: i32,
    ) -> Result<(), ExactlyOnceError>;

    /// The current leader epoch of each partition asked for (partitions without a known
    /// leader are left out).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn leader_epochs(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, i32>, ExactlyOnceError>;

    /// The share-partition start offset of each partition of `topic` in `group_id`: records
    /// below it are settled and never delivered again.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn share_partition_start_offsets(
        &self,
        group_id: &str,
        topic: &str,
    ) -> Result<HashMap<i32, i64>, ExactlyOnceError>;

    /// The first offset still in `partition` of `topic` (the log start offset).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn ledger_start_offset(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<i64, ExactlyOnceError>;

    /// The transactional ids the cluster knows that start with `prefix`, to find the
    /// producers of task slots that no longer exist.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn transactional_ids(&self, prefix: &str) -> Result<Vec<String>, ExactlyOnceError>;

    /// Fences `transactional_id`: bumps its producer epoch so that an older producer with that
    /// id can no longer write, and aborts its open transaction.
    ///
    /// # Cancel safety
    ///
    /// Dropped, the id may or may not have been fenced; calling again is harmless.
    async fn fence_transactional_id(&self, transactional_id: &str) -> Result<(), ExactlyOnceError>;
}
