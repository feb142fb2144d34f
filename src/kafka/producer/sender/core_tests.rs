//! Property tests of the sender's core: arbitrary runs of records, turns, time, and answers
//! (written, lost, refused, too large; connections failing; Metadata without leaders; epoch
//! bumps and v1 partitions refused) against what the loop relies on.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use proptest::prelude::*;
use tokio::time::Instant;
use uuid::Uuid;

use super::answers::Sent;
use super::core::{Action, ProducePlan, SenderConfig, SenderCore};
use crate::kafka::codec::record_batch::{Compression, NewRecord};
use crate::kafka::error::ClientError;
use crate::kafka::error::ConnectionError;
use crate::kafka::producer::accumulator::{Accumulator, AccumulatorConfig, ProducerIdentity, Tp};
use crate::kafka::producer::cluster::TopicMetadata;
use crate::kafka::producer::partitioner::Sticky;
use crate::kafka::producer::txn::{Phase, TxnState, TxnVersion};
use crate::kafka::producer::{State, Waiting};
use crate::producer::{DeliveryFuture, ProducerError};

const MAX_IN_FLIGHT: usize = 2;
const RETRY_BACKOFF: Duration = Duration::from_millis(50);
const RETRY_BACKOFF_MAX: Duration = Duration::from_millis(400);
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(2);
const LINGER: Duration = Duration::from_millis(5);
const MAX_REQUEST_SIZE: usize = 600;
/// The cluster: topic, partitions' leaders.
const TOPICS: [(&str, [i32; 2]); 2] = [("a", [1, 2]), ("b", [2, 2])];

#[derive(Debug, Clone)]
enum Op {
    /// A record for topic `TOPICS[topic]`, partition chosen or sticky.
    Send {
        topic: usize,
        partition: Option<i32>,
        len: usize,
    },
    Advance(u64),
    Turn,
    /// The oldest request to broker 1 or 2 answered: 0 written, 1 connection lost,
    /// 2 NOT_LEADER_OR_FOLLOWER, 3 MESSAGE_TOO_LARGE, 4 INVALID_RECORD.
    Produced {
        node: i32,
        how: u8,
    },
    Metadata {
        leaders: bool,
    },
    Connected {
        node: i32,
        ok: bool,
    },
    Disconnect(i32),
    Bumped(bool),
    Added(bool),
    Flush(bool),
    /// A transaction ended with its markers still to be written (the producer holds the
    /// next transaction's Produce requests for at most `MARKERS_WAIT`).
    Ended,
    /// The outstanding wait for the markers ended.
    MarkersDone,
}

/// How long Produce requests wait for an ended transaction's markers at most.
const MARKERS_WAIT: Duration = Duration::from_millis(100);

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2usize, proptest::option::of(0..2i32), 1..200usize)
            .prop_map(|(topic, partition, len)| Op::Send { topic, partition, len }),
        2 => (0..300u64).prop_map(Op::Advance),
        4 => Just(Op::Turn),
        4 => (1..3i32, 0..5u8).prop_map(|(node, how)| Op::Produced { node, how }),
        1 => any::<bool>().prop_map(|leaders| Op::Metadata { leaders }),
        2 => (1..3i32, any::<bool>()).prop_map(|(node, ok)| Op::Connected { node, ok }),
        1 => (1..3i32).prop_map(Op::Disconnect),
        1 => any::<bool>().prop_map(Op::Bumped),
        1 => any::<bool>().prop_map(Op::Added),
        1 => any::<bool>().prop_map(Op::Flush),
        1 => Just(Op::Ended),
        1 => Just(Op::MarkersDone),
    ]
}

/// The core, the producer's state, and what the loop would have outstanding.
struct Harness {
    core: SenderCore,
    state: State,
    now: Instant,
    connected: HashSet<i32>,
    connecting: HashSet<i32>,
    produces: VecDeque<ProducePlan>,
    metadata: Option<Vec<Arc<str>>>,
    /// No Metadata request may start before this.
    metadata_not_before: Option<Instant>,
    /// The pause after the next Metadata answer without leaders: `retry.backoff.ms`
    /// doubling up to `retry.backoff.max.ms`, back to the start after a good answer.
    metadata_backoff: Duration,
    bump: Option<ProducerIdentity>,
    /// No bump may start before this (`retry.backoff.max.ms` after a failed one).
    bump_not_before: Option<Instant>,
    /// Per partition and producer epoch, the end of the sequences sent so far.
    sequence_end: HashMap<(Tp, i16), i64>,
    add: Option<(ProducerIdentity, Vec<Tp>)>,
    /// The outstanding wait for an ended transaction's markers.
    markers: Option<u64>,
    futures: Vec<DeliveryFuture>,
    next_offset: i64,
}

