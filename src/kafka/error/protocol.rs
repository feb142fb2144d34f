//! [`ProtocolError`]: an answer that could not be decoded or used.

use crate::error::BoxError;

/// A broker's answer could not be decoded or used, or the broker lacks an API version.
///
/// The protocol layer of the client's errors (see
/// [`ConsumerError`](crate::ConsumerError) for the table of which client reports it how).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
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
    /// A broker sent something that decodes but makes no sense (a missing partition, an
    /// impossible count), or a request could not be encoded. Not retriable: the same
    /// exchange would fail the same way.
    #[error("malformed answer from broker {broker}: {reason}")]
    Malformed {
        /// The broker address.
        broker: String,
        /// What was wrong.
        reason: String,
    },
    /// The broker lacks an API version the client needs. Not retriable: upgrade the broker
    /// or enable the feature.
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

impl ProtocolError {
    /// The broker that sent the answer.
    pub fn broker(&self) -> &str {
        match self {
            Self::Garbled { broker, .. }
            | Self::Malformed { broker, .. }
            | Self::Unsupported { broker, .. } => broker,
        }
    }

    /// True only for [`ProtocolError::Garbled`]: its connection was closed and a new one
    /// may carry the exchange.
    pub fn is_retriable(&self) -> bool {
        matches!(self, Self::Garbled { .. })
    }
}
