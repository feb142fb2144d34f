//! The one Metadata request of the crate, and its answer read into a [`Snapshot`]: the brokers
//! by id, the topics by name with the leader, leader epoch and error of each partition.
//!
//! Every client asks through [`fetch`], so the request (never auto-creating a topic), the
//! version negotiation and the reading of the answer are the same everywhere; what a client
//! makes of a snapshot (a cache, a wait, an error of its own) stays with the client.

use std::collections::BTreeMap;

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::{Message, StrBytes, VersionRange};
use uuid::Uuid;

use crate::kafka::error::ClientError;
use crate::kafka::error::ProtocolError;
use crate::kafka::error::codes::{api_name, broker_error, check};
use crate::kafka::net::broker_address;
use crate::kafka::net::connection::Connection;

/// Kafka's UNKNOWN_TOPIC_OR_PARTITION error code.
pub(crate) const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

/// Kafka's LEADER_NOT_AVAILABLE error code.
pub(crate) const LEADER_NOT_AVAILABLE: i16 = 5;

/// Every Metadata version this crate can read.
pub(crate) const ANY_VERSION: VersionRange = MetadataRequest::VERSIONS;

/// The Metadata versions that carry topic ids (v10 and later).
pub(crate) const WITH_TOPIC_IDS: VersionRange = VersionRange {
    min: 10,
    max: MetadataRequest::VERSIONS.max,
};

/// What one Metadata answer says of the cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// `host:port` of each broker, by node id.
    pub(crate) brokers: BTreeMap<i32, String>,
    /// The controller id the answer names (-1 when none).
    pub(crate) controller_id: i32,
    /// The topics the answer names, by name. A topic named twice keeps its first entry; an
    /// entry without a name (a topic asked by id) is left out.
    pub(crate) topics: BTreeMap<String, Topic>,
}

/// What a Metadata answer says of one topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Topic {
    /// The topic id; nil from brokers before Metadata v10.
    pub(crate) id: Uuid,
    /// The topic's error code, 0 for none.
    pub(crate) error_code: i16,
    /// The partitions, by index. A partition named twice keeps its first entry.
    pub(crate) partitions: BTreeMap<i32, Partition>,
}

/// What a Metadata answer says of one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Partition {
    /// The leader's node id; `None` while the partition has none (the wire's -1).
    pub(crate) leader: Option<i32>,
    /// The leader epoch, which grows with every leader change.
    pub(crate) leader_epoch: i32,
    /// The broker ids of the replicas, the preferred leader first.
    pub(crate) replicas: Vec<i32>,
    /// The broker ids of the in-sync replicas.
    pub(crate) isr: Vec<i32>,
    /// The partition's error code, 0 for none.
    pub(crate) error_code: i16,
}

/// Where one partition is led, as a snapshot says ([`Snapshot::leader`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Leader {
    /// The leader's node id.
    pub(crate) node: i32,
    /// The leader epoch.
    pub(crate) epoch: i32,
    /// The topic id; nil from brokers before Metadata v10.
    pub(crate) topic_id: Uuid,
}

/// Asks `connection` for the metadata of `topics` (`None`: every topic; `Some(&[])`: only the
/// brokers) at the highest version in `versions` the broker offers. Never creates a topic.
///
/// # Errors
///
/// [`ProtocolError::Unsupported`] when the broker offers no version in `versions`; the
/// errors of the request (a timeout, a lost connection, an undecodable answer); a top-level
/// error code of the answer (v13) as a [`ClientError::Broker`]. Errors of topics and
/// partitions are in the snapshot.
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
pub(crate) async fn fetch(
    connection: &Connection,
    topics: Option<&[&str]>,
    versions: VersionRange,
) -> Result<Snapshot, ClientError> {
    let key = ApiKey::Metadata;
    let version = connection.negotiate(key, versions)?;
    let response: MetadataResponse = connection.request(key, version, &request(topics)).await?;
    check(api_name(key), response.error_code, None)?;
    Ok(Snapshot::from(response))
}

/// The Metadata request for `topics` (`None`: every topic), never auto-creating one.
fn request(topics: Option<&[&str]>) -> MetadataRequest {
    let topics = topics.map(|topics| {
        topics
            .iter()
            .map(|name| {
                MetadataRequestTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_string((*name).to_owned()))))
            })
            .collect()
    });
    MetadataRequest::default()
        .with_topics(topics)
        .with_allow_auto_topic_creation(false)
}

