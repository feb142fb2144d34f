//! A share group's offsets: describing them with their lag (DescribeShareGroupOffsets, key 90,
//! KIP-1226), altering (key 91), deleting (key 92) and resetting them, what
//! `kafka-share-groups.sh --describe --offsets`, `--reset-offsets` and `--delete-offsets` do.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_share_group_offsets_request::{
    AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
};
use kafka_protocol::messages::delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic;
use kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, ApiKey,
    DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsRequest, GroupId,
};
use kafka_protocol::protocol::StrBytes;

use super::records::{EARLIEST_TIMESTAMP, LATEST_TIMESTAMP};
use super::share_groups::{check_group, check_partition};
use super::share_offsets_wire::{self, OffsetsRequest, OffsetsResponse};
use super::{
    AdminError, Failure, KafkaAdmin, missing, negotiate, negotiate_and_send, send, topic_name,
};

/// Where [`KafkaAdmin::reset_share_group_offsets`] moves a share group's start offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResetTo {
    /// The log start offset of each partition (`--to-earliest`): every record still in the log
    /// is delivered again.
    Earliest,
    /// The end offset of each partition (`--to-latest`): only records written from now on are
    /// delivered.
    Latest,
    /// This offset in every partition (`--to-offset`), kept within each partition's log (a
    /// partition whose log starts later starts at its log start, one that ends earlier at its
    /// end).
    Offset(i64),
}

/// One partition of a share group's offsets ([`KafkaAdmin::share_group_offsets`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShareGroupPartitionOffsets {
    /// The topic.
    pub topic: String,
    /// The partition index.
    pub partition: i32,
    /// The share-partition start offset: records before it are done (acknowledged or
    /// archived); `None` when the group has no state for the partition yet. Records done
    /// past it do not always move it at once (the broker keeps them as done ranges, and
    /// [`lag`](Self::lag) leaves them out).
    pub start_offset: Option<i64>,
    /// The leader epoch the start offset was written under, `None` when unknown.
    pub leader_epoch: Option<i32>,
    /// How many records of the partition the group has still to finish, as the broker counts
    /// them (KIP-1226: from the start offset to the end of the log, less those already done
    /// past the start offset). `None` from a broker before Kafka 4.4 (DescribeShareGroupOffsets
    /// v0) or when the broker does not know it.
    pub lag: Option<i64>,
}

