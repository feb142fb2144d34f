//! [`DeadLetterRecord`]: the original consumed record, ready for the dead-letter topic, and
//! [`ErrorContext`]: why it failed, for Connect's context headers.

use std::error::Error;

use bytes::Bytes;

use super::headers;
use super::render::{stack_trace, throwables, top_class};
use crate::record::{ConsumerRecord, Headers, RecordId};
use crate::stage::Stage;

/// Why a record failed, as Kafka Connect writes it into the `__connect.errors.*` headers.
///
/// The exception class is, in this order: the one given to
/// [`with_exception_class_name`](Self::with_exception_class_name); else the Java class
/// Connect would name for the crate's own errors (a [`ConvertError`](crate::ConvertError) is
/// Connect's `DataException` unless it names another, a
/// [`TransformError`](crate::TransformError) a `DataException`, a
/// [`TaskError`](crate::TaskError) a `ConnectException`, retriable ones a
/// `RetriableException`); else, for another error type, its Rust type name
/// (`std::any::type_name`, from [`new`](Self::new)) or the name the caller gave
/// [`new_dyn`](Self::new_dyn). [`DeadLetterRecord::with_context`] lists every header.
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
/// assert_eq!(context.exception_class_name(), "org.apache.kafka.connect.errors.ConnectException");
///
/// let io = std::io::Error::other("disk full");
/// let context = ErrorContext::new("orders-sink", 0, Stage::TaskPut, "my.Sink", &io);
/// assert_eq!(context.exception_class_name(), "std::io::Error");
/// let named = context.with_exception_class_name("java.io.IOException");
/// assert_eq!(named.exception_class_name(), "java.io.IOException");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ErrorContext<'a> {
    connector_name: &'a str,
    task_id: i32,
    stage: Stage,
    class_name: &'a str,
    /// Given by `with_exception_class_name`: wins.
    exception_class_name: Option<&'a str>,
    /// The error's type name, for errors the crate cannot name.
    type_name: &'a str,
    error: &'a (dyn Error + 'static),
}

impl<'a> ErrorContext<'a> {
    /// The class name Kafka Connect writes for errors of the sink task's `put`
    /// (`__connect.errors.class.name`).
    pub const CONNECT_SINK_TASK_CLASS: &'static str = "org.apache.kafka.connect.sink.SinkTask";

    /// The context of `error`, raised by `class_name` (a converter or transform class, or
    /// [`Self::CONNECT_SINK_TASK_CLASS`] for `put`) at `stage` of task `task_id` of
    /// `connector_name`. An error type the crate cannot name is named by its Rust type name.
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

