//! [`KafkaShareConsumer`]: the [`ShareConsumer`] that talks to a real Kafka cluster.
//!
//! The consumer itself only keeps the records of the last poll and their acknowledgements
//! ([`InFlightBatch`]). Everything that talks to brokers runs in two background tasks: the
//! membership heartbeat ([`membership`]) and the fetch engine
//! ([`engine`](crate::kafka::engine)), which owns the share sessions, the connections to the
//! partition leaders and every acknowledgement once handed over.

pub(crate) mod config;
pub(crate) mod membership;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kafka_protocol::messages::{ApiKey, ShareAcknowledgeRequest, ShareFetchRequest};
use kafka_protocol::protocol::Message;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use self::config::KafkaShareConsumerConfig;
use self::membership::Membership;
use crate::consumer::in_flight::{InFlightBatch, PartitionAcks};
use crate::consumer::{
    AcknowledgeType, AcknowledgementMode, CommitResults, ConsumerError, GroupMetadata,
    PendingCommit, ShareConsumer,
};
use crate::kafka::engine::{Command, EngineConfig, EngineHandle};
use crate::kafka::net::bootstrap::Bootstrap;
use crate::kafka::net::connection::ConnectionConfig;
use crate::kafka::session::acks::{AckRange, RENEW};
use crate::record::{ConsumerRecord, RecordId, TopicPartition};
use crate::time::deadline_after;

/// Acknowledgements of the application, as ranges per partition.
fn to_ranges(acks: Vec<PartitionAcks>) -> Vec<(TopicPartition, Vec<AckRange>)> {
    acks.into_iter()
        .map(|PartitionAcks { partition, acks }| {
            let mut ranges: Vec<AckRange> = Vec::with_capacity(acks.len());
            for (offset, ack) in acks {
                let code = ack.wire_code();
                match ranges.last_mut() {
                    Some(last) if last.code == code && last.last.checked_add(1) == Some(offset) => {
                        last.last = offset;
                    }
                    _ => ranges.push(AckRange::one(offset, code)),
                }
            }
            (partition, ranges)
        })
        .collect()
}

/// A share consumer of a Kafka 4.1+ cluster (KIP-932), over `kafka-protocol` and tokio.
///
/// Membership runs on its own connection and task; a fetch engine task holds a connection
/// and a share session per partition leader. Acknowledgements ride on the next ShareFetch or
/// go in a ShareAcknowledge on commit; `close` sends the final ones with session epoch -1,
/// which releases everything else this member holds, then leaves the group.
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
/// [`KafkaShareConsumerConfig::fetch_max_bytes`]).
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
    news: watch::Receiver<u64>,
    subscription: Vec<String>,
    batch: InFlightBatch,
    /// Outcomes a poll received (while waiting for a RENEW), for the next commit.
    unreported: CommitResults,
    /// The brokers take ShareAcknowledge v2, so RENEW works.
    renew_supported: bool,
    /// The records of the last poll, to present renewed ones again.
    last_records: Vec<ConsumerRecord>,
    /// Renewed records to present again by the next poll.
    to_present: Vec<RecordId>,
    /// The outcome of the RENEW a poll sent, awaited before presenting the records again.
    renew_answer: Option<oneshot::Receiver<CommitResults>>,
    /// Partitions whose acknowledgements failed in the last outcome seen.
    last_ack_failures: BTreeSet<TopicPartition>,
    closed: bool,
}

