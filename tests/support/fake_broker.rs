//! A scriptable fake Kafka broker for integration tests: a tokio TCP server on `127.0.0.1`
//! that speaks enough of the protocol to drive the crate's clients, and misbehaves on cue.
//!
//! Include it with `#[path = "support/fake_broker.rs"] mod fake_broker;`.
//!
//! # What it answers by itself
//!
//! One node (id 1, at its own address) leads every partition of every topic.
//!
//! - **ApiVersions** (v0–v4): the advertised APIs ([`FakeBroker::advertise`]), by default
//!   ApiVersions, Metadata, FindCoordinator, CreateTopics, DeleteTopics,
//!   IncrementalAlterConfigs, ShareGroupHeartbeat v1, ShareFetch v1–v2 and ShareAcknowledge
//!   v1–v2, and from v3 the finalized features `metadata.version` and `share.version`=1
//!   ([`FakeBroker::set_feature`]).
//! - **Metadata**: the topics of [`FakeBroker::add_topic`] and CreateTopics, with topic ids;
//!   others are UNKNOWN_TOPIC_OR_PARTITION.
//! - **FindCoordinator**: this node, for every key.
//! - **ShareGroupHeartbeat**: joins (epoch 0 → 1), keeps each member's subscription, assigns
//!   every partition of the subscribed topics that exist to every member (share groups may
//!   share partitions), sends the assignment when it changes (bumping the epoch), and answers
//!   a leave (epoch -1) with epoch -1.
//! - **CreateTopics**, **DeleteTopics**: change the topics (TOPIC_ALREADY_EXISTS,
//!   UNKNOWN_TOPIC_OR_PARTITION as a broker would). **IncrementalAlterConfigs**: success for
//!   each resource, and its SET and DELETE operations change the configs of the resource.
//! - **DescribeConfigs** (v1–v4, *not advertised by default*: call
//!   [`FakeBroker::describe_configs`]): the configs of each resource, as IncrementalAlterConfigs
//!   and [`FakeBroker::set_config`] left them (only the keys asked for, when the request names
//!   keys), with source GROUP_CONFIG, TOPIC_CONFIG or STATIC_BROKER_CONFIG; an unknown topic is
//!   UNKNOWN_TOPIC_OR_PARTITION and a broker other than this node INVALID_REQUEST, as a real
//!   broker answers. A topic made by CreateTopics keeps the configs it was created with.
//! - **InitProducerId**, **Produce**, **AddPartitionsToTxn** (v0–v3), **EndTxn** (*not
//!   advertised by default*: [`FakeBroker::advertise`] them): a new producer id 4000 with
//!   epoch 0, or the same id with the next epoch when the request names one; every
//!   partition written at base offset 0 (no offsets are kept); every partition added;
//!   the transaction ended (v5+: with the next epoch).
//! - **ShareFetch**: holds the request for its `MaxWaitMs` (at most 5 s), then answers every
//!   requested partition with no records and no error. **ShareAcknowledge**: no error for
//!   every partition.
//!
//! Any other API closes the connection (after recording the request).
//!
//! Like a real broker, a connection is served in order: the next request is read only after
//! the previous one was answered, so a delayed or missing answer holds up the connection.
//!
//! # Scripting
//!
//! [`FakeBroker::on`] replaces the answer to an API key with a handler `Fn(&Request) -> Reply`;
//! [`FakeBroker::once`] queues a handler for the next request of that key only (queued ones
//! go first); [`FakeBroker::reset`] restores the default. A [`Reply`] is the default answer,
//! a body of your own behind a correct header (hostile counts), raw bytes written as they are
//! (hostile frames), a delay before another reply, no answer at all, a closed connection, or
//! a garbled (truncated) default answer.
//!
//! Every request is recorded ([`FakeBroker::requests`], [`FakeBroker::count`],
//! [`FakeBroker::wait_for`]) with its decoded header and raw body; [`Request::decode`] decodes
//! any body kafka-protocol knows, and [`Request::share_fetch`] /
//! [`Request::share_acknowledge`] also decode v2 of those two, which kafka-protocol lacks.

