//! [`Member`]: the share-group membership as a state machine without I/O or clock.
//!
//! It decides what the next ShareGroupHeartbeat carries (epoch, subscription), how to take
//! each outcome (an answer with its error code, a failed lookup or request), and how long to
//! wait before the next beat, following the Java client's `AbstractHeartbeatRequestManager`
//! and `ShareMembershipManager`. The loop in [`super`] only does what it says: find the
//! coordinator, send, sleep. Tested on its own, with property tests over arbitrary outcomes.

use std::time::Duration;

use uuid::Uuid;

use crate::kafka::error::ClientError;
use crate::kafka::error::codes::broker_error;
use crate::kafka::error::{BrokerError, ConnectionError, ProtocolError};

pub(super) const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
pub(super) const COORDINATOR_NOT_AVAILABLE: i16 = 15;
pub(super) const NOT_COORDINATOR: i16 = 16;
pub(super) const UNKNOWN_MEMBER_ID: i16 = 25;
pub(super) const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
pub(super) const UNSUPPORTED_VERSION: i16 = 35;
pub(super) const GROUP_ID_NOT_FOUND: i16 = 69;
pub(super) const FENCED_MEMBER_EPOCH: i16 = 110;

/// The first pause after a failure; it doubles per failure in a row up to [`BACKOFF_MAX`].
pub(super) const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// The longest pause after failures.
pub(super) const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// The pause before asking again after NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE.
pub(super) const COORDINATOR_MOVED_PAUSE: Duration = Duration::from_millis(50);
/// The heartbeat interval until the coordinator gives one.
pub(super) const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);

/// An error code that ends the membership, kept so every later poll can report it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CodeError {
    code: i16,
    message: Option<String>,
}

/// A connection the member cannot make with the consumer's settings (refused credentials
/// or certificates, a listener of another security protocol), kept so every later poll can
/// report it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Refused {
    Authentication { broker: String, reason: String },
    Config { key: String, reason: String },
}

impl Refused {
    /// The refusal in `error`, if it is one.
    fn of(error: &ClientError) -> Option<Self> {
        match error {
            ClientError::Connection(ConnectionError::Authentication { broker, reason }) => {
                Some(Self::Authentication {
                    broker: broker.clone(),
                    reason: reason.clone(),
                })
            }
            ClientError::Config { key, reason } => Some(Self::Config {
                key: key.clone(),
                reason: reason.clone(),
            }),
            _ => None,
        }
    }

    fn error(&self) -> ClientError {
        match self.clone() {
            Self::Authentication { broker, reason } => {
                ClientError::Connection(ConnectionError::Authentication { broker, reason })
            }
            Self::Config { key, reason } => ClientError::Config { key, reason },
        }
    }
}

/// What the loop does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Waits this long (or until woken by a subscription change), then beats again.
    Wait(Duration),
    /// Stops: the member's error is final ([`Member::error`]).
    Stop,
}

/// One heartbeat to send: the member's epoch, and the subscription when it must go along.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Beat {
    /// The member epoch: 0 to join, the coordinator's last one after.
    pub(crate) epoch: i32,
    /// The subscribed topics, sent when joining and after each change.
    pub(crate) subscription: Option<Vec<String>>,
}

/// The parts of a ShareGroupHeartbeat answer the member takes in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Answer {
    /// The error code, 0 for none.
    pub(crate) code: i16,
    /// The broker's error message.
    pub(crate) message: Option<String>,
    /// The member's epoch as the coordinator gives it.
    pub(crate) epoch: i32,
    /// The heartbeat interval in milliseconds (0 or less: unchanged).
    pub(crate) interval_ms: i32,
    /// A new assignment (topic id, partitions), when the coordinator sent one.
    pub(crate) assignment: Option<Vec<(Uuid, Vec<i32>)>>,
}

/// What an answer did, besides the next step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Taken {
    /// What the loop does next.
    pub(crate) next: Next,
    /// The coordinator moved: forget its connection and look it up again.
    pub(crate) lost_coordinator: bool,
}

