//! Settings of the [`ShareSinkTask`](super::ShareSinkTask) driver.

use std::time::Duration;

use super::RedeliveryBackoff;
use super::policy::{AckPolicy, ErrorHandling, PutRetriablePolicy};
use std::sync::Arc;

use crate::convert::Converters;
use crate::dlq::{DeadLetterBreaker, DeadLetterQueue};
use crate::task::TaskConfig;
use crate::transform::TransformChain;

/// The record bound of the driver's default commit policy: at most this many acknowledged
/// records wait for a commit (and for `pre_commit` to hear of them).
pub const DEFAULT_COMMIT_RECORDS: u64 = 100_000;

/// When the driver commits acknowledgements with `commit_sync`.
///
/// Between commits, acknowledgements still travel with the next poll (with
/// [`KafkaShareConsumer`](crate::KafkaShareConsumer): on its next fetch, or alone within a
/// second); a commit makes them durable on the broker, reports lost locks and calls
/// [`SinkTask::pre_commit`](crate::SinkTask::pre_commit). [`DriverConfig`] commits once a
/// second or every [`DEFAULT_COMMIT_RECORDS`] records by default: measured on one Kafka 4.4 broker (benches/BENCHMARKS.md), committing every
/// iteration costs a round trip per batch and held a no-op sink to about half the records/s.
///
/// ```
/// use kafka_share_sink::CommitPolicy;
/// use std::time::Duration;
/// let policy = CommitPolicy::interval(Duration::from_secs(5)).or_records(10_000);
/// # let _ = policy;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitPolicy {
    interval: Option<Duration>,
    records: Option<u64>,
}

impl CommitPolicy {
    /// Commit at the end of every iteration that acknowledged anything (`CommitPolicy::default()`;
    /// the driver's default is [`interval`](Self::interval) of one second).
    pub fn every_iteration() -> Self {
        Self::default()
    }

    /// Commit once this much time has passed since the last commit ([`Duration::MAX`]:
    /// never because of time).
    pub fn interval(interval: Duration) -> Self {
        Self {
            interval: Some(interval),
            records: None,
        }
    }

    /// Commit once this many records were acknowledged since the last commit.
    pub fn records(records: u64) -> Self {
        Self {
            interval: None,
            records: Some(records.max(1)),
        }
    }

    /// Also commit once this many records were acknowledged.
    pub fn or_records(mut self, records: u64) -> Self {
        self.records = Some(records.max(1));
        self
    }

    /// Also commit once this much time has passed.
    pub fn or_interval(mut self, interval: Duration) -> Self {
        self.interval = Some(interval);
        self
    }

    pub(crate) fn is_due(&self, since_last: Duration, acknowledged: u64) -> bool {
        match (self.interval, self.records) {
            (None, None) => true,
            (interval, records) => {
                interval.is_some_and(|i| since_last >= i)
                    || records.is_some_and(|r| acknowledged >= r)
            }
        }
    }
}

/// Settings of the driver.
///
/// ```
/// use kafka_share_sink::{CommitPolicy, DriverConfig};
/// use std::time::Duration;
/// let config = DriverConfig::new(["orders"])
///     .poll_timeout(Duration::from_millis(200))
///     .commit_policy(CommitPolicy::interval(Duration::from_secs(1)));
/// assert_eq!(config.topics(), ["orders".to_string()]);
/// ```
#[derive(Debug, Clone)]
pub struct DriverConfig {
    pub(crate) topics: Vec<String>,
    pub(crate) task_config: TaskConfig,
    pub(crate) poll_timeout: Duration,
    pub(crate) commit_policy: CommitPolicy,
    pub(crate) commit_timeout: Duration,
    pub(crate) close_timeout: Duration,
    pub(crate) retriable_backoff: Duration,
    pub(crate) redelivery_backoff: RedeliveryBackoff,
    pub(crate) ack_policy: AckPolicy,
    pub(crate) put_retriable_policy: PutRetriablePolicy,
    pub(crate) max_delivery_attempts: Option<u16>,
    pub(crate) errors: ErrorHandling,
    pub(crate) connector_name: String,
    pub(crate) task_id: i32,
    pub(crate) converters: Converters,
    pub(crate) transforms: TransformChain,
    pub(crate) dead_letter: Option<Arc<dyn DeadLetterQueue>>,
    pub(crate) dead_letter_context_headers: bool,
    pub(crate) max_awaiting_flush_records: usize,
    pub(crate) max_awaiting_flush_bytes: u64,
    pub(crate) require_broker_dead_letter_queue: bool,
    pub(crate) dead_letter_breaker: DeadLetterBreaker,
    pub(crate) lag_refresh_interval: Duration,
}

