//! Metrics and tracing: what the driver and the consumer report, and how to export it.
//!
//! # Metrics
//!
//! The driver counts into [`DriverMetrics`](crate::DriverMetrics) (Kafka Connect's sink-task
//! and task-error names); a [`MeteredConsumer`] counts what passes through a consumer into
//! [`ConsumerMetrics`] (the Java share consumer's names). Both can be read at any time; the
//! [`Supervisor`](crate::supervisor::Supervisor) keeps the last snapshot of each task.
//!
//! With the feature **`metrics`** both are also recorded through the
//! [`metrics`](https://docs.rs/metrics) facade, into whatever recorder the application
//! installed (Prometheus, StatsD, OpenTelemetry, ...): the driver after every iteration and at
//! close, the metered consumer after every poll and commit. Every metric carries the labels
//! of [`MetricLabels`]: `connector`, `task` and `group`. Names are Kafka's, with dashes (a
//! Prometheus exporter turns them into underscores: `sink-record-read-total` is scraped as
//! `sink_record_read_total`):
//!
//! | kind | names |
//! |---|---|
//! | counter | every `*-total` of [`DriverMetrics::connect_metrics`](crate::DriverMetrics::connect_metrics), `total-record-errors`, `total-record-failures`, `total-records-skipped`, `total-retries`, `total-errors-logged`, `deadletterqueue-produce-requests`, `deadletterqueue-produce-failures`, `share-put-batches-total`, `share-put-failures-total`, `share-put-retries-total`, `share-commit-partition-failures-total`, and the exactly-once ones (`share-transactions-committed-total`, `share-transactions-aborted-total`, `share-records-already-claimed-total`, `share-ledger-checks-total`) |
//! | gauge | `put-batch-avg-time-ms`, `put-batch-max-time-ms`, `share-records-awaiting-flush`, and where exactly-once time goes: `share-ledger-check-seconds-total`, `share-transaction-send-seconds-total`, `share-transaction-renew-seconds-total`, `share-transaction-commit-seconds-total` |
//! | counter (consumer) | `records-consumed-total`, `bytes-consumed-total`, `acknowledgements-send-total`, `acknowledgements-error-total`, `share-consumer-poll-total`, `share-consumer-commit-total`, `share-consumer-commit-failures-total` |
//! | gauge (consumer) | `records-per-request-avg`, `records-per-request-max`, `share-consumer-poll-time-seconds-total` |
//! | gauge (lag, labelled `group`, and `topic` and `partition` per partition) | `share-group-lag` (one partition), `share-group-lag-sum` (every partition whose lag is known), with the counter `share-group-lag-read-errors-total`: see [`lag`](crate::lag) and [`LagReader`](crate::LagReader); exported at each read, by whoever reads (the supervisor once per group, or a driver on its own) |
//! | gauge (supervisor, labelled `connector` and `task` only) | `status` with a `state` label (`running`, `restarting`, `failed`, `stopped`; 1 for the task's state, 0 otherwise), `share-task-restarts-total` |
//!
//! Install the recorder before the first driver runs: the metric descriptions (help texts)
//! are recorded once per process, with the first export.
//!
//! Connect's `*-rate` metrics are left out: a metrics backend derives rates from the totals
//! (`rate(sink_record_read_total[1m])`). The driver's counters start at zero for every new
//! driver, so a task restarted by the supervisor starts its counters again, which Prometheus
//! reads as a counter reset.
//!
//! # Tracing
//!
//! Each [`ShareSinkTask::iteration`](crate::ShareSinkTask::iteration) runs in a DEBUG span
//! named `iteration` with these fields:
//!
//! | field | value |
//! |---|---|
//! | `connector` | the connector name ([`DriverConfig::connector`](crate::DriverConfig::connector); empty when not set) |
//! | `task` | the task id |
//! | `group` | the share group id |
//! | `records` | records in the batch handed to `put`, recorded once the poll returned |
//!
//! The exactly-once round (feature `exactly-once`) runs in a span `iteration_exactly_once` with
//! `group`, `mode` and `records`, and records the metrics after it as well.
//!
//! Every event of the iteration (a failed `put`, a release, a lost lock, a commit) is logged
//! inside that span. At DEBUG, target `kafka_share_sink::metrics` also logs the Connect-named
//! counters after every commit, and `close` logs them at INFO.

mod consumer;
#[cfg(feature = "metrics")]
pub(crate) mod export;

pub use self::consumer::{ConsumerMetrics, ConsumerMetricsHandle, MeteredConsumer};

/// The labels every exported metric carries, as Connect's MBeans carry `connector` and
/// `task`, plus the share `group`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct MetricLabels {
    /// The connector name.
    pub connector: String,
    /// The task id.
    pub task: u32,
    /// The share group id.
    pub group: String,
}

impl MetricLabels {
    /// Labels for task `task` of `connector`, in share group `group`.
    pub fn new(connector: impl Into<String>, task: u32, group: impl Into<String>) -> Self {
        Self {
            connector: connector.into(),
            task,
            group: group.into(),
        }
    }
}