/// The membership of one share consumer, without I/O: see the module documentation.
#[derive(Debug, Default)]
pub(crate) struct Member {
    epoch: i32,
    /// Assigned partitions by topic id; replaced whole by each assignment.
    assignment: Vec<(Uuid, Vec<i32>)>,
    /// Bumped on every change of the assignment, so pollers can tell.
    assignment_version: u64,
    subscription: Vec<String>,
    /// The subscription changed (or its last beat failed) and goes with the next beat.
    send_subscription: bool,
    interval: Option<Duration>,
    /// A heartbeat was sent at least once, so the broker may know this member.
    heartbeat_sent: bool,
    /// Failures in a row (lookups and heartbeats), for the backoff and the log.
    failures: u32,
    backoff: Option<Duration>,
    fatal: Option<CodeError>,
    refused: Option<Refused>,
    /// A non-fatal error to report from the next poll (TOPIC_AUTHORIZATION_FAILED).
    transient: Option<CodeError>,
}

impl Member {
    /// The member's epoch (0 before it joined, -1 after it left).
    pub(crate) fn epoch(&self) -> i32 {
        self.epoch
    }

    /// The current assignment and its version.
    pub(crate) fn assignment(&self) -> (u64, &[(Uuid, Vec<i32>)]) {
        (self.assignment_version, &self.assignment)
    }

    /// The assignment's version, bumped on every change.
    pub(crate) fn assignment_version(&self) -> u64 {
        self.assignment_version
    }

