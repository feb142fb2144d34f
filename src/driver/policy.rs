//! The policies of the driver that Kafka Connect or KIP-1302 name: when records are
//! acknowledged, what a retriable `put` error does, and how conversion and transform errors
//! are tolerated.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A policy value that is not one of the accepted spellings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{value}` is not a valid {what}; expected one of: {expected}")]
pub struct ParsePolicyError {
    what: &'static str,
    value: String,
    expected: &'static str,
}

impl ParsePolicyError {
    fn new(what: &'static str, value: &str, expected: &'static str) -> Self {
        Self {
            what,
            value: value.to_owned(),
            expected,
        }
    }
}

/// When a record that `put` took is ACCEPTed (`ack.policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum AckPolicy {
    /// `after.put` (the default, KIP-1302's rule): as soon as `put` returns `Ok`.
    #[default]
    AfterPut,
    /// `after.flush`: only once [`SinkTask::pre_commit`](crate::SinkTask::pre_commit) says
    /// the record is durable, so a task that buffers in `put` cannot lose data. Until then
    /// the record's lock is renewed when the broker supports RENEW.
    AfterFlush,
}

impl FromStr for AckPolicy {
    type Err = ParsePolicyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "after.put" => Ok(Self::AfterPut),
            "after.flush" => Ok(Self::AfterFlush),
            _ => Err(ParsePolicyError::new(
                "ack.policy",
                s,
                "after.put, after.flush",
            )),
        }
    }
}

impl fmt::Display for AckPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::AfterPut => "after.put",
            Self::AfterFlush => "after.flush",
        })
    }
}

/// What a retriable `put` error does (`put.retriable.policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum PutRetriablePolicy {
    /// `release` (the default, KIP-1302's rule): RELEASE the batch, so the group delivers it
    /// again with its delivery count one higher.
    #[default]
    Release,
    /// `retry.in.place`: keep the batch, renew its locks, back off and `put` it again, up to
    /// `errors.retry.timeout`; then release it.
    RetryInPlace,
}

impl FromStr for PutRetriablePolicy {
    type Err = ParsePolicyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "release" => Ok(Self::Release),
            "retry.in.place" => Ok(Self::RetryInPlace),
            _ => Err(ParsePolicyError::new(
                "put.retriable.policy",
                s,
                "release, retry.in.place",
            )),
        }
    }
}

impl fmt::Display for PutRetriablePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Release => "release",
            Self::RetryInPlace => "retry.in.place",
        })
    }
}

/// Whether conversion and transform errors stop the task (`errors.tolerance`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ErrorTolerance {
    /// `none` (the default): the first such error fails the task.
    #[default]
    None,
    /// `all`: the record is skipped (and written to the dead-letter queue when one is set).
    All,
}

impl FromStr for ErrorTolerance {
    type Err = ParsePolicyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(Self::None),
            "all" => Ok(Self::All),
            _ => Err(ParsePolicyError::new("errors.tolerance", s, "none, all")),
        }
    }
}

impl fmt::Display for ErrorTolerance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::All => "all",
        })
    }
}

/// Connect's `errors.*` settings for the conversion and transform stages (and for
/// retrying a `put` in place).
///
/// ```
/// use kafka_share_sink::{ErrorHandling, ErrorTolerance};
/// use std::time::Duration;
/// let errors = ErrorHandling::new()
///     .tolerance(ErrorTolerance::All)
///     .retry_timeout(Some(Duration::from_secs(30)))
///     .log(true, false);
/// assert_eq!(errors.tolerance_value(), ErrorTolerance::All);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorHandling {
    pub(crate) tolerance: ErrorTolerance,
    /// `None` is `-1`: retry forever.
    pub(crate) retry_timeout: Option<Duration>,
    pub(crate) retry_delay_max: Duration,
    pub(crate) log_enable: bool,
    pub(crate) log_include_messages: bool,
}

impl Default for ErrorHandling {
    fn default() -> Self {
        Self::new()
    }
}

impl ErrorHandling {
    /// Connect's defaults: tolerance `none`, no retries (`errors.retry.timeout=0`), delays
    /// capped at 60 s, no error log.
    pub fn new() -> Self {
        Self {
            tolerance: ErrorTolerance::None,
            retry_timeout: Some(Duration::ZERO),
            retry_delay_max: Duration::from_secs(60),
            log_enable: false,
            log_include_messages: false,
        }
    }

    /// `errors.tolerance`.
    pub fn tolerance(mut self, tolerance: ErrorTolerance) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// `errors.retry.timeout`: how long a retriable failure is retried; `None` is forever
    /// (`-1`). A timeout too long to add to the clock (e.g. [`Duration::MAX`]) is taken as
    /// about 30 years, which is forever in practice too.
    ///
    /// While a conversion or transform is retried, the driver renews the acquisition locks of
    /// the poll's records (and of the held ones) at half their duration, so a retry may
    /// outlast a lock. That takes explicit acknowledgement mode and a broker with RENEW
    /// (Kafka 4.2+); otherwise the locks run from the poll, and records whose lock ran out
    /// during a retry are delivered again, each spending a delivery (the group archives a
    /// record that was on its last).
    pub fn retry_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.retry_timeout = timeout;
        self
    }

    /// `errors.retry.delay.max.ms`: the cap of the exponential backoff between retries.
    /// The backoff starts at 300 ms and doubles per attempt, so a cap above about 87 hours
    /// (300 ms × 2²⁰, where the doubling stops) is never reached; any value is safe.
    pub fn retry_delay_max(mut self, max: Duration) -> Self {
        self.retry_delay_max = max;
        self
    }

    /// `errors.log.enable` and `errors.log.include.messages`.
    pub fn log(mut self, enable: bool, include_messages: bool) -> Self {
        self.log_enable = enable;
        self.log_include_messages = include_messages;
        self
    }

    /// The tolerance.
    pub fn tolerance_value(&self) -> ErrorTolerance {
        self.tolerance
    }

    /// The retry timeout; `None` is forever.
    pub fn retry_timeout_value(&self) -> Option<Duration> {
        self.retry_timeout
    }

    /// The cap of the backoff between retries.
    pub fn retry_delay_max_value(&self) -> Duration {
        self.retry_delay_max
    }

    /// Whether errors are logged, and whether the log names the record.
    pub fn log_value(&self) -> (bool, bool) {
        (self.log_enable, self.log_include_messages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_their_connect_spellings_and_name_the_key_otherwise() {
        assert_eq!(
            "after.flush".parse::<AckPolicy>(),
            Ok(AckPolicy::AfterFlush)
        );
        assert_eq!(" AFTER.PUT ".parse::<AckPolicy>(), Ok(AckPolicy::AfterPut));
        assert_eq!(
            "retry.in.place".parse::<PutRetriablePolicy>(),
            Ok(PutRetriablePolicy::RetryInPlace)
        );
        assert_eq!("all".parse::<ErrorTolerance>(), Ok(ErrorTolerance::All));
        let err = "sometimes".parse::<ErrorTolerance>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "`sometimes` is not a valid errors.tolerance; expected one of: none, all"
        );
        assert!(
            "after"
                .parse::<AckPolicy>()
                .unwrap_err()
                .to_string()
                .contains("ack.policy")
        );
        for p in [AckPolicy::AfterPut, AckPolicy::AfterFlush] {
            assert_eq!(p.to_string().parse::<AckPolicy>(), Ok(p));
        }
    }
}
