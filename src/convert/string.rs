//! [`StringConverter`]: UTF-8 text.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::converter::{Converter, ConverterType, HeaderConverter, SchemaAndValue, subject};
use super::error::ConvertError;
use super::schema::optional_string;
use crate::plugins::PluginError;
use crate::record::{Headers, Value};

/// Decodes keys, values and header values as UTF-8 text into [`Value::String`] (null stays
/// [`Value::Null`]), with Connect's optional string schema. Connect's
/// `org.apache.kafka.connect.storage.StringConverter`.
///
/// Unlike Java, which replaces malformed input with U+FFFD, invalid UTF-8 is an error that
/// gives the byte offset, so no data is changed silently. Only UTF-8 is supported:
/// `converter.encoding` must be `UTF-8` (or `UTF8`, any case).
///
/// ```
/// use bytes::Bytes;
/// use kafka_share_sink::{Converter, ConverterType, Headers, Value};
/// use kafka_share_sink::convert::StringConverter;
///
/// let converter = StringConverter::new().converter_type(ConverterType::Value);
/// let ok = converter.to_sink_data("t", &Headers::new(), Some(&Bytes::from_static(b"caf\xc3\xa9")));
/// assert_eq!(ok.unwrap().value(), &Value::String("café".into()));
///
/// let err = converter
///     .to_sink_data("t", &Headers::new(), Some(&Bytes::from_static(b"ab\xff")))
///     .unwrap_err();
/// assert!(err.to_string().starts_with("value is not valid UTF-8: invalid byte at offset 2"));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StringConverter {
    converter_type: Option<ConverterType>,
}

impl StringConverter {
    /// Connect's class name.
    pub const CLASS_NAME: &'static str = "org.apache.kafka.connect.storage.StringConverter";

    /// A UTF-8 converter.
    pub fn new() -> Self {
        Self::default()
    }

    /// Says what this converter converts, so its errors name it (`key`, `value`).
    pub fn converter_type(mut self, converter_type: ConverterType) -> Self {
        self.converter_type = Some(converter_type);
        self
    }

    /// Builds the converter from Connect's configs: `converter.encoding` (only UTF-8) and
    /// `converter.type`; other keys are ignored, as Connect ignores them.
    pub fn from_configs(configs: &BTreeMap<String, String>) -> Result<Self, PluginError> {
        for key in ["converter.encoding", "deserializer.encoding"] {
            if let Some(encoding) = configs.get(key) {
                let e = encoding.trim();
                if !(e.eq_ignore_ascii_case("UTF-8") || e.eq_ignore_ascii_case("UTF8")) {
                    return Err(PluginError::invalid_config(
                        key,
                        encoding,
                        "only UTF-8 is supported; convert the data to UTF-8 or use the \
                         ByteArrayConverter",
                    ));
                }
            }
        }
        Ok(Self {
            converter_type: converter_type(configs)?,
        })
    }

    fn convert(
        &self,
        data: Option<&Bytes>,
        header: Option<&str>,
    ) -> Result<SchemaAndValue, ConvertError> {
        let Some(data) = data else {
            return Ok(SchemaAndValue::new(Some(optional_string()), Value::Null));
        };
        match std::str::from_utf8(data) {
            Ok(text) => Ok(SchemaAndValue::new(
                Some(optional_string()),
                Value::String(text.to_owned()),
            )),
            Err(e) => {
                let what = match header {
                    Some(key) => format!("header `{key}`"),
                    None => subject(self.converter_type).to_owned(),
                };
                Err(ConvertError::new(format!(
                    "{what} is not valid UTF-8: invalid byte at offset {} (of {} bytes); use the \
                     ByteArrayConverter, or fix the producer to write UTF-8",
                    e.valid_up_to(),
                    data.len()
                )))
            }
        }
    }
}

/// The `converter.type` config, if present.
pub(crate) fn converter_type(
    configs: &BTreeMap<String, String>,
) -> Result<Option<ConverterType>, PluginError> {
    configs
        .get("converter.type")
        .map(|raw| {
            ConverterType::parse(raw).ok_or_else(|| {
                PluginError::invalid_config("converter.type", raw, "expected key, value or header")
            })
        })
        .transpose()
}

impl Converter for StringConverter {
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

impl HeaderConverter for StringConverter {
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
    use crate::plugins::configs::configs;

    #[test]
    fn utf8_encodings_are_accepted_others_rejected() {
        assert!(StringConverter::from_configs(&configs(&[("converter.encoding", "utf8")])).is_ok());
        let err = StringConverter::from_configs(&configs(&[("converter.encoding", "ISO-8859-1")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`converter.encoding` has invalid value `ISO-8859-1`"),
            "{err}"
        );
        assert!(err.contains("only UTF-8 is supported"), "{err}");
    }

    #[test]
    fn header_errors_name_the_header() {
        let err = StringConverter::new()
            .to_sink_header("t", "trace", Some(&Bytes::from_static(b"\xc3")))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "header `trace` is not valid UTF-8: invalid byte at offset 0 (of 1 bytes); use the \
             ByteArrayConverter, or fix the producer to write UTF-8"
        );
    }

    #[test]
    fn null_is_null_with_string_schema() {
        let converted = StringConverter::new()
            .to_sink_data("t", &Headers::new(), None)
            .unwrap();
        assert!(converted.value().is_null());
        assert!(converted.schema().unwrap().is_optional());
    }
}
