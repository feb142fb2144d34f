//! One TCP connection to one Kafka broker, with pipelined requests, over TLS and with SASL
//! when the client's [`SecurityContext`] asks for them.
//!
//! # Design
//!
//! - Connecting is: TCP, then the TLS handshake (`SSL`, `SASL_SSL`), then ApiVersions, then
//!   the SASL exchange (`SASL_PLAINTEXT`, `SASL_SSL`: SaslHandshake v1 and SaslAuthenticate
//!   requests through the ordinary request path). A connection is handed out only once all
//!   of that succeeded. Failures of authentication, on either side, are
//!   [`ConnectionError::Authentication`], which is not retriable; the client types map it to
//!   their own `Authentication` variants (the table of causes and variants is on
//!   [`ConsumerError::Connection`](crate::ConsumerError::Connection)). Attempts wait for the client's reconnect backoff
//!   after failures ([`backoff`](super::backoff)).
//! - Frames are a 4-byte big-endian length followed by that many bytes.
//! - A **writer task** owns the socket's write half. Requests hand it whole frames over a
//!   bounded channel, so any number of tasks may send through one `&Connection` at once.
//! - A **reader task** owns the read half. It reads each response frame, looks its correlation
//!   id up among the waiting requests and hands the raw frame over a oneshot channel. The
//!   requester then decodes the response header and body.
//! - The connection is **poisoned** (closed for good, every waiting request failed) when the
//!   broker sends a frame that is negative or larger than [`ConnectionConfig::max_frame_bytes`],
//!   a response nobody waits for, or a response whose header or body cannot be decoded: the
//!   byte stream may be out of step, or the broker misbehaving, so nothing more read from it
//!   is trusted. The waiting requests fail with [`ProtocolError::Garbled`]; on EOF or an I/O
//!   error, with [`ClientError::Connection`]. Both are retriable. Later requests fail at
//!   once with [`ClientError::Connection`]: build a new connection.
//! - A request that times out leaves the connection open (other requests under way on it may
//!   still get their answers), but while its answer is overdue the connection is not
//!   **reusable**: the broker answers in order, so a new request would wait behind the lost
//!   answer. Pools, the cluster-wide connection and the coordinators' connections then make a
//!   new connection for the next request ([`Connection::is_reusable`]); Java's clients close
//!   such a connection instead.
//! - Dropping the last [`Connection`] handle stops both tasks and closes the socket.
//!
//! # Cancel safety
//!
//! Requests are cancel safe and never poison the connection. A request waits for a slot in
//! the writer's queue (cancel safe), then registers its correlation id and puts the whole frame
//! in that slot without an `.await` in between. So a dropped request future either queued
//! nothing or queued a whole frame, which the writer task writes whole. The response to a
//! request that was dropped or timed out is read and discarded when it arrives.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{
    Decodable, Encodable, HeaderVersion, StrBytes, VersionRange, encode_request_header_into_buffer,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::AbortHandle;
use tracing::{Instrument, debug, warn};

use super::backoff::{Dialer, Outcome};
use super::body::{Body, FrameBuf};
use super::frame_pool::FramePool;
use crate::kafka::error::ClientError;
use crate::kafka::error::codes::{api_name, broker_error};
use crate::kafka::error::{ConnectionError, ProtocolError};
use crate::kafka::security::{SaslSettings, SecurityContext, sasl, tls};

/// The read half of a connection's byte stream (TCP, or TLS over TCP).
type Reader = Box<dyn AsyncRead + Send + Unpin>;
/// The write half of a connection's byte stream.
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// How many frames may wait for the writer task before senders wait for room.
const WRITE_QUEUE_FRAMES: usize = 64;

/// The `ClientSoftwareName` sent in ApiVersions v3+.
const CLIENT_SOFTWARE_NAME: &str = "kafka-share-sink";

/// Kafka's UNSUPPORTED_VERSION error code.
const UNSUPPORTED_VERSION: i16 = 35;

/// Kafka's UNSUPPORTED_SASL_MECHANISM error code.
const UNSUPPORTED_SASL_MECHANISM: i16 = 33;

/// Kafka's ILLEGAL_SASL_STATE error code.
const ILLEGAL_SASL_STATE: i16 = 34;

/// The ApiVersions version tried first; a broker without it answers in v0 with
/// UNSUPPORTED_VERSION, and the handshake falls back to v0.
const API_VERSIONS_FIRST: i16 = 3;

/// Settings of one broker connection.
#[derive(Clone, Debug)]
pub(crate) struct ConnectionConfig {
    /// The `client.id` sent in every request header.
    pub(crate) client_id: Arc<str>,
    /// Bound on the TCP connect, and separately on the ApiVersions handshake.
    pub(crate) connect_timeout: Duration,
    /// Bound on one request, from queueing it to decoding its response.
    pub(crate) request_timeout: Duration,
    /// The largest response frame accepted; a larger one poisons the connection.
    pub(crate) max_frame_bytes: usize,
    /// TLS and SASL, built once per client.
    pub(crate) security: SecurityContext,
    /// The reconnect backoff per broker, shared by every connection of the client (clones
    /// of this config share it).
    pub(crate) dialer: Arc<Dialer>,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        Self {
            client_id: Arc::from(CLIENT_SOFTWARE_NAME),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_frame_bytes: 100 << 20,
            security: SecurityContext::default(),
            dialer: Arc::new(Dialer::default()),
        }
    }
}

/// One TCP connection to one broker; clones share the connection.
#[derive(Clone, Debug)]
pub(crate) struct Connection {
    /// The state shared by the handles; dropping the last one closes the connection.
    inner: Arc<Inner>,
}

/// What the [`Connection`] handles share.
#[derive(Debug)]
struct Inner {
    /// What the handles share with the reader and writer tasks.
    shared: Arc<Shared>,
    /// The writer task's queue.
    frames: mpsc::Sender<Frame>,
    /// The `client.id` of every request header.
    client_id: StrBytes,
    /// The default request timeout.
    request_timeout: Duration,
    /// What the broker offers, learnt by the ApiVersions handshake.
    versions: OnceLock<BrokerVersions>,
    /// The reader and writer tasks, stopped on drop.
    tasks: [AbortHandle; 2],
    /// Re-authentication before the SASL session ends (KIP-368).
    reauth: Reauth,
}

/// When and how a SASL connection authenticates again, on the same connection, before the
/// session lifetime the broker gave runs out (the broker closes a connection that sends
/// anything but SaslHandshake after that).
///
/// The broker answers one request at a time, in order, and refuses other requests between a
/// SaslHandshake and the last SaslAuthenticate. So the exchange runs in a task holding the
/// write side of `gate`, and every other request takes the read side around putting its
/// frame in the writer's queue (not while waiting for its answer): frames queued before the
/// exchange go out first and are answered normally, later ones wait until it is done. No
/// request fails and no acknowledgement is lost for it.
#[derive(Debug)]
struct Reauth {
    /// The SASL settings, for a SASL connection.
    settings: Option<Arc<SaslSettings>>,
    /// The bound on one exchange (the connect timeout).
    timeout: Duration,
    /// When to authenticate again; `None` without a lifetime, or while an exchange runs.
    due: Mutex<Option<tokio::time::Instant>>,
    /// Held for reading by requests being queued, for writing by the exchange.
    gate: Arc<tokio::sync::RwLock<()>>,
    /// Told when a re-authentication is refused, so the client's next connection to the
    /// broker waits its reconnect backoff.
    dialer: Arc<Dialer>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.close(CloseReason::Dropped);
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// What a broker offers, from its ApiVersions response.
#[derive(Debug, Default)]
struct BrokerVersions {
    /// Per API key, the broker's (min, max) versions.
    apis: HashMap<i16, (i16, i16)>,
    /// Per finalized feature (e.g. `share.version`), its max version level.
    finalized_features: HashMap<String, i16>,
}

/// One request frame for the writer task: the length prefix and header, then the body.
#[derive(Debug)]
struct Frame {
    /// The 4-byte length and the request header.
    head: Bytes,
    /// The encoded request body.
    body: Body,
}

/// The most brokers the application did not list (those a Metadata answer named) that one
/// [`Connection::connect_first`] tries: enough to get past one or two that went away, without
/// a connect timeout for each of dozens.
pub(crate) const MAX_LEARNED_TRIES: usize = 3;

/// An address [`Connection::connect_first`] may dial.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate<'a> {
    /// `host:port`.
    pub(crate) addr: &'a str,
    /// The application listed it (`bootstrap.servers`), rather than a Metadata answer.
    pub(crate) chosen: bool,
}

/// A request queued by [`Connection::queue`]: [`response`](Self::response) waits for its
/// answer.
#[derive(Debug)]
pub(crate) struct Queued<Resp> {
    connection: Connection,
    key: ApiKey,
    version: i16,
    response: oneshot::Receiver<Result<Bytes, ClientError>>,
    decoded: PhantomData<fn() -> Resp>,
}

impl<Resp: Decodable + HeaderVersion> Queued<Resp> {
    /// Waits for the response and decodes it; the errors of [`Connection::request`] but
    /// [`ClientError::Timeout`] (no timeout applies).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the answer of a dropped request is discarded when it arrives.
    pub(crate) async fn response(self) -> Result<Resp, ClientError> {
        let connection = &self.connection;
        let frame = self
            .response
            .await
            .map_err(|_| connection.inner.shared.closed_error())??;
        let body = connection.strip_header(
            self.key,
            self.version,
            Resp::header_version(self.version),
            frame,
        )?;
        connection.decode_body(self.key, self.version, body)
    }

    /// [`response`](Self::response) within `timeout` (counted from now: the caller calls it
    /// once the request is on its way). An answer not in by then closes the connection
    /// ([`Connection::close_overdue`]), as Java's clients close a connection whose request
    /// timed out: the broker answers in order, so every later request on it would wait behind
    /// the lost answer; the requests under way on it fail at once, and their callers retry on a
    /// new connection.
    ///
    /// # Errors
    ///
    /// Those of [`response`](Self::response), and [`ClientError::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// As [`response`](Self::response); the connection stays open if the future is dropped.
    pub(crate) async fn response_within(self, timeout: Duration) -> Result<Resp, ClientError> {
        let connection = self.connection.clone();
        let key = self.key;
        match tokio::time::timeout(timeout, self.response()).await {
            Ok(result) => result,
            Err(_) => {
                connection.close_overdue(key, timeout);
                Err(ClientError::Timeout(timeout))
            }
        }
    }
}

/// What the handles, the reader task and the writer task share.
#[derive(Debug)]
struct Shared {
    /// The broker address, for errors and logs.
    broker: String,
    /// The waiting requests and whether the connection is closed.
    state: Mutex<State>,
    /// Turns `true` once, when the connection closes; stops the tasks.
    closed: watch::Sender<bool>,
}

