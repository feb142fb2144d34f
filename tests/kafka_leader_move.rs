//! `KafkaShareConsumer` while partition leaders move, on a multi-broker cluster.
//!
//! `scripts/test.sh` starts a three-node cluster for these tests (`KAFKA_NODES=3 scripts/kafka.sh
//! start`) and sets `KAFKA_MULTI_BOOTSTRAP`; the main single-broker run ignores them. By hand:
//!
//! ```sh
//! KAFKA_NODES=3 ./scripts/kafka.sh start
//! eval "export $(KAFKA_NODES=3 ./scripts/kafka.sh env)"
//! cargo test --test kafka_leader_move -- --ignored
//! ./scripts/kafka.sh stop
//! ```
//!
//! Leaders move with `KafkaAdmin::move_leader` (reassignment + preferred election, nothing
//! stops) or because their broker goes away (`scripts/kafka.sh stop-node` / `kill-node`; the
//! node is started again afterwards). Every test keeps a ledger of what was delivered and what
//! each commit reported, and checks at-least-once delivery:
//! - every record is delivered, and every acknowledgement is reported by a commit, per
//!   partition, as committed or failed;
//! - a record comes again only if a commit reported a failure for it; a record whose
//!   acceptance was reported never comes again;
//! - no record comes often enough to be archived, and in the end a new member of the group,
//!   with fresh metadata, finds nothing left for longer than the lock: everything was accepted.

mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kafka_share_sink::BrokerError;
use kafka_share_sink::{
    AcknowledgeType, AdminError, CommitResults, ConsumerRecord, KafkaAdmin, KafkaShareConsumer,
    KafkaShareConsumerConfig, ShareConsumer, TopicPartition,
};
use rskafka::client::ClientBuilder;
use rskafka::client::partition::{Compression, PartitionClient, UnknownTopicHandling};
use rskafka::record::Record;
use tokio::sync::watch;
use tokio::time::Instant;

/// The group's acquisition lock: long enough for a leader move, short enough to wait out.
const LOCK_MS: u64 = 5_000;

/// The broker's default delivery-count limit: a record delivered this often is archived.
const DELIVERY_LIMIT: u32 = 5;

/// How long a test may take before it gives up.
const TEST_DEADLINE: Duration = Duration::from_secs(150);

/// The tests move leaders and stop brokers of one shared cluster: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The bootstrap list of a cluster with two or more brokers, or `None` to skip.
///
/// # Panics
///
/// Under `KAFKA_REQUIRE_BROKER=1` when `KAFKA_MULTI_BOOTSTRAP` is missing: the test command
/// promised a multi-broker cluster.
fn multi_bootstrap(test: &str) -> Option<String> {
    support::bootstrap(test)?;
    match std::env::var("KAFKA_MULTI_BOOTSTRAP") {
        Ok(list) if !list.trim().is_empty() => Some(list.trim().to_owned()),
        _ if std::env::var("KAFKA_REQUIRE_BROKER").as_deref() == Ok("1") => panic!(
            "{test}: KAFKA_REQUIRE_BROKER=1 but KAFKA_MULTI_BOOTSTRAP is not set: start a cluster \
             with KAFKA_NODES=3 scripts/kafka.sh start and export what `scripts/kafka.sh env` prints"
        ),
        _ => {
            eprintln!("SKIPPED {test}: needs a multi-broker cluster (KAFKA_MULTI_BOOTSTRAP)");
            None
        }
    }
}

/// A cluster, its admin client and its broker ids (at least `min_brokers` of them).
struct Cluster {
    bootstrap: String,
    admin: KafkaAdmin,
    brokers: Vec<i32>,
}

