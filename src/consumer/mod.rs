//! The share-consumer abstraction the driver works against.
//!
//! [`ShareConsumer`] mirrors Java's `KafkaShareConsumer` where that is right for Rust:
//! `subscribe`, `poll`, local `acknowledge`, `commit_sync` with one result per partition,
//! `commit_async`, `close`. Two implementations exist: the
//! [`EmbeddedShareConsumer`](crate::embedded::EmbeddedShareConsumer) of the in-process
//! [`EmbeddedBroker`](crate::embedded::EmbeddedBroker), and the native Kafka client.

mod capabilities;
mod error;
pub(crate) mod in_flight;

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;

pub use self::capabilities::{ConsumerCapabilities, ConsumerCapability};
pub use self::error::{AckError, ConsumerError};
use crate::kafka::error::ProtocolError;
use crate::record::{ConsumerRecord, TopicPartition};
use crate::topic_name::topic_name_problem;

/// How a delivered record is settled (KIP-932, with RENEW from KIP-1222).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AcknowledgeType {
    /// Processed: the record is done for this group (state ACKNOWLEDGED).
    Accept,
    /// Not processed: the record becomes available again and is delivered again, with its
    /// delivery count one higher, unless the delivery-count limit archives it.
    Release,
    /// Unprocessable: the record is archived and never delivered again.
    Reject,
    /// Still being processed: the acquisition lock is extended and the record stays with
    /// this consumer. The next poll returns it again; it must then be acknowledged again.
    Renew,
}

impl AcknowledgeType {
    /// The wire code of the acknowledgement type (1 accept, 2 release, 3 reject, 4 renew).
    pub fn wire_code(self) -> i8 {
        match self {
            Self::Accept => 1,
            Self::Release => 2,
            Self::Reject => 3,
            Self::Renew => 4,
        }
    }
}

/// Whether the application acknowledges records itself (`share.acknowledgement.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum AcknowledgementMode {
    /// Every record of a poll must be acknowledged before the next poll. The default here
    /// (Java's default is implicit), since a sink must not accept what it did not write.
    #[default]
    Explicit,
    /// The next poll, `commit_sync` or `commit_async` accepts every record of the previous
    /// poll; `acknowledge` is refused.
    Implicit,
}

impl FromStr for AcknowledgementMode {
    type Err = String;

    /// Parses `explicit` or `implicit`, ignoring case, as Java's config does.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "explicit" => Ok(Self::Explicit),
            "implicit" => Ok(Self::Implicit),
            other => Err(format!(
                "unknown acknowledgement mode `{other}`: expected `explicit` or `implicit`"
            )),
        }
    }
}

impl fmt::Display for AcknowledgementMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Explicit => "explicit",
            Self::Implicit => "implicit",
        })
    }
}

/// A subscription as both consumers take it: one or more valid topic names (Kafka's rules),
/// sorted, each once (a name given twice counts once, as in Java). Fails with [`ConsumerError::InvalidSubscription`] saying what is wrong.
pub(crate) fn normalize_subscription(
    mut topics: Vec<String>,
) -> Result<Vec<String>, ConsumerError> {
    if topics.is_empty() {
        return Err(ConsumerError::InvalidSubscription {
            reason: "the topic list is empty".to_owned(),
        });
    }
    if let Some(empty) = topics.iter().position(|t| t.trim().is_empty()) {
        return Err(ConsumerError::InvalidSubscription {
            reason: format!("topic #{} has an empty name", empty + 1),
        });
    }
    for topic in &topics {
        if let Some(problem) = topic_name_problem(topic) {
            return Err(ConsumerError::InvalidSubscription {
                reason: format!("`{topic}` is not a valid topic name: {problem}"),
            });
        }
    }
    topics.sort();
    topics.dedup();
    Ok(topics)
}

/// Kafka's default delivery-count limit (`group.share.delivery.count.limit`): a record is
/// archived once it has been delivered this many times without being accepted or rejected.
pub const DEFAULT_DELIVERY_COUNT_LIMIT: u16 = 5;

