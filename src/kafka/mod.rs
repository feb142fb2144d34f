//! The native Kafka client: a share consumer speaking KIP-932 over `kafka-protocol` and tokio,
//! and the admin calls tests and users need.

pub(crate) mod admin;
pub(crate) mod connection;
pub(crate) mod errors;
