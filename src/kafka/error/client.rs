//! [`ClientError`]: what the layers below the public clients return, and the cause the
//! producer, the admin client and the dead-letter queue carry.

use std::time::Duration;

use super::{BrokerError, ConnectionError, ProtocolError};
use crate::consumer::ConsumerError;

/// Why a request to the Kafka cluster failed, by layer: the connection
/// ([`ClientError::Connection`]), the broker's error code ([`ClientError::Broker`]), an
/// answer that could not be used ([`ClientError::Protocol`]), no answer in time
/// ([`ClientError::Timeout`]) or a setting that cannot work with this cluster
/// ([`ClientError::Config`]).
///
/// Every client of the crate meets these causes in the same code (the connection and
/// cluster layers) and reports them once, in its own error:
/// [`ConsumerError`] has a variant of the same name for each (the share consumer and the
/// log reader); [`ProducerError`](crate::producer::ProducerError),
/// [`AdminError`](crate::AdminError) and [`DeadLetterError`](crate::DeadLetterError) carry
/// the `ClientError` as the [`source`](std::error::Error::source) of theirs
/// ([`ProducerError::client_error`](crate::producer::ProducerError::client_error) returns
/// it). Which variant each client gives for which cause is the table on
/// [`ConsumerError::Connection`].
///
/// ```
/// use std::time::Duration;
/// use kafka_share_sink::ClientError;
///
/// let error = ClientError::Timeout(Duration::from_secs(30));
/// assert!(error.is_retriable());
/// assert!(!error.is_authentication());
/// assert!(error.broker_error().is_none());
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// See [`ConsumerError::Connection`].
    #[error(transparent)]
    Connection(#[from] ConnectionError),
    /// See [`ConsumerError::Broker`].
    #[error(transparent)]
    Broker(#[from] BrokerError),
    /// See [`ConsumerError::Protocol`].
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// The request (or the connection it needed) did not finish within this long.
    #[error("the request did not finish within {0:?}")]
    Timeout(Duration),
    /// A setting that cannot work with this cluster (a TLS server name from a bad address,
    /// a listener of another security protocol). See [`ConsumerError::Config`].
    #[error("invalid client config `{key}`: {reason}")]
    Config {
        /// The config key.
        key: String,
        /// What is wrong and what is expected.
        reason: String,
    },
}

impl ClientError {
    /// True when the same request may succeed later without any change by the caller: no
    /// answer in time, a lost connection, a garbled answer, or a broker error code Kafka
    /// classes as retriable (a coordinator or leader that moved, for one).
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Timeout(_) => true,
            Self::Connection(error) => error.is_retriable(),
            Self::Broker(error) => error.is_retriable(),
            Self::Protocol(error) => error.is_retriable(),
            Self::Config { .. } => false,
        }
    }

    /// True when TLS or SASL refused a connection ([`ConnectionError::Authentication`]).
    pub fn is_authentication(&self) -> bool {
        matches!(self, Self::Connection(error) if error.is_authentication())
    }

    /// The broker's error code answer ([`ClientError::Broker`]), if this is one.
    pub fn broker_error(&self) -> Option<&BrokerError> {
        match self {
            Self::Broker(error) => Some(error),
            _ => None,
        }
    }

    /// The cluster's cause inside a consumer's error (its variants of the same names), or
    /// the consumer's error back when it is one of the consumer's own (closed, a record not
    /// in the batch, ...).
    #[cfg(feature = "exactly-once")]
    pub(crate) fn from_consumer(error: ConsumerError) -> Result<Self, ConsumerError> {
        match error {
            ConsumerError::Connection(error) => Ok(Self::Connection(error)),
            ConsumerError::Broker(error) => Ok(Self::Broker(error)),
            ConsumerError::Protocol(error) => Ok(Self::Protocol(error)),
            ConsumerError::Timeout(timeout) => Ok(Self::Timeout(timeout)),
            ConsumerError::Config { key, reason } => Ok(Self::Config { key, reason }),
            other => Err(other),
        }
    }

    /// A copy of a broker's error code answer ([`ClientError::Broker`]); `None` for the
    /// other variants, whose sources cannot be copied.
    pub(crate) fn duplicate_broker_error(&self) -> Option<ClientError> {
        self.broker_error().cloned().map(Self::Broker)
    }
}

impl From<ClientError> for ConsumerError {
    fn from(error: ClientError) -> Self {
        match error {
            ClientError::Connection(error) => Self::Connection(error),
            ClientError::Broker(error) => Self::Broker(error),
            ClientError::Protocol(error) => Self::Protocol(error),
            ClientError::Timeout(timeout) => Self::Timeout(timeout),
            ClientError::Config { key, reason } => Self::Config { key, reason },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "exactly-once")]
    fn a_consumer_error_gives_back_the_cause_or_itself() {
        let broker = ConsumerError::Broker(BrokerError::from_code("Produce", 29, None).unwrap());
        assert!(matches!(
            ClientError::from_consumer(broker),
            Ok(ClientError::Broker(BrokerError { code: 29, .. }))
        ));
        let timeout = ConsumerError::Timeout(Duration::from_secs(2));
        assert!(matches!(
            ClientError::from_consumer(timeout),
            Ok(ClientError::Timeout(t)) if t == Duration::from_secs(2)
        ));
        assert!(matches!(
            ClientError::from_consumer(ConsumerError::Closed),
            Err(ConsumerError::Closed)
        ));
    }

    #[test]
    fn each_cause_becomes_the_consumer_variant_of_the_same_name() {
        let io = ClientError::Connection(ConnectionError::Io {
            broker: "k1:9092".to_owned(),
            source: std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset"),
        });
        assert!(io.is_retriable());
        assert!(matches!(
            ConsumerError::from(io),
            ConsumerError::Connection(ConnectionError::Io { .. })
        ));
        let refused = ClientError::Connection(ConnectionError::Authentication {
            broker: "k1:9092".to_owned(),
            reason: "bad password".to_owned(),
        });
        assert!(!refused.is_retriable());
        assert!(ConsumerError::from(refused).is_authentication());
        let broker = ClientError::Broker(BrokerError::from_code("Produce", 29, None).unwrap());
        assert!(!broker.is_retriable());
        assert_eq!(
            ConsumerError::from(broker).broker_error().map(|b| b.code),
            Some(29)
        );
        let timeout = ClientError::Timeout(Duration::from_secs(3));
        assert!(timeout.is_retriable());
        assert!(matches!(
            ConsumerError::from(timeout),
            ConsumerError::Timeout(t) if t == Duration::from_secs(3)
        ));
        let config = ClientError::Config {
            key: "bootstrap.servers".to_owned(),
            reason: "no host".to_owned(),
        };
        assert!(!config.is_retriable());
        assert!(matches!(
            ConsumerError::from(config),
            ConsumerError::Config { key, .. } if key == "bootstrap.servers"
        ));
    }
}
