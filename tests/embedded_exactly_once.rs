//! The exactly-once iteration on the embedded group, in both modes, under random fault
//! schedules: crashes at every call the driver makes to its producer or consumer (the process
//! dies there: every later call hangs and the driver is dropped), stalls at a call (time runs
//! on: locks expire and the coordinator times transactions out, e.g. between the claim and
//! the renewal), lock expiry between iterations, leader fail-overs that forget acquisitions,
//! member-epoch bumps, a zombie producer with the same transactional id, and two workers
//! racing on the same records. After the schedule, clean workers drain the group; then a
//! `read_committed` view of the output must hold each input's outputs exactly once, and every
//! input must be settled (none lost).
#![cfg(feature = "exactly-once")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::embedded::{
    AutoOffsetReset, EmbeddedBroker, EmbeddedProducer, EmbeddedProducerConfig,
    EmbeddedShareConsumer, GroupConfig, ProduceRecord,
};
use kafka_share_sink::exactly_once::{
    ClusterCapabilities, ExactlyOnceConfig, ExactlyOnceError, ExactlyOnceMode, MirrorTask,
    ModePreference, ShareAcknowledgements, TransactionalOutput,
};
use kafka_share_sink::producer::{
    DeliveryFuture, IsolationLevel, LogReader, Producer, ProducerError, ProducerRecord,
};
use kafka_share_sink::{
    AcknowledgeType, AcknowledgementMode, CommitResults, ConsumerCapabilities, ConsumerCapability,
    ConsumerError, ConsumerRecord, DriverConfig, Error, ErrorHandling, ErrorTolerance,
    GroupMetadata, PendingCommit, ShareConsumer, ShareSinkTask, SinkRecord, SinkTask, TaskConfig,
    TaskError, TaskStage,
};
use proptest::prelude::*;
use tokio::sync::Notify;

const INPUTS: usize = 24;
const PARTITIONS: i32 = 2;
const GROUP: &str = "eos";
const LOCK: Duration = Duration::from_secs(15);
const TXN_TIMEOUT: Duration = Duration::from_secs(10);

/// Input `r-<i>` has `i % 3` outputs `r-<i>/<j>`: none, one or two.
fn outputs_of(i: usize) -> usize {
    i % 3
}

/// The task: `put_transactional` takes as long as `slow` says (a slow sink). With `refuse`,
/// the output of input [`TOO_LARGE`] is larger than the producer's [`MAX_REQUEST`].
struct Fanout {
    slow: Arc<std::sync::Mutex<Duration>>,
    refuse: bool,
}

#[async_trait]
impl SinkTask for Fanout {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }
    async fn put(&mut self, _: &[SinkRecord]) -> Result<(), TaskError> {
        Err(TaskError::fatal("exactly-once only"))
    }
    async fn put_transactional(
        &mut self,
        records: &[SinkRecord],
        output: &mut TransactionalOutput,
    ) -> Result<(), TaskError> {
        let slow = *self.slow.lock().expect("slow");
        if !slow.is_zero() {
            tokio::time::sleep(slow).await;
        }
        for record in records {
            let value = std::str::from_utf8(record.value().as_bytes().expect("bytes value"))
                .expect("utf8")
                .to_owned();
            let i: usize = value[2..].parse().expect("r-<i>");
            for j in 0..outputs_of(i) {
                let mut out = format!("{value}/{j}");
                if self.refuse && i == TOO_LARGE {
                    out.push_str(&"x".repeat(2 * MAX_REQUEST));
                }
                output.send(
                    ProducerRecord::new("out")
                        .partition(record.partition())
                        .value(out),
                );
            }
        }
        Ok(())
    }
}

/// What a worker's calls do: go on, die at the n-th call, or stall there.
#[derive(Debug, Default)]
struct Fault {
    calls: AtomicUsize,
    crash_at: Option<usize>,
    stall_at: Option<(usize, Duration)>,
    crashed: AtomicBool,
    died: Notify,
}

enum Call {
    Go,
    Stall(Duration),
    Dead,
}

impl Fault {
    fn new(crash_at: Option<usize>, stall_at: Option<(usize, Duration)>) -> Arc<Self> {
        Arc::new(Self {
            crash_at,
            stall_at,
            ..Self::default()
        })
    }

    fn call(&self) -> Call {
        if self.crashed.load(Ordering::SeqCst) {
            return Call::Dead;
        }
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        if self.crash_at == Some(n) {
            self.crashed.store(true, Ordering::SeqCst);
            self.died.notify_one();
            return Call::Dead;
        }
        match self.stall_at {
            Some((at, d)) if at == n => Call::Stall(d),
            _ => Call::Go,
        }
    }

    /// For async calls: hangs forever once dead, sleeps through a stall.
    async fn gate(&self) {
        match self.call() {
            Call::Go => {}
            Call::Stall(d) => tokio::time::sleep(d).await,
            Call::Dead => std::future::pending().await,
        }
    }

    /// For the per-record calls between the round trips: they fail once dead, and do not
    /// count as steps (a crash there is a crash at the round trip before or after).
    fn dead(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }
}

/// The fault in force for a worker, swapped between iterations.
type FaultSlot = Arc<std::sync::Mutex<Arc<Fault>>>;

fn current(slot: &FaultSlot) -> Arc<Fault> {
    Arc::clone(&slot.lock().expect("fault slot"))
}

#[derive(Debug)]
struct FaultyProducer {
    inner: EmbeddedProducer,
    fault: FaultSlot,
}

fn dead_producer() -> ProducerError {
    ProducerError::Closed
}

#[async_trait]
impl Producer for FaultyProducer {
    fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture, ProducerError> {
        if current(&self.fault).dead() {
            return Err(dead_producer());
        }
        self.inner.send(record)
    }
    async fn flush(&self) -> Result<(), ProducerError> {
        current(&self.fault).gate().await;
        self.inner.flush().await
    }
    fn transactional_id(&self) -> Option<&str> {
        self.inner.transactional_id()
    }
    async fn init_transactions(&self) -> Result<(), ProducerError> {
        current(&self.fault).gate().await;
        self.inner.init_transactions().await
    }
    fn begin_transaction(&self) -> Result<(), ProducerError> {
        if current(&self.fault).dead() {
            return Err(dead_producer());
        }
        self.inner.begin_transaction()
    }
    async fn commit_transaction(&self) -> Result<(), ProducerError> {
        current(&self.fault).gate().await;
        self.inner.commit_transaction().await
    }
    async fn abort_transaction(&self) -> Result<(), ProducerError> {
        current(&self.fault).gate().await;
        self.inner.abort_transaction().await
    }
    async fn send_share_acknowledgements(
        &self,
        acknowledgements: &ShareAcknowledgements,
        group: &GroupMetadata,
    ) -> Result<(), ProducerError> {
        current(&self.fault).gate().await;
        self.inner
            .send_share_acknowledgements(acknowledgements, group)
            .await
    }
}

struct FaultyConsumer {
    inner: EmbeddedShareConsumer,
    fault: FaultSlot,
    /// A capability this consumer says it lacks.
    withheld: Option<ConsumerCapability>,
    /// The next acknowledgement of this kind of this record (partition, offset) finds it
    /// gone, as when its lock ran out or its session was reset: `NotInBatch`, and the record
    /// stays acquired until its lock expires and the group delivers it again. Each entry
    /// fires once; of equal entries, one per acknowledgement.
    lost_at: Vec<(i32, i64, AcknowledgeType)>,
}

fn dead_consumer() -> ConsumerError {
    ConsumerError::Closed
}

