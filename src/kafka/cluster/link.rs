//! [`ClusterLink`]: the connection for cluster-wide requests of the share consumer, the admin
//! client, the producer, the log reader and the dead-letter queue, and their one way to ask
//! Metadata.

use std::future::Future;
use std::time::Duration;

use tracing::debug;

use super::metadata::{self, ANY_VERSION, Snapshot};
use crate::kafka::error::ClientError;
use crate::kafka::net::addresses::Addresses;
use crate::kafka::net::bootstrap::Bootstrap;
use crate::kafka::net::connection::{Connection, ConnectionConfig};

/// A connection to any broker of the cluster. The first is made through the bootstrap
/// servers. It is made again when it closed or a request on it timed out (a broker answers in
/// order: later requests would wait behind the lost answer; Java's clients close such a
/// connection), to the brokers the last Metadata answer named, then the bootstrap servers
/// ([`Addresses`]): a bootstrap server that goes away leaves the client the rest of the
/// cluster.
#[derive(Debug)]
pub(crate) struct ClusterLink {
    bootstrap: Bootstrap,
}

/// Why [`ClusterLink::open`] failed: the clients name the two steps differently.
#[derive(Debug)]
pub(crate) enum OpenFailure {
    /// No bootstrap server could be reached (or the handshake with it failed).
    Connect(ClientError),
    /// The first Metadata request failed.
    Metadata(ClientError),
}

impl From<OpenFailure> for ClientError {
    fn from(failure: OpenFailure) -> Self {
        match failure {
            OpenFailure::Connect(error) | OpenFailure::Metadata(error) => error,
        }
    }
}

impl ClusterLink {
    /// Connects through `addresses` (at first, the bootstrap servers; a list shared with
    /// another client of the same application is used as it stands) and asks the broker for
    /// the cluster's brokers, which later connections try first. Returns that first Metadata
    /// answer too.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a connection made so far closes when the future is dropped.
    pub(crate) async fn open(
        addresses: Addresses,
        config: ConnectionConfig,
    ) -> Result<(Self, Snapshot), OpenFailure> {
        let connection = addresses
            .connect(&config)
            .await
            .map_err(OpenFailure::Connect)?;
        let snapshot = metadata::fetch(&connection, Some(&[]), ANY_VERSION)
            .await
            .map_err(OpenFailure::Metadata)?;
        debug!(
            broker = connection.broker(),
            brokers = snapshot.brokers.len(),
            "connected to the cluster"
        );
        addresses.learn(snapshot.brokers.values());
        let link = Self {
            bootstrap: Bootstrap::adopt(addresses, config, connection),
        };
        Ok((link, snapshot))
    }

    /// Connects to the first server of `servers` that answers, and asks nothing yet: the
    /// share consumer's link, which learns the brokers from its engine's Metadata answers.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a connection made so far closes when the future is dropped.
    pub(crate) async fn connect(
        servers: &str,
        config: ConnectionConfig,
    ) -> Result<Self, ClientError> {
        let addresses = Addresses::new(servers);
        let connection = addresses.connect(&config).await?;
        Ok(Self {
            bootstrap: Bootstrap::adopt(addresses, config, connection),
        })
    }

    /// The addresses a new connection is made to, comma-separated: the brokers of the last
    /// Metadata answer, then the bootstrap servers.
    pub(crate) fn servers(&self) -> String {
        self.bootstrap.addresses().current()
    }

    /// The addresses new connections are made to, shared: what learns of the brokers from its
    /// own Metadata answers (the share consumer's engine) tells the link, and what connects on
    /// its own (the consumer's group-config and lag readers) connects where the link would.
    pub(crate) fn addresses(&self) -> &Addresses {
        self.bootstrap.addresses()
    }

    /// The settings of the connections.
    pub(crate) fn config(&self) -> &ConnectionConfig {
        self.bootstrap.config()
    }

    /// The `timeout_ms` for requests the broker may take long over (CreateTopics,
    /// ElectLeaders, …): five sixths of the request timeout (the default 30 s gives Kafka's
    /// usual 25 s), so that the broker's own REQUEST_TIMED_OUT arrives before ours; at most
    /// `i32::MAX` ms.
    pub(crate) fn broker_timeout_ms(&self) -> i32 {
        broker_timeout_ms(self.config().request_timeout)
    }

    /// A live connection: the current one, or a new one if it closed or an answer on it is
    /// overdue ([`Connection::is_reusable`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (see [`Bootstrap::get`]).
    pub(crate) async fn connection(&self) -> Result<Connection, ClientError> {
        self.bootstrap.get().await
    }

    /// Closes the connection now, as a network failure would (requests waiting on it fail;
    /// the next call connects again).
    pub(crate) fn disconnect(&self) {
        self.bootstrap.close();
    }

    /// Runs `request` on a live connection (while an answer on it is overdue, a request that
    /// timed out, the next call connects again: [`Connection::is_reusable`]).
    ///
    /// # Cancel safety
    ///
    /// As `request`'s; the link stays usable.
    pub(crate) async fn with<T, F, Fut>(&self, request: F) -> Result<T, ClientError>
    where
        F: FnOnce(Connection) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        request(self.connection().await?).await
    }

    /// The Metadata of `topics` (`None`: all topics, `Some(&[])`: none, only the brokers), at
    /// the highest version both sides support.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub(crate) async fn metadata(&self, topics: Option<&[&str]>) -> Result<Snapshot, ClientError> {
        let snapshot = self
            .with(
                |connection| async move { metadata::fetch(&connection, topics, ANY_VERSION).await },
            )
            .await?;
        self.addresses().learn(snapshot.brokers.values());
        Ok(snapshot)
    }
}

/// See [`ClusterLink::broker_timeout_ms`].
fn broker_timeout_ms(request_timeout: Duration) -> i32 {
    let below = request_timeout.saturating_sub(request_timeout / 6);
    i32::try_from(below.as_millis()).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_broker_timeout_stays_below_the_request_timeout_and_saturates() {
        assert_eq!(broker_timeout_ms(Duration::from_secs(30)), 25_000);
        assert_eq!(broker_timeout_ms(Duration::from_millis(600)), 500);
        assert_eq!(broker_timeout_ms(Duration::ZERO), 0);
        assert_eq!(broker_timeout_ms(Duration::MAX), i32::MAX);
    }
}
