//! The sending task: the loop that carries out what the sans-IO [`core`] decides (Metadata,
//! connections, Produce requests, epoch bumps, transactions-v1 partitions) and hands each
//! outcome back to it.
//!
//! - [`core`]: the decisions and the sender's bookkeeping, without sockets or clocks;
//! - [`answers`]: what a Produce or Metadata answer means for the batches and records.

mod answers;
pub(crate) mod core;
#[cfg(test)]
mod core_tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use kafka_protocol::messages::{ApiKey, ProduceResponse};
use kafka_protocol::protocol::VersionRange;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::debug;

use self::answers::Sent;
use self::core::{Action, ProducePlan, SenderConfig, SenderCore};
use super::Shared;
use super::accumulator::{ProducerIdentity, Tp};
use super::cluster::TopicMetadata;
use super::txn::TxnVersion;
use crate::kafka::codec::produce::{ProduceRequestParts, ProduceTopic, encode_produce};
use crate::kafka::error::ClientError;
use crate::kafka::error::{ConnectionError, ProtocolError};
use crate::kafka::net::body::Body;
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

/// An outcome of something the loop started, for the core.
enum Work {
    Connected(i32, Result<Connection, ClientError>),
    Produced {
        node: i32,
        sent: Sent,
        result: Result<ProduceResponse, ClientError>,
    },
    /// The topics asked for, the answer, and the `max.message.bytes` of those known.
    Metadata(
        Vec<Arc<str>>,
        Result<Vec<(String, TopicMetadata)>, ClientError>,
        Vec<(Arc<str>, usize)>,
    ),
    Bumped(Result<ProducerIdentity, ProducerError>),
    Added(ProducerIdentity, Vec<Tp>, Result<(), ProducerError>),
    /// The wait for an ended transaction's markers is over.
    Markers(u64),
}

/// Runs until the producer is dropped (which aborts it).
pub(crate) async fn run(shared: Arc<Shared>) {
    let mut core = SenderCore::new(SenderConfig::of(&shared.config), Instant::now());
    let mut work: FuturesUnordered<BoxFuture<'static, Work>> = FuturesUnordered::new();
    // Up to `max.in.flight.requests.per.connection` Produce requests per broker (the core
    // counts them). They must reach the broker in the order their batches got their
    // sequences: each request's frame is queued only after the previous request's to that
    // broker (`order`), whatever order `work` polls the futures in (see `produce`).
    let mut order: HashMap<i32, oneshot::Receiver<()>> = HashMap::new();
    loop {
        let turn = {
            let mut state = shared.lock();
            core.turn(&mut state, Instant::now(), &|node| {
                shared.cluster.cached(node).is_some()
            })
        };
        if turn.progressed {
            shared.progress.notify_waiters();
        }
        for action in turn.actions {
            work.push(start(&shared, &mut order, action));
        }
        let sleep = tokio::time::sleep_until(
            turn.wake_at
                .unwrap_or_else(|| deadline_after(Instant::now(), Duration::from_secs(3600))),
        );
        tokio::select! {
            () = shared.wake.notified() => {}
            () = sleep => {}
            Some(done) = work.next(), if !work.is_empty() => {
                let now = Instant::now();
                let mut state = shared.lock();
                let progressed = match done {
                    Work::Connected(node, result) => {
                        if let Err(error) = &result {
                            // Learn the leaders again now; this broker again after the
                            // reconnect backoff (`kafka::net::backoff`).
                            debug!(node, %error, "connection to a leader failed");
                        }
                        core.on_connected(&mut state, node, result.is_ok());
                        false
                    }
                    Work::Produced { node, sent, result } => {
                        core.on_produced(&mut state, node, sent, result, now);
                        true
                    }
                    Work::Metadata(topics, result, limits) => {
                        core.on_metadata(&mut state, &topics, result, &limits, now);
                        true
                    }
                    Work::Bumped(result) => {
                        core.on_bumped(&mut state, result, now);
                        false
                    }
                    Work::Added(producer, partitions, result) => {
                        core.on_added(&mut state, producer, partitions, result)
                    }
                    Work::Markers(ended) => {
                        core.on_markers(&mut state, ended);
                        false
                    }
                };
                drop(state);
                if progressed {
                    shared.progress.notify_waiters();
                }
            }
        }
    }
}

