//! [`Addresses`]: where a client makes its cluster-wide connection (Metadata,
//! FindCoordinator, the admin calls) when it has to make it again.
//!
//! Java's clients use `bootstrap.servers` only until the first Metadata answer, and any
//! broker that answer named after. Here, a reconnect tries the brokers of the last Metadata
//! answer that the application did not list first (a few of them), then the bootstrap
//! servers, those whose last attempt failed after the rest: a bootstrap server that goes
//! away leaves the client the rest of the cluster, and a cluster that moved entirely (every
//! broker the client knew gone) is found again through the bootstrap servers.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use crate::kafka::error::ClientError;
use crate::kafka::net::backoff::random_unit;
use crate::kafka::net::connection::{Candidate, Connection, ConnectionConfig};

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
#[derive(Debug, Clone)]
struct Known {
    /// The application's `bootstrap.servers`, comma-separated, as written.
    bootstrap: String,
    /// Its `host:port` entries, read as Java's clients read them ([`parse_bootstrap`]).
    chosen: Vec<String>,
    /// What is wrong with `bootstrap`, if anything: every connect fails with it.
    invalid: Option<String>,
    /// `host:port` of brokers of the last Metadata answer (at most [`MAX_KEPT`]), starting
    /// at a random one, so that the clients of one cluster do not all reconnect to the same
    /// broker.
    brokers: Vec<String>,
}

