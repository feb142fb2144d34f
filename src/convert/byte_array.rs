//! [`ByteArrayConverter`]: bytes in, bytes out.

use bytes::Bytes;

use super::converter::SchemaAndValue;
use super::error::ConvertError;
use super::schema::optional_bytes;
use crate::record::Value;

/// Passes keys, values and header values through as [`Value::Bytes`] (null stays
/// [`Value::Null`]), with Connect's optional bytes schema; never fails and never copies.
/// Connect's `org.apache.kafka.connect.converters.ByteArrayConverter`, and the default.
///
/// ```
/// use bytes::Bytes;
/// use kafka_share_sink::{Converter, Headers, SchemaType, Value};
/// use kafka_share_sink::convert::ByteArrayConverter;
///
/// let data = Bytes::from_static(b"\xff\x00raw");
/// let converted = ByteArrayConverter.to_sink_data("t", &Headers::new(), Some(&data)).unwrap();
/// assert_eq!(converted.value(), &Value::Bytes(data));
/// assert_eq!(converted.schema().unwrap().schema_type(), SchemaType::Bytes);
/// assert_eq!(ByteArrayConverter.class_name(), "org.apache.kafka.connect.converters.ByteArrayConverter");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ByteArrayConverter;

impl ByteArrayConverter {
    /// Connect's class name.
    pub const CLASS_NAME: &'static str = "org.apache.kafka.connect.converters.ByteArrayConverter";

    /// The bytes as they are, for a key, a value or a header alike.
    fn convert(
        &self,
        data: Option<&Bytes>,
        _header: Option<&str>,
    ) -> Result<SchemaAndValue, ConvertError> {
        Ok(SchemaAndValue::new(
            Some(optional_bytes()),
            Value::from(data.cloned()),
        ))
    }
}

value_and_header_converter!(ByteArrayConverter);
