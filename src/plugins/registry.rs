//! [`Plugins`]: converters, transforms and predicates by class name.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use super::error::{PluginError, PluginKind};
use super::spec::ChainStageSpec;
use crate::convert::{
    ByteArrayConverter, Converter, ConverterType, HeaderConverter, JsonConverter,
    SimpleHeaderConverter, StringConverter,
};
use crate::transform::{
    DropHeaders, Filter, HasHeaderKey, InsertHeader, Predicate, RecordIsTombstone,
    TopicNameMatches, Transform, TransformChain,
};

type Configs = BTreeMap<String, String>;
type Factory<T> = Arc<dyn Fn(&Configs) -> Result<Arc<T>, PluginError> + Send + Sync>;

/// Builds converters, transforms and predicates from Kafka Connect class names and their
/// configs (the part after the plugin's prefix, such as `value.converter.`).
///
/// The built-ins are registered under Connect's class names and their short aliases:
///
/// | Kind | Class (alias) |
/// |---|---|
/// | converter, header converter | `org.apache.kafka.connect.converters.ByteArrayConverter` (`ByteArrayConverter`), `org.apache.kafka.connect.storage.StringConverter` (`StringConverter`), `org.apache.kafka.connect.json.JsonConverter` (`JsonConverter`) |
/// | header converter | `org.apache.kafka.connect.storage.SimpleHeaderConverter` (`SimpleHeaderConverter`) |
/// | transform | `org.apache.kafka.connect.transforms.Filter` (`Filter`), `….InsertHeader` (`InsertHeader`), `….DropHeaders` (`DropHeaders`) |
/// | predicate | `org.apache.kafka.connect.transforms.predicates.HasHeaderKey` (`HasHeaderKey`, config `name`), `….TopicNameMatches` (`TopicNameMatches`, config `pattern`), `….RecordIsTombstone` (`RecordIsTombstone`) |
///
/// Register your own with [`register_converter`](Self::register_converter) and its
/// siblings; a name registered again replaces the earlier factory.
///
/// ```
/// use std::collections::BTreeMap;
/// use std::sync::Arc;
/// use kafka_share_sink::{ChainStageSpec, Plugins, SinkRecord, Value};
/// use kafka_share_sink::transform::transform_fn;
///
/// let mut plugins = Plugins::new();
/// plugins.register_transform("com.example.Redact", |_configs| {
///     Ok(Arc::new(transform_fn(|r: SinkRecord| Ok(Some(r.with_value(Value::Null))))))
/// });
///
/// let json = BTreeMap::from([("schemas.enable".to_owned(), "false".to_owned())]);
/// let value = plugins.build_converter("JsonConverter", &json, false).unwrap();
/// assert_eq!(value.class_name(), "org.apache.kafka.connect.json.JsonConverter");
///
/// let none = BTreeMap::new();
/// let chain = plugins
///     .build_chain([ChainStageSpec::new("redact", "com.example.Redact", &none)])
///     .unwrap();
/// assert_eq!(chain.len(), 1);
///
/// let err = plugins.build_transform("Nope", &none).unwrap_err().to_string();
/// assert!(err.starts_with("transform Nope: unknown transform class `Nope`; known: "));
/// ```
#[derive(Clone)]
pub struct Plugins {
    converters: BTreeMap<String, Factory<dyn Converter>>,
    header_converters: BTreeMap<String, Factory<dyn HeaderConverter>>,
    transforms: BTreeMap<String, Factory<dyn Transform>>,
    predicates: BTreeMap<String, Factory<dyn Predicate>>,
}

impl fmt::Debug for Plugins {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plugins")
            .field("converters", &self.converters.keys())
            .field("header_converters", &self.header_converters.keys())
            .field("transforms", &self.transforms.keys())
            .field("predicates", &self.predicates.keys())
            .finish()
    }
}

impl Default for Plugins {
    fn default() -> Self {
        Self::new()
    }
}

/// The short alias of a class name: what follows the last dot.
fn alias(class: &str) -> &str {
    class.rsplit('.').next().unwrap_or(class)
}