#[async_trait]
impl ShareConsumer for FaultyConsumer {
    async fn subscribe(&mut self, topics: Vec<String>) -> Result<(), ConsumerError> {
        self.inner.subscribe(topics).await
    }
    fn subscription(&self) -> Vec<String> {
        self.inner.subscription()
    }
    async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ConsumerError> {
        current(&self.fault).gate().await;
        self.inner.poll(timeout).await
    }
    fn acknowledge_offset(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        ack: AcknowledgeType,
    ) -> Result<(), ConsumerError> {
        if current(&self.fault).dead() {
            return Err(dead_consumer());
        }
        if let Some(at) = self
            .lost_at
            .iter()
            .position(|lost| *lost == (partition, offset, ack))
        {
            self.lost_at.remove(at);
            // Held (it may be already): no longer in the way of the next poll, and left to
            // its lock.
            let _ = self.inner.hold_offset(topic, partition, offset);
            return Err(ConsumerError::NotInBatch {
                record: kafka_share_sink::RecordId::new(topic, partition, offset),
            });
        }
        self.inner.acknowledge_offset(topic, partition, offset, ack)
    }
    fn hold_offset(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<(), ConsumerError> {
        if current(&self.fault).dead() {
            return Err(dead_consumer());
        }
        self.inner.hold_offset(topic, partition, offset)
    }
    fn supports_renew(&self) -> bool {
        self.inner.supports_renew()
    }
    fn capabilities(&self) -> ConsumerCapabilities {
        let capabilities = self.inner.capabilities();
        match self.withheld {
            Some(withheld) => capabilities.without(withheld),
            None => capabilities,
        }
    }
    async fn commit_sync(&mut self, timeout: Duration) -> Result<CommitResults, ConsumerError> {
        current(&self.fault).gate().await;
        self.inner.commit_sync(timeout).await
    }
    fn commit_async(&mut self) -> Result<PendingCommit, ConsumerError> {
        if current(&self.fault).dead() {
            return Err(dead_consumer());
        }
        self.inner.commit_async()
    }
    async fn close(&mut self, timeout: Duration) -> Result<(), ConsumerError> {
        self.inner.close(timeout).await
    }
    fn acquisition_lock_timeout(&self) -> Option<Duration> {
        self.inner.acquisition_lock_timeout()
    }
    fn group_metadata(&self) -> GroupMetadata {
        self.inner.group_metadata()
    }
    fn acknowledgement_mode(&self) -> AcknowledgementMode {
        self.inner.acknowledgement_mode()
    }
    fn delivery_count_limit(&self) -> Option<u16> {
        self.inner.delivery_count_limit()
    }
    fn given_back_at_limit(&self) -> u64 {
        self.inner.given_back_at_limit()
    }
    fn broker_dead_letter_queue(&self) -> kafka_share_sink::BrokerDeadLetterQueue {
        self.inner.broker_dead_letter_queue()
    }
    fn take_acknowledgements_for_transaction(
        &mut self,
    ) -> Result<ShareAcknowledgements, ConsumerError> {
        if current(&self.fault).dead() {
            return Err(dead_consumer());
        }
        self.inner.take_acknowledgements_for_transaction()
    }
}

type Driver = ShareSinkTask<FaultyConsumer>;

struct Worker {
    driver: Driver,
    fault: FaultSlot,
    slow: Arc<std::sync::Mutex<Duration>>,
    member: String,
}

impl Worker {
    fn set_fault(&self, fault: Arc<Fault>) {
        *self.fault.lock().expect("fault slot") = fault;
    }
}

/// A worker; with `refuse`, its task's output of input [`TOO_LARGE`] is refused
/// (`errors.tolerance=all`, dead-letter queue `dlq`).
async fn worker(
    broker: &EmbeddedBroker,
    task: u32,
    fault: Arc<Fault>,
    refuse: bool,
) -> Option<Worker> {
    let slot: FaultSlot = Arc::new(std::sync::Mutex::new(Arc::clone(&fault)));
    let eos = ExactlyOnceConfig::new("eos", task, 2).with_barrier_timeout(Duration::from_secs(60));
    let producer = broker
        .producer_with(
            EmbeddedProducerConfig::new()
                .transactional_id(eos.transactional_id())
                .transaction_timeout(TXN_TIMEOUT)
                .max_request_size(MAX_REQUEST),
        )
        .expect("producer");
    let inner = broker.share_consumer(GROUP);
    let consumer = FaultyConsumer {
        inner,
        fault: Arc::clone(&slot),
        withheld: None,
        lost_at: Vec::new(),
    };
    let producer = FaultyProducer {
        inner: producer,
        fault: Arc::clone(&slot),
    };
    let mut config = DriverConfig::new(["in"]).poll_timeout(Duration::from_millis(50));
    if refuse {
        let queue = broker.dead_letter_queue("dlq").expect("queue");
        config = config
            .errors(ErrorHandling::new().tolerance(ErrorTolerance::All))
            .dead_letter_queue(Arc::new(queue), false);
    }
    let slow = Arc::new(std::sync::Mutex::new(Duration::ZERO));
    let task = Fanout {
        slow: Arc::clone(&slow),
        refuse,
    };
    let mut driver = ShareSinkTask::new(Box::new(task), consumer, config).with_exactly_once(
        Arc::new(producer),
        Arc::new(broker.clone()),
        eos,
    );
    // A crash during initialize (init_transactions) leaves no worker.
    let ok = tokio::select! {
        biased;
        () = fault.died.notified() => false,
        r = driver.initialize() => r.is_ok() && !fault.crashed.load(Ordering::SeqCst),
    };
    if !ok {
        return None;
    }
    let member = driver.consumer().group_metadata().member_id().to_owned();
    Some(Worker {
        driver,
        fault: slot,
        slow,
        member,
    })
}

/// Runs one iteration; `false` when the worker died (it must be dropped).
async fn iterate(w: &mut Worker) -> bool {
    let fault = current(&w.fault);
    let result = tokio::select! {
        biased;
        () = fault.died.notified() => return false,
        r = w.driver.iteration_exactly_once() => r,
    };
    if fault.crashed.load(Ordering::SeqCst) {
        return false;
    }
    match result {
        Ok(_) => true,
        Err(e) if e.is_retriable() => true,
        // A fenced zombie, or a driver that cannot go on: it stops, as a process would.
        Err(_) => false,
    }
}

#[derive(Debug, Clone)]
enum Step {
    /// One iteration of a worker (started if absent), dying at its n-th call or stalling.
    Iterate {
        worker: u32,
        crash_at: Option<usize>,
        stall_at: Option<(usize, u64)>,
    },
    /// Both workers iterate at once, the first slow in its `put` (or stalling at a later
    /// call): they race on records whose locks run out meanwhile.
    Race {
        put_secs: u64,
        stall_at: usize,
        stall_secs: u64,
    },
    /// Time passes between iterations.
    Sleep { secs: u64 },
    /// The share-partition leader changes and forgets acquisitions.
    FailOver { partition: i32 },
    /// The group bumps a worker's member epoch.
    BumpEpoch { worker: u32 },
    /// A new instance of the worker's task starts while the old one lives on (a zombie,
    /// which then tries an iteration).
    Zombie { worker: u32 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..2u32, proptest::option::weighted(0.6, 0..10usize), proptest::option::weighted(0.2, (0..10usize, 5..40u64)))
            .prop_map(|(worker, crash_at, stall_at)| Step::Iterate { worker, crash_at, stall_at }),
        2 => (prop_oneof![Just(0u64), 16..40u64], 0..10usize, 5..40u64)
            .prop_map(|(put_secs, stall_at, stall_secs)| Step::Race { put_secs, stall_at, stall_secs }),
        1 => (1..30u64).prop_map(|secs| Step::Sleep { secs }),
        1 => (0..PARTITIONS).prop_map(|partition| Step::FailOver { partition }),
        1 => (0..2u32).prop_map(|worker| Step::BumpEpoch { worker }),
        1 => (0..2u32).prop_map(|worker| Step::Zombie { worker }),
    ]
}

fn broker(mode: ExactlyOnceMode) -> EmbeddedBroker {
    broker_with_limit(mode, 10)
}

