//! [`JsonConverter`]: JSON, with or without Connect's schema envelope.

mod parse;
mod path;
mod payload;
mod schema;
mod tree;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use self::path::Path;
use self::tree::Json;
use super::converter::{ConverterType, SchemaAndValue, subject};
use super::error::{ConvertError, SerializationCause};
use super::string::converter_type;
use crate::plugins::{PluginError, configs};
use crate::record::Value;

/// Connect's message when the JSON cannot be read.
const SERIALIZATION_FAILED: &str =
    "Converting byte[] to Kafka Connect data failed due to serialization error: ";

/// Connect's message when `schemas.enable=true` and the JSON is not an envelope.
const NOT_AN_ENVELOPE: &str = "JsonConverter with schemas.enable requires \"schema\" and \
    \"payload\" fields and may not contain additional fields. If you are trying to deserialize \
    plain JSON data, set schemas.enable=false in your converter configuration.";

/// Converts JSON keys, values and header values, like Connect's
/// `org.apache.kafka.connect.json.JsonConverter`.
///
/// # What is JSON
///
/// By default the converter reads what Connect's reads (Jackson's parser with its default
/// features, plus leading zeros), checked against a real Connect worker: empty or
/// whitespace-only bytes are null; the first complete value is read and what follows it is
/// ignored (`{"a":1} x` is `{"a":1}`), except that a number at the top must be followed by
/// whitespace (`1x` is refused) and `true`, `false` and `null` must not run into a letter or
/// digit (`truex` is refused); a repeated key keeps its first position and its last value;
/// `1e400` is infinite; `007` is 7; UTF-8 with a byte order mark, UTF-16 and UTF-32 are read;
/// an escaped lone surrogate (`"\ud800"`) becomes U+FFFD; NaN and Infinity literals, comments,
/// single quotes, unquoted names, trailing commas, unescaped control characters in strings,
/// nesting deeper than 1000 levels and numbers longer than 1000 characters are refused.
///
/// With `json.strict=true` ([`strict`](Self::strict)) only RFC 8259 JSON is read: UTF-8
/// throughout, exactly one value with nothing but whitespace after it, no leading zeros, no
/// lone surrogates, no repeated keys and no number beyond the range of a double. Use it to
/// dead-letter what Connect would silently accept.
///
/// # Values
///
/// - `schemas.enable=true` (the default, as in Connect): the JSON must be an envelope
///   `{"schema": …, "payload": …}` with no other fields. The schema is checked and the payload
///   converted as it says: integers must fit their width (Java would truncate them), `bytes`
///   are base64, a null or missing value takes the schema's default, else must be optional,
///   struct fields come in schema order and unknown members are ignored. `"schema": null`
///   gives a schemaless payload. Schemas (and payloads they describe) nested deeper than 127
///   levels are refused.
/// - `schemas.enable=false`: any JSON, converted without schema: objects become
///   [`Value::Map`] with string keys in document order, integers
///   [`Value::Int`] (beyond the i64 range, a rounded
///   [`Value::Float`], where Connect keeps the low 64 bits), other numbers
///   `Float`, null or no content [`Value::Null`].
///
/// Logical types keep their physical value (Decimal stays base64-decoded bytes, Date and
/// Time int32, Timestamp int64); their schema's name and parameters say how to read them.
///
/// # Errors
///
/// As Connect's: JSON that cannot be read is a `DataException` with the message
/// `Converting byte[] to Kafka Connect data failed due to serialization error: `, caused by a
/// `SerializationException` and the parser's exception (`JsonParseException`,
/// `JsonEOFException` when the input ends early, `StreamConstraintsException` beyond a limit);
/// what was wrong, and where, is in the causes. A JSON value that is not an envelope while
/// `schemas.enable=true` gets Connect's message for that. See
/// [`DeadLetterRecord::with_context`](crate::DeadLetterRecord::with_context) for how they are
/// written to the dead-letter queue.
///
/// Configs (from [`from_configs`](Self::from_configs)): `schemas.enable`,
/// `replace.null.with.default` (default true), `converter.type`, and this crate's
/// `json.strict` (default false); `schemas.cache.size` and `decimal.format` are checked but
/// change nothing when reading; `schema.content` is not supported. Other keys are ignored, as
/// Connect ignores them.
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
/// assert!(err.unwrap_err().to_string().contains("set schemas.enable=false"));
///
/// // Connect reads the first value and ignores the rest; strict JSON does not.
/// let trailing = Bytes::from_static(br#"{"id": 7} and more"#);
/// assert!(plain.to_sink_data("orders", &Headers::new(), Some(&trailing)).is_ok());
/// let err = plain.strict(true).to_sink_data("orders", &Headers::new(), Some(&trailing)).unwrap_err();
/// assert_eq!(err.to_string(), "Converting byte[] to Kafka Connect data failed due to serialization error: ");
/// let cause = std::error::Error::source(&err).unwrap().to_string();
/// assert!(cause.starts_with("data is not valid JSON: content after the JSON value"), "{cause}");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonConverter {
    schemas_enable: bool,
    replace_null_with_default: bool,
    strict: bool,
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
            strict: false,
            converter_type: None,
        }
    }

    /// `json.strict`: read RFC 8259 JSON only (true), or what Connect's JsonConverter reads
    /// (false, the default). See the type's documentation for the difference.
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
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
            strict: configs::boolean(configs, "json.strict", false)?,
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
        let json = parse::parse(data, self.strict).map_err(|e| {
            let what = match header {
                Some(key) => format!("header `{key}`"),
                None => subject(self.converter_type).to_owned(),
            };
            let hint = if self.strict {
                " (json.strict=true: RFC 8259 JSON only)"
            } else {
                ""
            };
            ConvertError::new(SERIALIZATION_FAILED).with_cause(SerializationCause::parser(
                e.kind.java_class(),
                format!("{what} is not valid JSON: {e}{hint}"),
            ))
        })?;
        if !self.schemas_enable {
            return Ok(SchemaAndValue::schemaless(
                json.map_or(Value::Null, Json::into_value),
            ));
        }
        let Some((schema_json, payload)) = json.and_then(split_envelope) else {
            return Err(ConvertError::new(NOT_AN_ENVELOPE));
        };
        let what = || match header {
            Some(key) => format!("header `{key}`"),
            None => subject(self.converter_type).to_owned(),
        };
        if let Json::Null = schema_json {
            return Ok(SchemaAndValue::schemaless(payload.into_value()));
        }
        // Schema and payload share one budget for the copies of defaults.
        let mut budget = payload::CopyBudget::for_input(data.len());
        let schema = schema::parse_schema(&schema_json, &Path::Root("schema"), 0, &mut budget)
            .map_err(|e| ConvertError::new(format!("{} has an invalid schema: {e}", what())))?;
        let value = payload::to_value(
            &schema,
            payload,
            &Path::Root("payload"),
            self.replace_null_with_default,
            0,
            &mut budget,
        )
        .map_err(|e| ConvertError::new(format!("{} does not match its schema: {e}", what())))?;
        Ok(SchemaAndValue::new(Some(Arc::new(schema)), value))
    }
}

