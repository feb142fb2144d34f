//! [`ChainStageSpec`]: one configured transform stage, borrowed from a parsed config.

use std::collections::BTreeMap;
use std::fmt;

use crate::config::secret::RedactedMap;

/// A configured predicate: Connect's `predicates.<alias>.type` and its configs. `Debug`
/// shows secret values (`*.password`, keys containing `secret`, ...) as `[redacted]`.
#[derive(Clone, Copy)]
pub struct PredicateStageSpec<'a> {
    pub(crate) alias: &'a str,
    pub(crate) class: &'a str,
    pub(crate) configs: &'a BTreeMap<String, String>,
}

/// A configured transform stage: Connect's `transforms.<alias>.type`, its configs, and the
/// optional `predicate` (with `negate`), for [`Plugins::build_chain`](crate::Plugins::build_chain).
///
/// ```
/// use std::collections::BTreeMap;
/// use kafka_share_sink::ChainStageSpec;
///
/// let no_configs = BTreeMap::new();
/// let stage = ChainStageSpec::new("dropTombstones", "Filter", &no_configs)
///     .with_predicate("isTombstone", "RecordIsTombstone", &no_configs, false);
/// assert_eq!(stage.alias(), "dropTombstones");
/// ```
///
/// `Debug` shows secret values (`*.password`, keys containing `secret`, ...) as
/// `[redacted]`, as the configs' own `Debug` does.
#[derive(Clone, Copy)]
pub struct ChainStageSpec<'a> {
    pub(crate) alias: &'a str,
    pub(crate) class: &'a str,
    pub(crate) configs: &'a BTreeMap<String, String>,
    pub(crate) predicate: Option<PredicateStageSpec<'a>>,
    pub(crate) negate: bool,
}

impl<'a> ChainStageSpec<'a> {
    /// A stage with no predicate: transform `alias` of class `class` with its configs (the
    /// `transforms.<alias>.` prefix removed).
    pub fn new(alias: &'a str, class: &'a str, configs: &'a BTreeMap<String, String>) -> Self {
        Self {
            alias,
            class,
            configs,
            predicate: None,
            negate: false,
        }
    }

    /// Runs the stage only when predicate `alias` of class `class` (configs with the
    /// `predicates.<alias>.` prefix removed) matches, or, with `negate`, when it does not.
    pub fn with_predicate(
        mut self,
        alias: &'a str,
        class: &'a str,
        configs: &'a BTreeMap<String, String>,
        negate: bool,
    ) -> Self {
        self.predicate = Some(PredicateStageSpec {
            alias,
            class,
            configs,
        });
        self.negate = negate;
        self
    }

    /// The transform's alias.
    pub fn alias(&self) -> &'a str {
        self.alias
    }
}

/// `Debug` of configs with secret values redacted.
struct Configs<'a>(&'a BTreeMap<String, String>);

impl fmt::Debug for Configs<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        RedactedMap(self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))).fmt(f)
    }
}

impl fmt::Debug for PredicateStageSpec<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PredicateStageSpec")
            .field("alias", &self.alias)
            .field("class", &self.class)
            .field("configs", &Configs(self.configs))
            .finish()
    }
}

impl fmt::Debug for ChainStageSpec<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChainStageSpec")
            .field("alias", &self.alias)
            .field("class", &self.class)
            .field("configs", &Configs(self.configs))
            .field("predicate", &self.predicate)
            .field("negate", &self.negate)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_secret_configs() {
        let configs: BTreeMap<String, String> = [
            ("connection.password", "hunter2"),
            ("connection.url", "jdbc:postgresql://app:hunter3@db/orders"),
            ("field", "amount"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let stage = ChainStageSpec::new("mask", "MaskField", &configs).with_predicate(
            "p",
            "TopicNameMatches",
            &configs,
            true,
        );
        let debug = format!("{stage:?} {stage:#?}");
        for secret in ["hunter2", "hunter3"] {
            assert!(!debug.contains(secret), "{debug}");
        }
        assert!(
            debug.contains("amount") && debug.contains("TopicNameMatches"),
            "{debug}"
        );
    }
}
