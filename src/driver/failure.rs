//! Why a record is dead-lettered or rejected: a snapshot of the failure that outlives the
//! error itself, so one `put` error can describe every record of its batch.

use crate::convert::{StageError, StageFailure};
use crate::dlq::{DeadLetterReason, ErrorContext};
use crate::error::TaskError;
use crate::stage::Stage;

/// A failed stage, its plugin, and the error as text.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) stage: Stage,
    pub(crate) class_name: String,
    pub(crate) exception_class: &'static str,
    pub(crate) error: Captured,
    /// The `__connect.errors.reason` of its dead letter.
    pub(crate) reason: DeadLetterReason,
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
            reason: DeadLetterReason::of_stage(failure.stage()),
        }
    }

    /// A failed `put`, dead-lettered for `reason` (a fatal error, the last delivery, ...).
    pub(crate) fn of_put(error: &TaskError, reason: DeadLetterReason) -> Self {
        Self {
            stage: Stage::TaskPut,
            class_name: ErrorContext::CONNECT_SINK_TASK_CLASS.to_owned(),
            exception_class: std::any::type_name::<TaskError>(),
            error: Captured::of(error),
            reason,
        }
    }
}

/// An error and its `source` chain, as text, with the Java exceptions the dead-letter
/// headers name for it.
pub(crate) use crate::dlq::ErrorSnapshot as Captured;

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn a_captured_error_keeps_its_chain() {
        let error = TaskError::fatal("disk full");
        let failure = Failure::of_put(&error, DeadLetterReason::Put);
        assert_eq!(failure.stage, Stage::TaskPut);
        assert_eq!(failure.reason, DeadLetterReason::Put);
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
