//! A topic's partitions and records: listing offsets (ListOffsets, to each partition's
//! leader), adding partitions (CreatePartitions) and deleting records (DeleteRecords, to each
//! partition's leader).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreatePartitionsResponse, DeleteRecordsRequest,
    DeleteRecordsResponse, ListOffsetsRequest, ListOffsetsResponse,
};
use kafka_protocol::protocol::Message;

use super::{
    AdminError, Failure, KafkaAdmin, metadata, missing, negotiate, negotiate_and_send, send,
    topic_name, with_topic,
};
use crate::kafka::cluster::metadata::ANY_VERSION;
use crate::kafka::codec::client_list_offsets;
use crate::kafka::error::BrokerError;
use crate::kafka::error::ClientError;
use crate::kafka::error::codes::{api_name, broker_error, check, leader_not_available};
use crate::kafka::net::connection::Connection;

/// ListOffsets' timestamp for the log start offset.
pub(super) const EARLIEST_TIMESTAMP: i64 = -2;
/// ListOffsets' timestamp for the end offset.
pub(super) const LATEST_TIMESTAMP: i64 = -1;

/// How long [`KafkaAdmin::create_partitions`] waits for the metadata to show the partitions.
const METADATA_WAIT: Duration = Duration::from_secs(30);

/// Which offset of each partition [`KafkaAdmin::list_offsets`] gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OffsetSpec {
    /// The log start offset: the first record still in the log.
    Earliest,
    /// The end offset (the high watermark): the offset the next record will get.
    Latest,
}

/// The partitions of a topic, grouped by the connection to their leader.
struct Leaders {
    /// One connection per leader, with the (partition, leader epoch) it leads.
    by_leader: Vec<(Connection, Vec<(i32, i32)>)>,
}

impl Drop for Leaders {
    fn drop(&mut self) {
        for (connection, _) in &self.by_leader {
            connection.close();
        }
    }
}

