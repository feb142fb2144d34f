//! [`ExactlyOnceError`]: why the exactly-once iteration cannot start or go on.

use crate::BoxError;
use crate::consumer::ConsumerError;
use crate::producer::ProducerError;

/// Why the exactly-once path could not be set up or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExactlyOnceError {
    /// The cluster lacks what the exactly-once iteration needs.
    #[error("exactly-once delivery is not possible on this cluster: it needs {capability}")]
    MissingCapability {
        /// What is missing, and how to get it.
        capability: &'static str,
    },
    /// A setting is wrong.
    #[error("invalid exactly-once config `{key}`: {reason}")]
    Config {
        /// The setting.
        key: &'static str,
        /// What is wrong and what to do.
        reason: String,
    },
    /// The ledger topic is unusable.
    #[error("the exactly-once ledger topic `{topic}` cannot be used: {reason}")]
    Ledger {
        /// The ledger topic.
        topic: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// A redelivery check waited too long for other tasks' transactions on the ledger.
    #[error(
        "ledger `{topic}` partition {partition} stayed below offset {high_watermark} for {waited:?}: \
         a transaction of another task is open there (it ends within its transaction.timeout.ms); \
         the records were released and are checked again"
    )]
    LedgerWait {
        /// The ledger topic.
        topic: String,
        /// The ledger partition.
        partition: i32,
        /// The high watermark the read had to reach.
        high_watermark: i64,
        /// How long it waited.
        waited: std::time::Duration,
    },
    /// The transactional producer failed.
    #[error("the transactional producer failed")]
    Producer(#[source] ProducerError),
    /// A request to the cluster failed.
    #[error("{operation} failed")]
    Cluster {
        /// What was asked.
        operation: &'static str,
        /// Why it failed.
        #[source]
        source: BoxError,
    },
    /// Reading the ledger failed.
    #[error("reading the ledger failed")]
    Read(#[source] ConsumerError),
    /// A target the task declared
    /// ([`SinkTask::transactional_outputs`](crate::SinkTask::transactional_outputs)) cannot
    /// take what the task will write: it does not exist, or it keeps the source partition
    /// and has fewer partitions than the source. Found at
    /// [`initialize`](crate::ShareSinkTask::initialize), before anything is read.
    #[error(
        "the exactly-once target `{target}` of source topic `{source_topic}` cannot be used: {reason}"
    )]
    UnfitTarget {
        /// The source topic.
        source_topic: String,
        /// The target topic.
        target: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// An output of the transaction cannot be written, and writing it again would fail the
    /// same way: the target has no such partition, the topic is gone, the producer may not
    /// write it, its credentials are refused, or a record is refused for itself (larger than
    /// `max.request.size` or the topic's `max.message.bytes`, invalid). The transaction was
    /// aborted and the task stops; the records it held are released (not rejected), so nothing
    /// is lost — they wait in the group, with one delivery attempt spent, until the target is
    /// fixed. Before, the driver delivered them again and again until the broker archived them
    /// at the delivery-count limit.
    #[error(
        "the exactly-once output to {} cannot be written, and retrying would not change that; \
         the transaction was aborted, the task stops and its records were released",
        describe_target(.topic.as_deref(), *.partition)
    )]
    OutputRefused {
        /// The target topic, when the error names one.
        topic: Option<String>,
        /// The target partition, when the error names one.
        partition: Option<i32>,
        /// What the producer said.
        #[source]
        source: ProducerError,
    },
}

fn describe_target(topic: Option<&str>, partition: Option<i32>) -> String {
    match (topic, partition) {
        (Some(t), Some(p)) if p >= 0 => format!("`{t}` partition {p}"),
        (Some(t), _) => format!("`{t}`"),
        (None, _) => "the target".to_owned(),
    }
}

/// What a transaction's producer error means for the records of the round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutputFailure {
    /// Trying again may succeed (a leader moved, a timeout, a lock lost, a producer to
    /// initialise again): abort and deliver the records again.
    Transient,
    /// Trying again cannot succeed until something outside the task changes.
    Permanent,
}