/// [`broker`], with a delivery-count limit of `limit`.
fn broker_with_limit(mode: ExactlyOnceMode, limit: u16) -> EmbeddedBroker {
    let broker = EmbeddedBroker::new();
    broker.create_topic("in", PARTITIONS as usize).expect("in");
    broker
        .create_topic("out", PARTITIONS as usize)
        .expect("out");
    broker
        .set_group_config(
            GROUP,
            GroupConfig::new()
                .auto_offset_reset(AutoOffsetReset::Earliest)
                .record_lock_duration(LOCK)
                .delivery_count_limit(limit),
        )
        .expect("group");
    if mode == ExactlyOnceMode::Ledger {
        // Kafka 4.4: no KIP-1289.
        broker.set_capabilities(
            ClusterCapabilities::none()
                .with_share_version(2)
                .with_transaction_version(2)
                .with_renew(true, true),
        );
    }
    for i in 0..INPUTS {
        let partition = i32::try_from(i).expect("small") % PARTITIONS;
        broker
            .produce(
                "in",
                ProduceRecord::new()
                    .partition(partition)
                    .value(format!("r-{i}")),
            )
            .expect("produce");
    }
    broker
}

/// Runs `steps`, then drains with clean workers and checks the outputs are exactly once.
/// With `refuse`, the output of input [`TOO_LARGE`] is refused: the input must be in the
/// dead-letter queue exactly once instead.
async fn run_schedule(
    mode: ExactlyOnceMode,
    steps: Vec<Step>,
    refuse: bool,
) -> Result<(), TestCaseError> {
    let broker = broker(mode);
    let mut slots: [Option<Worker>; 2] = [None, None];
    let mut zombies: Vec<Worker> = Vec::new();
    for step in steps {
        match step {
            Step::Iterate {
                worker: w,
                crash_at,
                stall_at,
            } => {
                let i = w as usize;
                if slots[i].is_none() {
                    slots[i] = worker(&broker, w, Fault::new(None, None), refuse).await;
                }
                if let Some(mut w) = slots[i].take() {
                    // The faults apply to this iteration only.
                    w.set_fault(Fault::new(
                        crash_at,
                        stall_at.map(|(n, s)| (n, Duration::from_secs(s))),
                    ));
                    if iterate(&mut w).await {
                        w.set_fault(Fault::new(None, None));
                        slots[i] = Some(w);
                    }
                }
            }
            Step::Race {
                put_secs,
                stall_at,
                stall_secs,
            } => {
                for (i, slot) in slots.iter_mut().enumerate() {
                    if slot.is_none() {
                        *slot = worker(
                            &broker,
                            u32::try_from(i).expect("0 or 1"),
                            Fault::new(None, None),
                            refuse,
                        )
                        .await;
                    }
                }
                if let [Some(a), Some(b)] = &mut slots {
                    *a.slow.lock().expect("slow") = Duration::from_secs(put_secs);
                    a.set_fault(Fault::new(
                        None,
                        Some((stall_at, Duration::from_secs(stall_secs))),
                    ));
                    let (alive_a, alive_b) = tokio::join!(iterate(a), async {
                        tokio::time::sleep(LOCK + Duration::from_secs(1)).await;
                        iterate(b).await
                    });
                    a.set_fault(Fault::new(None, None));
                    *a.slow.lock().expect("slow") = Duration::ZERO;
                    if !alive_a {
                        slots[0] = None;
                    }
                    if !alive_b {
                        slots[1] = None;
                    }
                }
            }
            Step::Sleep { secs } => tokio::time::sleep(Duration::from_secs(secs)).await,
            Step::FailOver { partition } => {
                broker.fail_over("in", partition).expect("fail over");
            }
            Step::BumpEpoch { worker: w } => {
                if let Some(current) = &slots[w as usize] {
                    // A member that left (-1) or rejoined has nothing to bump.
                    let _ = broker.bump_member_epoch(GROUP, &current.member);
                }
            }
            Step::Zombie { worker: w } => {
                let i = w as usize;
                let old = slots[i].take();
                slots[i] = worker(&broker, w, Fault::new(None, None), refuse).await;
                if let Some(mut zombie) = old {
                    // The old instance tries once more: it must be fenced or do no harm.
                    if iterate(&mut zombie).await {
                        zombies.push(zombie);
                    }
                }
            }
        }
    }
    drop(slots);
    drop(zombies);

    // Clean workers drain everything.
    let mut a = worker(&broker, 0, Fault::new(None, None), refuse)
        .await
        .expect("clean worker 0");
    let mut b = worker(&broker, 1, Fault::new(None, None), refuse)
        .await
        .expect("clean worker 1");
    for round in 0.. {
        let counts = broker.state_counts(GROUP);
        if counts.acknowledged + counts.archived == INPUTS as u64 {
            break;
        }
        prop_assert!(round < 400, "not drained: {counts:?}");
        // The dead-lettered input is REJECTed (archived); redelivered after its commit, it
        // is found claimed and ACCEPTed.
        prop_assert!(
            counts.archived <= u64::from(refuse),
            "an input was archived (delivery limit): {:?}",
            counts
        );
        iterate(&mut a).await;
        iterate(&mut b).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // The read_committed view of the output.
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for p in 0..PARTITIONS {
        let end = broker
            .end_offset("out", p, IsolationLevel::ReadCommitted)
            .await
            .expect("end");
        let mut from = 0;
        while from < end {
            let read = broker
                .read(
                    "out",
                    p,
                    from,
                    IsolationLevel::ReadCommitted,
                    Duration::ZERO,
                )
                .await
                .expect("read");
            for r in &read.records {
                let v = String::from_utf8(r.value().expect("value").to_vec()).expect("utf8");
                *seen.entry(v).or_insert(0) += 1;
            }
            prop_assert!(read.next_offset > from, "read made no progress");
            from = read.next_offset;
        }
    }
    let expected = if refuse {
        outputs_but_the_refused()
    } else {
        let mut expected = BTreeMap::new();
        for i in 0..INPUTS {
            for j in 0..outputs_of(i) {
                expected.insert(format!("r-{i}/{j}"), 1);
            }
        }
        expected
    };
    prop_assert_eq!(
        seen,
        expected,
        "the read_committed output is not each input's outputs exactly once"
    );
    if refuse {
        let letters = committed_values(&broker, "dlq").await;
        prop_assert_eq!(
            letters,
            BTreeMap::from([(format!("r-{TOO_LARGE}"), 1)]),
            "the refused input is not dead-lettered exactly once"
        );
    }
    Ok(())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn ledger_mode_is_exactly_once_under_random_faults(steps in proptest::collection::vec(step(), 1..14)) {
        runtime().block_on(run_schedule(ExactlyOnceMode::Ledger, steps, false))?;
    }

    #[test]
    fn atomic_acknowledgements_are_exactly_once_under_random_faults(steps in proptest::collection::vec(step(), 1..14)) {
        runtime().block_on(run_schedule(ExactlyOnceMode::AtomicAcknowledgements, steps, false))?;
    }

    /// An output refused for itself under `errors.tolerance=all`: the faults also strike
    /// while the batch is processed again one record per transaction and the record is
    /// dead-lettered.
    #[test]
    fn ledger_mode_isolating_a_refused_output_is_exactly_once_under_random_faults(steps in proptest::collection::vec(step(), 1..14)) {
        runtime().block_on(run_schedule(ExactlyOnceMode::Ledger, steps, true))?;
    }

    #[test]
    fn atomic_mode_isolating_a_refused_output_is_exactly_once_under_random_faults(steps in proptest::collection::vec(step(), 1..14)) {
        runtime().block_on(run_schedule(ExactlyOnceMode::AtomicAcknowledgements, steps, true))?;
    }
}

/// A task whose `put_transactional` always fails retriably.
struct AlwaysFails;

#[async_trait]
impl SinkTask for AlwaysFails {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }
    async fn put(&mut self, _: &[SinkRecord]) -> Result<(), TaskError> {
        Err(TaskError::fatal("exactly-once only"))
    }
    async fn put_transactional(
        &mut self,
        _: &[SinkRecord],
        _: &mut TransactionalOutput,
    ) -> Result<(), TaskError> {
        Err(TaskError::retriable("the target is away"))
    }
}

/// `broker(mode)` with the group's delivery-count limit at 2 (the second delivery is the
/// last) and a topic `dlq`.
fn last_delivery_broker(mode: ExactlyOnceMode) -> EmbeddedBroker {
    let broker = broker(mode);
    broker.create_topic("dlq", 1).expect("dlq");
    broker
        .set_group_config(
            GROUP,
            GroupConfig::new()
                .auto_offset_reset(AutoOffsetReset::Earliest)
                .record_lock_duration(LOCK)
                .delivery_count_limit(2),
        )
        .expect("group");
    broker
}

