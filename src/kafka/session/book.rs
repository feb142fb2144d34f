//! [`SessionBook`]: the share-session bookkeeping of one member, as a plain state machine.
//!
//! It holds, per partition leader, the share session (its epoch and the partitions it
//! fetches) and whether a request to that leader is in flight; and, per partition, the
//! acknowledgements waiting to be sent. The engine asks it what to send ([`SessionBook::plan`],
//! [`SessionBook::plan_close`]), sends what it planned, and tells it what came back
//! ([`SessionBook::on_fetch`], [`SessionBook::on_acknowledge`], [`SessionBook::on_lost`]).
//! The book does no I/O and reads no clock, so every interleaving of answers, failures and
//! cancellations can be played against it in a unit test.
//!
//! Rules it keeps:
//!
//! - **One request per leader at a time.** A share session's epoch counts its requests, so a
//!   second request could only be built once the first is answered. Epochs therefore go 0
//!   (open), 1, 2, … within a session, wrap to 1 after `i32::MAX`, and -1 closes it.
//! - **An acknowledgement is sent once or reported failed, never lost.** Acknowledgements
//!   leave `pending` only into a planned request, or into the results as failures (no session
//!   with the leader: the locks went with it). A request whose fate is unknown (the
//!   connection broke, the answer could not be read, it timed out) reports its
//!   acknowledgements failed: the broker releases what the session held when the
//!   connection goes, so the records come back.
//! - **A new session carries no acknowledgements**: records acquired in an earlier session
//!   are no longer this member's.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::acks::{self, AckRange, RENEW};
use crate::consumer::{AckError, CommitResults};
use crate::kafka::codec::share_v2;
use crate::record::TopicPartition;

/// A broker (partition leader) by node id.
pub(crate) type NodeId = i32;

/// A partition by topic id and index, as share sessions name them.
pub(crate) type SessionPartition = (Uuid, i32);

/// Identifies one planned request until its answer comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Ticket(u64);

/// Share-session error codes that mean the session is gone.
const SHARE_SESSION_NOT_FOUND: i16 = 122;
const INVALID_SHARE_SESSION_EPOCH: i16 = 123;
const SHARE_SESSION_LIMIT_REACHED: i16 = 133;
const INVALID_RECORD_STATE: i16 = 121;

/// The share session with one leader.
#[derive(Debug, Default, Clone)]
struct NodeSession {
    /// 0: no session (the next ShareFetch opens one); otherwise the epoch of the next request.
    epoch: i32,
    /// The partitions the session fetches.
    partitions: BTreeSet<SessionPartition>,
    /// The request in flight to this leader, if any.
    busy: Option<Ticket>,
}

impl NodeSession {
    fn advance(&mut self) {
        self.epoch = if self.epoch == i32::MAX || self.epoch < 0 {
            1
        } else {
            self.epoch + 1
        };
    }

    fn reset(&mut self) {
        self.epoch = 0;
        self.partitions.clear();
    }
}

/// Acknowledgements of one partition waiting to be sent.
#[derive(Debug, Default)]
struct Pending {
    ranges: Vec<AckRange>,
    /// The sequence number of the oldest acknowledgement here, for commit tracking.
    oldest: u64,
}

/// What a planned request carries, kept until its answer.
#[derive(Debug)]
struct Sent {
    node: NodeId,
    kind: SentKind,
    /// The partitions whose acknowledgements it carries, with how many offsets each.
    acks: Vec<(TopicPartition, Vec<AckRange>)>,
    /// The sequence number of the oldest acknowledgement it carries (`u64::MAX` if none).
    oldest: u64,
}

#[derive(Debug)]
enum SentKind {
    Fetch { target: BTreeSet<SessionPartition> },
    Acknowledge { close: bool },
}

/// A request the engine is to send.
#[derive(Debug)]
pub(crate) enum Planned {
    /// A ShareFetch: fetches the leader's partitions of the assignment and carries the
    /// acknowledgements pending for them.
    Fetch {
        ticket: Ticket,
        node: NodeId,
        request: share_v2::ShareFetchRequest,
    },
    /// A ShareAcknowledge: acknowledgements only (a commit, RENEW, or close with epoch -1).
    Acknowledge {
        ticket: Ticket,
        node: NodeId,
        request: share_v2::ShareAcknowledgeRequest,
    },
}