async fn cluster(test: &str, min_brokers: usize) -> Option<Cluster> {
    let bootstrap = multi_bootstrap(test)?;
    let admin = KafkaAdmin::connect(&bootstrap)
        .await
        .expect("admin connects");
    let brokers = admin.broker_ids().await.expect("broker ids");
    assert!(
        brokers.len() >= min_brokers,
        "{test}: KAFKA_MULTI_BOOTSTRAP={bootstrap} has brokers {brokers:?}, the test needs {min_brokers}"
    );
    Some(Cluster {
        bootstrap,
        admin,
        brokers,
    })
}

/// A fresh topic whose partition `i` lives on `replicas[i]` (leader first), and a group that
/// reads it from the start with the short lock.
async fn topic_and_group(c: &Cluster, test: &str, replicas: &[Vec<i32>]) -> (String, String) {
    let topic = support::unique(test);
    let group = support::unique(&format!("{test}-group"));
    c.admin
        .create_topic_with_replicas(&topic, replicas)
        .await
        .expect("topic created");
    let lock = LOCK_MS.to_string();
    c.admin
        .set_share_group_config(
            &group,
            &[
                ("share.auto.offset.reset", "earliest"),
                ("share.record.lock.duration.ms", lock.as_str()),
            ],
        )
        .await
        .expect("group configured");
    (topic, group)
}

async fn leader(admin: &KafkaAdmin, topic: &str, partition: i32) -> Option<i32> {
    admin
        .partitions(topic)
        .await
        .expect("partitions")
        .into_iter()
        .find(|p| p.partition == partition)
        .and_then(|p| p.leader)
}

