//! [`KafkaProducer`]: the crate's own Kafka producer, idempotent by default and
//! transactional with a `transactional.id`.
//!
//! - [`config`]: the settings;
//! - [`partitioner`]: Java's partition choice (murmur2, sticky);
//! - [`accumulator`]: batches per partition and sequence bookkeeping (sans-IO);
//! - [`txn`]: the transaction state machine and coordinator error rules (sans-IO);
//! - [`coordinator`]: FindCoordinator, InitProducerId, AddPartitionsToTxn, EndTxn;
//! - [`cluster`]: Metadata and broker connections;
//! - [`sender`]: the background task that sends batches, around a sans-IO core that decides
//!   what to send and what each answer means.

pub(crate) mod accumulator;
pub(crate) mod cluster;
pub(crate) mod config;
pub(crate) mod coordinator;
mod fast_map;
mod outstanding;
pub(crate) mod partitioner;
pub(crate) mod sender;
pub(crate) mod txn;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use self::accumulator::{
    Accumulator, AccumulatorConfig, BATCH_OVERHEAD, GROWN_BATCH_MAX, record_size,
};
use self::cluster::{Cluster, TopicMetadata};
pub use self::config::{Acks, KafkaProducerConfig};
use self::coordinator::{Coordinator, Retry};
use self::fast_map::FastMap;
use self::partitioner::Sticky;
use self::txn::{Phase, TxnState, TxnVersion};
use crate::kafka::codec::record_batch::NewRecord;
use crate::kafka::net::connection::ConnectionConfig;
use crate::kafka::security::SecurityContext;
use crate::producer::record::DeliverySender;
use crate::producer::{DeliveryFuture, Producer, ProducerError, ProducerRecord};
use crate::time::deadline_after;

/// A record waiting for its topic's metadata.
#[derive(Debug)]
pub(crate) struct Waiting {
    pub(crate) id: u64,
    pub(crate) partition: Option<i32>,
    pub(crate) record: NewRecord,
    pub(crate) sender: DeliverySender,
    pub(crate) deadline: Instant,
}

impl Waiting {
    /// Fails this record, which waited for its topic's metadata. `send` had returned, so an
    /// open transaction (`txn`) must not commit without it.
    pub(crate) fn fail(
        self,
        accumulator: &mut Accumulator,
        txn: Option<&mut TxnState>,
        error: ProducerError,
    ) {
        accumulator.untrack(&[self.id]);
        if let Some(txn) = txn {
            txn.batch_failed(&error);
        }
        let _ = self.sender.send(Err(error));
    }
}

/// What the producer's calls and its sender task share, under one lock.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) accumulator: Accumulator,
    pub(crate) topics: FastMap<Arc<str>, TopicMetadata>,
    pub(crate) waiting: FastMap<Arc<str>, VecDeque<Waiting>>,
    /// Why the records of a topic in `waiting` still wait, when the last Metadata answer (or
    /// request) for it failed with a retriable error: what their delivery timeout reports.
    /// Absent: the cluster does not know the topic.
    pub(crate) waiting_because: FastMap<Arc<str>, Arc<ProducerError>>,
    /// Topics whose metadata must be (re)fetched.
    pub(crate) metadata_wanted: std::collections::HashSet<Arc<str>>,
    pub(crate) sticky: Sticky,
    pub(crate) next_record: u64,
    /// Calls waiting in `flush` (or a commit): open batches go at once.
    pub(crate) flushing: usize,
    pub(crate) txn: Option<TxnState>,
    /// The producer cannot go on (fenced, closed).
    pub(crate) fatal: Option<ProducerError>,
}

/// Shared between the handle and the sender task.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: KafkaProducerConfig,
    pub(crate) state: Mutex<State>,
    /// Wakes the sender task.
    pub(crate) wake: Notify,
    /// Signalled when records complete or batches land.
    pub(crate) progress: Notify,
    pub(crate) cluster: Cluster,
    /// The coordinator, one request at a time.
    pub(crate) coordinator: tokio::sync::Mutex<Coordinator>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn retry(&self) -> Retry {
        Retry {
            first: self.config.retry_backoff,
            max: self.config.retry_backoff_max,
            timeout: self.config.delivery_timeout,
        }
    }
}

