//! [`ExactlyOnceError`]: why the exactly-once iteration cannot start or go on.

use crate::BoxError;
use crate::consumer::ConsumerError;
use crate::kafka::error::{BrokerError, ClientError};
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
    /// write it, its credentials are refused; or a record is refused for itself (larger than
    /// `max.request.size` or the topic's `max.message.bytes`, invalid, a timestamp out of
    /// range) under `errors.tolerance=none` (under `all` the driver finds the source record
    /// whose output was refused, by processing the batch again one record per transaction,
    /// and dead-letters that one; a dead letter refused in turn stops the task with this
    /// error, its `topic` the dead-letter queue). The transaction was aborted and the task
    /// stops; the records it held are released (not rejected), so nothing is lost — they wait
    /// in the group, with one delivery attempt spent, until the target is fixed. Before, the
    /// driver delivered them again and again until the broker archived them at the
    /// delivery-count limit.
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
///
/// Ordered by how much of the round it condemns: a transaction that failed several ways is
/// handled as its worst failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum OutputFailure {
    /// Trying again may succeed (a leader moved, a timeout, a lock lost, concurrent
    /// transactions, a producer to initialise again): abort and deliver the records again.
    Transient,
    /// One output record is refused for itself (larger than `max.request.size` or the
    /// topic's `max.message.bytes`, invalid, corrupt, a timestamp out of range): writing it
    /// again fails the same way, the other outputs of the transaction may be fine.
    RecordRefused,
    /// The target cannot be written at all until something outside the task changes (no
    /// such partition, the topic is gone, authorization or authentication refused, a
    /// setting).
    TargetUnwritable,
}

/// Produce error codes that refuse a record (or its batch) for what it holds, not for where
/// it goes: MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_RECORD, CORRUPT_MESSAGE,
/// INVALID_TIMESTAMP.
const RECORD_REFUSALS: [i16; 5] = [10, 18, 87, 2, 32];

/// Produce error codes about the transaction's producer state, not the output:
/// OUT_OF_ORDER_SEQUENCE_NUMBER (a batch after one that failed), INVALID_PRODUCER_EPOCH (the
/// coordinator aborted the transaction after `transaction.timeout.ms`), INVALID_TXN_STATE,
/// UNKNOWN_PRODUCER_ID, TRANSACTION_ABORTABLE. The next transaction starts afresh.
const PRODUCER_STATE: [i16; 5] = [45, 47, 48, 59, 120];

impl OutputFailure {
    /// Classifies `error`, looking through the aborts that wrap a send's own error.
    pub(crate) fn of(error: &ProducerError) -> Self {
        match error {
            // A lost lock (no cause) and whatever the wrapped cause says.
            ProducerError::Abortable { source, .. } => {
                source.as_deref().map_or(Self::Transient, Self::of)
            }
            ProducerError::RecordTooLarge { .. } => Self::RecordRefused,
            ProducerError::Rejected { source, .. } if refuses_record(source) => Self::RecordRefused,
            ProducerError::Rejected { source, .. } | ProducerError::Kafka { source }
                if is_producer_state(source) =>
            {
                Self::Transient
            }
            // The producer retried a refusal Kafka counts as retriable (CORRUPT_MESSAGE) for
            // the whole delivery timeout: the record itself is refused.
            ProducerError::Timeout {
                last: Some(last), ..
            } if Self::of(last) == Self::RecordRefused => Self::RecordRefused,
            // The producer never found the topic or its partition for the whole delivery
            // timeout (it was deleted, or never created).
            ProducerError::Timeout {
                last: Some(last), ..
            } if unknown_target(last) => Self::TargetUnwritable,
            // Within the delivery timeout the producer retried what it could; the next
            // transaction starts afresh.
            ProducerError::Timeout { .. }
            | ProducerError::TransactionState { .. }
            | ProducerError::CommitOutcomeUnknown { .. } => Self::Transient,
            other if other.is_retriable() => Self::Transient,
            // Fenced and Closed stop the task anyway (fatal); the rest cannot be written
            // whatever the record: unknown partitions, authorization and authentication,
            // configuration.
            _ => Self::TargetUnwritable,
        }
    }