/// Waits (up to 30 s) until the metadata names `expected` the partition's leader.
async fn wait_for_leader(admin: &KafkaAdmin, topic: &str, partition: i32, expected: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = leader(admin, topic, partition).await;
        if now == Some(expected) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the leader of {topic}-{partition} is {now:?}, not {expected}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Produces with rskafka, which finds the partition's leader itself (and a new one after a move).
struct Producer {
    partitions: Vec<PartitionClient>,
    next: Vec<usize>,
}

impl Producer {
    async fn new(bootstrap: &str, topic: &str, partitions: i32) -> Self {
        let brokers = bootstrap.split(',').map(str::to_owned).collect();
        let client = ClientBuilder::new(brokers)
            .build()
            .await
            .expect("rskafka client");
        let mut clients = Vec::new();
        for p in 0..partitions {
            clients.push(
                client
                    .partition_client(topic.to_owned(), p, UnknownTopicHandling::Retry)
                    .await
                    .expect("partition client"),
            );
        }
        Self {
            next: vec![0; clients.len()],
            partitions: clients,
        }
    }

    /// `n` more records to `partition`, in batches of ten (so a fetch takes a few at a time).
    async fn produce(&mut self, partition: i32, n: usize) {
        let index = usize::try_from(partition).expect("partition index");
        let first = self.next[index];
        let records: Vec<Record> = (first..first + n)
            .map(|i| Record {
                key: Some(format!("key-{i}").into_bytes()),
                value: Some(format!("value-{partition}-{i}").into_bytes()),
                headers: BTreeMap::new(),
                timestamp: chrono::Utc::now(),
            })
            .collect();
        for chunk in records.chunks(10) {
            self.partitions[index]
                .produce(chunk.to_vec(), Compression::NoCompression)
                .await
                .expect("produce");
        }
        self.next[index] += n;
    }
}

async fn consumer(bootstrap: &str, group: &str, topic: &str, max_poll: i32) -> KafkaShareConsumer {
    let config = KafkaShareConsumerConfig::new(bootstrap, group)
        .max_poll_records(max_poll)
        .fetch_max_wait(Duration::from_millis(200))
        .request_timeout(Duration::from_secs(15))
        .connect_timeout(Duration::from_secs(5));
    let mut c = KafkaShareConsumer::connect(config)
        .await
        .expect("consumer connects");
    c.subscribe(vec![topic.to_owned()])
        .await
        .expect("subscribe");
    c
}

type Id = (i32, i64);

/// What was delivered, acknowledged and reported, and every broken promise.
#[derive(Debug, Default)]
struct Ledger {
    topic: Arc<str>,
    /// Deliveries per record.
    delivered: HashMap<Id, u32>,
    /// Accepted but not yet covered by a commit result, per partition.
    pending: BTreeMap<i32, Vec<i64>>,
    /// Records whose acceptance a commit reported.
    accepted: HashSet<Id>,
    /// Records whose acknowledgement a commit reported failed (at least once).
    failed: HashSet<Id>,
    /// Failed acknowledgements by error.
    reasons: BTreeMap<String, usize>,
    /// Broken promises.
    violations: Vec<String>,
}

impl Ledger {
    fn new(topic: &str) -> Self {
        Self {
            topic: Arc::from(topic),
            ..Self::default()
        }
    }

    /// Records a poll's records and accepts them.
    fn deliver_and_accept(&mut self, c: &mut KafkaShareConsumer, records: &[ConsumerRecord]) {
        for r in records {
            let id = (r.partition(), r.offset());
            if self.accepted.contains(&id) {
                self.violations.push(format!(
                    "{id:?} came again (delivery {}) after a commit reported it accepted",
                    r.delivery_count()
                ));
            }
            *self.delivered.entry(id).or_default() += 1;
            c.acknowledge(r, AcknowledgeType::Accept)
                .expect("acknowledge");
            self.pending.entry(id.0).or_default().push(id.1);
        }
    }

    /// Files a commit's results: every pending partition must be in them.
    fn committed(&mut self, results: &CommitResults) {
        for (partition, offsets) in std::mem::take(&mut self.pending) {
            let tp = TopicPartition::new(Arc::clone(&self.topic), partition);
            match results.get(&tp) {
                Some(Ok(())) => self
                    .accepted
                    .extend(offsets.into_iter().map(|o| (partition, o))),
                Some(Err(e)) => {
                    *self.reasons.entry(e.to_string()).or_default() += offsets.len();
                    self.failed
                        .extend(offsets.into_iter().map(|o| (partition, o)));
                }
                None => self.violations.push(format!(
                    "the acknowledgements of partition {partition} (offsets {offsets:?}) were \
                     neither committed nor reported: {results:?}"
                )),
            }
        }
    }

    /// Records delivered more than once although no commit reported their acknowledgement
    /// failed.
    fn unexplained_duplicates(&self) -> Vec<Id> {
        let mut ids: Vec<Id> = self
            .delivered
            .iter()
            .filter(|(id, n)| **n > 1 && !self.failed.contains(id))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    fn duplicates(&self) -> usize {
        self.delivered.values().map(|n| (*n - 1) as usize).sum()
    }

    /// Checks the end state against `expected` records per partition: every record
    /// delivered, every acknowledgement reported, every duplicate explained, none archived.
    fn check(&self, expected: &[(i32, usize)]) {
        let mut missing = Vec::new();
        let mut unreported = Vec::new();
        for (partition, n) in expected {
            for offset in 0..i64::try_from(*n).expect("count") {
                let id = (*partition, offset);
                if !self.delivered.contains_key(&id) {
                    missing.push(id);
                } else if !self.accepted.contains(&id) && !self.failed.contains(&id) {
                    unreported.push(id);
                }
            }
        }
        let unexplained = self.unexplained_duplicates();
        let most = self.delivered.values().copied().max().unwrap_or(0);
        eprintln!(
            "ledger: {} delivered, {} duplicates, at most {most} deliveries of one record, \
             failures reported {:?}",
            self.delivered.len(),
            self.duplicates(),
            self.reasons
        );
        assert!(
            self.violations.is_empty(),
            "broken promises: {:#?}",
            self.violations
        );
        assert!(missing.is_empty(), "lost records: {missing:?}");
        assert!(
            unreported.is_empty() && self.pending.is_empty(),
            "acknowledgements never reported: {unreported:?}, pending {:?}",
            self.pending
        );
        assert!(
            unexplained.is_empty(),
            "records delivered again without a reported failure: {unexplained:?}"
        );
        assert!(
            most < DELIVERY_LIMIT,
            "a record was delivered {most} times: the broker may have archived it"
        );
        let total: usize = expected.iter().map(|(_, n)| n).sum();
        assert_eq!(self.delivered.len(), total, "no record outside the topic");
    }
}

/// One poll, every record accepted, then a commit whose results go into the ledger.
async fn poll_accept_commit(c: &mut KafkaShareConsumer, ledger: &mut Ledger) -> usize {
    let records = c.poll(Duration::from_millis(300)).await.expect("poll");
    ledger.deliver_and_accept(c, &records);
    let results = c
        .commit_sync(Duration::from_secs(20))
        .await
        .expect("commit");
    ledger.committed(&results);
    records.len()
}

/// Polls (accepting and committing) until every record of `expected` was delivered, then
/// until nothing came for longer than the lock. Returns how long the first part took.
async fn finish(
    c: &mut KafkaShareConsumer,
    ledger: &mut Ledger,
    expected: &[(i32, usize)],
) -> Duration {
    let started = Instant::now();
    let deadline = started + TEST_DEADLINE;
    let done = |l: &Ledger| {
        expected.iter().all(|(p, n)| {
            (0..i64::try_from(*n).expect("count")).all(|o| l.delivered.contains_key(&(*p, o)))
        })
    };
    while !done(ledger) && Instant::now() < deadline {
        poll_accept_commit(c, ledger).await;
    }
    let delivered = started.elapsed();
    let quiet = Duration::from_millis(LOCK_MS + 1_000);
    let mut last = Instant::now();
    while last.elapsed() < quiet && Instant::now() < deadline {
        if poll_accept_commit(c, ledger).await > 0 {
            last = Instant::now();
        }
    }
    delivered
}

/// A new member of the group, with its own connections and fresh metadata, finds nothing
/// left for longer than the lock: every record was accepted (none is archived, as
/// [`Ledger::check`] makes sure, so nothing else can keep it from coming).
async fn nothing_left(bootstrap: &str, group: &str, topic: &str) {
    let mut c = consumer(bootstrap, group, topic, 500).await;
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(LOCK_MS + 1_000) {
        let records = c.poll(Duration::from_millis(500)).await.expect("poll");
        let ids: Vec<Id> = records
            .iter()
            .map(|r| (r.partition(), r.offset()))
            .collect();
        assert!(ids.is_empty(), "records not accepted: {ids:?}");
    }
    c.close(Duration::from_secs(10)).await.expect("close");
}

/// `KafkaAdmin::move_leader`: a replica becomes the leader by reordering, a broker that is
/// no replica yet takes the last replica's place, an unknown broker is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a multi-broker cluster; scripts/test.sh runs it against one"]
async fn move_leader_reorders_replicas_and_elects_the_target() {
    let _serial = SERIAL.lock().await;
    let Some(c) = cluster("move_leader", 2).await else {
        return;
    };
    let (a, b) = (c.brokers[0], c.brokers[1]);
    let topic = support::unique("move-leader");
    c.admin
        .create_topic_with_replicas(&topic, &[vec![a, b]])
        .await
        .expect("topic created");
    let before = c.admin.partitions(&topic).await.expect("partitions");
    assert_eq!(before.len(), 1);
    assert_eq!(
        (before[0].leader, before[0].replicas.clone()),
        (Some(a), vec![a, b])
    );

    c.admin.move_leader(&topic, 0, b).await.expect("move to b");
    let after = c.admin.partitions(&topic).await.expect("partitions");
    assert_eq!(
        (after[0].leader, after[0].replicas.clone()),
        (Some(b), vec![b, a])
    );
    assert!(
        after[0].leader_epoch > before[0].leader_epoch,
        "{before:?} -> {after:?}"
    );
    c.admin
        .move_leader(&topic, 0, b)
        .await
        .expect("already the leader");

    if let Some(&third) = c.brokers.get(2) {
        c.admin
            .move_leader(&topic, 0, third)
            .await
            .expect("move to a new replica");
        let moved = c.admin.partitions(&topic).await.expect("partitions");
        assert_eq!(
            (moved[0].leader, moved[0].replicas.clone()),
            (Some(third), vec![third, b])
        );
    }

    let error = c
        .admin
        .move_leader(&topic, 0, 9_999)
        .await
        .expect_err("no such broker");
    assert!(
        matches!(
            &error,
            AdminError::Broker {
                call: "move_leader",
                error: BrokerError {
                    api: "AlterPartitionReassignments",
                    ..
                },
                ..
            }
        ),
        "{error:?}"
    );
    let error = c
        .admin
        .move_leader(&topic, 7, b)
        .await
        .expect_err("no such partition");
    assert!(
        matches!(
            &error,
            AdminError::Broker {
                call: "move_leader",
                error: BrokerError {
                    name: "UNKNOWN_TOPIC_OR_PARTITION",
                    ..
                },
                ..
            }
        ),
        "{error:?}"
    );
    c.admin.delete_topic(&topic).await.expect("delete");
}

/// Consumes two partitions while their leaders move twice under the consumer, with records
/// produced before and after each move: everything arrives, nothing is lost, and every
/// duplicate was announced by a failed commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a multi-broker cluster; scripts/test.sh runs it against one"]
async fn consumer_follows_leader_moves_and_loses_nothing() {
    let _serial = SERIAL.lock().await;
    let Some(c) = cluster("leader_moves", 2).await else {
        return;
    };
    let (a, b) = (c.brokers[0], c.brokers[1]);
    let third = c.brokers.get(2).copied().unwrap_or(a);
    // p0 moves a -> b (joining p1's leader, whose session is open); p1 moves b -> third.
    let replicas = [vec![a, b], vec![b, third]];
    let (topic, group) = topic_and_group(&c, "leader-moves", &replicas).await;
    const BATCH: usize = 200;
    let mut producer = Producer::new(&c.bootstrap, &topic, 2).await;
    for p in 0..2 {
        producer.produce(p, BATCH).await;
    }

    // The mover: after a quarter of the first records, move p0; produce; after more, move p1;
    // produce. `moves` counts the moves done, so deliveries can be dated.
    let (progress_tx, mut progress) = watch::channel(0_usize);
    let (moves_tx, moves) = watch::channel(0_u32);
    let mover = {
        let bootstrap = c.bootstrap.clone();
        let topic = topic.clone();
        tokio::spawn(async move {
            let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
            let mut producer = producer;
            progress
                .wait_for(|n| *n >= BATCH / 2)
                .await
                .expect("progress");
            admin.move_leader(&topic, 0, b).await.expect("move p0");
            moves_tx.send_replace(1);
            for p in 0..2 {
                producer.produce(p, BATCH).await;
            }
            progress
                .wait_for(|n| *n >= 2 * BATCH + BATCH / 2)
                .await
                .expect("progress");
            admin.move_leader(&topic, 1, third).await.expect("move p1");
            moves_tx.send_replace(2);
            for p in 0..2 {
                producer.produce(p, BATCH).await;
            }
        })
    };

    let mut consumer = consumer(&c.bootstrap, &group, &topic, 10).await;
    let mut ledger = Ledger::new(&topic);
    let mut after_move = [0_usize; 2];
    let deadline = Instant::now() + TEST_DEADLINE;
    let mut round = 0_u32;
    // Until the moves are done and every record produced around them came: a record produced
    // after a move can only come through the new leader, in this loop.
    let total = 6 * BATCH;
    while !(mover.is_finished() && ledger.delivered.len() >= total) && Instant::now() < deadline {
        let records = consumer
            .poll(Duration::from_millis(300))
            .await
            .expect("poll");
        let done = *moves.borrow();
        for r in &records {
            let p = usize::try_from(r.partition()).expect("partition");
            if done > u32::try_from(p).expect("partition") {
                after_move[p] += 1;
            }
        }
        ledger.deliver_and_accept(&mut consumer, &records);
        round += 1;
        // Every third round the acknowledgements ride on the next fetch instead; the commit
        // after it reports them.
        if round % 3 != 0 {
            let results = consumer
                .commit_sync(Duration::from_secs(20))
                .await
                .expect("commit");
            ledger.committed(&results);
        }
        progress_tx.send_replace(ledger.delivered.len());
        // Slow enough that the moves happen mid-stream.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        mover.is_finished(),
        "the leader moves did not finish in time"
    );
    mover.await.expect("mover");
    assert_eq!(leader(&c.admin, &topic, 0).await, Some(b));
    assert_eq!(leader(&c.admin, &topic, 1).await, Some(third));
    let expected = [(0, 3 * BATCH), (1, 3 * BATCH)];
    finish(&mut consumer, &mut ledger, &expected).await;
    consumer
        .close(Duration::from_secs(10))
        .await
        .expect("close");
    ledger.check(&expected);
    nothing_left(&c.bootstrap, &group, &topic).await;
    assert!(
        after_move.iter().all(|n| *n > 0),
        "records delivered after each move, by partition: {after_move:?}"
    );
}

/// Acknowledgements are pending at the moment the leader moves: the commit that carries them
/// must report them, and failed records must come again from the new leader. Then the same
/// with the acknowledgements riding on the next fetch instead.
///
/// `move_leader` returns once every broker knows the new leader, so the old one refuses them;
/// only if it still took them in the instant before it let go may the commit report success,
/// and then the records must never come again (the ledger checks that).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a multi-broker cluster; scripts/test.sh runs it against one"]
async fn acknowledgements_pending_during_a_leader_move_are_reported_and_redelivered() {
    let _serial = SERIAL.lock().await;
    let Some(c) = cluster("pending_acks", 2).await else {
        return;
    };
    let (a, b) = (c.brokers[0], c.brokers[1]);
    let (topic, group) = topic_and_group(&c, "pending-acks", &[vec![a, b]]).await;
    let mut producer = Producer::new(&c.bootstrap, &topic, 1).await;
    producer.produce(0, 30).await;
    let mut consumer = consumer(&c.bootstrap, &group, &topic, 10).await;
    let mut ledger = Ledger::new(&topic);
    let tp = TopicPartition::new(topic.as_str(), 0);

    // 1. ShareAcknowledge (commit_sync) after the move.
    let held = poll_some(&mut consumer).await;
    ledger.deliver_and_accept(&mut consumer, &held);
    c.admin.move_leader(&topic, 0, b).await.expect("move to b");
    let results = consumer
        .commit_sync(Duration::from_secs(20))
        .await
        .expect("commit");
    let outcome = results.get(&tp).cloned();
    ledger.committed(&results);
    eprintln!("commit after the move: {outcome:?}");
    finish(&mut consumer, &mut ledger, &[(0, 30)]).await;
    let first = settled(&ledger, &held, outcome);

    // 2. The acknowledgements ride on the next ShareFetch, which goes to the old leader.
    producer.produce(0, 30).await;
    let held = poll_some(&mut consumer).await;
    ledger.deliver_and_accept(&mut consumer, &held);
    c.admin.move_leader(&topic, 0, a).await.expect("move to a");
    // A poll sends them (and may already return records from the new leader, which are
    // accepted only after the commit, so that its result is about the held ones alone).
    let records = consumer
        .poll(Duration::from_millis(300))
        .await
        .expect("poll");
    let results = consumer
        .commit_sync(Duration::from_secs(20))
        .await
        .expect("commit");
    let outcome = results.get(&tp).cloned();
    ledger.committed(&results);
    ledger.deliver_and_accept(&mut consumer, &records);
    let results = consumer
        .commit_sync(Duration::from_secs(20))
        .await
        .expect("commit");
    ledger.committed(&results);
    eprintln!("commit after the fetch that carried them: {outcome:?}");
    finish(&mut consumer, &mut ledger, &[(0, 60)]).await;
    let second = settled(&ledger, &held, outcome);
    assert!(
        first || second,
        "the old leader took the acknowledgements both times: the move was not tested"
    );
    consumer
        .close(Duration::from_secs(10))
        .await
        .expect("close");
    ledger.check(&[(0, 60)]);
    nothing_left(&c.bootstrap, &group, &topic).await;
}

/// Checks what became of `held` after their commit reported `outcome`: failed records came
/// again, accepted ones did not. Returns whether the commit reported a failure.
fn settled(
    ledger: &Ledger,
    held: &[ConsumerRecord],
    outcome: Option<Result<(), kafka_share_sink::AckError>>,
) -> bool {
    let failed = match outcome {
        Some(Ok(())) => false,
        Some(Err(_)) => true,
        None => panic!("the acknowledgements held across the move were not reported"),
    };
    for r in held {
        let deliveries = ledger.delivered[&(r.partition(), r.offset())];
        assert_eq!(
            deliveries >= 2,
            failed,
            "offset {} was delivered {deliveries} time(s) after its commit reported {}",
            r.offset(),
            if failed { "a failure" } else { "success" }
        );
    }
    failed
}

/// Polls until some records arrive (and leaves them unacknowledged).
async fn poll_some(c: &mut KafkaShareConsumer) -> Vec<ConsumerRecord> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let records = c.poll(Duration::from_millis(500)).await.expect("poll");
        if !records.is_empty() {
            return records;
        }
        assert!(Instant::now() < deadline, "no records within 30 s");
    }
}

