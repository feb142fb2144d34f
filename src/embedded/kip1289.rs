//! KIP-1289 (draft) in the embedded broker: share acknowledgements staged into a producer
//! transaction, resolved by its COMMIT or ABORT marker, with the draft's unsettled rules as
//! switches ([`Kip1289Rules`]) and the capabilities the broker advertises.
//!
//! The model follows the draft of apache/kafka PR #22357: staging needs the member's current
//! epoch and records the member acquired under a lock that has not expired; staged records
//! are TX_PENDING (no lock, not acquirable, kept across member leave and leader fail-over)
//! until the transaction ends; its commit acknowledges or archives them, its abort (by the
//! producer, by the coordinator after `transaction.timeout.ms`, or by a new producer with the
//! same transactional id) makes them available with their delivery count unchanged.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::log::TxnOutcome;
use super::partition::{Disposition, MemberKey};
use super::txn::{Ended, ProducerIdEpoch, Stale};
use super::{EmbeddedBroker, State};
use crate::consumer::{AcknowledgeType, GroupMetadata};
use crate::exactly_once::{ClusterCapabilities, ShareAcknowledgements};
use crate::time::deadline_after;

/// The rules of KIP-1289 that its draft has not settled, as switches of the embedded broker
/// ([`EmbeddedBroker::set_kip1289_rules`]), so that a test can pin one variant. The defaults
/// are the draft's (apache/kafka PR #22357).
///
/// ```
/// use std::time::Duration;
/// use kafka_share_sink::embedded::Kip1289Rules;
///
/// let rules = Kip1289Rules::draft()
///     .marker_delay(Duration::from_millis(200))
///     .abort_archives_at_limit(true);
/// assert!(rules.require_tv2);
/// assert_eq!(rules.txn_pending_timeout, None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Kip1289Rules {
    /// An abort makes a staged record available with its delivery count unchanged, even at
    /// `share.delivery.count.limit` (the draft, default false); true archives a record at the
    /// limit instead (through the group's dead-letter queue when it has one).
    pub abort_archives_at_limit: bool,
    /// How long after EndTxn the markers take effect (default zero): during it the
    /// transaction's outputs stay invisible to `read_committed` and its staged records stay
    /// TX_PENDING, although the commit has returned (the draft's unsettled resolution
    /// latency). Only EndTxn is delayed: aborts by the coordinator (timeout, fencing) take
    /// effect at once. The producer's next `begin_transaction` or `init_transactions`
    /// waits for them, as a Kafka client retries CONCURRENT_TRANSACTIONS.
    pub marker_delay: Duration,
    /// With a [`marker_delay`](Self::marker_delay), the first `begin_transaction` while the
    /// markers are still pending fails once with a retriable CONCURRENT_TRANSACTIONS
    /// ([`ProducerError::Kafka`](crate::producer::ProducerError::Kafka)) instead of waiting
    /// (default false).
    pub concurrent_txn_on_next_begin: bool,
    /// Staging needs `transaction.version` 2 in the broker's
    /// [capabilities](EmbeddedBroker::set_capabilities) (the draft, default true).
    pub require_tv2: bool,
    /// A TX_PENDING record whose transaction has not ended after this long becomes available
    /// again with its delivery count unchanged (default none: the draft has no such timeout,
    /// only the transaction's own timeout ends the hold). A transaction committing after its
    /// records timed out commits its outputs without them: the hazard this switch exists to
    /// show.
    pub txn_pending_timeout: Option<Duration>,
}

impl Default for Kip1289Rules {
    fn default() -> Self {
        Self::draft()
    }
}

impl Kip1289Rules {
    /// The draft's rules: no archive at the limit on abort, markers at once, no
    /// CONCURRENT_TRANSACTIONS on begin, transactions v2 required, no TX_PENDING timeout.
    pub fn draft() -> Self {
        Self {
            abort_archives_at_limit: false,
            marker_delay: Duration::ZERO,
            concurrent_txn_on_next_begin: false,
            require_tv2: true,
            txn_pending_timeout: None,
        }
    }

    /// Sets [`abort_archives_at_limit`](Self::abort_archives_at_limit).
    pub fn abort_archives_at_limit(mut self, archive: bool) -> Self {
        self.abort_archives_at_limit = archive;
        self
    }

    /// Sets [`marker_delay`](Self::marker_delay).
    pub fn marker_delay(mut self, delay: Duration) -> Self {
        self.marker_delay = delay;
        self
    }

    /// Sets [`concurrent_txn_on_next_begin`](Self::concurrent_txn_on_next_begin).
    pub fn concurrent_txn_on_next_begin(mut self, refuse: bool) -> Self {
        self.concurrent_txn_on_next_begin = refuse;
        self
    }