/// Kafka's producer, written for this crate: idempotent by default (no duplicates and no
/// reordering per partition across retries), transactional with a `transactional.id`
/// (transactions v2 on clusters whose `transaction.version` is 2 or more, v1 otherwise).
///
/// [`send`](Producer::send) queues a record and returns at once; a background task spawned
/// by [`connect`](Self::connect) batches records per partition (`linger.ms`, `batch.size`)
/// and sends them to the partition leaders. Dropping the producer stops that task: records
/// not yet written then fail with [`ProducerError::Closed`]; call
/// [`flush`](Producer::flush) first.
///
/// Idempotence details (documented choices): each batch is encoded once with its sequence
/// and retried byte for byte; after a gap in a partition's sequences (a batch given up,
/// OUT_OF_ORDER_SEQUENCE_NUMBER at the head of a partition, UNKNOWN_PRODUCER_ID) the
/// producer waits for its batches in flight, bumps its epoch with InitProducerId and
/// renumbers the batches still waiting from 0, as Java's producer does since KIP-360.
///
/// # Example
///
/// ```no_run
/// use kafka_share_sink::producer::{KafkaProducer, KafkaProducerConfig, Producer, ProducerRecord};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), kafka_share_sink::producer::ProducerError> {
/// let producer = KafkaProducer::connect(
///     KafkaProducerConfig::new("127.0.0.1:9092").transactional_id("orders-writer"),
/// )
/// .await?;
/// producer.init_transactions().await?;
/// producer.begin_transaction()?;
/// let delivered = producer.send(ProducerRecord::new("orders").key("k").value("v"))?;
/// producer.commit_transaction().await?;
/// println!("written at {}", delivered.await?.offset);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct KafkaProducer {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for KafkaProducer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl KafkaProducer {
    /// Checks the settings, connects to the cluster and (idempotent producer without a
    /// transactional id) gets a producer id, then starts the sending task.
    ///
    /// # Errors
    ///
    /// [`ProducerError::Config`] for settings out of range; [`ProducerError::Authentication`]
    /// when a broker refuses the TLS or SASL credentials; [`ProducerError::Kafka`] when no
    /// bootstrap server answers or InitProducerId fails; [`ProducerError::Timeout`] when
    /// that takes longer than `delivery.timeout.ms`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is started until it returns.
    pub async fn connect(config: KafkaProducerConfig) -> Result<Self, ProducerError> {
        config.validate()?;
        let security =
            SecurityContext::build(&config.security).map_err(|e| ProducerError::Config {
                key: e.key.to_owned(),
                reason: e.reason,
            })?;
        let connection = ConnectionConfig {
            security,
            client_id: config.client_id.as_str().into(),
            connect_timeout: Duration::from_secs(10).min(config.delivery_timeout),
            request_timeout: config.request_timeout,
            ..ConnectionConfig::default()
        };
        let timeout = config.delivery_timeout;
        let cluster =
            tokio::time::timeout(timeout, Cluster::connect(&config.bootstrap, connection))
                .await
                .map_err(|_| ProducerError::Timeout {
                    timeout,
                    last: None,
                })?
                .map_err(ProducerError::kafka)?;
        let idempotent = config.is_idempotent();
        let transactional = config.transactional_id.is_some();
        let accumulator = Accumulator::new(AccumulatorConfig {
            batch_size: config.batch_size,
            max_batch_size: config.max_request_size.min(GROWN_BATCH_MAX),
            linger: config.linger,
            max_in_flight: config.max_in_flight,
            idempotent,
            transactional,
            compression: config.compression,
            retry_backoff: config.retry_backoff,
            retry_backoff_max: config.retry_backoff_max,
            delivery_timeout: config.delivery_timeout,
        });
        let seed = u64::try_from(now_ms()).unwrap_or(1) ^ u64::from(std::process::id());
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                accumulator,
                topics: FastMap::default(),
                waiting: FastMap::default(),
                waiting_because: FastMap::default(),
                metadata_wanted: Default::default(),
                sticky: Sticky::new(seed),
                next_record: 0,
                flushing: 0,
                txn: config.transactional_id.as_ref().map(|_| TxnState::new()),
                fatal: None,
            }),
            wake: Notify::new(),
            progress: Notify::new(),
            coordinator: tokio::sync::Mutex::new(Coordinator::new(config.transactional_id.clone())),
            cluster,
            config,
        });
        if idempotent && !transactional {
            let identity = shared
                .coordinator
                .lock()
                .await
                .init_producer_id(
                    &shared.cluster,
                    shared.config.transaction_timeout,
                    None,
                    shared.retry(),
                )
                .await?;
            shared.lock().accumulator.reset_sequences(identity);
        }
        let task = tokio::spawn(sender::run(Arc::clone(&shared)));
        Ok(Self { shared, task })
    }

    /// Closes every connection of the producer now, as a network failure would: to the
    /// partition leaders, the transaction coordinator and the bootstrap broker. Requests in
    /// flight fail and are handled like any lost connection: Produce requests are retried
    /// (on a new connection, in sequence order, so an idempotent producer still writes each
    /// record once and in order), coordinator requests are retried, except an EndTxn whose
    /// answer is lost, which makes the commit fail with
    /// [`ProducerError::CommitOutcomeUnknown`]. The next requests connect again.
    ///
    /// It is meant for fault-injection tests of code built on the producer; a running
    /// application has no reason to call it.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use kafka_share_sink::producer::{KafkaProducer, KafkaProducerConfig, Producer, ProducerRecord};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), kafka_share_sink::producer::ProducerError> {
    /// let producer = KafkaProducer::connect(KafkaProducerConfig::new("127.0.0.1:9092")).await?;
    /// let delivered = producer.send(ProducerRecord::new("orders").value("v"))?;
    /// producer.disconnect();
    /// // Still written once: the batch is sent again on a new connection.
    /// delivered.await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn disconnect(&self) {
        self.shared.cluster.disconnect();
        self.shared.wake.notify_one();
    }

    /// Waits until every record with an id below `upto` is complete.
    async fn wait_complete(&self, upto: u64) {
        loop {
            let notified = self.shared.progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.shared.lock().accumulator.complete_below(upto) {
                return;
            }
            notified.await;
        }
    }

    /// Flushes: open batches go at once; waits for every record sent before.
    async fn flush_all(&self) {
        let upto = {
            let mut state = self.shared.lock();
            state.flushing += 1;
            state.next_record
        };
        self.shared.wake.notify_one();
        struct Unflush<'a>(&'a Shared);
        impl Drop for Unflush<'_> {
            fn drop(&mut self) {
                let mut state = self.0.lock();
                state.flushing = state.flushing.saturating_sub(1);
            }
        }
        let _unflush = Unflush(&self.shared);
        self.wait_complete(upto).await;
    }

    /// The bytes the records not yet complete hold, or the error that stopped the producer
    /// (or its transactions).
    fn buffered_or_fatal(&self) -> Result<usize, ProducerError> {
        let state = self.shared.lock();
        if let Some(error) = &state.fatal {
            return Err(error.clone());
        }
        if let Some(error) = state.txn.as_ref().and_then(TxnState::fatal) {
            return Err(error);
        }
        Ok(state.accumulator.buffered())
    }

    fn not_transactional(operation: &'static str) -> ProducerError {
        ProducerError::NotTransactional { operation }
    }

    /// After an EndTxn: adopt the next identity (TV2) or bump the epoch (TV1 abort).
    async fn after_end(
        &self,
        version: TxnVersion,
        next: Option<accumulator::ProducerIdentity>,
        bump: bool,
    ) -> Result<(), ProducerError> {
        match (version, next) {
            (TxnVersion::V2, Some(identity)) => {
                self.shared.lock().accumulator.reset_sequences(identity);
            }
            _ if bump => {
                let current = self.shared.lock().accumulator.producer();
                let identity = self
                    .shared
                    .coordinator
                    .lock()
                    .await
                    .init_producer_id(
                        &self.shared.cluster,
                        self.shared.config.transaction_timeout,
                        Some(current),
                        self.shared.retry(),
                    )
                    .await?;
                self.shared.lock().accumulator.reset_sequences(identity);
            }
            _ => {}
        }
        Ok(())
    }

    async fn commit(&self) -> Result<bool, ProducerError> {
        self.flush_all().await;
        let (version, sent_any, producer) = {
            let state = self.shared.lock();
            let Some(txn) = state.txn.as_ref() else {
                return Err(Self::not_transactional("commit_transaction"));
            };
            if let Phase::Abortable(error) | Phase::Fatal(error) = &txn.phase {
                return Err(match error {
                    e if e.is_fatal() => e.clone(),
                    e => ProducerError::Abortable {
                        reason: format!("a send of the transaction failed ({e})"),
                        source: Some(Arc::new(e.clone())),
                    },
                });
            }
            (txn.version, txn.sent_any, state.accumulator.producer())
        };
        self.end_transaction(true, version, sent_any, producer)
            .await
    }

    /// Ends the transaction with EndTxn (commit or abort), unless nothing was written: then
    /// there is nothing to end (transactions v1 must not end an empty transaction; v2 needs
    /// no epoch bump for it).
    ///
    /// `Ok(true)`: an EndTxn of transactions v2 was answered, whose markers the coordinator
    /// may still be writing (see [`markers_deadline`](Self::markers_deadline)).
    async fn end_transaction(
        &self,
        commit: bool,
        version: TxnVersion,
        sent_any: bool,
        producer: accumulator::ProducerIdentity,
    ) -> Result<bool, ProducerError> {
        if !sent_any {
            return Ok(false);
        }
        let next = self
            .shared
            .coordinator
            .lock()
            .await
            .end_txn(
                &self.shared.cluster,
                producer,
                commit,
                version,
                self.shared.retry(),
            )
            .await?;
        // An abort under v1: batches given up leave sequence gaps; a new epoch starts them
        // at 0 again.
        self.after_end(version, next, !commit && version == TxnVersion::V1)
            .await?;
        Ok(version == TxnVersion::V2)
    }

    /// When the next transaction's Produce requests stop waiting for the markers of one that
    /// ended under transactions v2 now (its outcome already recorded): they wait until the
    /// coordinator has written them, at most
    /// [`AWAIT_COMPLETE_MAX`](coordinator::AWAIT_COMPLETE_MAX); the sender asks the
    /// coordinator meanwhile (see
    /// [`Coordinator::await_complete`](coordinator::Coordinator::await_complete)). The call
    /// that ended the transaction does not wait.
    fn markers_deadline() -> Instant {
        crate::time::deadline_after(Instant::now(), coordinator::AWAIT_COMPLETE_MAX)
    }

    async fn abort(&self) -> Result<bool, ProducerError> {
        self.drop_open_transaction().await;
        let (version, sent_any, producer) = {
            let state = self.shared.lock();
            let Some(txn) = state.txn.as_ref() else {
                return Err(Self::not_transactional("abort_transaction"));
            };
            (txn.version, txn.sent_any, state.accumulator.producer())
        };
        self.end_transaction(false, version, sent_any, producer)
            .await
    }

    /// Fails every record of the open transaction not yet sent, and waits until the batches
    /// in flight are answered.
    async fn drop_open_transaction(&self) {
        let aborted = ProducerError::Abortable {
            reason: "the transaction was aborted".to_owned(),
            source: None,
        };
        {
            let mut state = self.shared.lock();
            let done = state.accumulator.fail_waiting(&aborted);
            state.waiting_because.clear();
            for waiting in std::mem::take(&mut state.waiting).into_values().flatten() {
                waiting.fail(&mut state.accumulator, None, aborted.clone());
            }
            let _ = done;
        }
        self.shared.progress.notify_waiters();
        // Wait for the batches in flight.
        loop {
            let notified = self.shared.progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = self.shared.lock();
                if state.accumulator.in_flight() == 0 {
                    // Answers that came back as retries are not sent again.
                    state.accumulator.fail_waiting(&aborted);
                    break;
                }
            }
            notified.await;
        }
        self.shared.progress.notify_waiters();
    }
}