    /// The topic and partition `error` is about, when it names them.
    pub(crate) fn target(error: &ProducerError) -> (Option<String>, Option<i32>) {
        match error {
            ProducerError::Abortable {
                source: Some(inner),
                ..
            }
            | ProducerError::Timeout {
                last: Some(inner), ..
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

    /// The Java exception Kafka's producer raises for a refused record, for the
    /// `__connect.errors.exception.class.name` header of its dead letter.
    pub(crate) fn java_exception(error: &ProducerError) -> &'static str {
        match error {
            ProducerError::Abortable {
                source: Some(inner),
                ..
            }
            | ProducerError::Timeout {
                last: Some(inner), ..
            } => Self::java_exception(inner),
            ProducerError::RecordTooLarge { .. } => {
                "org.apache.kafka.common.errors.RecordTooLargeException"
            }
            ProducerError::Rejected { source, .. } => match **source {
                ClientError::Broker(BrokerError { code: 10, .. }) => {
                    "org.apache.kafka.common.errors.RecordTooLargeException"
                }
                ClientError::Broker(BrokerError { code: 18, .. }) => {
                    "org.apache.kafka.common.errors.RecordBatchTooLargeException"
                }
                ClientError::Broker(BrokerError { code: 87, .. }) => {
                    "org.apache.kafka.common.errors.InvalidRecordException"
                }
                ClientError::Broker(BrokerError { code: 2, .. }) => {
                    "org.apache.kafka.common.errors.CorruptRecordException"
                }
                ClientError::Broker(BrokerError { code: 32, .. }) => {
                    "org.apache.kafka.common.errors.InvalidTimestampException"
                }
                _ => "org.apache.kafka.common.KafkaException",
            },
            _ => "org.apache.kafka.common.KafkaException",
        }
    }
}

fn refuses_record(source: &ClientError) -> bool {
    matches!(source, ClientError::Broker(BrokerError { code, .. }) if RECORD_REFUSALS.contains(code))
}

/// UNKNOWN_TOPIC_OR_PARTITION and UNKNOWN_TOPIC_ID, or a topic missing from the metadata.
fn unknown_target(error: &ProducerError) -> bool {
    match error {
        ProducerError::UnknownPartition { .. } => true,
        ProducerError::Rejected { source, .. } => {
            matches!(
                **source,
                ClientError::Broker(BrokerError { code: 3 | 100, .. })
            )
        }
        _ => false,
    }
}

fn is_producer_state(source: &ClientError) -> bool {
    matches!(source, ClientError::Broker(BrokerError { code, .. }) if PRODUCER_STATE.contains(code))
}

/// An output record the broker or the producer refused for what it holds: the cause written
/// with the dead letter of the source record that produced it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("an output of this record to {} was refused", describe_target(.topic.as_deref(), *.partition))]
pub(crate) struct RefusedOutput {
    pub(crate) topic: Option<String>,
    pub(crate) partition: Option<i32>,
    #[source]
    pub(crate) source: ProducerError,
}

impl RefusedOutput {
    pub(crate) fn new(source: ProducerError) -> Self {
        let (topic, partition) = OutputFailure::target(&source);
        Self {
            topic,
            // -1: the topic itself (unknown, or gone).
            partition: partition.filter(|p| *p >= 0),
            source,
        }
    }
}

/// CLUSTER_AUTHORIZATION_FAILED, INVALID_TRANSACTION_TIMEOUT,
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
const REFUSED_FOR_GOOD: [i16; 3] = [31, 50, 53];

/// True when the cluster refused the producer in a way no retry changes.
fn refused_for_good(e: &ProducerError) -> bool {
    e.is_authentication()
        || e.broker_error()
            .is_some_and(|b| REFUSED_FOR_GOOD.contains(&b.code))
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

    /// Whether trying again later may succeed. Not when the cluster refused the producer
    /// for good: its credentials ([`ProducerError::is_authentication`]), or an answer no
    /// retry changes — TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED,
    /// INVALID_TRANSACTION_TIMEOUT (Java's producer makes these fatal); the driver stops
    /// with the error instead of trying round after round.
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Producer(e) if refused_for_good(e) => false,
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

    fn broker(code: i16, name: &'static str, retriable: bool) -> Arc<ClientError> {
        Arc::new(ClientError::Broker(BrokerError {
            api: "Produce",
            code,
            name,
            message: None,
            retriable,
        }))
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

    /// A refusal no retry changes stops the driver; a transient one is tried again.
    #[test]
    fn refusals_for_good_are_not_retried_round_after_round() {
        let kafka = |code, name, retriable| ProducerError::Kafka {
            source: broker(code, name, retriable),
        };
        let for_good = [
            kafka(53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", false),
            kafka(31, "CLUSTER_AUTHORIZATION_FAILED", false),
            kafka(50, "INVALID_TRANSACTION_TIMEOUT", false),
            abortable(kafka(53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", false)),
            ProducerError::Authentication {
                source: Arc::new(ClientError::Connection(
                    crate::kafka::error::ConnectionError::Authentication {
                        broker: "k1:9093".to_owned(),
                        reason: "SASL PLAIN: invalid credentials".to_owned(),
                    },
                )),
            },
        ];
        for error in for_good {
            let eos = ExactlyOnceError::Producer(error);
            assert!(!eos.is_retriable(), "{eos:?}");
        }
        let transient = [
            kafka(51, "CONCURRENT_TRANSACTIONS", true),
            kafka(15, "COORDINATOR_NOT_AVAILABLE", true),
            abortable(rejected(7, "REQUEST_TIMED_OUT", true)),
        ];
        for error in transient {
            let eos = ExactlyOnceError::Producer(error);
            assert!(eos.is_retriable(), "{eos:?}");
        }
    }

    #[test]
    fn a_target_that_cannot_be_written_is_unwritable_and_named() {
        let unwritable = [
            ProducerError::UnknownPartition {
                topic: "out".to_owned(),
                partition: 4,
            },
            rejected(29, "TOPIC_AUTHORIZATION_FAILED", false),
            abortable(rejected(3, "UNKNOWN_TOPIC_OR_PARTITION", false)),
            // Retried for the whole delivery timeout: the topic is gone.
            ProducerError::Timeout {
                timeout: Duration::from_secs(120),
                last: Some(Arc::new(rejected(3, "UNKNOWN_TOPIC_OR_PARTITION", true))),
            },
            ProducerError::Timeout {
                timeout: Duration::from_secs(120),
                last: Some(Arc::new(ProducerError::UnknownPartition {
                    topic: "out".to_owned(),
                    partition: -1,
                })),
            },
        ];
        for error in &unwritable {
            assert_eq!(
                OutputFailure::of(error),
                OutputFailure::TargetUnwritable,
                "{error:?}"
            );
        }
        assert_eq!(
            OutputFailure::target(&unwritable[0]),
            (Some("out".to_owned()), Some(4))
        );
        let refused = ExactlyOnceError::OutputRefused {
            topic: Some("out".to_owned()),
            partition: Some(4),
            source: unwritable[0].clone(),
        };
        assert!(!refused.is_retriable());
        assert!(
            refused.to_string().contains("`out` partition 4"),
            "{refused}"
        );
    }

    #[test]
    fn a_record_refused_for_itself_is_record_class_with_its_java_exception() {
        let cases = [
            (
                rejected(10, "MESSAGE_TOO_LARGE", false),
                "org.apache.kafka.common.errors.RecordTooLargeException",
            ),
            (
                ProducerError::RecordTooLarge {
                    size: 2_000_000,
                    max: 1_048_576,
                    key: "max.request.size",
                },
                "org.apache.kafka.common.errors.RecordTooLargeException",
            ),
            (
                abortable(rejected(18, "RECORD_LIST_TOO_LARGE", false)),
                "org.apache.kafka.common.errors.RecordBatchTooLargeException",
            ),
            (
                abortable(rejected(87, "INVALID_RECORD", false)),
                "org.apache.kafka.common.errors.InvalidRecordException",
            ),
            (
                rejected(32, "INVALID_TIMESTAMP", false),
                "org.apache.kafka.common.errors.InvalidTimestampException",
            ),
            // Retriable in Kafka's table: the producer retries it until its delivery
            // timeout, then it is the record's.
            (
                ProducerError::Timeout {
                    timeout: Duration::from_secs(120),
                    last: Some(Arc::new(rejected(2, "CORRUPT_MESSAGE", true))),
                },
                "org.apache.kafka.common.errors.CorruptRecordException",
            ),
        ];
        for (error, java) in &cases {
            assert_eq!(
                OutputFailure::of(error),
                OutputFailure::RecordRefused,
                "{error:?}"
            );
            assert_eq!(OutputFailure::java_exception(error), *java, "{error:?}");
        }
        assert_eq!(
            OutputFailure::target(&cases[2].0),
            (Some("out".to_owned()), Some(2))
        );
        let cause = RefusedOutput::new(cases[3].0.clone());
        assert_eq!(
            cause.to_string(),
            "an output of this record to `out` partition 2 was refused"
        );
        assert!(std::error::Error::source(&cause).is_some());
        // The worst failure of a transaction decides.
        assert!(OutputFailure::Transient < OutputFailure::RecordRefused);
        assert!(OutputFailure::RecordRefused < OutputFailure::TargetUnwritable);
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
            // The batches after one refused for a record break the sequence.
            rejected(45, "OUT_OF_ORDER_SEQUENCE_NUMBER", false),
            // The coordinator aborted the transaction after its timeout.
            abortable(rejected(47, "INVALID_PRODUCER_EPOCH", false)),
            abortable(rejected(120, "TRANSACTION_ABORTABLE", false)),
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
