//! [`MeteredConsumer`]: a [`ShareConsumer`] wrapper that counts what passes through it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::MetricLabels;
use crate::consumer::{
    AcknowledgeType, AcknowledgementCommitCallback, AcknowledgementMode, BrokerDeadLetterQueue,
    CommitResults, ConsumerCapabilities, ConsumerError, GroupMetadata, PendingCommit,
    ShareConsumer,
};
use crate::record::{ConsumerRecord, TopicPartition};

/// A snapshot of a [`MeteredConsumer`]'s counters. The Java share consumer's metric names
/// (group `consumer-share-fetch-manager-metrics`) are given where one exists;
/// [`share_consumer_metrics`](Self::share_consumer_metrics) lists them by those names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ConsumerMetrics {
    /// Records returned by `poll` (`records-consumed-total`).
    pub records_consumed: u64,
    /// Bytes of their keys, values and headers (`bytes-consumed-total`).
    pub bytes_consumed: u64,
    /// Calls of `poll` that returned, with or without records.
    pub polls: u64,
    /// Most records one `poll` returned (`records-per-request-max`, per poll here).
    pub records_per_poll_max: u64,
    /// Total time spent in `poll`, waiting included.
    pub poll_time_total: Duration,
    /// Acknowledgements handed to the consumer, RENEW included (`acknowledgements-send-total`).
    pub acknowledgements: u64,
    /// Acknowledgements whose partition a commit reported as failed
    /// (`acknowledgements-error-total`).
    pub acknowledgement_errors: u64,
    /// Commits (`commit_sync`, `commit_async`) that returned an outcome.
    pub commits: u64,
    /// Commits that failed as a whole (the cluster could not be asked, or timed out).
    pub commit_failures: u64,
}

impl ConsumerMetrics {
    /// Average records per `poll` (`records-per-request-avg`), zero before the first.
    pub fn records_per_poll_avg(&self) -> f64 {
        if self.polls == 0 {
            0.0
        } else {
            self.records_consumed as f64 / self.polls as f64
        }
    }

    /// The counters under the Java share consumer's metric names where one exists, then the
    /// crate's own (prefixed `share-consumer-`).
    ///
    /// ```
    /// use kafka_share_sink::telemetry::ConsumerMetrics;
    /// let named = ConsumerMetrics::default().share_consumer_metrics();
    /// assert!(named.iter().any(|(name, _)| *name == "records-consumed-total"));
    /// ```
    pub fn share_consumer_metrics(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("records-consumed-total", self.records_consumed as f64),
            ("bytes-consumed-total", self.bytes_consumed as f64),
            ("records-per-request-avg", self.records_per_poll_avg()),
            ("records-per-request-max", self.records_per_poll_max as f64),
            ("acknowledgements-send-total", self.acknowledgements as f64),
            (
                "acknowledgements-error-total",
                self.acknowledgement_errors as f64,
            ),
            ("share-consumer-poll-total", self.polls as f64),
            (
                "share-consumer-poll-time-seconds-total",
                self.poll_time_total.as_secs_f64(),
            ),
            ("share-consumer-commit-total", self.commits as f64),
            (
                "share-consumer-commit-failures-total",
                self.commit_failures as f64,
            ),
        ]
    }
}

/// The counters and the acknowledgements not yet reported by a commit, per partition.
#[derive(Debug, Default)]
struct Counters {
    metrics: ConsumerMetrics,
    /// Few partitions per consumer: a scan is cheaper than hashing a name per record.
    unreported: Vec<(TopicPartition, u64)>,
}

