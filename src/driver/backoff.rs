//! The redelivery backoff: a batch whose `put` failed with a retriable error is held, its
//! locks renewed, for a delay that grows with the records' delivery count before it is
//! RELEASEd (`redelivery.backoff.ms`, doubled per delivery, up to `redelivery.backoff.max.ms`,
//! less up to a fifth at random).
//!
//! The delay depends on nothing but the delivery count the broker hands out with each
//! record, so it survives a restart: a record that comes back with a high count after a
//! crash is held as long as if the same process had seen its earlier deliveries.
//!
//! # Where a process can die
//!
//! While the batch is held nothing about it is acknowledged but its records on their last
//! allowed delivery: those are given up on (dead-lettered, then rejected or accepted) before
//! the hold begins, not when it ends. Released after the backoff the group would archive
//! them anyway, and a process that died during the backoff would leave them to expire on
//! their last delivery and be archived without a dead-letter write. Dropped, or dead, the
//! driver leaves the other records acquired by a member that no longer renews them; their
//! locks expire and the group delivers them again. [`close`](super::ShareSinkTask::close)
//! releases them at once. Nothing is lost either way.

use std::collections::HashSet;
use std::time::Duration;

use tokio::time::Instant;

use super::failure::Failure;
use super::held::jitter;
use super::{ErrorChain, IterationReport, ShareSinkTask};
use crate::consumer::{ConsumerCapability, ShareConsumer};
use crate::dlq::DeadLetterReason;
use crate::error::{Result, TaskError};
use crate::record::RecordId;
use crate::time::deadline_after;

/// The default first redelivery backoff (`redelivery.backoff.ms`): 3 s, doubled per
/// delivery. With the broker's default delivery-count limit of 5, the four backoffs before
/// the last delivery add up to at least 36 s (45 s before jitter), so a target down for
/// half a minute costs no record its last delivery.
pub const DEFAULT_REDELIVERY_BACKOFF: Duration = Duration::from_secs(3);

/// The default cap of the redelivery backoff (`redelivery.backoff.max.ms`): 60 s, Connect's
/// `errors.retry.delay.max.ms`.
pub const DEFAULT_REDELIVERY_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// Jitter takes up to `1 / JITTER_DIVISOR` off the delay, never adds to it: the cap is a
/// cap, and the least total is what the defaults are argued on.
const JITTER_DIVISOR: u64 = 5;

/// The redelivery backoff schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RedeliveryBackoff {
    initial: Duration,
    max: Duration,
}

impl Default for RedeliveryBackoff {
    fn default() -> Self {
        Self::new(DEFAULT_REDELIVERY_BACKOFF, DEFAULT_REDELIVERY_BACKOFF_MAX)
    }
}

impl RedeliveryBackoff {
    /// `initial` doubled per delivery up to `max` (raised to `initial` when below it). A
    /// zero `initial` turns the backoff off.
    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max: max.max(initial),
        }
    }

    pub(crate) fn is_off(&self) -> bool {
        self.initial.is_zero()
    }

    /// The delay before jitter for a record on its `delivery_count`-th delivery (counted
    /// from 1; 0 is taken as 1): `initial × 2^(delivery_count − 1)`, at most `max`.
    pub(crate) fn nominal(&self, delivery_count: u16) -> Duration {
        let doublings = u32::from(delivery_count.saturating_sub(1));
        1u32.checked_shl(doublings)
            .and_then(|factor| self.initial.checked_mul(factor))
            .map_or(self.max, |delay| delay.min(self.max))
    }

    /// The delay for `delivery_count`, with up to a fifth taken off by `random`: between
    /// `nominal × 4/5` and `nominal`.
    pub(crate) fn delay(&self, delivery_count: u16, random: u64) -> Duration {
        let nominal = self.nominal(delivery_count);
        let nanos = u64::try_from(nominal.as_nanos()).unwrap_or(u64::MAX);
        let spread = nanos / JITTER_DIVISOR;
        // `spread + 1` cannot overflow: `spread` is at most a fifth of `u64::MAX`.
        let cut = random % (spread + 1);
        Duration::from_nanos(nanos - cut)
    }

    /// The least time a batch failing on every delivery is held before it reaches delivery
    /// `last`: the sum of the shortest delays of deliveries `1..last`, saturating.
    pub(crate) fn least_before(&self, last: u16) -> Duration {
        (1..last)
            .map(|count| self.least(count))
            .fold(Duration::ZERO, Duration::saturating_add)
    }

    /// The shortest delay jitter can give for `delivery_count`.
    fn least(&self, delivery_count: u16) -> Duration {
        let nominal = self.nominal(delivery_count);
        nominal.saturating_sub(nominal / 5)
    }
}

