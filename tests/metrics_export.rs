//! Feature `metrics`: the driver's, the consumer's and the supervisor's metrics recorded
//! through the `metrics` facade, scraped as Prometheus text.
#![cfg(feature = "metrics")]

#[path = "support/prometheus.rs"]
mod recorder;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, GroupConfig, ProduceRecord};
use kafka_share_sink::supervisor::{Supervisor, SupervisorConfig, TaskParts};
use kafka_share_sink::telemetry::{MeteredConsumer, MetricLabels};
use kafka_share_sink::{DriverConfig, ShareSinkTask, SinkRecord, SinkTask, TaskConfig, TaskError};
use recorder::prometheus;

/// The samples of the scraped text: `name{labels}` → value.
fn scrape() -> HashMap<String, f64> {
    prometheus()
        .render()
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("`series value`");
            (series.to_owned(), value.parse().expect("a number"))
        })
        .collect()
}

fn sample(samples: &HashMap<String, f64>, name: &str, labels: &str) -> f64 {
    let series = format!("{name}{{{labels}}}");
    *samples
        .get(&series)
        .unwrap_or_else(|| panic!("no {series} in the scrape: {:#?}", samples.keys()))
}

/// Fails its first non-empty put with a retriable error.
struct FlakyOnce {
    failed: bool,
    written: Arc<Mutex<usize>>,
}

#[async_trait]
impl SinkTask for FlakyOnce {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }
    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        if !self.failed {
            self.failed = true;
            return Err(TaskError::retriable("busy"));
        }
        *self.written.lock().unwrap() += records.len();
        Ok(())
    }
}

fn broker(group: &str, records: usize) -> EmbeddedBroker {
    let broker = EmbeddedBroker::new();
    broker.create_topic("orders", 1).unwrap();
    broker
        .set_group_config(
            group,
            GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest),
        )
        .unwrap();
    for i in 0..records {
        broker
            .produce("orders", ProduceRecord::new().value(format!("order {i}")))
            .unwrap();
    }
    broker
}

