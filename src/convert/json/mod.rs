//! [`JsonConverter`]: JSON, with or without Connect's schema envelope.

mod path;
mod payload;
mod schema;
mod tree;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use bytes::Bytes;

use self::path::Path;
use self::tree::{Json, MAX_DEPTH};
use super::converter::{Converter, ConverterType, HeaderConverter, SchemaAndValue, subject};
use super::error::ConvertError;
use super::string::converter_type;
use crate::plugins::{PluginError, configs};
use crate::record::Headers;

/// Converts JSON keys, values and header values, like Connect's
/// `org.apache.kafka.connect.json.JsonConverter`.
///
/// - `schemas.enable=true` (the default, as in Connect): the JSON must be an envelope
///   `{"schema": …, "payload": …}` with no other fields. The schema is checked and the payload
///   converted as it says: integers must fit their width (Java would truncate them), `bytes`
///   are base64, a null or missing value takes the schema's default, else must be optional,
///   struct fields come in schema order and unknown members are ignored. `"schema": null`
///   gives a schemaless payload.
/// - `schemas.enable=false`: any JSON, converted without schema: objects become
///   [`Value::Map`](crate::Value::Map) with string keys in document order, integers
///   [`Value::Int`](crate::Value::Int) (beyond the i64 range, a rounded
///   [`Value::Float`](crate::Value::Float)), other numbers `Float`.
///
/// Logical types keep their physical value (Decimal stays base64-decoded bytes, Date and
/// Time int32, Timestamp int64); their schema's name and parameters say how to read them.
/// Nesting deeper than 127 levels is refused, as is anything after the JSON document.
///
/// Configs (from [`from_configs`](Self::from_configs)): `schemas.enable`,
/// `replace.null.with.default` (default true), `converter.type`; `schemas.cache.size` and
/// `decimal.format` are checked but change nothing when reading; `schema.content` is not
/// supported. Other keys are ignored, as Connect ignores them.
///
/// ```
/// use bytes::Bytes;
/// use kafka_share_sink::{Converter, ConverterType, Headers, SchemaType, Value};
/// use kafka_share_sink::convert::JsonConverter;
///
/// let plain = JsonConverter::new().schemas_enable(false);
/// let data = Bytes::from_static(br#"{"id": 7, "tags": ["a"]}"#);
/// let converted = plain.to_sink_data("orders", &Headers::new(), Some(&data)).unwrap();
/// assert!(converted.schema().is_none());
/// assert_eq!(converted.value().get("id"), Some(&Value::Int(7)));
///
/// let enveloped = JsonConverter::new().converter_type(ConverterType::Value);
/// let data = Bytes::from_static(br#"{"schema": {"type": "int16"}, "payload": 300}"#);
/// let converted = enveloped.to_sink_data("orders", &Headers::new(), Some(&data)).unwrap();
/// assert_eq!(converted.schema().unwrap().schema_type(), SchemaType::Int16);
/// assert_eq!(converted.value(), &Value::Int(300));
///
/// let err = enveloped.to_sink_data("orders", &Headers::new(), Some(&Bytes::from_static(b"{\"id\": 7}")));
/// assert!(err.unwrap_err().to_string().contains("set value.converter.schemas.enable=false"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonConverter {
    schemas_enable: bool,
    replace_null_with_default: bool,
    converter_type: Option<ConverterType>,
}

impl Default for JsonConverter {
    fn default() -> Self {
        Self::new()
    }
}

impl JsonConverter {
    /// Connect's class name.
    pub const CLASS_NAME: &'static str = "org.apache.kafka.connect.json.JsonConverter";

    /// A converter expecting the schema envelope (`schemas.enable=true`, Connect's default).
    pub fn new() -> Self {
        Self {
            schemas_enable: true,
            replace_null_with_default: true,
            converter_type: None,
        }
    }

    /// `schemas.enable`: expect the `{"schema", "payload"}` envelope (true) or plain JSON.
    pub fn schemas_enable(mut self, enable: bool) -> Self {
        self.schemas_enable = enable;
        self
    }

    /// `replace.null.with.default`: whether a null takes its schema's default (true).
    pub fn replace_null_with_default(mut self, replace: bool) -> Self {
        self.replace_null_with_default = replace;
        self
    }

    /// Says what this converter converts, so its errors name it and the config to change.
    pub fn converter_type(mut self, converter_type: ConverterType) -> Self {
        self.converter_type = Some(converter_type);
        self
    }

    /// Builds the converter from Connect's configs (see the type's documentation).
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use kafka_share_sink::convert::JsonConverter;
    ///
    /// let configs = BTreeMap::from([("schemas.enable".to_owned(), "maybe".to_owned())]);
    /// let err = JsonConverter::from_configs(&configs).unwrap_err();
    /// assert_eq!(err.to_string(), "config `schemas.enable` has invalid value `maybe`: expected true or false");
    /// ```
    pub fn from_configs(configs: &BTreeMap<String, String>) -> Result<Self, PluginError> {
        configs::non_negative_int(configs, "schemas.cache.size")?;
        if let Some(format) = configs.get("decimal.format") {
            let f = format.trim();
            if !(f.eq_ignore_ascii_case("BASE64") || f.eq_ignore_ascii_case("NUMERIC")) {
                return Err(PluginError::invalid_config(
                    "decimal.format",
                    format,
                    "expected BASE64 or NUMERIC",
                ));
            }
        }
        if let Some(content) = configs.get("schema.content") {
            return Err(PluginError::invalid_config(
                "schema.content",
                content,
                "a fixed schema is not supported; send the schema in each envelope, or set \
                 schemas.enable=false",
            ));
        }
        Ok(Self {
            schemas_enable: configs::boolean(configs, "schemas.enable", true)?,
            replace_null_with_default: configs::boolean(
                configs,
                "replace.null.with.default",
                true,
            )?,
            converter_type: converter_type(configs)?,
        })
    }

