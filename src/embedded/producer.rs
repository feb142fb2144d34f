//! [`EmbeddedProducer`]: the [`Producer`] of the embedded broker, idempotent or
//! transactional, with Kafka's partitioning and transactions v2 semantics.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::log::{StoredRecord, TxnOutcome};
use super::txn::{ProducerIdEpoch, Stale};
use super::{EmbeddedBroker, State, now_millis};
use crate::kafka::error::{BrokerError, ClientError};
use crate::kafka::producer::partitioner::partition_for_key;
use crate::producer::{DeliveryFuture, Producer, ProducerError, ProducerRecord, RecordMetadata};

/// `transaction.timeout.ms`: the Java producer's default.
const DEFAULT_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);
/// `transaction.max.timeout.ms`: the broker's default limit.
const MAX_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(900);
/// Unkeyed records written to one partition before the producer moves to the next.
const DEFAULT_STICKY_RECORDS: usize = 100;
/// `max.request.size`: the Java producer's default.
const DEFAULT_MAX_REQUEST_SIZE: usize = 1_048_576;
/// Bytes a record adds beyond its key, value and headers, and the fixed header of its batch,
/// as the Kafka producer estimates them.
const RECORD_OVERHEAD: usize = 21;
const BATCH_OVERHEAD: usize = 61;

/// The settings of an [`EmbeddedProducer`], for
/// [`EmbeddedBroker::producer_with`](super::EmbeddedBroker::producer_with).
///
/// ```
/// use std::time::Duration;
/// use kafka_share_sink::embedded::{EmbeddedBroker, EmbeddedProducerConfig};
/// use kafka_share_sink::producer::Producer;
///
/// let broker = EmbeddedBroker::new();
/// let producer = broker.producer_with(
///     EmbeddedProducerConfig::new()
///         .transactional_id("sink-0")
///         .transaction_timeout(Duration::from_secs(10))
///         .sticky_records(1),
/// )?;
/// assert_eq!(producer.transactional_id(), Some("sink-0"));
/// assert!(broker.producer_with(EmbeddedProducerConfig::new().transactional_id("")).is_err());
/// # Ok::<(), kafka_share_sink::producer::ProducerError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedProducerConfig {
    transactional_id: Option<String>,
    transaction_timeout: Duration,
    sticky_records: usize,
    max_request_size: usize,
}

impl Default for EmbeddedProducerConfig {
    fn default() -> Self {
        Self {
            transactional_id: None,
            transaction_timeout: DEFAULT_TRANSACTION_TIMEOUT,
            sticky_records: DEFAULT_STICKY_RECORDS,
            max_request_size: DEFAULT_MAX_REQUEST_SIZE,
        }
    }
}

impl EmbeddedProducerConfig {
    /// An idempotent producer without transactions; 60 s transaction timeout; 100 records a
    /// sticky partition; 1 MiB `max.request.size`.
    pub fn new() -> Self {
        Self::default()
    }

    /// `transactional.id`: makes the producer transactional.
    pub fn transactional_id(mut self, id: impl Into<String>) -> Self {
        self.transactional_id = Some(id.into());
        self
    }

    /// `transaction.timeout.ms` (default 60 s, at most 900 s as the broker's
    /// `transaction.max.timeout.ms` allows): a transaction open longer, counted on the tokio
    /// clock from its first send, is aborted by the coordinator.
    pub fn transaction_timeout(mut self, timeout: Duration) -> Self {
        self.transaction_timeout = timeout;
        self
    }

    /// How many unkeyed records without a partition go to one partition before the producer
    /// moves to the next (default 100, at least 1). It moves at every new transaction too.
    /// This stands in for the Java producer's sticky partitioner, which moves when a batch
    /// is full.
    pub fn sticky_records(mut self, records: usize) -> Self {
        self.sticky_records = records.max(1);
        self
    }