#[tokio::test]
async fn the_driver_and_consumer_metrics_are_scraped_under_connect_and_java_names() {
    prometheus();
    let broker = broker("orders-group", 25);
    let written = Arc::new(Mutex::new(0));
    let sink = FlakyOnce {
        failed: false,
        written: Arc::clone(&written),
    };
    let consumer = MeteredConsumer::new(
        broker.share_consumer("orders-group"),
        MetricLabels::new("orders-sink", 3, "orders-group"),
    );
    let consumer_metrics = consumer.handle();
    let config = DriverConfig::new(["orders"])
        .connector("orders-sink", 3)
        .poll_timeout(Duration::from_millis(20))
        .retriable_backoff(Duration::from_millis(1));
    let mut driver = ShareSinkTask::new(Box::new(sink), consumer, config);
    assert_eq!(
        driver.metric_labels(),
        MetricLabels::new("orders-sink", 3, "orders-group")
    );
    driver.initialize().await.unwrap();
    while *written.lock().unwrap() < 25 {
        driver.iteration().await.unwrap();
    }
    driver.close().await.unwrap();

    let m = driver.metrics();
    let c = consumer_metrics.snapshot();
    assert_eq!(m.records_put, 25);
    assert!(m.records_released > 0, "the failed put released its batch");
    assert!(m.records_read > 25, "the released records were read again");

    let samples = scrape();
    let labels = r#"connector="orders-sink",task="3",group="orders-group""#;
    // Connect's sink-task and task-error names, with underscores as Prometheus wants them.
    assert_eq!(
        sample(&samples, "sink_record_read_total", labels),
        m.records_read as f64
    );
    assert_eq!(sample(&samples, "sink_record_send_total", labels), 25.0);
    assert_eq!(
        sample(&samples, "offset_commit_completion_total", labels),
        m.commits as f64
    );
    assert_eq!(
        sample(&samples, "share_records_released_total", labels),
        m.records_released as f64
    );
    assert_eq!(
        sample(&samples, "share_records_redelivered_total", labels),
        m.records_redelivered as f64
    );
    assert_eq!(sample(&samples, "share_put_failures_total", labels), 1.0);
    assert_eq!(sample(&samples, "total_record_errors", labels), 0.0);
    assert_eq!(
        sample(&samples, "put_batch_max_time_ms", labels),
        m.put_time_max.as_secs_f64() * 1000.0
    );
    assert_eq!(
        sample(&samples, "share_records_awaiting_flush", labels),
        0.0
    );
    // The Java share consumer's names.
    assert_eq!(
        sample(&samples, "records_consumed_total", labels),
        m.records_read as f64
    );
    assert_eq!(c.records_consumed, m.records_read);
    assert_eq!(
        sample(&samples, "bytes_consumed_total", labels),
        c.bytes_consumed as f64
    );
    assert!(c.bytes_consumed >= 25 * "order 0".len() as u64);
    assert_eq!(
        sample(&samples, "acknowledgements_send_total", labels),
        c.acknowledgements as f64
    );
    assert_eq!(
        c.acknowledgements, m.records_read,
        "each delivery acknowledged once"
    );
    assert_eq!(
        sample(&samples, "acknowledgements_error_total", labels),
        0.0
    );
    // No rates: Prometheus derives them.
    assert!(
        !samples
            .keys()
            .any(|k| k.starts_with("sink_record_read_rate")),
        "rates are left to the backend"
    );
    let text = prometheus().render();
    assert!(
        text.contains("# TYPE sink_record_read_total counter"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE put_batch_avg_time_ms gauge"),
        "{text}"
    );
    assert!(
        text.contains("# HELP sink_record_read_total Records polled, before transforms."),
        "{text}"
    );
}

struct Count(Arc<Mutex<usize>>);

#[async_trait]
impl SinkTask for Count {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }
    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        *self.0.lock().unwrap() += records.len();
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervised_tasks_export_per_task_metrics_and_status() {
    prometheus();
    let broker = broker("audit-group", 40);
    let written = Arc::new(Mutex::new(0));
    let (group, count) = (broker.clone(), Arc::clone(&written));
    let supervisor = Supervisor::new("audit-sink", SupervisorConfig::new(2), move |_task| {
        let consumer = group.share_consumer("audit-group");
        let count = Arc::clone(&count);
        async move {
            let config = DriverConfig::new(["orders"]).poll_timeout(Duration::from_millis(20));
            Ok(TaskParts::new(Box::new(Count(count)), consumer, config))
        }
    });
    let handle = supervisor.handle();
    let watched = Arc::clone(&written);
    supervisor
        .run(async move {
            while *watched.lock().unwrap() < 40 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap();

    let samples = scrape();
    let statuses = handle.statuses();
    let mut total = 0.0;
    for status in &statuses {
        let labels = format!(
            r#"connector="audit-sink",task="{}",group="audit-group""#,
            status.task
        );
        let put = sample(&samples, "sink_record_send_total", &labels);
        assert_eq!(put, status.driver.records_put as f64);
        assert_eq!(
            sample(&samples, "records_consumed_total", &labels),
            status.consumer.records_consumed as f64
        );
        total += put;
        // The supervisor's own series carry the connector and task.
        let task = format!(r#"connector="audit-sink",task="{}""#, status.task);
        assert_eq!(
            sample(&samples, "status", &format!(r#"{task},state="stopped""#)),
            1.0
        );
        assert_eq!(
            sample(&samples, "status", &format!(r#"{task},state="running""#)),
            0.0
        );
        assert_eq!(sample(&samples, "share_task_restarts_total", &task), 0.0);
    }
    assert_eq!(total, 40.0, "the two tasks' sends add up to every record");
}

/// Answers the lags the test last set, however often it is read (the reader also reads
/// on its own).
#[derive(Debug, Default)]
struct Scripted(Mutex<Vec<kafka_share_sink::lag::PartitionLag>>);

#[async_trait]
impl kafka_share_sink::lag::LagSource for Scripted {
    async fn share_group_lag(
        &self,
        _group: &str,
    ) -> Result<Vec<kafka_share_sink::lag::PartitionLag>, kafka_share_sink::BoxError> {
        Ok(self.0.lock().unwrap().clone())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_that_leaves_the_group_stops_counting_in_the_exported_lag() {
    use kafka_share_sink::lag::{LagReader, PartitionLag};
    prometheus();
    let group = "lag-vanishing-group";
    let source = Arc::new(Scripted::default());
    *source.0.lock().unwrap() = vec![
        PartitionLag::new("gone", 0, Some(7)),
        PartitionLag::new("kept", 0, Some(5)),
        PartitionLag::new("unknown", 0, None),
    ];
    let reader = LagReader::spawn(source.clone(), group, Duration::from_secs(3600));
    reader.refresh().await.expect("first read");
    let labels = |topic: &str, partition: i32| {
        format!(r#"group="{group}",topic="{topic}",partition="{partition}""#)
    };
    let sum = format!(r#"group="{group}""#);
    let samples = scrape();
    assert_eq!(sample(&samples, "share_group_lag", &labels("gone", 0)), 7.0);
    assert_eq!(sample(&samples, "share_group_lag_sum", &sum), 12.0);
    // "gone" leaves the group, and so does "unknown", whose lag was never known.
    *source.0.lock().unwrap() = vec![PartitionLag::new("kept", 0, Some(2))];
    reader.refresh().await.expect("second read");
    let samples = scrape();
    assert_eq!(
        sample(&samples, "share_group_lag", &labels("gone", 0)),
        0.0,
        "a partition the group no longer has is not left at its last lag"
    );
    assert_eq!(sample(&samples, "share_group_lag", &labels("kept", 0)), 2.0);
    assert!(
        !samples.contains_key(&format!("share_group_lag{{{}}}", labels("unknown", 0))),
        "a partition never exported gets no series when it leaves"
    );
    assert_eq!(sample(&samples, "share_group_lag_sum", &sum), 2.0);
}
