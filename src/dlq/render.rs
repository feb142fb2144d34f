//! How an error becomes Kafka Connect's `__connect.errors.exception.*` headers: the chain of
//! Java exceptions Connect would have thrown ([`throwables`]), written the way Java's
//! `Throwable.printStackTrace` writes them ([`stack_trace`]), and [`ErrorSnapshot`], an error
//! captured as text that keeps that chain.
//!
//! | Error in the chain | Written as |
//! |---|---|
//! | [`ConvertError`] | its [`exception_class`](ConvertError::exception_class) (Connect's `DataException`, or `RetriableException`) and its message |
//! | [`TransformError`] | `DataException`, or `RetriableException` when retriable, and its message |
//! | [`TaskError`] | `ConnectException`, or `RetriableException` when retriable, with the message of its cause, whose own causes follow (the task's error is what Connect's sink task would throw) |
//! | the built-in converters' causes | Kafka's `SerializationException`, then the JSON parser's exception (e.g. `com.fasterxml.jackson.core.JsonParseException`) when there is one, both with the detail, as Connect writes them |
//! | [`StageFailure`], [`StageError`] | what they wrap (they add no exception of their own) |
//! | `std::io::Error` and a few other std errors | their Rust type path |
//! | anything else | its Rust type name when the caller gave one (at the top), else `std::error::Error` |
//!
//! Java class names say which exception Connect would have written for the same record, so
//! that tooling written for Connect's dead-letter topics reads ours; no Java code runs.

use std::borrow::Cow;
use std::error::Error;
use std::fmt;

use crate::convert::error::{
    ConvertError, DATA_EXCEPTION, RETRIABLE_EXCEPTION, SERIALIZATION_EXCEPTION, SerializationCause,
};
use crate::convert::{StageError, StageFailure};
use crate::error::TaskError;
use crate::transform::TransformError;

/// How many errors of a chain are written at most.
pub(crate) const MAX_CAUSES: usize = 64;

/// Connect's `ConnectException`: what a sink task throws when it cannot go on.
pub(crate) const CONNECT_EXCEPTION: &str = "org.apache.kafka.connect.errors.ConnectException";
/// The class written for a cause whose type is not known.
pub(crate) const UNKNOWN_CAUSE: &str = "std::error::Error";

/// One exception of the chain: its Java class (`None` when unknown) and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Throwable {
    pub(crate) class: Option<Cow<'static, str>>,
    pub(crate) message: String,
}

