//! KIP-1289 (draft) in the embedded broker: share acknowledgements staged into a producer
//! transaction (TX_PENDING), resolved by its commit or abort, by the coordinator's timeout
//! and by a new producer with the same transactional id; the checks at staging (member
//! epoch, lock, types, capabilities); the draft's unsettled rules as switches; and the fault
//! injection the exactly-once tests use (fail-over, member-epoch bumps).
#![cfg(feature = "exactly-once")]

use std::time::Duration;

use kafka_share_sink::embedded::{
    AutoOffsetReset, ConsumerOptions, EmbeddedBroker, EmbeddedProducer, EmbeddedProducerConfig,
    EmbeddedShareConsumer, GroupConfig, Kip1289Rules, ProduceRecord, RecordState,
};
use kafka_share_sink::exactly_once::{
    ClusterCapabilities, ExactlyOnceCluster, ShareAcknowledgements,
};
use kafka_share_sink::producer::{
    IsolationLevel, LogReader, Producer, ProducerError, ProducerRecord,
};
use kafka_share_sink::{
    AcknowledgeType, ConsumerError, ConsumerRecord, ShareAcquireMode, ShareConsumer,
};

const GROUP: &str = "sink";
const WAIT: Duration = Duration::from_secs(1);

/// Topics `in` (1 partition, `n` records) and `out`; group `sink` from the earliest record,
/// 30 s locks, delivery-count limit 3.
fn broker(n: usize) -> EmbeddedBroker {
    let broker = EmbeddedBroker::new();
    broker.create_topic("in", 1).unwrap();
    broker.create_topic("out", 1).unwrap();
    broker
        .set_group_config(
            GROUP,
            GroupConfig::new()
                .auto_offset_reset(AutoOffsetReset::Earliest)
                .record_lock_duration(Duration::from_secs(30))
                .delivery_count_limit(3),
        )
        .unwrap();
    for i in 0..n {
        broker
            .produce("in", ProduceRecord::new().value(format!("v{i}")))
            .unwrap();
    }
    broker
}

async fn consumer(broker: &EmbeddedBroker) -> EmbeddedShareConsumer {
    let mut consumer = broker.share_consumer(GROUP);
    consumer.subscribe(vec!["in".into()]).await.unwrap();
    consumer
}

async fn producer(broker: &EmbeddedBroker, id: &str) -> EmbeddedProducer {
    let producer = broker.transactional_producer(id).unwrap();
    producer.init_transactions().await.unwrap();
    producer
}

fn state(broker: &EmbeddedBroker, offset: i64) -> (RecordState, u16) {
    let view = broker.record_state(GROUP, "in", 0, offset).unwrap();
    (view.state(), view.delivery_count())
}

async fn committed(broker: &EmbeddedBroker, topic: &str) -> Vec<String> {
    let read = broker
        .read(topic, 0, 0, IsolationLevel::ReadCommitted, Duration::ZERO)
        .await
        .unwrap();
    read.records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value().unwrap()).into_owned())
        .collect()
}

/// Polls, acknowledges each record as `acks` says (by position), and takes the
/// acknowledgements for a transaction.
async fn take(
    consumer: &mut EmbeddedShareConsumer,
    acks: &[AcknowledgeType],
) -> (Vec<ConsumerRecord>, ShareAcknowledgements) {
    let records = consumer.poll(WAIT).await.unwrap();
    assert_eq!(records.len(), acks.len(), "records polled");
    for (record, ack) in records.iter().zip(acks) {
        consumer.acknowledge(record, *ack).unwrap();
    }
    let taken = consumer.take_acknowledgements_for_transaction().unwrap();
    (records, taken)
}

fn assert_abortable(error: &ProducerError, needle: &str) {
    assert!(
        matches!(error, ProducerError::Abortable { .. }),
        "abortable expected: {error:?}"
    );
    let text = format!("{error} {error:?}");
    assert!(text.contains(needle), "`{needle}` not in {text}");
}