impl Harness {
    fn new(txn_v1: bool) -> Self {
        let now = Instant::now();
        let mut accumulator = Accumulator::new(AccumulatorConfig {
            batch_size: 200,
            max_batch_size: 1000,
            linger: LINGER,
            max_in_flight: MAX_IN_FLIGHT,
            idempotent: true,
            transactional: txn_v1,
            compression: Compression::None,
            retry_backoff: RETRY_BACKOFF,
            retry_backoff_max: RETRY_BACKOFF_MAX,
            delivery_timeout: DELIVERY_TIMEOUT,
        });
        accumulator.reset_sequences(ProducerIdentity { id: 7, epoch: 0 });
        let txn = txn_v1.then(|| {
            let mut txn = TxnState::new();
            txn.phase = Phase::InTransaction;
            txn.version = TxnVersion::V1;
            txn
        });
        let config = SenderConfig {
            max_in_flight: MAX_IN_FLIGHT,
            retry_backoff: RETRY_BACKOFF,
            retry_backoff_max: RETRY_BACKOFF_MAX,
            delivery_timeout: DELIVERY_TIMEOUT,
            max_request_size: MAX_REQUEST_SIZE,
            transactional_id: txn_v1.then(|| "t".to_owned()),
        };
        Self {
            core: SenderCore::new(config, now),
            state: State {
                accumulator,
                topics: Default::default(),
                waiting: Default::default(),
                waiting_because: Default::default(),
                metadata_wanted: HashSet::new(),
                sticky: Sticky::new(1),
                next_record: 0,
                flushing: 0,
                txn,
                fatal: None,
            },
            now,
            connected: HashSet::new(),
            connecting: HashSet::new(),
            produces: VecDeque::new(),
            metadata: None,
            metadata_not_before: None,
            metadata_backoff: RETRY_BACKOFF,
            bump: None,
            bump_not_before: None,
            sequence_end: HashMap::new(),
            add: None,
            markers: None,
            futures: Vec::new(),
            next_offset: 0,
        }
    }

    /// Metadata of `topic` known already: its partitions' leaders.
    fn know(&mut self, topic: &str, leaders: Vec<i32>) {
        self.state.topics.insert(
            Arc::from(topic),
            TopicMetadata::Known {
                id: Uuid::nil(),
                leaders,
            },
        );
    }

    /// What `KafkaProducer::send` does with a record.
    fn send(&mut self, topic: usize, partition: Option<i32>, len: usize) {
        let state = &mut self.state;
        if state.txn.as_ref().is_some_and(|t| t.check_send().is_err()) || state.fatal.is_some() {
            return;
        }
        let topic: Arc<str> = Arc::from(TOPICS[topic].0);
        let record = NewRecord {
            timestamp: 0,
            key: None,
            value: Some(Bytes::from(vec![b'v'; len])),
            headers: Vec::new(),
        };
        let (sender, future) = DeliveryFuture::channel();
        let id = state.next_record;
        state.next_record += 1;
        match state.topics.get(&topic) {
            Some(TopicMetadata::Known { leaders, .. }) if !state.waiting.contains_key(&topic) => {
                let partition = partition
                    .unwrap_or_else(|| state.sticky.partition(&topic, None, leaders.len()));
                let tp = (Arc::clone(&topic), partition);
                if state.accumulator.append(tp, id, record, sender, self.now) {
                    state.sticky.batch_closed(&topic, partition);
                }
            }
            _ => {
                state.accumulator.track(
                    id,
                    crate::kafka::producer::accumulator::record_size(&record),
                );
                state.metadata_wanted.insert(Arc::clone(&topic));
                state.waiting.entry(topic).or_default().push_back(Waiting {
                    id,
                    partition,
                    record,
                    sender,
                    deadline: self.now + DELIVERY_TIMEOUT,
                });
            }
        }
        self.futures.push(future);
    }