/// Whether the share group has a dead-letter queue of the broker's own (KIP-1191, Kafka 4.4
/// with `share.version` 2): the topic where the broker writes a record it archives at the
/// delivery-count limit, instead of dropping it without a trace.
///
/// A Kafka 4.4 broker writes there a record whose deliveries ran out (released, or its lock
/// expired, or its consumer's session closed, on its last allowed delivery) **and** a record a
/// consumer REJECTs. It first moves the record to the state ARCHIVING (it is not delivered
/// again), writes it, and archives it whether or not the write succeeded. Each dead letter goes
/// to partition `p % n` of the topic (`p` the record's partition, `n` the topic's partition
/// count), timestamped with the time of the write, with these headers in this order:
/// `__dlq.errors.topic`, `__dlq.errors.partition`, `__dlq.errors.offset`,
/// `__dlq.errors.group`, `__dlq.errors.delivery.count` (decimal text) and
/// `__dlq.errors.message` (`Offset delivery count exceeded the threshold.` or
/// `Offset rejected by client.`). The record's own headers are never copied.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum BrokerDeadLetterQueue {
    /// Not known: the consumer could not read the group's configuration (an older cluster, no
    /// permission, not asked yet).
    #[default]
    Unknown,
    /// The group has none, or names a topic the broker will not write to: records archived at
    /// the delivery-count limit are gone.
    None,
    /// Archived records are written to this topic.
    Topic {
        /// `errors.deadletterqueue.topic.name`.
        name: String,
        /// `errors.deadletterqueue.copy.record.enable`: the record's key and value are copied
        /// (its headers are not); without it a dead letter has only the headers above.
        copy_record: bool,
    },
}

/// Who this consumer is in its share group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadata {
    group_id: String,
    member_id: String,
    member_epoch: i32,
}

impl GroupMetadata {
    /// Creates group metadata.
    pub fn new(
        group_id: impl Into<String>,
        member_id: impl Into<String>,
        member_epoch: i32,
    ) -> Self {
        Self {
            group_id: group_id.into(),
            member_id: member_id.into(),
            member_epoch,
        }
    }

    /// The share group id.
    pub fn group_id(&self) -> &str {
        &self.group_id
    }

    /// This member's id.
    pub fn member_id(&self) -> &str {
        &self.member_id
    }

    /// This member's epoch: 0 before joining, -1 after leaving.
    pub fn member_epoch(&self) -> i32 {
        self.member_epoch
    }
}

/// The outcome of a commit: one entry per partition whose acknowledgements were sent.
///
/// An empty result means nothing was pending. A failed partition keeps its records with the
/// share group, which delivers them again: no data is lost, but they may be processed twice.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitResults {
    results: BTreeMap<TopicPartition, Result<(), AckError>>,
}

impl CommitResults {
    /// No partitions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the outcome of one partition. A failure is never overwritten by a success.
    pub fn insert(&mut self, partition: TopicPartition, result: Result<(), AckError>) {
        match self.results.get(&partition) {
            Some(Err(_)) if result.is_ok() => {}
            _ => {
                self.results.insert(partition, result);
            }
        }
    }

    /// Adds every outcome of `other`, with the same rule as [`insert`](Self::insert).
    pub fn merge(&mut self, other: CommitResults) {
        for (partition, result) in other.results {
            self.insert(partition, result);
        }
    }

    /// The outcome of one partition, if its acknowledgements were sent.
    pub fn get(&self, partition: &TopicPartition) -> Option<&Result<(), AckError>> {
        self.results.get(partition)
    }

    /// Every partition and its outcome, in topic-partition order.
    pub fn iter(&self) -> impl Iterator<Item = (&TopicPartition, &Result<(), AckError>)> {
        self.results.iter()
    }

    /// The partitions that failed, with why.
    pub fn failures(&self) -> impl Iterator<Item = (&TopicPartition, &AckError)> {
        self.results
            .iter()
            .filter_map(|(tp, r)| r.as_ref().err().map(|e| (tp, e)))
    }

    /// True when every partition succeeded (and when there were none).
    pub fn is_success(&self) -> bool {
        self.results.values().all(Result::is_ok)
    }

    /// Number of partitions.
    pub fn len(&self) -> usize {
        self.results.len()
    }

    /// True when nothing was pending.
    pub fn is_empty(&self) -> bool {
        self.results.is_empty()
    }
}

/// A commit started by [`ShareConsumer::commit_async`]. Await it for the per-partition
/// results, or drop it: the acknowledgements are sent either way.
#[must_use = "await the commit to learn its per-partition results, or drop it explicitly"]
pub struct PendingCommit {
    inner: BoxFuture<'static, Result<CommitResults, ConsumerError>>,
}

