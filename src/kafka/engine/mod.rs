//! The fetch engine: a tokio task that drives the [`SessionBook`] against the connections.
//!
//! The consumer and the engine share no state: the consumer sends [`Command`]s, the engine
//! sends [`Update`]s (the records it fetched among them), each over an unbounded queue sent
//! to without an `.await`, so a caller's future can be dropped at any point without losing
//! what it handed over (see [`channel`]). The engine owns everything a request needs to
//! outlive the call that caused it: the share sessions and their epochs, the
//! acknowledgements pending and in flight, the connections to the partition leaders, and the
//! cluster metadata. A `poll` is then only a wait, bounded by its deadline, for what the
//! engine fetched.
//!
//! # Prefetch
//!
//! Acquisition locks start ticking when the broker answers. With the sized acquisition (the
//! default, [`sizing`]), the engine keeps what this member holds (records waiting in the
//! consumer's buffer, those the application is processing, and those asked for in flight)
//! within a budget the application can process in a third of the lock (and that fits in
//! `acquisition_max_bytes`, and in this member's fair share of the group's record locks on
//! the partitions it shares with other members), and fetches ahead (without
//! waiting on the broker) once that level is down to half the budget. With the fixed
//! acquisition it fetches only while a poll waits for records, or while fewer than
//! [`prefetch_records`](crate::KafkaShareConsumerConfig::prefetch_records) records wait to be
//! taken (0 by default: no fetch runs ahead of the application). An answer that arrives after
//! its poll gave up waits in the consumer's buffer for the next poll; its records are not
//! lost and not released (unless they wait there for half their lock).
//!
//! Acknowledgements ride on the next fetch to their leader; they go in a ShareAcknowledge of
//! their own when a commit asks for them, at close, for a RENEW, or when no fetch has carried
//! them within [`Sizing::ack_linger`].

pub(crate) mod buffer;
pub(crate) mod channel;
pub(crate) mod cluster;
mod demand;
pub(crate) mod inbox;
pub(crate) mod requests;
mod responses;
pub(crate) mod sizing;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use kafka_protocol::messages::ApiKey;
use tokio::sync::{mpsc, oneshot};

pub(crate) use self::channel::Command;
use tokio::time::Instant;

use self::channel::{PartitionCounts, Update};
use self::cluster::{Cluster, fetch_metadata};
use self::demand::Demand;
use self::inbox::Inbox;
use self::requests::RequestCounters;
use self::sizing::{RecordBytes, Sizing, fair_share, fetch_bytes};
use crate::consumer::{CommitResults, ConsumerError};
use crate::kafka::cluster::link::ClusterLink;
use crate::kafka::cluster::pool::BrokerPool;
use crate::kafka::codec::share_v2;
use crate::kafka::consumer::config::ShareAcquireMode;
use crate::kafka::consumer::max_poll_records::MaxPollRecords;
use crate::kafka::consumer::membership::MembershipView;
use crate::kafka::error::ClientError;
use crate::kafka::error::codes::{api_name, broker_error};
use crate::kafka::error::{ConnectionError, ProtocolError};
use crate::kafka::net::connection::Connection;
use crate::kafka::session::book::{
    FetchSettings, NodeId, PlanInput, Planned, SessionBook, SessionPartition, Ticket,
};
use crate::record::TopicPartition;
use crate::time::deadline_after;

/// Kafka's UNKNOWN_TOPIC_OR_PARTITION.
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
/// Kafka's LEADER_NOT_AVAILABLE.
const LEADER_NOT_AVAILABLE: i16 = 5;

/// Java's `retry.backoff.ms`: the pause after a request failed or met errors; it doubles with
/// each failure in a row, up to [`RETRY_BACKOFF_MAX`].
const RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// Java's `retry.backoff.max.ms`: the longest pause between attempts, reached after a run of
/// failures (a broker down, credentials refused), so nothing is retried in a tight loop.
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The pause after `failures` failures in a row (at least one).
fn retry_backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(10);
    RETRY_BACKOFF
        .saturating_mul(1 << doublings)
        .min(RETRY_BACKOFF_MAX)
}

/// The engine's settings, from the consumer's config.
#[derive(Debug, Clone)]
pub(crate) struct EngineConfig {
    pub(crate) group_id: String,
    pub(crate) member_id: String,
    pub(crate) max_poll_records: MaxPollRecords,
    pub(crate) fetch_min_bytes: i32,
    pub(crate) fetch_max_bytes: i32,
    pub(crate) partition_max_bytes: Option<i32>,
    pub(crate) fetch_max_wait: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) prefetch_records: usize,
    pub(crate) share_acquire_mode: ShareAcquireMode,
    /// Acquisition sized to the sink ([`sizing`]); `None`: every fetch asks for
    /// `max_poll_records`, and `prefetch_records` says how far to fetch ahead.
    pub(crate) sizing: Option<Sizing>,
}

