//! [`ChainStageSpec`]: one configured transform stage, borrowed from a parsed config.

use std::collections::BTreeMap;

/// A configured predicate: Connect's `predicates.<alias>.type` and its configs.
#[derive(Debug, Clone, Copy)]
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
#[derive(Debug, Clone, Copy)]
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
