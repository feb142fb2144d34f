//! [`KafkaLogReader`]: reads a partition from an offset with the classic Fetch, as a consumer
//! without a group does.
//!
//! - `builder`: [`KafkaLogReaderBuilder`], the settings and the connect.
//! - `fetch`: the Fetch request and the records of its answer (no I/O).
//! - `aborted`: which transactional batches a `read_committed` reader drops (no I/O).
//!
//! This file holds the client: partition leaders from Metadata, one connection per leader,
//! and the retries after a leader moved or a connection was lost.

mod aborted;
mod builder;
mod fetch;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse, TopicName,
};
use kafka_protocol::protocol::{Message, StrBytes, VersionRange};
use tracing::debug;
use uuid::Uuid;

pub use self::builder::KafkaLogReaderBuilder;
use self::fetch::{Ask, Fetched};
use crate::consumer::ConsumerError;
use crate::kafka::cluster::link::ClusterLink;
use crate::kafka::cluster::metadata::Leader;
use crate::kafka::cluster::pool::BrokerPool;
use crate::kafka::codec::client_list_offsets;
use crate::kafka::error::ClientError;
use crate::kafka::error::codes::{api_name, broker_error};
use crate::kafka::error::{BrokerError, ConnectionError, ProtocolError};
use crate::kafka::net::addresses::Addresses;
use crate::kafka::net::connection::ConnectionConfig;
use crate::producer::{IsolationLevel, LogRead, LogReader};
use crate::record::ConsumerRecord;

/// How many times one call tries, the first included, before it gives up on a leader that
/// moved, a lost connection or a partition not known yet.
const MAX_ATTEMPTS: u32 = 6;
/// The pause before the first retry; it doubles with each (0.1 + 0.2 + … ≈ 3 s in all).
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest one read of [`KafkaLogReader::read_until`] waits for records.
const READ_UNTIL_WAIT: Duration = Duration::from_millis(500);

/// Broker errors after which the leader is looked up again and the call retried.
const REFRESH_ON: &[&str] = &[
    "NOT_LEADER_OR_FOLLOWER",
    "FENCED_LEADER_EPOCH",
    "UNKNOWN_LEADER_EPOCH",
    "LEADER_NOT_AVAILABLE",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "UNKNOWN_TOPIC_ID",
    "KAFKA_STORAGE_ERROR",
    "REPLICA_NOT_AVAILABLE",
    "BROKER_NOT_AVAILABLE",
    "NETWORK_EXCEPTION",
    "OFFSET_NOT_AVAILABLE",
    "NOT_ENOUGH_REPLICAS",
];

/// Reads partitions of a Kafka cluster from an offset, `read_committed` or
/// `read_uncommitted`: the [`LogReader`] of a real cluster.
///
/// Each read is one sessionless Fetch to the partition's leader, found through Metadata and
/// looked up again when the leader moved (`NOT_LEADER_OR_FOLLOWER`, `FENCED_LEADER_EPOCH`,
/// `UNKNOWN_LEADER_EPOCH`) or its connection was lost; a call tries up to six times over
/// about three seconds before it returns the last error.
///
/// Records come as [`ConsumerRecord`]s with their headers exactly as written (order, repeated
/// keys, null values) and a delivery count of 1. Control records never appear; under
/// [`IsolationLevel::ReadCommitted`] neither do records of aborted transactions, nor anything
/// at or past the last stable offset.
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use kafka_share_sink::producer::{IsolationLevel, KafkaLogReader, LogReader};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), kafka_share_sink::ConsumerError> {
/// let reader = KafkaLogReader::builder("broker1:9092").connect().await?;
/// let end = reader.end_offset("orders", 0, IsolationLevel::ReadCommitted).await?;
/// let mut from = 0;
/// while from < end {
///     let read = reader
///         .read("orders", 0, from, IsolationLevel::ReadCommitted, Duration::from_millis(500))
///         .await?;
///     for record in &read.records {
///         println!("{}: {:?}", record.offset(), record.value());
///     }
///     from = read.next_offset;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct KafkaLogReader {
    /// Metadata, through a cluster-wide connection it keeps alive.
    link: ClusterLink,
    /// The leaders' connections.
    brokers: BrokerPool,
    /// `max_bytes` and `partition_max_bytes` of every Fetch.
    max_bytes: i32,
    state: Mutex<State>,
}

/// What the reader learnt of the cluster.
#[derive(Debug, Default)]
struct State {
    /// The leader of each partition read so far.
    leaders: HashMap<(String, i32), Leader>,
}

impl KafkaLogReader {
    /// The builder of a reader of `bootstrap` (comma-separated `host:port` addresses).
    pub fn builder(bootstrap: impl Into<String>) -> KafkaLogReaderBuilder {
        KafkaLogReaderBuilder::new(bootstrap.into())
    }

