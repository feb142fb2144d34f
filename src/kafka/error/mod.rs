//! The client's errors by layer, and Kafka's error codes.
//!
//! What goes wrong between this crate and a broker has one of three causes, each its own
//! type, whichever public client meets it:
//!
//! - [`ConnectionError`]: the connection layer. A broker could not be reached or the
//!   connection broke (I/O), or TLS or SASL refused it (authentication).
//! - [`BrokerError`]: the broker layer. A broker answered with an error code, carried with
//!   Kafka's name for it and whether Kafka classes it as retriable.
//! - [`ProtocolError`]: the protocol layer. An answer that could not be decoded, that makes
//!   no sense, or a broker that lacks a needed API version.
//!
//! The connection and cluster layers and the clients' request code return [`ClientError`],
//! which holds the three causes (and a deadline or a setting that cannot work). Each public
//! client maps it once: [`ConsumerError`](crate::ConsumerError) (the share consumer and the
//! log reader) has a variant of the same name for each, while
//! [`ProducerError`](crate::producer::ProducerError), [`AdminError`](crate::AdminError) and
//! [`DeadLetterError`](crate::DeadLetterError) carry the `ClientError` as the
//! [`source`](std::error::Error::source) of theirs. The table of which variant each client
//! gives for which cause is on [`ConsumerError::Connection`](crate::ConsumerError::Connection).
//!
//! [`codes`] maps Kafka's error codes to [`BrokerError`]s. No I/O here.

mod broker;
mod client;
pub(crate) mod codes;
mod connection;
mod protocol;

pub use self::broker::BrokerError;
pub use self::client::ClientError;
pub use self::connection::ConnectionError;
pub use self::protocol::ProtocolError;