impl PendingCommit {
    /// A commit whose results are already known.
    pub fn ready(results: Result<CommitResults, ConsumerError>) -> Self {
        Self {
            inner: Box::pin(std::future::ready(results)),
        }
    }

    /// A commit that completes when `future` does.
    pub fn new(
        future: impl Future<Output = Result<CommitResults, ConsumerError>> + Send + 'static,
    ) -> Self {
        Self {
            inner: Box::pin(future),
        }
    }
}

impl fmt::Debug for PendingCommit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingCommit").finish_non_exhaustive()
    }
}

impl Future for PendingCommit {
    type Output = Result<CommitResults, ConsumerError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

/// A consumer of a Kafka share group (KIP-932).
///
/// Records handed out by [`poll`](Self::poll) are *acquired* by this consumer for the
/// acquisition lock duration. Acknowledging is local ([`acknowledge`](Self::acknowledge));
/// acknowledgements travel on the next poll or on a commit. A record whose lock expires
/// before its acknowledgement arrives goes back to the group and is delivered again.
///
/// The trait is object safe: `Box<dyn ShareConsumer>` is itself a `ShareConsumer`.
///
/// # Cancel safety
///
/// Dropping a `poll` or commit future loses no data: at worst, records this consumer acquired
/// stay locked to it until they expire or [`close`](Self::close) releases them, and are then
/// delivered again. Both implementations of this crate do better, and document it per method:
/// acknowledgements handed to a dropped call are still sent and reported by the next commit,
/// and a dropped `poll` spends no delivery (the embedded group acquires records only in the
/// step that returns them; the Kafka consumer hands what it fetched for a dropped poll to the
/// next one).
///
/// # Capabilities
///
/// A few methods are optional: their default implementations refuse at run time.
/// [`capabilities`](Self::capabilities) says which of them an implementation has, and
/// [`ShareSinkTask::initialize`](crate::ShareSinkTask::initialize) refuses a consumer that
/// lacks one its settings need with [`Error::MissingCapability`](crate::Error::MissingCapability),
/// naming the capability and the setting:
///
/// | [`ConsumerCapability`] | needed by |
/// |---|---|
/// | `Hold` ([`hold_offset`](Self::hold_offset)) | `ack.policy=after.flush` and `put.retriable.policy=retry.in.place` (explicit mode); the exactly-once ledger mode |
/// | `Renew` ([`supports_renew`](Self::supports_renew)) | the exactly-once ledger mode (elsewhere the driver goes without, and warns that held records must be settled within their lock) |
/// | `TransactionalAcknowledgements` (`take_acknowledgements_for_transaction`) | the exactly-once atomic-acknowledgements mode: `exactly.once.mode=atomic` is refused, `auto` falls back to the ledger |
/// | `Unsubscribe`, `CommitCallback` | nothing in the driver; for applications |
///
/// An implementation that overrides one of these methods (a wrapper that forwards them)
/// should override [`capabilities`](Self::capabilities) too.
#[async_trait]
pub trait ShareConsumer: Send {
    /// Subscribes to these topics, replacing any earlier subscription. An empty list is
    /// [`unsubscribe`](Self::unsubscribe), as in Java.
    async fn subscribe(&mut self, topics: Vec<String>) -> Result<(), ConsumerError>;

    /// Leaves the subscription, as Java's `unsubscribe`: the acknowledgements made so far are
    /// sent (their outcome is reported by the next commit), every other record this consumer
    /// holds is released, and the member leaves the group. `poll` then fails with
    /// [`ConsumerError::NotSubscribed`] until `subscribe` is called again, which rejoins. A
    /// consumer without a subscription returns at once.
    ///
    /// The default implementation fails with [`ProtocolError::Unsupported`]; an implementation of
    /// it reports [`ConsumerCapability::Unsubscribe`] in [`capabilities`](Self::capabilities).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped, the subscription is gone but the records held may stay
    /// locked until their locks expire.
    async fn unsubscribe(&mut self) -> Result<(), ConsumerError> {
        Err(ConsumerError::Protocol(ProtocolError::Unsupported {
            broker: "this ShareConsumer".to_owned(),
            api: "unsubscribe",
            wanted: "an implementation of ShareConsumer::unsubscribe".to_owned(),
        }))
    }

    /// The subscribed topics.
    fn subscription(&self) -> Vec<String>;

