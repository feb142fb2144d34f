//! Recording through the `metrics` facade (feature `metrics`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, Once, PoisonError};
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

/// Records a read of a share group's lag: `share-group-lag` per partition (labels `group`,
/// `topic`, `partition`; a partition whose lag is unknown keeps its last value) and
/// `share-group-lag-sum` over the known ones (label `group`). A partition the group no longer
/// has state for (its topic deleted, say) is set to 0 once: the `metrics` facade cannot take
/// a series back, and its last lag would otherwise stay in every sum of the per-partition
/// series. Labelled by group only, not by task: every task of a group sees the same lag, and
/// summing it over tasks would count it once per task.
pub(crate) fn share_group_lag(lag: &crate::lag::ShareGroupLag) {
    describe_lag();
    let series = |topic: &str, partition: i32| {
        [
            Label::new("group", lag.group.clone()),
            Label::new("topic", topic.to_owned()),
            Label::new("partition", partition.to_string()),
        ]
    };
    for p in &lag.partitions {
        if let Some(value) = p.lag {
            gauge!("share-group-lag", series(&p.topic, p.partition).iter()).set(value as f64);
        }
    }
    for (topic, partition) in vanished(lag) {
        gauge!("share-group-lag", series(&topic, partition).iter()).set(0.0);
    }
    let group = [Label::new("group", lag.group.clone())];
    gauge!("share-group-lag-sum", group.iter()).set(lag.total() as f64);
}

/// The partitions of `lag`'s group exported before and missing from this read; remembers
/// the partitions exported so far that are still in the group (per group, for the whole
/// process) for the next. A group with none left is forgotten.
fn vanished(lag: &crate::lag::ShareGroupLag) -> Vec<(String, i32)> {
    static EXPORTED: Mutex<BTreeMap<String, BTreeSet<(String, i32)>>> = Mutex::new(BTreeMap::new());
    let mut exported = EXPORTED.lock().unwrap_or_else(PoisonError::into_inner);
    let before = exported.remove(&lag.group).unwrap_or_default();
    let mut present = BTreeSet::new();
    let mut now = BTreeSet::new();
    for p in &lag.partitions {
        let key = (p.topic.clone(), p.partition);
        // Exported now (its lag is known), or before and still in the group (its last value
        // stays): a partition never exported gets no series at 0 when it goes.
        if p.lag.is_some() || before.contains(&key) {
            now.insert(key.clone());
        }
        present.insert(key);
    }
    let gone = before.difference(&present).cloned().collect();
    if !now.is_empty() {
        exported.insert(lag.group.clone(), now);
    }
    gone
}

/// Records how many reads of a share group's lag failed.
pub(crate) fn share_group_lag_errors(group: &str, errors: u64) {
    describe_lag();
    let labels = [Label::new("group", group.to_owned())];
    counter!("share-group-lag-read-errors-total", labels.iter()).absolute(errors);
}

fn describe_lag() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        describe_gauge!(
            "share-group-lag",
            "Records of a partition the share group has still to finish, as the broker counts \
             them (DescribeShareGroupOffsets)."
        );
        describe_gauge!(
            "share-group-lag-sum",
            "Records the share group has still to finish, over every partition whose lag is known."
        );
        describe_counter!(
            "share-group-lag-read-errors-total",
            "Reads of the share group's lag that failed or timed out."
        );
    });
}