/// The `scripts/kafka.sh` of this repository, if it runs the cluster at `bootstrap`.
fn node_control(bootstrap: &str) -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let ours = std::fs::read_to_string(root.join("target/kafka/cluster/bootstrap")).ok()?;
    (ours.trim() == bootstrap).then(|| root.join("scripts/kafka.sh"))
}

fn kafka_sh(script: &PathBuf, args: &[&str]) {
    let status = std::process::Command::new(script)
        .args(args)
        .status()
        .expect("run scripts/kafka.sh");
    assert!(
        status.success(),
        "scripts/kafka.sh {args:?} failed: {status}"
    );
}

/// Brings a stopped broker back even when the test fails, so later tests find all brokers.
struct Restart {
    script: PathBuf,
    node: String,
}

impl Drop for Restart {
    fn drop(&mut self) {
        let _ = std::process::Command::new(&self.script)
            .args(["start-node", &self.node])
            .status();
    }
}

/// The broker leading the partition stops (a controlled shutdown, as in a rolling restart,
/// which moves its leaders first): the consumer finds the new leader and loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the multi-broker cluster of scripts/kafka.sh; scripts/test.sh runs it"]
async fn consumer_follows_the_leader_when_its_broker_stops() {
    broker_goes_away("broker_stops", "stop-node").await;
}

