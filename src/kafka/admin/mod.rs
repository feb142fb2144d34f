//! [`KafkaAdmin`]: the few admin calls that setting up a share group needs, and moving a
//! partition's leader.
//!
//! - `builder`: [`KafkaAdminBuilder`], the settings and the connect.
//! - `error`: [`AdminError`], and the failure the parts of a call share before it is named.
//! - `topics`: creating and deleting topics, topic ids.
//! - `configs`: share-group configs, and a share group's dead-letter queue.
//! - `metadata`: the Metadata request, partition placements, and waiting for a change to show.
//! - `leaders`: moving a partition's leader.
//! - `share_groups`: describing a share group, finding its coordinator.
//! - `share_offsets`, `share_offsets_wire`: a share group's offsets and lag (and the
//!   DescribeShareGroupOffsets v1 codec), altering, resetting and deleting them.
//! - `records`: listing offsets, adding partitions, deleting records.
//! - `topic_configs`: creating a topic with configs, reading a topic's configs.
//!
//! This file holds the client, its connection and what every call uses: sending one request,
//! and turning a call's failure into its [`AdminError`].

mod builder;
mod configs;
mod error;
mod leaders;
mod metadata;
mod records;
mod share_groups;
mod share_offsets;
mod share_offsets_wire;
mod topic_configs;
mod topics;
#[cfg(feature = "exactly-once")]
mod transactions;

use std::future::Future;

use kafka_protocol::messages::{ApiKey, TopicName};
use kafka_protocol::protocol::{
    Decodable, Encodable, HeaderVersion, Message, StrBytes, VersionRange,
};

pub use self::builder::KafkaAdminBuilder;
pub use self::configs::{GroupResource, ResourceConfigs, ShareGroupConfigs};
pub use self::error::AdminError;
use self::error::Failure;
pub use self::metadata::PartitionPlacement;
pub use self::records::OffsetSpec;
pub use self::share_groups::{ShareGroupDescription, ShareGroupMember, ShareGroupState};
pub use self::share_offsets::{ResetTo, ShareGroupPartitionOffsets};
pub(crate) use self::topic_configs::describe as describe_topic;
pub use self::topic_configs::{TopicConfigs, TopicResource};
pub(crate) use self::topics::create_topic;
use crate::kafka::cluster::link::{ClusterLink, OpenFailure};
use crate::kafka::error::ClientError;
use crate::kafka::error::codes::api_name;
use crate::kafka::error::{BrokerError, ProtocolError};
use crate::kafka::net::addresses::Addresses;
use crate::kafka::net::connection::{Connection, ConnectionConfig};

/// An admin client for a Kafka cluster: create and delete topics, set and read share-group
/// configs, give a share group a dead-letter queue, resolve topic ids, see where partitions
/// live and move a partition's leader.
///
/// It keeps one connection to a bootstrap broker and sends everything there: in KRaft mode
/// brokers forward CreateTopics, DeleteTopics, IncrementalAlterConfigs,
/// AlterPartitionReassignments and ElectLeaders to the controller. A connection that closed,
/// or whose request timed out, is replaced on the next call.
///
/// [`KafkaAdmin::connect`] takes the defaults; [`KafkaAdmin::builder`] sets the timeouts and
/// the client id. Errors are [`AdminError`]s naming the call; a broker error code is an
/// [`AdminError::Broker`] named as Kafka names it (for example `TOPIC_ALREADY_EXISTS`).
///
/// # Example
///
/// ```no_run
/// use kafka_share_sink::KafkaAdmin;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), kafka_share_sink::AdminError> {
/// let admin = KafkaAdmin::connect("127.0.0.1:9092").await?;
/// admin.create_topic("orders", 3, 1).await?;
/// admin
///     .set_share_group_config("order-sink", &[("share.auto.offset.reset", "earliest")])
///     .await?;
/// let ids = admin.topic_ids(&["orders"]).await?;
/// assert_eq!(ids.len(), 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct KafkaAdmin {
    /// The connection, reopened when it closed or an answer on it is overdue (a request timed
    /// out): to the brokers of the last Metadata answer, then the bootstrap servers.
    link: ClusterLink,
    /// The controller id the Metadata of `connect` reported (in KRaft, a random live broker).
    controller_id: i32,
}

impl KafkaAdmin {
    /// Connects to the first reachable broker of `bootstrap` (comma-separated `host:port`
    /// addresses) and reads the cluster metadata, with the default settings of
    /// [`KafkaAdmin::builder`]: 10 s to connect, 30 s per request, client id
    /// `kafka-share-sink`.
    ///
    /// # Errors
    ///
    /// As [`KafkaAdminBuilder::connect`]: [`AdminError::Connect`] when no broker can be
    /// reached, or any error of the Metadata call.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is changed on the cluster, and a connection made so far is closed
    /// when the future is dropped.
    pub async fn connect(bootstrap: &str) -> Result<Self, AdminError> {
        Self::builder(bootstrap).connect().await
    }

