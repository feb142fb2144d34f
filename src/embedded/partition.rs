//! The state of one partition for one share group: KIP-932's in-flight records, free of I/O
//! (time is passed in).
//!
//! Offsets below `start` are terminal (acknowledged or archived); offsets from `end` up to the
//! log end have never been acquired and are available. In between, each offset has a slot.
//! Terminal records below `start` are kept from the first tracked offset on, so tests can
//! inspect them, as runs of equal state and delivery count: the slots form a ring that does not
//! grow with the log.

use std::collections::VecDeque;

use tokio::time::Instant;

use super::GroupConfig;
use crate::consumer::in_flight::AckRun;
use crate::consumer::{AckError, AcknowledgeType};

#[cfg(feature = "exactly-once")]
mod staging;
#[cfg(feature = "exactly-once")]
pub(crate) use self::staging::{Disposition, Staged};
use crate::kafka::ShareAcquireMode;
use crate::time::deadline_after;

/// Member numbers inside the embedded broker.
pub(crate) type MemberKey = u64;

/// The state of a record for a share group (KIP-932, with ARCHIVING from KIP-1191).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RecordState {
    /// Can be acquired by any consumer of the group.
    Available,
    /// Held by one consumer until it acknowledges it or its lock expires.
    Acquired,
    /// Accepted: done for this group.
    Acknowledged,
    /// On its way to the group's dead-letter topic (KIP-1191): rejected, or released or timed
    /// out at the delivery-count limit, in a group with a dead-letter queue
    /// ([`GroupConfig::dead_letter_queue`](super::GroupConfig::dead_letter_queue)). Never
    /// delivered again, and archived once written; not terminal until then, so the
    /// share-partition start offset waits for it.
    Archiving,
    /// Rejected, or released or timed out at the delivery-count limit (and, in a group with a
    /// dead-letter queue, written there): never delivered again.
    Archived,
    /// Acknowledged inside a producer transaction that has not ended yet (KIP-1289's draft
    /// `TX_PENDING`): no consumer can acquire it and no lock expires on it; the
    /// transaction's commit makes it acknowledged (ACCEPT) or archived (REJECT), its abort
    /// (by the producer, by the coordinator after `transaction.timeout.ms`, or by a new
    /// producer with the same transactional id) available again with its delivery count
    /// unchanged. A member leaving, a closed session or a share-partition leader fail-over
    /// leave it as it is.
    #[cfg(feature = "exactly-once")]
    TxPending,
}

impl RecordState {
    /// True for the states a record never leaves.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Acknowledged | Self::Archived)
    }
}

/// Why a record goes to the group's dead-letter topic, with the message Kafka 4.4 writes in
/// its `__dlq.errors.message` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeadLetterCause {
    /// Released, or its lock expired, at the delivery-count limit.
    DeliveryCountExceeded,
    /// A consumer REJECTed it.
    Rejected,
}

impl DeadLetterCause {
    /// Kafka's message (`ShareGroupDLQManager.DELIVERY_COUNT_EXCEEDED`, `CLIENT_REJECT`).
    pub(crate) fn message(self) -> &'static str {
        match self {
            Self::DeliveryCountExceeded => "Offset delivery count exceeded the threshold.",
            Self::Rejected => "Offset rejected by client.",
        }
    }
}

/// A record that entered ARCHIVING and waits to be written to the dead-letter topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeadLetter {
    pub(crate) offset: i64,
    pub(crate) delivery_count: u16,
    pub(crate) cause: DeadLetterCause,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    pub(crate) state: RecordState,
    pub(crate) delivery_count: u16,
    pub(crate) owner: Option<MemberKey>,
    pub(crate) deadline: Option<Instant>,
}

impl Slot {
    /// Ends a delivery attempt that was not accepted: available again, or, once the delivery
    /// count has reached the limit, archived (ARCHIVING first when the group has a
    /// dead-letter queue). Returns true when it enters ARCHIVING.
    fn release(&mut self, config: &GroupConfig) -> bool {
        let exhausted = self.delivery_count >= config.delivery_count_limit;
        let dead_letter = exhausted && config.dead_letter_queue.is_some();
        self.state = if dead_letter {
            RecordState::Archiving
        } else if exhausted {
            RecordState::Archived
        } else {
            RecordState::Available
        };
        self.owner = None;
        self.deadline = None;
        dead_letter
    }
}

