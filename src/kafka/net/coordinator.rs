//! Finding a coordinator (FindCoordinator): the group coordinator of a share group, the
//! transaction coordinator of a transactional id.

use kafka_protocol::messages::{ApiKey, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::{Message, StrBytes};

use super::connection::Connection;
use crate::kafka::error::ClientError;
use crate::kafka::error::ProtocolError;
use crate::kafka::error::codes::broker_error;

/// FindCoordinator key type GROUP.
pub(crate) const GROUP: i8 = 0;
/// FindCoordinator key type TRANSACTION.
pub(crate) const TRANSACTION: i8 = 1;

/// Asks `via` for the coordinator of `key` (of `key_type`, [`GROUP`] or [`TRANSACTION`]) and
/// returns its `host:port`.
///
/// # Errors
///
/// The broker's error for the key (e.g. COORDINATOR_NOT_AVAILABLE, retriable), an answer
/// without a coordinator, and the request's own errors.
pub(crate) async fn find_coordinator_address(
    via: &Connection,
    key_type: i8,
    key: &str,
) -> Result<String, ClientError> {
    let version = via.negotiate(ApiKey::FindCoordinator, FindCoordinatorRequest::VERSIONS)?;
    let key = StrBytes::from_string(key.to_owned());
    let request = FindCoordinatorRequest::default().with_key_type(key_type);
    // v4 asks for a batch of keys; earlier versions for one.
    let request = if version >= 4 {
        request.with_coordinator_keys(vec![key])
    } else {
        request.with_key(key)
    };
    let response: FindCoordinatorResponse = via
        .request(ApiKey::FindCoordinator, version, &request)
        .await?;
    let (code, message, host, port) = if version >= 4 {
        let Some(c) = response.coordinators.into_iter().next() else {
            return Err(ClientError::Protocol(ProtocolError::Malformed {
                broker: via.broker().to_owned(),
                reason: "FindCoordinator answered with no coordinator".to_owned(),
            }));
        };
        (c.error_code, c.error_message, c.host, c.port)
    } else {
        (
            response.error_code,
            response.error_message,
            response.host,
            response.port,
        )
    };
    if let Some(e) = broker_error("FindCoordinator", code, message.map(|m| m.to_string())) {
        return Err(e);
    }
    Ok(super::broker_address(host.as_str(), port))
}
