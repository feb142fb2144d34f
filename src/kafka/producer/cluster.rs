//! The producer's view of the cluster: the admin client for Metadata (and the idempotent
//! producer's InitProducerId), and one connection per broker made on demand.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use uuid::Uuid;

use crate::consumer::ConsumerError;
use crate::kafka::admin::{Failure, KafkaAdmin};
use crate::kafka::errors::broker_error;
use crate::kafka::net::broker_address;
use crate::kafka::net::connection::{Connection, ConnectionConfig};

/// UNKNOWN_TOPIC_OR_PARTITION.
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
/// LEADER_NOT_AVAILABLE.
const LEADER_NOT_AVAILABLE: i16 = 5;

/// What Metadata said about one topic.
#[derive(Debug, Clone)]
pub(crate) enum TopicMetadata {
    /// The topic with its id (nil from old brokers) and the leader of each partition
    /// (-1: none now).
    Known { id: Uuid, leaders: Vec<i32> },
    /// Not (yet) known to the cluster.
    Unknown,
    /// An error no wait fixes (e.g. authorization).
    Failed(Arc<ConsumerError>),
}

/// The admin client and the broker connections.
#[derive(Debug)]
pub(crate) struct Cluster {
    admin: KafkaAdmin,
    config: ConnectionConfig,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    brokers: HashMap<i32, String>,
    connections: HashMap<i32, Connection>,
    /// The latest connection opened to each coordinator address, for [`Cluster::disconnect`].
    coordinators: HashMap<String, Connection>,
}

impl Cluster {
    pub(crate) async fn connect(
        bootstrap: &str,
        config: ConnectionConfig,
    ) -> Result<Self, ConsumerError> {
        let admin = KafkaAdmin::open(bootstrap, config.clone())
            .await
            .map_err(Failure::into_consumer)?;
        Ok(Self {
            admin,
            config,
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The admin client.
    pub(crate) fn admin(&self) -> &KafkaAdmin {
        &self.admin
    }

    /// A live connection to broker `node`, if one is open.
    pub(crate) fn cached(&self, node: i32) -> Option<Connection> {
        self.lock()
            .connections
            .get(&node)
            .filter(|c| !c.is_closed())
            .cloned()
    }

    /// Opens a connection to broker `node`.
    pub(crate) async fn open(&self, node: i32) -> Result<Connection, ConsumerError> {
        if let Some(c) = self.cached(node) {
            return Ok(c);
        }
        let address = self.lock().brokers.get(&node).cloned();
        let Some(address) = address else {
            return Err(ConsumerError::Protocol {
                broker: format!("node {node}"),
                reason: format!("the metadata names broker {node} but not its address"),
            });
        };
        let fresh = Connection::connect(&address, &self.config).await?;
        self.lock().connections.insert(node, fresh.clone());
        Ok(fresh)
    }

    /// Opens a connection to `host:port` (a coordinator).
    pub(crate) async fn open_address(&self, address: &str) -> Result<Connection, ConsumerError> {
        let fresh = Connection::connect(address, &self.config).await?;
        let mut state = self.lock();
        state.coordinators.retain(|_, c| !c.is_closed());
        state.coordinators.insert(address.to_owned(), fresh.clone());
        Ok(fresh)
    }

    /// Closes every connection now: to the brokers, the coordinators and the admin
    /// client's. Requests waiting on them fail with a connection error; the next ones
    /// connect again.
    pub(crate) fn disconnect(&self) {
        let closing: Vec<Connection> = {
            let mut state = self.lock();
            let mut all: Vec<Connection> = state.connections.drain().map(|(_, c)| c).collect();
            all.extend(state.coordinators.drain().map(|(_, c)| c));
            all
        };
        for connection in closing {
            connection.close();
        }
        self.admin.disconnect();
    }

    /// Metadata of `topics`.
    pub(crate) async fn metadata(
        &self,
        topics: &[&str],
    ) -> Result<Vec<(String, TopicMetadata)>, ConsumerError> {
        let response = self.admin.metadata(Some(topics)).await?;
        {
            let mut state = self.lock();
            for b in &response.brokers {
                state
                    .brokers
                    .insert(b.node_id.0, broker_address(b.host.as_str(), b.port));
            }
        }
        let mut out = Vec::new();
        for topic in topics {
            let entry = response
                .topics
                .iter()
                .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == *topic));
            let meta = match entry {
                None => TopicMetadata::Unknown,
                Some(entry) => match entry.error_code {
                    0 | LEADER_NOT_AVAILABLE if !entry.partitions.is_empty() => {
                        // A partition count bounded by what was received.
                        let mut leaders = vec![-1; entry.partitions.len()];
                        for p in &entry.partitions {
                            if let Some(slot) = usize::try_from(p.partition_index)
                                .ok()
                                .and_then(|i| leaders.get_mut(i))
                            {
                                *slot = p.leader_id.0;
                            }
                        }
                        TopicMetadata::Known {
                            id: entry.topic_id,
                            leaders,
                        }
                    }
                    0 | LEADER_NOT_AVAILABLE | UNKNOWN_TOPIC_OR_PARTITION => TopicMetadata::Unknown,
                    code => {
                        match broker_error("Metadata", code, Some(format!("topic `{topic}`"))) {
                            Some(error) if !error.is_retriable() => {
                                TopicMetadata::Failed(Arc::new(error))
                            }
                            _ => TopicMetadata::Unknown,
                        }
                    }
                },
            };
            out.push(((*topic).to_owned(), meta));
        }
        Ok(out)
    }
}
