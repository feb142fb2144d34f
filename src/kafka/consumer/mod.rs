//! [`KafkaShareConsumer`]: the [`ShareConsumer`] that talks to a real Kafka cluster.
//!
//! The consumer itself only keeps the records of the last poll and their acknowledgements
//! ([`InFlightBatch`]). Everything that talks to brokers runs in two background tasks: the
//! membership heartbeat ([`membership`]) and the fetch engine
//! ([`engine`](crate::kafka::engine)), which owns the share sessions, the connections to the
//! partition leaders and every acknowledgement once handed over.

pub(crate) mod config;
pub(crate) mod group_configs;
pub(crate) mod max_poll_records;
pub(crate) mod membership;
pub(crate) mod sharing;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kafka_protocol::messages::{ApiKey, ShareAcknowledgeRequest, ShareFetchRequest};
use kafka_protocol::protocol::Message;
use tokio::sync::oneshot;
use tokio::time::Instant;

use self::config::KafkaShareConsumerConfig;
use self::config::{AcquisitionSizing, ShareAcquireMode};
use self::group_configs::{GroupConfigWatch, Source};
use self::membership::Membership;
use crate::consumer::in_flight::{self, InFlightBatch, PartitionAcks, acknowledgements_to_batch};
use crate::consumer::{
    AcknowledgeType, AcknowledgementCommitCallback, AcknowledgementMode, BrokerDeadLetterQueue,
    CallbackSlot, CommitResults, ConsumerCapabilities, ConsumerCapability, ConsumerError,
    GroupMetadata, PendingCommit, ShareConsumer, normalize_subscription,
};
use crate::kafka::cluster::link::ClusterLink;
use crate::kafka::engine::channel::PartitionCounts;
use crate::kafka::engine::requests::RequestCounts;
use crate::kafka::engine::sizing::{SinkPace, Sizing};
use crate::kafka::engine::{Command, EngineConfig, EngineHandle};
use crate::kafka::error::{ClientError, ConnectionError, ProtocolError};
use crate::kafka::net::backoff::{ConnectionCounts, Dialer};
use crate::kafka::net::connection::ConnectionConfig;
use crate::kafka::security::SecurityContext;
use crate::kafka::session::acks::{self, AckRange, RENEW};
use crate::record::{ConsumerRecord, RecordId, TopicPartition};
use crate::time::deadline_after;
use std::collections::BTreeMap;

/// The lowest delivery-count limit a group may have (`group.share.min.delivery.count.limit`'s
/// floor): a record delivered this often may be on its last delivery when the limit is unknown.
const MIN_DELIVERY_COUNT_LIMIT: u16 = 2;

/// Acknowledgements of the application, as ranges per partition.
fn to_ranges(acks: Vec<PartitionAcks>) -> Vec<(TopicPartition, Vec<AckRange>)> {
    acks.into_iter()
        .map(|PartitionAcks { partition, runs }| {
            let mut ranges: Vec<AckRange> = runs
                .into_iter()
                .map(|run| AckRange {
                    first: run.first,
                    last: run.last,
                    code: run.ack.wire_code(),
                })
                .collect();
            // Contiguous offsets of one type become one range, as on the wire.
            acks::normalize(&mut ranges);
            (partition, ranges)
        })
        .collect()
}

/// RELEASE acknowledgements for `records`, as ranges per partition.
fn release_ranges(records: &[ConsumerRecord]) -> Vec<(TopicPartition, Vec<AckRange>)> {
    let mut by_partition: BTreeMap<TopicPartition, Vec<AckRange>> = BTreeMap::new();
    for record in records {
        let tp = TopicPartition::new(record.topic_name().clone(), record.partition());
        by_partition.entry(tp).or_default().push(AckRange::one(
            record.offset(),
            AcknowledgeType::Release.wire_code(),
        ));
    }
    by_partition
        .into_iter()
        .map(|(tp, mut ranges)| {
            acks::normalize(&mut ranges);
            (tp, ranges)
        })
        .collect()
}

