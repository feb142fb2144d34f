//! The dead-letter queue's view of the cluster: the crate's [`ClusterLink`] for Metadata and
//! CreateTopics, and the topic's layout. The records themselves go through the crate's
//! producer.

use tracing::debug;
use uuid::Uuid;

use kafka_protocol::messages::TopicName;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::protocol::StrBytes;

use crate::kafka::admin::create_topic;
use crate::kafka::cluster::link::ClusterLink;
use crate::kafka::cluster::metadata::UNKNOWN_TOPIC_OR_PARTITION;
use crate::kafka::error::BrokerError;
use crate::kafka::error::ClientError;
use crate::kafka::net::addresses::Addresses;
use crate::kafka::net::connection::ConnectionConfig;

pub(super) use crate::kafka::cluster::metadata::LEADER_NOT_AVAILABLE;

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

/// The queue's cluster-wide connection.
#[derive(Debug)]
pub(super) struct Cluster {
    link: ClusterLink,
}

impl Cluster {
    /// Connects to the first bootstrap server that answers, with the queue's client id and
    /// timeouts.
    pub(super) async fn connect(
        bootstrap: &str,
        config: ConnectionConfig,
    ) -> Result<Self, ClientError> {
        let (link, _) = ClusterLink::open(Addresses::new(bootstrap), config).await?;
        Ok(Self { link })
    }

    /// The layout of `topic`, or `None` when the cluster does not know it.
    pub(super) async fn layout(&self, topic: &str) -> Result<Option<Layout>, ClientError> {
        let snapshot = self.link.metadata(Some(&[topic])).await?;
        let Some(entry) = snapshot.topic(topic) else {
            return Ok(None);
        };
        match entry.error_code {
            0 | LEADER_NOT_AVAILABLE => {}
            UNKNOWN_TOPIC_OR_PARTITION => return Ok(None),
            _ => {
                if let Some(error) = entry.error(topic) {
                    return Err(error);
                }
            }
        }
        // A partition without a leader, or whose number is outside 0..count, stays at -1.
        let leaders = entry.leaders();
        Ok(Some(Layout {
            topic_id: entry.id,
            leaders,
        }))
    }

    /// Creates `topic` with `partitions` partitions; a topic that exists already is fine. The
    /// caller waits for its leaders ([`Self::layout`]).
    pub(super) async fn create_topic(
        &self,
        topic: &str,
        partitions: i32,
        replication_factor: i16,
    ) -> Result<(), ClientError> {
        let creatable = CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_num_partitions(partitions)
            .with_replication_factor(replication_factor);
        let timeout_ms = self.link.broker_timeout_ms();
        let created = self
            .link
            .with(
                |connection| async move { create_topic(&connection, creatable, timeout_ms).await },
            )
            .await;
        match created {
            Ok(()) => {
                debug!(
                    topic,
                    partitions, replication_factor, "dead-letter topic created"
                );
                Ok(())
            }
            Err(ClientError::Broker(BrokerError {
                name: "TOPIC_ALREADY_EXISTS",
                ..
            })) => {
                debug!(topic, "dead-letter topic created meanwhile by someone else");
                Ok(())
            }
            Err(error) => Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