impl OutputFailure {
    /// Classifies `error`, looking through the aborts that wrap a send's own error.
    pub(crate) fn of(error: &ProducerError) -> Self {
        match error {
            // A lost lock (no cause) and whatever the wrapped cause says.
            ProducerError::Abortable { source, .. } => {
                source.as_deref().map_or(Self::Transient, Self::of)
            }
            // Within the delivery timeout the producer retried what it could; the next
            // transaction starts afresh.
            ProducerError::Timeout { .. }
            | ProducerError::TransactionState { .. }
            | ProducerError::CommitOutcomeUnknown { .. } => Self::Transient,
            other if other.is_retriable() => Self::Transient,
            // Fenced and Closed stop the task anyway (fatal); the rest is permanent: unknown
            // partitions, refused records, authorization and authentication, configuration.
            _ => Self::Permanent,
        }
    }

    /// The topic and partition `error` is about, when it names them.
    pub(crate) fn target(error: &ProducerError) -> (Option<String>, Option<i32>) {
        match error {
            ProducerError::Abortable {
                source: Some(inner),
                ..
            } => Self::target(inner),
            ProducerError::Rejected {
                topic, partition, ..
            }
            | ProducerError::UnknownPartition { topic, partition } => {
                (Some(topic.clone()), Some(*partition))
            }
            _ => (None, None),
        }
    }
}

impl ExactlyOnceError {
    /// A failed cluster request.
    pub(crate) fn cluster(
        operation: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Cluster {
            operation,
            source: Box::new(source),
        }
    }

    /// Whether trying again later may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Producer(e) => e.is_retriable() || e.requires_abort(),
            Self::Read(e) => e.is_retriable(),
            Self::Cluster { .. } | Self::LedgerWait { .. } => true,
            Self::MissingCapability { .. }
            | Self::Config { .. }
            | Self::Ledger { .. }
            | Self::UnfitTarget { .. }
            | Self::OutputRefused { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn broker(code: i16, name: &'static str, retriable: bool) -> Arc<ConsumerError> {
        Arc::new(ConsumerError::Broker {
            api: "Produce",
            code,
            name,
            message: None,
            retriable,
        })
    }

    fn rejected(code: i16, name: &'static str, retriable: bool) -> ProducerError {
        ProducerError::Rejected {
            topic: "out".to_owned(),
            partition: 2,
            source: broker(code, name, retriable),
        }
    }

    fn abortable(inner: ProducerError) -> ProducerError {
        ProducerError::Abortable {
            reason: "a send failed".to_owned(),
            source: Some(Arc::new(inner)),
        }
    }

    #[test]
    fn what_retrying_cannot_fix_is_permanent_and_names_its_target() {
        let permanent = [
            ProducerError::UnknownPartition {
                topic: "out".to_owned(),
                partition: 4,
            },
            rejected(29, "TOPIC_AUTHORIZATION_FAILED", false),
            rejected(10, "MESSAGE_TOO_LARGE", false),
            ProducerError::RecordTooLarge {
                size: 2_000_000,
                max: 1_048_576,
                key: "max.request.size",
            },
            abortable(rejected(87, "INVALID_RECORD", false)),
        ];
        for error in &permanent {
            assert_eq!(
                OutputFailure::of(error),
                OutputFailure::Permanent,
                "{error:?}"
            );
        }
        assert_eq!(
            OutputFailure::target(&permanent[0]),
            (Some("out".to_owned()), Some(4))
        );
        assert_eq!(
            OutputFailure::target(&permanent[4]),
            (Some("out".to_owned()), Some(2))
        );
        let refused = ExactlyOnceError::OutputRefused {
            topic: Some("out".to_owned()),
            partition: Some(4),
            source: permanent[0].clone(),
        };
        assert!(!refused.is_retriable());
        assert!(
            refused.to_string().contains("`out` partition 4"),
            "{refused}"
        );
    }

    #[test]
    fn what_a_later_attempt_may_fix_is_transient() {
        let transient = [
            rejected(6, "NOT_LEADER_OR_FOLLOWER", true),
            abortable(rejected(7, "REQUEST_TIMED_OUT", true)),
            ProducerError::Abortable {
                reason: "the renewal of records of in-0 failed".to_owned(),
                source: None,
            },
            ProducerError::Timeout {
                timeout: Duration::from_secs(120),
                last: None,
            },
            ProducerError::Kafka {
                source: broker(51, "CONCURRENT_TRANSACTIONS", true),
            },
        ];
        for error in &transient {
            assert_eq!(
                OutputFailure::of(error),
                OutputFailure::Transient,
                "{error:?}"
            );
        }
    }
}
