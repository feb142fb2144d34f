//! An in-process share-group engine: topics, produce, and share consumers that follow
//! KIP-932 for real.
//!
//! Unlike Java's `MockShareConsumer`, acknowledgements matter here: records are acquired under
//! locks that expire (on the tokio clock, so `#[tokio::test(start_paused = true)]` controls
//! them), delivery counts rise with each acquisition, RELEASE makes a record available again,
//! REJECT archives it, RENEW extends its lock, a record that reaches the delivery-count limit
//! is archived (through the group's dead-letter topic when it has one, as Kafka 4.4 does: see
//! [`GroupConfig::dead_letter_queue`]), and the in-flight window per partition is bounded.
//! `close` releases what a consumer still holds.
//!
//! Where a Kafka 4.4 broker differs from a strict reading of the configs, the group does as
//! the broker does (the scenarios of `tests/support/share_behaviour.rs` run on both):
//!
//! - **Batches.** Records produced together ([`EmbeddedBroker::produce_batch`]) are one
//!   batch; a single [`produce`](EmbeddedBroker::produce) or producer send is a batch of one.
//!   In `batch_optimized` mode (the default [`ConsumerOptions::acquire_mode`]) whole batches
//!   are acquired, so a poll can return more than `max.poll.records`; in `record_limit` mode
//!   at most that many.
//! - **The in-flight cap** (`share.partition.max.record.locks`) is checked before acquiring:
//!   below it, up to the room left is acquired (records available again included), and a
//!   whole batch can take the window past it (150 records held under a cap of 100); at or
//!   over it, nothing new is acquired until the window shrinks.
//! - **Renewing holders.** A poll that presents renewed records again returns only those.
//! - **Crash or stall.** Dropping a consumer without closing it is a process that died: its
//!   connection closes and the group releases its records at once, each with the delivery
//!   count it has (Kafka 4.2+), as a broker does when a client's connection goes away. A
//!   process that hangs, still connected, is [`EmbeddedShareConsumer::stall`] (or
//!   [`OnDrop::Stall`]): its records come back only when their locks expire.
//! - **A new consumer's first records** come at once, unless
//!   [`ConsumerOptions::first_fetch_delay`] models the second or so a broker takes to
//!   initialise a share partition.
//!
//! Not modelled: the broker's poison-pill isolation (smaller acquisitions, and a record on
//! its last delivery alone) and its splitting of large acquisitions by `BatchSize`.
//!
//! It runs the quickstart, and your own tests of a [`SinkTask`](crate::SinkTask) without a
//! broker.
//!
//! Transactional pipelines can be tested too. [`EmbeddedBroker::producer`] and
//! [`EmbeddedBroker::transactional_producer`] make an [`EmbeddedProducer`] (the crate's
//! [`Producer`](crate::producer::Producer)) with Kafka's partitioning and transactions v2
//! semantics: epochs and fencing per transactional id, COMMIT and ABORT markers that take an
//! offset each, the last stable offset, and the coordinator's abort after
//! `transaction.timeout.ms` on the tokio clock. The broker is a
//! [`LogReader`](crate::producer::LogReader) (`read_committed` or `read_uncommitted`), and a
//! share group reads transactional data as its `share.isolation.level` says
//! ([`GroupConfig::isolation_level`]); markers are never delivered.
//! [`EmbeddedBroker::fail_next_commit`] loses a commit's answer.
//!
//! With the `exactly-once` feature the group also implements the draft of KIP-1289:
//! acknowledgements staged into a producer transaction
//! ([`Producer::send_share_acknowledgements`](crate::producer::Producer::send_share_acknowledgements),
//! `EmbeddedShareConsumer::take_acknowledgements_for_transaction`) wait as `TxPending` until
//! the transaction ends, with the draft's unsettled rules as switches (`Kip1289Rules`), and
//! the broker is an `ExactlyOnceCluster`. For the exactly-once tests, faults can be
//! injected: [`EmbeddedBroker::fail_over`] (a leader change that forgets acquisitions, with
//! leader epochs on every record) and [`EmbeddedBroker::bump_member_epoch`].
//!
//! ```
//! use std::time::Duration;
//! use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, GroupConfig};
//! use kafka_share_sink::producer::{IsolationLevel, Producer, ProducerRecord};
//! use kafka_share_sink::ShareConsumer;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let broker = EmbeddedBroker::new();
//! broker.create_topic("out", 1)?;
//! broker.set_group_config(
//!     "downstream",
//!     GroupConfig::new()
//!         .auto_offset_reset(AutoOffsetReset::Earliest)
//!         .isolation_level(IsolationLevel::ReadCommitted),
//! )?;
//! let producer = broker.transactional_producer("pipeline-0")?;
//! producer.init_transactions().await?;
//! producer.begin_transaction()?;
//! producer.send(ProducerRecord::new("out").value("never seen"))?.await?;
//! producer.abort_transaction().await?;
//! producer.begin_transaction()?;
//! producer.send(ProducerRecord::new("out").value("seen"))?.await?;
//! producer.commit_transaction().await?;
//!
//! let mut consumer = broker.share_consumer("downstream");
//! consumer.subscribe(vec!["out".into()]).await?;
//! let records = consumer.poll(Duration::from_secs(1)).await?;
//! assert_eq!(records.len(), 1);
//! assert_eq!(records[0].value().unwrap(), "seen");
//! # Ok(()) }
//! ```
//!
//! ```
//! use std::time::Duration;
//! use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, GroupConfig, ProduceRecord, RecordState};
//! use kafka_share_sink::{AcknowledgeType, ShareConsumer};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let broker = EmbeddedBroker::new();
//! broker.create_topic("orders", 2)?;
//! broker.set_group_config("sink", GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest))?;
//! broker.produce("orders", ProduceRecord::new().partition(0).value("hello"))?;
//!
//! let mut consumer = broker.share_consumer("sink");
//! consumer.subscribe(vec!["orders".into()]).await?;
//! let records = consumer.poll(Duration::from_secs(1)).await?;
//! assert_eq!(records.len(), 1);
//! consumer.acknowledge(&records[0], AcknowledgeType::Accept)?;
//! assert!(consumer.commit_sync(Duration::from_secs(1)).await?.is_success());
//!
//! let view = broker.record_state("sink", "orders", 0, 0).unwrap();
//! assert_eq!(view.state(), RecordState::Acknowledged);
//! # Ok(()) }
//! ```

