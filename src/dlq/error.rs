//! [`DeadLetterError`]: why records could not be written to the dead-letter queue.

use std::time::Duration;

use crate::embedded::EmbeddedError;
use crate::kafka::error::ClientError;
use crate::producer::ProducerError;

/// Why a [`DeadLetterQueue`](super::DeadLetterQueue) could not be set up or could not write
/// records.
///
/// A failed [`send`](super::DeadLetterQueue::send) means none of its records count as
/// written, whatever the variant: the caller RELEASEs the originals, so nothing is lost.
/// [`is_retriable`](Self::is_retriable) says whether trying again later may succeed without
/// a change of configuration or permissions.
///
/// ```
/// use std::time::Duration;
/// use kafka_share_sink::DeadLetterError;
///
/// let error = DeadLetterError::Timeout { timeout: Duration::from_secs(120), last: None };
/// assert!(error.is_retriable());
/// assert_eq!(
///     error.to_string(),
///     "the dead-letter queue did not finish within 120s (delivery timeout)"
/// );
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeadLetterError {
    /// A setting of the dead-letter queue is missing or out of range.
    #[error("invalid dead-letter queue setting `{key}`: {reason}")]
    Config {
        /// The setting, named as Kafka Connect names it where it has one.
        key: &'static str,
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// The topic is missing and could not be created.
    #[error("could not create the dead-letter topic `{topic}`: {hint}")]
    CreateTopic {
        /// The dead-letter topic.
        topic: String,
        /// What to do about it.
        hint: String,
        /// What the cluster answered.
        #[source]
        source: ClientError,
    },
    /// Talking to the cluster failed: no connection, a malformed answer, an error of a
    /// Metadata call, or a broker too old for the requests needed.
    #[error("dead-letter topic `{topic}`: the Kafka cluster could not be used")]
    Kafka {
        /// The dead-letter topic.
        topic: String,
        /// The client error.
        #[source]
        source: ClientError,
    },
    /// The partition leader refused the records.
    #[error("the broker refused the dead-letter records for partition {partition} of `{topic}`")]
    Rejected {
        /// The dead-letter topic.
        topic: String,
        /// The partition written to.
        partition: i32,
        /// The broker's error, e.g. `MESSAGE_TOO_LARGE` or `TOPIC_AUTHORIZATION_FAILED`.
        #[source]
        source: ClientError,
    },
    /// Connecting, or confirming every record of a `send`, took longer than the delivery
    /// timeout.
    #[error("the dead-letter queue did not finish within {timeout:?} (delivery timeout)")]
    Timeout {
        /// The delivery timeout.
        timeout: Duration,
        /// The last retriable error seen before the time ran out, if any.
        #[source]
        last: Option<Box<DeadLetterError>>,
    },
    /// A failure asked for with
    /// [`EmbeddedDeadLetterQueue::fail_next`](crate::embedded::EmbeddedDeadLetterQueue::fail_next),
    /// for tests. Retriable, like a broker that is briefly unavailable.
    #[error(
        "dead-letter write to `{topic}` failed on purpose (EmbeddedDeadLetterQueue::fail_next)"
    )]
    Injected {
        /// The dead-letter topic.
        topic: String,
    },
    /// The queue's producer failed in another way than a refusal by the partition leader or
    /// a timeout (e.g. the producer could not get a producer id, or a record is larger than
    /// it may send).
    #[error("dead-letter topic `{topic}`: the producer failed")]
    Producer {
        /// The dead-letter topic.
        topic: String,
        /// The producer's error.
        #[source]
        source: ProducerError,
    },
    /// The embedded broker refused the records.
    #[error("the embedded broker refused the dead-letter records for `{topic}`")]
    Embedded {
        /// The dead-letter topic.
        topic: String,
        /// The embedded broker's error.
        #[source]
        source: EmbeddedError,
    },
}

impl DeadLetterError {
    /// True when the same call may succeed later without any change by the caller, as a
    /// lost connection, a leader election or a full in-sync replica set do. A refused
    /// record (too large, not authorized) or a topic that cannot be created is not.
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::CreateTopic { source, .. }
            | Self::Kafka { source, .. }
            | Self::Rejected { source, .. } => source.is_retriable(),
            Self::Producer { source, .. } => source.is_retriable(),
            Self::Timeout { .. } | Self::Injected { .. } => true,
            Self::Config { .. } | Self::Embedded { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;
    use crate::kafka::error::BrokerError;

    #[test]
    fn retriable_follows_the_cause() {
        let broker = |name, retriable| {
            ClientError::Broker(BrokerError {
                api: "Produce",
                code: 0,
                name,
                message: None,
                retriable,
            })
        };
        let rejected = |source| DeadLetterError::Rejected {
            topic: "dlq".into(),
            partition: 0,
            source,
        };
        assert!(rejected(broker("NOT_LEADER_OR_FOLLOWER", true)).is_retriable());
        assert!(!rejected(broker("MESSAGE_TOO_LARGE", false)).is_retriable());
        assert!(
            !DeadLetterError::Config {
                key: "k",
                reason: "r".into()
            }
            .is_retriable()
        );
        assert!(DeadLetterError::Injected { topic: "t".into() }.is_retriable());
    }

    #[test]
    fn timeout_keeps_the_last_error_as_its_source() {
        let error = DeadLetterError::Timeout {
            timeout: Duration::from_secs(1),
            last: Some(Box::new(DeadLetterError::Injected { topic: "t".into() })),
        };
        let source = error.source().map(ToString::to_string);
        assert_eq!(
            source.as_deref(),
            Some("dead-letter write to `t` failed on purpose (EmbeddedDeadLetterQueue::fail_next)")
        );
    }
}
