//! Moving a partition's leader: AlterPartitionReassignments, then a preferred-leader election.

use std::time::Duration;

use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey, BrokerId,
    ElectLeadersRequest, ElectLeadersResponse,
};
use kafka_protocol::protocol::Message;
use tokio::time::Instant;
use tracing::debug;

use super::metadata::{self, partition_of};
use super::{
    AdminError, Failure, KafkaAdmin, missing, negotiate, negotiate_and_send, send, topic_name,
};
use crate::kafka::cluster::metadata::{ANY_VERSION, Topic, UNKNOWN_TOPIC_OR_PARTITION};
use crate::kafka::error::BrokerError;
use crate::kafka::error::ClientError;
use crate::kafka::error::codes::{api_name, check};
use crate::kafka::net::connection::Connection;

/// ElectLeaders election type PREFERRED: the first replica of the list becomes the leader.
const ELECTION_PREFERRED: i8 = 0;

/// ElectLeaders: the preferred replica is not in sync (yet).
const PREFERRED_LEADER_NOT_AVAILABLE: i16 = 80;

/// ElectLeaders: the preferred replica already leads.
const ELECTION_NOT_NEEDED: i16 = 84;

/// How long [`KafkaAdmin::move_leader`] waits for the new replica list and the new leader.
const LEADER_MOVE_WAIT: Duration = Duration::from_secs(60);

/// The pause before electing again while the preferred replica is not in sync.
const ELECTION_RETRY: Duration = Duration::from_millis(100);

/// How long an accepted election may take to show in the metadata before it is asked for again.
const ELECTION_SETTLE: Duration = Duration::from_secs(5);

impl KafkaAdmin {
    /// Moves the leadership of `partition` of `topic` to broker `to` while producers and
    /// consumers keep running, as `kafka-reassign-partitions.sh` followed by
    /// `kafka-leader-election.sh --election-type PREFERRED` would.
    ///
    /// The replica list is reordered with `to` first (AlterPartitionReassignments); if `to` is
    /// not a replica yet it takes the place of the last one, and the partition's data is copied
    /// to it first. Then the preferred replica is elected (ElectLeaders), again while the
    /// metadata does not show `to` leading 5 s after an accepted election (the controller
    /// accepts one that elects nobody new while `to` is not really in sync). Returns once the
    /// metadata of every live broker names `to` the leader (so the old leader refuses the
    /// partition's fetches and acknowledgements from then on); at once if `to` already leads.
    /// Gives up after 60 s.
    ///
    /// # Errors
    ///
    /// An [`AdminError::Broker`] of either request, e.g. `INVALID_REPLICA_ASSIGNMENT` for an
    /// unknown broker, `UNKNOWN_TOPIC_OR_PARTITION`, or `PREFERRED_LEADER_NOT_AVAILABLE` when
    /// `to` never joins the in-sync replicas; [`AdminError::NotSettled`] when the metadata does
    /// not show the move in time; [`AdminError::Timeout`] and the other errors of the
    /// connection and the requests.
    ///
    /// # Cancel safety
    ///
    /// The admin stays usable, but a dropped call may leave the move half done: the replica
    /// list reordered (or a reassignment copying data) without the election. Calling it again
    /// with the same arguments finishes the move.
    pub async fn move_leader(
        &self,
        topic: &str,
        partition: i32,
        to: i32,
    ) -> Result<(), AdminError> {
        self.call("move_leader", self.move_leader_parts(topic, partition, to))
            .await
    }

