//! Errors of share consumers and of acknowledgements.

use std::time::Duration;

use crate::kafka::error::{BrokerError, ConnectionError, ProtocolError};
use crate::record::RecordId;

/// Errors of a [`ShareConsumer`](crate::ShareConsumer) call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumerError {
    /// The consumer was closed; build a new one.
    #[error("the share consumer is closed")]
    Closed,
    /// `poll` was called before `subscribe`.
    #[error("poll called before subscribe: call subscribe(topics) first")]
    NotSubscribed,
    /// `subscribe` was given no topic, or a name that is not a valid Kafka topic name. A name
    /// given twice is not an error: it counts once, as in Java.
    #[error("invalid subscription: {reason}")]
    InvalidSubscription {
        /// What is wrong with the topic list.
        reason: String,
    },
    /// Explicit mode: the previous poll still has records that were not acknowledged.
    #[error(
        "{count} record(s) of the previous poll are not acknowledged (first: {first}); in explicit \
         acknowledgement mode every record must be acknowledged (ACCEPT, RELEASE, REJECT or RENEW) \
         before the next poll"
    )]
    UnacknowledgedRecords {
        /// How many records of the previous poll have no acknowledgement.
        count: usize,
        /// The first of them.
        first: RecordId,
    },
    /// `acknowledge` was called on a consumer in implicit acknowledgement mode.
    #[error(
        "acknowledge called in implicit acknowledgement mode, where the next poll or commit \
         accepts every record; use share.acknowledgement.mode=explicit to acknowledge records \
         one by one"
    )]
    ImplicitAcknowledgement,
    /// The record is not part of the last poll, so it cannot be acknowledged.
    #[error(
        "record {record} cannot be acknowledged: it is not part of the last poll (acknowledge \
         records before polling again)"
    )]
    NotInBatch {
        /// The record named in the call.
        record: RecordId,
    },
    /// The record's acknowledgement was already sent; only a RENEW may be followed by
    /// another acknowledgement.
    #[error("record {record} was already acknowledged and the acknowledgement sent")]
    AlreadyAcknowledged {
        /// The record named in the call.
        record: RecordId,
    },
    /// The call did not finish in time.
    #[error("the share consumer call did not finish within {0:?}")]
    Timeout(Duration),
    /// A consumer setting is missing or malformed.
    #[error("invalid consumer config `{key}`: {reason}")]
    Config {
        /// The config key.
        key: String,
        /// What is wrong and what is expected.
        reason: String,
    },
    /// The connection layer: no connection to a broker could be made or kept
    /// ([`ConnectionError::Io`], retriable), or TLS or SASL refused it
    /// ([`ConnectionError::Authentication`], not retriable).
    ///
    /// # One cause, one answer
    ///
    /// Each public client reports a cause the same way, whichever connection meets it
    /// (bootstrap, coordinator, leader) and whenever (when connecting, or when an open
    /// connection authenticates again under KIP-368). The layer's error is the variant of
    /// the consumer and the log reader; the producer's, the admin client's and the
    /// dead-letter queue's variants carry it inside a [`ClientError`](crate::ClientError), as
    /// their [`source`](std::error::Error::source) (`AdminError::Broker` holds the
    /// [`BrokerError`] itself, as its `error`):
    ///
    /// | Cause | [`KafkaShareConsumer`](crate::KafkaShareConsumer), [`KafkaLogReader`](crate::producer::KafkaLogReader) | [`KafkaProducer`](crate::producer::KafkaProducer) | [`KafkaAdmin`](crate::KafkaAdmin) |
    /// |---|---|---|---|
    /// | SASL credentials refused (wrong or changed password, unknown or removed user), OAUTHBEARER token refused or its provider failed, mechanism not enabled, client certificate missing or from a CA the broker does not trust, broker certificate refused by this client | `Connection(ConnectionError::Authentication)` | [`ProducerError::Authentication`](crate::producer::ProducerError::Authentication) | [`AdminError::Authentication`](crate::AdminError::Authentication) |
    /// | No broker reachable, connection reset or closed | `Connection(ConnectionError::Io)` | retried; a send ends as [`ProducerError::Timeout`](crate::producer::ProducerError::Timeout) at `delivery.timeout.ms` with it as `last`, a connect or transaction call as [`ProducerError::Kafka`](crate::producer::ProducerError::Kafka) | [`AdminError::Connect`](crate::AdminError::Connect) when connecting, [`AdminError::Connection`](crate::AdminError::Connection) during a call |
    /// | A broker error code Kafka does not retry | `Broker(BrokerError)` | [`ProducerError::Rejected`](crate::producer::ProducerError::Rejected) for a Produce answer (MESSAGE_TOO_LARGE only for a single record: a larger batch is split and sent again), [`ProducerError::Kafka`](crate::producer::ProducerError::Kafka) for Metadata and coordinator calls (fencing and aborts have their own variants) | [`AdminError::Broker`](crate::AdminError::Broker) |
    /// | A broker error code Kafka retries | `Broker(BrokerError)` | retried; a send ends as `ProducerError::Timeout` with `Rejected` (Produce) or `Kafka` as `last` | `AdminError::Broker` |
    /// | An answer that could not be decoded (its connection is closed) | `Protocol(ProtocolError::Garbled)` | retried, as a lost connection | [`AdminError::Connection`](crate::AdminError::Connection) |
    /// | An answer that makes no sense | `Protocol(ProtocolError::Malformed)` | `ProducerError::Kafka` | [`AdminError::Protocol`](crate::AdminError::Protocol) |
    /// | A broker without a needed API version | `Protocol(ProtocolError::Unsupported)` | `ProducerError::Kafka` | [`AdminError::Unsupported`](crate::AdminError::Unsupported) |
    ///
    /// Retriability follows the cause: I/O, a garbled answer and a broker code Kafka classes
    /// as retriable are retriable; refused security, a malformed answer and a missing API
    /// version are not (a producer's `Timeout` is retriable and its `Abortable` is not,
    /// whatever their cause: they answer for the call, not the cause). `broker_error()` and
    /// `is_authentication()` answer the same on `ConsumerError`,
    /// [`ProducerError`](crate::producer::ProducerError) (looking through a timeout's `last`
    /// and an abort's cause) and [`AdminError`](crate::AdminError). The driver returns any of them as
    /// [`Error::Consumer`](crate::Error::Consumer) and stops on those that are not
    /// retriable; the dead-letter queue as
    /// [`DeadLetterError::Kafka`](crate::DeadLetterError::Kafka) or
    /// [`DeadLetterError::Producer`](crate::DeadLetterError::Producer) with it as the cause.
    /// Not authentication failures: a listener of another security protocol
    /// ([`ConsumerError::Config`] naming `security.protocol`, or `Connection(Io)` with a
    /// hint), and a broker that cannot be reached (`Connection(Io)`, retriable).
    #[error(transparent)]
    Connection(#[from] ConnectionError),
    /// The broker layer: a broker answered with an error code.
    #[error(transparent)]
    Broker(#[from] BrokerError),
    /// The protocol layer: an answer that could not be decoded
    /// ([`ProtocolError::Garbled`], retriable) or used ([`ProtocolError::Malformed`]), or a
    /// broker without a needed API version ([`ProtocolError::Unsupported`]).
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
}

impl ConsumerError {
    /// True when the same call may succeed later without any change by the caller: a
    /// timeout, a lost connection, a garbled response, or a broker error code Kafka classes
    /// as retriable (a coordinator or leader that moved, for one).
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Timeout(_) => true,
            Self::Connection(error) => error.is_retriable(),
            Self::Broker(error) => error.is_retriable(),
            Self::Protocol(error) => error.is_retriable(),
            _ => false,
        }
    }

    /// True when TLS or SASL refused a connection ([`ConnectionError::Authentication`]).
    pub fn is_authentication(&self) -> bool {
        matches!(self, Self::Connection(error) if error.is_authentication())
    }

    /// True when the record acknowledged is not this consumer's to settle (any more): its
    /// lock was lost or its session reset ([`ConsumerError::NotInBatch`]), or it was settled
    /// already ([`ConsumerError::AlreadyAcknowledged`]). The group has it; nothing to undo.
    pub(crate) fn is_not_held(&self) -> bool {
        matches!(
            self,
            Self::NotInBatch { .. } | Self::AlreadyAcknowledged { .. }
        )
    }

    /// The broker's error code answer, if this is one.
    pub fn broker_error(&self) -> Option<&BrokerError> {
        match self {
            Self::Broker(error) => Some(error),
            _ => None,
        }
    }
}