    /// `max.request.size` (default 1 MiB, as Java's): a record larger on the wire, by the
    /// Kafka producer's estimate, is refused by `send` with
    /// [`ProducerError::RecordTooLarge`] before it is written, and the open transaction stays
    /// as it is (as with the Kafka producer).
    ///
    /// ```
    /// use kafka_share_sink::embedded::{EmbeddedBroker, EmbeddedProducerConfig};
    /// use kafka_share_sink::producer::{Producer, ProducerError, ProducerRecord};
    ///
    /// let broker = EmbeddedBroker::new();
    /// broker.create_topic("out", 1)?;
    /// let producer = broker.producer_with(EmbeddedProducerConfig::new().max_request_size(1024))?;
    /// let refused = producer.send(ProducerRecord::new("out").value(vec![0u8; 2048]));
    /// assert!(matches!(refused, Err(ProducerError::RecordTooLarge { max: 1024, .. })));
    /// assert!(producer.send(ProducerRecord::new("out").value("small")).is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn max_request_size(mut self, bytes: usize) -> Self {
        self.max_request_size = bytes;
        self
    }

    fn validate(&self) -> Result<(), ProducerError> {
        if self.transactional_id.as_deref() == Some("") {
            return Err(ProducerError::Config {
                key: "transactional.id".to_owned(),
                reason: "must not be empty: leave it unset for a producer without transactions"
                    .to_owned(),
            });
        }
        if self.transaction_timeout.is_zero() || self.transaction_timeout > MAX_TRANSACTION_TIMEOUT
        {
            return Err(ProducerError::Config {
                key: "transaction.timeout.ms".to_owned(),
                reason: format!(
                    "{} ms is out of range: use 1 ms to {} ms (transaction.max.timeout.ms)",
                    self.transaction_timeout.as_millis(),
                    MAX_TRANSACTION_TIMEOUT.as_millis()
                ),
            });
        }
        Ok(())
    }
}

/// What a commit does instead of answering, for
/// [`EmbeddedBroker::fail_next_commit`](super::EmbeddedBroker::fail_next_commit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostCommit {
    /// The coordinator commits the transaction; its answer is lost.
    Committed,
    /// The coordinator aborts the transaction (as when it timed out just before); its
    /// answer is lost.
    Aborted,
}

/// Where a transactional producer stands.
#[derive(Debug)]
enum Phase {
    /// Not transactional.
    Idempotent,
    /// `init_transactions` is needed (first, or again after a commit with a lost answer).
    Uninitialized,
    Ready,
    InTransaction {
        /// Whether the transaction has written anything.
        sent: bool,
        /// Why it can no longer commit.
        failed: Option<ProducerError>,
    },
    /// Fenced: nothing more is possible.
    Fatal(ProducerError),
}

#[derive(Debug)]
struct Inner {
    current: ProducerIdEpoch,
    phase: Phase,
    /// The sticky partition of each topic, and how many records it takes still.
    sticky: HashMap<Arc<str>, (usize, usize)>,
    /// The next sticky partition, round robin.
    next_sticky: usize,
}

