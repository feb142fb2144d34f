//! [`Filter`]: drops records.

use super::error::TransformError;
use super::traits::Transform;
use crate::record::SinkRecord;

/// Drops every record it is applied to; give it a predicate to choose which, like
/// Connect's `org.apache.kafka.connect.transforms.Filter`. Dropped records are acknowledged
/// (ACCEPT), never written.
///
/// ```
/// use kafka_share_sink::{SinkRecord, Transform};
/// use kafka_share_sink::transform::Filter;
///
/// assert!(Filter.apply(SinkRecord::new("t", 0, 0)).unwrap().is_none());
/// assert_eq!(Filter.class_name(), "org.apache.kafka.connect.transforms.Filter");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Filter;

impl Filter {
    /// Connect's class name.
    pub const CLASS_NAME: &'static str = "org.apache.kafka.connect.transforms.Filter";
}

impl Transform for Filter {
    fn apply(&self, _record: SinkRecord) -> Result<Option<SinkRecord>, TransformError> {
        Ok(None)
    }

    fn class_name(&self) -> &str {
        Self::CLASS_NAME
    }
}
