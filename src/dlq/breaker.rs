//! The dead-letter circuit breaker: [`DeadLetterBreaker`] (its settings), [`BreakerTripped`]
//! (why it stopped the task) and the sliding window the driver counts in.
//!
//! A dead-letter queue is for the exceptions. When a sink deployment is broken (a wrong
//! converter, a target table that is missing, credentials the target refuses), every record
//! fails, and without a bound the task moves the whole topic into the dead-letter queue,
//! where replaying it is the operator's problem. The breaker counts the records the driver
//! gives up on (written to its own dead-letter queue, or REJECTed, which the group's broker
//! dead-letter queue takes when it has one) among the records it finished with (put,
//! filtered, or given up on) within a sliding window, and stops the task before a write
//! would pass a bound. The records of that write are RELEASEd instead: the group delivers them
//! again once the cause is fixed.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

/// The key of the count bound.
pub(crate) const MAX_RECORDS_KEY: &str = "errors.deadletterqueue.breaker.max.records";
/// The key of the share bound.
pub(crate) const MAX_RATIO_KEY: &str = "errors.deadletterqueue.breaker.max.ratio";
/// The key of the share bound's minimum sample.
pub(crate) const MIN_RECORDS_KEY: &str = "errors.deadletterqueue.breaker.min.records";
/// The key of the window.
pub(crate) const WINDOW_MS_KEY: &str = "errors.deadletterqueue.breaker.window.ms";

/// How finely the window slides: it is kept in this many buckets.
const BUCKETS: u32 = 64;

/// One in a million: the unit a share is kept in.
const PPM: u64 = 1_000_000;

/// Settings of the dead-letter circuit breaker (`errors.deadletterqueue.breaker.*`).
///
/// Within any `window` (`errors.deadletterqueue.breaker.window.ms`, default 10 minutes), the
/// driver gives up on at most
///
/// - `max_records` records (`errors.deadletterqueue.breaker.max.records`, default: no bound),
///   and
/// - a share `max_ratio` of the records it finished with (`...breaker.max.ratio`, default 0.5),
///   judged once at least `min_records` records finished in the window
///   (`...breaker.min.records`, default 100).
///
/// "Giving up on" a record is writing it to the driver's own dead-letter queue, or REJECTing
/// it (the group's broker dead-letter queue takes it, if the group has one); "finishing with"
/// a record is putting it successfully, dropping it with a transform, or giving up on it.
/// Before a write that would pass a bound, the driver RELEASEs the records of that write
/// instead, stops with [`Error::DeadLetterBreaker`](crate::Error::DeadLetterBreaker), and
/// logs why at ERROR; [`DriverMetrics::dead_letter_breaker_trips`](crate::DriverMetrics::dead_letter_breaker_trips)
/// counts it. The window is kept in 64 buckets: it slides by a 64th of its length.
///
/// ```
/// use std::time::Duration;
/// use kafka_share_sink::{DeadLetterBreaker, DriverConfig};
///
/// // At most 100 dead letters a minute, and never more than a fifth of what was finished
/// // once 50 records were.
/// let breaker = DeadLetterBreaker::default()
///     .window(Duration::from_secs(60))
///     .max_records(Some(100))
///     .max_ratio(Some(0.2))
///     .min_records(50);
/// let config = DriverConfig::new(["orders"]).dead_letter_breaker(breaker);
/// # let _ = config;
/// assert!(!DeadLetterBreaker::disabled().is_enabled());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadLetterBreaker {
    max_records: Option<u64>,
    /// Parts per million.
    max_ratio: Option<u32>,
    min_records: u64,
    window: Duration,
}

impl Default for DeadLetterBreaker {
    /// The default: more than half of at least 100 records finished within 10 minutes trips
    /// it; no count bound.
    fn default() -> Self {
        Self {
            max_records: None,
            max_ratio: Some(500_000),
            min_records: 100,
            window: Duration::from_secs(600),
        }
    }
}

impl DeadLetterBreaker {
    /// A breaker that never trips: no bound at all.
    pub fn disabled() -> Self {
        Self {
            max_records: None,
            max_ratio: None,
            ..Self::default()
        }
    }

    /// At most this many records given up on within the window; `None`: no count bound.
    /// `Some(0)` trips on the first record.
    pub fn max_records(mut self, max: Option<u64>) -> Self {
        self.max_records = max;
        self
    }

    /// At most this share (0 to 1) of the records finished within the window; `None` (or 1):
    /// no share bound. A value out of range is clamped to it; NaN is `None`.
    pub fn max_ratio(mut self, max: Option<f64>) -> Self {
        self.max_ratio = max.filter(|r| !r.is_nan()).map(ratio_to_ppm);
        self
    }

