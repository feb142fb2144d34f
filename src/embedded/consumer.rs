//! The share consumer of the embedded broker.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::partition::MemberKey;
use super::{ConsumerOptions, OnDrop, Shared};
use crate::consumer::in_flight::{self, InFlightBatch, acknowledgements_to_batch};
use crate::consumer::{
    AcknowledgeType, AcknowledgementCommitCallback, AcknowledgementMode, BrokerDeadLetterQueue,
    CallbackSlot, CommitResults, ConsumerCapabilities, ConsumerCapability, ConsumerError,
    GroupMetadata, PendingCommit, ShareConsumer, normalize_subscription,
};
use crate::kafka::error::ProtocolError;
use crate::record::ConsumerRecord;
use crate::time::deadline_after;

/// A member of a share group of an [`EmbeddedBroker`](super::EmbeddedBroker).
///
/// Made by [`EmbeddedBroker::share_consumer`](super::EmbeddedBroker::share_consumer). Every
/// member may fetch from every partition of the topics it subscribes to, so members share
/// partitions as KIP-932 allows.
///
/// Dropping it without [`close`](ShareConsumer::close) is a crash. By default
/// ([`OnDrop::Disconnect`]) it is the crash of a process, whose connections close: the group
/// gets the records it held back at once, with the delivery count they have, as a Kafka
/// broker releases a member's records when its connection goes away. A process that hangs
/// instead, connected but never polling again, is [`stall`](Self::stall) (or
/// [`OnDrop::Stall`]): its records come back only when their locks expire.
///
/// ```
/// use std::time::Duration;
/// use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, GroupConfig, ProduceRecord};
/// use kafka_share_sink::ShareConsumer;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let broker = EmbeddedBroker::new();
/// broker.create_topic("orders", 1)?;
/// let lock = Duration::from_secs(30);
/// broker.set_group_config(
///     "sink",
///     GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest).record_lock_duration(lock),
/// )?;
/// broker.produce("orders", ProduceRecord::new().value("a"))?;
/// let mut survivor = broker.share_consumer("sink");
/// survivor.subscribe(vec!["orders".into()]).await?;
///
/// let mut crashed = broker.share_consumer("sink");
/// crashed.subscribe(vec!["orders".into()]).await?;
/// assert_eq!(crashed.poll(Duration::ZERO).await?.len(), 1);
/// drop(crashed); // its connection closes: released at once
/// let records = survivor.poll(Duration::ZERO).await?;
/// assert_eq!(records[0].delivery_count(), 2);
///
/// let mut hung = broker.share_consumer("sink");
/// hung.subscribe(vec!["orders".into()]).await?;
/// survivor.acknowledge(&records[0], kafka_share_sink::AcknowledgeType::Release)?;
/// survivor.commit_sync(Duration::from_secs(1)).await?;
/// assert_eq!(hung.poll(Duration::ZERO).await?.len(), 1);
/// hung.stall(); // still connected, never polls again: held until the lock expires
/// assert!(survivor.poll(Duration::ZERO).await?.is_empty());
/// assert_eq!(survivor.poll(lock).await?[0].delivery_count(), 4);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct EmbeddedShareConsumer {
    shared: Arc<Shared>,
    group_id: String,
    member: MemberKey,
    member_id: String,
    options: ConsumerOptions,
    subscription: Vec<String>,
    batch: InFlightBatch,
    /// Outcomes of acknowledgements sent by poll, reported by the next commit.
    unreported: CommitResults,
    lock_timeout: Option<Duration>,
    /// When the first poll began, for [`ConsumerOptions::first_fetch_delay`].
    first_poll: Option<Instant>,
    /// The acknowledgement commit callback, if set.
    callback: CallbackSlot,
    closed: bool,
    /// Records given back at close on their last allowed delivery (see
    /// [`ShareConsumer::given_back_at_limit`]).
    given_back_at_limit: u64,
}

impl EmbeddedShareConsumer {
    pub(crate) fn new(shared: Arc<Shared>, group_id: &str, options: ConsumerOptions) -> Self {
        let (member, member_id) = shared.lock().join(group_id);
        Self {
            shared,
            group_id: group_id.to_owned(),
            member,
            member_id,
            options,
            subscription: Vec::new(),
            batch: InFlightBatch::default(),
            unreported: CommitResults::new(),
            lock_timeout: None,
            first_poll: None,
            callback: CallbackSlot::default(),
            closed: false,
            given_back_at_limit: 0,
        }
    }