    /// Sets [`require_tv2`](Self::require_tv2).
    pub fn require_tv2(mut self, require: bool) -> Self {
        self.require_tv2 = require;
        self
    }

    /// Sets [`txn_pending_timeout`](Self::txn_pending_timeout).
    pub fn txn_pending_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.txn_pending_timeout = timeout;
        self
    }
}

/// What the embedded broker advertises by default: a KIP-1289 cluster (share.version 3,
/// transaction.version 2, the RPC, RENEW supported and enabled).
pub(crate) fn kip1289_capable() -> ClusterCapabilities {
    ClusterCapabilities::none()
        .with_share_version(3)
        .with_transaction_version(2)
        .with_transactional_share_acknowledge(true)
        .with_renew(true, true)
}

/// The markers of a transaction ended by EndTxn, waiting for [`Kip1289Rules::marker_delay`].
#[derive(Debug)]
struct PendingMarkers {
    transactional_id: String,
    due: Instant,
    ended: Ended,
    outcome: TxnOutcome,
    /// A `begin_transaction` was refused with CONCURRENT_TRANSACTIONS already.
    begin_refused: bool,
}

/// The broker's KIP-1289 settings and the markers still to apply.
#[derive(Debug)]
pub(crate) struct Kip1289State {
    rules: Kip1289Rules,
    capabilities: ClusterCapabilities,
    pending: Vec<PendingMarkers>,
}

impl Default for Kip1289State {
    fn default() -> Self {
        Self {
            rules: Kip1289Rules::draft(),
            capabilities: kip1289_capable(),
            pending: Vec::new(),
        }
    }
}

/// The acknowledgements of one share partition in a request: (topic, partition) and
/// (offset, disposition) pairs.
type PartitionStaging = ((Arc<str>, i32), Vec<(i64, Disposition)>);

/// Why staging share acknowledgements was refused, as the draft's broker answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StageError {
    /// The cluster lacks share.version 3 or transactions v2 (UNSUPPORTED_VERSION).
    Unsupported(String),
    /// The producer's epoch is not current.
    Stale(Stale),
    /// GROUP_ID_NOT_FOUND, UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH.
    Membership {
        code: i16,
        name: &'static str,
        detail: String,
    },
    /// INVALID_RECORD_STATE: a record not acquired by the member, or its lock expired.
    InvalidRecordState(String),
    /// INVALID_REQUEST: a type other than ACCEPT or REJECT, an offset twice.
    InvalidRequest(String),
}

impl State {
    /// Ends a transaction's markers: at once, or after [`Kip1289Rules::marker_delay`] when
    /// it is set and `delayable` (an EndTxn).
    pub(crate) fn finish_transaction(
        &mut self,
        transactional_id: &str,
        ended: Ended,
        outcome: TxnOutcome,
        delayable: bool,
        now: Instant,
    ) {
        let delay = self.kip1289.rules.marker_delay;
        if delayable && !delay.is_zero() {
            self.kip1289.pending.push(PendingMarkers {
                transactional_id: transactional_id.to_owned(),
                due: deadline_after(now, delay),
                ended,
                outcome,
                begin_refused: false,
            });
        } else {
            self.write_markers(&ended, outcome);
        }
    }

    /// Writes the delayed markers due at `now`. Returns true if any were.
    pub(crate) fn write_due_markers(&mut self, now: Instant) -> bool {
        self.write_pending(|p| p.due <= now)
    }

    /// Writes the delayed markers of `transactional_id`, whatever their time: its producer
    /// waits for them before it goes on.
    pub(crate) fn flush_markers(&mut self, transactional_id: &str) -> bool {
        self.write_pending(|p| p.transactional_id == transactional_id)
    }

