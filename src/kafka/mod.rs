//! The native Kafka client: a share consumer speaking KIP-932 over `kafka-protocol` and tokio,
//! and the admin calls tests and users need.

pub(crate) mod admin;
mod bootstrap;
mod config;
pub(crate) mod connection;
mod consumer;
pub(crate) mod errors;
mod membership;
pub(crate) mod record_batch;
mod records;
pub(crate) mod share_v2;

pub use self::config::KafkaShareConsumerConfig;
pub use self::consumer::KafkaShareConsumer;
