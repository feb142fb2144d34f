//! Deadlines from durations a user or a broker supplies, without overflow.
//!
//! `Instant + Duration` panics when the sum does not fit the clock ("overflow when adding
//! duration to instant"), and `Duration::MAX` or a broker's garbage lock duration are inputs
//! this crate must survive. Every deadline built from such a duration goes through
//! [`deadline_after`], which saturates at a far deadline instead.

use std::time::Duration;

use tokio::time::Instant;

/// How far ahead a saturated deadline lies: about 30 years, never reached in practice.
///
/// The same horizon tokio uses for a sleep too long to represent; 100 years already
/// overflows the clock on some platforms.
pub(crate) const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 86_400);

/// `now + after`, or a deadline about [`FAR_FUTURE`] ahead when `after` is longer than
/// that (or the sum does not fit the clock): a wait that long means "never" to the caller.
pub(crate) fn deadline_after(now: Instant, after: Duration) -> Instant {
    let mut after = after.min(FAR_FUTURE);
    loop {
        if let Some(deadline) = now.checked_add(after) {
            return deadline;
        }
        // Only on a clock that cannot reach FAR_FUTURE: come closer until it fits (adding
        // zero always does).
        after /= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn short_durations_are_added_and_long_ones_saturate() {
        let now = Instant::now();
        assert_eq!(
            deadline_after(now, Duration::from_millis(1500)),
            now + Duration::from_millis(1500)
        );
        assert_eq!(deadline_after(now, Duration::ZERO), now);
        let far = now + FAR_FUTURE;
        assert_eq!(deadline_after(now, FAR_FUTURE), far);
        assert_eq!(deadline_after(now, Duration::MAX), far);
        assert_eq!(deadline_after(now, Duration::MAX / 2), far);
        // A saturated deadline can still be compared and waited for.
        assert!(deadline_after(now, Duration::MAX) > now + Duration::from_secs(365 * 86_400));
    }
}
