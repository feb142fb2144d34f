//! [`AdminError`], what a failed [`KafkaAdmin`](super::KafkaAdmin) call reports, and
//! [`Failure`], what the calls' parts report before the call's name is known.

use std::time::Duration;

use crate::kafka::error::ClientError;
use crate::kafka::error::{BrokerError, ConnectionError, ProtocolError};

/// Why a [`KafkaAdmin`](crate::KafkaAdmin) call failed.
///
/// Every variant names the call (`call`: the method, e.g. `"create_topic"`), and its message
/// says what to do. Errors of the connection and undecodable answers keep the client error
/// they come from as their [`source`](std::error::Error::source).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// An argument or a setting is not valid; nothing was sent.
    #[error("KafkaAdmin::{call}: {reason}")]
    InvalidArgument {
        /// The call, e.g. `"create_topic_with_replicas"`.
        call: &'static str,
        /// What is wrong and what is expected.
        reason: String,
    },
    /// No broker could be connected to: none reachable, or none completed the connection
    /// handshake (in time, or with an answer that could be used).
    #[error(
        "KafkaAdmin::{call}: could not connect to any broker of `{bootstrap}`; check the \
         addresses and that Kafka brokers are up and listening there, then try again"
    )]
    Connect {
        /// The call, `"connect"` or the call that had to connect again.
        call: &'static str,
        /// The addresses tried, comma-separated.
        bootstrap: String,
        /// Why each attempt failed.
        #[source]
        source: ClientError,
    },
    /// The broker refused this client's credentials or certificate (or this client refused
    /// the broker's): TLS or SASL failed. Not retriable: fix the security settings.
    #[error(
        "KafkaAdmin::{call}: the broker refused the connection's authentication; fix the \
         security settings (security.protocol, ssl.*, sasl.*) named in the cause"
    )]
    Authentication {
        /// The call, e.g. `"connect"`.
        call: &'static str,
        /// What was refused, naming the broker, never a secret.
        #[source]
        source: ClientError,
    },
    /// A request got no answer within the request timeout.
    ///
    /// The request may still take effect on the broker. The connection is dropped, and the
    /// next call makes a new one.
    #[error(
        "KafkaAdmin::{call}: the broker did not answer the {api} request within the request \
         timeout of {timeout:?}, though it may still carry it out; try again (a retried \
         create_topic may then fail with TOPIC_ALREADY_EXISTS), or give the broker longer \
         with KafkaAdmin::builder(..).request_timeout(..)"
    )]
    Timeout {
        /// The call, e.g. `"create_topic"`.
        call: &'static str,
        /// The request that got no answer, e.g. `"CreateTopics"`.
        api: &'static str,
        /// The request timeout.
        timeout: Duration,
    },
    /// The broker answered with a Kafka error code: the broker layer's [`BrokerError`],
    /// the same the share consumer and the producer report for the code (not a
    /// [`source`](std::error::Error::source): this message says all it says).
    #[error(
        "KafkaAdmin::{call}: the broker answered {} with error {} ({}){}{}",
        error.api,
        error.code,
        error.name,
        error.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default(),
        if error.retriable { "; this may pass: try again" } else { "" }
    )]
    Broker {
        /// The call, e.g. `"create_topic"`.
        call: &'static str,
        /// The request (e.g. `"CreateTopics"`), the code, Kafka's name for it (e.g.
        /// `TOPIC_ALREADY_EXISTS`), the broker's explanation or what the call was about (e.g.
        /// the topic), and whether Kafka classes the code as retriable.
        error: BrokerError,
    },
    /// The brokers accepted the change, but the cluster metadata did not show it in time.
    #[error(
        "KafkaAdmin::{call}: {what} did not show in the cluster metadata within {waited:?}; \
         the cluster may still be applying it: look again later"
    )]
    NotSettled {
        /// The call, e.g. `"create_topic"`.
        call: &'static str,
        /// What was waited for.
        what: String,
        /// How long the call waited.
        waited: Duration,
    },
    /// The share group has members, and the call changes what only an empty group may have
    /// changed: its offsets (`alter_share_group_offsets`, `reset_share_group_offsets`,
    /// `delete_share_group_offsets`), as `kafka-share-groups.sh` also refuses.
    #[error(
        "KafkaAdmin::{call}: share group `{group}` still has active members; stop (or close) \
         its consumers first, wait until describe_share_group shows it Empty, then try again{}",
        message.as_deref().map(|m| format!(" (broker: {m})")).unwrap_or_default()
    )]
    GroupNotEmpty {
        /// The call, e.g. `"alter_share_group_offsets"`.
        call: &'static str,
        /// The group.
        group: String,
        /// The broker's explanation, if it gave one.
        message: Option<String>,
    },
    /// The group does not exist (no member ever joined it and it has no offsets), or it is not
    /// a share group.
    #[error(
        "KafkaAdmin::{call}: share group `{group}` was not found, or is not a share group; \
         check the name (a share group exists once a consumer has joined it){}",
        message.as_deref().map(|m| format!(" (broker: {m})")).unwrap_or_default()
    )]
    GroupNotFound {
        /// The call, e.g. `"describe_share_group"`.
        call: &'static str,
        /// The group.
        group: String,
        /// The broker's explanation, if it gave one.
        message: Option<String>,
    },
    /// The broker offers no version of a request the call needs.
    #[error(
        "KafkaAdmin::{call}: broker {broker} does not support {api} {wanted}; this call needs a \
         newer Apache Kafka"
    )]
    Unsupported {
        /// The call, e.g. `"topic_ids"`.
        call: &'static str,
        /// The broker address.
        broker: String,
        /// The request, e.g. `"Metadata"`.
        api: &'static str,
        /// The versions needed, and those offered.
        wanted: String,
    },
    /// The connection broke during the call. The next call connects again.
    #[error(
        "KafkaAdmin::{call}: the connection to the broker failed during the call, which may or \
         may not have taken effect; try again (the next call connects again)"
    )]
    Connection {
        /// The call, e.g. `"delete_topic"`.
        call: &'static str,
        /// The connection error.
        #[source]
        source: ClientError,
    },
    /// The broker sent an answer that cannot be decoded or lacks what was asked for.
    #[error(
        "KafkaAdmin::{call}: the broker's answer cannot be used; a retry rarely helps: check \
         that the address is a Kafka broker and its version"
    )]
    Protocol {
        /// The call, e.g. `"topic_ids"`.
        call: &'static str,
        /// What was wrong with the answer.
        #[source]
        source: ClientError,
    },
}

