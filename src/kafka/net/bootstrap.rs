//! The connection for cluster-wide requests (Metadata, FindCoordinator, the admin client's
//! calls), reopened through the bootstrap list whenever the broker has closed it (brokers
//! close idle connections).

use std::sync::Mutex;

use crate::kafka::error::ClientError;
use crate::kafka::net::connection::{Connection, ConnectionConfig};

/// A lazily reopened connection to any bootstrap broker: the consumer's (shared with its
/// heartbeat task) and the admin client's.
#[derive(Debug)]
pub(crate) struct Bootstrap {
    servers: String,
    config: ConnectionConfig,
    current: Mutex<Option<Connection>>,
}

impl Bootstrap {
    /// Connects to the first bootstrap server that answers.
    pub(crate) async fn connect(
        servers: &str,
        config: ConnectionConfig,
    ) -> Result<Self, ClientError> {
        let connection = Connection::connect_any(servers, &config).await?;
        Ok(Self {
            servers: servers.to_owned(),
            config,
            current: Mutex::new(Some(connection)),
        })
    }

    /// Keeps `connection`, already made, and reopens through `servers` when it closes.
    pub(crate) fn adopt(servers: String, config: ConnectionConfig, connection: Connection) -> Self {
        Self {
            servers,
            config,
            current: Mutex::new(Some(connection)),
        }
    }

    /// The addresses a new connection is made to, comma-separated.
    pub(crate) fn servers(&self) -> &str {
        &self.servers
    }

    /// Forgets the current connection without closing it (requests under way on it go on);
    /// a later [`get`](Self::get) opens a new one. For a connection whose request timed out:
    /// the broker answers in order, so later requests would wait behind that answer.
    pub(crate) fn forget(&self) {
        drop(self.take());
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

    /// A live connection: the current one, or a new one if it was closed.
    pub(crate) async fn get(&self) -> Result<Connection, ClientError> {
        let current = self
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(c) = current.filter(|c| !c.is_closed()) {
            return Ok(c);
        }
        let fresh = Connection::connect_any(&self.servers, &self.config).await?;
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(fresh.clone());
        Ok(fresh)
    }
}
