//! Share-group and consumer settings of the embedded broker.

use std::str::FromStr;
use std::time::Duration;

use super::EmbeddedError;
use crate::consumer::AcknowledgementMode;
use crate::kafka::ShareAcquireMode;
use crate::producer::IsolationLevel;

/// Where a share group starts reading a partition it has never read (`share.auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum AutoOffsetReset {
    /// From the records produced after the group first reads the partition. Kafka's default:
    /// records produced before that are never delivered to the group.
    #[default]
    Latest,
    /// From the first record of the partition.
    Earliest,
}

impl FromStr for AutoOffsetReset {
    type Err = EmbeddedError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "latest" => Ok(Self::Latest),
            "earliest" => Ok(Self::Earliest),
            _ => Err(EmbeddedError::InvalidConfig {
                key: "share.auto.offset.reset",
                value: s.to_owned(),
                expected: "`latest` or `earliest`",
            }),
        }
    }
}

/// The share-group configs of one group, with Kafka's defaults.
///
/// ```
/// use kafka_share_sink::embedded::{AutoOffsetReset, GroupConfig};
/// use std::time::Duration;
///
/// let config = GroupConfig::new()
///     .auto_offset_reset(AutoOffsetReset::Earliest)
///     .record_lock_duration(Duration::from_secs(15))
///     .delivery_count_limit(3)
///     .dead_letter_queue("dlq.orders", true);
/// assert!(config.validate().is_ok());
/// assert!(GroupConfig::new().delivery_count_limit(1).validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    pub(crate) auto_offset_reset: AutoOffsetReset,
    pub(crate) record_lock_duration: Duration,
    pub(crate) delivery_count_limit: u16,
    pub(crate) partition_max_record_locks: usize,
    pub(crate) dead_letter_queue: Option<DeadLetterTopic>,
    pub(crate) isolation_level: IsolationLevel,
    pub(crate) renew_acknowledge_enable: bool,
}

/// A group's dead-letter topic (KIP-1191): `errors.deadletterqueue.topic.name` and
/// `errors.deadletterqueue.copy.record.enable`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeadLetterTopic {
    pub(crate) topic: String,
    pub(crate) copy_record: bool,
}

impl Default for GroupConfig {
    fn default() -> Self {
        Self {
            auto_offset_reset: AutoOffsetReset::Latest,
            // group.share.record.lock.duration.ms
            record_lock_duration: Duration::from_secs(30),
            // group.share.delivery.count.limit
            delivery_count_limit: 5,
            // group.share.partition.max.record.locks (4.1+)
            partition_max_record_locks: 2000,
            // errors.deadletterqueue.topic.name is blank
            dead_letter_queue: None,
            // share.isolation.level
            isolation_level: IsolationLevel::ReadUncommitted,
            // share.renew.acknowledge.enable (4.3+)
            renew_acknowledge_enable: true,
        }
    }
}

impl GroupConfig {
    /// Kafka's defaults: `latest`, 30 s locks, delivery-count limit 5, 2000 record locks,
    /// `read_uncommitted`.
    pub fn new() -> Self {
        Self::default()
    }

    /// `share.auto.offset.reset`.
    pub fn auto_offset_reset(mut self, reset: AutoOffsetReset) -> Self {
        self.auto_offset_reset = reset;
        self
    }

    /// `share.record.lock.duration.ms`: how long an acquired record stays with its consumer.
    /// The embedded broker takes any positive duration (Kafka bounds group values to
    /// 15–60 s by default), so tests can use short locks. A duration too long to add to the
    /// clock (e.g. [`Duration::MAX`]) is taken as about 30 years: locks that never expire in
    /// practice.
    pub fn record_lock_duration(mut self, duration: Duration) -> Self {
        self.record_lock_duration = duration;
        self
    }

    /// `share.delivery.count.limit`: deliveries after which a record that is released or
    /// times out is archived instead. Kafka's range is 2 to 10.
    pub fn delivery_count_limit(mut self, limit: u16) -> Self {
        self.delivery_count_limit = limit;
        self
    }

