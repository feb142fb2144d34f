//! The connection for cluster-wide requests (Metadata, FindCoordinator, the admin client's
//! calls), reopened whenever the broker has closed it (brokers close idle connections) through
//! the cluster's [`Addresses`]: the brokers the last Metadata answer named, then the bootstrap
//! servers. The one inside [`ClusterLink`](crate::kafka::cluster::link::ClusterLink).

use std::sync::Mutex;

use crate::kafka::error::ClientError;
use crate::kafka::net::addresses::Addresses;
use crate::kafka::net::connection::{Connection, ConnectionConfig};

/// A lazily reopened connection to any broker of the cluster's [`Addresses`]: the share
/// consumer's, the admin client's, the producer's, the log reader's and the dead-letter
/// queue's, through their [`ClusterLink`](crate::kafka::cluster::link::ClusterLink)s.
#[derive(Debug)]
pub(crate) struct Bootstrap {
    addresses: Addresses,
    config: ConnectionConfig,
    current: Mutex<Option<Connection>>,
    /// Held while a new connection is made, so that callers who find the connection closed
    /// at the same time make one between them, not one each.
    connecting: tokio::sync::Mutex<()>,
}

impl Bootstrap {
    /// Connects to the first bootstrap server that answers.
    #[cfg(test)]
    pub(crate) async fn connect(
        servers: &str,
        config: ConnectionConfig,
    ) -> Result<Self, ClientError> {
        let addresses = Addresses::new(servers);
        let connection = addresses.connect(&config).await?;
        Ok(Self::adopt(addresses, config, connection))
    }

    /// Keeps `connection`, already made, and reopens through `addresses` when it closes.
    pub(crate) fn adopt(
        addresses: Addresses,
        config: ConnectionConfig,
        connection: Connection,
    ) -> Self {
        Self {
            addresses,
            config,
            current: Mutex::new(Some(connection)),
            connecting: tokio::sync::Mutex::new(()),
        }
    }

    /// The addresses a new connection is made to.
    pub(crate) fn addresses(&self) -> &Addresses {
        &self.addresses
    }

    /// Takes the current connection out, if there is one.
    fn take(&self) -> Option<Connection> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// The settings new connections use.
    pub(crate) fn config(&self) -> &ConnectionConfig {
        &self.config
    }

    /// Closes the current connection; a later [`get`](Self::get) opens a new one.
    pub(crate) fn close(&self) {
        if let Some(connection) = self.take() {
            connection.close();
        }
    }

    /// A live connection: the current one, or a new one if it closed or a request on it timed
    /// out ([`Connection::is_reusable`]; one connect at a time: a caller that waited for
    /// another's uses its connection).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a connect dropped half-way leaves the slot as it was.
    pub(crate) async fn get(&self) -> Result<Connection, ClientError> {
        if let Some(live) = self.live() {
            return Ok(live);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(live) = self.live() {
            return Ok(live);
        }
        let fresh = self.addresses.connect(&self.config).await?;
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(fresh.clone());
        Ok(fresh)
    }

    /// The current connection, if it is open and takes new requests.
    fn live(&self) -> Option<Connection> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(Connection::is_reusable)
    }
}