/// A [`Producer`] writing to an [`EmbeddedBroker`], made by
/// [`EmbeddedBroker::producer`](super::EmbeddedBroker::producer) (idempotent),
/// [`transactional_producer`](super::EmbeddedBroker::transactional_producer) or
/// [`producer_with`](super::EmbeddedBroker::producer_with).
///
/// Writes happen at `send`: the [`DeliveryFuture`] is complete when `send` returns, and
/// [`flush`](Producer::flush) has nothing to wait for. Partitions are chosen as Kafka's Java
/// producer does: the record's partition if it has one; for a keyed record, murmur2 of the
/// key modulo the partition count (the same partition a Kafka cluster would pick); unkeyed
/// records stick to one partition for
/// [`sticky_records`](EmbeddedProducerConfig::sticky_records) records, then move to the
/// next, round robin (and at each new transaction).
///
/// A transactional producer follows Kafka's transactions v2 (KIP-890), with an embedded
/// coordinator per transactional id:
/// - [`init_transactions`](Producer::init_transactions) bumps the id's epoch: every older
///   producer with the id is fenced (its next call fails with [`ProducerError::Fenced`]),
///   and the transaction it left open is aborted (ABORT markers are written).
/// - A `send` appends at once as a record of the open transaction: `read_uncommitted`
///   readers see it, `read_committed` readers and share groups do not until the commit, and
///   the partition's last stable offset stays at the transaction's first record there.
/// - Commit writes a COMMIT marker, abort an ABORT marker, to every partition the
///   transaction wrote to; each takes an offset, as Kafka's control records do. Each end
///   bumps the epoch, so a zombie holding the old one is fenced. A transaction that sent
///   nothing ends without markers.
/// - A transaction open longer than the
///   [`transaction_timeout`](EmbeddedProducerConfig::transaction_timeout) (tokio clock, so
///   `#[tokio::test(start_paused = true)]` controls it) is aborted by the coordinator,
///   which checks at every call on the broker and wakes share consumers waiting on it. The
///   producer's next send or commit fails with [`ProducerError::Abortable`]; then
///   `abort_transaction` succeeds and the producer goes on.
/// - A `send` that fails inside a transaction (unknown topic or partition) makes the
///   transaction abortable: commit then fails with [`ProducerError::Abortable`].
/// - Calls out of turn fail with [`ProducerError::TransactionState`]: a send outside a
///   transaction, a second `begin_transaction`, a commit or abort without a transaction,
///   anything before `init_transactions`.
///
/// ```
/// use kafka_share_sink::embedded::EmbeddedBroker;
/// use kafka_share_sink::producer::{IsolationLevel, LogReader, Producer, ProducerError, ProducerRecord};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let broker = EmbeddedBroker::new();
/// broker.create_topic("out", 1)?;
/// let producer = broker.transactional_producer("sink-0")?;
/// producer.init_transactions().await?;
///
/// producer.begin_transaction()?;
/// let written = producer.send(ProducerRecord::new("out").value("kept"))?.await?;
/// assert_eq!((written.partition, written.offset), (0, 0));
/// producer.commit_transaction().await?; // COMMIT marker at offset 1
///
/// producer.begin_transaction()?;
/// producer.send(ProducerRecord::new("out").value("dropped"))?.await?;
/// producer.abort_transaction().await?; // ABORT marker at offset 3
///
/// let wait = Duration::ZERO;
/// let committed = broker.read("out", 0, 0, IsolationLevel::ReadCommitted, wait).await?;
/// assert_eq!(committed.records.len(), 1);
/// assert_eq!(committed.next_offset, 4);
/// let everything = broker.read("out", 0, 0, IsolationLevel::ReadUncommitted, wait).await?;
/// assert_eq!(everything.records.len(), 2);
///
/// // A second producer with the same id fences the first.
/// let successor = broker.transactional_producer("sink-0")?;
/// successor.init_transactions().await?;
/// assert!(matches!(producer.begin_transaction(), Err(ProducerError::Fenced { .. })));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct EmbeddedProducer {
    broker: EmbeddedBroker,
    config: EmbeddedProducerConfig,
    inner: Mutex<Inner>,
}

fn broker_error(api: &'static str, code: i16, name: &'static str, message: String) -> ClientError {
    ClientError::Broker(BrokerError {
        api,
        code,
        name,
        message: Some(message),
        retriable: false,
    })
}

/// CONCURRENT_TRANSACTIONS (51), retriable: the previous transaction's markers are pending.
#[cfg(feature = "exactly-once")]
fn concurrent_transactions(transactional_id: &str) -> ProducerError {
    ProducerError::Kafka {
        source: Arc::new(ClientError::Broker(BrokerError {
            api: "AddPartitionsToTxn",
            code: 51,
            name: "CONCURRENT_TRANSACTIONS",
            message: Some(format!(
                "the markers of the previous transaction of `{transactional_id}` are still \
                 being written: call begin_transaction again"
            )),
            retriable: true,
        })),
    }
}

fn not_open(operation: &'static str) -> ProducerError {
    ProducerError::TransactionState {
        operation,
        reason: "no transaction is open: call begin_transaction first".to_owned(),
    }
}

fn uninitialized(operation: &'static str) -> ProducerError {
    ProducerError::TransactionState {
        operation,
        reason: "the producer is not initialised: call init_transactions first".to_owned(),
    }
}

