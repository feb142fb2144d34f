//! The dead-letter producer's view of the cluster: the crate's [`KafkaAdmin`] for Metadata
//! and CreateTopics, one connection per partition leader, and the topic's layout.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use kafka_protocol::messages::ApiKey;
use tracing::debug;
use uuid::Uuid;

use crate::consumer::ConsumerError;
use crate::kafka::admin::{Failure, KafkaAdmin};
use crate::kafka::errors::{api_name, broker_error};
use crate::kafka::net::connection::{Connection, ConnectionConfig};

/// Kafka's UNKNOWN_TOPIC_OR_PARTITION.
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
/// Kafka's LEADER_NOT_AVAILABLE.
pub(super) const LEADER_NOT_AVAILABLE: i16 = 5;

/// Where the partitions of the dead-letter topic are led.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Layout {
    /// The topic id (nil from brokers before Metadata v10).
    pub(super) topic_id: Uuid,
    /// The leader's node id of each partition, by partition number; -1 when it has none.
    pub(super) leaders: Vec<i32>,
}

impl Layout {
    /// True when every partition has a leader.
    pub(super) fn is_ready(&self) -> bool {
        !self.leaders.is_empty() && self.leaders.iter().all(|l| *l >= 0)
    }
}

/// The admin client, and connections to partition leaders made lazily and replaced when
/// closed.
#[derive(Debug)]
pub(super) struct Cluster {
    admin: KafkaAdmin,
    /// Settings of the leader connections (the producer's client id and timeouts).
    config: ConnectionConfig,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// `host:port` of each broker, by node id, from the last Metadata.
    brokers: HashMap<i32, String>,
    /// Connections to partition leaders, by node id.
    leaders: HashMap<i32, Connection>,
}

impl Cluster {
    /// Connects to the first bootstrap server that answers. The admin client gets the same
    /// settings as the leader connections: the producer's client id and timeouts.
    pub(super) async fn connect(
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

    /// A live connection to broker `node`, made if needed.
    pub(super) async fn leader(&self, node: i32) -> Result<Connection, ConsumerError> {
        let address = {
            let state = self.lock();
            if let Some(c) = state.leaders.get(&node).filter(|c| !c.is_closed()) {
                return Ok(c.clone());
            }
            state.brokers.get(&node).cloned()
        };
        let Some(address) = address else {
            return Err(ConsumerError::Protocol {
                broker: format!("node {node}"),
                reason: format!("the metadata names leader {node} but not its address"),
            });
        };
        let fresh = Connection::connect(&address, &self.config).await?;
        self.lock().leaders.insert(node, fresh.clone());
        Ok(fresh)
    }

    /// The layout of `topic`, or `None` when the cluster does not know it.
    pub(super) async fn layout(&self, topic: &str) -> Result<Option<Layout>, ConsumerError> {
        let response = self.admin.metadata(Some(&[topic])).await?;
        self.lock().brokers = response
            .brokers
            .iter()
            .map(|b| (b.node_id.0, address(b.host.as_str(), b.port)))
            .collect();
        let Some(entry) = response
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        else {
            return Ok(None);
        };
        match entry.error_code {
            0 | LEADER_NOT_AVAILABLE => {}
            UNKNOWN_TOPIC_OR_PARTITION => return Ok(None),
            code => {
                let message = Some(format!("topic `{topic}`"));
                if let Some(error) = broker_error(api_name(ApiKey::Metadata), code, message) {
                    return Err(error);
                }
            }
        }
        let mut leaders = vec![-1; entry.partitions.len()];
        for p in &entry.partitions {
            // The broker sends leader -1 for a partition without one. A partition number
            // outside 0..count makes no sense: it is left out, and the partition it should
            // have been stays without a leader.
            if let Some(slot) = usize::try_from(p.partition_index)
                .ok()
                .and_then(|i| leaders.get_mut(i))
            {
                *slot = p.leader_id.0;
            }
        }
        Ok(Some(Layout {
            topic_id: entry.topic_id,
            leaders,
        }))
    }

    /// Creates `topic` with `partitions` partitions; a topic that exists already is fine.
    pub(super) async fn create_topic(
        &self,
        topic: &str,
        partitions: i32,
        replication_factor: i16,
    ) -> Result<(), ConsumerError> {
        match self
            .admin
            .try_create_topic(topic, partitions, replication_factor)
            .await
            .map_err(Failure::into_consumer)
        {
            Ok(()) => {
                debug!(
                    topic,
                    partitions, replication_factor, "dead-letter topic created"
                );
                Ok(())
            }
            Err(ConsumerError::Broker {
                name: "TOPIC_ALREADY_EXISTS",
                ..
            }) => {
                debug!(topic, "dead-letter topic created meanwhile by someone else");
                Ok(())
            }
            Err(error) => Err(error),
        }
    }
}

/// `host:port`, with an IPv6 host in brackets.
fn address(host: &str, port: i32) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_bracket_ipv6_hosts() {
        assert_eq!(address("127.0.0.1", 9092), "127.0.0.1:9092");
        assert_eq!(address("kafka-1", 9092), "kafka-1:9092");
        assert_eq!(address("::1", 9092), "[::1]:9092");
    }

    #[test]
    fn a_layout_is_ready_when_every_partition_has_a_leader() {
        let layout = |leaders: Vec<i32>| Layout {
            topic_id: Uuid::nil(),
            leaders,
        };
        assert!(layout(vec![1, 2]).is_ready());
        assert!(!layout(vec![1, -1]).is_ready());
        assert!(!layout(vec![]).is_ready());
    }
}
