//! Counters of the driver, read with [`ShareSinkTask::metrics`](super::ShareSinkTask::metrics).

use std::time::Duration;

/// A snapshot of the driver's counters since it was built. Kafka Connect's sink-task and
/// task-error metric names are given where one exists; [`connect_metrics`](Self::connect_metrics)
/// lists them by those names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct DriverMetrics {
    /// Records polled, before transforms (`sink-record-read-total`).
    pub records_read: u64,
    /// Records written by a successful `put` (`sink-record-send-total`).
    pub records_put: u64,
    /// Records released after a retriable `put` error, a failed conversion under tolerance
    /// `none`, or a failed dead-letter write.
    pub records_released: u64,
    /// Records rejected: after a fatal `put` error, at `max.delivery.attempts`, or skipped
    /// under tolerance `all`.
    pub records_rejected: u64,
    /// Records polled with a delivery count above 1.
    pub records_redelivered: u64,
    /// Records whose lock the driver renewed (RENEW acknowledgements sent).
    pub records_renewed: u64,
    /// Records dropped by a transform or its predicate, and accepted.
    pub records_filtered: u64,
    /// Successful `put` calls.
    pub put_batches: u64,
    /// `put` calls that failed, retriable or fatal.
    pub put_failures: u64,
    /// `put` calls repeated in place after a retriable error.
    pub put_retries: u64,
    /// Total time of successful `put` calls (`put-batch-avg-time-ms` is this over
    /// `put_batches`).
    pub put_time_total: Duration,
    /// Longest successful `put` (`put-batch-max-time-ms`).
    pub put_time_max: Duration,
    /// Acknowledgement commits that completed (`offset-commit-completion-total`).
    pub commits: u64,
    /// Commits that were due but sent nothing because `pre_commit` declared nothing durable
    /// or failed retriably (`offset-commit-skip-total`, in share-group terms).
    pub commit_skips: u64,
    /// Partitions whose acknowledgements a commit reported as failed: those records are
    /// delivered again.
    pub commit_partition_failures: u64,
    /// Of those, failures because the acquisition lock was lost (INVALID_RECORD_STATE), plus
    /// held records the group delivered again because their lock ran out.
    pub lock_losses: u64,
    /// Failed attempts of a conversion or transform, each retry included
    /// (`total-record-failures`).
    pub record_failures: u64,
    /// Records whose conversion or transform failed for good (`total-record-errors`).
    pub record_errors: u64,
    /// Records skipped under `errors.tolerance=all` (`total-records-skipped`).
    pub records_skipped: u64,
    /// Retries of a conversion or transform (`total-retries`).
    pub retries: u64,
    /// Errors written to the log under `errors.log.enable` (`total-errors-logged`).
    pub errors_logged: u64,
    /// Records written to the dead-letter queue and confirmed.
    pub records_dead_lettered: u64,
    /// Dead-letter writes attempted, one per record (`deadletterqueue-produce-requests`).
    pub dlq_produce_requests: u64,
    /// Dead-letter writes that failed, one per record (`deadletterqueue-produce-failures`).
    pub dlq_produce_failures: u64,
    /// Records polled on their last allowed delivery: the group's delivery-count limit, or
    /// `max.delivery.attempts` when lower (`share-records-last-delivery-total`).
    pub records_last_delivery: u64,
    /// Records on their last allowed delivery that went back to the group without an ACCEPT
    /// or REJECT: released by the driver when it gave up on them with no dead-letter queue of
    /// its own to write them to, or one that failed (a failed `put`, a record error under
    /// `errors.tolerance=none`, a tripped breaker, a failed dead-letter write, an exactly-once
    /// transaction that failed for good, a close with a batch still retried or redelivered
    /// records queued), or given back by the consumer without a final
    /// acknowledgement: at close (fetched ahead and never polled, a batch never put in
    /// implicit mode, records held for a flush that did not come), or fetched ahead and kept
    /// unpolled past their lock
    /// ([`ShareConsumer::given_back_at_limit`](crate::ShareConsumer::given_back_at_limit)).
    /// The group archives them, into its broker dead-letter queue when it has one
    /// (`share-records-released-at-limit-total`).
    pub records_released_at_limit: u64,
    /// Held records on their last delivery that came back because their lock ran out: the
    /// driver lost them (a stall), or a crash did before (`share-last-delivery-lock-losses-total`).
    pub last_delivery_lock_losses: u64,
    /// Records that arrived redelivered (not released by this driver after a failed `put`)
    /// and were put first, in small batches committed one by one
    /// (`share-records-put-first-total`).
    pub records_put_first: u64,
    /// Times the driver stopped polling to wait for the task to flush
    /// (`share-flush-waits-total`).
    pub flush_waits: u64,
    /// Times the dead-letter circuit breaker stopped the task (0 or 1 for one driver;
    /// `share-dead-letter-breaker-trips-total`).
    pub dead_letter_breaker_trips: u64,
    /// Exactly-once iteration: transactions committed.
    pub transactions_committed: u64,
    /// Exactly-once iteration: transactions aborted (their records are delivered again).
    pub transactions_aborted: u64,
    /// Exactly-once ledger mode: records found claimed by a committed transaction and
    /// accepted without being processed again.
    pub records_already_claimed: u64,
    /// Exactly-once ledger mode: ledger partitions read up to a fresh high watermark to check
    /// redelivered records.
    pub ledger_checks: u64,
    /// Exactly-once iteration: time spent checking redelivered records against the ledger.
    pub ledger_check_time: Duration,
    /// Exactly-once iteration: time from the transaction's first send until every record
    /// of it was acknowledged by the brokers (outputs, dead letters, claims, staging).
    pub transaction_send_time: Duration,
    /// Exactly-once ledger mode: time spent renewing the batch's locks before the commit.
    pub transaction_renew_time: Duration,
    /// Exactly-once iteration: time spent committing (or aborting) transactions.
    pub transaction_commit_time: Duration,
}