impl EmbeddedProducer {
    pub(super) fn new(
        broker: EmbeddedBroker,
        config: EmbeddedProducerConfig,
    ) -> Result<Self, ProducerError> {
        config.validate()?;
        Ok(Self::build(broker, config))
    }

    /// A producer of a config known to be valid.
    pub(super) fn build(broker: EmbeddedBroker, config: EmbeddedProducerConfig) -> Self {
        let (current, phase) = if config.transactional_id.is_some() {
            ((-1, -1), Phase::Uninitialized)
        } else {
            let id = broker.shared.lock().coordinator.allocate_producer_id();
            ((id, 0), Phase::Idempotent)
        };
        Self {
            broker,
            config,
            inner: Mutex::new(Inner {
                current,
                phase,
                sticky: HashMap::new(),
                next_sticky: 0,
            }),
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn id(&self) -> &str {
        self.config.transactional_id.as_deref().unwrap_or_default()
    }

    fn require_id(&self, operation: &'static str) -> Result<&str, ProducerError> {
        self.config
            .transactional_id
            .as_deref()
            .ok_or(ProducerError::NotTransactional { operation })
    }

    fn fenced(&self, api: &'static str) -> ProducerError {
        ProducerError::Fenced {
            transactional_id: self.id().to_owned(),
            source: Arc::new(broker_error(
                api,
                90,
                "PRODUCER_FENCED",
                "a newer producer with the same transactional.id called init_transactions"
                    .to_owned(),
            )),
        }
    }

    fn timed_out(&self) -> ProducerError {
        ProducerError::Abortable {
            reason: format!(
                "the transaction coordinator aborted the transaction of `{}` because it was \
                 open longer than transaction.timeout.ms ({} ms); call abort_transaction, then \
                 begin a new transaction",
                self.id(),
                self.config.transaction_timeout.as_millis()
            ),
            source: None,
        }
    }

    /// Runs `f` on the broker's state after applying transaction timeouts, and wakes the
    /// broker's waiters when anything may have changed.
    fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut state = self.broker.shared.lock();
        state.expire_transactions(Instant::now());
        let out = f(&mut state);
        drop(state);
        self.broker.shared.changed.notify_waiters();
        out
    }

    /// Checks a transactional producer's epoch against the coordinator, turning a stale one
    /// into its error (and a fence into the fatal phase).
    fn check(
        &self,
        inner: &mut Inner,
        state: &State,
        api: &'static str,
    ) -> Result<(), ProducerError> {
        match state.coordinator.check(self.id(), inner.current) {
            Ok(()) => Ok(()),
            Err(stale) => Err(self.stale(inner, stale, api)),
        }
    }

    fn stale(&self, inner: &mut Inner, stale: Stale, api: &'static str) -> ProducerError {
        match stale {
            Stale::Fenced => {
                let error = self.fenced(api);
                inner.phase = Phase::Fatal(error.clone());
                error
            }
            Stale::TimedOut => {
                let error = self.timed_out();
                if let Phase::InTransaction { failed, .. } = &mut inner.phase {
                    failed.get_or_insert_with(|| error.clone());
                }
                error
            }
        }
    }

    /// The partition for an unkeyed record without one.
    fn sticky_partition(&self, inner: &mut Inner, topic: &Arc<str>, count: usize) -> usize {
        let per = self.config.sticky_records;
        let Inner {
            sticky,
            next_sticky,
            ..
        } = inner;
        let entry = sticky.entry(Arc::clone(topic)).or_insert((0, 0));
        if entry.1 == 0 || entry.0 >= count {
            *entry = (*next_sticky % count, per);
            *next_sticky = next_sticky.wrapping_add(1);
        }
        entry.1 -= 1;
        entry.0
    }

    /// Appends `record`, in the open transaction for a transactional producer.
    fn append(
        &self,
        inner: &mut Inner,
        state: &mut State,
        record: ProducerRecord,
    ) -> Result<RecordMetadata, ProducerError> {
        let unknown = |partition| ProducerError::UnknownPartition {
            topic: record.topic.to_string(),
            partition,
        };
        let topic = state
            .topics
            .get(&*record.topic)
            .ok_or_else(|| unknown(record.partition.unwrap_or(-1)))?;
        let count = topic.partitions.len();
        let name = Arc::clone(&topic.name);
        let partition = match (record.partition, &record.key) {
            (Some(p), _) => usize::try_from(p)
                .ok()
                .filter(|p| *p < count)
                .ok_or_else(|| unknown(p))?,
            (None, Some(key)) => partition_for_key(key, count),
            (None, None) => self.sticky_partition(inner, &name, count),
        };
        let partition_id = i32::try_from(partition).unwrap_or(i32::MAX);
        let timestamp = record.timestamp.unwrap_or_else(now_millis);
        let stored = StoredRecord::plain(
            record.key,
            record.value,
            record.headers,
            timestamp,
            Some(inner.current.0),
        );
        let transactional = !matches!(inner.phase, Phase::Idempotent);
        if transactional {
            let added = state.coordinator.add_partition(
                self.id(),
                inner.current,
                (Arc::clone(&name), partition_id),
                Instant::now(),
            );
            if let Err(stale) = added {
                return Err(self.stale(inner, stale, "Produce"));
            }
        }
        let log = state
            .topics
            .get_mut(&name)
            .and_then(|t| t.partitions.get_mut(partition))
            .ok_or_else(|| unknown(partition_id))?;
        let offset = if transactional {
            log.push_transactional(stored, inner.current.0)
        } else {
            log.push(stored)
        };
        Ok(RecordMetadata {
            topic: name,
            partition: partition_id,
            offset,
            timestamp,
        })
    }

    /// Ends the open transaction with `outcome` at the coordinator, writing its markers, and
    /// takes the new epoch.
    fn end(
        &self,
        inner: &mut Inner,
        state: &mut State,
        outcome: TxnOutcome,
        api: &'static str,
    ) -> Result<(), ProducerError> {
        match state.coordinator.end(self.id(), inner.current) {
            Ok((next, ended)) => {
                if let Some(ended) = ended {
                    // KIP-1289's marker_delay may hold the markers back.
                    #[cfg(feature = "exactly-once")]
                    state.finish_transaction(self.id(), ended, outcome, true, Instant::now());
                    #[cfg(not(feature = "exactly-once"))]
                    state.write_markers(&ended, outcome);
                }
                inner.current = next;
                inner.phase = Phase::Ready;
                inner.sticky.clear();
                Ok(())
            }
            Err(stale) => Err(self.stale(inner, stale, api)),
        }
    }
}

#[cfg(feature = "exactly-once")]
impl EmbeddedProducer {
    /// The error of a refused TxnShareAcknowledge, as the draft's client maps it.
    fn stage_refused(
        &self,
        inner: &mut Inner,
        refused: super::kip1289::StageError,
    ) -> ProducerError {
        use super::kip1289::StageError;
        const API: &str = "TxnShareAcknowledge";
        let abortable = |reason: String, code, name, detail: String| ProducerError::Abortable {
            reason,
            source: Some(Arc::new(ProducerError::Kafka {
                source: Arc::new(broker_error(API, code, name, detail)),
            })),
        };
        match refused {
            StageError::Unsupported(reason) => ProducerError::Unsupported {
                operation: "send_share_acknowledgements",
                reason,
            },
            StageError::Stale(stale) => self.stale(inner, stale, API),
            StageError::Membership { code, name, detail } => abortable(
                format!("share group membership mismatch ({name}): {detail}"),
                code,
                name,
                detail,
            ),
            StageError::InvalidRecordState(detail) => abortable(
                format!(
                    "a share acknowledgement could not be staged (INVALID_RECORD_STATE): {detail};                      nothing was staged"
                ),
                121,
                "INVALID_RECORD_STATE",
                detail,
            ),
            StageError::InvalidRequest(detail) => abortable(
                format!("the share acknowledgements were refused (INVALID_REQUEST): {detail}"),
                42,
                "INVALID_REQUEST",
                detail,
            ),
        }
    }
}

#[async_trait::async_trait]
impl Producer for EmbeddedProducer {
    fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture, ProducerError> {
        let mut inner = self.inner();
        match &inner.phase {
            Phase::Fatal(error) => return Err(error.clone()),
            Phase::Uninitialized => return Err(uninitialized("send")),
            Phase::Ready => return Err(not_open("send")),
            Phase::InTransaction {
                failed: Some(error),
                ..
            } => {
                return Err(ProducerError::Abortable {
                    reason: "an earlier error failed the transaction: call abort_transaction"
                        .to_owned(),
                    source: Some(Arc::new(error.clone())),
                });
            }
            Phase::InTransaction { .. } | Phase::Idempotent => {}
        }
        let size = record_size(&record);
        if size > self.config.max_request_size {
            // Refused before it is queued, as the Kafka producer does: the transaction is
            // not spoiled.
            return Err(ProducerError::RecordTooLarge {
                size,
                max: self.config.max_request_size,
                key: "max.request.size",
            });
        }
        let transactional = !matches!(inner.phase, Phase::Idempotent);
        let written = self.with_state(|state| {
            if transactional {
                self.check(&mut inner, state, "Produce")?;
            }
            self.append(&mut inner, state, record)
        });
        match written {
            Ok(metadata) => {
                if let Phase::InTransaction { sent, .. } = &mut inner.phase {
                    *sent = true;
                }
                Ok(DeliveryFuture::ready(Ok(metadata)))
            }
            Err(error) => {
                // As Java's producer: a record refused before it is queued (a partition the
                // topic does not have) leaves the transaction as it is; the caller knows.
                // Anything else (fenced, timed out, an unknown topic) spoils it.
                let refused_up_front = matches!(error, ProducerError::UnknownPartition { partition, .. } if partition >= 0);
                if let (Phase::InTransaction { failed, .. }, false) =
                    (&mut inner.phase, refused_up_front)
                {
                    failed.get_or_insert_with(|| error.clone());
                }
                Err(error)
            }
        }
    }

