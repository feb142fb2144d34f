//! Building converters, transforms and predicates from Kafka Connect configs:
//! [`PluginError`].

pub(crate) mod configs;
mod error;

pub use self::error::{PluginError, PluginKind};