/// The broker leading the partition crashes (SIGKILL): nothing tells the consumer, the
/// connection just breaks, and for a few seconds the metadata still names the dead broker
/// until the controller fences it. The consumer keeps asking, finds the new leader and loses
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the multi-broker cluster of scripts/kafka.sh; scripts/test.sh runs it"]
async fn consumer_follows_the_leader_when_its_broker_crashes() {
    broker_goes_away("broker_crashes", "kill-node").await;
}

/// The consumer was given one bootstrap address, the leader's broker, and that broker stops:
/// the consumer asks the brokers the cluster's metadata named for the new leader (and its
/// group coordinator), as Java's clients do, instead of dialling the stopped address forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the multi-broker cluster of scripts/kafka.sh; scripts/test.sh runs it"]
async fn consumer_bootstrapped_through_one_broker_goes_on_when_it_stops() {
    broker_goes_away("only_bootstrap_stops", "stop-node").await;
}

/// The `host:port` node `id` of the cluster of `scripts/kafka.sh` listens on.
fn node_address(id: i32) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let file = root.join(format!("target/kafka/cluster/node-{id}/server.properties"));
    let properties = std::fs::read_to_string(&file).expect("the node's server.properties");
    properties
        .lines()
        .find_map(|line| line.strip_prefix("listeners=PLAINTEXT://"))
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("no PLAINTEXT listener in {}", file.display()))
        .to_owned()
}