/// What one error of a chain is, for the headers.
enum Node<'a> {
    /// Adds nothing: go on with this error.
    Wraps(&'a (dyn Error + 'static)),
    /// One exception of this class.
    One(Option<&'a str>),
    /// A task error: one exception of this class with the message of `cause`, whose own
    /// causes come next.
    TaskError {
        class: &'static str,
        cause: &'a (dyn Error + 'static),
    },
    /// A converter's serialization failure.
    Serialization(&'a SerializationCause),
    /// An error captured earlier, with its exceptions.
    Snapshot(&'a ErrorSnapshot),
}

fn node<'a>(error: &'a (dyn Error + 'static)) -> Node<'a> {
    if let Some(snapshot) = error.downcast_ref::<ErrorSnapshot>() {
        return Node::Snapshot(snapshot);
    }
    if let Some(failure) = error.downcast_ref::<StageFailure>() {
        return Node::Wraps(failure.error());
    }
    if let Some(stage) = error.downcast_ref::<StageError>() {
        return Node::Wraps(match stage {
            StageError::Convert(e) => e,
            StageError::Transform(e) => e,
        });
    }
    if let Some(e) = error.downcast_ref::<ConvertError>() {
        return Node::One(Some(e.exception_class()));
    }
    if let Some(e) = error.downcast_ref::<TransformError>() {
        let class = if e.is_retriable() {
            RETRIABLE_EXCEPTION
        } else {
            DATA_EXCEPTION
        };
        return Node::One(Some(class));
    }
    if let Some(e) = error.downcast_ref::<TaskError>() {
        let class = if e.is_retriable() {
            RETRIABLE_EXCEPTION
        } else {
            CONNECT_EXCEPTION
        };
        return Node::TaskError {
            class,
            cause: e.cause(),
        };
    }
    if let Some(e) = error.downcast_ref::<SerializationCause>() {
        return Node::Serialization(e);
    }
    Node::One(std_type_name(error))
}

/// The Rust type path of a few standard errors.
fn std_type_name(error: &(dyn Error + 'static)) -> Option<&'static str> {
    if error.is::<std::io::Error>() {
        Some("std::io::Error")
    } else if error.is::<std::fmt::Error>() {
        Some("std::fmt::Error")
    } else if error.is::<std::str::Utf8Error>() {
        Some("std::str::Utf8Error")
    } else if error.is::<std::string::FromUtf8Error>() {
        Some("std::string::FromUtf8Error")
    } else if error.is::<std::num::ParseIntError>() {
        Some("std::num::ParseIntError")
    } else if error.is::<std::num::ParseFloatError>() {
        Some("std::num::ParseFloatError")
    } else {
        None
    }
}

/// The Java class of the first exception of `error`'s chain, if known; no allocation.
pub(crate) fn top_class<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a str> {
    let mut error = error;
    for _ in 0..MAX_CAUSES {
        match node(error) {
            Node::Wraps(inner) => error = inner,
            Node::One(class) => return class,
            Node::TaskError { class, .. } => return Some(class),
            Node::Serialization(_) => return Some(SERIALIZATION_EXCEPTION),
            Node::Snapshot(snapshot) => {
                return snapshot.throwables.first().and_then(|t| t.class.as_deref());
            }
        }
    }
    None
}

/// The exceptions Connect would have for `error` and its causes, outermost first (at most
/// [`MAX_CAUSES`]).
pub(crate) fn throwables(error: &(dyn Error + 'static)) -> Vec<Throwable> {
    let mut out: Vec<Throwable> = Vec::new();
    let mut next = Some(error);
    let mut steps = 0;
    while let Some(error) = next {
        if steps == MAX_CAUSES || out.len() >= MAX_CAUSES {
            break;
        }
        steps += 1;
        next = match node(error) {
            Node::Wraps(inner) => Some(inner),
            Node::One(class) => {
                out.push(Throwable {
                    class: class.map(|c| Cow::Owned(c.to_owned())),
                    message: error.to_string(),
                });
                error.source()
            }
            Node::TaskError { class, cause } => {
                out.push(Throwable {
                    class: Some(Cow::Borrowed(class)),
                    message: cause.to_string(),
                });
                cause.source()
            }
            Node::Serialization(cause) => {
                let detail = cause.detail();
                match cause.parser_class() {
                    Some(parser) => {
                        // Kafka's SerializationException wraps the parser's exception, so its
                        // message is that exception as Java prints it: "<class>: <message>".
                        out.push(Throwable {
                            class: Some(Cow::Borrowed(SERIALIZATION_EXCEPTION)),
                            message: format!("{parser}: {detail}"),
                        });
                        out.push(Throwable {
                            class: Some(Cow::Borrowed(parser)),
                            message: detail.to_owned(),
                        });
                    }
                    None => out.push(Throwable {
                        class: Some(Cow::Borrowed(SERIALIZATION_EXCEPTION)),
                        message: detail.to_owned(),
                    }),
                }
                error.source()
            }
            Node::Snapshot(snapshot) => {
                out.extend(snapshot.throwables.iter().cloned());
                None
            }
        };
    }
    out.truncate(MAX_CAUSES);
    out
}

/// The stack-trace header: `<class>: <message>` for the first exception (just `<class>` when
/// the message is empty, as Java prints a null message), then `Caused by: <class>: <message>`
/// for each cause, each line ended by `\n` as `printStackTrace` ends them. A message may span
/// lines, as Java's do. No `\tat ...` frames: Rust errors do not carry the frames they were
/// created in, and frames of the thread writing the header would describe the writing, not the
/// failure. `top_class` names the first exception; an unknown cause is [`UNKNOWN_CAUSE`].
pub(crate) fn stack_trace(throwables: &[Throwable], top_class: &str) -> String {
    let mut out = String::new();
    for (i, throwable) in throwables.iter().enumerate() {
        let class = if i == 0 {
            top_class
        } else {
            out.push_str("Caused by: ");
            throwable.class.as_deref().unwrap_or(UNKNOWN_CAUSE)
        };
        out.push_str(class);
        if !throwable.message.is_empty() {
            out.push_str(": ");
            out.push_str(&throwable.message);
        }
        out.push('\n');
    }
    out
}

/// An error and its `source` chain captured as text, with the exceptions the dead-letter
/// headers name (computed while the types were still known), so one error can describe
/// several records and outlive the call that returned it.
#[derive(Debug, Clone)]
pub(crate) struct ErrorSnapshot {
    message: String,
    source: Option<Box<ErrorSnapshot>>,
    /// The exceptions of the whole chain; only the outermost snapshot has them.
    throwables: Vec<Throwable>,
}

impl ErrorSnapshot {
    /// Captures `error`, its causes (at most [`MAX_CAUSES`]) and its exceptions.
    pub(crate) fn of(error: &(dyn Error + 'static)) -> Self {
        let mut messages = Vec::new();
        let mut next = Some(error);
        while let Some(e) = next {
            if messages.len() == MAX_CAUSES {
                break;
            }
            messages.push(e.to_string());
            next = e.source();
        }
        let mut chain: Option<Box<ErrorSnapshot>> = None;
        while let Some(message) = messages.pop() {
            chain = Some(Box::new(ErrorSnapshot {
                message,
                source: chain,
                throwables: Vec::new(),
            }));
        }
        let mut snapshot = chain.map_or_else(
            || ErrorSnapshot {
                message: String::new(),
                source: None,
                throwables: Vec::new(),
            },
            |b| *b,
        );
        snapshot.throwables = throwables(error);
        snapshot
    }
}

impl fmt::Display for ErrorSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Error for ErrorSnapshot {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|s| s as &(dyn Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::Stage;

    fn classes(throwables: &[Throwable]) -> Vec<Option<&str>> {
        throwables.iter().map(|t| t.class.as_deref()).collect()
    }

    #[test]
    fn a_converter_failure_is_connects_chain() {
        let error = ConvertError::new("Converting byte[] to Kafka Connect data failed: ")
            .with_cause(SerializationCause::parser(
                "com.fasterxml.jackson.core.JsonParseException",
                "value is not valid JSON".to_owned(),
            ));
        let failure = StageFailure::new(Stage::ValueConverter, "x.JsonConverter", error);
        let found = throwables(&failure);
        assert_eq!(
            classes(&found),
            [
                Some(DATA_EXCEPTION),
                Some(SERIALIZATION_EXCEPTION),
                Some("com.fasterxml.jackson.core.JsonParseException")
            ]
        );
        assert_eq!(
            found[1].message,
            "com.fasterxml.jackson.core.JsonParseException: value is not valid JSON"
        );
        assert_eq!(top_class(&failure), Some(DATA_EXCEPTION));
        assert_eq!(
            stack_trace(&found, DATA_EXCEPTION),
            "org.apache.kafka.connect.errors.DataException: Converting byte[] to Kafka Connect \
             data failed: \nCaused by: org.apache.kafka.common.errors.SerializationException: \
             com.fasterxml.jackson.core.JsonParseException: value is not valid JSON\nCaused by: \
             com.fasterxml.jackson.core.JsonParseException: value is not valid JSON\n"
        );
    }

    #[test]
    fn a_task_error_takes_its_causes_message() {
        let io = std::io::Error::other("connection reset");
        #[derive(Debug, thiserror::Error)]
        #[error("database did not answer")]
        struct Db(#[source] std::io::Error);
        let error = TaskError::retriable(Db(io));
        let found = throwables(&error);
        assert_eq!(
            found,
            [
                Throwable {
                    class: Some(Cow::Borrowed(RETRIABLE_EXCEPTION)),
                    message: "database did not answer".into()
                },
                Throwable {
                    class: Some(Cow::Borrowed("std::io::Error")),
                    message: "connection reset".into()
                },
            ]
        );
        let fatal = TaskError::fatal("disk full");
        assert_eq!(
            stack_trace(&throwables(&fatal), CONNECT_EXCEPTION),
            "org.apache.kafka.connect.errors.ConnectException: disk full\n"
        );
    }

    #[test]
    fn unknown_errors_and_empty_messages() {
        #[derive(Debug, thiserror::Error)]
        #[error("")]
        struct Silent;
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] Silent);
        let found = throwables(&Outer(Silent));
        assert_eq!(classes(&found), [None, None]);
        assert_eq!(
            stack_trace(&found, "my::Outer"),
            "my::Outer: outer\nCaused by: std::error::Error\n"
        );
    }

    #[test]
    fn a_snapshot_keeps_text_and_exceptions() {
        let error = TransformError::new("field `a` is missing");
        let snapshot = ErrorSnapshot::of(&StageError::from(error));
        assert_eq!(snapshot.to_string(), "field `a` is missing");
        assert!(snapshot.source().is_none());
        assert_eq!(top_class(&snapshot), Some(DATA_EXCEPTION));
        let again = ErrorSnapshot::of(&snapshot.clone());
        assert_eq!(throwables(&again), throwables(&snapshot));

        let task = ErrorSnapshot::of(&TaskError::fatal("disk full"));
        assert_eq!(task.to_string(), "fatal sink task error");
        assert_eq!(
            task.source().map(ToString::to_string).as_deref(),
            Some("disk full")
        );
        assert_eq!(top_class(&task), Some(CONNECT_EXCEPTION));
    }

    #[test]
    fn chains_are_bounded() {
        #[derive(Debug)]
        struct Loop;
        impl fmt::Display for Loop {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("again")
            }
        }
        impl Error for Loop {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&Loop)
            }
        }
        assert_eq!(throwables(&Loop).len(), MAX_CAUSES);
        let snapshot = ErrorSnapshot::of(&Loop);
        let mut depth = 0;
        let mut next: Option<&(dyn Error + 'static)> = Some(&snapshot);
        while let Some(e) = next {
            depth += 1;
            next = e.source();
        }
        assert_eq!(depth, MAX_CAUSES);
    }
}