    /// One turn, with the checks of every action it starts.
    fn turn(&mut self) -> Result<Option<Instant>, TestCaseError> {
        let connected = self.connected.clone();
        let turn = self
            .core
            .turn(&mut self.state, self.now, &|n| connected.contains(&n));
        let idle_before = self.idle();
        let started = !turn.actions.is_empty();
        for action in turn.actions {
            match action {
                Action::Metadata(topics) => {
                    prop_assert!(self.metadata.is_none(), "two Metadata requests at once");
                    if let Some(at) = self.metadata_not_before {
                        prop_assert!(self.now >= at, "Metadata asked again inside its backoff");
                    }
                    prop_assert!(!topics.is_empty());
                    self.metadata = Some(topics);
                }
                Action::Bump(current) => {
                    prop_assert!(self.bump.is_none(), "two epoch bumps at once");
                    prop_assert!(self.produces.is_empty(), "a bump with Produce in flight");
                    if let Some(at) = self.bump_not_before {
                        prop_assert!(self.now >= at, "a bump again inside its backoff");
                    }
                    self.bump = Some(current);
                }
                Action::AddPartitions(producer, partitions) => {
                    prop_assert!(self.add.is_none(), "two AddPartitionsToTxn at once");
                    prop_assert!(
                        self.state
                            .txn
                            .as_ref()
                            .is_some_and(|t| t.version == TxnVersion::V1)
                    );
                    self.add = Some((producer, partitions));
                }
                Action::AwaitMarkers { ended, deadline } => {
                    prop_assert!(self.markers.is_none(), "two waits for the markers at once");
                    prop_assert!(self.now < deadline, "a wait that is over already");
                    self.markers = Some(ended);
                }
                Action::Connect(node) => {
                    prop_assert!(self.connecting.insert(node), "two connects to {node}");
                    prop_assert!(!self.connected.contains(&node));
                }
                Action::Produce(plan) => {
                    prop_assert!(self.bump.is_none(), "Produce while a bump is outstanding");
                    let held = self.state.txn.as_ref().and_then(|t| t.markers);
                    prop_assert!(
                        held.is_none_or(|m| self.now >= m.deadline),
                        "Produce while the last transaction's markers may be unwritten"
                    );
                    prop_assert!(
                        self.connected.contains(&plan.node),
                        "Produce to an unconnected broker"
                    );
                    prop_assert!(!plan.batches.is_empty());
                    let size: usize = plan.batches.iter().map(|(b, _)| b.bytes.len()).sum();
                    prop_assert!(
                        plan.batches.len() == 1 || size <= MAX_REQUEST_SIZE,
                        "a request of {size} bytes over max.request.size"
                    );
                    for (batch, _) in &plan.batches {
                        prop_assert_eq!(leader(&batch.tp), plan.node, "sent to another broker");
                        self.check_sequence(&batch.tp, &batch.bytes)?;
                        if let Some(txn) = &self.state.txn {
                            prop_assert!(
                                txn.added.contains(&batch.tp),
                                "v1: a partition not added"
                            );
                        }
                    }
                    let node = plan.node;
                    self.produces.push_back(plan);
                    let in_flight = self.produces.iter().filter(|p| p.node == node).count();
                    prop_assert!(
                        in_flight <= MAX_IN_FLIGHT,
                        "{in_flight} requests in flight to broker {node}"
                    );
                }
            }
        }
        // Never asleep for good with work left and nothing that will answer.
        if idle_before && !started && turn.wake_at.is_none() {
            prop_assert!(
                self.pending() == 0,
                "{} records wait, nothing is outstanding, and the sender sleeps for good",
                self.pending()
            );
        }
        Ok(turn.wake_at)
    }

    /// Nothing outstanding that will call back.
    fn idle(&self) -> bool {
        self.produces.is_empty()
            && self.metadata.is_none()
            && self.bump.is_none()
            && self.add.is_none()
            && self.markers.is_none()
            && self.connecting.is_empty()
    }

    fn pending(&mut self) -> usize {
        self.futures.retain_mut(|f| f.now_or_never().is_none());
        self.futures.len()
    }

