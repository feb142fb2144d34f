//! [`KafkaDeadLetterQueue`]: a dead-letter topic on a Kafka cluster, written with acks=all.

mod cluster;
mod config;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;
use tracing::{debug, warn};

use self::cluster::{Cluster, LEADER_NOT_AVAILABLE, Layout};
pub use self::config::KafkaDeadLetterQueueConfig;
use super::{DeadLetterError, DeadLetterQueue, DeadLetterRecord};
use kafka_protocol::messages::ApiKey;

use crate::kafka::error::codes::api_name;
use crate::kafka::error::{BrokerError, ClientError};
use crate::kafka::net::connection::ConnectionConfig;
use crate::kafka::producer::partitioner::partition_for_key;
use crate::kafka::security::SecurityContext;
use crate::producer::{Acks, KafkaProducer, KafkaProducerConfig, Producer, ProducerError};
use crate::time::deadline_after;

/// The first pause between two attempts (Java's `retry.backoff.ms`).
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest pause between two attempts (Java's `retry.backoff.max.ms`).
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// Bound on one TCP connect or handshake, below the delivery timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on one request (Java's `request.timeout.ms`), below the delivery timeout.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest request the queue's producer builds: large, so that the broker's own limit
/// (`message.max.bytes`, `max.message.bytes`) decides, and says so, rather than a client
/// default below it.
const MAX_REQUEST_SIZE: usize = 64 << 20;

/// A dead-letter queue on a Kafka topic.
///
/// [`connect`](Self::connect) creates the topic when it is missing, with 1 partition and
/// the configured replication factor, as Connect's worker does; an existing topic is used as
/// it is, whatever its partition count. [`send`](DeadLetterQueue::send) writes through the
/// crate's [`KafkaProducer`] with `acks=all` and idempotence, retrying retriable errors (a
/// leader change, too few in-sync replicas, a lost connection) until the delivery timeout;
/// unlike Connect's dead-letter producer (idempotence off), a retry after a lost answer
/// never writes a record twice.
///
/// Records are spread as Kafka's Java producer spreads them: a keyed record goes to the
/// partition `murmur2(key) % partitions`, so records of one key share a partition; the
/// unkeyed records of one `send` go together to one partition, the next `send`'s to the
/// next partition (round robin across calls, sticky within one).
///
/// Records keep their key, value and headers byte for byte (repeated header keys and null
/// header values included) and their timestamp (the time of writing when they have none).
///
/// TLS and SASL as the configured [`Security`](crate::Security) says.
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
    /// Writes the records: the crate's one produce path.
    producer: KafkaProducer,
}