    /// Every send is written when it returns: nothing to wait for.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    async fn flush(&self) -> Result<(), ProducerError> {
        match &self.inner().phase {
            Phase::Fatal(error) => Err(error.clone()),
            _ => Ok(()),
        }
    }

    fn transactional_id(&self) -> Option<&str> {
        self.config.transactional_id.as_deref()
    }

    async fn init_transactions(&self) -> Result<(), ProducerError> {
        let id = self.require_id("init_transactions")?;
        let mut inner = self.inner();
        match &inner.phase {
            Phase::Fatal(error) => return Err(error.clone()),
            // A transaction left open (its abort failed, or was never sent): the coordinator
            // aborts it below, as Kafka's does for InitProducerId.
            Phase::Uninitialized | Phase::InTransaction { .. } => {}
            _ => {
                return Err(ProducerError::TransactionState {
                    operation: "init_transactions",
                    reason: "the producer is initialised already: call it once".to_owned(),
                });
            }
        }
        let timeout = self.config.transaction_timeout;
        let (current, aborted) = self.with_state(|state| {
            // Markers of this id's last transaction still delayed are written first.
            #[cfg(feature = "exactly-once")]
            state.flush_markers(id);
            let (current, aborted) = state.coordinator.init(id, timeout);
            if let Some(aborted) = &aborted {
                state.write_markers(aborted, TxnOutcome::Abort);
            }
            (current, aborted)
        });
        if aborted.is_some() {
            tracing::debug!(
                transactional_id = id,
                "init_transactions aborted the transaction an older producer left open"
            );
        }
        inner.current = current;
        inner.phase = Phase::Ready;
        inner.sticky.clear();
        Ok(())
    }

