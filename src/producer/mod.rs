//! Producing to Kafka topics, idempotently or in transactions, and reading topics back.
//!
//! - [`Producer`]: what the crate's dead-letter queue and its exactly-once path write with,
//!   implemented by [`KafkaProducer`] (a real cluster) and by the embedded group's
//!   [`EmbeddedProducer`](crate::embedded::EmbeddedProducer) (in process, for tests).
//! - [`ProducerRecord`]: one record to write; [`RecordMetadata`]: where it landed;
//!   [`DeliveryFuture`]: the future of one `send`.
//! - [`LogReader`]: reads a partition from an offset, `read_committed` or `read_uncommitted`,
//!   implemented by [`KafkaLogReader`] and by the embedded broker.
//! - [`ProducerError`]: why a send, a flush or a transaction failed, and what to do next.

mod error;
mod reader;
pub(crate) mod record;

use std::fmt;

pub use self::error::ProducerError;
pub use self::reader::{IsolationLevel, LogRead, LogReader};
pub use self::record::{DeliveryFuture, ProducerRecord, RecordMetadata};
pub use crate::kafka::producer::{Acks, KafkaProducer, KafkaProducerConfig};
pub use crate::kafka::reader::{KafkaLogReader, KafkaLogReaderBuilder};

/// A producer of records to topics: the Kafka client's [`KafkaProducer`] or the embedded
/// group's [`EmbeddedProducer`](crate::embedded::EmbeddedProducer), with one behaviour.
///
/// [`send`](Self::send) queues a record at once and returns a [`DeliveryFuture`] that
/// resolves when the record is written (or has failed): records of one partition are
/// written in the order of the `send` calls, and a retry never writes a record twice nor
/// out of order (idempotence).
///
/// A producer built with a transactional id writes in transactions:
/// [`init_transactions`](Self::init_transactions) once (it fences any older producer with
/// the same id), then for each transaction [`begin_transaction`](Self::begin_transaction),
/// sends, and [`commit_transaction`](Self::commit_transaction) or
/// [`abort_transaction`](Self::abort_transaction). Readers that read `read_committed` see a
/// transaction's records once it commits, and never when it aborts.
///
/// What each error means for the producer is in [`ProducerError`]: a fenced producer is
/// done ([`ProducerError::is_fatal`]); after an error that
/// [`requires_abort`](ProducerError::requires_abort), abort the transaction and go on.
#[async_trait::async_trait]
pub trait Producer: Send + Sync + fmt::Debug {
    /// Queues `record` and returns the future of its delivery. Records of one partition are
    /// written in the order of the calls.
    ///
    /// In a transactional producer a `send` outside a transaction fails with
    /// [`ProducerError::TransactionState`].
    ///
    /// # Errors
    ///
    /// At once, without queueing: a closed or fatally failed producer, a record the producer
    /// can never write (too large, a partition the topic does not have), a transactional
    /// producer outside a transaction. Errors of the write itself come through the future.
    fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture, ProducerError>;

    /// Waits until the producer has room for more records: until the records sent and not
    /// yet written (or failed) hold less than `buffer.memory` bytes, for at most
    /// `max.block.ms`. Java's producer makes `send` itself block so; here `send` never waits,
    /// and a loop that sends faster than the cluster takes records calls `ready` before each
    /// `send` (or each batch of sends) to keep the producer's memory bounded.
    ///
    /// The default returns at once: a producer without such a bound (the embedded one). A
    /// producer that wraps another should forward `ready` to it, or the wrapped producer's
    /// bound is lost.
    ///
    /// # Errors
    ///
    /// [`ProducerError::BufferFull`] when the buffer stayed full for `max.block.ms`; a
    /// closed or fatally failed producer's error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use kafka_share_sink::producer::{KafkaProducer, KafkaProducerConfig, Producer, ProducerRecord};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), kafka_share_sink::producer::ProducerError> {
    /// let producer = KafkaProducer::connect(KafkaProducerConfig::new("127.0.0.1:9092")).await?;
    /// for i in 0..1_000_000u32 {
    ///     // Waits while the records not yet written hold `buffer.memory`.
    ///     producer.ready().await?;
    ///     // A real sender keeps the future to learn the record's outcome.
    ///     drop(producer.send(ProducerRecord::new("events").value(i.to_string()))?);
    /// }
    /// producer.flush().await
    /// # }
    /// ```
    async fn ready(&self) -> Result<(), ProducerError> {
        Ok(())
    }