/// A [`ShareConsumer`] that counts the records, bytes and acknowledgements passing through
/// the consumer it wraps, readable from another task through a [`ConsumerMetricsHandle`], and
/// exported through the `metrics` facade (feature `metrics`) under the labels it was given.
///
/// [`Supervisor`](crate::supervisor::Supervisor) wraps every consumer it builds in one.
///
/// ```
/// use kafka_share_sink::embedded::EmbeddedBroker;
/// use kafka_share_sink::telemetry::{MeteredConsumer, MetricLabels};
///
/// let broker = EmbeddedBroker::new();
/// let consumer = MeteredConsumer::new(
///     broker.share_consumer("sink"),
///     MetricLabels::new("my-connector", 0, "sink"),
/// );
/// let handle = consumer.handle();
/// assert_eq!(handle.snapshot().records_consumed, 0);
/// ```
#[derive(Debug)]
pub struct MeteredConsumer<C> {
    inner: C,
    counters: Arc<Mutex<Counters>>,
    labels: MetricLabels,
}

/// Reads a [`MeteredConsumer`]'s counters from anywhere.
#[derive(Debug, Clone)]
pub struct ConsumerMetricsHandle(Arc<Mutex<Counters>>);

impl ConsumerMetricsHandle {
    /// The counters now.
    pub fn snapshot(&self) -> ConsumerMetrics {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .metrics
    }
}

impl<C: ShareConsumer> MeteredConsumer<C> {
    /// Wraps `inner`; `labels` name it in exported metrics.
    pub fn new(inner: C, labels: MetricLabels) -> Self {
        Self {
            inner,
            counters: Arc::default(),
            labels,
        }
    }

    /// A handle on the counters.
    pub fn handle(&self) -> ConsumerMetricsHandle {
        ConsumerMetricsHandle(Arc::clone(&self.counters))
    }

    /// The counters now.
    pub fn metrics(&self) -> ConsumerMetrics {
        self.handle().snapshot()
    }

    /// The labels of the exported metrics.
    pub fn labels(&self) -> &MetricLabels {
        &self.labels
    }

    /// The wrapped consumer.
    pub fn get_ref(&self) -> &C {
        &self.inner
    }

    /// Unwraps the consumer.
    pub fn into_inner(self) -> C {
        self.inner
    }

    /// Updates the counters, and exports them when `export` (not per acknowledgement: a
    /// poll or commit follows soon).
    fn update(&self, export: bool, f: impl FnOnce(&mut Counters)) {
        let mut counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut counters);
        #[cfg(feature = "metrics")]
        if export {
            super::export::consumer(&self.labels, &counters.metrics);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = export;
    }

    fn on_commit(&self, outcome: &Result<CommitResults, ConsumerError>) {
        self.update(true, |c| match outcome {
            Ok(results) => {
                c.metrics.commits = c.metrics.commits.saturating_add(1);
                let failed: u64 = c
                    .unreported
                    .iter()
                    .filter(|(partition, _)| results.failures().any(|(p, _)| p == partition))
                    .map(|(_, n)| *n)
                    .fold(0, u64::saturating_add);
                c.metrics.acknowledgement_errors =
                    c.metrics.acknowledgement_errors.saturating_add(failed);
                // Each partition the commit reported is settled; those it did not report
                // wait for the next one.
                c.unreported
                    .retain(|(partition, _)| results.get(partition).is_none());
            }
            Err(_) => {
                c.metrics.commit_failures = c.metrics.commit_failures.saturating_add(1);
            }
        });
    }
}

fn record_size(record: &ConsumerRecord) -> u64 {
    let len = |b: Option<&bytes::Bytes>| b.map_or(0, |b| b.len() as u64);
    record
        .headers()
        .iter()
        .map(|h| (h.key().len() as u64).saturating_add(len(h.value())))
        .fold(
            len(record.key()).saturating_add(len(record.value())),
            u64::saturating_add,
        )
}

#[async_trait]
impl<C: ShareConsumer> ShareConsumer for MeteredConsumer<C> {
    async fn subscribe(&mut self, topics: Vec<String>) -> Result<(), ConsumerError> {
        self.inner.subscribe(topics).await
    }

    async fn unsubscribe(&mut self) -> Result<(), ConsumerError> {
        self.inner.unsubscribe().await
    }

    fn subscription(&self) -> Vec<String> {
        self.inner.subscription()
    }