impl AdminError {
    /// The call that failed, e.g. `"create_topic"`.
    pub fn call(&self) -> &'static str {
        match self {
            Self::InvalidArgument { call, .. }
            | Self::Connect { call, .. }
            | Self::Authentication { call, .. }
            | Self::Timeout { call, .. }
            | Self::Broker { call, .. }
            | Self::GroupNotEmpty { call, .. }
            | Self::GroupNotFound { call, .. }
            | Self::NotSettled { call, .. }
            | Self::Unsupported { call, .. }
            | Self::Connection { call, .. }
            | Self::Protocol { call, .. } => call,
        }
    }

    /// The broker's error code answer ([`AdminError::Broker`]): the same [`BrokerError`] the
    /// share consumer and the producer report for the code.
    pub fn broker_error(&self) -> Option<&BrokerError> {
        match self {
            Self::Broker { error, .. } => Some(error),
            _ => None,
        }
    }

    /// True when TLS or SASL refused a connection ([`AdminError::Authentication`]).
    pub fn is_authentication(&self) -> bool {
        matches!(self, Self::Authentication { .. })
    }

    /// True when the same call may succeed later without any change by the caller: no
    /// connection, no answer in time, a retriable broker error, a change not visible yet.
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Connect { source, .. } => source.is_retriable(),
            Self::Timeout { .. } | Self::NotSettled { .. } | Self::Connection { .. } => true,
            Self::Broker { error, .. } => error.is_retriable(),
            // Not without a change: the consumers must stop, or the group be made.
            Self::GroupNotEmpty { .. } | Self::GroupNotFound { .. } => false,
            Self::InvalidArgument { .. }
            | Self::Unsupported { .. }
            | Self::Protocol { .. }
            | Self::Authentication { .. } => false,
        }
    }
}

