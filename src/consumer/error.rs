//! Errors of share consumers and of acknowledgements.

use std::time::Duration;

use crate::error::BoxError;
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
    /// No connection to a broker could be made or kept.
    #[error("connection to broker {broker} failed")]
    Connection {
        /// The broker address.
        broker: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Authentication failed, and trying again with the same settings fails the same way:
    /// the broker refused the SASL credentials (wrong password, unknown user, expired
    /// token, mechanism not enabled on the listener) or the client certificate, or this
    /// client refused the broker's certificate (untrusted issuer, expired, issued for
    /// another host). Not retriable: change the settings.
    ///
    /// # One cause, one answer
    ///
    /// Every public client classifies a refused credential as an authentication failure,
    /// whichever connection meets it (bootstrap, coordinator, leader) and whenever (when
    /// connecting, or when an open connection authenticates again under KIP-368):
    ///
    /// | Cause | [`KafkaShareConsumer`](crate::KafkaShareConsumer) (`connect`, `poll`, `commit_sync`) | [`KafkaProducer`](crate::producer::KafkaProducer) | [`KafkaAdmin`](crate::KafkaAdmin) | [`KafkaLogReader`](crate::producer::KafkaLogReader) |
    /// |---|---|---|---|---|
    /// | SASL credentials refused (wrong or changed password, unknown or removed user) | `ConsumerError::Authentication` | [`ProducerError::Authentication`](crate::producer::ProducerError::Authentication) | [`AdminError::Authentication`](crate::AdminError::Authentication) | `ConsumerError::Authentication` |
    /// | OAUTHBEARER token refused (expired, invalid), or the token provider failed | `ConsumerError::Authentication` | `ProducerError::Authentication` | `AdminError::Authentication` | `ConsumerError::Authentication` |
    /// | SASL mechanism not enabled on the listener, or no SASL there | `ConsumerError::Authentication` | `ProducerError::Authentication` | `AdminError::Authentication` | `ConsumerError::Authentication` |
    /// | Client certificate missing, or from a CA the broker does not trust (TLS alert, in the handshake or on the first read) | `ConsumerError::Authentication` | `ProducerError::Authentication` | `AdminError::Authentication` | `ConsumerError::Authentication` |
    /// | Broker certificate refused by this client (unknown issuer, expired, another host) | `ConsumerError::Authentication` | `ProducerError::Authentication` | `AdminError::Authentication` | `ConsumerError::Authentication` |
    ///
    /// The producer's and the admin client's variants carry this error as their
    /// [`source`](std::error::Error::source). The driver returns it as
    /// [`Error::Consumer`](crate::Error::Consumer) and stops; the dead-letter queue as
    /// [`DeadLetterError::Kafka`](crate::DeadLetterError::Kafka) or
    /// [`DeadLetterError::Producer`](crate::DeadLetterError::Producer) with it as the cause.
    /// Not authentication failures: a listener of another security protocol
    /// ([`ConsumerError::Config`] naming `security.protocol`, or
    /// [`ConsumerError::Connection`] with a hint), and a broker that cannot be reached
    /// ([`ConsumerError::Connection`], retriable).
    #[error("authentication with broker {broker} failed: {reason}")]
    Authentication {
        /// The broker address.
        broker: String,
        /// What was refused, and what to do about it. Never a secret.
        reason: String,
    },
    /// A broker answered with an error code.
    #[error("broker answered {api} with error {code} ({name}){}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Broker {
        /// The request, e.g. `ShareGroupHeartbeat`.
        api: &'static str,
        /// The Kafka error code.
        code: i16,
        /// The error code's name, e.g. `GROUP_AUTHORIZATION_FAILED`.
        name: &'static str,
        /// The broker's error message, if any.
        message: Option<String>,
        /// Whether Kafka classes the code as retriable.
        retriable: bool,
    },
    /// A broker sent something that makes no sense, or a request could not be encoded.
    /// Not retriable: the same exchange would fail the same way.
    #[error("malformed answer from broker {broker}: {reason}")]
    Protocol {
        /// The broker address.
        broker: String,
        /// What was wrong.
        reason: String,
    },
    /// A broker's response could not be decoded (its frame, header or body), so the bytes
    /// on its connection can no longer be trusted to line up: that connection was closed,
    /// failing the requests waiting on it. Retriable: the next call connects again, as after
    /// a dropped connection.
    #[error(
        "broker {broker} sent a {api} response that could not be decoded; the connection was closed"
    )]
    Garbled {
        /// The broker address.
        broker: String,
        /// The request the response answered, e.g. `ShareFetch`.
        api: &'static str,
        /// What could not be decoded, and why.
        #[source]
        source: BoxError,
    },
    /// The broker lacks an API the share consumer needs.
    #[error(
        "broker {broker} does not support {api} {wanted}: share groups need Apache Kafka 4.1 or \
         later with share groups enabled (share.version feature >= 1)"
    )]
    Unsupported {
        /// The broker address.
        broker: String,
        /// The missing API.
        api: &'static str,
        /// The versions needed.
        wanted: String,
    },
}

impl ConsumerError {
    /// True when the same call may succeed later without any change by the caller: a
    /// timeout, a lost connection, a garbled response, or a broker error code Kafka classes
    /// as retriable (a coordinator or leader that moved, for one).
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Timeout(_) | Self::Connection { .. } | Self::Garbled { .. } => true,
            Self::Broker { retriable, .. } => *retriable,
            _ => false,
        }
    }

    /// A copy of a broker's error code answer ([`ConsumerError::Broker`]); `None` for the
    /// other variants, whose sources cannot be copied.
    pub(crate) fn duplicate_broker_error(&self) -> Option<ConsumerError> {
        match self {
            Self::Broker {
                api,
                code,
                name,
                message,
                retriable,
            } => Some(Self::Broker {
                api,
                code: *code,
                name,
                message: message.clone(),
                retriable: *retriable,
            }),
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
        let error = ConsumerError::Garbled {
            broker: "k1:9092".to_owned(),
            api: "ShareFetch",
            source: "cannot decode the ShareFetch v1 response: unexpected end".into(),
        };
        assert!(error.is_retriable());
        assert_eq!(
            error.to_string(),
            "broker k1:9092 sent a ShareFetch response that could not be decoded; the \
             connection was closed"
        );
        let cause = std::error::Error::source(&error).expect("the decode error");
        assert!(cause.to_string().contains("unexpected end"), "{cause}");
        let refused = ConsumerError::Authentication {
            broker: "k1:9093".to_owned(),
            reason: "SASL PLAIN: Authentication failed: Invalid username or password".to_owned(),
        };
        assert!(!refused.is_retriable());
        assert_eq!(
            refused.to_string(),
            "authentication with broker k1:9093 failed: SASL PLAIN: Authentication failed: \
             Invalid username or password"
        );
        let malformed = ConsumerError::Protocol {
            broker: "k1:9092".to_owned(),
            reason: "cannot encode".to_owned(),
        };
        assert!(!malformed.is_retriable());
    }
}
