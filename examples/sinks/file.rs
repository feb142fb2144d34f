//! A sink like Kafka Connect's `FileStreamSink`: each record's value as one line of text,
//! appended to the file named by `file`, or written to standard output when `file` is absent.

use std::fs::OpenOptions;
use std::io::{BufWriter, Write};

use kafka_share_sink::{SinkRecord, SinkTask, TaskConfig, TaskError, Value};

/// Connect's class name; the standalone runner also takes the short `FileStreamSink`.
#[allow(dead_code)]
pub(crate) const CLASS: &str = "org.apache.kafka.connect.file.FileStreamSinkConnector";

/// Writes record values as lines.
#[derive(Default)]
pub(crate) struct FileSink {
    out: Option<BufWriter<Box<dyn Write + Send>>>,
}

impl FileSink {
    fn out(&mut self) -> Result<&mut BufWriter<Box<dyn Write + Send>>, TaskError> {
        self.out
            .as_mut()
            .ok_or_else(|| TaskError::fatal("the file sink was not started"))
    }
}

/// A value as text, as Connect's `toString` would print it.
fn text(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        Value::String(s) => s.clone(),
        Value::Boolean(b) => b.to_string(),
        Value::Int(n) => n.to_string(),
        Value::Float(x) => x.to_string(),
        Value::Array(items) => {
            let items: Vec<_> = items.iter().map(text).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Map(entries) => {
            let entries: Vec<_> = entries
                .iter()
                .map(|(k, v)| format!("{}={}", text(k), text(v)))
                .collect();
            format!("{{{}}}", entries.join(", "))
        }
        Value::Struct(fields) => {
            let fields: Vec<_> = fields
                .iter()
                .map(|(k, v)| format!("{k}={}", text(v)))
                .collect();
            format!("Struct{{{}}}", fields.join(","))
        }
        other => format!("{other:?}"),
    }
}

#[async_trait::async_trait]
impl SinkTask for FileSink {
    async fn start(&mut self, config: &TaskConfig) -> Result<(), TaskError> {
        let out: Box<dyn Write + Send> = match config.get("file") {
            Some(path) if !path.trim().is_empty() => Box::new(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path.trim())
                    .map_err(|e| TaskError::fatal(format!("cannot open `file` {path}: {e}")))?,
            ),
            _ => Box::new(std::io::stdout()),
        };
        self.out = Some(BufWriter::new(out));
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        let out = self.out()?;
        for record in records {
            writeln!(out, "{}", text(record.value()))
                .map_err(|e| TaskError::retriable(format!("write failed: {e}")))?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), TaskError> {
        self.out()?
            .flush()
            .map_err(|e| TaskError::retriable(format!("flush failed: {e}")))
    }

    async fn stop(&mut self) -> Result<(), TaskError> {
        if let Some(mut out) = self.out.take() {
            out.flush()
                .map_err(|e| TaskError::retriable(format!("flush failed: {e}")))?;
        }
        Ok(())
    }
}