/// An ended transaction's outcome, and whether its markers may still be being written.
fn split_ended(ended: Result<bool, ProducerError>) -> (Result<(), ProducerError>, bool) {
    match ended {
        Ok(markers) => (Ok(()), markers),
        Err(error) => (Err(error), false),
    }
}

#[async_trait::async_trait]
impl Producer for KafkaProducer {
    fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture, ProducerError> {
        let new = NewRecord {
            timestamp: record.timestamp.unwrap_or_else(now_ms),
            key: record.key,
            value: record.value,
            headers: record
                .headers
                .iter()
                .map(|h| (h.key().to_owned(), h.value().cloned()))
                .collect(),
        };
        let record_bytes = record_size(&new);
        let size = record_bytes.saturating_add(BATCH_OVERHEAD);
        if size > self.shared.config.max_request_size {
            return Err(ProducerError::RecordTooLarge {
                size,
                max: self.shared.config.max_request_size,
                key: "max.request.size",
            });
        }
        // As Java's: a record the whole buffer could not hold is refused, not waited for.
        if size > self.shared.config.buffer_memory {
            return Err(ProducerError::RecordTooLarge {
                size,
                max: self.shared.config.buffer_memory,
                key: "buffer.memory",
            });
        }
        let topic = record.topic;
        let (sender, future) = DeliveryFuture::channel();
        let mut wake = true;
        {
            let mut guard = self.shared.lock();
            let state = &mut *guard;
            if let Some(error) = &state.fatal {
                return Err(error.clone());
            }
            if let Some(txn) = &state.txn {
                txn.check_send()?;
            }
            let id = state.next_record;
            state.next_record += 1;
            let known = match state.topics.get(&topic) {
                Some(TopicMetadata::Known { leaders, .. })
                    if !state.waiting.contains_key(&topic) =>
                {
                    Some(leaders.len())
                }
                _ => None,
            };
            match known {
                Some(count) => {
                    let partition = match record.partition {
                        Some(p) if usize::try_from(p).is_ok_and(|p| p < count) => p,
                        Some(p) => {
                            return Err(ProducerError::UnknownPartition {
                                topic: topic.to_string(),
                                partition: p,
                            });
                        }
                        None => state.sticky.partition(&topic, new.key.as_deref(), count),
                    };
                    let tp = (Arc::clone(&topic), partition);
                    let appended = state.accumulator.append_with(
                        tp,
                        id,
                        new,
                        record_bytes,
                        sender,
                        Instant::now,
                    );
                    if appended.closed {
                        state.sticky.batch_closed(&topic, partition);
                    }
                    // The sender needs waking only for a batch it does not know of yet (its
                    // linger deadline) or one that is full: not once per record.
                    wake = appended.closed || !appended.joined;
                }
                None => {
                    state.accumulator.track(id, record_bytes);
                    state.metadata_wanted.insert(Arc::clone(&topic));
                    state.waiting.entry(topic).or_default().push_back(Waiting {
                        id,
                        partition: record.partition,
                        record: new,
                        sender,
                        deadline: deadline_after(
                            Instant::now(),
                            self.shared.config.delivery_timeout,
                        ),
                    });
                }
            }
        }
        if wake {
            self.shared.wake.notify_one();
        }
        Ok(future)
    }