/// The mutable part of [`Shared`].
#[derive(Debug)]
struct State {
    /// The correlation id of the next request.
    next_correlation_id: i32,
    /// The requests whose responses have not arrived, by correlation id. Requests that timed
    /// out or were dropped stay until their late response arrives and is discarded.
    waiters: HashMap<i32, Waiter>,
    /// Why the connection closed, once it has.
    closed: Option<CloseReason>,
}

/// A request waiting for its response.
#[derive(Debug)]
struct Waiter {
    /// The request's API, for logs.
    api: ApiKey,
    /// When its answer is overdue (its requester's timeout; `None`: the requester keeps its
    /// own). While an overdue answer is outstanding the connection is not
    /// [reusable](Connection::is_reusable).
    due: Option<tokio::time::Instant>,
    /// Where the raw response frame (header and body) goes.
    reply: oneshot::Sender<Result<Bytes, ClientError>>,
}

/// Why a connection closed.
#[derive(Clone, Debug)]
enum CloseReason {
    /// EOF or an I/O error: [`ClientError::Connection`].
    Io {
        /// The I/O error kind.
        kind: io::ErrorKind,
        /// What happened.
        message: String,
    },
    /// The broker sent bytes that cannot be decoded: [`ProtocolError::Garbled`].
    Garbled(String),
    /// A TLS alert or certificate failure: [`ConnectionError::Authentication`].
    Authentication(String),
    /// The broker speaks another protocol than the client's `security.protocol` (it answered
    /// with TLS records): [`ClientError::Config`] naming `security.protocol`.
    Misconfigured(String),
    /// The last handle was dropped.
    Dropped,
}

/// A TLS failure over a certificate, or an alert, behind an I/O error of an open connection.
fn tls_refusal(error: &io::Error, hints: &Hints) -> Option<String> {
    error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
        .and_then(|e| tls::authentication_failure(e, hints.client_cert))
}

impl CloseReason {
    /// The reason for an I/O error while `doing` something.
    fn io(doing: &str, error: &io::Error) -> Self {
        let message = if error.kind() == io::ErrorKind::UnexpectedEof {
            format!("the broker closed the connection while {doing}")
        } else {
            format!("{doing} failed: {error}")
        };
        Self::Io {
            kind: error.kind(),
            message,
        }
    }

    /// The reason for an error while writing: a TLS failure with a certificate or an alert is
    /// an authentication failure, as when reading.
    fn write_error(doing: &str, error: &io::Error, hints: &Hints) -> Self {
        match tls_refusal(error, hints) {
            Some(reason) => Self::Authentication(reason),
            None => Self::io(doing, error),
        }
    }

    /// The reason for an error while reading: a TLS failure with a certificate or an alert
    /// is an authentication failure; EOF right after the ApiVersions answer on a connection
    /// without SASL hints at a SASL listener.
    fn read_error(doing: &str, error: &io::Error, hints: &Hints, frames_read: u64) -> Self {
        if let Some(reason) = tls_refusal(error, hints) {
            return Self::Authentication(reason);
        }
        if error.kind() == io::ErrorKind::UnexpectedEof && frames_read == 1 && !hints.sasl {
            return Self::Io {
                kind: error.kind(),
                message: format!(
                    "the broker closed the connection while {doing}, right after the ApiVersions \
                     handshake: the listener may require SASL (set security.protocol=SASL_SSL \
                     or SASL_PLAINTEXT, sasl.mechanism and sasl.jaas.config)"
                ),
            };
        }
        Self::io(doing, error)
    }

    /// The error a request of `api` waiting on a connection closed for this reason gets.
    fn error(&self, broker: &str, api: ApiKey) -> ClientError {
        match self {
            Self::Authentication(reason) => {
                ClientError::Connection(ConnectionError::Authentication {
                    broker: broker.to_owned(),
                    reason: reason.clone(),
                })
            }
            Self::Misconfigured(reason) => ClientError::Config {
                key: "security.protocol".to_owned(),
                reason: format!("broker {broker}: {reason}"),
            },
            Self::Io { kind, message } => ClientError::Connection(ConnectionError::Io {
                broker: broker.to_owned(),
                source: io::Error::new(*kind, message.clone()),
            }),
            Self::Garbled(reason) => ClientError::Protocol(ProtocolError::Garbled {
                broker: broker.to_owned(),
                api: api_name(api),
                source: reason.clone().into(),
            }),
            Self::Dropped => ClientError::Connection(ConnectionError::Io {
                broker: broker.to_owned(),
                source: io::Error::new(io::ErrorKind::NotConnected, "the connection was dropped"),
            }),
        }
    }
}

impl Shared {
    /// The state, even if a panicking thread poisoned the lock (the state stays consistent).
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The error of a request on this connection once it is closed.
    fn closed_error(&self) -> ClientError {
        // A request on a connection poisoned earlier fails with a Connection error, so that the
        // caller reconnects; only the requests waiting at the time see the Garbled error.
        let reason = match self.lock().closed.clone() {
            // Settings or credentials that failed stay failed: say so again.
            Some(reason @ (CloseReason::Authentication(_) | CloseReason::Misconfigured(_))) => {
                return reason.error(&self.broker, ApiKey::ApiVersions);
            }
            Some(CloseReason::Garbled(reason)) => format!("the connection was closed: {reason}"),
            Some(CloseReason::Io { message, .. }) => {
                format!("the connection was closed: {message}")
            }
            Some(CloseReason::Dropped) | None => "the connection was closed".to_owned(),
        };
        ClientError::Connection(ConnectionError::Io {
            broker: self.broker.clone(),
            source: io::Error::new(io::ErrorKind::NotConnected, reason),
        })
    }

    /// Registers a request; its correlation id and where its response will arrive.
    fn register(
        &self,
        api: ApiKey,
        due: Option<tokio::time::Instant>,
    ) -> Result<(i32, oneshot::Receiver<Result<Bytes, ClientError>>), ClientError> {
        let mut state = self.lock();
        if state.closed.is_some() {
            drop(state);
            return Err(self.closed_error());
        }
        let mut correlation_id = state.next_correlation_id;
        while state.waiters.contains_key(&correlation_id) {
            correlation_id = next_correlation_id(correlation_id);
        }
        state.next_correlation_id = next_correlation_id(correlation_id);
        let (reply, receiver) = oneshot::channel();
        state
            .waiters
            .insert(correlation_id, Waiter { api, reply, due });
        Ok((correlation_id, receiver))
    }

    /// Forgets a registered request that could not be sent.
    fn unregister(&self, correlation_id: i32) {
        self.lock().waiters.remove(&correlation_id);
    }

    /// The request waiting for the response with this correlation id.
    fn take(&self, correlation_id: i32) -> Option<Waiter> {
        self.lock().waiters.remove(&correlation_id)
    }

    /// Closes the connection (once) and fails every waiting request.
    fn close(&self, reason: CloseReason) {
        let waiters = {
            let mut state = self.lock();
            if state.closed.is_some() {
                return;
            }
            state.closed = Some(reason.clone());
            std::mem::take(&mut state.waiters)
        };
        self.closed.send_replace(true);
        match &reason {
            CloseReason::Dropped => debug!(broker = %self.broker, "connection dropped"),
            CloseReason::Io { message, .. } => {
                warn!(broker = %self.broker, waiting = waiters.len(), "connection closed: {message}");
            }
            CloseReason::Garbled(reason) => {
                warn!(broker = %self.broker, waiting = waiters.len(), "connection poisoned: {reason}");
            }
            CloseReason::Authentication(reason) | CloseReason::Misconfigured(reason) => {
                warn!(broker = %self.broker, waiting = waiters.len(), "connection refused: {reason}");
            }
        }
        for waiter in waiters.into_values() {
            // A waiter that gave up (timeout, cancellation) has no receiver any more.
            let _ = waiter
                .reply
                .send(Err(reason.error(&self.broker, waiter.api)));
        }
    }
}

/// The correlation id after `id`, wrapping to 0 and staying non-negative.
fn next_correlation_id(id: i32) -> i32 {
    if id == i32::MAX { 0 } else { id + 1 }
}

impl Connection {
    /// Connects to the broker at `addr` (`host:port`), makes the TLS handshake and the SASL
    /// exchange if the security settings ask for them, and learns its API versions.
    ///
    /// The TCP connect is bounded by [`ConnectionConfig::connect_timeout`] (a timeout is a
    /// [`ClientError::Connection`] of kind `TimedOut`), and so, separately, are the TLS
    /// handshake (likewise), the ApiVersions handshake (a timeout is a
    /// [`ClientError::Timeout`]; v3 first, then v0 if the broker answers
    /// UNSUPPORTED_VERSION) and the SASL exchange (likewise). Refused credentials or
    /// certificates are [`ConnectionError::Authentication`].
    ///
    /// After a failed attempt to `addr` by any connection of the same client (the
    /// [`ConnectionConfig::dialer`] they share), it first waits the reconnect backoff
    /// (`reconnect.backoff.ms` doubling up to `reconnect.backoff.max.ms`; the maximum after
    /// an authentication failure): see [`backoff`](super::backoff). That wait is not bounded
    /// by the connect timeout.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the socket: nothing half-open is kept. Dropped while it
    /// waits for the backoff, nothing was dialled.
    pub(crate) async fn connect(
        addr: &str,
        config: &ConnectionConfig,
    ) -> Result<Self, ClientError> {
        let attempt = config.dialer.turn(addr).await;
        let result = Self::dial(addr, config).await;
        attempt.finish(Outcome::of(&result));
        result
    }