#![allow(dead_code, reason = "each test binary uses part of the fake broker")]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey};
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::share_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse,
    InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse, ProducerId,
};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, CreateTopicsRequest,
    CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse, DescribeConfigsRequest,
    DescribeConfigsResponse, FindCoordinatorRequest, FindCoordinatorResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, MetadataRequest,
    MetadataResponse, RequestHeader, ResponseHeader, ShareAcknowledgeRequest,
    ShareAcknowledgeResponse, ShareFetchRequest, ShareFetchResponse, ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse, TopicName, share_acknowledge_response, share_fetch_response,
};
use kafka_protocol::protocol::{
    Decodable, Encodable, Message, StrBytes, decode_request_header_from_buffer,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;
use uuid::Uuid;

/// The node id of the fake broker.
pub(crate) const NODE_ID: i32 = 1;

/// The largest request frame the fake broker reads; a larger one closes the connection.
const MAX_REQUEST_BYTES: usize = 16 << 20;

/// The longest a ShareFetch is held by default, whatever its `MaxWaitMs`.
const MAX_FETCH_HOLD: Duration = Duration::from_secs(5);

/// The acquisition lock timeout the default ShareFetch and ShareAcknowledge answers report.
pub(crate) const LOCK_TIMEOUT_MS: i32 = 30_000;

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const TOPIC_ALREADY_EXISTS: i16 = 36;
const INVALID_PARTITIONS: i16 = 37;
const INVALID_REQUEST: i16 = 42;

/// Config resource types (DescribeConfigs, IncrementalAlterConfigs).
pub(crate) const RESOURCE_TOPIC: i8 = 2;
pub(crate) const RESOURCE_BROKER: i8 = 4;
pub(crate) const RESOURCE_GROUP: i8 = 32;

/// DescribeConfigs config sources.
const SOURCE_TOPIC_CONFIG: i8 = 1;
const SOURCE_STATIC_BROKER_CONFIG: i8 = 4;
const SOURCE_GROUP_CONFIG: i8 = 8;

/// What the fake broker does with one request.
pub(crate) enum Reply {
    /// What the fake broker answers by itself (see the module docs).
    Default,
    /// A correct response header (length, correlation id, the API's header version), then
    /// these bytes as the body.
    Body(Bytes),
    /// These bytes, written to the socket as they are: no length, no header.
    Raw(Bytes),
    /// Waits, then does the other reply.
    Delay(Duration, Box<Reply>),
    /// Never answers; the connection stays open and, served in order, answers nothing more.
    Never,
    /// Closes the connection without answering.
    Close,
    /// The default answer cut in half: a frame that frames fine but does not decode.
    Garbled,
}

impl Reply {
    /// The default answer after `delay`.
    pub(crate) fn late(delay: Duration) -> Self {
        Self::Delay(delay, Box::new(Self::Default))
    }

    /// A typed response encoded at `version` as the body.
    ///
    /// # Panics
    ///
    /// When `response` cannot be encoded at `version` (a bug in the test).
    pub(crate) fn message<R: Encodable>(response: &R, version: i16) -> Self {
        Self::Body(encode(response, version).expect("the test's response encodes"))
    }

    /// A ShareFetch response, for v1 or v2 requests alike (the two bodies are identical).
    pub(crate) fn share_fetch(response: &ShareFetchResponse) -> Self {
        Self::message(response, 1)
    }

    /// A ShareFetch answer acquiring the records at `offsets` of partition 0 of `topic_id`
    /// (built by [`record_batch`], first delivery); an empty range acquires nothing.
    pub(crate) fn share_fetch_acquired(topic_id: Uuid, offsets: std::ops::Range<i64>) -> Self {
        Self::share_fetch_partitions(topic_id, vec![acquired_partition(0, offsets)])
    }

    /// A ShareFetch answer of `partitions` of `topic_id`, with the fake broker's lock timeout.
    pub(crate) fn share_fetch_partitions(
        topic_id: Uuid,
        partitions: Vec<share_fetch_response::PartitionData>,
    ) -> Self {
        Self::share_fetch(
            &ShareFetchResponse::default()
                .with_acquisition_lock_timeout_ms(LOCK_TIMEOUT_MS)
                .with_responses(vec![
                    share_fetch_response::ShareFetchableTopicResponse::default()
                        .with_topic_id(topic_id)
                        .with_partitions(partitions),
                ]),
        )
    }

    /// A ShareAcknowledge response for a request of `version`; v2 also carries
    /// `lock_timeout_ms` (`AcquisitionLockTimeoutMs`), which kafka-protocol cannot encode.
    ///
    /// # Panics
    ///
    /// When `response` cannot be encoded (a bug in the test).
    pub(crate) fn share_acknowledge(
        response: &ShareAcknowledgeResponse,
        version: i16,
        lock_timeout_ms: i32,
    ) -> Self {
        Self::Body(
            encode_share_acknowledge(response, version, lock_timeout_ms)
                .expect("the test's response encodes"),
        )
    }
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Default => f.write_str("Default"),
            Self::Body(b) => write!(f, "Body({} bytes)", b.len()),
            Self::Raw(b) => write!(f, "Raw({} bytes)", b.len()),
            Self::Delay(d, r) => write!(f, "Delay({d:?}, {r:?})"),
            Self::Never => f.write_str("Never"),
            Self::Close => f.write_str("Close"),
            Self::Garbled => f.write_str("Garbled"),
        }
    }
}

/// A request as the fake broker received it.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    /// Which accepted connection it came on, counting from 0.
    pub(crate) connection: u64,
    /// The decoded request header.
    pub(crate) header: RequestHeader,
    /// The body, after the header.
    pub(crate) body: Bytes,
    /// When it was read.
    pub(crate) at: Instant,
}

/// A ShareFetch request body of v1 or v2.
#[derive(Debug, Clone)]
pub(crate) struct ShareFetchBody {
    /// Every field v1 has.
    pub(crate) request: ShareFetchRequest,
    /// `ShareAcquireMode` (v2; 0 for v1).
    pub(crate) share_acquire_mode: i8,
    /// `IsRenewAck` (v2; false for v1).
    pub(crate) is_renew_ack: bool,
}

/// A ShareAcknowledge request body of v1 or v2.
#[derive(Debug, Clone)]
pub(crate) struct ShareAcknowledgeBody {
    /// Every field v1 has.
    pub(crate) request: ShareAcknowledgeRequest,
    /// `IsRenewAck` (v2; false for v1).
    pub(crate) is_renew_ack: bool,
}

impl Request {
    /// The API key as sent.
    pub(crate) fn api_key(&self) -> i16 {
        self.header.request_api_key
    }

    /// Whether this is a request of `api`.
    pub(crate) fn is(&self, api: ApiKey) -> bool {
        self.api_key() == api as i16
    }

    /// The request's API version.
    pub(crate) fn version(&self) -> i16 {
        self.header.request_api_version
    }

    /// The body decoded as `R` at the request's version.
    pub(crate) fn decode<R: Decodable>(&self) -> anyhow::Result<R> {
        R::decode(&mut self.body.clone(), self.version())
    }

    /// The body of a ShareFetch v1 or v2. kafka-protocol decodes v1 only; v2 is v1 with
    /// `ShareAcquireMode` (i8) and `IsRenewAck` (bool) after `BatchSize`.
    pub(crate) fn share_fetch(&self) -> anyhow::Result<ShareFetchBody> {
        anyhow::ensure!(self.is(ApiKey::ShareFetch), "not a ShareFetch request");
        if self.version() < 2 {
            return Ok(ShareFetchBody {
                request: self.decode()?,
                share_acquire_mode: 0,
                is_renew_ack: false,
            });
        }
        // GroupId, MemberId, then six int32s up to BatchSize.
        let at = compact_strings_len(&self.body, 2)? + 6 * 4;
        let (v1, extra) = without(&self.body, at, 2)?;
        Ok(ShareFetchBody {
            request: ShareFetchRequest::decode(&mut v1.clone(), 1)?,
            share_acquire_mode: i8::from_be_bytes([extra[0]]),
            is_renew_ack: extra[1] != 0,
        })
    }