    fn write_pending(&mut self, due: impl Fn(&PendingMarkers) -> bool) -> bool {
        if self.kip1289.pending.is_empty() {
            return false;
        }
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.kip1289.pending)
            .into_iter()
            .partition(due);
        self.kip1289.pending = waiting;
        let wrote = !ready.is_empty();
        for pending in ready {
            self.write_markers(&pending.ended, pending.outcome);
        }
        wrote
    }

    /// When the next delayed marker is due.
    pub(crate) fn next_marker_due(&self) -> Option<Instant> {
        self.kip1289.pending.iter().map(|p| p.due).min()
    }

    /// With [`Kip1289Rules::concurrent_txn_on_next_begin`], true (once) when
    /// `transactional_id` still has markers pending: its `begin_transaction` is refused.
    pub(crate) fn refuse_begin(&mut self, transactional_id: &str) -> bool {
        if !self.kip1289.rules.concurrent_txn_on_next_begin {
            return false;
        }
        let mut refused = false;
        for pending in &mut self.kip1289.pending {
            if pending.transactional_id == transactional_id && !pending.begin_refused {
                pending.begin_refused = true;
                refused = true;
            }
        }
        refused
    }

    /// Applies a transaction's marker to the share partitions holding its staged
    /// acknowledgements, then writes the dead letters of its REJECTs.
    pub(crate) fn apply_share_markers(&mut self, ended: &Ended, outcome: TxnOutcome) {
        let archive_at_limit = self.kip1289.rules.abort_archives_at_limit;
        let txn = (ended.producer_id, ended.producer_epoch);
        let mut groups: Vec<&str> = Vec::new();
        for (group_id, topic, partition) in &ended.share_partitions {
            let Some(group) = self.groups.get_mut(group_id) else {
                continue;
            };
            if let Some(share) = group.partitions.get_mut(&(topic.clone(), *partition)) {
                share.apply_marker(txn, outcome, archive_at_limit, &group.config);
                if !groups.contains(&group_id.as_str()) {
                    groups.push(group_id);
                }
            }
        }
        for group_id in groups {
            self.settle_group(group_id);
        }
    }

    pub(crate) fn kip1289_rules(&self) -> &Kip1289Rules {
        &self.kip1289.rules
    }

    /// What the broker advertises, for `group_id`: RENEW counts as enabled only where the
    /// group's `share.renew.acknowledge.enable` is on.
    pub(crate) fn capabilities(&self, group_id: &str) -> ClusterCapabilities {
        let caps = self.kip1289.capabilities;
        let group_renew = self
            .groups
            .get(group_id)
            .is_none_or(|g| g.config.renew_acknowledge_enable);
        caps.with_renew(caps.renew, caps.renew_enabled_for_group && group_renew)
    }

    /// TxnShareAcknowledge: stages `acks` of `group`'s member into the open transaction of
    /// `transactional_id` at (`current`), all or nothing. The checks, in order: the cluster's
    /// capabilities; the producer epoch; the acknowledgement types; the group, member and
    /// member epoch; every record acquired by the member under a lock not expired at `now`.
    pub(crate) fn stage_share_acknowledgements(
        &mut self,
        transactional_id: &str,
        current: ProducerIdEpoch,
        group: &GroupMetadata,
        acks: &ShareAcknowledgements,
        now: Instant,
    ) -> Result<(), StageError> {
        let caps = self.kip1289.capabilities;
        if caps.share_version < 3 || !caps.transactional_share_acknowledge {
            return Err(StageError::Unsupported(format!(
                "the cluster has share.version {} (KIP-1289 transactional share acknowledgements \
                 need share.version 3 finalized): settle the records with the consumer instead",
                caps.share_version
            )));
        }
        if caps.transaction_version < 2 && self.kip1289.rules.require_tv2 {
            return Err(StageError::Unsupported(format!(
                "transactional share acknowledgements require transaction.version 2 or newer; \
                 the cluster has {}",
                caps.transaction_version
            )));
        }
        self.coordinator
            .check(transactional_id, current)
            .map_err(StageError::Stale)?;
        if acks.is_empty() {
            return Ok(());
        }
        // Per partition: the topic name the group keys it by, and the acknowledgements.
        let mut partitions: Vec<PartitionStaging> = Vec::new();
        for (tp, batches) in acks.iter() {
            let mut list = Vec::new();
            for batch in batches {
                for (offset, ack) in batch.iter() {
                    let disposition = match ack {
                        AcknowledgeType::Accept => Disposition::Accept,
                        AcknowledgeType::Reject => Disposition::Reject,
                        other => {
                            return Err(StageError::InvalidRequest(format!(
                                "{other:?} of offset {offset} of {tp}: only ACCEPT and REJECT \
                                 can be staged in a transaction"
                            )));
                        }
                    };
                    list.push((offset, disposition));
                }
            }
            partitions.push(((tp.topic_name().to_arc(), tp.partition()), list));
        }
        let member = self.validate_member(group)?;
        let group_id = group.group_id();
        let result = self.check_staging(group_id, member, &partitions, now);
        if let Err(detail) = result {
            // Expiry may have sent records to ARCHIVING.
            self.settle_group(group_id);
            return Err(StageError::InvalidRecordState(detail));
        }
        let expires = self
            .kip1289
            .rules
            .txn_pending_timeout
            .map(|t| deadline_after(now, t));
        for ((topic, partition), list) in &partitions {
            let key = (group_id.to_owned(), topic.clone(), *partition);
            self.coordinator
                .add_share_partition(transactional_id, current, key, now)
                .map_err(StageError::Stale)?;
            if let Some(share) = self
                .groups
                .get_mut(group_id)
                .and_then(|g| g.partitions.get_mut(&(topic.clone(), *partition)))
            {
                share.stage(member, current, list, expires);
            }
        }
        self.settle_group(group_id);
        Ok(())
    }

    /// The member's key, if the group has it at the epoch `group` names.
    fn validate_member(&self, group: &GroupMetadata) -> Result<MemberKey, StageError> {
        let Some(state) = self.groups.get(group.group_id()) else {
            return Err(StageError::Membership {
                code: 69,
                name: "GROUP_ID_NOT_FOUND",
                detail: format!("there is no share group `{}`", group.group_id()),
            });
        };
        let Some((key, member)) = state
            .members
            .iter()
            .find(|(_, m)| m.id == group.member_id())
        else {
            return Err(StageError::Membership {
                code: 25,
                name: "UNKNOWN_MEMBER_ID",
                detail: format!(
                    "member `{}` is not in share group `{}` (it left, or its consumer closed)",
                    group.member_id(),
                    group.group_id()
                ),
            });
        };
        if member.epoch != group.member_epoch() {
            return Err(StageError::Membership {
                code: 113,
                name: "STALE_MEMBER_EPOCH",
                detail: format!(
                    "member `{}` of share group `{}` is at epoch {}, not {}: take the \
                     consumer's group_metadata again after the transaction is aborted",
                    group.member_id(),
                    group.group_id(),
                    member.epoch,
                    group.member_epoch()
                ),
            });
        }
        Ok(*key)
    }

    /// Expires the locks of the partitions staged into, then checks every acknowledgement.
    fn check_staging(
        &mut self,
        group_id: &str,
        member: MemberKey,
        partitions: &[PartitionStaging],
        now: Instant,
    ) -> Result<(), String> {
        let Some(group) = self.groups.get_mut(group_id) else {
            return Err(format!("there is no share group `{group_id}`"));
        };
        for ((topic, partition), list) in partitions {
            let Some(share) = group.partitions.get_mut(&(topic.clone(), *partition)) else {
                return Err(format!(
                    "partition {partition} of `{topic}`: the group has never read it"
                ));
            };
            share.expire(now, &group.config);
            share
                .check_stage(member, list, now)
                .map_err(|e| format!("partition {partition} of `{topic}`, {e}"))?;
        }
        Ok(())
    }
}

