//! `close` as Java's: every connection the consumer opened is closed before it returns (a
//! closed consumer that is still alive used to keep its connections, and with them its share
//! sessions, open until it was dropped), and it completes without an error when the cluster
//! is gone, in the consumer and in the driver alike. Against the scriptable fake broker.

#[path = "support/fake_broker.rs"]
mod fake_broker;

use std::time::Duration;

use async_trait::async_trait;
use fake_broker::FakeBroker;
use kafka_share_sink::{
    DriverConfig, KafkaShareConsumer, KafkaShareConsumerConfig, ShareConsumer, ShareSinkTask,
    SinkRecord, SinkTask, TaskConfig, TaskError,
};
use tokio::time::Instant;

async fn subscribed(broker: &FakeBroker) -> KafkaShareConsumer {
    broker.add_topic("orders", 2);
    let config = KafkaShareConsumerConfig::new(broker.addr(), "g")
        .fetch_max_wait(Duration::from_millis(50))
        .request_timeout(Duration::from_secs(2));
    let mut consumer = KafkaShareConsumer::connect(config).await.expect("connects");
    consumer
        .subscribe(vec!["orders".to_owned()])
        .await
        .expect("subscribes");
    for _ in 0..5 {
        consumer
            .poll(Duration::from_millis(100))
            .await
            .expect("polls");
    }
    consumer
}

#[tokio::test]
async fn close_shuts_every_connection_while_the_consumer_lives_on() {
    let broker = FakeBroker::start().await;
    let mut consumer = subscribed(&broker).await;
    assert!(
        broker.open_connections() >= 2,
        "bootstrap, coordinator and fetch connections are open: {}",
        broker.open_connections()
    );
    consumer
        .close(Duration::from_secs(5))
        .await
        .expect("closes");
    let deadline = Instant::now() + Duration::from_secs(2);
    while broker.open_connections() > 0 {
        assert!(
            Instant::now() < deadline,
            "{} connection(s) still open after close, the consumer not dropped",
            broker.open_connections()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(consumer);
}

#[tokio::test]
async fn close_with_the_cluster_gone_completes_without_an_error() {
    let broker = FakeBroker::start().await;
    let mut consumer = subscribed(&broker).await;
    drop(broker);
    let timeout = Duration::from_secs(2);
    let start = Instant::now();
    consumer
        .close(timeout)
        .await
        .expect("close completes as Java's does, logging what it could not do");
    assert!(start.elapsed() < timeout + Duration::from_secs(1));
}

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

#[tokio::test]
async fn the_drivers_close_with_the_cluster_gone_completes_too() {
    let broker = FakeBroker::start().await;
    broker.add_topic("orders", 2);
    let consumer = KafkaShareConsumer::connect(
        KafkaShareConsumerConfig::new(broker.addr(), "g")
            .fetch_max_wait(Duration::from_millis(50))
            .request_timeout(Duration::from_secs(2)),
    )
    .await
    .expect("connects");
    let config = DriverConfig::new(["orders"])
        .poll_timeout(Duration::from_millis(100))
        .close_timeout(Duration::from_secs(2));
    let mut driver = ShareSinkTask::new(Box::new(NoOp), consumer, config);
    driver.initialize().await.expect("initializes");
    for _ in 0..3 {
        driver.iteration().await.expect("iterates");
    }
    drop(broker);
    driver
        .close()
        .await
        .expect("a cluster out of reach does not fail the driver's close");
}