/// What one fetch asks of a share partition.
pub(crate) struct AcquireRequest<'a> {
    pub(crate) member: MemberKey,
    pub(crate) now: Instant,
    /// Where the readable log ends (the high watermark, or the last stable offset).
    pub(crate) log_end: i64,
    /// `max.poll.records` left for this partition.
    pub(crate) max: usize,
    pub(crate) mode: ShareAcquireMode,
    /// One past the last offset of the produce batch holding an offset.
    pub(crate) batch_end: &'a dyn Fn(i64) -> i64,
}

/// One acquired record: its offset and delivery count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Acquired {
    pub(crate) offset: i64,
    pub(crate) delivery_count: u16,
}

/// Terminal records with the same state and delivery count, up to `end` (exclusive), from
/// the end of the previous run (or the base offset).
#[derive(Debug, Clone, Copy)]
struct TerminalRun {
    end: i64,
    state: RecordState,
    delivery_count: u16,
}

#[derive(Debug)]
pub(crate) struct SharePartition {
    /// First offset the group tracks (where it started reading).
    base: i64,
    /// Share-partition start offset: every offset below is terminal.
    start: i64,
    /// Share-partition end offset: one past the last offset ever acquired.
    end: i64,
    /// The records from `start` to `end`, the first at the front.
    slots: VecDeque<Slot>,
    /// The records from `base` to `start`, all terminal, in runs.
    terminal: Vec<TerminalRun>,
    /// No lock expires before this instant.
    next_deadline: Option<Instant>,
    /// Records that entered ARCHIVING and are not written to the dead-letter topic yet.
    dead_letters: Vec<DeadLetter>,
    /// The transaction of each TX_PENDING record, by offset.
    #[cfg(feature = "exactly-once")]
    staged: std::collections::BTreeMap<i64, Staged>,
}

impl SharePartition {
    pub(crate) fn new(start_offset: i64) -> Self {
        Self {
            base: start_offset,
            start: start_offset,
            end: start_offset,
            slots: VecDeque::new(),
            terminal: Vec::new(),
            next_deadline: None,
            dead_letters: Vec::new(),
            #[cfg(feature = "exactly-once")]
            staged: std::collections::BTreeMap::new(),
        }
    }

    /// Ends the attempt of the slot at `index` that was not accepted (see [`Slot::release`]),
    /// queueing a dead letter when it enters ARCHIVING.
    fn release_slot(&mut self, index: usize, config: &GroupConfig) {
        let offset = self.start + index as i64;
        let slot = &mut self.slots[index];
        if slot.release(config) {
            self.dead_letters.push(DeadLetter {
                offset,
                delivery_count: slot.delivery_count,
                cause: DeadLetterCause::DeliveryCountExceeded,
            });
        }
    }

    /// Takes the records that entered ARCHIVING since the last call, to write them to the
    /// dead-letter topic and then [`archive`](Self::archive) them.
    pub(crate) fn take_dead_letters(&mut self) -> Vec<DeadLetter> {
        std::mem::take(&mut self.dead_letters)
    }

    /// ARCHIVING → ARCHIVED once the record is written (or could not be: Kafka archives it
    /// all the same).
    pub(crate) fn archive(&mut self, offset: i64) {
        if let Some(i) = self.index(offset) {
            let slot = &mut self.slots[i];
            if slot.state == RecordState::Archiving {
                slot.state = RecordState::Archived;
            }
        }
        self.advance_start();
    }

    /// Archives a record just acquired that is never delivered (a transaction marker, or a
    /// record of an aborted transaction under read_committed), as Kafka does: not through
    /// the dead-letter queue, whatever its delivery count.
    pub(crate) fn archive_undeliverable(&mut self, offset: i64) {
        if let Some(i) = self.index(offset) {
            let slot = &mut self.slots[i];
            if slot.state == RecordState::Acquired {
                slot.state = RecordState::Archived;
                slot.owner = None;
                slot.deadline = None;
            }
        }
        self.advance_start();
    }

    pub(crate) fn start_offset(&self) -> i64 {
        self.start
    }

    pub(crate) fn end_offset(&self) -> i64 {
        self.end
    }

    pub(crate) fn base_offset(&self) -> i64 {
        self.base
    }

    /// Records from the start offset to `log_end` that are not done (acknowledged or
    /// archived) yet: the group's lag in this partition, as Kafka 4.4 counts it.
    pub(crate) fn lag(&self, log_end: i64) -> i64 {
        let done = self.slots.iter().filter(|s| s.state.is_terminal()).count();
        log_end
            .saturating_sub(self.start)
            .saturating_sub(i64::try_from(done).unwrap_or(i64::MAX))
            .max(0)
    }

