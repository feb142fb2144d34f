//! [`ClientError`]: what the layers below the public clients return.

use std::time::Duration;

use super::{BrokerError, ConnectionError, ProtocolError};
use crate::consumer::ConsumerError;

/// What a request to the cluster can end in, below any public client: the error of the
/// connection layer (`kafka::net`), the cluster layer (`kafka::cluster`) and the clients'
/// own request code. It holds the three causes of [the module](super) and the two ways a
/// request ends without one of them (a deadline, a setting that cannot work).
///
/// Each public client maps it once, where it leaves the crate's internals: the share
/// consumer and the log reader into [`ConsumerError`] (`From`, variant for variant), the
/// producer into `ProducerError::Kafka`, the admin client into `AdminError` (by cause, see
/// `kafka::admin::error`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
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
    /// a listener of another security protocol).
    #[error("invalid client config `{key}`: {reason}")]
    Config {
        /// The config key.
        key: String,
        /// What is wrong and what is expected.
        reason: String,
    },
}

impl ClientError {
    /// As [`ConsumerError::is_retriable`].
    pub(crate) fn is_retriable(&self) -> bool {
        match self {
            Self::Timeout(_) => true,
            Self::Connection(error) => error.is_retriable(),
            Self::Broker(error) => error.is_retriable(),
            Self::Protocol(error) => error.is_retriable(),
            Self::Config { .. } => false,
        }
    }
}

#[cfg(test)]
impl ClientError {
    /// True when TLS or SASL refused a connection.
    pub(crate) fn is_authentication(&self) -> bool {
        matches!(self, Self::Connection(error) if error.is_authentication())
    }

    /// The broker's error code answer, if this is one.
    pub(crate) fn broker_error(&self) -> Option<&BrokerError> {
        match self {
            Self::Broker(error) => Some(error),
            _ => None,
        }
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