    /// Failures in a row, for the log.
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }

    /// Whether a heartbeat was ever sent, so that leaving needs one.
    pub(crate) fn heartbeat_sent(&self) -> bool {
        self.heartbeat_sent
    }

    /// Sets the subscription; it goes with the next beat.
    pub(crate) fn subscribe(&mut self, topics: Vec<String>) {
        self.subscription = topics;
        self.send_subscription = true;
    }

    /// The next heartbeat. The subscription goes along when joining (epoch 0) and after a
    /// change.
    pub(crate) fn beat(&mut self) -> Beat {
        let send = self.epoch == 0 || self.send_subscription;
        self.send_subscription = false;
        self.heartbeat_sent = true;
        Beat {
            epoch: self.epoch,
            subscription: send.then(|| self.subscription.clone()),
        }
    }

    /// The coordinator could not be found or connected to. A broker error no retry fixes
    /// (GROUP_AUTHORIZATION_FAILED, for one) and refused settings stop the member, as in
    /// Java; anything else is tried again after the backoff.
    pub(crate) fn lookup_failed(&mut self, error: &ClientError) -> Next {
        if self.stopped() {
            return Next::Stop;
        }
        if let ClientError::Broker(BrokerError {
            code,
            message,
            retriable: false,
            ..
        }) = error
        {
            tracing::error!(code, ?message, "coordinator lookup failed fatally");
            return self.stop(*code, message.clone());
        }
        self.failed(error)
    }

    /// The heartbeat `beat` got no answer (the connection failed, or the answer could not
    /// be read). A cluster without share groups and refused settings stop the member;
    /// anything else is tried again after the backoff, on a coordinator looked up again,
    /// with the subscription if `beat` carried it.
    pub(crate) fn beat_failed(&mut self, beat: &Beat, error: &ClientError) -> Taken {
        let next = if self.stopped() {
            Next::Stop
        } else if let ClientError::Protocol(ProtocolError::Unsupported { .. }) = error {
            tracing::error!(error = %error, "share groups unsupported");
            self.stop(UNSUPPORTED_VERSION, Some(error.to_string()))
        } else {
            self.send_subscription |= beat.subscription.is_some();
            self.failed(error)
        };
        Taken {
            next,
            lost_coordinator: true,
        }
    }

    /// Takes in the answer to `beat`.
    pub(crate) fn answered(&mut self, beat: &Beat, answer: Answer) -> Taken {
        if self.stopped() {
            return Taken {
                next: Next::Stop,
                lost_coordinator: false,
            };
        }
        let carried = beat.subscription.is_some();
        let mut lost_coordinator = false;
        let next = match answer.code {
            0 => {
                self.failures = 0;
                self.backoff = None;
                self.epoch = answer.epoch;
                if answer.interval_ms > 0 {
                    self.interval = Some(Duration::from_millis(
                        answer.interval_ms.unsigned_abs().into(),
                    ));
                }
                if let Some(assignment) = answer.assignment {
                    self.assignment = assignment;
                    self.bump();
                }
                Next::Wait(self.interval())
            }
            NOT_COORDINATOR | COORDINATOR_NOT_AVAILABLE => {
                lost_coordinator = true;
                self.send_subscription |= carried;
                // Soon after a move; backing off while the coordinator stays unavailable
                // (a slow move would otherwise cost a lookup and a beat every 50 ms).
                if self.backoff.is_none() {
                    self.backoff = Some(BACKOFF_MIN);
                    Next::Wait(COORDINATOR_MOVED_PAUSE)
                } else {
                    Next::Wait(self.next_backoff())
                }
            }
            COORDINATOR_LOAD_IN_PROGRESS => {
                self.send_subscription |= carried;
                Next::Wait(self.next_backoff())
            }
            FENCED_MEMBER_EPOCH | UNKNOWN_MEMBER_ID => {
                tracing::info!(
                    code = answer.code,
                    "fenced; rejoining with the same member id"
                );
                self.epoch = 0;
                self.assignment.clear();
                self.bump();
                if beat.epoch == 0 {
                    // Fenced while joining: a coordinator that fences every join is asked
                    // again at the backoff, not back to back.
                    Next::Wait(self.next_backoff())
                } else {
                    Next::Wait(Duration::ZERO)
                }
            }
            TOPIC_AUTHORIZATION_FAILED => {
                // The coordinator took nothing of this beat: the subscription goes again.
                self.send_subscription |= carried;
                self.transient = Some(CodeError {
                    code: answer.code,
                    message: answer.message,
                });
                Next::Wait(self.interval())
            }
            code => {
                tracing::error!(code, message = ?answer.message, "fatal heartbeat error; the consumer stops");
                self.stop(code, answer.message)
            }
        };
        Taken {
            next,
            lost_coordinator,
        }
    }

    /// Out of the group: no assignment, epoch 0 (a later subscription joins again).
    pub(crate) fn left(&mut self) {
        self.epoch = 0;
        self.assignment.clear();
        self.bump();
        self.heartbeat_sent = false;
    }

    /// Marks the leave heartbeat as answered.
    pub(crate) fn leave_answered(&mut self) {
        self.epoch = -1;
    }

    /// The refusal that stopped the member (credentials or settings the group's brokers do
    /// not accept), if any: reported by every later poll and commit.
    pub(crate) fn refused(&self) -> Option<ClientError> {
        self.refused.as_ref().map(Refused::error)
    }

    /// The error a poll reports: the refusal or fatal error that stopped the member (every
    /// time), else a transient one not reported yet (once).
    pub(crate) fn error(&mut self) -> Option<ClientError> {
        if let Some(refused) = &self.refused {
            return Some(refused.error());
        }
        let reported = match &self.fatal {
            Some(fatal) => Some(fatal.clone()),
            None => self.transient.take(),
        };
        reported.map(|f| heartbeat_error(f.code, f.message))
    }

    /// Whether the member stopped for good: refused settings or a fatal error.
    fn stopped(&self) -> bool {
        self.fatal.is_some() || self.refused.is_some()
    }

    fn interval(&self) -> Duration {
        self.interval.unwrap_or(DEFAULT_INTERVAL)
    }

    fn bump(&mut self) {
        self.assignment_version = self.assignment_version.wrapping_add(1);
    }

    fn failed(&mut self, error: &ClientError) -> Next {
        if let Some(refused) = Refused::of(error) {
            tracing::error!(error = %error, "the group cannot be reached with these settings; the consumer stops");
            self.refused = Some(refused);
            return Next::Stop;
        }
        self.failures = self.failures.saturating_add(1);
        Next::Wait(self.next_backoff())
    }

    /// The pause after one more failure in a row: [`BACKOFF_MIN`], doubling to
    /// [`BACKOFF_MAX`].
    fn next_backoff(&mut self) -> Duration {
        let pause = self.backoff.unwrap_or(BACKOFF_MIN);
        self.backoff = Some(pause.saturating_mul(2).min(BACKOFF_MAX));
        pause
    }

    fn stop(&mut self, code: i16, message: Option<String>) -> Next {
        self.fatal = Some(CodeError { code, message });
        Next::Stop
    }
}