/// The future that carries out `action`.
fn start(
    shared: &Arc<Shared>,
    order: &mut HashMap<i32, oneshot::Receiver<()>>,
    action: Action,
) -> BoxFuture<'static, Work> {
    let shared2 = Arc::clone(shared);
    match action {
        Action::Metadata(topics) => async move {
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
        Action::Bump(current) => async move {
            let mut coordinator = shared2.coordinator.lock().await;
            let timeout = shared2.config.transaction_timeout;
            let mut result = coordinator
                .init_producer_id(&shared2.cluster, timeout, Some(current), shared2.retry())
                .await;
            if result.is_err() {
                // The broker may not know the producer any more: a new id.
                result = coordinator
                    .init_producer_id(&shared2.cluster, timeout, None, shared2.retry())
                    .await;
            }
            Work::Bumped(result)
        }
        .boxed(),
        Action::AddPartitions(producer, new) => async move {
            let result = shared2
                .coordinator
                .lock()
                .await
                .add_partitions(&shared2.cluster, producer, &new, shared2.retry())
                .await;
            Work::Added(producer, new, result)
        }
        .boxed(),
        Action::AwaitMarkers { ended, deadline } => async move {
            // The coordinator may be busy (an InitProducerId): the wait ends at its deadline
            // whatever holds it.
            if let Ok(mut coordinator) =
                tokio::time::timeout_at(deadline, shared2.coordinator.lock()).await
                && Instant::now() < deadline
            {
                coordinator.await_complete(&shared2.cluster, deadline).await;
            }
            Work::Markers(ended)
        }
        .boxed(),
        Action::Connect(node) => {
            async move { Work::Connected(node, shared2.cluster.open(node).await) }.boxed()
        }
        Action::Produce(plan) => {
            let node = plan.node;
            let (queued, next) = oneshot::channel();
            let target = Target {
                node,
                connection: shared.cluster.cached(node),
                previous: order.insert(node, next),
                queued,
            };
            produce(shared, target, plan)
        }
    }
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
fn produce(shared: &Arc<Shared>, target: Target, plan: ProducePlan) -> BoxFuture<'static, Work> {
    let ProducePlan { batches, txn, .. } = plan;
    let Target {
        node,
        connection,
        previous,
        queued,
    } = target;
    let Some(connection) = connection else {
        let keys = batches
            .iter()
            .map(|(b, id)| (b.tp.clone(), b.batch_id, *id))
            .collect();
        let error = ClientError::Connection(ConnectionError::Io {
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
                sent: Sent {
                    broker: format!("node {node}"),
                    batches: keys,
                    txn,
                },
                result: Err(error),
            }
        }
        .boxed();
    };
    let by_id = batches.iter().all(|(_, id)| !id.is_nil());
    let ours = match (txn, by_id) {
        (Some(TxnVersion::V1), _) => PRODUCE_TV1,
        (Some(TxnVersion::V2), true) => PRODUCE_TV2,
        (Some(TxnVersion::V2), false) => PRODUCE_TV2_BY_NAME,
        (None, true) => PRODUCE_ANY,
        (None, false) => PRODUCE_BY_NAME,
    };
    let version = connection.negotiate(ApiKey::Produce, ours);
    let mut topics: Vec<ProduceTopic<'_>> = Vec::new();
    let mut keys = Vec::with_capacity(batches.len());
    for (batch, id) in &batches {
        keys.push((batch.tp.clone(), batch.batch_id, *id));
        let partition = (batch.tp.1, batch.bytes.clone());
        match topics.iter_mut().find(|t| t.name == &*batch.tp.0) {
            Some(topic) => topic.partitions.push(partition),
            None => topics.push(ProduceTopic {
                name: &batch.tp.0,
                id: *id,
                partitions: vec![partition],
            }),
        }
    }
    let timeout_ms = i32::try_from(shared.config.request_timeout.as_millis()).unwrap_or(i32::MAX);
    let request = ProduceRequestParts {
        transactional_id: shared
            .config
            .transactional_id
            .as_deref()
            .filter(|_| txn.is_some()),
        acks: shared.config.acks.wire(),
        timeout_ms,
        topics,
    };
    // The batches go to the wire as they are, each a chunk of the body (no copy).
    let body = version.and_then(|version| {
        encode_produce(&request, version)
            .map(|chunks| (version, Body::Chunks(chunks)))
            .map_err(|error| {
                ClientError::Protocol(ProtocolError::Malformed {
                    broker: connection.broker().to_owned(),
                    reason: format!("cannot encode a Produce v{version} request: {error}"),
                })
            })
    });
    drop(request);
    let broker = connection.broker().to_owned();
    let timeout = shared.config.request_timeout;
    async move {
        let on_the_wire = async {
            if let Some(previous) = previous {
                // Err: the previous request was dropped; it is not waited for either.
                let _ = previous.await;
            }
            let (version, body) = body?;
            let sent = connection
                .queue::<ProduceResponse>(ApiKey::Produce, version, body)
                .await;
            drop(queued);
            sent
        };
        // Each step within the request timeout; the answer's from when the request went out,
        // as Java's client counts it.
        let result = match tokio::time::timeout(timeout, on_the_wire).await {
            Err(_) => Err(ClientError::Timeout(timeout)),
            Ok(Err(error)) => Err(error),
            // A lost answer closes the connection: the requests under way on it fail now and
            // their batches are retried, in order, on a new connection.
            Ok(Ok(sent)) => sent.response_within(timeout).await,
        };
        Work::Produced {
            node,
            sent: Sent {
                broker,
                batches: keys,
                txn,
            },
            result,
        }
    }
    .boxed()
}
