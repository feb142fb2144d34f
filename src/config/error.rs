//! [`ConfigError`]: why a configuration was refused, naming the key.

use std::path::PathBuf;

use crate::error::BoxError;

use super::secret::shown;

/// Why a configuration was refused.
///
/// Every message names the key as it was written (with its prefix), the value that was
/// refused (secret values are shown as `[redacted]`, here and in `Debug`), and what to do
/// instead. [`key`](Self::key) gives the key alone.
///
/// ```
/// use kafka_share_sink::{ConfigError, ConnectorConfig, Properties};
///
/// let connector: Properties = [("name", "orders-sink"), ("topics", "orders"), ("tasks.max", "0")]
///     .into_iter()
///     .collect();
/// let err = ConnectorConfig::from_properties(&connector).unwrap_err();
/// assert_eq!(err.key(), Some("tasks.max"));
/// assert_eq!(err.to_string(), "`tasks.max` = `0` is invalid: expected a whole number from 1 to 2147483647");
/// assert!(matches!(err, ConfigError::Invalid { .. }));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A properties file could not be read.
    #[error("cannot read the properties file `{}`: check that it exists, is readable and is UTF-8", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },

    /// Properties text that is not valid `.properties` syntax.
    #[error("line {line}: {problem}")]
    Syntax {
        /// The line (from 1) where the faulty entry starts.
        line: usize,
        /// What is wrong and how to write it instead.
        problem: String,
    },

    /// A required key is absent or empty.
    #[error("`{key}` is required: {hint}")]
    Missing {
        /// The key.
        key: String,
        /// What to set.
        hint: String,
    },

    /// A value that does not have the expected form.
    #[error("`{key}` = `{value}` is invalid: expected {expected}")]
    Invalid {
        /// The key, as written.
        key: String,
        /// The value (`[redacted]` for a secret).
        value: String,
        /// The form a valid value has.
        expected: String,
        /// The parser's own error, when there is one.
        #[source]
        source: Option<BoxError>,
    },

    /// A consumer setting that a share consumer refuses (Java's
    /// `SHARE_GROUP_UNSUPPORTED_CONFIGS`).
    #[error("`{key}` cannot be set when using a share group: {instead}")]
    UnsupportedByShareGroup {
        /// The key, as written (with its `consumer.` or `consumer.override.` prefix).
        key: String,
        /// What to use instead.
        instead: String,
    },

    /// A `group.protocol` other than `share`.
    #[error(
        "`{key}` = `{value}` is not supported: this crate only drives share groups, so the only accepted value is `share`; set it to `share` or remove it"
    )]
    NotShareGroup {
        /// `consumer.group.protocol` (worker) or `consumer.override.group.protocol`.
        key: String,
        /// The value.
        value: String,
    },

    /// A Connect setting that has no meaning for a share consumer.
    #[error("`{key}` is not supported: {reason}")]
    Unsupported {
        /// The key.
        key: String,
        /// Why, and what to do instead.
        reason: String,
    },

    /// Two keys that set the same thing disagree.
    #[error(
        "`{key}` = `{value}` conflicts with `{other_key}` = `{other_value}`: set only one of them"
    )]
    Conflict {
        /// The key that wins when only it is set.
        key: String,
        /// Its value.
        value: String,
        /// The other key.
        other_key: String,
        /// Its value.
        other_value: String,
    },

    /// The dead-letter queue topic is also a source topic.
    #[error(
        "The DLQ topic '{topic}' may not be included in the list of topics ('topics=[{}]') consumed by the connector; choose another `errors.deadletterqueue.topic.name`",
        topics.join(", ")
    )]
    DeadLetterQueueIsSource {
        /// The dead-letter queue topic.
        topic: String,
        /// The source topics.
        topics: Vec<String>,
    },

    /// A `consumer.override.*`, `producer.override.*` or `admin.override.*` key that the
    /// worker's `connector.client.config.override.policy` forbids.
    #[error(
        "`{key}`: The '{policy}' policy does not allow '{name}' to be overridden in the connector configuration. Remove the key, or change the worker's `connector.client.config.override.policy`"
    )]
    OverrideNotAllowed {
        /// The connector key, with its prefix.
        key: String,
        /// The client setting it overrides (the key without its prefix).
        name: String,
        /// The policy's name (`None`, `Principal`, `Allowlist`).
        policy: String,
    },

    /// An alias listed twice in `transforms` or `predicates`.
    #[error("`{key}` = `{value}` is invalid: Duplicate alias provided. List `{alias}` once")]
    DuplicateAlias {
        /// `transforms` or `predicates`.
        key: String,
        /// The list.
        value: String,
        /// The alias listed more than once.
        alias: String,
    },

    /// `transforms.<alias>.negate` without `transforms.<alias>.predicate`.
    #[error(
        "Config '{key}' was provided but there is no config '{predicate_key}' defining a predicate to be negated."
    )]
    NegateWithoutPredicate {
        /// `transforms.<alias>.negate`.
        key: String,
        /// `transforms.<alias>.predicate`.
        predicate_key: String,
    },

    /// A transform names a predicate alias that `predicates` does not define.
    #[error(
        "`{key}` = `{predicate}`: the transform `{transform}` names the predicate `{predicate}`, which is not defined; add `{predicate}` to `predicates` and set `predicates.{predicate}.type`"
    )]
    UndefinedPredicate {
        /// `transforms.<alias>.predicate`.
        key: String,
        /// The transform alias.
        transform: String,
        /// The undefined predicate alias.
        predicate: String,
    },

    /// A converter, transform or predicate named in the config could not be built.
    #[error("`{key}`: the plugin could not be built")]
    Plugin {
        /// The key that names the plugin (`value.converter`, `transforms`, ...).
        key: String,
        /// What the plugin registry said.
        #[source]
        source: crate::plugins::PluginError,
    },
}

