//! [`Addresses`]: where a client makes its cluster-wide connection (Metadata,
//! FindCoordinator, the admin calls) when it has to make it again.
//!
//! Java's clients use `bootstrap.servers` only until the first Metadata answer, and any
//! broker that answer named after. Here, a reconnect tries the brokers of the last Metadata
//! answer first, then the bootstrap servers not among them: a bootstrap server that goes
//! away leaves the client the rest of the cluster, and a cluster that moved entirely (every
//! broker the client knew gone) is found again through the bootstrap servers.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use tracing::debug;

use crate::kafka::error::ClientError;
use crate::kafka::net::backoff::random_unit;
use crate::kafka::net::connection::{Connection, ConnectionConfig};

/// The most brokers of one answer kept to reconnect to: a reconnect needs one that answers,
/// and a hostile answer naming millions must not cost a long list and a connect to each.
const MAX_KEPT: usize = 64;

/// The bootstrap servers and the brokers of the last Metadata answer, shared by the
/// connections of one client that reconnect on their own (the share consumer's group-config
/// and lag readers connect where its cluster-wide connection would).
#[derive(Debug, Clone)]
pub(crate) struct Addresses {
    inner: Arc<Mutex<Known>>,
}

/// What [`Addresses`] holds.
#[derive(Debug)]
struct Known {
    /// The application's `bootstrap.servers`, comma-separated.
    bootstrap: String,
    /// `host:port` of brokers of the last Metadata answer (at most [`MAX_KEPT`]), starting
    /// at a random one, so that the clients of one cluster do not all reconnect to the same
    /// broker.
    brokers: Vec<String>,
}

impl Addresses {
    /// Only the bootstrap servers (comma-separated `host:port`), until [`learn`](Self::learn).
    pub(crate) fn new(bootstrap: impl Into<String>) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Known {
                bootstrap: bootstrap.into(),
                brokers: Vec::new(),
            })),
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The brokers of the last answer, comma-separated (empty before any).
    fn learned(&self) -> String {
        self.known().brokers.join(",")
    }

    /// The bootstrap servers that are not among the brokers of the last answer.
    fn bootstrap_rest(&self) -> String {
        let known = self.known();
        known
            .bootstrap
            .split(',')
            .map(str::trim)
            .filter(|server| !server.is_empty() && !known.brokers.iter().any(|b| b == server))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Every address to try, in order, comma-separated: the brokers of the last answer, then
    /// the other bootstrap servers (for a client that connects through a list in one go).
    pub(crate) fn current(&self) -> String {
        let learned = self.learned();
        let rest = self.bootstrap_rest();
        match (learned.is_empty(), rest.is_empty()) {
            (true, _) => rest,
            (false, true) => learned,
            (false, false) => format!("{learned},{rest}"),
        }
    }

    /// Keeps the brokers of a Metadata answer (their `host:port`) in place of those of the
    /// previous answer. An answer that names no usable broker changes nothing; one that names
    /// more than [`MAX_KEPT`] has only the first of them kept.
    pub(crate) fn learn<'a>(&self, brokers: impl IntoIterator<Item = &'a String>) {
        let mut seen = HashSet::new();
        let mut fresh: Vec<String> = Vec::new();
        for broker in brokers {
            if fresh.len() == MAX_KEPT {
                break;
            }
            // A list entry holds one address: an empty one, or one that would split, is not.
            let usable = !broker.is_empty() && !broker.contains([',', ' ']);
            if usable && seen.insert(broker.as_str()) {
                fresh.push(broker.clone());
            }
        }
        if fresh.is_empty() {
            return;
        }
        let len = fresh.len();
        // `random_unit` is in [0, 1]: the product is below `len` but for exactly 1.
        let start = ((random_unit() * len as f64) as usize).min(len - 1);
        fresh.rotate_left(start);
        self.known().brokers = fresh;
    }

    /// A connection to the first broker of the last answer that takes one, else to the first
    /// other bootstrap server that does (addresses whose last attempt failed are tried last:
    /// [`Connection::connect_any`]). A broker of the answer that refuses (credentials, or a
    /// certificate not valid for the name it advertises) is passed over for the bootstrap
    /// servers, which the application chose; a bootstrap server's refusal ends the attempt.
    ///
    /// # Errors
    ///
    /// The bootstrap servers' error, or the brokers' when every bootstrap server is among
    /// them.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a connection made so far closes when the future is dropped.
    pub(crate) async fn connect(
        &self,
        config: &ConnectionConfig,
    ) -> Result<Connection, ClientError> {
        let learned = self.learned();
        if learned.is_empty() {
            // As the application wrote it: a list with no address is its error to fix.
            let bootstrap = self.known().bootstrap.clone();
            return Connection::connect_any(&bootstrap, config).await;
        }
        let rest = self.bootstrap_rest();
        match Connection::connect_any(&learned, config).await {
            Ok(connection) => Ok(connection),
            Err(error) if rest.is_empty() => Err(error),
            Err(error) => {
                debug!(%error, bootstrap = rest, "no known broker took a connection; trying the bootstrap servers");
                Connection::connect_any(&rest, config).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brokers(list: &[&str]) -> Vec<String> {
        list.iter().map(|b| (*b).to_owned()).collect()
    }

    /// The learned brokers, whatever rotation `learn` chose, in sorted order.
    fn learned_sorted(addresses: &Addresses) -> Vec<String> {
        let mut list: Vec<String> = addresses
            .learned()
            .split(',')
            .filter(|a| !a.is_empty())
            .map(str::to_owned)
            .collect();
        list.sort();
        list
    }

    #[test]
    fn the_bootstrap_servers_alone_until_an_answer_names_brokers() {
        let addresses = Addresses::new(" a:1 , b:2 ,");
        assert_eq!(addresses.current(), "a:1,b:2");
        addresses.learn(&brokers(&[]));
        addresses.learn(&brokers(&["", "x:1,y:2", "z :3"]));
        assert_eq!(addresses.current(), "a:1,b:2");
    }

    #[test]
    fn the_last_answers_brokers_come_first_then_the_other_bootstrap_servers() {
        let addresses = Addresses::new("a:1,b:2");
        addresses.learn(&brokers(&["b:2", "c:3", "c:3"]));
        assert_eq!(learned_sorted(&addresses), ["b:2", "c:3"]);
        assert!(
            addresses.current().ends_with(",a:1"),
            "{}",
            addresses.current()
        );
        // A later answer replaces the brokers; the bootstrap servers stay the fallback.
        addresses.learn(&brokers(&["d:4"]));
        assert_eq!(addresses.current(), "d:4,a:1,b:2");
        // Clones share what is learned.
        let shared = addresses.clone();
        shared.learn(&brokers(&["a:1"]));
        assert_eq!(addresses.current(), "a:1,b:2");
    }

    #[test]
    fn a_flood_of_brokers_keeps_a_bounded_list() {
        let flood: Vec<String> = (0..100_000).map(|i| format!("h{i}:9092")).collect();
        let addresses = Addresses::new("a:1");
        addresses.learn(&flood);
        let kept = learned_sorted(&addresses);
        assert_eq!(kept.len(), MAX_KEPT);
        assert!(kept.iter().all(|b| flood[..MAX_KEPT].contains(b)));
    }
}