impl KafkaShareConsumer {
    /// Connects to the cluster and checks that it speaks the share-group protocol. The group
    /// is joined on [`subscribe`](ShareConsumer::subscribe). Starts the fetch engine task,
    /// so it needs a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the connection attempt; nothing else is started.
    pub async fn connect(config: KafkaShareConsumerConfig) -> Result<Self, ConsumerError> {
        if config.group_id.trim().is_empty() {
            return Err(ConsumerError::Config {
                key: "group.id".to_owned(),
                reason: "a share consumer needs a non-empty group id".to_owned(),
            });
        }
        let connection_config = ConnectionConfig {
            client_id: Arc::from(config.client_id.as_str()),
            connect_timeout: config.connect_timeout,
            request_timeout: config.request_timeout,
            ..ConnectionConfig::default()
        };
        let bootstrap =
            Arc::new(Bootstrap::connect(&config.bootstrap, connection_config.clone()).await?);
        let first = bootstrap.get().await?;
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
                return Err(ConsumerError::Unsupported {
                    broker: first.broker().to_owned(),
                    api: "share groups",
                    wanted: format!(
                        "(feature share.version is {}; enable it with kafka-features.sh upgrade --feature share.version=1)",
                        level.unwrap_or(0)
                    ),
                });
            }
            _ => {}
        }
        let renew_supported = first
            .api_range(ApiKey::ShareAcknowledge)
            .is_some_and(|(_, max)| max >= 2);
        let membership = Membership::new(&config.group_id, Arc::clone(&bootstrap));
        let engine = EngineHandle::spawn(
            EngineConfig {
                group_id: config.group_id.clone(),
                member_id: membership.member_id().to_owned(),
                max_poll_records: config.max_poll_records,
                fetch_min_bytes: config.fetch_min_bytes,
                fetch_max_bytes: config.fetch_max_bytes,
                fetch_max_wait: config.fetch_max_wait,
                request_timeout: config.request_timeout,
                prefetch_records: config.prefetch_records,
            },
            bootstrap,
            membership.view(),
        );
        let news = engine.mailbox.subscribe();
        Ok(Self {
            config,
            membership,
            engine,
            news,
            subscription: Vec::new(),
            batch: InFlightBatch::default(),
            unreported: CommitResults::new(),
            renew_supported,
            last_records: Vec::new(),
            to_present: Vec::new(),
            renew_answer: None,
            last_ack_failures: BTreeSet::new(),
            closed: false,
        })
    }

    fn ensure_open(&self) -> Result<(), ConsumerError> {
        if self.closed {
            Err(ConsumerError::Closed)
        } else {
            Ok(())
        }
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
    fn saw(&mut self, results: &CommitResults) {
        self.last_ack_failures = results.failures().map(|(tp, _)| tp.clone()).collect();
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
                !lost.contains(&TopicPartition::new(
                    Arc::clone(r.topic_arc()),
                    r.partition(),
                )) && renewed.iter().any(|id| {
                    id.offset() == r.offset()
                        && id.partition() == r.partition()
                        && id.topic() == r.topic()
                })
            })
            .cloned()
            .collect()
    }

    /// Hands records to the application: they become the batch to acknowledge.
    fn present(&mut self, records: Vec<ConsumerRecord>) -> Vec<ConsumerRecord> {
        self.batch.reset(&records);
        if self.renew_supported && !self.implicit() {
            self.last_records.clone_from(&records);
        }
        records
    }
}

#[async_trait]
impl ShareConsumer for KafkaShareConsumer {
    /// # Cancel safety
    ///
    /// Cancel safe: nothing waits.
    async fn subscribe(&mut self, topics: Vec<String>) -> Result<(), ConsumerError> {
        self.ensure_open()?;
        if topics.is_empty() || topics.iter().any(|t| t.trim().is_empty()) {
            return Err(ConsumerError::InvalidSubscription {
                reason: "give one or more non-empty topic names".to_owned(),
            });
        }
        let mut topics = topics;
        topics.sort();
        topics.dedup();
        self.subscription = topics.clone();
        self.engine.send(Command::Subscribe(topics.clone()))?;
        self.membership.subscribe(topics);
        Ok(())
    }

