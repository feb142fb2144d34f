//! [`StageFailure`]: which pipeline stage failed on a record, in which plugin, and why.

use crate::convert::ConvertError;
use crate::stage::Stage;
use crate::transform::TransformError;

/// The error of a converter or of a transform.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StageError {
    /// A key, value or header converter failed.
    #[error(transparent)]
    Convert(#[from] ConvertError),
    /// A transform failed.
    #[error(transparent)]
    Transform(#[from] TransformError),
}

impl StageError {
    /// True when another attempt may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Convert(e) => e.is_retriable(),
            Self::Transform(e) => e.is_retriable(),
        }
    }
}

/// A record could not go through the pipeline: the stage (Connect's `KEY_CONVERTER`,
/// `VALUE_CONVERTER`, `HEADER_CONVERTER` or `TRANSFORMATION`), the class name of the plugin
/// that failed (for the `__connect.errors.class.name` dead-letter header) and its error.
///
/// ```
/// use kafka_share_sink::{ConvertError, Stage, StageFailure};
///
/// let failure = StageFailure::new(
///     Stage::ValueConverter,
///     "com.example.AvroConverter",
///     ConvertError::new("unknown schema id 7; register the schema"),
/// );
/// assert_eq!(failure.stage(), Stage::ValueConverter);
/// assert!(!failure.is_retriable());
/// assert_eq!(failure.to_string(), "VALUE_CONVERTER failed in com.example.AvroConverter");
/// let cause = std::error::Error::source(&failure).unwrap();
/// assert_eq!(cause.to_string(), "unknown schema id 7; register the schema");
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{stage} failed in {class_name}")]
pub struct StageFailure {
    stage: Stage,
    class_name: String,
    #[source]
    error: StageError,
}

impl StageFailure {
    /// A failure of `stage` in the plugin called `class_name`.
    pub fn new(stage: Stage, class_name: impl Into<String>, error: impl Into<StageError>) -> Self {
        Self {
            stage,
            class_name: class_name.into(),
            error: error.into(),
        }
    }

    /// The stage that failed.
    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// The class name of the converter or transform that failed.
    pub fn class_name(&self) -> &str {
        &self.class_name
    }

    /// What the plugin returned.
    pub fn error(&self) -> &StageError {
        &self.error
    }

    /// The plugin's error, moved out.
    pub fn into_error(self) -> StageError {
        self.error
    }

    /// True when another attempt may succeed (the plugin returned a retriable error).
    pub fn is_retriable(&self) -> bool {
        self.error.is_retriable()
    }
}
