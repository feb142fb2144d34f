//! [`ProducerRecord`], [`RecordMetadata`] and [`DeliveryFuture`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::sync::oneshot;

use super::ProducerError;
use crate::record::Headers;

/// A record to write to a topic.
///
/// ```
/// use kafka_share_sink::producer::ProducerRecord;
/// let record = ProducerRecord::new("orders")
///     .key("user-7")
///     .value(r#"{"total": 12}"#)
///     .header("source", "web")
///     .null_header("trace");
/// assert_eq!(record.topic(), "orders");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerRecord {
    pub(crate) topic: Arc<str>,
    pub(crate) partition: Option<i32>,
    pub(crate) key: Option<Bytes>,
    pub(crate) value: Option<Bytes>,
    pub(crate) headers: Headers,
    pub(crate) timestamp: Option<i64>,
}

impl ProducerRecord {
    /// A record for `topic` with null key and value, no headers, and the time of sending as
    /// its timestamp.
    pub fn new(topic: impl Into<Arc<str>>) -> Self {
        Self {
            topic: topic.into(),
            partition: None,
            key: None,
            value: None,
            headers: Headers::new(),
            timestamp: None,
        }
    }

    /// Sends it to this partition. Without one, a keyed record goes to the partition Kafka's
    /// Java producer picks for its key (murmur2), an unkeyed one to the sticky partition.
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Sets the key.
    pub fn key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets or clears the key.
    pub fn with_key(mut self, key: Option<Bytes>) -> Self {
        self.key = key;
        self
    }

    /// Sets the value. Without one the value is null (a tombstone).
    pub fn value(mut self, value: impl Into<Bytes>) -> Self {
        self.value = Some(value.into());
        self
    }

    /// Sets or clears the value.
    pub fn with_value(mut self, value: Option<Bytes>) -> Self {
        self.value = value;
        self
    }

    /// Appends a header, keeping earlier headers of the same key.
    pub fn header(mut self, key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.headers.push(key, Some(value.into()));
        self
    }

    /// Appends a header with a null value.
    pub fn null_header(mut self, key: impl Into<String>) -> Self {
        self.headers.push(key, None);
        self
    }

    /// Replaces the headers, kept exactly: order, repeated keys and null values.
    pub fn with_headers(mut self, headers: Headers) -> Self {
        self.headers = headers;
        self
    }

    /// Sets the create time, in milliseconds since the epoch.
    pub fn timestamp(mut self, millis: i64) -> Self {
        self.timestamp = Some(millis);
        self
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The partition asked for, if any.
    pub fn partition_hint(&self) -> Option<i32> {
        self.partition
    }

    /// The key.
    pub fn key_bytes(&self) -> Option<&Bytes> {
        self.key.as_ref()
    }

    /// The value.
    pub fn value_bytes(&self) -> Option<&Bytes> {
        self.value.as_ref()
    }

    /// The headers.
    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// The create time asked for, if any.
    pub fn timestamp_hint(&self) -> Option<i64> {
        self.timestamp
    }
}

/// Where a record was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// The topic.
    pub topic: Arc<str>,
    /// The partition.
    pub partition: i32,
    /// The record's offset; -1 when the broker did not say (a retry the broker recognised as
    /// a duplicate of a write already made).
    pub offset: i64,
    /// The record's timestamp as written (the log-append time on topics that use it).
    pub timestamp: i64,
}

/// The future of one [`Producer::send`](super::Producer::send): where the record landed, or
/// why it was not written.
///
/// # Cancel safety
///
/// Dropping it does not take the record back: it is written all the same.
#[derive(Debug)]
#[must_use = "a send's outcome is known only through its future"]
pub struct DeliveryFuture {
    receiver: oneshot::Receiver<Result<RecordMetadata, ProducerError>>,
}

/// The sending half of a [`DeliveryFuture`], kept by a producer with the queued record.
pub(crate) type DeliverySender = oneshot::Sender<Result<RecordMetadata, ProducerError>>;

impl DeliveryFuture {
    /// A future and the sender that completes it.
    pub(crate) fn channel() -> (DeliverySender, Self) {
        let (sender, receiver) = oneshot::channel();
        (sender, Self { receiver })
    }

    /// A future already complete with `outcome`.
    #[allow(
        dead_code,
        reason = "for producers that fail a record without queueing it"
    )]
    pub(crate) fn ready(outcome: Result<RecordMetadata, ProducerError>) -> Self {
        let (sender, future) = Self::channel();
        // The receiver is alive: the send cannot fail.
        let _ = sender.send(outcome);
        future
    }
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata, ProducerError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.receiver)
            .poll(cx)
            .map(|outcome| outcome.unwrap_or(Err(ProducerError::Closed)))
    }
}
