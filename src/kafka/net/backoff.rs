//! How often a client dials a broker after failed connections: Java's `reconnect.backoff.ms`
//! and `reconnect.backoff.max.ms`, per broker, shared by every connection of one client.
//!
//! A client opens several connections to the same broker (the bootstrap connection, the group
//! coordinator's, a partition leader's, the group-config reader's). Each used to reconnect on
//! its own, as soon as the previous attempt failed: with credentials revoked mid-run, that was
//! a new failed authentication at the broker every few hundred milliseconds. Now every
//! connection attempt of a client first waits for its turn at the [`Dialer`], which keeps one
//! [`BrokerBackoff`] per broker address:
//!
//! - After a failed attempt (refused, timed out, handshake failed), the next attempt to that
//!   broker, from any connection of the client, waits `reconnect.backoff.ms` (default 50 ms),
//!   doubling with each failure in a row up to `reconnect.backoff.max.ms` (default 1 s), each
//!   pause spread by ±20 % and never above the maximum, as Java's `ClusterConnectionStates`.
//! - After an **authentication failure** (SASL refused, a certificate refused on either side,
//!   also when a re-authentication of an open connection failed) the next attempt waits the
//!   maximum at once: the same credentials are refused the same way, so the broker sees at
//!   most one attempt per `reconnect.backoff.max.ms` from this client.
//! - One attempt at a time per broker (Java's client keeps one connection per broker): a
//!   connection that wants the broker while another attempt to it is under way waits for its
//!   outcome, then for the pause it earned. So a broker that starts refusing the credentials
//!   sees one failed attempt, not one per connection. A success ends the backoff.
//!
//! [`BrokerBackoff`] is the state machine (no clock, no randomness of its own); the
//! [`Dialer`] wraps it with the clock, the jitter and the counts a client reports
//! ([`ConnectionCounts`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::kafka::error::ClientError;
use crate::kafka::error::ConnectionError;
use crate::time::deadline_after;

/// Java's default `reconnect.backoff.ms`.
pub(crate) const DEFAULT_RECONNECT_BACKOFF: Duration = Duration::from_millis(50);
/// Java's default `reconnect.backoff.max.ms`.
pub(crate) const DEFAULT_RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Java's `RECONNECT_BACKOFF_JITTER`: each pause is spread by this fraction either way.
const JITTER: f64 = 0.2;

/// `reconnect.backoff.ms` and `reconnect.backoff.max.ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReconnectBackoff {
    /// The pause after the first failure.
    pub(crate) initial: Duration,
    /// The longest pause, and the pause after an authentication failure.
    pub(crate) max: Duration,
}

impl Default for ReconnectBackoff {
    fn default() -> Self {
        Self {
            initial: DEFAULT_RECONNECT_BACKOFF,
            max: DEFAULT_RECONNECT_BACKOFF_MAX,
        }
    }
}

impl ReconnectBackoff {
    /// The pause after `failures` failed attempts in a row (at least one): `initial` doubled
    /// `failures - 1` times, times `0.8 + 0.4 × unit` (`unit` in `[0, 1]`, the jitter), and at
    /// most `max`.
    pub(crate) fn after(&self, failures: u32, unit: f64) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        let term = self.initial.saturating_mul(1u32 << doublings);
        let spread = 1.0 - JITTER + 2.0 * JITTER * unit.clamp(0.0, 1.0);
        let pause = Duration::try_from_secs_f64(term.as_secs_f64() * spread).unwrap_or(self.max);
        pause.min(self.max)
    }
}

/// What ended an attempt (or an open connection's session) with one broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The connection is up.
    Connected,
    /// The attempt failed for another reason than authentication.
    Failed,
    /// The broker refused the credentials or a certificate (on connect or re-authentication),
    /// or this client refused the broker's certificate.
    Refused,
}

impl Outcome {
    /// The outcome of a connection attempt that returned `result`.
    pub(crate) fn of<T>(result: &Result<T, ClientError>) -> Self {
        match result {
            Ok(_) => Self::Connected,
            Err(ClientError::Connection(ConnectionError::Authentication { .. })) => Self::Refused,
            Err(_) => Self::Failed,
        }
    }
}

/// The reconnect state of one broker. Sans-IO: the caller passes the time and the jitter.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct BrokerBackoff {
    /// Failures in a row (attempts, and re-authentications refused).
    failures: u32,
    /// The last failure was an authentication failure.
    refused: bool,
    /// No attempt starts before then.
    next_at: Option<Instant>,
    /// An attempt is under way.
    in_flight: bool,
}