/// A batch held for its redelivery backoff: the error that failed it and when it is
/// released.
#[derive(Debug)]
pub(crate) struct PendingRelease {
    pub(crate) release_at: Instant,
    pub(crate) error: TaskError,
    /// The batch's records on their last allowed delivery, given up on when the hold began
    /// (or, if that dead-letter write was cut short, by the iteration after it): the
    /// release leaves them alone. Their ids, not the rule that chose them: the group's
    /// delivery-count limit may change meanwhile.
    pub(crate) given_up: HashSet<RecordId>,
}

impl<C: ShareConsumer> ShareSinkTask<C> {
    /// Whether a failed batch can be held for the backoff: explicit acknowledgement (checked
    /// by the caller), a consumer that holds records across polls and renews their locks,
    /// and a backoff that is on.
    pub(super) fn can_hold_for_redelivery(&mut self) -> bool {
        !self.config.redelivery_backoff.is_off()
            && self
                .consumer
                .capabilities()
                .contains(ConsumerCapability::Hold)
            && self.can_renew()
    }

    /// After a retriable `put` error (explicit acknowledgement): holds the batch until its
    /// redelivery backoff, counted from `since` (the first failure of this delivery), has
    /// passed, and returns `None`; or returns the error when the batch is to be released at
    /// once (the backoff is over or off, the consumer cannot hold, or every record is on
    /// its last allowed delivery, where a release would not bring it back).
    ///
    /// The delay is the error's own backoff when it asks for one
    /// ([`TaskError::with_backoff`]), else the schedule's for the highest delivery count in
    /// the batch below the last allowed one. Records of the batch on their last allowed
    /// delivery are given up on at once (see the module), the rest held.
    ///
    /// Cancel safe: the batch is held, and its release pending, before the dead-letter write;
    /// dropped during it, the next iteration writes those records again
    /// (`interrupted_write`).
    pub(super) async fn hold_for_redelivery(
        &mut self,
        error: TaskError,
        since: Instant,
        report: &mut IterationReport,
    ) -> Result<Option<TaskError>> {
        let last = self.last_delivery_limit();
        let Some(count) = self
            .batch
            .iter()
            .map(|r| r.delivery_count())
            .filter(|count| *count < last)
            .max()
        else {
            return Ok(Some(error));
        };
        if !self.can_hold_for_redelivery() {
            return Ok(Some(error));
        }
        let delay = error
            .backoff()
            .unwrap_or_else(|| self.config.redelivery_backoff.delay(count, jitter()));
        let release_at = deadline_after(since, delay);
        if release_at <= Instant::now() {
            return Ok(Some(error));
        }
        for record in &self.batch {
            let id = record.original_id();
            if self.held.insert(id.clone(), self.batch_acquired) {
                self.consumer
                    .hold_offset(id.topic(), id.partition(), id.offset())?;
            }
        }
        let n = self.batch.len();
        tracing::warn!(
            records = n,
            delivery_count = count,
            ?delay,
            error = %ErrorChain(&error),
            "put failed; holding the batch for its redelivery backoff before releasing it"
        );
        let failure = Failure::of_put(&error, DeadLetterReason::DeliveryLimit);
        let last_deliveries = self.last_deliveries(&HashSet::new());
        let given_up: HashSet<RecordId> = last_deliveries
            .iter()
            .map(|&i| self.batch[i].original_id().clone())
            .collect();
        self.redelivery = Some(PendingRelease {
            release_at,
            error,
            given_up,
        });
        self.give_up_last_deliveries(&last_deliveries, failure, report)
            .await?;
        report.retained += n.saturating_sub(last_deliveries.len());
        Ok(None)
    }

    /// Waits out the redelivery backoff of a held batch, if any, renewing its locks.
    ///
    /// Cancel safe: dropped, the batch stays held and the next call waits for the rest.
    pub(super) async fn wait_redelivery_backoff(&mut self) {
        if let Some(at) = self.redelivery.as_ref().map(|p| p.release_at) {
            self.sleep_renewing(at).await;
        }
    }

    /// Waits out the redelivery backoff of a held batch, if any, then releases it (records on
    /// their last allowed delivery are dead-lettered and rejected as after any failed `put`,
    /// but for those given up on when the hold began).
    pub(super) async fn release_after_backoff(
        &mut self,
        report: &mut IterationReport,
    ) -> Result<()> {
        self.wait_redelivery_backoff().await;
        let Some(pending) = self.redelivery.take() else {
            return Ok(());
        };
        self.release_failed_batch(&pending.error, &pending.given_up, report)
            .await?;
        // The backoff was the pause: poll at once.
        self.backoff_until = None;
        Ok(())
    }