mod config;
mod consumer;
mod dlq;
mod error;
#[cfg(feature = "exactly-once")]
mod exactly_once;
mod faults;
#[cfg(feature = "exactly-once")]
mod kip1289;
mod log;
mod partition;
mod producer;
mod reader;
mod txn;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use bytes::Bytes;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::warn;

use self::config::DeadLetterTopic;
pub use self::config::{AutoOffsetReset, ConsumerOptions, GroupConfig, OnDrop};
pub use self::consumer::EmbeddedShareConsumer;
pub use self::dlq::EmbeddedDeadLetterQueue;
pub use self::error::EmbeddedError;
#[cfg(feature = "exactly-once")]
pub use self::kip1289::Kip1289Rules;
use self::log::{PartitionLog, StoredRecord, TxnOutcome};
pub use self::partition::RecordState;
use self::partition::{AcquireRequest, Acquired, DeadLetter, MemberKey, SharePartition};
pub use self::producer::{EmbeddedProducer, EmbeddedProducerConfig, LostCommit};
use self::txn::{Coordinator, Ended};
use crate::consumer::in_flight::PartitionAcks;
use crate::consumer::{AckError, BrokerDeadLetterQueue, CommitResults};
use crate::record::{
    ConsumerRecord, Headers, RecordId, RecordParts, TimestampType, TopicPartition,
};
use crate::topic_name::{TopicName, topic_name_problem};

/// A record to produce to the embedded broker.
///
/// ```
/// use kafka_share_sink::embedded::ProduceRecord;
/// let record = ProduceRecord::new()
///     .key("user-7")
///     .value(r#"{"total": 12}"#)
///     .header("source", "web")
///     .null_header("trace")
///     .timestamp(1_700_000_000_000);
/// # let _ = record;
/// ```
#[derive(Debug, Clone, Default)]
pub struct ProduceRecord {
    partition: Option<i32>,
    key: Option<Bytes>,
    value: Option<Bytes>,
    headers: Headers,
    timestamp: Option<i64>,
}

impl ProduceRecord {
    /// A record with null key and value, no headers, the current time as its timestamp.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends it to this partition. Without one, a keyed record goes to the partition of its
    /// key's hash and an unkeyed one round-robin.
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Sets the key.
    pub fn key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the value. Without one the value is null (a tombstone).
    pub fn value(mut self, value: impl Into<Bytes>) -> Self {
        self.value = Some(value.into());
        self
    }

    /// Appends a header.
    pub fn header(mut self, key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.headers.push(key, Some(value.into()));
        self
    }

    /// Appends a header with a null value.
    pub fn null_header(mut self, key: impl Into<String>) -> Self {
        self.headers.push(key, None);
        self
    }

    /// Sets the create time, in milliseconds since the epoch.
    pub fn timestamp(mut self, millis: i64) -> Self {
        self.timestamp = Some(millis);
        self
    }

    /// The log entry, stamped with the current time unless it has a timestamp.
    fn stored(self) -> StoredRecord {
        let timestamp = self.timestamp.unwrap_or_else(now_millis);
        StoredRecord::plain(self.key, self.value, self.headers, timestamp, None)
    }
}

/// What a record looks like to one share group, for tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordView {
    state: RecordState,
    delivery_count: u16,
    member_id: Option<String>,
}

impl RecordView {
    /// The record's state.
    pub fn state(&self) -> RecordState {
        self.state
    }

    /// How many times the group has handed the record out.
    pub fn delivery_count(&self) -> u16 {
        self.delivery_count
    }

    /// The member holding the record, while it is acquired.
    pub fn member_id(&self) -> Option<&str> {
        self.member_id.as_deref()
    }
}

/// How many records of a group are in each state, over every partition the group has read.
/// Records the group has not reached yet count as available.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StateCounts {
    /// Available to any consumer.
    pub available: u64,
    /// Held by a consumer.
    pub acquired: u64,
    /// Accepted.
    pub acknowledged: u64,
    /// Rejected or over the delivery-count limit, on their way to the group's dead-letter
    /// topic.
    pub archiving: u64,
    /// Rejected or over the delivery-count limit.
    pub archived: u64,
    /// Staged in a producer transaction that has not ended (KIP-1289).
    #[cfg(feature = "exactly-once")]
    pub tx_pending: u64,
}

#[derive(Debug)]
struct Topic {
    name: Arc<str>,
    /// The name again, interned: every record of the topic carries it.
    record_topic: TopicName,
    partitions: Vec<PartitionLog>,
    next_partition: usize,
}

#[derive(Debug, Default)]
struct Group {
    config: GroupConfig,
    partitions: HashMap<(Arc<str>, i32), SharePartition>,
    members: HashMap<MemberKey, Member>,
    cursor: usize,
}

/// A member of a share group: its id and its member epoch.
#[derive(Debug)]
struct Member {
    id: String,
    /// Starts at 1 when the member joins; [`EmbeddedBroker::bump_member_epoch`] raises it.
    epoch: i32,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    topics: HashMap<Arc<str>, Topic>,
    groups: HashMap<String, Group>,
    next_member: MemberKey,
    /// Records that enter ARCHIVING stay there until this is false again.
    dead_letter_writes_held: bool,
    /// Producer ids, and the transactions of transactional ids.
    coordinator: Coordinator,
    /// What the next commit of a transaction does instead of answering.
    lost_commit: Option<LostCommit>,
    /// KIP-1289's rules, the advertised capabilities, and delayed markers.
    #[cfg(feature = "exactly-once")]
    kip1289: kip1289::Kip1289State,
}

/// What a fetch returned, and when a lock of the group expires next.
pub(crate) struct Fetched {
    pub(crate) records: Vec<ConsumerRecord>,
    pub(crate) next_deadline: Option<Instant>,
    pub(crate) lock_duration: std::time::Duration,
    /// Records were written to a dead-letter topic, which other consumers may wait for.
    pub(crate) wrote_dead_letters: bool,
}