impl ConfigError {
    /// The key the error is about, as written; `None` for an unreadable file or a syntax
    /// error.
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::Io { .. } | Self::Syntax { .. } => None,
            Self::Missing { key, .. }
            | Self::Invalid { key, .. }
            | Self::UnsupportedByShareGroup { key, .. }
            | Self::NotShareGroup { key, .. }
            | Self::Unsupported { key, .. }
            | Self::Conflict { key, .. }
            | Self::OverrideNotAllowed { key, .. }
            | Self::DuplicateAlias { key, .. }
            | Self::NegateWithoutPredicate { key, .. }
            | Self::UndefinedPredicate { key, .. }
            | Self::Plugin { key, .. } => Some(key),
            Self::DeadLetterQueueIsSource { .. } => Some("topics"),
        }
    }

    pub(crate) fn missing(key: impl Into<String>, hint: impl Into<String>) -> Self {
        Self::Missing {
            key: key.into(),
            hint: hint.into(),
        }
    }

    /// An invalid value; the value is redacted here when the key is a secret.
    pub(crate) fn invalid(key: &str, value: &str, expected: impl Into<String>) -> Self {
        Self::Invalid {
            key: key.to_owned(),
            value: shown(key, value),
            expected: expected.into(),
            source: None,
        }
    }

    /// An invalid value with the parser's error as its source.
    pub(crate) fn invalid_because(
        key: &str,
        value: &str,
        expected: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        Self::Invalid {
            key: key.to_owned(),
            value: shown(key, value),
            expected: expected.into(),
            source: Some(source.into()),
        }
    }

    pub(crate) fn conflict(key: &str, value: &str, other_key: &str, other_value: &str) -> Self {
        Self::Conflict {
            key: key.to_owned(),
            value: shown(key, value),
            other_key: other_key.to_owned(),
            other_value: shown(other_key, other_value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_values_are_redacted_in_display_and_debug() {
        let err = ConfigError::invalid("consumer.override.ssl.key.password", "hunter2", "text");
        assert!(!err.to_string().contains("hunter2"));
        assert!(!format!("{err:?}").contains("hunter2"));
        assert!(err.to_string().contains("[redacted]"));
        let err = ConfigError::conflict("a.password", "hunter2", "b.secret", "hunter3");
        assert!(!format!("{err} {err:?}").contains("hunter"));
    }

    #[test]
    fn key_names_the_key() {
        assert_eq!(
            ConfigError::missing("topics", "list them").key(),
            Some("topics")
        );
        let err = ConfigError::Syntax {
            line: 1,
            problem: "x".into(),
        };
        assert_eq!(err.key(), None);
    }
}