    /// The share bound is judged only once this many records finished in the window (at
    /// least 1), so that one bad record among the first few does not trip it.
    pub fn min_records(mut self, min: u64) -> Self {
        self.min_records = min.max(1);
        self
    }

    /// The length of the sliding window (at least 1 ms).
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window.max(Duration::from_millis(1));
        self
    }

    /// Whether any bound is set.
    pub fn is_enabled(&self) -> bool {
        self.max_records.is_some() || self.max_ratio.is_some_and(|r| u64::from(r) < PPM)
    }

    /// The count bound.
    pub fn max_records_value(&self) -> Option<u64> {
        self.max_records
    }

    /// The share bound.
    pub fn max_ratio_value(&self) -> Option<f64> {
        self.max_ratio.map(|ppm| f64::from(ppm) / PPM as f64)
    }

    /// The share bound's minimum sample.
    pub fn min_records_value(&self) -> u64 {
        self.min_records
    }

    /// The window.
    pub fn window_value(&self) -> Duration {
        self.window
    }
}

/// A share in `0.0..=1.0` as parts per million, clamped.
fn ratio_to_ppm(ratio: f64) -> u32 {
    let clamped = ratio.clamp(0.0, 1.0);
    // In 0..=1_000_000 after the clamp: the cast cannot truncate.
    (clamped * PPM as f64).round() as u32
}

/// The bound a [`BreakerTripped`] passed.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum BreakerLimit {
    /// `errors.deadletterqueue.breaker.max.records`.
    Records {
        /// The bound.
        max: u64,
    },
    /// `errors.deadletterqueue.breaker.max.ratio`.
    Ratio {
        /// The bound, a share from 0 to 1.
        max: f64,
        /// `errors.deadletterqueue.breaker.min.records`.
        min_records: u64,
    },
}

impl BreakerLimit {
    /// The setting to change to let more through.
    pub fn key(&self) -> &'static str {
        match self {
            Self::Records { .. } => MAX_RECORDS_KEY,
            Self::Ratio { .. } => MAX_RATIO_KEY,
        }
    }
}

/// The dead-letter circuit breaker stopped the task: giving up on the records at hand would
/// have passed a bound of [`DeadLetterBreaker`]. They were RELEASEd, not dead-lettered: the
/// group delivers them again.
///
/// ```
/// use std::time::Duration;
/// use kafka_share_sink::{BreakerLimit, BreakerTripped};
///
/// let tripped = BreakerTripped::new(11, 40, Duration::from_secs(60), BreakerLimit::Records { max: 10 });
/// assert!(tripped.to_string().contains("errors.deadletterqueue.breaker.max.records=10"));
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub struct BreakerTripped {
    /// Records given up on within the window, those at hand included.
    pub given_up: u64,
    /// Records finished with within the window (put, filtered or given up on), those at hand
    /// included.
    pub finished: u64,
    /// The window.
    pub window: Duration,
    /// The bound that would have been passed.
    pub limit: BreakerLimit,
}

impl BreakerTripped {
    /// A trip with these numbers.
    pub fn new(given_up: u64, finished: u64, window: Duration, limit: BreakerLimit) -> Self {
        Self {
            given_up,
            finished,
            window,
            limit,
        }
    }
}

impl fmt::Display for BreakerTripped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let window = self.window.as_millis();
        write!(
            f,
            "dead-letter circuit breaker tripped: {} of the {} records finished within the last \
             {window} ms would go to a dead-letter queue, ",
            self.given_up, self.finished
        )?;
        match self.limit {
            BreakerLimit::Records { max } => write!(f, "more than {MAX_RECORDS_KEY}={max}")?,
            BreakerLimit::Ratio { max, min_records } => write!(
                f,
                "a larger share than {MAX_RATIO_KEY}={max} (judged from {MIN_RECORDS_KEY}={min_records} records on)"
            )?,
        }
        write!(
            f,
            "; they were released, not dead-lettered. Fix what makes the records fail (the sink, \
             its target, a converter or transform), or raise {} or {WINDOW_MS_KEY}",
            self.limit.key()
        )
    }
}

/// One bucket of the window: what happened during one 64th of it.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    index: u64,
    given_up: u64,
    finished: u64,
}

/// The breaker's sliding window: records given up on and records finished, per bucket.
///
/// A driver owns one, or shares one with the drivers that ran the same task before it (the
/// [`Supervisor`](crate::supervisor::Supervisor) keeps it across restarts, so that restarting
/// does not open the breaker again).
#[derive(Debug)]
pub(crate) struct BreakerWindow {
    settings: DeadLetterBreaker,
    start: Instant,
    bucket: Duration,
    buckets: VecDeque<Bucket>,
}

/// A window shared by the drivers of one task across restarts.
pub(crate) type SharedBreakerWindow = std::sync::Arc<std::sync::Mutex<BreakerWindow>>;

