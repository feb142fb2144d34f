//! Share-group membership: FindCoordinator and the ShareGroupHeartbeat loop, on a connection of
//! its own so a long-polling ShareFetch never delays a heartbeat.
//!
//! What to send and how to take each outcome is decided by [`Member`], a
//! state machine without I/O or clock (joins with epoch 0 and the client-generated member
//! id, sends the subscription when it changes and again until a beat carrying it is
//! answered, rejoins with the same member id when fenced, backs off on load and transport
//! errors, stops on fatal errors, which `poll` then returns; reactions follow the Java
//! client's `AbstractHeartbeatRequestManager`). The loop here, a tokio task, only finds the
//! coordinator, sends and waits. After a heartbeat that changed the member's epoch, it
//! describes the group on the same connection to count the members of each partition
//! ([`sharing`]).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kafka_protocol::messages::{
    ApiKey, GroupId, ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse, TopicName,
};
use kafka_protocol::protocol::{Message, StrBytes};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::kafka::cluster::link::ClusterLink;
use crate::kafka::error::ClientError;
use crate::kafka::error::codes::broker_error;
use crate::kafka::net::connection::{Connection, ConnectionConfig};
use crate::kafka::net::coordinator::{GROUP, find_coordinator_address};

use self::member::{Answer, GROUP_ID_NOT_FOUND, Member, Next, UNKNOWN_MEMBER_ID};
use super::sharing::{self, Sharers, Sharing};

mod member;

