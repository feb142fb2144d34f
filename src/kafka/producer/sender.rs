//! The sending task: fetches metadata, sends batches to partition leaders, hands each
//! answer to the [`Accumulator`](super::accumulator::Accumulator), bumps the idempotent
//! producer's epoch when it must, and adds partitions to a transactions-v1 transaction.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ProduceRequest, ProduceResponse, TopicName, TransactionalId,
};
use kafka_protocol::protocol::{StrBytes, VersionRange};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::debug;
use uuid::Uuid;

use super::accumulator::{BatchOutcome, Drained, Effects, ProducerIdentity, Tp};
use super::cluster::TopicMetadata;
use super::txn::{Phase, TxnVersion, code};
use super::{Shared, State};
use crate::consumer::ConsumerError;
use crate::kafka::error::codes::broker_error;
use crate::kafka::error::{ConnectionError, ProtocolError};
use crate::kafka::net::connection::Connection;
use crate::producer::ProducerError;
use crate::time::deadline_after;

/// Produce versions before transactions v2 (Java's cap in a v1 transaction).
const PRODUCE_TV1: VersionRange = VersionRange { min: 3, max: 11 };
/// Produce versions of transactions v2 that name topics.
const PRODUCE_TV2_BY_NAME: VersionRange = VersionRange { min: 12, max: 12 };
/// Produce versions of transactions v2, topic ids allowed.
const PRODUCE_TV2: VersionRange = VersionRange { min: 12, max: 13 };
/// Produce versions that name topics.
const PRODUCE_BY_NAME: VersionRange = VersionRange { min: 3, max: 12 };
/// Every Produce version of the crate.
const PRODUCE_ANY: VersionRange = VersionRange { min: 3, max: 13 };

/// Partition errors after which the leader is looked up again.
const REFRESH_CODES: [i16; 6] = [3, 5, 6, 74, 75, 103];

enum Work {
    Connected(i32, Result<Connection, ConsumerError>),
    Produced {
        node: i32,
        broker: String,
        batches: Vec<(Tp, u64, Uuid)>,
        result: Result<ProduceResponse, ConsumerError>,
    },
    /// The topics asked for, the answer, and the `max.message.bytes` of those known.
    Metadata(
        Vec<Arc<str>>,
        Result<Vec<(String, TopicMetadata)>, ConsumerError>,
        Vec<(Arc<str>, usize)>,
    ),
    Bumped(Result<ProducerIdentity, ProducerError>),
    Added(Vec<Tp>, Result<(), ProducerError>),
}

