//! Errors of the embedded broker's admin and produce calls.

/// Errors of [`EmbeddedBroker`](super::EmbeddedBroker) calls.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EmbeddedError {
    /// The topic was never created.
    #[error("unknown topic `{0}`: create it with EmbeddedBroker::create_topic first")]
    UnknownTopic(String),
    /// The topic has no such partition.
    #[error("topic `{topic}` has {partitions} partition(s); there is no partition {partition}")]
    UnknownPartition {
        /// The topic.
        topic: String,
        /// The partition asked for.
        partition: i32,
        /// How many partitions the topic has.
        partitions: usize,
    },
    /// A topic of that name exists already.
    #[error("topic `{0}` already exists")]
    TopicExists(String),
    /// The topic name or partition count is not valid.
    #[error("invalid topic `{name}`: {reason}")]
    InvalidTopic {
        /// The name given.
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A group config value is out of range.
    #[error("invalid value `{value}` for `{key}`: expected {expected}")]
    InvalidConfig {
        /// The Kafka config key.
        key: &'static str,
        /// The value given.
        value: String,
        /// What is accepted.
        expected: &'static str,
    },
    /// The group has no member with that id.
    #[error("share group `{group}` has no member `{member_id}`")]
    UnknownMember {
        /// The group.
        group: String,
        /// The member id asked for.
        member_id: String,
    },
}