    /// The acknowledgements a ShareFetch or ShareAcknowledge request carries (none for any
    /// other request): first and last offset, and the types, batch by batch.
    ///
    /// # Panics
    ///
    /// When the request's body does not decode (the crate sent a broken request).
    pub(crate) fn acknowledgement_batches(&self) -> Vec<(i64, i64, Vec<i8>)> {
        // The topics of both requests have the same shape, in two types.
        macro_rules! batches {
            ($topics:expr) => {
                $topics
                    .iter()
                    .flat_map(|t| t.partitions.iter())
                    .flat_map(|p| p.acknowledgement_batches.iter())
                    .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()))
                    .collect()
            };
        }
        if self.is(ApiKey::ShareFetch) {
            let body = self.share_fetch().expect("ShareFetch decodes");
            batches!(body.request.topics)
        } else if self.is(ApiKey::ShareAcknowledge) {
            let body = self.share_acknowledge().expect("ShareAcknowledge decodes");
            batches!(body.request.topics)
        } else {
            Vec::new()
        }
    }

    /// The body of a ShareAcknowledge v1 or v2. v2 is v1 with `IsRenewAck` (bool) after
    /// `ShareSessionEpoch`.
    pub(crate) fn share_acknowledge(&self) -> anyhow::Result<ShareAcknowledgeBody> {
        anyhow::ensure!(
            self.is(ApiKey::ShareAcknowledge),
            "not a ShareAcknowledge request"
        );
        if self.version() < 2 {
            return Ok(ShareAcknowledgeBody {
                request: self.decode()?,
                is_renew_ack: false,
            });
        }
        let at = compact_strings_len(&self.body, 2)? + 4;
        let (v1, extra) = without(&self.body, at, 1)?;
        Ok(ShareAcknowledgeBody {
            request: ShareAcknowledgeRequest::decode(&mut v1.clone(), 1)?,
            is_renew_ack: extra[0] != 0,
        })
    }
}

/// A handler of requests of one API key.
type Handler = Arc<dyn Fn(&Request) -> Reply + Send + Sync>;

/// The handlers of one API key.
#[derive(Default)]
struct Script {
    /// One-shot handlers, first in first used.
    once: VecDeque<Handler>,
    /// The handler of every other request, instead of the default.
    always: Option<Handler>,
}

/// A topic of the fake cluster.
#[derive(Debug, Clone)]
struct Topic {
    id: Uuid,
    partitions: i32,
}

/// A share-group member as the fake coordinator knows it.
#[derive(Debug, Default)]
struct Member {
    epoch: i32,
    subscription: Vec<String>,
    /// The assignment last sent.
    sent: Option<Vec<(Uuid, Vec<i32>)>>,
}

/// The fake cluster and the script.
struct State {
    apis: BTreeMap<i16, (i16, i16)>,
    features: BTreeMap<String, i16>,
    topics: BTreeMap<String, Topic>,
    /// Configs by (resource type, resource name).
    configs: BTreeMap<(i8, String), BTreeMap<String, String>>,
    members: HashMap<String, Member>,
    heartbeat_interval: Duration,
    scripts: HashMap<i16, Script>,
    requests: Vec<Request>,
}

/// What the server tasks share with the [`FakeBroker`].
struct Inner {
    host: String,
    port: u16,
    state: Mutex<State>,
    /// The number of requests received so far; wakes [`FakeBroker::wait_for`].
    received: watch::Sender<usize>,
    /// The connection tasks, stopped on drop or [`FakeBroker::disconnect_all`].
    connections: Mutex<Vec<AbortHandle>>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A fake broker listening on `127.0.0.1`; stops (closing every connection) when dropped.
pub(crate) struct FakeBroker {
    inner: Arc<Inner>,
    accept: JoinHandle<()>,
}

impl std::fmt::Debug for FakeBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeBroker")
            .field("addr", &self.addr())
            .finish_non_exhaustive()
    }
}

impl Drop for FakeBroker {
    fn drop(&mut self) {
        self.accept.abort();
        self.disconnect_all();
    }
}