    fn produced(&mut self, node: i32, how: u8) {
        let Some(i) = self.produces.iter().position(|p| p.node == node) else {
            return;
        };
        let Some(plan) = self.produces.remove(i) else {
            return;
        };
        let sent = Sent {
            broker: format!("node {node}"),
            batches: plan
                .batches
                .iter()
                .map(|(b, id)| (b.tp.clone(), b.batch_id, *id))
                .collect(),
            txn: plan.txn,
        };
        let result = if how == 1 {
            Err(ClientError::Connection(ConnectionError::Io {
                broker: format!("node {node}"),
                source: std::io::Error::new(std::io::ErrorKind::ConnectionReset, "cut"),
            }))
        } else {
            // 5 and 6 only in the tests that ask for them (the property test draws 0..=4).
            let code = [0, 0, 6, 10, 87, 100, 56][usize::from(how)];
            let mut topics: Vec<TopicProduceResponse> = Vec::new();
            for (batch, _) in &plan.batches {
                let partition = PartitionProduceResponse::default()
                    .with_index(batch.tp.1)
                    .with_error_code(code)
                    .with_base_offset(self.next_offset);
                self.next_offset += 100;
                topics.push(
                    TopicProduceResponse::default()
                        .with_name(TopicName(StrBytes::from_string(batch.tp.0.to_string())))
                        .with_partition_responses(vec![partition]),
                );
            }
            Ok(ProduceResponse::default().with_responses(topics))
        };
        self.core
            .on_produced(&mut self.state, node, sent, result, self.now);
    }

    fn metadata(&mut self, leaders: bool) {
        let Some(topics) = self.metadata.take() else {
            return;
        };
        let answers = topics
            .iter()
            .map(|t| {
                let known = TOPICS
                    .iter()
                    .find(|(name, _)| *name == &**t)
                    .map(|(_, l)| l);
                let meta = match known {
                    Some(l) => TopicMetadata::Known {
                        id: Uuid::nil(),
                        leaders: if leaders {
                            l.to_vec()
                        } else {
                            vec![-1; l.len()]
                        },
                    },
                    None => TopicMetadata::Unknown,
                };
                (t.to_string(), meta)
            })
            .collect();
        self.core
            .on_metadata(&mut self.state, &topics, Ok(answers), &[], self.now);
        // An answer that left leaders unknown is asked again only after the backoff.
        if leaders {
            self.metadata_not_before = None;
            self.metadata_backoff = RETRY_BACKOFF;
        } else {
            self.metadata_not_before = Some(self.now + self.metadata_backoff);
            self.metadata_backoff = (self.metadata_backoff * 2).min(RETRY_BACKOFF_MAX);
        }
    }

    fn apply(&mut self, op: Op) -> Result<(), TestCaseError> {
        match op {
            Op::Send {
                topic,
                partition,
                len,
            } => self.send(topic, partition, len),
            Op::Advance(ms) => self.now += Duration::from_millis(ms),
            Op::Turn => {
                self.turn()?;
            }
            Op::Produced { node, how } => self.produced(node, how),
            Op::Metadata { leaders } => self.metadata(leaders),
            Op::Connected { node, ok } => {
                if self.connecting.remove(&node) {
                    if ok {
                        self.connected.insert(node);
                    }
                    self.core.on_connected(&mut self.state, node, ok);
                }
            }
            Op::Disconnect(node) => {
                self.connected.remove(&node);
            }
            Op::Bumped(ok) => {
                if let Some(current) = self.bump.take() {
                    let result = if ok {
                        Ok(ProducerIdentity {
                            id: current.id,
                            epoch: current.epoch + 1,
                        })
                    } else {
                        Err(ProducerError::Closed)
                    };
                    self.bump_not_before = (!ok).then(|| self.now + RETRY_BACKOFF_MAX);
                    self.core.on_bumped(&mut self.state, result, self.now);
                }
            }
            Op::Added(ok) => {
                if let Some((producer, partitions)) = self.add.take() {
                    let result = if ok {
                        Ok(())
                    } else {
                        Err(ProducerError::Closed)
                    };
                    self.core
                        .on_added(&mut self.state, producer, partitions, result);
                }
            }
            Op::Flush(on) => self.state.flushing = usize::from(on),
            Op::Ended => {
                if let Some(txn) = self.state.txn.as_mut() {
                    txn.markers_pending(self.now + MARKERS_WAIT);
                }
            }
            Op::MarkersDone => {
                if let Some(ended) = self.markers.take() {
                    self.core.on_markers(&mut self.state, ended);
                }
            }
        }
        Ok(())
    }