/// Runs until the producer is dropped (which aborts it).
pub(crate) async fn run(shared: Arc<Shared>) {
    let mut work: FuturesUnordered<BoxFuture<'static, Work>> = FuturesUnordered::new();
    // Brokers a connection is being made to. A broker whose connection failed is dialled
    // again no sooner than the client's reconnect backoff allows (`reconnect.backoff.ms`
    // doubling up to `reconnect.backoff.max.ms`, per broker, shared by every connection of
    // the producer: see `kafka::net::backoff`): the connect future waits its turn, and the
    // broker stays here meanwhile.
    let mut connecting: HashSet<i32> = HashSet::new();
    let mut in_flight: HashMap<i32, usize> = HashMap::new();
    let mut metadata_busy = false;
    let mut metadata_at = Instant::now();
    let mut metadata_backoff = shared.config.retry_backoff;
    let mut bump_busy = false;
    let mut bump_at = Instant::now();
    let mut adding = false;
    // Up to `max.in.flight.requests.per.connection` Produce requests per broker. They must
    // reach the broker in the order their batches got their sequences: each request's
    // frame is queued only after the previous request's to that broker (`order`), whatever
    // order `work` polls the futures in (see `produce`).
    let max_in_flight = shared.config.max_in_flight.max(1);
    let mut order: HashMap<i32, oneshot::Receiver<()>> = HashMap::new();
    loop {
        let now = Instant::now();
        let mut connect = Vec::new();
        let mut by_node: HashMap<i32, Vec<Drained>> = HashMap::new();
        let mut wake_at: Option<Instant>;
        let txn_version;
        {
            let mut guard = shared.lock();
            let state = &mut *guard;
            let (done, effects) = state.accumulator.expire(now);
            apply(state, &effects);
            let mut progressed = !done.is_empty();
            progressed |= expire_waiting(state, now, shared.config.delivery_timeout);
            if progressed {
                shared.progress.notify_waiters();
            }
            if !metadata_busy && !state.metadata_wanted.is_empty() && now >= metadata_at {
                let topics: Vec<Arc<str>> = state.metadata_wanted.drain().collect();
                metadata_busy = true;
                let shared2 = Arc::clone(&shared);
                work.push(
                    async move {
                        let names: Vec<&str> = topics.iter().map(|t| &**t).collect();
                        let result = shared2.cluster.metadata(&names).await;
                        // How large a batch each known topic takes (read once per topic).
                        let mut limits = Vec::new();
                        if let Ok(answers) = &result {
                            for (name, meta) in answers {
                                if !matches!(meta, TopicMetadata::Known { .. }) {
                                    continue;
                                }
                                let Some(topic) = topics.iter().find(|t| ***t == **name) else {
                                    continue;
                                };
                                if let Some(bytes) = shared2.cluster.max_message_bytes(name).await {
                                    limits.push((Arc::clone(topic), bytes));
                                }
                            }
                        }
                        Work::Metadata(topics, result, limits)
                    }
                    .boxed(),
                );
            }
            if state.accumulator.ready_to_bump() && !bump_busy && now >= bump_at {
                bump_busy = true;
                let current = state.accumulator.producer();
                let shared2 = Arc::clone(&shared);
                work.push(
                    async move {
                        let mut coordinator = shared2.coordinator.lock().await;
                        let mut result = coordinator
                            .init_producer_id(
                                &shared2.cluster,
                                shared2.config.transaction_timeout,
                                Some(current),
                                shared2.retry(),
                            )
                            .await;
                        if result.is_err() {
                            // The broker may not know the producer any more: a new id.
                            result = coordinator
                                .init_producer_id(
                                    &shared2.cluster,
                                    shared2.config.transaction_timeout,
                                    None,
                                    shared2.retry(),
                                )
                                .await;
                        }
                        Work::Bumped(result)
                    }
                    .boxed(),
                );
            }
            txn_version = state.txn.as_ref().map(|t| t.version);
            // Transactions v1: partitions join the transaction before their first batch.
            if !adding
                && let Some(txn) = state.txn.as_ref()
                && txn.version == TxnVersion::V1
                && matches!(txn.phase, Phase::InTransaction | Phase::Committing)
            {
                let new: Vec<Tp> = state
                    .accumulator
                    .partitions_with_data()
                    .into_iter()
                    .filter(|tp| !txn.added.contains(tp))
                    .collect();
                if !new.is_empty() {
                    adding = true;
                    let producer = state.accumulator.producer();
                    let shared2 = Arc::clone(&shared);
                    work.push(
                        async move {
                            let result = shared2
                                .coordinator
                                .lock()
                                .await
                                .add_partitions(&shared2.cluster, producer, &new, shared2.retry())
                                .await;
                            Work::Added(new, result)
                        }
                        .boxed(),
                    );
                }
            }
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
            let mut leaders: HashMap<Tp, i32> = HashMap::new();
            let (drained, closed) = state.accumulator.drain(now, flushing, &mut |tp| {
                let leader = match topics.get(&tp.0) {
                    Some(TopicMetadata::Known { leaders, .. }) => usize::try_from(tp.1)
                        .ok()
                        .and_then(|p| leaders.get(p))
                        .copied()
                        .unwrap_or(-1),
                    _ => -1,
                };
                if leader < 0 {
                    refresh.push(Arc::clone(&tp.0));
                    return false;
                }
                if added.is_some_and(|a| !a.contains(tp)) {
                    return false;
                }
                // The cheap check first: this runs for every ready partition on every turn.
                if in_flight.get(&leader).copied().unwrap_or(0) >= max_in_flight {
                    return false;
                }
                if shared.cluster.cached(leader).is_none() {
                    connect.push(leader);
                    return false;
                }
                leaders.insert(tp.clone(), leader);
                true
            });
            for topic in refresh {
                state.metadata_wanted.insert(topic);
            }
            for (topic, partition) in closed {
                state.sticky.batch_closed(&topic, partition);
            }
            if !drained.is_empty()
                && let Some(txn) = state.txn.as_mut()
            {
                txn.sent_any = true;
            }
            for batch in drained {
                if let Some(node) = leaders.get(&batch.tp) {
                    by_node.entry(*node).or_default().push(batch);
                }
            }
            wake_at = state.accumulator.next_wakeup(now);
            for waiting in state.waiting.values().filter_map(|w| w.front()) {
                wake_at = Some(wake_at.map_or(waiting.deadline, |w| w.min(waiting.deadline)));
            }
            if !state.metadata_wanted.is_empty() && !metadata_busy {
                wake_at = Some(wake_at.map_or(metadata_at, |w| w.min(metadata_at)));
            }
            // A bump due already waits for the batches in flight, whose answers wake us.
            if state.accumulator.bump_pending() && !bump_busy && bump_at > now {
                wake_at = Some(wake_at.map_or(bump_at, |w| w.min(bump_at)));
            }
            // Topic ids for Produce v13.
            let ids: HashMap<Arc<str>, Uuid> = topics_ids(&state.topics);
            for (node, batches) in by_node.drain() {
                // Several requests when the batches (grown ones may be a megabyte each) are
                // more than max.request.size together, queued in order.
                for batches in requests_of(batches, shared.config.max_request_size) {
                    let connection = shared.cluster.cached(node);
                    let (queued, next) = oneshot::channel();
                    let previous = order.insert(node, next);
                    *in_flight.entry(node).or_default() += 1;
                    work.push(produce(
                        &shared,
                        Target {
                            node,
                            connection,
                            previous,
                            queued,
                        },
                        batches,
                        &ids,
                        txn_version,
                    ));
                }
            }
        }
        for node in connect {
            if connecting.insert(node) {
                let shared2 = Arc::clone(&shared);
                work.push(
                    async move { Work::Connected(node, shared2.cluster.open(node).await) }.boxed(),
                );
            }
        }
        let sleep = tokio::time::sleep_until(
            wake_at.unwrap_or_else(|| deadline_after(Instant::now(), Duration::from_secs(3600))),
        );
        tokio::select! {
            () = shared.wake.notified() => {}
            () = sleep => {}
            Some(done) = work.next(), if !work.is_empty() => {
                match done {
                    Work::Connected(node, result) => {
                        connecting.remove(&node);
                        if let Err(error) = result {
                            debug!(node, %error, "connection to a leader failed");
                            // Learn the leaders again now; this broker again after the
                            // reconnect backoff.
                            let mut state = shared.lock();
                            let topics: Vec<Arc<str>> = state.topics.keys().cloned().collect();
                            state.metadata_wanted.extend(topics);
                        }
                    }
                    Work::Produced { node, broker, batches, result } => {
                        if let Some(n) = in_flight.get_mut(&node) {
                            *n = n.saturating_sub(1);
                        }
                        handle_produce(&shared, &broker, batches, result, txn_version);
                        shared.progress.notify_waiters();
                    }
                    Work::Metadata(topics, result, limits) => {
                        metadata_busy = false;
                        {
                            let mut state = shared.lock();
                            for (topic, bytes) in &limits {
                                state.accumulator.set_topic_max(topic, *bytes);
                            }
                        }
                        let again = handle_metadata(&shared, &topics, result);
                        if again {
                            metadata_at = deadline_after(Instant::now(), metadata_backoff);
                            metadata_backoff = metadata_backoff
                                .saturating_mul(2)
                                .min(shared.config.retry_backoff_max);
                        } else {
                            metadata_backoff = shared.config.retry_backoff;
                        }
                        shared.progress.notify_waiters();
                    }
                    Work::Bumped(result) => {
                        bump_busy = false;
                        let mut state = shared.lock();
                        match result {
                            Ok(identity) => {
                                debug!(producer_id = identity.id, epoch = identity.epoch, "epoch bumped");
                                state.accumulator.reset_sequences(identity);
                            }
                            Err(error) => {
                                debug!(%error, "epoch bump failed, retrying");
                                bump_at = deadline_after(Instant::now(), shared.config.retry_backoff_max);
                            }
                        }
                    }
                    Work::Added(partitions, result) => {
                        adding = false;
                        let mut state = shared.lock();
                        match result {
                            Ok(()) => {
                                if let Some(txn) = state.txn.as_mut() {
                                    txn.added.extend(partitions);
                                }
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
                                drop(state);
                                shared.progress.notify_waiters();
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Splits one broker's batches into requests of at most `max` bytes of batches each (Java's
/// `max.request.size` bounds a request the same way), at least one batch a request, in order.
fn requests_of(batches: Vec<Drained>, max: usize) -> Vec<Vec<Drained>> {
    let mut requests: Vec<Vec<Drained>> = Vec::new();
    let mut size = 0usize;
    for batch in batches {
        let len = batch.bytes.len();
        match requests.last_mut() {
            Some(request) if size.saturating_add(len) <= max => {
                size = size.saturating_add(len);
                request.push(batch);
            }
            _ => {
                size = len;
                requests.push(vec![batch]);
            }
        }
    }
    requests
}

fn topics_ids(topics: &HashMap<Arc<str>, TopicMetadata>) -> HashMap<Arc<str>, Uuid> {
    topics
        .iter()
        .filter_map(|(t, m)| match m {
            TopicMetadata::Known { id, .. } => Some((Arc::clone(t), *id)),
            _ => None,
        })
        .collect()
}

/// Applies the effects of answers: a transaction's failed batch makes it abortable (or
/// fatal); a fenced producer stops.
fn apply(state: &mut State, effects: &Effects) {
    if let Some(error) = &effects.failed {
        if let Some(txn) = state.txn.as_mut() {
            txn.batch_failed(error);
        }
        if matches!(error, ProducerError::Fenced { .. }) {
            state.fatal = Some(error.clone());
        }
    }
}

/// Fails records that waited for their topic's metadata past their delivery timeout.
fn expire_waiting(state: &mut State, now: Instant, timeout: Duration) -> bool {
    let mut any = false;
    let mut empty = Vec::new();
    for (topic, queue) in &mut state.waiting {
        while queue.front().is_some_and(|w| w.deadline <= now) {
            if let Some(w) = queue.pop_front() {
                state.accumulator.untrack(&[w.id]);
                let _ = w.sender.send(Err(ProducerError::Timeout {
                    timeout,
                    last: Some(Arc::new(ProducerError::UnknownPartition {
                        topic: topic.to_string(),
                        partition: w.partition.unwrap_or(-1),
                    })),
                }));
                any = true;
            }
        }
        if queue.is_empty() {
            empty.push(Arc::clone(topic));
        }
    }
    for topic in empty {
        state.waiting.remove(&topic);
    }
    any
}

/// Takes a Metadata answer; returns true when some topic must be asked for again.
fn handle_metadata(
    shared: &Shared,
    topics: &[Arc<str>],
    result: Result<Vec<(String, TopicMetadata)>, ConsumerError>,
) -> bool {
    let mut state = shared.lock();
    let state = &mut *state;
    let answers = match result {
        Ok(answers) => answers,
        Err(error) => {
            debug!(%error, "metadata failed, retrying");
            state.metadata_wanted.extend(topics.iter().cloned());
            return true;
        }
    };
    let mut again = false;
    let now = Instant::now();
    for (name, meta) in answers {
        let Some(topic) = topics.iter().find(|t| ***t == *name).cloned() else {
            continue;
        };
        match meta {
            TopicMetadata::Known { id, leaders } => {
                if leaders.iter().any(|l| *l < 0) {
                    again = true;
                    state.metadata_wanted.insert(Arc::clone(&topic));
                }
                let count = leaders.len();
                state
                    .topics
                    .insert(Arc::clone(&topic), TopicMetadata::Known { id, leaders });
                if let Some(queue) = state.waiting.remove(&topic) {
                    for w in queue {
                        let partition = match w.partition {
                            Some(p) if usize::try_from(p).is_ok_and(|p| p < count) => p,
                            Some(p) => {
                                state.accumulator.untrack(&[w.id]);
                                let _ = w.sender.send(Err(ProducerError::UnknownPartition {
                                    topic: topic.to_string(),
                                    partition: p,
                                }));
                                continue;
                            }
                            None => state
                                .sticky
                                .partition(&topic, w.record.key.as_deref(), count),
                        };
                        let closed = state.accumulator.append(
                            (Arc::clone(&topic), partition),
                            w.id,
                            w.record,
                            w.sender,
                            now,
                        );
                        if closed {
                            state.sticky.batch_closed(&topic, partition);
                        }
                    }
                }
            }
            TopicMetadata::Unknown => {
                if state.waiting.contains_key(&topic) {
                    again = true;
                    state.metadata_wanted.insert(Arc::clone(&topic));
                }
            }
            TopicMetadata::Failed(error) => {
                if let Some(queue) = state.waiting.remove(&topic) {
                    let error = ProducerError::from_client(error);
                    for w in queue {
                        state.accumulator.untrack(&[w.id]);
                        let _ = w.sender.send(Err(error.clone()));
                    }
                }
            }
        }
    }
    again
}

/// Where a Produce request goes, and its place in that broker's order.
struct Target {
    node: i32,
    /// The broker's connection; `None` when it closed since the batches were drained (the
    /// request then fails as if it had been cut).
    connection: Option<Connection>,
    /// Resolves (or is dropped) once the previous request to the broker is queued.
    previous: Option<oneshot::Receiver<()>>,
    /// Dropped once this request is queued (or given up).
    queued: oneshot::Sender<()>,
}

/// One Produce request to a broker with one batch per partition.
///
/// The futures are polled by a `FuturesUnordered`, whose order of first polls is not the
/// order of the pushes once one future must wait (tokio's cooperative budget can make the
/// connection's queue say "later" to one future and "now" to the next). So the request is
/// queued on the connection only after the previous request to the same broker was:
/// batches of a partition reach the broker in sequence order, never
/// OUT_OF_ORDER_SEQUENCE_NUMBER from our own pipelining.
fn produce(
    shared: &Arc<Shared>,
    target: Target,
    batches: Vec<Drained>,
    ids: &HashMap<Arc<str>, Uuid>,
    txn: Option<TxnVersion>,
) -> BoxFuture<'static, Work> {
    let Target {
        node,
        connection,
        previous,
        queued,
    } = target;
    let Some(connection) = connection else {
        let keys = batches
            .iter()
            .map(|b| {
                let id = ids.get(&b.tp.0).copied().unwrap_or_default();
                (b.tp.clone(), b.batch_id, id)
            })
            .collect();
        let error = ConsumerError::Connection(ConnectionError::Io {
            broker: format!("node {node}"),
            source: std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "the connection closed before the request was sent",
            ),
        });
        return async move {
            drop(queued);
            Work::Produced {
                node,
                broker: format!("node {node}"),
                batches: keys,
                result: Err(error),
            }
        }
        .boxed();
    };
    let by_id = batches
        .iter()
        .all(|b| ids.get(&b.tp.0).is_some_and(|id| !id.is_nil()));
    let ours = match (txn, by_id) {
        (Some(TxnVersion::V1), _) => PRODUCE_TV1,
        (Some(TxnVersion::V2), true) => PRODUCE_TV2,
        (Some(TxnVersion::V2), false) => PRODUCE_TV2_BY_NAME,
        (None, true) => PRODUCE_ANY,
        (None, false) => PRODUCE_BY_NAME,
    };
    let version = connection.negotiate(ApiKey::Produce, ours);
    let mut topics: Vec<TopicProduceData> = Vec::new();
    let mut names: Vec<Arc<str>> = Vec::new();
    let mut keys = Vec::new();
    for batch in &batches {
        let id = ids.get(&batch.tp.0).copied().unwrap_or_default();
        keys.push((batch.tp.clone(), batch.batch_id, id));
        let data = PartitionProduceData::default()
            .with_index(batch.tp.1)
            .with_records(Some(batch.bytes.clone()));
        if let Some(i) = names.iter().position(|n| *n == batch.tp.0) {
            topics[i].partition_data.push(data);
        } else {
            names.push(Arc::clone(&batch.tp.0));
            let topic = TopicProduceData::default().with_partition_data(vec![data]);
            let topic = if version.as_ref().is_ok_and(|v| *v >= 13) {
                topic.with_topic_id(id)
            } else {
                topic.with_name(TopicName(StrBytes::from_string(batch.tp.0.to_string())))
            };
            topics.push(topic);
        }
    }
    let timeout_ms = i32::try_from(shared.config.request_timeout.as_millis()).unwrap_or(i32::MAX);
    let request = ProduceRequest::default()
        .with_transactional_id(
            shared
                .config
                .transactional_id
                .clone()
                .filter(|_| txn.is_some())
                .map(|t| TransactionalId(StrBytes::from_string(t))),
        )
        .with_acks(shared.config.acks.wire())
        .with_timeout_ms(timeout_ms)
        .with_topic_data(topics);
    let broker = connection.broker().to_owned();
    let timeout = shared.config.request_timeout;
    async move {
        let exchange = async {
            if let Some(previous) = previous {
                // Err: the previous request was dropped; it is not waited for either.
                let _ = previous.await;
            }
            let version = version?;
            let sent = connection
                .queue::<_, ProduceResponse>(ApiKey::Produce, version, &request)
                .await;
            drop(queued);
            sent?.response().await
        };
        let result = match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(ConsumerError::Timeout(timeout)),
        };
        Work::Produced {
            node,
            broker,
            batches: keys,
            result,
        }
    }
    .boxed()
}

/// Classifies each batch's answer and hands it to the accumulator.
fn handle_produce(
    shared: &Shared,
    broker: &str,
    batches: Vec<(Tp, u64, Uuid)>,
    result: Result<ProduceResponse, ConsumerError>,
    txn: Option<TxnVersion>,
) {
    let now = Instant::now();
    let mut guard = shared.lock();
    let state = &mut *guard;
    match result {
        Err(error) => {
            debug!(broker, %error, "produce request failed");
            let lost = matches!(
                error,
                ConsumerError::Connection(ConnectionError::Io { .. }) | ConsumerError::Timeout(_)
            );
            let outcome = if lost || error.is_retriable() {
                BatchOutcome::Retriable {
                    error: ProducerError::kafka(error),
                    unknown: true,
                }
            } else {
                BatchOutcome::Failed(ProducerError::kafka(error))
            };
            for (tp, id, _) in batches {
                state.metadata_wanted.insert(Arc::clone(&tp.0));
                let (_, effects) = state.accumulator.complete(&tp, id, outcome.clone(), now);
                apply(state, &effects);
            }
        }
        Ok(response) => {
            for (tp, id, topic_id) in batches {
                let entry = response
                    .responses
                    .iter()
                    .filter(|t| {
                        t.name.0.as_str() == &*tp.0
                            || (!topic_id.is_nil() && t.topic_id == topic_id)
                    })
                    .flat_map(|t| &t.partition_responses)
                    .find(|p| p.index == tp.1);
                let outcome = match entry {
                    None => BatchOutcome::Failed(ProducerError::Kafka {
                        source: Arc::new(ConsumerError::Protocol(ProtocolError::Malformed {
                            broker: broker.to_owned(),
                            reason: format!(
                                "the Produce response has no entry for partition {} of `{}`",
                                tp.1, tp.0
                            ),
                        })),
                    }),
                    Some(p) => {
                        let message = p
                            .error_message
                            .as_ref()
                            .map(|m| m.as_str().to_owned())
                            .or_else(|| {
                                p.record_errors.first().and_then(|e| {
                                    e.batch_index_error_message.as_ref().map(|m| {
                                        format!("record {}: {}", e.batch_index, m.as_str())
                                    })
                                })
                            });
                        if REFRESH_CODES.contains(&p.error_code) {
                            state.metadata_wanted.insert(Arc::clone(&tp.0));
                        }
                        classify_partition(
                            &tp,
                            p.error_code,
                            message,
                            p.base_offset,
                            p.log_append_time_ms,
                            txn,
                            shared.config.transactional_id.as_deref(),
                        )
                    }
                };
                let (_, effects) = state.accumulator.complete(&tp, id, outcome, now);
                apply(state, &effects);
            }
        }
    }
}

/// What a partition's error code means for its batch.
pub(crate) fn classify_partition(
    tp: &Tp,
    error_code: i16,
    message: Option<String>,
    base_offset: i64,
    append_time: i64,
    txn: Option<TxnVersion>,
    transactional_id: Option<&str>,
) -> BatchOutcome {
    if error_code == 0 {
        return BatchOutcome::Written {
            base_offset,
            append_time,
        };
    }
    if error_code == code::DUPLICATE_SEQUENCE_NUMBER {
        return BatchOutcome::Duplicate;
    }
    let Some(source) = broker_error("Produce", error_code, message) else {
        return BatchOutcome::Failed(ProducerError::Kafka {
            source: Arc::new(ConsumerError::Protocol(ProtocolError::Malformed {
                broker: String::new(),
                reason: format!("Produce answered error code {error_code}"),
            })),
        });
    };
    let retriable = source.is_retriable() || error_code == code::CONCURRENT_TRANSACTIONS;
    let source = Arc::new(source);
    let rejected = ProducerError::Rejected {
        topic: tp.0.to_string(),
        partition: tp.1,
        source: Arc::clone(&source),
    };
    match error_code {
        code::OUT_OF_ORDER_SEQUENCE_NUMBER => BatchOutcome::OutOfOrder(rejected),
        code::MESSAGE_TOO_LARGE => BatchOutcome::TooLarge(rejected),
        code::UNKNOWN_PRODUCER_ID => BatchOutcome::UnknownProducer(rejected),
        code::PRODUCER_FENCED if txn.is_some() => BatchOutcome::Failed(ProducerError::Fenced {
            transactional_id: transactional_id.unwrap_or_default().to_owned(),
            source,
        }),
        code::INVALID_PRODUCER_EPOCH | code::INVALID_TXN_STATE | code::TRANSACTION_ABORTABLE
            if txn.is_some() =>
        {
            let reason = if error_code == code::INVALID_PRODUCER_EPOCH {
                "the broker refused the write with INVALID_PRODUCER_EPOCH: the coordinator has \
                 aborted the transaction (it was open longer than transaction.timeout.ms) or a \
                 newer producer took over"
                    .to_owned()
            } else {
                format!("the broker refused the write: {source}")
            };
            BatchOutcome::Failed(ProducerError::Abortable {
                reason,
                source: Some(Arc::new(rejected)),
            })
        }
        // REQUEST_TIMED_OUT and NOT_ENOUGH_REPLICAS_AFTER_APPEND: the leader may have
        // written the batch; an epoch bump must not renumber it before it is resolved.
        _ if retriable => BatchOutcome::Retriable {
            error: rejected,
            unknown: matches!(error_code, 7 | 20),
        },
        _ => BatchOutcome::Failed(rejected),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn batch(partition: i32, len: usize) -> Drained {
        Drained {
            tp: (Arc::from("t"), partition),
            batch_id: u64::try_from(partition).unwrap(),
            bytes: Bytes::from(vec![0u8; len]),
        }
    }

    fn shape(requests: &[Vec<Drained>]) -> Vec<Vec<i32>> {
        requests
            .iter()
            .map(|r| r.iter().map(|b| b.tp.1).collect())
            .collect()
    }

    #[test]
    fn batches_over_max_request_size_together_go_in_several_requests_in_order() {
        let batches = vec![
            batch(0, 600),
            batch(1, 300),
            batch(2, 200),
            batch(3, 2000),
            batch(4, 10),
        ];
        let requests = requests_of(batches, 1000);
        // 600 + 300 fit; 200 more would not; a batch over the maximum goes alone.
        assert_eq!(
            shape(&requests),
            vec![vec![0, 1], vec![2], vec![3], vec![4]]
        );
        assert!(requests_of(Vec::new(), 1000).is_empty());
        let small = requests_of(vec![batch(0, 10), batch(1, 10)], 1000);
        assert_eq!(shape(&small), vec![vec![0, 1]], "one request when they fit");
    }
}