/// The lock duration assumed before a broker has said what it is: Kafka's default
/// `group.share.record.lock.duration.ms`.
const DEFAULT_LOCK: Duration = Duration::from_secs(30);

/// The consumer's side of a running engine. Dropping it stops the engine (after a close
/// already asked for has finished), which closes its connections.
#[derive(Debug)]
pub(crate) struct EngineHandle {
    commands: mpsc::UnboundedSender<Command>,
    /// What the engine sent, taken in.
    pub(crate) inbox: Inbox,
    /// The requests the engine sent.
    pub(crate) requests: Arc<RequestCounters>,
}

impl EngineHandle {
    /// Starts the engine task. Needs a tokio runtime.
    pub(crate) fn spawn(
        config: EngineConfig,
        link: Arc<ClusterLink>,
        membership: MembershipView,
    ) -> Self {
        let (commands, receiver) = mpsc::unbounded_channel();
        let (updates, inbox) = mpsc::unbounded_channel();
        let requests = Arc::new(RequestCounters::default());
        let leaders = Arc::new(BrokerPool::new(link.config().clone()));
        let engine = Engine {
            book: SessionBook::new(&config.group_id, &config.member_id),
            config,
            leaders,
            link,
            membership,
            updates,
            requests: Arc::clone(&requests),
            demand: Demand::default(),
            lock_timeout: None,
            refused: false,
            error_sent: false,
            commands: receiver,
            cluster: Cluster::default(),
            subscription: Vec::new(),
            connecting: BTreeSet::new(),
            metadata_in_flight: false,
            metadata_retry_at: None,
            stale_refreshes: 0,
            fetch_retry_at: None,
            commits: Vec::new(),
            closing: None,
            leaving: None,
            close_sent: false,
            polled: false,
            asked: HashMap::new(),
            origins: HashMap::new(),
            acks_since: None,
            record_bytes: RecordBytes::default(),
            widest_batch: 0,
            seen_assignment: 0,
            failures: 0,
            waiting_for: BTreeSet::new(),
            work: FuturesUnordered::new(),
        };
        tokio::spawn(engine.run());
        Self {
            commands,
            inbox: Inbox::new(inbox),
            requests,
        }
    }

    /// Hands a command to the engine; never waits. Fails when the engine has stopped.
    pub(crate) fn send(&self, command: Command) -> Result<(), ConsumerError> {
        self.commands
            .send(command)
            .map_err(|_| ConsumerError::Closed)
    }
}

/// What a finished piece of I/O brought back.
enum Event {
    Connected {
        node: NodeId,
        result: Result<Connection, ClientError>,
    },
    Metadata(Result<Cluster, ClientError>),
    Fetched {
        ticket: Ticket,
        node: NodeId,
        result: Result<share_v2::ShareFetchResponse, ClientError>,
    },
    Acknowledged {
        ticket: Ticket,
        node: NodeId,
        result: Result<share_v2::ShareAcknowledgeResponse, ClientError>,
    },
}

struct Engine {
    config: EngineConfig,
    /// The connections to the partition leaders, which carry this member's share sessions:
    /// the engine's own pool, used by no other client.
    leaders: Arc<BrokerPool>,
    /// Metadata goes here; the brokers of each answer are the link's to reconnect to.
    link: Arc<ClusterLink>,
    membership: MembershipView,
    /// To the consumer; dropped when the engine stops, which tells it so.
    updates: mpsc::UnboundedSender<Update>,
    requests: Arc<RequestCounters>,
    /// What the consumer holds and wants, as its commands told.
    demand: Demand,
    /// The acquisition lock duration the brokers reported last.
    lock_timeout: Option<Duration>,
    /// A broker refused this consumer's credentials: nothing more is acquired.
    refused: bool,
    /// An error was sent that no poll has taken yet: later ones are dropped, as a poll
    /// reports one.
    error_sent: bool,
    commands: mpsc::UnboundedReceiver<Command>,
    book: SessionBook,
    cluster: Cluster,
    subscription: Vec<String>,
    /// Leaders a connection is being made to.
    connecting: BTreeSet<NodeId>,
    metadata_in_flight: bool,
    metadata_retry_at: Option<Instant>,
    /// Metadata answers in a row that left some topic erroring (their refresh backs off).
    stale_refreshes: u32,
    /// No fetch before then (backoff after errors).
    fetch_retry_at: Option<Instant>,
    /// Commits waiting for the acknowledgements queued up to their sequence number.
    commits: Vec<(u64, oneshot::Sender<CommitResults>)>,
    closing: Option<oneshot::Sender<CommitResults>>,
    /// An unsubscribe waiting for its sessions to close.
    leaving: Option<oneshot::Sender<CommitResults>>,
    close_sent: bool,
    /// A poll has been made, so prefetch may start.
    polled: bool,
    /// The record limits of acquiring fetches in flight: records that may arrive, part of
    /// the sizing rule's level.
    asked: HashMap<Ticket, usize>,
    /// The leader each partition's records were last acquired from, while this member may
    /// still hold some of them (see [`hold_back_moved`]).
    origins: HashMap<SessionPartition, (NodeId, TopicPartition)>,
    /// Since when acknowledgements have waited with no request to carry them; after
    /// [`Sizing::ack_linger`] they go in a ShareAcknowledge of their own.
    acks_since: Option<Instant>,
    /// The bytes of answer a record keeps in memory, for the sizing rule's byte bound.
    record_bytes: RecordBytes,
    /// The widest log batch of recent answers, in offsets, fading per answer of narrower ones
    /// ([`sizing::widest_batch`]), for the `BatchSize` asked ([`sizing::batch_size`]).
    widest_batch: u64,
    seen_assignment: u64,
    /// Connections and requests that failed in a row, for the backoff.
    failures: u32,
    /// Subscribed topics found missing, each said once.
    waiting_for: BTreeSet<String>,
    work: FuturesUnordered<BoxFuture<'static, Event>>,
}