/// What a connection that wants to dial a broker must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Dial now (the attempt is counted as under way).
    Go,
    /// Wait until then, and ask again.
    WaitUntil(Instant),
    /// Wait for the attempt under way to finish, and ask again.
    WaitForAttempt,
}

impl BrokerBackoff {
    /// Whether an attempt may start at `now`; if so, it is under way from now until
    /// [`finish`](Self::finish) or [`abandon`](Self::abandon).
    pub(crate) fn turn(&mut self, now: Instant) -> Turn {
        if self.in_flight {
            return Turn::WaitForAttempt;
        }
        match self.next_at {
            Some(at) if at > now => Turn::WaitUntil(at),
            _ => {
                self.in_flight = true;
                Turn::Go
            }
        }
    }

    /// The attempt under way was given up before it ended (its caller went away).
    pub(crate) fn abandon(&mut self) {
        self.in_flight = false;
    }

    /// An attempt (or, with `in_flight` untouched, a re-authentication) ended at `now`
    /// with `outcome`. Returns the pause before the next attempt, `None` after a success.
    pub(crate) fn finish(
        &mut self,
        now: Instant,
        outcome: Outcome,
        attempt: bool,
        backoff: &ReconnectBackoff,
        unit: f64,
    ) -> Option<Duration> {
        if attempt {
            self.in_flight = false;
        }
        if outcome == Outcome::Connected {
            self.failures = 0;
            self.refused = false;
            self.next_at = None;
            return None;
        }
        self.failures = self.failures.saturating_add(1);
        self.refused = outcome == Outcome::Refused;
        let pause = if self.refused {
            backoff.max
        } else {
            backoff.after(self.failures, unit)
        };
        let at = deadline_after(now, pause);
        self.next_at = Some(self.next_at.map_or(at, |next| next.max(at)));
        Some(pause)
    }

    /// Nothing is under way and nothing failed: the state need not be kept.
    fn is_idle(&self) -> bool {
        !self.in_flight && self.failures == 0
    }
}

/// How many connections a client tried to open, and how many failed, over its lifetime
/// (every connection: bootstrap, group coordinator, partition leaders).
///
/// After a failed attempt the client dials the same broker again no sooner than
/// `reconnect.backoff.ms` (default 50 ms, doubling with each failure in a row up to
/// `reconnect.backoff.max.ms`, default 1 s); after an authentication failure no sooner than
/// `reconnect.backoff.max.ms`. See
/// [`KafkaShareConsumerConfig::reconnect_backoff`](crate::KafkaShareConsumerConfig::reconnect_backoff).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionCounts {
    /// Connection attempts started (TCP connects).
    pub attempts: u64,
    /// Attempts that failed, for any reason (authentication failures included).
    pub failures: u64,
    /// Authentication failures: attempts whose TLS handshake or SASL exchange was refused,
    /// and re-authentications of open connections that were refused.
    pub authentication_failures: u64,
}

/// The reconnect backoff of one client's connections, per broker address.
#[derive(Debug)]
pub(crate) struct Dialer {
    backoff: ReconnectBackoff,
    brokers: Mutex<HashMap<String, BrokerBackoff>>,
    /// Woken whenever an attempt ends.
    ended: Notify,
    attempts: AtomicU64,
    failures: AtomicU64,
    authentication_failures: AtomicU64,
}

impl Default for Dialer {
    fn default() -> Self {
        Self::new(ReconnectBackoff::default())
    }
}

/// An attempt under way: [`Attempt::finish`] records its outcome; dropped unfinished (its
/// connect future was dropped), the next connection may dial at once.
#[derive(Debug)]
pub(crate) struct Attempt<'d> {
    dialer: &'d Dialer,
    addr: &'d str,
    finished: bool,
}

impl Attempt<'_> {
    /// Records how the attempt ended.
    pub(crate) fn finish(mut self, outcome: Outcome) {
        self.finished = true;
        self.dialer.finish(self.addr, outcome, true);
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if !self.finished {
            if let Some(state) = self.dialer.lock().get_mut(self.addr) {
                state.abandon();
            }
            self.dialer.ended.notify_waiters();
        }
    }
}