    /// Drops the consumer as a process that hangs: it stays a member of the group, holding
    /// its records until their locks expire, and never polls, acknowledges or leaves again
    /// ([`OnDrop::Stall`], whatever the options say). Acknowledgements not sent yet are
    /// lost. A plain drop is a process that died instead: see [`OnDrop`].
    pub fn stall(mut self) {
        self.options.on_drop = OnDrop::Stall;
    }

    fn ensure_open(&self) -> Result<(), ConsumerError> {
        in_flight::ensure_open(self.closed)
    }

    /// See [`in_flight::check_acknowledgement`].
    fn check_acknowledgement(&self, ack: AcknowledgeType) -> Result<(), ConsumerError> {
        let renew = self.options.renew;
        in_flight::check_acknowledgement(
            self.closed,
            self.options.acknowledgement_mode,
            ack,
            || {
                (!renew).then(|| ProtocolError::Unsupported {
                    broker: "embedded broker".to_owned(),
                    api: "ShareAcknowledge",
                    wanted: "v2, which RENEW needs (turned off by ConsumerOptions::renew)"
                        .to_owned(),
                })
            },
        )
    }

    fn implicit(&self) -> bool {
        self.options.acknowledgement_mode == AcknowledgementMode::Implicit
    }

    /// Sends the pending acknowledgements and returns their outcome.
    fn send_acknowledgements(&mut self, accept_unacknowledged: bool) -> CommitResults {
        let acks = self.batch.take_unsent(accept_unacknowledged);
        if acks.is_empty() {
            return CommitResults::new();
        }
        let results =
            self.shared
                .lock()
                .acknowledge(&self.group_id, self.member, &acks, Instant::now());
        for (partition, error) in results.failures() {
            tracing::debug!(%partition, %error, "acknowledgement failed");
        }
        // Released and rejected records, and a shrunken window, may unblock other members.
        self.shared.changed.notify_waiters();
        // Every outcome is known here, once: the callback gets it now.
        self.callback.call(&results);
        results
    }

    fn commit_now(&mut self) -> Result<CommitResults, ConsumerError> {
        self.ensure_open()?;
        let implicit = self.implicit();
        let mut results = std::mem::take(&mut self.unreported);
        results.merge(self.send_acknowledgements(implicit));
        Ok(results)
    }
}

#[async_trait]
impl ShareConsumer for EmbeddedShareConsumer {
    async fn subscribe(&mut self, topics: Vec<String>) -> Result<(), ConsumerError> {
        self.ensure_open()?;
        if topics.is_empty() {
            return self.unsubscribe().await;
        }
        self.subscription = normalize_subscription(topics)?;
        Ok(())
    }

    /// Sends the acknowledgements made so far (reported by the next commit), releases every
    /// other record held by leaving the group, and joins it again as a new member without a
    /// subscription.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it completes before its first `.await` point.
    async fn unsubscribe(&mut self) -> Result<(), ConsumerError> {
        self.ensure_open()?;
        if self.subscription.is_empty() {
            return Ok(());
        }
        let sent = self.send_acknowledgements(false);
        self.unreported.merge(sent);
        let (member, member_id) = {
            let mut state = self.shared.lock();
            state.leave(&self.group_id, self.member);
            state.join(&self.group_id)
        };
        self.member = member;
        self.member_id = member_id;
        self.shared.changed.notify_waiters();
        self.batch.clear();
        self.subscription.clear();
        self.first_poll = None;
        Ok(())
    }

    fn subscription(&self) -> Vec<String> {
        self.subscription.clone()
    }