    /// One connection attempt, as [`connect`](Self::connect) without the backoff.
    async fn dial(addr: &str, config: &ConnectionConfig) -> Result<Self, ClientError> {
        let connection_error = |source| {
            ClientError::Connection(ConnectionError::Io {
                broker: addr.to_owned(),
                source,
            })
        };
        let stream =
            match tokio::time::timeout(config.connect_timeout, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => return Err(connection_error(error)),
                Err(_) => {
                    return Err(connection_error(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "TCP connect did not finish within {:?}",
                            config.connect_timeout
                        ),
                    )));
                }
            };
        stream.set_nodelay(true).map_err(connection_error)?;
        let security = &config.security;
        let (reader, writer): (Reader, Writer) = match &security.tls {
            None => {
                let (read, write) = stream.into_split();
                (Box::new(read), Box::new(write))
            }
            Some(tls) => {
                let name = tls::server_name(addr).map_err(|reason| ClientError::Config {
                    key: "bootstrap.servers".to_owned(),
                    reason,
                })?;
                let connector = tokio_rustls::TlsConnector::from(Arc::clone(&tls.config));
                let handshake = connector.connect(name, stream);
                let stream = match tokio::time::timeout(config.connect_timeout, handshake).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(error)) => return Err(tls_error(addr, &error, tls.client_cert)),
                    Err(_) => {
                        return Err(connection_error(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!(
                                "the TLS handshake did not finish within {:?} (is the listener \
                                 TLS? security.protocol=SSL and SASL_SSL need a TLS listener)",
                                config.connect_timeout
                            ),
                        )));
                    }
                };
                let (read, write) = tokio::io::split(stream);
                (Box::new(read), Box::new(write))
            }
        };
        let hints = Hints {
            sasl: security.sasl.is_some(),
            client_cert: security.tls.as_ref().is_some_and(|t| t.client_cert),
        };
        let connection = Self::start(addr, reader, writer, config, hints);
        connection.handshake(config.connect_timeout).await?;
        if let Some(sasl) = &security.sasl {
            let lifetime = connection
                .authenticate(sasl, config.connect_timeout)
                .await?;
            connection.schedule_reauth(lifetime);
        }
        debug!(broker = addr, "connected");
        Ok(connection)
    }

    /// Connects to the first of `candidates` that answers (`list`: how they read in errors;
    /// [`Addresses::connect`](crate::kafka::net::addresses::Addresses::connect) makes them).
    /// Those whose last attempt failed go last
    /// ([`Dialer::failed_last`](crate::kafka::net::backoff::Dialer::failed_last)), each group
    /// in its order, so a broker that went away does not cost every reconnect its backoff and
    /// a failed attempt first. At most [`MAX_LEARNED_TRIES`] brokers the application did not
    /// choose are tried per call, and their refusals (credentials, a certificate not valid for
    /// the name they advertise) are failures like any other.
    ///
    /// With one candidate its error is returned as is. With several, an authentication
    /// failure or a security setting the broker does not match, from a broker the
    /// application chose, ends the search with that error (the other brokers share the
    /// settings); otherwise the error is a [`ClientError::Connection`] for the whole list
    /// whose source names each failure. `candidates` holds one at least: `Addresses` refuses
    /// a `bootstrap.servers` without an address before it calls this.
    pub(crate) async fn connect_first(
        mut candidates: Vec<Candidate<'_>>,
        list: &str,
        config: &ConnectionConfig,
    ) -> Result<Self, ClientError> {
        candidates.sort_by_key(|candidate| config.dialer.failed_last(candidate.addr));
        if let [candidate] = candidates.as_slice() {
            return Self::connect(candidate.addr, config).await;
        }
        let mut failures = Vec::with_capacity(candidates.len());
        let mut kind = None;
        let mut learned_tries = 0;
        for Candidate { addr, chosen } in candidates {
            if !chosen {
                if learned_tries == MAX_LEARNED_TRIES {
                    continue;
                }
                learned_tries += 1;
            }
            match Self::connect(addr, config).await {
                Ok(connection) => return Ok(connection),
                Err(
                    error @ (ClientError::Connection(ConnectionError::Authentication { .. })
                    | ClientError::Config { .. }),
                ) if chosen => return Err(error),
                Err(error) => {
                    debug!(broker = addr, %error, "broker failed");
                    if let ClientError::Connection(ConnectionError::Io { source, .. }) = &error {
                        kind.get_or_insert(source.kind());
                    }
                    failures.push(format!("{addr}: {}", describe(&error)));
                }
            }
        }
        Err(ClientError::Connection(ConnectionError::Io {
            broker: list.to_owned(),
            source: io::Error::new(
                kind.unwrap_or(io::ErrorKind::Other),
                format!("no broker answered: {}", failures.join("; ")),
            ),
        }))
    }

    /// Spawns the reader and writer tasks of a connected socket.
    fn start(
        addr: &str,
        read: Reader,
        write: Writer,
        config: &ConnectionConfig,
        hints: Hints,
    ) -> Self {
        let shared = Arc::new(Shared {
            broker: addr.to_owned(),
            state: Mutex::new(State {
                next_correlation_id: 1,
                waiters: HashMap::new(),
                closed: None,
            }),
            closed: watch::Sender::new(false),
        });
        let (frames, queue) = mpsc::channel(WRITE_QUEUE_FRAMES);
        let reader = tokio::spawn(read_loop(
            Arc::clone(&shared),
            read,
            ReadLimits {
                max_frame_bytes: config.max_frame_bytes,
                pool: FramePool::new(),
            },
            hints,
        ));
        let writer = tokio::spawn(write_loop(Arc::clone(&shared), write, queue, hints));
        Self {
            inner: Arc::new(Inner {
                shared,
                frames,
                client_id: StrBytes::from_string(config.client_id.to_string()),
                request_timeout: config.request_timeout,
                versions: OnceLock::new(),
                tasks: [reader.abort_handle(), writer.abort_handle()],
                reauth: Reauth {
                    settings: config.security.sasl.clone(),
                    timeout: config.connect_timeout,
                    due: Mutex::new(None),
                    gate: Arc::new(tokio::sync::RwLock::new(())),
                    dialer: Arc::clone(&config.dialer),
                },
            }),
        }
    }

    /// Asks the broker for its API versions (v3, else v0) and keeps them.
    async fn handshake(&self, timeout: Duration) -> Result<(), ClientError> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str(CLIENT_SOFTWARE_NAME))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let key = ApiKey::ApiVersions;
        let body = self.encode(key, API_VERSIONS_FIRST, &request)?;
        let frame = self
            .exchange(key, API_VERSIONS_FIRST, body, timeout)
            .await?;
        // ApiVersions responses always have header v0. A broker without v3 answers in v0 with
        // UNSUPPORTED_VERSION, which a v3 decoder would misread: peek at the error code first.
        let body = self.strip_header(key, API_VERSIONS_FIRST, 0, frame)?;
        let response: ApiVersionsResponse = if body.starts_with(&UNSUPPORTED_VERSION.to_be_bytes())
        {
            debug!(
                broker = self.broker(),
                "ApiVersions v3 unsupported, falling back to v0"
            );
            self.request_with_timeout(key, 0, &ApiVersionsRequest::default(), timeout)
                .await?
        } else {
            self.decode_body(key, API_VERSIONS_FIRST, body)?
        };
        if let Some(error) = broker_error(api_name(key), response.error_code, None) {
            return Err(error);
        }
        let versions = BrokerVersions {
            apis: response
                .api_keys
                .iter()
                .map(|a| (a.api_key, (a.min_version, a.max_version)))
                .collect(),
            finalized_features: response
                .finalized_features
                .iter()
                .map(|f| (f.name.as_str().to_owned(), f.max_version_level))
                .collect(),
        };
        // Set once, by the only handshake of this connection.
        let _ = self.inner.versions.set(versions);
        Ok(())
    }

    /// Authenticates with SASL (after the ApiVersions handshake, before anything else):
    /// SaslHandshake v1, then SaslAuthenticate requests until the mechanism is done, all
    /// within `timeout`. Returns the session lifetime the broker gave (KIP-368), if any.
    ///
    /// The requests go through the ordinary request path, whose logs name the API and sizes
    /// only: neither the credentials nor the broker's challenges are ever logged.
    async fn authenticate(
        &self,
        settings: &SaslSettings,
        timeout: Duration,
    ) -> Result<Option<Duration>, ClientError> {
        match tokio::time::timeout(timeout, self.sasl_exchange(settings, timeout)).await {
            Ok(result) => result,
            Err(_) => Err(ClientError::Timeout(timeout)),
        }
    }

    /// Sets when to authenticate again for a session of `lifetime`: as Java does, at a random
    /// 85 to 95 % of it, but at least a second before it ends (a request queued behind a
    /// long-polling fetch reaches the broker later than it was sent) and no sooner than a
    /// second from now (brokers refuse faster re-authentication).
    fn schedule_reauth(&self, lifetime: Option<Duration>) {
        let Some(lifetime) = lifetime else {
            return;
        };
        let mut random = [0u8; 4];
        let rng = ring::rand::SystemRandom::new();
        let unit = match ring::rand::SecureRandom::fill(&rng, &mut random) {
            Ok(()) => f64::from(u32::from_be_bytes(random)) / f64::from(u32::MAX),
            Err(_) => 0.5,
        };
        let mut after = lifetime.mul_f64(0.85 + 0.10 * unit);
        if let Some(latest) = lifetime.checked_sub(Duration::from_secs(1)) {
            after = after.min(latest);
        }
        let after = after.max(Duration::from_secs(1));
        debug!(
            broker = self.broker(),
            ?lifetime,
            ?after,
            "re-authentication scheduled"
        );
        let at = crate::time::deadline_after(tokio::time::Instant::now(), after);
        *self
            .inner
            .reauth
            .due
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(at);
    }

    /// Starts the re-authentication when it is due, and returns once its exchange holds the
    /// gate (so the caller's request waits for it).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the exchange runs in a task of its own, which a dropped caller does not
    /// stop.
    async fn reauthenticate_if_due(&self) {
        let reauth = &self.inner.reauth;
        let Some(settings) = &reauth.settings else {
            return;
        };
        {
            let mut due = reauth.due.lock().unwrap_or_else(PoisonError::into_inner);
            match *due {
                Some(at) if tokio::time::Instant::now() >= at => *due = None,
                _ => return,
            }
        }
        let (locked, gate_held) = oneshot::channel();
        let connection = self.clone();
        let gate = Arc::clone(&reauth.gate);
        let settings = Arc::clone(settings);
        tokio::spawn(async move {
            let _exclusive = gate.write_owned().await;
            let _ = locked.send(());
            connection.reauthenticate(&settings).await;
        });
        let _ = gate_held.await;
    }

    /// One re-authentication; a failure closes the connection (the broker closes it too).
    async fn reauthenticate(&self, settings: &SaslSettings) {
        let shared = &self.inner.shared;
        match self.authenticate(settings, self.inner.reauth.timeout).await {
            Ok(lifetime) => {
                debug!(broker = self.broker(), "re-authenticated");
                self.schedule_reauth(lifetime);
            }
            Err(ClientError::Connection(ConnectionError::Authentication { reason, .. })) => {
                self.inner
                    .reauth
                    .dialer
                    .finish(self.broker(), Outcome::Refused, false);
                shared.close(CloseReason::Authentication(format!(
                    "re-authentication failed: {reason}"
                )));
            }
            Err(error) => shared.close(CloseReason::Io {
                kind: io::ErrorKind::Other,
                message: format!("re-authentication failed: {error}"),
            }),
        }
    }

    /// The SASL exchange of [`authenticate`](Self::authenticate), without its overall bound.
    async fn sasl_exchange(
        &self,
        settings: &SaslSettings,
        timeout: Duration,
    ) -> Result<Option<Duration>, ClientError> {
        let mechanism = settings.mechanism();
        let who = settings
            .username()
            .map(|user| format!(" as `{}`", user.escape_debug()))
            .unwrap_or_default();
        let refused = |reason: String| {
            ClientError::Connection(ConnectionError::Authentication {
                broker: self.broker().to_owned(),
                reason: format!("SASL {mechanism}{who}: {reason}"),
            })
        };
        match self.api_range(ApiKey::SaslHandshake) {
            Some((_, max)) if max >= 1 => {}
            _ => {
                return Err(refused(
                    "the broker does not offer SaslHandshake v1 (Kafka 1.0 or later is needed)"
                        .to_owned(),
                ));
            }
        }
        let request =
            SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism));
        let response: SaslHandshakeResponse = self
            .request_with_timeout(ApiKey::SaslHandshake, 1, &request, timeout)
            .await?;
        let offered = || {
            let names: Vec<String> = response
                .mechanisms
                .iter()
                .map(|m| m.as_str().escape_debug().to_string())
                .collect();
            names.join(", ")
        };
        match response.error_code {
            0 => {}
            UNSUPPORTED_SASL_MECHANISM => {
                return Err(refused(format!(
                    "the mechanism is not enabled on this listener, which offers [{}]; set \
                     sasl.mechanism to one of them",
                    offered()
                )));
            }
            ILLEGAL_SASL_STATE if response.mechanisms.is_empty() => {
                return Err(refused(
                    "this listener has no SASL enabled: use security.protocol=PLAINTEXT or SSL \
                     for it, or the address of a SASL listener"
                        .to_owned(),
                ));
            }
            code => {
                let error = broker_error(api_name(ApiKey::SaslHandshake), code, None);
                return Err(refused(format!(
                    "SaslHandshake failed: {}",
                    error.map_or_else(|| format!("error {code}"), |e| e.to_string())
                )));
            }
        }
        let version = match self.api_range(ApiKey::SaslAuthenticate) {
            Some((min, max)) if min <= 2 && max >= 0 => max.min(2),
            _ => {
                return Err(refused(
                    "the broker offers no SaslAuthenticate version this client speaks (v0-v2)"
                        .to_owned(),
                ));
            }
        };
        let (mut exchange, mut message) = sasl::start(settings).await.map_err(refused)?;
        for _ in 0..sasl::MAX_ROUNDS {
            let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(message));
            let response: SaslAuthenticateResponse = self
                .request_with_timeout(ApiKey::SaslAuthenticate, version, &request, timeout)
                .await?;
            if response.error_code != 0 {
                let said = response
                    .error_message
                    .as_ref()
                    .map(|m| m.as_str().trim())
                    .filter(|m| !m.is_empty())
                    .map(|m| {
                        m.chars()
                            .take(1024)
                            .collect::<String>()
                            .escape_debug()
                            .to_string()
                    })
                    .or_else(|| exchange.refusal().map(str::to_owned))
                    .unwrap_or_else(|| format!("error code {}", response.error_code));
                return Err(refused(format!("the broker refused: {said}")));
            }
            match exchange.next(&response.auth_bytes).map_err(refused)? {
                Some(next) => message = next,
                None => {
                    let lifetime = u64::try_from(response.session_lifetime_ms)
                        .ok()
                        .filter(|ms| *ms > 0)
                        .map(Duration::from_millis);
                    debug!(
                        broker = self.broker(),
                        mechanism,
                        session_lifetime_ms = response.session_lifetime_ms,
                        "authenticated"
                    );
                    return Ok(lifetime);
                }
            }
        }
        Err(refused(format!(
            "the exchange did not end within {} rounds",
            sasl::MAX_ROUNDS
        )))
    }

    /// The broker address this connection was made to.
    pub(crate) fn broker(&self) -> &str {
        &self.inner.shared.broker
    }

    /// The broker's (min, max) versions of `key`, or `None` if it does not offer the API.
    pub(crate) fn api_range(&self, key: ApiKey) -> Option<(i16, i16)> {
        self.inner.versions.get()?.apis.get(&(key as i16)).copied()
    }

    /// The max version level of a finalized cluster feature such as `share.version`, as
    /// reported by ApiVersions v3+; `None` when not reported.
    #[allow(dead_code, reason = "for the share consumer's share.version check")]
    pub(crate) fn finalized_feature(&self, name: &str) -> Option<i16> {
        self.inner
            .versions
            .get()?
            .finalized_features
            .get(name)
            .copied()
    }

    /// The highest version of `key` both the broker and `ours` support.
    ///
    /// Pass `<Request as Message>::VERSIONS` as `ours`, not `ApiKey::valid_versions()`, which
    /// includes versions kafka-protocol cannot encode. Without a common version the error is
    /// [`ProtocolError::Unsupported`], naming the API and both ranges.
    pub(crate) fn negotiate(&self, key: ApiKey, ours: VersionRange) -> Result<i16, ClientError> {
        let unsupported = |theirs: &str| {
            ClientError::Protocol(ProtocolError::Unsupported {
                broker: self.broker().to_owned(),
                api: api_name(key),
                wanted: format!("v{}-v{} (the broker offers {theirs})", ours.min, ours.max),
            })
        };
        let Some((min, max)) = self.api_range(key) else {
            return Err(unsupported("none"));
        };
        let common = ours.intersect(&VersionRange { min, max });
        if common.is_empty() {
            return Err(unsupported(&format!("v{min}-v{max}")));
        }
        Ok(common.max)
    }

    /// Sends `req` as version `version` of `key` and decodes the response, within
    /// [`ConnectionConfig::request_timeout`]. See [`Self::request_with_timeout`].
    pub(crate) fn request<'c, Req, Resp>(
        &'c self,
        key: ApiKey,
        version: i16,
        req: &Req,
    ) -> impl Future<Output = Result<Resp, ClientError>> + Send + use<'c, Req, Resp>
    where
        Req: Encodable,
        Resp: Decodable + HeaderVersion,
    {
        self.request_with_timeout(key, version, req, self.inner.request_timeout)
    }

    /// Sends `req` as version `version` of `key` and decodes the response, within `timeout`.
    ///
    /// `req` is encoded when this is called, so the returned future does not borrow it.
    /// Errors: [`ClientError::Timeout`] (the connection stays open for the requests under
    /// way, but is not [reusable](Self::is_reusable) until the late answer arrives),
    /// [`ClientError::Protocol`] when the request cannot be encoded (the connection stays
    /// usable), [`ProtocolError::Garbled`] when its response, or the bytes read before it,
    /// cannot be decoded (the connection is closed), [`ClientError::Connection`] when the
    /// connection is or becomes closed. Broker error codes inside the response are the
    /// caller's to check.
    pub(crate) fn request_with_timeout<'c, Req, Resp>(
        &'c self,
        key: ApiKey,
        version: i16,
        req: &Req,
        timeout: Duration,
    ) -> impl Future<Output = Result<Resp, ClientError>> + Send + use<'c, Req, Resp>
    where
        Req: Encodable,
        Resp: Decodable + HeaderVersion,
    {
        let body = self.encode(key, version, req);
        async move {
            let frame = self.exchange(key, version, body?, timeout).await?;
            let body = self.strip_header(key, version, Resp::header_version(version), frame)?;
            self.decode_body(key, version, body)
        }
    }

    /// Closes the connection now, for every handle: the socket is shut and every waiting and
    /// later request fails at once. For a client that is closing, so that no connection
    /// outlives its `close` (the broker keeps a share session alive while its connection is
    /// open).
    pub(crate) fn close(&self) {
        self.inner.shared.close(CloseReason::Dropped);
        for task in &self.inner.tasks {
            task.abort();
        }
    }

    /// Closes the connection because the answer to a request of `key` was still outstanding
    /// after `waited` ([`Queued::response_within`]): every waiting request fails at once with
    /// a [`ClientError::Connection`] that says so.
    fn close_overdue(&self, key: ApiKey, waited: Duration) {
        self.inner.shared.close(CloseReason::Io {
            kind: io::ErrorKind::TimedOut,
            message: format!(
                "no answer to a {} request within {waited:?}; the requests under way on this \
                 connection failed with it, to be sent again on a new connection",
                api_name(key)
            ),
        });
        for task in &self.inner.tasks {
            task.abort();
        }
    }

    /// True once the connection is closed; every later request fails at once.
    pub(crate) fn is_closed(&self) -> bool {
        self.inner.shared.lock().closed.is_some()
    }

    /// True while the connection is open and no answer on it is overdue: what a pool, the
    /// cluster-wide connection and a client's coordinator hand to a new request.
    ///
    /// An answer is overdue once its request's timeout has passed (requests of
    /// [`request`](Self::request) and [`request_with_timeout`](Self::request_with_timeout),
    /// whether they timed out or their future was dropped). It may never come, and the broker
    /// answers in order, so a new request would wait behind it until it timed out too; Java's
    /// clients close such a connection. This one stays open for the requests already under
    /// way on it, is reusable again if the late answer arrives after all, and closes when the
    /// last handle is dropped.
    pub(crate) fn is_reusable(&self) -> bool {
        let state = self.inner.shared.lock();
        if state.closed.is_some() {
            return false;
        }
        let mut dues = state.waiters.values().filter_map(|w| w.due).peekable();
        if dues.peek().is_none() {
            return true;
        }
        let now = tokio::time::Instant::now();
        dues.all(|due| due > now)
    }

    /// Closes the connection because a response of `key` could not be decoded, and returns
    /// the [`ProtocolError::Garbled`] for its request (the other waiting requests get theirs
    /// from the close).
    fn garbled(&self, key: ApiKey, reason: String) -> ClientError {
        self.inner
            .shared
            .close(CloseReason::Garbled(reason.clone()));
        ClientError::Protocol(ProtocolError::Garbled {
            broker: self.broker().to_owned(),
            api: api_name(key),
            source: reason.into(),
        })
    }

    /// A [`ClientError::Protocol`] about this broker.
    fn protocol_error(&self, reason: String) -> ClientError {
        ClientError::Protocol(ProtocolError::Malformed {
            broker: self.broker().to_owned(),
            reason,
        })
    }

    /// Encodes a request body.
    fn encode<Req: Encodable>(
        &self,
        key: ApiKey,
        version: i16,
        req: &Req,
    ) -> Result<Bytes, ClientError> {
        // Sized once, not grown by doubling and copying.
        // (A hint only: capped, and encode still grows the buffer if it was wrong.)
        let size = req.compute_size(version).unwrap_or(0).min(64 << 20);
        let mut body = BytesMut::with_capacity(size);
        req.encode(&mut body, version).map_err(|error| {
            self.protocol_error(format!(
                "cannot encode a {} v{version} request: {error:#}",
                api_name(key)
            ))
        })?;
        Ok(body.freeze())
    }

    /// Sends an encoded request and waits for its raw response frame, within `timeout`.
    async fn exchange(
        &self,
        key: ApiKey,
        version: i16,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, ClientError> {
        let span = tracing::debug_span!(
            "kafka_request",
            broker = %self.broker(),
            api = api_name(key),
            version,
            correlation_id = tracing::field::Empty,
        );
        async {
            // `None` (no timeout) when the clock cannot count that far.
            let due = tokio::time::Instant::now().checked_add(timeout);
            match tokio::time::timeout(timeout, self.send_and_wait(key, version, body, due)).await {
                Ok(result) => result,
                Err(_) => {
                    debug!(?timeout, "request timed out");
                    Err(ClientError::Timeout(timeout))
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Queues the request frame and waits for the response frame.
    async fn send_and_wait(
        &self,
        key: ApiKey,
        version: i16,
        body: Bytes,
        due: Option<tokio::time::Instant>,
    ) -> Result<Bytes, ClientError> {
        let response = self.enqueue(key, version, body.into(), due).await?;
        let frame = response
            .await
            .map_err(|_| self.inner.shared.closed_error())??;
        debug!(bytes = frame.len(), "response received");
        Ok(frame)
    }

    /// Queues a request of `key` at `version` whose body is encoded (a Produce request: its
    /// record batches as chunks), and returns once its frame is in the writer's queue, with
    /// a [`Queued`] to await its response.
    ///
    /// Frames are written in the order they are queued and a broker answers one
    /// connection's requests in that order. Several [`request`](Self::request) futures
    /// give no such order: each queues its frame when it is first polled *and* nothing
    /// makes it wait (a full queue, a re-authentication, tokio's cooperative budget), so a
    /// later future can overtake an earlier one. A caller whose requests must reach the
    /// broker in order (a producer pipelining batches of one partition) awaits this for
    /// each request in turn, and the responses afterwards.
    ///
    /// No timeout applies: bound both steps with the caller's own.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before it returns, the request was either queued whole (its
    /// answer is discarded) or not at all.
    pub(crate) async fn queue<Resp>(
        &self,
        key: ApiKey,
        version: i16,
        body: Body,
    ) -> Result<Queued<Resp>, ClientError>
    where
        Resp: Decodable + HeaderVersion,
    {
        let response = self.enqueue(key, version, body, None).await?;
        Ok(Queued {
            connection: self.clone(),
            key,
            version,
            response,
            decoded: PhantomData,
        })
    }

    /// Queues the request frame; where its response frame will arrive. `due`: when its answer
    /// is overdue (see [`Self::is_reusable`]).
    async fn enqueue(
        &self,
        key: ApiKey,
        version: i16,
        body: Body,
        due: Option<tokio::time::Instant>,
    ) -> Result<oneshot::Receiver<Result<Bytes, ClientError>>, ClientError> {
        let shared = &self.inner.shared;
        if self.is_closed() {
            return Err(shared.closed_error());
        }
        // The SASL requests are the re-authentication's own; every other request waits while
        // one runs (see `Reauth`).
        let gate = if matches!(key, ApiKey::SaslHandshake | ApiKey::SaslAuthenticate) {
            None
        } else {
            self.reauthenticate_if_due().await;
            Some(self.inner.reauth.gate.read().await)
        };
        if self.is_closed() {
            return Err(shared.closed_error());
        }
        // Cancel safety: no `.await` between registering and queueing the frame.
        let permit = self
            .inner
            .frames
            .reserve()
            .await
            .map_err(|_| shared.closed_error())?;
        let (correlation_id, response) = shared.register(key, due)?;
        tracing::Span::current().record("correlation_id", correlation_id);
        let head = match self.head(key, version, correlation_id, body.len()) {
            Ok(head) => head,
            Err(error) => {
                shared.unregister(correlation_id);
                return Err(error);
            }
        };
        let bytes = head.len() + body.len();
        permit.send(Frame { head, body });
        drop(gate);
        debug!(bytes, "request queued");
        Ok(response)
    }

    /// The length prefix and request header of a frame.
    fn head(
        &self,
        key: ApiKey,
        version: i16,
        correlation_id: i32,
        body_len: usize,
    ) -> Result<Bytes, ClientError> {
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(self.inner.client_id.clone()));
        let mut head = BytesMut::with_capacity(64);
        head.put_i32(0);
        encode_request_header_into_buffer(&mut head, &header).map_err(|error| {
            self.protocol_error(format!(
                "cannot encode a {} v{version} request header: {error:#}",
                api_name(key)
            ))
        })?;
        let len = i32::try_from(head.len() - 4 + body_len).map_err(|_| {
            self.protocol_error(format!(
                "the {} request of {body_len} bytes is too large for a frame",
                api_name(key)
            ))
        })?;
        head[..4].copy_from_slice(&len.to_be_bytes());
        Ok(head.freeze())
    }

    /// Decodes the response header of a frame; the body that follows it. A header that
    /// cannot be decoded closes the connection.
    fn strip_header(
        &self,
        key: ApiKey,
        version: i16,
        header_version: i16,
        mut frame: Bytes,
    ) -> Result<Bytes, ClientError> {
        ResponseHeader::decode(&mut frame, header_version).map_err(|error| {
            self.garbled(
                key,
                format!(
                    "cannot decode the {} v{version} response header: {error:#}",
                    api_name(key)
                ),
            )
        })?;
        Ok(frame)
    }

    /// Decodes a response body. A body that cannot be decoded closes the connection.
    fn decode_body<Resp: Decodable>(
        &self,
        key: ApiKey,
        version: i16,
        mut body: Bytes,
    ) -> Result<Resp, ClientError> {
        let response = Resp::decode(&mut body, version).map_err(|error| {
            self.garbled(
                key,
                format!(
                    "cannot decode the {} v{version} response: {error:#}",
                    api_name(key)
                ),
            )
        })?;
        if !body.is_empty() {
            debug!(
                trailing_bytes = body.len(),
                "ignoring bytes after the response body"
            );
        }
        Ok(response)
    }
}

/// The error of a failed TLS handshake: an authentication failure when a certificate was
/// refused (on either side), a connection error otherwise, with a hint when the broker
/// hung up (a listener that is not TLS does).
fn tls_error(addr: &str, error: &io::Error, client_cert: bool) -> ClientError {
    if let Some(reason) = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
        .and_then(|e| tls::authentication_failure(e, client_cert))
    {
        return ClientError::Connection(ConnectionError::Authentication {
            broker: addr.to_owned(),
            reason: format!("TLS: {reason}"),
        });
    }
    let message = if error.kind() == io::ErrorKind::UnexpectedEof {
        "the broker closed the connection during the TLS handshake: the listener may not be \
         TLS (security.protocol=SSL and SASL_SSL need a TLS listener; use PLAINTEXT or \
         SASL_PLAINTEXT for the others)"
            .to_owned()
    } else {
        format!("the TLS handshake failed: {error}")
    };
    ClientError::Connection(ConnectionError::Io {
        broker: addr.to_owned(),
        source: io::Error::new(error.kind(), message),
    })
}

/// A connect error with its I/O source, for the list of bootstrap failures.
fn describe(error: &ClientError) -> String {
    match error {
        ClientError::Connection(ConnectionError::Io { source, .. }) => source.to_string(),
        other => other.to_string(),
    }
}

/// What the reader task needs to explain a failure.
#[derive(Clone, Copy, Debug)]
struct Hints {
    /// The connection authenticates with SASL.
    sasl: bool,
    /// A TLS client certificate is presented.
    client_cert: bool,
}

/// True when a "frame length" is the start of a TLS record (content type 20 to 24, version
/// 3.x): the broker speaks TLS to a client that does not.
fn looks_like_tls(len: i32) -> bool {
    let [content_type, major, minor, _] = len.to_be_bytes();
    (0x14..=0x18).contains(&content_type) && major == 3 && minor <= 4
}

/// How the reader task reads frames.
struct ReadLimits {
    /// The longest frame accepted.
    max_frame_bytes: usize,
    /// Where the buffers of large frames come from.
    pool: Arc<FramePool>,
}

/// The reader task: delivers response frames until the connection closes.
async fn read_loop(shared: Arc<Shared>, read: Reader, limits: ReadLimits, hints: Hints) {
    let mut closed = shared.closed.subscribe();
    let reason = tokio::select! {
        reason = read_frames(&shared, read, limits, hints) => reason,
        _ = closed.wait_for(|closed| *closed) => return,
    };
    shared.close(reason);
}

/// Reads and delivers response frames; why it stopped.
async fn read_frames(
    shared: &Shared,
    read: Reader,
    limits: ReadLimits,
    hints: Hints,
) -> CloseReason {
    let ReadLimits {
        max_frame_bytes,
        pool,
    } = limits;
    let mut read = BufReader::new(read);
    let mut frames_read: u64 = 0;
    loop {
        let len = match read.read_i32().await {
            Ok(len) => len,
            Err(error) => {
                return CloseReason::read_error(
                    "waiting for a response",
                    &error,
                    &hints,
                    frames_read,
                );
            }
        };
        if looks_like_tls(len) && usize::try_from(len).is_ok_and(|l| l > max_frame_bytes) {
            return CloseReason::Misconfigured(
                "the broker answered with TLS: its listener expects TLS; set \
                 security.protocol=SSL (or SASL_SSL) and the ssl.* settings"
                    .to_owned(),
            );
        }
        let Ok(len) = usize::try_from(len) else {
            return CloseReason::Garbled(format!(
                "the broker sent a negative frame length ({len})"
            ));
        };
        if len > max_frame_bytes {
            return CloseReason::Garbled(format!(
                "the broker sent a frame of {len} bytes, over the limit of {max_frame_bytes} bytes"
            ));
        }
        if len < 4 {
            return CloseReason::Garbled(format!(
                "the broker sent a frame of {len} bytes, too short for a correlation id"
            ));
        }
        // A large frame (a ShareFetch answer) reuses the buffer of one whose records are all
        // gone: allocated and freed each time, such buffers cost the allocator far more
        // resident memory than they hold. Room is made as the bytes arrive, not for the length
        // announced.
        let mut frame = pool.buffer(len);
        if let Err(error) = frame.read_from(&mut read, len).await {
            return CloseReason::read_error("reading a response", &error, &hints, frames_read);
        }
        frames_read += 1;
        let frame = frame.freeze();
        let correlation_id = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
        let Some(waiter) = shared.take(correlation_id) else {
            return CloseReason::Garbled(format!(
                "the broker sent a response with correlation id {correlation_id}, which no request is waiting for"
            ));
        };
        if waiter.reply.send(Ok(frame)).is_err() {
            debug!(
                broker = %shared.broker,
                api = api_name(waiter.api),
                correlation_id,
                "discarded the late response of a request that timed out or was dropped"
            );
        }
    }
}

/// The writer task: writes queued frames until the connection closes or every handle is gone.
async fn write_loop(
    shared: Arc<Shared>,
    write: Writer,
    mut queue: mpsc::Receiver<Frame>,
    hints: Hints,
) {
    let mut closed = shared.closed.subscribe();
    let result = tokio::select! {
        result = write_frames(write, &mut queue) => result,
        _ = closed.wait_for(|closed| *closed) => return,
    };
    if let Err(error) = result {
        // A TLS 1.3 broker refuses a client certificate after the handshake: its alert can
        // meet the first write as well as the first read, and means the same.
        shared.close(CloseReason::write_error(
            "writing a request",
            &error,
            &hints,
        ));
    }
}

/// Writes queued frames, flushing when the queue is empty; `Ok` when every handle is gone.
async fn write_frames(write: Writer, queue: &mut mpsc::Receiver<Frame>) -> io::Result<()> {
    let mut write = BufWriter::new(write);
    while let Some(frame) = queue.recv().await {
        // Head and body in one vectored write (a large frame goes past the buffer).
        write
            .write_all_buf(&mut FrameBuf::new(frame.head, frame.body))
            .await?;
        while let Ok(frame) = queue.try_recv() {
            write
                .write_all_buf(&mut FrameBuf::new(frame.head, frame.body))
                .await?;
        }
        write.flush().await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use futures::FutureExt;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse, TopicName};
    use kafka_protocol::protocol::{Message, decode_request_header_from_buffer};
    use tokio::net::TcpListener;
    use tokio::task::JoinHandle;

    use super::*;
    use crate::kafka::net::addresses::Addresses;

    /// A request as the fake broker sees it.
    #[derive(Debug)]
    struct Received {
        header: RequestHeader,
        body: Bytes,
    }

    /// Reads one request frame; `None` on EOF.
    async fn read_request(stream: &mut TcpStream) -> Option<Received> {
        let len = match stream.read_i32().await {
            Ok(len) => len,
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return None,
            Err(error) => panic!("fake broker read failed: {error}"),
        };
        let mut frame = vec![0; usize::try_from(len).expect("length")];
        stream.read_exact(&mut frame).await.expect("request frame");
        let mut frame = Bytes::from(frame);
        let header = decode_request_header_from_buffer(&mut frame).expect("request header");
        Some(Received {
            header,
            body: frame,
        })
    }

    /// A response frame: length, header (with the response's header version), body.
    fn response_frame<R: Encodable + HeaderVersion>(
        correlation_id: i32,
        version: i16,
        response: &R,
    ) -> Vec<u8> {
        let mut body = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(correlation_id)
            .encode(&mut body, R::header_version(version))
            .expect("response header");
        response.encode(&mut body, version).expect("response body");
        let mut frame = i32::try_from(body.len())
            .expect("length")
            .to_be_bytes()
            .to_vec();
        frame.extend_from_slice(&body);
        frame
    }

    /// The fake broker's API versions: ApiVersions 0-4 and Metadata 0-13.
    fn api_versions() -> ApiVersionsResponse {
        ApiVersionsResponse::default().with_api_keys(vec![
            ApiVersion::default()
                .with_api_key(ApiKey::ApiVersions as i16)
                .with_min_version(0)
                .with_max_version(4),
            ApiVersion::default()
                .with_api_key(ApiKey::Metadata as i16)
                .with_min_version(0)
                .with_max_version(13),
        ])
    }

    /// Answers the ApiVersions handshake.
    async fn answer_handshake(stream: &mut TcpStream) {
        let request = read_request(stream).await.expect("ApiVersions request");
        assert_eq!(request.header.request_api_key, ApiKey::ApiVersions as i16);
        let version = request.header.request_api_version;
        let frame = response_frame(request.header.correlation_id, version, &api_versions());
        stream.write_all(&frame).await.expect("write");
    }

    /// A fake broker on 127.0.0.1 for one connection: the handshake, then `script`.
    async fn fake_broker<F, Fut>(script: F) -> (String, JoinHandle<()>)
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        fake_broker_raw(|mut stream| async move {
            answer_handshake(&mut stream).await;
            script(stream).await;
        })
        .await
    }

    /// A fake broker on 127.0.0.1 for one connection, without the handshake.
    async fn fake_broker_raw<F, Fut>(script: F) -> (String, JoinHandle<()>)
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let task = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.expect("accept");
            script(stream).await;
        });
        (addr, task)
    }

    /// The Metadata answer of the fake broker: one topic per requested name.
    fn echo_metadata(request: &Received) -> Vec<u8> {
        let version = request.header.request_api_version;
        let decoded =
            MetadataRequest::decode(&mut request.body.clone(), version).expect("Metadata request");
        let topics = decoded
            .topics
            .unwrap_or_default()
            .into_iter()
            .map(|t| MetadataResponseTopic::default().with_name(t.name))
            .collect();
        response_frame(
            request.header.correlation_id,
            version,
            &MetadataResponse::default().with_topics(topics),
        )
    }

    /// A Metadata v12 request for one topic.
    fn metadata(
        connection: &Connection,
        topic: &str,
    ) -> impl Future<Output = Result<MetadataResponse, ClientError>> + Send + 'static {
        let request = MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
                TopicName(StrBytes::from_string(topic.to_owned())),
            ))]));
        let connection = connection.clone();
        async move { connection.request(ApiKey::Metadata, 12, &request).await }
    }

    /// The single topic name of a Metadata response.
    fn topic_of(response: &MetadataResponse) -> String {
        let [topic] = response.topics.as_slice() else {
            panic!("one topic expected")
        };
        topic.name.as_ref().expect("name").0.to_string()
    }

    /// A loopback port nothing listens on.
    async fn closed_port() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        listener.local_addr().expect("addr").to_string()
    }

    async fn connect(addr: &str) -> Connection {
        Connection::connect(addr, &ConnectionConfig::default())
            .await
            .expect("connect")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pipelined_requests_are_answered_in_order() {
        let (addr, broker) = fake_broker(|mut stream| async move {
            // All three arrive before any is answered: they are pipelined.
            let mut requests = Vec::new();
            for _ in 0..3 {
                requests.push(read_request(&mut stream).await.expect("request"));
            }
            let mut ids: Vec<i32> = requests.iter().map(|r| r.header.correlation_id).collect();
            ids.dedup();
            assert_eq!(ids.len(), 3, "distinct correlation ids");
            for request in &requests {
                assert_eq!(
                    request.header.client_id.as_deref(),
                    Some("kafka-share-sink")
                );
                stream
                    .write_all(&echo_metadata(request))
                    .await
                    .expect("write");
            }
            assert!(read_request(&mut stream).await.is_none());
        })
        .await;
        let connection = connect(&addr).await;
        let tasks: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|t| tokio::spawn(metadata(&connection, t)))
            .collect();
        for (task, topic) in tasks.into_iter().zip(["a", "b", "c"]) {
            let response = task.await.expect("task").expect("response");
            assert_eq!(topic_of(&response), topic);
        }
        assert!(!connection.is_closed());
        drop(connection);
        broker.await.expect("broker");
    }

    #[tokio::test]
    async fn oversize_frame_poisons() {
        let (addr, _broker) = fake_broker(|mut stream| async move {
            read_request(&mut stream).await.expect("request");
            stream
                .write_all(&4096_i32.to_be_bytes())
                .await
                .expect("write");
            let _ = read_request(&mut stream).await;
        })
        .await;
        let config = ConnectionConfig {
            max_frame_bytes: 1024,
            ..ConnectionConfig::default()
        };
        let connection = Connection::connect(&addr, &config).await.expect("connect");
        let error = metadata(&connection, "t")
            .await
            .expect_err("oversize frame");
        assert!(
            matches!(&error, ClientError::Protocol(ProtocolError::Garbled { api: "Metadata", source, .. }) if source.to_string().contains("4096") && source.to_string().contains("1024")),
            "{error:?}"
        );
        assert!(error.is_retriable());
        assert!(connection.is_closed());
        let error = metadata(&connection, "t").await.expect_err("closed");
        assert!(
            matches!(error, ClientError::Connection(ConnectionError::Io { .. })),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn negative_frame_poisons() {
        let (addr, _broker) = fake_broker(|mut stream| async move {
            read_request(&mut stream).await.expect("request");
            stream
                .write_all(&(-5_i32).to_be_bytes())
                .await
                .expect("write");
            let _ = read_request(&mut stream).await;
        })
        .await;
        let connection = connect(&addr).await;
        let error = metadata(&connection, "t")
            .await
            .expect_err("negative frame");
        assert!(
            matches!(&error, ClientError::Protocol(ProtocolError::Garbled { source, .. }) if source.to_string().contains("negative")),
            "{error:?}"
        );
        assert!(connection.is_closed());
    }

    #[tokio::test]
    async fn unknown_correlation_id_poisons() {
        let (addr, _broker) = fake_broker(|mut stream| async move {
            let request = read_request(&mut stream).await.expect("request");
            let frame = response_frame(
                request.header.correlation_id + 1000,
                12,
                &MetadataResponse::default(),
            );
            stream.write_all(&frame).await.expect("write");
            let _ = read_request(&mut stream).await;
        })
        .await;
        let connection = connect(&addr).await;
        let error = metadata(&connection, "t").await.expect_err("unknown id");
        assert!(
            matches!(&error, ClientError::Protocol(ProtocolError::Garbled { source, .. }) if source.to_string().contains("no request is waiting")),
            "{error:?}"
        );
        assert!(connection.is_closed());
    }

    #[tokio::test]
    async fn eof_gives_connection_errors() {
        let (addr, _broker) = fake_broker(|mut stream| async move {
            read_request(&mut stream).await.expect("request");
            read_request(&mut stream).await.expect("request");
            drop(stream);
        })
        .await;
        let connection = connect(&addr).await;
        let (a, b) = tokio::join!(metadata(&connection, "a"), metadata(&connection, "b"));
        for result in [a, b] {
            let error = result.expect_err("EOF");
            assert!(
                matches!(&error, ClientError::Connection(ConnectionError::Io { .. })),
                "{error:?}"
            );
            assert!(error.is_retriable());
        }
        assert!(connection.is_closed());
        let error = metadata(&connection, "c").await.expect_err("closed");
        assert!(
            matches!(error, ClientError::Connection(ConnectionError::Io { .. })),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn a_timeout_leaves_the_connection_open_but_not_reusable_until_the_late_answer() {
        let (addr, broker) = fake_broker(|mut stream| async move {
            let first = read_request(&mut stream).await.expect("request");
            let second = read_request(&mut stream).await.expect("request");
            // The first answer comes after the first request timed out: it is discarded.
            stream
                .write_all(&echo_metadata(&first))
                .await
                .expect("write");
            stream
                .write_all(&echo_metadata(&second))
                .await
                .expect("write");
            assert!(read_request(&mut stream).await.is_none());
        })
        .await;
        let connection = connect(&addr).await;
        let request = MetadataRequest::default();
        let timeout = Duration::from_millis(50);
        let error = connection
            .request_with_timeout::<_, MetadataResponse>(ApiKey::Metadata, 12, &request, timeout)
            .await
            .expect_err("timeout");
        assert!(
            matches!(error, ClientError::Timeout(t) if t == timeout),
            "{error:?}"
        );
        assert!(!connection.is_closed());
        assert!(
            !connection.is_reusable(),
            "a timed-out connection is handed out again"
        );
        // A request sent anyway still gets its answer, after the late one; with the late
        // answer in, the connection is reusable again.
        let response = metadata(&connection, "after").await.expect("response");
        assert_eq!(topic_of(&response), "after");
        assert!(!connection.is_closed());
        assert!(connection.is_reusable());
        drop(connection);
        broker.await.expect("broker");
    }

    /// A fake broker on 127.0.0.1 whose first connection never answers a request and whose
    /// later connections answer Metadata; the number of connections made is in the counter.
    async fn broker_silent_on_its_first_connection() -> (String, Arc<Mutex<usize>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let accepted = Arc::new(Mutex::new(0_usize));
        let counter = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let first = {
                    let mut count = counter.lock().expect("counter");
                    *count += 1;
                    *count == 1
                };
                tokio::spawn(async move {
                    answer_handshake(&mut stream).await;
                    while let Some(request) = read_request(&mut stream).await {
                        if !first {
                            stream
                                .write_all(&echo_metadata(&request))
                                .await
                                .expect("write");
                        }
                    }
                });
            }
        });
        (addr, accepted)
    }

    /// A request dropped by its caller's own, shorter deadline: its answer is overdue once the
    /// connection's request timeout has passed, and the connection is not handed out then.
    #[tokio::test]
    async fn an_abandoned_request_makes_the_connection_unreusable_once_its_answer_is_overdue() {
        let (addr, _accepted) = broker_silent_on_its_first_connection().await;
        let config = ConnectionConfig {
            request_timeout: Duration::from_secs(1),
            ..ConnectionConfig::default()
        };
        let connection = Connection::connect(&addr, &config).await.expect("connect");
        let cut = tokio::time::timeout(
            Duration::from_millis(20),
            metadata(&connection, "abandoned"),
        )
        .await;
        assert!(cut.is_err(), "the silent broker answered");
        assert!(connection.is_reusable(), "not overdue yet");
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert!(
            !connection.is_reusable(),
            "an overdue answer is outstanding"
        );
        assert!(!connection.is_closed());
    }

    #[tokio::test]
    async fn the_cluster_wide_connection_and_the_pools_leave_a_timed_out_connection_behind() {
        use crate::kafka::cluster::pool::BrokerPool;
        use crate::kafka::net::bootstrap::Bootstrap;
        use std::collections::BTreeMap;

        let config = ConnectionConfig {
            request_timeout: Duration::from_millis(100),
            ..ConnectionConfig::default()
        };
        let (addr, accepted) = broker_silent_on_its_first_connection().await;
        let bootstrap = Bootstrap::connect(&addr, config.clone())
            .await
            .expect("connect");
        let silent = bootstrap.get().await.expect("connection");
        let error = metadata(&silent, "lost").await.expect_err("no answer");
        assert!(matches!(error, ClientError::Timeout(_)), "{error:?}");
        // The next caller gets a new connection, which answers; the silent one stays open
        // for whoever still holds it.
        let fresh = bootstrap.get().await.expect("connection");
        let response = metadata(&fresh, "after").await.expect("answer");
        assert_eq!(topic_of(&response), "after");
        assert_eq!(*accepted.lock().expect("counter"), 2);
        assert!(!silent.is_closed());
        assert!(bootstrap.get().await.expect("connection").is_reusable());
        assert_eq!(
            *accepted.lock().expect("counter"),
            2,
            "a reusable one is kept"
        );

        let (addr, accepted) = broker_silent_on_its_first_connection().await;
        let pool = BrokerPool::new(config);
        pool.learn(&BTreeMap::from([(1, addr)]));
        let silent = pool.open(1).await.expect("connection");
        let error = metadata(&silent, "lost").await.expect_err("no answer");
        assert!(matches!(error, ClientError::Timeout(_)), "{error:?}");
        assert!(
            pool.cached(1).is_none(),
            "a timed-out connection is handed out"
        );
        let fresh = pool.open(1).await.expect("connection");
        let response = metadata(&fresh, "after").await.expect("answer");
        assert_eq!(topic_of(&response), "after");
        assert_eq!(*accepted.lock().expect("counter"), 2);
        assert!(pool.cached(1).is_some());
    }

    #[tokio::test]
    async fn the_pool_gives_up_a_connection_the_broker_closed_and_keeps_the_others() {
        use crate::kafka::cluster::pool::BrokerPool;
        use std::collections::{BTreeMap, BTreeSet};

        let addr = broker_for_every_connection_closing_on(Some(1)).await;
        let pool = BrokerPool::new(ConnectionConfig::default());
        pool.learn(&BTreeMap::from([(1, addr.clone()), (2, addr)]));
        let one = pool.open(1).await.expect("connection to 1");
        pool.open(2).await.expect("connection to 2");
        assert_eq!(pool.nodes(), BTreeSet::from([1, 2]));
        assert!(pool.take_closed().is_empty(), "both are open");

        metadata(&one, "t").await.expect_err("the broker closed it");
        assert!(one.is_closed());
        assert_eq!(pool.take_closed(), [1]);
        assert!(!pool.holds(1) && pool.get(1).is_none(), "1 is given up");
        assert!(pool.holds(2) && pool.get(2).is_some_and(|c| !c.is_closed()));
        assert!(pool.forget(2).is_some());
        assert!(pool.nodes().is_empty() && pool.drain().is_empty());
    }

    /// A fake broker that takes any number of connections, each answering the handshake.
    async fn broker_for_every_connection() -> String {
        broker_for_every_connection_closing_on(None).await
    }

    /// As [`broker_for_every_connection`], each connection closed by the broker when its
    /// `n`-th request after the handshake arrives.
    async fn broker_for_every_connection_closing_on(n: Option<usize>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    answer_handshake(&mut stream).await;
                    let mut read = 0;
                    while read_request(&mut stream).await.is_some() {
                        read += 1;
                        if n == Some(read) {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    /// A fake TLS listener: it answers the handshake with a TLS alert, which the client reads
    /// as a security setting that does not match (a refusal).
    async fn tls_listener() -> (String, JoinHandle<()>) {
        fake_broker_raw(|mut stream| async move {
            let _ = read_request(&mut stream).await;
            stream
                .write_all(&[0x15, 3, 3, 0, 2, 2, 0x50])
                .await
                .expect("write");
        })
        .await
    }

    #[tokio::test]
    async fn a_reconnect_goes_to_the_learned_brokers_before_the_bootstrap_servers() {
        use crate::kafka::net::bootstrap::Bootstrap;
        // Both answer every connection: only the order decides.
        let bootstrap_server = broker_for_every_connection().await;
        let learned = broker_for_every_connection().await;
        let config = ConnectionConfig::default();
        let bootstrap = Bootstrap::connect(&bootstrap_server, config.clone())
            .await
            .expect("connect");
        bootstrap.addresses().learn(std::slice::from_ref(&learned));
        bootstrap.close();
        let again = bootstrap.get().await.expect("reconnect");
        assert_eq!(again.broker(), learned);
        assert_eq!(config.dialer.counts().attempts, 2);
    }

    #[tokio::test]
    async fn a_learned_broker_that_refuses_is_passed_over_but_a_chosen_one_ends_the_search() {
        let good = broker_for_every_connection().await;
        let (refusing, _a) = tls_listener().await;
        let config = ConnectionConfig::default();
        let list = format!("{refusing},{good}");
        let connection = Connection::connect_first(
            vec![
                Candidate {
                    addr: &refusing,
                    chosen: false,
                },
                Candidate {
                    addr: &good,
                    chosen: true,
                },
            ],
            &list,
            &config,
        )
        .await
        .expect("the bootstrap server after the learned broker's refusal");
        assert_eq!(connection.broker(), good);

        let (refusing, _b) = tls_listener().await;
        let error = Addresses::new(format!("{refusing},{good}"))
            .connect(&ConnectionConfig::default())
            .await
            .expect_err("the application's broker refused");
        assert!(matches!(error, ClientError::Config { .. }), "{error:?}");
    }

    #[tokio::test]
    async fn at_most_a_few_learned_brokers_are_tried_per_connect() {
        let mut closed = Vec::new();
        for _ in 0..MAX_LEARNED_TRIES + 2 {
            closed.push(closed_port().await);
        }
        let good = broker_for_every_connection().await;
        let mut candidates: Vec<Candidate<'_>> = closed
            .iter()
            .map(|addr| Candidate {
                addr,
                chosen: false,
            })
            .collect();
        candidates.push(Candidate {
            addr: &good,
            chosen: true,
        });
        let config = ConnectionConfig::default();
        let connection = Connection::connect_first(candidates, "test", &config)
            .await
            .expect("the bootstrap server");
        assert_eq!(connection.broker(), good);
        let counts = config.dialer.counts();
        assert_eq!(
            (counts.attempts, counts.failures),
            (MAX_LEARNED_TRIES as u64 + 1, MAX_LEARNED_TRIES as u64),
            "{counts:?}"
        );
    }

    #[tokio::test]
    async fn timeouts_of_duration_max_mean_no_timeout() {
        let (addr, broker) = fake_broker(|mut stream| async move {
            for _ in 0..2 {
                let request = read_request(&mut stream).await.expect("request");
                stream
                    .write_all(&echo_metadata(&request))
                    .await
                    .expect("write");
            }
            assert!(read_request(&mut stream).await.is_none());
        })
        .await;
        let config = ConnectionConfig {
            connect_timeout: Duration::MAX,
            request_timeout: Duration::MAX,
            ..ConnectionConfig::default()
        };
        let connection = Connection::connect(&addr, &config).await.expect("connect");
        // The connection's own request timeout, then an explicit one.
        let response = metadata(&connection, "default").await.expect("response");
        assert_eq!(topic_of(&response), "default");
        let request = MetadataRequest::default();
        let response = connection
            .request_with_timeout::<_, MetadataResponse>(
                ApiKey::Metadata,
                12,
                &request,
                Duration::MAX,
            )
            .await
            .expect("response");
        assert!(response.topics.is_empty());
        assert!(!connection.is_closed());
        drop(connection);
        broker.await.expect("broker");
    }

    #[tokio::test]
    async fn dropped_request_is_still_sent_whole() {
        let (addr, broker) = fake_broker(|mut stream| async move {
            let first = read_request(&mut stream).await.expect("request");
            let second = read_request(&mut stream).await.expect("request");
            stream
                .write_all(&echo_metadata(&first))
                .await
                .expect("write");
            stream
                .write_all(&echo_metadata(&second))
                .await
                .expect("write");
            assert!(read_request(&mut stream).await.is_none());
        })
        .await;
        let connection = connect(&addr).await;
        // Polled once (the frame is queued), then dropped.
        assert!(metadata(&connection, "dropped").now_or_never().is_none());
        let response = metadata(&connection, "kept").await.expect("response");
        assert_eq!(topic_of(&response), "kept");
        // A dropped request is not a lost answer: the connection is handed out still.
        assert!(connection.is_reusable());
        drop(connection);
        broker.await.expect("broker");
    }

    /// A response frame to `request` whose header or body cannot be decoded.
    fn garbled_frame(request: &Received, bad_header: bool) -> Vec<u8> {
        // Metadata v12 answers with a flexible header: a tag count, then the body.
        let rest: &[u8] = if bad_header {
            &[0x80] // a tag count whose varint never ends
        } else {
            &[0, 7] // an empty tag section, then a truncated body
        };
        let len = i32::try_from(4 + rest.len()).expect("length");
        let mut frame = len.to_be_bytes().to_vec();
        frame.extend_from_slice(&request.header.correlation_id.to_be_bytes());
        frame.extend_from_slice(rest);
        frame
    }

    #[tokio::test]
    async fn undecodable_body_poisons_the_connection_with_a_retriable_error() {
        let (addr, broker) = fake_broker(|mut stream| async move {
            let first = read_request(&mut stream).await.expect("request");
            stream
                .write_all(&garbled_frame(&first, false))
                .await
                .expect("write");
            // The client hangs up: nothing more is read from a stream out of step.
            assert!(read_request(&mut stream).await.is_none());
        })
        .await;
        let connection = connect(&addr).await;
        let error = metadata(&connection, "bad").await.expect_err("undecodable");
        assert!(
            matches!(&error, ClientError::Protocol(ProtocolError::Garbled { api: "Metadata", source, .. }) if source.to_string().contains("cannot decode the Metadata v12 response")),
            "{error:?}"
        );
        assert!(error.is_retriable());
        assert!(connection.is_closed());
        let error = metadata(&connection, "next").await.expect_err("closed");
        assert!(
            matches!(error, ClientError::Connection(ConnectionError::Io { .. })),
            "a new connection is needed: {error:?}"
        );
        assert!(error.is_retriable());
        drop(connection);
        tokio::time::timeout(Duration::from_secs(5), broker)
            .await
            .expect("the client closed the socket")
            .expect("broker");
    }

    #[tokio::test]
    async fn undecodable_header_fails_every_waiting_request_retriably() {
        let (addr, broker) = fake_broker(|mut stream| async move {
            let first = read_request(&mut stream).await.expect("request");
            let _second = read_request(&mut stream).await.expect("request");
            stream
                .write_all(&garbled_frame(&first, true))
                .await
                .expect("write");
            assert!(read_request(&mut stream).await.is_none());
        })
        .await;
        let connection = connect(&addr).await;
        let bad = tokio::spawn(metadata(&connection, "bad"));
        let waiting = tokio::spawn(metadata(&connection, "waiting"));
        let error = bad.await.expect("task").expect_err("undecodable header");
        assert!(
            matches!(&error, ClientError::Protocol(ProtocolError::Garbled { source, .. }) if source.to_string().contains("cannot decode the Metadata v12 response header")),
            "{error:?}"
        );
        let error = waiting.await.expect("task").expect_err("poisoned");
        assert!(
            matches!(
                &error,
                ClientError::Protocol(ProtocolError::Garbled {
                    api: "Metadata",
                    ..
                })
            ),
            "{error:?}"
        );
        assert!(error.is_retriable());
        assert!(connection.is_closed());
        drop(connection);
        tokio::time::timeout(Duration::from_secs(5), broker)
            .await
            .expect("the client closed the socket")
            .expect("broker");
    }

    #[tokio::test]
    async fn api_versions_falls_back_to_v0() {
        let (addr, broker) = fake_broker_raw(|mut stream| async move {
            let first = read_request(&mut stream).await.expect("request");
            assert_eq!(first.header.request_api_version, 3);
            // An old broker answers a version it lacks in v0, with UNSUPPORTED_VERSION.
            let old = ApiVersionsResponse::default()
                .with_error_code(UNSUPPORTED_VERSION)
                .with_api_keys(vec![
                    ApiVersion::default()
                        .with_api_key(ApiKey::ApiVersions as i16)
                        .with_min_version(0)
                        .with_max_version(2),
                ]);
            stream
                .write_all(&response_frame(first.header.correlation_id, 0, &old))
                .await
                .expect("write");
            let second = read_request(&mut stream).await.expect("request");
            assert_eq!(second.header.request_api_version, 0);
            stream
                .write_all(&response_frame(
                    second.header.correlation_id,
                    0,
                    &api_versions(),
                ))
                .await
                .expect("write");
            let _ = read_request(&mut stream).await;
        })
        .await;
        let connection = connect(&addr).await;
        assert_eq!(connection.api_range(ApiKey::Metadata), Some((0, 13)));
        assert_eq!(connection.api_range(ApiKey::ApiVersions), Some((0, 4)));
        assert_eq!(connection.api_range(ApiKey::ShareFetch), None);
        drop(connection);
        broker.await.expect("broker");
    }

    #[tokio::test]
    async fn negotiate_picks_the_highest_common_version() {
        let (addr, _broker) = fake_broker(|mut stream| async move {
            let _ = read_request(&mut stream).await;
        })
        .await;
        let connection = connect(&addr).await;
        assert_eq!(
            connection
                .negotiate(ApiKey::Metadata, MetadataRequest::VERSIONS)
                .expect("common"),
            13
        );
        assert_eq!(
            connection
                .negotiate(ApiKey::Metadata, VersionRange { min: 4, max: 9 })
                .expect("common"),
            9
        );
        let error = connection
            .negotiate(ApiKey::Metadata, VersionRange { min: 14, max: 15 })
            .expect_err("no common version");
        assert!(
            matches!(&error, ClientError::Protocol(ProtocolError::Unsupported { api: "Metadata", wanted, .. }) if wanted == "v14-v15 (the broker offers v0-v13)"),
            "{error:?}"
        );
        let error = connection
            .negotiate(ApiKey::ShareFetch, VersionRange { min: 1, max: 1 })
            .expect_err("missing");
        assert!(
            matches!(&error, ClientError::Protocol(ProtocolError::Unsupported { api: "ShareFetch", wanted, .. }) if wanted.contains("none")),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn dropping_the_last_handle_closes_the_socket() {
        let (addr, broker) = fake_broker(|mut stream| async move {
            assert!(read_request(&mut stream).await.is_none(), "EOF expected");
        })
        .await;
        let connection = connect(&addr).await;
        let clone = connection.clone();
        drop(connection);
        assert!(!clone.is_closed());
        drop(clone);
        tokio::time::timeout(Duration::from_secs(5), broker)
            .await
            .expect("EOF in time")
            .expect("broker");
    }

    #[tokio::test]
    async fn connect_errors_name_the_broker() {
        let addr = closed_port().await;
        let error = connect_error(&addr).await;
        assert!(
            matches!(&error, ClientError::Connection(ConnectionError::Io { broker, source }) if *broker == addr && source.kind() == io::ErrorKind::ConnectionRefused),
            "{error:?}"
        );
    }

    async fn connect_error(bootstrap: &str) -> ClientError {
        Addresses::new(bootstrap)
            .connect(&ConnectionConfig::default())
            .await
            .expect_err("no broker")
    }

    #[tokio::test]
    async fn a_list_connects_to_the_first_that_answers() {
        let closed = closed_port().await;
        let (addr, _broker) = fake_broker(|mut stream| async move {
            let _ = read_request(&mut stream).await;
        })
        .await;
        let connection = Addresses::new(format!(" {closed}, {addr} "))
            .connect(&ConnectionConfig::default())
            .await
            .expect("second broker");
        assert_eq!(connection.broker(), addr);

        let other = closed_port().await;
        let error = connect_error(&format!("{closed},{other}")).await;
        let ClientError::Connection(ConnectionError::Io { source, .. }) = &error else {
            panic!("{error:?}")
        };
        let message = source.to_string();
        assert!(
            message.contains(&closed) && message.contains(&other),
            "{message}"
        );
        assert!(matches!(
            connect_error(" , ").await,
            ClientError::Config { .. }
        ));
    }

    #[tokio::test]
    async fn a_list_tries_last_an_address_whose_last_attempt_failed() {
        let answering = || {
            fake_broker(|mut stream| async move {
                let _ = read_request(&mut stream).await;
            })
        };
        let closed = closed_port().await;
        let config = ConnectionConfig::default();
        let (addr, _broker) = answering().await;
        let first = Addresses::new(format!("{closed},{addr}"))
            .connect(&config)
            .await
            .expect("first");
        assert_eq!(config.dialer.counts().attempts, 2);
        first.close();
        // The closed port failed last: the next list's other address is dialled first.
        let (addr, _broker) = answering().await;
        let again = Addresses::new(format!("{closed},{addr}"))
            .connect(&config)
            .await
            .expect("again");
        assert_eq!(again.broker(), addr);
        let counts = config.dialer.counts();
        assert_eq!((counts.attempts, counts.failures), (3, 1), "{counts:?}");
    }

    #[tokio::test]
    async fn connect_times_out_without_a_handshake_answer() {
        let (addr, _broker) = fake_broker_raw(|mut stream| async move {
            let _ = read_request(&mut stream).await;
            tokio::time::sleep(Duration::from_secs(5)).await;
        })
        .await;
        let config = ConnectionConfig {
            connect_timeout: Duration::from_millis(100),
            ..ConnectionConfig::default()
        };
        let error = Connection::connect(&addr, &config)
            .await
            .expect_err("timeout");
        assert!(matches!(error, ClientError::Timeout(_)), "{error:?}");
    }

    #[tokio::test]
    async fn a_tls_listener_is_recognised_by_its_alert() {
        let (addr, _broker) = fake_broker_raw(|mut stream| async move {
            let _ = read_request(&mut stream).await;
            // What a Kafka TLS listener answers to plaintext bytes: a fatal alert record.
            stream
                .write_all(&[0x15, 3, 3, 0, 2, 2, 0x50])
                .await
                .expect("write");
        })
        .await;
        let error = Connection::connect(&addr, &ConnectionConfig::default())
            .await
            .expect_err("a TLS listener");
        assert!(
            matches!(&error, ClientError::Config { key, reason } if key == "security.protocol" && reason.contains("expects TLS")),
            "{error:?}"
        );
        assert!(!error.is_retriable());
        assert!(looks_like_tls(i32::from_be_bytes([0x16, 3, 1, 0])));
        assert!(!looks_like_tls(1000));
    }

    #[tokio::test]
    async fn eof_after_api_versions_hints_at_sasl() {
        let (addr, _broker) = fake_broker(|mut stream| async move {
            // A SASL listener hangs up on anything but SaslHandshake.
            let _ = read_request(&mut stream).await;
        })
        .await;
        let connection = connect(&addr).await;
        let error = metadata(&connection, "t").await.expect_err("EOF");
        let ClientError::Connection(ConnectionError::Io { source, .. }) = &error else {
            panic!("{error:?}")
        };
        assert!(source.to_string().contains("may require SASL"), "{source}");
    }

    #[tokio::test]
    async fn sasl_needs_a_broker_with_sasl_handshake_v1() {
        let (addr, _broker) = fake_broker(|mut stream| async move {
            let _ = read_request(&mut stream).await;
        })
        .await;
        let security = crate::kafka::security::SecurityContext::build(
            &crate::kafka::security::Security::sasl_plaintext(SaslSettings::plain(
                "alice", "hunter2",
            )),
        )
        .expect("settings");
        let config = ConnectionConfig {
            security,
            ..ConnectionConfig::default()
        };
        let error = Connection::connect(&addr, &config)
            .await
            .expect_err("no SaslHandshake");
        assert!(
            matches!(&error, ClientError::Connection(ConnectionError::Authentication { reason, .. }) if reason.contains("SaslHandshake v1") && reason.contains("`alice`")),
            "{error:?}"
        );
        assert!(!format!("{error:?}").contains("hunter2"));
    }
}