impl KafkaAdmin {
    /// The earliest or latest offset of every partition of `topic`, by partition index
    /// (ListOffsets, to each partition's leader), as `kafka-get-offsets.sh --time -2|-1` does.
    ///
    /// # Errors
    ///
    /// An [`AdminError::Broker`] naming the topic (and partition), e.g.
    /// `UNKNOWN_TOPIC_OR_PARTITION`, or `LEADER_NOT_AVAILABLE` during an election (retriable);
    /// [`AdminError::Timeout`] and the other errors of the connections and the requests.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn list_offsets(
        &self,
        topic: &str,
        spec: OffsetSpec,
    ) -> Result<BTreeMap<i32, i64>, AdminError> {
        let timestamp = match spec {
            OffsetSpec::Earliest => EARLIEST_TIMESTAMP,
            OffsetSpec::Latest => LATEST_TIMESTAMP,
        };
        self.call("list_offsets", self.offsets_at(topic, timestamp))
            .await
    }

    /// Grows `topic` to `total` partitions (CreatePartitions; the new ones get replicas where
    /// the cluster places them) and waits (up to 30 s) until the metadata shows them all with a
    /// leader, as `kafka-topics.sh --alter --partitions` does. Records with a key may map to
    /// another partition from then on.
    ///
    /// # Errors
    ///
    /// An [`AdminError::Broker`] naming the topic, e.g. `INVALID_PARTITIONS` when `total` is not
    /// more than the topic has, or `UNKNOWN_TOPIC_OR_PARTITION`; [`AdminError::NotSettled`]
    /// when the new partitions have no leader in time; [`AdminError::Timeout`] and the other
    /// errors of the connection and the requests.
    ///
    /// # Cancel safety
    ///
    /// The admin stays usable, but once CreatePartitions was sent the partitions may be added
    /// whether or not the future is dropped; asking again then fails with `INVALID_PARTITIONS`.
    pub async fn create_partitions(&self, topic: &str, total: i32) -> Result<(), AdminError> {
        self.call("create_partitions", async {
            let connection = self.connection().await?;
            let key = ApiKey::CreatePartitions;
            let request = CreatePartitionsRequest::default()
                .with_timeout_ms(self.broker_timeout_ms())
                .with_topics(vec![
                    CreatePartitionsTopic::default()
                        .with_name(topic_name(topic))
                        .with_count(total)
                        .with_assignments(None),
                ]);
            let response: CreatePartitionsResponse =
                negotiate_and_send(&connection, key, &request).await?;
            let result = response
                .results
                .iter()
                .find(|r| r.name.0.as_str() == topic)
                .ok_or_else(|| missing(&connection, key, topic))?;
            check(
                api_name(key),
                result.error_code,
                result.error_message.as_ref(),
            )
            .map_err(|e| with_topic(e, topic))?;
            metadata::wait_for(
                &connection,
                topic,
                METADATA_WAIT,
                || format!("topic `{topic}` with {total} partition(s), each with a leader,"),
                |t| t.is_some_and(|t| t.all_led(total)),
            )
            .await
        })
        .await
    }

    /// Deletes the records of `topic` before the given offsets: each `(partition,
    /// before_offset)` (DeleteRecords, to each partition's leader), as
    /// `kafka-delete-records.sh` does; `-1` deletes up to the high watermark (every record
    /// written so far). Returns each partition's new log start offset (its low watermark).
    ///
    /// A share group whose start offset falls before the new log start moves on to it: its
    /// consumers never get the deleted records.
    ///
    /// # Errors
    ///
    /// [`AdminError::InvalidArgument`] for no partitions or an offset below -1 (nothing is
    /// sent); an [`AdminError::Broker`] naming the topic and partition, e.g.
    /// `OFFSET_OUT_OF_RANGE` for an offset past the high watermark, or `POLICY_VIOLATION` on a
    /// compacted topic; [`AdminError::Timeout`] and the other errors of the connections and the
    /// requests.
    ///
    /// # Cancel safety
    ///
    /// The admin stays usable, but once DeleteRecords was sent the records may be deleted
    /// whether or not the future is dropped; deleting again is harmless.
    pub async fn delete_records(
        &self,
        topic: &str,
        before: &[(i32, i64)],
    ) -> Result<BTreeMap<i32, i64>, AdminError> {
        self.call("delete_records", async {
            if before.is_empty() {
                return Err(Failure::InvalidArgument(
                    "give one or more (partition, offset) to delete records before".to_owned(),
                ));
            }
            if let Some((partition, offset)) = before.iter().find(|(_, o)| *o < -1) {
                return Err(Failure::InvalidArgument(format!(
                    "topic `{topic}` partition {partition}: offset {offset} is below -1 (-1 \
                     means up to the high watermark)"
                )));
            }
            let wanted: HashMap<i32, i64> = before.iter().copied().collect();
            let leaders = self.leaders(topic).await?;
            for partition in wanted.keys() {
                if !leaders
                    .by_leader
                    .iter()
                    .any(|(_, led)| led.iter().any(|(p, _)| p == partition))
                {
                    return Err(unknown_partition(ApiKey::DeleteRecords, topic, *partition));
                }
            }
            let key = ApiKey::DeleteRecords;
            let mut low_watermarks = BTreeMap::new();
            for (connection, led) in &leaders.by_leader {
                let partitions: Vec<DeleteRecordsPartition> = led
                    .iter()
                    .filter_map(|(p, _)| wanted.get(p).map(|o| (*p, *o)))
                    .map(|(p, o)| {
                        DeleteRecordsPartition::default()
                            .with_partition_index(p)
                            .with_offset(o)
                    })
                    .collect();
                if partitions.is_empty() {
                    continue;
                }
                let asked: Vec<i32> = partitions.iter().map(|p| p.partition_index).collect();
                let request = DeleteRecordsRequest::default()
                    .with_timeout_ms(self.broker_timeout_ms())
                    .with_topics(vec![
                        DeleteRecordsTopic::default()
                            .with_name(topic_name(topic))
                            .with_partitions(partitions),
                    ]);
                let response: DeleteRecordsResponse =
                    negotiate_and_send(connection, key, &request).await?;
                for partition in asked {
                    let result = response
                        .topics
                        .iter()
                        .filter(|t| t.name.0.as_str() == topic)
                        .flat_map(|t| &t.partitions)
                        .find(|p| p.partition_index == partition)
                        .ok_or_else(|| {
                            missing(connection, key, &format!("{topic} partition {partition}"))
                        })?;
                    partition_check(key, topic, partition, result.error_code)?;
                    low_watermarks.insert(partition, result.low_watermark);
                }
            }
            Ok(low_watermarks)
        })
        .await
    }

    /// The offset at `timestamp` (earliest or latest) of every partition of `topic`.
    pub(super) async fn offsets_at(
        &self,
        topic: &str,
        timestamp: i64,
    ) -> Result<BTreeMap<i32, i64>, Failure> {
        let leaders = self.leaders(topic).await?;
        let key = ApiKey::ListOffsets;
        let mut offsets = BTreeMap::new();
        for (connection, led) in &leaders.by_leader {
            let version = negotiate(connection, key, ListOffsetsRequest::VERSIONS)?;
            let request = client_list_offsets()
                .with_timeout_ms(if version >= 10 {
                    self.broker_timeout_ms()
                } else {
                    0
                })
                .with_topics(vec![
                    ListOffsetsTopic::default()
                        .with_name(topic_name(topic))
                        .with_partitions(
                            led.iter()
                                .map(|(partition, epoch)| {
                                    ListOffsetsPartition::default()
                                        .with_partition_index(*partition)
                                        .with_current_leader_epoch(if version >= 4 {
                                            *epoch
                                        } else {
                                            -1
                                        })
                                        .with_timestamp(timestamp)
                                })
                                .collect(),
                        ),
                ]);
            let response: ListOffsetsResponse = send(connection, key, version, &request).await?;
            for (partition, _) in led {
                let result = response
                    .topics
                    .iter()
                    .filter(|t| t.name.0.as_str() == topic)
                    .flat_map(|t| &t.partitions)
                    .find(|p| p.partition_index == *partition)
                    .ok_or_else(|| {
                        missing(connection, key, &format!("{topic} partition {partition}"))
                    })?;
                partition_check(key, topic, *partition, result.error_code)?;
                offsets.insert(*partition, result.offset);
            }
        }
        Ok(offsets)
    }

    /// The partitions of `topic` by leader, with a new connection to each leader.
    async fn leaders(&self, topic: &str) -> Result<Leaders, Failure> {
        let connection = self.connection().await?;
        let snapshot = self
            .metadata_on(&connection, Some(&[topic]), ANY_VERSION)
            .await?;
        let found = metadata::known_topic(&connection, &snapshot, topic)?;
        // The partitions with their leader epochs, by the leader's address.
        let mut led: BTreeMap<&str, Vec<(i32, i32)>> = BTreeMap::new();
        for (index, p) in &found.partitions {
            // A leader the answer does not list (stopped or fenced a moment ago) is none yet.
            let Some(address) = p.leader.and_then(|node| snapshot.brokers.get(&node)) else {
                return Err(Failure::Client(leader_not_available(format!(
                    "topic `{topic}` partition {index} has no live leader (an election is under \
                     way{})",
                    p.leader
                        .map(|node| format!("; broker {node} is not among the live brokers"))
                        .unwrap_or_default()
                ))));
            };
            led.entry(address)
                .or_default()
                .push((*index, p.leader_epoch));
        }
        let mut leaders = Leaders {
            by_leader: Vec::with_capacity(led.len()),
        };
        for (address, partitions) in led {
            let leader = Connection::connect(address, self.config())
                .await
                .map_err(|source| Failure::Connect {
                    bootstrap: address.to_owned(),
                    source,
                })?;
            leaders.by_leader.push((leader, partitions));
        }
        Ok(leaders)
    }
}

/// The failure for a partition the metadata does not list.
fn unknown_partition(key: ApiKey, topic: &str, partition: i32) -> Failure {
    Failure::Client(ClientError::Broker(BrokerError {
        api: api_name(key),
        code: 3,
        name: "UNKNOWN_TOPIC_OR_PARTITION",
        message: Some(format!("topic `{topic}` has no partition {partition}")),
        retriable: true,
    }))
}

/// A partition's error code as a failure naming the topic and partition.
fn partition_check(key: ApiKey, topic: &str, partition: i32, code: i16) -> Result<(), Failure> {
    match broker_error(
        api_name(key),
        code,
        Some(format!("topic `{topic}` partition {partition}")),
    ) {
        None => Ok(()),
        Some(error) => Err(Failure::Client(error)),
    }
}
