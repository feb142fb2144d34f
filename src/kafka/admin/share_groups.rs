//! Describing a share group (ShareGroupDescribe, API key 77), and what every share-group call
//! shares: finding the group's coordinator and naming the group in its errors.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::share_group_describe_response::{DescribedGroup, Member};
use kafka_protocol::messages::{
    ApiKey, GroupId, ShareGroupDescribeRequest, ShareGroupDescribeResponse,
};
use kafka_protocol::protocol::StrBytes;
use tracing::debug;

use super::{AdminError, Failure, KafkaAdmin, missing, negotiate_and_send};
use crate::kafka::consumer::membership::find_coordinator;
use crate::kafka::error::BrokerError;
use crate::kafka::error::ClientError;
use crate::kafka::error::codes::{api_name, broker_error};
use crate::kafka::net::connection::Connection;
use crate::time::deadline_after;

/// Kafka's COORDINATOR_LOAD_IN_PROGRESS error code.
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
/// Kafka's COORDINATOR_NOT_AVAILABLE error code.
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
/// Kafka's NOT_COORDINATOR error code.
const NOT_COORDINATOR: i16 = 16;
/// Kafka's NON_EMPTY_GROUP (Java: `GROUP_NOT_EMPTY`) error code.
const NON_EMPTY_GROUP: i16 = 68;
/// Kafka's GROUP_ID_NOT_FOUND error code.
const GROUP_ID_NOT_FOUND: i16 = 69;

/// How long a share-group call keeps looking for the group's coordinator while the brokers
/// answer that it is moving or loading.
const COORDINATOR_WAIT: Duration = Duration::from_secs(15);

/// The pause before asking again for a coordinator that is moving or loading.
const COORDINATOR_RETRY: Duration = Duration::from_millis(200);

/// The state of a share group, as the broker reports it ([`ShareGroupDescription::state`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShareGroupState {
    /// No members: its offsets may be altered, reset or deleted.
    Empty,
    /// Members, with their assignment.
    Stable,
    /// Being removed.
    Dead,
    /// A state this crate does not know, as the broker named it.
    Unknown(String),
}

impl ShareGroupState {
    /// The state from the broker's name (`Empty`, `Stable`, `Dead`; any case).
    fn parse(name: &str) -> Self {
        match name.to_ascii_lowercase().as_str() {
            "empty" => Self::Empty,
            "stable" => Self::Stable,
            "dead" => Self::Dead,
            _ => Self::Unknown(name.to_owned()),
        }
    }
}

impl std::fmt::Display for ShareGroupState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Empty => "Empty",
            Self::Stable => "Stable",
            Self::Dead => "Dead",
            Self::Unknown(name) => name,
        })
    }
}

/// A share group as the broker describes it ([`KafkaAdmin::describe_share_group`]), what
/// `kafka-share-groups.sh --describe --members` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShareGroupDescription {
    /// The group id.
    pub group_id: String,
    /// The group's state.
    pub state: ShareGroupState,
    /// The group epoch, which grows with every change of members or subscriptions.
    pub group_epoch: i32,
    /// The epoch of the group's current assignment; equal to `group_epoch` once the
    /// assignment has caught up with the last change.
    pub assignment_epoch: i32,
    /// The assignor the group uses (e.g. `simple`).
    pub assignor: String,
    /// The members, in member-id order.
    pub members: Vec<ShareGroupMember>,
}

/// One member of a share group ([`ShareGroupDescription::members`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShareGroupMember {
    /// The member id.
    pub member_id: String,
    /// The `client.id` of the member's consumer.
    pub client_id: String,
    /// The host the member connects from, as the broker sees it (e.g. `/127.0.0.1`).
    pub host: String,
    /// The member's rack, if its consumer set `client.rack`.
    pub rack: Option<String>,
    /// The member's epoch.
    pub member_epoch: i32,
    /// The topics the member subscribed to, in name order.
    pub subscribed_topics: Vec<String>,
    /// The partitions assigned to it: topic name → partition indexes in ascending order.
    pub assignment: BTreeMap<String, Vec<i32>>,
}