/// Errors no retry can fix: a poll reports them.
fn is_fatal(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Protocol(ProtocolError::Unsupported { .. })
            | ClientError::Config { .. }
            | ClientError::Connection(ConnectionError::Authentication { .. })
    )
}

impl Engine {
    async fn run(mut self) {
        let mut consumer_gone = false;
        loop {
            let now = Instant::now();
            self.step(now);
            if self.close_sent && !self.book.in_flight() {
                if self.closing.is_some() {
                    self.finish_close();
                    break;
                }
                self.finish_leave();
            }
            if consumer_gone && self.closing.is_none() {
                break;
            }
            let timer = self.next_timer(now);
            let seen = self.seen_assignment;
            tokio::select! {
                command = self.commands.recv(), if !consumer_gone => match command {
                    Some(command) => self.apply(command),
                    None => consumer_gone = true,
                },
                Some(event) = self.work.next(), if !self.work.is_empty() => self.handle(event),
                () = self.membership.changed(seen) => self.tell(Update::MembershipChanged),
                () = sleep_until_opt(timer) => {}
            }
        }
        // Dropping `self` closes the updates' queue: the consumer learns the engine stopped
        // after everything sent before.
    }

    /// Sends the consumer an update; one that is gone (dropped without a close) needs none.
    fn tell(&self, update: Update) {
        let _ = self.updates.send(update);
    }

    /// Sends the next poll an error, unless one waits for a poll already.
    fn tell_error(&mut self, error: ConsumerError) {
        if !self.error_sent {
            self.error_sent = true;
            self.tell(Update::Error(error));
        }
    }

    /// Notes the lock duration a broker reported, and tells the consumer when it changed.
    fn note_lock_timeout(&mut self, lock: Duration) {
        if self.lock_timeout != Some(lock) {
            self.lock_timeout = Some(lock);
            self.tell(Update::LockTimeout(lock));
        }
    }

    /// The next moment something becomes due; times already past are done with.
    fn next_timer(&self, now: Instant) -> Option<Instant> {
        let poll_deadline = self.demand.poll_deadline();
        let acks_due = self.acks_due_at();
        [
            self.fetch_retry_at,
            self.metadata_retry_at,
            poll_deadline,
            acks_due,
        ]
        .into_iter()
        .flatten()
        .filter(|at| *at > now)
        .min()
    }

    fn apply(&mut self, command: Command) {
        match command {
            Command::Subscribe(topics) => {
                self.subscription = topics;
                self.cluster.stale = true;
            }
            Command::Acknowledge(acks) => {
                for (tp, ranges) in acks {
                    self.book.acknowledge(tp, ranges);
                }
                if self.acks_since.is_none() && self.book.pending_partitions().next().is_some() {
                    self.acks_since = Some(Instant::now());
                }
            }
            Command::Commit(reply) => {
                let seq = self.book.seq();
                self.commits.push((seq, reply));
            }
            Command::Close(reply) => {
                self.closing = Some(reply);
            }
            Command::Unsubscribe(reply) => {
                self.subscription.clear();
                self.leaving = Some(reply);
                self.demand.unsubscribed();
                // As after the first subscribe: nothing is fetched ahead of the next poll.
                self.polled = false;
            }
            Command::Want { deadline } => {
                self.polled = true;
                self.demand.want(deadline);
            }
            Command::GaveUp => self.demand.gave_up(),
            Command::HandedOut(counts) => {
                // The level went down: a sized acquisition may fetch ahead now.
                self.polled = true;
                self.demand.handed_out(&counts);
            }
            Command::PresentedAgain(counts) => self.demand.presented_again(&counts),
            Command::Dropped(counts) => self.demand.dropped(&counts),
            Command::AppDone {
                kept,
                per_record,
                record_locks,
            } => self.demand.app_done(&kept, per_record, record_locks),
            Command::ErrorTaken => self.error_sent = false,
            Command::Collect(collect) => self.demand.set_collect(collect),
        }
    }

