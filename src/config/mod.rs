//! Connect-style configuration: a worker config and a connector config, as `.properties`
//! text or typed, resolved into everything a share sink task needs.
//!
//! - [`Properties`]: an ordered string map that reads Java `.properties` syntax.
//! - [`ConnectorConfig`]: the resolved and checked configuration of one connector task,
//!   from [`ConnectorConfig::resolve`] (worker + connector), [`ConnectorConfig::from_properties`]
//!   (connector alone) or [`ConnectorConfig::builder`] (typed setters).
//! - [`ConfigError`]: why a configuration was refused, naming the key.
//! - [`PluginSpec`], [`TransformSpec`], [`PredicateSpec`]: the converters, transforms and
//!   predicates to build; [`DeadLetterQueueSettings`]: the dead-letter queue and its
//!   clients; [`ClientOverridePolicy`]: which client settings a connector may override.
//!
//! Names, defaults and messages follow Kafka Connect where Connect has them; the keys of
//! our own (`share.group.id`, `share.acknowledgement.mode`, `ack.policy`,
//! `put.retriable.policy`, `max.delivery.attempts`, `share.dead.letter.queue.required`,
//! `errors.deadletterqueue.breaker.*`, `task.id`) are documented on the accessors of
//! [`ConnectorConfig`].
//!
//! ```
//! use kafka_share_sink::{ConfigError, ConnectorConfig, Properties};
//!
//! let worker = Properties::parse("bootstrap.servers=k1:9092")?;
//! let connector = Properties::parse(
//!     "name=orders-sink\ntopics=orders\nconsumer.override.auto.offset.reset=earliest",
//! )?;
//! let err = ConnectorConfig::resolve(&worker, &connector).unwrap_err();
//! assert_eq!(err.key(), Some("consumer.override.auto.offset.reset"));
//! assert!(err.to_string().contains("share.auto.offset.reset"));
//! # Ok::<(), ConfigError>(())
//! ```

mod builder;
mod client;
mod connector;
mod dead_letter_breaker;
mod dead_letter_queue;
mod error;
pub(crate) mod keys;
mod override_policy;
mod plugin;
mod properties;
mod redelivery_backoff;
pub(crate) mod secret;
pub(crate) mod value;

pub use self::builder::ConnectorConfigBuilder;
pub use self::connector::ConnectorConfig;
pub use self::dead_letter_queue::DeadLetterQueueSettings;
pub use self::error::ConfigError;
pub use self::override_policy::ClientOverridePolicy;
pub use self::plugin::{DEFAULT_CONVERTER, PluginSpec, PredicateSpec, TransformSpec};
pub use self::properties::Properties;
