//! Fault injection for tests: share-partition leader fail-overs (with the partition's leader
//! epoch) and member-epoch bumps.

use std::sync::Arc;

use super::{EmbeddedBroker, EmbeddedError};

impl EmbeddedBroker {
    /// The current leader epoch of a partition: 0 when the topic is created, one more at
    /// each [`fail_over`](Self::fail_over). Every record stores the epoch it was appended
    /// under, and share consumers and readers return it as
    /// [`ConsumerRecord::leader_epoch`](crate::ConsumerRecord::leader_epoch).
    ///
    /// # Errors
    ///
    /// [`EmbeddedError::UnknownTopic`] and [`EmbeddedError::UnknownPartition`].
    pub fn leader_epoch(&self, topic: &str, partition: i32) -> Result<i32, EmbeddedError> {
        Ok(self
            .shared
            .lock()
            .partition_log(topic, partition)?
            .leader_epoch())
    }

    /// Fault injection (for tests): a leader change of one partition, which is also a
    /// share-partition leader fail-over for every share group reading it. The leader epoch
    /// goes up by one, and records appended from now on carry the new one. The new
    /// share-partition leader knows only the persisted state, and an acquisition is never
    /// persisted: every record acquired in the partition becomes available again, with the
    /// delivery count it had before that acquisition (a record delivered once comes back
    /// with delivery count 1), and its holder's acknowledgements of it fail. Acknowledged
    /// and archived records stay so, and so do records staged in a transaction (KIP-1289's
    /// TX_PENDING, which the draft persists) until their transaction ends. Open producer
    /// transactions are not affected. Returns the new leader epoch.
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
    /// let first = consumer.poll(Duration::from_secs(1)).await?;
    /// assert_eq!((first[0].delivery_count(), first[0].leader_epoch()), (1, Some(0)));
    ///
    /// assert_eq!(broker.fail_over("orders", 0)?, 1);
    /// consumer.acknowledge(&first[0], AcknowledgeType::Accept)?;
    /// assert!(!consumer.commit_sync(Duration::from_secs(1)).await?.is_success(), "lock lost");
    /// let again = consumer.poll(Duration::from_secs(1)).await?;
    /// assert_eq!(again[0].delivery_count(), 1, "the acquisition was forgotten");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`EmbeddedError::UnknownTopic`] and [`EmbeddedError::UnknownPartition`].
    pub fn fail_over(&self, topic: &str, partition: i32) -> Result<i32, EmbeddedError> {
        let mut state = self.shared.lock();
        let log = state
            .topics
            .get_mut(topic)
            .ok_or_else(|| EmbeddedError::UnknownTopic(topic.to_owned()))?;
        let index = log.index(topic, partition)?;
        let name = Arc::clone(&log.name);
        let epoch = log.partitions[index].bump_leader_epoch();
        let key = (name, partition);
        for group in state.groups.values_mut() {
            if let Some(share) = group.partitions.get_mut(&key) {
                share.fail_over();
            }
        }
        drop(state);
        self.shared.changed.notify_waiters();
        Ok(epoch)
    }

    /// Fault injection (for tests): a rebalance of `group_id` that raises `member_id`'s
    /// member epoch by one, as between a fetch and the staging of its acknowledgements in a
    /// transaction (KIP-1289 checks the epoch then). The member's consumer learns the new
    /// epoch at once (its [`group_metadata`](crate::ShareConsumer::group_metadata) says
    /// it); group metadata taken before is stale. Returns the new epoch.
    ///
    /// # Errors
    ///
    /// [`EmbeddedError::UnknownMember`] when the group has no such member.
    pub fn bump_member_epoch(&self, group_id: &str, member_id: &str) -> Result<i32, EmbeddedError> {
        let mut state = self.shared.lock();
        let member = state
            .groups
            .get_mut(group_id)
            .and_then(|g| g.members.values_mut().find(|m| m.id == member_id))
            .ok_or_else(|| EmbeddedError::UnknownMember {
                group: group_id.to_owned(),
                member_id: member_id.to_owned(),
            })?;
        member.epoch = member.epoch.saturating_add(1);
        Ok(member.epoch)
    }
}