/// A share consumer of a Kafka 4.1+ cluster (KIP-932), over `kafka-protocol` and tokio.
///
/// Membership runs on its own connection and task; a fetch engine task holds a connection
/// and a share session per partition leader. By default the records acquired per fetch are
/// sized to the application's measured pace and the acquisition lock, the next acquisition
/// is fetched while the application processes a batch, and a poll returns at most
/// `max.poll.records` records (see [`AcquisitionSizing`]).
/// Acknowledgements ride on the next ShareFetch or go in a ShareAcknowledge on commit (or
/// when no fetch carried them within a tenth of the lock); `close` sends the final ones with session epoch -1,
/// which releases everything else this member holds, then leaves the group.
///
/// # Authentication failures
///
/// When a broker refuses the consumer's credentials or certificate (SASL refused, a TLS
/// certificate rejected on either side, a token provider that fails), on any connection and
/// at any time (when connecting, or when an open connection authenticates again, KIP-368),
/// the consumer stops, as Java's share consumer throws its `AuthenticationException`:
///
/// - every later [`poll`](ShareConsumer::poll) and
///   [`commit_sync`](ShareConsumer::commit_sync) returns [`ConnectionError::Authentication`]
///   at once (not retriable), a waiting one included. Records already fetched are not handed
///   out: they could not be acknowledged. They, and records handed out whose
///   acknowledgements were not sent, are delivered again when their locks expire (or at once
///   when the broker closes the session); nothing is lost;
/// - no more records are acquired, and a broker is dialled again no sooner than the
///   reconnect backoff allows: `reconnect.backoff.max.ms` (default 1 s) after an
///   authentication failure (see [`KafkaShareConsumerConfig::reconnect_backoff`]); so a
///   broker sees at most one attempt per second from this consumer;
/// - [`close`](ShareConsumer::close) still completes. Build a new consumer once the
///   credentials are fixed.
///
/// [`ShareSinkTask`](crate::ShareSinkTask) stops on it (see its
/// [`iteration`](crate::ShareSinkTask::iteration)).
///
/// # Cancel safety
///
/// Every async method may be dropped at any `.await` (a `select!` with a shutdown signal, a
/// timeout wrapper) without losing anything:
///
/// - acknowledgements are handed to the engine before the first `.await`; a dropped
///   [`poll`](ShareConsumer::poll) or [`commit_sync`](ShareConsumer::commit_sync) leaves them
///   to be sent, and their outcomes are reported by the next commit;
/// - records the engine acquired for a poll that gave up or was dropped are handed to the
///   next poll, so no delivery is spent on them;
/// - a dropped [`close`](ShareConsumer::close) still finishes in the background.
///
/// # Deadlines and memory
///
/// `poll(timeout)` returns by its deadline (plus the time to hand over records already
/// fetched) whatever the brokers do: requests run in the engine with their own timeouts.
/// One ShareFetch answer is read at a time; its frame is at most 100 MiB, and the records it
/// decompresses are bounded by `fetch.max.bytes` per answer (see
/// [`KafkaShareConsumerConfig::fetch_max_bytes`]). A record is a slice of its answer, so a record
/// kept keeps its whole answer in memory. The buffer of an answer whose records are all
/// dropped is reused for a later one: each connection keeps at most two idle buffers, each the
/// size of an answer it received (answers over 32 MiB are not kept).
///
/// ```no_run
/// use std::time::Duration;
/// use kafka_share_sink::{AcknowledgeType, KafkaShareConsumer, KafkaShareConsumerConfig, ShareConsumer};
///
/// # #[tokio::main] async fn main() -> Result<(), kafka_share_sink::ConsumerError> {
/// let mut consumer = KafkaShareConsumer::connect(KafkaShareConsumerConfig::new("127.0.0.1:9092", "orders-sink")).await?;
/// consumer.subscribe(vec!["orders".into()]).await?;
/// for record in consumer.poll(Duration::from_secs(1)).await? {
///     consumer.acknowledge(&record, AcknowledgeType::Accept)?;
/// }
/// consumer.commit_sync(Duration::from_secs(30)).await?;
/// consumer.close(Duration::from_secs(30)).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct KafkaShareConsumer {
    config: KafkaShareConsumerConfig,
    membership: Membership,
    engine: EngineHandle,
    /// The group's delivery-count limit and dead-letter queue, read again in the background.
    group_configs: GroupConfigWatch,
    /// Where the group's lag is read, on connections of its own.
    lag_source: Arc<crate::lag::KafkaLagSource>,
    subscription: Vec<String>,
    batch: InFlightBatch,
    /// Outcomes a poll received (while waiting for a RENEW), for the next commit.
    unreported: CommitResults,
    /// The brokers take ShareAcknowledge v2, so RENEW works.
    renew_supported: bool,
    /// The records of the last poll, to present renewed ones again; the next poll keeps only
    /// the renewed ones ([`forget_unrenewed`](Self::forget_unrenewed)).
    last_records: Vec<ConsumerRecord>,
    /// Renewed records to present again by the next poll.
    to_present: Vec<RecordId>,
    /// The outcome of the RENEW a poll sent, awaited before presenting the records again.
    renew_answer: Option<oneshot::Receiver<CommitResults>>,
    /// When the oldest record the last poll handed out from the buffer was acquired.
    last_acquired: Option<Instant>,
    /// Partitions whose acknowledgements failed in the last outcome seen.
    last_ack_failures: BTreeSet<TopicPartition>,
    /// The acknowledgement commit callback, if set.
    callback: CallbackSlot,
    /// Outcomes `commit_async` futures received, for the callback at the next call.
    async_outcomes: Arc<Mutex<CommitResults>>,
    /// The application's time per record, measured between polls (sized acquisition).
    pace: SinkPace,
    /// When the last poll handed records out, and how many.
    handed_out: Option<(Instant, usize)>,
    closed: bool,
    /// Records given back on their last allowed delivery without a final acknowledgement
    /// (see [`ShareConsumer::given_back_at_limit`]).
    given_back_at_limit: u64,
    /// The reconnect backoff of every connection of the consumer, and its counts.
    dialer: Arc<Dialer>,
}

impl KafkaShareConsumer {
    /// Adds `records` to [`given_back_at_limit`](ShareConsumer::given_back_at_limit).
    fn add_given_back(&mut self, records: usize) {
        let records = u64::try_from(records).unwrap_or(u64::MAX);
        self.given_back_at_limit = self.given_back_at_limit.saturating_add(records);
    }

    /// The group's delivery-count limit as read, else Kafka's default.
    fn last_delivery(&self) -> u16 {
        self.group_configs
            .delivery_count_limit()
            .unwrap_or(crate::consumer::DEFAULT_DELIVERY_COUNT_LIMIT)
    }