impl Planned {
    /// The ticket of the request.
    pub(crate) fn ticket(&self) -> Ticket {
        match self {
            Self::Fetch { ticket, .. } | Self::Acknowledge { ticket, .. } => *ticket,
        }
    }

    /// The leader it goes to.
    pub(crate) fn node(&self) -> NodeId {
        match self {
            Self::Fetch { node, .. } | Self::Acknowledge { node, .. } => *node,
        }
    }
}

/// The fetch settings a planned ShareFetch carries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FetchSettings {
    pub(crate) max_wait_ms: i32,
    pub(crate) min_bytes: i32,
    pub(crate) max_bytes: i32,
    pub(crate) max_records: i32,
    /// The size of the batches the broker acquires and we acknowledge in (`max.poll.records`).
    pub(crate) batch_size: i32,
    /// `share.acquire.mode=record_limit`: at most `max_records` acquired, one leader at a time.
    pub(crate) record_limit: bool,
    /// `max.partition.fetch.bytes`, if set: ShareFetch v1+ has no per-partition limit, and
    /// the broker splits `MaxBytes` evenly over the request's partitions, so a request asks
    /// for at most this much per partition it fetches.
    pub(crate) partition_max_bytes: Option<i32>,
}

/// What the engine knows when it asks for requests.
#[derive(Debug)]
pub(crate) struct PlanInput<'a> {
    /// The assigned partitions, by their current leader.
    pub(crate) targets: &'a HashMap<NodeId, BTreeSet<SessionPartition>>,
    /// Where each partition's acknowledgements go: its topic id and leader, if known.
    pub(crate) leaders: &'a HashMap<TopicPartition, (Uuid, NodeId)>,
    /// Leaders with a live connection; no request is planned for the others.
    pub(crate) connected: &'a BTreeSet<NodeId>,
    /// Fetch now (a poll waits for records, or prefetch wants more); without it only
    /// acknowledgements go out, and only with `flush`.
    pub(crate) fetch: Option<FetchSettings>,
    /// Send pending acknowledgements now even without a fetch (a commit).
    pub(crate) flush: bool,
}

/// A partition of a ShareFetch or ShareAcknowledge answer, as the book needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartitionAnswer {
    pub(crate) partition: TopicPartition,
    /// The acknowledgement outcome (0: accepted) with the broker's message.
    pub(crate) ack_code: i16,
    pub(crate) ack_message: Option<String>,
}

/// The parts of an answer the book needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Answer {
    /// The top-level error code and message.
    pub(crate) error_code: i16,
    pub(crate) error_message: Option<String>,
    /// The partitions the answer mentions.
    pub(crate) partitions: Vec<PartitionAnswer>,
}

/// What an answer means beyond the book: the engine acts on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Effect {
    /// The connection's state is unknown: close it (the broker then ends the session).
    pub(crate) drop_connection: bool,
}

/// The share-session bookkeeping of one member. See the [module docs](self).
#[derive(Debug)]
pub(crate) struct SessionBook {
    group_id: StrBytes,
    member_id: StrBytes,
    nodes: HashMap<NodeId, NodeSession>,
    pending: BTreeMap<TopicPartition, Pending>,
    sent: HashMap<Ticket, Sent>,
    results: CommitResults,
    next_ticket: u64,
    /// Sequence number of the last acknowledgement added.
    seq: u64,
    /// Fetches in flight that acquire records (their session has partitions to fetch).
    acquiring: BTreeSet<Ticket>,
    /// The leader of the last acquiring fetch: with `record_limit` the next one starts
    /// after it, so every leader gets its turn.
    last_acquired_from: Option<NodeId>,
}

/// The `MaxBytes` of a ShareFetch of `partitions` partitions: `fetch.max.bytes`, or less
/// when `max.partition.fetch.bytes` times the partition count is less.
fn request_max_bytes(settings: &FetchSettings, partitions: usize) -> i32 {
    match settings.partition_max_bytes {
        Some(per_partition) if partitions > 0 => {
            let count = i32::try_from(partitions).unwrap_or(i32::MAX);
            settings.max_bytes.min(per_partition.saturating_mul(count))
        }
        _ => settings.max_bytes,
    }
}