/// Writes the records of `share` (partition `partition` of `source`, read by `group_id`) that
/// entered ARCHIVING to the group's dead-letter topic, then archives them, unless `held`.
/// A record that cannot be written is archived all the same, with a warning, as Kafka does.
/// Returns true if any record was written.
fn settle(
    topics: &mut HashMap<Arc<str>, Topic>,
    group_id: &str,
    config: &GroupConfig,
    (source, partition): (&Arc<str>, i32),
    share: &mut SharePartition,
    held: bool,
) -> bool {
    if held {
        return false;
    }
    let mut wrote = false;
    for letter in share.take_dead_letters() {
        // A queue removed while the record waited: archived without a write, as Kafka's
        // check of the group's config then fails.
        if let Some(queue) = &config.dead_letter_queue {
            match write_dead_letter(topics, group_id, queue, (source, partition), letter) {
                Ok(()) => wrote = true,
                Err(why) => warn!(
                    group = group_id,
                    topic = %source,
                    partition,
                    offset = letter.offset,
                    "record archived without a dead letter: {why}"
                ),
            }
        }
        share.archive(letter.offset);
    }
    wrote
}

/// Appends the dead letter of one record to partition `partition % n` of the group's
/// dead-letter topic, with what a Kafka 4.4 broker writes (see
/// [`GroupConfig::dead_letter_queue`]).
fn write_dead_letter(
    topics: &mut HashMap<Arc<str>, Topic>,
    group_id: &str,
    queue: &DeadLetterTopic,
    (source, partition): (&Arc<str>, i32),
    letter: DeadLetter,
) -> Result<(), String> {
    let (key, value) = if queue.copy_record {
        topics
            .get(source)
            .and_then(|t| t.stored(partition, letter.offset))
            .map_or((None, None), |r| (r.key.clone(), r.value.clone()))
    } else {
        (None, None)
    };
    let dlq = topics
        .get_mut(queue.topic.as_str())
        .ok_or_else(|| format!("the dead-letter topic `{}` does not exist", queue.topic))?;
    let count = dlq.partitions.len().max(1);
    let target = usize::try_from(partition).unwrap_or(0) % count;
    let log = dlq
        .partitions
        .get_mut(target)
        .ok_or_else(|| format!("the dead-letter topic `{}` has no partitions", queue.topic))?;
    let text = |s: String| Some(Bytes::from(s));
    let mut headers = Headers::new();
    headers.push("__dlq.errors.topic", text(source.to_string()));
    headers.push("__dlq.errors.partition", text(partition.to_string()));
    headers.push("__dlq.errors.offset", text(letter.offset.to_string()));
    headers.push("__dlq.errors.group", text(group_id.to_owned()));
    headers.push(
        "__dlq.errors.delivery.count",
        text(letter.delivery_count.to_string()),
    );
    headers.push(
        "__dlq.errors.message",
        Some(Bytes::from_static(letter.cause.message().as_bytes())),
    );
    log.push(StoredRecord::plain(key, value, headers, now_millis(), None));
    Ok(())
}

impl State {
    fn group(&mut self, group_id: &str) -> &mut Group {
        self.groups.entry(group_id.to_owned()).or_default()
    }

    /// The group's delivery-count limit and dead-letter queue (Kafka's defaults for a group
    /// not configured). A dead-letter topic that does not exist is no queue: nothing is
    /// written there.
    pub(crate) fn group_settings(&self, group_id: &str) -> (u16, BrokerDeadLetterQueue) {
        let default = GroupConfig::default();
        let config = self.groups.get(group_id).map_or(&default, |g| &g.config);
        let queue = match &config.dead_letter_queue {
            Some(queue) if self.topics.contains_key(queue.topic.as_str()) => {
                BrokerDeadLetterQueue::Topic {
                    name: queue.topic.clone(),
                    copy_record: queue.copy_record,
                }
            }
            _ => BrokerDeadLetterQueue::None,
        };
        (config.delivery_count_limit, queue)
    }

    /// Expires the locks of every partition `group_id` has read, and writes the records that
    /// entered ARCHIVING (unless held). Returns true if anything changed.
    fn expire_group(&mut self, group_id: &str, now: Instant) -> bool {
        let Some(group) = self.groups.get_mut(group_id) else {
            return false;
        };
        let mut changed = false;
        for share in group.partitions.values_mut() {
            changed |= share.expire(now, &group.config);
        }
        // Expiry reads only the share partitions' locks, so writing the dead letters after
        // every partition expired is the same as after each.
        self.settle_group(group_id) || changed
    }

    /// Writes the records of `group_id` that entered ARCHIVING (unless held). Returns true if
    /// any was written.
    fn settle_group(&mut self, group_id: &str) -> bool {
        let State {
            topics,
            groups,
            dead_letter_writes_held,
            ..
        } = self;
        let Some(group) = groups.get_mut(group_id) else {
            return false;
        };
        let mut wrote = false;
        for ((topic, partition), share) in &mut group.partitions {
            wrote |= settle(
                topics,
                group_id,
                &group.config,
                (topic, *partition),
                share,
                *dead_letter_writes_held,
            );
        }
        wrote
    }

    /// Aborts the transactions open past their timeout at `now`, writing their ABORT
    /// markers. Returns true if any was.
    pub(crate) fn expire_transactions(&mut self, now: Instant) -> bool {
        #[cfg(feature = "exactly-once")]
        let markers = self.write_due_markers(now);
        #[cfg(not(feature = "exactly-once"))]
        let markers = false;
        let ended = self.coordinator.expire(now);
        let changed = markers || !ended.is_empty();
        for transaction in ended {
            self.write_markers(&transaction, TxnOutcome::Abort);
        }
        changed
    }

    /// When the next transaction times out, or (KIP-1289) the next delayed marker is due.
    pub(crate) fn next_transaction_deadline(&self) -> Option<Instant> {
        #[cfg(feature = "exactly-once")]
        let markers = self.next_marker_due();
        #[cfg(not(feature = "exactly-once"))]
        let markers = None;
        self.coordinator
            .next_deadline()
            .into_iter()
            .chain(markers)
            .min()
    }

    /// Appends the marker of an ended transaction to every partition it wrote to, and
    /// (KIP-1289) applies it to the acknowledgements it staged.
    pub(crate) fn write_markers(&mut self, transaction: &Ended, outcome: TxnOutcome) {
        #[cfg(feature = "exactly-once")]
        self.apply_share_markers(transaction, outcome);
        let timestamp = now_millis();
        for (topic, partition) in &transaction.partitions {
            let log = self
                .topics
                .get_mut(topic)
                .and_then(|t| t.partitions.get_mut(usize::try_from(*partition).ok()?));
            if let Some(log) = log {
                log.end_transaction(transaction.producer_id, outcome, timestamp);
            }
        }
    }