    /// At close, before anything is awaited: the records on their last delivery the
    /// application had without a final acknowledgement (held, unacknowledged, renewed), which
    /// the session's end gives back to the group for it to archive. Added to
    /// [`given_back_at_limit`](ShareConsumer::given_back_at_limit) at once, so that a close
    /// cut short still counts them.
    fn count_unsettled_last_deliveries(&mut self) -> usize {
        let limit = self.last_delivery();
        let unsettled = self
            .batch
            .unsettled_at(limit)
            .saturating_add(self.renewed_waiting_at(limit));
        self.add_given_back(unsettled);
        unsettled
    }

    /// At close, once the engine finished what was in flight: adds to
    /// [`given_back_at_limit`](ShareConsumer::given_back_at_limit) the records on their last
    /// delivery fetched ahead and never polled (their delivery counted all the same), and says
    /// how many records on their last delivery the close gives back with the `unsettled`
    /// ones, so that it is not silent.
    fn count_last_deliveries_given_back(&mut self, unsettled: usize) {
        let limit = self.last_delivery();
        let inbox = &mut self.engine.inbox;
        inbox.drain();
        let unseen = inbox.records.count(|r| r.delivery_count() >= limit);
        self.add_given_back(unseen);
        let total = unsettled.saturating_add(unseen);
        if total > 0 {
            tracing::warn!(
                records = total,
                held_or_unacknowledged = unsettled,
                fetched_ahead = unseen,
                delivery_count_limit = limit,
                broker_dead_letter_queue = ?self.group_configs.dead_letter_queue(),
                "closing with records on their last allowed delivery and no final \
                 acknowledgement: the group archives them (into its broker dead-letter queue, \
                 if it has one)"
            );
        }
    }

    /// Connects to the cluster and checks that it speaks the share-group protocol, then reads
    /// the group's delivery-count limit and dead-letter queue (see
    /// [`delivery_count_limit`](ShareConsumer::delivery_count_limit)), which takes at most
    /// the request timeout and never fails the call. The group is joined on
    /// [`subscribe`](ShareConsumer::subscribe). Starts the fetch engine task and the task that
    /// reads the group's configs again, so it needs a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the connection attempt; nothing else is started.
    pub async fn connect(config: KafkaShareConsumerConfig) -> Result<Self, ConsumerError> {
        let max_poll_records = config.max_poll_records.get();
        if config.group_id.trim().is_empty() {
            return Err(ConsumerError::Config {
                key: "group.id".to_owned(),
                reason: "a share consumer needs a non-empty group id".to_owned(),
            });
        }
        // Certificates and keys are read here, once for every connection of the consumer.
        let security = SecurityContext::build(&config.security).map_err(|e| e.into_consumer())?;
        let connection_config = ConnectionConfig {
            client_id: Arc::from(config.client_id.as_str()),
            connect_timeout: config.connect_timeout,
            request_timeout: config.request_timeout,
            security,
            dialer: Arc::new(Dialer::new(config.reconnect_backoff)),
            ..ConnectionConfig::default()
        };
        let dialer = Arc::clone(&connection_config.dialer);
        // The engine's Metadata answers teach the link the brokers it reconnects to (before
        // the bootstrap servers).
        let link =
            Arc::new(ClusterLink::connect(&config.bootstrap, connection_config.clone()).await?);
        let first = link.connection().await?;
        first.negotiate(
            ApiKey::ShareGroupHeartbeat,
            kafka_protocol::messages::ShareGroupHeartbeatRequest::VERSIONS,
        )?;
        first.negotiate(ApiKey::ShareFetch, ShareFetchRequest::VERSIONS)?;
        first.negotiate(ApiKey::ShareAcknowledge, ShareAcknowledgeRequest::VERSIONS)?;
        // ApiVersions v3+ lists finalized features (metadata.version is always there under
        // KRaft); a cluster whose share.version is 0 has share groups turned off.
        let features_known = first.finalized_feature("metadata.version").is_some();
        match first.finalized_feature("share.version") {
            Some(level) if level >= 1 => {}
            level if features_known => {
                return Err(ConsumerError::Protocol(ProtocolError::Unsupported {
                    broker: first.broker().to_owned(),
                    api: "share groups",
                    wanted: format!(
                        "(feature share.version is {}; enable it with kafka-features.sh upgrade --feature share.version=1)",
                        level.unwrap_or(0)
                    ),
                }));
            }
            _ => {}
        }
        let renew_supported = first
            .api_range(ApiKey::ShareAcknowledge)
            .is_some_and(|(_, max)| max >= 2);
        // A dialer of its own: its connections are not the consumer's (ConnectionCounts).
        let lag_source = Arc::new(crate::lag::KafkaLagSource::new(
            link.addresses().clone(),
            ConnectionConfig {
                dialer: Arc::new(Dialer::new(config.reconnect_backoff)),
                ..connection_config.clone()
            },
        ));
        // Bounded by the request timeout; what cannot be read stays unknown.
        let group_configs = GroupConfigWatch::start(
            Source {
                addresses: link.addresses().clone(),
                config: connection_config,
                group_id: config.group_id.clone(),
            },
            config.group_config_refresh,
            config.request_timeout,
        )
        .await;
        let membership = Membership::new(&config.group_id, Arc::clone(&link));
        let engine = EngineHandle::spawn(
            EngineConfig {
                group_id: config.group_id.clone(),
                member_id: membership.member_id().to_owned(),
                max_poll_records: config.max_poll_records,
                fetch_min_bytes: config.fetch_min_bytes,
                fetch_max_bytes: config.fetch_max_bytes,
                partition_max_bytes: config.max_partition_fetch_bytes,
                fetch_max_wait: config.fetch_max_wait,
                request_timeout: config.request_timeout,
                // A strict max.poll.records fetches nothing ahead (as Java's record_limit).
                prefetch_records: match config.share_acquire_mode {
                    ShareAcquireMode::RecordLimit => 0,
                    _ => config.prefetch_records,
                },
                share_acquire_mode: config.share_acquire_mode,
                sizing: Self::sized(&config).then(|| Sizing {
                    max_poll_records: config.max_poll_records.get(),
                    max_record_locks: usize::try_from(config.max_record_locks)
                        .unwrap_or(usize::MAX),
                    max_bytes: config.acquisition_max_bytes,
                }),
            },
            link,
            membership.view(),
        );
        Ok(Self {
            config,
            membership,
            engine,
            group_configs,
            lag_source,
            subscription: Vec::new(),
            batch: InFlightBatch::default(),
            unreported: CommitResults::new(),
            renew_supported,
            last_records: Vec::new(),
            to_present: Vec::new(),
            renew_answer: None,
            last_acquired: None,
            last_ack_failures: BTreeSet::new(),
            callback: CallbackSlot::default(),
            async_outcomes: Arc::default(),
            pace: SinkPace::for_polls_of(max_poll_records),
            handed_out: None,
            closed: false,
            given_back_at_limit: 0,
            dialer,
        })
    }

