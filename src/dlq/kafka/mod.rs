//! [`KafkaDeadLetterQueue`]: a dead-letter topic on a Kafka cluster, written with acks=all.

mod batches;
mod cluster;
mod config;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use futures::future::join_all;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::{Message, StrBytes, VersionRange};
use tokio::time::Instant;
use tracing::{debug, warn};

use self::batches::{Batch, batches, now_ms};
use self::cluster::{Cluster, LEADER_NOT_AVAILABLE, Layout};
pub use self::config::KafkaDeadLetterQueueConfig;
use super::{DeadLetterError, DeadLetterQueue, DeadLetterRecord};
use crate::consumer::ConsumerError;
use crate::kafka::errors::{api_name, broker_error};
use crate::kafka::net::connection::ConnectionConfig;
use crate::kafka::security::SecurityContext;
use crate::time::deadline_after;

/// `acks=all`: the leader answers once every in-sync replica has the records.
const ACKS_ALL: i16 = -1;
/// The first pause between two attempts (Java's `retry.backoff.ms`).
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest pause between two attempts (Java's `retry.backoff.max.ms`).
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// Bound on one TCP connect or handshake, below the delivery timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on one request (Java's `request.timeout.ms`), below the delivery timeout.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Produce versions that name the topic; v13 names it by id.
const PRODUCE_BY_NAME: VersionRange = VersionRange { min: 3, max: 12 };

/// A dead-letter queue on a Kafka topic.
///
/// [`connect`](Self::connect) creates the topic when it is missing, with 1 partition and
/// the configured replication factor, as Connect's worker does; an existing topic is used as
/// it is, whatever its partition count. [`send`](DeadLetterQueue::send) writes with
/// `acks=all` and without idempotence (as Connect's dead-letter producer), retrying
/// retriable errors (a leader change, too few in-sync replicas, a lost connection) with
/// backoff until the delivery timeout. A retry after a lost answer can write a record twice.
///
/// Records are spread as Kafka's Java producer spreads them: a keyed record goes to the
/// partition `murmur2(key) % partitions`, so records of one key share a partition; the
/// unkeyed records of one `send` go together to one partition, the next `send`'s to the
/// next partition (round robin across calls, sticky within one).
///
/// Records keep their key, value and headers byte for byte (repeated header keys and null
/// header values included) and their timestamp (the time of writing when they have none).
///
/// Plaintext connections only, like the rest of the crate's Kafka client.
///
/// # Example
///
/// ```no_run
/// use kafka_share_sink::{ConsumerRecord, DeadLetterQueue, DeadLetterRecord};
/// use kafka_share_sink::{KafkaDeadLetterQueue, KafkaDeadLetterQueueConfig};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), kafka_share_sink::DeadLetterError> {
/// let config = KafkaDeadLetterQueueConfig::new("127.0.0.1:9092", "orders-dlq")
///     .connector("orders-sink", 0)
///     .replication_factor(1);
/// let dlq = KafkaDeadLetterQueue::connect(config).await?;
/// let failed = ConsumerRecord::new("orders", 0, 7).with_value(Some("not json".into()));
/// dlq.send(vec![DeadLetterRecord::new(&failed)]).await?;
/// # Ok(())
/// # }
/// ```
///
/// # Cancel safety
///
/// Dropping a `send` future is safe; records already handed to a broker may be written.
#[derive(Debug)]
pub struct KafkaDeadLetterQueue {
    topic: String,
    delivery_timeout: Duration,
    cluster: Cluster,
    /// The topic's layout as last learnt.
    layout: Mutex<Layout>,
    /// Picks the partition of the next `send`'s unkeyed records.
    next_unkeyed: AtomicUsize,
}

impl KafkaDeadLetterQueue {
    /// Connects to the cluster and makes sure the topic exists, creating it (1 partition,
    /// the configured replication factor) when it is missing, within the delivery timeout.
    ///
    /// # Errors
    ///
    /// - [`DeadLetterError::Config`] for a setting out of range;
    /// - [`DeadLetterError::Kafka`] when no bootstrap server answers (retriable), or the
    ///   cluster answers Metadata with an error;
    /// - [`DeadLetterError::CreateTopic`] when the topic is missing and cannot be created,
    ///   saying what to do (e.g. lower the replication factor);
    /// - [`DeadLetterError::Timeout`] when all this takes longer than the delivery timeout.
    pub async fn connect(config: KafkaDeadLetterQueueConfig) -> Result<Self, DeadLetterError> {
        config.validate()?;
        let timeout = config.delivery_timeout_value();
        let deadline = deadline_after(Instant::now(), timeout);
        let mut last = None;
        match tokio::time::timeout_at(deadline, Self::setup(&config, &mut last)).await {
            Ok(result) => result,
            Err(_) => Err(DeadLetterError::Timeout {
                timeout,
                last: last.map(Box::new),
            }),
        }
    }

    async fn setup(
        config: &KafkaDeadLetterQueueConfig,
        last: &mut Option<DeadLetterError>,
    ) -> Result<Self, DeadLetterError> {
        let topic = config.topic();
        let kafka = |source| DeadLetterError::Kafka {
            topic: topic.to_owned(),
            source,
        };
        let timeout = config.delivery_timeout_value();
        let security = SecurityContext::build(config.security_value()).map_err(|e| {
            DeadLetterError::Config {
                key: e.key,
                reason: e.reason,
            }
        })?;
        let connection = ConnectionConfig {
            security,
            client_id: config.effective_client_id().into(),
            connect_timeout: CONNECT_TIMEOUT.min(timeout),
            request_timeout: REQUEST_TIMEOUT.min(timeout),
            ..ConnectionConfig::default()
        };
        let cluster = Cluster::connect(config.bootstrap_servers(), connection)
            .await
            .map_err(kafka)?;
        let mut created = false;
        let mut backoff = FIRST_BACKOFF;
        let layout = loop {
            match cluster.layout(topic).await.map_err(kafka)? {
                // A topic found is used as it is; one just created is awaited until every
                // partition has a leader.
                Some(layout) if !created || layout.is_ready() => break layout,
                Some(_) => {}
                None if !created => {
                    let rf = config.replication_factor_value();
                    cluster
                        .create_topic(topic, 1, rf)
                        .await
                        .map_err(|source| create_topic_error(topic, rf, source))?;
                    created = true;
                    continue;
                }
                None => {}
            }
            *last = Some(kafka(not_ready(topic)));
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        };
        debug!(
            topic,
            partitions = layout.leaders.len(),
            created,
            "dead-letter queue ready"
        );
        Ok(Self {
            topic: topic.to_owned(),
            delivery_timeout: timeout,
            cluster,
            layout: Mutex::new(layout),
            next_unkeyed: AtomicUsize::new(0),
        })
    }

    fn layout(&self) -> Layout {
        self.layout
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Learns the layout again; on failure the old one is kept and the error returned.
    async fn refresh(&self) -> Result<Layout, DeadLetterError> {
        match self.cluster.layout(&self.topic).await {
            Ok(Some(layout)) => {
                *self.layout.lock().unwrap_or_else(PoisonError::into_inner) = layout.clone();
                Ok(layout)
            }
            Ok(None) => Err(self.kafka(ConsumerError::Broker {
                api: api_name(ApiKey::Metadata),
                code: 3,
                name: "UNKNOWN_TOPIC_OR_PARTITION",
                message: Some(format!("the dead-letter topic `{}` is gone", self.topic)),
                retriable: true,
            })),
            Err(source) => Err(self.kafka(source)),
        }
    }

    fn kafka(&self, source: ConsumerError) -> DeadLetterError {
        DeadLetterError::Kafka {
            topic: self.topic.clone(),
            source,
        }
    }

    /// Sends every batch, retrying those that fail retriably, until all are confirmed or
    /// one fails for good. `last` keeps the latest retriable error for a timeout.
    async fn deliver(
        &self,
        records: Vec<DeadLetterRecord>,
        last: &mut Option<DeadLetterError>,
    ) -> Result<(), DeadLetterError> {
        let mut layout = self.layout();
        let unkeyed = self.next_unkeyed.fetch_add(1, Ordering::Relaxed);
        let mut pending = batches(records, layout.leaders.len(), unkeyed, now_ms());
        let mut backoff = FIRST_BACKOFF;
        loop {
            // One batch per partition per round: a Produce request carries one batch of a
            // partition, and later batches of a partition wait for the earlier ones.
            let mut round: Vec<Batch> = Vec::new();
            let mut waiting = Vec::new();
            for batch in pending {
                if round.iter().any(|b| b.partition == batch.partition) {
                    waiting.push(batch);
                } else {
                    round.push(batch);
                }
            }
            let outcome = self.produce_round(&layout, &round).await;
            if let Some(error) = outcome.fatal {
                warn!(topic = %self.topic, %error, "dead-letter records refused");
                return Err(error);
            }
            let retry = !outcome.retry.is_empty();
            if let Some(error) = outcome.last {
                debug!(topic = %self.topic, %error, "dead-letter records will be retried");
                *last = Some(error);
            }
            pending = round
                .into_iter()
                .enumerate()
                .filter(|(i, _)| outcome.retry.contains(i))
                .map(|(_, batch)| batch)
                .chain(waiting)
                .collect();
            if pending.is_empty() {
                return Ok(());
            }
            if retry {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                match self.refresh().await {
                    Ok(fresh) => layout = fresh,
                    Err(error) if error.is_retriable() => *last = Some(error),
                    Err(error) => return Err(error),
                }
            }
        }
    }

    /// Sends `round` (one batch per partition) to the partitions' leaders, one request per
    /// leader, all at once.
    async fn produce_round(&self, layout: &Layout, round: &[Batch]) -> RoundOutcome {
        let mut outcome = RoundOutcome::default();
        let mut by_leader: Vec<(i32, Vec<usize>)> = Vec::new();
        for (i, batch) in round.iter().enumerate() {
            let leader = usize::try_from(batch.partition)
                .ok()
                .and_then(|p| layout.leaders.get(p).copied())
                .unwrap_or(-1);
            if leader < 0 {
                outcome.add([i], self.kafka(no_leader(batch.partition)));
            } else if let Some((_, indices)) = by_leader.iter_mut().find(|(l, _)| *l == leader) {
                indices.push(i);
            } else {
                by_leader.push((leader, vec![i]));
            }
        }
        let requests = by_leader.iter().map(|(leader, indices)| {
            let batches: Vec<&Batch> = indices.iter().map(|i| &round[*i]).collect();
            self.produce_to(*leader, layout, batches)
        });
        for ((_, indices), result) in by_leader.iter().zip(join_all(requests).await) {
            match result {
                Ok(refused) => {
                    for (position, error) in refused {
                        outcome.add([indices[position]], error);
                    }
                }
                Err(error) => outcome.add(indices.iter().copied(), error),
            }
        }
        outcome
    }

    /// One Produce request to broker `leader` with `batches`: `Err` when the request as a
    /// whole failed, else the batches the broker refused, by position in `batches`.
    async fn produce_to(
        &self,
        leader: i32,
        layout: &Layout,
        batches: Vec<&Batch>,
    ) -> Result<Vec<(usize, DeadLetterError)>, DeadLetterError> {
        let connection = self
            .cluster
            .leader(leader)
            .await
            .map_err(|e| self.kafka(e))?;
        let key = ApiKey::Produce;
        let ours = if layout.topic_id.is_nil() {
            PRODUCE_BY_NAME
        } else {
            ProduceRequest::VERSIONS
        };
        let version = connection.negotiate(key, ours).map_err(|e| self.kafka(e))?;
        let topic_data = TopicProduceData::default().with_partition_data(
            batches
                .iter()
                .map(|b| {
                    PartitionProduceData::default()
                        .with_index(b.partition)
                        .with_records(Some(b.bytes.clone()))
                })
                .collect(),
        );
        let topic_data = if version > PRODUCE_BY_NAME.max {
            topic_data.with_topic_id(layout.topic_id)
        } else {
            topic_data.with_name(TopicName(StrBytes::from_string(self.topic.clone())))
        };
        let broker_timeout = REQUEST_TIMEOUT.min(self.delivery_timeout);
        let request = ProduceRequest::default()
            .with_acks(ACKS_ALL)
            .with_timeout_ms(i32::try_from(broker_timeout.as_millis()).unwrap_or(i32::MAX))
            .with_topic_data(vec![topic_data]);
        let response: ProduceResponse = connection
            .request(key, version, &request)
            .await
            .map_err(|e| self.kafka(e))?;
        let mut refused = Vec::new();
        for (position, batch) in batches.iter().enumerate() {
            let Some(partition) = response
                .responses
                .iter()
                .flat_map(|t| &t.partition_responses)
                .find(|p| p.index == batch.partition)
            else {
                return Err(self.kafka(ConsumerError::Protocol {
                    broker: connection.broker().to_owned(),
                    reason: format!(
                        "the Produce response has no entry for partition {} of `{}`",
                        batch.partition, self.topic
                    ),
                }));
            };
            let message = partition
                .error_message
                .as_ref()
                .map(|m| m.as_str().to_owned())
                .or_else(|| {
                    partition.record_errors.first().and_then(|e| {
                        e.batch_index_error_message
                            .as_ref()
                            .map(|m| format!("record {}: {}", e.batch_index, m.as_str()))
                    })
                });
            if let Some(source) = broker_error(api_name(key), partition.error_code, message) {
                let error = DeadLetterError::Rejected {
                    topic: self.topic.clone(),
                    partition: batch.partition,
                    source,
                };
                refused.push((position, error));
            }
        }
        Ok(refused)
    }
}

/// What one round of Produce requests left to do.
#[derive(Debug, Default)]
struct RoundOutcome {
    /// Positions of the batches to send again.
    retry: Vec<usize>,
    /// The latest retriable error.
    last: Option<DeadLetterError>,
    /// The first error that is not retriable: the whole `send` fails with it.
    fatal: Option<DeadLetterError>,
}

impl RoundOutcome {
    /// Notes that the batches at `positions` failed with `error`.
    fn add(&mut self, positions: impl IntoIterator<Item = usize>, error: DeadLetterError) {
        if error.is_retriable() {
            self.retry.extend(positions);
            self.last = Some(error);
        } else if self.fatal.is_none() {
            self.fatal = Some(error);
        }
    }
}

#[async_trait::async_trait]
impl DeadLetterQueue for KafkaDeadLetterQueue {
    fn topic(&self) -> &str {
        &self.topic
    }

    async fn send(&self, records: Vec<DeadLetterRecord>) -> Result<(), DeadLetterError> {
        if records.is_empty() {
            return Ok(());
        }
        let deadline = deadline_after(Instant::now(), self.delivery_timeout);
        let mut last = None;
        match tokio::time::timeout_at(deadline, self.deliver(records, &mut last)).await {
            Ok(result) => result,
            Err(_) => Err(DeadLetterError::Timeout {
                timeout: self.delivery_timeout,
                last: last.map(Box::new),
            }),
        }
    }
}

/// The error for a partition without a known leader.
fn no_leader(partition: i32) -> ConsumerError {
    ConsumerError::Broker {
        api: api_name(ApiKey::Metadata),
        code: LEADER_NOT_AVAILABLE,
        name: "LEADER_NOT_AVAILABLE",
        message: Some(format!("partition {partition} has no leader yet")),
        retriable: true,
    }
}

/// The error while a created topic is not visible with leaders yet.
fn not_ready(topic: &str) -> ConsumerError {
    ConsumerError::Broker {
        api: api_name(ApiKey::Metadata),
        code: LEADER_NOT_AVAILABLE,
        name: "LEADER_NOT_AVAILABLE",
        message: Some(format!(
            "topic `{topic}` was created but has no leaders yet"
        )),
        retriable: true,
    }
}

/// The error for a topic that could not be created, with what to do about it.
fn create_topic_error(
    topic: &str,
    replication_factor: i16,
    source: ConsumerError,
) -> DeadLetterError {
    let name = match &source {
        ConsumerError::Broker { name, .. } => *name,
        _ => "",
    };
    let hint = match name {
        "INVALID_REPLICATION_FACTOR" => format!(
            "the cluster cannot place {replication_factor} replicas: lower \
             errors.deadletterqueue.topic.replication.factor (-1 takes the broker's default), \
             or create the topic yourself"
        ),
        "TOPIC_AUTHORIZATION_FAILED" | "CLUSTER_AUTHORIZATION_FAILED" => {
            "the client may not create topics: grant it CREATE, or create the topic yourself \
             (1 partition is enough)"
                .to_owned()
        }
        "INVALID_TOPIC_EXCEPTION" => {
            "the cluster refuses this name: change errors.deadletterqueue.topic.name".to_owned()
        }
        "POLICY_VIOLATION" | "INVALID_CONFIG" | "INVALID_PARTITIONS" => {
            "the cluster's topic policy refused it: create the topic yourself".to_owned()
        }
        _ if source.is_retriable() => {
            "the cluster did not answer in time: retry, or create the topic yourself".to_owned()
        }
        _ => "create the topic yourself (1 partition is enough)".to_owned(),
    };
    DeadLetterError::CreateTopic {
        topic: topic.to_owned(),
        hint,
        source,
    }
}
