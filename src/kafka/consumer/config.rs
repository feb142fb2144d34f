//! Settings of the native share consumer, with the Java client's names and defaults.

use std::time::Duration;

/// `group.share.partition.max.record.locks`, the broker's default since Kafka 4.1.
pub(crate) const DEFAULT_MAX_RECORD_LOCKS: u32 = 2000;

/// The default of [`KafkaShareConsumerConfig::acquisition_max_bytes`]: 4 MiB, about 3,800
/// records of 1 KiB, enough for acquisitions of about 1,900 records each.
pub(crate) const DEFAULT_ACQUISITION_MAX_BYTES: usize = 4 << 20;

use super::max_poll_records::MaxPollRecords;
use crate::consumer::AcknowledgementMode;
use crate::kafka::net::backoff::ReconnectBackoff;
use crate::kafka::security::Security;
use crate::time::FAR_FUTURE;

/// How the brokers acquire records for a fetch: `share.acquire.mode` (KIP-1206, Kafka 4.2+).
///
/// ```
/// use kafka_share_sink::ShareAcquireMode;
/// let mode: ShareAcquireMode = "record_limit".parse().unwrap();
/// assert_eq!(mode, ShareAcquireMode::RecordLimit);
/// assert_eq!(mode.to_string(), "record_limit");
/// assert!("strict".parse::<ShareAcquireMode>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ShareAcquireMode {
    /// `batch_optimized` (the default): whole log batches are acquired, so a poll may return
    /// more than `max.poll.records` records, and several leaders are fetched from at once.
    #[default]
    BatchOptimized,
    /// `record_limit`: a strict `max.poll.records`. A fetch acquires at most that many
    /// records, only one leader is fetched from at a time, and nothing is fetched ahead of
    /// the application. Brokers before Kafka 4.2 (ShareFetch v1) do not know it: they
    /// acquire whole batches, and the consumer still hands out at most `max.poll.records`
    /// records a poll (the rest wait, acquired, for the next polls).
    RecordLimit,
}

impl std::fmt::Display for ShareAcquireMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::BatchOptimized => "batch_optimized",
            Self::RecordLimit => "record_limit",
        })
    }
}

/// A `share.acquire.mode` value that is neither `batch_optimized` nor `record_limit`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a share.acquire.mode: expected batch_optimized or record_limit")]
pub struct ParseShareAcquireModeError(pub(crate) String);

impl std::str::FromStr for ShareAcquireMode {
    type Err = ParseShareAcquireModeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "batch_optimized" => Ok(Self::BatchOptimized),
            "record_limit" => Ok(Self::RecordLimit),
            _ => Err(ParseShareAcquireModeError(s.to_owned())),
        }
    }
}

/// How many records a ShareFetch asks the broker to acquire.
///
/// ```
/// use kafka_share_sink::{AcquisitionSizing, KafkaShareConsumerConfig};
/// // Java's behaviour: every fetch acquires about max.poll.records records.
/// let config = KafkaShareConsumerConfig::new("127.0.0.1:9092", "orders-sink")
///     .acquisition_sizing(AcquisitionSizing::Fixed);
/// # let _ = config;
/// assert_eq!(AcquisitionSizing::default(), AcquisitionSizing::Sized);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum AcquisitionSizing {
    /// Sized to the sink (the default). The consumer measures how long the application
    /// takes per record between polls, and acquires as many records as it can process in a
    /// third of the acquisition lock: at least `max.poll.records`, at most the broker's
    /// in-flight limit (`max.record.locks`) times the partitions assigned and at most what
    /// fits in [`acquisition_max_bytes`](KafkaShareConsumerConfig::acquisition_max_bytes)
    /// (4 MiB by default). It keeps the next
    /// acquisition in flight while the application processes a batch (once half of what it
    /// holds is processed), so fetching overlaps with `put`. A poll still hands out at most
    /// `max.poll.records` records, and ends where one of the broker's acquired ranges ends
    /// (the consumer asks for ranges of a quarter of a poll, so that acknowledgements never
    /// cover part of one, which the broker then tracks per offset): polls are often a few
    /// records short (about 460 of 500 with 1 KiB records in 16 KiB log batches). A sink
    /// whose `put` costs the same whatever its size gets fuller polls with
    /// [`Fixed`](Self::Fixed). Records that wait unpolled for half their lock (the
    /// application slowed down or stopped polling) are released instead of handed out.
    /// [`prefetch_records`](KafkaShareConsumerConfig::prefetch_records) is not used. With
    /// [`ShareAcquireMode::RecordLimit`] acquisition is always fixed.
    #[default]
    Sized,
    /// Every fetch asks for `max.poll.records` records, as Java's share consumer does, and a
    /// poll hands out what one fetch brought (more than `max.poll.records` when whole log
    /// batches were acquired); fetching ahead only as
    /// [`prefetch_records`](KafkaShareConsumerConfig::prefetch_records) says.
    Fixed,
}