    /// Waits up to `timeout` for records and returns those acquired (possibly none).
    ///
    /// Sends the acknowledgements made since the last poll or commit first; their outcome is
    /// reported by the next commit. In explicit mode this fails with
    /// [`ConsumerError::UnacknowledgedRecords`] while a record of the previous poll has no
    /// acknowledgement; in implicit mode it accepts every record of the previous poll.
    async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ConsumerError>;

    /// Acknowledges one record of the last poll. Local: nothing is sent until the next poll
    /// or commit. Acknowledging a record again before it is sent replaces the first type.
    fn acknowledge(
        &mut self,
        record: &ConsumerRecord,
        ack: AcknowledgeType,
    ) -> Result<(), ConsumerError> {
        self.acknowledge_offset(record.topic(), record.partition(), record.offset(), ack)
    }

    /// Acknowledges a record of the last poll by its coordinates.
    fn acknowledge_offset(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        ack: AcknowledgeType,
    ) -> Result<(), ConsumerError>;

    /// Acknowledges with `ack` every record of the last poll that is not held and has no
    /// final acknowledgement yet (none, or only a RENEW): what
    /// [`acknowledge_offset`](Self::acknowledge_offset) on each of them does, in one call (a
    /// sink that wrote the whole poll acknowledges it at once).
    ///
    /// Returns how many records it acknowledged, or `None` when this consumer cannot do it
    /// in one call (the default): then acknowledge them one by one.
    fn acknowledge_remaining(
        &mut self,
        ack: AcknowledgeType,
    ) -> Result<Option<usize>, ConsumerError> {
        let _ = ack;
        Ok(None)
    }

