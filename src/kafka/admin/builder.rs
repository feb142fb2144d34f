//! [`KafkaAdminBuilder`]: the settings of a [`KafkaAdmin`] and the call that connects it.

use std::sync::Arc;
use std::time::Duration;

use super::{AdminError, KafkaAdmin};
use crate::kafka::net::addresses::Addresses;
use crate::kafka::net::connection::ConnectionConfig;
use crate::kafka::security::{Security, SecurityContext};

/// The longest `client.id` a request header can carry (a string with an `i16` length).
const MAX_CLIENT_ID_BYTES: usize = i16::MAX as usize;

/// Settings of a [`KafkaAdmin`]; [`connect`](Self::connect) makes the client.
///
/// From [`KafkaAdmin::builder`]. The defaults are those of [`KafkaAdmin::connect`].
///
/// ```no_run
/// use std::time::Duration;
/// use kafka_share_sink::KafkaAdmin;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), kafka_share_sink::AdminError> {
/// let admin = KafkaAdmin::builder("broker1:9092,broker2:9092")
///     .connect_timeout(Duration::from_secs(3))
///     .request_timeout(Duration::from_secs(10))
///     .client_id("orders-setup")
///     .connect()
///     .await?;
/// admin.create_topic("orders", 3, 3).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until connect is called"]
pub struct KafkaAdminBuilder {
    bootstrap: String,
    config: ConnectionConfig,
    security: Security,
}

impl KafkaAdminBuilder {
    /// The builder for the comma-separated `host:port` addresses of `bootstrap`.
    pub(super) fn new(bootstrap: String) -> Self {
        Self {
            bootstrap,
            config: ConnectionConfig::default(),
            security: Security::plaintext(),
        }
    }

    /// How long connecting to one broker may take (default 10 s): the TCP connect, and then
    /// separately the ApiVersions handshake. Each address of the bootstrap list gets this long.
    ///
    /// Any duration is accepted: `Duration::MAX` waits as long as the operating system lets a
    /// connect wait, and zero fails every connect at once.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// How long the broker may take to answer one request (default 30 s), Java's
    /// `request.timeout.ms`. A request without an answer in time fails the call with
    /// [`AdminError::Timeout`], which names the call and the request.
    ///
    /// The broker is asked to finish CreateTopics, DeleteTopics, AlterPartitionReassignments
    /// and ElectLeaders within five sixths of it (at most `i32::MAX` ms), so that its own
    /// REQUEST_TIMED_OUT arrives before ours. The waits for the metadata to show a change
    /// (30 s for topics, 60 s for [`KafkaAdmin::move_leader`]) are separate.
    ///
    /// Any duration is accepted: `Duration::MAX` waits for ever, and zero fails every request.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.config.request_timeout = timeout;
        self
    }

    /// The `client.id` sent with every request (default `kafka-share-sink`), which brokers
    /// use in logs, quotas and ACL audit.
    pub fn client_id(mut self, client_id: impl Into<String>) -> Self {
        self.config.client_id = Arc::from(client_id.into());
        self
    }

    /// `security.protocol` with its TLS and SASL settings (default `PLAINTEXT`).
    ///
    /// ```no_run
    /// use kafka_share_sink::{KafkaAdmin, SaslSettings, Security, TlsSettings};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), kafka_share_sink::AdminError> {
    /// let admin = KafkaAdmin::builder("broker1:9096")
    ///     .security(Security::sasl_ssl(
    ///         SaslSettings::plain("alice", "alice-secret"),
    ///         TlsSettings::system_roots(),
    ///     ))
    ///     .connect()
    ///     .await?;
    /// # let _ = admin;
    /// # Ok(())
    /// # }
    /// ```
    pub fn security(mut self, security: Security) -> Self {
        self.security = security;
        self
    }

    /// Connects to the first broker of the bootstrap list that answers and reads the cluster
    /// metadata.
    ///
    /// # Errors
    ///
    /// - [`AdminError::InvalidArgument`] for a bootstrap list without an address, a
    ///   `client.id` longer than 32767 bytes, or security settings that cannot be used (a
    ///   certificate file that cannot be read, say; the message names the Java key);
    /// - [`AdminError::Authentication`], whose source is
    ///   [`ConnectionError::Authentication`](crate::ConnectionError::Authentication), when the
    ///   broker refused the credentials or a certificate was refused (not retriable);
    /// - [`AdminError::Connect`] when no broker answers (its source says why each failed);
    /// - any error of the Metadata call, e.g. [`AdminError::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is changed on the cluster, and a connection made so far is closed
    /// when the future is dropped.
    pub async fn connect(mut self) -> Result<KafkaAdmin, AdminError> {
        const CALL: &str = "connect";
        self.config.security =
            SecurityContext::build(&self.security).map_err(|e| AdminError::InvalidArgument {
                call: CALL,
                reason: format!("`{}`: {}", e.key, e.reason),
            })?;
        if self.config.client_id.len() > MAX_CLIENT_ID_BYTES {
            return Err(AdminError::InvalidArgument {
                call: CALL,
                reason: format!(
                    "the client id has {} bytes, more than a request header can carry ({MAX_CLIENT_ID_BYTES})",
                    self.config.client_id.len()
                ),
            });
        }
        KafkaAdmin::open(Addresses::new(self.bootstrap), self.config)
            .await
            .map_err(|failure| failure.into_admin(CALL))
    }
}
