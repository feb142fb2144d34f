//! [`ExactlyOnceError`]: why the exactly-once iteration cannot start or go on.

use crate::BoxError;
use crate::consumer::ConsumerError;
use crate::producer::ProducerError;

/// Why the exactly-once path could not be set up or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExactlyOnceError {
    /// The cluster lacks what the exactly-once iteration needs.
    #[error("exactly-once delivery is not possible on this cluster: it needs {capability}")]
    MissingCapability {
        /// What is missing, and how to get it.
        capability: &'static str,
    },
    /// A setting is wrong.
    #[error("invalid exactly-once config `{key}`: {reason}")]
    Config {
        /// The setting.
        key: &'static str,
        /// What is wrong and what to do.
        reason: String,
    },
    /// The ledger topic is unusable.
    #[error("the exactly-once ledger topic `{topic}` cannot be used: {reason}")]
    Ledger {
        /// The ledger topic.
        topic: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// A redelivery check waited too long for other tasks' transactions on the ledger.
    #[error(
        "ledger `{topic}` partition {partition} stayed below offset {high_watermark} for {waited:?}: \
         a transaction of another task is open there (it ends within its transaction.timeout.ms); \
         the records were released and are checked again"
    )]
    LedgerWait {
        /// The ledger topic.
        topic: String,
        /// The ledger partition.
        partition: i32,
        /// The high watermark the read had to reach.
        high_watermark: i64,
        /// How long it waited.
        waited: std::time::Duration,
    },
    /// The transactional producer failed.
    #[error("the transactional producer failed")]
    Producer(#[source] ProducerError),
    /// A request to the cluster failed.
    #[error("{operation} failed")]
    Cluster {
        /// What was asked.
        operation: &'static str,
        /// Why it failed.
        #[source]
        source: BoxError,
    },
    /// Reading the ledger failed.
    #[error("reading the ledger failed")]
    Read(#[source] ConsumerError),
}

impl ExactlyOnceError {
    /// A failed cluster request.
    pub(crate) fn cluster(
        operation: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Cluster {
            operation,
            source: Box::new(source),
        }
    }

    /// Whether trying again later may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Producer(e) => e.is_retriable() || e.requires_abort(),
            Self::Read(e) => e.is_retriable(),
            Self::Cluster { .. } | Self::LedgerWait { .. } => true,
            Self::MissingCapability { .. } | Self::Config { .. } | Self::Ledger { .. } => false,
        }
    }
}
