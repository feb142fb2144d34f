//! Counters of the driver, read with [`ShareSinkTask::metrics`](super::ShareSinkTask::metrics).

use std::time::Duration;

/// A snapshot of the driver's counters since it was built. Kafka Connect's sink-task metric
/// names are given where one exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct DriverMetrics {
    /// Records polled (`sink-record-read-total`).
    pub records_read: u64,
    /// Records written by a successful `put` and accepted (`sink-record-send-total`).
    pub records_put: u64,
    /// Records released after a retriable `put` error.
    pub records_released: u64,
    /// Records rejected after a fatal `put` error.
    pub records_rejected: u64,
    /// Records polled with a delivery count above 1.
    pub records_redelivered: u64,
    /// Successful `put` calls.
    pub put_batches: u64,
    /// `put` calls that failed, retriable or fatal.
    pub put_failures: u64,
    /// Total time of successful `put` calls (`put-batch-avg-time-ms` is this over
    /// `put_batches`).
    pub put_time_total: Duration,
    /// Longest successful `put` (`put-batch-max-time-ms`).
    pub put_time_max: Duration,
    /// Acknowledgement commits that completed (`offset-commit-completion-total`).
    pub commits: u64,
    /// Partitions whose acknowledgements a commit reported as failed, most often a lost
    /// lock: those records are delivered again.
    pub commit_partition_failures: u64,
}

impl DriverMetrics {
    /// Average successful `put` time (`put-batch-avg-time-ms`), zero before the first.
    pub fn put_time_avg(&self) -> Duration {
        u32::try_from(self.put_batches)
            .ok()
            .filter(|n| *n > 0)
            .map_or(Duration::ZERO, |n| self.put_time_total / n)
    }
}