    /// Everything answers well from now on: every record must be settled in the end.
    ///
    /// And soon: whatever waits (a retry's backoff, Metadata's, a failed bump's, `linger.ms`)
    /// is due within `retry.backoff.max.ms` of the start, so a sender that wakes when its
    /// work is due settles the records well before their delivery timeout.
    fn settle(&mut self) -> Result<(), TestCaseError> {
        self.state.flushing = 1;
        let start = self.now;
        let soon = 3 * RETRY_BACKOFF_MAX + Duration::from_millis(100);
        for _ in 0..2_000 {
            if self.pending() == 0 {
                let took = self.now - start;
                prop_assert!(took <= soon, "the records took {took:?} to settle");
                return Ok(());
            }
            self.abort_if_failed();
            let wake = self.turn()?;
            let mut answered = false;
            while let Some(node) = self.produces.front().map(|p| p.node) {
                self.produced(node, 0);
                answered = true;
            }
            if self.metadata.is_some() {
                self.metadata(true);
                answered = true;
            }
            for node in std::mem::take(&mut self.connecting) {
                self.connected.insert(node);
                self.core.on_connected(&mut self.state, node, true);
                answered = true;
            }
            if let Some(current) = self.bump.take() {
                let next = ProducerIdentity {
                    id: current.id,
                    epoch: current.epoch + 1,
                };
                self.core.on_bumped(&mut self.state, Ok(next), self.now);
                self.bump_not_before = None;
                answered = true;
            }
            if let Some((producer, partitions)) = self.add.take() {
                self.core
                    .on_added(&mut self.state, producer, partitions, Ok(()));
                answered = true;
            }
            if let Some(ended) = self.markers.take() {
                self.core.on_markers(&mut self.state, ended);
                answered = true;
            }
            if !answered {
                match wake {
                    Some(at) if at > self.now => self.now = at,
                    Some(_) => {}
                    None => self.now += Duration::from_millis(10),
                }
            }
        }
        prop_assert_eq!(self.pending(), 0, "records never settled");
        Ok(())
    }
}

impl Harness {
    /// A batch's sequences (its header: producer epoch at 51, base sequence at 53, record
    /// count at 57) leave no gap after those sent before under the same epoch: a broker would
    /// refuse the batch with OUT_OF_ORDER_SEQUENCE_NUMBER. A retry or a part of a split batch
    /// repeats sequences; a new epoch starts again at 0.
    fn check_sequence(&mut self, tp: &Tp, bytes: &[u8]) -> Result<(), TestCaseError> {
        prop_assert!(bytes.len() >= 61, "a batch shorter than its header");
        let epoch = i16::from_be_bytes([bytes[51], bytes[52]]);
        let base = i64::from(i32::from_be_bytes([
            bytes[53], bytes[54], bytes[55], bytes[56],
        ]));
        let count = i64::from(i32::from_be_bytes([
            bytes[57], bytes[58], bytes[59], bytes[60],
        ]));
        let end = self.sequence_end.entry((tp.clone(), epoch)).or_insert(0);
        prop_assert!(
            base <= *end,
            "partition {:?} epoch {}: sequence {} sent after only {} (a gap)",
            tp,
            epoch,
            base,
            end
        );
        *end = (*end).max(base + count);
        Ok(())
    }

    /// What `abort_transaction` does to the records of a transaction that cannot commit.
    fn abort_if_failed(&mut self) {
        let Some(txn) = self.state.txn.as_mut() else {
            return;
        };
        if !matches!(
            txn.phase,
            Phase::Abortable(_) | Phase::Fatal(_) | Phase::Aborting
        ) {
            return;
        }
        if !matches!(txn.phase, Phase::Fatal(_)) {
            txn.phase = Phase::Aborting;
        }
        let aborted = ProducerError::Abortable {
            reason: "aborted".to_owned(),
            source: None,
        };
        self.state.accumulator.fail_waiting(&aborted);
        self.state.waiting_because.clear();
        for waiting in std::mem::take(&mut self.state.waiting)
            .into_values()
            .flatten()
        {
            waiting.fail(&mut self.state.accumulator, None, aborted.clone());
        }
    }
}

/// The partition's leader in the test's cluster.
fn leader(tp: &Tp) -> i32 {
    TOPICS
        .iter()
        .find(|(name, _)| *name == &*tp.0)
        .and_then(|(_, leaders)| leaders.get(usize::try_from(tp.1).ok()?))
        .copied()
        .unwrap_or(-1)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_sender_keeps_its_limits_and_settles_every_record(
        txn_v1 in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let mut harness = Harness::new(txn_v1);
        for op in ops {
            harness.apply(op)?;
        }
        harness.settle()?;
    }
}