/// Settings of a [`KafkaShareConsumer`](super::KafkaShareConsumer).
///
/// ```
/// use kafka_share_sink::KafkaShareConsumerConfig;
/// use std::time::Duration;
/// let config = KafkaShareConsumerConfig::new("127.0.0.1:9092", "orders-sink")
///     .max_poll_records(1000)
///     .fetch_max_wait(Duration::from_millis(200));
/// assert_eq!(config.group_id(), "orders-sink");
/// ```
#[derive(Debug, Clone)]
pub struct KafkaShareConsumerConfig {
    pub(crate) bootstrap: String,
    pub(crate) group_id: String,
    pub(crate) client_id: String,
    pub(crate) max_poll_records: MaxPollRecords,
    pub(crate) fetch_min_bytes: i32,
    pub(crate) fetch_max_bytes: i32,
    pub(crate) fetch_max_wait: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) acknowledgement_mode: AcknowledgementMode,
    pub(crate) prefetch_records: usize,
    pub(crate) share_acquire_mode: ShareAcquireMode,
    pub(crate) max_partition_fetch_bytes: Option<i32>,
    pub(crate) acquisition_sizing: AcquisitionSizing,
    pub(crate) max_record_locks: u32,
    pub(crate) acquisition_max_bytes: usize,
    pub(crate) group_config_refresh: Duration,
    pub(crate) security: Security,
    pub(crate) reconnect_backoff: ReconnectBackoff,
}

impl KafkaShareConsumerConfig {
    /// `bootstrap.servers` (comma-separated `host:port`) and `group.id`, Java's defaults
    /// otherwise, and explicit acknowledgement.
    pub fn new(bootstrap: impl Into<String>, group_id: impl Into<String>) -> Self {
        Self {
            bootstrap: bootstrap.into(),
            group_id: group_id.into(),
            client_id: "kafka-share-sink".to_owned(),
            max_poll_records: MaxPollRecords::DEFAULT,
            fetch_min_bytes: 1,
            fetch_max_bytes: 52_428_800,
            fetch_max_wait: Duration::from_millis(500),
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            acknowledgement_mode: AcknowledgementMode::Explicit,
            prefetch_records: 0,
            share_acquire_mode: ShareAcquireMode::BatchOptimized,
            max_partition_fetch_bytes: None,
            acquisition_sizing: AcquisitionSizing::Sized,
            max_record_locks: DEFAULT_MAX_RECORD_LOCKS,
            acquisition_max_bytes: DEFAULT_ACQUISITION_MAX_BYTES,
            group_config_refresh: Duration::from_secs(300),
            security: Security::plaintext(),
            reconnect_backoff: ReconnectBackoff::default(),
        }
    }

    /// The group id.
    pub fn group_id(&self) -> &str {
        &self.group_id
    }

    /// `client.id`.
    pub fn client_id(mut self, id: impl Into<String>) -> Self {
        self.client_id = id.into();
        self
    }

    /// `max.poll.records` (default 500): the records asked for per poll, at least 1.
    pub fn max_poll_records(mut self, max: i32) -> Self {
        self.max_poll_records = MaxPollRecords::new(max);
        self
    }

    /// `fetch.min.bytes` (default 1).
    pub fn fetch_min_bytes(mut self, bytes: i32) -> Self {
        self.fetch_min_bytes = bytes.max(0);
        self
    }

    /// `fetch.max.bytes` (default 52428800): the most a ShareFetch answer may carry, and
    /// the budget for what the records of one answer may decompress to. Batches beyond the
    /// budget are not decompressed: their acquired records are released (delivered again,
    /// to this or another member) instead of read. So one poll holds at most the answer's
    /// frame (at most 100 MiB) plus this budget of decompressed records.
    pub fn fetch_max_bytes(mut self, bytes: i32) -> Self {
        self.fetch_max_bytes = bytes.max(1);
        self
    }

    /// `fetch.max.wait.ms` (default 500 ms): how long the broker may hold a fetch for
    /// `fetch.min.bytes`. A poll never waits longer than its own timeout.
    pub fn fetch_max_wait(mut self, wait: Duration) -> Self {
        self.fetch_max_wait = wait;
        self
    }