/// The driver settings of the tests, with `broker`'s topic `dlq` as the dead-letter queue.
fn dead_letter_config(broker: &EmbeddedBroker) -> DriverConfig {
    let queue = broker.dead_letter_queue("dlq").expect("queue");
    DriverConfig::new(["in"])
        .poll_timeout(Duration::from_millis(50))
        .dead_letter_queue(Arc::new(queue), false)
}

/// Released on its last allowed delivery, a record would be archived by the group (lost):
/// with a dead-letter queue, the exactly-once iteration dead-letters it in its transaction.
#[tokio::test(start_paused = true)]
async fn a_record_failing_on_its_last_delivery_is_dead_lettered_in_the_transaction() {
    for mode in [
        ExactlyOnceMode::Ledger,
        ExactlyOnceMode::AtomicAcknowledgements,
    ] {
        let broker = last_delivery_broker(mode);
        let eos = ExactlyOnceConfig::new("eos", 0, 1);
        let producer = broker
            .transactional_producer(&eos.transactional_id())
            .expect("producer");
        let config = dead_letter_config(&broker);
        let mut driver =
            ShareSinkTask::new(Box::new(AlwaysFails), broker.share_consumer(GROUP), config)
                .with_exactly_once(Arc::new(producer), Arc::new(broker.clone()), eos);
        driver.initialize().await.expect("initialize");
        assert_eq!(driver.exactly_once_mode(), Some(mode));
        let first = driver
            .iteration_exactly_once()
            .await
            .expect("first delivery");
        assert_eq!(first.released, INPUTS, "{mode}: first delivery released");
        let mut dead_lettered = 0;
        for _ in 0..10 {
            dead_lettered += driver
                .iteration_exactly_once()
                .await
                .expect("last delivery")
                .dead_lettered;
            if dead_lettered == INPUTS {
                break;
            }
        }
        assert_eq!(
            dead_lettered, INPUTS,
            "{mode}: every record dead-lettered on its last delivery"
        );
        driver.close().await.expect("close");
        let counts = broker.state_counts(GROUP);
        assert_eq!(
            counts.archived, INPUTS as u64,
            "{mode}: rejected after the commit: {counts:?}"
        );
        let letters = broker
            .read("dlq", 0, 0, IsolationLevel::ReadCommitted, Duration::ZERO)
            .await
            .expect("read dlq");
        assert_eq!(
            letters.records.len(),
            INPUTS,
            "{mode}: each dead letter committed once"
        );
        let out = broker
            .end_offset("out", 0, IsolationLevel::ReadCommitted)
            .await
            .expect("out");
        assert_eq!(out, 0, "{mode}: no output");
    }
}

/// The first `put_transactional` writes to a partition that does not exist, the later ones
/// as `Fanout`.
struct FirstSendFails {
    calls: usize,
    fanout: Fanout,
}

#[async_trait]
impl SinkTask for FirstSendFails {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }
    async fn put(&mut self, _: &[SinkRecord]) -> Result<(), TaskError> {
        Err(TaskError::fatal("exactly-once only"))
    }
    async fn put_transactional(
        &mut self,
        records: &[SinkRecord],
        output: &mut TransactionalOutput,
    ) -> Result<(), TaskError> {
        self.calls += 1;
        if self.calls == 1 {
            output.send(ProducerRecord::new("out").partition(99).value("nowhere"));
            return Ok(());
        }
        self.fanout.put_transactional(records, output).await
    }
}

/// A send refused before anything was staged or renewed, for a reason retrying cannot fix (no
/// such partition), aborts the transaction, releases the batch once and stops the task with
/// `OutputRefused` naming the target: nothing is rejected or archived, and a task started again
/// with a fixed output finishes every input exactly once.
#[tokio::test(start_paused = true)]
async fn a_refused_send_aborts_releases_and_stops_and_a_fixed_task_goes_on() {
    for mode in [
        ExactlyOnceMode::Ledger,
        ExactlyOnceMode::AtomicAcknowledgements,
    ] {
        let broker = broker(mode);
        let eos = ExactlyOnceConfig::new("eos", 0, 1);
        let producer = broker
            .transactional_producer(&eos.transactional_id())
            .expect("producer");
        let task = FirstSendFails {
            calls: 0,
            fanout: Fanout {
                slow: Arc::default(),
                refuse: false,
            },
        };
        let config = DriverConfig::new(["in"]).poll_timeout(Duration::from_millis(50));
        let mut driver = ShareSinkTask::new(Box::new(task), broker.share_consumer(GROUP), config)
            .with_exactly_once(Arc::new(producer), Arc::new(broker.clone()), eos.clone());
        driver.initialize().await.expect("initialize");
        let error = driver
            .iteration_exactly_once()
            .await
            .expect_err("a permanent refusal stops the task");
        match &error {
            Error::ExactlyOnce(ExactlyOnceError::OutputRefused {
                topic, partition, ..
            }) => {
                assert_eq!(topic.as_deref(), Some("out"), "{mode}");
                assert_eq!(*partition, Some(99), "{mode}");
            }
            other => panic!("{mode}: expected OutputRefused, got {other:?}"),
        }
        assert!(!error.is_retriable(), "{mode}");
        assert_eq!(driver.metrics().transactions_aborted, 1, "{mode}");
        let _ = driver.close().await;
        let counts = broker.state_counts(GROUP);
        assert_eq!(
            (counts.acknowledged, counts.archiving, counts.archived),
            (0, 0, 0),
            "{mode}: released, nothing rejected or archived: {counts:?}"
        );

        // Started again with a task that writes where it can.
        let producer = broker
            .transactional_producer(&eos.transactional_id())
            .expect("producer");
        let task = Fanout {
            slow: Arc::default(),
            refuse: false,
        };
        let config = DriverConfig::new(["in"]).poll_timeout(Duration::from_millis(50));
        let mut driver = ShareSinkTask::new(Box::new(task), broker.share_consumer(GROUP), config)
            .with_exactly_once(Arc::new(producer), Arc::new(broker.clone()), eos);
        driver.initialize().await.expect("initialize");
        for _ in 0..10 {
            driver.iteration_exactly_once().await.expect("goes on");
            if broker.state_counts(GROUP).acknowledged == INPUTS as u64 {
                break;
            }
        }
        assert_eq!(
            broker.state_counts(GROUP).acknowledged,
            INPUTS as u64,
            "{mode}"
        );
        let expected: usize = (0..INPUTS).map(outputs_of).sum();
        let mut outputs = 0;
        for p in 0..PARTITIONS {
            outputs += broker
                .read("out", p, 0, IsolationLevel::ReadCommitted, Duration::ZERO)
                .await
                .expect("read")
                .records
                .len();
        }
        assert_eq!(outputs, expected, "{mode}: each output once");
        driver.close().await.expect("close");
    }
}

/// A driver of `Fanout` over a `FaultyConsumer` without faults that says it lacks `withheld`
/// and loses the records (partition, offset) of `lost_at_accept` at an ACCEPT, each entry
/// once, in order; not initialized.
fn fanout_driver(
    broker: &EmbeddedBroker,
    eos: ExactlyOnceConfig,
    withheld: Option<ConsumerCapability>,
    lost_at_accept: &[(i32, i64)],
) -> Driver {
    let task = Fanout {
        slow: Arc::default(),
        refuse: false,
    };
    let config = DriverConfig::new(["in"]).poll_timeout(Duration::from_millis(50));
    let consumer = FaultyConsumer {
        inner: broker.share_consumer(GROUP),
        fault: Arc::default(),
        withheld,
        lost_at: lost_at_accept
            .iter()
            .map(|&(p, o)| (p, o, AcknowledgeType::Accept))
            .collect(),
    };
    exactly_once_driver(broker, eos, Box::new(task), consumer, config)
}

/// An exactly-once driver of `task` over `consumer`, with its transactional producer on
/// `broker`; not initialized.
fn exactly_once_driver(
    broker: &EmbeddedBroker,
    eos: ExactlyOnceConfig,
    task: Box<dyn SinkTask>,
    consumer: FaultyConsumer,
    config: DriverConfig,
) -> Driver {
    let producer = broker
        .transactional_producer(&eos.transactional_id())
        .expect("producer");
    ShareSinkTask::new(task, consumer, config).with_exactly_once(
        Arc::new(producer),
        Arc::new(broker.clone()),
        eos,
    )
}