/// Acknowledgements that could not be sent fail with this; their records are redelivered.
pub(crate) fn not_sent(why: &str) -> AckError {
    AckError::Broker {
        code: 13,
        message: Some(format!(
            "NETWORK_EXCEPTION: {why}; the records will be delivered again"
        )),
    }
}

/// The outcome of one partition's acknowledgements from its error code.
pub(crate) fn ack_result(code: i16, message: Option<String>) -> Result<(), AckError> {
    match code {
        0 => Ok(()),
        INVALID_RECORD_STATE => Err(AckError::InvalidRecordState {
            detail: message
                .unwrap_or_else(|| "the records are no longer acquired by this member".to_owned()),
        }),
        code => Err(AckError::Broker { code, message }),
    }
}

/// True for the error codes that mean the share session is gone: the next request opens a
/// new one.
pub(crate) fn session_gone(code: i16) -> bool {
    matches!(
        code,
        SHARE_SESSION_NOT_FOUND | INVALID_SHARE_SESSION_EPOCH | SHARE_SESSION_LIMIT_REACHED
    )
}

impl SessionBook {
    /// An empty book for this member of this group.
    pub(crate) fn new(group_id: &str, member_id: &str) -> Self {
        Self {
            group_id: StrBytes::from_string(group_id.to_owned()),
            member_id: StrBytes::from_string(member_id.to_owned()),
            nodes: HashMap::new(),
            pending: BTreeMap::new(),
            sent: HashMap::new(),
            results: CommitResults::new(),
            next_ticket: 0,
            seq: 0,
            acquiring: BTreeSet::new(),
            last_acquired_from: None,
        }
    }

    /// Queues acknowledgements of one partition. Returns the sequence number a commit can
    /// wait on with [`settled_through`](Self::settled_through).
    pub(crate) fn acknowledge(&mut self, partition: TopicPartition, ranges: Vec<AckRange>) -> u64 {
        if ranges.is_empty() {
            return self.seq;
        }
        self.seq = self.seq.saturating_add(1);
        let seq = self.seq;
        let pending = self.pending.entry(partition).or_insert_with(|| Pending {
            ranges: Vec::new(),
            oldest: seq,
        });
        pending.ranges.extend(ranges);
        seq
    }

    /// The sequence number of the last acknowledgement queued.
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// True once every acknowledgement queued up to `seq` has been answered or failed.
    pub(crate) fn settled_through(&self, seq: u64) -> bool {
        self.pending.values().all(|p| p.oldest > seq) && self.sent.values().all(|s| s.oldest > seq)
    }

    /// True while acknowledgements of `partition` wait to be sent or for their answer.
    pub(crate) fn unsettled(&self, partition: &TopicPartition) -> bool {
        self.pending.contains_key(partition)
            || self
                .sent
                .values()
                .any(|s| s.acks.iter().any(|(tp, _)| tp == partition))
    }

    /// True while a fetch to a leader other than `node` that may acquire records of
    /// `partition` is in flight: its answer could bring copies from that leader.
    pub(crate) fn fetching_elsewhere(&self, partition: &SessionPartition, node: NodeId) -> bool {
        self.sent.values().any(|s| {
            s.node != node
                && matches!(&s.kind, SentKind::Fetch { target } if target.contains(partition))
        })
    }

    /// The partitions with acknowledgements waiting to be sent.
    pub(crate) fn pending_partitions(&self) -> impl Iterator<Item = &TopicPartition> {
        self.pending.keys()
    }

    /// True when a request is in flight.
    pub(crate) fn in_flight(&self) -> bool {
        !self.sent.is_empty()
    }

    /// True when the request of `ticket` is a fetch in flight that acquires records.
    pub(crate) fn is_acquiring(&self, ticket: Ticket) -> bool {
        self.acquiring.contains(&ticket)
    }

    /// True when a request to `node` is in flight.
    pub(crate) fn is_busy(&self, node: NodeId) -> bool {
        self.nodes.get(&node).is_some_and(|n| n.busy.is_some())
    }

