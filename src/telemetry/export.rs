//! Recording through the `metrics` facade (feature `metrics`).

use std::sync::Once;
use std::time::Duration;

use metrics::{Label, counter, describe_counter, describe_gauge, gauge};

use super::{ConsumerMetrics, MetricLabels};
use crate::DriverMetrics;

fn labels(l: &MetricLabels) -> Vec<Label> {
    vec![
        Label::new("connector", l.connector.clone()),
        Label::new("task", l.task.to_string()),
        Label::new("group", l.group.clone()),
    ]
}

/// Averages and maxima are gauges; everything else of the named lists is a counter.
fn is_gauge(name: &str) -> bool {
    name.contains("-avg") || name.contains("-max") || name.ends_with("-seconds-total")
}

fn record(name: &'static str, value: f64, labels: &[Label]) {
    if is_gauge(name) {
        gauge!(name, labels.iter()).set(value);
    } else {
        // Every counter comes from a u64.
        counter!(name, labels.iter()).absolute(value as u64);
    }
}

/// Describes the metrics once per process, for exporters that print help text.
fn describe() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        describe_counter!(
            "sink-record-read-total",
            "Records polled, before transforms."
        );
        describe_counter!(
            "sink-record-send-total",
            "Records written by a successful put."
        );
        describe_gauge!(
            "put-batch-avg-time-ms",
            "Average time of a successful put, in milliseconds."
        );
        describe_gauge!(
            "put-batch-max-time-ms",
            "Longest successful put, in milliseconds."
        );
        describe_counter!(
            "offset-commit-completion-total",
            "Acknowledgement commits that completed."
        );
        describe_counter!(
            "records-consumed-total",
            "Records returned by the share consumer's poll."
        );
        describe_counter!(
            "acknowledgements-send-total",
            "Acknowledgements handed to the share consumer."
        );
        describe_gauge!(
            "status",
            "1 for the task's state (label state), 0 for the others."
        );
    });
}

/// Records a driver's counters.
pub(crate) fn driver(
    l: &MetricLabels,
    metrics: &DriverMetrics,
    uptime: Duration,
    awaiting_flush: usize,
) {
    describe();
    let labels = labels(l);
    for (name, value) in metrics.connect_metrics(uptime) {
        if !name.ends_with("-rate") {
            record(name, value, &labels);
        }
    }
    let own = [
        ("share-put-batches-total", metrics.put_batches),
        ("share-put-failures-total", metrics.put_failures),
        ("share-put-retries-total", metrics.put_retries),
        (
            "share-commit-partition-failures-total",
            metrics.commit_partition_failures,
        ),
        (
            "share-transactions-committed-total",
            metrics.transactions_committed,
        ),
        (
            "share-transactions-aborted-total",
            metrics.transactions_aborted,
        ),
        (
            "share-records-already-claimed-total",
            metrics.records_already_claimed,
        ),
        ("share-ledger-checks-total", metrics.ledger_checks),
    ];
    for (name, value) in own {
        counter!(name, labels.iter()).absolute(value);
    }
    gauge!("share-records-awaiting-flush", labels.iter()).set(awaiting_flush as f64);
    // Where an exactly-once iteration's time goes, in seconds since the start.
    let times = [
        (
            "share-ledger-check-seconds-total",
            metrics.ledger_check_time,
        ),
        (
            "share-transaction-send-seconds-total",
            metrics.transaction_send_time,
        ),
        (
            "share-transaction-renew-seconds-total",
            metrics.transaction_renew_time,
        ),
        (
            "share-transaction-commit-seconds-total",
            metrics.transaction_commit_time,
        ),
    ];
    for (name, value) in times {
        gauge!(name, labels.iter()).set(value.as_secs_f64());
    }
}

/// Records a metered consumer's counters.
pub(crate) fn consumer(l: &MetricLabels, metrics: &ConsumerMetrics) {
    describe();
    let labels = labels(l);
    for (name, value) in metrics.share_consumer_metrics() {
        record(name, value, &labels);
    }
}

/// Records a supervised task's state and restarts, labelled with the connector and task
/// (the group is its consumer's business).
pub(crate) fn task_status(connector: &str, task: u32, state: &'static str, restarts: u64) {
    describe();
    let labels = vec![
        Label::new("connector", connector.to_owned()),
        Label::new("task", task.to_string()),
    ];
    for candidate in ["running", "restarting", "failed", "stopped"] {
        let mut with_state = labels.clone();
        with_state.push(Label::new("state", candidate));
        gauge!("status", with_state.iter()).set(if candidate == state { 1.0 } else { 0.0 });
    }
    counter!("share-task-restarts-total", labels.iter()).absolute(restarts);
}
