//! Building converters, transforms and predicates from Kafka Connect class names and
//! configs: [`Plugins`], [`ChainStageSpec`], [`PluginError`].

pub(crate) mod configs;
mod error;
mod registry;
mod spec;

pub use self::error::{PluginError, PluginKind};
pub use self::registry::Plugins;
pub use self::spec::{ChainStageSpec, PredicateStageSpec};