    pub(crate) fn join(&mut self, group_id: &str) -> (MemberKey, String) {
        self.next_member += 1;
        let key = self.next_member;
        let member_id = format!("embedded-{group_id}-{key}");
        let member = Member {
            id: member_id.clone(),
            epoch: 1,
        };
        self.group(group_id).members.insert(key, member);
        (key, member_id)
    }

    /// The member epoch of a member of the group, `None` once it left.
    pub(crate) fn member_epoch(&self, group_id: &str, member: MemberKey) -> Option<i32> {
        Some(self.groups.get(group_id)?.members.get(&member)?.epoch)
    }

    /// Re-presents the renewed records `member` still holds; only when there are none,
    /// acquires records of the subscribed topics for it (as on a Kafka broker, where the
    /// fetch that carries a RENEW fetches nothing new).
    pub(crate) fn fetch(
        &mut self,
        group_id: &str,
        member: MemberKey,
        topics: &[String],
        renewed: &[RecordId],
        options: &ConsumerOptions,
        now: Instant,
    ) -> Fetched {
        let max = options.max_poll_records;
        self.expire_transactions(now);
        #[cfg(feature = "exactly-once")]
        let kip1289_due = self.next_marker_due();
        let State {
            topics: logs,
            groups,
            coordinator,
            ..
        } = self;
        let group = groups.entry(group_id.to_owned()).or_default();
        let mut records = Vec::new();
        for id in renewed {
            let Some(log) = logs.get(id.topic()) else {
                continue;
            };
            let Some(share) = group
                .partitions
                .get(&(Arc::clone(&log.name), id.partition()))
            else {
                continue;
            };
            if !share.is_held_by(id.offset(), member, now) {
                continue;
            }
            let dc = share.slot(id.offset()).map_or(1, |s| s.delivery_count);
            if let Some(record) = log.record(id.partition(), id.offset(), dc) {
                records.push(record);
            }
        }

        let mut targets: Vec<(&Topic, i32)> = Vec::new();
        for name in topics {
            if let Some(log) = logs.get(name.as_str()) {
                for p in 0..log.partitions.len() {
                    targets.push((log, i32::try_from(p).unwrap_or(i32::MAX)));
                }
            }
        }
        let mut acquired: Vec<Acquired> = Vec::new();
        if !targets.is_empty() && records.is_empty() {
            let first = group.cursor % targets.len();
            group.cursor = group.cursor.wrapping_add(1);
            for i in 0..targets.len() {
                if records.len() >= max {
                    break;
                }
                let (log, p) = targets[(first + i) % targets.len()];
                let log_end = log.end_offset(p);
                let config = &group.config;
                let isolation = config.isolation_level;
                // Under read_committed nothing past the last stable offset is acquired.
                let readable = log.log(p).map_or(0, |l| l.end_for(isolation));
                let batch_end =
                    |offset: i64| log.log(p).map_or(offset + 1, |l| l.batch_end(offset));
                let share = group
                    .partitions
                    .entry((Arc::clone(&log.name), p))
                    .or_insert_with(|| {
                        SharePartition::new(match config.auto_offset_reset {
                            AutoOffsetReset::Earliest => 0,
                            AutoOffsetReset::Latest => log_end,
                        })
                    });
                // Markers, and under read_committed records of aborted transactions, are
                // acquired with their neighbours and archived at once, never delivered (as
                // Kafka archives them, and its clients acknowledge markers as gaps): acquire
                // again while only such records came.
                loop {
                    acquired.clear();
                    let request = AcquireRequest {
                        member,
                        now,
                        log_end: readable,
                        max: max - records.len(),
                        mode: options.acquire_mode,
                        batch_end: &batch_end,
                    };
                    share.acquire(&request, config, &mut acquired);
                    records.reserve(acquired.len());
                    // Below the end of the log's leading plain records every entry is a
                    // visible data record; past it, look (markers are never visible).
                    let plain_end = log.log(p).map_or(0, PartitionLog::plain_end);
                    let deliverable = |a: &Acquired| {
                        (a.offset >= 0 && a.offset < plain_end)
                            || log
                                .stored(p, a.offset)
                                .is_some_and(|r| r.visible(isolation))
                    };
                    if acquired.iter().all(deliverable) {
                        // The usual case: one pass of known length, which writes each record
                        // in place instead of moving it (a large struct) into the batch.
                        records.extend(acquired.iter().map(|a| {
                            match log.stored(p, a.offset) {
                                Some(stored) => {
                                    log.record_of(stored, p, a.offset, a.delivery_count)
                                }
                                // Not reached: every one was found above.
                                None => ConsumerRecord::new(log.record_topic.clone(), p, a.offset)
                                    .with_delivery_count(a.delivery_count),
                            }
                        }));
                        break;
                    }
                    let mut skipped = false;
                    for a in &acquired {
                        let deliverable = log
                            .stored(p, a.offset)
                            .is_some_and(|r| r.visible(isolation));
                        match log.record(p, a.offset, a.delivery_count) {
                            Some(record) if deliverable => records.push(record),
                            _ => {
                                share.archive_undeliverable(a.offset);
                                skipped = true;
                            }
                        }
                    }
                    if !skipped || acquired.is_empty() || records.len() >= max {
                        break;
                    }
                }
            }
        }
        // A transaction timing out (or its delayed markers) may move the last stable offset:
        // wake up for it too.
        let next_deadline = group
            .partitions
            .values()
            .filter_map(SharePartition::next_deadline)
            .chain(coordinator.next_deadline())
            .min();
        #[cfg(feature = "exactly-once")]
        let next_deadline = next_deadline.into_iter().chain(kip1289_due).min();
        let lock_duration = group.config.record_lock_duration;
        // Locks expired by this fetch may have sent records to ARCHIVING.
        let wrote_dead_letters = self.settle_group(group_id);
        Fetched {
            records,
            next_deadline,
            lock_duration,
            wrote_dead_letters,
        }
    }

