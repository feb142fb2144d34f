//! Metrics in Prometheus: the driver's and the consumer's counters, recorded through the
//! `metrics` facade (feature `metrics`) and rendered by `metrics-exporter-prometheus`.
//!
//! ```sh
//! cargo run --example prometheus --features metrics                  # print one scrape
//! cargo run --example prometheus --features metrics -- 127.0.0.1:9898   # serve /metrics
//! ```
//!
//! Two supervised tasks drain an embedded share group (no broker needed) while records keep
//! arriving; the supervisor reads the group's lag every second (`share-group-lag`,
//! `share-group-lag-sum`: what `examples/autoscale/` scales on). Without an address the
//! example prints the scrape after a few seconds; with one it serves the text format on
//! `http://ADDR/metrics` until Ctrl-C. In a service, install the exporter the way the service
//! already does (its HTTP listener, a push gateway, ...): the crate only records.

use std::time::Duration;

use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, GroupConfig, ProduceRecord};
use kafka_share_sink::supervisor::{Supervisor, SupervisorConfig, TaskParts};
use kafka_share_sink::{DriverConfig, SinkRecord, SinkTask, TaskConfig, TaskError};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Discard;

#[async_trait::async_trait]
impl SinkTask for Discard {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }
    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        // Stands for a write that takes a little time.
        if !records.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }
}

/// A minimal HTTP endpoint: every request gets the current scrape.
async fn serve(addr: &str, prometheus: PrometheusHandle) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("serving http://{addr}/metrics (Ctrl-C stops)");
    loop {
        let (mut socket, _) = listener.accept().await?;
        let body = prometheus.render();
        tokio::spawn(async move {
            let mut request = [0u8; 1024];
            let _ = socket.read(&mut request).await;
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(response.as_bytes()).await;
        });
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let recorder = PrometheusBuilder::new().build_recorder();
    let prometheus = recorder.handle();
    metrics::set_global_recorder(recorder)?;

    let broker = EmbeddedBroker::new();
    broker.create_topic("payments", 4)?;
    broker.set_group_config(
        "payments-sink",
        GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest),
    )?;
    let producer = broker.clone();
    tokio::spawn(async move {
        for i in 0u64.. {
            let record = ProduceRecord::new()
                .partition((i % 4) as i32)
                .value(format!("payment {i}"));
            if producer.produce("payments", record).is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });

    let group = broker.clone();
    let supervisor = Supervisor::new("payments-sink", SupervisorConfig::new(2), move |_task| {
        let consumer = group.share_consumer("payments-sink");
        async move {
            let config = DriverConfig::new(["payments"])
                .poll_timeout(Duration::from_millis(100))
                .lag_refresh_interval(Duration::from_secs(1));
            Ok(TaskParts::new(Box::new(Discard), consumer, config))
        }
    });

    match std::env::args().nth(1) {
        Some(addr) => {
            // The endpoint failing (a port in use, say) stops the tasks the way Ctrl-C does:
            // `run` is never dropped, so every task is closed and its records go back.
            let server = tokio::spawn(async move { serve(&addr, prometheus).await });
            let server_done = server.abort_handle();
            let shutdown = async move {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    result = server => match result {
                        Ok(Err(error)) => eprintln!("metrics endpoint failed: {error}; stopping"),
                        Ok(Ok(())) | Err(_) => eprintln!("metrics endpoint stopped; stopping"),
                    },
                }
            };
            let outcome = supervisor.run(shutdown).await;
            server_done.abort();
            outcome?;
        }
        None => {
            let handle = supervisor.handle();
            let shutdown = async move {
                tokio::time::sleep(Duration::from_secs(3)).await;
                // The same numbers as the gauges, read from the handle.
                for lag in handle.lag() {
                    println!(
                        "# share group {}: lag {} over {} partitions, read {:?} ago",
                        lag.group,
                        lag.total(),
                        lag.partitions.len(),
                        lag.age()
                    );
                }
            };
            supervisor.run(shutdown).await?;
            print!("{}", prometheus.render());
        }
    }
    Ok(())
}