    /// Keeps a record of the last poll acquired past the next poll without acknowledging it
    /// (explicit mode): it no longer blocks the next poll and is not presented again, even
    /// after a RENEW. Acknowledge it later by its coordinates with
    /// [`acknowledge_offset`](Self::acknowledge_offset): RENEW extends its lock and keeps it
    /// held; ACCEPT, RELEASE or REJECT settle it. Until then its lock runs: if it expires the
    /// group delivers the record again (a later poll may return it to this consumer, which
    /// then must acknowledge or hold it anew), and [`close`](Self::close) releases it.
    ///
    /// This is how a sink keeps records it wrote but has not yet made durable while it goes
    /// on polling. The default implementation refuses; an implementation of it reports
    /// [`ConsumerCapability::Hold`] in [`capabilities`](Self::capabilities).
    fn hold_offset(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<(), ConsumerError> {
        let _ = (topic, partition, offset);
        Err(ConsumerError::Config {
            key: "hold_offset".to_owned(),
            reason: "this share consumer cannot hold records across polls".to_owned(),
        })
    }

    /// True when RENEW acknowledgements work (Kafka 4.2+, or the embedded group). The
    /// default says no.
    ///
    /// The default [`capabilities`](Self::capabilities) reports
    /// [`ConsumerCapability::Renew`] from it; the driver asks `capabilities`.
    fn supports_renew(&self) -> bool {
        false
    }

    /// Which optional methods this consumer implements: see [Capabilities](#capabilities).
    /// Fixed for the life of the consumer (the driver checks it once, at `initialize`).
    ///
    /// The default reports [`ConsumerCapability::Renew`] when
    /// [`supports_renew`](Self::supports_renew) says yes, and nothing else: what the default
    /// implementations of the optional methods can do. Override it when you implement
    /// [`hold_offset`](Self::hold_offset), [`unsubscribe`](Self::unsubscribe),
    /// [`set_acknowledgement_commit_callback`](Self::set_acknowledgement_commit_callback) or
    /// `take_acknowledgements_for_transaction`, or forward it from a wrapper.
    ///
    /// ```
    /// # #![allow(dead_code)]
    /// use kafka_share_sink::{ConsumerCapabilities, ConsumerCapability};
    /// # struct Inner;
    /// # impl Inner { fn supports_renew(&self) -> bool { true } }
    /// # struct MyConsumer { inner: Inner }
    /// # impl MyConsumer {
    /// // In `impl ShareConsumer for MyConsumer`, which implements `hold_offset`:
    /// fn capabilities(&self) -> ConsumerCapabilities {
    ///     ConsumerCapabilities::none()
    ///         .with(ConsumerCapability::Hold)
    ///         .with_if(ConsumerCapability::Renew, self.inner.supports_renew())
    /// }
    /// # }
    /// ```
    fn capabilities(&self) -> ConsumerCapabilities {
        ConsumerCapabilities::none().with_if(ConsumerCapability::Renew, self.supports_renew())
    }

    /// Sends every pending acknowledgement and waits up to `timeout` for the outcome.
    ///
    /// The result has one entry per partition whose acknowledgements were sent since the last
    /// commit, including those sent by `poll`. A lost lock is
    /// [`AckError::InvalidRecordState`]; it is reported, not retried.
    async fn commit_sync(&mut self, timeout: Duration) -> Result<CommitResults, ConsumerError>;

    /// Sends every pending acknowledgement without waiting; await the returned
    /// [`PendingCommit`] for the outcome.
    fn commit_async(&mut self) -> Result<PendingCommit, ConsumerError>;

    /// Commits what was acknowledged, releases every other record this consumer holds, and
    /// leaves the group. Later calls fail with [`ConsumerError::Closed`]; closing again is a
    /// no-op.
    ///
    /// As Java's `close`, it completes when the cluster cannot be reached or `timeout` runs
    /// out, logging what could not be done at WARN: the records still held then come back to
    /// the group when their locks expire (or the broker sees the connection close). Both
    /// consumers of this crate return `Ok` then; an `Err` is left for implementations with
    /// failures a caller must act on.
    async fn close(&mut self, timeout: Duration) -> Result<(), ConsumerError>;

    /// The acquisition lock duration reported for the last records fetched, if known.
    fn acquisition_lock_timeout(&self) -> Option<Duration>;

    /// When the broker acquired the oldest record the last [`poll`](Self::poll) handed out,
    /// if that was before the poll: a consumer that fetches ahead may hand out records whose
    /// acquisition locks have been running for a while. The driver times its renewals (at
    /// half the lock) from this instant instead of from the poll. The default, `None`, means
    /// the records were acquired during the poll.
    fn last_poll_acquired_at(&self) -> Option<tokio::time::Instant> {
        None
    }

    /// The group's effective delivery-count limit, if known: its `share.delivery.count.limit`
    /// (Kafka 4.3+), else the broker's `group.share.delivery.count.limit`, else Kafka's
    /// default ([`DEFAULT_DELIVERY_COUNT_LIMIT`]). A record delivered this many times is
    /// archived by the group when this delivery ends without ACCEPT or REJECT (a RELEASE, a
    /// lock that expires, a consumer that dies). The default implementation does not know.
    fn delivery_count_limit(&self) -> Option<u16> {
        None
    }

    /// How many records this consumer has given back to the group on their last allowed
    /// delivery ([`delivery_count_limit`](Self::delivery_count_limit)) without a final
    /// acknowledgement, since it was created: at [`close`](Self::close), those polled and
    /// neither acknowledged nor released, held ([`hold_offset`](Self::hold_offset)), renewed,
    /// or fetched ahead and never polled; before, records it fetched ahead whose locks ran out
    /// before a poll could hand them out. The group archives them (into its broker dead-letter
    /// queue, if it has one) unprocessed; the driver adds them to its
    /// `records_released_at_limit` after each poll and at close. Records the application
    /// RELEASEd are not counted here: whoever released them knew; nor are records an
    /// [`unsubscribe`](Self::unsubscribe) gives back. The default implementation answers 0: a
    /// wrapper around another consumer must forward it.
    ///
    /// Kafka counts a closed session's records as delivered since 4.2 (KAFKA-19972); a 4.1
    /// broker gave the delivery back, and delivered them again instead of archiving them.
    fn given_back_at_limit(&self) -> u64 {
        0
    }

    /// The group's broker-side dead-letter queue (KIP-1191), as far as known. The default
    /// implementation does not know.
    ///
    /// With a queue, the broker also writes every record a consumer REJECTs there: a record
    /// the application writes to a dead-letter queue of its own and then REJECTs ends up in
    /// both.
    fn broker_dead_letter_queue(&self) -> BrokerDeadLetterQueue {
        BrokerDeadLetterQueue::Unknown
    }

    /// Where the driver reads the group's lag (see [`lag`](crate::lag)), off the consumer's
    /// own connections: the Kafka consumer's cluster through an admin client of its own, the
    /// embedded broker's group state. The default, `None`, leaves the lag unknown.
    fn lag_source(&self) -> Option<std::sync::Arc<dyn crate::lag::LagSource>> {
        None
    }

    /// Sets (or with `None` removes) the acknowledgement commit callback, Java's
    /// `setAcknowledgementCommitCallback`: it is called with the per-partition outcome of
    /// every acknowledgement, each outcome once, from inside this consumer's `poll`,
    /// `commit_sync`, `commit_async`, `unsubscribe` and `close`, on the caller's task. That
    /// includes acknowledgements that rode on a fetch, which no commit reports otherwise until
    /// the next one. The calls still return their outcomes as before.
    ///
    /// The default implementation fails with [`ProtocolError::Unsupported`]; an implementation of
    /// it reports [`ConsumerCapability::CommitCallback`] in [`capabilities`](Self::capabilities).
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use kafka_share_sink::embedded::EmbeddedBroker;
    /// use kafka_share_sink::{CommitResults, ShareConsumer};
    ///
    /// let broker = EmbeddedBroker::new();
    /// let mut consumer = broker.share_consumer("sink");
    /// let seen: Arc<Mutex<Vec<CommitResults>>> = Arc::default();
    /// let sink = Arc::clone(&seen);
    /// consumer.set_acknowledgement_commit_callback(Some(Box::new(move |results| {
    ///     sink.lock().unwrap().push(results.clone());
    /// })))?;
    /// # Ok::<(), kafka_share_sink::ConsumerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ProtocolError::Unsupported`](crate::ProtocolError::Unsupported) from an implementation without callbacks.
    fn set_acknowledgement_commit_callback(
        &mut self,
        callback: Option<AcknowledgementCommitCallback>,
    ) -> Result<(), ConsumerError> {
        let _ = callback;
        Err(ConsumerError::Protocol(ProtocolError::Unsupported {
            broker: "this ShareConsumer".to_owned(),
            api: "set_acknowledgement_commit_callback",
            wanted: "an implementation of ShareConsumer::set_acknowledgement_commit_callback"
                .to_owned(),
        }))
    }

    /// The group and member identity.
    fn group_metadata(&self) -> GroupMetadata;

    /// Explicit or implicit acknowledgement.
    fn acknowledgement_mode(&self) -> AcknowledgementMode;

    /// Takes every acknowledgement made since the last poll or commit (not yet sent) out of
    /// this consumer, to be staged into a producer transaction with
    /// [`Producer::send_share_acknowledgements`](crate::producer::Producer::send_share_acknowledgements)
    /// (KIP-1289). The consumer no longer sends them, and no longer holds their records: the
    /// transaction settles them. Only ACCEPT and REJECT may be taken; a pending RELEASE or
    /// RENEW fails with [`ConsumerError::Config`] and nothing is taken.
    ///
    /// The default implementation fails with [`ProtocolError::Unsupported`]; an implementation of
    /// it reports [`ConsumerCapability::TransactionalAcknowledgements`] in
    /// [`capabilities`](Self::capabilities).
    #[cfg(feature = "exactly-once")]
    fn take_acknowledgements_for_transaction(
        &mut self,
    ) -> Result<crate::exactly_once::ShareAcknowledgements, ConsumerError> {
        Err(ConsumerError::Protocol(ProtocolError::Unsupported {
            broker: "this ShareConsumer".to_owned(),
            api: "take_acknowledgements_for_transaction",
            wanted: "a share consumer whose cluster stages share acknowledgements in transactions (KIP-1289)".to_owned(),
        }))
    }
}

/// What [`ShareConsumer::set_acknowledgement_commit_callback`] takes: called with the
/// outcomes of acknowledgements, per partition, each once.
pub type AcknowledgementCommitCallback = Box<dyn FnMut(&CommitResults) + Send>;

/// Where a consumer keeps its [`AcknowledgementCommitCallback`] (printable for `Debug`).
#[derive(Default)]
pub(crate) struct CallbackSlot(Option<AcknowledgementCommitCallback>);

impl fmt::Debug for CallbackSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Some(<acknowledgement commit callback>)"
        } else {
            "None"
        })
    }
}

