//! The sender's decisions, without sockets or clocks: what to send, to whom, when to look
//! leaders up, bump the epoch or add partitions to a transaction, and what each answer
//! changes. The loop in [`super`] only carries out the [`Action`]s a [`Turn`] lists and
//! hands each outcome back to the matching `on_*` method.
//!
//! Everything here works on the producer's [`State`] (the accumulator, the topics' leaders,
//! the records waiting for metadata, the transaction) and on the sender's own bookkeeping:
//! requests in flight per broker, connections being made, and the one Metadata,
//! InitProducerId and AddPartitionsToTxn call each that may be outstanding at a time.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::debug;
use uuid::Uuid;

use super::answers::{self, Sent};
use crate::kafka::error::ClientError;
use crate::kafka::producer::State;
use crate::kafka::producer::accumulator::{Drained, Effects, ProducerIdentity, Tp};
use crate::kafka::producer::cluster::TopicMetadata;
use crate::kafka::producer::config::KafkaProducerConfig;
use crate::kafka::producer::fast_map::FastMap;
use crate::kafka::producer::txn::{Phase, TxnVersion};
use crate::producer::ProducerError;
use crate::time::deadline_after;

/// The settings the sender's decisions depend on.
#[derive(Debug, Clone)]
pub(crate) struct SenderConfig {
    /// `max.in.flight.requests.per.connection`, at least 1.
    pub(crate) max_in_flight: usize,
    /// `retry.backoff.ms`: the first pause before Metadata is asked again.
    pub(crate) retry_backoff: Duration,
    /// `retry.backoff.max.ms`: the longest such pause, and the pause after a failed bump.
    pub(crate) retry_backoff_max: Duration,
    /// `delivery.timeout.ms`: how long a record may wait for its topic's metadata.
    pub(crate) delivery_timeout: Duration,
    /// `max.request.size`: the batches of one Produce request together.
    pub(crate) max_request_size: usize,
    /// `transactional.id`, named in errors of a fenced producer.
    pub(crate) transactional_id: Option<String>,
}

impl SenderConfig {
    pub(crate) fn of(config: &KafkaProducerConfig) -> Self {
        Self {
            max_in_flight: config.max_in_flight.max(1),
            retry_backoff: config.retry_backoff,
            retry_backoff_max: config.retry_backoff_max,
            delivery_timeout: config.delivery_timeout,
            max_request_size: config.max_request_size,
            transactional_id: config.transactional_id.clone(),
        }
    }
}

/// One Produce request: the batches for one broker, at most `max.request.size` together by
/// their size estimates (a batch larger than that goes alone).
#[derive(Debug)]
pub(crate) struct ProducePlan {
    pub(crate) node: i32,
    /// Each batch with its topic's id (nil when unknown: the request then names topics).
    pub(crate) batches: Vec<(Drained, Uuid)>,
    /// The transaction protocol when the batches were drained (`None`: not transactional).
    pub(crate) txn: Option<TxnVersion>,
}

/// What the loop is to do.
#[derive(Debug)]
pub(crate) enum Action {
    /// Look these topics up (leaders, ids, and each known topic's `max.message.bytes`);
    /// answer with [`SenderCore::on_metadata`].
    Metadata(Vec<Arc<str>>),
    /// InitProducerId to bump this identity's epoch (a new id if the broker refuses);
    /// answer with [`SenderCore::on_bumped`].
    Bump(ProducerIdentity),
    /// Transactions v1: AddPartitionsToTxn for these partitions; answer with
    /// [`SenderCore::on_added`].
    AddPartitions(ProducerIdentity, Vec<Tp>),
    /// Open a connection to this broker; answer with [`SenderCore::on_connected`].
    Connect(i32),
    /// Transactions v2: ask the coordinator until the markers of ended transaction `ended`
    /// are written, at most until `deadline`; answer with [`SenderCore::on_markers`]. No
    /// Produce request goes meanwhile.
    AwaitMarkers { ended: u64, deadline: Instant },
    /// Send this request, after every earlier request to the same broker is queued (the
    /// order of a turn's actions is the order of the sequences); answer with
    /// [`SenderCore::on_produced`].
    Produce(ProducePlan),
}

/// What one turn decided.
#[derive(Debug, Default)]
pub(crate) struct Turn {
    /// In the order they are to be started.
    pub(crate) actions: Vec<Action>,
    /// When the next turn is due if nothing else happens first (`None`: only an answer or
    /// a new record can change anything).
    pub(crate) wake_at: Option<Instant>,
    /// Records were completed (failed at their deadline): waiters in `flush` should look.
    pub(crate) progressed: bool,
}

