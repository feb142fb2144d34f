#![doc = include_str!("../README.md")]
#![doc(test(attr(deny(warnings))))]
//!
//! # Crate layout
//!
//! - [`SinkTask`], [`SinkRecord`], [`TaskError`]: what you implement and what you receive.
//! - [`ShareConsumer`]: the share-consumer abstraction, with [`AcknowledgeType`],
//!   [`CommitResults`] and [`ConsumerError`].
//! - [`ShareSinkTask`]: the driver, configured with [`DriverConfig`].
//! - [`embedded`]: an in-process share group for the quickstart and for your tests.

pub mod consumer;
mod driver;
pub mod embedded;
mod error;
mod kafka;
mod record;
mod stage;
mod task;

pub use crate::consumer::{
    AckError, AcknowledgeType, AcknowledgementMode, CommitResults, ConsumerError, GroupMetadata,
    PendingCommit, ShareConsumer,
};
pub use crate::driver::{
    AckPolicy, CommitPolicy, DriverConfig, DriverMetrics, ErrorHandling, ErrorTolerance,
    IterationReport, ParsePolicyError, PutRetriablePolicy, ShareSinkTask,
};
pub use crate::error::{BoxError, Error, Result, TaskError, TaskErrorKind, TaskStage};
pub use crate::kafka::admin::{KafkaAdmin, PartitionPlacement};
pub use crate::kafka::{KafkaShareConsumer, KafkaShareConsumerConfig};
pub use crate::record::{
    ConsumerRecord, Header, Headers, RecordId, SinkHeader, SinkRecord, TimestampType,
    TopicPartition, Value,
};
pub use crate::stage::Stage;
pub use crate::task::{Durability, SinkTask, SinkTaskContext, TaskConfig};
