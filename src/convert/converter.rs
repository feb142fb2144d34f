//! The [`Converter`] and [`HeaderConverter`] traits and what they return.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

use super::error::ConvertError;
use super::schema::Schema;
use crate::record::{Headers, Value};

/// A converted key, value or header: the value and its schema (`None` when schemaless).
///
/// ```
/// use kafka_share_sink::{SchemaAndValue, Value};
///
/// let converted = SchemaAndValue::schemaless(Value::Int(3));
/// assert!(converted.schema().is_none());
/// assert_eq!(converted.value(), &Value::Int(3));
/// assert!(SchemaAndValue::null().value().is_null());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaAndValue {
    schema: Option<Arc<Schema>>,
    value: Value,
}

impl SchemaAndValue {
    /// A value with its schema.
    pub fn new(schema: Option<Arc<Schema>>, value: Value) -> Self {
        Self { schema, value }
    }

    /// A value without schema.
    pub fn schemaless(value: Value) -> Self {
        Self {
            schema: None,
            value,
        }
    }

    /// Null without schema (Connect's `SchemaAndValue.NULL`).
    pub fn null() -> Self {
        Self::schemaless(Value::Null)
    }

    /// The schema, if any.
    pub fn schema(&self) -> Option<&Schema> {
        self.schema.as_deref()
    }

    /// The value.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The schema and the value, moved out.
    pub fn into_parts(self) -> (Option<Arc<Schema>>, Value) {
        (self.schema, self.value)
    }
}

/// What a converter converts, as Connect passes it in the `converter.type` config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConverterType {
    /// Record keys (`key`).
    Key,
    /// Record values (`value`).
    Value,
    /// Header values (`header`).
    Header,
}

impl ConverterType {
    /// Connect's name, the value of `converter.type`.
    ///
    /// ```
    /// use kafka_share_sink::ConverterType;
    /// assert_eq!(ConverterType::Key.connect_name(), "key");
    /// assert_eq!(ConverterType::parse("HEADER"), Some(ConverterType::Header));
    /// ```
    pub fn connect_name(self) -> &'static str {
        match self {
            Self::Key => "key",
            Self::Value => "value",
            Self::Header => "header",
        }
    }

    /// Parses Connect's name, ignoring case and surrounding spaces.
    pub fn parse(name: &str) -> Option<Self> {
        let name = name.trim();
        [Self::Key, Self::Value, Self::Header]
            .into_iter()
            .find(|t| t.connect_name().eq_ignore_ascii_case(name))
    }

    /// The prefix of this converter's settings in a connector config (`value.converter.`).
    pub(crate) fn config_prefix(self) -> &'static str {
        match self {
            Self::Key => "key.converter.",
            Self::Value => "value.converter.",
            Self::Header => "header.converter.",
        }
    }
}

impl fmt::Display for ConverterType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.connect_name())
    }
}

/// Turns the bytes of a record key or value into a [`Value`] and its [`Schema`], like
/// Kafka Connect's `Converter.toConnectData`.
///
/// Must never panic on any input; return a [`ConvertError`] that says what was wrong.
///
/// ```
/// use bytes::Bytes;
/// use kafka_share_sink::{ConvertError, Converter, Headers, SchemaAndValue, Value};
///
/// /// Big-endian i64 keys.
/// #[derive(Debug)]
/// struct LongConverter;
///
/// impl Converter for LongConverter {
///     fn to_sink_data(&self, _topic: &str, _headers: &Headers, data: Option<&Bytes>)
///         -> Result<SchemaAndValue, ConvertError> {
///         let Some(data) = data else { return Ok(SchemaAndValue::null()) };
///         let bytes: [u8; 8] = data.as_ref().try_into().map_err(|_| {
///             ConvertError::new(format!("expected 8 bytes, found {}", data.len()))
///         })?;
///         Ok(SchemaAndValue::schemaless(Value::Int(i64::from_be_bytes(bytes))))
///     }
///     fn class_name(&self) -> &str { "com.example.LongConverter" }
/// }
///
/// let converted = LongConverter
///     .to_sink_data("t", &Headers::new(), Some(&Bytes::from_static(&[0, 0, 0, 0, 0, 0, 1, 0])))
///     .unwrap();
/// assert_eq!(converted.value(), &Value::Int(256));
/// assert!(LongConverter.to_sink_data("t", &Headers::new(), Some(&Bytes::new())).is_err());
/// ```
pub trait Converter: Any + Send + Sync + fmt::Debug {
    /// Connect's `toConnectData`: the bytes of a key or value (`None` for null) of a record of
    /// `topic` with these headers, as a schema and value.
    fn to_sink_data(
        &self,
        topic: &str,
        headers: &Headers,
        data: Option<&Bytes>,
    ) -> Result<SchemaAndValue, ConvertError>;

    /// The name written to the `__connect.errors.class.name` dead-letter header and to logs.
    /// The built-in converters answer with Connect's class name.
    fn class_name(&self) -> &str {
        std::any::type_name::<Self>()
    }
}

/// Turns the bytes of one header value into a [`Value`] and its [`Schema`], like Kafka
/// Connect's `HeaderConverter.toConnectHeader`.
///
/// Must never panic on any input; return a [`ConvertError`] that says what was wrong.
pub trait HeaderConverter: Any + Send + Sync + fmt::Debug {
    /// Connect's `toConnectHeader`: the value (`None` for null) of header `key` of a record
    /// of `topic`, as a schema and value.
    fn to_sink_header(
        &self,
        topic: &str,
        key: &str,
        value: Option<&Bytes>,
    ) -> Result<SchemaAndValue, ConvertError>;

    /// The name written to the `__connect.errors.class.name` dead-letter header and to logs.
    /// The built-in converters answer with Connect's class name.
    fn class_name(&self) -> &str {
        std::any::type_name::<Self>()
    }
}

/// What a built-in converter is converting, for its error messages.
pub(crate) fn subject(converter_type: Option<ConverterType>) -> &'static str {
    match converter_type {
        Some(ConverterType::Key) => "key",
        Some(ConverterType::Value) => "value",
        Some(ConverterType::Header) => "header value",
        None => "data",
    }
}