impl From<MetadataResponse> for Snapshot {
    fn from(response: MetadataResponse) -> Self {
        let mut snapshot = Snapshot {
            controller_id: response.controller_id.0,
            ..Snapshot::default()
        };
        for MetadataResponseBroker {
            node_id,
            host,
            port,
            ..
        } in response.brokers
        {
            snapshot
                .brokers
                .entry(node_id.0)
                .or_insert_with(|| broker_address(host.as_str(), port));
        }
        for topic in response.topics {
            let MetadataResponseTopic {
                name: Some(name),
                error_code,
                topic_id,
                partitions,
                ..
            } = topic
            else {
                continue;
            };
            let mut by_index = BTreeMap::new();
            for p in partitions {
                by_index
                    .entry(p.partition_index)
                    .or_insert_with(|| Partition::from(p));
            }
            snapshot
                .topics
                .entry(name.0.as_str().to_owned())
                .or_insert(Topic {
                    id: topic_id,
                    error_code,
                    partitions: by_index,
                });
        }
        snapshot
    }
}

impl From<MetadataResponsePartition> for Partition {
    fn from(p: MetadataResponsePartition) -> Self {
        Partition {
            leader: (p.leader_id.0 >= 0).then_some(p.leader_id.0),
            leader_epoch: p.leader_epoch,
            replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
            isr: p.isr_nodes.iter().map(|b| b.0).collect(),
            error_code: p.error_code,
        }
    }
}

impl Snapshot {
    /// The entry of topic `name`, if the answer names it.
    pub(crate) fn topic(&self, name: &str) -> Option<&Topic> {
        self.topics.get(name)
    }

    /// The leader of `partition` of `topic`.
    ///
    /// # Errors
    ///
    /// A [`ClientError::Broker`] for Metadata: `UNKNOWN_TOPIC_OR_PARTITION` when the answer
    /// does not name the topic or the partition; the error of the topic, or of the partition;
    /// `LEADER_NOT_AVAILABLE` (retriable) while the partition has no leader.
    pub(crate) fn leader(&self, topic: &str, partition: i32) -> Result<Leader, ClientError> {
        let whole = || format!("topic `{topic}`");
        let part = || format!("partition {partition} of `{topic}`");
        let entry = self
            .topic(topic)
            .ok_or_else(|| metadata_error(UNKNOWN_TOPIC_OR_PARTITION, whole()))?;
        if entry.error_code != 0 {
            return Err(metadata_error(entry.error_code, whole()));
        }
        let found = entry
            .partitions
            .get(&partition)
            .ok_or_else(|| metadata_error(UNKNOWN_TOPIC_OR_PARTITION, part()))?;
        if found.error_code != 0 && found.error_code != LEADER_NOT_AVAILABLE {
            return Err(metadata_error(found.error_code, part()));
        }
        match found.leader {
            Some(node) if found.error_code == 0 => Ok(Leader {
                node,
                epoch: found.leader_epoch,
                topic_id: entry.id,
            }),
            _ => Err(metadata_error(
                LEADER_NOT_AVAILABLE,
                format!("{} has no leader", part()),
            )),
        }
    }
}

impl Topic {
    /// The leader's node id of each partition, by partition number, -1 where there is none.
    /// As many as the answer lists partitions (a count bounded by what was received); an
    /// index outside `0..count` is left out, and the partition it should have been stays
    /// without a leader.
    pub(crate) fn leaders(&self) -> Vec<i32> {
        let mut leaders = vec![-1; self.partitions.len()];
        for (index, p) in &self.partitions {
            if let Some(slot) = usize::try_from(*index)
                .ok()
                .and_then(|i| leaders.get_mut(i))
            {
                *slot = p.leader.unwrap_or(-1);
            }
        }
        leaders
    }

    /// True when the topic has no error and exactly `count` partitions, each with a leader
    /// and no error: what creating a topic or adding partitions waits for.
    pub(crate) fn all_led(&self, count: i32) -> bool {
        self.error_code == 0
            && usize::try_from(count).is_ok_and(|count| self.partitions.len() == count)
            && self
                .partitions
                .values()
                .all(|p| p.error_code == 0 && p.leader.is_some())
    }

    /// The error of the topic as a [`ClientError::Broker`] naming it, or `None`.
    pub(crate) fn error(&self, name: &str) -> Option<ClientError> {
        broker_error(
            api_name(ApiKey::Metadata),
            self.error_code,
            Some(format!("topic `{name}`")),
        )
    }
}