/// What went wrong inside an admin call, before [`Failure::into_admin`] names the call.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Connecting (or connecting again) failed.
    Connect {
        /// The addresses tried.
        bootstrap: String,
        /// Why.
        source: ClientError,
    },
    /// A request got no answer in time.
    Timeout {
        /// The request.
        api: &'static str,
        /// The request timeout.
        timeout: Duration,
    },
    /// The metadata did not show the change in time.
    NotSettled {
        /// What was waited for.
        what: String,
        /// How long.
        waited: Duration,
    },
    /// An argument is not valid.
    InvalidArgument(String),
    /// The share group has members, and the request needs it empty.
    GroupNotEmpty {
        /// The group.
        group: String,
        /// The broker's explanation.
        message: Option<String>,
    },
    /// The group does not exist, or is not a share group.
    GroupNotFound {
        /// The group.
        group: String,
        /// The broker's explanation.
        message: Option<String>,
    },
    /// What the connection or the broker said: a broker error code, an undecodable answer,
    /// a lost connection, a missing API.
    Client(ClientError),
}

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Self {
        match error {
            ClientError::Timeout(timeout) => Self::Timeout {
                api: "admin",
                timeout,
            },
            other => Self::Client(other),
        }
    }
}

impl Failure {
    /// The [`AdminError`] of `call`.
    pub(crate) fn into_admin(self, call: &'static str) -> AdminError {
        match self {
            Self::Connect {
                source: ClientError::Config { key, reason },
                ..
            } => AdminError::InvalidArgument {
                call,
                reason: format!("`{key}`: {reason}"),
            },
            Self::Connect {
                source: source @ ClientError::Connection(ConnectionError::Authentication { .. }),
                ..
            }
            | Self::Client(
                source @ ClientError::Connection(ConnectionError::Authentication { .. }),
            ) => AdminError::Authentication { call, source },
            Self::Connect { bootstrap, source } => AdminError::Connect {
                call,
                bootstrap,
                source,
            },
            Self::Timeout { api, timeout } => AdminError::Timeout { call, api, timeout },
            Self::NotSettled { what, waited } => AdminError::NotSettled { call, what, waited },
            Self::InvalidArgument(reason) => AdminError::InvalidArgument { call, reason },
            Self::GroupNotEmpty { group, message } => AdminError::GroupNotEmpty {
                call,
                group,
                message,
            },
            Self::GroupNotFound { group, message } => AdminError::GroupNotFound {
                call,
                group,
                message,
            },
            Self::Client(error) => match error {
                ClientError::Broker(error) => AdminError::Broker { call, error },
                ClientError::Protocol(ProtocolError::Unsupported {
                    broker,
                    api,
                    wanted,
                }) => AdminError::Unsupported {
                    call,
                    broker,
                    api,
                    wanted,
                },
                ClientError::Timeout(timeout) => AdminError::Timeout {
                    call,
                    api: "admin",
                    timeout,
                },
                ClientError::Config { key, reason } => AdminError::InvalidArgument {
                    call,
                    reason: format!("`{key}`: {reason}"),
                },
                // A garbled answer closed its connection, like a broken one.
                source @ (ClientError::Connection(ConnectionError::Io { .. })
                | ClientError::Protocol(ProtocolError::Garbled { .. })) => {
                    AdminError::Connection { call, source }
                }
                source => AdminError::Protocol { call, source },
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;
    use std::io;

    use super::*;

    fn connection_error() -> ClientError {
        ClientError::Connection(ConnectionError::Io {
            broker: "b:9092".to_owned(),
            source: io::Error::new(io::ErrorKind::ConnectionReset, "reset by peer"),
        })
    }

    #[test]
    fn every_error_names_its_call() {
        let timeout = Failure::Timeout {
            api: "CreateTopics",
            timeout: Duration::from_secs(3),
        }
        .into_admin("create_topic");
        let message = timeout.to_string();
        assert!(
            message.starts_with("KafkaAdmin::create_topic: ")
                && message.contains("CreateTopics")
                && message.contains("3s")
                && message.contains("request_timeout"),
            "{message}"
        );
        assert_eq!(timeout.call(), "create_topic");
        assert!(timeout.is_retriable());

        let broker = Failure::Client(ClientError::Broker(BrokerError {
            api: "CreateTopics",
            code: 36,
            name: "TOPIC_ALREADY_EXISTS",
            message: Some("Topic 'orders' already exists.".to_owned()),
            retriable: false,
        }))
        .into_admin("create_topic");
        assert_eq!(
            broker.to_string(),
            "KafkaAdmin::create_topic: the broker answered CreateTopics with error 36 \
             (TOPIC_ALREADY_EXISTS): Topic 'orders' already exists."
        );
        assert!(!broker.is_retriable());
    }

    #[test]
    fn connection_errors_are_the_source() {
        let error = Failure::from(connection_error()).into_admin("delete_topic");
        assert!(
            matches!(
                &error,
                AdminError::Connection {
                    call: "delete_topic",
                    ..
                }
            ),
            "{error:?}"
        );
        assert!(error.is_retriable());
        let source = error.source().expect("a source");
        assert_eq!(source.to_string(), "connection to broker b:9092 failed");
        assert_eq!(
            source.source().expect("the I/O error").to_string(),
            "reset by peer"
        );

        let connect = Failure::Connect {
            bootstrap: "a:9092,b:9092".to_owned(),
            source: connection_error(),
        }
        .into_admin("topic_ids");
        assert!(
            connect.to_string().starts_with(
                "KafkaAdmin::topic_ids: could not connect to any broker of `a:9092,b:9092`"
            ),
            "{connect}"
        );
        assert!(connect.is_retriable());
    }

    #[test]
    fn a_refused_authentication_says_to_fix_the_security_settings() {
        let refused = || {
            ClientError::Connection(ConnectionError::Authentication {
                broker: "k1:9093".to_owned(),
                reason: "SASL PLAIN refused: Invalid username or password".to_owned(),
            })
        };
        for failure in [
            Failure::Connect {
                bootstrap: "k1:9093".to_owned(),
                source: refused(),
            },
            Failure::Client(refused()),
        ] {
            let error = failure.into_admin("connect");
            assert!(
                matches!(
                    &error,
                    AdminError::Authentication {
                        call: "connect",
                        ..
                    }
                ),
                "{error:?}"
            );
            assert!(!error.is_retriable());
            let text = error.to_string();
            assert!(
                text.contains("security settings") && !text.contains("check the addresses"),
                "{text}"
            );
            let cause = error.source().expect("the refusal").to_string();
            assert!(cause.contains("Invalid username or password"), "{cause}");
        }
    }

    #[test]
    fn an_empty_bootstrap_list_is_an_invalid_argument() {
        let error = Failure::Connect {
            bootstrap: " ".to_owned(),
            source: ClientError::Config {
                key: "bootstrap.servers".to_owned(),
                reason: "no broker address".to_owned(),
            },
        }
        .into_admin("connect");
        assert!(
            matches!(&error, AdminError::InvalidArgument { call: "connect", reason } if reason == "`bootstrap.servers`: no broker address"),
            "{error:?}"
        );
        assert!(!error.is_retriable());
    }
}
