//! Transforms and predicates from closures: [`transform_fn`] and [`predicate_fn`].

use std::borrow::Cow;
use std::fmt;

use super::error::TransformError;
use super::traits::{Predicate, Transform};
use crate::record::SinkRecord;

/// A [`Transform`] made of a closure, by [`transform_fn`].
#[derive(Clone)]
pub struct FnTransform<F> {
    f: F,
    name: Cow<'static, str>,
}

/// A [`Transform`] that calls `f`; its class name is the closure's type name until
/// [`named`](FnTransform::named).
///
/// ```
/// use kafka_share_sink::{SinkRecord, Transform, Value};
/// use kafka_share_sink::transform::transform_fn;
///
/// let upper = transform_fn(|record: SinkRecord| {
///     let value = record.value().as_str().map(str::to_uppercase).map(Value::String);
///     Ok(Some(match value {
///         Some(v) => record.with_value(v),
///         None => record,
///     }))
/// })
/// .named("Uppercase");
/// let out = upper.apply(SinkRecord::new("t", 0, 0).with_value(Value::from("hi"))).unwrap();
/// assert_eq!(out.unwrap().value(), &Value::from("HI"));
/// assert_eq!(upper.class_name(), "Uppercase");
/// ```
pub fn transform_fn<F>(f: F) -> FnTransform<F>
where
    F: Fn(SinkRecord) -> Result<Option<SinkRecord>, TransformError> + Send + Sync,
{
    FnTransform {
        f,
        name: Cow::Borrowed(std::any::type_name::<F>()),
    }
}

impl<F> FnTransform<F> {
    /// Sets the class name reported when the transform fails.
    pub fn named(mut self, name: impl Into<Cow<'static, str>>) -> Self {
        self.name = name.into();
        self
    }
}

impl<F> fmt::Debug for FnTransform<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnTransform")
            .field("name", &self.name)
            .finish()
    }
}

impl<F> Transform for FnTransform<F>
where
    F: Fn(SinkRecord) -> Result<Option<SinkRecord>, TransformError> + Send + Sync,
{
    fn apply(&self, record: SinkRecord) -> Result<Option<SinkRecord>, TransformError> {
        (self.f)(record)
    }

    fn class_name(&self) -> &str {
        &self.name
    }
}

/// A [`Predicate`] made of a closure, by [`predicate_fn`].
#[derive(Clone)]
pub struct FnPredicate<F> {
    f: F,
    name: Cow<'static, str>,
}

/// A [`Predicate`] that calls `f`; its class name is the closure's type name until
/// [`named`](FnPredicate::named).
///
/// ```
/// use kafka_share_sink::{Predicate, SinkRecord};
/// use kafka_share_sink::transform::predicate_fn;
///
/// let redelivered = predicate_fn(|r: &SinkRecord| r.delivery_count() > 1).named("Redelivered");
/// assert!(!redelivered.test(&SinkRecord::new("t", 0, 0)));
/// assert!(redelivered.test(&SinkRecord::new("t", 0, 0).with_delivery_count(2)));
/// ```
pub fn predicate_fn<F>(f: F) -> FnPredicate<F>
where
    F: Fn(&SinkRecord) -> bool + Send + Sync,
{
    FnPredicate {
        f,
        name: Cow::Borrowed(std::any::type_name::<F>()),
    }
}

impl<F> FnPredicate<F> {
    /// Sets the name shown in logs.
    pub fn named(mut self, name: impl Into<Cow<'static, str>>) -> Self {
        self.name = name.into();
        self
    }
}

impl<F> fmt::Debug for FnPredicate<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnPredicate")
            .field("name", &self.name)
            .finish()
    }
}

impl<F> Predicate for FnPredicate<F>
where
    F: Fn(&SinkRecord) -> bool + Send + Sync,
{
    fn test(&self, record: &SinkRecord) -> bool {
        (self.f)(record)
    }

    fn class_name(&self) -> &str {
        &self.name
    }
}