impl FakeBroker {
    /// Starts a fake broker on a free loopback port.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub(crate) async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let local = listener.local_addr().expect("local address");
        let mut apis = BTreeMap::new();
        for (key, range) in [
            (ApiKey::ApiVersions, ApiVersionsRequest::VERSIONS),
            (ApiKey::Metadata, MetadataRequest::VERSIONS),
            (ApiKey::FindCoordinator, FindCoordinatorRequest::VERSIONS),
            (ApiKey::CreateTopics, CreateTopicsRequest::VERSIONS),
            (ApiKey::DeleteTopics, DeleteTopicsRequest::VERSIONS),
            (
                ApiKey::IncrementalAlterConfigs,
                IncrementalAlterConfigsRequest::VERSIONS,
            ),
            (
                ApiKey::ShareGroupHeartbeat,
                ShareGroupHeartbeatRequest::VERSIONS,
            ),
        ] {
            apis.insert(key as i16, (range.min, range.max));
        }
        apis.insert(ApiKey::ShareFetch as i16, (1, 2));
        apis.insert(ApiKey::ShareAcknowledge as i16, (1, 2));
        let features = BTreeMap::from([
            ("metadata.version".to_owned(), 27),
            ("share.version".to_owned(), 1),
        ]);
        let inner = Arc::new(Inner {
            host: local.ip().to_string(),
            port: local.port(),
            state: Mutex::new(State {
                apis,
                features,
                topics: BTreeMap::new(),
                configs: BTreeMap::new(),
                members: HashMap::new(),
                heartbeat_interval: Duration::from_secs(1),
                scripts: HashMap::new(),
                requests: Vec::new(),
            }),
            received: watch::Sender::new(0),
            connections: Mutex::new(Vec::new()),
        });
        let accept = tokio::spawn(accept_loop(Arc::clone(&inner), listener));
        Self { inner, accept }
    }

    /// `127.0.0.1:port`, the bootstrap address.
    pub(crate) fn addr(&self) -> String {
        format!("{}:{}", self.inner.host, self.inner.port)
    }

    /// Adds a topic (or replaces its partition count) and returns its id.
    pub(crate) fn add_topic(&self, name: &str, partitions: i32) -> Uuid {
        let mut state = self.inner.lock();
        let topic = state.topics.entry(name.to_owned()).or_insert(Topic {
            id: Uuid::new_v4(),
            partitions,
        });
        topic.partitions = partitions;
        topic.id
    }

    /// The id of a topic, if it exists.
    pub(crate) fn topic_id(&self, name: &str) -> Option<Uuid> {
        self.inner.lock().topics.get(name).map(|t| t.id)
    }

    /// Advertises `api` in ApiVersions with these versions (it is still answered only if it
    /// has a default answer or a handler).
    pub(crate) fn advertise(&self, api: ApiKey, min: i16, max: i16) {
        self.inner.lock().apis.insert(api as i16, (min, max));
    }

    /// Advertises and answers DescribeConfigs (v1–v4), which is off by default so that the
    /// share consumer's reads of its group's configs leave the other tests' traffic alone.
    pub(crate) fn describe_configs(&self) {
        self.advertise(
            ApiKey::DescribeConfigs,
            DescribeConfigsRequest::VERSIONS.min,
            DescribeConfigsRequest::VERSIONS.max,
        );
    }

    /// Sets (`Some`) or removes (`None`) config `key` of a resource: `resource_type` is
    /// [`RESOURCE_GROUP`], [`RESOURCE_TOPIC`] or [`RESOURCE_BROKER`] (name: the node id).
    pub(crate) fn set_config(&self, resource_type: i8, name: &str, key: &str, value: Option<&str>) {
        let mut state = self.inner.lock();
        let configs = state
            .configs
            .entry((resource_type, name.to_owned()))
            .or_default();
        match value {
            Some(value) => configs.insert(key.to_owned(), value.to_owned()),
            None => configs.remove(key),
        };
    }

    /// The configs of a resource, as set so far.
    pub(crate) fn configs(&self, resource_type: i8, name: &str) -> BTreeMap<String, String> {
        self.inner
            .lock()
            .configs
            .get(&(resource_type, name.to_owned()))
            .cloned()
            .unwrap_or_default()
    }

    /// Stops advertising `api`.
    pub(crate) fn withdraw(&self, api: ApiKey) {
        self.inner.lock().apis.remove(&(api as i16));
    }

    /// Sets (`Some`) or removes (`None`) a finalized feature of ApiVersions v3+.
    pub(crate) fn set_feature(&self, name: &str, level: Option<i16>) {
        let mut state = self.inner.lock();
        match level {
            Some(level) => state.features.insert(name.to_owned(), level),
            None => state.features.remove(name),
        };
    }

    /// The `HeartbeatIntervalMs` of ShareGroupHeartbeat answers (default 1 s).
    pub(crate) fn set_heartbeat_interval(&self, interval: Duration) {
        self.inner.lock().heartbeat_interval = interval;
    }

    /// Answers every request of `api` with `handler` instead of the default.
    pub(crate) fn on(
        &self,
        api: ApiKey,
        handler: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) {
        self.inner
            .lock()
            .scripts
            .entry(api as i16)
            .or_default()
            .always = Some(Arc::new(handler));
    }

    /// Answers the next request of `api` with `handler` (after those queued before).
    pub(crate) fn once(
        &self,
        api: ApiKey,
        handler: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) {
        self.inner
            .lock()
            .scripts
            .entry(api as i16)
            .or_default()
            .once
            .push_back(Arc::new(handler));
    }

    /// Drops the handlers of `api`: the default answers again.
    pub(crate) fn reset(&self, api: ApiKey) {
        self.inner.lock().scripts.remove(&(api as i16));
    }

    /// Every request received so far, in order.
    pub(crate) fn requests(&self) -> Vec<Request> {
        self.inner.lock().requests.clone()
    }

    /// The requests of `api` received so far, in order.
    pub(crate) fn requests_of(&self, api: ApiKey) -> Vec<Request> {
        self.inner
            .lock()
            .requests
            .iter()
            .filter(|r| r.is(api))
            .cloned()
            .collect()
    }

    /// How many requests of `api` arrived so far.
    pub(crate) fn count(&self, api: ApiKey) -> usize {
        self.inner
            .lock()
            .requests
            .iter()
            .filter(|r| r.is(api))
            .count()
    }

    /// Waits until `n` requests of `api` have arrived and returns them all.
    ///
    /// # Panics
    ///
    /// When fewer than `n` arrived within `timeout`, naming the API and the count.
    pub(crate) async fn wait_for(&self, api: ApiKey, n: usize, timeout: Duration) -> Vec<Request> {
        let deadline = Instant::now() + timeout;
        let mut received = self.inner.received.subscribe();
        loop {
            let requests = self.requests_of(api);
            if requests.len() >= n {
                return requests;
            }
            if tokio::time::timeout_at(deadline, received.changed())
                .await
                .is_err()
            {
                panic!(
                    "the fake broker got {} {api:?} request(s) within {timeout:?}, {n} expected",
                    requests.len()
                );
            }
        }
    }

    /// How many connections were accepted so far.
    pub(crate) fn connections(&self) -> usize {
        self.inner
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// How many accepted connections are still open (their client has not closed them).
    pub(crate) fn open_connections(&self) -> usize {
        self.inner
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|task| !task.is_finished())
            .count()
    }

    /// Closes every open connection (new ones are still accepted), as a broker restart would.
    pub(crate) fn disconnect_all(&self) {
        for task in self
            .inner
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            task.abort();
        }
    }
}

/// Accepts connections and serves each on its own task.
async fn accept_loop(inner: Arc<Inner>, listener: TcpListener) {
    let mut next = 0;
    while let Ok((stream, _)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        let task = tokio::spawn(serve(Arc::clone(&inner), stream, next));
        inner
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(task.abort_handle());
        next += 1;
    }
}

