//! Error types of the driver and of sink tasks.
//!
//! Each `Display` describes its own level only; walk [`std::error::Error::source`] for the cause.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use crate::consumer::ConsumerError;

/// A boxed error that can cross threads, used as the cause of a [`TaskError`].
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Whether the driver may try again after a [`TaskError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TaskErrorKind {
    /// Connect's `RetriableException`: the batch was not written, but a later attempt may work
    /// (a timeout, a full buffer, a downstream system that is briefly away). The driver
    /// RELEASEs the batch so the share group delivers it again.
    Retriable,
    /// Anything else: the task cannot go on. The driver REJECTs the batch and stops (the
    /// exactly-once iteration, and a caught panic, RELEASE it instead, except records on
    /// their last delivery when a dead-letter queue is set: those are dead-lettered).
    Fatal,
}

/// The error a [`SinkTask`](crate::SinkTask) returns: retriable or fatal, with its cause.
///
/// ```
/// use kafka_share_sink::TaskError;
/// use std::time::Duration;
///
/// let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "database did not answer");
/// let err = TaskError::retriable(io).with_backoff(Duration::from_millis(200));
/// assert!(err.is_retriable());
/// assert_eq!(err.backoff(), Some(Duration::from_millis(200)));
/// assert_eq!(err.to_string(), "retriable sink task error");
/// assert_eq!(std::error::Error::source(&err).unwrap().to_string(), "database did not answer");
///
/// let fatal = TaskError::fatal("schema of table `orders` does not match the records");
/// assert!(!fatal.is_retriable());
/// ```
#[derive(Debug)]
pub struct TaskError {
    kind: TaskErrorKind,
    backoff: Option<Duration>,
    source: BoxError,
}

impl TaskError {
    /// A retriable error: the batch is released and delivered again.
    pub fn retriable(cause: impl Into<BoxError>) -> Self {
        Self {
            kind: TaskErrorKind::Retriable,
            backoff: None,
            source: cause.into(),
        }
    }

    /// A fatal error: the batch is rejected and the driver stops (released instead by the
    /// exactly-once iteration).
    pub fn fatal(cause: impl Into<BoxError>) -> Self {
        Self {
            kind: TaskErrorKind::Fatal,
            backoff: None,
            source: cause.into(),
        }
    }

    /// Asks the driver to wait this long before its next poll (Connect's
    /// `SinkTaskContext.timeout`), so a struggling downstream system gets a breather.
    ///
    /// A pause too long to add to the clock (e.g. [`Duration::MAX`]) is taken as about 30
    /// years: the driver waits, in practice, until it is closed.
    pub fn with_backoff(mut self, backoff: Duration) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// Retriable or fatal.
    pub fn kind(&self) -> TaskErrorKind {
        self.kind
    }

    /// True for a retriable error.
    pub fn is_retriable(&self) -> bool {
        self.kind == TaskErrorKind::Retriable
    }

    /// The pause the task asked for, if any.
    pub fn backoff(&self) -> Option<Duration> {
        self.backoff
    }

    /// The cause, as given to the constructor.
    pub fn cause(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.source
    }

    /// The panic the driver caught in one of the task's methods (see [`TaskPanicked`]), when
    /// this error stands for one.
    pub fn panicked(&self) -> Option<&TaskPanicked> {
        self.source.downcast_ref::<TaskPanicked>()
    }

    /// The fatal error that stands for a panic of `method`, with the panic's message.
    pub(crate) fn from_panic(method: &'static str, payload: &(dyn std::any::Any + Send)) -> Self {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        Self::fatal(TaskPanicked { method, message })
    }
}

/// A panic in a [`SinkTask`](crate::SinkTask)'s `put`, `put_transactional`, `start`,
/// `pre_commit` (which calls `flush` by default) or `stop`, caught by the driver: the cause
/// of the fatal [`TaskError`] (see [`TaskError::panicked`]) of the [`Error::Task`] the
/// driver then stops with, as for that method's fatal error, except in `put` (below). A
/// panic in `stop` does not keep `close` from closing the consumer. Panics in the task's
/// other methods (`initialize`, `transactional_outputs`) are not caught.
///
/// A panic is taken as the task crashing, not as the records being bad: the driver RELEASEs
/// the batch it had given (the share group delivers it again, to this task after a restart or
/// to another member) instead of rejecting it as it does for [`TaskError::fatal`], and stops.
/// When releasing trips the dead-letter circuit breaker, the driver stops with that error
/// instead (the panic is in the log). Built with `panic = "abort"`, a panic aborts the
/// process as it always does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the sink task panicked in {method}: {message}")]
#[non_exhaustive]
pub struct TaskPanicked {
    /// The task's method, e.g. `put`.
    pub method: &'static str,
    /// The panic's message.
    pub message: String,
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            TaskErrorKind::Retriable => f.write_str("retriable sink task error"),
            TaskErrorKind::Fatal => f.write_str("fatal sink task error"),
        }
    }
}