#[tokio::test]
async fn commit_accepts_and_archives_staged_acknowledgements_with_the_outputs() {
    use AcknowledgeType::{Accept, Reject};
    let broker = broker(3);
    let mut consumer = consumer(&broker).await;
    let (_, acks) = take(&mut consumer, &[Accept, Reject, Accept]).await;
    assert_eq!(acks.len(), 3);
    let producer = producer(&broker, "eos-0").await;
    producer.begin_transaction().unwrap();
    producer
        .send(ProducerRecord::new("out").value("derived"))
        .unwrap()
        .await
        .unwrap();
    producer
        .send_share_acknowledgements(&acks, &consumer.group_metadata())
        .await
        .unwrap();
    for offset in 0..3 {
        assert_eq!(state(&broker, offset), (RecordState::TxPending, 1));
    }
    assert_eq!(broker.state_counts(GROUP).tx_pending, 3);
    let (pid, epoch) = broker.staged_transaction(GROUP, "in", 0, 1).unwrap();
    assert!(pid >= 0 && epoch >= 0);
    assert!(
        committed(&broker, "out").await.is_empty(),
        "not committed yet"
    );
    // The consumer goes on polling: the taken records do not hold it up.
    assert!(consumer.poll(Duration::ZERO).await.unwrap().is_empty());

    producer.commit_transaction().await.unwrap();
    assert_eq!(state(&broker, 0), (RecordState::Acknowledged, 1));
    assert_eq!(state(&broker, 1), (RecordState::Archived, 1));
    assert_eq!(state(&broker, 2), (RecordState::Acknowledged, 1));
    assert_eq!(broker.share_partition_offsets(GROUP, "in", 0), Some((3, 3)));
    assert_eq!(committed(&broker, "out").await, ["derived"]);
    assert_eq!(broker.staged_transaction(GROUP, "in", 0, 1), None);
}

#[tokio::test]
async fn a_rejected_record_goes_to_the_dead_letter_queue_at_commit() {
    let broker = broker(1);
    broker.create_topic("dlq.in", 1).unwrap();
    broker
        .set_group_config(
            GROUP,
            GroupConfig::new()
                .auto_offset_reset(AutoOffsetReset::Earliest)
                .dead_letter_queue("dlq.in", true),
        )
        .unwrap();
    let mut consumer = consumer(&broker).await;
    let (_, acks) = take(&mut consumer, &[AcknowledgeType::Reject]).await;
    let producer = producer(&broker, "eos-0").await;
    producer.begin_transaction().unwrap();
    producer
        .send_share_acknowledgements(&acks, &consumer.group_metadata())
        .await
        .unwrap();
    assert!(
        broker.read_log("dlq.in", 0).unwrap().is_empty(),
        "only at commit"
    );
    producer.commit_transaction().await.unwrap();
    assert_eq!(state(&broker, 0).0, RecordState::Archived);
    let letters = broker.read_log("dlq.in", 0).unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].value().unwrap(), "v0");
}

#[tokio::test]
async fn abort_makes_staged_records_available_with_their_count_unchanged() {
    let broker = broker(2);
    let mut consumer = consumer(&broker).await;
    let (_, acks) = take(&mut consumer, &[AcknowledgeType::Accept; 2]).await;
    let producer = producer(&broker, "eos-0").await;
    producer.begin_transaction().unwrap();
    producer
        .send(ProducerRecord::new("out").value("dropped"))
        .unwrap()
        .await
        .unwrap();
    producer
        .send_share_acknowledgements(&acks, &consumer.group_metadata())
        .await
        .unwrap();
    producer.abort_transaction().await.unwrap();
    assert_eq!(state(&broker, 0), (RecordState::Available, 1));
    assert_eq!(state(&broker, 1), (RecordState::Available, 1));
    assert!(committed(&broker, "out").await.is_empty());
    let again = consumer.poll(WAIT).await.unwrap();
    let counts: Vec<u16> = again.iter().map(ConsumerRecord::delivery_count).collect();
    assert_eq!(counts, [2, 2], "one more delivery, not two");
}

