//! What every client of the crate knows of the cluster, and how it learns it.
//!
//! - [`metadata`]: the one Metadata request of the crate and its answer as a typed
//!   [`Snapshot`](metadata::Snapshot): the brokers by id, the topics by name with the leader,
//!   leader epoch and error of each partition, and the leader lookups the clients share.
//! - [`link`]: [`ClusterLink`](link::ClusterLink), the connection for cluster-wide requests
//!   (Metadata, FindCoordinator, InitProducerId, the admin calls) of the share consumer, the
//!   admin client, the producer, the log reader and the dead-letter queue, made again when it
//!   closed or an answer on it is overdue (a request timed out), to the brokers the last
//!   Metadata answer named first, then the bootstrap servers.
//! - [`pool`]: connections to the brokers by node id, made on demand from the addresses of
//!   the last answer: the leaders of the producer, of the log reader and of the share
//!   consumer's fetch engine, each in a pool of its own.
//!
//! The consumer's engine, the admin client, the producer, the log reader, the dead-letter
//! queue and the group-config reader all ask Metadata here.

pub(crate) mod link;
pub(crate) mod metadata;
pub(crate) mod pool;
