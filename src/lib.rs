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
//! - [`lag`]: the share group's lag ([`ShareGroupLag`]), read in the background by a
//!   [`LagReader`], to autoscale on.
//! - [`dlq`]: dead-letter queues ([`DeadLetterQueue`], [`KafkaDeadLetterQueue`]) and the
//!   [`DeadLetterRecord`]s written to them, with Kafka Connect's context headers.
//! - [`convert`]: [`Converter`]s from record bytes to [`Value`]s with a [`Schema`], bundled as
//!   [`Converters`]; [`transform`]: a [`TransformChain`] of [`Transform`]s under
//!   [`Predicate`]s; [`plugins`]: [`Plugins`] builds both from Kafka Connect class names.
//! - [`config`]: Connect-style worker and connector configs ([`ConnectorConfig`],
//!   [`Properties`], [`ConfigError`]).

pub mod config;
pub mod consumer;
pub mod convert;
mod delivered;
pub mod dlq;
mod driver;
pub mod embedded;
mod error;
#[cfg(feature = "exactly-once")]
pub mod exactly_once;
mod kafka;
pub mod lag;
pub mod plugins;
pub mod producer;
mod record;
mod stage;
pub mod supervisor;
mod task;
pub mod telemetry;
mod time;
mod topic_name;
pub mod transform;

pub use crate::config::{ConfigError, ConnectorConfig, Properties};
pub use crate::consumer::{
    AckError, AcknowledgeType, AcknowledgementCommitCallback, AcknowledgementMode,
    BrokerDeadLetterQueue, CommitResults, ConsumerCapabilities, ConsumerCapability, ConsumerError,
    DEFAULT_DELIVERY_COUNT_LIMIT, GroupMetadata, PendingCommit, ShareConsumer,
};
pub use crate::convert::{
    ConvertError, Converter, ConverterType, Converters, Field, HeaderConverter, Schema,
    SchemaAndValue, SchemaType, StageError, StageFailure,
};
pub use crate::delivered::Delivered;
pub use crate::dlq::{
    BreakerLimit, BreakerTripped, DeadLetterBreaker, DeadLetterError, DeadLetterQueue,
    DeadLetterReason, DeadLetterRecord, ErrorContext, KafkaDeadLetterQueue,
    KafkaDeadLetterQueueConfig,
};
pub use crate::driver::{
    AckPolicy, CommitPolicy, DEFAULT_COMMIT_RECORDS, DEFAULT_REDELIVERY_BACKOFF,
    DEFAULT_REDELIVERY_BACKOFF_MAX, DriverConfig, DriverMetrics, ErrorHandling, ErrorTolerance,
    IterationReport, ParsePolicyError, PutRetriablePolicy, ShareSinkTask,
};
pub use crate::error::{
    BoxError, Error, Result, TaskError, TaskErrorKind, TaskPanicked, TaskStage,
};
pub use crate::kafka::admin::{
    AdminError, KafkaAdmin, KafkaAdminBuilder, PartitionPlacement, ShareGroupConfigs,
};
pub use crate::kafka::admin::{
    GroupResource, OffsetSpec, ResetTo, ResourceConfigs, ShareGroupDescription, ShareGroupMember,
    ShareGroupPartitionOffsets, ShareGroupState, TopicConfigs, TopicResource,
};
pub use crate::kafka::security::{
    OAuthToken, ParseSecurityProtocolError, SaslSettings, Secret, Security, SecurityProtocol,
    TlsSettings, TokenProvider, UnsecuredJwsTokenProvider,
};
pub use crate::kafka::{
    AcquisitionSizing, BrokerError, ClientError, ConnectionCounts, ConnectionError,
    KafkaShareConsumer, KafkaShareConsumerConfig, ParseShareAcquireModeError, ProtocolError,
    RequestCounts, ShareAcquireMode,
};
pub use crate::lag::{LagReader, ShareGroupLag};
pub use crate::plugins::{ChainStageSpec, PluginError, PluginKind, Plugins};
pub use crate::record::{
    ConsumerRecord, Header, Headers, RecordId, SinkHeader, SinkRecord, TimestampType,
    TopicPartition, Value,
};
pub use crate::stage::Stage;
pub use crate::task::{Durability, SinkTask, SinkTaskContext, TaskConfig};
pub use crate::topic_name::TopicName;
pub use crate::transform::{Predicate, Transform, TransformChain, TransformError};