    /// Looks at everything and starts what is due: metadata, connections, requests.
    fn step(&mut self, now: Instant) {
        // Acknowledgements the consumer handed over since the last event ride on what is
        // planned below (the event loop takes one event at a time: a poll's wake-up and the
        // acknowledgements sent just before it would otherwise make a fetch without them).
        while let Ok(command) = self.commands.try_recv() {
            self.apply(command);
        }
        for node in self.leaders.take_closed() {
            // The broker closed it (it may have stopped): its session went with it.
            self.book.connection_reset(node);
            self.cluster.stale = true;
        }
        let (version, assignment) = self.membership.assignment();
        self.seen_assignment = version;
        // Closing or leaving the subscription: the sessions end with the final epoch.
        let closing = self.closing.is_some() || self.leaving.is_some();

        let unknown_ack_partition = self
            .book
            .pending_partitions()
            .any(|tp| self.cluster.leader(tp).is_none());
        if !self.subscription.is_empty()
            && !self.metadata_in_flight
            && self.metadata_retry_at.is_none_or(|at| now >= at)
            && (self.cluster.needs_refresh(&assignment, now) || unknown_ack_partition)
        {
            self.start_metadata();
        }

        let targets = if closing {
            HashMap::new()
        } else {
            let mut targets = self.cluster.targets(&assignment);
            self.hold_back_moved(&mut targets);
            targets
        };
        let leaders: HashMap<TopicPartition, (uuid::Uuid, NodeId)> = self
            .book
            .pending_partitions()
            .filter_map(|tp| self.cluster.leader(tp).map(|l| (tp.clone(), l)))
            .collect();
        if !closing {
            let mut wanted: BTreeSet<NodeId> = targets.keys().copied().collect();
            wanted.extend(leaders.values().map(|(_, n)| *n));
            for node in wanted {
                self.ensure_connection(node);
            }
        }
        let connected: BTreeSet<NodeId> = self.leaders.nodes();

        let (fetch, flush) = if closing {
            (None, true)
        } else {
            let acks_due = self.acks_due_at().is_some_and(|at| at <= now);
            (
                self.fetch_settings(now, &targets),
                !self.commits.is_empty() || acks_due,
            )
        };
        let input = PlanInput {
            targets: &targets,
            leaders: &leaders,
            connected: &connected,
            fetch,
            flush,
        };
        let planned = if closing {
            if self.book.in_flight() || self.close_sent {
                Vec::new()
            } else {
                self.close_sent = true;
                self.book.plan_close(&input)
            }
        } else {
            self.book.plan(&input)
        };
        for request in planned {
            self.send(request, fetch);
        }
        if self.book.pending_partitions().next().is_none() {
            self.acks_since = None;
        }
        self.answer_commits();
        self.hand_over_outcomes();
    }

    /// Keeps partitions whose leader moved out of the fetches to their new leader while this
    /// member may still hold records of them from the old one (buffered, with the
    /// application, or acknowledged and not yet answered). Otherwise the new leader, which
    /// knows nothing of the old acquisition, could hand the same offsets to this member
    /// again, and the acknowledgements of the old copies, sent to it, would be accepted for
    /// the new ones: a commit would report success and the new copies would come again.
    fn hold_back_moved(&mut self, targets: &mut HashMap<NodeId, BTreeSet<SessionPartition>>) {
        // The consumer's commands come in order (acknowledgements before the news that the
        // application is done with their records), so what the demand says is held and what
        // the book says is unsettled are one consistent view.
        let book = &self.book;
        let demand = &self.demand;
        hold_back_moved(
            targets,
            &mut self.origins,
            |p, node| book.fetching_elsewhere(p, node),
            |tp| demand.holds(tp) || book.unsettled(tp),
        );
    }

    /// With an acknowledgement commit callback, outcomes no commit waits for (those of
    /// acknowledgements that rode on fetches) go to the consumer for its next call.
    fn hand_over_outcomes(&mut self) {
        if !self.book.has_results() || !self.demand.collect() {
            return;
        }
        let results = self.book.take_results();
        self.tell(Update::Settled(results));
    }

    /// When acknowledgements waiting for a request to ride on are due to go alone.
    fn acks_due_at(&self) -> Option<Instant> {
        let since = self.acks_since?;
        let lock = self.lock_timeout.unwrap_or(DEFAULT_LOCK);
        Some(deadline_after(since, Sizing::ack_linger(lock)))
    }