    /// Applies acknowledgements, partition by partition, each all or nothing.
    pub(crate) fn acknowledge(
        &mut self,
        group_id: &str,
        member: MemberKey,
        acks: &[PartitionAcks],
        now: Instant,
    ) -> CommitResults {
        let mut results = CommitResults::new();
        {
            // The partitions' keys, with the log's name (no allocation).
            let names: Vec<Option<Arc<str>>> = acks
                .iter()
                .map(|p| {
                    self.topics
                        .get(p.partition.topic())
                        .map(|log| Arc::clone(&log.name))
                })
                .collect();
            let group = self.group(group_id);
            for (PartitionAcks { partition, runs }, name) in acks.iter().zip(names) {
                let share =
                    name.and_then(|name| group.partitions.get_mut(&(name, partition.partition())));
                let result = match share {
                    Some(share) => share.acknowledge(member, runs, now, &group.config),
                    None => Err(AckError::InvalidRecordState {
                        detail: "the group has never read this partition".to_owned(),
                    }),
                };
                results.insert(partition.clone(), result);
            }
        }
        // Rejected records, and records released at the limit, may be in ARCHIVING.
        self.settle_group(group_id);
        results
    }

    /// Appends a record to `topic`, as a batch of its own, and returns where it landed.
    pub(crate) fn append(
        &mut self,
        topic: &str,
        record: ProduceRecord,
    ) -> Result<RecordId, EmbeddedError> {
        let log = self
            .topics
            .get_mut(topic)
            .ok_or_else(|| EmbeddedError::UnknownTopic(topic.to_owned()))?;
        let count = log.partitions.len();
        let partition = match (record.partition, &record.key) {
            (Some(p), _) => log.index(topic, p)?,
            (None, Some(key)) => (fnv1a(key) % count as u64) as usize,
            (None, None) => {
                log.next_partition = (log.next_partition + 1) % count;
                log.next_partition
            }
        };
        let offset = log.partitions[partition].push(record.stored());
        Ok(RecordId::new(
            log.record_topic.clone(),
            i32::try_from(partition).unwrap_or(i32::MAX),
            offset,
        ))
    }

    /// Appends records to one partition of `topic` as one batch and returns where they
    /// landed, in order.
    pub(crate) fn append_batch(
        &mut self,
        topic: &str,
        partition: i32,
        records: Vec<ProduceRecord>,
    ) -> Result<Vec<RecordId>, EmbeddedError> {
        let log = self
            .topics
            .get_mut(topic)
            .ok_or_else(|| EmbeddedError::UnknownTopic(topic.to_owned()))?;
        let index = log.index(topic, partition)?;
        let count = records.len();
        let first = log.partitions[index]
            .push_batch(records.into_iter().map(ProduceRecord::stored).collect());
        Ok((first..)
            .take(count)
            .map(|offset| RecordId::new(log.record_topic.clone(), partition, offset))
            .collect())
    }

    /// Releases every record the member holds and removes it from the group.
    pub(crate) fn leave(&mut self, group_id: &str, member: MemberKey) {
        let group = self.group(group_id);
        for share in group.partitions.values_mut() {
            share.release_member(member, &group.config);
        }
        group.members.remove(&member);
        self.settle_group(group_id);
    }
}

impl State {
    /// The log of a partition.
    pub(crate) fn partition_log(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<&PartitionLog, EmbeddedError> {
        let log = self
            .topics
            .get(topic)
            .ok_or_else(|| EmbeddedError::UnknownTopic(topic.to_owned()))?;
        log.log(partition)
            .ok_or_else(|| EmbeddedError::UnknownPartition {
                topic: topic.to_owned(),
                partition,
                partitions: log.partitions.len(),
            })
    }
}

impl Topic {
    /// The index of `partition`, or the error naming it.
    fn index(&self, topic: &str, partition: i32) -> Result<usize, EmbeddedError> {
        usize::try_from(partition)
            .ok()
            .filter(|p| *p < self.partitions.len())
            .ok_or_else(|| EmbeddedError::UnknownPartition {
                topic: topic.to_owned(),
                partition,
                partitions: self.partitions.len(),
            })
    }

    fn end_offset(&self, partition: i32) -> i64 {
        usize::try_from(partition)
            .ok()
            .and_then(|p| self.partitions.get(p))
            .map_or(0, PartitionLog::end)
    }

    fn log(&self, partition: i32) -> Option<&PartitionLog> {
        self.partitions.get(usize::try_from(partition).ok()?)
    }

    fn stored(&self, partition: i32, offset: i64) -> Option<&StoredRecord> {
        self.log(partition)?.get(offset)
    }

    /// The data record at `offset` (`None` for a marker), as a consumer gets it.
    fn record(&self, partition: i32, offset: i64, delivery_count: u16) -> Option<ConsumerRecord> {
        let stored = self.stored(partition, offset)?;
        if matches!(stored.kind, log::EntryKind::Marker(_)) {
            return None;
        }
        Some(self.record_of(stored, partition, offset, delivery_count))
    }

