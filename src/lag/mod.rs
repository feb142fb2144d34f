//! A share group's lag: how many records the group has still to finish, per partition and in
//! total, read in the background and kept for whoever asks (the driver, the supervisor, a
//! metrics exporter, an autoscaler).
//!
//! - this file: [`ShareGroupLag`] and [`PartitionLag`], what one read found, and
//!   [`LagSource`], where it is read from.
//! - `reader`: [`LagReader`], the cache and the task that refreshes it.
//! - `sources`: the sources of this crate: a Kafka cluster (DescribeShareGroupOffsets v1,
//!   Kafka 4.4, KIP-1226) and the [embedded broker](crate::embedded).
//!
//! # What the lag counts
//!
//! A share group has no committed position per consumer: it has, per partition, a start
//! offset (every record before it is done) and the state of each record after it. Its lag in
//! a partition is the number of records from the start offset to the end of the log that are
//! not done yet (neither acknowledged nor archived), as the broker counts them: records
//! available, acquired by a consumer, or waiting for their dead-letter write. That is what
//! `kafka-share-groups.sh --describe` shows in its `LAG` column, and what an autoscaler
//! should follow: it grows while producers outrun the group, and falls to 0 once the group
//! caught up.
//!
//! The lag is a property of the group, not of one consumer: every task of a group sees the
//! same numbers. A [`Supervisor`](crate::supervisor::Supervisor) therefore reads it once per
//! process for all its tasks of one group; a driver on its own reads it for itself
//! (see [`ShareSinkTask::lag`](crate::ShareSinkTask::lag)).

mod reader;
mod sources;

use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

pub use self::reader::{LagError, LagReader};
pub(crate) use self::sources::KafkaLagSource;
use crate::error::BoxError;

/// The default of `share.lag.refresh.interval.ms`: how often the lag is read again.
pub const DEFAULT_LAG_REFRESH_INTERVAL: Duration = Duration::from_secs(10);

/// The lag of one partition of a share group.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionLag {
    /// The topic.
    pub topic: String,
    /// The partition index.
    pub partition: i32,
    /// Records of the partition the group has still to finish; `None` when the source does
    /// not know (a broker before Kafka 4.4 answers DescribeShareGroupOffsets without it).
    pub lag: Option<u64>,
}

impl PartitionLag {
    /// The lag of `partition` of `topic`.
    pub fn new(topic: impl Into<String>, partition: i32, lag: Option<u64>) -> Self {
        Self {
            topic: topic.into(),
            partition,
            lag,
        }
    }
}

/// One read of a share group's lag: every partition the group has state for, sorted by topic
/// and partition, and when it was read.
///
/// ```
/// use kafka_share_sink::lag::{PartitionLag, ShareGroupLag};
/// let lag = ShareGroupLag::new(
///     "orders-sink",
///     vec![PartitionLag::new("orders", 0, Some(40)), PartitionLag::new("orders", 1, Some(2))],
/// );
/// assert_eq!(lag.total(), 42);
/// assert_eq!(lag.max(), 40);
/// assert!(lag.is_complete());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShareGroupLag {
    /// The share group.
    pub group: String,
    /// The lag of each partition the group has state for (a partition it never read from
    /// has none yet, and is not listed).
    pub partitions: Vec<PartitionLag>,
    /// When the read was answered.
    pub read_at: Instant,
}

impl ShareGroupLag {
    /// A read of `group`'s lag answered now; `partitions` are sorted here.
    pub fn new(group: impl Into<String>, mut partitions: Vec<PartitionLag>) -> Self {
        partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Self {
            group: group.into(),
            partitions,
            read_at: Instant::now(),
        }
    }

    /// The lag summed over the partitions whose lag is known (saturating).
    pub fn total(&self) -> u64 {
        self.partitions
            .iter()
            .filter_map(|p| p.lag)
            .fold(0u64, u64::saturating_add)
    }

    /// The largest lag of one partition, 0 with none known.
    pub fn max(&self) -> u64 {
        self.partitions
            .iter()
            .filter_map(|p| p.lag)
            .max()
            .unwrap_or(0)
    }

    /// Whether the lag of every partition is known, so that [`total`](Self::total) is the
    /// whole group's.
    pub fn is_complete(&self) -> bool {
        self.partitions.iter().all(|p| p.lag.is_some())
    }

    /// The lag of one partition, `None` when it is not listed or not known.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<u64> {
        self.partitions
            .iter()
            .find(|p| p.topic == topic && p.partition == partition)
            .and_then(|p| p.lag)
    }

    /// How long ago it was read.
    pub fn age(&self) -> Duration {
        self.read_at.elapsed()
    }
}

/// Where a share group's lag is read from.
///
/// [`KafkaShareConsumer`](crate::KafkaShareConsumer),
/// [`EmbeddedShareConsumer`](crate::embedded::EmbeddedShareConsumer) and
/// [`KafkaAdmin`](crate::KafkaAdmin) provide one (see
/// [`ShareConsumer::lag_source`](crate::ShareConsumer::lag_source)); implement it to read the
/// lag from somewhere else.
#[async_trait]
pub trait LagSource: Send + Sync + std::fmt::Debug {
    /// The lag of every partition `group` has state for.
    ///
    /// # Errors
    ///
    /// Whatever kept the source from answering; the [`LagReader`] keeps its last read.
    ///
    /// # Cancel safety
    ///
    /// Must be cancel safe: the reader drops a read that takes too long.
    async fn share_group_lag(&self, group: &str) -> Result<Vec<PartitionLag>, BoxError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn total_and_max_leave_unknown_partitions_out() {
        let lag = ShareGroupLag::new(
            "g",
            vec![
                PartitionLag::new("b", 0, Some(3)),
                PartitionLag::new("a", 1, None),
                PartitionLag::new("a", 0, Some(u64::MAX)),
            ],
        );
        assert_eq!(lag.total(), u64::MAX, "saturates");
        assert_eq!(lag.max(), u64::MAX);
        assert!(!lag.is_complete());
        let order: Vec<_> = lag
            .partitions
            .iter()
            .map(|p| (p.topic.as_str(), p.partition))
            .collect();
        assert_eq!(order, [("a", 0), ("a", 1), ("b", 0)]);
        assert_eq!(lag.partition("b", 0), Some(3));
        assert_eq!(lag.partition("a", 1), None);
        assert_eq!(lag.partition("c", 0), None);
    }

    #[test]
    fn an_empty_group_has_no_lag() {
        let lag = ShareGroupLag::new("g", Vec::new());
        assert_eq!((lag.total(), lag.max()), (0, 0));
        assert!(lag.is_complete());
    }
}
