//! Plugin specifications: converters ([`PluginSpec`]), transforms ([`TransformSpec`]) and
//! predicates ([`PredicateSpec`]), as class names with their settings. Building the plugin
//! objects from them is not this module's job.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use super::error::ConfigError;
use super::keys::{PREDICATES, TRANSFORMS};
use super::properties::Properties;
use super::secret::RedactedMap;
use super::value;

/// Connect's `ByteArrayConverter`: bytes pass through unchanged. The converter of keys,
/// values and headers when neither the connector nor the worker names one.
pub const DEFAULT_CONVERTER: &str = "org.apache.kafka.connect.converters.ByteArrayConverter";

/// A plugin class and its settings (with the plugin's prefix removed), such as a converter's
/// `value.converter=...` and `value.converter.*`. `Debug` redacts secret settings.
///
/// ```
/// use kafka_share_sink::config::PluginSpec;
/// let spec = PluginSpec::new("org.apache.kafka.connect.json.JsonConverter", [("schemas.enable", "false")]);
/// assert_eq!(spec.configs().get("schemas.enable").map(String::as_str), Some("false"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct PluginSpec {
    class: String,
    configs: BTreeMap<String, String>,
}

impl PluginSpec {
    /// A class and its settings.
    pub fn new<I, K, V>(class: impl Into<String>, configs: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        Self {
            class: class.into(),
            configs: configs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// The class name (or alias) of the plugin.
    pub fn class(&self) -> &str {
        &self.class
    }

    /// The plugin's settings, without the plugin's prefix.
    pub fn configs(&self) -> &BTreeMap<String, String> {
        &self.configs
    }
}

impl fmt::Debug for PluginSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginSpec")
            .field("class", &self.class)
            .field("configs", &redacted(&self.configs))
            .finish()
    }
}

/// One stage of the transform chain (`transforms=<alias>,...`): its class
/// (`transforms.<alias>.type`), settings (`transforms.<alias>.*`), and the predicate that
/// decides whether it applies (`transforms.<alias>.predicate`, inverted by
/// `transforms.<alias>.negate`). `Debug` redacts secret settings.
#[derive(Clone, PartialEq, Eq)]
pub struct TransformSpec {
    alias: String,
    class: String,
    configs: BTreeMap<String, String>,
    predicate: Option<String>,
    negate: bool,
}

impl TransformSpec {
    /// The alias, as listed in `transforms`.
    pub fn alias(&self) -> &str {
        &self.alias
    }

    /// The class name (or alias) of the transformation.
    pub fn class(&self) -> &str {
        &self.class
    }

    /// Its settings, without the `transforms.<alias>.` prefix, and without `type`,
    /// `predicate` and `negate`.
    pub fn configs(&self) -> &BTreeMap<String, String> {
        &self.configs
    }

    /// The alias of the predicate that decides whether the transform applies; `None`
    /// applies it to every record.
    pub fn predicate(&self) -> Option<&str> {
        self.predicate.as_deref()
    }

    /// True when the transform applies to the records the predicate does *not* match.
    pub fn negate(&self) -> bool {
        self.negate
    }
}

impl fmt::Debug for TransformSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransformSpec")
            .field("alias", &self.alias)
            .field("class", &self.class)
            .field("configs", &redacted(&self.configs))
            .field("predicate", &self.predicate)
            .field("negate", &self.negate)
            .finish()
    }
}

/// A predicate (`predicates=<alias>,...`): its class (`predicates.<alias>.type`) and
/// settings (`predicates.<alias>.*`). `Debug` redacts secret settings.
#[derive(Clone, PartialEq, Eq)]
pub struct PredicateSpec {
    alias: String,
    class: String,
    configs: BTreeMap<String, String>,
}

impl PredicateSpec {
    /// The alias, as listed in `predicates`.
    pub fn alias(&self) -> &str {
        &self.alias
    }

    /// The class name (or alias) of the predicate.
    pub fn class(&self) -> &str {
        &self.class
    }

    /// Its settings, without the `predicates.<alias>.` prefix and without `type`.
    pub fn configs(&self) -> &BTreeMap<String, String> {
        &self.configs
    }
}

impl fmt::Debug for PredicateSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PredicateSpec")
            .field("alias", &self.alias)
            .field("class", &self.class)
            .field("configs", &redacted(&self.configs))
            .finish()
    }
}