    async fn flush(&self) -> Result<(), ProducerError> {
        if let Some(error) = self.shared.lock().fatal.clone() {
            return Err(error);
        }
        self.flush_all().await;
        Ok(())
    }

    async fn ready(&self) -> Result<(), ProducerError> {
        // A loop of `ready` and `send` that never has to wait still yields to the runtime
        // now and then, as tokio's own resources make it (the sender task may share its
        // thread).
        tokio::task::coop::consume_budget().await;
        let limit = self.shared.config.buffer_memory;
        // Room now (the common case): no clock, no waiter.
        if self.buffered_or_fatal()? < limit {
            return Ok(());
        }
        let waited = self.shared.config.max_block;
        let deadline = deadline_after(Instant::now(), waited);
        loop {
            let notified = self.shared.progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let buffered = self.buffered_or_fatal()?;
            if buffered < limit {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(ProducerError::BufferFull {
                    buffered,
                    buffer_memory: limit,
                    waited,
                });
            }
        }
    }

    fn transactional_id(&self) -> Option<&str> {
        self.shared.config.transactional_id.as_deref()
    }

    async fn init_transactions(&self) -> Result<(), ProducerError> {
        let abandoned = {
            let mut state = self.shared.lock();
            let Some(txn) = state.txn.as_mut() else {
                return Err(Self::not_transactional("init_transactions"));
            };
            let open = matches!(
                txn.phase,
                Phase::InTransaction | Phase::Abortable(_) | Phase::Aborting
            );
            if open {
                // From here no send or commit of the abandoned transaction is taken (and a
                // call dropped before the end leaves it so: only an abort or another
                // init_transactions goes on from there).
                txn.phase = Phase::Aborting;
            }
            open
        };
        if abandoned {
            // A transaction left open (its abort failed, or was never sent): its records are
            // failed and its batches in flight answered before the new epoch starts, so that
            // no answer of the old one lands in the next transaction.
            self.drop_open_transaction().await;
        }
        {
            let mut state = self.shared.lock();
            let Some(txn) = state.txn.as_mut() else {
                return Err(Self::not_transactional("init_transactions"));
            };
            txn.start_init()?;
        }
        let mut coordinator = self.shared.coordinator.lock().await;
        let result = coordinator
            .init_producer_id(
                &self.shared.cluster,
                self.shared.config.transaction_timeout,
                None,
                self.shared.retry(),
            )
            .await;
        let version = coordinator.transaction_version().unwrap_or(TxnVersion::V1);
        drop(coordinator);
        let mut state = self.shared.lock();
        match result {
            Ok(identity) => {
                state.accumulator.reset_sequences(identity);
                if let Some(txn) = state.txn.as_mut() {
                    txn.init_done(version);
                }
                Ok(())
            }
            Err(error) => {
                if error.is_fatal()
                    && let Some(txn) = state.txn.as_mut()
                {
                    txn.phase = Phase::Fatal(error.clone());
                }
                Err(error)
            }
        }
    }

