//! What the driver logs: its metrics event under Kafka Connect's names, and warnings about
//! settings that do less than they seem to.

mod support;

use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, GroupConfig, ProduceRecord};
use kafka_share_sink::{
    CommitPolicy, DriverConfig, ErrorHandling, PutRetriablePolicy, ShareSinkTask, SinkRecord,
    SinkTask, TaskConfig, TaskError,
};

struct NoOp;

#[async_trait]
impl SinkTask for NoOp {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }
    async fn put(&mut self, _: &[SinkRecord]) -> Result<(), TaskError> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn each_commit_logs_the_metrics_under_connect_names() {
    let b = EmbeddedBroker::new();
    b.create_topic("t", 1).unwrap();
    b.set_group_config(
        "sink",
        GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest),
    )
    .unwrap();
    for i in 0..3 {
        b.produce("t", ProduceRecord::new().value(format!("{i}")))
            .unwrap();
    }
    let config = DriverConfig::new(["t"])
        .commit_policy(CommitPolicy::every_iteration())
        .poll_timeout(Duration::from_millis(10));
    let mut d = ShareSinkTask::new(Box::new(NoOp), b.share_consumer("sink"), config);
    d.initialize().await.unwrap();
    let capture = support::Capture::default();
    let guard = capture.set_default();
    d.iteration().await.unwrap();
    drop(guard);
    let lines = capture.lines();
    let metrics = lines
        .iter()
        .find(|l| l.contains("sink-record-read-total="))
        .unwrap_or_else(|| panic!("no metrics event in {lines:#?}"));
    for name in [
        "sink-record-read-total=3",
        "sink-record-send-total=3",
        "offset-commit-completion-total=1",
        "deadletterqueue-produce-requests=0",
        "share-records-renewed-total=0",
    ] {
        assert!(metrics.contains(name), "{name} missing from {metrics}");
    }
}

/// `retry.in.place` retries for `errors.retry.timeout`, whose default is 0: alone, it retries
/// nothing. `initialize` says so once, and not when a timeout is set.
#[tokio::test(start_paused = true)]
async fn retry_in_place_without_a_retry_timeout_is_warned_about_at_initialize() {
    for (errors, warned) in [
        (ErrorHandling::new(), true),
        (
            ErrorHandling::new().retry_timeout(Some(Duration::from_secs(60))),
            false,
        ),
    ] {
        let b = EmbeddedBroker::new();
        b.create_topic("t", 1).unwrap();
        let config = DriverConfig::new(["t"])
            .put_retriable_policy(PutRetriablePolicy::RetryInPlace)
            .errors(errors);
        let mut d = ShareSinkTask::new(Box::new(NoOp), b.share_consumer("sink"), config);
        let capture = support::Capture::default();
        let guard = capture.set_default();
        d.initialize().await.unwrap();
        drop(guard);
        let lines = capture.lines();
        let warnings = lines
            .iter()
            .filter(|l| l.starts_with("WARN") && l.contains("retries nothing in place"))
            .count();
        assert_eq!(warnings, usize::from(warned), "{lines:#?}");
        d.close().await.unwrap();
    }
}
