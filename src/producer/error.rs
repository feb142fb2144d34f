//! [`ProducerError`]: why a send, a flush or a transaction failed, and what to do next.

use std::sync::Arc;
use std::time::Duration;

use crate::kafka::error::{BrokerError, ClientError};

/// Why a [`Producer`](super::Producer) call failed.
///
/// Three questions decide what to do next:
/// - [`is_fatal`](Self::is_fatal): the producer can do nothing more (fenced by a newer
///   producer of the same transactional id, closed, or in a state it cannot leave); build a
///   new one.
/// - [`requires_abort`](Self::requires_abort): the open transaction cannot commit; abort it,
///   then the producer goes on.
/// - [`is_retriable`](Self::is_retriable): the same call may succeed later without a change
///   of configuration or permissions.
///
/// It is `Clone`: one failed batch fails the future of each of its records.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ProducerError {
    /// A producer setting is missing or out of range.
    #[error("invalid producer config `{key}`: {reason}")]
    Config {
        /// The setting, as Kafka's Java producer names it.
        key: String,
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// A transaction call on a producer built without `transactional.id`.
    #[error("{operation} needs a transactional producer: set transactional.id")]
    NotTransactional {
        /// The call.
        operation: &'static str,
    },
    /// A call out of turn, e.g. a transactional `send` outside a transaction, a second
    /// `begin_transaction`, a commit after a fatal error.
    #[error("{operation} is not allowed now: {reason}")]
    TransactionState {
        /// The call.
        operation: &'static str,
        /// Why not, and what to call first.
        reason: String,
    },
    /// A newer producer with the same transactional id took over (PRODUCER_FENCED, or
    /// INVALID_PRODUCER_EPOCH from the coordinator). Fatal: this producer must be dropped.
    #[error(
        "producer with transactional.id `{transactional_id}` was fenced: a newer producer with \
         the same id took over"
    )]
    Fenced {
        /// The transactional id.
        transactional_id: String,
        /// What the broker answered.
        #[source]
        source: Arc<ClientError>,
    },
    /// The open transaction cannot be committed (e.g. TRANSACTION_ABORTABLE, a failed send,
    /// the coordinator aborted it after `transaction.timeout.ms`): abort it, then go on.
    #[error("the transaction must be aborted: {reason}")]
    Abortable {
        /// What happened.
        reason: String,
        /// The underlying error, if any.
        #[source]
        source: Option<Arc<ProducerError>>,
    },
    /// A commit was sent and its answer lost: the transaction may be committed or aborted.
    /// Never reported as success; initialise the producer again (which completes or aborts
    /// whatever is pending) and find out from the output what was written.
    #[error(
        "the commit of transactional.id `{transactional_id}` was sent but its outcome is unknown"
    )]
    CommitOutcomeUnknown {
        /// The transactional id.
        transactional_id: String,
        /// What was seen instead of the answer.
        #[source]
        source: Arc<ClientError>,
    },
    /// The cluster could not be used: no connection, a malformed answer, a broker too old,
    /// or an error of a coordinator or Metadata call.
    #[error("the Kafka cluster could not be used")]
    Kafka {
        /// The client error.
        #[source]
        source: Arc<ClientError>,
    },
    /// The broker refused this producer's credentials or client certificate, or this
    /// producer refused the broker's certificate: TLS or SASL failed. The same cause is
    /// [`ConnectionError::Authentication`](crate::ConnectionError::Authentication) for the share consumer and the log reader and
    /// [`AdminError::Authentication`](crate::AdminError::Authentication) for the admin
    /// client (the table is on [`ConsumerError::Connection`](crate::ConsumerError::Connection)). Not retriable: fix the
    /// security settings (`security.protocol`, `ssl.*`, `sasl.*`) named in the cause. An
    /// open transaction must be aborted.
    #[error(
        "the Kafka cluster refused the producer's authentication; fix the security settings \
         (security.protocol, ssl.*, sasl.*) named in the cause"
    )]
    Authentication {
        /// What was refused, naming the broker, never a secret
        /// ([`ClientError::Connection`] holding
        /// [`ConnectionError::Authentication`](crate::ConnectionError::Authentication)).
        #[source]
        source: Arc<ClientError>,
    },
    /// The partition leader refused the records of a batch (e.g. MESSAGE_TOO_LARGE,
    /// TOPIC_AUTHORIZATION_FAILED, INVALID_RECORD).
    #[error("the broker refused the records for partition {partition} of `{topic}`")]
    Rejected {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The broker's error.
        #[source]
        source: Arc<ClientError>,
    },
    /// A record larger than the producer may send (`max.request.size`, `batch.size`
    /// limits) or than its whole buffer (`buffer.memory`), refused before it is queued.
    #[error("record of {size} bytes is larger than {max} bytes ({key})")]
    RecordTooLarge {
        /// The record's estimated size on the wire.
        size: usize,
        /// The limit.
        max: usize,
        /// The setting that sets the limit.
        key: &'static str,
    },
    /// [`Producer::ready`](super::Producer::ready) waited `max.block.ms` and the records
    /// sent and not yet written still held `buffer.memory` bytes or more: the cluster takes
    /// records more slowly than they are sent (or not at all). Retriable: wait for the
    /// futures already returned, or call `ready` again.
    #[error(
        "the producer's buffer stayed full for {waited:?} (max.block.ms): {buffered} bytes of \
         records wait to be written, buffer.memory is {buffer_memory}"
    )]
    BufferFull {
        /// The bytes of the records sent and not yet written, as the producer estimates them.
        buffered: usize,
        /// `buffer.memory`.
        buffer_memory: usize,
        /// How long `ready` waited (`max.block.ms`).
        waited: Duration,
    },
    /// The topic does not exist, or has no such partition.
    #[error("topic `{topic}` has no partition {partition}")]
    UnknownPartition {
        /// The topic.
        topic: String,
        /// The partition asked for (-1 when the topic itself is unknown).
        partition: i32,
    },
    /// The record was not confirmed within `delivery.timeout.ms`.
    #[error("the record was not written within {timeout:?} (delivery.timeout.ms)")]
    Timeout {
        /// The delivery timeout.
        timeout: Duration,
        /// The last retriable error seen before the time ran out, if any.
        #[source]
        last: Option<Arc<ProducerError>>,
    },
    /// The producer is closed, or failed fatally before this call.
    #[error("the producer is closed")]
    Closed,
    /// The producer cannot do this.
    #[error("{operation} is not supported: {reason}")]
    Unsupported {
        /// What was asked.
        operation: &'static str,
        /// Why not, and what to do instead.
        reason: String,
    },
}

