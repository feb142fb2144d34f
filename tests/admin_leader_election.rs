//! `KafkaAdmin::move_leader` against a controller that accepts an election without making the
//! preferred replica the leader — what a real controller does while the in-sync list the
//! metadata shows is stale (a broker killed and not yet fenced, or restarted and catching up).

#[path = "support/fake_broker.rs"]
mod fake_broker;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fake_broker::{FakeBroker, Reply};
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, ElectLeadersResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_share_sink::KafkaAdmin;

const TOPIC: &str = "moving";

/// The metadata of a cluster of two nodes (both this fake broker) where partition 0 of
/// [`TOPIC`] has replicas [2, 1], both in sync, and node 1 leads until `elections` reaches
/// `moves_at`; node 2 from then on.
fn metadata(
    addr: String,
    elections: Arc<AtomicUsize>,
    moves_at: usize,
) -> impl Fn(&fake_broker::Request) -> Reply + Send + Sync + 'static {
    move |request| {
        let asked: MetadataRequest = request.decode().expect("a Metadata request");
        let (host, port) = addr.rsplit_once(':').expect("host:port");
        let brokers = [1, 2]
            .into_iter()
            .map(|node| {
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(node))
                    .with_host(StrBytes::from_string(host.to_owned()))
                    .with_port(port.parse().expect("port"))
            })
            .collect();
        let leader = if elections.load(Ordering::SeqCst) >= moves_at {
            2
        } else {
            1
        };
        let wanted = asked.topics.as_ref().is_none_or(|topics| {
            topics
                .iter()
                .any(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == TOPIC))
        });
        let topics = if wanted {
            vec![
                MetadataResponseTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_static_str(TOPIC))))
                    .with_partitions(vec![
                        MetadataResponsePartition::default()
                            .with_partition_index(0)
                            .with_leader_id(BrokerId(leader))
                            .with_replica_nodes(vec![BrokerId(2), BrokerId(1)])
                            .with_isr_nodes(vec![BrokerId(1), BrokerId(2)]),
                    ]),
            ]
        } else {
            Vec::new()
        };
        let response = MetadataResponse::default()
            .with_brokers(brokers)
            .with_controller_id(BrokerId(fake_broker::NODE_ID))
            .with_topics(topics);
        Reply::message(&response, request.version())
    }
}

/// ElectLeaders answered with success for partition 0 of [`TOPIC`], counted in `elections`.
fn accepted(
    elections: Arc<AtomicUsize>,
) -> impl Fn(&fake_broker::Request) -> Reply + Send + Sync + 'static {
    move |request| {
        elections.fetch_add(1, Ordering::SeqCst);
        let response = ElectLeadersResponse::default().with_replica_election_results(vec![
            ReplicaElectionResult::default()
                .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partition_result(vec![PartitionResult::default().with_partition_id(0)]),
        ]);
        Reply::message(&response, request.version())
    }
}

/// The first election is accepted but changes nothing; `move_leader` elects again instead of
/// waiting out its minute for a leader that will not come, and returns once node 2 leads.
#[tokio::test]
async fn an_accepted_election_that_moves_nothing_is_asked_for_again() {
    let broker = FakeBroker::start().await;
    broker.advertise(ApiKey::ElectLeaders, 0, 2);
    let elections = Arc::new(AtomicUsize::new(0));
    broker.on(
        ApiKey::Metadata,
        metadata(broker.addr(), Arc::clone(&elections), 2),
    );
    broker.on(ApiKey::ElectLeaders, accepted(Arc::clone(&elections)));
    let admin = KafkaAdmin::connect(&broker.addr()).await.expect("connect");

    tokio::time::timeout(Duration::from_secs(40), admin.move_leader(TOPIC, 0, 2))
        .await
        .expect("move_leader did not return within 40 s")
        .expect("node 2 leads after the second election");
    assert_eq!(broker.count(ApiKey::ElectLeaders), 2);
    let placement = admin.partitions(TOPIC).await.expect("partitions");
    assert_eq!(placement[0].leader, Some(2));
}