    /// How many connections this consumer tried to open (bootstrap, group coordinator,
    /// partition leaders), and how many failed or were refused authentication, since
    /// [`connect`](Self::connect). After a failure a broker is dialled again no sooner than
    /// the reconnect backoff allows (see
    /// [`KafkaShareConsumerConfig::reconnect_backoff`]).
    pub fn connection_counts(&self) -> ConnectionCounts {
        self.dialer.counts()
    }

    /// The authentication error this consumer reports from now on, if a broker refused its
    /// credentials (on a connection of the fetches or of the group membership).
    fn refused(&mut self) -> Result<(), ConsumerError> {
        self.engine.inbox.drain();
        if let Some(error) = self.engine.inbox.refusal() {
            return Err(error);
        }
        match self.membership.refused() {
            Some(error @ ClientError::Connection(ConnectionError::Authentication { .. })) => {
                Err(error.into())
            }
            _ => Ok(()),
        }
    }

    /// How many ShareFetch and ShareAcknowledge requests this consumer has sent, and how its
    /// acknowledgements travelled (on fetches, or in requests of their own): a view of the
    /// round trips it costs the brokers. Acknowledgements ride on fetches unless a commit, a
    /// RENEW or `close` needs them sent, or no fetch carried them within a fraction of the
    /// acquisition lock.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), kafka_share_sink::ConsumerError> {
    /// use kafka_share_sink::{KafkaShareConsumer, KafkaShareConsumerConfig};
    /// let consumer =
    ///     KafkaShareConsumer::connect(KafkaShareConsumerConfig::new("localhost:9092", "sink")).await?;
    /// // ... poll and acknowledge ...
    /// let counts = consumer.request_counts();
    /// println!(
    ///     "{} fetches, {} acknowledgements alone",
    ///     counts.share_fetches, counts.share_acknowledges
    /// );
    /// # Ok(())
    /// # }
    /// # let _ = example;
    /// ```
    pub fn request_counts(&self) -> RequestCounts {
        self.engine.requests.snapshot()
    }

    /// Acquisition sized to the sink: the setting, except with a strict `max.poll.records`.
    fn sized(config: &KafkaShareConsumerConfig) -> bool {
        config.acquisition_sizing == AcquisitionSizing::Sized
            && config.share_acquire_mode != ShareAcquireMode::RecordLimit
    }

    /// The most records one poll hands out: `max.poll.records` when it is strict or the
    /// acquisition is sized (one acquisition then serves several polls), else what one
    /// fetch brought.
    fn poll_limit(&self) -> usize {
        if Self::sized(&self.config)
            || self.config.share_acquire_mode == ShareAcquireMode::RecordLimit
        {
            self.config.max_poll_records.get()
        } else {
            usize::MAX
        }
    }

    /// The application is done with what the last poll handed out (its acknowledgements are
    /// with the engine): notes how long that took, and tells the engine, for the sizing rule.
    fn app_done(&mut self, now: Instant) -> Result<(), ConsumerError> {
        if let Some((at, n)) = self.handed_out.take() {
            self.pace.observe(n, now.saturating_duration_since(at));
        }
        self.engine.send(Command::AppDone {
            kept: self.batch.held_partitions().collect(),
            per_record: self.pace.per_record(),
            record_locks: self.group_configs.max_record_locks(),
        })
    }