impl Dialer {
    pub(crate) fn new(backoff: ReconnectBackoff) -> Self {
        Self {
            backoff,
            brokers: Mutex::new(HashMap::new()),
            ended: Notify::new(),
            attempts: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            authentication_failures: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, BrokerBackoff>> {
        self.brokers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until `addr` may be dialled (no other attempt to it under way, its backoff
    /// over), then counts the attempt, which is under way until the returned [`Attempt`]
    /// is finished or dropped.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped while it waits, nothing was dialled and nothing is under way.
    pub(crate) async fn turn<'d>(&'d self, addr: &'d str) -> Attempt<'d> {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            // Registered before the state is read, so an attempt that ends in between
            // still wakes this caller.
            ended.as_mut().enable();
            let turn = self
                .lock()
                .entry(addr.to_owned())
                .or_default()
                .turn(Instant::now());
            match turn {
                Turn::Go => break,
                Turn::WaitUntil(at) => {
                    tracing::debug!(
                        broker = addr,
                        wait = ?at.saturating_duration_since(Instant::now()),
                        "reconnect backoff: waiting before dialling the broker again"
                    );
                    tokio::time::sleep_until(at).await;
                }
                Turn::WaitForAttempt => ended.await,
            }
        }
        self.attempts.fetch_add(1, Ordering::Relaxed);
        Attempt {
            dialer: self,
            addr,
            finished: false,
        }
    }

    /// Whether the last attempt to `addr` failed (it is in its backoff, or out of it with no
    /// success since): a caller with other addresses to choose from tries those first, as
    /// Java's clients pick a node that is not backing off.
    pub(crate) fn failed_last(&self, addr: &str) -> bool {
        self.lock()
            .get(addr)
            .is_some_and(|state| state.failures > 0)
    }

    /// Records how an attempt to `addr` (`attempt`), or the re-authentication of an open
    /// connection to it (not `attempt`), ended.
    pub(crate) fn finish(&self, addr: &str, outcome: Outcome, attempt: bool) {
        if outcome != Outcome::Connected && attempt {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        if outcome == Outcome::Refused {
            self.authentication_failures.fetch_add(1, Ordering::Relaxed);
        }
        let pause = {
            let mut brokers = self.lock();
            let state = brokers.entry(addr.to_owned()).or_default();
            let pause = state.finish(
                Instant::now(),
                outcome,
                attempt,
                &self.backoff,
                random_unit(),
            );
            if state.is_idle() {
                brokers.remove(addr);
            }
            pause
        };
        self.ended.notify_waiters();
        if outcome == Outcome::Refused {
            tracing::warn!(
                broker = addr,
                ?pause,
                "authentication refused; the next connection to this broker waits \
                 reconnect.backoff.max.ms"
            );
        }
    }

    /// The counts so far.
    pub(crate) fn counts(&self) -> ConnectionCounts {
        ConnectionCounts {
            attempts: self.attempts.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            authentication_failures: self.authentication_failures.load(Ordering::Relaxed),
        }
    }
}

/// A uniform number in `[0, 1]` for the jitter (0.5 if the system has no randomness).
pub(crate) fn random_unit() -> f64 {
    let mut random = [0u8; 4];
    let rng = ring::rand::SystemRandom::new();
    match ring::rand::SecureRandom::fill(&rng, &mut random) {
        Ok(()) => f64::from(u32::from_be_bytes(random)) / f64::from(u32::MAX),
        Err(_) => 0.5,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn java_defaults() -> ReconnectBackoff {
        ReconnectBackoff::default()
    }

    #[test]
    fn the_pause_doubles_from_the_initial_to_the_maximum_with_jitter() {
        let b = java_defaults();
        let middle: Vec<u128> = (1..=7).map(|n| b.after(n, 0.5).as_millis()).collect();
        assert_eq!(middle, [50, 100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.after(1, 0.0), 40 * MS);
        assert_eq!(b.after(1, 1.0), 60 * MS);
        // The spread never goes above the maximum, and nothing overflows.
        assert_eq!(b.after(5, 1.0), 960 * MS);
        assert_eq!(b.after(6, 0.0), Duration::from_secs(1));
        assert_eq!(b.after(u32::MAX, 1.0), Duration::from_secs(1));
        let huge = ReconnectBackoff {
            initial: Duration::MAX,
            max: Duration::MAX,
        };
        assert_eq!(huge.after(3, 1.0), Duration::MAX);
        assert_eq!(b.after(0, 0.5), 50 * MS);
    }

    /// Simulates `callers` connections that each dial as soon as the state lets them
    /// (asking every millisecond for `span`), every attempt failing with `outcome` after
    /// `takes`, and returns the start times of the attempts.
    fn attempts(
        callers: usize,
        outcome: Outcome,
        takes: Duration,
        span: Duration,
    ) -> Vec<Duration> {
        let b = java_defaults();
        let t0 = Instant::now();
        let mut state = BrokerBackoff::default();
        let mut started = Vec::new();
        let mut in_flight: Option<Instant> = None;
        let mut now = t0;
        while now < t0 + span {
            if let Some(at) = in_flight.filter(|at| now >= *at + takes) {
                state.finish(at + takes, outcome, true, &b, 0.5);
                in_flight = None;
            }
            for _ in 0..callers {
                if state.turn(now) == Turn::Go {
                    assert!(in_flight.is_none(), "two attempts under way");
                    started.push(now - t0);
                    in_flight = Some(now);
                }
            }
            now += MS;
        }
        started
    }

    #[test]
    fn after_an_authentication_failure_a_broker_is_dialled_at_most_once_per_maximum() {
        let started = attempts(3, Outcome::Refused, 5 * MS, Duration::from_secs(10));
        // Three connections want the broker all the time: one attempt at a time, each a
        // full maximum after the previous one was refused.
        assert_eq!(started[0], Duration::ZERO);
        for pair in started.windows(2) {
            assert_eq!(
                pair[1] - pair[0],
                Duration::from_millis(1005),
                "{started:?}"
            );
        }
        assert_eq!(started.len(), 10, "{started:?}");
    }

    #[test]
    fn other_failures_back_off_from_the_initial_pause() {
        for callers in [1, 3] {
            let started = attempts(callers, Outcome::Failed, MS, Duration::from_secs(5));
            let gaps: Vec<u128> = started
                .windows(2)
                .map(|p| (p[1] - p[0]).as_millis())
                .take(7)
                .collect();
            // 50, 100, 200, ... ms after the previous failure (each attempt takes 1 ms).
            assert_eq!(gaps, [51, 101, 201, 401, 801, 1001, 1001], "{started:?}");
        }
    }

    #[test]
    fn a_success_ends_the_backoff_and_an_abandoned_attempt_frees_the_turn() {
        let b = java_defaults();
        let now = Instant::now();
        let mut state = BrokerBackoff::default();
        assert_eq!(state.turn(now), Turn::Go);
        assert_eq!(state.turn(now), Turn::WaitForAttempt);
        state.abandon();
        assert_eq!(state.turn(now), Turn::Go);
        assert_eq!(
            state.finish(now, Outcome::Refused, true, &b, 0.0),
            Some(Duration::from_secs(1))
        );
        let at = now + Duration::from_secs(1);
        assert_eq!(state.turn(now), Turn::WaitUntil(at));
        // A later failure (a refused re-authentication of an open connection) pushes the
        // next attempt later, never earlier.
        state.finish(now + 10 * MS, Outcome::Failed, false, &b, 0.0);
        assert_eq!(state.turn(now + 20 * MS), Turn::WaitUntil(at));
        assert_eq!(state.turn(at), Turn::Go);
        assert_eq!(state.finish(at, Outcome::Connected, true, &b, 0.5), None);
        assert!(state.is_idle());
        assert_eq!(state.turn(at), Turn::Go);
    }

    #[tokio::test(start_paused = true)]
    async fn the_dialer_holds_every_connection_of_a_client_back_after_a_refusal() {
        let dialer = Dialer::new(java_defaults());
        let t0 = Instant::now();
        dialer.turn("k:9092").await.finish(Outcome::Refused);
        // Another broker is not held back.
        dialer.turn("other:9092").await.finish(Outcome::Connected);
        assert_eq!(Instant::now(), t0);
        let attempt = dialer.turn("k:9092").await;
        assert_eq!(Instant::now() - t0, Duration::from_secs(1));
        // A second connection waits for the attempt under way, then for its pause.
        let second = tokio::spawn({
            let dialer = Arc::new(Dialer::new(java_defaults()));
            async move {
                let first = dialer.turn("k:9092").await;
                let waiting = {
                    let dialer = Arc::clone(&dialer);
                    tokio::spawn(async move {
                        dialer.turn("k:9092").await.finish(Outcome::Connected);
                        Instant::now()
                    })
                };
                tokio::time::sleep(Duration::from_millis(300)).await;
                first.finish(Outcome::Refused);
                waiting.await.unwrap()
            }
        });
        attempt.finish(Outcome::Connected);
        let t1 = Instant::now();
        assert_eq!(
            second.await.unwrap() - t1,
            Duration::from_millis(1300),
            "the waiting connection dials a maximum after the refusal"
        );
        dialer.finish("k:9092", Outcome::Refused, false);
        assert_eq!(
            dialer.counts(),
            ConnectionCounts {
                attempts: 3,
                failures: 1,
                authentication_failures: 2,
            }
        );
        // A dropped attempt frees the turn at once.
        let t2 = Instant::now();
        drop(dialer.turn("k:9092").await);
        dialer.turn("k:9092").await.finish(Outcome::Connected);
        assert_eq!(Instant::now() - t2, Duration::from_secs(1));
    }
}
