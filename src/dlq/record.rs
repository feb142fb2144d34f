//! [`DeadLetterRecord`]: the original consumed record, ready for the dead-letter topic, and
//! [`ErrorContext`]: why it failed, for Connect's context headers.

use std::error::Error;
use std::fmt::Write as _;

use bytes::Bytes;

use super::headers;
use crate::record::{ConsumerRecord, Headers, RecordId};
use crate::stage::Stage;

/// How many causes of an error the stack-trace header lists at most.
const MAX_CAUSES: usize = 64;

/// Why a record failed, as Kafka Connect writes it into the `__connect.errors.*` headers.
///
/// [`ErrorContext::new`] takes the exception class name from the error's Rust type
/// (`std::any::type_name`); [`ErrorContext::new_dyn`] takes it from the caller, for an
/// error only known as `dyn Error`.
///
/// ```
/// use kafka_share_sink::{ErrorContext, Stage, TaskError};
///
/// let error = TaskError::fatal("constraint violated");
/// let context = ErrorContext::new(
///     "orders-sink",
///     0,
///     Stage::TaskPut,
///     ErrorContext::CONNECT_SINK_TASK_CLASS,
///     &error,
/// );
/// assert_eq!(context.exception_class_name(), "kafka_share_sink::error::TaskError");
///
/// let short = context.with_exception_class_name("TaskError");
/// assert_eq!(short.exception_class_name(), "TaskError");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ErrorContext<'a> {
    connector_name: &'a str,
    task_id: i32,
    stage: Stage,
    class_name: &'a str,
    exception_class_name: &'a str,
    error: &'a (dyn Error + 'static),
}

impl<'a> ErrorContext<'a> {
    /// The class name Kafka Connect writes for errors of the sink task's `put`
    /// (`__connect.errors.class.name`).
    pub const CONNECT_SINK_TASK_CLASS: &'static str = "org.apache.kafka.connect.sink.SinkTask";

    /// The context of `error`, raised by `class_name` (a converter or transform class, or
    /// [`Self::CONNECT_SINK_TASK_CLASS`] for `put`) at `stage` of task `task_id` of
    /// `connector_name`. The exception class name is the Rust type name of `E`.
    pub fn new<E: Error + 'static>(
        connector_name: &'a str,
        task_id: i32,
        stage: Stage,
        class_name: &'a str,
        error: &'a E,
    ) -> Self {
        Self::new_dyn(
            connector_name,
            task_id,
            stage,
            class_name,
            error,
            std::any::type_name::<E>(),
        )
    }

    /// Like [`Self::new`], for an error known only as `dyn Error`: the caller names its
    /// exception class, e.g. with `std::any::type_name::<T>()` where it still knew `T`.
    pub fn new_dyn(
        connector_name: &'a str,
        task_id: i32,
        stage: Stage,
        class_name: &'a str,
        error: &'a (dyn Error + 'static),
        exception_class_name: &'a str,
    ) -> Self {
        Self {
            connector_name,
            task_id,
            stage,
            class_name,
            exception_class_name,
            error,
        }
    }

    /// Replaces the exception class name.
    pub fn with_exception_class_name(mut self, name: &'a str) -> Self {
        self.exception_class_name = name;
        self
    }

    /// The connector name.
    pub fn connector_name(&self) -> &str {
        self.connector_name
    }

    /// The task number.
    pub fn task_id(&self) -> i32 {
        self.task_id
    }

    /// The stage that failed.
    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// The class that failed.
    pub fn class_name(&self) -> &str {
        self.class_name
    }

    /// The exception class name.
    pub fn exception_class_name(&self) -> &str {
        self.exception_class_name
    }

    /// The error.
    pub fn error(&self) -> &(dyn Error + 'static) {
        self.error
    }
}

/// A record for the dead-letter topic: the original consumed record's key, value and
/// headers byte for byte (order, repeated keys and null values kept) and its timestamp, plus
/// Kafka Connect's context headers when [`with_context`](Self::with_context) adds them. The
/// partition is left to the dead-letter queue.
///
/// ```
/// use kafka_share_sink::dlq::headers;
/// use kafka_share_sink::{ConsumerRecord, DeadLetterRecord, ErrorContext, Headers, Stage, TimestampType};
///
/// let mut original_headers = Headers::new();
/// original_headers.push("trace", Some("a".into()));
/// original_headers.push("trace", None);
/// let consumed = ConsumerRecord::new("orders", 2, 41)
///     .with_key(Some("k".into()))
///     .with_value(Some(vec![0xff, 0x00].into()))
///     .with_headers(original_headers)
///     .with_timestamp(1_700_000_000_000, TimestampType::CreateTime);
///
/// let error = std::io::Error::other("not JSON");
/// let context = ErrorContext::new("orders-sink", 3, Stage::ValueConverter, "my.JsonConverter", &error);
/// let record = DeadLetterRecord::new(&consumed).with_context(&context);
///
/// assert_eq!(record.value().map(|v| v.as_ref()), Some(&[0xff, 0x00][..]));
/// assert_eq!(record.timestamp(), Some(1_700_000_000_000));
/// let text = |key| record.headers().last(key).and_then(|h| h.value()).cloned();
/// assert_eq!(text(headers::OFFSET).as_deref(), Some(&b"41"[..]));
/// assert_eq!(text(headers::STAGE).as_deref(), Some(&b"VALUE_CONVERTER"[..]));
/// assert_eq!(record.headers().len(), 2 + 10);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterRecord {
    pub(crate) original: RecordId,
    pub(crate) key: Option<Bytes>,
    pub(crate) value: Option<Bytes>,
    pub(crate) headers: Headers,
    pub(crate) timestamp: Option<i64>,
}