/// Iterates, letting locks run out in between, until every input is accepted (`settled` so
/// far), checks that `claimed` of them were settled by their claims rather than processed
/// again, and closes.
async fn settle_the_rest_by_claims(driver: &mut Driver, mut settled: usize, claimed: u64) {
    for _ in 0..20 {
        if settled == INPUTS {
            break;
        }
        // A lost record comes back once its lock has run out.
        tokio::time::advance(LOCK).await;
        settled += driver
            .iteration_exactly_once()
            .await
            .expect("iteration")
            .accepted;
    }
    assert_eq!(settled, INPUTS, "every input accepted once");
    assert_eq!(
        driver.metrics().records_already_claimed,
        claimed,
        "settled by their claims, not processed again"
    );
    driver.close().await.expect("close");
}

/// Ledger mode: a record the consumer no longer has when its ACCEPT comes after the commit
/// (its lock ran out after the renewal, or its session was reset) is skipped, and the
/// iteration reports the committed transaction with the others accepted; when the group
/// delivers the record again, the ledger finds its claim and accepts it without a second
/// output. (The `NotInBatch` used to fail the iteration after its transaction had committed.)
#[tokio::test(start_paused = true)]
async fn ledger_mode_skips_a_record_lost_before_its_accept_and_settles_it_by_its_claim() {
    let broker = broker(ExactlyOnceMode::Ledger);
    let mut driver = fanout_driver(
        &broker,
        ExactlyOnceConfig::new("eos", 0, 1),
        None,
        &[(0, 0)],
    );
    driver.initialize().await.expect("initialize");
    assert_eq!(driver.exactly_once_mode(), Some(ExactlyOnceMode::Ledger));
    let first = driver
        .iteration_exactly_once()
        .await
        .expect("committed; the lost record is skipped");
    assert!(
        first.records > 0 && first.accepted + 1 == first.records,
        "all but the lost record accepted: {first:?}"
    );
    assert_eq!(driver.metrics().transactions_committed, 1);
    settle_the_rest_by_claims(&mut driver, first.accepted, 1).await;
    let counts = broker.state_counts(GROUP);
    assert_eq!(counts.acknowledged, INPUTS as u64, "{counts:?}");
    assert_eq!(
        committed_values(&broker, "out").await,
        outputs_but(None),
        "each output once"
    );
}

/// Ledger mode: a record the ledger finds claimed whose ACCEPT finds it gone (its lock ran
/// out or its session was reset since the poll) is skipped, as after a commit: the check goes
/// on and settles the records after it, and the lost one is accepted by its claim when the
/// group delivers it again. (It used to fail the iteration and leave the records after it
/// held, unchecked, until the driver closed.)
#[tokio::test(start_paused = true)]
async fn ledger_mode_skips_a_claimed_record_lost_before_its_accept() {
    let broker = broker(ExactlyOnceMode::Ledger);
    // (0, 0) and (0, 1) are lost at their ACCEPT after the commit; (0, 0) once more when the
    // ledger check finds it claimed.
    let mut driver = fanout_driver(
        &broker,
        ExactlyOnceConfig::new("eos", 0, 1),
        None,
        &[(0, 0), (0, 1), (0, 0)],
    );
    driver.initialize().await.expect("initialize");
    let first = driver.iteration_exactly_once().await.expect("committed");
    assert!(
        first.records > 2 && first.accepted + 2 == first.records,
        "all but the two lost records accepted: {first:?}"
    );
    // Both come back once their locks have run out, (0, 0) first.
    tokio::time::advance(LOCK).await;
    let second = driver
        .iteration_exactly_once()
        .await
        .expect("a claimed record lost before its ACCEPT does not fail the iteration");
    assert_eq!(
        second.accepted, 1,
        "(0, 1), after the lost one, is settled by its claim: {second:?}"
    );
    settle_the_rest_by_claims(&mut driver, first.accepted + second.accepted, 2).await;
    assert_eq!(
        committed_values(&broker, "out").await,
        outputs_but(None),
        "each output once"
    );
}

/// A transaction that fails for good on the records' last delivery because another producer
/// fenced this one: the records are released and each is counted once in
/// `records_released_at_limit` — in atomic mode too, where the transaction failed before
/// staging the acknowledgements (counted by the driver, and not again by the consumer's close,
/// which gives back only records without a final acknowledgement).
#[tokio::test(start_paused = true)]
async fn a_fenced_transaction_on_the_last_delivery_counts_each_record_once() {
    for mode in [
        ExactlyOnceMode::Ledger,
        ExactlyOnceMode::AtomicAcknowledgements,
    ] {
        let broker = broker_with_limit(mode, 2);
        // A first delivery, given back by a consumer that goes away.
        let mut first = broker.share_consumer(GROUP);
        first.subscribe(vec!["in".to_owned()]).await.unwrap();
        let mut polled = 0;
        while polled < INPUTS {
            let records = first.poll(Duration::from_millis(10)).await.unwrap();
            assert!(!records.is_empty(), "{mode}: {polled} of {INPUTS}");
            for r in &records {
                first
                    .hold_offset(r.topic(), r.partition(), r.offset())
                    .unwrap();
            }
            polled += records.len();
        }
        drop(first);
        let eos = ExactlyOnceConfig::new("eos", 0, 1);
        let mut driver = fanout_driver(&broker, eos.clone(), None, &[]);
        driver.initialize().await.expect("initialize");
        let other = broker
            .transactional_producer(&eos.transactional_id())
            .unwrap();
        other
            .init_transactions()
            .await
            .expect("fences the driver's");
        driver
            .iteration_exactly_once()
            .await
            .expect_err("the driver's producer is fenced");
        driver.close().await.expect("close");
        let m = driver.metrics();
        assert_eq!(m.transactions_committed, 0, "{mode}: {m:?}");
        assert_eq!(m.records_last_delivery, INPUTS as u64, "{mode}: {m:?}");
        assert_eq!(
            m.records_released_at_limit, INPUTS as u64,
            "{mode}: each record counted once: {m:?}"
        );
        let counts = broker.state_counts(GROUP);
        assert_eq!(counts.archived, INPUTS as u64, "{mode}: {counts:?}");
    }
}

/// Ledger mode: records given up on at their last delivery are dead-lettered in the
/// transaction and, the group having no broker dead-letter queue, REJECTed after the commit;
/// one the consumer no longer has is skipped (and logged), and the iteration goes on. (The
/// `NotInBatch` used to fail it.)
#[tokio::test(start_paused = true)]
async fn ledger_mode_skips_a_record_lost_before_its_reject() {
    let broker = last_delivery_broker(ExactlyOnceMode::Ledger);
    let consumer = FaultyConsumer {
        inner: broker.share_consumer(GROUP),
        fault: Arc::default(),
        withheld: None,
        lost_at: vec![(0, 0, AcknowledgeType::Reject)],
    };
    let mut driver = exactly_once_driver(
        &broker,
        ExactlyOnceConfig::new("eos", 0, 1),
        Box::new(AlwaysFails),
        consumer,
        dead_letter_config(&broker),
    );
    driver.initialize().await.expect("initialize");
    let first = driver
        .iteration_exactly_once()
        .await
        .expect("first delivery");
    assert_eq!(first.released, INPUTS, "first delivery released");
    let (mut dead_lettered, mut rejected) = (0, 0);
    for _ in 0..10 {
        let report = driver
            .iteration_exactly_once()
            .await
            .expect("a lost REJECT does not fail the iteration");
        dead_lettered += report.dead_lettered;
        rejected += report.rejected;
        if dead_lettered == INPUTS {
            break;
        }
    }
    assert_eq!(dead_lettered, INPUTS, "every record dead-lettered");
    assert_eq!(rejected, INPUTS - 1, "all but the lost record rejected");
    assert_eq!(driver.metrics().records_rejected, (INPUTS - 1) as u64);
    let counts = broker.state_counts(GROUP);
    assert_eq!(
        counts.acquired, 1,
        "the lost one is left to its lock: {counts:?}"
    );
}