fn redacted(
    configs: &BTreeMap<String, String>,
) -> RedactedMap<impl Iterator<Item = (&str, &str)> + Clone> {
    RedactedMap(configs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

/// The converter `key` (`key.converter`, `value.converter` or `header.converter`): the
/// connector's class wins, else the worker's, else [`DEFAULT_CONVERTER`]. Its settings come
/// from the `<key>.` prefix of whichever config named the class; the other config's are
/// ignored, with a warning.
pub(crate) fn converter(key: &str, worker: &Properties, connector: &Properties) -> PluginSpec {
    let prefix = format!("{key}.");
    let class_in = |props: &Properties| {
        props
            .get(key)
            .map(str::trim)
            .filter(|class| !class.is_empty())
            .map(str::to_owned)
    };
    let (spec, from) = if let Some(class) = class_in(connector) {
        (
            PluginSpec::new(class, connector.with_prefix(&prefix)),
            Some("connector"),
        )
    } else if let Some(class) = class_in(worker) {
        (
            PluginSpec::new(class, worker.with_prefix(&prefix)),
            Some("worker"),
        )
    } else {
        (
            PluginSpec::new(DEFAULT_CONVERTER, std::iter::empty::<(String, String)>()),
            None,
        )
    };
    for (config, props) in [("connector", connector), ("worker", worker)] {
        if Some(config) == from {
            continue;
        }
        for (name, _) in props.with_prefix(&prefix) {
            tracing::warn!(
                key = %format_args!("{prefix}{name}"),
                config,
                class = spec.class(),
                "converter setting ignored: `{key}` is not set in the {config} config, and a \
                 converter's settings come from the config that names its class"
            );
        }
    }
    spec
}

/// The transforms and predicates of a connector config.
#[derive(Debug)]
pub(crate) struct Chain {
    pub(crate) transforms: Vec<TransformSpec>,
    pub(crate) predicates: Vec<PredicateSpec>,
}

impl Chain {
    /// Reads `transforms` and `predicates` and the settings of every alias.
    pub(crate) fn parse(connector: &Properties) -> Result<Self, ConfigError> {
        let predicate_aliases = aliases(connector, PREDICATES)?;
        let transform_aliases = aliases(connector, TRANSFORMS)?;

        let mut predicates = Vec::with_capacity(predicate_aliases.len());
        for alias in &predicate_aliases {
            let (class, configs) = plugin(connector, PREDICATES, &predicate_aliases, alias, &[])?;
            predicates.push(PredicateSpec {
                alias: alias.clone(),
                class,
                configs,
            });
        }

        let mut transforms = Vec::with_capacity(transform_aliases.len());
        for alias in &transform_aliases {
            let (class, configs) = plugin(
                connector,
                TRANSFORMS,
                &transform_aliases,
                alias,
                &["predicate", "negate"],
            )?;
            let predicate_key = format!("{TRANSFORMS}.{alias}.predicate");
            let negate_key = format!("{TRANSFORMS}.{alias}.negate");
            let predicate = connector
                .get(&predicate_key)
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_owned);
            let negate = match connector.get(&negate_key) {
                None => false,
                Some(_) if predicate.is_none() => {
                    return Err(ConfigError::NegateWithoutPredicate {
                        key: negate_key,
                        predicate_key,
                    });
                }
                Some(raw) => value::boolean(&negate_key, raw)?,
            };
            if let Some(p) = &predicate {
                if !predicate_aliases.contains(p) {
                    return Err(ConfigError::UndefinedPredicate {
                        key: predicate_key,
                        transform: alias.clone(),
                        predicate: p.clone(),
                    });
                }
            }
            transforms.push(TransformSpec {
                alias: alias.clone(),
                class,
                configs,
                predicate,
                negate,
            });
        }
        Ok(Self {
            transforms,
            predicates,
        })
    }

    /// True if `key` belongs to a listed transform or predicate.
    pub(crate) fn owns(&self, key: &str) -> bool {
        let under = |root: &str, alias: &str| {
            key.strip_prefix(root)
                .and_then(|rest| rest.strip_prefix('.'))
                .and_then(|rest| rest.strip_prefix(alias))
                .is_some_and(|rest| rest.starts_with('.'))
        };
        self.transforms.iter().any(|t| under(TRANSFORMS, &t.alias))
            || self.predicates.iter().any(|p| under(PREDICATES, &p.alias))
    }
}

/// The aliases listed under `key`: no empty or repeated ones.
fn aliases(connector: &Properties, key: &str) -> Result<Vec<String>, ConfigError> {
    let Some(raw) = connector.get(key) else {
        return Ok(Vec::new());
    };
    let aliases = value::list(raw);
    let mut seen = HashSet::new();
    for alias in &aliases {
        if alias.is_empty() {
            return Err(ConfigError::invalid(
                key,
                raw,
                "a comma-separated list of aliases, without empty entries",
            ));
        }
        if !seen.insert(alias.as_str()) {
            return Err(ConfigError::DuplicateAlias {
                key: key.to_owned(),
                value: super::secret::shown(key, raw),
                alias: alias.clone(),
            });
        }
    }
    Ok(aliases)
}

/// The class (`<root>.<alias>.type`) and settings of one alias. A setting of a longer alias
/// that starts with this one and a dot (`a.b` for `a`) is not taken; nor are `type` and
/// `reserved`.
fn plugin(
    connector: &Properties,
    root: &str,
    all: &[String],
    alias: &str,
    reserved: &[&str],
) -> Result<(String, BTreeMap<String, String>), ConfigError> {
    let type_key = format!("{root}.{alias}.type");
    let class = connector
        .get(&type_key)
        .map(str::trim)
        .filter(|class| !class.is_empty())
        .ok_or_else(|| {
            ConfigError::missing(
                &type_key,
                format!("every alias listed in `{root}` needs the class of its plugin"),
            )
        })?
        .to_owned();
    let prefix = format!("{root}.{alias}.");
    let longer: Vec<String> = all
        .iter()
        .filter(|other| other.len() > alias.len() && other.starts_with(&prefix[root.len() + 1..]))
        .map(|other| format!("{root}.{other}."))
        .collect();
    let configs = connector
        .iter()
        .filter(|(k, _)| !longer.iter().any(|l| k.starts_with(l.as_str())))
        .filter_map(|(k, v)| k.strip_prefix(prefix.as_str()).map(|name| (name, v)))
        .filter(|(name, _)| *name != "type" && !reserved.contains(name))
        .map(|(name, v)| (name.to_owned(), v.to_owned()))
        .collect();
    Ok((class, configs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> Properties {
        pairs.iter().copied().collect()
    }

    #[test]
    fn converter_precedence_and_prefixes() {
        let worker = props(&[
            ("value.converter", "W"),
            ("value.converter.schemas.enable", "true"),
        ]);
        let connector = props(&[("value.converter.schemas.enable", "false")]);
        let spec = converter("value.converter", &worker, &connector);
        assert_eq!(spec, PluginSpec::new("W", [("schemas.enable", "true")]));
        let connector = props(&[("value.converter", " C "), ("value.converter.x", "1")]);
        let spec = converter("value.converter", &worker, &connector);
        assert_eq!(spec, PluginSpec::new("C", [("x", "1")]));
        let spec = converter("key.converter", &worker, &connector);
        assert_eq!(spec.class(), DEFAULT_CONVERTER);
        assert!(spec.configs().is_empty());
    }

    #[test]
    fn dotted_aliases_keep_their_own_settings() {
        let connector = props(&[
            ("transforms", "a,a.b"),
            ("transforms.a.type", "A"),
            ("transforms.a.x", "1"),
            ("transforms.a.b.type", "AB"),
            ("transforms.a.b.y", "2"),
        ]);
        let chain = Chain::parse(&connector).unwrap();
        assert_eq!(chain.transforms[0].configs().len(), 1);
        assert_eq!(chain.transforms[0].configs()["x"], "1");
        assert_eq!(chain.transforms[1].class(), "AB");
        assert_eq!(chain.transforms[1].configs()["y"], "2");
        assert!(chain.owns("transforms.a.b.y"));
        assert!(!chain.owns("transforms.c.type"));
        assert!(!chain.owns("transforms"));
    }

    #[test]
    fn debug_redacts_plugin_secrets() {
        let spec = PluginSpec::new("C", [("basic.auth.user.info", "u:hunter2")]);
        assert!(!format!("{spec:?}").contains("hunter2"));
    }
}
