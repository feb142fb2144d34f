//! [`PluginError`]: a converter, transform or predicate could not be built from its config.

use std::fmt;

use crate::error::BoxError;

/// What kind of plugin a class name was looked up as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PluginKind {
    /// A key or value [`Converter`](crate::Converter).
    Converter,
    /// A [`HeaderConverter`](crate::HeaderConverter).
    HeaderConverter,
    /// A [`Transform`](crate::Transform).
    Transform,
    /// A [`Predicate`](crate::Predicate).
    Predicate,
}

impl fmt::Display for PluginKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Converter => "converter",
            Self::HeaderConverter => "header converter",
            Self::Transform => "transform",
            Self::Predicate => "predicate",
        })
    }
}

/// `"{plugin}: "`, or nothing when the plugin is not named yet.
struct Label<'a>(&'a str);

impl fmt::Display for Label<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, "{}: ", self.0)
        }
    }
}

/// `"known: a, b"`, or that nothing is registered.
struct Known<'a>(&'a [String]);

impl fmt::Display for Known<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("none is registered")
        } else {
            write!(f, "known: {}", self.0.join(", "))
        }
    }
}

/// A plugin could not be built: unknown class, or a missing or malformed config key.
///
/// Factories create errors with [`missing_config`](Self::missing_config),
/// [`invalid_config`](Self::invalid_config) or [`build`](Self::build); the
/// [`Plugins`](crate::Plugins) registry then names the plugin (config prefix or alias, and
/// class) in the message.
///
/// ```
/// use std::collections::BTreeMap;
/// use kafka_share_sink::Plugins;
///
/// let err = Plugins::new()
///     .build_predicate("HasHeaderKey", &BTreeMap::new())
///     .unwrap_err();
/// assert_eq!(err.to_string(), "predicate HasHeaderKey: missing required config `name`");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginError {
    /// No plugin of this kind is registered under the class name.
    #[error("{}unknown {kind} class `{class}`; {}", Label(plugin), Known(known))]
    UnknownClass {
        /// The plugin being built (config prefix or alias), if known.
        plugin: String,
        /// What the class was looked up as.
        kind: PluginKind,
        /// The class name asked for.
        class: String,
        /// Every registered name of this kind, sorted.
        known: Vec<String>,
    },
    /// A required config key is absent.
    #[error("{}missing required config `{key}`", Label(plugin))]
    MissingConfig {
        /// The plugin being built (config prefix or alias, and class).
        plugin: String,
        /// The missing key, without the plugin's prefix.
        key: String,
    },
    /// A config value cannot be used. The message never shows the value of a secret key
    /// (`*.password`, `*.passphrase`, `basic.auth.user.info`, `bearer.auth.token`, any key
    /// containing `secret`, ...), as the crate's own config errors do not.
    #[non_exhaustive]
    #[error(
        "{}config `{key}` has invalid value `{}`: {reason}",
        Label(plugin),
        crate::config::secret::shown(key, value)
    )]
    InvalidConfig {
        /// The plugin being built (config prefix or alias, and class).
        plugin: String,
        /// The key, without the plugin's prefix.
        key: String,
        /// The value given ([`invalid_config`](Self::invalid_config) keeps `[redacted]` in
        /// place of a secret's).
        value: String,
        /// What is wrong and what would be accepted.
        reason: String,
    },
    /// The plugin's factory failed for another reason.
    #[error("{}could not be built", Label(plugin))]
    Build {
        /// The plugin being built (config prefix or alias, and class).
        plugin: String,
        /// The cause.
        #[source]
        source: BoxError,
    },
}

impl PluginError {
    /// A required config key is absent.
    pub fn missing_config(key: impl Into<String>) -> Self {
        Self::MissingConfig {
            plugin: String::new(),
            key: key.into(),
        }
    }

    /// A config value cannot be used; `reason` says what would be accepted.
    pub fn invalid_config(
        key: impl Into<String>,
        value: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        let key = key.into();
        let value = crate::config::secret::visible(&key, &value.into()).into_owned();
        Self::InvalidConfig {
            plugin: String::new(),
            key,
            value,
            reason: reason.into(),
        }
    }

    /// The plugin could not be built for another reason.
    pub fn build(cause: impl Into<BoxError>) -> Self {
        Self::Build {
            plugin: String::new(),
            source: cause.into(),
        }
    }

    /// The plugin this error is about (empty until the registry names it).
    pub fn plugin(&self) -> &str {
        match self {
            Self::UnknownClass { plugin, .. }
            | Self::MissingConfig { plugin, .. }
            | Self::InvalidConfig { plugin, .. }
            | Self::Build { plugin, .. } => plugin,
        }
    }

    /// Names the plugin, unless a more precise name is already there.
    pub(crate) fn labelled(mut self, label: impl FnOnce() -> String) -> Self {
        let (Self::UnknownClass { plugin, .. }
        | Self::MissingConfig { plugin, .. }
        | Self::InvalidConfig { plugin, .. }
        | Self::Build { plugin, .. }) = &mut self;
        if plugin.is_empty() {
            *plugin = label();
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_secret_is_named_but_never_shown() {
        let secret = "hunter2-do-not-print";
        let error = PluginError::invalid_config("connection.password", secret, "too short");
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains(secret), "{shown}");
        assert!(
            shown.contains("connection.password") && shown.contains("too short"),
            "{shown}"
        );
        // Built directly, the message still hides it.
        let error = PluginError::InvalidConfig {
            plugin: "sink".to_owned(),
            key: "basic.auth.user.info".to_owned(),
            value: secret.to_owned(),
            reason: "no colon".to_owned(),
        };
        assert!(!error.to_string().contains(secret), "{error}");
        // Other values are shown, as before.
        let error = PluginError::invalid_config("batch.size", "lots", "not a number");
        assert!(error.to_string().contains("`lots`"), "{error}");
    }
}
