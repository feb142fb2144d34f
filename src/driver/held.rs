//! Records the driver keeps acquired across polls: written but not yet durable
//! (`ack.policy=after.flush`), or waiting for another `put` (`put.retriable.policy=retry.in.place`).
//! Each remembers when its lock last started, so the driver renews it before it expires.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::record::RecordId;
use crate::time::deadline_after;

/// How long after a renewal whose commit failed the next one is tried, at most (a fraction
/// of the lock when that is shorter): soon, since the locks did not move, but not at once,
/// which would spin while the cluster refuses. The exactly-once iteration's renewals of
/// records waiting for their own transaction use it too.
pub(crate) const RENEWAL_RETRY: Duration = Duration::from_secs(1);

/// Held records and the instant each one's acquisition lock (re)started.
#[derive(Debug, Default)]
pub(crate) struct HeldRecords {
    since: HashMap<RecordId, Instant>,
    /// After a renewal whose commit failed: no renewal comes due before this.
    not_before: Option<Instant>,
}

impl HeldRecords {
    /// Starts holding `id` with a lock that started at `since`; true if it was not held.
    pub(crate) fn insert(&mut self, id: RecordId, since: Instant) -> bool {
        match self.since.entry(id) {
            // Already held: its lock runs from its acquisition or last renewal, which a later
            // time would hide.
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(entry) => {
                entry.insert(since);
                true
            }
        }
    }

    /// When the lock of a held record started (its acquisition or last renewal).
    pub(crate) fn since(&self, id: &RecordId) -> Option<Instant> {
        self.since.get(id).copied()
    }

    /// Stops holding `id`; true if it was held.
    pub(crate) fn remove(&mut self, id: &RecordId) -> bool {
        self.since.remove(id).is_some()
    }

    pub(crate) fn contains(&self, id: &RecordId) -> bool {
        self.since.contains_key(id)
    }

    pub(crate) fn len(&self) -> usize {
        self.since.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.since.is_empty()
    }

    /// The lock of `id` restarted at `now` (a RENEW went out, or it was acquired again).
    pub(crate) fn touch(&mut self, id: &RecordId, now: Instant) {
        if let Some(since) = self.since.get_mut(id) {
            *since = now;
        }
    }

    /// When the first held record reaches half of `lock`, the point at which it is renewed.
    /// A lock too long for the clock (the consumer reports what the broker sent) comes due at
    /// a far deadline, never in practice.
    pub(crate) fn next_due(&self, lock: Duration) -> Option<Instant> {
        self.since
            .values()
            .min()
            .map(|since| self.held_off(deadline_after(*since, lock / 2)))
    }

