//! Share-group membership: FindCoordinator and the ShareGroupHeartbeat loop, on a connection of
//! its own so a long-polling ShareFetch never delays a heartbeat.
//!
//! The loop runs as a tokio task. It joins with epoch 0 and the client-generated member id,
//! sends the subscription when it changes, follows the coordinator, rejoins with the same
//! member id when fenced, backs off on load and transport errors, and stops on fatal errors,
//! which `poll` then returns. Reactions follow the Java client (`AbstractHeartbeatRequestManager`).
//! After a heartbeat that changed the member's epoch, it describes the group on the same
//! connection to count the members of each partition ([`sharing`]).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kafka_protocol::messages::{
    ApiKey, GroupId, ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse, TopicName,
};
use kafka_protocol::protocol::{Message, StrBytes};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::consumer::ConsumerError;
use crate::kafka::error::codes::broker_error;
use crate::kafka::error::{BrokerError, ConnectionError, ProtocolError};
use crate::kafka::net::bootstrap::Bootstrap;
use crate::kafka::net::connection::{Connection, ConnectionConfig};
use crate::kafka::net::coordinator::{GROUP, find_coordinator_address};

use super::sharing::{self, Sharers, Sharing};

const NOT_COORDINATOR: i16 = 16;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const UNKNOWN_MEMBER_ID: i16 = 25;
const FENCED_MEMBER_EPOCH: i16 = 110;
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const UNSUPPORTED_VERSION: i16 = 35;
const GROUP_ID_NOT_FOUND: i16 = 69;

/// A fatal heartbeat outcome, kept so every later poll can report it.
#[derive(Debug, Clone)]
struct Fatal {
    code: i16,
    message: Option<String>,
}

/// A connection the loop cannot make with the consumer's settings (refused credentials or
/// certificates, a listener of another security protocol), kept so every later poll can
/// report it.
#[derive(Debug, Clone)]
enum Refused {
    Authentication { broker: String, reason: String },
    Config { key: String, reason: String },
}

impl Refused {
    /// The refusal in `error`, if it is one.
    fn of(error: &ConsumerError) -> Option<Self> {
        match error {
            ConsumerError::Connection(ConnectionError::Authentication { broker, reason }) => {
                Some(Self::Authentication {
                    broker: broker.clone(),
                    reason: reason.clone(),
                })
            }
            ConsumerError::Config { key, reason } => Some(Self::Config {
                key: key.clone(),
                reason: reason.clone(),
            }),
            _ => None,
        }
    }

    fn error(&self) -> ConsumerError {
        match self.clone() {
            Self::Authentication { broker, reason } => {
                ConsumerError::Connection(ConnectionError::Authentication { broker, reason })
            }
            Self::Config { key, reason } => ConsumerError::Config { key, reason },
        }
    }
}

#[derive(Debug, Default)]
struct State {
    epoch: i32,
    /// Assigned partitions by topic id; replaced whole by each assignment.
    assignment: Vec<(Uuid, Vec<i32>)>,
    /// Bumped on every assignment change, so pollers can tell.
    assignment_version: u64,
    subscription: Vec<String>,
    send_subscription: bool,
    interval: Option<Duration>,
    fatal: Option<Fatal>,
    /// The connection to the group was refused; the loop stopped.
    refused: Option<Refused>,
    /// A non-fatal error to report from the next poll (TOPIC_AUTHORIZATION_FAILED).
    transient: Option<Fatal>,
    coordinator: Option<Connection>,
    /// A heartbeat was sent at least once, so the broker may know this member.
    heartbeat_sent: bool,
    /// How many members share each partition, from ShareGroupDescribe ([`sharing`]).
    sharing: Sharing,
}

#[derive(Debug)]
struct Shared {
    group_id: String,
    member_id: String,
    state: Mutex<State>,
    /// Wakes the loop early (subscription change).
    wake: Notify,
    /// Wakes pollers on membership changes.
    changed: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The member's view of its group, shared with the heartbeat task.
#[derive(Debug)]
pub(crate) struct Membership {
    shared: Arc<Shared>,
    bootstrap: Arc<Bootstrap>,
    task: Option<JoinHandle<()>>,
}

/// A member id as the Java client makes one: 16 random bytes, URL-safe base64 without padding.
pub(crate) fn new_member_id() -> String {
    base64_url(Uuid::new_v4().as_bytes())
}

fn base64_url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// What the fetch engine reads of the membership: the assignment and its changes.
#[derive(Debug, Clone)]
pub(crate) struct MembershipView {
    shared: Arc<Shared>,
}

impl MembershipView {
    /// The current assignment and its version.
    pub(crate) fn assignment(&self) -> (u64, Vec<(Uuid, Vec<i32>)>) {
        let state = self.shared.lock();
        (state.assignment_version, state.assignment.clone())
    }