    fn begin_transaction(&self) -> Result<(), ProducerError> {
        self.require_id("begin_transaction")?;
        let mut inner = self.inner();
        match &inner.phase {
            Phase::Fatal(error) => return Err(error.clone()),
            Phase::Uninitialized => return Err(uninitialized("begin_transaction")),
            Phase::InTransaction { .. } => {
                return Err(ProducerError::TransactionState {
                    operation: "begin_transaction",
                    reason: "a transaction is open already: commit or abort it first".to_owned(),
                });
            }
            Phase::Ready | Phase::Idempotent => {}
        }
        // Local in Kafka; the embedded producer learns of a fence at once.
        self.with_state(|state| {
            self.check(&mut inner, state, "InitProducerId")?;
            // The previous transaction's markers, if delayed (KIP-1289's marker_delay), are
            // written before this one starts; or, by the rules, refused once.
            #[cfg(feature = "exactly-once")]
            {
                if state.refuse_begin(self.id()) {
                    return Err(concurrent_transactions(self.id()));
                }
                state.flush_markers(self.id());
            }
            Ok(())
        })?;
        inner.phase = Phase::InTransaction {
            sent: false,
            failed: None,
        };
        inner.sticky.clear();
        Ok(())
    }

    async fn commit_transaction(&self) -> Result<(), ProducerError> {
        self.require_id("commit_transaction")?;
        let mut inner = self.inner();
        let sent = match &inner.phase {
            Phase::Fatal(error) => return Err(error.clone()),
            Phase::Uninitialized => return Err(uninitialized("commit_transaction")),
            Phase::Ready | Phase::Idempotent => return Err(not_open("commit_transaction")),
            Phase::InTransaction {
                failed: Some(error),
                ..
            } => {
                return Err(match error {
                    ProducerError::Abortable { .. } => error.clone(),
                    _ => ProducerError::Abortable {
                        reason: "a send of the transaction failed: call abort_transaction"
                            .to_owned(),
                        source: Some(Arc::new(error.clone())),
                    },
                });
            }
            Phase::InTransaction { sent, .. } => *sent,
        };
        self.with_state(|state| {
            self.check(&mut inner, state, "EndTxn")?;
            if !sent {
                inner.phase = Phase::Ready;
                return Ok(());
            }
            match state.lost_commit.take() {
                None => self.end(&mut inner, state, TxnOutcome::Commit, "EndTxn"),
                Some(lost) => {
                    let outcome = match lost {
                        LostCommit::Committed => TxnOutcome::Commit,
                        LostCommit::Aborted => TxnOutcome::Abort,
                    };
                    self.end(&mut inner, state, outcome, "EndTxn")?;
                    inner.phase = Phase::Uninitialized;
                    Err(ProducerError::CommitOutcomeUnknown {
                        transactional_id: self.id().to_owned(),
                        source: Arc::new(broker_error(
                            "EndTxn",
                            -1,
                            "UNKNOWN_SERVER_ERROR",
                            "the answer was lost (EmbeddedBroker::fail_next_commit); call \
                             init_transactions again"
                                .to_owned(),
                        )),
                    })
                }
            }
        })
    }