impl StdError for TaskError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}

/// Which call of the sink task failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TaskStage {
    /// [`SinkTask::start`](crate::SinkTask::start).
    Start,
    /// [`SinkTask::put`](crate::SinkTask::put).
    Put,
    /// [`SinkTask::pre_commit`](crate::SinkTask::pre_commit).
    PreCommit,
    /// [`SinkTask::stop`](crate::SinkTask::stop).
    Stop,
}

impl fmt::Display for TaskStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Start => "start",
            Self::Put => "put",
            Self::PreCommit => "pre_commit",
            Self::Stop => "stop",
        })
    }
}

/// Errors of the [`ShareSinkTask`](crate::ShareSinkTask) driver.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `iteration()` or `run()` was called before `initialize()`.
    #[error("the driver is not initialized: call initialize() before iteration()")]
    NotInitialized,
    /// `initialize()` was called twice.
    #[error("the driver is already initialized")]
    AlreadyInitialized,
    /// A fatal error stopped the driver earlier; it was returned then.
    #[error("the driver stopped after a fatal error: close it and build a new one")]
    Failed,
    /// The driver was closed.
    #[error("the driver is closed")]
    Closed,

    /// Implicit acknowledgement mode: records the driver gave up on (`errors.tolerance=all`)
    /// could not be written to the dead-letter queue, and implicit mode cannot release them
    /// one by one. The driver stops before any poll or commit accepts them:
    /// [`close`](crate::ShareSinkTask::close) releases them, to be delivered again.
    #[error(
        "implicit acknowledgement: records could not be written to the dead-letter queue and \
         cannot be released one by one; the driver stopped so that close releases them"
    )]
    DeadLetterUnreleasable(#[source] crate::dlq::DeadLetterError),

    /// Implicit acknowledgement mode: an iteration was dropped while it was `stage`, after
    /// its poll returned records. The next poll or commit would accept records that may not
    /// have been written, so the driver stops: [`close`](crate::ShareSinkTask::close) sends
    /// no final commit and the consumer's close releases them, to be delivered again.
    #[error(
        "an iteration was dropped while {stage}, after its poll returned records (implicit \
         acknowledgement): close the driver, which releases them, and build a new one"
    )]
    Interrupted {
        /// What the iteration was doing when it was dropped.
        stage: &'static str,
    },
    /// The sink task failed at the given stage.
    #[error("sink task failed in {stage}")]
    Task {
        /// The call that failed.
        stage: TaskStage,
        /// What the task returned.
        #[source]
        source: TaskError,
    },
    /// A record could not be converted or transformed, and `errors.tolerance=none` stops the
    /// task. The records of its poll were released, so nothing is lost; fix the converter or
    /// transform settings (or set `errors.tolerance=all`, with a dead-letter queue) and
    /// start again.
    #[error(
        "record {record} could not be processed and errors.tolerance=none stops the task (its \
         poll was released)"
    )]
    Record {
        /// The record that failed.
        record: crate::record::RecordId,
        /// The stage, the plugin and its error.
        #[source]
        source: crate::convert::StageFailure,
    },
    /// The driver's settings do not fit together or do not fit the consumer.
    #[error("invalid driver config `{key}`: {reason}")]
    Config {
        /// The setting at fault.
        key: &'static str,
        /// What is wrong and what to do.
        reason: String,
    },
    /// The consumer lacks a capability the driver's settings need (see
    /// [`ShareConsumer::capabilities`](crate::ShareConsumer::capabilities)): refused at
    /// [`initialize`](crate::ShareSinkTask::initialize), before anything is read. Change the
    /// setting, or use a consumer that has the capability.
    #[error("the share consumer lacks {capability}, which {needed_by} needs")]
    #[non_exhaustive]
    MissingCapability {
        /// What the consumer lacks.
        capability: crate::consumer::ConsumerCapability,
        /// The setting (or mode) that needs it, such as `ack.policy=after.flush`.
        needed_by: &'static str,
    },
    /// The connector configuration cannot be used.
    #[error("invalid connector configuration")]
    Connector(#[from] crate::config::ConfigError),
    /// The dead-letter queue could not be reached or set up.
    #[error("dead-letter queue unavailable")]
    DeadLetter(#[from] crate::dlq::DeadLetterError),
    /// The share consumer failed.
    #[error("share consumer failed")]
    Consumer(#[from] ConsumerError),
    /// The dead-letter circuit breaker stopped the task
    /// ([`DeadLetterBreaker`](crate::DeadLetterBreaker)): the records at hand were RELEASEd,
    /// not dead-lettered (except records whose `put` failed on their last delivery with no
    /// dead-letter queue of the driver's: released there, the group archives them, and they
    /// are counted after the fact). The error says how many records failed within the window
    /// and which setting bounds them.
    #[error("the dead-letter circuit breaker stopped the task")]
    DeadLetterBreaker(#[source] crate::dlq::BreakerTripped),

    /// The exactly-once iteration could not be set up or go on.
    #[cfg(feature = "exactly-once")]
    #[error("exactly-once delivery failed")]
    ExactlyOnce(#[from] crate::exactly_once::ExactlyOnceError),
}

impl Error {
    /// True when the settings are at fault (a malformed or conflicting setting, a consumer
    /// that lacks what they need): a new driver built from the same settings fails the same
    /// way, so the [`Supervisor`](crate::supervisor::Supervisor) does not restart the task.
    pub fn is_config(&self) -> bool {
        match self {
            // Also raised when the group's configuration could not be read (yet): a restart
            // reads it again.
            Self::Config {
                key: "share.dead.letter.queue.required",
                ..
            } => false,
            // A plugin whose own factory failed (a schema registry that did not answer, say)
            // may build on the next try; the other connector errors are the settings'.
            Self::Connector(crate::config::ConfigError::Plugin {
                source: crate::plugins::PluginError::Build { .. },
                ..
            }) => false,
            Self::Config { .. } | Self::Connector(_) | Self::MissingCapability { .. } => true,
            Self::Consumer(e) => matches!(e, ConsumerError::Config { .. }),
            Self::DeadLetter(e) => matches!(
                e,
                crate::dlq::DeadLetterError::Config { .. }
                    | crate::dlq::DeadLetterError::Kafka {
                        source: crate::ClientError::Config { .. },
                        ..
                    }
            ),
            #[cfg(feature = "exactly-once")]
            Self::ExactlyOnce(e) => matches!(
                e,
                crate::exactly_once::ExactlyOnceError::Config { .. }
                    | crate::exactly_once::ExactlyOnceError::MissingCapability { .. }
            ),
            _ => false,
        }
    }

    /// True when the driver can go on: calling `iteration()` again may succeed. That is the
    /// case for consumer errors that retrying may fix ([`ConsumerError::is_retriable`]: a
    /// timeout, a lost connection, a garbled response, a retriable broker error code) and
    /// for dead-letter errors likewise; as in Connect, such an error does not stop the task.
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Consumer(e) => e.is_retriable(),
            Self::DeadLetter(e) => e.is_retriable(),
            #[cfg(feature = "exactly-once")]
            Self::ExactlyOnce(e) => e.is_retriable(),
            _ => false,
        }
    }
}

/// `Result` with the driver's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Displays an error with its whole `source` chain (`error: cause: cause …`), for logs.
pub(crate) struct ErrorChain<'a>(pub(crate) &'a (dyn StdError + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_at_fault_are_config_errors_a_group_config_not_read_yet_is_not() {
        let config = Error::Config {
            key: "ack.policy",
            reason: "after.flush needs explicit mode".to_owned(),
        };
        assert!(config.is_config());
        let dead_letter_bootstrap = Error::DeadLetter(crate::dlq::DeadLetterError::Kafka {
            topic: "dlq".to_owned(),
            source: crate::ClientError::Config {
                key: "bootstrap.servers".to_owned(),
                reason: "`k` has no port".to_owned(),
            },
        });
        assert!(dead_letter_bootstrap.is_config());
        let consumer_bootstrap = Error::Consumer(ConsumerError::Config {
            key: "bootstrap.servers".to_owned(),
            reason: "`k` has no port".to_owned(),
        });
        assert!(consumer_bootstrap.is_config());
        // Raised too when the group's configuration could not be read: a restart reads it.
        let required = Error::Config {
            key: "share.dead.letter.queue.required",
            reason: "not known".to_owned(),
        };
        assert!(!required.is_config());
        assert!(!Error::Consumer(ConsumerError::Timeout(Duration::from_secs(1))).is_config());
        assert!(!Error::Failed.is_config());
    }

    #[test]
    fn a_plugin_whose_factory_failed_may_build_on_a_restart_a_bad_setting_cannot() {
        let plugin = |source| {
            Error::Connector(crate::config::ConfigError::Plugin {
                key: "value.converter".to_owned(),
                source,
            })
        };
        let unreachable = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "registry");
        assert!(!plugin(crate::plugins::PluginError::build(unreachable)).is_config());
        let missing = crate::plugins::PluginError::missing_config("schema.registry.url");
        assert!(plugin(missing).is_config());
    }
}
