//! KIP-1289 (draft) in the share partition: acknowledgements staged into a producer
//! transaction (TX_PENDING), and the COMMIT or ABORT marker that resolves them. Free of I/O,
//! like the rest of the share partition.

use tokio::time::Instant;

use super::{DeadLetter, DeadLetterCause, MemberKey, RecordState, SharePartition};
use crate::embedded::GroupConfig;
use crate::embedded::log::TxnOutcome;

/// What a staged acknowledgement becomes when its transaction commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Disposition {
    /// ACCEPT: acknowledged.
    Accept,
    /// REJECT: archived (through the dead-letter queue when the group has one).
    Reject,
}

/// The transaction a TX_PENDING record waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Staged {
    pub(crate) producer_id: i64,
    pub(crate) producer_epoch: i16,
    pub(crate) disposition: Disposition,
    pub(crate) member: MemberKey,
    /// When the record reverts to AVAILABLE if no marker came
    /// (`Kip1289Rules::txn_pending_timeout`; none in the draft).
    pub(crate) expires: Option<Instant>,
}

impl SharePartition {
    /// Checks that `member` may stage `acks`: every offset acquired by it under a lock that
    /// has not expired at `now`, each offset once. Says what is wrong otherwise. Expire the
    /// partition first so that expired locks are seen as released.
    pub(crate) fn check_stage(
        &self,
        member: MemberKey,
        acks: &[(i64, Disposition)],
        now: Instant,
    ) -> Result<(), String> {
        let mut offsets: Vec<i64> = acks.iter().map(|(o, _)| *o).collect();
        offsets.sort_unstable();
        if let Some(w) = offsets.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("offset {} is acknowledged twice", w[0]));
        }
        for &(offset, _) in acks {
            let Some(slot) = self.slot(offset) else {
                return Err(format!("offset {offset}: it was never acquired"));
            };
            let why = match slot.state {
                RecordState::Acquired if slot.owner != Some(member) => {
                    "it is acquired by another member"
                }
                RecordState::Acquired if slot.deadline.is_some_and(|d| d <= now) => {
                    "its acquisition lock expired"
                }
                RecordState::Acquired => continue,
                RecordState::TxPending => "it is staged in a transaction already (TX_PENDING)",
                RecordState::Available => "it is available: its lock expired or it was released",
                _ => "it is acknowledged or archived already",
            };
            return Err(format!("offset {offset}: {why}"));
        }
        Ok(())
    }

    /// Stages `acks` (checked with [`check_stage`](Self::check_stage)) into the transaction
    /// of (`producer_id`, `producer_epoch`): ACQUIRED → TX_PENDING, the lock deadline gone
    /// (the transaction's timeout governs the hold). `expires` is the TX_PENDING timeout, if
    /// any.
    pub(crate) fn stage(
        &mut self,
        member: MemberKey,
        (producer_id, producer_epoch): (i64, i16),
        acks: &[(i64, Disposition)],
        expires: Option<Instant>,
    ) {
        for &(offset, disposition) in acks {
            let Some(i) = self.index(offset) else {
                continue;
            };
            let slot = &mut self.slots[i];
            if slot.state != RecordState::Acquired || slot.owner != Some(member) {
                continue;
            }
            slot.state = RecordState::TxPending;
            slot.deadline = None;
            self.staged.insert(
                offset,
                Staged {
                    producer_id,
                    producer_epoch,
                    disposition,
                    member,
                    expires,
                },
            );
        }
        if let Some(expires) = expires {
            self.next_deadline = Some(self.next_deadline.map_or(expires, |n| n.min(expires)));
        }
    }

    /// The transaction a TX_PENDING record waits for.
    pub(crate) fn staged(&self, offset: i64) -> Option<Staged> {
        self.staged.get(&offset).copied()
    }

    /// Applies the marker of the transaction of (`producer_id`, `producer_epoch`) to the
    /// records it staged; records of any other transaction are left alone.
    ///
    /// - COMMIT: ACCEPT → ACKNOWLEDGED; REJECT → ARCHIVED, or ARCHIVING (then the
    ///   dead-letter topic) when the group has a dead-letter queue.
    /// - ABORT: AVAILABLE with the delivery count unchanged, as the draft does, even at the
    ///   delivery-count limit; with `archive_at_limit`, a record at the limit is archived
    ///   instead (through the dead-letter queue when the group has one).
    ///
    /// Returns true if any record changed.
    pub(crate) fn apply_marker(
        &mut self,
        (producer_id, producer_epoch): (i64, i16),
        outcome: TxnOutcome,
        archive_at_limit: bool,
        config: &GroupConfig,
    ) -> bool {
        let offsets: Vec<i64> = self
            .staged
            .iter()
            .filter(|(_, s)| s.producer_id == producer_id && s.producer_epoch == producer_epoch)
            .map(|(o, _)| *o)
            .collect();
        for &offset in &offsets {
            let Some(staged) = self.staged.remove(&offset) else {
                continue;
            };
            let Some(i) = self.index(offset) else {
                continue;
            };
            if self.slots[i].state != RecordState::TxPending {
                continue;
            }
            match (outcome, staged.disposition) {
                (TxnOutcome::Commit, Disposition::Accept) => {
                    self.settle_slot(i, RecordState::Acknowledged);
                }
                (TxnOutcome::Commit, Disposition::Reject) => {
                    if config.dead_letter_queue.is_some() {
                        self.dead_letters.push(DeadLetter {
                            offset,
                            delivery_count: self.slots[i].delivery_count,
                            cause: DeadLetterCause::Rejected,
                        });
                        self.settle_slot(i, RecordState::Archiving);
                    } else {
                        self.settle_slot(i, RecordState::Archived);
                    }
                }
                (TxnOutcome::Abort, _) if archive_at_limit => self.release_slot(i, config),
                (TxnOutcome::Abort, _) => self.settle_slot(i, RecordState::Available),
            }
        }
        if !offsets.is_empty() {
            self.advance_start();
        }
        !offsets.is_empty()
    }

    /// Puts the slot at `index` in `state`, held by no one.
    fn settle_slot(&mut self, index: usize, state: RecordState) {
        let slot = &mut self.slots[index];
        slot.state = state;
        slot.owner = None;
        slot.deadline = None;
    }

    /// TX_PENDING records past their timeout (if one is set) become available again with
    /// their delivery count unchanged, as an abort would make them. Adds the timeouts still
    /// to come to `next`. Returns true if any record changed.
    pub(super) fn expire_staged(&mut self, now: Instant, next: &mut Option<Instant>) -> bool {
        let due: Vec<i64> = self
            .staged
            .iter()
            .filter(|(_, s)| s.expires.is_some_and(|e| e <= now))
            .map(|(o, _)| *o)
            .collect();
        for offset in &due {
            self.staged.remove(offset);
            if let Some(i) = self.index(*offset) {
                if self.slots[i].state == RecordState::TxPending {
                    self.settle_slot(i, RecordState::Available);
                }
            }
        }
        self.staged_deadlines(next);
        !due.is_empty()
    }

    /// Adds the TX_PENDING timeouts to come to `next`.
    pub(super) fn staged_deadlines(&self, next: &mut Option<Instant>) {
        for expires in self.staged.values().filter_map(|s| s.expires) {
            *next = Some(next.map_or(expires, |n| n.min(expires)));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{AcquireRequest, Acquired};
    use super::*;
    use crate::consumer::AcknowledgeType;
    use crate::kafka::ShareAcquireMode;

    const TXN: (i64, i16) = (7, 3);

    fn config() -> GroupConfig {
        GroupConfig::new()
            .record_lock_duration(Duration::from_secs(10))
            .delivery_count_limit(3)
    }

    fn single(offset: i64) -> i64 {
        offset + 1
    }

    fn acquire(p: &mut SharePartition, member: MemberKey, now: Instant, log_end: i64) -> Vec<i64> {
        let mut out: Vec<Acquired> = Vec::new();
        let request = AcquireRequest {
            member,
            now,
            log_end,
            max: 100,
            mode: ShareAcquireMode::BatchOptimized,
            batch_end: &single,
        };
        p.acquire(&request, &config(), &mut out);
        out.iter().map(|a| a.offset).collect()
    }

    fn state(p: &SharePartition, offset: i64) -> (RecordState, u16) {
        let s = p.slot(offset).unwrap();
        (s.state, s.delivery_count)
    }

    fn staged(
        p: &mut SharePartition,
        member: MemberKey,
        acks: &[(i64, Disposition)],
        now: Instant,
    ) {
        p.check_stage(member, acks, now).unwrap();
        p.stage(member, TXN, acks, None);
    }

    #[test]
    fn commit_accepts_and_archives_what_was_staged() {
        let now = Instant::now();
        let mut p = SharePartition::new(0);
        assert_eq!(acquire(&mut p, 1, now, 3), [0, 1, 2]);
        staged(
            &mut p,
            1,
            &[(0, Disposition::Accept), (1, Disposition::Reject)],
            now,
        );
        assert_eq!(state(&p, 0), (RecordState::TxPending, 1));
        assert_eq!(p.slot(0).unwrap().deadline, None, "the lock is cancelled");
        assert_eq!(
            p.staged(1).map(|s| s.disposition),
            Some(Disposition::Reject)
        );
        // Another transaction's marker changes nothing.
        assert!(!p.apply_marker((7, 4), TxnOutcome::Commit, false, &config()));
        assert!(!p.apply_marker((8, 3), TxnOutcome::Abort, false, &config()));
        assert_eq!(state(&p, 0).0, RecordState::TxPending);
        assert!(p.apply_marker(TXN, TxnOutcome::Commit, false, &config()));
        assert_eq!(state(&p, 0), (RecordState::Acknowledged, 1));
        assert_eq!(state(&p, 1), (RecordState::Archived, 1));
        assert_eq!(
            state(&p, 2).0,
            RecordState::Acquired,
            "not staged: untouched"
        );
        assert_eq!(p.start_offset(), 2);
        assert!(p.take_dead_letters().is_empty());
    }

    #[test]
    fn commit_of_a_reject_goes_through_the_dead_letter_queue_when_the_group_has_one() {
        let config = config().dead_letter_queue("dlq.t", false);
        let now = Instant::now();
        let mut p = SharePartition::new(0);
        acquire(&mut p, 1, now, 1);
        staged(&mut p, 1, &[(0, Disposition::Reject)], now);
        p.apply_marker(TXN, TxnOutcome::Commit, false, &config);
        assert_eq!(state(&p, 0).0, RecordState::Archiving);
        let letters = p.take_dead_letters();
        assert_eq!(letters.len(), 1);
        assert_eq!(letters[0].cause, DeadLetterCause::Rejected);
    }

    #[test]
    fn abort_makes_available_with_the_count_unchanged_even_at_the_limit() {
        let mut now = Instant::now();
        let mut p = SharePartition::new(0);
        // Three deliveries: the count reaches the limit (3).
        for _ in 0..2 {
            acquire(&mut p, 1, now, 1);
            now += Duration::from_secs(10);
            p.expire(now, &config());
        }
        acquire(&mut p, 1, now, 1);
        assert_eq!(state(&p, 0), (RecordState::Acquired, 3));
        staged(&mut p, 1, &[(0, Disposition::Accept)], now);
        assert!(p.apply_marker(TXN, TxnOutcome::Abort, false, &config()));
        assert_eq!(
            state(&p, 0),
            (RecordState::Available, 3),
            "the draft: no archive check"
        );
        assert_eq!(p.slot(0).unwrap().owner, None);
        assert_eq!(acquire(&mut p, 2, now, 1), [0], "delivered a fourth time");
        assert_eq!(state(&p, 0), (RecordState::Acquired, 4));

        // The switch: abort at the limit archives.
        let mut p = SharePartition::new(0);
        for _ in 0..2 {
            acquire(&mut p, 1, now, 1);
            now += Duration::from_secs(10);
            p.expire(now, &config());
        }
        acquire(&mut p, 1, now, 1);
        staged(&mut p, 1, &[(0, Disposition::Accept)], now);
        p.apply_marker(TXN, TxnOutcome::Abort, true, &config());
        assert_eq!(state(&p, 0), (RecordState::Archived, 3));
    }

    #[test]
    fn staging_is_all_or_nothing_and_needs_an_unexpired_lock_of_the_member() {
        let now = Instant::now();
        let mut p = SharePartition::new(0);
        acquire(&mut p, 1, now, 2);
        p.acknowledge(
            1,
            &[crate::consumer::in_flight::AckRun {
                first: 1,
                last: 1,
                ack: AcknowledgeType::Release,
            }],
            now,
            &config(),
        )
        .unwrap();
        acquire(&mut p, 2, now, 2);
        assert_eq!(state(&p, 1), (RecordState::Acquired, 2));
        let err = p
            .check_stage(
                1,
                &[(0, Disposition::Accept), (1, Disposition::Accept)],
                now,
            )
            .unwrap_err();
        assert!(
            err.contains("offset 1") && err.contains("another member"),
            "{err}"
        );
        assert!(
            p.check_stage(1, &[(5, Disposition::Accept)], now)
                .unwrap_err()
                .contains("never")
        );
        let twice = [(0, Disposition::Accept), (0, Disposition::Reject)];
        assert!(p.check_stage(1, &twice, now).unwrap_err().contains("twice"));
        // A lock at its deadline has expired, even before `expire` ran.
        let late = now + Duration::from_secs(10);
        let err = p
            .check_stage(1, &[(0, Disposition::Accept)], late)
            .unwrap_err();
        assert!(err.contains("expired"), "{err}");
        assert_eq!(state(&p, 0).0, RecordState::Acquired, "nothing staged");
        // Staged once, it cannot be staged again.
        staged(&mut p, 1, &[(0, Disposition::Accept)], now);
        let err = p
            .check_stage(1, &[(0, Disposition::Accept)], now)
            .unwrap_err();
        assert!(err.contains("TX_PENDING"), "{err}");
    }

    #[test]
    fn tx_pending_is_not_acquired_expired_released_or_forgotten_by_a_fail_over() {
        let mut now = Instant::now();
        let mut p = SharePartition::new(0);
        acquire(&mut p, 1, now, 2);
        staged(&mut p, 1, &[(0, Disposition::Accept)], now);
        // The lock of offset 1 expires; offset 0 has none any more.
        now += Duration::from_secs(60);
        assert!(p.expire(now, &config()));
        assert_eq!(state(&p, 0).0, RecordState::TxPending);
        assert_eq!(
            acquire(&mut p, 2, now, 2),
            [1],
            "only the record that was not staged"
        );
        assert!(
            !p.release_member(1, &config()),
            "the member leaving releases nothing"
        );
        assert!(p.release_member(2, &config()));
        assert_eq!(state(&p, 0).0, RecordState::TxPending);
        // A fail-over forgets acquisitions, not TX_PENDING.
        acquire(&mut p, 3, now, 2);
        assert_eq!(state(&p, 1), (RecordState::Acquired, 3));
        assert!(p.fail_over());
        assert_eq!(
            state(&p, 1),
            (RecordState::Available, 2),
            "count rolled back"
        );
        assert_eq!(state(&p, 0).0, RecordState::TxPending);
        assert_eq!(p.next_deadline(), None);
        p.apply_marker(TXN, TxnOutcome::Commit, false, &config());
        assert_eq!(state(&p, 0).0, RecordState::Acknowledged);
    }

    #[test]
    fn a_tx_pending_timeout_makes_the_record_available_when_set() {
        let now = Instant::now();
        let mut p = SharePartition::new(0);
        acquire(&mut p, 1, now, 1);
        p.check_stage(1, &[(0, Disposition::Accept)], now).unwrap();
        p.stage(
            1,
            TXN,
            &[(0, Disposition::Accept)],
            Some(now + Duration::from_secs(100)),
        );
        assert_eq!(p.next_deadline(), Some(now + Duration::from_secs(10)));
        assert!(!p.expire(now + Duration::from_secs(99), &config()));
        assert_eq!(p.next_deadline(), Some(now + Duration::from_secs(100)));
        assert!(p.expire(now + Duration::from_secs(100), &config()));
        assert_eq!(state(&p, 0), (RecordState::Available, 1));
        assert!(
            !p.apply_marker(TXN, TxnOutcome::Commit, false, &config()),
            "too late"
        );
        assert_eq!(state(&p, 0).0, RecordState::Available);
    }
}
