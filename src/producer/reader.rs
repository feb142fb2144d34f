//! [`LogReader`]: reading a partition back from an offset.

use std::time::Duration;

use crate::consumer::ConsumerError;
use crate::record::ConsumerRecord;

/// Which records of transactions a reader sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum IsolationLevel {
    /// Every record, of open, committed and aborted transactions alike (Kafka's default).
    #[default]
    ReadUncommitted,
    /// Records outside transactions and of committed transactions, up to the last stable
    /// offset (the first offset of a transaction still open); never aborted ones.
    ReadCommitted,
}

/// One read of a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogRead {
    /// The records read, in offset order (control records never appear).
    pub records: Vec<ConsumerRecord>,
    /// Where the next read starts: past the records, and past control records and aborted
    /// records skipped.
    pub next_offset: i64,
    /// The partition's high watermark when it answered.
    pub high_watermark: i64,
    /// The partition's last stable offset when it answered (the high watermark when no
    /// transaction is open).
    pub last_stable_offset: i64,
}

impl LogRead {
    /// A read.
    pub fn new(
        records: Vec<ConsumerRecord>,
        next_offset: i64,
        high_watermark: i64,
        last_stable_offset: i64,
    ) -> Self {
        Self {
            records,
            next_offset,
            high_watermark,
            last_stable_offset,
        }
    }
}

/// Reads a partition from an offset, as a classic consumer without a group does: the
/// exactly-once ledger reads its claims with it, and tests read output back with it.
#[async_trait::async_trait]
pub trait LogReader: Send + Sync + std::fmt::Debug {
    /// Reads records of `topic`/`partition` from offset `from`, waiting up to `max_wait` for
    /// some when there are none yet. A read at the end returns no records and `next_offset
    /// == from`.
    ///
    /// # Errors
    ///
    /// An unknown topic or partition, an offset out of range, the cluster's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is lost, read again from the same offset.
    async fn read(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        isolation: IsolationLevel,
        max_wait: Duration,
    ) -> Result<LogRead, ConsumerError>;

    /// The offset a reader of `isolation` reads up to: the high watermark for
    /// `read_uncommitted`, the last stable offset for `read_committed`.
    ///
    /// # Errors
    ///
    /// An unknown topic or partition, the cluster's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    async fn end_offset(
        &self,
        topic: &str,
        partition: i32,
        isolation: IsolationLevel,
    ) -> Result<i64, ConsumerError>;
}