/// What to do with the connection after a reply.
enum Next {
    Continue,
    Close,
    Hang,
}

/// Serves one connection, one request at a time, until EOF, an error or a `Close`.
async fn serve(inner: Arc<Inner>, mut stream: TcpStream, connection: u64) {
    let mut hung = false;
    while let Some(request) = read_request(&mut stream, connection).await {
        let handler = {
            let mut state = inner.lock();
            state.requests.push(request.clone());
            let script = state.scripts.get_mut(&request.api_key());
            script.and_then(|s| s.once.pop_front().or_else(|| s.always.clone()))
        };
        inner.received.send_modify(|n| *n += 1);
        if hung {
            continue;
        }
        let reply = handler.map_or(Reply::Default, |handler| handler(&request));
        match respond(&inner, &mut stream, &request, reply).await {
            Next::Continue => {}
            Next::Close => return,
            Next::Hang => hung = true,
        }
    }
}

/// Reads one request frame; `None` on EOF, a read error or a frame it will not read.
async fn read_request(stream: &mut TcpStream, connection: u64) -> Option<Request> {
    let len = usize::try_from(stream.read_i32().await.ok()?).ok()?;
    if !(8..=MAX_REQUEST_BYTES).contains(&len) {
        eprintln!("fake broker: request frame of {len} bytes, closing the connection");
        return None;
    }
    let mut frame = vec![0; len];
    stream.read_exact(&mut frame).await.ok()?;
    let mut frame = Bytes::from(frame);
    let raw = frame.clone();
    match decode_request_header_from_buffer(&mut frame) {
        Ok(header) => Some(Request {
            connection,
            header,
            body: frame,
            at: Instant::now(),
        }),
        Err(error) => {
            // An API key kafka-protocol does not know: keep what the header surely has.
            let mut raw = raw;
            let header = RequestHeader::default()
                .with_request_api_key(raw.get_i16())
                .with_request_api_version(raw.get_i16())
                .with_correlation_id(raw.get_i32());
            eprintln!("fake broker: cannot decode a request header ({error:#})");
            Some(Request {
                connection,
                header,
                body: Bytes::new(),
                at: Instant::now(),
            })
        }
    }
}

/// Carries out `reply` to `request`.
async fn respond(
    inner: &Inner,
    stream: &mut TcpStream,
    request: &Request,
    mut reply: Reply,
) -> Next {
    while let Reply::Delay(delay, then) = reply {
        tokio::time::sleep(delay).await;
        reply = *then;
    }
    let body = match reply {
        Reply::Delay(..) => unreachable!("unwrapped above"),
        Reply::Never => return Next::Hang,
        Reply::Close => return Next::Close,
        Reply::Raw(bytes) => {
            return match stream.write_all(&bytes).await {
                Ok(()) => Next::Continue,
                Err(_) => Next::Close,
            };
        }
        Reply::Body(body) => body,
        Reply::Default | Reply::Garbled => {
            let garbled = matches!(reply, Reply::Garbled);
            let (body, hold) = match default_answer(inner, request) {
                Ok(Some(answer)) => answer,
                Ok(None) => {
                    eprintln!(
                        "fake broker: no default answer to API key {} v{}, closing the connection",
                        request.api_key(),
                        request.version()
                    );
                    return Next::Close;
                }
                Err(error) => {
                    eprintln!(
                        "fake broker: cannot answer API key {} v{} ({error:#}), closing the connection",
                        request.api_key(),
                        request.version()
                    );
                    return Next::Close;
                }
            };
            tokio::time::sleep(hold).await;
            if garbled {
                body.slice(..body.len() / 2)
            } else {
                body
            }
        }
    };
    let Some(frame) = response_frame(request, &body) else {
        return Next::Close;
    };
    match stream.write_all(&frame).await {
        Ok(()) => Next::Continue,
        Err(_) => Next::Close,
    }
}

/// Length, response header (the API's header version for the request's version), body.
fn response_frame(request: &Request, body: &[u8]) -> Option<Bytes> {
    let header_version = ApiKey::try_from(request.api_key())
        .map_or(0, |key| key.response_header_version(request.version()));
    let mut frame = BytesMut::new();
    frame.put_i32(0);
    ResponseHeader::default()
        .with_correlation_id(request.header.correlation_id)
        .encode(&mut frame, header_version)
        .ok()?;
    frame.extend_from_slice(body);
    let len = i32::try_from(frame.len() - 4).ok()?;
    frame[..4].copy_from_slice(&len.to_be_bytes());
    Some(frame.freeze())
}

/// Encodes a message at `version`.
fn encode<R: Encodable>(message: &R, version: i16) -> anyhow::Result<Bytes> {
    let mut body = BytesMut::new();
    message.encode(&mut body, version)?;
    Ok(body.freeze())
}