    fn convert(
        &self,
        data: Option<&Bytes>,
        header: Option<&str>,
    ) -> Result<SchemaAndValue, ConvertError> {
        let Some(data) = data else {
            return Ok(SchemaAndValue::null());
        };
        let what = || match header {
            Some(key) => format!("header `{key}`"),
            None => subject(self.converter_type).to_owned(),
        };
        let json = Json::parse(data).map_err(|e| {
            let deep = if e.to_string().starts_with("recursion limit exceeded") {
                format!(" (nesting deeper than {MAX_DEPTH} levels is refused)")
            } else {
                String::new()
            };
            ConvertError::new(format!(
                "{} is not valid JSON: {e}{deep}; fix the producer, or use the StringConverter or \
                 ByteArrayConverter for data that is not JSON",
                what()
            ))
        })?;
        if !self.schemas_enable {
            return Ok(SchemaAndValue::schemaless(json.into_value()));
        }
        let (schema_json, payload) = match split_envelope(json) {
            Ok(parts) => parts,
            Err(found) => {
                let setting = match (header, self.converter_type) {
                    (Some(_), _) => ConverterType::Header.config_prefix(),
                    (None, Some(t)) => t.config_prefix(),
                    (None, None) => "",
                };
                return Err(ConvertError::new(format!(
                    "{} is not a JsonConverter envelope: with schemas.enable=true the JSON must be \
                     an object with exactly the fields \"schema\" and \"payload\", found {found}; \
                     for plain JSON set {setting}schemas.enable=false",
                    what()
                )));
            }
        };
        if let Json::Null = schema_json {
            return Ok(SchemaAndValue::schemaless(payload.into_value()));
        }
        let schema = schema::parse_schema(&schema_json, &Path::Root("schema"), 0)
            .map_err(|e| ConvertError::new(format!("{} has an invalid schema: {e}", what())))?;
        let value = payload::to_value(
            &schema,
            payload,
            &Path::Root("payload"),
            self.replace_null_with_default,
            0,
        )
        .map_err(|e| ConvertError::new(format!("{} does not match its schema: {e}", what())))?;
        Ok(SchemaAndValue::new(Some(Arc::new(schema)), value))
    }
}

/// The schema and payload of an envelope, or a description of what was found instead.
fn split_envelope(json: Json) -> Result<(Json, Json), String> {
    let members = match json {
        Json::Object(members) => members,
        other => return Err(other.kind().to_owned()),
    };
    let is_envelope = members.len() == 2
        && members.iter().any(|(k, _)| k == "schema")
        && members.iter().any(|(k, _)| k == "payload");
    if !is_envelope {
        let mut found = if members.is_empty() {
            "an empty object".to_owned()
        } else {
            "an object with fields ".to_owned()
        };
        for (i, (key, _)) in members.iter().take(5).enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(found, "{sep}`{key}`");
        }
        if members.len() > 5 {
            let _ = write!(found, " and {} more", members.len() - 5);
        }
        return Err(found);
    }
    let mut schema = Json::Null;
    let mut payload = Json::Null;
    for (key, value) in members {
        if key == "schema" {
            schema = value;
        } else {
            payload = value;
        }
    }
    Ok((schema, payload))
}

impl Converter for JsonConverter {
    fn to_sink_data(
        &self,
        _topic: &str,
        _headers: &Headers,
        data: Option<&Bytes>,
    ) -> Result<SchemaAndValue, ConvertError> {
        self.convert(data, None)
    }

    fn class_name(&self) -> &str {
        Self::CLASS_NAME
    }
}

impl HeaderConverter for JsonConverter {
    fn to_sink_header(
        &self,
        _topic: &str,
        key: &str,
        value: Option<&Bytes>,
    ) -> Result<SchemaAndValue, ConvertError> {
        self.convert(value, Some(key))
    }

    fn class_name(&self) -> &str {
        Self::CLASS_NAME
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_description_lists_a_few_fields() {
        let json = Json::parse(br#"{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7}"#).unwrap();
        assert_eq!(
            split_envelope(json).unwrap_err(),
            "an object with fields `a`, `b`, `c`, `d`, `e` and 2 more"
        );
        let json = Json::parse(br#"{"schema":null,"payload":1,"extra":true}"#).unwrap();
        assert!(split_envelope(json).is_err());
        let json = Json::parse(br#"{"schema":null,"schema":null}"#).unwrap();
        assert!(split_envelope(json).is_err());
        assert_eq!(
            split_envelope(Json::parse(b"{}").unwrap()).unwrap_err(),
            "an empty object"
        );
    }

    #[test]
    fn header_envelope_errors_name_the_header_setting() {
        let err = JsonConverter::new()
            .to_sink_header("t", "trace", Some(&Bytes::from_static(b"1")))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("header `trace` is not a JsonConverter envelope"),
            "{err}"
        );
        assert!(
            err.ends_with("set header.converter.schemas.enable=false"),
            "{err}"
        );
    }

    #[test]
    fn null_schema_gives_a_schemaless_payload() {
        let converted = JsonConverter::new()
            .to_sink_data(
                "t",
                &Headers::new(),
                Some(&Bytes::from_static(br#"{"payload":[1],"schema":null}"#)),
            )
            .unwrap();
        assert!(converted.schema().is_none());
        assert_eq!(
            converted.value(),
            &crate::record::Value::Array(vec![crate::record::Value::Int(1)])
        );
    }
}
