//! Header transforms: [`InsertHeader`] and [`DropHeaders`].

use std::collections::BTreeMap;

use super::error::TransformError;
use super::traits::Transform;
use crate::plugins::{PluginError, configs};
use crate::record::{SinkHeader, SinkRecord, Value};

/// Appends a header with a fixed value, like Connect's
/// `org.apache.kafka.connect.transforms.InsertHeader` (configs `header` and `value.literal`).
/// Headers already there, with the same key too, are kept.
///
/// Built from configs, the literal is a [`Value::String`]; Connect would infer a number or
/// boolean from the text.
///
/// ```
/// use kafka_share_sink::{SinkRecord, Transform, Value};
/// use kafka_share_sink::transform::InsertHeader;
///
/// let insert = InsertHeader::new("source", Value::from("eu-west"));
/// let out = insert.apply(SinkRecord::new("t", 0, 0)).unwrap().unwrap();
/// assert_eq!(out.headers()[0].key(), "source");
/// assert_eq!(out.headers()[0].value(), &Value::from("eu-west"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct InsertHeader {
    header: String,
    value: Value,
}

impl InsertHeader {
    /// Connect's class name.
    pub const CLASS_NAME: &'static str = "org.apache.kafka.connect.transforms.InsertHeader";

    /// Appends header `header` with `value`.
    pub fn new(header: impl Into<String>, value: Value) -> Self {
        Self {
            header: header.into(),
            value,
        }
    }

    /// Builds the transform from its required configs `header` and `value.literal`.
    pub fn from_configs(configs: &BTreeMap<String, String>) -> Result<Self, PluginError> {
        let header = configs::required_non_empty(configs, "header")?;
        let literal = configs::required(configs, "value.literal")?;
        Ok(Self::new(header, Value::String(literal.to_owned())))
    }
}

impl Transform for InsertHeader {
    fn apply(&self, mut record: SinkRecord) -> Result<Option<SinkRecord>, TransformError> {
        record
            .headers_mut()
            .push(SinkHeader::new(self.header.clone(), self.value.clone()));
        Ok(Some(record))
    }

    fn class_name(&self) -> &str {
        Self::CLASS_NAME
    }
}

/// Removes every header with one of these keys, like Connect's
/// `org.apache.kafka.connect.transforms.DropHeaders` (config `headers`, a comma-separated
/// list).
///
/// ```
/// use kafka_share_sink::{SinkHeader, SinkRecord, Transform, Value};
/// use kafka_share_sink::transform::DropHeaders;
///
/// let drop = DropHeaders::new(["secret"]);
/// let record = SinkRecord::new("t", 0, 0).with_headers(vec![
///     SinkHeader::new("secret", Value::from("a")),
///     SinkHeader::new("trace", Value::from("b")),
///     SinkHeader::new("secret", Value::Null),
/// ]);
/// let out = drop.apply(record).unwrap().unwrap();
/// assert_eq!(out.headers().len(), 1);
/// assert_eq!(out.headers()[0].key(), "trace");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropHeaders {
    headers: Vec<String>,
}

impl DropHeaders {
    /// Connect's class name.
    pub const CLASS_NAME: &'static str = "org.apache.kafka.connect.transforms.DropHeaders";

    /// Drops headers with any of these keys.
    pub fn new<I, S>(headers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            headers: headers.into_iter().map(Into::into).collect(),
        }
    }

    /// Builds the transform from its required, non-empty list `headers`.
    pub fn from_configs(configs: &BTreeMap<String, String>) -> Result<Self, PluginError> {
        Ok(Self::new(configs::non_empty_list(configs, "headers")?))
    }
}

impl Transform for DropHeaders {
    fn apply(&self, mut record: SinkRecord) -> Result<Option<SinkRecord>, TransformError> {
        record
            .headers_mut()
            .retain(|h| !self.headers.iter().any(|k| k == h.key()));
        Ok(Some(record))
    }

    fn class_name(&self) -> &str {
        Self::CLASS_NAME
    }
}