    /// The builder of an admin client for `bootstrap` (comma-separated `host:port`
    /// addresses), to set timeouts and the client id before connecting.
    pub fn builder(bootstrap: impl Into<String>) -> KafkaAdminBuilder {
        KafkaAdminBuilder::new(bootstrap.into())
    }

    /// Connects with `config` and reads the cluster metadata.
    pub(crate) async fn open(
        addresses: Addresses,
        config: ConnectionConfig,
    ) -> Result<Self, Failure> {
        let tried = addresses.current();
        let (link, metadata) = ClusterLink::open(addresses, config)
            .await
            .map_err(|failure| match failure {
                OpenFailure::Connect(source) => Failure::Connect {
                    bootstrap: tried,
                    source,
                },
                OpenFailure::Metadata(error) => named(ApiKey::Metadata, error),
            })?;
        Ok(Self {
            link,
            controller_id: metadata.controller_id,
        })
    }

    /// The controller id reported when connecting (in KRaft mode, a random live broker).
    #[allow(dead_code, reason = "kept for diagnostics")]
    pub(crate) fn controller_id(&self) -> i32 {
        self.controller_id
    }

    /// Runs the parts of `call` and names its failure. (A request that timed out leaves its
    /// connection behind: the next call makes a new one, [`Connection::is_reusable`].)
    ///
    /// [`Connection::is_reusable`]: crate::kafka::net::connection::Connection::is_reusable
    async fn call<T>(
        &self,
        call: &'static str,
        parts: impl Future<Output = Result<T, Failure>>,
    ) -> Result<T, AdminError> {
        parts.await.map_err(|failure| failure.into_admin(call))
    }

    /// The settings of the admin client's connections.
    fn config(&self) -> &ConnectionConfig {
        self.link.config()
    }

    /// The `timeout_ms` of requests the broker may take long over (below the request timeout).
    fn broker_timeout_ms(&self) -> i32 {
        self.link.broker_timeout_ms()
    }

    /// The connection, made again first if it closed or an answer on it is overdue.
    async fn connection(&self) -> Result<Connection, Failure> {
        self.link
            .connection()
            .await
            .map_err(|source| Failure::Connect {
                bootstrap: self.link.servers(),
                source,
            })
    }
}

/// The highest version of `key` in `ours` the broker offers.
fn negotiate(connection: &Connection, key: ApiKey, ours: VersionRange) -> Result<i16, Failure> {
    Ok(connection.negotiate(key, ours)?)
}

/// Sends `request` as `version` of `key` and decodes the answer, within the request timeout;
/// a timeout names the request.
async fn send<Req, Resp>(
    connection: &Connection,
    key: ApiKey,
    version: i16,
    request: &Req,
) -> Result<Resp, Failure>
where
    Req: Encodable + Sync,
    Resp: Decodable + HeaderVersion + Send,
{
    connection
        .request(key, version, request)
        .await
        .map_err(|error| named(key, error))
}

/// The failure of a `key` request: a timeout names the request.
fn named(key: ApiKey, error: ClientError) -> Failure {
    match error {
        ClientError::Timeout(timeout) => Failure::Timeout {
            api: api_name(key),
            timeout,
        },
        other => other.into(),
    }
}

/// Sends `request` at the highest version of `Req` the broker offers.
async fn negotiate_and_send<Req, Resp>(
    connection: &Connection,
    key: ApiKey,
    request: &Req,
) -> Result<Resp, Failure>
where
    Req: Encodable + Message + Sync,
    Resp: Decodable + HeaderVersion + Send,
{
    let version = negotiate(connection, key, Req::VERSIONS)?;
    send(connection, key, version, request).await
}

/// A topic name for a request.
fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

/// The failure for a response that lacks the entry of what was asked about.
fn missing(connection: &Connection, key: ApiKey, name: &str) -> Failure {
    Failure::Client(missing_entry(connection, key, name))
}

/// [`missing`] as a [`ClientError`].
fn missing_entry(connection: &Connection, key: ApiKey, name: &str) -> ClientError {
    ClientError::Protocol(ProtocolError::Malformed {
        broker: connection.broker().to_owned(),
        reason: format!("the {} response has no entry for `{name}`", api_name(key)),
    })
}

/// Adds the topic name to a broker error without a message.
fn with_topic(error: ClientError, topic: &str) -> ClientError {
    match error {
        ClientError::Broker(BrokerError {
            api,
            code,
            name,
            message: None,
            retriable,
        }) => ClientError::Broker(BrokerError {
            api,
            code,
            name,
            message: Some(format!("topic `{topic}`")),
            retriable,
        }),
        other => other,
    }
}