impl DeadLetterRecord {
    /// The dead-letter copy of `record`. Payloads are shared, not copied. A negative
    /// timestamp (-1: none) is dropped, so the queue stamps the record with the time of
    /// writing, as Kafka's producer does.
    pub fn new(record: &ConsumerRecord) -> Self {
        Self {
            original: record.id(),
            key: record.key().cloned(),
            value: record.value().cloned(),
            headers: record.headers().clone(),
            timestamp: (record.timestamp() >= 0).then_some(record.timestamp()),
        }
    }

    /// Appends Kafka Connect's context headers, after the original ones, in Connect's
    /// order: `__connect.errors.topic`, `.partition`, `.offset` (the original coordinates),
    /// `.connector.name`, `.task.id`, `.stage`, `.class.name`, `.exception.class.name`,
    /// `.exception.message` (a null value when the error's message is empty) and
    /// `.exception.stacktrace`. The names are in [`headers`](super::headers).
    ///
    /// Rust errors carry no stack trace: the stack-trace header holds
    /// `<exception class>: <message>` and then one `Caused by: <message>` line per
    /// [`source`](Error::source), separated by `\n`.
    ///
    /// Call it only when `errors.deadletterqueue.context.headers.enable` is set.
    pub fn with_context(mut self, context: &ErrorContext<'_>) -> Self {
        let message = context.error.to_string();
        let stack_trace = stack_trace(context.exception_class_name, &message, context.error);
        let h = &mut self.headers;
        h.push(headers::TOPIC, Some(text(self.original.topic())));
        h.push(
            headers::PARTITION,
            Some(text(self.original.partition().to_string())),
        );
        h.push(
            headers::OFFSET,
            Some(text(self.original.offset().to_string())),
        );
        h.push(headers::CONNECTOR_NAME, Some(text(context.connector_name)));
        h.push(headers::TASK_ID, Some(text(context.task_id.to_string())));
        h.push(headers::STAGE, Some(text(context.stage.connect_name())));
        h.push(headers::CLASS_NAME, Some(text(context.class_name)));
        h.push(
            headers::EXCEPTION_CLASS_NAME,
            Some(text(context.exception_class_name)),
        );
        h.push(
            headers::EXCEPTION_MESSAGE,
            (!message.is_empty()).then(|| text(message)),
        );
        h.push(headers::EXCEPTION_STACKTRACE, Some(text(stack_trace)));
        self
    }

    /// Where the original record was consumed from.
    pub fn original(&self) -> &RecordId {
        &self.original
    }

    /// The key; `None` for a null key.
    pub fn key(&self) -> Option<&Bytes> {
        self.key.as_ref()
    }

    /// The value; `None` for a null value.
    pub fn value(&self) -> Option<&Bytes> {
        self.value.as_ref()
    }

    /// The headers: the original ones, then the context headers if added.
    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// The original timestamp in milliseconds since the epoch; `None` when the original
    /// had none, and the queue stamps the time of writing.
    pub fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }
}

/// UTF-8 text as a header value.
fn text(s: impl Into<String>) -> Bytes {
    Bytes::from(s.into())
}

/// `<class>: <message>` (or `<class>` for an empty message), then `Caused by: <message>`
/// for each source, one per line.
fn stack_trace(exception_class: &str, message: &str, error: &(dyn Error + 'static)) -> String {
    let mut out = String::from(exception_class);
    if !message.is_empty() {
        out.push_str(": ");
        out.push_str(message);
    }
    let mut cause = error.source();
    for _ in 0..MAX_CAUSES {
        let Some(source) = cause else { break };
        // Writing to a String cannot fail.
        let _ = write!(out, "\nCaused by: {source}");
        cause = source.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::TimestampType;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn stack_trace_lists_the_causes() {
        let error = Outer(std::io::Error::other("inner"));
        assert_eq!(
            stack_trace("x::Outer", "outer", &error),
            "x::Outer: outer\nCaused by: inner"
        );
        assert_eq!(stack_trace("x::Empty", "", &std::fmt::Error), "x::Empty");
    }

    #[test]
    fn negative_timestamps_are_dropped() {
        let record = |ts| {
            DeadLetterRecord::new(
                &ConsumerRecord::new("t", 0, 0).with_timestamp(ts, TimestampType::CreateTime),
            )
        };
        assert_eq!(record(-1).timestamp(), None);
        assert_eq!(record(0).timestamp(), Some(0));
    }
}