/// The case the property test found: batches ready for one broker, more than
/// `max.request.size` together, went out in more requests than the connection may have in
/// flight.
#[test]
fn one_turn_opens_no_more_requests_than_the_connection_has_room_for() {
    let mut harness = Harness::new(false);
    harness.know("b", vec![2, 2]);
    harness.know("a", vec![1, 2]);
    harness.connected.insert(2);
    // Three partitions led by broker 2, a batch of ~530 bytes each: three requests' worth.
    for (topic, partition) in [(1, 0), (1, 1), (0, 1)] {
        harness.send(topic, Some(partition), 450);
    }
    harness.state.flushing = 1;
    harness.turn().unwrap();
    assert_eq!(
        harness.produces.len(),
        MAX_IN_FLIGHT,
        "{:?}",
        harness.produces
    );
    // An answer frees a place: the third batch goes.
    harness.produced(2, 0);
    harness.turn().unwrap();
    assert_eq!(harness.produces.len(), MAX_IN_FLIGHT);
    harness.settle().unwrap();
}

/// The case the property test found next: an answer lost (batch 3, sequence 3) while the
/// batch before it was refused as too large and split; then a part of the split, a single
/// record, was refused too. The epoch bump that must renumber the partition waited for
/// batch 3's unknown write to resolve, which the pending bump itself kept from being sent:
/// every record waited for its delivery timeout. Batch 3 sat past a sequence the broker
/// refused, so it cannot have been written.
#[test]
fn a_refusal_resolves_the_lost_answers_after_it() {
    let mut harness = Harness::new(false);
    let send = |partition, len| Op::Send {
        topic: 0,
        partition,
        len,
    };
    let produced = |how| Op::Produced { node: 2, how };
    let ops = [
        send(None, 33),
        send(None, 65),
        Op::Turn,
        Op::Metadata { leaders: true },
        Op::Turn,
        send(Some(1), 1),
        Op::Connected { node: 2, ok: true },
        Op::Turn,
        produced(0),
        send(Some(1), 118),
        Op::Turn,
        Op::Turn,
        // Too large: split. Then the answer of the batch behind it is lost.
        produced(3),
        produced(1),
        Op::Turn,
        // The first part of the split is one record, too large: refused.
        produced(3),
    ];
    for op in ops {
        harness.apply(op).unwrap();
    }
    harness.settle().unwrap();
}

/// Records of a transaction that fail after `send` returned, before any batch held them —
/// their topic's metadata refused, or never found within the delivery timeout — spoil the
/// transaction, as a batch the broker refuses does: a commit would otherwise go through
/// without them, and a caller that did not await each delivery would lose them unseen.
#[test]
fn records_failed_while_waiting_for_their_topic_make_the_transaction_abortable() {
    let committable = |harness: &Harness| {
        matches!(
            harness.state.txn.as_ref().map(|t| &t.phase),
            Some(Phase::InTransaction)
        )
    };
    // Refused by the Metadata answer.
    let mut harness = Harness::new(true);
    harness.send(0, Some(0), 10);
    harness.turn().unwrap();
    let topics = harness.metadata.take().expect("a Metadata request");
    assert!(committable(&harness));
    let answers = topics
        .iter()
        .map(|t| {
            let refused = ClientError::Broker(crate::kafka::error::BrokerError {
                api: "Metadata",
                code: 29,
                name: "TOPIC_AUTHORIZATION_FAILED",
                message: None,
                retriable: false,
            });
            (t.to_string(), TopicMetadata::Failed(Arc::new(refused)))
        })
        .collect();
    harness
        .core
        .on_metadata(&mut harness.state, &topics, Ok(answers), &[], harness.now);
    assert!(!committable(&harness), "{:?}", harness.state.txn);
    assert!(
        harness
            .state
            .txn
            .as_ref()
            .is_some_and(|t| t.check_send().is_err())
    );

    // A partition the topic turns out not to have.
    let mut harness = Harness::new(true);
    harness.send(0, Some(7), 10);
    harness.turn().unwrap();
    let future = harness.futures.pop().expect("the record");
    harness.metadata(true);
    let failed = future.now_or_never();
    assert!(
        matches!(
            failed,
            Some(Err(ProducerError::UnknownPartition { partition: 7, .. }))
        ),
        "{failed:?}"
    );
    assert!(!committable(&harness), "{:?}", harness.state.txn);

    // Never found within the delivery timeout.
    let mut harness = Harness::new(true);
    harness.send(1, Some(0), 10);
    harness.turn().unwrap();
    harness.metadata.take();
    let future = harness.futures.pop().expect("the record");
    harness.now += DELIVERY_TIMEOUT + Duration::from_millis(1);
    harness.turn().unwrap();
    let failed = future.now_or_never();
    assert!(
        matches!(failed, Some(Err(ProducerError::Timeout { .. }))),
        "{failed:?}"
    );
    assert!(!committable(&harness), "{:?}", harness.state.txn);
}

