//! The driver's metrics event, under Kafka Connect's names.
//!
//! Alone in its test binary: tracing caches whether a callsite is enabled when it is first hit,
//! and another test thread hitting it with no subscriber could turn it off for the capture.

mod support;

use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, GroupConfig, ProduceRecord};
use kafka_share_sink::{
    CommitPolicy, DriverConfig, ShareSinkTask, SinkRecord, SinkTask, TaskConfig, TaskError,
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