impl CallbackSlot {
    /// Sets or removes the callback.
    pub(crate) fn set(&mut self, callback: Option<AcknowledgementCommitCallback>) {
        self.0 = callback;
    }

    /// True when a callback is set.
    pub(crate) fn is_set(&self) -> bool {
        self.0.is_some()
    }

    /// Calls the callback with `fresh`, unless there is none or `fresh` is empty.
    pub(crate) fn call(&mut self, fresh: &CommitResults) {
        if let Some(callback) = self.0.as_mut()
            && !fresh.is_empty()
        {
            callback(fresh);
        }
    }
}

#[async_trait]
impl<C: ShareConsumer + ?Sized> ShareConsumer for Box<C> {
    fn set_acknowledgement_commit_callback(
        &mut self,
        callback: Option<AcknowledgementCommitCallback>,
    ) -> Result<(), ConsumerError> {
        (**self).set_acknowledgement_commit_callback(callback)
    }

    async fn subscribe(&mut self, topics: Vec<String>) -> Result<(), ConsumerError> {
        (**self).subscribe(topics).await
    }

    async fn unsubscribe(&mut self) -> Result<(), ConsumerError> {
        (**self).unsubscribe().await
    }

    fn subscription(&self) -> Vec<String> {
        (**self).subscription()
    }