impl Addresses {
    /// Only the bootstrap servers (comma-separated `host:port`), until [`learn`](Self::learn).
    /// A list that is not `host:port` entries fails every [`connect`](Self::connect) with
    /// [`ClientError::Config`] naming `bootstrap.servers`.
    pub(crate) fn new(bootstrap: impl Into<String>) -> Self {
        let bootstrap = bootstrap.into();
        let (chosen, invalid) = match parse_bootstrap(&bootstrap) {
            Ok(chosen) => (chosen, None),
            Err(reason) => (Vec::new(), Some(reason)),
        };
        Self {
            inner: Arc::new(Mutex::new(Known {
                bootstrap,
                chosen,
                invalid,
                brokers: Vec::new(),
            })),
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every address to try, comma-separated: the brokers of the last answer that the
    /// application did not list, then its bootstrap servers; before any answer, the bootstrap
    /// servers as the application wrote them (for errors that name what was tried).
    pub(crate) fn current(&self) -> String {
        let known = self.known();
        Self::describe(&known, &Self::candidates(&known))
    }

    /// `candidates` as [`current`](Self::current) shows them.
    fn describe(known: &Known, candidates: &[Candidate<'_>]) -> String {
        if known.brokers.is_empty() {
            return known.bootstrap.clone();
        }
        let list: Vec<&str> = candidates.iter().map(|candidate| candidate.addr).collect();
        list.join(",")
    }

    /// The brokers of the last answer not among the bootstrap servers, then the bootstrap
    /// servers (marked as the application's).
    fn candidates(known: &Known) -> Vec<Candidate<'_>> {
        let chosen: Vec<&str> = known.chosen.iter().map(String::as_str).collect();
        let learned = known
            .brokers
            .iter()
            .map(String::as_str)
            .filter(|broker| !chosen.contains(broker))
            .map(|addr| Candidate {
                addr,
                chosen: false,
            });
        learned
            .chain(chosen.iter().map(|&addr| Candidate { addr, chosen: true }))
            .collect()
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
    /// bootstrap server that does ([`Connection::connect_first`]: addresses whose last attempt
    /// failed go last, at most a few known brokers are tried, and a known broker that refuses,
    /// for credentials or a certificate not valid for the name it advertises, is passed over;
    /// a bootstrap server's refusal ends the attempt, as the application chose it).
    ///
    /// # Errors
    ///
    /// The refusal of a bootstrap server, or an error naming each address that failed.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a connection made so far closes when the future is dropped.
    pub(crate) async fn connect(
        &self,
        config: &ConnectionConfig,
    ) -> Result<Connection, ClientError> {
        // A copy, read under one lock: no lock is held while connecting.
        let known = self.known().clone();
        if let Some(reason) = known.invalid {
            return Err(ClientError::Config {
                key: "bootstrap.servers".to_owned(),
                reason,
            });
        }
        let candidates = Self::candidates(&known);
        let list = Self::describe(&known, &candidates);
        Connection::connect_first(candidates, &list, config).await
    }
}

/// `bootstrap.servers` as Java's clients read it: comma-separated `host:port` entries (empty
/// ones skipped), each may start with a listener name and `://` (`SASL_SSL://host:9093`),
/// an IPv6 host may stand in brackets or bare (`[::1]:9092`, `::1:9092`). Returns the
/// entries as `host:port` (an IPv6 host in brackets), or what is wrong with the first bad
/// one and what is expected.
pub(crate) fn parse_bootstrap(servers: &str) -> Result<Vec<String>, String> {
    const EXPECTED: &str = "expected comma-separated host:port entries, such as localhost:9092";
    let mut out = Vec::new();
    for entry in servers.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let address = entry.split_once("://").map_or(entry, |(_, rest)| rest);
        let Some((host, port)) = address.rsplit_once(':') else {
            return Err(format!("`{entry}` has no port; {EXPECTED}"));
        };
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let host_chars = |c: char| c.is_ascii_alphanumeric() || "-%._:".contains(c);
        if host.is_empty() || !host.chars().all(host_chars) {
            return Err(format!("`{entry}` has no valid host name; {EXPECTED}"));
        }
        let port = Some(port)
            .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|p| p.parse::<u16>().ok())
            .filter(|p| *p > 0)
            .ok_or_else(|| {
                format!("`{entry}`: the port is not a number from 1 to 65535; {EXPECTED}")
            })?;
        out.push(if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        });
    }
    if out.is_empty() {
        return Err(format!("no address in `{servers}`; {EXPECTED}"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_servers_are_read_as_javas_clients_read_them() {
        assert_eq!(
            parse_bootstrap(
                " a:1 ,, PLAINTEXT://b.example.com:9092,[::1]:9093,::1:9094,compose_kafka_1:9092"
            ),
            Ok(vec![
                "a:1".to_owned(),
                "b.example.com:9092".to_owned(),
                "[::1]:9093".to_owned(),
                "[::1]:9094".to_owned(),
                "compose_kafka_1:9092".to_owned(),
            ])
        );
        for (bad, says) in [
            ("k", "`k` has no port"),
            ("k:99999", "the port is not a number from 1 to 65535"),
            ("k:0", "the port is not a number from 1 to 65535"),
            ("k:x", "the port is not a number"),
            ("k:+9092", "the port is not a number"),
            ("my_broker_1", "has no port"),
            (":9092", "no valid host name"),
            ("a b:9092", "no valid host name"),
            ("a:1,k", "`k` has no port"),
            (" , ", "no address"),
        ] {
            let reason = parse_bootstrap(bad).expect_err(bad);
            assert!(reason.contains(says), "{bad}: {reason}");
            assert!(reason.contains("host:port"), "{bad}: {reason}");
        }
    }

    #[tokio::test]
    async fn a_malformed_bootstrap_list_is_a_config_error_naming_the_key() {
        let error = Addresses::new("broker-without-port")
            .connect(&ConnectionConfig::default())
            .await
            .expect_err("no port");
        assert!(
            matches!(&error, ClientError::Config { key, reason }
                if key == "bootstrap.servers" && reason.contains("broker-without-port")),
            "{error:?}"
        );
        assert!(!error.is_retriable());
    }

    fn brokers(list: &[&str]) -> Vec<String> {
        list.iter().map(|b| (*b).to_owned()).collect()
    }

    #[test]
    fn the_bootstrap_servers_as_written_until_an_answer_names_brokers() {
        let addresses = Addresses::new(" a:1 , b:2 ,");
        assert_eq!(addresses.current(), " a:1 , b:2 ,");
        addresses.learn(&brokers(&[]));
        addresses.learn(&brokers(&["", "x:1,y:2", "z :3"]));
        assert_eq!(addresses.current(), " a:1 , b:2 ,");
    }

    #[test]
    fn the_last_answers_other_brokers_come_first_then_the_bootstrap_servers() {
        let addresses = Addresses::new("a:1,b:2");
        addresses.learn(&brokers(&["b:2", "c:3", "c:3"]));
        assert_eq!(addresses.current(), "c:3,a:1,b:2");
        {
            let known = addresses.known();
            let chosen: Vec<(&str, bool)> = Addresses::candidates(&known)
                .iter()
                .map(|c| (c.addr, c.chosen))
                .collect();
            assert_eq!(chosen, [("c:3", false), ("a:1", true), ("b:2", true)]);
        }
        // A later answer replaces the brokers; the bootstrap servers stay.
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
        let current = addresses.current();
        let kept: Vec<&str> = current.split(',').filter(|a| *a != "a:1").collect();
        assert_eq!(kept.len(), MAX_KEPT);
        assert!(
            kept.iter()
                .all(|b| flood[..MAX_KEPT].iter().any(|f| f == b))
        );
    }
}