impl Plugins {
    /// A registry with the built-ins.
    pub fn new() -> Self {
        let mut plugins = Self::empty();
        plugins.register_both(ByteArrayConverter::CLASS_NAME, |_| {
            Ok(Arc::new(ByteArrayConverter))
        });
        plugins.register_both(StringConverter::CLASS_NAME, |c| {
            Ok(Arc::new(StringConverter::from_configs(c)?))
        });
        plugins.register_both(JsonConverter::CLASS_NAME, |c| {
            Ok(Arc::new(JsonConverter::from_configs(c)?))
        });
        for name in [
            SimpleHeaderConverter::CLASS_NAME,
            alias(SimpleHeaderConverter::CLASS_NAME),
        ] {
            plugins.register_header_converter(name, |_| Ok(Arc::new(SimpleHeaderConverter)));
        }
        for name in [Filter::CLASS_NAME, alias(Filter::CLASS_NAME)] {
            plugins.register_transform(name, |_| Ok(Arc::new(Filter)));
        }
        for name in [InsertHeader::CLASS_NAME, alias(InsertHeader::CLASS_NAME)] {
            plugins.register_transform(name, |c| Ok(Arc::new(InsertHeader::from_configs(c)?)));
        }
        for name in [DropHeaders::CLASS_NAME, alias(DropHeaders::CLASS_NAME)] {
            plugins.register_transform(name, |c| Ok(Arc::new(DropHeaders::from_configs(c)?)));
        }
        for name in [HasHeaderKey::CLASS_NAME, alias(HasHeaderKey::CLASS_NAME)] {
            plugins.register_predicate(name, |c| Ok(Arc::new(HasHeaderKey::from_configs(c)?)));
        }
        for name in [
            TopicNameMatches::CLASS_NAME,
            alias(TopicNameMatches::CLASS_NAME),
        ] {
            plugins.register_predicate(name, |c| Ok(Arc::new(TopicNameMatches::from_configs(c)?)));
        }
        for name in [
            RecordIsTombstone::CLASS_NAME,
            alias(RecordIsTombstone::CLASS_NAME),
        ] {
            plugins.register_predicate(name, |_| Ok(Arc::new(RecordIsTombstone)));
        }
        plugins
    }

    /// A registry with nothing registered.
    pub fn empty() -> Self {
        Self {
            converters: BTreeMap::new(),
            header_converters: BTreeMap::new(),
            transforms: BTreeMap::new(),
            predicates: BTreeMap::new(),
        }
    }

    /// Registers a converter usable for keys, values and headers under its class name and
    /// alias.
    fn register_both<C, F>(&mut self, class: &str, factory: F)
    where
        C: Converter + HeaderConverter,
        F: Fn(&Configs) -> Result<Arc<C>, PluginError> + Send + Sync + Clone + 'static,
    {
        for name in [class, alias(class)] {
            let f = factory.clone();
            self.register_converter(name, move |c| Ok(f(c)? as Arc<dyn Converter>));
            let f = factory.clone();
            self.register_header_converter(name, move |c| Ok(f(c)? as Arc<dyn HeaderConverter>));
        }
    }

    /// Registers a key/value converter factory under `name`. The factory receives the
    /// converter's configs plus `converter.type` (`key` or `value`), as Connect passes it.
    pub fn register_converter<F>(&mut self, name: impl Into<String>, factory: F) -> &mut Self
    where
        F: Fn(&Configs) -> Result<Arc<dyn Converter>, PluginError> + Send + Sync + 'static,
    {
        self.converters.insert(name.into(), Arc::new(factory));
        self
    }

    /// Registers a header converter factory under `name`. The factory receives the
    /// converter's configs plus `converter.type=header`.
    pub fn register_header_converter<F>(&mut self, name: impl Into<String>, factory: F) -> &mut Self
    where
        F: Fn(&Configs) -> Result<Arc<dyn HeaderConverter>, PluginError> + Send + Sync + 'static,
    {
        self.header_converters
            .insert(name.into(), Arc::new(factory));
        self
    }

    /// Registers a transform factory under `name`.
    pub fn register_transform<F>(&mut self, name: impl Into<String>, factory: F) -> &mut Self
    where
        F: Fn(&Configs) -> Result<Arc<dyn Transform>, PluginError> + Send + Sync + 'static,
    {
        self.transforms.insert(name.into(), Arc::new(factory));
        self
    }

