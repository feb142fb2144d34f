//! Exactly-once Kafka-to-Kafka delivery through a share group (feature `exactly-once`).
//!
//! [`ShareSinkTask::iteration_exactly_once`](crate::ShareSinkTask::iteration_exactly_once)
//! produces what the task derives from its input in a transaction that also settles the
//! input, so that a `read_committed` reader of the output sees each input's outputs exactly
//! once, across crashes, lock expiries, redeliveries and leader changes. The mode is chosen
//! at `initialize` from what the cluster offers ([`ClusterCapabilities`]):
//!
//! - [`ExactlyOnceMode::AtomicAcknowledgements`] (KIP-1289, in no Kafka release yet; the
//!   embedded group implements its draft): acknowledgements are staged into the transaction.
//! - [`ExactlyOnceMode::Ledger`] (Kafka 4.2–4.4): claims of the processed source ranges are
//!   written to a ledger topic in the transaction; see the README for the protocol.

mod acknowledgements;
mod capabilities;
mod cluster;
mod config;
mod error;
mod kafka;
pub(crate) mod ledger;
mod mirror;
mod output;

pub use self::acknowledgements::{AcknowledgementBatch, ShareAcknowledgements};
pub(crate) use self::capabilities::choose_mode;
pub use self::capabilities::{ClusterCapabilities, ExactlyOnceMode, ModePreference};
pub use self::cluster::ExactlyOnceCluster;
pub use self::config::ExactlyOnceConfig;
pub(crate) use self::config::transactional_id;
pub use self::error::ExactlyOnceError;
pub(crate) use self::error::{OutputFailure, RefusedOutput};
pub use self::kafka::KafkaExactlyOnceCluster;
pub use self::mirror::MirrorTask;
pub use self::output::{OutputTarget, TransactionalOutput};
