//! [`TransformError`]: why a transform could not process a record.

use std::borrow::Cow;

use crate::error::BoxError;

/// The error a [`Transform`](crate::Transform) returns: retriable or not, with a message
/// that says what was wrong and what to do.
///
/// ```
/// use kafka_share_sink::TransformError;
///
/// let err = TransformError::new("field `region` is missing; add it or drop the RouteByRegion transform");
/// assert!(!err.is_retriable());
/// assert!(err.to_string().starts_with("field `region` is missing"));
///
/// let err = TransformError::retriable(std::io::Error::other("lookup service unavailable"));
/// assert!(err.is_retriable());
/// assert_eq!(err.to_string(), "retriable transform error");
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct TransformError {
    message: Cow<'static, str>,
    retriable: bool,
    #[source]
    source: Option<BoxError>,
}

impl TransformError {
    /// A non-retriable error described by `message` (say what was wrong and what to do).
    pub fn new(message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            message: message.into(),
            retriable: false,
            source: None,
        }
    }

    /// A non-retriable error with its cause.
    pub fn fatal(cause: impl Into<BoxError>) -> Self {
        Self {
            message: Cow::Borrowed("transform error"),
            retriable: false,
            source: Some(cause.into()),
        }
    }

    /// A retriable error with its cause: another attempt may succeed.
    pub fn retriable(cause: impl Into<BoxError>) -> Self {
        Self {
            message: Cow::Borrowed("retriable transform error"),
            retriable: true,
            source: Some(cause.into()),
        }
    }

    /// True when another attempt may succeed.
    pub fn is_retriable(&self) -> bool {
        self.retriable
    }

    /// The message, without the cause.
    pub fn message(&self) -> &str {
        &self.message
    }
}
