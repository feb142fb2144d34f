//! [`SimpleHeaderConverter`]: header values as text when they are UTF-8, bytes otherwise.

use bytes::Bytes;

use super::converter::{HeaderConverter, SchemaAndValue};
use super::error::ConvertError;
use super::schema::{optional_bytes, optional_string};
use crate::record::Value;

/// A simple version of Connect's default header converter,
/// `org.apache.kafka.connect.storage.SimpleHeaderConverter`: a header value that is valid
/// UTF-8 becomes [`Value::String`] (optional string schema), any other becomes
/// [`Value::Bytes`] (optional bytes schema), null stays [`Value::Null`]. It never fails.
///
/// Connect's version goes further and infers numbers, booleans, lists, maps and timestamps
/// from the text; this one leaves that to the sink task.
///
/// ```
/// use bytes::Bytes;
/// use kafka_share_sink::{HeaderConverter, Value};
/// use kafka_share_sink::convert::SimpleHeaderConverter;
///
/// let text = SimpleHeaderConverter.to_sink_header("t", "k", Some(&Bytes::from_static(b"42"))).unwrap();
/// assert_eq!(text.value(), &Value::String("42".into()));
/// let raw = SimpleHeaderConverter.to_sink_header("t", "k", Some(&Bytes::from_static(b"\xff"))).unwrap();
/// assert_eq!(raw.value(), &Value::Bytes(Bytes::from_static(b"\xff")));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimpleHeaderConverter;

impl SimpleHeaderConverter {
    /// Connect's class name.
    pub const CLASS_NAME: &'static str = "org.apache.kafka.connect.storage.SimpleHeaderConverter";
}

impl HeaderConverter for SimpleHeaderConverter {
    fn to_sink_header(
        &self,
        _topic: &str,
        _key: &str,
        value: Option<&Bytes>,
    ) -> Result<SchemaAndValue, ConvertError> {
        let Some(value) = value else {
            return Ok(SchemaAndValue::null());
        };
        Ok(match std::str::from_utf8(value) {
            Ok(text) => {
                SchemaAndValue::new(Some(optional_string()), Value::String(text.to_owned()))
            }
            Err(_) => SchemaAndValue::new(Some(optional_bytes()), Value::Bytes(value.clone())),
        })
    }

    fn class_name(&self) -> &str {
        Self::CLASS_NAME
    }
}
