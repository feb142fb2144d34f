//! `KafkaProducer` while brokers crash, on a three-node cluster: a partition leader or the
//! transaction coordinator killed (SIGKILL) in the middle of a transaction, and a leader
//! killed under idempotent sends.
//!
//! `scripts/test.sh` starts the cluster for these tests and for `kafka_leader_move`; the
//! main single-broker run ignores them. By hand:
//!
//! ```sh
//! KAFKA_NODES=3 ./scripts/kafka.sh start
//! eval "export $(KAFKA_NODES=3 ./scripts/kafka.sh env)"
//! cargo test --all-features --test kafka_producer_cluster -- --ignored
//! ./scripts/kafka.sh stop
//! ```
//!
//! What must hold: a transaction either commits with every record exactly once, in send
//! order per partition, or reports an error, and then an abort (or, after an unknown commit
//! outcome, a new `init_transactions`) leaves all of it or none of it visible to
//! `read_committed`; idempotent sends write every record once and in order.

#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::sync::Arc;
use std::time::Duration;

use kafka_share_sink::KafkaAdmin;
use kafka_share_sink::producer::{
    IsolationLevel, KafkaLogReader, KafkaProducer, KafkaProducerConfig, Producer, ProducerError,
    ProducerRecord,
};
use tokio::time::Instant;

/// The tests kill brokers of one shared cluster: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The node the tests kill (node 1 is the cluster's only controller).
const VICTIM: i32 = 2;

/// A fresh topic whose partitions all have the victim as leader, replicated on all nodes.
async fn topic(admin: &KafkaAdmin, prefix: &str, partitions: usize) -> String {
    let name = support::unique(prefix);
    let replicas: Vec<Vec<i32>> = (0..partitions)
        .map(|p| {
            if p % 2 == 0 {
                vec![VICTIM, 3, 1]
            } else {
                vec![VICTIM, 1, 3]
            }
        })
        .collect();
    admin
        .create_topic_with_replicas(&name, &replicas)
        .await
        .expect("topic created");
    name
}