    fn subscription(&self) -> Vec<String> {
        self.subscription.clone()
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
        if let Some(e) = self.membership.take_error() {
            return Err(e);
        }
        let deadline = deadline_after(Instant::now(), timeout);
        let implicit = self.implicit();
        if !implicit {
            if let Some(first) = self.batch.first_unacknowledged() {
                return Err(ConsumerError::UnacknowledgedRecords {
                    count: self.batch.unacknowledged(),
                    first,
                });
            }
        }
        // Hand everything over before the first `.await`.
        let renewing = self.hand_over_acks(implicit)?;
        let renewed = self.batch.renewed();
        if !renewed.is_empty() {
            // Renewed records stay with this member and are presented again, as in Java;
            // held ones stay held and are not.
            self.to_present = renewed;
        }
        if renewing {
            // Present them again only once the broker said the RENEW held.
            let (reply, answer) = oneshot::channel();
            self.engine.send(Command::Commit(reply))?;
            self.renew_answer = Some(answer);
        }
        self.batch.clear_unheld();

        if let Some(answer) = self.renew_answer.as_mut() {
            match tokio::time::timeout_at(deadline, answer).await {
                Ok(Ok(results)) => {
                    self.renew_answer = None;
                    self.saw(&results);
                    self.unreported.merge(results);
                }
                Ok(Err(_)) => {
                    self.renew_answer = None;
                    return Err(ConsumerError::Closed);
                }
                Err(_) => return Ok(Vec::new()),
            }
        }
        let again = self.renewed_again();
        if !again.is_empty() {
            return Ok(self.present(again));
        }

        loop {
            self.news.borrow_and_update();
            {
                let mut slots = self.engine.mailbox.lock();
                if !slots.records.is_empty() {
                    let records = std::mem::take(&mut slots.records);
                    slots.poll_deadline = None;
                    drop(slots);
                    return Ok(self.present(records));
                }
                if let Some(e) = slots.error.take() {
                    return Err(e);
                }
                if slots.stopped {
                    return Err(ConsumerError::Closed);
                }
                slots.wanted = true;
                slots.poll_deadline = Some(deadline);
            }
            if let Some(e) = self.membership.take_error() {
                return Err(e);
            }
            self.engine.mailbox.wake.notify_one();
            match tokio::time::timeout_at(deadline, self.news.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(ConsumerError::Closed),
                Err(_) => {
                    self.engine.mailbox.lock().poll_deadline = None;
                    return Ok(Vec::new());
                }
            }
        }
    }

    fn acknowledge_offset(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        ack: AcknowledgeType,
    ) -> Result<(), ConsumerError> {
        self.ensure_open()?;
        if self.implicit() {
            return Err(ConsumerError::ImplicitAcknowledgement);
        }
        if ack == AcknowledgeType::Renew && !self.renew_supported {
            return Err(ConsumerError::Unsupported {
                broker: format!("cluster at {}", self.config.bootstrap),
                api: "ShareAcknowledge",
                wanted: "v2, which RENEW needs (Kafka 4.2+)".to_owned(),
            });
        }
        self.batch.acknowledge(topic, partition, offset, ack)
    }

    fn hold_offset(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<(), ConsumerError> {
        self.ensure_open()?;
        if self.implicit() {
            return Err(ConsumerError::ImplicitAcknowledgement);
        }
        self.batch.hold(topic, partition, offset)
    }

    fn supports_renew(&self) -> bool {
        self.renew_supported
    }

    /// # Cancel safety
    ///
    /// Cancel safe: the acknowledgements are with the engine before the first `.await`; if
    /// the future is dropped (or times out) they are sent all the same, and their outcomes
    /// are reported by the next commit.
    async fn commit_sync(&mut self, timeout: Duration) -> Result<CommitResults, ConsumerError> {
        self.ensure_open()?;
        let implicit = self.implicit();
        self.hand_over_acks(implicit)?;
        let (reply, answer) = oneshot::channel();
        self.engine.send(Command::Commit(reply))?;
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(results)) => {
                self.saw(&results);
                let mut all = std::mem::take(&mut self.unreported);
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
        Ok(PendingCommit::new(async move {
            let results = answer.await.map_err(|_| ConsumerError::Closed)?;
            earlier.merge(results);
            Ok(earlier)
        }))
    }

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
        self.hand_over_acks(false)?;
        self.batch.clear();
        let (reply, answer) = oneshot::channel();
        self.engine.send(Command::Close(reply))?;
        let work = async {
            if let Ok(results) = answer.await {
                for (tp, e) in results.failures() {
                    tracing::warn!(%tp, error = %e, "acknowledgement failed during close");
                }
            }
            self.membership.leave(timeout).await
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(ConsumerError::Timeout(timeout)),
        }
    }