/// The default answer's body and how long to hold it; `None` for an API without one.
fn default_answer(inner: &Inner, request: &Request) -> anyhow::Result<Option<(Bytes, Duration)>> {
    let Ok(key) = ApiKey::try_from(request.api_key()) else {
        return Ok(None);
    };
    let version = request.version();
    let now = |body: anyhow::Result<Bytes>| body.map(|b| Some((b, Duration::ZERO)));
    match key {
        ApiKey::ApiVersions => now(encode(&api_versions(inner, version), version)),
        ApiKey::Metadata => now(encode(
            &metadata(inner, &request.decode()?, version),
            version,
        )),
        ApiKey::FindCoordinator => now(encode(
            &find_coordinator(inner, &request.decode()?, version),
            version,
        )),
        ApiKey::ShareGroupHeartbeat => now(encode(&heartbeat(inner, &request.decode()?), version)),
        ApiKey::CreateTopics => now(encode(&create_topics(inner, &request.decode()?), version)),
        ApiKey::DeleteTopics => now(encode(
            &delete_topics(inner, &request.decode()?, version),
            version,
        )),
        ApiKey::IncrementalAlterConfigs => {
            now(encode(&alter_configs(inner, &request.decode()?), version))
        }
        ApiKey::DescribeConfigs => now(encode(
            &describe_configs(inner, &request.decode()?),
            version,
        )),
        ApiKey::ShareFetch => {
            let body = request.share_fetch()?;
            let hold = Duration::from_millis(u64::try_from(body.request.max_wait_ms).unwrap_or(0))
                .min(MAX_FETCH_HOLD);
            let response = share_fetch(inner, &body.request);
            Ok(Some((encode(&response, 1)?, hold)))
        }
        ApiKey::ShareAcknowledge => {
            let body = request.share_acknowledge()?;
            let response = share_acknowledge(inner, &body.request);
            now(encode_share_acknowledge(
                &response,
                version,
                LOCK_TIMEOUT_MS,
            ))
        }
        ApiKey::InitProducerId => {
            let request: InitProducerIdRequest = request.decode()?;
            let (id, epoch) = if request.producer_id.0 < 0 {
                (4000, 0)
            } else {
                (
                    request.producer_id.0,
                    request.producer_epoch.saturating_add(1),
                )
            };
            now(encode(
                &InitProducerIdResponse::default()
                    .with_producer_id(ProducerId(id))
                    .with_producer_epoch(epoch),
                version,
            ))
        }
        ApiKey::Produce => {
            let request: ProduceRequest = request.decode()?;
            let responses = request
                .topic_data
                .iter()
                .map(|t| {
                    TopicProduceResponse::default()
                        .with_name(t.name.clone())
                        .with_topic_id(t.topic_id)
                        .with_partition_responses(
                            t.partition_data
                                .iter()
                                .map(|p| {
                                    PartitionProduceResponse::default()
                                        .with_index(p.index)
                                        .with_log_append_time_ms(-1)
                                })
                                .collect(),
                        )
                })
                .collect();
            now(encode(
                &ProduceResponse::default().with_responses(responses),
                version,
            ))
        }
        ApiKey::AddPartitionsToTxn if version <= 3 => {
            let request: AddPartitionsToTxnRequest = request.decode()?;
            let results = request
                .v3_and_below_topics
                .iter()
                .map(|t| {
                    AddPartitionsToTxnTopicResult::default()
                        .with_name(t.name.clone())
                        .with_results_by_partition(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    AddPartitionsToTxnPartitionResult::default()
                                        .with_partition_index(*p)
                                })
                                .collect(),
                        )
                })
                .collect();
            now(encode(
                &AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results),
                version,
            ))
        }
        ApiKey::EndTxn => {
            let request: EndTxnRequest = request.decode()?;
            now(encode(
                &EndTxnResponse::default()
                    .with_producer_id(request.producer_id)
                    .with_producer_epoch(request.producer_epoch.saturating_add(1)),
                version,
            ))
        }
        _ => Ok(None),
    }
}

/// Partition `index` of a ShareFetch answer acquiring the records at `offsets` (built by
/// [`record_batch`], first delivery); an empty range acquires nothing.
pub(crate) fn acquired_partition(
    index: i32,
    offsets: std::ops::Range<i64>,
) -> share_fetch_response::PartitionData {
    let partition = share_fetch_response::PartitionData::default().with_partition_index(index);
    if offsets.is_empty() {
        return partition;
    }
    partition
        .with_records(Some(record_batch(offsets.clone())))
        .with_acquired_records(vec![
            share_fetch_response::AcquiredRecords::default()
                .with_first_offset(offsets.start)
                .with_last_offset(offsets.end - 1)
                .with_delivery_count(1),
        ])
}

/// A record batch (v2, uncompressed) of the records at `offsets`, each valued `v{offset}`,
/// for scripted ShareFetch answers.
pub(crate) fn record_batch(offsets: std::ops::Range<i64>) -> Bytes {
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let records: Vec<Record> = offsets
        .map(|offset| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset,
            sequence: i32::try_from(offset).expect("small"),
            timestamp: 1_000,
            key: None,
            value: Some(Bytes::from(format!("v{offset}"))),
            headers: Default::default(),
        })
        .collect();
    let mut buf = bytes::BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("batch");
    buf.freeze()
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn api_versions(inner: &Inner, version: i16) -> ApiVersionsResponse {
    let state = inner.lock();
    let mut response = ApiVersionsResponse::default().with_api_keys(
        state
            .apis
            .iter()
            .map(|(key, (min, max))| {
                ApiVersion::default()
                    .with_api_key(*key)
                    .with_min_version(*min)
                    .with_max_version(*max)
            })
            .collect(),
    );
    if version >= 3 {
        response = response
            .with_finalized_features_epoch(1)
            .with_finalized_features(
                state
                    .features
                    .iter()
                    .map(|(name, level)| {
                        FinalizedFeatureKey::default()
                            .with_name(str_bytes(name))
                            .with_min_version_level(*level)
                            .with_max_version_level(*level)
                    })
                    .collect(),
            );
    }
    response
}

fn metadata(inner: &Inner, request: &MetadataRequest, version: i16) -> MetadataResponse {
    let state = inner.lock();
    let names: Vec<Option<String>> = match &request.topics {
        None => state.topics.keys().cloned().map(Some).collect(),
        Some(topics) => topics
            .iter()
            .map(|t| {
                t.name.as_ref().map(|n| n.0.to_string()).or_else(|| {
                    // By id (v10+).
                    state
                        .topics
                        .iter()
                        .find(|(_, topic)| topic.id == t.topic_id)
                        .map(|(name, _)| name.clone())
                })
            })
            .collect(),
    };
    let topics = names
        .into_iter()
        .map(|name| {
            let known = name.as_ref().and_then(|n| state.topics.get(n));
            let entry = MetadataResponseTopic::default()
                .with_name(name.as_deref().map(|n| TopicName(str_bytes(n))));
            match known {
                None => entry.with_error_code(UNKNOWN_TOPIC_OR_PARTITION),
                Some(topic) => entry
                    .with_topic_id(if version >= 10 { topic.id } else { Uuid::nil() })
                    .with_partitions(
                        (0..topic.partitions)
                            .map(|p| {
                                MetadataResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_leader_id(BrokerId(NODE_ID))
                                    .with_replica_nodes(vec![BrokerId(NODE_ID)])
                                    .with_isr_nodes(vec![BrokerId(NODE_ID)])
                            })
                            .collect(),
                    ),
            }
        })
        .collect();
    MetadataResponse::default()
        .with_brokers(vec![
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(NODE_ID))
                .with_host(str_bytes(&inner.host))
                .with_port(i32::from(inner.port)),
        ])
        .with_cluster_id((version >= 2).then(|| str_bytes("fake-cluster")))
        .with_controller_id(BrokerId(NODE_ID))
        .with_topics(topics)
}