/// The schema and payload of an envelope: an object with exactly the members `schema` and
/// `payload`, as Connect checks it (after a repeated key was merged).
fn split_envelope(json: Json) -> Option<(Json, Json)> {
    let Json::Object(members) = json else {
        return None;
    };
    let is_envelope = members.len() == 2
        && members.iter().any(|(k, _)| k == "schema")
        && members.iter().any(|(k, _)| k == "payload");
    if !is_envelope {
        return None;
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
    Some((schema, payload))
}

value_and_header_converter!(JsonConverter);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::{Converter, HeaderConverter};
    use crate::record::Headers;

    #[test]
    fn envelopes_are_checked_as_connect_checks_them() {
        let envelope = |text: &[u8]| split_envelope(Json::parse(text).unwrap()).is_some();
        assert!(envelope(br#"{"schema":null,"payload":1}"#));
        assert!(!envelope(br#"{"schema":null,"payload":1,"extra":true}"#));
        assert!(!envelope(br#"{"schema":null,"schema":null}"#));
        // A repeated key is merged first, as Jackson merges it.
        assert!(envelope(br#"{"schema":null,"payload":1,"payload":2}"#));
        assert!(!envelope(b"{}"));
        assert!(!envelope(b"[]"));
    }

    #[test]
    fn envelope_errors_have_connects_message() {
        let converter = JsonConverter::new();
        for text in [&b"1"[..], b"", b"null", br#"{"payload":1}"#] {
            let err = converter
                .to_sink_header("t", "trace", Some(&Bytes::copy_from_slice(text)))
                .unwrap_err();
            assert_eq!(err.to_string(), NOT_AN_ENVELOPE);
            assert!(std::error::Error::source(&err).is_none());
        }
        assert!(
            converter
                .to_sink_data("t", &Headers::new(), None)
                .unwrap()
                .value()
                .is_null()
        );
    }

    #[test]
    fn parse_errors_have_connects_message_and_our_detail() {
        let err = JsonConverter::new()
            .schemas_enable(false)
            .to_sink_header("t", "trace", Some(&Bytes::from_static(b"{oops")))
            .unwrap_err();
        assert_eq!(err.to_string(), SERIALIZATION_FAILED);
        assert_eq!(
            err.exception_class(),
            "org.apache.kafka.connect.errors.DataException"
        );
        let cause = std::error::Error::source(&err).unwrap();
        let cause = cause.downcast_ref::<SerializationCause>().unwrap();
        assert_eq!(
            cause.parser_class(),
            Some("com.fasterxml.jackson.core.JsonParseException")
        );
        assert!(
            cause
                .detail()
                .starts_with("header `trace` is not valid JSON: unexpected character 'o'"),
            "{}",
            cause.detail()
        );
    }

    #[test]
    fn strict_comes_from_the_config() {
        let configs = BTreeMap::from([
            ("json.strict".to_owned(), "true".to_owned()),
            ("schemas.enable".to_owned(), "false".to_owned()),
        ]);
        let converter = JsonConverter::from_configs(&configs).unwrap();
        assert_eq!(
            converter,
            JsonConverter::new().schemas_enable(false).strict(true)
        );
        let empty = Some(Bytes::new());
        assert!(
            converter
                .to_sink_data("t", &Headers::new(), empty.as_ref())
                .is_err()
        );
        let lenient = JsonConverter::new().schemas_enable(false);
        let converted = lenient
            .to_sink_data("t", &Headers::new(), empty.as_ref())
            .unwrap();
        assert!(converted.value().is_null());
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