/// The sender's own state between turns.
#[derive(Debug)]
pub(crate) struct SenderCore {
    config: SenderConfig,
    /// Brokers a connection is being made to.
    connecting: HashSet<i32>,
    /// Produce requests sent to each broker and not yet answered.
    in_flight: HashMap<i32, usize>,
    metadata_busy: bool,
    /// No Metadata request before this (the backoff after an answer that left topics
    /// without leaders).
    metadata_at: Instant,
    metadata_backoff: Duration,
    bump_busy: bool,
    /// No epoch bump before this (after a failed one).
    bump_at: Instant,
    adding: bool,
    /// An [`Action::AwaitMarkers`] is outstanding.
    markers_busy: bool,
}

impl SenderCore {
    pub(crate) fn new(config: SenderConfig, now: Instant) -> Self {
        let metadata_backoff = config.retry_backoff;
        Self {
            config,
            connecting: HashSet::new(),
            in_flight: HashMap::new(),
            metadata_busy: false,
            metadata_at: now,
            metadata_backoff,
            bump_busy: false,
            bump_at: now,
            adding: false,
            markers_busy: false,
        }
    }

    /// Decides what to do at `now`: fails what waited past its deadline, asks for metadata,
    /// bumps the epoch, adds partitions to a v1 transaction, and drains the batches whose
    /// leader is `connected` and has room for another request.
    pub(crate) fn turn(
        &mut self,
        state: &mut State,
        now: Instant,
        connected: &dyn Fn(i32) -> bool,
    ) -> Turn {
        let mut turn = Turn::default();
        let (done, effects) = state.accumulator.expire(now);
        apply(state, &effects);
        turn.progressed = !done.is_empty();
        turn.progressed |= expire_waiting(state, now, self.config.delivery_timeout);
        if !self.metadata_busy && !state.metadata_wanted.is_empty() && now >= self.metadata_at {
            self.metadata_busy = true;
            turn.actions
                .push(Action::Metadata(state.metadata_wanted.drain().collect()));
        }
        if state.accumulator.ready_to_bump() && !self.bump_busy && now >= self.bump_at {
            self.bump_busy = true;
            turn.actions
                .push(Action::Bump(state.accumulator.producer()));
        }
        self.add_partitions(state, &mut turn);
        if let Some(deadline) = self.hold_for_markers(state, now, &mut turn) {
            // Nothing is drained: the batches wait, and their linger or deadline (or an
            // answer) wakes the loop, or else the end of the wait.
            turn.wake_at = Some(
                self.wake_at(state, now)
                    .map_or(deadline, |at| at.min(deadline)),
            );
            return turn;
        }
        let txn = state.txn.as_ref().map(|t| t.version);
        let flushing = state.flushing > 0
            || state
                .txn
                .as_ref()
                .is_some_and(|t| matches!(t.phase, Phase::Committing));
        let topics = &state.topics;
        let added = state
            .txn
            .as_ref()
            .filter(|t| t.version == TxnVersion::V1)
            .map(|t| &t.added);
        let mut refresh = Vec::new();
        let mut connect = Vec::new();
        // Per broker, the requests this turn starts: how many, and the bytes of the last.
        let mut requests: HashMap<i32, (usize, usize)> = HashMap::new();
        let in_flight = &self.in_flight;
        let max_in_flight = self.config.max_in_flight;
        let max_request_size = self.config.max_request_size;
        // Each batch drained comes with its broker and its request there.
        let (drained, closed) = state.accumulator.drain(now, flushing, &mut |tp, size| {
            let leader = leader_of(topics, tp);
            if leader < 0 {
                refresh.push(Arc::clone(&tp.0));
                return None;
            }
            if added.is_some_and(|a| !a.contains(tp)) {
                return None;
            }
            // The cheap checks first: this runs for every ready partition on every turn.
            // A batch joins this turn's last request to its leader while that stays within
            // max.request.size (by the batch's size estimate), else opens another one if the
            // connection has room: never more than max.in.flight.requests.per.connection
            // requests in flight to a broker.
            let free = max_in_flight.saturating_sub(in_flight.get(&leader).copied().unwrap_or(0));
            let (count, bytes) = requests.get(&leader).copied().unwrap_or((0, 0));
            let joins = count > 0 && bytes.saturating_add(size) <= max_request_size;
            if !joins && count >= free {
                return None;
            }
            if !connected(leader) {
                connect.push(leader);
                return None;
            }
            let (count, bytes) = if joins {
                (count, bytes.saturating_add(size))
            } else {
                (count + 1, size)
            };
            requests.insert(leader, (count, bytes));
            Some((leader, count))
        });
        state.metadata_wanted.extend(refresh);
        for (topic, partition) in closed {
            state.sticky.batch_closed(&topic, partition);
        }
        if !drained.is_empty()
            && let Some(txn) = state.txn.as_mut()
        {
            txn.sent_any = true;
        }
        // Per broker and request, in drain order: the sequences' order.
        let mut keys: Vec<(i32, usize)> = Vec::new();
        let mut plans: Vec<ProducePlan> = Vec::new();
        for (batch, key) in drained {
            let id = topic_id(&state.topics, &batch.tp.0);
            match keys.iter().position(|k| *k == key) {
                Some(i) => plans[i].batches.push((batch, id)),
                None => {
                    keys.push(key);
                    plans.push(ProducePlan {
                        node: key.0,
                        batches: vec![(batch, id)],
                        txn,
                    });
                }
            }
        }
        for plan in plans {
            *self.in_flight.entry(plan.node).or_default() += 1;
            turn.actions.push(Action::Produce(plan));
        }
        for node in connect {
            if self.connecting.insert(node) {
                turn.actions.push(Action::Connect(node));
            }
        }
        turn.wake_at = self.wake_at(state, now);
        turn
    }