    /// Stages the acknowledgements into the open transaction, as KIP-1289's draft does (see
    /// [`Kip1289Rules`](super::Kip1289Rules) for its unsettled rules): every record must be
    /// acquired by `group`'s member, at the member epoch `group` names, under a lock that has
    /// not expired; all of them are staged or none. Staged records are TX_PENDING until the
    /// transaction ends: its commit acknowledges (ACCEPT) or archives (REJECT) them, its
    /// abort makes them available with their delivery count unchanged. A transaction with
    /// staged acknowledgements and no records commits.
    ///
    /// # Errors
    ///
    /// - [`ProducerError::NotTransactional`] without a transactional id;
    ///   [`ProducerError::TransactionState`] outside a transaction.
    /// - [`ProducerError::Fenced`] when a newer producer with the same transactional id took
    ///   over; [`ProducerError::Abortable`] when the coordinator aborted the transaction after
    ///   its timeout.
    /// - [`ProducerError::Abortable`] (and the transaction can no longer commit): "share
    ///   group membership mismatch" (GROUP_ID_NOT_FOUND, UNKNOWN_MEMBER_ID,
    ///   STALE_MEMBER_EPOCH); INVALID_RECORD_STATE for a record not acquired by the member
    ///   or whose lock expired; INVALID_REQUEST for a type other than ACCEPT and REJECT or an
    ///   offset given twice.
    /// - [`ProducerError::Unsupported`] when the broker's
    ///   [capabilities](super::EmbeddedBroker::set_capabilities) lack share.version 3 or
    ///   transactions v2 (the transaction can no longer commit either).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it completes before its first `.await` point.
    #[cfg(feature = "exactly-once")]
    async fn send_share_acknowledgements(
        &self,
        acknowledgements: &crate::exactly_once::ShareAcknowledgements,
        group: &crate::consumer::GroupMetadata,
    ) -> Result<(), ProducerError> {
        const OPERATION: &str = "send_share_acknowledgements";
        let id = self.require_id(OPERATION)?;
        let mut inner = self.inner();
        match &inner.phase {
            Phase::Fatal(error) => return Err(error.clone()),
            Phase::Uninitialized => return Err(uninitialized(OPERATION)),
            Phase::Ready | Phase::Idempotent => return Err(not_open(OPERATION)),
            Phase::InTransaction {
                failed: Some(error),
                ..
            } => {
                return Err(ProducerError::Abortable {
                    reason: "an earlier error failed the transaction: call abort_transaction"
                        .to_owned(),
                    source: Some(Arc::new(error.clone())),
                });
            }
            Phase::InTransaction { .. } => {}
        }
        let current = inner.current;
        let staged = self.with_state(|state| {
            state.stage_share_acknowledgements(id, current, group, acknowledgements, Instant::now())
        });
        let error = match staged {
            Ok(()) => {
                if let Phase::InTransaction { sent, .. } = &mut inner.phase {
                    *sent |= !acknowledgements.is_empty();
                }
                return Ok(());
            }
            Err(refused) => self.stage_refused(&mut inner, refused),
        };
        if let Phase::InTransaction { failed, .. } = &mut inner.phase {
            failed.get_or_insert_with(|| error.clone());
        }
        Err(error)
    }