fn find_coordinator(
    inner: &Inner,
    request: &FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    let host = str_bytes(&inner.host);
    let port = i32::from(inner.port);
    if version >= 4 {
        FindCoordinatorResponse::default().with_coordinators(
            request
                .coordinator_keys
                .iter()
                .map(|key| {
                    Coordinator::default()
                        .with_key(key.clone())
                        .with_node_id(BrokerId(NODE_ID))
                        .with_host(host.clone())
                        .with_port(port)
                })
                .collect(),
        )
    } else {
        FindCoordinatorResponse::default()
            .with_node_id(BrokerId(NODE_ID))
            .with_host(host)
            .with_port(port)
    }
}

fn heartbeat(inner: &Inner, request: &ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse {
    let mut state = inner.lock();
    let interval = i32::try_from(state.heartbeat_interval.as_millis()).unwrap_or(i32::MAX);
    let member_id = request.member_id.to_string();
    let response = ShareGroupHeartbeatResponse::default()
        .with_member_id(Some(request.member_id.clone()))
        .with_heartbeat_interval_ms(interval);
    if request.member_epoch == -1 {
        state.members.remove(&member_id);
        return response.with_member_epoch(-1);
    }
    let topics = state.topics.clone();
    let member = state.members.entry(member_id).or_default();
    if request.member_epoch == 0 {
        *member = Member {
            epoch: 1,
            ..Member::default()
        };
    }
    if let Some(names) = &request.subscribed_topic_names {
        member.subscription = names.iter().map(|n| n.0.to_string()).collect();
    }
    let assignment: Vec<(Uuid, Vec<i32>)> = member
        .subscription
        .iter()
        .filter_map(|name| topics.get(name))
        .map(|topic| (topic.id, (0..topic.partitions).collect()))
        .collect();
    let changed = member.sent.as_ref() != Some(&assignment);
    if changed {
        if member.sent.is_some() {
            member.epoch += 1;
        }
        member.sent = Some(assignment.clone());
    }
    let response = response.with_member_epoch(member.epoch);
    if !changed {
        return response;
    }
    response.with_assignment(Some(
        Assignment::default().with_topic_partitions(
            assignment
                .into_iter()
                .map(|(id, partitions)| {
                    TopicPartitions::default()
                        .with_topic_id(id)
                        .with_partitions(partitions)
                })
                .collect(),
        ),
    ))
}

fn create_topics(inner: &Inner, request: &CreateTopicsRequest) -> CreateTopicsResponse {
    let mut state = inner.lock();
    let results = request
        .topics
        .iter()
        .map(|topic| {
            let name = topic.name.0.to_string();
            let partitions = if topic.num_partitions == -1 {
                i32::try_from(topic.assignments.len()).unwrap_or(i32::MAX)
            } else {
                topic.num_partitions
            };
            let result = CreatableTopicResult::default()
                .with_name(topic.name.clone())
                .with_num_partitions(partitions)
                .with_replication_factor(1);
            if state.topics.contains_key(&name) {
                return result
                    .with_error_code(TOPIC_ALREADY_EXISTS)
                    .with_error_message(Some(str_bytes(&format!(
                        "Topic '{name}' already exists."
                    ))));
            }
            if partitions < 1 {
                return result.with_error_code(INVALID_PARTITIONS);
            }
            let id = Uuid::new_v4();
            if !request.validate_only {
                let configs = topic
                    .configs
                    .iter()
                    .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
                    .collect();
                state
                    .configs
                    .insert((RESOURCE_TOPIC, name.clone()), configs);
                state.topics.insert(name, Topic { id, partitions });
            }
            result.with_topic_id(id)
        })
        .collect();
    CreateTopicsResponse::default().with_topics(results)
}

fn delete_topics(
    inner: &Inner,
    request: &DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    let mut state = inner.lock();
    let names: Vec<TopicName> = if version >= 6 {
        request
            .topics
            .iter()
            .filter_map(|t| t.name.clone())
            .collect()
    } else {
        request.topic_names.clone()
    };
    let results = names
        .into_iter()
        .map(|name| {
            let removed = state.topics.remove(name.0.as_str());
            state.configs.remove(&(RESOURCE_TOPIC, name.0.to_string()));
            let result = DeletableTopicResult::default().with_name(Some(name));
            match removed {
                Some(topic) if version >= 6 => result.with_topic_id(topic.id),
                Some(_) => result,
                None => result.with_error_code(UNKNOWN_TOPIC_OR_PARTITION),
            }
        })
        .collect();
    DeleteTopicsResponse::default().with_responses(results)
}

fn alter_configs(
    inner: &Inner,
    request: &IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut state = inner.lock();
    IncrementalAlterConfigsResponse::default().with_responses(
        request
            .resources
            .iter()
            .map(|r| {
                if !request.validate_only {
                    let configs = state
                        .configs
                        .entry((r.resource_type, r.resource_name.to_string()))
                        .or_default();
                    for config in &r.configs {
                        let name = config.name.to_string();
                        // 0 SET, 1 DELETE (APPEND and SUBTRACT are for lists: left alone).
                        match (config.config_operation, &config.value) {
                            (0, Some(value)) => {
                                configs.insert(name, value.to_string());
                            }
                            (1, _) => {
                                configs.remove(&name);
                            }
                            _ => {}
                        }
                    }
                }
                AlterConfigsResourceResponse::default()
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name.clone())
            })
            .collect(),
    )
}

