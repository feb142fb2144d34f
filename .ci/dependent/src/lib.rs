//! A stand-in for a service that depends on kafka-share-sink from a registry; its test is
//! the repository's `tests/hostile_broker.rs`, built against the packaged crate.

/// The crate resolves and links as a dependent sees it.
pub use kafka_share_sink::ShareSinkTask;