    async fn abort_transaction(&self) -> Result<(), ProducerError> {
        self.require_id("abort_transaction")?;
        let mut inner = self.inner();
        let sent = match &inner.phase {
            Phase::Fatal(error) => return Err(error.clone()),
            Phase::Uninitialized => return Err(uninitialized("abort_transaction")),
            Phase::Ready | Phase::Idempotent => return Err(not_open("abort_transaction")),
            Phase::InTransaction { sent, .. } => *sent,
        };
        self.with_state(|state| {
            let id = self.id();
            match state.coordinator.check(id, inner.current) {
                Ok(()) if !sent => {
                    inner.phase = Phase::Ready;
                    Ok(())
                }
                Ok(()) => self.end(&mut inner, state, TxnOutcome::Abort, "EndTxn"),
                // The coordinator aborted it already: take the epoch it moved to.
                Err(Stale::TimedOut) => {
                    match state.coordinator.acknowledge_timeout(id, inner.current) {
                        Some(next) => {
                            inner.current = next;
                            inner.phase = Phase::Ready;
                            inner.sticky.clear();
                            Ok(())
                        }
                        None => Err(self.stale(&mut inner, Stale::Fenced, "EndTxn")),
                    }
                }
                Err(stale) => Err(self.stale(&mut inner, stale, "EndTxn")),
            }
        })
    }
}

/// The size of `record` on the wire, alone in its batch, as the Kafka producer estimates it.
fn record_size(record: &ProducerRecord) -> usize {
    let headers: usize = record
        .headers
        .iter()
        .map(|h| {
            h.key()
                .len()
                .saturating_add(h.value().map_or(0, bytes::Bytes::len))
                .saturating_add(10)
        })
        .fold(0, usize::saturating_add);
    [
        BATCH_OVERHEAD,
        RECORD_OVERHEAD,
        record.key.as_ref().map_or(0, bytes::Bytes::len),
        record.value.as_ref().map_or(0, bytes::Bytes::len),
        headers,
    ]
    .into_iter()
    .fold(0, usize::saturating_add)
}
