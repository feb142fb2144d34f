//! [`ConvertError`]: why a converter could not turn bytes into a value.

use std::borrow::Cow;

use crate::error::BoxError;

/// The error a [`Converter`](crate::Converter) or [`HeaderConverter`](crate::HeaderConverter)
/// returns: retriable or not, with a message that says what was wrong and what to do.
///
/// A retriable error is Connect's `RetriableException` (the converter may succeed on
/// another attempt, say after a schema registry came back); anything else is a data error,
/// which the driver's `errors.tolerance` decides about.
///
/// ```
/// use kafka_share_sink::ConvertError;
///
/// let err = ConvertError::new("value is not a known event type; fix the producer");
/// assert!(!err.is_retriable());
/// assert_eq!(err.to_string(), "value is not a known event type; fix the producer");
///
/// let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "schema registry timed out");
/// let err = ConvertError::retriable(io);
/// assert!(err.is_retriable());
/// assert_eq!(err.to_string(), "retriable conversion error");
/// assert_eq!(std::error::Error::source(&err).unwrap().to_string(), "schema registry timed out");
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ConvertError {
    message: Cow<'static, str>,
    retriable: bool,
    #[source]
    source: Option<BoxError>,
}

impl ConvertError {
    /// A non-retriable data error described by `message` (say what was wrong and what to do).
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
            message: Cow::Borrowed("conversion error"),
            retriable: false,
            source: Some(cause.into()),
        }
    }

    /// A retriable error with its cause: another attempt may succeed.
    pub fn retriable(cause: impl Into<BoxError>) -> Self {
        Self {
            message: Cow::Borrowed("retriable conversion error"),
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