    /// Releases buffered records that waited unpolled for half their lock (or drops those
    /// whose lock has run out: they are no longer this member's), so none is handed out too
    /// late to be processed within its lock. Without an `.await`.
    fn release_stale(&mut self, now: Instant) -> Result<(), ConsumerError> {
        let (expired, stale) = {
            let inbox = &mut self.engine.inbox;
            let Some(lock) = inbox.lock_timeout().filter(|l| !l.is_zero()) else {
                return Ok(());
            };
            let Some(half) = now.checked_sub(Sizing::stale_after(lock)) else {
                return Ok(());
            };
            let expired = now
                .checked_sub(lock)
                .map(|cutoff| inbox.records.take_acquired_by(cutoff, |_| false))
                .unwrap_or_default();
            // A record on its last allowed delivery is not released: the group would archive
            // it unseen. It stays, first in line, for the next poll (the driver renews its
            // lock from its acquisition). Unknown, the limit is taken as the lowest allowed.
            let limit = self
                .group_configs
                .delivery_count_limit()
                .unwrap_or(MIN_DELIVERY_COUNT_LIMIT);
            let stale = inbox
                .records
                .take_acquired_by(half, |r| r.delivery_count() >= limit);
            (expired, stale)
        };
        if expired.is_empty() && stale.is_empty() {
            return Ok(());
        }
        if !expired.is_empty() {
            let limit = self.last_delivery();
            let at_limit = expired
                .iter()
                .filter(|r| r.delivery_count() >= limit)
                .count();
            self.add_given_back(at_limit);
            tracing::warn!(
                records = expired.len(),
                on_last_delivery = at_limit,
                "records fetched ahead waited unpolled past their acquisition lock: dropped, \
                 the group delivers them again (and archives those on their last delivery: \
                 poll more often than the acquisition lock)"
            );
        }
        if !stale.is_empty() {
            tracing::warn!(
                records = stale.len(),
                "records fetched ahead waited unpolled for half their acquisition lock: \
                 released to be delivered again rather than handed out this late"
            );
            // The release goes first: the engine sees them unsettled before it sees them
            // leave the buffer.
            self.engine
                .send(Command::Acknowledge(release_ranges(&stale)))?;
        }
        let mut gone = PartitionCounts::of(&expired);
        gone.extend(&PartitionCounts::of(&stale));
        self.engine.send(Command::Dropped(gone))
    }

    fn ensure_open(&self) -> Result<(), ConsumerError> {
        in_flight::ensure_open(self.closed)
    }

    /// See [`in_flight::check_acknowledgement`].
    fn check_acknowledgement(&self, ack: AcknowledgeType) -> Result<(), ConsumerError> {
        in_flight::check_acknowledgement(self.closed, self.config.acknowledgement_mode, ack, || {
            (!self.renew_supported).then(|| ProtocolError::Unsupported {
                broker: format!("cluster at {}", self.config.bootstrap),
                api: "ShareAcknowledge",
                wanted: "v2, which RENEW needs (Kafka 4.2+)".to_owned(),
            })
        })
    }

    fn implicit(&self) -> bool {
        self.config.acknowledgement_mode == AcknowledgementMode::Implicit
    }

    /// Hands every acknowledgement not yet sent to the engine. Returns whether one is a
    /// RENEW. No `.await`: once this returns, the engine owns them.
    fn hand_over_acks(&mut self, accept_unacknowledged: bool) -> Result<bool, ConsumerError> {
        let acks = to_ranges(self.batch.take_unsent(accept_unacknowledged));
        if acks.is_empty() {
            return Ok(false);
        }
        let renew = acks
            .iter()
            .any(|(_, ranges)| ranges.iter().any(|r| r.code == RENEW));
        self.engine.send(Command::Acknowledge(acks))?;
        Ok(renew)
    }

    /// Notes which partitions failed in outcomes that pass through here.
    /// Gives `fresh` outcomes to the acknowledgement commit callback, if any.
    fn notify(&mut self, fresh: &CommitResults) {
        self.callback.call(fresh);
    }

    /// Outcomes the engine set aside for the callback, and those `commit_async` futures
    /// received: the first are given to the callback and returned (for the commit that
    /// reports them), the second only given to the callback (their future reported them).
    /// Without a callback, outcomes set aside for one that was since removed are returned.
    fn take_settled(&mut self) -> CommitResults {
        self.engine.inbox.drain();
        let settled = self.engine.inbox.take_settled();
        if !self.callback.is_set() {
            return settled;
        }
        let resolved = std::mem::take(
            &mut *self
                .async_outcomes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        self.notify(&resolved);
        self.notify(&settled);
        settled
    }

    fn saw(&mut self, results: &CommitResults) {
        self.last_ack_failures = results.failures().map(|(tp, _)| tp.clone()).collect();
    }

    /// Keeps of the last poll's records only those to present again. A record is a slice of
    /// the ShareFetch answer it came in, so one kept record keeps that whole answer in memory:
    /// an application that dropped its records must not have their answers held for it while
    /// the next poll waits for the next answer.
    fn forget_unrenewed(&mut self) {
        if self.to_present.is_empty() {
            self.last_records.clear();
            return;
        }
        let keep = &self.to_present;
        self.last_records
            .retain(|r| keep.iter().any(|id| names(id, r)));
    }

    /// How many renewed records waiting to be presented again (out of the batch since the
    /// poll that took their RENEW) are on delivery `limit` or later.
    fn renewed_waiting_at(&self, limit: u16) -> usize {
        self.last_records
            .iter()
            .filter(|r| {
                r.delivery_count() >= limit && self.to_present.iter().any(|id| names(id, r))
            })
            .count()
    }

    /// The renewed records of the last poll that are still ours, to present again.
    fn renewed_again(&mut self) -> Vec<ConsumerRecord> {
        let renewed = std::mem::take(&mut self.to_present);
        if renewed.is_empty() {
            return Vec::new();
        }
        let lost = &self.last_ack_failures;
        self.last_records
            .iter()
            .filter(|r| {
                !lost.contains(&r.topic_partition()) && renewed.iter().any(|id| names(id, r))
            })
            .cloned()
            .collect()
    }

    /// Hands records to the application: they become the batch to acknowledge.
    fn present(&mut self, records: Vec<ConsumerRecord>) -> Vec<ConsumerRecord> {
        self.handed_out = Some((Instant::now(), records.len()));
        self.batch.reset(&records);
        if self.renew_supported && !self.implicit() {
            self.last_records.clone_from(&records);
        }
        records
    }
}

/// Whether `id` names `record` (no allocation, unlike comparing with `record.id()`).
fn names(id: &RecordId, record: &ConsumerRecord) -> bool {
    id.offset() == record.offset()
        && id.partition() == record.partition()
        && id.topic() == record.topic()
}

#[async_trait]
impl ShareConsumer for KafkaShareConsumer {
    /// # Cancel safety
    ///
    /// Cancel safe: nothing waits.
    async fn subscribe(&mut self, topics: Vec<String>) -> Result<(), ConsumerError> {
        self.ensure_open()?;
        if topics.is_empty() {
            return self.unsubscribe().await;
        }
        let topics = normalize_subscription(topics)?;
        self.subscription = topics.clone();
        self.engine.send(Command::Subscribe(topics.clone()))?;
        self.membership.subscribe(topics);
        Ok(())
    }