impl KafkaAdmin {
    /// The offsets of share group `group` in every partition it has state for: start offset,
    /// leader epoch and lag (DescribeShareGroupOffsets, to the group's coordinator), sorted by
    /// topic and partition; what `kafka-share-groups.sh --describe --offsets` shows.
    ///
    /// # Errors
    ///
    /// [`AdminError::GroupNotFound`] for a group that does not exist; an
    /// [`AdminError::Broker`] naming the group, or the topic and partition, for another error
    /// of the group or of a partition; [`AdminError::Unsupported`] from a broker without share
    /// groups; [`AdminError::Timeout`] and the other errors of the connection and the requests.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), kafka_share_sink::AdminError> {
    /// # let admin = kafka_share_sink::KafkaAdmin::connect("127.0.0.1:9092").await?;
    /// for p in admin.share_group_offsets("order-sink").await? {
    ///     println!("{}-{}: start {:?}, lag {:?}", p.topic, p.partition, p.start_offset, p.lag);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn share_group_offsets(
        &self,
        group: &str,
    ) -> Result<Vec<ShareGroupPartitionOffsets>, AdminError> {
        self.call(
            "share_group_offsets",
            self.on_coordinator(group, |connection| {
                Box::pin(async move {
                    let connection = &connection;
                    let key = ApiKey::DescribeShareGroupOffsets;
                    let version = negotiate(connection, key, share_offsets_wire::VERSIONS)?;
                    let request = OffsetsRequest(
                        DescribeShareGroupOffsetsRequest::default().with_groups(vec![
                            DescribeShareGroupOffsetsRequestGroup::default()
                                .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
                                .with_topics(None),
                        ]),
                    );
                    let response: OffsetsResponse =
                        send(connection, key, version, &request).await?;
                    let found = response
                        .groups
                        .into_iter()
                        .find(|g| g.group_id == group)
                        .ok_or_else(|| missing(connection, key, group))?;
                    let message = found.error_message.map(StrBytes::from_string);
                    check_group(key, group, found.error_code, message.as_ref())?;
                    let mut offsets = Vec::new();
                    for topic in found.topics {
                        for p in topic.partitions {
                            let message = p.error_message.map(StrBytes::from_string);
                            check_partition(
                                key,
                                group,
                                &topic.name,
                                Some(p.partition),
                                p.error_code,
                                message.as_ref(),
                            )?;
                            offsets.push(ShareGroupPartitionOffsets {
                                topic: topic.name.clone(),
                                partition: p.partition,
                                start_offset: (p.start_offset >= 0).then_some(p.start_offset),
                                leader_epoch: (p.leader_epoch >= 0).then_some(p.leader_epoch),
                                lag: (p.lag >= 0).then_some(p.lag),
                            });
                        }
                    }
                    offsets.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
                    Ok(offsets)
                })
            }),
        )
        .await
    }

    /// Sets the start offsets of share group `group`: each `(topic, partition, start_offset)`
    /// (AlterShareGroupOffsets, to the group's coordinator). The group's consumers then get the
    /// records from there on, delivery counts starting afresh.
    ///
    /// The group must be empty: stop (or [`close`](crate::ShareConsumer::close)) its
    /// consumers first, as for `kafka-share-groups.sh --reset-offsets`.
    ///
    /// # Errors
    ///
    /// [`AdminError::GroupNotEmpty`] while the group has members; [`AdminError::InvalidArgument`]
    /// for no offsets or a negative one (nothing is sent); an [`AdminError::Broker`] naming the
    /// topic and partition for a partition's error, e.g. `UNKNOWN_TOPIC_OR_PARTITION`;
    /// [`AdminError::Timeout`] and the other errors of the connection and the requests.
    ///
    /// # Cancel safety
    ///
    /// The admin stays usable, but once the request was sent the offsets may be set whether or
    /// not the future is dropped; setting them again is harmless.
    pub async fn alter_share_group_offsets(
        &self,
        group: &str,
        offsets: &[(&str, i32, i64)],
    ) -> Result<(), AdminError> {
        self.call(
            "alter_share_group_offsets",
            self.alter_share_offsets(group, offsets),
        )
        .await
    }

    /// Moves the start offsets of share group `group` in every partition of `topic` to the
    /// earliest or the latest offset of the partition, or to a given offset (ListOffsets to each
    /// partition's leader, then [`Self::alter_share_group_offsets`]), as
    /// `kafka-share-groups.sh --reset-offsets --to-earliest|--to-latest|--to-offset N --execute`
    /// does. Returns the start offset set in each partition.
    ///
    /// The group must be empty: stop its consumers first.
    ///
    /// # Errors
    ///
    /// As [`Self::alter_share_group_offsets`]; [`AdminError::InvalidArgument`] for a negative
    /// [`ResetTo::Offset`]; an [`AdminError::Broker`] for ListOffsets or an unknown topic.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use kafka_share_sink::ResetTo;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), kafka_share_sink::AdminError> {
    /// # let admin = kafka_share_sink::KafkaAdmin::connect("127.0.0.1:9092").await?;
    /// let set = admin.reset_share_group_offsets("order-sink", "orders", ResetTo::Earliest).await?;
    /// println!("start offsets now {set:?}");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As [`Self::alter_share_group_offsets`].
    pub async fn reset_share_group_offsets(
        &self,
        group: &str,
        topic: &str,
        to: ResetTo,
    ) -> Result<BTreeMap<i32, i64>, AdminError> {
        self.call("reset_share_group_offsets", async {
            if let ResetTo::Offset(offset) = to
                && offset < 0
            {
                return Err(Failure::InvalidArgument(format!(
                    "offset {offset} is negative; give an offset of 0 or more, or ResetTo::Earliest"
                )));
            }
            let targets = match to {
                ResetTo::Earliest => self.offsets_at(topic, EARLIEST_TIMESTAMP).await?,
                ResetTo::Latest => self.offsets_at(topic, LATEST_TIMESTAMP).await?,
                ResetTo::Offset(offset) => {
                    let earliest = self.offsets_at(topic, EARLIEST_TIMESTAMP).await?;
                    let latest = self.offsets_at(topic, LATEST_TIMESTAMP).await?;
                    earliest
                        .into_iter()
                        .map(|(partition, low)| {
                            let high = latest.get(&partition).copied().unwrap_or(low).max(low);
                            (partition, offset.clamp(low, high))
                        })
                        .collect()
                }
            };
            let offsets: Vec<(&str, i32, i64)> =
                targets.iter().map(|(p, o)| (topic, *p, *o)).collect();
            self.alter_share_offsets(group, &offsets).await?;
            Ok(targets)
        })
        .await
    }

    /// Deletes the offsets (the share-partition state) of share group `group` in every
    /// partition of each of `topics` (DeleteShareGroupOffsets, to the group's coordinator), as
    /// `kafka-share-groups.sh --delete-offsets` does. A consumer of the group that subscribes to
    /// such a topic again starts where `share.auto.offset.reset` says.
    ///
    /// The group must be empty: stop its consumers first.
    ///
    /// # Errors
    ///
    /// [`AdminError::GroupNotEmpty`] while the group has members;
    /// [`AdminError::GroupNotFound`] for a group that does not exist;
    /// [`AdminError::InvalidArgument`] for no topics; an [`AdminError::Broker`] naming the topic
    /// for a topic's error; [`AdminError::Timeout`] and the other errors of the connection and
    /// the requests.
    ///
    /// # Cancel safety
    ///
    /// The admin stays usable, but once the request was sent the offsets may be deleted
    /// whether or not the future is dropped.
    pub async fn delete_share_group_offsets(
        &self,
        group: &str,
        topics: &[&str],
    ) -> Result<(), AdminError> {
        self.call("delete_share_group_offsets", async {
            if topics.is_empty() {
                return Err(Failure::InvalidArgument(
                    "give one or more topics whose offsets to delete".to_owned(),
                ));
            }
            self.on_coordinator(group, |connection| {
                Box::pin(async move {
                    let connection = &connection;
                    let key = ApiKey::DeleteShareGroupOffsets;
                    let request = DeleteShareGroupOffsetsRequest::default()
                        .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
                        .with_topics(
                            topics
                                .iter()
                                .map(|t| {
                                    DeleteShareGroupOffsetsRequestTopic::default()
                                        .with_topic_name(topic_name(t))
                                })
                                .collect(),
                        );
                    let response: DeleteShareGroupOffsetsResponse =
                        negotiate_and_send(connection, key, &request).await?;
                    check_group(
                        key,
                        group,
                        response.error_code,
                        response.error_message.as_ref(),
                    )?;
                    for topic in topics {
                        let result = response
                            .responses
                            .iter()
                            .find(|r| r.topic_name.0.as_str() == *topic)
                            .ok_or_else(|| missing(connection, key, topic))?;
                        check_partition(
                            key,
                            group,
                            topic,
                            None,
                            result.error_code,
                            result.error_message.as_ref(),
                        )?;
                    }
                    Ok(())
                })
            })
            .await
        })
        .await
    }

    /// [`Self::alter_share_group_offsets`], before the failure is named.
    async fn alter_share_offsets(
        &self,
        group: &str,
        offsets: &[(&str, i32, i64)],
    ) -> Result<(), Failure> {
        if offsets.is_empty() {
            return Err(Failure::InvalidArgument(
                "give one or more (topic, partition, start offset) to set".to_owned(),
            ));
        }
        if let Some((topic, partition, offset)) = offsets.iter().find(|(_, p, o)| *o < 0 || *p < 0)
        {
            return Err(Failure::InvalidArgument(format!(
                "topic `{topic}` partition {partition} offset {offset}: partitions and offsets \
                 must be 0 or more"
            )));
        }
        let mut by_topic: BTreeMap<&str, Vec<(i32, i64)>> = BTreeMap::new();
        for (topic, partition, offset) in offsets {
            by_topic
                .entry(topic)
                .or_default()
                .push((*partition, *offset));
        }
        let by_topic = &by_topic;
        self.on_coordinator(group, |connection| {
            Box::pin(async move {
                let connection = &connection;
                let key = ApiKey::AlterShareGroupOffsets;
                let request = AlterShareGroupOffsetsRequest::default()
                    .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
                    .with_topics(
                        by_topic
                            .iter()
                            .map(|(topic, partitions)| {
                                AlterShareGroupOffsetsRequestTopic::default()
                                    .with_topic_name(topic_name(topic))
                                    .with_partitions(
                                        partitions
                                            .iter()
                                            .map(|(partition, offset)| {
                                                AlterShareGroupOffsetsRequestPartition::default()
                                                    .with_partition_index(*partition)
                                                    .with_start_offset(*offset)
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    );
                let response: AlterShareGroupOffsetsResponse =
                    negotiate_and_send(connection, key, &request).await?;
                check_group(
                    key,
                    group,
                    response.error_code,
                    response.error_message.as_ref(),
                )?;
                for (topic, partitions) in by_topic {
                    let result = response
                        .responses
                        .iter()
                        .find(|r| r.topic_name.0.as_str() == *topic)
                        .ok_or_else(|| missing(connection, key, topic))?;
                    for (partition, _) in partitions {
                        let answered = result
                            .partitions
                            .iter()
                            .find(|p| p.partition_index == *partition)
                            .ok_or_else(|| {
                                missing(connection, key, &format!("{topic} partition {partition}"))
                            })?;
                        check_partition(
                            key,
                            group,
                            topic,
                            Some(*partition),
                            answered.error_code,
                            answered.error_message.as_ref(),
                        )?;
                    }
                }
                Ok(())
            })
        })
        .await
    }
}