/// `initialize` on a cluster offering `cluster` (`AtomicAcknowledgements`: KIP-1289, else
/// Kafka 4.4) with `exactly.once.mode` `preference`, and a consumer that says it lacks
/// `withheld`: the outcome and the mode chosen.
async fn initialize_without(
    cluster: ExactlyOnceMode,
    preference: ModePreference,
    withheld: Option<ConsumerCapability>,
) -> (Result<(), Error>, Option<ExactlyOnceMode>) {
    let broker = broker(cluster);
    let eos = ExactlyOnceConfig::new("eos", 0, 1).with_mode(preference);
    let mut driver = fanout_driver(&broker, eos, withheld, &[]);
    let result = driver.initialize().await;
    let mode = driver.exactly_once_mode();
    driver.close().await.expect("close");
    (result, mode)
}

/// A consumer without a capability the exactly-once mode needs is refused at `initialize`,
/// with the capability and the setting named; under `auto`, one that cannot stage its
/// acknowledgements into a transaction gets the ledger instead of atomic acknowledgements.
#[tokio::test(start_paused = true)]
async fn initialize_refuses_a_consumer_without_a_capability_the_mode_needs() {
    use ConsumerCapability::{Hold, Renew, TransactionalAcknowledgements};
    use ExactlyOnceMode::{AtomicAcknowledgements as Atomic, Ledger};
    let refused = [
        (
            Atomic,
            ModePreference::Atomic,
            TransactionalAcknowledgements,
            "exactly.once.mode=atomic",
        ),
        (Ledger, ModePreference::Auto, Renew, "ledger mode"),
        (
            Ledger,
            ModePreference::Ledger,
            Hold,
            "exactly.once.mode=ledger",
        ),
        (
            Atomic,
            ModePreference::Ledger,
            Renew,
            "exactly.once.mode=ledger",
        ),
    ];
    for (cluster, preference, withheld, setting) in refused {
        let (result, _) = initialize_without(cluster, preference, Some(withheld)).await;
        let err = result.expect_err("refused");
        match &err {
            Error::MissingCapability {
                capability,
                needed_by,
                ..
            } => {
                assert_eq!(*capability, withheld, "{err}");
                assert!(needed_by.contains(setting), "{err}");
            }
            other => panic!("{cluster} {preference:?} without {withheld:?}: {other:?}"),
        }
        assert!(err.to_string().contains(&withheld.to_string()), "{err}");
        assert!(!err.is_retriable());
    }
    let accepted = [
        (Atomic, ModePreference::Auto, None, Atomic),
        (
            Atomic,
            ModePreference::Auto,
            Some(TransactionalAcknowledgements),
            Ledger,
        ),
        (
            Ledger,
            ModePreference::Auto,
            Some(TransactionalAcknowledgements),
            Ledger,
        ),
        (Atomic, ModePreference::Atomic, Some(Renew), Atomic),
    ];
    for (cluster, preference, withheld, chosen) in accepted {
        let (result, mode) = initialize_without(cluster, preference, withheld).await;
        result.unwrap_or_else(|e| panic!("{cluster} {preference:?} without {withheld:?}: {e:?}"));
        assert_eq!(
            mode,
            Some(chosen),
            "{cluster} {preference:?} without {withheld:?}"
        );
    }
}

/// A producer whose next commit fails (the transaction must be aborted) and whose abort
/// then fails too, as when the coordinator does not answer in time: neither reaches the
/// embedded producer, whose transaction stays open.
#[derive(Debug)]
struct AbortUnanswered {
    inner: EmbeddedProducer,
    fail_commit: AtomicBool,
    fail_abort: AtomicBool,
}

#[async_trait]
impl Producer for AbortUnanswered {
    fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture, ProducerError> {
        self.inner.send(record)
    }
    async fn flush(&self) -> Result<(), ProducerError> {
        self.inner.flush().await
    }
    fn transactional_id(&self) -> Option<&str> {
        self.inner.transactional_id()
    }
    async fn init_transactions(&self) -> Result<(), ProducerError> {
        self.inner.init_transactions().await
    }
    fn begin_transaction(&self) -> Result<(), ProducerError> {
        self.inner.begin_transaction()
    }
    async fn commit_transaction(&self) -> Result<(), ProducerError> {
        if self.fail_commit.swap(false, Ordering::SeqCst) {
            return Err(ProducerError::Abortable {
                reason: "the coordinator answered CONCURRENT_TRANSACTIONS too long".to_owned(),
                source: None,
            });
        }
        self.inner.commit_transaction().await
    }
    async fn abort_transaction(&self) -> Result<(), ProducerError> {
        if self.fail_abort.swap(false, Ordering::SeqCst) {
            return Err(ProducerError::Timeout {
                timeout: Duration::from_secs(30),
                last: None,
            });
        }
        self.inner.abort_transaction().await
    }
    async fn send_share_acknowledgements(
        &self,
        acknowledgements: &ShareAcknowledgements,
        group: &GroupMetadata,
    ) -> Result<(), ProducerError> {
        self.inner
            .send_share_acknowledgements(acknowledgements, group)
            .await
    }
}

/// An abort that fails (the coordinator did not answer) leaves the transaction open; the
/// driver initializes the producer again, which aborts it, and goes on: every input's
/// outputs committed once, nothing of the failed transaction visible. It used to stop the
/// driver: the producer refused a second `init_transactions` ("initialised already").
#[tokio::test(start_paused = true)]
async fn an_abort_the_coordinator_did_not_answer_is_recovered_by_initializing_again() {
    for mode in [
        ExactlyOnceMode::Ledger,
        ExactlyOnceMode::AtomicAcknowledgements,
    ] {
        let broker = broker(mode);
        let eos = ExactlyOnceConfig::new("eos", 0, 1);
        let producer = AbortUnanswered {
            inner: broker
                .transactional_producer(&eos.transactional_id())
                .expect("producer"),
            fail_commit: AtomicBool::new(true),
            fail_abort: AtomicBool::new(true),
        };
        let task = Fanout {
            slow: Arc::default(),
            refuse: false,
        };
        let config = DriverConfig::new(["in"]).poll_timeout(Duration::from_millis(50));
        let mut driver = ShareSinkTask::new(Box::new(task), broker.share_consumer(GROUP), config)
            .with_exactly_once(Arc::new(producer), Arc::new(broker.clone()), eos);
        driver.initialize().await.expect("initialize");
        for _ in 0..20 {
            driver
                .iteration_exactly_once()
                .await
                .unwrap_or_else(|e| panic!("{mode}: the driver goes on: {e:?}"));
            if broker.state_counts(GROUP).acknowledged == INPUTS as u64 {
                break;
            }
        }
        assert_eq!(driver.metrics().transactions_aborted, 1, "{mode}");
        driver.close().await.expect("close");
        assert_eq!(
            committed_values(&broker, "out").await,
            outputs_but(None),
            "{mode}"
        );
    }
}