    /// Waits until every record queued before the call is written or has failed (each
    /// future says which).
    ///
    /// # Errors
    ///
    /// When the producer is closed or failed fatally.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops the wait, not the writes.
    async fn flush(&self) -> Result<(), ProducerError>;

    /// The transactional id, for a transactional producer.
    fn transactional_id(&self) -> Option<&str>;

    /// Registers the transactional id with its coordinator, fencing every older producer of
    /// the same id and aborting a transaction it left open. Call once, before the first
    /// transaction; or again with a transaction of this producer still open (its abort
    /// failed, or was never sent): what the transaction still holds is failed, and the
    /// coordinator aborts it and starts a new epoch.
    ///
    /// # Errors
    ///
    /// [`ProducerError::NotTransactional`] without a transactional id; the coordinator's
    /// errors (see [`ProducerError`]).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped call may leave the id registered or not; call it again.
    async fn init_transactions(&self) -> Result<(), ProducerError>;

    /// Starts a transaction (local to the producer: nothing is sent).
    ///
    /// # Errors
    ///
    /// [`ProducerError::TransactionState`] when a transaction is open already or
    /// `init_transactions` has not succeeded; [`ProducerError::NotTransactional`].
    fn begin_transaction(&self) -> Result<(), ProducerError>;

    /// Writes every record sent in the transaction, then commits it.
    ///
    /// [`KafkaProducer`] under transactions v2 returns once the coordinator has decided the
    /// commit, as Java's producer does; the coordinator writes the transaction's markers
    /// after that, so a `read_committed` reader may see the records a few milliseconds
    /// later. The next transaction's sends wait for those markers (when the cluster lets
    /// the producer ask, with DescribeTransactions, for at most 100 ms) so that they do not
    /// meet this transaction unfinished.
    ///
    /// # Errors
    ///
    /// A send of the transaction failed, or the coordinator refused the commit: the
    /// transaction is not committed and [`ProducerError::requires_abort`] says whether an
    /// abort recovers. [`ProducerError::CommitOutcomeUnknown`] when the commit was sent and
    /// its answer lost: the transaction may be committed or not, and the producer must be
    /// initialised again.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropping the future after the commit was sent leaves its outcome
    /// unknown; the producer then reports [`ProducerError::CommitOutcomeUnknown`].
    async fn commit_transaction(&self) -> Result<(), ProducerError>;

    /// Aborts the open transaction: none of its records is ever visible to `read_committed`
    /// readers. Allowed after failed sends.
    ///
    /// # Errors
    ///
    /// When the abort itself cannot be completed (fenced, closed).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: call it again after a dropped call.
    async fn abort_transaction(&self) -> Result<(), ProducerError>;

    /// Stages share-group acknowledgements into the open transaction (KIP-1289): its commit
    /// applies them with the records sent in it, its abort makes the records available again.
    /// `group` is the consumer's [`group_metadata`](crate::ShareConsumer::group_metadata) at
    /// staging: a member epoch the group no longer has fails with
    /// [`ProducerError::Abortable`], as does a record whose lock expired.
    ///
    /// The default implementation fails with [`ProducerError::Unsupported`]: no Kafka release
    /// has KIP-1289 yet; the embedded group implements its draft.
    ///
    /// # Cancel safety
    ///
    /// Dropped, the acknowledgements may or may not be staged: abort the transaction.
    #[cfg(feature = "exactly-once")]
    async fn send_share_acknowledgements(
        &self,
        acknowledgements: &crate::exactly_once::ShareAcknowledgements,
        group: &crate::consumer::GroupMetadata,
    ) -> Result<(), ProducerError> {
        let _ = (acknowledgements, group);
        Err(ProducerError::Unsupported {
            operation: "send_share_acknowledgements",
            reason: "this producer cannot stage share acknowledgements (KIP-1289)".to_owned(),
        })
    }
}