impl BreakerWindow {
    pub(crate) fn new(settings: DeadLetterBreaker, now: Instant) -> Self {
        let bucket = (settings.window / BUCKETS).max(Duration::from_micros(1));
        Self {
            settings,
            start: now,
            bucket,
            buckets: VecDeque::with_capacity(BUCKETS as usize + 1),
        }
    }

    /// The settings.
    pub(crate) fn settings(&self) -> DeadLetterBreaker {
        self.settings
    }

    /// Notes `added` records finished otherwise than given up on (put or filtered) since the
    /// last call, at `now`.
    pub(crate) fn observe(&mut self, now: Instant, added: u64) {
        if added > 0 {
            let bucket = self.current(now);
            bucket.finished = bucket.finished.saturating_add(added);
        }
    }

    /// Before giving up on `n` records at `now`, with `added` records finished otherwise
    /// since the last call: counts them and returns `Ok`, or, when that would pass a bound,
    /// counts only `added` and returns why.
    pub(crate) fn admit(&mut self, now: Instant, added: u64, n: u64) -> Result<(), BreakerTripped> {
        self.observe(now, added);
        if n == 0 || !self.settings.is_enabled() {
            return Ok(());
        }
        self.evict(now);
        let (given_up, finished) = self.buckets.iter().fold((0u64, 0u64), |(g, f), b| {
            (g.saturating_add(b.given_up), f.saturating_add(b.finished))
        });
        let given_up = given_up.saturating_add(n);
        let finished = finished.saturating_add(n);
        let tripped = |limit| BreakerTripped::new(given_up, finished, self.settings.window, limit);
        if let Some(max) = self.settings.max_records {
            if given_up > max {
                return Err(tripped(BreakerLimit::Records { max }));
            }
        }
        if let Some(ppm) = self.settings.max_ratio {
            let min_records = self.settings.min_records;
            // given_up / finished > ppm / 1e6, in integers.
            if finished >= min_records
                && u128::from(given_up) * u128::from(PPM) > u128::from(ppm) * u128::from(finished)
            {
                let max = f64::from(ppm) / PPM as f64;
                return Err(tripped(BreakerLimit::Ratio { max, min_records }));
            }
        }
        let bucket = self.current(now);
        bucket.given_up = bucket.given_up.saturating_add(n);
        bucket.finished = bucket.finished.saturating_add(n);
        Ok(())
    }

    /// Takes back `n` records [`admit`](Self::admit)ted at `at` that were not given up on
    /// after all (their dead-letter write failed and they were released, to come back). A
    /// bucket gone out of the window since has nothing left to take back.
    pub(crate) fn refund(&mut self, at: Instant, n: u64) {
        let index = self.index(at);
        if let Some(bucket) = self.buckets.iter_mut().find(|b| b.index == index) {
            bucket.given_up = bucket.given_up.saturating_sub(n);
            bucket.finished = bucket.finished.saturating_sub(n);
        }
    }

    /// The bucket `now` falls in (created when missing); older buckets out of the window
    /// are dropped.
    fn current(&mut self, now: Instant) -> &mut Bucket {
        let index = self.index(now);
        self.evict(now);
        if self.buckets.back().is_none_or(|b| b.index < index) {
            self.buckets.push_back(Bucket {
                index,
                given_up: 0,
                finished: 0,
            });
        }
        // Just pushed, or the newest already is this one (time does not go back).
        let last = self.buckets.len() - 1;
        &mut self.buckets[last]
    }

