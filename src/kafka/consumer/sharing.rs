//! How many members of the share group each partition is assigned to, for the sizing rule's
//! fair share of the record locks ([`fair_share`](crate::kafka::engine::sizing::fair_share)).
//!
//! ShareGroupHeartbeat tells a member only its own assignment. The membership loop asks the
//! coordinator for the whole group (ShareGroupDescribe, on the heartbeat's connection) when
//! the member's epoch changes — the group's assignment changed, whoever joined or left, in
//! this process or another — and again at the next heartbeat while the description shows
//! members that have not caught up with the group's assignment yet, but never twice within
//! [`MIN_GAP`] (while many members join at once, every join changes every member's epoch).
//! Nothing else: in the steady state it costs the coordinator nothing. A cluster that refuses the describe (no
//! DESCRIBE permission on the group) is not asked again; the member then counts itself alone
//! on its partitions, as before this existed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use kafka_protocol::messages::{
    ApiKey, GroupId, ShareGroupDescribeRequest, ShareGroupDescribeResponse,
};
use kafka_protocol::protocol::{Message, StrBytes};
use uuid::Uuid;

use crate::kafka::error::ClientError;
use crate::kafka::net::connection::Connection;

/// Members per partition (topic id, partition index), as the group was last described.
pub(crate) type Sharers = HashMap<(Uuid, i32), usize>;

/// Kafka's GROUP_AUTHORIZATION_FAILED.
const GROUP_AUTHORIZATION_FAILED: i16 = 30;
/// Kafka's TOPIC_AUTHORIZATION_FAILED.
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;

/// The least time between two describes of one member.
pub(crate) const MIN_GAP: Duration = Duration::from_secs(1);

/// What the membership knows of the group's sharing, and when to ask again.
#[derive(Debug, Default)]
pub(crate) struct Sharing {
    /// The last count; empty until the first description.
    pub(crate) sharers: Arc<Sharers>,
    /// The member epoch the last description was asked at.
    described_at: Option<i32>,
    /// The last description showed every member at the group's assignment epoch.
    settled: bool,
    /// The cluster refused the describe, or cannot answer it: not asked again.
    refused: bool,
    /// When the last describe was sent.
    asked_at: Option<Instant>,
}

impl Sharing {
    /// Whether to describe the group, at `now`, after a heartbeat that left this member at
    /// `epoch`.
    pub(crate) fn wanted(&self, epoch: i32, now: Instant) -> bool {
        !self.refused
            && epoch > 0
            && (self.described_at != Some(epoch) || !self.settled)
            && self
                .asked_at
                .is_none_or(|at| now.saturating_duration_since(at) >= MIN_GAP)
    }

    /// Takes in the outcome of a describe asked at `epoch`, at `asked_at`.
    pub(crate) fn update(&mut self, epoch: i32, asked_at: Instant, outcome: Outcome) {
        self.asked_at = Some(asked_at);
        match outcome {
            Outcome::Counted { sharers, settled } => {
                self.sharers = Arc::new(sharers);
                self.described_at = Some(epoch);
                self.settled = settled;
            }
            Outcome::Refused(why) => {
                tracing::info!(
                    reason = %why,
                    "cannot describe the share group: acquisition counts this member alone on \
                     its partitions (grant DESCRIBE on the group for a fair share of its \
                     record locks)"
                );
                self.refused = true;
            }
            // Asked again after the next heartbeat.
            Outcome::Failed(why) => {
                tracing::debug!(reason = %why, "describing the share group failed");
            }
        }
    }
}

/// What a describe brought.
#[derive(Debug, PartialEq)]
pub(crate) enum Outcome {
    /// The members per partition, and whether every member was at the group's assignment
    /// epoch (otherwise some assignments shown are about to change).
    Counted { sharers: Sharers, settled: bool },
    /// Not allowed or not supported: no use asking again.
    Refused(String),
    /// Failed this time (the coordinator moving, a timeout).
    Failed(String),
}

/// The ShareGroupDescribe request for `group_id`.
fn request(group_id: &str) -> ShareGroupDescribeRequest {
    ShareGroupDescribeRequest::default()
        .with_group_ids(vec![GroupId(StrBytes::from_string(group_id.to_owned()))])
}

/// Counts the members of each partition in the answer about `group_id`.
pub(crate) fn count(group_id: &str, response: ShareGroupDescribeResponse) -> Outcome {
    let Some(group) = response
        .groups
        .into_iter()
        .find(|g| g.group_id.0.as_str() == group_id)
    else {
        return Outcome::Failed("the answer does not describe the group".to_owned());
    };
    match group.error_code {
        0 => {}
        code @ (GROUP_AUTHORIZATION_FAILED | TOPIC_AUTHORIZATION_FAILED) => {
            return Outcome::Refused(format!("error code {code}"));
        }
        code => return Outcome::Failed(format!("error code {code}")),
    }
    let mut sharers = Sharers::new();
    let mut settled = true;
    for member in group.members {
        settled &= member.member_epoch == group.assignment_epoch;
        for topic in member.assignment.topic_partitions {
            for partition in topic.partitions {
                *sharers.entry((topic.topic_id, partition)).or_default() += 1;
            }
        }
    }
    Outcome::Counted { sharers, settled }
}

