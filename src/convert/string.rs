//! [`StringConverter`]: UTF-8 text.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::converter::{ConverterType, SchemaAndValue, subject};
use super::error::{ConvertError, SerializationCause};
use super::schema::optional_string;
use crate::plugins::PluginError;
use crate::record::Value;

/// Decodes keys, values and header values as UTF-8 text into [`Value::String`] (null stays
/// [`Value::Null`]), with Connect's optional string schema. Connect's
/// `org.apache.kafka.connect.storage.StringConverter`.
///
/// Like Connect's, it never fails by default: malformed UTF-8 becomes U+FFFD, as Java's
/// decoder replaces it (one U+FFFD per malformed sequence as Java delimits them, which differs
/// from [`String::from_utf8_lossy`] only for surrogates encoded in UTF-8). With
/// `string.strict=true` ([`strict`](Self::strict)) malformed UTF-8 is an error that gives the
/// byte offset instead, so no data is changed silently: Connect's shape for a string that
/// cannot be deserialized, a `DataException` (`Failed to deserialize string: `) caused by a
/// `SerializationException` with the detail.
///
/// Only UTF-8 is supported: `converter.encoding` must be `UTF-8` (or `UTF8`, any case).
///
/// ```
/// use bytes::Bytes;
/// use kafka_share_sink::{Converter, ConverterType, Headers, Value};
/// use kafka_share_sink::convert::StringConverter;
///
/// let converter = StringConverter::new().converter_type(ConverterType::Value);
/// let ok = converter.to_sink_data("t", &Headers::new(), Some(&Bytes::from_static(b"caf\xc3\xa9")));
/// assert_eq!(ok.unwrap().value(), &Value::String("café".into()));
/// let lossy = converter.to_sink_data("t", &Headers::new(), Some(&Bytes::from_static(b"ab\xff")));
/// assert_eq!(lossy.unwrap().value(), &Value::String("ab\u{fffd}".into()));
///
/// let err = converter
///     .strict(true)
///     .to_sink_data("t", &Headers::new(), Some(&Bytes::from_static(b"ab\xff")))
///     .unwrap_err();
/// assert_eq!(err.to_string(), "Failed to deserialize string: ");
/// let cause = std::error::Error::source(&err).unwrap().to_string();
/// assert!(cause.starts_with("value is not valid UTF-8: invalid byte at offset 2"), "{cause}");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StringConverter {
    strict: bool,
    converter_type: Option<ConverterType>,
}

impl StringConverter {
    /// Connect's class name.
    pub const CLASS_NAME: &'static str = "org.apache.kafka.connect.storage.StringConverter";

    /// A UTF-8 converter.
    pub fn new() -> Self {
        Self::default()
    }

    /// `string.strict`: malformed UTF-8 is an error (true) or becomes U+FFFD, as in Connect
    /// (false, the default).
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// Says what this converter converts, so its errors name it (`key`, `value`).
    pub fn converter_type(mut self, converter_type: ConverterType) -> Self {
        self.converter_type = Some(converter_type);
        self
    }

    /// Builds the converter from Connect's configs: `converter.encoding` (only UTF-8),
    /// `converter.type` and this crate's `string.strict` (default false); other keys are
    /// ignored, as Connect ignores them.
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
            strict: crate::plugins::configs::boolean(configs, "string.strict", false)?,
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
        let text = match std::str::from_utf8(data) {
            Ok(text) => text.to_owned(),
            Err(_) if !self.strict => decode_like_java(data),
            Err(e) => {
                let what = match header {
                    Some(key) => format!("header `{key}`"),
                    None => subject(self.converter_type).to_owned(),
                };
                return Err(ConvertError::new("Failed to deserialize string: ").with_cause(
                    SerializationCause::plain(format!(
                        "{what} is not valid UTF-8: invalid byte at offset {} (of {} bytes); use \
                         the ByteArrayConverter, or fix the producer to write UTF-8 \
                         (string.strict=true)",
                        e.valid_up_to(),
                        data.len()
                    )),
                ));
            }
        };
        Ok(SchemaAndValue::new(
            Some(optional_string()),
            Value::String(text),
        ))
    }
}

/// UTF-8 decoded as Java's decoder decodes it when it replaces malformed input: each
/// malformed sequence becomes one U+FFFD. A sequence is malformed from its first byte when
/// that byte cannot start a character or the second byte cannot follow it, else it takes the
/// valid bytes before the first bad one, and a three-byte surrogate (ED A0..BF 80..BF) takes
/// all three.
fn decode_like_java(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len());
    let mut rest = data;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(text) => {
                out.push_str(text);
                break;
            }
            Err(e) => {
                let (valid, bad) = rest.split_at(e.valid_up_to());
                out.push_str(&String::from_utf8_lossy(valid));
                out.push(char::REPLACEMENT_CHARACTER);
                let skip = match e.error_len() {
                    // A surrogate in UTF-8: Rust stops at its lead byte, Java takes the
                    // sequence whole (two bytes when the third is missing or bad).
                    Some(_) if bad[0] == 0xED && matches!(bad.get(1), Some(0xA0..=0xBF)) => {
                        if matches!(bad.get(2), Some(0x80..=0xBF)) {
                            3
                        } else {
                            2
                        }
                    }
                    Some(len) => len,
                    // Cut short by the end: Java replaces what is left with one U+FFFD.
                    None => bad.len(),
                };
                rest = &bad[skip.min(bad.len())..];
            }
        }
    }
    out
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

value_and_header_converter!(StringConverter);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::{Converter, HeaderConverter};
    use crate::plugins::configs::configs;
    use crate::record::Headers;

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
    fn strict_header_errors_name_the_header() {
        let err = StringConverter::new()
            .strict(true)
            .to_sink_header("t", "trace", Some(&Bytes::from_static(b"\xc3")))
            .unwrap_err();
        assert_eq!(err.to_string(), "Failed to deserialize string: ");
        assert_eq!(
            std::error::Error::source(&err)
                .map(ToString::to_string)
                .as_deref(),
            Some(
                "header `trace` is not valid UTF-8: invalid byte at offset 0 (of 1 bytes); use \
                 the ByteArrayConverter, or fix the producer to write UTF-8 (string.strict=true)"
            )
        );
        let configs = configs(&[("string.strict", "true")]);
        assert_eq!(
            StringConverter::from_configs(&configs).unwrap(),
            StringConverter::new().strict(true)
        );
    }

    #[test]
    fn malformed_utf8_is_replaced_as_java_replaces_it() {
        let decode = |bytes: &[u8]| decode_like_java(bytes);
        assert_eq!(decode(b"\xff\xfe"), "\u{fffd}\u{fffd}");
        assert_eq!(decode(b"\"\xc3\""), "\"\u{fffd}\"");
        assert_eq!(decode(b"\xc0\x80"), "\u{fffd}\u{fffd}");
        assert_eq!(decode(b"\xed\xa0\x80"), "\u{fffd}");
        assert_eq!(decode(b"\xed\xa0A"), "\u{fffd}A");
        assert_eq!(decode(b"\xe2\x82"), "\u{fffd}");
        assert_eq!(decode(b"\xe2\x82A"), "\u{fffd}A");
        assert_eq!(decode(b"\xf4\x90\x80\x80"), "\u{fffd}".repeat(4));
        assert_eq!(decode(b"ok \xe2\x82\xac"), "ok \u{20ac}");
        let lossy = StringConverter::new()
            .to_sink_header("t", "trace", Some(&Bytes::from_static(b"\xc3")))
            .unwrap();
        assert_eq!(lossy.value(), &Value::String("\u{fffd}".into()));
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