    /// The fetch settings if a fetch is wanted now: a poll waits, or prefetch wants more.
    fn fetch_settings(
        &self,
        now: Instant,
        targets: &HashMap<NodeId, BTreeSet<(uuid::Uuid, i32)>>,
    ) -> Option<FetchSettings> {
        // Without a subscription (after an unsubscribe, before the membership has dropped the
        // old assignment) nothing is acquired: nobody could poll it.
        if self.subscription.is_empty() || self.fetch_retry_at.is_some_and(|at| now < at) {
            return None;
        }
        if self.refused {
            // Records acquired now could be neither handed out nor acknowledged.
            return None;
        }
        let demand = &self.demand;
        let buffered = demand.buffered();
        let wanted = demand.wanted();
        let poll_wait = demand
            .poll_deadline()
            .filter(|d| *d > now && wanted)
            .map(|d| d.saturating_duration_since(now));
        let mut max_bytes = self.config.fetch_max_bytes;
        let max_records = match self.config.sizing {
            None => {
                let prefetch = self.polled && buffered < self.config.prefetch_records;
                if !wanted && !prefetch {
                    return None;
                }
                self.config.max_poll_records.wire()
            }
            Some(sizing) => {
                if !wanted && !self.polled {
                    return None;
                }
                // This member's fair share of the record locks of the partitions it fetches,
                // split with the other members each is assigned to.
                let locks = demand.record_locks().unwrap_or(sizing.max_record_locks);
                let sharers = self.membership.sharers();
                let share = fair_share(
                    locks,
                    targets
                        .values()
                        .flatten()
                        .map(|p| sharers.get(p).copied().unwrap_or(1)),
                );
                let lock = self.lock_timeout.unwrap_or(DEFAULT_LOCK);
                let budget =
                    sizing.budget(lock, demand.per_record(), share, self.record_bytes.get());
                let level = buffered
                    .saturating_add(demand.in_app())
                    .saturating_add(self.asked.values().sum());
                let records = sizing.acquire(budget, level, buffered, wanted)?;
                // Each leader fetched from gets its share; together they stay in the room.
                let leaders = targets.len().max(1);
                let each = records.div_ceil(leaders).max(1);
                if let Some(per) = self.record_bytes.get() {
                    let partitions = targets.values().map(BTreeSet::len).max().unwrap_or(1);
                    let wanted = fetch_bytes(each, per, partitions, self.config.fetch_min_bytes);
                    max_bytes = max_bytes.min(wanted);
                }
                i32::try_from(each).unwrap_or(i32::MAX)
            }
        };
        // While a poll waits, the broker may hold the fetch only until the poll's deadline;
        // an answer after it waits for the next poll.
        let wait = poll_wait.map_or(self.config.fetch_max_wait, |left| {
            left.min(self.config.fetch_max_wait)
                .max(Duration::from_millis(1))
        });
        // A sized fetch ahead of the application takes what the broker has now and does not
        // wait: waiting, it would hold the leader's only request slot, and a commit or RENEW
        // would wait behind it. An empty answer stops fetching ahead until the next poll.
        let wait = if self.config.sizing.is_some() && !wanted {
            Duration::ZERO
        } else {
            wait
        };
        Some(FetchSettings {
            max_wait_ms: i32::try_from(wait.as_millis()).unwrap_or(i32::MAX),
            min_bytes: self.config.fetch_min_bytes,
            max_bytes,
            max_records,
            // Only a sized consumer's polls cut answers (see the consumer's `poll_limit`): with
            // fixed acquisition a poll takes whole answers and splits no range. (`record_limit`
            // mode turns the sizing off.)
            batch_size: if self.config.sizing.is_none() {
                self.config.max_poll_records.wire()
            } else {
                let each =
                    sizing::batch_size(self.config.max_poll_records.get(), self.widest_batch);
                i32::try_from(each).unwrap_or(i32::MAX)
            },
            record_limit: self.config.share_acquire_mode == ShareAcquireMode::RecordLimit,
            partition_max_bytes: self.config.partition_max_bytes,
        })
    }

    fn start_metadata(&mut self) {
        self.metadata_in_flight = true;
        let link = Arc::clone(&self.link);
        let topics = self.subscription.clone();
        self.work.push(Box::pin(async move {
            let result = match link.connection().await {
                Ok(conn) => fetch_metadata(conn, topics).await,
                Err(e) => Err(e),
            };
            if let Ok(cluster) = &result {
                link.addresses().learn(cluster.brokers.values());
            }
            Event::Metadata(result)
        }));
    }

    /// Starts a connection to `node` unless one is open or being made. The connection waits
    /// its turn at the client's reconnect backoff ([`backoff`](crate::kafka::net::backoff))
    /// first, so a leader that keeps failing is dialled no more often than that allows,
    /// however often the engine steps.
    fn ensure_connection(&mut self, node: NodeId) {
        if self.leaders.holds(node) || self.connecting.contains(&node) {
            return;
        }
        if !self.cluster.brokers.contains_key(&node) {
            self.cluster.stale = true;
            return;
        }
        self.connecting.insert(node);
        let leaders = Arc::clone(&self.leaders);
        self.work.push(Box::pin(async move {
            // The pool holds no connection to `node` (checked above, and only this engine
            // adds to it), so this makes a new one, which joins the pool as it is made.
            let result = leaders.open(node).await;
            Event::Connected { node, result }
        }));
    }