/// Why the acknowledgements of one partition failed, as reported by a commit.
///
/// The acknowledgements of a partition are applied all together or not at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AckError {
    /// INVALID_RECORD_STATE (121): a record was not acquired by this member any more, most
    /// often because its acquisition lock expired. Nothing of the partition was acknowledged;
    /// the records are (or will be) delivered again. Not retried.
    #[error("acknowledgement refused with INVALID_RECORD_STATE: {detail}")]
    InvalidRecordState {
        /// Which record and why.
        detail: String,
    },
    /// Another error code from the broker.
    #[error("acknowledgement refused with broker error code {code}")]
    Broker {
        /// The Kafka error code.
        code: i16,
        /// The broker's error message, if it sent one.
        message: Option<String>,
    },
    /// No answer arrived before the commit deadline.
    #[error("acknowledgement timed out")]
    Timeout,
}

impl AckError {
    /// True when the acknowledgement failed because the record's acquisition lock was lost.
    pub fn is_lock_lost(&self) -> bool {
        matches!(self, Self::InvalidRecordState { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_garbled_response_is_retriable_and_keeps_its_cause() {
        let error = ConsumerError::Protocol(ProtocolError::Garbled {
            broker: "k1:9092".to_owned(),
            api: "ShareFetch",
            source: "cannot decode the ShareFetch v1 response: unexpected end".into(),
        });
        assert!(error.is_retriable());
        assert_eq!(
            error.to_string(),
            "broker k1:9092 sent a ShareFetch response that could not be decoded; the \
             connection was closed"
        );
        let cause = std::error::Error::source(&error).expect("the decode error");
        assert!(cause.to_string().contains("unexpected end"), "{cause}");
        let refused = ConsumerError::Connection(ConnectionError::Authentication {
            broker: "k1:9093".to_owned(),
            reason: "SASL PLAIN: Authentication failed: Invalid username or password".to_owned(),
        });
        assert!(!refused.is_retriable());
        assert_eq!(
            refused.to_string(),
            "authentication with broker k1:9093 failed: SASL PLAIN: Authentication failed: \
             Invalid username or password"
        );
        let malformed = ConsumerError::Protocol(ProtocolError::Malformed {
            broker: "k1:9092".to_owned(),
            reason: "cannot encode".to_owned(),
        });
        assert!(!malformed.is_retriable());
    }
}