    /// Registers a predicate factory under `name`.
    pub fn register_predicate<F>(&mut self, name: impl Into<String>, factory: F) -> &mut Self
    where
        F: Fn(&Configs) -> Result<Arc<dyn Predicate>, PluginError> + Send + Sync + 'static,
    {
        self.predicates.insert(name.into(), Arc::new(factory));
        self
    }

    /// Builds the key (`is_key`) or value converter of class `class` (a class name or alias,
    /// surrounding spaces ignored) from its configs, without the `key.converter.` or
    /// `value.converter.` prefix.
    pub fn build_converter(
        &self,
        class: &str,
        configs: &Configs,
        is_key: bool,
    ) -> Result<Arc<dyn Converter>, PluginError> {
        let converter_type = if is_key {
            ConverterType::Key
        } else {
            ConverterType::Value
        };
        let label = || {
            let prefix = converter_type.config_prefix().trim_end_matches('.');
            format!("{prefix} {}", class.trim())
        };
        let configs = with_converter_type(configs, converter_type);
        build(
            &self.converters,
            PluginKind::Converter,
            class,
            &configs,
            &label,
        )
    }

    /// Builds the header converter of class `class` from its configs, without the
    /// `header.converter.` prefix.
    pub fn build_header_converter(
        &self,
        class: &str,
        configs: &Configs,
    ) -> Result<Arc<dyn HeaderConverter>, PluginError> {
        let label = || format!("header.converter {}", class.trim());
        let configs = with_converter_type(configs, ConverterType::Header);
        build(
            &self.header_converters,
            PluginKind::HeaderConverter,
            class,
            &configs,
            &label,
        )
    }

    /// Builds the transform of class `class` from its configs.
    pub fn build_transform(
        &self,
        class: &str,
        configs: &Configs,
    ) -> Result<Arc<dyn Transform>, PluginError> {
        let label = || format!("transform {}", class.trim());
        build(
            &self.transforms,
            PluginKind::Transform,
            class,
            configs,
            &label,
        )
    }

    /// Builds the predicate of class `class` from its configs.
    pub fn build_predicate(
        &self,
        class: &str,
        configs: &Configs,
    ) -> Result<Arc<dyn Predicate>, PluginError> {
        let label = || format!("predicate {}", class.trim());
        build(
            &self.predicates,
            PluginKind::Predicate,
            class,
            configs,
            &label,
        )
    }

    /// Builds a [`TransformChain`] from configured stages, in order; errors name the stage
    /// (`transforms.<alias>` or `predicates.<alias>`) and class.
    pub fn build_chain<'a>(
        &self,
        stages: impl IntoIterator<Item = ChainStageSpec<'a>>,
    ) -> Result<TransformChain, PluginError> {
        let mut chain = TransformChain::new();
        for stage in stages {
            let label = || format!("transforms.{} ({})", stage.alias, stage.class.trim());
            let transform = build(
                &self.transforms,
                PluginKind::Transform,
                stage.class,
                stage.configs,
                &label,
            )?;
            let predicate = match stage.predicate {
                Some(p) => {
                    let label = || format!("predicates.{} ({})", p.alias, p.class.trim());
                    Some(build(
                        &self.predicates,
                        PluginKind::Predicate,
                        p.class,
                        p.configs,
                        &label,
                    )?)
                }
                None => None,
            };
            chain = chain.push(
                Some(stage.alias.to_owned()),
                transform,
                predicate,
                stage.negate,
            );
        }
        Ok(chain)
    }
}

/// The configs with `converter.type` set, as Connect sets it.
fn with_converter_type(configs: &Configs, converter_type: ConverterType) -> Configs {
    let mut configs = configs.clone();
    configs.insert(
        "converter.type".to_owned(),
        converter_type.connect_name().to_owned(),
    );
    configs
}

fn build<T: ?Sized>(
    factories: &BTreeMap<String, Factory<T>>,
    kind: PluginKind,
    class: &str,
    configs: &Configs,
    label: &dyn Fn() -> String,
) -> Result<Arc<T>, PluginError> {
    let class = class.trim();
    let Some(factory) = factories.get(class) else {
        return Err(PluginError::UnknownClass {
            plugin: label(),
            kind,
            class: class.to_owned(),
            known: factories.keys().cloned().collect(),
        });
    };
    factory(configs).map_err(|e| e.labelled(label))
}