#[tokio::test]
async fn an_abort_at_the_delivery_limit_redelivers_unless_the_switch_archives() {
    for archive in [false, true] {
        let broker = broker(1);
        broker.set_kip1289_rules(Kip1289Rules::draft().abort_archives_at_limit(archive));
        let mut consumer = consumer(&broker).await;
        let producer = producer(&broker, "eos-0").await;
        // Three deliveries (the limit), each staged and aborted.
        for delivery in 1..=3u16 {
            let (records, acks) = take(&mut consumer, &[AcknowledgeType::Accept]).await;
            assert_eq!(records[0].delivery_count(), delivery);
            producer.begin_transaction().unwrap();
            producer
                .send_share_acknowledgements(&acks, &consumer.group_metadata())
                .await
                .unwrap();
            producer.abort_transaction().await.unwrap();
            if delivery < 3 {
                assert_eq!(state(&broker, 0), (RecordState::Available, delivery));
            }
        }
        if archive {
            assert_eq!(state(&broker, 0), (RecordState::Archived, 3));
            assert!(consumer.poll(Duration::ZERO).await.unwrap().is_empty());
        } else {
            assert_eq!(state(&broker, 0), (RecordState::Available, 3), "the draft");
            let fourth = consumer.poll(WAIT).await.unwrap();
            assert_eq!(fourth[0].delivery_count(), 4, "past the limit");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_coordinator_aborting_a_timed_out_transaction_releases_its_staged_records() {
    let broker = broker(1);
    let mut consumer = consumer(&broker).await;
    let (_, acks) = take(&mut consumer, &[AcknowledgeType::Accept]).await;
    let producer = broker
        .producer_with(
            EmbeddedProducerConfig::new()
                .transactional_id("eos-0")
                .transaction_timeout(Duration::from_secs(10)),
        )
        .unwrap();
    producer.init_transactions().await.unwrap();
    producer.begin_transaction().unwrap();
    producer
        .send_share_acknowledgements(&acks, &consumer.group_metadata())
        .await
        .unwrap();
    producer
        .send(ProducerRecord::new("out").value("late"))
        .unwrap()
        .await
        .unwrap();
    // The lock (30 s) is gone with the staging; the transaction's timeout holds the record.
    tokio::time::advance(Duration::from_secs(9)).await;
    assert_eq!(state(&broker, 0).0, RecordState::TxPending);
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(state(&broker, 0), (RecordState::Available, 1));
    let error = producer.commit_transaction().await.unwrap_err();
    assert!(error.requires_abort(), "{error:?}");
    producer.abort_transaction().await.unwrap();
    assert!(committed(&broker, "out").await.is_empty());
    // The producer goes on with the record redelivered.
    let (records, acks) = take(&mut consumer, &[AcknowledgeType::Accept]).await;
    assert_eq!(records[0].delivery_count(), 2);
    producer.begin_transaction().unwrap();
    producer
        .send_share_acknowledgements(&acks, &consumer.group_metadata())
        .await
        .unwrap();
    producer.commit_transaction().await.unwrap();
    assert_eq!(state(&broker, 0), (RecordState::Acknowledged, 2));
}

#[tokio::test]
async fn a_new_producer_with_the_same_id_aborts_the_zombie_and_its_staged_records() {
    let broker = broker(2);
    let mut consumer = consumer(&broker).await;
    let (_, acks) = take(&mut consumer, &[AcknowledgeType::Accept; 2]).await;
    let zombie = producer(&broker, "eos-0").await;
    zombie.begin_transaction().unwrap();
    zombie
        .send(ProducerRecord::new("out").value("zombie"))
        .unwrap()
        .await
        .unwrap();
    zombie
        .send_share_acknowledgements(&acks, &consumer.group_metadata())
        .await
        .unwrap();
    let successor = producer(&broker, "eos-0").await;
    assert_eq!(state(&broker, 0), (RecordState::Available, 1));
    assert_eq!(state(&broker, 1), (RecordState::Available, 1));
    let error = zombie.commit_transaction().await.unwrap_err();
    assert!(matches!(error, ProducerError::Fenced { .. }), "{error:?}");
    assert!(committed(&broker, "out").await.is_empty());

    // The successor processes the redelivered records; the zombie can stage nothing.
    let (_, acks) = take(&mut consumer, &[AcknowledgeType::Accept; 2]).await;
    successor.begin_transaction().unwrap();
    successor
        .send(ProducerRecord::new("out").value("successor"))
        .unwrap()
        .await
        .unwrap();
    successor
        .send_share_acknowledgements(&acks, &consumer.group_metadata())
        .await
        .unwrap();
    successor.commit_transaction().await.unwrap();
    assert_eq!(committed(&broker, "out").await, ["successor"]);
    assert_eq!(state(&broker, 1), (RecordState::Acknowledged, 2));
}

#[tokio::test]
async fn fencing_through_the_cluster_aborts_the_open_transaction_and_its_staged_records() {
    let broker = broker(1);
    let mut consumer = consumer(&broker).await;
    let (_, acks) = take(&mut consumer, &[AcknowledgeType::Accept]).await;
    let orphan = producer(&broker, "mirror-eos-3").await;
    orphan.begin_transaction().unwrap();
    orphan
        .send_share_acknowledgements(&acks, &consumer.group_metadata())
        .await
        .unwrap();
    broker.fence_transactional_id("mirror-eos-3").await.unwrap();
    assert_eq!(state(&broker, 0), (RecordState::Available, 1));
    let error = orphan.commit_transaction().await.unwrap_err();
    assert!(matches!(error, ProducerError::Fenced { .. }), "{error:?}");
    broker.fence_transactional_id("never-used").await.unwrap();
}

#[tokio::test]
async fn a_stale_member_epoch_or_a_member_gone_fails_the_staging_and_the_transaction() {
    let broker = broker(1);
    let mut consumer = consumer(&broker).await;
    let (_, acks) = take(&mut consumer, &[AcknowledgeType::Accept]).await;
    let before = consumer.group_metadata();
    assert_eq!(before.member_epoch(), 1);
    let epoch = broker.bump_member_epoch(GROUP, before.member_id()).unwrap();
    assert_eq!(epoch, 2);
    assert_eq!(
        consumer.group_metadata().member_epoch(),
        2,
        "the consumer learns it"
    );
    let producer = producer(&broker, "eos-0").await;
    producer.begin_transaction().unwrap();
    let error = producer
        .send_share_acknowledgements(&acks, &before)
        .await
        .unwrap_err();
    assert_abortable(&error, "share group membership mismatch");
    assert_abortable(&error, "STALE_MEMBER_EPOCH");
    assert_eq!(state(&broker, 0).0, RecordState::Acquired, "nothing staged");
    let commit = producer.commit_transaction().await.unwrap_err();
    assert!(commit.requires_abort(), "{commit:?}");
    producer.abort_transaction().await.unwrap();
    assert!(broker.bump_member_epoch(GROUP, "nobody").is_err());

    // With the current epoch it stages; a member that left is unknown.
    producer.begin_transaction().unwrap();
    producer
        .send_share_acknowledgements(&acks, &consumer.group_metadata())
        .await
        .unwrap();
    producer.abort_transaction().await.unwrap();
    let current = consumer.group_metadata();
    consumer.close(WAIT).await.unwrap();
    producer.begin_transaction().unwrap();
    let error = producer
        .send_share_acknowledgements(&acks, &current)
        .await
        .unwrap_err();
    assert_abortable(&error, "UNKNOWN_MEMBER_ID");
}

#[tokio::test(start_paused = true)]
async fn a_lock_expired_before_staging_fails_the_whole_request() {
    let broker = broker(2);
    broker
        .set_group_config(
            GROUP,
            GroupConfig::new()
                .auto_offset_reset(AutoOffsetReset::Earliest)
                .record_lock_duration(Duration::from_secs(5)),
        )
        .unwrap();
    let mut consumer = consumer(&broker).await;
    let (_, acks) = take(&mut consumer, &[AcknowledgeType::Accept; 2]).await;
    tokio::time::advance(Duration::from_secs(5)).await;
    let producer = producer(&broker, "eos-0").await;
    producer.begin_transaction().unwrap();
    let error = producer
        .send_share_acknowledgements(&acks, &consumer.group_metadata())
        .await
        .unwrap_err();
    assert_abortable(&error, "INVALID_RECORD_STATE");
    assert_eq!(state(&broker, 0), (RecordState::Available, 1));
    producer.abort_transaction().await.unwrap();
}

#[tokio::test]
async fn staging_is_all_or_nothing_over_the_request() {
    let broker = broker(2);
    let options = ConsumerOptions::new()
        .max_poll_records(1)
        .acquire_mode(ShareAcquireMode::RecordLimit);
    let mut first = broker.share_consumer_with(GROUP, options.clone());
    first.subscribe(vec!["in".into()]).await.unwrap();
    let mut second = broker.share_consumer_with(GROUP, options);
    second.subscribe(vec!["in".into()]).await.unwrap();
    let (mine, mut acks) = take(&mut first, &[AcknowledgeType::Accept]).await;
    let (theirs, _) = take(&mut second, &[AcknowledgeType::Accept]).await;
    assert_eq!((mine[0].offset(), theirs[0].offset()), (0, 1));
    acks.add("in", 0, 1, AcknowledgeType::Accept); // not the first consumer's record
    let producer = producer(&broker, "eos-0").await;
    producer.begin_transaction().unwrap();
    let error = producer
        .send_share_acknowledgements(&acks, &first.group_metadata())
        .await
        .unwrap_err();
    assert_abortable(&error, "acquired by another member");
    assert_eq!(
        state(&broker, 0).0,
        RecordState::Acquired,
        "offset 0 not staged either"
    );
    producer.abort_transaction().await.unwrap();

    // Only ACCEPT and REJECT can be staged.
    let mut release = ShareAcknowledgements::new();
    release.add("in", 0, 0, AcknowledgeType::Release);
    producer.begin_transaction().unwrap();
    let error = producer
        .send_share_acknowledgements(&release, &first.group_metadata())
        .await
        .unwrap_err();
    assert_abortable(&error, "INVALID_REQUEST");
    producer.abort_transaction().await.unwrap();
}

#[tokio::test]
async fn a_fail_over_forgets_acquisitions_but_keeps_staged_records() {
    let broker = broker(2);
    let mut consumer = consumer(&broker).await;
    let records = consumer.poll(WAIT).await.unwrap();
    assert_eq!(records[0].leader_epoch(), Some(0));
    consumer
        .acknowledge(&records[0], AcknowledgeType::Accept)
        .unwrap();
    let acks = consumer.take_acknowledgements_for_transaction().unwrap();
    let producer = producer(&broker, "eos-0").await;
    producer.begin_transaction().unwrap();
    producer
        .send_share_acknowledgements(&acks, &consumer.group_metadata())
        .await
        .unwrap();
    assert_eq!(broker.fail_over("in", 0).unwrap(), 1);
    assert_eq!(broker.leader_epoch("in", 0).unwrap(), 1);
    let epochs = broker
        .leader_epochs(&[kafka_share_sink::TopicPartition::new("in", 0)])
        .await
        .unwrap();
    assert_eq!(epochs.values().copied().collect::<Vec<_>>(), [1]);
    assert_eq!(state(&broker, 0), (RecordState::TxPending, 1));
    assert_eq!(
        state(&broker, 1),
        (RecordState::Available, 0),
        "count rolled back"
    );
    // The holder's acknowledgement of the forgotten record fails.
    consumer
        .acknowledge(&records[1], AcknowledgeType::Accept)
        .unwrap();
    assert!(!consumer.commit_sync(WAIT).await.unwrap().is_success());
    // Redelivered as a first delivery, with the epoch it was written under.
    broker
        .produce("in", ProduceRecord::new().value("after"))
        .unwrap();
    let again = consumer.poll(WAIT).await.unwrap();
    let seen: Vec<_> = again
        .iter()
        .map(|r| (r.offset(), r.delivery_count(), r.leader_epoch()))
        .collect();
    assert_eq!(seen, [(1, 1, Some(0)), (2, 1, Some(1))]);
    producer.commit_transaction().await.unwrap();
    assert_eq!(state(&broker, 0), (RecordState::Acknowledged, 1));
}

#[tokio::test]
async fn a_staged_record_is_acquired_by_no_one_until_its_transaction_aborts() {
    let broker = broker(1);
    let mut owner = consumer(&broker).await;
    let (_, acks) = take(&mut owner, &[AcknowledgeType::Accept]).await;
    let producer = producer(&broker, "eos-0").await;
    producer.begin_transaction().unwrap();
    producer
        .send_share_acknowledgements(&acks, &owner.group_metadata())
        .await
        .unwrap();
    // The owner leaves; the record stays staged.
    owner.close(WAIT).await.unwrap();
    let mut other = consumer(&broker).await;
    assert!(
        other
            .poll(Duration::from_millis(20))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(state(&broker, 0).0, RecordState::TxPending);
    producer.abort_transaction().await.unwrap();
    let records = other.poll(WAIT).await.unwrap();
    assert_eq!(records[0].delivery_count(), 2);
}

#[tokio::test]
async fn a_transaction_of_acknowledgements_only_commits() {
    let broker = broker(1);
    let mut consumer = consumer(&broker).await;
    let (_, acks) = take(&mut consumer, &[AcknowledgeType::Accept]).await;
    let producer = producer(&broker, "eos-0").await;
    producer.begin_transaction().unwrap();
    producer
        .send_share_acknowledgements(&acks, &consumer.group_metadata())
        .await
        .unwrap();
    producer.commit_transaction().await.unwrap();
    assert_eq!(state(&broker, 0), (RecordState::Acknowledged, 1));
    assert_eq!(
        broker.log_end_offset("out", 0).unwrap(),
        0,
        "no marker anywhere"
    );
    // An empty set stages nothing and needs no records.
    producer.begin_transaction().unwrap();
    producer
        .send_share_acknowledgements(&ShareAcknowledgements::new(), &consumer.group_metadata())
        .await
        .unwrap();
    producer.commit_transaction().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn with_a_marker_delay_the_commit_returns_before_outputs_and_acknowledgements_apply() {
    let broker = broker(2);
    let delay = Duration::from_millis(500);
    broker.set_kip1289_rules(Kip1289Rules::draft().marker_delay(delay));
    let mut consumer = consumer(&broker).await;
    let (_, acks) = take(&mut consumer, &[AcknowledgeType::Accept; 2]).await;
    let producer = producer(&broker, "eos-0").await;
    producer.begin_transaction().unwrap();
    producer
        .send(ProducerRecord::new("out").value("o"))
        .unwrap()
        .await
        .unwrap();
    producer
        .send_share_acknowledgements(&acks, &consumer.group_metadata())
        .await
        .unwrap();
    producer.commit_transaction().await.unwrap();
    assert_eq!(
        state(&broker, 0).0,
        RecordState::TxPending,
        "commit returned, marker not yet"
    );
    assert!(committed(&broker, "out").await.is_empty());
    tokio::time::advance(delay).await;
    assert_eq!(state(&broker, 0).0, RecordState::Acknowledged);
    assert_eq!(committed(&broker, "out").await, ["o"], "together");

    // The next begin while markers are pending: refused once when the switch says so.
    broker.set_kip1289_rules(
        Kip1289Rules::draft()
            .marker_delay(delay)
            .concurrent_txn_on_next_begin(true),
    );
    broker
        .produce("in", ProduceRecord::new().value("next"))
        .unwrap();
    let (_, acks) = take(&mut consumer, &[AcknowledgeType::Accept]).await;
    producer.begin_transaction().unwrap();
    producer
        .send_share_acknowledgements(&acks, &consumer.group_metadata())
        .await
        .unwrap();
    producer.commit_transaction().await.unwrap();
    let error = producer.begin_transaction().unwrap_err();
    assert!(error.is_retriable(), "{error:?}");
    assert!(
        format!("{error:?}").contains("CONCURRENT_TRANSACTIONS"),
        "{error:?}"
    );
    assert_eq!(state(&broker, 2).0, RecordState::TxPending);
    producer.begin_transaction().unwrap(); // waits for the markers
    assert_eq!(state(&broker, 2).0, RecordState::Acknowledged);
    producer.abort_transaction().await.unwrap();
}

#[tokio::test]
async fn read_committed_readers_see_the_outputs_exactly_when_the_inputs_are_settled() {
    let broker = broker(2);
    broker
        .set_group_config(
            "downstream",
            GroupConfig::new()
                .auto_offset_reset(AutoOffsetReset::Earliest)
                .isolation_level(IsolationLevel::ReadCommitted),
        )
        .unwrap();
    let mut downstream = broker.share_consumer("downstream");
    downstream.subscribe(vec!["out".into()]).await.unwrap();
    let mut consumer = consumer(&broker).await;
    let producer = producer(&broker, "eos-0").await;

    // Aborted: no output, inputs back.
    let (records, acks) = take(&mut consumer, &[AcknowledgeType::Accept; 2]).await;
    producer.begin_transaction().unwrap();
    for record in &records {
        producer
            .send(ProducerRecord::new("out").value(record.value().unwrap().clone()))
            .unwrap()
            .await
            .unwrap();
    }
    producer
        .send_share_acknowledgements(&acks, &consumer.group_metadata())
        .await
        .unwrap();
    assert!(
        downstream
            .poll(Duration::from_millis(20))
            .await
            .unwrap()
            .is_empty()
    );
    producer.abort_transaction().await.unwrap();
    assert!(
        downstream
            .poll(Duration::from_millis(20))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(broker.state_counts(GROUP).available, 2);

    // Committed: both outputs and both inputs at once.
    let (records, acks) = take(&mut consumer, &[AcknowledgeType::Accept; 2]).await;
    producer.begin_transaction().unwrap();
    for record in &records {
        producer
            .send(ProducerRecord::new("out").value(record.value().unwrap().clone()))
            .unwrap()
            .await
            .unwrap();
    }
    producer
        .send_share_acknowledgements(&acks, &consumer.group_metadata())
        .await
        .unwrap();
    assert!(
        downstream
            .poll(Duration::from_millis(20))
            .await
            .unwrap()
            .is_empty()
    );
    producer.commit_transaction().await.unwrap();
    let outputs = downstream.poll(WAIT).await.unwrap();
    let values: Vec<_> = outputs.iter().map(|r| r.value().unwrap().clone()).collect();
    assert_eq!(values, ["v0", "v1"]);
    assert_eq!(broker.state_counts(GROUP).acknowledged, 2);
}

#[tokio::test]
async fn staging_needs_a_transaction_and_a_capable_cluster() {
    let broker = broker(1);
    let mut consumer = consumer(&broker).await;
    let (_, acks) = take(&mut consumer, &[AcknowledgeType::Accept]).await;
    let meta = consumer.group_metadata();
    let producer = producer(&broker, "eos-0").await;
    let error = producer
        .send_share_acknowledgements(&acks, &meta)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ProducerError::TransactionState { .. }),
        "{error:?}"
    );
    let idempotent = broker.producer();
    let error = idempotent
        .send_share_acknowledgements(&acks, &meta)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ProducerError::NotTransactional { .. }),
        "{error:?}"
    );

    let kafka_4_4 = ClusterCapabilities::none()
        .with_share_version(2)
        .with_transaction_version(2)
        .with_renew(true, true);
    let tv1 = ClusterCapabilities::none()
        .with_share_version(3)
        .with_transaction_version(1)
        .with_transactional_share_acknowledge(true)
        .with_renew(true, true);
    for caps in [kafka_4_4, tv1] {
        broker.set_capabilities(caps);
        producer.begin_transaction().unwrap();
        let error = producer
            .send_share_acknowledgements(&acks, &meta)
            .await
            .unwrap_err();
        assert!(
            matches!(error, ProducerError::Unsupported { .. }),
            "{error:?}"
        );
        producer.abort_transaction().await.unwrap();
    }
    // Without require_tv2, transaction.version 1 is enough.
    broker.set_kip1289_rules(Kip1289Rules::draft().require_tv2(false));
    producer.begin_transaction().unwrap();
    producer
        .send_share_acknowledgements(&acks, &meta)
        .await
        .unwrap();
    producer.commit_transaction().await.unwrap();
    assert_eq!(state(&broker, 0).0, RecordState::Acknowledged);
}

#[tokio::test]
async fn taking_acknowledgements_refuses_release_and_renew_and_takes_nothing() {
    let broker = broker(2);
    let mut consumer = consumer(&broker).await;
    let records = consumer.poll(WAIT).await.unwrap();
    consumer
        .acknowledge(&records[0], AcknowledgeType::Accept)
        .unwrap();
    consumer
        .acknowledge(&records[1], AcknowledgeType::Release)
        .unwrap();
    let error = consumer
        .take_acknowledgements_for_transaction()
        .unwrap_err();
    assert!(matches!(error, ConsumerError::Config { .. }), "{error:?}");
    assert!(error.to_string().contains("Release"), "{error}");
    // Nothing was taken: the commit sends both.
    assert!(consumer.commit_sync(WAIT).await.unwrap().is_success());
    assert_eq!(state(&broker, 0).0, RecordState::Acknowledged);
    assert_eq!(state(&broker, 1).0, RecordState::Available);
}

#[tokio::test]
async fn the_cluster_reports_renew_as_the_group_configures_it() {
    let broker = broker(1);
    assert!(
        broker
            .capabilities(GROUP)
            .await
            .unwrap()
            .renew_enabled_for_group
    );
    broker
        .set_group_config(GROUP, GroupConfig::new().renew_acknowledge_enable(false))
        .unwrap();
    let caps = broker.capabilities(GROUP).await.unwrap();
    assert!(caps.renew && !caps.renew_enabled_for_group);
    assert!(caps.atomic_acknowledgements());
    assert_eq!(broker.partition_count("in").await.unwrap(), Some(1));
    assert_eq!(broker.partition_count("nope").await.unwrap(), None);
    assert!(broker.create_ledger_topic("bad name!", 1).await.is_err());
    let starts = broker
        .share_partition_start_offsets(GROUP, "in")
        .await
        .unwrap();
    assert!(starts.is_empty(), "not read yet");
}
