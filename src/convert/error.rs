//! [`ConvertError`]: why a converter could not turn bytes into a value, and
//! [`SerializationCause`]: the cause the built-in converters give it, named as Connect names
//! the exceptions behind a deserialization failure.

use std::borrow::Cow;

use crate::error::BoxError;

/// Connect's `DataException`: what a converter throws for data it cannot convert.
pub(crate) const DATA_EXCEPTION: &str = "org.apache.kafka.connect.errors.DataException";
/// Connect's `RetriableException`.
pub(crate) const RETRIABLE_EXCEPTION: &str = "org.apache.kafka.connect.errors.RetriableException";
/// Kafka's `SerializationException`, the cause Connect's converters wrap.
pub(crate) const SERIALIZATION_EXCEPTION: &str =
    "org.apache.kafka.common.errors.SerializationException";

/// The error a [`Converter`](crate::Converter) or [`HeaderConverter`](crate::HeaderConverter)
/// returns: retriable or not, with a message that says what was wrong and what to do, and
/// optionally its cause.
///
/// A retriable error is Connect's `RetriableException` (the converter may succeed on
/// another attempt, say after a schema registry came back); anything else is a data error,
/// which the driver's `errors.tolerance` decides about.
///
/// In the dead-letter queue's `__connect.errors.*` headers the error is named as Connect
/// names a converter's exception: `org.apache.kafka.connect.errors.DataException`, or
/// `org.apache.kafka.connect.errors.RetriableException` when retriable, unless
/// [`with_exception_class`](Self::with_exception_class) names another. Its message is the
/// `exception.message` header and its causes the `Caused by:` lines of the stack trace.
///
/// ```
/// use kafka_share_sink::ConvertError;
///
/// let err = ConvertError::new("value is not a known event type; fix the producer");
/// assert!(!err.is_retriable());
/// assert_eq!(err.to_string(), "value is not a known event type; fix the producer");
/// assert_eq!(err.exception_class(), "org.apache.kafka.connect.errors.DataException");
///
/// let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "schema registry timed out");
/// let err = ConvertError::retriable(io);
/// assert!(err.is_retriable());
/// assert_eq!(err.to_string(), "retriable conversion error");
/// assert_eq!(std::error::Error::source(&err).unwrap().to_string(), "schema registry timed out");
/// assert_eq!(err.exception_class(), "org.apache.kafka.connect.errors.RetriableException");
///
/// let err = ConvertError::new("Failed to deserialize Avro data: ")
///     .with_cause(std::io::Error::other("unknown magic byte 0x07"))
///     .with_exception_class("org.apache.kafka.common.errors.SerializationException");
/// assert_eq!(err.exception_class(), "org.apache.kafka.common.errors.SerializationException");
/// assert!(std::error::Error::source(&err).is_some());
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ConvertError {
    message: Cow<'static, str>,
    retriable: bool,
    // Boxed: rarely set, and the error travels inside the driver's `Error`.
    exception_class: Option<Box<Cow<'static, str>>>,
    #[source]
    source: Option<BoxError>,
}

impl ConvertError {
    /// A non-retriable data error described by `message` (say what was wrong and what to do).
    pub fn new(message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            message: message.into(),
            retriable: false,
            exception_class: None,
            source: None,
        }
    }

    /// A non-retriable error with its cause.
    pub fn fatal(cause: impl Into<BoxError>) -> Self {
        Self::new("conversion error").with_cause(cause)
    }

    /// A retriable error with its cause: another attempt may succeed.
    pub fn retriable(cause: impl Into<BoxError>) -> Self {
        Self {
            retriable: true,
            ..Self::new("retriable conversion error").with_cause(cause)
        }
    }

    /// Sets the cause: the error's [`source`](std::error::Error::source), and the first
    /// `Caused by:` line of the dead-letter stack trace.
    pub fn with_cause(mut self, cause: impl Into<BoxError>) -> Self {
        self.source = Some(cause.into());
        self
    }

    /// Names the Java exception class written for this error to the
    /// `__connect.errors.exception.class.name` dead-letter header and at the start of the
    /// stack trace, for consumers of the dead-letter topic that expect the name a Java
    /// converter would throw.
    pub fn with_exception_class(mut self, class: impl Into<Cow<'static, str>>) -> Self {
        self.exception_class = Some(Box::new(class.into()));
        self
    }

    /// True when another attempt may succeed.
    pub fn is_retriable(&self) -> bool {
        self.retriable
    }

    /// The message, without the cause.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The Java exception class this error is written as in the dead-letter headers:
    /// the one given to [`with_exception_class`](Self::with_exception_class), else Connect's
    /// `DataException`, or `RetriableException` for a retriable error.
    pub fn exception_class(&self) -> &str {
        match &self.exception_class {
            Some(class) => class.as_ref(),
            None if self.retriable => RETRIABLE_EXCEPTION,
            None => DATA_EXCEPTION,
        }
    }
}

/// The cause the built-in converters give a [`ConvertError`] when bytes cannot be read,
/// shaped as Connect's: its `SerializationException`, which for JSON wraps the parser's
/// exception. It reads as `detail` in logs; the dead-letter stack trace gets one `Caused by:`
/// line for the `SerializationException` and, when there is one, another for the parser's
/// exception (`parser_class`), as Connect writes them.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{detail}")]
pub(crate) struct SerializationCause {
    parser_class: Option<&'static str>,
    detail: String,
}

impl SerializationCause {
    /// A failure of the Java parser whose exception is `parser_class`.
    pub(crate) fn parser(parser_class: &'static str, detail: String) -> Self {
        Self {
            parser_class: Some(parser_class),
            detail,
        }
    }

    /// A failure without a parser behind it.
    pub(crate) fn plain(detail: String) -> Self {
        Self {
            parser_class: None,
            detail,
        }
    }

    /// The parser's exception class, if any.
    pub(crate) fn parser_class(&self) -> Option<&'static str> {
        self.parser_class
    }

    /// What went wrong.
    pub(crate) fn detail(&self) -> &str {
        &self.detail
    }
}