impl DriverMetrics {
    /// Average successful `put` time (`put-batch-avg-time-ms`), zero before the first.
    pub fn put_time_avg(&self) -> Duration {
        u32::try_from(self.put_batches)
            .ok()
            .filter(|n| *n > 0)
            .map_or(Duration::ZERO, |n| self.put_time_total / n)
    }

    /// The counters under Kafka Connect's metric names (sink-task and task-error groups),
    /// followed by the share-group ones, with rates over `uptime`.
    ///
    /// ```
    /// use kafka_share_sink::DriverMetrics;
    /// use std::time::Duration;
    /// let metrics = DriverMetrics::default();
    /// let named = metrics.connect_metrics(Duration::from_secs(10));
    /// assert!(named.iter().any(|(name, _)| *name == "sink-record-read-rate"));
    /// ```
    pub fn connect_metrics(&self, uptime: Duration) -> Vec<(&'static str, f64)> {
        let secs = uptime.as_secs_f64();
        let rate = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        vec![
            ("sink-record-read-total", self.records_read as f64),
            ("sink-record-read-rate", rate(self.records_read)),
            ("sink-record-send-total", self.records_put as f64),
            ("sink-record-send-rate", rate(self.records_put)),
            ("put-batch-avg-time-ms", ms(self.put_time_avg())),
            ("put-batch-max-time-ms", ms(self.put_time_max)),
            ("offset-commit-completion-total", self.commits as f64),
            ("offset-commit-completion-rate", rate(self.commits)),
            ("offset-commit-skip-total", self.commit_skips as f64),
            ("offset-commit-skip-rate", rate(self.commit_skips)),
            ("total-record-errors", self.record_errors as f64),
            ("total-record-failures", self.record_failures as f64),
            ("total-records-skipped", self.records_skipped as f64),
            ("total-retries", self.retries as f64),
            ("total-errors-logged", self.errors_logged as f64),
            (
                "deadletterqueue-produce-requests",
                self.dlq_produce_requests as f64,
            ),
            (
                "deadletterqueue-produce-failures",
                self.dlq_produce_failures as f64,
            ),
            ("share-records-released-total", self.records_released as f64),
            ("share-records-rejected-total", self.records_rejected as f64),
            ("share-records-renewed-total", self.records_renewed as f64),
            (
                "share-records-redelivered-total",
                self.records_redelivered as f64,
            ),
            ("share-records-filtered-total", self.records_filtered as f64),
            (
                "share-records-dead-lettered-total",
                self.records_dead_lettered as f64,
            ),
            ("share-lock-losses-total", self.lock_losses as f64),
            (
                "share-records-last-delivery-total",
                self.records_last_delivery as f64,
            ),
            (
                "share-records-released-at-limit-total",
                self.records_released_at_limit as f64,
            ),
            (
                "share-last-delivery-lock-losses-total",
                self.last_delivery_lock_losses as f64,
            ),
            (
                "share-records-put-first-total",
                self.records_put_first as f64,
            ),
            ("share-flush-waits-total", self.flush_waits as f64),
            (
                "share-dead-letter-breaker-trips-total",
                self.dead_letter_breaker_trips as f64,
            ),
        ]
    }
}