    fn subscription(&self) -> Vec<String> {
        self.subscription.clone()
    }

    /// Hands the acknowledgements made so far to the engine (the next commit reports their
    /// outcome), closes every share session with the final epoch (which releases the other
    /// records held, and drops records fetched but not yet polled), and leaves the group,
    /// within the request timeout; what could not be done in time is logged at WARN, and the
    /// records concerned come back when their locks expire. `subscribe` rejoins.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped, the subscription is gone, the sessions are closed in the
    /// background and the member may stay in the group until its session times out.
    async fn unsubscribe(&mut self) -> Result<(), ConsumerError> {
        self.ensure_open()?;
        if self.subscription.is_empty() {
            return Ok(());
        }
        self.hand_over_acks(false)?;
        self.batch.clear();
        self.last_records.clear();
        self.to_present.clear();
        self.renew_answer = None;
        self.subscription.clear();
        let (reply, answer) = oneshot::channel();
        self.engine.send(Command::Unsubscribe(reply))?;
        let timeout = self.config.request_timeout;
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(results)) => {
                self.notify(&results);
                let settled = self.take_settled();
                self.unreported.merge(settled);
                self.unreported.merge(results);
            }
            Ok(Err(_)) => return Err(ConsumerError::Closed),
            Err(_) => tracing::warn!(
                ?timeout,
                "unsubscribe: the share sessions did not close in time; the records held \
                 come back when their locks expire"
            ),
        }
        if let Err(error) = self.membership.leave(timeout).await {
            tracing::warn!(%error, "unsubscribe could not leave the share group");
        }
        Ok(())
    }

    /// Returns by `timeout` (plus the time to hand over records already fetched), whatever
    /// the brokers do.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. The acknowledgements it was to send are already with the engine when it
    /// first waits; records fetched for it after it was dropped are returned by the next
    /// poll.
    async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ConsumerError> {
        self.ensure_open()?;
        if self.subscription.is_empty() {
            return Err(ConsumerError::NotSubscribed);
        }
        self.refused()?;
        if let Some(e) = self.membership.take_error() {
            return Err(e.into());
        }
        let deadline = deadline_after(Instant::now(), timeout);
        self.last_acquired = None;
        let implicit = self.implicit();
        if !implicit {
            self.batch.ensure_acknowledged()?;
        }
        // Hand everything over before the first `.await`.
        let renewing = self.hand_over_acks(implicit)?;
        let renewed = self.batch.renewed();
        if !renewed.is_empty() {
            // Renewed records stay with this member and are presented again, as in Java;
            // held ones stay held and are not.
            self.to_present = renewed;
        }
        self.forget_unrenewed();
        // Before anything can fail: a renewed record is either in `to_present` or in the
        // batch, never both (a close counts each).
        self.batch.clear_unheld();
        if renewing {
            // Present them again only once the broker said the RENEW held.
            let (reply, answer) = oneshot::channel();
            self.engine.send(Command::Commit(reply))?;
            self.renew_answer = Some(answer);
        }
        let now = Instant::now();
        self.app_done(now)?;
        self.engine.inbox.drain();
        self.release_stale(now)?;

        if let Some(answer) = self.renew_answer.as_mut() {
            match tokio::time::timeout_at(deadline, answer).await {
                Ok(Ok(results)) => {
                    self.renew_answer = None;
                    self.saw(&results);
                    self.notify(&results);
                    self.unreported.merge(results);
                }
                Ok(Err(_)) => {
                    self.renew_answer = None;
                    return Err(ConsumerError::Closed);
                }
                Err(_) => return Ok(Vec::new()),
            }
        }
        let settled = self.take_settled();
        self.unreported.merge(settled);
        let again = self.renewed_again();
        if !again.is_empty() {
            self.engine
                .send(Command::PresentedAgain(PartitionCounts::of(&again)))?;
            return Ok(self.present(again));
        }

        // Whether the engine was told this poll waits (it is told once).
        let mut waiting = false;
        loop {
            let limit = self.poll_limit();
            let inbox = &mut self.engine.inbox;
            inbox.drain();
            if let Some(e) = inbox.refusal() {
                // Records acquired over connections that can no longer acknowledge them are
                // not handed out: they come back when their locks expire.
                if waiting {
                    self.engine.send(Command::GaveUp)?;
                }
                return Err(e);
            }
            if !inbox.records.is_empty() {
                // With a strict max.poll.records (a broker before 4.2 acquired whole
                // batches) or a sized acquisition, the rest waits, acquired, for the next
                // polls.
                let acquired = inbox.records.oldest();
                let records = inbox.records.take(limit);
                // Out of the buffer, they are the application's: a failed send means the
                // engine stopped, and their acknowledgements report that.
                let _ = self
                    .engine
                    .send(Command::HandedOut(PartitionCounts::of(&records)));
                self.last_acquired = acquired;
                return Ok(self.present(records));
            }
            if let Some(e) = inbox.take_error() {
                self.engine.send(Command::ErrorTaken)?;
                if waiting {
                    self.engine.send(Command::GaveUp)?;
                }
                return Err(e);
            }
            if inbox.stopped() {
                return Err(ConsumerError::Closed);
            }
            if let Some(e) = self.membership.take_error() {
                if waiting {
                    self.engine.send(Command::GaveUp)?;
                }
                return Err(e.into());
            }
            if !waiting {
                self.engine.send(Command::Want { deadline })?;
                waiting = true;
            }
            if tokio::time::timeout_at(deadline, self.engine.inbox.next())
                .await
                .is_err()
            {
                self.engine.send(Command::GaveUp)?;
                return Ok(Vec::new());
            }
        }
    }

    acknowledgements_to_batch!();

    fn supports_renew(&self) -> bool {
        self.renew_supported
    }

    /// Hold, unsubscribe and the commit callback; RENEW when the cluster has it (Kafka 4.2+:
    /// ShareAcknowledge v2, as found at connection). Not the transactional acknowledgements
    /// of KIP-1289, whose wire format is not final.
    fn capabilities(&self) -> ConsumerCapabilities {
        ConsumerCapabilities::none()
            .with(ConsumerCapability::Hold)
            .with(ConsumerCapability::Unsubscribe)
            .with(ConsumerCapability::CommitCallback)
            .with_if(ConsumerCapability::Renew, self.renew_supported)
    }

    /// # Cancel safety
    ///
    /// Cancel safe: the acknowledgements are with the engine before the first `.await`; if
    /// the future is dropped (or times out) they are sent all the same, and their outcomes
    /// are reported by the next commit.
    ///
    /// Once a broker refused this consumer's credentials it returns
    /// [`ConnectionError::Authentication`] at once, also while it waits for the answers.
    async fn commit_sync(&mut self, timeout: Duration) -> Result<CommitResults, ConsumerError> {
        self.ensure_open()?;
        let implicit = self.implicit();
        self.hand_over_acks(implicit)?;
        self.refused()?;
        let (reply, mut answer) = oneshot::channel();
        self.engine.send(Command::Commit(reply))?;
        let deadline = deadline_after(Instant::now(), timeout);
        let outcome = loop {
            let watching = !self.engine.inbox.stopped();
            tokio::select! {
                result = &mut answer => break Ok(result),
                () = self.engine.inbox.next(), if watching => {
                    // A refusal met while the acknowledgements are on their way: dropped,
                    // the answer's outcomes wait for the next commit.
                    self.refused()?;
                }
                () = tokio::time::sleep_until(deadline) => break Err(()),
            }
        };
        match outcome {
            Ok(Ok(results)) => {
                self.saw(&results);
                self.notify(&results);
                let mut all = std::mem::take(&mut self.unreported);
                all.merge(self.take_settled());
                all.merge(results);
                Ok(all)
            }
            Ok(Err(_)) => Err(ConsumerError::Closed),
            Err(_) => Err(ConsumerError::Timeout(timeout)),
        }
    }

    /// Hands the pending acknowledgements to the engine and returns at once. The returned
    /// future resolves with the per-partition outcomes; if it is dropped, the next commit
    /// reports them.
    fn commit_async(&mut self) -> Result<PendingCommit, ConsumerError> {
        self.ensure_open()?;
        let implicit = self.implicit();
        self.hand_over_acks(implicit)?;
        let (reply, answer) = oneshot::channel();
        self.engine.send(Command::Commit(reply))?;
        let mut earlier = std::mem::take(&mut self.unreported);
        earlier.merge(self.take_settled());
        // With a callback, the outcomes this future receives reach it at the next call.
        let for_callback = self
            .callback
            .is_set()
            .then(|| Arc::clone(&self.async_outcomes));
        Ok(PendingCommit::new(async move {
            let results = answer.await.map_err(|_| ConsumerError::Closed)?;
            if let Some(slot) = for_callback {
                slot.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .merge(results.clone());
            }
            earlier.merge(results);
            Ok(earlier)
        }))
    }

    /// Like Java's `close`, this completes even when the cluster cannot be reached or the
    /// time runs out: what could not be done is logged at WARN, and `Ok` is returned. The
    /// records this consumer held then come back to the group when the broker sees its
    /// connections close (Kafka 4.2+ releases a closed session's records at once) or, at the
    /// latest, when their locks expire. Records fetched ahead and never polled go back so too,
    /// their delivery counted. Those on their last allowed delivery, held, unacknowledged or
    /// never polled, are archived by the group: their number is logged at WARN and added to
    /// [`given_back_at_limit`](ShareConsumer::given_back_at_limit). Every connection the
    /// consumer opened is closed before this returns, except fetch connections still waiting
    /// for an answer after a timeout, which close within the request timeout.
    ///
    /// # Cancel safety
    ///
    /// The consumer is closed once this is called. If the future is dropped, the engine still
    /// sends the final acknowledgements (which release everything else this member holds);
    /// leaving the group is then left to the broker's session timeout.
    async fn close(&mut self, timeout: Duration) -> Result<(), ConsumerError> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        self.group_configs.stop();
        let unsettled = self.count_unsettled_last_deliveries();
        let handed = self.hand_over_acks(false);
        self.batch.clear();
        let (reply, answer) = oneshot::channel();
        let sent = handed.and_then(|_| self.engine.send(Command::Close(reply)));
        let mut closing_outcomes = None;
        let work = async {
            if let Err(e) = sent {
                // The engine is gone (it only stops when the consumer does): nothing to send.
                tracing::warn!(error = %e, "close could not hand the last acknowledgements over");
            } else if let Ok(results) = answer.await {
                for (tp, e) in results.failures() {
                    tracing::warn!(%tp, error = %e, "acknowledgement failed during close");
                }
                closing_outcomes = Some(results);
            }
            self.membership.leave(timeout).await
        };
        let outcome = tokio::time::timeout(timeout, work).await;
        // With what fetches in flight brought before the engine's answer.
        self.count_last_deliveries_given_back(unsettled);
        // Also when the leave was cut short by the timeout.
        self.membership.close_connections();
        self.take_settled();
        if let Some(results) = closing_outcomes {
            self.notify(&results);
        }
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(
                error = %error,
                "close could not leave the share group; the broker releases this member's records \
                 when it sees the connection close or their locks expire"
            ),
            Err(_) => tracing::warn!(
                ?timeout,
                "close did not finish in time; the broker releases this member's records when it \
                 sees the connection close or their locks expire"
            ),
        }
        Ok(())
    }

    /// Outcomes of acknowledgements that rode on a fetch reach the callback at the next
    /// call of this consumer after their answer; the outcomes a `commit_async` future
    /// receives reach it at the next call after the future completes.
    fn set_acknowledgement_commit_callback(
        &mut self,
        callback: Option<AcknowledgementCommitCallback>,
    ) -> Result<(), ConsumerError> {
        self.ensure_open()?;
        let collect = callback.is_some();
        if !collect {
            // What was set aside for the old callback goes to the next commit instead (and so
            // does what the engine sets aside before it is told).
            self.engine.inbox.drain();
            let settled = self.engine.inbox.take_settled();
            self.unreported.merge(settled);
        }
        self.callback.set(callback);
        self.engine.send(Command::Collect(collect))
    }

    fn acquisition_lock_timeout(&self) -> Option<Duration> {
        self.engine.inbox.lock_timeout()
    }

    /// When the oldest record of the last poll was acquired, when it waited in the buffer
    /// (fetched ahead); `None` for records acquired during the poll or presented again.
    fn last_poll_acquired_at(&self) -> Option<Instant> {
        self.last_acquired
    }

    /// The group's `share.delivery.count.limit` (Kafka 4.3+; a 4.4 broker answers with its
    /// own `group.share.delivery.count.limit` when the group sets none), else a broker's
    /// `group.share.delivery.count.limit` (4.1, 4.2), else
    /// [`DEFAULT_DELIVERY_COUNT_LIMIT`](crate::DEFAULT_DELIVERY_COUNT_LIMIT). Read with
    /// DescribeConfigs at [`connect`](Self::connect) and again every
    /// [`group_config_refresh`](KafkaShareConsumerConfig::group_config_refresh); `None` until
    /// a read succeeds (no permission to describe the group, an older broker, a timeout). A
    /// failed read later keeps the last value read.
    fn delivery_count_limit(&self) -> Option<u16> {
        self.group_configs.delivery_count_limit()
    }

    fn given_back_at_limit(&self) -> u64 {
        self.given_back_at_limit
    }

    /// The group's `errors.deadletterqueue.topic.name` and
    /// `errors.deadletterqueue.copy.record.enable` (Kafka 4.4), read like
    /// [`delivery_count_limit`](ShareConsumer::delivery_count_limit).
    /// [`BrokerDeadLetterQueue::None`] when the group names no topic, and also when it names
    /// one the broker will not write to (`share.version` below 2, a topic without
    /// `errors.deadletterqueue.group.enable=true`, a missing topic the cluster does not create,
    /// a name without the cluster's `errors.deadletterqueue.topic.name.prefix`), which is
    /// logged as a warning with the reason.
    fn broker_dead_letter_queue(&self) -> BrokerDeadLetterQueue {
        self.group_configs.dead_letter_queue()
    }

    fn lag_source(&self) -> Option<Arc<dyn crate::lag::LagSource>> {
        Some(Arc::clone(&self.lag_source) as Arc<dyn crate::lag::LagSource>)
    }

    fn group_metadata(&self) -> GroupMetadata {
        let epoch = if self.closed {
            -1
        } else {
            self.membership.epoch()
        };
        GroupMetadata::new(&self.config.group_id, self.membership.member_id(), epoch)
    }

    fn acknowledgement_mode(&self) -> AcknowledgementMode {
        self.config.acknowledgement_mode
    }
}

/// Against the real broker (`scripts/test.sh`): what only this crate's own codec can produce.
#[cfg(test)]
mod broker_tests;