impl KafkaAdmin {
    /// Describes the share group `group`: its state, epochs and members with their client id,
    /// host, subscription and assigned partitions (ShareGroupDescribe, sent to the group's
    /// coordinator), as `kafka-share-groups.sh --describe --members` does.
    ///
    /// # Errors
    ///
    /// [`AdminError::GroupNotFound`] when no share group of that name exists;
    /// [`AdminError::Broker`] for another error of the group, e.g.
    /// `GROUP_AUTHORIZATION_FAILED`; [`AdminError::Unsupported`] from a broker without share
    /// groups; [`AdminError::Timeout`] and the other errors of the connection and the requests.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), kafka_share_sink::AdminError> {
    /// # let admin = kafka_share_sink::KafkaAdmin::connect("127.0.0.1:9092").await?;
    /// let group = admin.describe_share_group("order-sink").await?;
    /// println!("{} ({}), epoch {}", group.group_id, group.state, group.group_epoch);
    /// for member in &group.members {
    ///     println!("  {} {} {:?}", member.client_id, member.host, member.assignment);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn describe_share_group(
        &self,
        group: &str,
    ) -> Result<ShareGroupDescription, AdminError> {
        self.call(
            "describe_share_group",
            self.on_coordinator(group, |connection| {
                Box::pin(async move {
                    let connection = &connection;
                    let key = ApiKey::ShareGroupDescribe;
                    let request = ShareGroupDescribeRequest::default()
                        .with_group_ids(vec![GroupId(StrBytes::from_string(group.to_owned()))]);
                    let response: ShareGroupDescribeResponse =
                        negotiate_and_send(connection, key, &request).await?;
                    let described = response
                        .groups
                        .into_iter()
                        .find(|g| g.group_id.0.as_str() == group)
                        .ok_or_else(|| missing(connection, key, group))?;
                    check_group(
                        key,
                        group,
                        described.error_code,
                        described.error_message.as_ref(),
                    )?;
                    Ok(description(described))
                })
            }),
        )
        .await
    }

    /// Runs `parts` on a connection to the coordinator of `group`, found with FindCoordinator
    /// (key type GROUP) through the admin's connection. While a broker answers that the
    /// coordinator is moving or loading (at FindCoordinator or in `parts`), looks again, for
    /// up to 15 s. The coordinator's connection is closed when this returns.
    pub(super) async fn on_coordinator<'a, T>(
        &'a self,
        group: &'a str,
        parts: impl Fn(Connection) -> futures::future::BoxFuture<'a, Result<T, Failure>>,
    ) -> Result<T, Failure> {
        let deadline = deadline_after(tokio::time::Instant::now(), COORDINATOR_WAIT);
        loop {
            let via = self.connection().await?;
            let result = match find_coordinator(group, &via, self.config()).await {
                Ok(coordinator) => {
                    let result = parts(coordinator.clone()).await;
                    coordinator.close();
                    result
                }
                Err(error) => Err(Failure::from(error)),
            };
            match result {
                Err(Failure::Client(ClientError::Broker(BrokerError { code, .. })))
                    if is_coordinator_moving(code) && tokio::time::Instant::now() < deadline =>
                {
                    debug!(
                        group,
                        code, "share-group coordinator moving or loading; asking again"
                    );
                    tokio::time::sleep(COORDINATOR_RETRY).await;
                }
                other => return other,
            }
        }
    }
}

/// Whether `code` says the coordinator is loading or moving: asking again helps.
fn is_coordinator_moving(code: i16) -> bool {
    matches!(
        code,
        COORDINATOR_LOAD_IN_PROGRESS | COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR
    )
}

/// The failure for a group-level error `code` of a `key` response about `group`: not empty
/// and not found are typed, others are broker errors naming the group.
pub(super) fn check_group(
    key: ApiKey,
    group: &str,
    code: i16,
    message: Option<&StrBytes>,
) -> Result<(), Failure> {
    let message = message
        .map(|m| m.as_str().to_owned())
        .filter(|m| !m.is_empty());
    match code {
        0 => Ok(()),
        NON_EMPTY_GROUP => Err(Failure::GroupNotEmpty {
            group: group.to_owned(),
            message,
        }),
        GROUP_ID_NOT_FOUND => Err(Failure::GroupNotFound {
            group: group.to_owned(),
            message,
        }),
        code => {
            let message = Some(message.unwrap_or_else(|| format!("share group `{group}`")));
            match broker_error(api_name(key), code, message) {
                Some(error) => Err(Failure::Client(error)),
                None => Ok(()),
            }
        }
    }
}

/// The failure for an error `code` of one partition (or topic, `partition` `None`) in a `key`
/// response about `group`.
pub(super) fn check_partition(
    key: ApiKey,
    group: &str,
    topic: &str,
    partition: Option<i32>,
    code: i16,
    message: Option<&StrBytes>,
) -> Result<(), Failure> {
    if code == 0 {
        return Ok(());
    }
    if code == NON_EMPTY_GROUP || code == GROUP_ID_NOT_FOUND {
        return check_group(key, group, code, message);
    }
    let what = match partition {
        Some(p) => format!("share group `{group}`, topic `{topic}` partition {p}"),
        None => format!("share group `{group}`, topic `{topic}`"),
    };
    let message = match message.map(StrBytes::as_str).filter(|m| !m.is_empty()) {
        Some(m) => format!("{what}: {m}"),
        None => what,
    };
    match broker_error(api_name(key), code, Some(message)) {
        Some(error) => Err(Failure::Client(error)),
        None => Ok(()),
    }
}