impl ProducerError {
    /// True when the producer can do nothing more: build a new one.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            Self::Fenced { .. } | Self::Closed | Self::CommitOutcomeUnknown { .. }
        )
    }

    /// True when the open transaction cannot commit and must be aborted.
    pub fn requires_abort(&self) -> bool {
        matches!(
            self,
            Self::Abortable { .. }
                | Self::Authentication { .. }
                | Self::Rejected { .. }
                | Self::Timeout { .. }
                | Self::Kafka { .. }
        )
    }

    /// The error of a failed client call: [`ProducerError::Authentication`] when the
    /// connection's authentication was refused, [`ProducerError::Kafka`] otherwise.
    pub(crate) fn kafka(source: impl Into<ClientError>) -> Self {
        Self::from_client(Arc::new(source.into()))
    }

    /// [`kafka`](Self::kafka) for a shared client error.
    pub(crate) fn from_client(source: Arc<ClientError>) -> Self {
        if source.is_authentication() {
            Self::Authentication { source }
        } else {
            Self::Kafka { source }
        }
    }

    /// The client error behind this one, by layer ([`ClientError::Connection`],
    /// [`ClientError::Broker`], [`ClientError::Protocol`] and the others), following a
    /// timeout's last error and an abort's cause; `None` for the producer's own errors
    /// (settings, transaction states, a record too large).
    pub fn client_error(&self) -> Option<&ClientError> {
        match self {
            Self::Fenced { source, .. }
            | Self::CommitOutcomeUnknown { source, .. }
            | Self::Kafka { source }
            | Self::Authentication { source }
            | Self::Rejected { source, .. } => Some(source),
            Self::Abortable {
                source: Some(source),
                ..
            }
            | Self::Timeout {
                last: Some(source), ..
            } => source.client_error(),
            _ => None,
        }
    }

    /// The broker's error code answer behind this error, if there is one: the same
    /// [`BrokerError`] the share consumer and the admin client report for the code.
    pub fn broker_error(&self) -> Option<&BrokerError> {
        self.client_error().and_then(ClientError::broker_error)
    }

    /// True when TLS or SASL refused a connection: [`ProducerError::Authentication`], or an
    /// abort or a timeout it caused.
    pub fn is_authentication(&self) -> bool {
        self.client_error()
            .is_some_and(ClientError::is_authentication)
    }

    /// True when trying the same call again later may succeed unchanged.
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Kafka { source } | Self::Rejected { source, .. } => source.is_retriable(),
            Self::Timeout { .. } | Self::BufferFull { .. } => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::error::ConnectionError;

    fn denied() -> ClientError {
        ClientError::Broker(BrokerError {
            api: "Produce",
            code: 29,
            name: "TOPIC_AUTHORIZATION_FAILED",
            message: None,
            retriable: false,
        })
    }

    #[test]
    fn the_broker_error_is_found_behind_every_variant_that_carries_one() {
        let rejected = ProducerError::Rejected {
            topic: "t".to_owned(),
            partition: 0,
            source: Arc::new(denied()),
        };
        let timeout = ProducerError::Timeout {
            timeout: Duration::from_secs(1),
            last: Some(Arc::new(ProducerError::kafka(denied()))),
        };
        let abortable = ProducerError::Abortable {
            reason: "a send failed".to_owned(),
            source: Some(Arc::new(timeout.clone())),
        };
        for error in [&rejected, &timeout, &abortable] {
            let found = error.broker_error().expect("a broker error");
            assert_eq!((found.code, found.name), (29, "TOPIC_AUTHORIZATION_FAILED"));
            assert!(!error.is_authentication());
        }
        assert!(ProducerError::Closed.broker_error().is_none());
        let refused =
            ProducerError::kafka(ClientError::Connection(ConnectionError::Authentication {
                broker: "k:9093".to_owned(),
                reason: "SASL refused".to_owned(),
            }));
        assert!(refused.is_authentication());
        assert!(
            refused
                .client_error()
                .is_some_and(ClientError::is_authentication)
        );
        assert!(refused.broker_error().is_none());
        // A transactional send refused for authentication surfaces as an abort.
        let aborted = ProducerError::Abortable {
            reason: "a send failed".to_owned(),
            source: Some(Arc::new(refused)),
        };
        assert!(aborted.is_authentication());
        assert!(!ProducerError::Closed.is_authentication());
    }
}