    /// Transactions v2: while the last transaction's markers may still be being written
    /// (until its [`MarkersPending`](crate::kafka::producer::txn::MarkersPending)
    /// deadline), asks the coordinator once at a time and returns the deadline: no Produce
    /// request goes before it.
    fn hold_for_markers(
        &mut self,
        state: &mut State,
        now: Instant,
        turn: &mut Turn,
    ) -> Option<Instant> {
        let txn = state.txn.as_mut()?;
        let pending = txn.markers?;
        if now >= pending.deadline {
            txn.markers_written(pending.ended);
            return None;
        }
        if !self.markers_busy {
            self.markers_busy = true;
            turn.actions.push(Action::AwaitMarkers {
                ended: pending.ended,
                deadline: pending.deadline,
            });
        }
        Some(pending.deadline)
    }

    /// The wait for the markers of ended transaction `ended` is over (written, or no longer
    /// asked about): the next turn sends.
    pub(crate) fn on_markers(&mut self, state: &mut State, ended: u64) {
        self.markers_busy = false;
        if let Some(txn) = state.txn.as_mut() {
            txn.markers_written(ended);
        }
    }

    /// Transactions v1: partitions join the transaction before their first batch.
    fn add_partitions(&mut self, state: &State, turn: &mut Turn) {
        if self.adding {
            return;
        }
        let Some(txn) = state.txn.as_ref() else {
            return;
        };
        if txn.version != TxnVersion::V1
            || !matches!(txn.phase, Phase::InTransaction | Phase::Committing)
        {
            return;
        }
        let new: Vec<Tp> = state
            .accumulator
            .partitions_with_data()
            .into_iter()
            .filter(|tp| !txn.added.contains(tp))
            .collect();
        if !new.is_empty() {
            self.adding = true;
            turn.actions
                .push(Action::AddPartitions(state.accumulator.producer(), new));
        }
    }

    fn wake_at(&self, state: &State, now: Instant) -> Option<Instant> {
        let mut wake_at = state.accumulator.next_wakeup(now);
        let mut at = |t: Instant| wake_at = Some(wake_at.map_or(t, |w: Instant| w.min(t)));
        for waiting in state.waiting.values().filter_map(|w| w.front()) {
            at(waiting.deadline);
        }
        if !state.metadata_wanted.is_empty() && !self.metadata_busy {
            at(self.metadata_at);
        }
        // A bump due already waits for the batches in flight, whose answers wake us.
        if state.accumulator.bump_pending() && !self.bump_busy && self.bump_at > now {
            at(self.bump_at);
        }
        wake_at
    }

    /// A connection attempt ended. After a failure the leaders are looked up again (the
    /// broker is dialled again after the connection layer's reconnect backoff).
    pub(crate) fn on_connected(&mut self, state: &mut State, node: i32, ok: bool) {
        self.connecting.remove(&node);
        if !ok {
            let topics: Vec<Arc<str>> = state.topics.keys().cloned().collect();
            state.metadata_wanted.extend(topics);
        }
    }

    /// A Produce request to `node` ended: each batch's answer goes to the accumulator.
    pub(crate) fn on_produced(
        &mut self,
        state: &mut State,
        node: i32,
        sent: Sent,
        result: Result<kafka_protocol::messages::ProduceResponse, ClientError>,
        now: Instant,
    ) {
        if let Some(n) = self.in_flight.get_mut(&node) {
            *n = n.saturating_sub(1);
        }
        answers::produced(
            state,
            sent,
            result,
            self.config.transactional_id.as_deref(),
            now,
        );
    }