    fn send(&mut self, request: Planned, fetch: Option<FetchSettings>) {
        let node = request.node();
        let ticket = request.ticket();
        let Some(conn) = self.leaders.get(node) else {
            self.book
                .on_lost(ticket, "the connection to the partition leader closed");
            return;
        };
        let wait = fetch.map_or(Duration::ZERO, |f| {
            Duration::from_millis(u64::try_from(f.max_wait_ms).unwrap_or(0))
        });
        let timeout = self.config.request_timeout.saturating_add(wait);
        match request {
            Planned::Fetch { request, .. } => {
                self.requests.fetch_sent(&request.topics);
                if self.book.is_acquiring(ticket) {
                    let asked = usize::try_from(request.max_records).unwrap_or(0);
                    self.asked.insert(ticket, asked);
                }
                self.work.push(Box::pin(async move {
                    let result = match conn.negotiate(ApiKey::ShareFetch, share_v2::VERSIONS) {
                        Ok(version) => {
                            conn.request_with_timeout(
                                ApiKey::ShareFetch,
                                version,
                                &request,
                                timeout,
                            )
                            .await
                        }
                        Err(e) => Err(e),
                    };
                    Event::Fetched {
                        ticket,
                        node,
                        result,
                    }
                }));
            }
            Planned::Acknowledge { request, .. } => {
                self.requests.acknowledge_sent(&request.topics);
                let timeout = self.config.request_timeout;
                self.work.push(Box::pin(async move {
                    let result = match conn.negotiate(ApiKey::ShareAcknowledge, share_v2::VERSIONS)
                    {
                        Ok(version) => {
                            conn.request_with_timeout(
                                ApiKey::ShareAcknowledge,
                                version,
                                &request,
                                timeout,
                            )
                            .await
                        }
                        Err(e) => Err(e),
                    };
                    Event::Acknowledged {
                        ticket,
                        node,
                        result,
                    }
                }));
            }
        }
    }