    /// How many members each partition is assigned to, as the group was last described
    /// (empty when it was not: each member then counts itself alone).
    pub(crate) fn sharers(&self) -> Arc<Sharers> {
        Arc::clone(&self.shared.lock().sharing.sharers)
    }

    /// Waits until the assignment differs from `seen`, or the heartbeat loop announces a
    /// change (a fatal error, say). Cancel safe.
    pub(crate) async fn changed(&self, seen: u64) {
        let notified = self.shared.changed.notified();
        let mut notified = std::pin::pin!(notified);
        // Register before checking, so a change between the check and the wait wakes us.
        notified.as_mut().enable();
        if self.shared.lock().assignment_version != seen {
            return;
        }
        notified.await;
    }
}

impl Membership {
    /// The engine's view of this membership.
    pub(crate) fn view(&self) -> MembershipView {
        MembershipView {
            shared: Arc::clone(&self.shared),
        }
    }

    pub(crate) fn new(group_id: &str, bootstrap: Arc<Bootstrap>) -> Self {
        Self {
            shared: Arc::new(Shared {
                group_id: group_id.to_owned(),
                member_id: new_member_id(),
                state: Mutex::new(State::default()),
                wake: Notify::new(),
                changed: Notify::new(),
            }),
            bootstrap,
            task: None,
        }
    }

    pub(crate) fn member_id(&self) -> &str {
        &self.shared.member_id
    }

    pub(crate) fn epoch(&self) -> i32 {
        self.shared.lock().epoch
    }

    /// Sets the subscription and starts (or nudges) the heartbeat loop.
    pub(crate) fn subscribe(&mut self, topics: Vec<String>) {
        {
            let mut state = self.shared.lock();
            state.subscription = topics;
            state.send_subscription = true;
        }
        if self.task.is_none() {
            let shared = Arc::clone(&self.shared);
            let bootstrap = Arc::clone(&self.bootstrap);
            self.task = Some(tokio::spawn(heartbeat_loop(shared, bootstrap)));
        } else {
            self.shared.wake.notify_one();
        }
    }

    /// The refusal that stopped the loop (credentials or settings the group's brokers do
    /// not accept), if any: reported by every later poll and commit.
    pub(crate) fn refused(&self) -> Option<ConsumerError> {
        self.shared.lock().refused.as_ref().map(Refused::error)
    }

    /// A fatal error of the loop, or a transient one not yet reported.
    pub(crate) fn take_error(&self) -> Option<ConsumerError> {
        let mut state = self.shared.lock();
        if let Some(refused) = &state.refused {
            return Some(refused.error());
        }
        let reported = match &state.fatal {
            Some(fatal) => Some(fatal.clone()),
            None => state.transient.take(),
        };
        reported.map(|f| heartbeat_error(f.code, f.message))
    }

    /// Stops the loop and sends the leave heartbeat (epoch -1), then closes the connections
    /// the membership opened (coordinator and bootstrap), whatever the outcome.
    pub(crate) async fn leave(&mut self, timeout: Duration) -> Result<(), ConsumerError> {
        let result = self.send_leave(timeout).await;
        self.close_connections();
        // Out of the group: no assignment, and a later `subscribe` joins again at epoch 0.
        {
            let mut state = self.shared.lock();
            state.epoch = 0;
            state.assignment.clear();
            state.assignment_version = state.assignment_version.wrapping_add(1);
            state.heartbeat_sent = false;
        }
        self.shared.changed.notify_waiters();
        result
    }

    /// Closes the coordinator and bootstrap connections (a later request opens new ones).
    pub(crate) fn close_connections(&self) {
        let coordinator = self.shared.lock().coordinator.take();
        if let Some(coordinator) = coordinator {
            coordinator.close();
        }
        self.bootstrap.close();
    }

