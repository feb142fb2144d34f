//! The native Kafka client: a share consumer speaking KIP-932 over `kafka-protocol` and tokio,
//! and the admin calls tests and users need.
//!
//! The folders are the layers, each depending only on those above it in this list:
//!
//! - [`error`]: the client's errors by layer ([`ConnectionError`], [`BrokerError`],
//!   [`ProtocolError`]) and Kafka's error codes. No I/O.
//! - [`codec`]: wire codecs of our own (ShareFetch/ShareAcknowledge v1–v2, v2 record batches).
//!   No I/O.
//! - [`security`]: TLS and SASL settings, the rustls configuration and the SASL mechanisms.
//! - [`net`]: one TCP connection to one broker with pipelined requests (over TLS and with
//!   SASL when asked), and the addresses a cluster-wide connection is made to (the brokers
//!   the last Metadata named, then the bootstrap list).
//! - [`session`]: the share-session bookkeeping as a plain state machine (epochs per leader,
//!   partitions to add and forget, acknowledgements pending, in flight and answered) and the
//!   extraction of acquired records from a fetch answer. No I/O, no clock of its own.
//! - [`cluster`]: the one Metadata request and its answer as a typed snapshot (brokers,
//!   topics, partition leaders), shared by every client below; the cluster-wide connection
//!   of the share consumer, the admin client, the producer, the log reader and the
//!   dead-letter queue (`ClusterLink`), reconnecting to the brokers the last answer named;
//!   the producer's and reader's connections to the leaders by node id.
//! - [`engine`]: the background task that drives the session core against the connections.
//! - [`consumer`]: the public [`KafkaShareConsumer`], its config and its group membership.
//! - [`admin`]: the public [`KafkaAdmin`](crate::KafkaAdmin).
//! - [`reader`]: the public [`KafkaLogReader`](crate::producer::KafkaLogReader), a classic
//!   Fetch reader of a partition from an offset.

pub(crate) mod admin;
pub(crate) mod cluster;
pub(crate) mod codec;
mod consumer;
pub(crate) mod engine;
pub(crate) mod error;
pub(crate) mod net;
pub(crate) mod producer;
pub(crate) mod reader;
pub(crate) mod security;
pub(crate) mod session;

pub use self::consumer::KafkaShareConsumer;
pub use self::consumer::config::{
    AcquisitionSizing, KafkaShareConsumerConfig, ParseShareAcquireModeError, ShareAcquireMode,
};
pub use self::engine::requests::RequestCounts;
pub use self::error::{BrokerError, ClientError, ConnectionError, ProtocolError};
pub use self::net::backoff::ConnectionCounts;