    fn begin_transaction(&self) -> Result<(), ProducerError> {
        let version = self
            .shared
            .coordinator
            .try_lock()
            .ok()
            .and_then(|c| c.transaction_version());
        let mut state = self.shared.lock();
        let Some(txn) = state.txn.as_mut() else {
            return Err(Self::not_transactional("begin_transaction"));
        };
        // Re-evaluated only between transactions; when the coordinator is busy, the
        // version of the last transaction stays.
        let version = version.unwrap_or(txn.version);
        txn.begin(version)
    }

    async fn commit_transaction(&self) -> Result<(), ProducerError> {
        {
            let mut state = self.shared.lock();
            let Some(txn) = state.txn.as_mut() else {
                return Err(Self::not_transactional("commit_transaction"));
            };
            txn.start_commit()?;
        }
        let (outcome, markers) = split_ended(self.commit().await);
        if let Some(txn) = self.shared.lock().txn.as_mut() {
            txn.finish(&outcome);
            // In the same lock: no send of a next transaction can slip in before the hold.
            if markers {
                txn.markers_pending(Self::markers_deadline());
            }
        }
        if markers {
            self.shared.wake.notify_one();
        }
        outcome
    }

    async fn abort_transaction(&self) -> Result<(), ProducerError> {
        {
            let mut state = self.shared.lock();
            let Some(txn) = state.txn.as_mut() else {
                return Err(Self::not_transactional("abort_transaction"));
            };
            txn.start_abort()?;
        }
        let (outcome, markers) = split_ended(self.abort().await);
        if let Some(txn) = self.shared.lock().txn.as_mut() {
            match &outcome {
                Ok(()) => txn.finish(&outcome),
                Err(error) if error.is_fatal() => txn.phase = Phase::Fatal(error.clone()),
                Err(ProducerError::Abortable { .. }) => {
                    // TRANSACTION_ABORTABLE while aborting: Java makes it fatal.
                    txn.phase = Phase::Fatal(ProducerError::Closed);
                }
                Err(error) => txn.phase = Phase::Abortable(error.clone()),
            }
            if markers {
                txn.markers_pending(Self::markers_deadline());
            }
        }
        if markers {
            self.shared.wake.notify_one();
        }
        outcome
    }
}