    /// The earliest lock deadline, for waking pollers.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.next_deadline
    }

    /// The index in `slots` of an offset inside the window.
    fn index(&self, offset: i64) -> Option<usize> {
        if offset < self.start || offset >= self.end {
            return None;
        }
        usize::try_from(offset - self.start).ok()
    }

    /// The slot of an offset that has been acquired at least once.
    pub(crate) fn slot(&self, offset: i64) -> Option<Slot> {
        if let Some(i) = self.index(offset) {
            return Some(self.slots[i]);
        }
        if offset < self.base || offset >= self.start {
            return None;
        }
        let run = self.terminal[self.terminal.partition_point(|r| r.end <= offset)];
        Some(Slot {
            state: run.state,
            delivery_count: run.delivery_count,
            owner: None,
            deadline: None,
        })
    }

    /// Expires the locks whose deadline has passed. Returns true if any record changed.
    pub(crate) fn expire(&mut self, now: Instant, config: &GroupConfig) -> bool {
        match self.next_deadline {
            Some(deadline) if deadline <= now => {}
            _ => return false,
        }
        let mut changed = false;
        let mut next: Option<Instant> = None;
        for i in 0..self.slots.len() {
            let slot = &self.slots[i];
            if slot.state != RecordState::Acquired {
                continue;
            }
            match slot.deadline {
                Some(d) if d <= now => {
                    self.release_slot(i, config);
                    changed = true;
                }
                Some(d) => next = Some(next.map_or(d, |n: Instant| n.min(d))),
                None => {}
            }
        }
        #[cfg(feature = "exactly-once")]
        {
            changed |= self.expire_staged(now, &mut next);
        }
        self.next_deadline = next;
        self.advance_start();
        changed
    }

    fn advance_start(&mut self) {
        let done = self
            .slots
            .iter()
            .position(|slot| !slot.state.is_terminal())
            .unwrap_or(self.slots.len());
        if done == 0 {
            return;
        }
        debug_assert!(
            self.slots
                .range(..done)
                .all(|s| s.owner.is_none() && s.deadline.is_none())
        );
        // Runs of the same state and delivery count: one terminal run each.
        let mut offset = self.start;
        let mut slots = self.slots.range(..done).peekable();
        while let Some(first) = slots.next() {
            let key = (first.state, first.delivery_count);
            offset += 1;
            while slots
                .next_if(|s| (s.state, s.delivery_count) == key)
                .is_some()
            {
                offset += 1;
            }
            match self.terminal.last_mut() {
                Some(run) if (run.state, run.delivery_count) == key => run.end = offset,
                _ => self.terminal.push(TerminalRun {
                    end: offset,
                    state: key.0,
                    delivery_count: key.1,
                }),
            }
        }
        self.slots.drain(..done);
        self.start = offset;
    }

    fn lock(&mut self, slot_index: usize, member: MemberKey, deadline: Instant) -> Acquired {
        let slot = &mut self.slots[slot_index];
        slot.state = RecordState::Acquired;
        slot.delivery_count = slot.delivery_count.saturating_add(1);
        slot.owner = Some(member);
        slot.deadline = Some(deadline);
        self.next_deadline = Some(self.next_deadline.map_or(deadline, |n| n.min(deadline)));
        Acquired {
            offset: self.start + slot_index as i64,
            delivery_count: slot.delivery_count,
        }
    }

    /// Acquires records for the request's member, lowest offsets first: records available
    /// again inside the window, then new records up to the request's log end, as a Kafka
    /// 4.4 broker does (`SharePartition.acquire`):
    ///
    /// - The in-flight window (from the start to the end offset) is compared with
    ///   `share.partition.max.record.locks` before acquiring, not per record: while it is
    ///   below the cap, up to `min(max, cap - window)` records are acquired, and in
    ///   `batch_optimized` mode the last batch is taken whole, so the window can pass the
    ///   cap; once it is at or over the cap, only records available again inside it are
    ///   acquired.
    /// - `batch_optimized`: whole produce batches (of the records still available in them),
    ///   so a fetch can return more than `max`; `record_limit`: at most `max` records. A new
    ///   batch enters the window whole in both modes; in `record_limit` its records past
    ///   `max` stay available there.
    pub(crate) fn acquire(
        &mut self,
        request: &AcquireRequest<'_>,
        config: &GroupConfig,
        out: &mut Vec<Acquired>,
    ) {
        let &AcquireRequest {
            member,
            now,
            log_end,
            max,
            mode,
            batch_end,
        } = request;
        self.expire(now, config);
        let deadline = deadline_after(now, config.record_lock_duration);
        let strict = mode == ShareAcquireMode::RecordLimit;
        let limit = i64::try_from(config.partition_max_record_locks).unwrap_or(i64::MAX);
        let room = limit.saturating_sub(self.end - self.start);
        let budget = if room > 0 {
            max.min(usize::try_from(room).unwrap_or(usize::MAX))
        } else {
            max
        };
        let mut taken = 0;
        // Records available again inside the window, batch by batch.
        let mut i = 0;
        while i < self.slots.len() && taken < budget {
            if self.slots[i].state != RecordState::Available {
                i += 1;
                continue;
            }
            let stop = if strict {
                i + 1
            } else {
                let offset = self.start + i as i64;
                let batch_end = batch_end(offset).min(self.end).max(offset + 1);
                usize::try_from(batch_end - self.start).unwrap_or(self.slots.len())
            };
            for j in i..stop.min(self.slots.len()) {
                if self.slots[j].state == RecordState::Available {
                    out.push(self.lock(j, member, deadline));
                    taken += 1;
                }
            }
            i = stop;
        }
        if room <= 0 || taken >= budget || log_end <= self.end {
            return;
        }
        // New records, acquired for the first time.
        let first = self.end;
        let remaining = i64::try_from(budget - taken).unwrap_or(i64::MAX);
        let wanted_end = first.saturating_add(remaining).min(log_end);
        let window_end = batch_end(wanted_end - 1).min(log_end).max(wanted_end);
        let acquired_end = if strict { wanted_end } else { window_end };
        // Every new record is alike: acquired (`first..acquired_end`), then available.
        let acquired = usize::try_from(acquired_end.min(window_end) - first).unwrap_or(0);
        let available = usize::try_from(window_end - first)
            .unwrap_or(0)
            .saturating_sub(acquired);
        let locked = Slot {
            state: RecordState::Acquired,
            delivery_count: 1,
            owner: Some(member),
            deadline: Some(deadline),
        };
        let free = Slot {
            state: RecordState::Available,
            delivery_count: 0,
            owner: None,
            deadline: None,
        };
        self.slots.extend(
            std::iter::repeat_n(locked, acquired).chain(std::iter::repeat_n(free, available)),
        );
        out.extend((first..).take(acquired).map(|offset| Acquired {
            offset,
            delivery_count: 1,
        }));
        self.end = window_end;
        self.next_deadline = Some(self.next_deadline.map_or(deadline, |n| n.min(deadline)));
    }

    /// True if `member` holds `offset` under a lock that has not expired.
    pub(crate) fn is_held_by(&self, offset: i64, member: MemberKey, now: Instant) -> bool {
        self.slot(offset).is_some_and(|s| {
            s.state == RecordState::Acquired
                && s.owner == Some(member)
                && s.deadline.is_some_and(|d| d > now)
        })
    }

    /// The first offset of `run` that `member` does not hold (acquired, by it), if any. A
    /// record acquired by anyone is inside the window.
    fn first_not_held(&self, run: &AckRun, member: MemberKey) -> Option<i64> {
        if run.first > run.last {
            return None;
        }
        if run.first < self.start || run.first >= self.end {
            return Some(run.first);
        }
        let first = usize::try_from(run.first - self.start).ok()?;
        let last = usize::try_from(run.last.min(self.end - 1) - self.start).ok()?;
        let held = |s: &Slot| s.state == RecordState::Acquired && s.owner == Some(member);
        match self.slots.range(first..=last).position(|s| !held(s)) {
            Some(at) => Some(run.first + i64::try_from(at).unwrap_or(i64::MAX)),
            // Past the window's end, its first offset fails.
            None if run.last >= self.end => Some(self.end),
            None => None,
        }
    }

    /// Applies `member`'s acknowledgements, all or none: if any record is not held by the
    /// member, nothing changes and the error says which.
    pub(crate) fn acknowledge(
        &mut self,
        member: MemberKey,
        runs: &[AckRun],
        now: Instant,
        config: &GroupConfig,
    ) -> Result<(), AckError> {
        self.expire(now, config);
        if !config.renew_acknowledge_enable && runs.iter().any(|r| r.ack == AcknowledgeType::Renew)
        {
            // What a Kafka 4.4 broker answers for the partition (SharePartition.acknowledge).
            return Err(AckError::InvalidRecordState {
                detail: "Renewing acquisition locks is not enabled for the group \
                         (share.renew.acknowledge.enable=false)"
                    .to_owned(),
            });
        }
        // All or none: every offset is checked before any changes.
        for run in runs {
            if let Some(offset) = self.first_not_held(run, member) {
                let why = match self.slot(offset) {
                    None => "it was never acquired".to_owned(),
                    Some(s) if s.state == RecordState::Acquired => {
                        "it is acquired by another member".to_owned()
                    }
                    Some(s) => format!(
                        "it is {:?}, not acquired by this member (its lock may have expired)",
                        s.state
                    ),
                };
                return Err(AckError::InvalidRecordState {
                    detail: format!("offset {offset}: {why}"),
                });
            }
        }
        let deadline = deadline_after(now, config.record_lock_duration);
        for run in runs {
            // Held, so inside the window (checked above); an empty run names nothing.
            let (Some(first), Some(last)) = (self.index(run.first), self.index(run.last)) else {
                continue;
            };
            if first > last {
                continue;
            }
            match run.ack {
                AcknowledgeType::Accept => {
                    for slot in self.slots.range_mut(first..=last) {
                        slot.state = RecordState::Acknowledged;
                        slot.owner = None;
                        slot.deadline = None;
                    }
                }
                AcknowledgeType::Release => {
                    for i in first..=last {
                        self.release_slot(i, config);
                    }
                }
                AcknowledgeType::Reject => {
                    // With a dead-letter queue a 4.4 broker writes rejected records there too.
                    let dead_letter = config.dead_letter_queue.is_some();
                    for (slot, offset) in self.slots.range_mut(first..=last).zip(run.first..) {
                        slot.state = if dead_letter {
                            self.dead_letters.push(DeadLetter {
                                offset,
                                delivery_count: slot.delivery_count,
                                cause: DeadLetterCause::Rejected,
                            });
                            RecordState::Archiving
                        } else {
                            RecordState::Archived
                        };
                        slot.owner = None;
                        slot.deadline = None;
                    }
                }
                AcknowledgeType::Renew => {
                    for slot in self.slots.range_mut(first..=last) {
                        slot.deadline = Some(deadline);
                    }
                }
            }
        }
        self.advance_start();
        Ok(())
    }

    /// A share-partition leader fail-over: the new leader knows only what was persisted, and
    /// an acquisition never is. Every acquired record becomes available again with the
    /// delivery count it had before that acquisition; acknowledged, archived (and, with
    /// KIP-1289, TX_PENDING) records stay as they are. Returns true if any record changed.
    pub(crate) fn fail_over(&mut self) -> bool {
        let mut changed = false;
        for slot in &mut self.slots {
            if slot.state == RecordState::Acquired {
                slot.state = RecordState::Available;
                slot.delivery_count = slot.delivery_count.saturating_sub(1);
                slot.owner = None;
                slot.deadline = None;
                changed = true;
            }
        }
        // No lock is left; TX_PENDING timeouts may be.
        self.next_deadline = None;
        #[cfg(feature = "exactly-once")]
        {
            let mut next = None;
            self.staged_deadlines(&mut next);
            self.next_deadline = next;
        }
        changed
    }

    /// Releases every record `member` holds (session close). Returns true if any did.
    pub(crate) fn release_member(&mut self, member: MemberKey, config: &GroupConfig) -> bool {
        let mut changed = false;
        for i in 0..self.slots.len() {
            let slot = &self.slots[i];
            if slot.state == RecordState::Acquired && slot.owner == Some(member) {
                self.release_slot(i, config);
                changed = true;
            }
        }
        self.advance_start();
        changed
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// One run per offset.
    fn runs(acks: &[(i64, AcknowledgeType)]) -> Vec<AckRun> {
        acks.iter()
            .map(|&(offset, ack)| AckRun {
                first: offset,
                last: offset,
                ack,
            })
            .collect()
    }

    fn config() -> GroupConfig {
        GroupConfig::new()
            .record_lock_duration(Duration::from_secs(10))
            .delivery_count_limit(3)
            .partition_max_record_locks(4)
    }

    /// Every offset a batch of its own.
    fn single(offset: i64) -> i64 {
        offset + 1
    }

    fn request(
        member: MemberKey,
        now: Instant,
        log_end: i64,
        max: usize,
    ) -> AcquireRequest<'static> {
        AcquireRequest {
            member,
            now,
            log_end,
            max,
            mode: ShareAcquireMode::BatchOptimized,
            batch_end: &single,
        }
    }

    fn acquire(
        p: &mut SharePartition,
        member: MemberKey,
        now: Instant,
        log_end: i64,
        max: usize,
    ) -> Vec<Acquired> {
        let mut out = Vec::new();
        p.acquire(&request(member, now, log_end, max), &config(), &mut out);
        out
    }

    fn offsets(acquired: &[Acquired]) -> Vec<i64> {
        acquired.iter().map(|a| a.offset).collect()
    }

    /// Batches of ten: 0..10, 10..20, ...
    fn tens(offset: i64) -> i64 {
        (offset / 10 + 1) * 10
    }

    #[test]
    fn batch_optimized_takes_whole_batches_and_may_pass_the_cap() {
        let now = Instant::now();
        let mut p = SharePartition::new(0);
        let mut out = Vec::new();
        let batched = |member, max| AcquireRequest {
            batch_end: &tens,
            ..request(member, now, 40, max)
        };
        // max 3: the whole first batch.
        p.acquire(&batched(1, 3), &config(), &mut out);
        assert_eq!(offsets(&out), (0..10).collect::<Vec<_>>());
        // The window (10) is past the cap (4): nothing new, for anyone.
        out.clear();
        p.acquire(&batched(2, 3), &config(), &mut out);
        assert!(out.is_empty());
        // Released records come back batch-aligned, even past the cap.
        let release: Vec<_> = (2..10).map(|o| (o, AcknowledgeType::Release)).collect();
        p.acknowledge(1, &runs(&release), now, &config()).unwrap();
        p.acknowledge(
            1,
            &runs(&[(0, AcknowledgeType::Accept), (1, AcknowledgeType::Accept)]),
            now,
            &config(),
        )
        .unwrap();
        assert_eq!((p.start_offset(), p.end_offset()), (2, 10));
        out.clear();
        p.acquire(&batched(2, 1), &config(), &mut out);
        assert_eq!(
            offsets(&out),
            (2..10).collect::<Vec<_>>(),
            "the rest of the batch"
        );
        assert!(out.iter().all(|a| a.delivery_count == 2));
    }

    #[test]
    fn record_limit_takes_at_most_max_and_leaves_the_rest_of_the_batch_available() {
        let now = Instant::now();
        let mut p = SharePartition::new(0);
        let mut out = Vec::new();
        let strict = |member, max| AcquireRequest {
            batch_end: &tens,
            mode: ShareAcquireMode::RecordLimit,
            ..request(member, now, 40, max)
        };
        p.acquire(&strict(1, 3), &config(), &mut out);
        assert_eq!(offsets(&out), [0, 1, 2]);
        assert_eq!(p.end_offset(), 10, "the whole batch entered the window");
        assert_eq!(
            p.slot(5).map(|s| (s.state, s.delivery_count)),
            Some((RecordState::Available, 0))
        );
        out.clear();
        p.acquire(&strict(2, 3), &config(), &mut out);
        assert_eq!(offsets(&out), [3, 4, 5], "inside the window, past the cap");
        assert!(out.iter().all(|a| a.delivery_count == 1));
    }

    #[test]
    fn window_is_bounded_by_record_locks_and_shrinks_on_acknowledge() {
        let now = Instant::now();
        let mut p = SharePartition::new(0);
        let got = acquire(&mut p, 1, now, 10, 100);
        assert_eq!(got.len(), 4, "max record locks bounds the window");
        assert!(acquire(&mut p, 2, now, 10, 100).is_empty());
        p.acknowledge(
            1,
            &runs(&[(0, AcknowledgeType::Accept), (1, AcknowledgeType::Reject)]),
            now,
            &config(),
        )
        .unwrap();
        assert_eq!(p.start_offset(), 2);
        let got = acquire(&mut p, 2, now, 10, 100);
        assert_eq!(got.iter().map(|a| a.offset).collect::<Vec<_>>(), vec![4, 5]);
        // Records below the start stay inspectable, in order.
        let terminal = |p: &SharePartition, o| p.slot(o).map(|s| (s.state, s.delivery_count));
        assert_eq!(terminal(&p, 0), Some((RecordState::Acknowledged, 1)));
        assert_eq!(terminal(&p, 1), Some((RecordState::Archived, 1)));
        p.acknowledge(
            1,
            &runs(&[(2, AcknowledgeType::Accept), (3, AcknowledgeType::Accept)]),
            now,
            &config(),
        )
        .unwrap();
        assert_eq!(p.start_offset(), 4);
        for (offset, state) in [
            (0, RecordState::Acknowledged),
            (1, RecordState::Archived),
            (2, RecordState::Acknowledged),
            (3, RecordState::Acknowledged),
            (4, RecordState::Acquired),
        ] {
            let slot = p.slot(offset).unwrap();
            assert_eq!(slot.state, state, "offset {offset}");
            assert_eq!(slot.owner.is_some(), state == RecordState::Acquired);
        }
        assert!(p.slot(6).is_none(), "never acquired");
    }

    /// Kafka's `SharePartition.canAcquireRecords` compares the window (start to end
    /// offset), not the records still locked, with the cap: terminal records in the middle
    /// of the window still count; only moving the start frees room. Same numbers as the
    /// parity scenario `a_holder_at_the_cap_gets_more_only_when_the_window_start_moves`.
    #[test]
    fn only_a_moving_start_frees_room_under_the_cap() {
        let now = Instant::now();
        let config = config().partition_max_record_locks(100);
        let mut p = SharePartition::new(0);
        let mut out = Vec::new();
        let batched = AcquireRequest {
            batch_end: &tens,
            ..request(1, now, 200, 1000)
        };
        p.acquire(&batched, &config, &mut out);
        assert_eq!(offsets(&out), (0..100).collect::<Vec<_>>());
        let accept = |first, last| AckRun {
            first,
            last,
            ack: AcknowledgeType::Accept,
        };
        p.acknowledge(1, &[accept(40, 49)], now, &config).unwrap();
        out.clear();
        p.acquire(&batched, &config, &mut out);
        assert!(out.is_empty(), "90 locked, but the window is still 0..100");
        p.acknowledge(1, &[accept(0, 9)], now, &config).unwrap();
        assert_eq!(p.start_offset(), 10);
        p.acquire(&batched, &config, &mut out);
        assert_eq!(offsets(&out), (100..110).collect::<Vec<_>>());
    }

    #[test]
    fn a_run_names_the_first_offset_not_held_and_applies_to_every_offset() {
        let now = Instant::now();
        let config = config().partition_max_record_locks(100);
        let mut p = SharePartition::new(0);
        let mut out = Vec::new();
        p.acquire(&request(1, now, 4, 4), &config, &mut out);
        p.acquire(&request(2, now, 5, 1), &config, &mut out);
        p.acquire(&request(1, now, 8, 3), &config, &mut out);
        let run = |first, last, ack| AckRun { first, last, ack };
        let failing = |p: &mut SharePartition, r: AckRun| {
            p.acknowledge(1, &[r], now, &config)
                .unwrap_err()
                .to_string()
        };
        // Member 2 holds offset 4, in the middle; the window ends at 8.
        let err = failing(&mut p, run(2, 6, AcknowledgeType::Accept));
        assert!(
            err.contains("offset 4: it is acquired by another member"),
            "{err}"
        );
        let err = failing(&mut p, run(5, 9, AcknowledgeType::Accept));
        assert!(err.contains("offset 8: it was never acquired"), "{err}");
        assert!(
            (0..8).all(|o| p.slot(o).unwrap().state == RecordState::Acquired),
            "nothing applied"
        );
        p.acknowledge(
            1,
            &[
                run(0, 1, AcknowledgeType::Accept),
                run(2, 3, AcknowledgeType::Reject),
                run(5, 6, AcknowledgeType::Release),
                run(7, 7, AcknowledgeType::Renew),
            ],
            now,
            &config,
        )
        .expect("all held");
        let state = |o| p.slot(o).unwrap().state;
        assert_eq!(
            (0..8).map(state).collect::<Vec<_>>(),
            [
                RecordState::Acknowledged,
                RecordState::Acknowledged,
                RecordState::Archived,
                RecordState::Archived,
                RecordState::Acquired,
                RecordState::Available,
                RecordState::Available,
                RecordState::Acquired,
            ]
        );
        assert_eq!(p.start_offset(), 4, "the terminal head leaves the window");
        let err = failing(&mut p, run(2, 4, AcknowledgeType::Accept));
        assert!(err.contains("offset 2: it is Archived"), "{err}");
        // A run the wrong way round names no record: nothing changes, nothing fails.
        p.acknowledge(1, &[run(7, 4, AcknowledgeType::Accept)], now, &config)
            .expect("an empty run");
        assert_eq!(p.slot(7).unwrap().state, RecordState::Acquired);
    }

    #[test]
    fn acknowledgements_are_atomic_per_partition() {
        let now = Instant::now();
        let mut p = SharePartition::new(0);
        acquire(&mut p, 1, now, 2, 1);
        acquire(&mut p, 2, now, 2, 1);
        let err = p
            .acknowledge(
                1,
                &runs(&[(0, AcknowledgeType::Accept), (1, AcknowledgeType::Accept)]),
                now,
                &config(),
            )
            .unwrap_err();
        assert!(err.is_lock_lost());
        assert!(err.to_string().contains("offset 1"), "{err}");
        assert_eq!(
            p.slot(0).unwrap().state,
            RecordState::Acquired,
            "nothing applied"
        );
    }

    #[test]
    fn release_at_the_limit_archives() {
        let mut now = Instant::now();
        let mut p = SharePartition::new(0);
        for attempt in 1..=3 {
            let got = acquire(&mut p, 1, now, 1, 1);
            assert_eq!(
                got,
                vec![Acquired {
                    offset: 0,
                    delivery_count: attempt
                }]
            );
            now += Duration::from_secs(10);
            assert!(p.expire(now, &config()));
        }
        assert_eq!(p.slot(0).unwrap().state, RecordState::Archived);
        assert!(acquire(&mut p, 1, now, 1, 1).is_empty());
        assert!(p.take_dead_letters().is_empty(), "no dead-letter queue");
    }

    #[test]
    fn with_a_dead_letter_queue_the_limit_and_reject_go_through_archiving() {
        let config = config().dead_letter_queue("dlq.orders", false);
        let mut now = Instant::now();
        let mut p = SharePartition::new(0);
        let mut out = Vec::new();
        // Offset 0 times out on all three deliveries; offset 1 is rejected on its first.
        p.acquire(&request(1, now, 2, 2), &config, &mut out);
        p.acknowledge(1, &runs(&[(1, AcknowledgeType::Reject)]), now, &config)
            .unwrap();
        for _ in 0..3 {
            now += Duration::from_secs(10);
            p.expire(now, &config);
            out.clear();
            p.acquire(&request(1, now, 2, 2), &config, &mut out);
        }
        assert!(out.is_empty(), "neither is delivered again");
        let state = |p: &SharePartition, o| p.slot(o).map(|s| (s.state, s.delivery_count));
        assert_eq!(state(&p, 0), Some((RecordState::Archiving, 3)));
        assert_eq!(state(&p, 1), Some((RecordState::Archiving, 1)));
        assert_eq!(p.start_offset(), 0, "ARCHIVING is not terminal");
        let letters = p.take_dead_letters();
        assert_eq!(
            letters,
            [
                DeadLetter {
                    offset: 1,
                    delivery_count: 1,
                    cause: DeadLetterCause::Rejected
                },
                DeadLetter {
                    offset: 0,
                    delivery_count: 3,
                    cause: DeadLetterCause::DeliveryCountExceeded
                },
            ]
        );
        assert!(p.take_dead_letters().is_empty(), "taken once");
        p.archive(0);
        assert_eq!(state(&p, 0), Some((RecordState::Archived, 3)));
        assert_eq!(p.start_offset(), 1);
        p.archive(1);
        assert_eq!(p.start_offset(), 2);
        assert_eq!(state(&p, 1), Some((RecordState::Archived, 1)));
    }

    #[test]
    fn a_member_leaving_at_the_limit_queues_a_dead_letter() {
        let config = config().dead_letter_queue("dlq.orders", false);
        let now = Instant::now();
        let mut p = SharePartition::new(0);
        let mut out = Vec::new();
        for _ in 0..3 {
            out.clear();
            p.acquire(&request(7, now, 1, 1), &config, &mut out);
            assert!(p.release_member(7, &config));
        }
        assert_eq!(p.slot(0).map(|s| s.state), Some(RecordState::Archiving));
        assert_eq!(p.take_dead_letters().len(), 1);
    }
}