    /// Leaders with an open session (epoch above 0).
    pub(crate) fn open_sessions(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes
            .iter()
            .filter(|(_, s)| s.epoch > 0)
            .map(|(n, _)| *n)
    }

    /// The epoch the next request to `node` would carry (0: it opens a session).
    pub(crate) fn epoch(&self, node: NodeId) -> i32 {
        self.nodes.get(&node).map_or(0, |n| n.epoch)
    }

    /// Takes the outcomes gathered since the last call.
    /// True when outcomes wait to be taken.
    pub(crate) fn has_results(&self) -> bool {
        !self.results.is_empty()
    }

    pub(crate) fn take_results(&mut self) -> CommitResults {
        std::mem::take(&mut self.results)
    }

    /// Puts back outcomes nobody received (a commit whose caller went away), for the next
    /// commit to report.
    pub(crate) fn restore_results(&mut self, results: CommitResults) {
        let newer = std::mem::replace(&mut self.results, results);
        self.results.merge(newer);
    }

    /// Every session is gone (closed with the final epoch): the next fetch to any leader
    /// opens a new one.
    pub(crate) fn reset_sessions(&mut self) {
        for session in self.nodes.values_mut() {
            session.reset();
        }
    }

    /// A new connection to `node`: whatever session it had went with the old one.
    pub(crate) fn connection_reset(&mut self, node: NodeId) {
        if let Some(session) = self.nodes.get_mut(&node) {
            session.reset();
        }
    }

    fn ticket(&mut self) -> Ticket {
        self.next_ticket = self.next_ticket.wrapping_add(1);
        Ticket(self.next_ticket)
    }

    /// Fails the pending acknowledgements of `partition` with `why`.
    fn fail_pending(&mut self, partition: &TopicPartition, why: &str) {
        if self.pending.remove(partition).is_some() {
            self.results.insert(partition.clone(), Err(not_sent(why)));
        }
    }

    /// Pending acknowledgements by the leader they go to. Those whose partition has no known
    /// leader, or whose leader has no open session, fail now.
    fn pending_by_node(
        &mut self,
        input: &PlanInput<'_>,
    ) -> BTreeMap<NodeId, Vec<(Uuid, TopicPartition)>> {
        let mut by_node: BTreeMap<NodeId, Vec<(Uuid, TopicPartition)>> = BTreeMap::new();
        let partitions: Vec<TopicPartition> = self.pending.keys().cloned().collect();
        for tp in partitions {
            match input.leaders.get(&tp) {
                None => self.fail_pending(&tp, "no leader is known for the partition"),
                Some(&(id, node)) => {
                    let session = self.nodes.get(&node);
                    let busy = session.is_some_and(|s| s.busy.is_some());
                    let epoch = session.map_or(0, |s| s.epoch);
                    if !busy && (epoch == 0 || !input.connected.contains(&node)) {
                        // Records acquired in an earlier session are no longer ours.
                        self.fail_pending(&tp, "no open share session with the partition leader");
                    } else if !busy {
                        by_node.entry(node).or_default().push((id, tp));
                    }
                }
            }
        }
        by_node
    }

    /// Takes the pending acknowledgements of `partitions`, normalized.
    fn take_acks(
        &mut self,
        partitions: Vec<(Uuid, TopicPartition)>,
    ) -> (Vec<(Uuid, TopicPartition, Vec<AckRange>)>, u64) {
        let mut oldest = u64::MAX;
        let mut out = Vec::with_capacity(partitions.len());
        for (id, tp) in partitions {
            if let Some(mut p) = self.pending.remove(&tp) {
                acks::normalize(&mut p.ranges);
                oldest = oldest.min(p.oldest);
                out.push((id, tp, p.ranges));
            }
        }
        (out, oldest)
    }

