//! [`ByteArrayConverter`]: bytes in, bytes out.

use bytes::Bytes;

use super::converter::{Converter, HeaderConverter, SchemaAndValue};
use super::error::ConvertError;
use super::schema::optional_bytes;
use crate::record::{Headers, Value};

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

    fn convert(data: Option<&Bytes>) -> SchemaAndValue {
        SchemaAndValue::new(Some(optional_bytes()), Value::from(data.cloned()))
    }
}

impl Converter for ByteArrayConverter {
    fn to_sink_data(
        &self,
        _topic: &str,
        _headers: &Headers,
        data: Option<&Bytes>,
    ) -> Result<SchemaAndValue, ConvertError> {
        Ok(Self::convert(data))
    }

    fn class_name(&self) -> &str {
        Self::CLASS_NAME
    }
}

impl HeaderConverter for ByteArrayConverter {
    fn to_sink_header(
        &self,
        _topic: &str,
        _key: &str,
        value: Option<&Bytes>,
    ) -> Result<SchemaAndValue, ConvertError> {
        Ok(Self::convert(value))
    }

    fn class_name(&self) -> &str {
        Self::CLASS_NAME
    }
}