impl EmbeddedBroker {
    /// Sets the rules of KIP-1289 its draft has not settled (for tests): see
    /// [`Kip1289Rules`]. They apply from the next call on; markers already delayed keep
    /// their time.
    pub fn set_kip1289_rules(&self, rules: Kip1289Rules) {
        self.shared.lock().kip1289.rules = rules;
        self.shared.changed.notify_waiters();
    }

    /// The rules of KIP-1289 in force.
    pub fn kip1289_rules(&self) -> Kip1289Rules {
        self.shared.lock().kip1289_rules().clone()
    }

    /// Sets what the broker advertises for exactly-once (for tests): by default a KIP-1289
    /// cluster (share.version 3, transaction.version 2, transactional share
    /// acknowledgements, RENEW supported and enabled). `share_version` below 3 or
    /// `transactional_share_acknowledge` off make
    /// [`send_share_acknowledgements`](crate::producer::Producer::send_share_acknowledgements)
    /// fail with [`ProducerError::Unsupported`](crate::producer::ProducerError::Unsupported),
    /// as does `transaction_version` below 2 under [`Kip1289Rules::require_tv2`]. What the
    /// embedded group does otherwise does not change: set
    /// [`GroupConfig::renew_acknowledge_enable`](super::GroupConfig::renew_acknowledge_enable)
    /// to turn RENEW off for a group.
    ///
    /// ```
    /// use kafka_share_sink::embedded::EmbeddedBroker;
    /// use kafka_share_sink::exactly_once::{ClusterCapabilities, ExactlyOnceCluster};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let broker = EmbeddedBroker::new();
    /// assert!(broker.capabilities("sink").await?.atomic_acknowledgements());
    /// let kafka_4_4 = ClusterCapabilities::none()
    ///     .with_share_version(2)
    ///     .with_transaction_version(2)
    ///     .with_renew(true, true);
    /// broker.set_capabilities(kafka_4_4);
    /// assert!(!broker.capabilities("sink").await?.atomic_acknowledgements());
    /// # Ok(()) }
    /// ```
    pub fn set_capabilities(&self, capabilities: ClusterCapabilities) {
        self.shared.lock().kip1289.capabilities = capabilities;
    }

    /// The producer id and epoch of the transaction a TX_PENDING record is staged in, for
    /// tests; `None` for a record in any other state.
    pub fn staged_transaction(
        &self,
        group_id: &str,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Option<(i64, i16)> {
        let state = self.shared.lock();
        let share = state
            .groups
            .get(group_id)?
            .partitions
            .get(&(Arc::from(topic), partition))?;
        share
            .staged(offset)
            .map(|s| (s.producer_id, s.producer_epoch))
    }
}