    async fn send_leave(&mut self, timeout: Duration) -> Result<(), ConsumerError> {
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        task.abort();
        // Wait for the abort, so no heartbeat can follow the leave.
        let _ = task.await;
        let (sent_any, coordinator) = {
            let mut state = self.shared.lock();
            (state.heartbeat_sent, state.coordinator.take())
        };
        if !sent_any {
            return Ok(());
        }
        let coordinator = match coordinator {
            Some(c) if !c.is_closed() => c,
            _ => {
                let via = self.bootstrap.get().await?;
                find_coordinator(&self.shared.group_id, &via, self.bootstrap.config()).await?
            }
        };
        // Kept where `leave` closes it once the answer is in (or the wait is given up).
        self.shared.lock().coordinator = Some(coordinator.clone());
        let request = heartbeat_request(&self.shared, -1, None);
        let version = coordinator.negotiate(
            ApiKey::ShareGroupHeartbeat,
            ShareGroupHeartbeatRequest::VERSIONS,
        )?;
        let response: ShareGroupHeartbeatResponse = coordinator
            .request_with_timeout(ApiKey::ShareGroupHeartbeat, version, &request, timeout)
            .await?;
        self.shared.lock().epoch = -1;
        match response.error_code {
            // The member never made it into the group (a join was cut short): nothing to leave.
            UNKNOWN_MEMBER_ID | GROUP_ID_NOT_FOUND => Ok(()),
            code => match broker_error(
                "ShareGroupHeartbeat",
                code,
                response.error_message.map(|m| m.to_string()),
            ) {
                Some(e) => Err(e),
                None => Ok(()),
            },
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

fn heartbeat_error(code: i16, message: Option<String>) -> ConsumerError {
    if code == UNSUPPORTED_VERSION {
        return ConsumerError::Protocol(ProtocolError::Unsupported {
            broker: "group coordinator".to_owned(),
            api: "ShareGroupHeartbeat",
            wanted: "(the cluster answered UNSUPPORTED_VERSION: share groups are disabled)"
                .to_owned(),
        });
    }
    broker_error("ShareGroupHeartbeat", code, message).unwrap_or(ConsumerError::Protocol(
        ProtocolError::Malformed {
            broker: "group coordinator".to_owned(),
            reason: "heartbeat failed without an error code".to_owned(),
        },
    ))
}

fn heartbeat_request(
    shared: &Shared,
    epoch: i32,
    subscription: Option<Vec<String>>,
) -> ShareGroupHeartbeatRequest {
    ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(shared.group_id.clone())))
        .with_member_id(StrBytes::from_string(shared.member_id.clone()))
        .with_member_epoch(epoch)
        .with_subscribed_topic_names(subscription.map(|topics| {
            topics
                .into_iter()
                .map(|t| TopicName(StrBytes::from_string(t)))
                .collect()
        }))
}

/// FindCoordinator (key type GROUP) through `via`, then a connection to the coordinator.
pub(crate) async fn find_coordinator(
    group_id: &str,
    via: &Connection,
    config: &ConnectionConfig,
) -> Result<Connection, ConsumerError> {
    let address = find_coordinator_address(via, GROUP, group_id).await?;
    Connection::connect(&address, config).await
}

/// Consecutive failures of the heartbeat (or the coordinator lookup) before one is logged as a
/// warning: a few are routine (a coordinator moving, a broker restarting), a run of them means
/// the member cannot reach its group and will get no records.
const FAILURES_BEFORE_WARNING: u32 = 5;

/// Logs a failure of the membership loop: at debug level while it is routine, as a warning at
/// the fifth in a row and every sixtieth after (about once a minute at the 1 s backoff).
fn log_failure(failures: u32, doing: &str, error: &ConsumerError) {
    if failures == FAILURES_BEFORE_WARNING
        || (failures > FAILURES_BEFORE_WARNING && failures % 60 == 0)
    {
        tracing::warn!(
            failures,
            error = %error,
            "{doing} keeps failing; this member gets no records until it succeeds (retrying)"
        );
    } else {
        tracing::debug!(failures, error = %error, "{doing} failed, retrying");
    }
}

/// For an error no retry fixes (authentication refused, a listener of another security
/// protocol): records it for the polls, wakes them, and says the loop must stop.
fn stop_on(shared: &Shared, error: &ConsumerError) -> bool {
    let Some(refused) = Refused::of(error) else {
        return false;
    };
    tracing::error!(error = %error, "the group cannot be reached with these settings; the consumer stops");
    shared.lock().refused = Some(refused);
    shared.changed.notify_waiters();
    true
}

async fn heartbeat_loop(shared: Arc<Shared>, bootstrap: Arc<Bootstrap>) {
    let mut backoff = Duration::from_millis(100);
    let mut failures: u32 = 0;
    loop {
        let coordinator = {
            let existing = shared.lock().coordinator.clone();
            match existing {
                Some(c) if !c.is_closed() => c,
                _ => {
                    let found = match bootstrap.get().await {
                        Ok(via) => {
                            find_coordinator(&shared.group_id, &via, bootstrap.config()).await
                        }
                        Err(e) => Err(e),
                    };
                    match found {
                        Ok(c) => {
                            shared.lock().coordinator = Some(c.clone());
                            c
                        }
                        // GROUP_AUTHORIZATION_FAILED and the like: Java gives up, so do we.
                        Err(ConsumerError::Broker(BrokerError {
                            code,
                            message,
                            retriable: false,
                            ..
                        })) => {
                            tracing::error!(code, ?message, "coordinator lookup failed fatally");
                            shared.lock().fatal = Some(Fatal { code, message });
                            shared.changed.notify_waiters();
                            return;
                        }
                        Err(e) if stop_on(&shared, &e) => return,
                        Err(e) => {
                            failures = failures.saturating_add(1);
                            log_failure(failures, "the group coordinator lookup", &e);
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(Duration::from_secs(1));
                            continue;
                        }
                    }
                }
            }
        };
        let (epoch, subscription) = {
            let mut state = shared.lock();
            let send = state.epoch == 0 || state.send_subscription;
            state.send_subscription = false;
            state.heartbeat_sent = true;
            (state.epoch, send.then(|| state.subscription.clone()))
        };
        let request = heartbeat_request(&shared, epoch, subscription.clone());
        let result = match coordinator.negotiate(
            ApiKey::ShareGroupHeartbeat,
            ShareGroupHeartbeatRequest::VERSIONS,
        ) {
            Ok(version) => {
                coordinator
                    .request::<_, ShareGroupHeartbeatResponse>(
                        ApiKey::ShareGroupHeartbeat,
                        version,
                        &request,
                    )
                    .await
            }
            Err(e) => Err(e),
        };
        let response = match result {
            Ok(r) => r,
            Err(e @ ConsumerError::Protocol(ProtocolError::Unsupported { .. })) => {
                tracing::error!(error = %e, "share groups unsupported");
                shared.lock().fatal = Some(Fatal {
                    code: UNSUPPORTED_VERSION,
                    message: Some(e.to_string()),
                });
                shared.changed.notify_waiters();
                return;
            }
            Err(e) if stop_on(&shared, &e) => return,
            Err(e) => {
                failures = failures.saturating_add(1);
                log_failure(failures, "the share-group heartbeat", &e);
                {
                    let mut state = shared.lock();
                    state.coordinator = None;
                    if subscription.is_some() {
                        state.send_subscription = true;
                    }
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        let interval = {
            let mut state = shared.lock();
            let message = response.error_message.map(|m| m.to_string());
            match response.error_code {
                0 => {
                    failures = 0;
                    backoff = Duration::from_millis(100);
                    state.epoch = response.member_epoch;
                    if response.heartbeat_interval_ms > 0 {
                        state.interval =
                            Some(Duration::from_millis(response.heartbeat_interval_ms as u64));
                    }
                    if let Some(assignment) = response.assignment {
                        state.assignment = assignment
                            .topic_partitions
                            .into_iter()
                            .map(|tp| (tp.topic_id, tp.partitions))
                            .collect();
                        state.assignment_version += 1;
                        tracing::debug!(assignment = ?state.assignment, epoch = state.epoch, "assignment received");
                    }
                    Some(state.interval.unwrap_or(Duration::from_secs(5)))
                }
                NOT_COORDINATOR | COORDINATOR_NOT_AVAILABLE => {
                    state.coordinator = None;
                    state.send_subscription |= subscription.is_some();
                    Some(Duration::from_millis(50))
                }
                COORDINATOR_LOAD_IN_PROGRESS => {
                    state.send_subscription |= subscription.is_some();
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    Some(backoff)
                }
                FENCED_MEMBER_EPOCH | UNKNOWN_MEMBER_ID => {
                    tracing::info!(
                        code = response.error_code,
                        "fenced; rejoining with the same member id"
                    );
                    state.epoch = 0;
                    state.assignment.clear();
                    state.assignment_version += 1;
                    Some(Duration::ZERO)
                }
                TOPIC_AUTHORIZATION_FAILED => {
                    state.transient = Some(Fatal {
                        code: response.error_code,
                        message,
                    });
                    Some(state.interval.unwrap_or(Duration::from_secs(5)))
                }
                code => {
                    tracing::error!(code, ?message, "fatal heartbeat error; the consumer stops");
                    state.fatal = Some(Fatal { code, message });
                    None
                }
            }
        };
        let Some(interval) = interval else {
            shared.changed.notify_waiters();
            return;
        };
        let epoch = shared.lock().epoch;
        let now = tokio::time::Instant::now();
        if response.error_code == 0 && shared.lock().sharing.wanted(epoch, now) {
            // Bounded by the heartbeat interval, so the next heartbeat is not held up long.
            let within = interval.clamp(Duration::from_millis(100), Duration::from_secs(5));
            let outcome = sharing::describe(&coordinator, &shared.group_id, within).await;
            shared.lock().sharing.update(epoch, now, outcome);
        }
        shared.changed.notify_waiters();
        if !interval.is_zero() {
            let _ = tokio::time::timeout(interval, shared.wake.notified()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_ids_look_like_java_ones() {
        let id = new_member_id();
        assert_eq!(id.len(), 22);
        assert!(
            id.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "{id}"
        );
        assert_ne!(id, new_member_id());
        assert_eq!(base64_url(b"\xfb\xff"), "-_8");
    }
}
