//! Why a record is dead-lettered or rejected: a snapshot of the failure that outlives the
//! error itself, so one `put` error can describe every record of its batch.

use std::error::Error as StdError;
use std::fmt;

use crate::convert::{StageError, StageFailure};
use crate::dlq::ErrorContext;
use crate::error::TaskError;
use crate::stage::Stage;

/// A failed stage, its plugin, and the error as text.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) stage: Stage,
    pub(crate) class_name: String,
    pub(crate) exception_class: &'static str,
    pub(crate) error: Captured,
}

impl Failure {
    pub(crate) fn of_stage(failure: &StageFailure) -> Self {
        let exception_class = match failure.error() {
            StageError::Convert(_) => std::any::type_name::<crate::convert::ConvertError>(),
            StageError::Transform(_) => std::any::type_name::<crate::transform::TransformError>(),
        };
        Self {
            stage: failure.stage(),
            class_name: failure.class_name().to_owned(),
            exception_class,
            error: Captured::of(failure.error()),
        }
    }

    pub(crate) fn of_put(error: &TaskError) -> Self {
        Self {
            stage: Stage::TaskPut,
            class_name: ErrorContext::CONNECT_SINK_TASK_CLASS.to_owned(),
            exception_class: std::any::type_name::<TaskError>(),
            error: Captured::of(error),
        }
    }
}

/// An error and its `source` chain, as text.
#[derive(Debug, Clone)]
pub(crate) struct Captured {
    message: String,
    source: Option<Box<Captured>>,
}

impl Captured {
    pub(crate) fn of(error: &(dyn StdError + 'static)) -> Self {
        Self {
            message: error.to_string(),
            source: error.source().map(|s| Box::new(Self::of(s))),
        }
    }
}

impl fmt::Display for Captured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl StdError for Captured {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn StdError + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_captured_error_keeps_its_chain() {
        let error = TaskError::fatal("disk full");
        let failure = Failure::of_put(&error);
        assert_eq!(failure.stage, Stage::TaskPut);
        assert_eq!(
            failure.exception_class,
            "kafka_share_sink::error::TaskError"
        );
        assert_eq!(failure.error.to_string(), "fatal sink task error");
        assert_eq!(
            failure.error.source().map(ToString::to_string).as_deref(),
            Some("disk full")
        );
    }
}