    /// A Metadata request for `topics` ended, with the `max.message.bytes` of those known.
    pub(crate) fn on_metadata(
        &mut self,
        state: &mut State,
        topics: &[Arc<str>],
        result: Result<Vec<(String, TopicMetadata)>, ClientError>,
        limits: &[(Arc<str>, usize)],
        now: Instant,
    ) {
        self.metadata_busy = false;
        for (topic, bytes) in limits {
            state.accumulator.set_topic_max(topic, *bytes);
        }
        if answers::metadata(state, topics, result, now) {
            self.metadata_at = deadline_after(now, self.metadata_backoff);
            self.metadata_backoff = self
                .metadata_backoff
                .saturating_mul(2)
                .min(self.config.retry_backoff_max);
        } else {
            self.metadata_backoff = self.config.retry_backoff;
        }
    }

    /// An epoch bump ended: the waiting batches are numbered anew under the new identity,
    /// or the bump is tried again after `retry.backoff.max.ms`.
    pub(crate) fn on_bumped(
        &mut self,
        state: &mut State,
        result: Result<ProducerIdentity, ProducerError>,
        now: Instant,
    ) {
        self.bump_busy = false;
        match result {
            Ok(identity) => {
                debug!(
                    producer_id = identity.id,
                    epoch = identity.epoch,
                    "epoch bumped"
                );
                state.accumulator.reset_sequences(identity);
            }
            Err(error) => {
                debug!(%error, "epoch bump failed, retrying");
                self.bump_at = deadline_after(now, self.config.retry_backoff_max);
            }
        }
    }

    /// AddPartitionsToTxn, sent as `producer`, ended. Returns true when records were failed
    /// (the transaction cannot go on). An answer for an identity the producer has left (an
    /// `init_transactions` over the open transaction, an epoch bump) is about a transaction
    /// that is no more: ignored, its partitions are added again under the new one if needed.
    pub(crate) fn on_added(
        &mut self,
        state: &mut State,
        producer: ProducerIdentity,
        partitions: Vec<Tp>,
        result: Result<(), ProducerError>,
    ) -> bool {
        self.adding = false;
        if producer != state.accumulator.producer() {
            debug!(
                ?result,
                "AddPartitionsToTxn answered for an epoch this producer has left"
            );
            return false;
        }
        match result {
            Ok(()) => {
                if let Some(txn) = state.txn.as_mut() {
                    txn.added.extend(partitions);
                }
                false
            }
            Err(error) => {
                if let Some(txn) = state.txn.as_mut() {
                    txn.batch_failed(&error);
                }
                if error.is_fatal() {
                    state.fatal = Some(error.clone());
                }
                let error = ProducerError::Abortable {
                    reason: format!("the partitions could not join the transaction ({error})"),
                    source: Some(Arc::new(error)),
                };
                state.accumulator.fail_waiting(&error);
                true
            }
        }
    }
}

fn leader_of(topics: &FastMap<Arc<str>, TopicMetadata>, tp: &Tp) -> i32 {
    match topics.get(&tp.0) {
        Some(TopicMetadata::Known { leaders, .. }) => usize::try_from(tp.1)
            .ok()
            .and_then(|p| leaders.get(p))
            .copied()
            .unwrap_or(-1),
        _ => -1,
    }
}

fn topic_id(topics: &FastMap<Arc<str>, TopicMetadata>, topic: &str) -> Uuid {
    match topics.get(topic) {
        Some(TopicMetadata::Known { id, .. }) => *id,
        _ => Uuid::nil(),
    }
}

/// Applies the effects of answers: a transaction's failed batch makes it abortable (or
/// fatal); a fenced producer stops.
pub(crate) fn apply(state: &mut State, effects: &Effects) {
    if let Some(error) = &effects.failed {
        if let Some(txn) = state.txn.as_mut() {
            txn.batch_failed(error);
        }
        if matches!(error, ProducerError::Fenced { .. }) {
            state.fatal = Some(error.clone());
        }
    }
}

/// Fails records that waited for their topic's metadata past their delivery timeout, with the
/// last retriable error of the topic's metadata, or else as a topic (or partition) the cluster
/// does not know.
fn expire_waiting(state: &mut State, now: Instant, timeout: Duration) -> bool {
    let mut any = false;
    let mut empty = Vec::new();
    for (topic, queue) in &mut state.waiting {
        while queue.front().is_some_and(|w| w.deadline <= now) {
            if let Some(w) = queue.pop_front() {
                let last = state
                    .waiting_because
                    .get(topic)
                    .cloned()
                    .unwrap_or_else(|| {
                        Arc::new(ProducerError::UnknownPartition {
                            topic: topic.to_string(),
                            partition: w.partition.unwrap_or(-1),
                        })
                    });
                let error = ProducerError::Timeout {
                    timeout,
                    last: Some(last),
                };
                w.fail(&mut state.accumulator, state.txn.as_mut(), error);
                any = true;
            }
        }
        if queue.is_empty() {
            empty.push(Arc::clone(topic));
        }
    }
    for topic in empty {
        state.waiting.remove(&topic);
        state.waiting_because.remove(&topic);
    }
    any
}