/// The description of a group from its ShareGroupDescribe entry.
fn description(group: DescribedGroup) -> ShareGroupDescription {
    let mut members: Vec<ShareGroupMember> = group.members.into_iter().map(member).collect();
    members.sort_by(|a, b| a.member_id.cmp(&b.member_id));
    ShareGroupDescription {
        group_id: group.group_id.0.as_str().to_owned(),
        state: ShareGroupState::parse(group.group_state.as_str()),
        group_epoch: group.group_epoch,
        assignment_epoch: group.assignment_epoch,
        assignor: group.assignor_name.as_str().to_owned(),
        members,
    }
}

/// A member from its ShareGroupDescribe entry.
fn member(member: Member) -> ShareGroupMember {
    let mut subscribed_topics: Vec<String> = member
        .subscribed_topic_names
        .iter()
        .map(|t| t.0.as_str().to_owned())
        .collect();
    subscribed_topics.sort();
    subscribed_topics.dedup();
    let mut assignment: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for topic in member.assignment.topic_partitions {
        assignment
            .entry(topic.topic_name.0.as_str().to_owned())
            .or_default()
            .extend(topic.partitions);
    }
    for partitions in assignment.values_mut() {
        partitions.sort_unstable();
        partitions.dedup();
    }
    ShareGroupMember {
        member_id: member.member_id.as_str().to_owned(),
        client_id: member.client_id.as_str().to_owned(),
        host: member.client_host.as_str().to_owned(),
        rack: member.rack_id.map(|r| r.as_str().to_owned()),
        member_epoch: member.member_epoch,
        subscribed_topics,
        assignment,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_are_parsed_in_any_case_and_unknown_ones_kept() {
        assert_eq!(ShareGroupState::parse("Empty"), ShareGroupState::Empty);
        assert_eq!(ShareGroupState::parse("STABLE"), ShareGroupState::Stable);
        assert_eq!(ShareGroupState::parse("dead"), ShareGroupState::Dead);
        let odd = ShareGroupState::parse("Assigning");
        assert_eq!(odd, ShareGroupState::Unknown("Assigning".to_owned()));
        assert_eq!(odd.to_string(), "Assigning");
    }

    #[test]
    fn group_errors_are_typed_and_name_the_group() {
        let not_empty = check_group(ApiKey::AlterShareGroupOffsets, "g", NON_EMPTY_GROUP, None)
            .expect_err("not empty")
            .into_admin("alter_share_group_offsets");
        assert!(
            matches!(&not_empty, AdminError::GroupNotEmpty { group, .. } if group == "g"),
            "{not_empty:?}"
        );
        assert!(not_empty.to_string().contains("stop"), "{not_empty}");
        assert!(!not_empty.is_retriable());

        let other = check_group(ApiKey::ShareGroupDescribe, "g", 30, None)
            .expect_err("authorization")
            .into_admin("describe_share_group");
        assert!(
            matches!(&other, AdminError::Broker { error: BrokerError { name: "GROUP_AUTHORIZATION_FAILED", message: Some(m), .. }, .. } if m.contains("`g`")),
            "{other:?}"
        );

        let partition = check_partition(ApiKey::AlterShareGroupOffsets, "g", "t", Some(3), 3, None)
            .expect_err("unknown partition")
            .into_admin("alter_share_group_offsets");
        assert!(
            matches!(&partition, AdminError::Broker { error: BrokerError { message: Some(m), .. }, .. } if m.contains("`t` partition 3")),
            "{partition:?}"
        );
        assert!(check_partition(ApiKey::AlterShareGroupOffsets, "g", "t", None, 0, None).is_ok());
    }

    #[test]
    fn members_are_sorted_and_assignments_grouped_by_topic() {
        use kafka_protocol::messages::TopicName;
        use kafka_protocol::messages::share_group_describe_response::{
            Assignment, TopicPartitions,
        };
        let name = |s: &str| TopicName(StrBytes::from_string(s.to_owned()));
        let raw = Member::default()
            .with_member_id(StrBytes::from_static_str("m"))
            .with_subscribed_topic_names(vec![name("b"), name("a"), name("a")])
            .with_assignment(Assignment::default().with_topic_partitions(vec![
                TopicPartitions::default()
                    .with_topic_name(name("a"))
                    .with_partitions(vec![2, 0]),
                TopicPartitions::default()
                    .with_topic_name(name("a"))
                    .with_partitions(vec![1, 2]),
            ]));
        let m = member(raw);
        assert_eq!(m.subscribed_topics, ["a", "b"]);
        assert_eq!(
            m.assignment,
            BTreeMap::from([("a".to_owned(), vec![0, 1, 2])])
        );
        assert_eq!(m.rack, None);
    }
}
