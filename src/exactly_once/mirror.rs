//! [`MirrorTask`]: the ready exactly-once task that copies records to a renamed topic.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use super::{OutputTarget, TransactionalOutput};
use crate::error::TaskError;
use crate::producer::ProducerRecord;
use crate::record::{Headers, SinkRecord, Value};
use crate::task::{SinkTask, TaskConfig};

/// How a source topic name becomes the target topic name.
type Rename = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// Copies each record (key, value, headers, timestamp, and the partition unless told not
/// to) to a renamed topic in the exactly-once iteration, the common Kafka-to-Kafka case.
///
/// The naming follows MirrorMaker 2's default replication policy when built with
/// [`with_source_alias`](Self::with_source_alias): `orders` from cluster `primary` becomes
/// `primary.orders`. Keys, values and headers must reach the task as bytes or text: use the
/// byte-array (or string) converters, which are the driver's defaults.
///
/// ```
/// use kafka_share_sink::exactly_once::MirrorTask;
///
/// let task = MirrorTask::with_source_alias("primary");
/// assert_eq!(task.target_topic("orders"), "primary.orders");
/// let task = MirrorTask::with_rename(|topic| format!("{topic}-copy"));
/// assert_eq!(task.target_topic("orders"), "orders-copy");
/// ```
#[derive(Clone)]
pub struct MirrorTask {
    rename: Rename,
    keep_partition: bool,
}

impl fmt::Debug for MirrorTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MirrorTask")
            .field("keep_partition", &self.keep_partition)
            .finish_non_exhaustive()
    }
}

impl MirrorTask {
    /// Targets `<alias><separator><topic>` with MirrorMaker's separator `.`.
    pub fn with_source_alias(alias: impl Into<String>) -> Self {
        let prefix = format!("{}.", alias.into());
        Self::with_prefix(prefix)
    }

    /// Targets `<prefix><topic>`.
    pub fn with_prefix(prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        Self::with_rename(move |topic| format!("{prefix}{topic}"))
    }

    /// Targets whatever `rename` returns for the source topic.
    pub fn with_rename(rename: impl Fn(&str) -> String + Send + Sync + 'static) -> Self {
        Self {
            rename: Arc::new(rename),
            keep_partition: true,
        }
    }

    /// Whether a record goes to the same partition number as its source (the default, as
    /// MirrorMaker does; the target topic needs at least as many partitions), or lets the
    /// producer's partitioner choose by key.
    pub fn keep_partition(mut self, keep: bool) -> Self {
        self.keep_partition = keep;
        self
    }

    /// The target topic of `source`.
    pub fn target_topic(&self, source: &str) -> String {
        (self.rename)(source)
    }

    /// The copy of one record.
    pub fn mirror(&self, record: &SinkRecord) -> Result<ProducerRecord, TaskError> {
        let original = record.original_id();
        let mut out = ProducerRecord::new(self.target_topic(original.topic()))
            .with_key(bytes_of(record.key(), "key", record)?)
            .with_value(bytes_of(record.value(), "value", record)?);
        if self.keep_partition {
            out = out.partition(original.partition());
        }
        if let Some(timestamp) = record.timestamp().filter(|t| *t >= 0) {
            out = out.timestamp(timestamp);
        }
        if !record.headers().is_empty() {
            let mut headers = Headers::new();
            for header in record.headers() {
                headers.push(header.key(), bytes_of(header.value(), "header", record)?);
            }
            out = out.with_headers(headers);
        }
        Ok(out)
    }
}

fn bytes_of(value: &Value, what: &str, record: &SinkRecord) -> Result<Option<Bytes>, TaskError> {
    match value {
        Value::Null => Ok(None),
        Value::Bytes(b) => Ok(Some(b.clone())),
        Value::String(s) => Ok(Some(Bytes::copy_from_slice(s.as_bytes()))),
        _ => Err(TaskError::fatal(format!(
            "MirrorTask copies bytes, but the {what} of {} was converted to a structured value: \
             use the byte-array converter (key.converter / value.converter / header.converter)",
            record.original_id()
        ))),
    }
}

#[async_trait]
impl SinkTask for MirrorTask {
    async fn start(&mut self, _config: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, _records: &[SinkRecord]) -> Result<(), TaskError> {
        Err(TaskError::fatal(
            "MirrorTask only runs in the exactly-once iteration (ShareSinkTask::iteration_exactly_once)",
        ))
    }

    async fn put_transactional(
        &mut self,
        records: &[SinkRecord],
        output: &mut TransactionalOutput,
    ) -> Result<(), TaskError> {
        for record in records {
            output.send(self.mirror(record)?);
        }
        Ok(())
    }

    fn transactional_outputs(&self, source: &str) -> Vec<OutputTarget> {
        vec![OutputTarget::new(self.target_topic(source)).keeping_partitions(self.keep_partition)]
    }

    fn requires_exactly_once(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{ConsumerRecord, Header};

    #[test]
    fn copies_key_value_headers_timestamp_and_partition() {
        let consumer = ConsumerRecord::new("orders", 3, 42)
            .with_key(Some(Bytes::from_static(b"k")))
            .with_value(Some(Bytes::from_static(b"v")))
            .with_headers(
                [Header::new("h", Some(Bytes::from_static(b"x")))]
                    .into_iter()
                    .collect(),
            )
            .with_timestamp(1_700_000_000_000, crate::record::TimestampType::CreateTime);
        let sink = SinkRecord::from_consumer_record(consumer);
        let out = MirrorTask::with_source_alias("primary")
            .mirror(&sink)
            .unwrap();
        assert_eq!(out.topic(), "primary.orders");
        assert_eq!(out.partition_hint(), Some(3));
        assert_eq!(out.key_bytes().map(|b| &b[..]), Some(&b"k"[..]));
        assert_eq!(out.value_bytes().map(|b| &b[..]), Some(&b"v"[..]));
        assert_eq!(
            out.headers()
                .last("h")
                .and_then(|h| h.value())
                .map(|b| &b[..]),
            Some(&b"x"[..])
        );
        assert_eq!(out.timestamp_hint(), Some(1_700_000_000_000));
        let free = MirrorTask::with_prefix("b.")
            .keep_partition(false)
            .mirror(&sink)
            .unwrap();
        assert_eq!(free.partition_hint(), None);
    }

    #[test]
    fn a_structured_value_is_a_fatal_error_that_names_the_converter() {
        let sink = SinkRecord::new("orders", 0, 1).with_value(Value::Int(5));
        let error = MirrorTask::with_prefix("b.").mirror(&sink).unwrap_err();
        let cause = std::error::Error::source(&error)
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(cause.contains("byte-array converter"), "{cause}");
    }
}