    /// The requests to send now, at most one per leader. Leaders with a request in flight or
    /// without a connection get none.
    pub(crate) fn plan(&mut self, input: &PlanInput<'_>) -> Vec<Planned> {
        let mut acks_by_node = self.pending_by_node(input);
        let mut nodes: BTreeSet<NodeId> = acks_by_node.keys().copied().collect();
        if input.fetch.is_some() {
            nodes.extend(input.targets.keys().copied());
            nodes.extend(
                self.nodes
                    .iter()
                    .filter(|(_, s)| !s.partitions.is_empty())
                    .map(|(n, _)| *n),
            );
        }
        let empty = BTreeSet::new();
        let mut planned = Vec::new();
        // share.acquire.mode=record_limit: one acquiring fetch at a time, across leaders,
        // taking turns from the one after the last that acquired.
        let record_limit = input.fetch.is_some_and(|f| f.record_limit);
        let mut acquiring = !self.acquiring.is_empty();
        let mut nodes: Vec<NodeId> = nodes.into_iter().collect();
        if let (true, Some(last)) = (record_limit, self.last_acquired_from) {
            let split = nodes.partition_point(|n| *n <= last);
            nodes.rotate_left(split);
        }
        for node in nodes {
            if !input.connected.contains(&node) || self.is_busy(node) {
                continue;
            }
            let node_acks = acks_by_node.remove(&node).unwrap_or_default();
            let renew = node_acks.iter().any(|(_, tp)| {
                self.pending
                    .get(tp)
                    .is_some_and(|p| p.ranges.iter().any(|r| r.code == RENEW))
            });
            let target = input.targets.get(&node).unwrap_or(&empty);
            let session = self.nodes.entry(node).or_default().clone();
            let forget: Vec<SessionPartition> =
                session.partitions.difference(target).copied().collect();
            // With record_limit, while another leader acquires this one waits (its
            // acknowledgements go alone when a commit or RENEW needs them).
            let waits_its_turn = record_limit && acquiring;
            let fetch_wanted = input.fetch.is_some()
                && !waits_its_turn
                && !renew
                && (!target.is_empty() || !forget.is_empty() || !node_acks.is_empty());
            if fetch_wanted && (session.epoch > 0 || !target.is_empty()) {
                let Some(settings) = input.fetch else {
                    continue;
                };
                let planned_fetch = self.plan_fetch(node, target, node_acks, settings);
                if !target.is_empty() {
                    self.acquiring.insert(planned_fetch.ticket());
                    self.last_acquired_from = Some(node);
                    acquiring = true;
                }
                planned.push(planned_fetch);
            } else if !node_acks.is_empty() && (input.flush || renew) {
                planned.push(self.plan_acknowledge(node, node_acks, false));
            } else {
                // Nothing to send yet: the acknowledgements wait for the next fetch or commit.
            }
        }
        planned
    }

    fn plan_fetch(
        &mut self,
        node: NodeId,
        target: &BTreeSet<SessionPartition>,
        node_acks: Vec<(Uuid, TopicPartition)>,
        settings: FetchSettings,
    ) -> Planned {
        let ticket = self.ticket();
        let session = self.nodes.entry(node).or_default().clone();
        let (acks, oldest) = self.take_acks(node_acks);
        let mut topics: BTreeMap<Uuid, Vec<share_v2::FetchPartition>> = BTreeMap::new();
        let mut forgotten: BTreeMap<Uuid, Vec<i32>> = BTreeMap::new();
        let opening = session.epoch == 0;
        // Partitions new to the session; a new session names every one.
        for (id, p) in target {
            if opening || !session.partitions.contains(&(*id, *p)) {
                topics
                    .entry(*id)
                    .or_default()
                    .push(share_v2::FetchPartition {
                        partition_index: *p,
                        acknowledgement_batches: Vec::new(),
                    });
            }
        }
        if !opening {
            for (id, p) in session.partitions.difference(target) {
                forgotten.entry(*id).or_default().push(*p);
            }
        }
        let mut sent_acks = Vec::with_capacity(acks.len());
        for (id, tp, ranges) in acks {
            if opening {
                // Not reached: acknowledgements for a leader without a session fail in
                // `pending_by_node`. Kept safe all the same.
                self.results.insert(
                    tp,
                    Err(not_sent("no open share session with the partition leader")),
                );
                continue;
            }
            let partitions = topics.entry(id).or_default();
            let batches = acks::batches(&ranges);
            match partitions
                .iter_mut()
                .find(|p| p.partition_index == tp.partition())
            {
                Some(p) => p.acknowledgement_batches = batches,
                None => partitions.push(share_v2::FetchPartition {
                    partition_index: tp.partition(),
                    acknowledgement_batches: batches,
                }),
            }
            // A partition that only carries acknowledgements must not join the session.
            if !target.contains(&(id, tp.partition()))
                && !session.partitions.contains(&(id, tp.partition()))
            {
                forgotten.entry(id).or_default().push(tp.partition());
            }
            sent_acks.push((tp, ranges));
        }
        let fetching = !target.is_empty();
        let request = share_v2::ShareFetchRequest {
            group_id: Some(self.group_id.clone()),
            member_id: Some(self.member_id.clone()),
            share_session_epoch: session.epoch,
            max_wait_ms: if fetching { settings.max_wait_ms } else { 0 },
            min_bytes: settings.min_bytes,
            max_bytes: request_max_bytes(&settings, target.len()),
            max_records: settings.max_records,
            batch_size: settings.batch_size.clamp(1, settings.max_records.max(1)),
            share_acquire_mode: if settings.record_limit {
                share_v2::SHARE_ACQUIRE_MODE_RECORD_LIMIT
            } else {
                share_v2::SHARE_ACQUIRE_MODE_BATCH_OPTIMIZED
            },
            is_renew_ack: false,
            topics: topics
                .into_iter()
                .map(|(topic_id, partitions)| share_v2::FetchTopic {
                    topic_id,
                    partitions,
                })
                .collect(),
            forgotten_topics_data: forgotten
                .into_iter()
                .map(|(topic_id, mut partitions)| {
                    partitions.sort_unstable();
                    partitions.dedup();
                    share_v2::ForgottenTopic {
                        topic_id,
                        partitions,
                    }
                })
                .collect(),
        };
        self.register(
            ticket,
            Sent {
                node,
                kind: SentKind::Fetch {
                    target: target.clone(),
                },
                acks: sent_acks,
                oldest,
            },
        );
        Planned::Fetch {
            ticket,
            node,
            request,
        }
    }