impl DriverConfig {
    /// Drain these topics, with the defaults below.
    pub fn new<I, S>(topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            topics: topics.into_iter().map(Into::into).collect(),
            task_config: TaskConfig::new(),
            // Java's fetch.max.wait.ms.
            poll_timeout: Duration::from_millis(500),
            // Measured (benches/BENCHMARKS.md): a commit per iteration is a round trip per batch;
            // acknowledgements ride on fetches in between. The record bound keeps what waits
            // for a commit's confirmation bounded at any pace.
            commit_policy: CommitPolicy::interval(Duration::from_secs(1))
                .or_records(DEFAULT_COMMIT_RECORDS),
            // Java's default.api.timeout.ms.
            commit_timeout: Duration::from_secs(60),
            // Java's close() default.
            close_timeout: Duration::from_secs(30),
            // A released batch is available at once; without a pause a failing sink would
            // burn the delivery-count limit in milliseconds.
            retriable_backoff: Duration::from_millis(500),
            redelivery_backoff: RedeliveryBackoff::default(),
            ack_policy: AckPolicy::AfterPut,
            put_retriable_policy: PutRetriablePolicy::Release,
            max_delivery_attempts: None,
            errors: ErrorHandling::new(),
            connector_name: String::new(),
            task_id: 0,
            converters: Converters::byte_array(),
            transforms: TransformChain::new(),
            dead_letter: None,
            dead_letter_context_headers: false,
            max_awaiting_flush_records: 10_000,
            max_awaiting_flush_bytes: 64 << 20,
            require_broker_dead_letter_queue: false,
            dead_letter_breaker: DeadLetterBreaker::default(),
            lag_refresh_interval: crate::lag::DEFAULT_LAG_REFRESH_INTERVAL,
        }
    }

    /// The topics to subscribe to.
    pub fn topics(&self) -> &[String] {
        &self.topics
    }

    /// The config handed to [`SinkTask::start`](crate::SinkTask::start).
    pub fn task_config(mut self, config: TaskConfig) -> Self {
        self.task_config = config;
        self
    }

    /// How long one poll waits for records (default 500 ms). It also bounds how long
    /// [`run`](super::ShareSinkTask::run) takes to notice shutdown while idle.
    ///
    /// A timeout too long to add to the clock (e.g. [`Duration::MAX`]) is taken as about 30
    /// years: a poll that waits until records come.
    pub fn poll_timeout(mut self, timeout: Duration) -> Self {
        self.poll_timeout = timeout;
        self
    }

    /// When to commit acknowledgements (default: once a second or every
    /// [`DEFAULT_COMMIT_RECORDS`] records, whichever comes first:
    /// `CommitPolicy::interval(Duration::from_secs(1)).or_records(DEFAULT_COMMIT_RECORDS)`).
    ///
    /// The driver keeps the id of every record acknowledged since the last commit for
    /// [`SinkTask::pre_commit`](crate::SinkTask::pre_commit), so a policy without a record
    /// bound holds as many ids as records pass in one interval.
    pub fn commit_policy(mut self, policy: CommitPolicy) -> Self {
        self.commit_policy = policy;
        self
    }

    /// How long a commit may take (default 60 s).
    pub fn commit_timeout(mut self, timeout: Duration) -> Self {
        self.commit_timeout = timeout;
        self
    }

    /// How long closing the consumer may take (default 30 s).
    pub fn close_timeout(mut self, timeout: Duration) -> Self {
        self.close_timeout = timeout;
        self
    }

    /// The pause before the next poll after a retriable `put` error, unless the error asks
    /// for its own (default 500 ms); [`run`](super::ShareSinkTask::run) also waits this long
    /// after an iteration that failed with a retriable error.
    ///
    /// A pause too long to add to the clock (e.g. [`Duration::MAX`]) is taken as about 30
    /// years: after such an error the driver waits, in practice, until it is closed.
    pub fn retriable_backoff(mut self, backoff: Duration) -> Self {
        self.retriable_backoff = backoff;
        self
    }

    /// The redelivery backoff (`redelivery.backoff.ms` and `redelivery.backoff.max.ms`,
    /// default [`DEFAULT_REDELIVERY_BACKOFF`](crate::DEFAULT_REDELIVERY_BACKOFF), 3 s, and
    /// [`DEFAULT_REDELIVERY_BACKOFF_MAX`](crate::DEFAULT_REDELIVERY_BACKOFF_MAX), 60 s).
    ///
    /// A batch whose `put` fails with a retriable error is not released at once: the driver
    /// holds it, renewing its locks and polling nothing, for `initial × 2^(n − 1)` (at most
    /// `max`, less up to a fifth at random) where `n` is the highest delivery count in the
    /// batch, then RELEASEs it, so the group delivers it again with its count one higher.
    /// With the defaults and the broker's delivery-count limit of 5, a batch that keeps
    /// failing reaches its last delivery after at least 36 s: a target down for half a
    /// minute costs no record. An error with its own
    /// [backoff](crate::TaskError::with_backoff) is held that long instead. Under
    /// `put.retriable.policy=retry.in.place` the backoff counts from the first failure, so
    /// retries in place that lasted longer leave nothing to wait.
    ///
    /// Needs explicit acknowledgement and a consumer that holds records and renews their
    /// locks ([`ConsumerCapability::Hold`](crate::ConsumerCapability::Hold) and
    /// [`Renew`](crate::ConsumerCapability::Renew), Kafka 4.2+); otherwise, or with a zero
    /// `initial`, the batch is released at once and the driver pauses for
    /// [`retriable_backoff`](Self::retriable_backoff) before polling again. A `max` below
    /// `initial` is raised to it.
    ///
    /// ```
    /// use kafka_share_sink::DriverConfig;
    /// use std::time::Duration;
    /// let config = DriverConfig::new(["orders"])
    ///     .redelivery_backoff(Duration::from_secs(5), Duration::from_secs(120));
    /// # let _ = config;
    /// ```
    pub fn redelivery_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.redelivery_backoff = RedeliveryBackoff::new(initial, max);
        self
    }

    /// When records that `put` took are ACCEPTed (`ack.policy`, default
    /// [`AckPolicy::AfterPut`]). [`AckPolicy::AfterFlush`] needs explicit acknowledgement,
    /// and a commit policy that calls `pre_commit` as often as the task should flush.
    pub fn ack_policy(mut self, policy: AckPolicy) -> Self {
        self.ack_policy = policy;
        self
    }

    /// What a retriable `put` error does (`put.retriable.policy`, default
    /// [`PutRetriablePolicy::Release`]). [`PutRetriablePolicy::RetryInPlace`] retries for
    /// `errors.retry.timeout` (see [`errors`](Self::errors)), so set one above zero.
    pub fn put_retriable_policy(mut self, policy: PutRetriablePolicy) -> Self {
        self.put_retriable_policy = policy;
        self
    }

    /// `max.delivery.attempts`: a record whose `put` fails on its `n`-th delivery (or
    /// later) is written to the dead-letter queue, when one is set, and REJECTed, instead of
    /// being released again. Keep it below the group's `share.delivery.count.limit` (default
    /// 5), or the broker archives the record first, silently. `None` (the default) leaves it
    /// to the broker.
    pub fn max_delivery_attempts(mut self, attempts: Option<u16>) -> Self {
        self.max_delivery_attempts = attempts.map(|n| n.max(1));
        self
    }

    /// Connect's `errors.*` settings (default: tolerance none, no retries).
    pub fn errors(mut self, errors: ErrorHandling) -> Self {
        self.errors = errors;
        self
    }

    /// The key, value and header converters (default: byte arrays, passed through without
    /// a copy).
    pub fn converters(mut self, converters: Converters) -> Self {
        self.converters = converters;
        self
    }

    /// The transforms applied, in order, to each converted record (default: none). A
    /// record a transform drops is ACCEPTed.
    pub fn transforms(mut self, transforms: TransformChain) -> Self {
        self.transforms = transforms;
        self
    }

    /// The dead-letter queue (`errors.deadletterqueue.topic.name`), and whether its records
    /// carry Connect's `__connect.errors.*` context headers
    /// (`errors.deadletterqueue.context.headers.enable`).
    ///
    /// Records skipped under `errors.tolerance=all`, records failing at
    /// `max.delivery.attempts`, and the batch of a fatal `put` are written there, original
    /// bytes and headers unchanged (plus the `__connect.errors.reason` header, and the context
    /// headers when asked), before they are ACCEPTed: one dead-letter home per record, since
    /// the broker writes a REJECTed record to the group's own dead-letter queue (they are
    /// REJECTed only when the consumer knows the group has none). When the write fails they
    /// are RELEASEd instead: nothing is dropped.
    pub fn dead_letter_queue(
        mut self,
        queue: Arc<dyn DeadLetterQueue>,
        context_headers: bool,
    ) -> Self {
        self.dead_letter = Some(queue);
        self.dead_letter_context_headers = context_headers;
        self
    }

    /// How much written but not yet durable data the driver lets wait for a flush under
    /// `ack.policy=after.flush` (`ack.flush.max.records`, default 10,000, and
    /// `ack.flush.max.bytes`, default 64 MiB of record keys, values and headers).
    ///
    /// Connect flushes on a clock (`offset.flush.interval.ms`), whatever piles up in between;
    /// the records that wait are held, and a crash costs each of them a delivery. Past either
    /// bound the driver asks the task to flush (`pre_commit`) before it polls again, and
    /// polls nothing more, renewing the locks of what it holds, until the flush brings it back
    /// under the bounds. Zero means no bound.
    pub fn max_awaiting_flush(mut self, records: usize, bytes: u64) -> Self {
        self.max_awaiting_flush_records = if records == 0 { usize::MAX } else { records };
        self.max_awaiting_flush_bytes = if bytes == 0 { u64::MAX } else { bytes };
        self
    }

    /// The connector name and task number, written to logs and to dead-letter headers.
    pub fn connector(mut self, name: impl Into<String>, task_id: i32) -> Self {
        self.connector_name = name.into();
        self.task_id = task_id;
        self
    }

    /// Whether the share group must have a dead-letter queue of the broker's own (KIP-1191,
    /// Kafka 4.4; `share.dead.letter.queue.required`, default false), checked when the task
    /// starts through
    /// [`ShareConsumer::broker_dead_letter_queue`](crate::ShareConsumer::broker_dead_letter_queue).
    ///
    /// A record whose deliveries run out without ACCEPT or REJECT (the sink process dies
    /// before it flushes, a lock expires) is archived by the broker, and without such a queue
    /// nothing is left of it. With `true`, the task refuses to start unless the consumer
    /// reports a queue ([`BrokerDeadLetterQueue::Topic`](crate::BrokerDeadLetterQueue::Topic));
    /// with `false`, a group without one (or one the consumer cannot tell about) is logged
    /// as a warning.
    pub fn require_broker_dead_letter_queue(mut self, required: bool) -> Self {
        self.require_broker_dead_letter_queue = required;
        self
    }

    /// The dead-letter circuit breaker (`errors.deadletterqueue.breaker.*`; default
    /// [`DeadLetterBreaker::default`]: the task stops before more than half of at least 100
    /// records finished within 10 minutes would go to a dead-letter queue;
    /// [`DeadLetterBreaker::disabled`] turns it off). It bounds the records written to the
    /// driver's own dead-letter queue and the records REJECTed (which a broker dead-letter
    /// queue of the group takes), in both the at-least-once and the exactly-once iteration.
    pub fn dead_letter_breaker(mut self, breaker: DeadLetterBreaker) -> Self {
        self.dead_letter_breaker = breaker;
        self
    }

    /// How often the driver reads the share group's lag in the background
    /// (`share.lag.refresh.interval.ms`, default 10 s, at least 100 ms), from the consumer's
    /// [`lag_source`](crate::ShareConsumer::lag_source); zero turns the reading off. See
    /// [`ShareSinkTask::lag`](crate::ShareSinkTask::lag). A
    /// [`Supervisor`](crate::supervisor::Supervisor) reads it once for all its tasks of a
    /// group, at the interval of the first task's config.
    pub fn lag_refresh_interval(mut self, interval: Duration) -> Self {
        self.lag_refresh_interval = interval;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_policy_due() {
        assert!(CommitPolicy::every_iteration().is_due(Duration::ZERO, 0));
        let p = CommitPolicy::interval(Duration::from_secs(1)).or_records(10);
        assert!(!p.is_due(Duration::from_millis(999), 9));
        assert!(p.is_due(Duration::from_secs(1), 0));
        assert!(p.is_due(Duration::ZERO, 10));
        assert!(!CommitPolicy::records(5).is_due(Duration::from_secs(3600), 4));
    }

    #[test]
    fn the_default_commits_within_a_second_and_a_bounded_number_of_records() {
        let p = DriverConfig::new(["t"]).commit_policy;
        assert!(!p.is_due(Duration::from_millis(999), DEFAULT_COMMIT_RECORDS - 1));
        assert!(p.is_due(Duration::from_secs(1), 0));
        assert!(p.is_due(Duration::ZERO, DEFAULT_COMMIT_RECORDS));
    }
}
