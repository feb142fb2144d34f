//! [`Converters`]: the key, value and header converters of a sink, applied to a record.

use std::any::{Any, TypeId};
use std::sync::Arc;

use super::byte_array::ByteArrayConverter;
use super::converter::{Converter, HeaderConverter};
use super::failure::StageFailure;
use crate::record::{ConsumerRecord, SinkHeader, SinkRecord};
use crate::stage::Stage;

/// The key, value and header converters that turn a polled record into a [`SinkRecord`].
/// The default is [`ByteArrayConverter`] for all three, which keeps every payload as bytes
/// without copying.
///
/// ```
/// use std::sync::Arc;
/// use bytes::Bytes;
/// use kafka_share_sink::{ConsumerRecord, Converters, Stage, Value};
/// use kafka_share_sink::convert::{JsonConverter, StringConverter};
///
/// let converters = Converters::byte_array()
///     .with_key(Arc::new(StringConverter::new()))
///     .with_value(Arc::new(JsonConverter::new().schemas_enable(false)));
/// assert!(!converters.is_byte_array());
///
/// let record = ConsumerRecord::new("orders", 0, 5)
///     .with_key(Some(Bytes::from_static(b"k1")))
///     .with_value(Some(Bytes::from_static(br#"{"qty": 2}"#)));
/// let sink = converters.convert(&record).unwrap();
/// assert_eq!(sink.key(), &Value::String("k1".into()));
/// assert_eq!(sink.value().get("qty"), Some(&Value::Int(2)));
///
/// let bad = record.clone().with_value(Some(Bytes::from_static(b"{oops")));
/// let failure = converters.convert(&bad).unwrap_err();
/// assert_eq!(failure.stage(), Stage::ValueConverter);
/// assert_eq!(failure.class_name(), "org.apache.kafka.connect.json.JsonConverter");
/// ```
#[derive(Debug, Clone)]
pub struct Converters {
    key: Arc<dyn Converter>,
    value: Arc<dyn Converter>,
    header: Arc<dyn HeaderConverter>,
}

impl Default for Converters {
    fn default() -> Self {
        Self::byte_array()
    }
}

impl Converters {
    /// [`ByteArrayConverter`] for keys, values and headers.
    pub fn byte_array() -> Self {
        Self::new(
            Arc::new(ByteArrayConverter),
            Arc::new(ByteArrayConverter),
            Arc::new(ByteArrayConverter),
        )
    }

    /// These three converters.
    pub fn new(
        key: Arc<dyn Converter>,
        value: Arc<dyn Converter>,
        header: Arc<dyn HeaderConverter>,
    ) -> Self {
        Self { key, value, header }
    }

    /// Replaces the key converter.
    pub fn with_key(mut self, key: Arc<dyn Converter>) -> Self {
        self.key = key;
        self
    }

    /// Replaces the value converter.
    pub fn with_value(mut self, value: Arc<dyn Converter>) -> Self {
        self.value = value;
        self
    }

    /// Replaces the header converter.
    pub fn with_header(mut self, header: Arc<dyn HeaderConverter>) -> Self {
        self.header = header;
        self
    }

    /// The key converter.
    pub fn key(&self) -> &Arc<dyn Converter> {
        &self.key
    }

    /// The value converter.
    pub fn value(&self) -> &Arc<dyn Converter> {
        &self.value
    }

    /// The header converter.
    pub fn header(&self) -> &Arc<dyn HeaderConverter> {
        &self.header
    }

    /// True when all three converters are [`ByteArrayConverter`]s, so a record can become a
    /// [`SinkRecord`] without calling them (the driver's zero-copy path gives the same record
    /// as [`convert`](Self::convert)).
    pub fn is_byte_array(&self) -> bool {
        // Supertrait calls dispatch through the vtable, so these are the concrete types.
        let byte_array = TypeId::of::<ByteArrayConverter>();
        <dyn Converter as Any>::type_id(&*self.key) == byte_array
            && <dyn Converter as Any>::type_id(&*self.value) == byte_array
            && <dyn HeaderConverter as Any>::type_id(&*self.header) == byte_array
    }

    /// Converts a polled record, as Connect does: key, then value, then each header in order,
    /// stopping at the first failure. A timestamp of -1 becomes `None`; the delivery count
    /// and the original coordinates are kept. Headers keep their converted value; the
    /// header converter's schema is not kept ([`SinkHeader`] holds a value only).
    pub fn convert(&self, record: &ConsumerRecord) -> Result<SinkRecord, StageFailure> {
        let topic = record.topic();
        let key = self
            .key
            .to_sink_data(topic, record.headers(), record.key())
            .map_err(|e| StageFailure::new(Stage::KeyConverter, self.key.class_name(), e))?;
        let value = self
            .value
            .to_sink_data(topic, record.headers(), record.value())
            .map_err(|e| StageFailure::new(Stage::ValueConverter, self.value.class_name(), e))?;
        let mut headers = Vec::with_capacity(record.headers().len());
        for header in record.headers() {
            let converted = self
                .header
                .to_sink_header(topic, header.key(), header.value())
                .map_err(|e| {
                    StageFailure::new(Stage::HeaderConverter, self.header.class_name(), e)
                })?;
            headers.push(SinkHeader::new(header.key(), converted.into_parts().1));
        }
        Ok(SinkRecord::from_converted(record, key, value, headers))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::TimestampType;
    use crate::convert::{JsonConverter, SimpleHeaderConverter, StringConverter};
    use crate::record::Headers;

    fn record() -> ConsumerRecord {
        let mut headers = Headers::new();
        headers.push("a", Some(Bytes::from_static(b"1")));
        headers.push("a", None);
        headers.push("b", Some(Bytes::from_static(b"\xff")));
        ConsumerRecord::new("t", 2, 9)
            .with_key(Some(Bytes::from_static(b"k")))
            .with_value(None)
            .with_headers(headers)
            .with_timestamp(-1, TimestampType::NoTimestampType)
            .with_delivery_count(3)
    }

    #[test]
    fn byte_array_convert_equals_the_fast_path() {
        let converters = Converters::default();
        assert!(converters.is_byte_array());
        let converted = converters.convert(&record()).unwrap();
        assert_eq!(converted, SinkRecord::from_consumer_record(record()));
        assert_eq!(converted.delivery_count(), 3);
        assert_eq!(converted.timestamp(), None);
    }

    #[test]
    fn any_other_converter_leaves_the_fast_path() {
        let bytes = Converters::byte_array();
        assert!(
            !bytes
                .clone()
                .with_key(Arc::new(StringConverter::new()))
                .is_byte_array()
        );
        assert!(
            !bytes
                .clone()
                .with_value(Arc::new(JsonConverter::new()))
                .is_byte_array()
        );
        assert!(
            !bytes
                .with_header(Arc::new(SimpleHeaderConverter))
                .is_byte_array()
        );
    }

    #[test]
    fn the_first_failure_stops_conversion() {
        // The key is not JSON, and neither is the header value: the key is reported.
        let json = Arc::new(JsonConverter::new());
        let converters = Converters::new(json.clone(), json.clone(), json);
        let failure = converters.convert(&record()).unwrap_err();
        assert_eq!(failure.stage(), Stage::KeyConverter);
    }
}
