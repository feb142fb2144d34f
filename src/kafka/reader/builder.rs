//! [`KafkaLogReaderBuilder`]: the settings of a [`KafkaLogReader`] and the call that connects it.

use std::sync::Arc;
use std::time::Duration;

use super::KafkaLogReader;
use crate::consumer::ConsumerError;
use crate::kafka::net::connection::ConnectionConfig;
use crate::kafka::security::{Security, SecurityContext};

/// The longest `client.id` a request header can carry (a string with an `i16` length).
const MAX_CLIENT_ID_BYTES: usize = i16::MAX as usize;
/// The default `max_bytes` of a Fetch: 8 MiB.
const DEFAULT_MAX_BYTES: usize = 8 << 20;
/// The largest `max_bytes` accepted: 64 MiB, well below the 100 MiB frame limit of a
/// connection (a broker may add one batch beyond `max_bytes`, up to `message.max.bytes`).
const MAX_MAX_BYTES: usize = 64 << 20;

/// Settings of a [`KafkaLogReader`]; [`connect`](Self::connect) makes the reader.
///
/// ```no_run
/// use std::time::Duration;
/// use kafka_share_sink::Security;
/// use kafka_share_sink::producer::KafkaLogReader;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), kafka_share_sink::ConsumerError> {
/// let reader = KafkaLogReader::builder("broker1:9092,broker2:9092")
///     .client_id("orders-ledger")
///     .security(Security::plaintext())
///     .request_timeout(Duration::from_secs(10))
///     .max_bytes(1 << 20)
///     .connect()
///     .await?;
/// # let _ = reader;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until connect is called"]
pub struct KafkaLogReaderBuilder {
    bootstrap: String,
    config: ConnectionConfig,
    security: Security,
    max_bytes: usize,
}

impl KafkaLogReaderBuilder {
    /// The builder for the comma-separated `host:port` addresses of `bootstrap`.
    pub(super) fn new(bootstrap: String) -> Self {
        Self {
            bootstrap,
            config: ConnectionConfig::default(),
            security: Security::plaintext(),
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }

    /// How long connecting to one broker may take (default 10 s): the TCP connect, and then
    /// separately the ApiVersions handshake.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// How long a broker may take to answer one request (default 30 s), on top of the
    /// `max_wait` a read lets the broker wait for records. A request without an answer in
    /// time is tried again on a new connection.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.config.request_timeout = timeout;
        self
    }

    /// The `client.id` sent with every request (default `kafka-share-sink`).
    pub fn client_id(mut self, client_id: impl Into<String>) -> Self {
        self.config.client_id = Arc::from(client_id.into());
        self
    }

    /// `security.protocol` with its TLS and SASL settings (default `PLAINTEXT`).
    pub fn security(mut self, security: Security) -> Self {
        self.security = security;
        self
    }

    /// The most bytes of records one read asks for (default 8 MiB, at most 64 MiB; 0 counts
    /// as 1). The broker sends a first batch larger than this whole, so a read always makes
    /// progress.
    pub fn max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes.clamp(1, MAX_MAX_BYTES);
        self
    }

    /// Connects to the first broker of the bootstrap list that answers and reads the cluster
    /// metadata.
    ///
    /// # Errors
    ///
    /// - [`ConsumerError::Config`] for a `client.id` longer than 32767 bytes or security
    ///   settings that cannot be used (the key names the Java setting);
    /// - [`ConnectionError::Authentication`](crate::ConnectionError::Authentication) when credentials or certificates were refused;
    /// - [`ConsumerError::Connection`] when no broker answers, and the errors of Metadata.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a connection made so far is closed when the future is dropped.
    pub async fn connect(mut self) -> Result<KafkaLogReader, ConsumerError> {
        self.config.security =
            SecurityContext::build(&self.security).map_err(|e| ConsumerError::Config {
                key: e.key.to_owned(),
                reason: e.reason,
            })?;
        if self.config.client_id.len() > MAX_CLIENT_ID_BYTES {
            return Err(ConsumerError::Config {
                key: "client.id".to_owned(),
                reason: format!(
                    "{} bytes, more than a request header can carry ({MAX_CLIENT_ID_BYTES})",
                    self.config.client_id.len()
                ),
            });
        }
        let max_bytes = i32::try_from(self.max_bytes).unwrap_or(i32::MAX);
        KafkaLogReader::open(&self.bootstrap, self.config, max_bytes).await
    }
}