    /// Connects with `config` and reads the cluster metadata.
    async fn open(
        bootstrap: &str,
        config: ConnectionConfig,
        max_bytes: i32,
    ) -> Result<Self, ConsumerError> {
        let (link, _) = ClusterLink::open(Addresses::new(bootstrap), config.clone())
            .await
            .map_err(ClientError::from)?;
        Ok(Self {
            link,
            brokers: BrokerPool::new(config),
            max_bytes,
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads `topic`/`partition` from `from` until `next_offset` reaches `end`, and returns
    /// every record read: the way to read a partition up to an offset sampled before, such as
    /// a high watermark from [`end_offset`](LogReader::end_offset).
    ///
    /// # Errors
    ///
    /// [`ConsumerError::Timeout`] when `end` is not reached within `timeout` (the records read
    /// so far are dropped; read again); the errors of [`read`](LogReader::read).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is lost, call it again.
    pub async fn read_until(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        end: i64,
        isolation: IsolationLevel,
        timeout: Duration,
    ) -> Result<Vec<ConsumerRecord>, ConsumerError> {
        let deadline = crate::time::deadline_after(tokio::time::Instant::now(), timeout);
        let mut records = Vec::new();
        let mut next = from;
        while next < end {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Err(ConsumerError::Timeout(timeout));
            }
            let read = tokio::time::timeout(
                left,
                self.read(topic, partition, next, isolation, left.min(READ_UNTIL_WAIT)),
            )
            .await
            .map_err(|_| ConsumerError::Timeout(timeout))??;
            next = read.next_offset.max(next);
            records.extend(read.records.into_iter().filter(|r| r.offset() < end));
        }
        Ok(records)
    }

    /// The leader of `topic`/`partition`: the one known, or (with `refresh`, or when none is)
    /// the one Metadata names now.
    async fn leader(
        &self,
        topic: &str,
        partition: i32,
        refresh: bool,
    ) -> Result<Leader, ClientError> {
        let key = (topic.to_owned(), partition);
        if !refresh {
            if let Some(leader) = self.lock().leaders.get(&key) {
                return Ok(*leader);
            }
        }
        let snapshot = self.link.metadata(Some(&[topic])).await?;
        self.brokers.learn(&snapshot.brokers);
        let leader = snapshot.leader(topic, partition)?;
        self.lock().leaders.insert(key, leader);
        Ok(leader)
    }

    /// Runs `attempt` up to [`MAX_ATTEMPTS`] times: after an error that a new leader or a new
    /// connection may cure, the leader is looked up again (a connection whose request timed
    /// out is not used again: later answers would queue behind the lost one,
    /// [`Connection::is_reusable`](crate::kafka::net::connection::Connection::is_reusable)).
    async fn retrying<T, F, Fut>(
        &self,
        topic: &str,
        partition: i32,
        attempt: F,
    ) -> Result<T, ClientError>
    where
        F: Fn(bool) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let mut backoff = FIRST_BACKOFF;
        let mut refresh = false;
        let mut tries = 1;
        loop {
            match attempt(refresh).await {
                Ok(value) => return Ok(value),
                Err(error) if tries < MAX_ATTEMPTS && worth_retrying(&error) => {
                    debug!(topic, partition, %error, tries, "log read retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = backoff.saturating_mul(2);
                    refresh = true;
                    tries += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// One Fetch of the partition.
    async fn fetch_once(&self, ask: &Ask<'_>, refresh: bool) -> Result<LogRead, ClientError> {
        let leader = self.leader(ask.topic, ask.partition, refresh).await?;
        let connection = self.brokers.open(leader.node).await?;
        let mut ours = FetchRequest::VERSIONS;
        if leader.topic_id.is_nil() {
            ours = ours.intersect(&VersionRange {
                min: ours.min,
                max: fetch::TOPIC_ID_VERSION - 1,
            });
        }
        let version = connection.negotiate(ApiKey::Fetch, ours)?;
        let ask = Ask {
            topic_id: leader.topic_id,
            leader_epoch: leader.epoch,
            ..ask.clone()
        };
        let request = fetch::request(&ask, version);
        let timeout = self
            .brokers
            .config()
            .request_timeout
            .saturating_add(ask.max_wait);
        let response: FetchResponse = connection
            .request_with_timeout(ApiKey::Fetch, version, &request, timeout)
            .await?;
        let api = api_name(ApiKey::Fetch);
        if let Some(error) = broker_error(api, response.error_code, None) {
            return Err(error);
        }
        let data = fetch::partition_of(response, &ask, version).ok_or_else(|| {
            ClientError::Protocol(ProtocolError::Malformed {
                broker: connection.broker().to_owned(),
                reason: format!(
                    "the Fetch answer has no entry for partition {} of `{}`",
                    ask.partition, ask.topic
                ),
            })
        })?;
        if let Some(error) = broker_error(
            api,
            data.error_code,
            Some(format!(
                "partition {} of `{}` at offset {} (log start offset {}, high watermark {})",
                ask.partition, ask.topic, ask.from, data.log_start_offset, data.high_watermark
            )),
        ) {
            return Err(error);
        }
        let topic: Arc<str> = Arc::from(ask.topic);
        let read = fetch::extract(
            &topic,
            ask.partition,
            ask.from,
            ask.isolation,
            Fetched::from(data),
        )
        .map_err(|error| {
            ClientError::Protocol(ProtocolError::Malformed {
                broker: connection.broker().to_owned(),
                reason: format!(
                    "partition {} of `{}` from offset {}: {error}; the batch cannot be read, \
                     by this or any client",
                    ask.partition, ask.topic, ask.from
                ),
            })
        })?;
        Ok(read)
    }

    /// One ListOffsets (latest) of the partition.
    async fn end_offset_once(
        &self,
        topic: &str,
        partition: i32,
        isolation: IsolationLevel,
        refresh: bool,
    ) -> Result<i64, ClientError> {
        let leader = self.leader(topic, partition, refresh).await?;
        let connection = self.brokers.open(leader.node).await?;
        // isolation_level came with v2.
        let ours = ListOffsetsRequest::VERSIONS.intersect(&VersionRange {
            min: 2,
            max: i16::MAX,
        });
        let version = connection.negotiate(ApiKey::ListOffsets, ours)?;
        let timeout_ms =
            i32::try_from(self.brokers.config().request_timeout.as_millis()).unwrap_or(i32::MAX);
        let request = client_list_offsets()
            .with_isolation_level(fetch::isolation_level(isolation))
            .with_timeout_ms(if version >= 10 { timeout_ms } else { 0 })
            .with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partitions(vec![
                        ListOffsetsPartition::default()
                            .with_partition_index(partition)
                            .with_current_leader_epoch(if version >= 4 { leader.epoch } else { -1 })
                            .with_timestamp(LATEST_TIMESTAMP),
                    ]),
            ]);
        let response: ListOffsetsResponse = connection
            .request(ApiKey::ListOffsets, version, &request)
            .await?;
        let found = response
            .topics
            .iter()
            .filter(|t| t.name.0.as_str() == topic)
            .flat_map(|t| &t.partitions)
            .find(|p| p.partition_index == partition)
            .ok_or_else(|| {
                ClientError::Protocol(ProtocolError::Malformed {
                    broker: connection.broker().to_owned(),
                    reason: format!(
                        "the ListOffsets answer has no entry for partition {partition} of `{topic}`"
                    ),
                })
            })?;
        if let Some(error) = broker_error(
            api_name(ApiKey::ListOffsets),
            found.error_code,
            Some(format!("partition {partition} of `{topic}`")),
        ) {
            return Err(error);
        }
        Ok(found.offset)
    }
}

#[async_trait::async_trait]
impl LogReader for KafkaLogReader {
    async fn read(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        isolation: IsolationLevel,
        max_wait: Duration,
    ) -> Result<LogRead, ConsumerError> {
        let ask = Ask {
            topic,
            topic_id: Uuid::nil(),
            partition,
            from,
            leader_epoch: -1,
            isolation,
            max_wait,
            max_bytes: self.max_bytes,
        };
        self.retrying(topic, partition, |refresh| {
            let ask = ask.clone();
            async move { self.fetch_once(&ask, refresh).await }
        })
        .await
        .map_err(ConsumerError::from)
    }

    async fn end_offset(
        &self,
        topic: &str,
        partition: i32,
        isolation: IsolationLevel,
    ) -> Result<i64, ConsumerError> {
        self.retrying(topic, partition, |refresh| {
            self.end_offset_once(topic, partition, isolation, refresh)
        })
        .await
        .map_err(ConsumerError::from)
    }
}

/// ListOffsets' timestamp for the end of the log (the high watermark or the last stable
/// offset, per the isolation level).
const LATEST_TIMESTAMP: i64 = -1;

/// Whether a call may succeed after a new leader lookup or a new connection.
fn worth_retrying(error: &ClientError) -> bool {
    match error {
        ClientError::Connection(ConnectionError::Io { .. })
        | ClientError::Protocol(ProtocolError::Garbled { .. })
        | ClientError::Timeout(_) => true,
        ClientError::Broker(BrokerError { name, .. }) => REFRESH_ON.contains(name),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_moves_and_lost_connections_are_retried_other_errors_not() {
        let broker = |code| broker_error("Fetch", code, None).expect("an error");
        for code in [6, 74, 75, 5, 3, 100] {
            assert!(worth_retrying(&broker(code)), "{code}");
        }
        for code in [1, 29, -1, 2] {
            assert!(!worth_retrying(&broker(code)), "{code}");
        }
        assert!(worth_retrying(&ClientError::Timeout(Duration::ZERO)));
        assert!(!worth_retrying(&ClientError::Protocol(
            ProtocolError::Malformed {
                broker: "b".into(),
                reason: "r".into()
            }
        )));
    }
}