    fn plan_acknowledge(
        &mut self,
        node: NodeId,
        node_acks: Vec<(Uuid, TopicPartition)>,
        close: bool,
    ) -> Planned {
        let ticket = self.ticket();
        let epoch = self.epoch(node);
        let (acks, oldest) = self.take_acks(node_acks);
        let is_renew_ack = acks
            .iter()
            .any(|(_, _, ranges)| ranges.iter().any(|r| r.code == RENEW));
        let mut topics: BTreeMap<Uuid, Vec<share_v2::AcknowledgePartition>> = BTreeMap::new();
        let mut sent_acks = Vec::with_capacity(acks.len());
        for (id, tp, ranges) in acks {
            topics
                .entry(id)
                .or_default()
                .push(share_v2::AcknowledgePartition {
                    partition_index: tp.partition(),
                    acknowledgement_batches: acks::batches(&ranges),
                });
            sent_acks.push((tp, ranges));
        }
        let request = share_v2::ShareAcknowledgeRequest {
            group_id: Some(self.group_id.clone()),
            member_id: Some(self.member_id.clone()),
            share_session_epoch: if close { -1 } else { epoch },
            is_renew_ack,
            topics: topics
                .into_iter()
                .map(|(topic_id, partitions)| share_v2::AcknowledgeTopic {
                    topic_id,
                    partitions,
                })
                .collect(),
        };
        self.register(
            ticket,
            Sent {
                node,
                kind: SentKind::Acknowledge { close },
                acks: sent_acks,
                oldest,
            },
        );
        Planned::Acknowledge {
            ticket,
            node,
            request,
        }
    }

    /// The closing requests: a ShareAcknowledge with epoch -1 to every leader with an open
    /// session, carrying what is pending for it; the broker releases everything else this
    /// member holds there. Pending acknowledgements for other leaders fail. Call once
    /// nothing is in flight.
    pub(crate) fn plan_close(&mut self, input: &PlanInput<'_>) -> Vec<Planned> {
        let mut acks_by_node = self.pending_by_node(input);
        let mut nodes: BTreeSet<NodeId> = self.open_sessions().collect();
        nodes.extend(acks_by_node.keys().copied());
        let mut planned = Vec::new();
        for node in nodes {
            let node_acks = acks_by_node.remove(&node).unwrap_or_default();
            if !input.connected.contains(&node) || self.is_busy(node) || self.epoch(node) <= 0 {
                for (_, tp) in node_acks {
                    self.fail_pending(&tp, "no open share session with the partition leader");
                }
                continue;
            }
            planned.push(self.plan_acknowledge(node, node_acks, true));
        }
        // Whatever is left has nowhere to go.
        let left: Vec<TopicPartition> = self.pending.keys().cloned().collect();
        for tp in left {
            self.fail_pending(&tp, "the consumer closed before it could be sent");
        }
        planned
    }