/// The member's state and the connection it beats on, behind the membership's lock.
#[derive(Debug, Default)]
struct State {
    /// The membership's decisions, without I/O ([`member`]).
    member: Member,
    coordinator: Option<Connection>,
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
    link: Arc<ClusterLink>,
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
        let (version, assignment) = state.member.assignment();
        (version, assignment.to_vec())
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
        if self.shared.lock().member.assignment_version() != seen {
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

    pub(crate) fn new(group_id: &str, link: Arc<ClusterLink>) -> Self {
        Self {
            shared: Arc::new(Shared {
                group_id: group_id.to_owned(),
                member_id: new_member_id(),
                state: Mutex::new(State::default()),
                wake: Notify::new(),
                changed: Notify::new(),
            }),
            link,
            task: None,
        }
    }

    pub(crate) fn member_id(&self) -> &str {
        &self.shared.member_id
    }

    pub(crate) fn epoch(&self) -> i32 {
        self.shared.lock().member.epoch()
    }

    /// Sets the subscription and starts (or nudges) the heartbeat loop.
    pub(crate) fn subscribe(&mut self, topics: Vec<String>) {
        self.shared.lock().member.subscribe(topics);
        if self.task.is_none() {
            let shared = Arc::clone(&self.shared);
            let link = Arc::clone(&self.link);
            self.task = Some(tokio::spawn(heartbeat_loop(shared, link)));
        } else {
            self.shared.wake.notify_one();
        }
    }

    /// The refusal that stopped the loop (credentials or settings the group's brokers do
    /// not accept), if any: reported by every later poll and commit.
    pub(crate) fn refused(&self) -> Option<ClientError> {
        self.shared.lock().member.refused()
    }

    /// A fatal error of the loop, or a transient one not yet reported.
    pub(crate) fn take_error(&self) -> Option<ClientError> {
        self.shared.lock().member.error()
    }

    /// Stops the loop and sends the leave heartbeat (epoch -1), then closes the connections
    /// the membership uses (the coordinator's and the cluster-wide one), whatever the outcome.
    pub(crate) async fn leave(&mut self, timeout: Duration) -> Result<(), ClientError> {
        let result = self.send_leave(timeout).await;
        self.close_connections();
        // Out of the group: no assignment, and a later `subscribe` joins again at epoch 0.
        self.shared.lock().member.left();
        self.shared.changed.notify_waiters();
        result
    }

    /// Closes the coordinator and cluster-wide connections (a later request opens new ones).
    pub(crate) fn close_connections(&self) {
        let coordinator = self.shared.lock().coordinator.take();
        if let Some(coordinator) = coordinator {
            coordinator.close();
        }
        self.link.disconnect();
    }

    async fn send_leave(&mut self, timeout: Duration) -> Result<(), ClientError> {
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        task.abort();
        // Wait for the abort, so no heartbeat can follow the leave.
        let _ = task.await;
        let (sent_any, coordinator) = {
            let mut state = self.shared.lock();
            (state.member.heartbeat_sent(), state.coordinator.take())
        };
        if !sent_any {
            return Ok(());
        }
        let coordinator = match coordinator {
            Some(c) if c.is_reusable() => c,
            _ => {
                let via = self.link.connection().await?;
                find_coordinator(&self.shared.group_id, &via, self.link.config()).await?
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
        self.shared.lock().member.leave_answered();
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
) -> Result<Connection, ClientError> {
    let address = find_coordinator_address(via, GROUP, group_id).await?;
    Connection::connect(&address, config).await
}

/// Consecutive failures of the heartbeat (or the coordinator lookup) before one is logged as a
/// warning: a few are routine (a coordinator moving, a broker restarting), a run of them means
/// the member cannot reach its group and will get no records.
const FAILURES_BEFORE_WARNING: u32 = 5;

/// Logs a failure of the membership loop: at debug level while it is routine, as a warning at
/// the fifth in a row and every sixtieth after (about once a minute at the 1 s backoff).
fn log_failure(failures: u32, doing: &str, error: &ClientError) {
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

async fn heartbeat_loop(shared: Arc<Shared>, link: Arc<ClusterLink>) {
    loop {
        let existing = shared.lock().coordinator.clone();
        let coordinator = match existing {
            Some(c) if c.is_reusable() => c,
            _ => {
                let found = match link.connection().await {
                    Ok(via) => find_coordinator(&shared.group_id, &via, link.config()).await,
                    Err(e) => Err(e),
                };
                match found {
                    Ok(c) => {
                        shared.lock().coordinator = Some(c.clone());
                        c
                    }
                    Err(e) => {
                        let (next, failures) = {
                            let mut state = shared.lock();
                            (state.member.lookup_failed(&e), state.member.failures())
                        };
                        if !pause(&shared, next, failures, "the group coordinator lookup", &e).await
                        {
                            return;
                        }
                        continue;
                    }
                }
            }
        };
        let beat = shared.lock().member.beat();
        let request = heartbeat_request(&shared, beat.epoch, beat.subscription.clone());
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
            Err(e) => {
                let (next, failures) = {
                    let mut state = shared.lock();
                    let taken = state.member.beat_failed(&beat, &e);
                    if taken.lost_coordinator {
                        state.coordinator = None;
                    }
                    (taken.next, state.member.failures())
                };
                if !pause(&shared, next, failures, "the share-group heartbeat", &e).await {
                    return;
                }
                continue;
            }
        };
        let answer = Answer {
            code: response.error_code,
            message: response.error_message.map(|m| m.to_string()),
            epoch: response.member_epoch,
            interval_ms: response.heartbeat_interval_ms,
            assignment: response.assignment.map(|a| {
                a.topic_partitions
                    .into_iter()
                    .map(|tp| (tp.topic_id, tp.partitions))
                    .collect()
            }),
        };
        let (taken, epoch) = {
            let mut state = shared.lock();
            let assigned = answer.assignment.is_some();
            let taken = state.member.answered(&beat, answer);
            if taken.lost_coordinator {
                state.coordinator = None;
            }
            if assigned {
                tracing::debug!(assignment = ?state.member.assignment().1, epoch = state.member.epoch(), "assignment received");
            }
            (taken, state.member.epoch())
        };
        let Next::Wait(interval) = taken.next else {
            shared.changed.notify_waiters();
            return;
        };
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

/// After a failed lookup or heartbeat: logs it, wakes the pollers when the member stopped
/// (they report its error), else waits `next`'s pause. False when the loop must stop.
async fn pause(
    shared: &Shared,
    next: Next,
    failures: u32,
    doing: &str,
    error: &ClientError,
) -> bool {
    match next {
        Next::Stop => {
            shared.changed.notify_waiters();
            false
        }
        Next::Wait(pause) => {
            log_failure(failures, doing, error);
            tokio::time::sleep(pause).await;
            true
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