    fn handle(&mut self, event: Event) {
        let now = Instant::now();
        if let Event::Fetched { ticket, .. } = &event {
            self.asked.remove(ticket);
        }
        match event {
            Event::Connected { node, result } => {
                self.connecting.remove(&node);
                match result {
                    Ok(_) => {
                        // A new connection: no session on it yet.
                        self.book.connection_reset(node);
                    }
                    Err(e) => {
                        tracing::debug!(node, error = %e, "no fetch connection");
                        // The leader may be gone (a stopped broker whose partitions moved):
                        // ask the cluster again, as Java does when a connection fails.
                        self.cluster.stale = true;
                        self.back_off(now);
                        self.report_if_fatal(e);
                    }
                }
            }
            Event::Metadata(result) => {
                self.metadata_in_flight = false;
                match result {
                    Ok(mut fresh) => {
                        let errors = std::mem::take(&mut fresh.topic_errors);
                        let errored: Vec<&str> = errors.iter().map(|(t, _)| t.as_str()).collect();
                        self.cluster.update(fresh, &errored);
                        for (topic, code) in errors {
                            self.on_topic_error(topic, code);
                        }
                        self.leaders.learn(&self.cluster.brokers);
                        self.failures = 0;
                        // The next refresh no sooner than the retry backoff, as Java's metadata
                        // refresh backoff, and longer while answers leave a topic erroring: a
                        // deleted topic, or one whose leader is being elected, is not asked
                        // for again at the speed of the network.
                        self.stale_refreshes = if self.cluster.stale {
                            self.stale_refreshes.saturating_add(1)
                        } else {
                            0
                        };
                        self.metadata_retry_at = Some(deadline_after(
                            now,
                            retry_backoff(self.stale_refreshes.max(1)),
                        ));
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "metadata refresh failed");
                        self.failures = self.failures.saturating_add(1);
                        self.metadata_retry_at =
                            Some(deadline_after(now, retry_backoff(self.failures)));
                        self.report_if_fatal(e);
                    }
                }
            }
            Event::Fetched {
                ticket,
                node,
                result,
            } => match result {
                Ok(response) => self.on_fetched(ticket, node, response, now),
                Err(e) => self.on_lost(ticket, node, &format!("the fetch failed: {e}"), e, now),
            },
            Event::Acknowledged {
                ticket,
                node,
                result,
            } => match result {
                Ok(response) => {
                    // A RENEW's answer (v2) reports the group's lock duration as it is now,
                    // which the poll presenting the renewed records reports in turn.
                    if let Some(lock) =
                        responses::lock_timeout(response.acquisition_lock_timeout_ms)
                    {
                        self.note_lock_timeout(lock);
                    }
                    let (answer, stale) = responses::acknowledge_answer(&self.cluster, response);
                    self.cluster.stale |= stale;
                    self.book.on_acknowledge(ticket, answer);
                }
                Err(e) => self.on_lost(
                    ticket,
                    node,
                    &format!("ShareAcknowledge failed: {e}"),
                    e,
                    now,
                ),
            },
        }
    }

    /// A request whose fate is unknown: its acknowledgements fail, the connection goes (the
    /// broker then ends the session and releases what it held), and the leaders are looked
    /// up again in case the broker stopped.
    fn on_lost(
        &mut self,
        ticket: Ticket,
        node: NodeId,
        why: &str,
        error: ClientError,
        now: Instant,
    ) {
        tracing::debug!(node, error = %error, "request failed; reconnecting");
        self.book.on_lost(ticket, why);
        self.leaders.forget(node);
        self.cluster.stale = true;
        self.back_off(now);
        self.report_if_fatal(error);
    }

    fn on_fetched(
        &mut self,
        ticket: Ticket,
        node: NodeId,
        response: share_v2::ShareFetchResponse,
        now: Instant,
    ) {
        let fetched =
            responses::fetch_answer(&self.cluster, node, response, self.config.fetch_max_bytes);
        self.cluster.stale |= fetched.stale;
        self.record_bytes
            .observe(fetched.records.len(), fetched.record_bytes);
        self.widest_batch = sizing::widest_batch(self.widest_batch, fetched.widest_batch);
        for (partition, tp) in fetched.acquired_from {
            self.origins.insert(partition, (node, tp));
        }
        for (tp, ranges) in fetched.internal_acks {
            self.book.acknowledge(tp, ranges);
        }
        if self.acks_since.is_none() && self.book.pending_partitions().next().is_some() {
            self.acks_since = Some(now);
        }
        self.book.on_fetch(ticket, fetched.answer);
        if fetched.errors && fetched.records.is_empty() {
            self.back_off(now);
        } else {
            self.failures = 0;
        }
        if let Some(e) = fetched.fatal {
            self.report_if_fatal(e);
        }
        if let Some(lock) = fetched.lock_timeout {
            self.note_lock_timeout(lock);
        }
        if self.config.sizing.is_some() && fetched.records.is_empty() && !self.demand.wants_any() {
            // Nothing there ahead of the application: wait for the next poll.
            self.polled = false;
        }
        if !fetched.records.is_empty() {
            self.demand.sent(&PartitionCounts::of(&fetched.records));
            self.tell(Update::Records {
                at: now,
                records: fetched.records,
                breaks: fetched.breaks,
            });
        }
    }

    /// One more failure in a row: no fetch before the backoff it earns.
    fn back_off(&mut self, now: Instant) {
        self.failures = self.failures.saturating_add(1);
        self.fetch_retry_at = Some(deadline_after(now, retry_backoff(self.failures)));
    }

    /// A subscribed topic the cluster answered Metadata for with an error. As Java's consumer:
    /// a topic that does not exist (yet) is waited for, said once at INFO; a topic the
    /// client may not read or whose name the cluster refuses fails the next poll, naming it.
    fn on_topic_error(&mut self, topic: String, code: i16) {
        match code {
            UNKNOWN_TOPIC_OR_PARTITION => {
                if self.waiting_for.insert(topic.clone()) {
                    tracing::info!(
                        topic,
                        "subscribed topic does not exist (yet): waiting for it to be created"
                    );
                }
            }
            LEADER_NOT_AVAILABLE => {}
            _ => {
                let message = Some(format!("subscribed topic `{topic}`"));
                if let Some(error) = broker_error(api_name(ApiKey::Metadata), code, message) {
                    tracing::warn!(topic, error = %error, "subscribed topic cannot be read");
                    self.tell_error(error.into());
                }
            }
        }
    }

    /// Hands an error no retry fixes to the polls. An authentication failure is kept for
    /// every later poll and commit ([`Update::Refused`]); the others are reported by the
    /// next poll.
    fn report_if_fatal(&mut self, error: ClientError) {
        if !is_fatal(&error) {
            return;
        }
        match error {
            ClientError::Connection(ConnectionError::Authentication { broker, reason }) => {
                if !self.refused {
                    tracing::error!(
                        broker,
                        reason,
                        "a broker refused the consumer's authentication; every poll and \
                         commit reports it from now on, and nothing more is acquired"
                    );
                    self.refused = true;
                    self.tell(Update::Refused { broker, reason });
                }
            }
            error => self.tell_error(error.into()),
        }
    }

    fn answer_commits(&mut self) {
        let mut i = 0;
        while i < self.commits.len() {
            if self.book.settled_through(self.commits[i].0) {
                let (_, reply) = self.commits.swap_remove(i);
                let results = self.book.take_results();
                if let Err(results) = reply.send(results) {
                    // The caller went away (a commit timed out or was dropped): the next
                    // commit reports these.
                    self.book.restore_results(results);
                }
            } else {
                i += 1;
            }
        }
    }

    /// The sessions are closed after an unsubscribe: what was fetched was released with them.
    fn finish_leave(&mut self) {
        self.close_sent = false;
        self.book.reset_sessions();
        self.demand.cleared();
        self.tell(Update::Cleared);
        let results = self.book.take_results();
        if let Some(reply) = self.leaving.take()
            && let Err(results) = reply.send(results)
        {
            self.book.restore_results(results);
        }
    }

    fn finish_close(&mut self) {
        // No connection outlives the close: a broker keeps a share session (and what it
        // holds) alive while its connection is open.
        for connection in self.leaders.drain() {
            connection.close();
        }
        let results = self.book.take_results();
        for (_, reply) in self.commits.drain(..) {
            let _ = reply.send(CommitResults::new());
        }
        if let Some(reply) = self.closing.take() {
            let _ = reply.send(results);
        }
    }
}