    /// At `initialize`: says what the backoff gives, or why it cannot apply.
    pub(super) fn log_redelivery_backoff(&mut self) {
        let backoff = self.config.redelivery_backoff;
        if backoff.is_off() || self.implicit() {
            return;
        }
        let capabilities = self.consumer.capabilities();
        if !capabilities.contains(ConsumerCapability::Hold)
            || !capabilities.contains(ConsumerCapability::Renew)
        {
            tracing::warn!(
                "redelivery.backoff.ms: the consumer cannot hold records across polls and renew \
                 their locks (RENEW, Kafka 4.2+), so a batch whose put fails with a retriable \
                 error is released at once and each failure spends a delivery within seconds"
            );
            return;
        }
        let limit = self.group_delivery_limit();
        tracing::info!(
            delivery_count_limit = limit,
            least_before_last_delivery = ?backoff.least_before(limit),
            "redelivery backoff: a batch whose put keeps failing with a retriable error is \
             held this long at least before its last delivery"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn the_delay_doubles_per_delivery_up_to_the_cap() {
        let b = RedeliveryBackoff::default();
        let nominal: Vec<Duration> = (1..=7).map(|d| b.nominal(d)).collect();
        assert_eq!(nominal, [S(3), S(6), S(12), S(24), S(48), S(60), S(60)]);
        assert_eq!(b.nominal(0), S(3), "a count of 0 is the first delivery");
        assert_eq!(b.nominal(u16::MAX), S(60));
    }

    #[test]
    fn jitter_takes_at_most_a_fifth_off_and_never_passes_the_cap() {
        let b = RedeliveryBackoff::default();
        for count in [1, 2, 4, 6, 100, u16::MAX] {
            let nominal = b.nominal(count);
            for random in [0, 1, 7, 1 << 40, u64::MAX - 1, u64::MAX] {
                let delay = b.delay(count, random);
                assert!(delay <= nominal, "{count} {random}: {delay:?}");
                assert!(delay >= nominal * 4 / 5, "{count} {random}: {delay:?}");
            }
        }
        assert_eq!(b.delay(1, 0), S(3));
        let spread: std::collections::BTreeSet<Duration> =
            (0..50u64).map(|i| b.delay(3, i * 97_654_321)).collect();
        assert!(spread.len() > 40, "the random part matters: {spread:?}");
    }

    #[test]
    fn the_defaults_outlast_a_thirty_second_outage_before_the_fifth_delivery() {
        let b = RedeliveryBackoff::default();
        // Deliveries 1 to 4 fail and are held, the fifth is the broker's default last one.
        assert_eq!(b.least_before(5), S(36), "(3 + 6 + 12 + 24) × 4/5");
        assert!(b.least_before(5) > S(30));
        assert_eq!(b.least_before(1), Duration::ZERO);
        // The largest group limit, 10: 3 + 6 + 12 + 24 + 48 + 60 × 4, less a fifth.
        assert_eq!(b.least_before(10), Duration::from_millis(266_400));
    }

    #[test]
    fn extreme_settings_saturate_instead_of_overflowing() {
        let b = RedeliveryBackoff::new(Duration::MAX, Duration::MAX);
        assert_eq!(b.nominal(1), Duration::MAX);
        assert_eq!(b.nominal(u16::MAX), Duration::MAX);
        let huge = b.delay(40, u64::MAX);
        assert!(huge >= Duration::from_secs(400 * 365 * 86_400), "{huge:?}");
        assert_eq!(b.least_before(u16::MAX), Duration::MAX);
        let tiny = RedeliveryBackoff::new(Duration::from_nanos(1), Duration::from_nanos(3));
        assert_eq!(tiny.delay(1, u64::MAX), Duration::from_nanos(1));
        assert_eq!(tiny.nominal(9), Duration::from_nanos(3));
    }

    #[test]
    fn a_zero_initial_delay_is_off_and_a_cap_below_it_is_raised() {
        assert!(RedeliveryBackoff::new(Duration::ZERO, S(60)).is_off());
        assert_eq!(
            RedeliveryBackoff::new(Duration::ZERO, S(60)).delay(3, 5),
            Duration::ZERO
        );
        let b = RedeliveryBackoff::new(S(10), S(1));
        assert_eq!(b.nominal(1), S(10));
        assert_eq!(b.nominal(4), S(10));
    }
}
