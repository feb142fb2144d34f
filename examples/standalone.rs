//! A standalone runner, as Kafka Connect's standalone mode: one connector, its `tasks.max`
//! tasks in this process, until Ctrl-C (or SIGTERM).
//!
//! ```sh
//! ./scripts/kafka.sh start    # or any Kafka 4.1+ cluster with share groups on
//! cargo run --example standalone -- \
//!     examples/standalone/worker.properties examples/standalone/file-sink.properties
//! ```
//!
//! The sink is chosen by the connector's `connector.class`:
//!
//! - `org.apache.kafka.connect.file.FileStreamSinkConnector` (or `FileStreamSink`): each
//!   record value as a line of text, appended to `file`, or printed when `file` is absent
//!   (examples/standalone/file-sink.properties).
//! - `SqliteSinkConnector`: upserts into the SQLite database `sqlite.path`, one transaction
//!   per flush, with `ack.policy=after.flush` (examples/standalone/sqlite-sink.properties).
//!
//! Everything else is the connector and worker config Connect reads: `topics`, converters,
//! transforms, `errors.*`, `consumer.override.*`, ... (see `ConnectorConfig`). On the way out
//! it prints each task's counters.

#[path = "sinks/file.rs"]
mod file;
#[path = "sinks/sqlite.rs"]
mod sqlite;

use std::process::ExitCode;

use kafka_share_sink::supervisor::{Supervisor, SupervisorConfig, TaskParts};
use kafka_share_sink::{AckPolicy, ConnectorConfig, Plugins, Properties, SinkTask};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The built-in sinks, by `connector.class`.
fn sink_for(class: &str) -> Option<fn() -> Box<dyn SinkTask>> {
    match class.trim() {
        file::CLASS | "FileStreamSink" | "FileStreamSinkConnector" => {
            Some(|| Box::new(file::FileSink::default()))
        }
        sqlite::CLASS | "SqliteSink" => Some(|| Box::new(sqlite::SqliteSink::default())),
        _ => None,
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
    eprintln!("shutting down: every task finishes its batch and commits");
}

async fn run(worker_path: &str, connector_path: &str) -> Result<(), BoxError> {
    let worker = Properties::from_file(worker_path)?;
    let connector = Properties::from_file(connector_path)?;
    let class = connector.get("connector.class").unwrap_or_default();
    let make_sink = sink_for(class).ok_or_else(|| {
        format!(
            "{connector_path}: connector.class `{class}` is not a built-in sink; use `{}` or `{}`",
            file::CLASS,
            sqlite::CLASS
        )
    })?;
    // Checked once here, so a mistake is reported before any task starts.
    let config = ConnectorConfig::resolve(&worker, &connector)?;
    if sqlite::CLASS == class.trim() && config.ack_policy() != AckPolicy::AfterFlush {
        return Err(format!(
            "{connector_path}: the SQLite sink writes in pre_commit: set ack.policy=after.flush"
        )
        .into());
    }
    eprintln!(
        "connector {} ({class}): {} task(s) on share group {}, topics {:?}",
        config.name(),
        config.tasks_max(),
        config.share_group_id(),
        config.topics()
    );
    let supervisor = Supervisor::new(
        config.name(),
        SupervisorConfig::from_connector(&config),
        move |task_id| {
            let (worker, connector) = (worker.clone(), connector.clone());
            async move {
                let parts =
                    TaskParts::connect(&worker, &connector, task_id, &Plugins::new(), make_sink())
                        .await?;
                Ok(parts)
            }
        },
    );
    let handle = supervisor.handle();
    let result = supervisor.run(shutdown_signal()).await;
    for status in handle.statuses() {
        eprintln!(
            "task {}: {}, {} restart(s), {} read, {} written, {} commits{}",
            status.task,
            status.state.as_str(),
            status.restarts,
            status.driver.records_read,
            status.driver.records_put,
            status.driver.commits,
            status
                .last_error
                .map(|e| format!(", last error: {e}"))
                .unwrap_or_default()
        );
    }
    Ok(result?)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [worker, connector] = args.as_slice() else {
        eprintln!("usage: standalone <worker.properties> <connector.properties>");
        return ExitCode::from(2);
    };
    match run(worker, connector).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut message = e.to_string();
            let mut source = e.source();
            while let Some(cause) = source {
                message.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