/// Consumes half the records, holds one poll's acknowledgements, takes the leader's broker
/// away with `scripts/kafka.sh <how>`, commits, produces as many again and consumes to the end.
async fn broker_goes_away(test: &str, how: &str) {
    let _serial = SERIAL.lock().await;
    let Some(c) = cluster(test, 3).await else {
        return;
    };
    let Some(script) = node_control(&c.bootstrap) else {
        assert!(
            std::env::var("KAFKA_REQUIRE_BROKER").as_deref() != Ok("1"),
            "{test}: KAFKA_MULTI_BOOTSTRAP is not the cluster of scripts/kafka.sh"
        );
        eprintln!("SKIPPED {test}: the cluster is not the one of scripts/kafka.sh");
        return;
    };
    // Node 1 is the only controller, so the partition lives on two other nodes.
    let others: Vec<i32> = c.brokers.iter().copied().filter(|b| *b != 1).collect();
    let (victim, survivor) = (others[0], others[1]);
    let (topic, group) = topic_and_group(&c, test, &[vec![victim, survivor]]).await;
    const BATCH: usize = 200;
    let mut producer = Producer::new(&c.bootstrap, &topic, 1).await;
    producer.produce(0, BATCH).await;

    // One test gives the consumer the broker that goes away as its only bootstrap address.
    let consumer_bootstrap = if test == "only_bootstrap_stops" {
        node_address(victim)
    } else {
        c.bootstrap.clone()
    };
    let mut consumer = consumer(&consumer_bootstrap, &group, &topic, 10).await;
    let mut ledger = Ledger::new(&topic);
    let deadline = Instant::now() + TEST_DEADLINE;
    while ledger.accepted.len() < BATCH / 2 && Instant::now() < deadline {
        poll_accept_commit(&mut consumer, &mut ledger).await;
    }
    // Hold a poll's acknowledgements across the stop.
    let held = poll_some(&mut consumer).await;
    ledger.deliver_and_accept(&mut consumer, &held);
    let _restart = Restart {
        script: script.clone(),
        node: victim.to_string(),
    };
    kafka_sh(&script, &[how, &victim.to_string()]);
    let results = consumer
        .commit_sync(Duration::from_secs(20))
        .await
        .expect("commit");
    eprintln!("{test}: commit after {how}: {results:?}");
    ledger.committed(&results);
    // Produce while the consumer polls, so that it polls while the leader is still moving (a
    // crashed broker is fenced only after its session times out).
    let producing = tokio::spawn(async move { producer.produce(0, BATCH).await });
    let caught_up = finish(&mut consumer, &mut ledger, &[(0, 2 * BATCH)]).await;
    eprintln!("{test}: every record delivered {caught_up:?} after the broker went away");
    producing.await.expect("producer");
    wait_for_leader(&c.admin, &topic, 0, survivor).await;
    consumer
        .close(Duration::from_secs(10))
        .await
        .expect("close");
    ledger.check(&[(0, 2 * BATCH)]);
    nothing_left(&c.bootstrap, &group, &topic).await;
}