    async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ConsumerError> {
        let started = Instant::now();
        let result = self.inner.poll(timeout).await;
        let elapsed = started.elapsed();
        if let Ok(records) = &result {
            let bytes = records.iter().map(record_size).fold(0, u64::saturating_add);
            let n = records.len() as u64;
            self.update(true, |c| {
                let m = &mut c.metrics;
                m.polls = m.polls.saturating_add(1);
                m.records_consumed = m.records_consumed.saturating_add(n);
                m.bytes_consumed = m.bytes_consumed.saturating_add(bytes);
                m.records_per_poll_max = m.records_per_poll_max.max(n);
                m.poll_time_total = m.poll_time_total.saturating_add(elapsed);
            });
        }
        result
    }

    fn acknowledge_offset(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        ack: AcknowledgeType,
    ) -> Result<(), ConsumerError> {
        self.inner
            .acknowledge_offset(topic, partition, offset, ack)?;
        self.update(false, |c| {
            c.metrics.acknowledgements = c.metrics.acknowledgements.saturating_add(1);
            match c
                .unreported
                .iter_mut()
                .find(|(p, _)| p.partition() == partition && p.topic() == topic)
            {
                Some((_, n)) => *n = n.saturating_add(1),
                None => c
                    .unreported
                    .push((TopicPartition::new(topic, partition), 1)),
            }
        });
        Ok(())
    }

    fn hold_offset(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<(), ConsumerError> {
        self.inner.hold_offset(topic, partition, offset)
    }

    fn supports_renew(&self) -> bool {
        self.inner.supports_renew()
    }

    fn capabilities(&self) -> ConsumerCapabilities {
        self.inner.capabilities()
    }

    async fn commit_sync(&mut self, timeout: Duration) -> Result<CommitResults, ConsumerError> {
        let outcome = self.inner.commit_sync(timeout).await;
        self.on_commit(&outcome);
        outcome
    }

    fn commit_async(&mut self) -> Result<PendingCommit, ConsumerError> {
        // The outcome arrives later, outside this wrapper: it is counted as a commit, and
        // its failures are not attributed.
        let pending = self.inner.commit_async();
        self.update(true, |c| match &pending {
            Ok(_) => c.metrics.commits = c.metrics.commits.saturating_add(1),
            Err(_) => c.metrics.commit_failures = c.metrics.commit_failures.saturating_add(1),
        });
        pending
    }

    async fn close(&mut self, timeout: Duration) -> Result<(), ConsumerError> {
        self.inner.close(timeout).await
    }

    fn acquisition_lock_timeout(&self) -> Option<Duration> {
        self.inner.acquisition_lock_timeout()
    }

    fn last_poll_acquired_at(&self) -> Option<tokio::time::Instant> {
        self.inner.last_poll_acquired_at()
    }

    fn delivery_count_limit(&self) -> Option<u16> {
        self.inner.delivery_count_limit()
    }

    fn given_back_at_limit(&self) -> u64 {
        self.inner.given_back_at_limit()
    }

    fn broker_dead_letter_queue(&self) -> BrokerDeadLetterQueue {
        self.inner.broker_dead_letter_queue()
    }

    fn lag_source(&self) -> Option<std::sync::Arc<dyn crate::lag::LagSource>> {
        self.inner.lag_source()
    }

    fn set_acknowledgement_commit_callback(
        &mut self,
        callback: Option<AcknowledgementCommitCallback>,
    ) -> Result<(), ConsumerError> {
        self.inner.set_acknowledgement_commit_callback(callback)
    }

    fn group_metadata(&self) -> GroupMetadata {
        self.inner.group_metadata()
    }

    fn acknowledgement_mode(&self) -> AcknowledgementMode {
        self.inner.acknowledgement_mode()
    }

    #[cfg(feature = "exactly-once")]
    fn take_acknowledgements_for_transaction(
        &mut self,
    ) -> Result<crate::exactly_once::ShareAcknowledgements, ConsumerError> {
        let taken = self.inner.take_acknowledgements_for_transaction()?;
        // The transaction settles them: no commit of this consumer reports them.
        self.update(false, |c| c.unreported.clear());
        Ok(taken)
    }
}