fn describe_configs(inner: &Inner, request: &DescribeConfigsRequest) -> DescribeConfigsResponse {
    let state = inner.lock();
    let results = request
        .resources
        .iter()
        .map(|r| {
            let name = r.resource_name.to_string();
            let result = DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            let source = match r.resource_type {
                RESOURCE_TOPIC if !state.topics.contains_key(&name) => {
                    return result.with_error_code(UNKNOWN_TOPIC_OR_PARTITION);
                }
                RESOURCE_BROKER if name != NODE_ID.to_string() => {
                    return result
                        .with_error_code(INVALID_REQUEST)
                        .with_error_message(Some(str_bytes(&format!(
                            "Unexpected broker id, expected {NODE_ID} or empty string, but received {name}"
                        ))));
                }
                RESOURCE_TOPIC => SOURCE_TOPIC_CONFIG,
                RESOURCE_BROKER => SOURCE_STATIC_BROKER_CONFIG,
                _ => SOURCE_GROUP_CONFIG,
            };
            let configs = state
                .configs
                .get(&(r.resource_type, name))
                .into_iter()
                .flatten()
                .filter(|(key, _)| {
                    r.configuration_keys
                        .as_ref()
                        .is_none_or(|keys| keys.iter().any(|k| k.as_str() == key.as_str()))
                })
                .map(|(key, value)| {
                    DescribeConfigsResourceResult::default()
                        .with_name(str_bytes(key))
                        .with_value(Some(str_bytes(value)))
                        .with_config_source(source)
                })
                .collect();
            result.with_configs(configs)
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

fn share_fetch(inner: &Inner, request: &ShareFetchRequest) -> ShareFetchResponse {
    let responses = request
        .topics
        .iter()
        .map(|topic| {
            share_fetch_response::ShareFetchableTopicResponse::default()
                .with_topic_id(topic.topic_id)
                .with_partitions(
                    topic
                        .partitions
                        .iter()
                        .map(|p| {
                            share_fetch_response::PartitionData::default()
                                .with_partition_index(p.partition_index)
                                .with_current_leader(
                                    share_fetch_response::LeaderIdAndEpoch::default()
                                        .with_leader_id(NODE_ID),
                                )
                                .with_records(Some(Bytes::new()))
                        })
                        .collect(),
                )
        })
        .collect();
    ShareFetchResponse::default()
        .with_acquisition_lock_timeout_ms(LOCK_TIMEOUT_MS)
        .with_responses(responses)
        .with_node_endpoints(vec![
            share_fetch_response::NodeEndpoint::default()
                .with_node_id(BrokerId(NODE_ID))
                .with_host(str_bytes(&inner.host))
                .with_port(i32::from(inner.port)),
        ])
}

fn share_acknowledge(inner: &Inner, request: &ShareAcknowledgeRequest) -> ShareAcknowledgeResponse {
    let responses = request
        .topics
        .iter()
        .map(|topic| {
            share_acknowledge_response::ShareAcknowledgeTopicResponse::default()
                .with_topic_id(topic.topic_id)
                .with_partitions(
                    topic
                        .partitions
                        .iter()
                        .map(|p| {
                            share_acknowledge_response::PartitionData::default()
                                .with_partition_index(p.partition_index)
                                .with_current_leader(
                                    share_acknowledge_response::LeaderIdAndEpoch::default()
                                        .with_leader_id(NODE_ID),
                                )
                        })
                        .collect(),
                )
        })
        .collect();
    ShareAcknowledgeResponse::default()
        .with_responses(responses)
        .with_node_endpoints(vec![
            share_acknowledge_response::NodeEndpoint::default()
                .with_node_id(BrokerId(NODE_ID))
                .with_host(str_bytes(&inner.host))
                .with_port(i32::from(inner.port)),
        ])
}

/// A ShareAcknowledge response at `version`: kafka-protocol's v1 encoding, with v2's
/// `AcquisitionLockTimeoutMs` (i32) after `ErrorMessage` when `version >= 2`.
fn encode_share_acknowledge(
    response: &ShareAcknowledgeResponse,
    version: i16,
    lock_timeout_ms: i32,
) -> anyhow::Result<Bytes> {
    let v1 = encode(response, 1)?;
    if version < 2 {
        return Ok(v1);
    }
    // ThrottleTimeMs (4), ErrorCode (2), then ErrorMessage as a compact nullable string.
    let at = 6 + compact_strings_len(&v1.slice(6..), 1)?;
    let mut v2 = BytesMut::with_capacity(v1.len() + 4);
    v2.extend_from_slice(&v1[..at]);
    v2.put_i32(lock_timeout_ms);
    v2.extend_from_slice(&v1[at..]);
    Ok(v2.freeze())
}

/// The encoded length of the `count` compact nullable strings at the start of `bytes`.
fn compact_strings_len(bytes: &Bytes, count: usize) -> anyhow::Result<usize> {
    let mut at = 0;
    for _ in 0..count {
        let mut value: u64 = 0;
        let mut shift = 0;
        loop {
            let byte = *bytes
                .get(at)
                .ok_or_else(|| anyhow::anyhow!("truncated string length"))?;
            at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                break;
            }
            shift += 7;
            anyhow::ensure!(shift <= 28, "string length varint too long");
        }
        // 0 is null; otherwise the length plus one.
        at += usize::try_from(value.saturating_sub(1))?;
    }
    anyhow::ensure!(at <= bytes.len(), "truncated string");
    Ok(at)
}

/// `bytes` without the `len` bytes at `at`, and those bytes.
fn without(bytes: &Bytes, at: usize, len: usize) -> anyhow::Result<(Bytes, Bytes)> {
    anyhow::ensure!(at + len <= bytes.len(), "truncated body");
    let mut rest = BytesMut::with_capacity(bytes.len() - len);
    rest.extend_from_slice(&bytes[..at]);
    rest.extend_from_slice(&bytes[at + len..]);
    Ok((rest.freeze(), bytes.slice(at..at + len)))
}