    async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ConsumerError> {
        (**self).poll(timeout).await
    }

    fn acknowledge(
        &mut self,
        record: &ConsumerRecord,
        ack: AcknowledgeType,
    ) -> Result<(), ConsumerError> {
        (**self).acknowledge(record, ack)
    }

    fn acknowledge_offset(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        ack: AcknowledgeType,
    ) -> Result<(), ConsumerError> {
        (**self).acknowledge_offset(topic, partition, offset, ack)
    }

    fn acknowledge_remaining(
        &mut self,
        ack: AcknowledgeType,
    ) -> Result<Option<usize>, ConsumerError> {
        (**self).acknowledge_remaining(ack)
    }

    fn hold_offset(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<(), ConsumerError> {
        (**self).hold_offset(topic, partition, offset)
    }

    fn supports_renew(&self) -> bool {
        (**self).supports_renew()
    }

    fn capabilities(&self) -> ConsumerCapabilities {
        (**self).capabilities()
    }

    async fn commit_sync(&mut self, timeout: Duration) -> Result<CommitResults, ConsumerError> {
        (**self).commit_sync(timeout).await
    }

    fn commit_async(&mut self) -> Result<PendingCommit, ConsumerError> {
        (**self).commit_async()
    }

    async fn close(&mut self, timeout: Duration) -> Result<(), ConsumerError> {
        (**self).close(timeout).await
    }

    fn acquisition_lock_timeout(&self) -> Option<Duration> {
        (**self).acquisition_lock_timeout()
    }

    fn last_poll_acquired_at(&self) -> Option<tokio::time::Instant> {
        (**self).last_poll_acquired_at()
    }

    fn delivery_count_limit(&self) -> Option<u16> {
        (**self).delivery_count_limit()
    }

    fn given_back_at_limit(&self) -> u64 {
        (**self).given_back_at_limit()
    }

    fn broker_dead_letter_queue(&self) -> BrokerDeadLetterQueue {
        (**self).broker_dead_letter_queue()
    }

    fn lag_source(&self) -> Option<std::sync::Arc<dyn crate::lag::LagSource>> {
        (**self).lag_source()
    }

    fn group_metadata(&self) -> GroupMetadata {
        (**self).group_metadata()
    }

    #[cfg(feature = "exactly-once")]
    fn take_acknowledgements_for_transaction(
        &mut self,
    ) -> Result<crate::exactly_once::ShareAcknowledgements, ConsumerError> {
        (**self).take_acknowledgements_for_transaction()
    }

    fn acknowledgement_mode(&self) -> AcknowledgementMode {
        (**self).acknowledgement_mode()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_safe() {
        fn _assert(_: Box<dyn ShareConsumer>) {}
    }

    #[test]
    fn acknowledgement_mode_parses_like_java() {
        assert_eq!("EXPLICIT".parse(), Ok(AcknowledgementMode::Explicit));
        assert_eq!(" implicit ".parse(), Ok(AcknowledgementMode::Implicit));
        let err = "auto".parse::<AcknowledgementMode>().unwrap_err();
        assert!(err.contains("`auto`") && err.contains("explicit"), "{err}");
    }

    #[test]
    fn a_failure_is_not_overwritten_by_a_success() {
        let tp = TopicPartition::new("t", 0);
        let mut results = CommitResults::new();
        results.insert(tp.clone(), Err(AckError::Timeout));
        results.insert(tp.clone(), Ok(()));
        assert_eq!(results.get(&tp), Some(&Err(AckError::Timeout)));
        assert!(!results.is_success());
        assert_eq!(results.failures().count(), 1);
    }
}