    fn index(&self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.start);
        let index = elapsed.as_nanos() / self.bucket.as_nanos().max(1);
        u64::try_from(index).unwrap_or(u64::MAX)
    }

    /// Drops the buckets that ended a whole window ago: the window is the current bucket and
    /// the 63 before it.
    fn evict(&mut self, now: Instant) {
        let oldest = self.index(now).saturating_sub(u64::from(BUCKETS) - 1);
        while self.buckets.front().is_some_and(|b| b.index < oldest) {
            self.buckets.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn window(settings: DeadLetterBreaker) -> (BreakerWindow, Instant) {
        let now = Instant::now();
        (BreakerWindow::new(settings, now), now)
    }

    #[test]
    fn the_count_bound_admits_up_to_its_value_and_counts_nothing_when_it_trips() {
        let (mut w, t0) = window(
            DeadLetterBreaker::disabled()
                .window(MINUTE)
                .max_records(Some(10)),
        );
        w.admit(t0, 0, 6).expect("6 of 10");
        w.admit(t0, 0, 4).expect("10 of 10");
        let tripped = w.admit(t0, 0, 1).expect_err("11 > 10");
        assert_eq!(
            (tripped.given_up, tripped.limit),
            (11, BreakerLimit::Records { max: 10 })
        );
        // A batch larger than what is left trips as a whole.
        let (mut w, t0) = window(DeadLetterBreaker::disabled().max_records(Some(10)));
        w.admit(t0, 0, 8).expect("8");
        assert!(w.admit(t0, 0, 3).is_err(), "8 + 3 > 10");
        w.admit(t0, 0, 2).expect("the refused 3 were not counted");
    }

    #[test]
    fn records_given_up_leave_the_window_once_it_has_slid_past_them() {
        let (mut w, t0) = window(
            DeadLetterBreaker::disabled()
                .window(MINUTE)
                .max_records(Some(10)),
        );
        w.admit(t0, 0, 10).expect("10");
        assert!(w.admit(t0 + MINUTE / 2, 0, 1).is_err(), "still within");
        // 63 buckets later than t0's bucket, the first is still in the window...
        let bucket = MINUTE / BUCKETS;
        assert!(w.admit(t0 + bucket * 63, 0, 1).is_err(), "last bucket");
        // ... one more and it is out.
        w.admit(t0 + bucket * 64, 0, 10).expect("slid past");
        assert!(w.admit(t0 + bucket * 64, 0, 1).is_err());
        w.admit(t0 + bucket * 128, 0, 1).expect("slid past again");
    }

    #[test]
    fn the_share_bound_waits_for_its_sample_then_compares_what_was_finished() {
        let (mut w, t0) = window(
            DeadLetterBreaker::disabled()
                .window(MINUTE)
                .max_ratio(Some(0.5))
                .min_records(10),
        );
        // 9 given up, nothing else finished: 100%, but fewer than 10 finished.
        w.admit(t0, 0, 9).expect("below the sample");
        let tripped = w.admit(t0, 0, 1).expect_err("10 of 10 > 50%");
        assert_eq!((tripped.given_up, tripped.finished), (10, 10));
        assert_eq!(
            tripped.limit,
            BreakerLimit::Ratio {
                max: 0.5,
                min_records: 10
            }
        );
        // 20 records put: 10 of 30 = 33%, under the bound.
        w.admit(t0, 20, 1).expect("10 of 30");
        // Up to exactly half is allowed, more is not.
        w.admit(t0, 0, 10).expect("19 of 39");
        w.admit(t0, 1, 1).expect("20 of 41");
        assert!(w.admit(t0, 0, 2).is_err(), "22 of 43");
        w.admit(t0, 1, 1).expect("21 of 42: exactly half");
    }

    #[test]
    fn records_put_long_ago_do_not_dilute_the_share() {
        let (mut w, t0) = window(
            DeadLetterBreaker::disabled()
                .window(MINUTE)
                .max_ratio(Some(0.5))
                .min_records(10),
        );
        w.observe(t0, 1_000);
        assert!(w.admit(t0, 0, 500).is_ok(), "500 of 1500");
        // Two windows later, nothing was put since: the next ten failures are all there is.
        let later = t0 + MINUTE * 2;
        w.observe(later, 0);
        assert!(w.admit(later, 0, 10).is_err(), "10 of 10");
    }

    #[test]
    fn a_disabled_breaker_admits_everything() {
        let (mut w, t0) = window(DeadLetterBreaker::disabled());
        for _ in 0..100 {
            w.admit(t0, 0, u64::MAX / 200).expect("no bound");
        }
        let (mut w, t0) = window(DeadLetterBreaker::default().max_ratio(Some(1.0)));
        assert!(
            !DeadLetterBreaker::default()
                .max_ratio(Some(1.0))
                .is_enabled()
        );
        w.admit(t0, 0, 1_000_000)
            .expect("a share of 1 is never passed");
    }

    #[test]
    fn settings_are_clamped() {
        let b = DeadLetterBreaker::default()
            .max_ratio(Some(1.5))
            .min_records(0)
            .window(Duration::ZERO);
        assert_eq!(b.max_ratio_value(), Some(1.0));
        assert_eq!(b.min_records_value(), 1);
        assert_eq!(b.window_value(), Duration::from_millis(1));
        assert_eq!(
            DeadLetterBreaker::default()
                .max_ratio(Some(f64::NAN))
                .max_ratio_value(),
            None
        );
        assert_eq!(
            DeadLetterBreaker::default()
                .max_ratio(Some(-1.0))
                .max_ratio_value(),
            Some(0.0)
        );
    }

    #[test]
    fn the_error_says_what_to_change() {
        let ratio = BreakerTripped::new(
            60,
            100,
            MINUTE,
            BreakerLimit::Ratio {
                max: 0.5,
                min_records: 100,
            },
        );
        let text = ratio.to_string();
        assert!(text.contains("60 of the 100 records"), "{text}");
        assert!(
            text.contains("errors.deadletterqueue.breaker.max.ratio=0.5"),
            "{text}"
        );
        assert!(text.contains("60000 ms"), "{text}");
        assert!(text.contains("released, not dead-lettered"), "{text}");
    }
}
