//! Dead-letter queues: where records go that a converter, a transform or the sink task could
//! not handle, as Kafka Connect's `errors.deadletterqueue.*` settings describe.
//!
//! - [`DeadLetterQueue`]: the trait the driver writes through.
//! - [`DeadLetterRecord`]: the original consumed record byte for byte, plus Connect's
//!   `__connect.errors.*` context headers ([`headers`]) from an [`ErrorContext`], and the
//!   driver's [`DeadLetterReason`] (`__connect.errors.reason`).
//! - [`DeadLetterBreaker`]: the dead-letter circuit breaker's settings; [`BreakerTripped`]:
//!   why it stopped a task.
//! - [`KafkaDeadLetterQueue`]: a Kafka topic, created when missing as Connect's worker does.
//! - [`EmbeddedDeadLetterQueue`](crate::embedded::EmbeddedDeadLetterQueue): a topic of the
//!   [`EmbeddedBroker`](crate::embedded::EmbeddedBroker), with failures on demand for tests.
//!
//! # Metrics
//!
//! The queues keep no counters. Connect's `deadletterqueue-produce-requests` and
//! `deadletterqueue-produce-failures` count records: a `send` of `n` records adds `n` to the
//! first, and `n` to the second when it fails. The caller counts them, which works for
//! every implementation of the trait.

pub(crate) mod breaker;
mod error;
pub mod headers;
mod kafka;
mod reason;
mod record;
mod render;

pub use self::breaker::{BreakerLimit, BreakerTripped, DeadLetterBreaker};
pub use self::error::DeadLetterError;
pub use self::kafka::{KafkaDeadLetterQueue, KafkaDeadLetterQueueConfig};
pub use self::reason::DeadLetterReason;
pub use self::record::{DeadLetterRecord, ErrorContext};
pub(crate) use self::render::ErrorSnapshot;

/// A dead-letter queue: a topic that failed records are written to, with their original
/// bytes.
///
/// # Contract
///
/// [`send`](Self::send) returns `Ok` only once the queue has confirmed every record (for
/// Kafka, acknowledged by all in-sync replicas: `acks=all`). On `Err` the caller treats all
/// of them as not written and RELEASEs the originals, so nothing is dropped; a partly written
/// batch only means duplicates in the dead-letter topic.
///
/// # Example
///
/// ```
/// use kafka_share_sink::embedded::EmbeddedBroker;
/// use kafka_share_sink::{ConsumerRecord, DeadLetterQueue, DeadLetterRecord};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let broker = EmbeddedBroker::new();
/// let dlq = broker.dead_letter_queue("orders-dlq")?;
/// let failed = ConsumerRecord::new("orders", 0, 7).with_value(Some("not json".into()));
/// dlq.send(vec![DeadLetterRecord::new(&failed)]).await?;
///
/// let log = broker.read_log("orders-dlq", 0)?;
/// assert_eq!(log[0].value().map(|v| v.as_ref()), Some(&b"not json"[..]));
/// # Ok(())
/// # }
/// ```
#[async_trait::async_trait]
pub trait DeadLetterQueue: Send + Sync + std::fmt::Debug {
    /// The dead-letter topic.
    fn topic(&self) -> &str;

    /// Writes every record and returns `Ok` only once the queue confirmed all of them
    /// (acks=all). On `Err` the caller treats all of them as not written (it RELEASEs the
    /// originals, so nothing is dropped; a partly written batch only means duplicates).
    async fn send(&self, records: Vec<DeadLetterRecord>) -> Result<(), DeadLetterError>;
}
