//! [`ConnectionError`]: a broker could not be reached, or refused the connection's security.

/// A connection to a broker could not be made or kept, or its security was refused.
///
/// The connection layer of the client's errors (see
/// [`ConsumerError`](crate::ConsumerError) for the table of which client reports it how).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionError {
    /// No connection to a broker could be made or kept: refused, reset, closed, timed out
    /// while connecting, or a TLS handshake that failed for a reason other than a refused
    /// certificate. Retriable: the next call connects again.
    #[error("connection to broker {broker} failed")]
    Io {
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
    #[error("authentication with broker {broker} failed: {reason}")]
    Authentication {
        /// The broker address.
        broker: String,
        /// What was refused, and what to do about it. Never a secret.
        reason: String,
    },
}

impl ConnectionError {
    /// The broker the connection was to.
    pub fn broker(&self) -> &str {
        match self {
            Self::Io { broker, .. } | Self::Authentication { broker, .. } => broker,
        }
    }

    /// True for a connection that may be made on a later try ([`ConnectionError::Io`]);
    /// false for refused security, which needs new settings.
    pub fn is_retriable(&self) -> bool {
        matches!(self, Self::Io { .. })
    }

    /// True when TLS or SASL refused the connection.
    pub fn is_authentication(&self) -> bool {
        matches!(self, Self::Authentication { .. })
    }
}