/// A record that waited for its topic's metadata for the whole delivery timeout reports why:
/// the last retriable error of the topic's Metadata (a request that failed, a leader not
/// elected yet), and a topic the cluster does not know only when it said so. The exactly-once
/// driver stops for good on the latter: an outage must not read as a topic gone.
#[test]
fn a_record_that_waited_out_its_delivery_timeout_reports_the_last_metadata_error() {
    let leader_not_available = || {
        ClientError::Broker(crate::kafka::error::BrokerError {
            api: "Metadata",
            code: 5,
            name: "LEADER_NOT_AVAILABLE",
            message: None,
            retriable: true,
        })
    };
    for how in ["request failed", "retriable topic error", "unknown topic"] {
        let mut harness = Harness::new(true);
        harness.send(1, Some(0), 10);
        harness.turn().unwrap();
        let topics = harness.metadata.take().expect("a Metadata request");
        let result = match how {
            "request failed" => Err(ClientError::Timeout(Duration::from_secs(30))),
            "retriable topic error" => Ok(topics
                .iter()
                .map(|t| {
                    let error = Arc::new(leader_not_available());
                    (t.to_string(), TopicMetadata::Retry(error))
                })
                .collect()),
            _ => Ok(topics
                .iter()
                .map(|t| (t.to_string(), TopicMetadata::Unknown))
                .collect()),
        };
        harness
            .core
            .on_metadata(&mut harness.state, &topics, result, &[], harness.now);
        assert!(
            harness.state.metadata_wanted.contains(&topics[0]),
            "{how}: asked again"
        );
        let future = harness.futures.pop().expect("the record");
        harness.now += DELIVERY_TIMEOUT + Duration::from_millis(1);
        harness.turn().unwrap();
        let Some(Err(ProducerError::Timeout {
            last: Some(last), ..
        })) = future.now_or_never()
        else {
            panic!("{how}: a timeout with its last error expected");
        };
        match how {
            "request failed" => assert!(
                matches!(&*last, ProducerError::Kafka { source }
                    if matches!(**source, ClientError::Timeout(_))),
                "{how}: {last:?}"
            ),
            "retriable topic error" => assert!(
                matches!(&*last, ProducerError::Kafka { source }
                    if matches!(&**source, ClientError::Broker(b) if b.code == 5)),
                "{how}: {last:?}"
            ),
            _ => assert!(
                matches!(&*last, ProducerError::UnknownPartition { partition: 0, .. }),
                "{how}: {last:?}"
            ),
        }
        assert!(
            harness.state.waiting_because.is_empty(),
            "{how}: nothing waits any more"
        );
    }
}

/// UNKNOWN_TOPIC_ID (a topic deleted and created again under its name) and
/// KAFKA_STORAGE_ERROR send the producer for fresh metadata, as NOT_LEADER_OR_FOLLOWER does:
/// the partition is retried under the topic's new id or its new leader, not for the whole
/// delivery timeout against the old one.
#[test]
fn produce_errors_of_stale_metadata_ask_for_it_again() {
    for how in [2u8, 5, 6] {
        let mut harness = Harness::new(false);
        harness.know("a", vec![1, 2]);
        harness.connected.insert(2);
        harness.send(0, Some(1), 10);
        harness.state.flushing = 1;
        harness.turn().unwrap();
        assert_eq!(harness.produces.len(), 1, "how {how}");
        assert!(harness.state.metadata_wanted.is_empty());
        harness.produced(2, how);
        assert!(
            harness.state.metadata_wanted.contains("a"),
            "how {how}: {:?}",
            harness.state.metadata_wanted
        );
    }
}
