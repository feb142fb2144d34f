//! [`BrokerError`]: a broker answered with an error code.

/// A broker answered a request with a Kafka error code.
///
/// The broker layer of the client's errors (see
/// [`ConsumerError`](crate::ConsumerError) for the table of which client reports it how).
/// `name` is Kafka's own (`Errors.java`) name of the code, e.g.
/// `TOPIC_AUTHORIZATION_FAILED`, or `UNKNOWN` for a code this crate does not know;
/// `retriable` is Kafka's classification of the code.
///
/// # Example
///
/// ```
/// use kafka_share_sink::{BrokerError, ConsumerError};
///
/// /// Whether `error` is an ACL refusal (of a topic, a group or the cluster).
/// fn is_authorization(error: &ConsumerError) -> bool {
///     matches!(error, ConsumerError::Broker(BrokerError { code: 29..=31, .. }))
/// }
///
/// assert!(!is_authorization(&ConsumerError::Closed));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "broker answered {api} with error {code} ({name}){}",
    message.as_deref().map(|m| format!(": {m}")).unwrap_or_default()
)]
#[non_exhaustive]
pub struct BrokerError {
    /// The request, e.g. `ShareGroupHeartbeat`.
    pub api: &'static str,
    /// The Kafka error code.
    pub code: i16,
    /// The error code's name, e.g. `GROUP_AUTHORIZATION_FAILED`.
    pub name: &'static str,
    /// The broker's error message, if any.
    pub message: Option<String>,
    /// Whether Kafka classes the code as retriable.
    pub retriable: bool,
}

impl BrokerError {
    /// The error of Kafka error `code` answering `api` (a request name such as `"Produce"`),
    /// named and classed as Kafka does; `None` for 0, which is no error. For a
    /// [`ShareConsumer`](crate::ShareConsumer) of your own, or a test double, that reports a
    /// broker's answer.
    ///
    /// ```
    /// use kafka_share_sink::BrokerError;
    ///
    /// let error = BrokerError::from_code("Produce", 29, None).expect("an error");
    /// assert_eq!((error.name, error.retriable), ("TOPIC_AUTHORIZATION_FAILED", false));
    /// assert!(BrokerError::from_code("Produce", 0, None).is_none());
    /// ```
    pub fn from_code(api: &'static str, code: i16, message: Option<String>) -> Option<Self> {
        super::codes::broker(api, code, message)
    }

    /// True when Kafka classes the code as retriable: the same request may succeed later
    /// (a leader or coordinator that moved, for one).
    pub fn is_retriable(&self) -> bool {
        self.retriable
    }
}
