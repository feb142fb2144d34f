//! What the exactly-once iteration asks the admin for: the cluster's finalized features and
//! API versions, and the transactional ids the transaction coordinators know.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;
use tracing::debug;

use kafka_protocol::messages::{ApiKey, ListTransactionsRequest, ListTransactionsResponse};
use kafka_protocol::protocol::{Message, StrBytes};

use super::{AdminError, Failure, KafkaAdmin, negotiate, send};
use crate::kafka::cluster::metadata::ANY_VERSION;
use crate::kafka::error::ClientError;
use crate::kafka::error::ConnectionError;
use crate::kafka::error::codes::{api_name, check};
use crate::kafka::net::connection::Connection;
use crate::time::deadline_after;

/// What one broker of the cluster reported in its ApiVersions answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiFacts {
    /// Finalized `share.version`, 0 when absent.
    pub(crate) share_version: i16,
    /// Finalized `transaction.version`, 0 when absent.
    pub(crate) transaction_version: i16,
    /// The highest ShareAcknowledge version, if the broker has the API.
    pub(crate) share_acknowledge_max: Option<i16>,
}

impl KafkaAdmin {
    /// The finalized features and share API versions of a broker of the cluster.
    pub(crate) async fn api_facts(&self) -> Result<ApiFacts, AdminError> {
        self.call("api_facts", async {
            let connection = self.connection().await?;
            Ok(ApiFacts {
                share_version: connection.finalized_feature("share.version").unwrap_or(0),
                transaction_version: connection
                    .finalized_feature("transaction.version")
                    .unwrap_or(0),
                share_acknowledge_max: connection
                    .api_range(ApiKey::ShareAcknowledge)
                    .map(|(_, max)| max),
            })
        })
        .await
    }

    /// The transactional ids starting with `prefix` that any transaction coordinator of the
    /// cluster knows (ListTransactions to every broker).
    pub(crate) async fn transactional_ids(&self, prefix: &str) -> Result<Vec<String>, AdminError> {
        self.call("transactional_ids", async {
            let connection = self.connection().await?;
            let snapshot = self
                .metadata_on(&connection, Some(&[]), ANY_VERSION)
                .await?;
            let mut ids = BTreeSet::new();
            for address in snapshot.brokers.values() {
                ids.extend(self.list_retrying(address, prefix).await?);
            }
            Ok(ids.into_iter().collect())
        })
        .await
    }

    /// ListTransactions on the broker at `address`. A broker that cannot be reached, drops
    /// the connection (restarting, say: the metadata still names it) or answers a retriable
    /// error (its coordinator still loading) is tried again with a
    /// backoff until the request timeout has passed, as Java's admin retries until its API
    /// timeout; then its failure is the call's. Skipping it could miss the transactional ids
    /// its coordinator knows.
    async fn list_retrying(&self, address: &str, prefix: &str) -> Result<Vec<String>, Failure> {
        let deadline = deadline_after(Instant::now(), self.config().request_timeout);
        let mut backoff = LIST_BACKOFF;
        loop {
            let result = match Connection::connect(address, self.config()).await {
                Ok(on) => {
                    let result = list_on(&on, prefix).await;
                    on.close();
                    result
                }
                Err(source) => Err(Failure::Connect {
                    bootstrap: address.to_owned(),
                    source,
                }),
            };
            // Also a retriable answer: a broker that has just taken over partitions of
            // `__transaction_state` answers COORDINATOR_LOAD_IN_PROGRESS while it loads them.
            let transient = matches!(
                &result,
                Err(Failure::Connect { source, .. } | Failure::Client(source))
                    if matches!(source, ClientError::Connection(ConnectionError::Io { .. }))
                        || matches!(source, ClientError::Broker(b) if b.retriable)
            );
            let again = deadline_after(Instant::now(), backoff);
            if !transient || again >= deadline {
                return result;
            }
            debug!(
                broker = address,
                ?backoff,
                "ListTransactions: broker unreachable or not ready, trying again"
            );
            tokio::time::sleep_until(again).await;
            backoff = backoff.saturating_mul(2).min(LIST_BACKOFF_MAX);
        }
    }
}

/// The first pause before asking an unreachable broker again for its transactions.
const LIST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest pause between two tries.
const LIST_BACKOFF_MAX: Duration = Duration::from_secs(1);

async fn list_on(connection: &Connection, prefix: &str) -> Result<Vec<String>, Failure> {
    let key = ApiKey::ListTransactions;
    let version = negotiate(connection, key, ListTransactionsRequest::VERSIONS)?;
    let mut request = ListTransactionsRequest::default();
    if version >= 1 {
        request.duration_filter = -1;
    }
    if version >= 2 && is_plain(prefix) {
        // KIP-1152 (Kafka 4.1+): let the broker filter, by a regular expression.
        request.transactional_id_pattern = Some(StrBytes::from_string(format!("^{prefix}.*")));
    }
    let response: ListTransactionsResponse = send(connection, key, version, &request).await?;
    check(api_name(key), response.error_code, None)?;
    Ok(response
        .transaction_states
        .into_iter()
        .map(|s| s.transactional_id.0.to_string())
        .filter(|id| id.starts_with(prefix))
        .collect())
}

/// Whether `prefix` has no regular-expression metacharacter (connector names are usually
/// plain; others are filtered on our side only).
fn is_plain(prefix: &str) -> bool {
    prefix
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::is_plain;

    #[test]
    fn only_plain_prefixes_become_broker_patterns() {
        assert!(is_plain("mirror-eos-"));
        assert!(!is_plain("a.b-eos-"));
    }
}
