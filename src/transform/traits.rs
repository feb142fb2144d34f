//! The [`Transform`] and [`Predicate`] traits.

use std::fmt;
use std::sync::Arc;

use super::error::TransformError;
use crate::record::SinkRecord;

/// Changes or drops a record between conversion and `put`, like Kafka Connect's
/// `Transformation` (a single message transform).
///
/// Must never panic on any record; return a [`TransformError`] instead.
///
/// ```
/// use kafka_share_sink::{SinkRecord, Transform, TransformError};
///
/// /// Routes every record to `<topic>-archive`.
/// #[derive(Debug)]
/// struct Archive;
///
/// impl Transform for Archive {
///     fn apply(&self, record: SinkRecord) -> Result<Option<SinkRecord>, TransformError> {
///         let topic = format!("{}-archive", record.topic());
///         let partition = record.partition();
///         Ok(Some(record.with_topic_partition(topic, partition)))
///     }
///     fn class_name(&self) -> &str { "com.example.Archive" }
/// }
///
/// let out = Archive.apply(SinkRecord::new("orders", 0, 1)).unwrap().unwrap();
/// assert_eq!(out.topic(), "orders-archive");
/// assert_eq!(out.original_topic(), "orders");
/// ```
pub trait Transform: Send + Sync + fmt::Debug {
    /// The transformed record; `Ok(None)` drops it (the driver then ACCEPTs it, as Connect
    /// advances past a filtered record).
    fn apply(&self, record: SinkRecord) -> Result<Option<SinkRecord>, TransformError>;

    /// The name written to the `__connect.errors.class.name` dead-letter header and to logs.
    /// The built-in transforms answer with Connect's class name.
    fn class_name(&self) -> &str {
        std::any::type_name::<Self>()
    }
}

/// Decides whether a transform stage runs on a record, like Kafka Connect's `Predicate`.
pub trait Predicate: Send + Sync + fmt::Debug {
    /// True when the record matches.
    fn test(&self, record: &SinkRecord) -> bool;

    /// The predicate's name, for logs. The built-in predicates answer with Connect's class
    /// name.
    fn class_name(&self) -> &str {
        std::any::type_name::<Self>()
    }
}

impl<T: Transform + ?Sized> Transform for Arc<T> {
    fn apply(&self, record: SinkRecord) -> Result<Option<SinkRecord>, TransformError> {
        (**self).apply(record)
    }

    fn class_name(&self) -> &str {
        (**self).class_name()
    }
}

impl<T: Transform + ?Sized> Transform for Box<T> {
    fn apply(&self, record: SinkRecord) -> Result<Option<SinkRecord>, TransformError> {
        (**self).apply(record)
    }

    fn class_name(&self) -> &str {
        (**self).class_name()
    }
}

impl<P: Predicate + ?Sized> Predicate for Arc<P> {
    fn test(&self, record: &SinkRecord) -> bool {
        (**self).test(record)
    }

    fn class_name(&self) -> &str {
        (**self).class_name()
    }
}

impl<P: Predicate + ?Sized> Predicate for Box<P> {
    fn test(&self, record: &SinkRecord) -> bool {
        (**self).test(record)
    }

    fn class_name(&self) -> &str {
        (**self).class_name()
    }
}
