//! What the broker's answers mean: a Produce answer per batch (written, a duplicate, to be
//! retried, to be split, given up), and a Metadata answer per topic (leaders, records waiting
//! for the topic placed or failed). Pure functions of the producer's [`State`].

use std::sync::Arc;

use kafka_protocol::messages::ProduceResponse;
use tokio::time::Instant;
use tracing::debug;
use uuid::Uuid;

use super::core::apply;
use crate::kafka::error::ClientError;
use crate::kafka::error::codes::broker_error;
use crate::kafka::error::{ConnectionError, ProtocolError};
use crate::kafka::producer::State;
use crate::kafka::producer::accumulator::{BatchOutcome, Tp};
use crate::kafka::producer::cluster::TopicMetadata;
use crate::kafka::producer::txn::{TxnVersion, code};
use crate::producer::ProducerError;

/// Partition errors after which the leader is looked up again: Java's
/// `InvalidMetadataException`s a Produce answer carries (UNKNOWN_TOPIC_OR_PARTITION,
/// LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR, FENCED_LEADER_EPOCH,
/// UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_ID — a topic deleted and created again under the same
/// name has a new id — and INCONSISTENT_TOPIC_ID).
const REFRESH_CODES: [i16; 8] = [3, 5, 6, 56, 74, 75, 100, 103];

/// What a Produce request carried, to read its answer by.
#[derive(Debug)]
pub(crate) struct Sent {
    /// The broker's address, for messages.
    pub(crate) broker: String,
    /// Each batch: its partition, its id in the accumulator, its topic's id (nil: unknown).
    pub(crate) batches: Vec<(Tp, u64, Uuid)>,
    /// The transaction protocol the request was sent under.
    pub(crate) txn: Option<TxnVersion>,
}

/// Takes a Metadata answer; returns true when some topic must be asked for again.
pub(crate) fn metadata(
    state: &mut State,
    topics: &[Arc<str>],
    result: Result<Vec<(String, TopicMetadata)>, ClientError>,
    now: Instant,
) -> bool {
    let answers = match result {
        Ok(answers) => answers,
        Err(error) => {
            debug!(%error, "metadata failed, retrying");
            let because = Arc::new(ProducerError::from_client(Arc::new(error)));
            for topic in topics {
                if state.waiting.contains_key(topic) {
                    state
                        .waiting_because
                        .insert(Arc::clone(topic), Arc::clone(&because));
                }
            }
            state.metadata_wanted.extend(topics.iter().cloned());
            return true;
        }
    };
    let mut again = false;
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
                state.waiting_because.remove(&topic);
                if let Some(queue) = state.waiting.remove(&topic) {
                    for w in queue {
                        let partition = match w.partition {
                            Some(p) if usize::try_from(p).is_ok_and(|p| p < count) => p,
                            Some(p) => {
                                // Failed after `send` returned (a send refused at once
                                // leaves the transaction as it is: its caller knows).
                                let error = ProducerError::UnknownPartition {
                                    topic: topic.to_string(),
                                    partition: p,
                                };
                                w.fail(&mut state.accumulator, state.txn.as_mut(), error);
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
            TopicMetadata::Unknown | TopicMetadata::Retry(_) => {
                if state.waiting.contains_key(&topic) {
                    again = true;
                    state.metadata_wanted.insert(Arc::clone(&topic));
                    // Why its records wait: a retriable error, or (none) a topic not known.
                    if let TopicMetadata::Retry(error) = meta {
                        let because = Arc::new(ProducerError::from_client(error));
                        state.waiting_because.insert(Arc::clone(&topic), because);
                    } else {
                        state.waiting_because.remove(&topic);
                    }
                }
            }
            TopicMetadata::Failed(error) => {
                state.waiting_because.remove(&topic);
                if let Some(queue) = state.waiting.remove(&topic) {
                    // Failed after `send` returned: the commit must not go through
                    // without them (as when a broker refuses a batch).
                    let error = ProducerError::from_client(error);
                    for w in queue {
                        w.fail(&mut state.accumulator, state.txn.as_mut(), error.clone());
                    }
                }
            }
        }
    }
    again
}

/// Classifies each batch's answer and hands it to the accumulator.
pub(crate) fn produced(
    state: &mut State,
    sent: Sent,
    result: Result<ProduceResponse, ClientError>,
    transactional_id: Option<&str>,
    now: Instant,
) {
    let Sent {
        broker,
        batches,
        txn,
    } = sent;
    let broker = broker.as_str();
    match result {
        Err(error) => {
            debug!(broker, %error, "produce request failed");
            let lost = matches!(
                error,
                ClientError::Connection(ConnectionError::Io { .. }) | ClientError::Timeout(_)
            );
            let outcome = if lost || error.is_retriable() {
                BatchOutcome::Retriable {
                    error: ProducerError::kafka(error),
                    unknown: true,
                }
            } else {
                // An answer that could not be read: the write may have happened.
                BatchOutcome::GivenUp(ProducerError::kafka(error))
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
                    None => BatchOutcome::GivenUp(ProducerError::Kafka {
                        source: Arc::new(ClientError::Protocol(ProtocolError::Malformed {
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
                            transactional_id,
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
            source: Arc::new(ClientError::Protocol(ProtocolError::Malformed {
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