    async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ConsumerError> {
        self.ensure_open()?;
        if self.subscription.is_empty() {
            return Err(ConsumerError::NotSubscribed);
        }
        let implicit = self.implicit();
        if !implicit {
            self.batch.ensure_acknowledged()?;
        }
        let sent = self.send_acknowledgements(implicit);
        self.unreported.merge(sent);
        let mut renewed = self.batch.renewed();
        self.batch.clear_unheld();

        let start = Instant::now();
        let deadline = deadline_after(start, timeout);
        // A new consumer's share partitions initialise before its first records.
        let ready = deadline_after(
            *self.first_poll.get_or_insert(start),
            self.options.first_fetch_delay,
        );
        loop {
            let mut changed = pin!(self.shared.changed.notified());
            changed.as_mut().enable();
            let now = Instant::now();
            if now < ready {
                if now >= deadline {
                    return Ok(Vec::new());
                }
                tokio::time::sleep_until(ready.min(deadline)).await;
                continue;
            }
            let fetched = self.shared.lock().fetch(
                &self.group_id,
                self.member,
                &self.subscription,
                &renewed,
                &self.options,
                now,
            );
            renewed.clear();
            if fetched.wrote_dead_letters {
                // Consumers of the dead-letter topic may be waiting.
                self.shared.changed.notify_waiters();
            }
            if !fetched.records.is_empty() {
                self.lock_timeout = Some(fetched.lock_duration);
                self.batch.reset(&fetched.records);
                return Ok(fetched.records);
            }
            if now >= deadline {
                return Ok(Vec::new());
            }
            let wake = fetched.next_deadline.map_or(deadline, |d| d.min(deadline));
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    acknowledgements_to_batch!();

    fn supports_renew(&self) -> bool {
        self.options.renew
    }

    /// Everything: RENEW unless the options turned it off, and the transactional
    /// acknowledgements with the feature `exactly-once`.
    fn capabilities(&self) -> ConsumerCapabilities {
        ConsumerCapabilities::all()
            .with_if(ConsumerCapability::Renew, self.options.renew)
            .with_if(
                ConsumerCapability::TransactionalAcknowledgements,
                cfg!(feature = "exactly-once"),
            )
    }

    async fn commit_sync(&mut self, _timeout: Duration) -> Result<CommitResults, ConsumerError> {
        self.commit_now()
    }

    /// The callback is called as the group answers, which in process is at once: from
    /// inside the call that sends the acknowledgements.
    fn set_acknowledgement_commit_callback(
        &mut self,
        callback: Option<AcknowledgementCommitCallback>,
    ) -> Result<(), ConsumerError> {
        self.ensure_open()?;
        self.callback.set(callback);
        Ok(())
    }

    fn commit_async(&mut self) -> Result<PendingCommit, ConsumerError> {
        Ok(PendingCommit::ready(self.commit_now()))
    }

    async fn close(&mut self, _timeout: Duration) -> Result<(), ConsumerError> {
        if self.closed {
            return Ok(());
        }
        // Commit what was acknowledged; everything else (in implicit mode, the whole last
        // poll) is released by leaving, and archived on its last delivery.
        let limit = self.shared.lock().group_settings(&self.group_id).0;
        let at_limit = u64::try_from(self.batch.unsettled_at(limit)).unwrap_or(u64::MAX);
        self.given_back_at_limit = self.given_back_at_limit.saturating_add(at_limit);
        if at_limit > 0 {
            // As the Kafka consumer's close: the group archives these, which must not be silent.
            tracing::warn!(
                records = at_limit,
                delivery_count_limit = limit,
                "closing with records on their last allowed delivery and no final \
                 acknowledgement: the group archives them (into its broker dead-letter queue, \
                 if it has one)"
            );
        }
        let results = self.send_acknowledgements(false);
        for (partition, error) in results.failures() {
            tracing::warn!(%partition, %error, "acknowledgement failed during close");
        }
        self.shared.lock().leave(&self.group_id, self.member);
        self.shared.changed.notify_waiters();
        self.batch.clear();
        self.closed = true;
        Ok(())
    }

    fn acquisition_lock_timeout(&self) -> Option<Duration> {
        self.lock_timeout
    }

    /// The group's `share.delivery.count.limit` ([`GroupConfig::delivery_count_limit`],
    /// Kafka's 5 unless set), as the group is configured now: always known.
    ///
    /// [`GroupConfig::delivery_count_limit`]: super::GroupConfig::delivery_count_limit
    fn delivery_count_limit(&self) -> Option<u16> {
        Some(self.shared.lock().group_settings(&self.group_id).0)
    }

    fn given_back_at_limit(&self) -> u64 {
        self.given_back_at_limit
    }

    /// The group's dead-letter topic ([`GroupConfig::dead_letter_queue`]) when it exists in
    /// the embedded broker; [`BrokerDeadLetterQueue::None`] otherwise (no queue, or a topic
    /// that does not exist, where nothing would be written).
    ///
    /// [`GroupConfig::dead_letter_queue`]: super::GroupConfig::dead_letter_queue
    fn broker_dead_letter_queue(&self) -> BrokerDeadLetterQueue {
        self.shared.lock().group_settings(&self.group_id).1
    }

    fn lag_source(&self) -> Option<Arc<dyn crate::lag::LagSource>> {
        Some(Arc::new(super::EmbeddedBroker::from_shared(Arc::clone(
            &self.shared,
        ))))
    }

    /// The member epoch is the group's: 1 when the member joins, raised by
    /// [`EmbeddedBroker::bump_member_epoch`](super::EmbeddedBroker::bump_member_epoch); 0
    /// while the consumer has no subscription, -1 once it is closed.
    fn group_metadata(&self) -> GroupMetadata {
        let epoch = if self.closed {
            -1
        } else if self.subscription.is_empty() {
            0
        } else {
            self.shared
                .lock()
                .member_epoch(&self.group_id, self.member)
                .unwrap_or(-1)
        };
        GroupMetadata::new(&self.group_id, &self.member_id, epoch)
    }

    /// Takes the acknowledgements not sent yet (in implicit mode, with every record of the
    /// last poll not acknowledged counted as ACCEPT, as the next poll or commit would send
    /// them), for
    /// [`send_share_acknowledgements`](crate::producer::Producer::send_share_acknowledgements).
    /// The records stay acquired by this member until the producer stages them; they no
    /// longer hold up the next poll, and the consumer neither sends nor holds them.
    ///
    /// ```
    /// use std::time::Duration;
    /// use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, GroupConfig, ProduceRecord};
    /// use kafka_share_sink::{AcknowledgeType, ShareConsumer};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let broker = EmbeddedBroker::new();
    /// broker.create_topic("orders", 1)?;
    /// broker.set_group_config("sink", GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest))?;
    /// broker.produce("orders", ProduceRecord::new().value("a"))?;
    /// let mut consumer = broker.share_consumer("sink");
    /// consumer.subscribe(vec!["orders".into()]).await?;
    /// let records = consumer.poll(Duration::from_secs(1)).await?;
    /// consumer.acknowledge(&records[0], AcknowledgeType::Accept)?;
    /// let acks = consumer.take_acknowledgements_for_transaction()?;
    /// assert_eq!(acks.len(), 1);
    /// assert!(consumer.take_acknowledgements_for_transaction()?.is_empty(), "taken once");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConsumerError::Config`] when a RELEASE or RENEW is pending (a transaction takes only
    /// ACCEPT and REJECT): nothing is taken. [`ConsumerError::Closed`] after `close`.
    #[cfg(feature = "exactly-once")]
    fn take_acknowledgements_for_transaction(
        &mut self,
    ) -> Result<crate::exactly_once::ShareAcknowledgements, ConsumerError> {
        self.ensure_open()?;
        let other = |a| !matches!(a, AcknowledgeType::Accept | AcknowledgeType::Reject);
        if let Some((record, ack)) = self.batch.first_unsent(other) {
            return Err(ConsumerError::Config {
                key: "acknowledgement type".to_owned(),
                reason: format!(
                    "record {record} has a pending {ack:?}, which a transaction cannot carry \
                     (only ACCEPT and REJECT): send it with commit_sync first, or acknowledge \
                     it ACCEPT or REJECT"
                ),
            });
        }
        let mut acks = crate::exactly_once::ShareAcknowledgements::new();
        for partition_acks in self.batch.take_unsent(self.implicit()) {
            let partition = &partition_acks.partition;
            for (offset, ack) in partition_acks.offsets() {
                acks.add(partition.topic(), partition.partition(), offset, ack);
            }
        }
        Ok(acks)
    }

    fn acknowledgement_mode(&self) -> AcknowledgementMode {
        self.options.acknowledgement_mode
    }
}

impl Drop for EmbeddedShareConsumer {
    /// A crash: see [`OnDrop`].
    fn drop(&mut self) {
        if self.closed || self.options.on_drop == OnDrop::Stall {
            return;
        }
        // The connection closed: the broker ends the member's sessions, releasing what it
        // holds with the delivery counts it has (Kafka 4.2+), and the member is gone.
        self.shared.lock().leave(&self.group_id, self.member);
        self.shared.changed.notify_waiters();
    }
}