/// A task that writes only in the exactly-once iteration ([`MirrorTask`]) under a driver not
/// set up for it is refused at `initialize`, before the subscription: its `put` would fail
/// fatally on the first poll, whose records the driver would REJECT (archived by the group).
/// Nothing is acquired: every input is there afterwards on its first delivery.
#[tokio::test(start_paused = true)]
async fn a_plain_driver_refuses_a_task_that_writes_only_in_the_exactly_once_iteration() {
    let broker = broker(ExactlyOnceMode::Ledger);
    let config = DriverConfig::new(["in"]).poll_timeout(Duration::from_millis(50));
    let task: Box<dyn SinkTask> = Box::new(MirrorTask::with_prefix("copy."));
    let mut driver = ShareSinkTask::new(task, broker.share_consumer(GROUP), config);
    let err = driver.initialize().await.expect_err("refused");
    assert!(
        matches!(
            err,
            Error::Config {
                key: "exactly.once",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.is_config() && !err.is_retriable(), "{err:?}");
    assert!(err.to_string().contains("with_exactly_once"), "{err}");
    driver.close().await.expect("close");

    let mut consumer = broker.share_consumer(GROUP);
    consumer
        .subscribe(vec!["in".to_owned()])
        .await
        .expect("subscribe");
    let mut seen = 0;
    for _ in 0..20 {
        for record in consumer
            .poll(Duration::from_millis(50))
            .await
            .expect("poll")
        {
            assert_eq!(record.delivery_count(), 1, "{record:?}");
            consumer
                .acknowledge(&record, AcknowledgeType::Accept)
                .expect("accept");
            seen += 1;
        }
        consumer
            .commit_sync(Duration::from_secs(1))
            .await
            .expect("commit");
        if seen == INPUTS {
            break;
        }
    }
    assert_eq!(seen, INPUTS);
    consumer.close(Duration::from_secs(1)).await.expect("close");
}

/// `run_exactly_once` initializes, iterates until the shutdown future completes, and closes.
#[tokio::test(start_paused = true)]
async fn run_exactly_once_iterates_until_shutdown_and_closes() {
    let broker = broker(ExactlyOnceMode::Ledger);
    let eos = ExactlyOnceConfig::new("eos", 0, 1);
    let producer = broker
        .transactional_producer(&eos.transactional_id())
        .expect("producer");
    let task = Fanout {
        slow: Arc::default(),
        refuse: false,
    };
    let config = DriverConfig::new(["in"]).poll_timeout(Duration::from_millis(50));
    let mut driver = ShareSinkTask::new(Box::new(task), broker.share_consumer(GROUP), config)
        .with_exactly_once(Arc::new(producer), Arc::new(broker.clone()), eos);
    let watched = broker.clone();
    let done = async move {
        while watched.state_counts(GROUP).acknowledged < INPUTS as u64 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    driver.run_exactly_once(done).await.expect("run");
    assert_eq!(driver.exactly_once_mode(), Some(ExactlyOnceMode::Ledger));
    assert!(
        driver.iteration_exactly_once().await.is_err(),
        "closed after the run"
    );
    let committed = driver.metrics().transactions_committed;
    assert!(committed >= 1, "{committed}");
}

/// The embedded producer's `max.request.size` in the tests of a refused output record.
const MAX_REQUEST: usize = 4096;
/// The input whose (only) output is larger than [`MAX_REQUEST`].
const TOO_LARGE: usize = 7;

/// `Fanout`'s outputs, except that input [`TOO_LARGE`]'s output is larger than the producer
/// accepts; each `put_transactional` call takes `slow` (a slow sink).
struct OneTooLarge {
    slow: Duration,
    calls: Arc<AtomicUsize>,
    /// Fails its `n`th call, retriably or not: `(n, retriable)`.
    fail_on: Option<(usize, bool)>,
}

#[async_trait]
impl SinkTask for OneTooLarge {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }
    async fn put(&mut self, _: &[SinkRecord]) -> Result<(), TaskError> {
        Err(TaskError::fatal("exactly-once only"))
    }
    async fn put_transactional(
        &mut self,
        records: &[SinkRecord],
        output: &mut TransactionalOutput,
    ) -> Result<(), TaskError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        match self.fail_on {
            Some((n, true)) if n == call => return Err(TaskError::retriable("the sink is away")),
            Some((n, false)) if n == call => return Err(TaskError::fatal("the sink broke")),
            _ => {}
        }
        if !self.slow.is_zero() {
            tokio::time::sleep(self.slow).await;
        }
        for record in records {
            let value = std::str::from_utf8(record.value().as_bytes().expect("bytes value"))
                .expect("utf8")
                .to_owned();
            let i: usize = value[2..].parse().expect("r-<i>");
            for j in 0..outputs_of(i) {
                let mut out = format!("{value}/{j}");
                if i == TOO_LARGE {
                    out.push_str(&"x".repeat(2 * MAX_REQUEST));
                }
                output.send(
                    ProducerRecord::new("out")
                        .partition(record.partition())
                        .value(out),
                );
            }
        }
        Ok(())
    }
}

/// A driver of `OneTooLarge` on `broker`, with `errors.tolerance` `tolerance` and the
/// dead-letter queue `dlq` (context headers on).
fn too_large_driver(
    broker: &EmbeddedBroker,
    tolerance: ErrorTolerance,
    slow: Duration,
    calls: &Arc<AtomicUsize>,
) -> ShareSinkTask<EmbeddedShareConsumer> {
    too_large_driver_failing(broker, tolerance, slow, calls, None)
}

/// [`too_large_driver`], whose task fails its `fail_on.0`th call (retriably when
/// `fail_on.1`).
fn too_large_driver_failing(
    broker: &EmbeddedBroker,
    tolerance: ErrorTolerance,
    slow: Duration,
    calls: &Arc<AtomicUsize>,
    fail_on: Option<(usize, bool)>,
) -> ShareSinkTask<EmbeddedShareConsumer> {
    let eos = ExactlyOnceConfig::new("eos", 0, 1);
    let producer = broker
        .producer_with(
            EmbeddedProducerConfig::new()
                .transactional_id(eos.transactional_id())
                .transaction_timeout(TXN_TIMEOUT)
                .max_request_size(MAX_REQUEST),
        )
        .expect("producer");
    let queue = broker.dead_letter_queue("dlq").expect("queue");
    let config = DriverConfig::new(["in"])
        .poll_timeout(Duration::from_millis(50))
        .errors(ErrorHandling::new().tolerance(tolerance))
        .dead_letter_queue(Arc::new(queue), true);
    let task = OneTooLarge {
        slow,
        calls: Arc::clone(calls),
        fail_on,
    };
    ShareSinkTask::new(Box::new(task), broker.share_consumer(GROUP), config).with_exactly_once(
        Arc::new(producer),
        Arc::new(broker.clone()),
        eos,
    )
}

/// The values of `topic`'s committed records, all partitions, with how often each is seen.
async fn committed_values(broker: &EmbeddedBroker, topic: &str) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for p in 0..PARTITIONS {
        let Ok(read) = broker
            .read(topic, p, 0, IsolationLevel::ReadCommitted, Duration::ZERO)
            .await
        else {
            continue;
        };
        for r in &read.records {
            let v = String::from_utf8(r.value().expect("value").to_vec()).expect("utf8");
            *seen.entry(v).or_insert(0) += 1;
        }
    }
    seen
}

/// What a driver settling everything must have written: each output once, except those of
/// [`TOO_LARGE`].
fn outputs_but_the_refused() -> BTreeMap<String, usize> {
    outputs_but(Some(TOO_LARGE))
}

/// Each output of every input once, except those of input `left_out`.
fn outputs_but(left_out: Option<usize>) -> BTreeMap<String, usize> {
    let mut expected = BTreeMap::new();
    for i in (0..INPUTS).filter(|i| Some(*i) != left_out) {
        for j in 0..outputs_of(i) {
            expected.insert(format!("r-{i}/{j}"), 1);
        }
    }
    expected
}

fn header<'a>(record: &'a ConsumerRecord, key: &str) -> Option<&'a str> {
    record
        .headers()
        .last(key)
        .and_then(|h| h.value())
        .map(|v| std::str::from_utf8(v).expect("utf8 header"))
}