    /// [`Self::move_leader`], before the failure is named.
    async fn move_leader_parts(&self, topic: &str, partition: i32, to: i32) -> Result<(), Failure> {
        let deadline = Instant::now() + LEADER_MOVE_WAIT;
        let current = self
            .placements(topic)
            .await?
            .into_iter()
            .find(|p| p.partition == partition)
            .ok_or_else(|| {
                Failure::Client(ClientError::Broker(BrokerError {
                    api: api_name(ApiKey::Metadata),
                    code: UNKNOWN_TOPIC_OR_PARTITION,
                    name: "UNKNOWN_TOPIC_OR_PARTITION",
                    message: Some(format!("topic `{topic}` has no partition {partition}")),
                    retriable: true,
                }))
            })?;
        if current.leader == Some(to) {
            return Ok(());
        }
        let connection = self.connection().await?;
        if current.replicas.first() != Some(&to) {
            let mut target = vec![to];
            target.extend(current.replicas.iter().copied().filter(|r| *r != to));
            target.truncate(current.replicas.len().max(1));
            self.reassign(&connection, topic, partition, &target)
                .await?;
            metadata::wait_for(
                &connection,
                topic,
                deadline.saturating_duration_since(Instant::now()),
                || format!("replicas {target:?} of `{topic}` partition {partition}, {to} in sync,"),
                |t| {
                    partition_of(t, partition)
                        .is_some_and(|p| p.replicas == target && p.isr.contains(&to))
                },
            )
            .await?;
        }
        let moved =
            |t: Option<&Topic>| partition_of(t, partition).is_some_and(|p| p.leader == Some(to));
        let what = || format!("broker {to} leading `{topic}` partition {partition}");
        // An election the controller accepts need not make `to` the leader: the in-sync list
        // the metadata showed may be stale (a broker killed and not yet fenced is still in it,
        // and one restarted leaves it until it has caught up), and the controller may have
        // written another change of the partition instead. Elect again until `to` leads.
        let electing = Instant::now();
        loop {
            self.elect_preferred(&connection, topic, partition, deadline)
                .await?;
            let left = deadline.saturating_duration_since(Instant::now());
            // The last round waits all that is left: an election whose outcome the call
            // could not see anymore is not asked for.
            let window = if left >= ELECTION_SETTLE.saturating_mul(2) {
                ELECTION_SETTLE
            } else {
                left
            };
            match metadata::wait_for(&connection, topic, window, what, moved).await {
                Ok(()) => break,
                Err(Failure::NotSettled { .. }) if window < left => {
                    debug!(
                        topic,
                        partition, to, "elected, but another broker leads; electing again"
                    );
                }
                Err(Failure::NotSettled { what, .. }) => {
                    return Err(Failure::NotSettled {
                        what,
                        waited: electing.elapsed(),
                    });
                }
                Err(failure) => return Err(failure),
            }
        }
        // Every broker applies the change on its own: until the old leader has, it still takes
        // fetches and acknowledgements for the partition. Wait until each live broker knows.
        let brokers = self
            .metadata_on(&connection, Some(&[]), ANY_VERSION)
            .await?
            .brokers;
        for address in brokers.into_values() {
            let Ok(other) = Connection::connect(&address, self.config()).await else {
                debug!(broker = address, "unreachable; it serves nothing either");
                continue;
            };
            let left = deadline.saturating_duration_since(Instant::now());
            metadata::wait_for(&other, topic, left, what, moved).await?;
        }
        Ok(())
    }

    /// AlterPartitionReassignments of one partition to `replicas`.
    async fn reassign(
        &self,
        connection: &Connection,
        topic: &str,
        partition: i32,
        replicas: &[i32],
    ) -> Result<(), Failure> {
        let key = ApiKey::AlterPartitionReassignments;
        let request = AlterPartitionReassignmentsRequest::default()
            .with_timeout_ms(self.broker_timeout_ms())
            .with_topics(vec![
                ReassignableTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(vec![
                        ReassignablePartition::default()
                            .with_partition_index(partition)
                            .with_replicas(Some(replicas.iter().copied().map(BrokerId).collect())),
                    ]),
            ]);
        let response: AlterPartitionReassignmentsResponse =
            negotiate_and_send(connection, key, &request).await?;
        check(
            api_name(key),
            response.error_code,
            response.error_message.as_ref(),
        )?;
        let result = response
            .responses
            .iter()
            .filter(|t| t.name.0.as_str() == topic)
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == partition)
            .ok_or_else(|| missing(connection, key, topic))?;
        Ok(check(
            api_name(key),
            result.error_code,
            result.error_message.as_ref(),
        )?)
    }

    /// ElectLeaders (PREFERRED) of one partition, retried while the preferred replica is not
    /// in sync yet, until `deadline`. ELECTION_NOT_NEEDED counts as done.
    async fn elect_preferred(
        &self,
        connection: &Connection,
        topic: &str,
        partition: i32,
        deadline: Instant,
    ) -> Result<(), Failure> {
        let key = ApiKey::ElectLeaders;
        let version = negotiate(connection, key, ElectLeadersRequest::VERSIONS)?;
        let request = ElectLeadersRequest::default()
            .with_election_type(ELECTION_PREFERRED)
            .with_timeout_ms(self.broker_timeout_ms())
            .with_topic_partitions(Some(vec![
                TopicPartitions::default()
                    .with_topic(topic_name(topic))
                    .with_partitions(vec![partition]),
            ]));
        loop {
            let response: ElectLeadersResponse = send(connection, key, version, &request).await?;
            check(api_name(key), response.error_code, None)?;
            let result = response
                .replica_election_results
                .iter()
                .filter(|t| t.topic.0.as_str() == topic)
                .flat_map(|t| t.partition_result.iter())
                .find(|p| p.partition_id == partition)
                .ok_or_else(|| missing(connection, key, topic))?;
            match result.error_code {
                0 | ELECTION_NOT_NEEDED => return Ok(()),
                PREFERRED_LEADER_NOT_AVAILABLE if Instant::now() + ELECTION_RETRY < deadline => {
                    debug!(
                        topic,
                        partition, "preferred replica not in sync yet; electing again"
                    );
                    tokio::time::sleep(ELECTION_RETRY).await;
                }
                code => return Ok(check(api_name(key), code, result.error_message.as_ref())?),
            }
        }
    }
}