    /// The consumer's record of the data entry `stored`, at `offset` of `partition`.
    #[inline]
    fn record_of(
        &self,
        stored: &StoredRecord,
        partition: i32,
        offset: i64,
        delivery_count: u16,
    ) -> ConsumerRecord {
        // Built in place: the builder methods would move the whole record once per field.
        ConsumerRecord::from_parts(RecordParts {
            topic: self.record_topic.clone(),
            partition,
            offset,
            key: stored.key.clone(),
            value: stored.value.clone(),
            headers: if stored.headers.is_empty() {
                Headers::new()
            } else {
                stored.headers.clone()
            },
            timestamp: stored.timestamp,
            timestamp_type: TimestampType::CreateTime,
            delivery_count,
            leader_epoch: Some(stored.leader_epoch),
        })
    }
}

#[derive(Debug, Default)]
pub(crate) struct Shared {
    state: Mutex<State>,
    /// Woken whenever records may have become available.
    pub(crate) changed: Notify,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-written in a way that
        // matters more than losing the broker, so keep going.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// An in-process broker holding topics and share groups. Cheap to clone; clones share state.
#[derive(Debug, Clone, Default)]
pub struct EmbeddedBroker {
    shared: Arc<Shared>,
}

impl EmbeddedBroker {
    /// The broker whose state `shared` is (another handle on it).
    pub(crate) fn from_shared(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// An empty broker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates a topic with `partitions` partitions.
    pub fn create_topic(&self, name: &str, partitions: usize) -> Result<(), EmbeddedError> {
        if let Some(reason) = topic_name_problem(name) {
            return Err(EmbeddedError::InvalidTopic {
                name: name.to_owned(),
                reason,
            });
        }
        if partitions == 0 || i32::try_from(partitions).is_err() {
            return Err(EmbeddedError::InvalidTopic {
                name: name.to_owned(),
                reason: "a topic needs at least one partition",
            });
        }
        let mut state = self.shared.lock();
        if state.topics.contains_key(name) {
            return Err(EmbeddedError::TopicExists(name.to_owned()));
        }
        let name: Arc<str> = name.into();
        state.topics.insert(
            Arc::clone(&name),
            Topic {
                record_topic: TopicName::interned(&name),
                name,
                partitions: vec![PartitionLog::default(); partitions],
                next_partition: 0,
            },
        );
        Ok(())
    }

    /// Sets the share-group configs of a group, creating the group if needed. Like Kafka,
    /// this may be done before any consumer joins; `share.auto.offset.reset` only affects
    /// partitions the group has not read yet.
    pub fn set_group_config(
        &self,
        group_id: &str,
        config: GroupConfig,
    ) -> Result<(), EmbeddedError> {
        config.validate()?;
        self.shared.lock().group(group_id).config = config;
        // A shorter lock or a changed limit may matter to waiting pollers.
        self.shared.changed.notify_waiters();
        Ok(())
    }

    /// Appends a record, as a batch of its own, and returns where it landed.
    pub fn produce(&self, topic: &str, record: ProduceRecord) -> Result<RecordId, EmbeddedError> {
        let id = self.shared.lock().append(topic, record)?;
        self.shared.changed.notify_waiters();
        Ok(id)
    }

    /// Appends records to one partition as one batch, as a Kafka producer's single produce
    /// request for a partition writes one record batch, and returns where they landed, in
    /// order. Each record goes to `partition`, whatever partition it names itself. An empty
    /// list writes nothing.
    ///
    /// Batches matter to share groups: in `batch_optimized` mode (the default
    /// [`acquire_mode`](ConsumerOptions::acquire_mode)) a consumer acquires whole batches,
    /// so it can get more than `max.poll.records` records, and the in-flight window can pass
    /// [`partition_max_record_locks`](GroupConfig::partition_max_record_locks).
    ///
    /// ```
    /// use std::time::Duration;
    /// use kafka_share_sink::embedded::{AutoOffsetReset, ConsumerOptions, EmbeddedBroker, GroupConfig, ProduceRecord};
    /// use kafka_share_sink::{ShareAcquireMode, ShareConsumer};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let broker = EmbeddedBroker::new();
    /// broker.create_topic("orders", 1)?;
    /// broker.set_group_config("sink", GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest))?;
    /// let batch = (0..20).map(|i| ProduceRecord::new().value(format!("v{i}"))).collect();
    /// let ids = broker.produce_batch("orders", 0, batch)?;
    /// assert_eq!((ids[0].offset(), ids[19].offset()), (0, 19));
    ///
    /// let mut whole = broker.share_consumer_with("sink", ConsumerOptions::new().max_poll_records(3));
    /// whole.subscribe(vec!["orders".into()]).await?;
    /// assert_eq!(whole.poll(Duration::from_secs(1)).await?.len(), 20, "the whole batch");
    ///
    /// broker.produce_batch("orders", 0, (0..20).map(|_| ProduceRecord::new()).collect())?;
    /// let strict = ConsumerOptions::new()
    ///     .max_poll_records(3)
    ///     .acquire_mode(ShareAcquireMode::RecordLimit);
    /// let mut limited = broker.share_consumer_with("sink", strict);
    /// limited.subscribe(vec!["orders".into()]).await?;
    /// assert_eq!(limited.poll(Duration::from_secs(1)).await?.len(), 3);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`EmbeddedError::UnknownTopic`] and [`EmbeddedError::UnknownPartition`].
    pub fn produce_batch(
        &self,
        topic: &str,
        partition: i32,
        records: Vec<ProduceRecord>,
    ) -> Result<Vec<RecordId>, EmbeddedError> {
        let ids = self.shared.lock().append_batch(topic, partition, records)?;
        self.shared.changed.notify_waiters();
        Ok(ids)
    }

    /// An idempotent producer without transactions: see [`EmbeddedProducer`].
    ///
    /// ```
    /// use kafka_share_sink::embedded::EmbeddedBroker;
    /// use kafka_share_sink::producer::{Producer, ProducerRecord};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let broker = EmbeddedBroker::new();
    /// broker.create_topic("orders", 3)?;
    /// let producer = broker.producer();
    /// let written = producer.send(ProducerRecord::new("orders").key("user-7").value("x"))?.await?;
    /// // murmur2, as a Kafka cluster's Java producer would pick.
    /// assert_eq!(written.partition, 2);
    /// assert_eq!(broker.read_log("orders", 2)?[0].value().unwrap(), "x");
    /// # Ok(()) }
    /// ```
    pub fn producer(&self) -> EmbeddedProducer {
        EmbeddedProducer::build(self.clone(), EmbeddedProducerConfig::new())
    }

    /// A transactional producer with `transactional.id` `id` and the default 60 s
    /// transaction timeout: see [`EmbeddedProducer`]. Call
    /// [`init_transactions`](crate::producer::Producer::init_transactions) first.
    ///
    /// # Errors
    ///
    /// [`ProducerError::Config`](crate::producer::ProducerError::Config) for an empty id.
    pub fn transactional_producer(
        &self,
        id: &str,
    ) -> Result<EmbeddedProducer, crate::producer::ProducerError> {
        self.producer_with(EmbeddedProducerConfig::new().transactional_id(id))
    }

    /// A producer with `config`: see [`EmbeddedProducerConfig`].
    ///
    /// # Errors
    ///
    /// [`ProducerError::Config`](crate::producer::ProducerError::Config) for an empty
    /// transactional id or a transaction timeout out of range.
    pub fn producer_with(
        &self,
        config: EmbeddedProducerConfig,
    ) -> Result<EmbeddedProducer, crate::producer::ProducerError> {
        EmbeddedProducer::new(self.clone(), config)
    }

    /// Makes the next commit of a transaction (by any producer of this broker) lose its
    /// answer: the coordinator commits or aborts it as `outcome` says, and the producer
    /// reports [`ProducerError::CommitOutcomeUnknown`] and must call
    /// [`init_transactions`](crate::producer::Producer::init_transactions) again. A commit
    /// of a transaction that sent nothing does not use it up.
    ///
    /// ```
    /// use kafka_share_sink::embedded::{EmbeddedBroker, LostCommit};
    /// use kafka_share_sink::producer::{Producer, ProducerError, ProducerRecord};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let broker = EmbeddedBroker::new();
    /// broker.create_topic("out", 1)?;
    /// let producer = broker.transactional_producer("tx")?;
    /// producer.init_transactions().await?;
    /// producer.begin_transaction()?;
    /// producer.send(ProducerRecord::new("out").value("v"))?.await?;
    ///
    /// broker.fail_next_commit(LostCommit::Committed);
    /// let error = producer.commit_transaction().await.unwrap_err();
    /// assert!(matches!(error, ProducerError::CommitOutcomeUnknown { .. }));
    /// assert_eq!(broker.last_stable_offset("out", 0)?, 2, "committed all the same");
    /// producer.init_transactions().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// [`ProducerError::CommitOutcomeUnknown`]: crate::producer::ProducerError::CommitOutcomeUnknown
    pub fn fail_next_commit(&self, outcome: LostCommit) {
        self.shared.lock().lost_commit = Some(outcome);
    }

    /// The last stable offset of a partition: the first offset of the oldest transaction
    /// still open in it, else the log end offset. Transactions past their timeout are
    /// aborted first.
    ///
    /// # Errors
    ///
    /// [`EmbeddedError::UnknownTopic`] and [`EmbeddedError::UnknownPartition`].
    pub fn last_stable_offset(&self, topic: &str, partition: i32) -> Result<i64, EmbeddedError> {
        let mut state = self.shared.lock();
        if state.expire_transactions(Instant::now()) {
            self.shared.changed.notify_waiters();
        }
        state
            .partition_log(topic, partition)
            .map(PartitionLog::last_stable_offset)
    }

    /// A dead-letter queue writing to `topic` through [`produce`](Self::produce)'s path, so
    /// share consumers can read it. The topic is created with 1 partition if missing.
    ///
    /// # Errors
    ///
    /// [`EmbeddedError::InvalidTopic`] for a name Kafka would refuse.
    pub fn dead_letter_queue(&self, topic: &str) -> Result<EmbeddedDeadLetterQueue, EmbeddedError> {
        match self.create_topic(topic, 1) {
            Ok(()) | Err(EmbeddedError::TopicExists(_)) => {}
            Err(error) => return Err(error),
        }
        Ok(EmbeddedDeadLetterQueue::new(self.clone(), topic))
    }

    /// While `hold` is true, records that enter [`RecordState::Archiving`] stay there instead
    /// of being written to their group's dead-letter topic at once, as they would while a
    /// Kafka broker's write to the queue is slow or retried: they are not delivered again,
    /// and the share-partition start offset does not pass them. `false` writes (and archives)
    /// every record held so far. See [`GroupConfig::dead_letter_queue`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, GroupConfig, ProduceRecord, RecordState};
    /// use kafka_share_sink::{AcknowledgeType, ShareConsumer};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let broker = EmbeddedBroker::new();
    /// broker.create_topic("orders", 1)?;
    /// broker.create_topic("dlq.orders", 1)?;
    /// broker.set_group_config(
    ///     "sink",
    ///     GroupConfig::new()
    ///         .auto_offset_reset(AutoOffsetReset::Earliest)
    ///         .dead_letter_queue("dlq.orders", true),
    /// )?;
    /// broker.produce("orders", ProduceRecord::new().value("poison"))?;
    /// let mut consumer = broker.share_consumer("sink");
    /// consumer.subscribe(vec!["orders".into()]).await?;
    /// let records = consumer.poll(Duration::from_secs(1)).await?;
    ///
    /// broker.hold_dead_letter_writes(true);
    /// consumer.acknowledge(&records[0], AcknowledgeType::Reject)?;
    /// consumer.commit_sync(Duration::from_secs(1)).await?;
    /// let state = |b: &EmbeddedBroker| b.record_state("sink", "orders", 0, 0).unwrap().state();
    /// assert_eq!(state(&broker), RecordState::Archiving);
    /// assert!(broker.read_log("dlq.orders", 0)?.is_empty());
    ///
    /// broker.hold_dead_letter_writes(false);
    /// assert_eq!(state(&broker), RecordState::Archived);
    /// assert_eq!(broker.read_log("dlq.orders", 0)?[0].value().unwrap(), "poison");
    /// # Ok(()) }
    /// ```
    pub fn hold_dead_letter_writes(&self, hold: bool) {
        let mut state = self.shared.lock();
        state.dead_letter_writes_held = hold;
        if !hold {
            let groups: Vec<String> = state.groups.keys().cloned().collect();
            for group in groups {
                state.settle_group(&group);
            }
        }
        drop(state);
        self.shared.changed.notify_waiters();
    }

    /// Every data record of a partition's log, in offset order, as written: key, value,
    /// headers (order, repeated keys and null values kept) and timestamp (create time). The
    /// delivery count is 1: the log itself knows of no deliveries.
    ///
    /// This is a `read_uncommitted` view: records of open and aborted transactions are
    /// included; transaction markers are not (their offsets are missing from the list). For
    /// `read_committed`, use the broker's [`LogReader`](crate::producer::LogReader)
    /// implementation.
    ///
    /// ```
    /// use kafka_share_sink::embedded::{EmbeddedBroker, ProduceRecord};
    ///
    /// let broker = EmbeddedBroker::new();
    /// broker.create_topic("audit", 1)?;
    /// broker.produce("audit", ProduceRecord::new().value("a").null_header("h").timestamp(5))?;
    /// let log = broker.read_log("audit", 0)?;
    /// assert_eq!((log[0].offset(), log[0].timestamp()), (0, 5));
    /// assert_eq!(log[0].headers().last("h").unwrap().value(), None);
    /// # Ok::<(), kafka_share_sink::embedded::EmbeddedError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`EmbeddedError::UnknownTopic`] and [`EmbeddedError::UnknownPartition`].
    pub fn read_log(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Vec<ConsumerRecord>, EmbeddedError> {
        let state = self.shared.lock();
        let log = state
            .topics
            .get(topic)
            .ok_or_else(|| EmbeddedError::UnknownTopic(topic.to_owned()))?;
        let end = log.end_offset(partition);
        if usize::try_from(partition).map_or(true, |p| p >= log.partitions.len()) {
            return Err(EmbeddedError::UnknownPartition {
                topic: topic.to_owned(),
                partition,
                partitions: log.partitions.len(),
            });
        }
        Ok((0..end)
            .filter_map(|offset| log.record(partition, offset, 1))
            .collect())
    }

    /// A new consumer of `group_id` with default options (explicit acknowledgement, 500
    /// records a poll).
    pub fn share_consumer(&self, group_id: &str) -> EmbeddedShareConsumer {
        self.share_consumer_with(group_id, ConsumerOptions::default())
    }

    /// A new consumer of `group_id`.
    pub fn share_consumer_with(
        &self,
        group_id: &str,
        options: ConsumerOptions,
    ) -> EmbeddedShareConsumer {
        EmbeddedShareConsumer::new(Arc::clone(&self.shared), group_id, options)
    }

    /// One past the last offset of a partition.
    pub fn log_end_offset(&self, topic: &str, partition: i32) -> Result<i64, EmbeddedError> {
        let state = self.shared.lock();
        let log = state
            .topics
            .get(topic)
            .ok_or_else(|| EmbeddedError::UnknownTopic(topic.to_owned()))?;
        let p = usize::try_from(partition)
            .ok()
            .filter(|p| *p < log.partitions.len())
            .ok_or_else(|| EmbeddedError::UnknownPartition {
                topic: topic.to_owned(),
                partition,
                partitions: log.partitions.len(),
            })?;
        Ok(log.partitions[p].end())
    }

    /// The group's view of one record, with expired locks applied; `None` when the group has
    /// not read the partition, or the offset lies before where it started or past the log.
    pub fn record_state(
        &self,
        group_id: &str,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Option<RecordView> {
        let now = Instant::now();
        let mut state = self.shared.lock();
        let ended = state.expire_transactions(now);
        if state.expire_group(group_id, now) || ended {
            self.shared.changed.notify_waiters();
        }
        let log_end = state.topics.get(topic)?.end_offset(partition);
        let group = state.groups.get_mut(group_id)?;
        let share = group.partitions.get_mut(&(Arc::from(topic), partition))?;
        if offset < share.base_offset() || offset >= log_end {
            return None;
        }
        let view = match share.slot(offset) {
            Some(slot) => RecordView {
                state: slot.state,
                delivery_count: slot.delivery_count,
                member_id: slot
                    .owner
                    .and_then(|m| group.members.get(&m).map(|m| m.id.clone())),
            },
            None => RecordView {
                state: RecordState::Available,
                delivery_count: 0,
                member_id: None,
            },
        };
        Some(view)
    }

    /// The share-partition start and end offsets of a partition the group has read: every
    /// offset below the start is acknowledged or archived; none from the end on was ever
    /// acquired.
    pub fn share_partition_offsets(
        &self,
        group_id: &str,
        topic: &str,
        partition: i32,
    ) -> Option<(i64, i64)> {
        let now = Instant::now();
        let mut state = self.shared.lock();
        let ended = state.expire_transactions(now);
        if state.expire_group(group_id, now) || ended {
            self.shared.changed.notify_waiters();
        }
        let group = state.groups.get(group_id)?;
        let share = group.partitions.get(&(Arc::from(topic), partition))?;
        Some((share.start_offset(), share.end_offset()))
    }

    /// The broker's state, with the expired transactions and the group's expired locks
    /// applied (and the pollers woken when that changed anything).
    fn lock_expired(&self, group_id: &str) -> MutexGuard<'_, State> {
        let now = Instant::now();
        let mut guard = self.shared.lock();
        let ended = guard.expire_transactions(now);
        if guard.expire_group(group_id, now) || ended {
            self.shared.changed.notify_waiters();
        }
        guard
    }

    /// The group's lag in every partition it has read, with expired locks applied: records
    /// from the share-partition start offset to the end of the log not done yet.
    pub(crate) fn group_lag(&self, group_id: &str) -> Vec<crate::lag::PartitionLag> {
        let guard = self.lock_expired(group_id);
        let State { topics, groups, .. } = &*guard;
        let Some(group) = groups.get(group_id) else {
            return Vec::new();
        };
        group
            .partitions
            .iter()
            .map(|((topic, partition), share)| {
                let log_end = topics.get(topic).map_or(0, |t| t.end_offset(*partition));
                let lag = u64::try_from(share.lag(log_end)).ok();
                crate::lag::PartitionLag::new(topic.as_ref(), *partition, lag)
            })
            .collect()
    }

    /// Counts the group's records by state, with expired locks applied.
    pub fn state_counts(&self, group_id: &str) -> StateCounts {
        let guard = self.lock_expired(group_id);
        let State { topics, groups, .. } = &*guard;
        let mut counts = StateCounts::default();
        let Some(group) = groups.get(group_id) else {
            return counts;
        };
        for ((topic, partition), share) in &group.partitions {
            let log_end = topics.get(topic).map_or(0, |t| t.end_offset(*partition));
            for offset in share.base_offset()..share.end_offset() {
                if let Some(slot) = share.slot(offset) {
                    match slot.state {
                        RecordState::Available => counts.available += 1,
                        RecordState::Acquired => counts.acquired += 1,
                        RecordState::Acknowledged => counts.acknowledged += 1,
                        RecordState::Archiving => counts.archiving += 1,
                        RecordState::Archived => counts.archived += 1,
                        #[cfg(feature = "exactly-once")]
                        RecordState::TxPending => counts.tx_pending += 1,
                    }
                }
            }
            counts.available += u64::try_from(log_end - share.end_offset()).unwrap_or(0);
        }
        counts
    }

    /// Every partition of every topic, sorted.
    pub fn topic_partitions(&self) -> Vec<TopicPartition> {
        let state = self.shared.lock();
        let mut out: Vec<TopicPartition> = state
            .topics
            .values()
            .flat_map(|t| {
                (0..t.partitions.len()).map(|p| {
                    TopicPartition::new(
                        t.record_topic.clone(),
                        i32::try_from(p).unwrap_or(i32::MAX),
                    )
                })
            })
            .collect();
        out.sort();
        out
    }
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A stable key hash for partition choice (not Kafka's murmur2: embedded only).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}