impl KafkaDeadLetterQueue {
    /// Connects to the cluster and makes sure the topic exists, creating it (1 partition,
    /// the configured replication factor) when it is missing, within the delivery timeout.
    ///
    /// # Errors
    ///
    /// - [`DeadLetterError::Config`] for a setting out of range;
    /// - [`DeadLetterError::Kafka`] when no bootstrap server answers (retriable), or the
    ///   cluster answers Metadata with an error retrying cannot fix (a retriable one is tried
    ///   again at a backoff within the delivery timeout, as is a retriable CreateTopics
    ///   error);
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
        let kafka = |source: ClientError| DeadLetterError::Kafka {
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
        let mut maybe_created = false;
        let mut backoff = FIRST_BACKOFF;
        let layout = loop {
            // A retriable error (a request timed out, a connection lost, a controller moving)
            // is tried again at the backoff within the delivery timeout, as a topic not ready
            // yet is; the last one is what a timeout reports.
            match cluster.layout(topic).await {
                // A topic found is used as it is; one just created is awaited until every
                // partition has a leader.
                Ok(Some(layout)) if !(created || maybe_created) || layout.is_ready() => {
                    break layout;
                }
                Ok(Some(_)) => *last = Some(kafka(not_ready(topic))),
                Ok(None) if created => *last = Some(kafka(not_ready(topic))),
                Ok(None) => {
                    let rf = config.replication_factor_value();
                    match cluster.create_topic(topic, 1, rf).await {
                        Ok(()) => {
                            created = true;
                            continue;
                        }
                        Err(source) if source.is_retriable() => {
                            // A request that timed out may have created it all the same.
                            maybe_created = true;
                            *last = Some(create_topic_error(topic, rf, source));
                        }
                        Err(source) => return Err(create_topic_error(topic, rf, source)),
                    }
                }
                Err(source) if source.is_retriable() => *last = Some(kafka(source)),
                Err(source) => return Err(kafka(source)),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        };
        let producer = KafkaProducer::connect(
            KafkaProducerConfig::new(config.bootstrap_servers())
                .client_id(config.effective_client_id())
                .acks(Acks::All)
                .idempotence(true)
                .delivery_timeout(timeout)
                .request_timeout(REQUEST_TIMEOUT.min(timeout))
                .max_request_size(MAX_REQUEST_SIZE)
                // A record up to the request size is never refused for the buffer's size.
                .buffer_memory(MAX_REQUEST_SIZE)
                .security(config.security_value().clone()),
        )
        .await
        .map_err(|source| producer_error(topic, source))?;
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
            producer,
        })
    }

    fn layout(&self) -> Layout {
        self.layout
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Learns the layout again (a topic whose partitions grew); on failure the old one is kept.
    async fn refresh(&self) -> Layout {
        match self.cluster.layout(&self.topic).await {
            Ok(Some(layout)) if !layout.leaders.is_empty() => {
                *self.layout.lock().unwrap_or_else(PoisonError::into_inner) = layout.clone();
                layout
            }
            _ => self.layout(),
        }
    }

    /// Hands every record to the producer, then waits for all of them: `Ok` once each is
    /// written, else the first failure (the others may be written; the caller releases the
    /// originals all the same, so nothing is lost).
    ///
    /// Partitions are picked here, as before the producer was shared: a keyed record goes to
    /// `murmur2(key) % partitions`, the unkeyed ones of this call together to one partition,
    /// round robin across calls.
    async fn deliver(&self, records: Vec<DeadLetterRecord>) -> Result<(), DeadLetterError> {
        let layout = self.layout();
        let layout = if layout.leaders.is_empty() {
            self.refresh().await
        } else {
            layout
        };
        let partitions = layout.leaders.len().max(1);
        let unkeyed = self.next_unkeyed.fetch_add(1, Ordering::Relaxed) % partitions;
        let mut deliveries = Vec::with_capacity(records.len());
        for record in records {
            let partition = record
                .key
                .as_ref()
                .map_or(unkeyed, |key| partition_for_key(key, partitions));
            let out = record
                .into_producer_record(&self.topic)
                .partition(i32::try_from(partition).unwrap_or(0));
            let delivery = self
                .producer
                .send(out)
                .map_err(|source| producer_error(&self.topic, source))?;
            deliveries.push(delivery);
        }
        for outcome in join_all(deliveries).await {
            if let Err(source) = outcome {
                let error = producer_error(&self.topic, source);
                warn!(topic = %self.topic, %error, "dead-letter records not written");
                return Err(error);
            }
        }
        Ok(())
    }
}

/// A producer error as the queue reports it: a refusal by the partition leader as
/// [`DeadLetterError::Rejected`] with the broker's error, a delivery timeout as
/// [`DeadLetterError::Timeout`], anything else as [`DeadLetterError::Producer`].
fn producer_error(topic: &str, error: ProducerError) -> DeadLetterError {
    match error {
        ProducerError::Rejected {
            partition, source, ..
        } => match source.duplicate_broker_error() {
            Some(source) => DeadLetterError::Rejected {
                topic: topic.to_owned(),
                partition,
                source,
            },
            None => DeadLetterError::Producer {
                topic: topic.to_owned(),
                source: ProducerError::Rejected {
                    topic: topic.to_owned(),
                    partition,
                    source,
                },
            },
        },
        ProducerError::Timeout { timeout, last } => DeadLetterError::Timeout {
            timeout,
            last: last.map(|last| {
                Box::new(DeadLetterError::Producer {
                    topic: topic.to_owned(),
                    source: Arc::unwrap_or_clone(last),
                })
            }),
        },
        source => DeadLetterError::Producer {
            topic: topic.to_owned(),
            source,
        },
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
        // The producer bounds each record by the delivery timeout; this bounds the call as
        // a whole (with a little room for the producer's own timeout to be the one seen).
        let grace = Duration::from_secs(1);
        let deadline = deadline_after(Instant::now(), self.delivery_timeout.saturating_add(grace));
        match tokio::time::timeout_at(deadline, self.deliver(records)).await {
            Ok(result) => result,
            Err(_) => Err(DeadLetterError::Timeout {
                timeout: self.delivery_timeout,
                last: None,
            }),
        }
    }
}

/// The error while a created topic is not visible with leaders yet.
fn not_ready(topic: &str) -> ClientError {
    ClientError::Broker(BrokerError {
        api: api_name(ApiKey::Metadata),
        code: LEADER_NOT_AVAILABLE,
        name: "LEADER_NOT_AVAILABLE",
        message: Some(format!(
            "topic `{topic}` was created; the metadata does not show it with a leader for every \
             partition yet"
        )),
        retriable: true,
    })
}

/// The error for a topic that could not be created, with what to do about it.
fn create_topic_error(
    topic: &str,
    replication_factor: i16,
    source: ClientError,
) -> DeadLetterError {
    let name = match &source {
        ClientError::Broker(BrokerError { name, .. }) => *name,
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