    /// The held records that reached half of `lock` by `now` (none while a failed renewal's
    /// retry waits).
    pub(crate) fn due(&self, now: Instant, lock: Duration) -> Vec<RecordId> {
        if self.not_before.is_some_and(|at| now < at) {
            return Vec::new();
        }
        self.since
            .iter()
            .filter(|(_, since)| deadline_after(**since, lock / 2) <= now)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// `due`, or later while a failed renewal's retry waits.
    pub(crate) fn held_off(&self, due: Instant) -> Instant {
        self.not_before.map_or(due, |at| due.max(at))
    }

    /// The commit of a renewal failed: the locks may not have moved. Each record of
    /// `previous` (as [`renew`](super::renew) touched it) gets its last known lock start
    /// back, and no renewal comes due for a short while ([`RENEWAL_RETRY`], or an eighth of
    /// the lock if shorter) rather than half a lock later, when the lock may already have
    /// run out.
    pub(crate) fn renewal_failed(
        &mut self,
        previous: &[(RecordId, Instant)],
        now: Instant,
        lock: Duration,
    ) {
        for (id, since) in previous {
            if let Some(held) = self.since.get_mut(id) {
                *held = *since;
            }
        }
        self.not_before = Some(deadline_after(now, RENEWAL_RETRY.min(lock / 8)));
    }

    /// Forgets everything (the consumer released it all).
    pub(crate) fn clear(&mut self) {
        self.since.clear();
        self.not_before = None;
    }
}

/// Connect's retry backoff: 300 ms doubled per attempt, replaced by a random delay below the
/// cap once it would pass `max` (`errors.retry.delay.max.ms`). `attempt` counts from 1.
pub(crate) fn retry_backoff(attempt: u32, max: Duration) -> Duration {
    const MIN: Duration = Duration::from_millis(300);
    let shift = attempt.saturating_sub(1).min(20);
    let delay = MIN.saturating_mul(1 << shift);
    if delay <= max {
        return delay;
    }
    // Jitter, so that many tasks failing together do not retry in lock step.
    let max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    if max_ms == 0 {
        return Duration::ZERO;
    }
    Duration::from_millis(jitter() % max_ms)
}

/// A cheap pseudo-random number: the sub-second clock mixed through a hash. Good enough to
/// spread retries; nothing here needs real randomness.
pub(crate) fn jitter() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_300_ms_then_jitters_below_the_cap() {
        let max = Duration::from_secs(60);
        assert_eq!(retry_backoff(1, max), Duration::from_millis(300));
        assert_eq!(retry_backoff(2, max), Duration::from_millis(600));
        assert_eq!(retry_backoff(8, max), Duration::from_millis(38_400));
        for attempt in [9, 30, u32::MAX] {
            assert!(retry_backoff(attempt, max) < max);
        }
        assert_eq!(retry_backoff(5, Duration::ZERO), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_renewal_keeps_the_old_lock_start_and_is_tried_again_soon() {
        let lock = Duration::from_secs(30);
        let id = RecordId::new("t", 0, 1);
        let mut held = HeldRecords::default();
        let t0 = Instant::now();
        held.insert(id.clone(), t0);
        let at = t0 + Duration::from_secs(15);
        assert_eq!(held.due(at, lock), vec![id.clone()]);
        held.touch(&id, at);
        held.renewal_failed(&[(id.clone(), t0)], at, lock);
        assert_eq!(held.since(&id), Some(t0), "the lock did not move");
        assert!(held.due(at, lock).is_empty(), "not again at once");
        let retry = at + Duration::from_secs(1);
        assert_eq!(held.next_due(lock), Some(retry));
        assert_eq!(held.due(retry, lock), vec![id.clone()]);
        // A later success moves the lock as usual.
        held.touch(&id, retry);
        assert_eq!(held.next_due(lock), Some(retry + Duration::from_secs(15)));
        // Short locks retry within an eighth of the lock.
        let short = Duration::from_secs(4);
        held.renewal_failed(
            &[(id.clone(), retry - Duration::from_secs(2))],
            retry,
            short,
        );
        assert_eq!(
            held.next_due(short),
            Some(retry + Duration::from_millis(500))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn held_records_come_due_at_half_their_lock() {
        let lock = Duration::from_secs(30);
        let mut held = HeldRecords::default();
        let t0 = Instant::now();
        assert!(held.insert(RecordId::new("t", 0, 1), t0));
        assert!(!held.insert(RecordId::new("t", 0, 1), t0));
        held.insert(RecordId::new("t", 0, 2), t0 + Duration::from_secs(10));
        assert_eq!(held.next_due(lock), Some(t0 + Duration::from_secs(15)));
        assert!(held.due(t0 + Duration::from_secs(14), lock).is_empty());
        assert_eq!(
            held.due(t0 + Duration::from_secs(15), lock),
            vec![RecordId::new("t", 0, 1)]
        );
        held.touch(&RecordId::new("t", 0, 1), t0 + Duration::from_secs(15));
        assert_eq!(held.next_due(lock), Some(t0 + Duration::from_secs(25)));
        assert!(held.remove(&RecordId::new("t", 0, 2)));
        assert_eq!(held.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lock_too_long_for_the_clock_comes_due_far_away() {
        let mut held = HeldRecords::default();
        let t0 = Instant::now();
        held.insert(RecordId::new("t", 0, 1), t0);
        let due = held.next_due(Duration::MAX).expect("one held record");
        assert!(due > t0 + Duration::from_secs(10 * 365 * 86_400));
        assert!(
            held.due(t0 + Duration::from_secs(86_400), Duration::MAX)
                .is_empty()
        );
    }
}