    /// Like [`Self::new`], for an error known only as `dyn Error`: the caller names its type,
    /// e.g. with `std::any::type_name::<T>()` where it still knew `T`, for when the crate
    /// cannot name it.
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
            exception_class_name: None,
            type_name: exception_class_name,
            error,
        }
    }

    /// Names the exception class, whatever the error.
    pub fn with_exception_class_name(mut self, name: &'a str) -> Self {
        self.exception_class_name = Some(name);
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

    /// The exception class name written to `__connect.errors.exception.class.name` (see the
    /// type's documentation for where it comes from).
    pub fn exception_class_name(&self) -> &str {
        self.exception_class_name
            .or_else(|| top_class(self.error))
            .unwrap_or(self.type_name)
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
    /// `.exception.message` and `.exception.stacktrace`. The names are in
    /// [`headers`].
    ///
    /// The error is written as the chain of Java exceptions Connect would have written for it
    /// (see [`ErrorContext`] for the first one's class):
    ///
    /// - **`exception.class.name`**: the first exception's class, e.g.
    ///   `org.apache.kafka.connect.errors.DataException` for a converter or transform failure,
    ///   `org.apache.kafka.connect.errors.ConnectException` for a failed `put`.
    /// - **`exception.message`**: its message: the error's own message (for the built-in
    ///   JsonConverter Connect's `Converting byte[] to Kafka Connect data failed due to
    ///   serialization error: `; for a [`TaskError`](crate::TaskError) the message of its
    ///   cause, as the task's own exception). A null value when the message is empty.
    /// - **`exception.stacktrace`**: `printStackTrace`'s shape without frames: a first line
    ///   `<class>: <message>`, then one `Caused by: <class>: <message>` line per cause in the
    ///   [`source`](Error::source) chain (at most 64 exceptions), each line ended by `\n`.
    ///   The built-in converters' causes are named as Connect's (Kafka's
    ///   `SerializationException`, then the JSON parser's exception, such as
    ///   `com.fasterxml.jackson.core.JsonParseException`) and carry the detail of what was
    ///   wrong and where. A cause the crate cannot name is `std::error::Error` (or the type of
    ///   a few std errors, such as `std::io::Error`). Rust errors carry no frames, so no
    ///   `\tat ...` lines are written.
    ///
    /// Call it only when `errors.deadletterqueue.context.headers.enable` is set.
    pub fn with_context(mut self, context: &ErrorContext<'_>) -> Self {
        let throwables = throwables(context.error);
        let exception_class = context.exception_class_name();
        let stack_trace = stack_trace(&throwables, exception_class);
        let message = throwables
            .into_iter()
            .next()
            .map(|t| t.message)
            .unwrap_or_default();
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
        h.push(headers::EXCEPTION_CLASS_NAME, Some(text(exception_class)));
        h.push(
            headers::EXCEPTION_MESSAGE,
            (!message.is_empty()).then(|| text(message)),
        );
        h.push(headers::EXCEPTION_STACKTRACE, Some(text(stack_trace)));
        self
    }

    /// Appends the [`REASON`](super::headers::REASON) header: why the record is
    /// dead-lettered, one short and stable word. The driver adds it to every dead letter, after
    /// the context headers when those are on.
    ///
    /// ```
    /// use kafka_share_sink::dlq::headers;
    /// use kafka_share_sink::{ConsumerRecord, DeadLetterReason, DeadLetterRecord};
    ///
    /// let record = DeadLetterRecord::new(&ConsumerRecord::new("orders", 0, 7))
    ///     .with_reason(DeadLetterReason::Put);
    /// let reason = record.headers().last(headers::REASON).and_then(|h| h.value()).cloned();
    /// assert_eq!(reason.as_deref(), Some(&b"put"[..]));
    /// ```
    pub fn with_reason(mut self, reason: super::DeadLetterReason) -> Self {
        self.headers.push(
            headers::REASON,
            Some(Bytes::from_static(reason.as_str().as_bytes())),
        );
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

    /// The record to write to dead-letter topic `topic`: key, value, headers, and the
    /// original timestamp when there is one; the partition is left to the caller.
    pub(crate) fn into_producer_record(self, topic: &str) -> crate::producer::ProducerRecord {
        let record = crate::producer::ProducerRecord::new(topic)
            .with_key(self.key)
            .with_value(self.value)
            .with_headers(self.headers);
        match self.timestamp {
            Some(timestamp) => record.timestamp(timestamp),
            None => record,
        }
    }
}

/// UTF-8 text as a header value.
fn text(s: impl Into<String>) -> Bytes {
    Bytes::from(s.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::TimestampType;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("")]
    struct Silent;

    #[test]
    fn headers_name_the_causes() {
        let error = Outer(std::io::Error::other("inner"));
        let context = ErrorContext::new("c", 0, Stage::TaskPut, "x", &error);
        assert_eq!(
            context.exception_class_name(),
            "kafka_share_sink::dlq::record::tests::Outer"
        );
        let record = DeadLetterRecord::new(&ConsumerRecord::new("t", 0, 0)).with_context(&context);
        let header = |key| {
            record
                .headers()
                .last(key)
                .and_then(|h| h.value())
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        assert_eq!(
            header(headers::EXCEPTION_STACKTRACE).as_deref(),
            Some(
                "kafka_share_sink::dlq::record::tests::Outer: outer\nCaused by: std::io::Error: \
                 inner\n"
            )
        );
        assert_eq!(header(headers::EXCEPTION_MESSAGE).as_deref(), Some("outer"));

        let context = ErrorContext::new("c", 0, Stage::TaskPut, "x", &Silent);
        let record = DeadLetterRecord::new(&ConsumerRecord::new("t", 0, 0)).with_context(&context);
        let message = record.headers().last(headers::EXCEPTION_MESSAGE);
        assert_eq!(
            message.map(|h| h.value()),
            Some(None),
            "an empty message is null"
        );
        let trace = record.headers().last(headers::EXCEPTION_STACKTRACE);
        assert_eq!(
            trace.and_then(|h| h.value()).map(|v| v.as_ref()),
            Some(&b"kafka_share_sink::dlq::record::tests::Silent\n"[..])
        );
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
