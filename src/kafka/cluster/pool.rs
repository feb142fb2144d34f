//! Connections to the brokers of a cluster by node id, made on demand from the addresses the
//! last Metadata answer gave: the leader connections of the producer, the log reader and the
//! share consumer's fetch engine (each client its own pool: the engine's connections carry its
//! share sessions, which no other client may use).
//!
//! Every connection is made with [`Connection::connect`], so it waits its turn at the client's
//! reconnect backoff ([`backoff`](crate::kafka::net::backoff)) after a failed attempt to the
//! same broker.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::kafka::error::ClientError;
use crate::kafka::error::codes::leader_not_available;
use crate::kafka::net::connection::{Connection, ConnectionConfig};

/// The brokers' addresses and the open connections to them.
#[derive(Debug)]
pub(crate) struct BrokerPool {
    config: ConnectionConfig,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// `host:port` of each broker, by node id, from the last Metadata answer.
    addresses: HashMap<i32, String>,
    /// Connections by node id; one closed or with an overdue answer
    /// ([`Connection::is_reusable`]) is replaced when [`BrokerPool::open`] is next asked
    /// for it (the fetch engine gives up its connections itself, with
    /// [`BrokerPool::take_closed`] and [`BrokerPool::forget`]).
    connections: HashMap<i32, Connection>,
}

impl BrokerPool {
    /// An empty pool whose connections use `config`.
    pub(crate) fn new(config: ConnectionConfig) -> Self {
        Self {
            config,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The settings of the pool's connections.
    pub(crate) fn config(&self) -> &ConnectionConfig {
        &self.config
    }

    /// Takes in the brokers of a Metadata answer, by node id: they are the cluster's brokers
    /// now. Open connections stay (one to a broker that left closes by itself).
    pub(crate) fn learn<'a>(&self, brokers: impl IntoIterator<Item = (&'a i32, &'a String)>) {
        self.lock().addresses = brokers
            .into_iter()
            .map(|(node, address)| (*node, address.clone()))
            .collect();
    }

    /// Whether a connection to broker `node` is in the pool, usable or not.
    pub(crate) fn holds(&self, node: i32) -> bool {
        self.lock().connections.contains_key(&node)
    }

    /// The brokers the pool holds a connection to, usable or not.
    pub(crate) fn nodes(&self) -> BTreeSet<i32> {
        self.lock().connections.keys().copied().collect()
    }

    /// The connection to broker `node`, usable or not: for a caller that tells a closed
    /// connection from an overdue answer itself.
    pub(crate) fn get(&self, node: i32) -> Option<Connection> {
        self.lock().connections.get(&node).cloned()
    }

    /// Takes the connection to broker `node` out of the pool; the next [`open`](Self::open)
    /// makes a new one.
    pub(crate) fn forget(&self, node: i32) -> Option<Connection> {
        self.lock().connections.remove(&node)
    }

    /// Takes out of the pool every connection the broker (or the network) closed, and says
    /// to which brokers they were.
    pub(crate) fn take_closed(&self) -> Vec<i32> {
        let mut state = self.lock();
        let closed: Vec<i32> = state
            .connections
            .iter()
            .filter(|(_, c)| c.is_closed())
            .map(|(node, _)| *node)
            .collect();
        for node in &closed {
            state.connections.remove(node);
        }
        closed
    }

    /// A live connection to broker `node`, if one is open and takes new requests (no answer on
    /// it is overdue: [`Connection::is_reusable`]).
    pub(crate) fn cached(&self, node: i32) -> Option<Connection> {
        self.lock()
            .connections
            .get(&node)
            .filter(|c| c.is_reusable())
            .cloned()
    }

    /// A live connection to broker `node`: the open one, or a new one if it closed or a
    /// request on it timed out.
    ///
    /// # Errors
    ///
    /// A retriable LEADER_NOT_AVAILABLE [`ClientError::Broker`] when the last answer did not
    /// list the broker (it named it a leader, but the broker stopped or was fenced: a new
    /// leader is on its way, so ask the metadata again); the errors of
    /// [`Connection::connect`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a connection not yet made is dropped with the future.
    pub(crate) async fn open(&self, node: i32) -> Result<Connection, ClientError> {
        let address = {
            let state = self.lock();
            if let Some(c) = state.connections.get(&node).filter(|c| c.is_reusable()) {
                return Ok(c.clone());
            }
            state.addresses.get(&node).cloned()
        };
        let Some(address) = address else {
            return Err(leader_not_available(format!(
                "broker {node} is not among the brokers of the last metadata answer (stopped or \
                 fenced?): it has no address to connect to"
            )));
        };
        let fresh = Connection::connect(&address, &self.config).await?;
        self.lock().connections.insert(node, fresh.clone());
        Ok(fresh)
    }

    /// Takes every connection out of the pool, for the caller to close.
    pub(crate) fn drain(&self) -> Vec<Connection> {
        self.lock().connections.drain().map(|(_, c)| c).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::collections::BTreeMap;

    #[tokio::test]
    async fn a_broker_the_last_answer_did_not_list_is_a_retriable_leader_not_available() {
        let pool = BrokerPool::new(ConnectionConfig::default());
        // A broker just stopped or fenced: the answer drops it before its partitions move.
        let no_address = |error: &ClientError, node: i32| {
            error.is_retriable()
                && matches!(error, ClientError::Broker(b) if b.code == 5
                    && b.message.as_deref().is_some_and(|m| m.starts_with(&format!("broker {node} is not among"))))
        };
        pool.learn(&BTreeMap::from([(1, "127.0.0.1:9".to_owned())]));
        assert!(pool.cached(1).is_none());
        let error = pool.open(3).await.expect_err("no address");
        assert!(no_address(&error, 3), "{error:?}");
        // A later answer is the cluster now: broker 1 is no longer known.
        pool.learn(&BTreeMap::from([(3, "127.0.0.1:9".to_owned())]));
        let error = pool.open(1).await.expect_err("no address");
        assert!(no_address(&error, 1), "{error:?}");
        assert!(pool.nodes().is_empty() && !pool.holds(3) && pool.take_closed().is_empty());
        assert!(pool.drain().is_empty());
    }
}