/// One output record larger than the producer accepts, under `errors.tolerance=all`: the
/// transaction of the batch is aborted, the driver processes the batch again one record per
/// transaction, dead-letters the source record whose output was refused (in a committed
/// transaction, with the reason in Connect's headers) and REJECTs it; every other record's
/// outputs are committed exactly once and the record accepted.
#[tokio::test(start_paused = true)]
async fn an_output_refused_for_itself_dead_letters_only_its_record_under_tolerance_all() {
    for mode in [
        ExactlyOnceMode::Ledger,
        ExactlyOnceMode::AtomicAcknowledgements,
    ] {
        let broker = broker(mode);
        let calls = Arc::new(AtomicUsize::new(0));
        let mut driver = too_large_driver(&broker, ErrorTolerance::All, Duration::ZERO, &calls);
        driver.initialize().await.expect("initialize");
        let report = driver
            .iteration_exactly_once()
            .await
            .expect("a record refused for itself does not stop the task");
        assert_eq!(report.records, INPUTS, "{mode}: one batch");
        assert_eq!(
            (report.accepted, report.rejected, report.dead_lettered),
            (INPUTS - 1, 1, 1),
            "{mode}: {report:?}"
        );
        let m = driver.metrics();
        driver.close().await.expect("close");
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1 + INPUTS,
            "{mode}: the batch, then each record once (the refused record's put is not repeated for its dead letter)"
        );
        assert_eq!(
            (
                m.transactions_aborted,
                m.records_dead_lettered,
                m.lock_losses
            ),
            (2, 1, 0),
            "{mode}: the batch's and the refused record's own transactions aborted: {m:?}"
        );
        let counts = broker.state_counts(GROUP);
        assert_eq!(
            (counts.acknowledged, counts.archived),
            (INPUTS as u64 - 1, 1),
            "{mode}: {counts:?}"
        );
        assert_eq!(
            committed_values(&broker, "out").await,
            outputs_but_the_refused(),
            "{mode}: every other output exactly once"
        );
        let letters = broker
            .read("dlq", 0, 0, IsolationLevel::ReadCommitted, Duration::ZERO)
            .await
            .expect("read dlq");
        assert_eq!(letters.records.len(), 1, "{mode}: one dead letter");
        let letter = &letters.records[0];
        assert_eq!(
            letter.value().map(|v| &v[..]),
            Some(format!("r-{TOO_LARGE}").as_bytes()),
            "{mode}: the source record's bytes"
        );
        assert_eq!(
            header(letter, "__connect.errors.stage"),
            Some("KAFKA_PRODUCE"),
            "{mode}"
        );
        assert_eq!(
            header(letter, "__connect.errors.exception.class.name"),
            Some("org.apache.kafka.common.errors.RecordTooLargeException"),
            "{mode}"
        );
        let message = header(letter, "__connect.errors.exception.message").expect("message");
        assert!(
            message.contains("`out` partition 1"),
            "{mode}: names the target: {message}"
        );
        let trace = header(letter, "__connect.errors.exception.stacktrace").expect("trace");
        assert!(
            trace.contains("max.request.size"),
            "{mode}: the producer's error is the cause: {trace}"
        );
    }
}

/// The same under `errors.tolerance=none` (the default): the task stops with
/// `OutputRefused` naming the target, nothing is rejected, archived or written.
#[tokio::test(start_paused = true)]
async fn an_output_refused_for_itself_stops_the_task_under_tolerance_none() {
    for mode in [
        ExactlyOnceMode::Ledger,
        ExactlyOnceMode::AtomicAcknowledgements,
    ] {
        let broker = broker(mode);
        let calls = Arc::new(AtomicUsize::new(0));
        let mut driver = too_large_driver(&broker, ErrorTolerance::None, Duration::ZERO, &calls);
        driver.initialize().await.expect("initialize");
        let error = driver
            .iteration_exactly_once()
            .await
            .expect_err("a refused record stops the task");
        match &error {
            Error::ExactlyOnce(ExactlyOnceError::OutputRefused {
                topic,
                partition,
                source,
            }) => {
                assert_eq!(topic.as_deref(), Some("out"), "{mode}");
                assert_eq!(*partition, Some(1), "{mode}");
                assert!(
                    matches!(source, ProducerError::RecordTooLarge { .. }),
                    "{mode}: {source:?}"
                );
            }
            other => panic!("{mode}: expected OutputRefused, got {other:?}"),
        }
        assert!(!error.is_retriable(), "{mode}");
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{mode}: not isolated");
        assert_eq!(driver.metrics().transactions_aborted, 1, "{mode}");
        let _ = driver.close().await;
        let counts = broker.state_counts(GROUP);
        assert_eq!(
            (counts.acknowledged, counts.archiving, counts.archived),
            (0, 0, 0),
            "{mode}: released, nothing rejected or archived: {counts:?}"
        );
        assert!(committed_values(&broker, "out").await.is_empty(), "{mode}");
        assert!(committed_values(&broker, "dlq").await.is_empty(), "{mode}");
    }
}

/// A fatal `put_transactional` in the middle of an isolation, on the records' last delivery:
/// the record being put and those still waiting for their turn are dead-lettered in a
/// transaction, not released for the group to archive; those settled before stay settled.
#[tokio::test(start_paused = true)]
async fn a_fatal_put_during_an_isolation_dead_letters_the_waiting_last_deliveries() {
    for mode in [
        ExactlyOnceMode::Ledger,
        ExactlyOnceMode::AtomicAcknowledgements,
    ] {
        let broker = broker_with_limit(mode, 2);
        // An initialized driver whose task fails its `fail_on.0`th call, and its call count.
        let shared = &broker;
        let failing = |fail_on| async move {
            let calls = Arc::new(AtomicUsize::new(0));
            let mut d = too_large_driver_failing(
                shared,
                ErrorTolerance::All,
                Duration::ZERO,
                &calls,
                Some(fail_on),
            );
            d.initialize().await.expect("initialize");
            (d, calls)
        };
        // First delivery: the put fails retriably and the batch is released.
        let (mut d, _) = failing((1, true)).await;
        let report = d.iteration_exactly_once().await.expect("retriable");
        assert_eq!(report.released, INPUTS, "{mode}: {report:?}");
        d.close().await.expect("close");
        // Last delivery: the batch's transaction is refused for one output, the isolation
        // puts one record per transaction, and the third call fails fatally.
        let (mut d, calls) = failing((3, false)).await;
        let error = d.iteration_exactly_once().await.expect_err("fatal");
        assert!(
            matches!(
                error,
                Error::Task {
                    stage: TaskStage::Put,
                    ..
                }
            ),
            "{mode}: {error:?}"
        );
        let m = d.metrics();
        d.close().await.expect("close");
        assert_eq!(calls.load(Ordering::SeqCst), 3, "{mode}");
        assert_eq!(m.records_released_at_limit, 0, "{mode}: {m:?}");
        let letters = committed_values(&broker, "dlq").await;
        assert!(letters.values().all(|n| *n == 1), "{mode}: {letters:?}");
        let counts = broker.state_counts(GROUP);
        // Every record settled: accepted (its outputs committed) or dead-lettered and
        // rejected; none archived without its dead letter.
        assert_eq!(
            counts.acknowledged + counts.archived,
            INPUTS as u64,
            "{mode}: {counts:?}"
        );
        assert_eq!(counts.archived, letters.len() as u64, "{mode}: {counts:?}");
        assert!(letters.len() >= INPUTS - 2, "{mode}: {letters:?}");
    }
}

/// Isolating a batch one record per transaction takes longer than a lock when the sink is
/// slow: the records waiting for their turn are renewed, so none is lost to another delivery
/// and the round settles the whole batch.
#[tokio::test(start_paused = true)]
async fn the_records_waiting_in_an_isolation_keep_their_locks() {
    for mode in [
        ExactlyOnceMode::Ledger,
        ExactlyOnceMode::AtomicAcknowledgements,
    ] {
        let broker = broker(mode);
        let calls = Arc::new(AtomicUsize::new(0));
        // 25 calls of 2 s: more than three lock durations.
        let slow = Duration::from_secs(2);
        let mut driver = too_large_driver(&broker, ErrorTolerance::All, slow, &calls);
        driver.initialize().await.expect("initialize");
        let started = tokio::time::Instant::now();
        let report = driver.iteration_exactly_once().await.expect("iteration");
        let took = started.elapsed();
        assert!(took > 3 * LOCK, "{mode}: the isolation took {took:?}");
        assert_eq!(
            (report.accepted, report.rejected, report.released),
            (INPUTS - 1, 1, 0),
            "{mode}: the whole batch settled in the round: {report:?}"
        );
        let m = driver.metrics();
        assert_eq!(m.lock_losses, 0, "{mode}: {m:?}");
        driver.close().await.expect("close");
        let counts = broker.state_counts(GROUP);
        assert_eq!(
            (counts.acknowledged, counts.archived),
            (INPUTS as u64 - 1, 1),
            "{mode}: {counts:?}"
        );
        assert_eq!(
            committed_values(&broker, "out").await,
            outputs_but_the_refused(),
            "{mode}"
        );
    }
}