    /// `share.partition.max.record.locks`: how long one partition's in-flight window may
    /// grow before no new record is acquired. The window runs from the share-partition
    /// start offset to its end offset and counts every record in between, those already
    /// accepted or archived included: only a moving start offset (its first records
    /// settled) shrinks it, as on a Kafka broker (`SharePartition.canAcquireRecords`).
    ///
    /// The cap is checked before acquiring: while the window is below it, a fetch acquires
    /// up to the room left (and at most `max.poll.records`), and in `batch_optimized` mode
    /// takes the last batch whole, so the window may pass the cap (150 records produced
    /// together are acquired at once under a cap of 100). Records available again inside
    /// the window are acquired even at the cap. At least 1 here (Kafka's minimum is 100).
    pub fn partition_max_record_locks(mut self, locks: usize) -> Self {
        self.partition_max_record_locks = locks;
        self
    }

    /// `errors.deadletterqueue.topic.name` and `errors.deadletterqueue.copy.record.enable`
    /// (Kafka 4.4, KIP-1191): the group's dead-letter topic, none by default.
    ///
    /// A record the group would archive because its deliveries ran out (released, or its
    /// lock expired, on its last allowed delivery, or held by a consumer that closed), or
    /// because a consumer REJECTed it, goes through [`RecordState::Archiving`] and is written
    /// to partition `p % n` of `topic` (`p` its partition, `n` the topic's partition count),
    /// then archived. What is written is what a Kafka 4.4 broker writes:
    ///
    /// - headers, in this order: `__dlq.errors.topic`, `__dlq.errors.partition`,
    ///   `__dlq.errors.offset`, `__dlq.errors.group`, `__dlq.errors.delivery.count` (decimal
    ///   text), `__dlq.errors.message` (`Offset delivery count exceeded the threshold.` or
    ///   `Offset rejected by client.`); the record's own headers are not copied;
    /// - the record's key and value when `copy_record` is true, none otherwise;
    /// - the time of the write as its timestamp (create time).
    ///
    /// Unlike a Kafka cluster, the embedded broker writes to any topic that exists, whatever
    /// its name (a cluster requires the prefix `dlq.` by default, and the topic config
    /// `errors.deadletterqueue.group.enable=true`), and never creates it: a record meant for a
    /// topic that does not exist is archived without being written anywhere, as on a cluster
    /// without `errors.deadletterqueue.auto.create.topics.enable`.
    /// [`EmbeddedBroker::hold_dead_letter_writes`](super::EmbeddedBroker::hold_dead_letter_writes)
    /// keeps records in ARCHIVING, as a slow write would.
    ///
    /// [`RecordState::Archiving`]: super::RecordState::Archiving
    pub fn dead_letter_queue(mut self, topic: impl Into<String>, copy_record: bool) -> Self {
        self.dead_letter_queue = Some(DeadLetterTopic {
            topic: topic.into(),
            copy_record,
        });
        self
    }

    /// `share.isolation.level` (Kafka 4.1+): which records of transactions the group gets.
    ///
    /// - [`IsolationLevel::ReadUncommitted`] (Kafka's default): every data record up to the
    ///   high watermark, of open, committed and aborted transactions alike.
    /// - [`IsolationLevel::ReadCommitted`]: records outside transactions and of committed
    ///   transactions; nothing at or past the last stable offset (the first offset of the
    ///   oldest transaction still open in the partition) is acquired, so an open transaction
    ///   holds the partition back until it ends. Records of aborted transactions are
    ///   archived without being delivered, as Kafka does.
    ///
    /// In both modes transaction markers (control records, which take an offset each) are
    /// never delivered: they are archived as they are reached, so they show as
    /// [`RecordState::Archived`](super::RecordState::Archived) in
    /// [`record_state`](super::EmbeddedBroker::record_state) and the group's counts.
    ///
    /// ```
    /// use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, GroupConfig};
    /// use kafka_share_sink::producer::{IsolationLevel, Producer, ProducerRecord};
    /// use kafka_share_sink::ShareConsumer;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let broker = EmbeddedBroker::new();
    /// broker.create_topic("orders", 1)?;
    /// broker.set_group_config(
    ///     "sink",
    ///     GroupConfig::new()
    ///         .auto_offset_reset(AutoOffsetReset::Earliest)
    ///         .isolation_level(IsolationLevel::ReadCommitted),
    /// )?;
    /// let producer = broker.transactional_producer("tx-1")?;
    /// producer.init_transactions().await?;
    /// producer.begin_transaction()?;
    /// producer.send(ProducerRecord::new("orders").value("pending"))?.await?;
    ///
    /// let mut consumer = broker.share_consumer("sink");
    /// consumer.subscribe(vec!["orders".into()]).await?;
    /// assert!(consumer.poll(Duration::from_millis(10)).await?.is_empty(), "still open");
    ///
    /// producer.commit_transaction().await?;
    /// let records = consumer.poll(Duration::from_secs(1)).await?;
    /// assert_eq!(records[0].value().unwrap(), "pending");
    /// # Ok(()) }
    /// ```
    pub fn isolation_level(mut self, isolation: IsolationLevel) -> Self {
        self.isolation_level = isolation;
        self
    }