/// A Metadata error `code` about `what`. Code 0 (which no caller passes) is a protocol error
/// rather than a panic.
fn metadata_error(code: i16, what: String) -> ClientError {
    broker_error(api_name(ApiKey::Metadata), code, Some(what)).unwrap_or_else(|| {
        ClientError::Protocol(ProtocolError::Malformed {
            broker: "metadata".to_owned(),
            reason: "no error code for a failure".to_owned(),
        })
    })
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::BrokerId;

    use super::*;
    use crate::kafka::error::BrokerError;

    fn broker(id: i32, host: &str, port: i32) -> MetadataResponseBroker {
        MetadataResponseBroker::default()
            .with_node_id(BrokerId(id))
            .with_host(StrBytes::from_string(host.to_owned()))
            .with_port(port)
    }

    fn partition(index: i32, leader: i32, epoch: i32, code: i16) -> MetadataResponsePartition {
        MetadataResponsePartition::default()
            .with_partition_index(index)
            .with_leader_id(BrokerId(leader))
            .with_leader_epoch(epoch)
            .with_replica_nodes(vec![BrokerId(1), BrokerId(2)])
            .with_isr_nodes(vec![BrokerId(1)])
            .with_error_code(code)
    }

    fn topic(
        name: &str,
        code: i16,
        partitions: Vec<MetadataResponsePartition>,
    ) -> MetadataResponseTopic {
        MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(name.to_owned()))))
            .with_topic_id(Uuid::from_u128(7))
            .with_error_code(code)
            .with_partitions(partitions)
    }

    fn broker_code(error: &ClientError) -> (i16, bool, Option<&str>) {
        match error {
            ClientError::Broker(BrokerError {
                api,
                code,
                retriable,
                message,
                ..
            }) => {
                assert_eq!(*api, "Metadata");
                (*code, *retriable, message.as_deref())
            }
            other => panic!("expected a broker error, got {other:?}"),
        }
    }

    #[test]
    fn an_empty_answer_knows_no_broker_and_no_topic() {
        let snapshot = Snapshot::from(MetadataResponse::default());
        assert!(snapshot.brokers.is_empty());
        assert!(snapshot.topics.is_empty());
        let error = snapshot.leader("t", 0).expect_err("no topic");
        assert_eq!(
            broker_code(&error),
            (UNKNOWN_TOPIC_OR_PARTITION, true, Some("topic `t`"))
        );
    }

    #[test]
    fn brokers_and_leaders_are_read_by_id() {
        let response = MetadataResponse::default()
            .with_controller_id(BrokerId(2))
            .with_brokers(vec![broker(1, "a", 9092), broker(2, "::1", 9093)])
            .with_topics(vec![topic(
                "t",
                0,
                vec![partition(1, 2, 5, 0), partition(0, 1, 4, 0)],
            )]);
        let snapshot = Snapshot::from(response);
        assert_eq!(snapshot.controller_id, 2);
        assert_eq!(snapshot.brokers.get(&1).map(String::as_str), Some("a:9092"));
        assert_eq!(
            snapshot.brokers.get(&2).map(String::as_str),
            Some("[::1]:9093")
        );
        let t = snapshot.topic("t").expect("topic");
        assert_eq!(t.leaders(), vec![1, 2]);
        assert_eq!(t.partitions[&0].replicas, vec![1, 2]);
        assert_eq!(t.partitions[&0].isr, vec![1]);
        assert_eq!(
            snapshot.leader("t", 1).expect("leader"),
            Leader {
                node: 2,
                epoch: 5,
                topic_id: Uuid::from_u128(7)
            }
        );
    }

    #[test]
    fn a_leader_of_minus_one_is_no_leader() {
        let response = MetadataResponse::default()
            .with_brokers(vec![broker(1, "a", 9092)])
            .with_topics(vec![topic(
                "t",
                0,
                vec![partition(0, -1, 3, 0), partition(1, 1, 3, 0)],
            )]);
        let snapshot = Snapshot::from(response);
        let t = snapshot.topic("t").expect("topic");
        assert_eq!(t.partitions[&0].leader, None);
        assert_eq!(t.leaders(), vec![-1, 1]);
        let error = snapshot.leader("t", 0).expect_err("no leader");
        assert_eq!(
            broker_code(&error),
            (
                LEADER_NOT_AVAILABLE,
                true,
                Some("partition 0 of `t` has no leader")
            )
        );
    }

    #[test]
    fn topic_and_partition_errors_are_kept_and_reported() {
        let response = MetadataResponse::default().with_topics(vec![
            topic("denied", 29, Vec::new()),
            topic(
                "t",
                0,
                vec![
                    partition(0, 1, 1, LEADER_NOT_AVAILABLE),
                    partition(1, 1, 1, 9),
                ],
            ),
        ]);
        let snapshot = Snapshot::from(response);
        let denied = snapshot.topic("denied").expect("entry");
        assert_eq!(denied.error_code, 29);
        let error = denied.error("denied").expect("an error");
        assert_eq!(broker_code(&error), (29, false, Some("topic `denied`")));
        let error = snapshot.leader("denied", 0).expect_err("topic error");
        assert_eq!(broker_code(&error).0, 29);
        // LEADER_NOT_AVAILABLE on the partition counts as no leader, whatever id it names.
        let error = snapshot.leader("t", 0).expect_err("partition error");
        assert_eq!(broker_code(&error).0, LEADER_NOT_AVAILABLE);
        let error = snapshot.leader("t", 1).expect_err("partition error");
        assert_eq!(broker_code(&error), (9, true, Some("partition 1 of `t`")));
        let error = snapshot.leader("t", 2).expect_err("no such partition");
        assert_eq!(broker_code(&error).0, UNKNOWN_TOPIC_OR_PARTITION);
        assert!(snapshot.topic("t").expect("entry").error("t").is_none());
    }

    #[test]
    fn a_leader_missing_from_the_broker_list_has_no_address() {
        let response = MetadataResponse::default()
            .with_brokers(vec![broker(1, "a", 9092)])
            .with_topics(vec![topic("t", 0, vec![partition(0, 3, 1, 0)])]);
        let snapshot = Snapshot::from(response);
        let leader = snapshot.leader("t", 0).expect("named leader");
        assert_eq!(leader.node, 3);
        assert_eq!(snapshot.brokers.get(&leader.node), None);
    }

    #[test]
    fn duplicates_keep_the_first_and_odd_indexes_are_left_out() {
        let response = MetadataResponse::default()
            .with_brokers(vec![broker(1, "a", 1), broker(1, "b", 2)])
            .with_topics(vec![
                topic("t", 0, vec![partition(0, 1, 1, 0), partition(0, 2, 1, 0)]),
                topic("t", 3, Vec::new()),
                topic("u", 0, vec![partition(-4, 1, 1, 0), partition(9, 1, 1, 0)]),
                MetadataResponseTopic::default()
                    .with_name(None)
                    .with_error_code(3),
            ]);
        let snapshot = Snapshot::from(response);
        assert_eq!(snapshot.brokers.get(&1).map(String::as_str), Some("a:1"));
        assert_eq!(snapshot.topics.len(), 2, "the nameless entry is left out");
        let t = snapshot.topic("t").expect("entry");
        assert_eq!(t.error_code, 0);
        assert_eq!(t.leaders(), vec![1]);
        assert_eq!(snapshot.topic("u").expect("entry").leaders(), vec![-1, -1]);
    }

    #[test]
    fn all_led_wants_the_count_each_with_a_leader_and_no_error() {
        let led = |partitions| {
            Snapshot::from(MetadataResponse::default().with_topics(vec![topic("t", 0, partitions)]))
        };
        let two = led(vec![partition(0, 1, 1, 0), partition(1, 2, 1, 0)]);
        let t = two.topic("t").expect("entry");
        assert!(t.all_led(2));
        assert!(!t.all_led(3), "a partition short");
        assert!(!t.all_led(-1), "a negative count matches nothing");
        let leaderless = led(vec![partition(0, 1, 1, 0), partition(1, -1, 1, 0)]);
        assert!(!leaderless.topic("t").expect("entry").all_led(2));
        let erring = led(vec![partition(0, 1, 1, 0), partition(1, 2, 1, 9)]);
        assert!(!erring.topic("t").expect("entry").all_led(2));
        let mut failed = two.topic("t").expect("entry").clone();
        failed.error_code = 3;
        assert!(!failed.all_led(2));
    }

    #[test]
    fn the_request_never_creates_topics_and_asks_for_what_it_is_given() {
        let all = request(None);
        assert!(all.topics.is_none());
        assert!(!all.allow_auto_topic_creation);
        let none = request(Some(&[]));
        assert_eq!(none.topics.as_ref().map(Vec::len), Some(0));
        let one = request(Some(&["t"]));
        let names: Vec<_> = one
            .topics
            .unwrap_or_default()
            .into_iter()
            .filter_map(|t| t.name)
            .map(|n| n.0.to_string())
            .collect();
        assert_eq!(names, vec!["t".to_owned()]);
    }
}