    /// Keeps a planned request until its answer; its leader is busy until then.
    fn register(&mut self, ticket: Ticket, sent: Sent) {
        self.nodes.entry(sent.node).or_default().busy = Some(ticket);
        self.sent.insert(ticket, sent);
    }

    /// Ends the request of `ticket`: frees its leader. `None` for an unknown ticket.
    fn finish(&mut self, ticket: Ticket) -> Option<Sent> {
        self.acquiring.remove(&ticket);
        let sent = self.sent.remove(&ticket)?;
        if let Some(session) = self.nodes.get_mut(&sent.node) {
            if session.busy == Some(ticket) {
                session.busy = None;
            }
        }
        Some(sent)
    }

    /// The request's fate is unknown (the connection broke, it timed out, its answer could
    /// not be read, its future was dropped): its acknowledgements fail and the session is
    /// gone; the engine drops the connection.
    pub(crate) fn on_lost(&mut self, ticket: Ticket, why: &str) -> Effect {
        let Some(sent) = self.finish(ticket) else {
            return Effect::default();
        };
        if let Some(session) = self.nodes.get_mut(&sent.node) {
            session.reset();
        }
        for (tp, _) in sent.acks {
            self.results.insert(tp, Err(not_sent(why)));
        }
        Effect {
            drop_connection: true,
        }
    }

    /// A ShareFetch answer came. The caller extracted the records and queued the
    /// acknowledgements the consumer makes itself (GAP, RELEASE, REJECT).
    pub(crate) fn on_fetch(&mut self, ticket: Ticket, answer: Answer) -> Effect {
        let Some(sent) = self.finish(ticket) else {
            return Effect::default();
        };
        let target = match &sent.kind {
            SentKind::Fetch { target } => target.clone(),
            SentKind::Acknowledge { .. } => return self.settle(sent, answer),
        };
        let node = sent.node;
        let ok = answer.error_code == 0;
        let effect = self.settle(sent, answer);
        if ok {
            if let Some(session) = self.nodes.get_mut(&node) {
                session.partitions = target;
            }
        }
        effect
    }

    /// A ShareAcknowledge answer came.
    pub(crate) fn on_acknowledge(&mut self, ticket: Ticket, answer: Answer) -> Effect {
        let Some(sent) = self.finish(ticket) else {
            return Effect::default();
        };
        self.settle(sent, answer)
    }

    /// Applies an answer to the session and records the acknowledgement outcomes.
    fn settle(&mut self, sent: Sent, answer: Answer) -> Effect {
        let close = matches!(sent.kind, SentKind::Acknowledge { close: true });
        let session = self.nodes.entry(sent.node).or_default();
        if answer.error_code != 0 {
            if session_gone(answer.error_code) || close {
                session.reset();
            } else {
                session.advance();
            }
            for (tp, _) in sent.acks {
                self.results.insert(
                    tp,
                    ack_result(answer.error_code, answer.error_message.clone()),
                );
            }
            return Effect::default();
        }
        if close {
            session.reset();
        } else {
            session.advance();
        }
        let mut by_partition: HashMap<&TopicPartition, &PartitionAnswer> = answer
            .partitions
            .iter()
            .map(|p| (&p.partition, p))
            .collect();
        for (tp, _) in sent.acks {
            let result = match by_partition.remove(&tp) {
                Some(p) => ack_result(p.ack_code, p.ack_message.clone()),
                // As in Java: acknowledgements the answer does not confirm failed.
                None => Err(AckError::InvalidRecordState {
                    detail: "the broker's answer did not mention the partition".to_owned(),
                }),
            };
            self.results.insert(tp, result);
        }
        Effect::default()
    }
}

#[cfg(test)]
mod tests;