    /// `request.timeout.ms` (default 30 s). A timeout over about 30 years (e.g.
    /// [`Duration::MAX`]) is capped there: no timeout in practice, and a value the consumer
    /// can still add a poll's wait to.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout.min(FAR_FUTURE);
        self
    }

    /// How long a TCP connect may take (default 10 s). Capped at about 30 years, like
    /// [`request_timeout`](Self::request_timeout).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout.min(FAR_FUTURE);
        self
    }

    /// `reconnect.backoff.ms` (default 50 ms) and `reconnect.backoff.max.ms` (default 1 s):
    /// how soon the consumer dials a broker again after a connection attempt to it failed.
    ///
    /// The pause is per broker and shared by every connection of the consumer (bootstrap,
    /// group coordinator, partition leaders): after a failure the next attempt waits
    /// `initial`, doubling with each failure in a row up to `max`, each pause spread by
    /// ±20 % (never above `max`), as Java's client. After an **authentication failure**
    /// (credentials or a certificate refused, also when a re-authentication of an open
    /// connection is refused) the next attempt waits `max` at once, so a broker sees at
    /// most one attempt per `max` from this consumer while the credentials are refused.
    /// A successful connection ends the backoff. Counted by
    /// [`connection_counts`](super::KafkaShareConsumer::connection_counts).
    ///
    /// A `max` below `initial` is raised to `initial` (Java's client disables the
    /// doubling when only `reconnect.backoff.ms` is set, which is the same).
    ///
    /// ```
    /// use kafka_share_sink::KafkaShareConsumerConfig;
    /// use std::time::Duration;
    /// let config = KafkaShareConsumerConfig::new("127.0.0.1:9092", "orders-sink")
    ///     .reconnect_backoff(Duration::from_millis(100), Duration::from_secs(10));
    /// # let _ = config;
    /// ```
    pub fn reconnect_backoff(mut self, initial: Duration, max: Duration) -> Self {
        let initial = initial.min(FAR_FUTURE);
        self.reconnect_backoff = ReconnectBackoff {
            initial,
            max: max.min(FAR_FUTURE).max(initial),
        };
        self
    }

    /// How many records the consumer may fetch ahead of the application (default 0), with
    /// [`AcquisitionSizing::Fixed`] only: the sized acquisition (the default) decides that
    /// itself.
    ///
    /// Acquisition locks start ticking when the broker answers, so records fetched ahead
    /// spend their lock while they wait. With 0, a fetch is in flight only while a poll waits,
    /// or after a poll gave up before its answer came (that answer is then handed to the next
    /// poll): at most one answer is ever held. Above 0, the consumer keeps fetching in the
    /// background while fewer records than this wait to be polled, which overlaps the next
    /// fetch with the application's processing.
    pub fn prefetch_records(mut self, records: usize) -> Self {
        self.prefetch_records = records;
        self
    }

    /// `max.partition.fetch.bytes` (not set by default; at least 1): about how many bytes a
    /// fetch returns per partition. ShareFetch (v1, Kafka 4.1, and later) has no limit per
    /// partition; the broker divides a request's `fetch.max.bytes` evenly over the partitions
    /// it fetches, so each request asks for at most this many bytes times its partitions. As
    /// in Java, a first batch larger than the limit still comes whole.
    pub fn max_partition_fetch_bytes(mut self, bytes: i32) -> Self {
        self.max_partition_fetch_bytes = Some(bytes.max(1));
        self
    }

    /// How many records a fetch acquires (default [`AcquisitionSizing::Sized`]: sized to the
    /// application's measured pace and the acquisition lock).
    pub fn acquisition_sizing(mut self, sizing: AcquisitionSizing) -> Self {
        self.acquisition_sizing = sizing;
        self
    }

    /// The share group's in-flight limit per partition assumed until the group's own is read
    /// (default 2000, the broker's `group.share.partition.max.record.locks` since Kafka 4.1;
    /// at least 1). The consumer reads the group's `share.partition.max.record.locks` (or,
    /// before Kafka 4.3, the broker's limit) when it connects and with the group's other
    /// configs after that; set this only for a cluster whose configs it may not describe.
    /// [`AcquisitionSizing::Sized`] never holds more than its fair share of this many records
    /// per assigned partition: the limit divided by the members the partition is assigned to.
    pub fn max_record_locks(mut self, locks: u32) -> Self {
        self.max_record_locks = locks.max(1);
        self
    }

    /// With [`AcquisitionSizing::Sized`], about how many bytes of records the consumer may
    /// hold acquired at once (default 4 MiB): fetched and waiting to be polled, being
    /// processed, and asked for in flight. Records are slices of the ShareFetch answer they
    /// came in, which stays in memory until its last record is dropped, so this bounds the
    /// memory the consumer holds for records, whatever the sink's pace. The size of a record
    /// is estimated from the answers so far (record sets' bytes per record acquired). Two
    /// polls' worth (`max.poll.records` each: a batch being processed and the next one, as
    /// Java's consumer holds) are always allowed, and one answer is still bounded
    /// by `fetch.max.bytes` only; larger values make acquisitions larger, which costs the
    /// broker less per record.
    ///
    /// ```
    /// use kafka_share_sink::KafkaShareConsumerConfig;
    /// // Records of about 10 KiB, a 16 MiB bound: about 1,600 held at once.
    /// let config = KafkaShareConsumerConfig::new("127.0.0.1:9092", "orders-sink")
    ///     .acquisition_max_bytes(16 << 20);
    /// # let _ = config;
    /// ```
    pub fn acquisition_max_bytes(mut self, bytes: usize) -> Self {
        self.acquisition_max_bytes = bytes.max(1);
        self
    }

    /// `share.acquire.mode` (default [`ShareAcquireMode::BatchOptimized`]); with
    /// [`ShareAcquireMode::RecordLimit`], `max.poll.records` is strict and
    /// [`prefetch_records`](Self::prefetch_records) is ignored.
    pub fn share_acquire_mode(mut self, mode: ShareAcquireMode) -> Self {
        self.share_acquire_mode = mode;
        self
    }

    /// How often the share group's delivery-count limit and dead-letter queue are read again
    /// (default 5 minutes, Java's `metadata.max.age.ms`), so that a change an operator makes
    /// is seen while the consumer runs; at least 100 ms. They are read first by
    /// [`connect`](super::KafkaShareConsumer::connect) (see
    /// [`ShareConsumer::delivery_count_limit`](crate::ShareConsumer::delivery_count_limit)).
    pub fn group_config_refresh(mut self, interval: Duration) -> Self {
        self.group_config_refresh = interval;
        self
    }

    /// `security.protocol` with its TLS and SASL settings (default `PLAINTEXT`), for every
    /// connection of the consumer: bootstrap, group coordinator and partition leaders.
    ///
    /// ```
    /// use kafka_share_sink::{KafkaShareConsumerConfig, SaslSettings, Security, TlsSettings};
    /// let config = KafkaShareConsumerConfig::new("broker1:9096", "orders-sink").security(
    ///     Security::sasl_ssl(
    ///         SaslSettings::scram_sha512("alice", "alice-secret"),
    ///         TlsSettings::ca_pem_file("/etc/kafka/ca.pem"),
    ///     ),
    /// );
    /// assert!(!format!("{config:?}").contains("alice-secret"));
    /// ```
    pub fn security(mut self, security: Security) -> Self {
        self.security = security;
        self
    }

    /// `share.acknowledgement.mode` (default explicit here; Java's default is implicit).
    pub fn acknowledgement_mode(mut self, mode: AcknowledgementMode) -> Self {
        self.acknowledgement_mode = mode;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_too_long_for_the_clock_are_capped() {
        let config = KafkaShareConsumerConfig::new("k:9092", "g")
            .request_timeout(Duration::MAX)
            .connect_timeout(Duration::MAX);
        // The consumer bounds a fetch by the request timeout plus the poll's wait (at most
        // about a year): that sum must fit, and so must a deadline that far ahead.
        let a_year = Duration::from_secs(365 * 86_400);
        for timeout in [config.request_timeout, config.connect_timeout] {
            assert_eq!(timeout, FAR_FUTURE);
            let longest = timeout.checked_add(a_year).expect("fits a Duration");
            assert!(tokio::time::Instant::now().checked_add(longest).is_some());
        }
        let config = config.request_timeout(Duration::from_secs(7));
        assert_eq!(config.request_timeout, Duration::from_secs(7));
    }

    #[test]
    fn the_reconnect_backoff_defaults_to_javas_and_its_maximum_is_at_least_the_initial() {
        let config = KafkaShareConsumerConfig::new("k:9092", "g");
        assert_eq!(
            config.reconnect_backoff,
            ReconnectBackoff {
                initial: Duration::from_millis(50),
                max: Duration::from_secs(1),
            }
        );
        let config = config.reconnect_backoff(Duration::from_millis(300), Duration::ZERO);
        assert_eq!(config.reconnect_backoff.max, Duration::from_millis(300));
        let config = config.reconnect_backoff(Duration::MAX, Duration::MAX);
        assert_eq!(config.reconnect_backoff.max, FAR_FUTURE);
    }
}