/// The error of a heartbeat's `code`: UNSUPPORTED_VERSION as a cluster without share
/// groups, any other as the broker's error.
pub(super) fn heartbeat_error(code: i16, message: Option<String>) -> ClientError {
    if code == UNSUPPORTED_VERSION {
        return ClientError::Protocol(ProtocolError::Unsupported {
            broker: "group coordinator".to_owned(),
            api: "ShareGroupHeartbeat",
            wanted: "(the cluster answered UNSUPPORTED_VERSION: share groups are disabled)"
                .to_owned(),
        });
    }
    broker_error("ShareGroupHeartbeat", code, message).unwrap_or(ClientError::Protocol(
        ProtocolError::Malformed {
            broker: "group coordinator".to_owned(),
            reason: "heartbeat failed without an error code".to_owned(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn io() -> ClientError {
        ClientError::Connection(ConnectionError::Io {
            broker: "k:9092".to_owned(),
            source: std::io::ErrorKind::ConnectionReset.into(),
        })
    }

    fn refused() -> ClientError {
        ClientError::Connection(ConnectionError::Authentication {
            broker: "k:9093".to_owned(),
            reason: "SASL refused".to_owned(),
        })
    }

    fn ok(epoch: i32, assignment: Option<Vec<(Uuid, Vec<i32>)>>) -> Answer {
        Answer {
            epoch,
            interval_ms: 3000,
            assignment,
            ..Answer::default()
        }
    }

    fn code(code: i16) -> Answer {
        Answer {
            code,
            message: Some(format!("code {code}")),
            ..Answer::default()
        }
    }

    #[test]
    fn joins_with_the_subscription_then_beats_with_the_coordinators_epoch() {
        let mut m = Member::default();
        m.subscribe(vec!["t".to_owned()]);
        let join = m.beat();
        assert_eq!(join.epoch, 0);
        assert_eq!(join.subscription.as_deref(), Some(&["t".to_owned()][..]));
        let topic = Uuid::new_v4();
        let taken = m.answered(&join, ok(4, Some(vec![(topic, vec![0, 1])])));
        assert_eq!(taken.next, Next::Wait(Duration::from_secs(3)));
        assert!(!taken.lost_coordinator);
        assert_eq!(m.assignment(), (1, &[(topic, vec![0, 1])][..]));
        let next = m.beat();
        assert_eq!((next.epoch, next.subscription), (4, None));
    }

    #[test]
    fn a_fenced_member_rejoins_at_epoch_zero_with_nothing_assigned() {
        let mut m = Member::default();
        m.subscribe(vec!["t".to_owned()]);
        let beat = m.beat();
        m.answered(&beat, ok(7, Some(vec![(Uuid::new_v4(), vec![0])])));
        let beat = m.beat();
        let taken = m.answered(&beat, code(FENCED_MEMBER_EPOCH));
        assert_eq!(taken.next, Next::Wait(Duration::ZERO));
        assert_eq!(m.assignment(), (2, &[][..]));
        let rejoin = m.beat();
        assert_eq!(rejoin.epoch, 0);
        assert!(rejoin.subscription.is_some());
        assert!(m.error().is_none());
    }

    #[test]
    fn a_coordinator_that_stays_unavailable_or_fences_every_join_is_asked_at_the_backoff() {
        for answer in [
            NOT_COORDINATOR,
            COORDINATOR_NOT_AVAILABLE,
            UNKNOWN_MEMBER_ID,
        ] {
            let mut m = Member::default();
            m.subscribe(vec!["t".to_owned()]);
            let waits: Vec<Next> = (0..7)
                .map(|_| {
                    let beat = m.beat();
                    m.answered(&beat, code(answer)).next
                })
                .collect();
            // The backoff doubles from 100 ms to 1 s. Fenced on a join: the backoff from its
            // start; unavailable: 50 ms once, then the backoff.
            let backoff = [100, 200, 400, 800, 1000, 1000, 1000];
            let first = if answer == UNKNOWN_MEMBER_ID {
                &[][..]
            } else {
                &[50][..]
            };
            let expected: Vec<Next> = first
                .iter()
                .chain(&backoff)
                .take(7)
                .map(|ms| Next::Wait(Duration::from_millis(*ms)))
                .collect();
            assert_eq!(waits, expected, "code {answer}");
            // An answer starts over.
            let beat = m.beat();
            m.answered(&beat, ok(3, None));
            let beat = m.beat();
            // Fenced with an epoch (not a join): rejoining at once.
            let again = if answer == UNKNOWN_MEMBER_ID {
                Duration::ZERO
            } else {
                COORDINATOR_MOVED_PAUSE
            };
            assert_eq!(m.answered(&beat, code(answer)).next, Next::Wait(again));
        }
    }

    #[test]
    fn a_subscription_refused_for_authorization_is_reported_once_and_sent_again() {
        let mut m = Member::default();
        m.subscribe(vec!["denied".to_owned()]);
        let beat = m.beat();
        m.answered(&beat, ok(1, None));
        m.subscribe(vec!["denied".to_owned(), "other".to_owned()]);
        let beat = m.beat();
        assert!(beat.subscription.is_some());
        let taken = m.answered(&beat, code(TOPIC_AUTHORIZATION_FAILED));
        assert!(matches!(taken.next, Next::Wait(_)));
        let error = m.error().expect("reported");
        assert_eq!(error.broker_error().map(|e| e.code), Some(29));
        assert!(m.error().is_none(), "reported once");
        assert!(m.beat().subscription.is_some(), "sent again");
    }

    #[test]
    fn failures_back_off_doubling_to_a_second_and_start_over_after_an_answer() {
        let mut m = Member::default();
        let waits: Vec<Next> = (0..6).map(|_| m.lookup_failed(&io())).collect();
        let ms = |n| Next::Wait(Duration::from_millis(n));
        assert_eq!(
            waits,
            [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
        );
        assert_eq!(m.failures(), 6);
        let beat = m.beat();
        m.answered(&beat, ok(1, None));
        assert_eq!(m.failures(), 0);
        let beat = m.beat();
        assert_eq!(m.beat_failed(&beat, &io()).next, ms(100));
    }

    #[test]
    fn refused_settings_and_fatal_codes_stop_the_member_for_good() {
        let mut m = Member::default();
        assert_eq!(m.lookup_failed(&refused()), Next::Stop);
        assert!(m.refused().is_some_and(|e| e.is_authentication()));
        assert!(m.error().is_some_and(|e| e.is_authentication()));
        assert!(m.error().is_some(), "every poll reports it");

        let mut m = Member::default();
        let denied = ClientError::Broker(BrokerError {
            api: "FindCoordinator",
            code: 30,
            name: "GROUP_AUTHORIZATION_FAILED",
            message: None,
            retriable: false,
        });
        assert_eq!(m.lookup_failed(&denied), Next::Stop);
        assert_eq!(
            m.error().and_then(|e| e.broker_error().map(|b| b.code)),
            Some(30)
        );

        let mut m = Member::default();
        let beat = m.beat();
        let unsupported = ClientError::Protocol(ProtocolError::Unsupported {
            broker: "k:9092".to_owned(),
            api: "ShareGroupHeartbeat",
            wanted: "v1".to_owned(),
        });
        assert_eq!(m.beat_failed(&beat, &unsupported).next, Next::Stop);
        assert!(matches!(
            m.error(),
            Some(ClientError::Protocol(ProtocolError::Unsupported { .. }))
        ));
    }

    #[test]
    fn leaving_forgets_the_assignment_and_a_later_subscription_joins_again() {
        let mut m = Member::default();
        m.subscribe(vec!["t".to_owned()]);
        let beat = m.beat();
        m.answered(&beat, ok(3, Some(vec![(Uuid::new_v4(), vec![0])])));
        assert!(m.heartbeat_sent());
        m.left();
        assert!(!m.heartbeat_sent());
        assert_eq!(m.assignment().1, &[][..]);
        m.subscribe(vec!["t".to_owned()]);
        assert_eq!(m.beat().epoch, 0);
    }

    /// What can happen to a member, in any order.
    #[derive(Debug, Clone)]
    enum Event {
        Subscribe(u8),
        LookupIo,
        LookupRetriableCode,
        /// A lookup refused for good (GROUP_AUTHORIZATION_FAILED) or with settings refused.
        LookupFatal {
            refused: bool,
        },
        /// A heartbeat, with a subscription change while it is in flight.
        Beat(Outcome, Option<u8>),
    }

    /// The outcome of one heartbeat.
    #[derive(Debug, Clone)]
    enum Outcome {
        Ok {
            epoch: i32,
            interval_ms: i32,
            assign: Option<u8>,
        },
        Code(i16),
        Io,
        Garbled,
        Refused,
        Unsupported,
    }

    fn outcome() -> impl Strategy<Value = Outcome> {
        prop_oneof![
            8 => (1..50i32, -5..10_000i32, proptest::option::of(0..4u8))
                .prop_map(|(epoch, interval_ms, assign)| Outcome::Ok { epoch, interval_ms, assign }),
            6 => prop::sample::select(vec![
                NOT_COORDINATOR,
                COORDINATOR_NOT_AVAILABLE,
                COORDINATOR_LOAD_IN_PROGRESS,
                FENCED_MEMBER_EPOCH,
                UNKNOWN_MEMBER_ID,
                TOPIC_AUTHORIZATION_FAILED,
            ])
            .prop_map(Outcome::Code),
            1 => prop::sample::select(vec![42i16, 30, 69, -1]).prop_map(Outcome::Code),
            2 => Just(Outcome::Io),
            2 => Just(Outcome::Garbled),
            1 => Just(Outcome::Refused),
            1 => Just(Outcome::Unsupported),
        ]
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            2 => (0..3u8).prop_map(Event::Subscribe),
            2 => Just(Event::LookupIo),
            2 => Just(Event::LookupRetriableCode),
            1 => any::<bool>().prop_map(|refused| Event::LookupFatal { refused }),
            12 => (outcome(), proptest::option::weighted(0.2, 0..3u8))
                .prop_map(|(outcome, during)| Event::Beat(outcome, during)),
        ]
    }

    fn lookup_code(code: i16, retriable: bool) -> ClientError {
        ClientError::Broker(BrokerError {
            api: "FindCoordinator",
            code,
            name: "SOME_CODE",
            message: None,
            retriable,
        })
    }

    fn topics(n: u8) -> Vec<String> {
        (0..n).map(|i| format!("t{i}")).collect()
    }

    /// What the model expects of the member, and what the member did.
    #[derive(Default)]
    struct Model {
        /// A subscription change not yet carried by an answered beat.
        owed: bool,
        /// The coordinator's last epoch, 0 after a fence.
        epoch: i32,
        last_failure_pause: Option<Duration>,
        version: u64,
        assignment: Vec<(Uuid, Vec<i32>)>,
        /// The error reported when the member stopped.
        stopped: Option<String>,
    }

    /// Applies `event` to `m`, checking every expectation of `model` on the way; returns
    /// the step, and whether it followed a failure the backoff counts.
    fn apply(
        m: &mut Member,
        model: &mut Model,
        event: Event,
        ids: &[Uuid],
    ) -> Result<(Next, bool), TestCaseError> {
        Ok(match event {
            Event::Subscribe(n) => {
                m.subscribe(topics(n));
                model.owed = true;
                (Next::Wait(Duration::ZERO), false)
            }
            Event::LookupIo => (m.lookup_failed(&io()), true),
            Event::LookupRetriableCode => (
                m.lookup_failed(&lookup_code(COORDINATOR_NOT_AVAILABLE, true)),
                true,
            ),
            Event::LookupFatal { refused: true } => (m.lookup_failed(&refused()), true),
            Event::LookupFatal { refused: false } => {
                (m.lookup_failed(&lookup_code(30, false)), true)
            }
            Event::Beat(outcome, during) => {
                // After a stop only the error is checked (the loop would have ended).
                let live = model.stopped.is_none();
                let beat = m.beat();
                if live {
                    prop_assert_eq!(beat.epoch, model.epoch);
                }
                if live && (model.owed || model.epoch == 0) {
                    prop_assert!(beat.subscription.is_some(), "owed subscription not sent");
                }
                if let Some(n) = during {
                    m.subscribe(topics(n));
                    model.owed = true;
                }
                let answered_with_it = beat.subscription.is_some() && during.is_none();
                match outcome {
                    Outcome::Ok {
                        epoch,
                        interval_ms,
                        assign,
                    } => {
                        let assignment = assign.map(|n| {
                            ids.iter()
                                .take(n.into())
                                .map(|t| (*t, vec![0, 1]))
                                .collect()
                        });
                        let answer = Answer {
                            epoch,
                            interval_ms,
                            assignment,
                            ..Answer::default()
                        };
                        let taken = m.answered(&beat, answer);
                        model.epoch = epoch;
                        if answered_with_it {
                            model.owed = false;
                        }
                        model.last_failure_pause = None;
                        prop_assert!(
                            !live || matches!(taken.next, Next::Wait(d) if d > Duration::ZERO)
                        );
                        (taken.next, false)
                    }
                    Outcome::Code(code) => {
                        let taken = m.answered(
                            &beat,
                            Answer {
                                code,
                                ..Answer::default()
                            },
                        );
                        if matches!(code, FENCED_MEMBER_EPOCH | UNKNOWN_MEMBER_ID) {
                            model.epoch = 0;
                            prop_assert!(!live || m.assignment().1.is_empty());
                        }
                        prop_assert!(
                            !live
                                || taken.lost_coordinator
                                    == matches!(code, NOT_COORDINATOR | COORDINATOR_NOT_AVAILABLE)
                        );
                        if code == TOPIC_AUTHORIZATION_FAILED && live {
                            prop_assert!(
                                m.error().is_some_and(|e| e
                                    .broker_error()
                                    .is_some_and(|b| b.code == code))
                            );
                        }
                        (taken.next, code == COORDINATOR_LOAD_IN_PROGRESS)
                    }
                    Outcome::Io | Outcome::Garbled | Outcome::Refused | Outcome::Unsupported => {
                        let error = match outcome {
                            Outcome::Io => io(),
                            Outcome::Refused => refused(),
                            Outcome::Unsupported => {
                                ClientError::Protocol(ProtocolError::Unsupported {
                                    broker: "k:9092".to_owned(),
                                    api: "ShareGroupHeartbeat",
                                    wanted: "v1".to_owned(),
                                })
                            }
                            _ => ClientError::Protocol(ProtocolError::Garbled {
                                broker: "k:9092".to_owned(),
                                api: "ShareGroupHeartbeat",
                                source: "bad frame".into(),
                            }),
                        };
                        let taken = m.beat_failed(&beat, &error);
                        prop_assert!(!live || taken.lost_coordinator);
                        (taken.next, true)
                    }
                }
            }
        })
    }

    proptest! {
        /// Over any run of outcomes: the subscription is owed until a beat carrying it was
        /// answered with no change since it was sent (and goes with every beat while owed,
        /// and with every join); each beat carries the coordinator's last epoch, or 0 after a
        /// fence; pauses after failures stay within the backoff's bounds and never shrink
        /// until an answer; the assignment's version changes whenever the assignment does;
        /// refused settings, a refused lookup and a cluster without share groups stop the
        /// member, and whatever follows, its error stays the one it stopped with.
        #[test]
        fn the_member_never_loses_its_subscription_and_backs_off_within_bounds(
            events in proptest::collection::vec(event(), 1..80),
        ) {
            let mut m = Member::default();
            let mut model = Model::default();
            let ids: Vec<Uuid> = (0..4).map(|_| Uuid::new_v4()).collect();
            for event in events {
                let stop_expected = matches!(
                    event,
                    Event::LookupFatal { .. } | Event::Beat(Outcome::Refused | Outcome::Unsupported, _)
                );
                let (next, failure) = apply(&mut m, &mut model, event, &ids)?;
                if let Some(first) = &model.stopped {
                    let now = m.error().map(|e| e.to_string());
                    prop_assert_eq!(now.as_ref(), Some(first), "the error is final");
                    continue;
                }
                if stop_expected {
                    prop_assert_eq!(next, Next::Stop);
                }
                if let (true, Next::Wait(pause)) = (failure, next) {
                    prop_assert!((BACKOFF_MIN..=BACKOFF_MAX).contains(&pause));
                    if let Some(last) = model.last_failure_pause {
                        prop_assert!(pause >= last, "the backoff shrank");
                    }
                    model.last_failure_pause = Some(pause);
                }
                let (version, assignment) = m.assignment();
                if assignment != model.assignment.as_slice() {
                    prop_assert_ne!(version, model.version, "the assignment changed under the same version");
                }
                model.version = version;
                model.assignment = assignment.to_vec();
                if next == Next::Stop {
                    let first = m.error().map(|e| e.to_string());
                    prop_assert!(first.is_some(), "stopped without an error");
                    model.stopped = first;
                }
            }
        }
    }
}