    /// `share.renew.acknowledge.enable` (Kafka 4.3+, default true): whether the group takes
    /// RENEW acknowledgements. Off, a RENEW fails the acknowledgements of its partition with
    /// INVALID_RECORD_STATE ("Renewing acquisition locks is not enabled for the group"), as
    /// a Kafka 4.4 broker answers, and nothing of that partition's acknowledgements is
    /// applied. The exactly-once ledger mode needs it on.
    ///
    /// ```
    /// use std::time::Duration;
    /// use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, GroupConfig, ProduceRecord};
    /// use kafka_share_sink::{AcknowledgeType, ShareConsumer};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let broker = EmbeddedBroker::new();
    /// broker.create_topic("orders", 1)?;
    /// broker.set_group_config(
    ///     "sink",
    ///     GroupConfig::new()
    ///         .auto_offset_reset(AutoOffsetReset::Earliest)
    ///         .renew_acknowledge_enable(false),
    /// )?;
    /// broker.produce("orders", ProduceRecord::new().value("a"))?;
    /// let mut consumer = broker.share_consumer("sink");
    /// consumer.subscribe(vec!["orders".into()]).await?;
    /// let records = consumer.poll(Duration::from_secs(1)).await?;
    /// consumer.acknowledge(&records[0], AcknowledgeType::Renew)?;
    /// let results = consumer.commit_sync(Duration::from_secs(1)).await?;
    /// assert!(!results.is_success());
    /// # Ok(()) }
    /// ```
    pub fn renew_acknowledge_enable(mut self, enable: bool) -> Self {
        self.renew_acknowledge_enable = enable;
        self
    }

    /// Checks every value, naming the config key that is wrong.
    pub fn validate(&self) -> Result<(), EmbeddedError> {
        if self.record_lock_duration.is_zero() {
            return Err(EmbeddedError::InvalidConfig {
                key: "share.record.lock.duration.ms",
                value: format!("{}", self.record_lock_duration.as_millis()),
                expected: "a positive number of milliseconds",
            });
        }
        if !(2..=10).contains(&self.delivery_count_limit) {
            return Err(EmbeddedError::InvalidConfig {
                key: "share.delivery.count.limit",
                value: self.delivery_count_limit.to_string(),
                expected: "a number from 2 to 10",
            });
        }
        if self.partition_max_record_locks == 0 {
            return Err(EmbeddedError::InvalidConfig {
                key: "share.partition.max.record.locks",
                value: "0".to_owned(),
                expected: "at least 1",
            });
        }
        if let Some(queue) = &self.dead_letter_queue {
            if queue.topic.is_empty() || queue.topic.starts_with("__") {
                return Err(EmbeddedError::InvalidConfig {
                    key: "errors.deadletterqueue.topic.name",
                    value: queue.topic.clone(),
                    expected: "a topic name that is not empty and does not start with `__`",
                });
            }
        }
        Ok(())
    }
}

/// What dropping an [`EmbeddedShareConsumer`](super::EmbeddedShareConsumer) without
/// [`close`](crate::ShareConsumer::close) stands for.
///
/// Both are crashes: nothing the consumer acknowledged but did not send yet reaches the
/// group, and it does not leave the group politely. They differ in what the broker sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum OnDrop {
    /// A process that died: its sockets close, and a Kafka broker ends the member's share
    /// sessions at once (`ShareSessionCache`'s disconnect listener), releasing every record
    /// it holds with the delivery count it has (Kafka 4.2+; the count went up when the
    /// record was acquired), or archiving it if that count is at
    /// `share.delivery.count.limit`. Other consumers get the records right away.
    #[default]
    Disconnect,
    /// A process that hangs: still connected and a member of the group, it never polls or
    /// acknowledges again. Its records come back only when their locks expire
    /// (`share.record.lock.duration.ms`). [`EmbeddedShareConsumer::stall`] does the same
    /// for one consumer whatever its options say.
    ///
    /// [`EmbeddedShareConsumer::stall`]: super::EmbeddedShareConsumer::stall
    Stall,
}