    fn acquisition_lock_timeout(&self) -> Option<Duration> {
        self.engine.mailbox.lock().lock_timeout
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

#[cfg(test)]
mod broker_tests {
    use bytes::Bytes;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, ProduceResponse};

    use super::*;
    use crate::kafka::admin::KafkaAdmin;
    use crate::kafka::codec::record_batch::{Compression, EncodeOptions, NewRecord, encode_batch};

    fn bootstrap(test: &str) -> Option<String> {
        match std::env::var("KAFKA_BOOTSTRAP") {
            Ok(addr) if !addr.trim().is_empty() => Some(addr),
            _ if std::env::var("KAFKA_REQUIRE_BROKER").as_deref() == Ok("1") => {
                panic!("{test}: KAFKA_REQUIRE_BROKER=1 but KAFKA_BOOTSTRAP is not set")
            }
            _ => {
                eprintln!("SKIPPED {test}: no broker (run ./scripts/test.sh)");
                None
            }
        }
    }

    /// A fresh one-partition topic and a group reading it from the start, with `configs`.
    async fn topic_and_group(
        bootstrap: &str,
        prefix: &str,
        configs: &[(&str, &str)],
    ) -> (String, String) {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let topic = format!("{prefix}-{nanos}");
        let group = format!("{topic}-group");
        let admin = KafkaAdmin::connect(bootstrap).await.unwrap();
        admin.create_topic(&topic, 1, 1).await.unwrap();
        let mut all = vec![("share.auto.offset.reset", "earliest")];
        all.extend_from_slice(configs);
        admin.set_share_group_config(&group, &all).await.unwrap();
        (topic, group)
    }

    async fn produce(bootstrap: &str, topic: &str, batch: Bytes) {
        let conn = Connection::connect_any(bootstrap, &ConnectionConfig::default())
            .await
            .unwrap();
        produce_on(&conn, topic, batch, None).await;
    }

    async fn produce_on(conn: &Connection, topic: &str, batch: Bytes, txn: Option<&str>) {
        // v12 is the last version that names topics (v13 uses topic ids); a transactional
        // produce stays at v11 so the partition is added the classic way (AddPartitionsToTxn).
        let cap = if txn.is_some() { 11 } else { 12 };
        let version = conn
            .negotiate(ApiKey::Produce, ProduceRequest::VERSIONS)
            .unwrap()
            .min(cap);
        let request = ProduceRequest::default()
            .with_transactional_id(txn.map(|t| {
                kafka_protocol::messages::TransactionalId(StrBytes::from_string(t.to_owned()))
            }))
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partition_data(vec![
                        PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(batch)),
                    ]),
            ]);
        let response: ProduceResponse = conn
            .request(ApiKey::Produce, version, &request)
            .await
            .unwrap();
        for topic in response.responses {
            for p in topic.partition_responses {
                assert_eq!(p.error_code, 0, "produce failed: {:?}", p.error_message);
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn repeated_header_keys_and_null_header_values_arrive_intact() {
        let Some(bootstrap) = bootstrap("repeated_headers") else {
            return;
        };
        let (topic, group) = topic_and_group(&bootstrap, "repeated-headers", &[]).await;
        let headers = vec![
            ("trace".to_owned(), Some(Bytes::from_static(b"a"))),
            ("trace".to_owned(), Some(Bytes::from_static(b"b"))),
            ("gone".to_owned(), None),
            ("trace".to_owned(), Some(Bytes::new())),
        ];
        for compression in [Compression::None, Compression::Zstd] {
            let record = NewRecord {
                timestamp: 1_700_000_000_000,
                key: None,
                value: None,
                headers: headers.clone(),
            };
            let options = EncodeOptions {
                compression,
                ..EncodeOptions::default()
            };
            produce(&bootstrap, &topic, encode_batch(&[record], &options)).await;
        }
        let config = KafkaShareConsumerConfig::new(&bootstrap, &group);
        let mut consumer = KafkaShareConsumer::connect(config).await.unwrap();
        consumer.subscribe(vec![topic.clone()]).await.unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while got.len() < 2 && Instant::now() < deadline {
            let records = consumer.poll(Duration::from_millis(500)).await.unwrap();
            for r in &records {
                consumer.acknowledge(r, AcknowledgeType::Accept).unwrap();
            }
            got.extend(records);
        }
        // On failure, say where the missing record went (it flaked once on a fresh broker).
        assert_eq!(
            got.len(),
            2,
            "got offsets {:?}; unreported {:?}",
            got.iter().map(ConsumerRecord::offset).collect::<Vec<_>>(),
            consumer.unreported,
        );
        for r in &got {
            let seen: Vec<(String, Option<Bytes>)> = r
                .headers()
                .iter()
                .map(|h| (h.key().to_owned(), h.value().cloned()))
                .collect();
            assert_eq!(seen, headers, "offset {}", r.offset());
            assert_eq!((r.key(), r.value()), (None, None));
        }
        consumer.close(Duration::from_secs(10)).await.unwrap();
    }

    /// Retries a transaction call while the coordinator loads or a previous transaction ends.
    async fn txn_call<Req, Resp>(
        conn: &Connection,
        key: ApiKey,
        version: i16,
        req: &Req,
        code: impl Fn(&Resp) -> i16 + Send + Sync,
    ) -> Resp
    where
        Req: kafka_protocol::protocol::Encodable + Sync,
        Resp: kafka_protocol::protocol::Decodable + kafka_protocol::protocol::HeaderVersion + Send,
    {
        // COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS
        const RETRY: [i16; 4] = [14, 15, 16, 51];
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let response: Resp = conn.request(key, version, req).await.unwrap();
            let c = code(&response);
            if c == 0 {
                return response;
            }
            assert!(
                RETRY.contains(&c) && Instant::now() < deadline,
                "{key:?} failed with {c}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn aborted_transactions_are_not_delivered_under_read_committed() {
        use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
        use kafka_protocol::messages::{
            AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse,
            FindCoordinatorRequest, FindCoordinatorResponse, InitProducerIdRequest,
            InitProducerIdResponse, ProducerId, TransactionalId,
        };
        let Some(bootstrap) = bootstrap("read_committed") else {
            return;
        };
        let isolation = [("share.isolation.level", "read_committed")];
        let (topic, group) = topic_and_group(&bootstrap, "read-committed", &isolation).await;
        let txn_id = format!("{topic}-txn");

        let conn = Connection::connect_any(&bootstrap, &ConnectionConfig::default())
            .await
            .unwrap();
        // FindCoordinator(TRANSACTION) creates __transaction_state on first use.
        let v = conn
            .negotiate(ApiKey::FindCoordinator, FindCoordinatorRequest::VERSIONS)
            .unwrap();
        let find = FindCoordinatorRequest::default()
            .with_key_type(1)
            .with_coordinator_keys(vec![StrBytes::from_string(txn_id.clone())]);
        let found: FindCoordinatorResponse = txn_call(
            &conn,
            ApiKey::FindCoordinator,
            v,
            &find,
            |r: &FindCoordinatorResponse| r.coordinators.first().map_or(-1, |c| c.error_code),
        )
        .await;
        let c = &found.coordinators[0];
        let conn = Connection::connect(
            &format!("{}:{}", c.host, c.port),
            &ConnectionConfig::default(),
        )
        .await
        .unwrap();
        let tid = TransactionalId(StrBytes::from_string(txn_id.clone()));
        let v = conn
            .negotiate(ApiKey::InitProducerId, InitProducerIdRequest::VERSIONS)
            .unwrap()
            .min(4);
        let init = InitProducerIdRequest::default()
            .with_transactional_id(Some(tid.clone()))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        let init: InitProducerIdResponse = txn_call(
            &conn,
            ApiKey::InitProducerId,
            v,
            &init,
            |r: &InitProducerIdResponse| r.error_code,
        )
        .await;
        let (pid, epoch) = (init.producer_id, init.producer_epoch);

        let add_v = conn
            .negotiate(
                ApiKey::AddPartitionsToTxn,
                AddPartitionsToTxnRequest::VERSIONS,
            )
            .unwrap()
            .min(3);
        let end_v = conn
            .negotiate(ApiKey::EndTxn, EndTxnRequest::VERSIONS)
            .unwrap()
            .min(4);
        let mut sequence = 0;
        for (commit, label) in [(false, "aborted"), (true, "committed")] {
            let add = AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(tid.clone())
                .with_v3_and_below_producer_id(pid)
                .with_v3_and_below_producer_epoch(epoch)
                .with_v3_and_below_topics(vec![
                    AddPartitionsToTxnTopic::default()
                        .with_name(TopicName(StrBytes::from_string(topic.clone())))
                        .with_partitions(vec![0]),
                ]);
            txn_call(
                &conn,
                ApiKey::AddPartitionsToTxn,
                add_v,
                &add,
                |r: &AddPartitionsToTxnResponse| {
                    r.results_by_topic_v3_and_below
                        .iter()
                        .flat_map(|t| t.results_by_partition.iter())
                        .map(|p| p.partition_error_code)
                        .find(|c| *c != 0)
                        .unwrap_or(r.error_code)
                },
            )
            .await;
            let records: Vec<NewRecord> = (0..3)
                .map(|i| NewRecord {
                    timestamp: 1_700_000_000_000,
                    key: None,
                    value: Some(Bytes::from(format!("{label}-{i}"))),
                    headers: Vec::new(),
                })
                .collect();
            let options = EncodeOptions {
                producer_id: pid.0,
                producer_epoch: epoch,
                base_sequence: sequence,
                transactional: true,
                ..EncodeOptions::default()
            };
            sequence += 3;
            produce_on(
                &conn,
                &topic,
                encode_batch(&records, &options),
                Some(&txn_id),
            )
            .await;
            let end = EndTxnRequest::default()
                .with_transactional_id(tid.clone())
                .with_producer_id(pid)
                .with_producer_epoch(epoch)
                .with_committed(commit);
            txn_call(&conn, ApiKey::EndTxn, end_v, &end, |r: &EndTxnResponse| {
                r.error_code
            })
            .await;
        }

        let config = KafkaShareConsumerConfig::new(&bootstrap, &group);
        let mut consumer = KafkaShareConsumer::connect(config).await.unwrap();
        consumer.subscribe(vec![topic.clone()]).await.unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let records = consumer.poll(Duration::from_millis(500)).await.unwrap();
            for r in &records {
                consumer.acknowledge(r, AcknowledgeType::Accept).unwrap();
            }
            got.extend(records);
            if got.len() >= 3 {
                // Give an aborted record the chance to show up, then stop.
                let more = consumer.poll(Duration::from_secs(2)).await.unwrap();
                for r in &more {
                    consumer.acknowledge(r, AcknowledgeType::Accept).unwrap();
                }
                got.extend(more);
                break;
            }
        }
        let values: Vec<String> = got
            .iter()
            .map(|r| {
                String::from_utf8_lossy(r.value().map(|v| v.as_ref()).unwrap_or_default())
                    .into_owned()
            })
            .collect();
        assert_eq!(values, vec!["committed-0", "committed-1", "committed-2"]);
        consumer.close(Duration::from_secs(10)).await.unwrap();
    }
}