/// Drops from `targets` every partition that must not be fetched from its node yet: a
/// fetch for it to another node is still in flight (its answer may bring copies), or copies
/// acquired from another node may still be `held`. A partition acquired elsewhere whose
/// copies are all settled has its origin forgotten and is fetched.
fn hold_back_moved(
    targets: &mut HashMap<NodeId, BTreeSet<SessionPartition>>,
    origins: &mut HashMap<SessionPartition, (NodeId, TopicPartition)>,
    fetching_elsewhere: impl Fn(&SessionPartition, NodeId) -> bool,
    held: impl Fn(&TopicPartition) -> bool,
) {
    let mut settled = Vec::new();
    for (node, partitions) in targets.iter_mut() {
        partitions.retain(|p| {
            if fetching_elsewhere(p, *node) {
                return false;
            }
            match origins.get(p) {
                Some((from, tp)) if from != node => {
                    if held(tp) {
                        return false;
                    }
                    settled.push(*p);
                    true
                }
                _ => true,
            }
        });
    }
    for p in settled {
        origins.remove(&p);
    }
    targets.retain(|_, partitions| !partitions.is_empty());
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_partition_is_not_fetched_from_its_new_leader_while_held_from_the_old() {
        let id = uuid::Uuid::from_u128(7);
        let p0 = TopicPartition::new("t", 0);
        let p1 = TopicPartition::new("t", 1);
        let p2 = TopicPartition::new("t", 2);
        // p0 was acquired from node 1 and now leads on node 2, with p1 (acquired there) and
        // p2 (never acquired).
        let mut origins = HashMap::from([((id, 0), (1, p0.clone())), ((id, 1), (2, p1.clone()))]);
        let targets = HashMap::from([(2, BTreeSet::from([(id, 0), (id, 1), (id, 2)]))]);
        let nowhere = |_: &SessionPartition, _: NodeId| false;

        let mut now = targets.clone();
        hold_back_moved(&mut now, &mut origins, nowhere, |_| true);
        assert_eq!(
            now,
            HashMap::from([(2, BTreeSet::from([(id, 1), (id, 2)]))])
        );
        assert_eq!(origins.len(), 2, "nothing forgotten while held");

        // A fetch to node 1 still in flight for p2 holds it back too, held or not.
        let mut in_flight = targets.clone();
        hold_back_moved(
            &mut in_flight,
            &mut origins,
            |p, node| *p == (id, 2) && node == 2,
            |_| true,
        );
        assert_eq!(in_flight, HashMap::from([(2, BTreeSet::from([(id, 1)]))]));

        // Nothing of p0 is held any more: it is fetched from its new leader, and its origin
        // forgotten; p1, not moved, keeps its origin (held or not), for a later move.
        let mut later = targets.clone();
        hold_back_moved(&mut later, &mut origins, nowhere, |tp| *tp == p2);
        assert_eq!(later, targets);
        assert!(!origins.contains_key(&(id, 0)));
        assert!(origins.contains_key(&(id, 1)));

        // Every partition held back on a node: the node is left out.
        let mut all_held = HashMap::from([(3, BTreeSet::from([(id, 1)]))]);
        hold_back_moved(&mut all_held, &mut origins, nowhere, |_| true);
        assert!(all_held.is_empty());
    }

    #[test]
    fn the_backoff_doubles_up_to_its_maximum() {
        let pauses: Vec<u128> = (1..=6).map(|n| retry_backoff(n).as_millis()).collect();
        assert_eq!(pauses, vec![100, 200, 400, 800, 1000, 1000]);
        assert_eq!(retry_backoff(0), RETRY_BACKOFF);
        assert_eq!(retry_backoff(u32::MAX), RETRY_BACKOFF_MAX);
    }
}