/// Settings of one [`EmbeddedShareConsumer`](super::EmbeddedShareConsumer).
///
/// ```
/// use std::time::Duration;
/// use kafka_share_sink::embedded::{ConsumerOptions, OnDrop};
/// use kafka_share_sink::ShareAcquireMode;
///
/// let options = ConsumerOptions::new()
///     .max_poll_records(3)
///     .acquire_mode(ShareAcquireMode::RecordLimit)
///     .first_fetch_delay(Duration::from_secs(1))
///     .on_drop(OnDrop::Stall);
/// # let _ = options;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerOptions {
    pub(crate) max_poll_records: usize,
    pub(crate) acknowledgement_mode: AcknowledgementMode,
    pub(crate) renew: bool,
    pub(crate) acquire_mode: ShareAcquireMode,
    pub(crate) first_fetch_delay: Duration,
    pub(crate) on_drop: OnDrop,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        Self {
            // max.poll.records
            max_poll_records: 500,
            acknowledgement_mode: AcknowledgementMode::Explicit,
            renew: true,
            // share.acquire.mode
            acquire_mode: ShareAcquireMode::BatchOptimized,
            first_fetch_delay: Duration::ZERO,
            on_drop: OnDrop::Disconnect,
        }
    }
}

impl ConsumerOptions {
    /// 500 records a poll, explicit acknowledgement, `batch_optimized`, no first-fetch
    /// delay, a drop is a [disconnect](OnDrop::Disconnect).
    pub fn new() -> Self {
        Self::default()
    }

    /// `max.poll.records` (at least 1): a strict bound on a poll in `record_limit` mode, a
    /// soft one in `batch_optimized` mode (see [`acquire_mode`](Self::acquire_mode)).
    pub fn max_poll_records(mut self, max: usize) -> Self {
        self.max_poll_records = max.max(1);
        self
    }

    /// `share.acknowledgement.mode`.
    pub fn acknowledgement_mode(mut self, mode: AcknowledgementMode) -> Self {
        self.acknowledgement_mode = mode;
        self
    }

    /// Whether RENEW works (default yes). `false` behaves like a Kafka 4.1 cluster: RENEW is
    /// refused and [`supports_renew`](crate::ShareConsumer::supports_renew) says no, so a
    /// sink can be tested against brokers without KIP-1222.
    pub fn renew(mut self, supported: bool) -> Self {
        self.renew = supported;
        self
    }

    /// `share.acquire.mode` (KIP-1206), as a Kafka 4.4 broker applies it:
    ///
    /// - [`ShareAcquireMode::BatchOptimized`] (the default): whole produce batches are
    ///   acquired, so a poll returns the whole of the last batch it reaches even past
    ///   `max.poll.records` (20 records produced together come in one poll with
    ///   `max_poll_records(3)`, and none are left for a second consumer). Records produced
    ///   one by one ([`EmbeddedBroker::produce`](super::EmbeddedBroker::produce), a
    ///   producer's sends) are batches of one; see
    ///   [`EmbeddedBroker::produce_batch`](super::EmbeddedBroker::produce_batch).
    /// - [`ShareAcquireMode::RecordLimit`]: at most `max.poll.records` records a poll; the
    ///   rest of a batch stays available to any consumer.
    pub fn acquire_mode(mut self, mode: ShareAcquireMode) -> Self {
        self.acquire_mode = mode;
        self
    }

    /// Makes the consumer's polls acquire nothing until `delay` after its first poll, as a
    /// Kafka broker takes about a second to initialise a share partition (reading its state
    /// from the share coordinator) before a new consumer's first records. Off (zero) by
    /// default; turn it on to check that a test or sink waiting for records copes with it.
    pub fn first_fetch_delay(mut self, delay: Duration) -> Self {
        self.first_fetch_delay = delay;
        self
    }

    /// What dropping the consumer without closing it stands for: see [`OnDrop`].
    pub fn on_drop(mut self, on_drop: OnDrop) -> Self {
        self.on_drop = on_drop;
        self
    }
}
