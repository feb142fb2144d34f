//! The producer's view of the cluster: the [`ClusterLink`] for Metadata, the topics' configs and
//! the idempotent producer's InitProducerId, one connection per leader made on demand
//! ([`BrokerPool`]), and the coordinators' connections.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use uuid::Uuid;

use crate::kafka::admin::describe_topic;
use crate::kafka::cluster::link::ClusterLink;
use crate::kafka::cluster::metadata::{LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION};
use crate::kafka::cluster::pool::BrokerPool;
use crate::kafka::error::ClientError;
use crate::kafka::net::addresses::Addresses;
use crate::kafka::net::connection::{Connection, ConnectionConfig};

/// What Metadata said about one topic.
#[derive(Debug, Clone)]
pub(crate) enum TopicMetadata {
    /// The topic with its id (nil from old brokers) and the leader of each partition
    /// (-1: none now).
    Known { id: Uuid, leaders: Vec<i32> },
    /// Not (yet) known to the cluster.
    Unknown,
    /// An error no wait fixes (e.g. authorization).
    Failed(Arc<ClientError>),
    /// A retriable error for the topic (a leader being elected for a topic just created,
    /// a broker busy loading): asked again.
    Retry(Arc<ClientError>),
}

/// The cluster-wide connection and the broker connections.
#[derive(Debug)]
pub(crate) struct Cluster {
    link: ClusterLink,
    /// The leaders' connections.
    brokers: BrokerPool,
    /// The latest connection opened to each coordinator address, for [`Cluster::disconnect`].
    coordinators: Mutex<HashMap<String, Connection>>,
    /// Each topic's `max.message.bytes` as described once (`None`: it could not be read).
    max_message_bytes: Mutex<HashMap<String, Option<usize>>>,
}

impl Cluster {
    pub(crate) async fn connect(
        bootstrap: &str,
        config: ConnectionConfig,
    ) -> Result<Self, ClientError> {
        let (link, _) = ClusterLink::open(Addresses::new(bootstrap), config.clone()).await?;
        Ok(Self {
            link,
            brokers: BrokerPool::new(config),
            coordinators: Mutex::new(HashMap::new()),
            max_message_bytes: Mutex::new(HashMap::new()),
        })
    }

    fn coordinators(&self) -> MutexGuard<'_, HashMap<String, Connection>> {
        self.coordinators
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A live connection to a broker of the cluster, for requests any broker answers
    /// (FindCoordinator, InitProducerId without a transactional id).
    pub(crate) async fn any_connection(&self) -> Result<Connection, ClientError> {
        self.link.connection().await
    }

    /// Runs `request` on the cluster-wide connection; a timeout leaves that connection behind
    /// (see [`ClusterLink::with`]).
    pub(crate) async fn on_any_connection<T, F, Fut>(&self, request: F) -> Result<T, ClientError>
    where
        F: FnOnce(Connection) -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        self.link.with(request).await
    }

    /// A live connection to broker `node`, if one is open.
    pub(crate) fn cached(&self, node: i32) -> Option<Connection> {
        self.brokers.cached(node)
    }

    /// Opens a connection to broker `node`, after the reconnect backoff of the producer's
    /// connections to it if an earlier attempt failed.
    pub(crate) async fn open(&self, node: i32) -> Result<Connection, ClientError> {
        self.brokers.open(node).await
    }

    /// Opens a connection to `host:port` (a coordinator).
    pub(crate) async fn open_address(&self, address: &str) -> Result<Connection, ClientError> {
        let fresh = Connection::connect(address, self.brokers.config()).await?;
        let mut coordinators = self.coordinators();
        coordinators.retain(|_, c| c.is_reusable());
        coordinators.insert(address.to_owned(), fresh.clone());
        Ok(fresh)
    }

    /// Closes every connection now: to the brokers, the coordinators and the cluster-wide
    /// one. Requests waiting on them fail with a connection error; the next ones
    /// connect again.
    pub(crate) fn disconnect(&self) {
        let mut closing = self.brokers.drain();
        closing.extend(self.coordinators().drain().map(|(_, c)| c));
        for connection in closing {
            connection.close();
        }
        self.link.disconnect();
    }

    /// The largest batch `topic` takes (its `max.message.bytes`), read once with
    /// DescribeConfigs; `None` when it cannot be read: not asked again when no retry can
    /// help (no DESCRIBE_CONFIGS permission on the topic, an old broker), asked again with the
    /// topic's next metadata after a failure that may pass (a timeout, a moving leader).
    pub(crate) async fn max_message_bytes(&self, topic: &str) -> Option<usize> {
        let known = self
            .max_message_bytes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(topic)
            .copied();
        if let Some(known) = known {
            return known;
        }
        let described = self
            .on_any_connection(|connection| async move { describe_topic(&connection, topic).await })
            .await;
        let read = match described {
            Ok(configs) => configs
                .get("max.message.bytes")
                .and_then(|raw| raw.trim().parse::<usize>().ok()),
            Err(error) if error.is_retriable() => {
                tracing::debug!(topic, %error, "reading the topic's max.message.bytes failed; asked again with its next metadata");
                return None;
            }
            Err(error) => {
                tracing::debug!(topic, %error, "cannot read the topic's max.message.bytes: batches may grow to max.request.size");
                None
            }
        };
        self.max_message_bytes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(topic.to_owned(), read);
        read
    }

    /// Metadata of `topics`.
    pub(crate) async fn metadata(
        &self,
        topics: &[&str],
    ) -> Result<Vec<(String, TopicMetadata)>, ClientError> {
        let snapshot = self.link.metadata(Some(topics)).await?;
        self.brokers.learn(&snapshot.brokers);
        let mut out = Vec::new();
        for topic in topics {
            let meta = match snapshot.topic(topic) {
                None => TopicMetadata::Unknown,
                Some(entry) => match entry.error_code {
                    0 | LEADER_NOT_AVAILABLE if !entry.partitions.is_empty() => {
                        // A leader the answer does not list has no address to dial: it
                        // counts as none, so the metadata is asked again at its backoff.
                        let leaders = entry
                            .leaders()
                            .into_iter()
                            .map(|l| {
                                if snapshot.brokers.contains_key(&l) {
                                    l
                                } else {
                                    -1
                                }
                            })
                            .collect();
                        TopicMetadata::Known {
                            id: entry.id,
                            leaders,
                        }
                    }
                    0 | UNKNOWN_TOPIC_OR_PARTITION => TopicMetadata::Unknown,
                    _ => match entry.error(topic) {
                        Some(error) if !error.is_retriable() => {
                            TopicMetadata::Failed(Arc::new(error))
                        }
                        Some(error) => TopicMetadata::Retry(Arc::new(error)),
                        None => TopicMetadata::Unknown,
                    },
                },
            };
            out.push(((*topic).to_owned(), meta));
        }
        Ok(out)
    }
}
