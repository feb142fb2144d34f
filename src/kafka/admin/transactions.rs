//! What the exactly-once iteration asks the admin for: the cluster's finalized features and
//! API versions, and the transactional ids the transaction coordinators know.

use std::collections::BTreeSet;

use kafka_protocol::messages::{
    ApiKey, ListTransactionsRequest, ListTransactionsResponse, MetadataRequest,
};
use kafka_protocol::protocol::{Message, StrBytes};

use super::{AdminError, Failure, KafkaAdmin, metadata, negotiate, send};
use crate::kafka::errors::{api_name, check};
use crate::kafka::net::broker_address;
use crate::kafka::net::connection::Connection;

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
            let response =
                metadata::request(&connection, Some(&[]), MetadataRequest::VERSIONS).await?;
            let mut ids = BTreeSet::new();
            for broker in &response.brokers {
                let address = broker_address(broker.host.as_str(), broker.port);
                let on = Connection::connect(&address, &self.config)
                    .await
                    .map_err(|source| Failure::Connect {
                        bootstrap: address.clone(),
                        source,
                    })?;
                let result = list_on(&on, prefix).await;
                on.close();
                ids.extend(result?);
            }
            Ok(ids.into_iter().collect())
        })
        .await
    }
}

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