/// Describes `group_id` through its coordinator, waiting at most `within` for the answer.
///
/// `within` is this caller's patience, not the request's timeout: an answer slower than it is
/// given up here, but the connection counts it overdue (and the heartbeat moves to a new
/// connection) only past the connection's request timeout, as for any request.
pub(crate) async fn describe(
    coordinator: &Connection,
    group_id: &str,
    within: Duration,
) -> Outcome {
    let version = match coordinator.negotiate(
        ApiKey::ShareGroupDescribe,
        ShareGroupDescribeRequest::VERSIONS,
    ) {
        Ok(version) => version,
        Err(e) => return Outcome::Refused(e.to_string()),
    };
    let asked = coordinator.request::<_, ShareGroupDescribeResponse>(
        ApiKey::ShareGroupDescribe,
        version,
        &request(group_id),
    );
    let answer = match tokio::time::timeout(within, asked).await {
        Ok(answer) => answer,
        Err(_) => Err(ClientError::Timeout(within)),
    };
    match answer {
        Ok(response) => count(group_id, response),
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::share_group_describe_response::{
        Assignment, DescribedGroup, Member, TopicPartitions,
    };

    use super::*;

    fn member(epoch: i32, partitions: &[(Uuid, &[i32])]) -> Member {
        Member::default().with_member_epoch(epoch).with_assignment(
            Assignment::default().with_topic_partitions(
                partitions
                    .iter()
                    .map(|(id, ps)| {
                        TopicPartitions::default()
                            .with_topic_id(*id)
                            .with_partitions(ps.to_vec())
                    })
                    .collect(),
            ),
        )
    }

    fn answer(
        error_code: i16,
        assignment_epoch: i32,
        members: Vec<Member>,
    ) -> ShareGroupDescribeResponse {
        ShareGroupDescribeResponse::default().with_groups(vec![
            DescribedGroup::default()
                .with_group_id(GroupId(StrBytes::from_static_str("g")))
                .with_error_code(error_code)
                .with_assignment_epoch(assignment_epoch)
                .with_members(members),
        ])
    }

    #[test]
    fn members_are_counted_per_partition() {
        let t = Uuid::from_u128(1);
        let u = Uuid::from_u128(2);
        let members = vec![
            member(5, &[(t, &[0]), (u, &[0])]),
            member(5, &[(t, &[0, 1])]),
            member(5, &[(t, &[1])]),
            member(5, &[(t, &[0])]),
        ];
        let Outcome::Counted { sharers, settled } = count("g", answer(0, 5, members)) else {
            panic!("not counted");
        };
        assert!(settled);
        assert_eq!(
            sharers,
            Sharers::from([((t, 0), 3), ((t, 1), 2), ((u, 0), 1)])
        );
        // A member behind the group's assignment epoch: counted, not settled.
        let behind = vec![member(4, &[(t, &[0])]), member(5, &[(t, &[1])])];
        assert!(matches!(
            count("g", answer(0, 5, behind)),
            Outcome::Counted { settled: false, .. }
        ));
    }

    #[test]
    fn a_refusal_stops_the_describes_and_a_failure_does_not() {
        assert!(matches!(
            count("g", answer(GROUP_AUTHORIZATION_FAILED, 0, Vec::new())),
            Outcome::Refused(_)
        ));
        // COORDINATOR_LOAD_IN_PROGRESS.
        assert!(matches!(
            count("g", answer(14, 0, Vec::new())),
            Outcome::Failed(_)
        ));
        assert!(matches!(
            count("other", answer(0, 1, Vec::new())),
            Outcome::Failed(_)
        ));

        let t0 = Instant::now();
        let later = |n: u32| t0 + MIN_GAP * n;
        let mut sharing = Sharing::default();
        assert!(!sharing.wanted(0, t0), "not in the group yet");
        assert!(sharing.wanted(3, t0));
        sharing.update(3, t0, Outcome::Failed("timeout".to_owned()));
        assert!(!sharing.wanted(3, t0), "not again at once");
        assert!(sharing.wanted(3, later(1)), "asked again");
        let counted = |settled| Outcome::Counted {
            sharers: Sharers::new(),
            settled,
        };
        sharing.update(3, later(1), counted(false));
        assert!(sharing.wanted(3, later(2)), "unsettled: asked again");
        sharing.update(3, later(2), counted(true));
        assert!(!sharing.wanted(3, later(3)), "settled at this epoch");
        assert!(
            !sharing.wanted(4, later(2)),
            "the assignment changed, too soon"
        );
        assert!(sharing.wanted(4, later(3)), "the assignment changed");
        sharing.update(4, later(3), Outcome::Refused("no".to_owned()));
        assert!(!sharing.wanted(5, later(9)), "refused: never again");
    }
}