/// Makes the victim the transaction coordinator: the leader of `__transaction_state`
/// (one partition in the cluster of scripts/kafka.sh). A producer that found another
/// coordinator before is told NOT_COORDINATOR and looks it up again.
async fn victim_coordinates(admin: &KafkaAdmin) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let placements = admin.partitions("__transaction_state").await;
        if let Ok(placements) = placements
            && let Some(p) = placements.first()
        {
            if p.leader == Some(VICTIM) {
                return;
            }
            if admin
                .move_leader("__transaction_state", p.partition, VICTIM)
                .await
                .is_ok()
            {
                continue;
            }
        }
        assert!(
            Instant::now() < deadline,
            "node {VICTIM} did not become the transaction coordinator"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn producer_config(bootstrap: &str) -> KafkaProducerConfig {
    KafkaProducerConfig::new(bootstrap)
        .linger(Duration::from_millis(2))
        .batch_size(2048)
        .request_timeout(Duration::from_secs(10))
        .delivery_timeout(Duration::from_secs(60))
}

/// The values of `topic`/`partition` as `isolation` sees them, from the start, once no
/// transaction is open there any more: a commit (or abort) returns once it is decided and
/// the coordinator writes its markers after, so the last stable offset is waited for until
/// it reaches the end.
async fn values(
    reader: &KafkaLogReader,
    topic: &str,
    partition: i32,
    isolation: IsolationLevel,
) -> Vec<String> {
    let end = support::stable_end(reader, topic, partition, Duration::from_secs(60)).await;
    reader
        .read_until(topic, partition, 0, end, isolation, Duration::from_secs(30))
        .await
        .expect("read back")
        .iter()
        .map(|r| String::from_utf8(r.value().expect("a value").to_vec()).expect("utf8"))
        .collect()
}

/// A transaction of `PER_PARTITION` records per partition, with `kill` done halfway;
/// checks the all-or-nothing outcome.
const PER_PARTITION: usize = 300;
const PARTITIONS: usize = 2;

async fn transaction_survives_a_kill(test: &str, coordinator: bool) {
    let Some((bootstrap, script)) = cluster::cluster(test) else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
    let topic = topic(&admin, test, PARTITIONS).await;
    let producer =
        KafkaProducer::connect(producer_config(&bootstrap).transactional_id(support::unique(test)))
            .await
            .expect("connect");
    // The first transactional producer of the cluster creates `__transaction_state`.
    producer.init_transactions().await.expect("init");
    if coordinator {
        victim_coordinates(&admin).await;
    }
    producer.begin_transaction().expect("begin");
    let mut sent = Vec::new();
    let send = |i: usize, sent: &mut Vec<_>| {
        for p in 0..PARTITIONS {
            let record = ProducerRecord::new(topic.as_str())
                .partition(i32::try_from(p).unwrap())
                .value(format!("{p}:{i}"));
            match producer.send(record) {
                Ok(delivery) => sent.push(delivery),
                // A send refused because the transaction already failed: fine, the
                // commit says so.
                Err(error) => assert!(error.requires_abort(), "{error:?}"),
            }
        }
    };
    for i in 0..PER_PARTITION / 2 {
        send(i, &mut sent);
    }
    producer.flush().await.expect("the first half is written");
    let killed = cluster::Killed::node(&script, VICTIM);
    for i in PER_PARTITION / 2..PER_PARTITION {
        send(i, &mut sent);
        if i % 30 == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let outcome = tokio::time::timeout(Duration::from_secs(90), producer.commit_transaction())
        .await
        .expect("the commit ends within its bounds");
    let committed = match outcome {
        Ok(()) => true,
        Err(ProducerError::CommitOutcomeUnknown { .. }) => {
            eprintln!("{test}: commit outcome unknown, initialising again");
            // A new InitProducerId makes the coordinator finish the transaction one way.
            producer.init_transactions().await.expect("init again");
            false
        }
        Err(error) => {
            eprintln!("{test}: commit failed ({error}), aborting");
            assert!(error.requires_abort(), "{error:?}");
            producer.abort_transaction().await.expect("abort");
            false
        }
    };
    drop(killed);
    let reader = KafkaLogReader::builder(&bootstrap)
        .client_id("producer-cluster-check")
        .connect()
        .await
        .expect("reader");
    let mut all = true;
    let mut none = true;
    for p in 0..PARTITIONS {
        let visible = values(
            &reader,
            &topic,
            i32::try_from(p).unwrap(),
            IsolationLevel::ReadCommitted,
        )
        .await;
        let expected: Vec<String> = (0..PER_PARTITION).map(|i| format!("{p}:{i}")).collect();
        all &= visible == expected;
        none &= visible.is_empty();
        assert!(
            visible == expected || visible.is_empty(),
            "partition {p}: all {PER_PARTITION} records once in order, or none; read {} records",
            visible.len()
        );
    }
    if committed {
        assert!(all, "a reported commit shows every record");
        for delivery in sent {
            delivery.await.expect("a committed record was written");
        }
    } else {
        assert!(all || none, "all partitions alike");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the multi-broker cluster of scripts/kafka.sh; scripts/test.sh runs it"]
async fn a_transaction_whose_partition_leader_crashes_is_all_or_nothing() {
    transaction_survives_a_kill("producer-leader-kill-txn", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the multi-broker cluster of scripts/kafka.sh; scripts/test.sh runs it"]
async fn a_transaction_whose_coordinator_crashes_is_all_or_nothing() {
    transaction_survives_a_kill("producer-coordinator-kill-txn", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the multi-broker cluster of scripts/kafka.sh; scripts/test.sh runs it"]
async fn idempotent_sends_across_a_leader_crash_have_no_duplicates_and_keep_order() {
    let test = "producer-leader-kill-idem";
    let Some((bootstrap, script)) = cluster::cluster(test) else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
    let topic = topic(&admin, test, 3).await;
    let producer = Arc::new(
        KafkaProducer::connect(producer_config(&bootstrap).max_in_flight(5))
            .await
            .expect("connect"),
    );
    const RECORDS: usize = 3000;
    let mut futures = Vec::with_capacity(RECORDS);
    let mut killed = None;
    for i in 0..RECORDS {
        let record = ProducerRecord::new(topic.as_str())
            .key(format!("k{}", i % 11))
            .value(i.to_string());
        futures.push(producer.send(record).expect("queued"));
        if i % 50 == 49 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if i == RECORDS / 3 {
            killed = Some(cluster::Killed::node(&script, VICTIM));
        }
    }
    tokio::time::timeout(Duration::from_secs(90), producer.flush())
        .await
        .expect("flush in time")
        .expect("flush");
    drop(killed);
    let mut expected = std::collections::HashMap::<i32, Vec<String>>::new();
    for (i, future) in futures.into_iter().enumerate() {
        let meta = future.await.expect("delivered despite the crash");
        expected
            .entry(meta.partition)
            .or_default()
            .push(i.to_string());
    }
    let reader = KafkaLogReader::builder(&bootstrap)
        .client_id("producer-cluster-check")
        .connect()
        .await
        .expect("reader");
    for (partition, sent) in &expected {
        let read = values(&reader, &topic, *partition, IsolationLevel::ReadUncommitted).await;
        assert_eq!(
            &read, sent,
            "partition {partition}: every record once, in send order"
        );
    }
}
