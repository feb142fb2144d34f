//! Every record-state transition of the embedded share group, and the consumer rules.

use std::time::Duration;

use bytes::Bytes;
use kafka_share_sink::ProtocolError;
use kafka_share_sink::embedded::{
    AutoOffsetReset, ConsumerOptions, EmbeddedBroker, EmbeddedError, EmbeddedShareConsumer,
    GroupConfig, OnDrop, ProduceRecord, RecordState,
};
use kafka_share_sink::{
    AckError, AcknowledgeType, AcknowledgementMode, ConsumerError, ConsumerRecord, ShareConsumer,
    TimestampType, TopicPartition,
};

const GROUP: &str = "g";
const LOCK: Duration = Duration::from_secs(30);

fn broker(partitions: usize, records: usize, config: GroupConfig) -> EmbeddedBroker {
    let broker = EmbeddedBroker::new();
    broker.create_topic("t", partitions).unwrap();
    broker.set_group_config(GROUP, config).unwrap();
    for i in 0..records {
        let p = i32::try_from(i % partitions).unwrap();
        broker
            .produce(
                "t",
                ProduceRecord::new().partition(p).value(format!("v{i}")),
            )
            .unwrap();
    }
    broker
}

fn earliest() -> GroupConfig {
    GroupConfig::new()
        .auto_offset_reset(AutoOffsetReset::Earliest)
        .record_lock_duration(LOCK)
}

async fn consumer(broker: &EmbeddedBroker, options: ConsumerOptions) -> EmbeddedShareConsumer {
    let mut c = broker.share_consumer_with(GROUP, options);
    c.subscribe(vec!["t".into()]).await.unwrap();
    c
}

async fn poll(c: &mut EmbeddedShareConsumer) -> Vec<ConsumerRecord> {
    c.poll(Duration::ZERO).await.unwrap()
}

fn offsets(records: &[ConsumerRecord]) -> Vec<i64> {
    records.iter().map(ConsumerRecord::offset).collect()
}

fn state(broker: &EmbeddedBroker, offset: i64) -> (RecordState, u16) {
    let view = broker
        .record_state(GROUP, "t", 0, offset)
        .expect("record is tracked");
    (view.state(), view.delivery_count())
}

async fn ack_all(c: &mut EmbeddedShareConsumer, records: &[ConsumerRecord], ack: AcknowledgeType) {
    for r in records {
        c.acknowledge(r, ack).unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn poll_acquires_with_delivery_count_one_for_this_member() {
    let b = broker(1, 3, earliest());
    let mut c = consumer(&b, ConsumerOptions::new()).await;
    let records = poll(&mut c).await;
    assert_eq!(offsets(&records), vec![0, 1, 2]);
    assert!(records.iter().all(|r| r.delivery_count() == 1));
    let view = b.record_state(GROUP, "t", 0, 1).unwrap();
    assert_eq!(view.state(), RecordState::Acquired);
    assert_eq!(view.member_id(), Some(c.group_metadata().member_id()));
    assert_eq!(c.acquisition_lock_timeout(), Some(LOCK));
    assert_eq!(c.group_metadata().group_id(), GROUP);
    assert_eq!(c.group_metadata().member_epoch(), 1);
}

#[tokio::test(start_paused = true)]
async fn accept_acknowledges_for_good() {
    let b = broker(1, 2, earliest());
    let mut c = consumer(&b, ConsumerOptions::new()).await;
    let records = poll(&mut c).await;
    ack_all(&mut c, &records, AcknowledgeType::Accept).await;
    let results = c.commit_sync(Duration::from_secs(1)).await.unwrap();
    assert_eq!(results.get(&TopicPartition::new("t", 0)), Some(&Ok(())));
    assert_eq!(state(&b, 0), (RecordState::Acknowledged, 1));
    assert_eq!(b.share_partition_offsets(GROUP, "t", 0), Some((2, 2)));
    tokio::time::advance(LOCK * 3).await;
    assert!(
        poll(&mut c).await.is_empty(),
        "accepted records never come back"
    );
    let mut other = consumer(&b, ConsumerOptions::new()).await;
    assert!(poll(&mut other).await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn release_makes_available_and_redelivers_with_count_two() {
    let b = broker(1, 1, earliest());
    let mut c = consumer(&b, ConsumerOptions::new()).await;
    let records = poll(&mut c).await;
    c.acknowledge(&records[0], AcknowledgeType::Release)
        .unwrap();
    c.commit_sync(Duration::from_secs(1)).await.unwrap();
    assert_eq!(state(&b, 0), (RecordState::Available, 1));
    let again = poll(&mut c).await;
    assert_eq!(offsets(&again), vec![0]);
    assert_eq!(again[0].delivery_count(), 2);
    assert_eq!(state(&b, 0), (RecordState::Acquired, 2));
}

#[tokio::test(start_paused = true)]
async fn reject_archives() {
    let b = broker(1, 2, earliest());
    let mut c = consumer(&b, ConsumerOptions::new()).await;
    let records = poll(&mut c).await;
    c.acknowledge(&records[0], AcknowledgeType::Reject).unwrap();
    c.acknowledge(&records[1], AcknowledgeType::Release)
        .unwrap();
    c.commit_sync(Duration::from_secs(1)).await.unwrap();
    assert_eq!(state(&b, 0), (RecordState::Archived, 1));
    let again = poll(&mut c).await;
    assert_eq!(
        offsets(&again),
        vec![1],
        "the rejected record is never delivered again"
    );
}

#[tokio::test(start_paused = true)]
async fn lock_expiry_returns_the_record_to_another_member_and_late_acks_fail() {
    let b = broker(1, 2, earliest());
    let mut slow = consumer(&b, ConsumerOptions::new()).await;
    let mut other = consumer(&b, ConsumerOptions::new()).await;
    let records = poll(&mut slow).await;
    assert_eq!(records.len(), 2);
    assert!(
        poll(&mut other).await.is_empty(),
        "held records go to no one else"
    );

    tokio::time::advance(LOCK - Duration::from_millis(1)).await;
    assert_eq!(
        state(&b, 0).0,
        RecordState::Acquired,
        "lock still valid just before expiry"
    );
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(state(&b, 0), (RecordState::Available, 1));

    let taken = poll(&mut other).await;
    assert_eq!(offsets(&taken), vec![0, 1]);
    assert!(taken.iter().all(|r| r.delivery_count() == 2));

    ack_all(&mut slow, &records, AcknowledgeType::Accept).await;
    let results = slow.commit_sync(Duration::from_secs(1)).await.unwrap();
    let err = results
        .get(&TopicPartition::new("t", 0))
        .unwrap()
        .clone()
        .unwrap_err();
    assert!(err.is_lock_lost(), "{err}");
    assert!(matches!(err, AckError::InvalidRecordState { .. }));
    assert_eq!(
        state(&b, 0).0,
        RecordState::Acquired,
        "the late ack changed nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn poll_wakes_when_a_lock_expires() {
    let b = broker(1, 1, earliest());
    let mut first = consumer(&b, ConsumerOptions::new()).await;
    assert_eq!(poll(&mut first).await.len(), 1);
    let mut second = consumer(&b, ConsumerOptions::new()).await;
    let started = tokio::time::Instant::now();
    let got = second.poll(LOCK * 2).await.unwrap();
    assert_eq!(offsets(&got), vec![0]);
    assert_eq!(
        started.elapsed(),
        LOCK,
        "woken at the lock deadline, not at the poll timeout"
    );
}

#[tokio::test(start_paused = true)]
async fn delivery_count_limit_archives_on_release_and_on_expiry() {
    let b = broker(1, 2, earliest().delivery_count_limit(3));
    let mut c = consumer(&b, ConsumerOptions::new()).await;
    for attempt in 1..=3_u16 {
        let records = poll(&mut c).await;
        assert_eq!(offsets(&records), vec![0, 1], "attempt {attempt}");
        assert!(records.iter().all(|r| r.delivery_count() == attempt));
        if attempt < 3 {
            ack_all(&mut c, &records, AcknowledgeType::Release).await;
        } else {
            // Last attempt: offset 0 released, offset 1 left to time out.
            c.acknowledge(&records[0], AcknowledgeType::Release)
                .unwrap();
            c.acknowledge(&records[1], AcknowledgeType::Renew).unwrap();
            c.commit_sync(Duration::from_secs(1)).await.unwrap();
        }
    }
    assert_eq!(state(&b, 0), (RecordState::Archived, 3));
    assert_eq!(state(&b, 1), (RecordState::Acquired, 3));
    tokio::time::advance(LOCK).await;
    assert_eq!(state(&b, 1), (RecordState::Archived, 3));
    let mut fresh = consumer(&b, ConsumerOptions::new()).await;
    assert!(poll(&mut fresh).await.is_empty());
    let counts = b.state_counts(GROUP);
    assert_eq!(
        (counts.archived, counts.available, counts.acquired),
        (2, 0, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn renew_keeps_the_record_past_the_lock_and_presents_it_again() {
    let b = broker(1, 1, earliest());
    let mut c = consumer(&b, ConsumerOptions::new()).await;
    let mut other = consumer(&b, ConsumerOptions::new()).await;
    let mut records = poll(&mut c).await;
    for _ in 0..3 {
        tokio::time::advance(LOCK / 2).await;
        c.acknowledge(&records[0], AcknowledgeType::Renew).unwrap();
        records = poll(&mut c).await;
        assert_eq!(
            offsets(&records),
            vec![0],
            "a renewed record is returned again"
        );
        assert_eq!(
            records[0].delivery_count(),
            1,
            "renewal is not a new delivery"
        );
    }
    // 1.5 lock durations have passed since the acquisition.
    assert!(
        poll(&mut other).await.is_empty(),
        "the renewed lock still holds"
    );
    c.acknowledge(&records[0], AcknowledgeType::Accept).unwrap();
    assert!(
        c.commit_sync(Duration::from_secs(1))
            .await
            .unwrap()
            .is_success()
    );
    assert_eq!(state(&b, 0), (RecordState::Acknowledged, 1));
}

#[tokio::test(start_paused = true)]
async fn renew_sent_by_commit_can_be_followed_by_accept() {
    let b = broker(1, 1, earliest());
    let mut c = consumer(&b, ConsumerOptions::new()).await;
    let records = poll(&mut c).await;
    tokio::time::advance(LOCK / 2).await;
    c.acknowledge(&records[0], AcknowledgeType::Renew).unwrap();
    assert!(
        c.commit_sync(Duration::from_secs(1))
            .await
            .unwrap()
            .is_success()
    );
    tokio::time::advance(LOCK * 3 / 4).await;
    c.acknowledge(&records[0], AcknowledgeType::Accept).unwrap();
    assert!(
        c.commit_sync(Duration::from_secs(1))
            .await
            .unwrap()
            .is_success()
    );
    assert_eq!(state(&b, 0).0, RecordState::Acknowledged);
}

#[tokio::test(start_paused = true)]
async fn in_flight_window_is_bounded_per_partition() {
    let b = broker(1, 10, earliest().partition_max_record_locks(4));
    let mut a = consumer(&b, ConsumerOptions::new()).await;
    let mut c = consumer(&b, ConsumerOptions::new()).await;
    let first = poll(&mut a).await;
    assert_eq!(offsets(&first), vec![0, 1, 2, 3]);
    assert!(poll(&mut c).await.is_empty(), "the window is full");
    a.acknowledge(&first[0], AcknowledgeType::Accept).unwrap();
    a.acknowledge(&first[1], AcknowledgeType::Accept).unwrap();
    a.acknowledge(&first[2], AcknowledgeType::Release).unwrap();
    a.acknowledge(&first[3], AcknowledgeType::Renew).unwrap();
    a.commit_sync(Duration::from_secs(1)).await.unwrap();
    // The window (2..4) leaves room for 2 records, re-acquired ones included, as on a
    // broker (`min(max.poll.records, cap - window)`).
    let next = poll(&mut c).await;
    assert_eq!(
        offsets(&next),
        vec![2, 4],
        "released record first, then new ones until the room is used"
    );
    assert_eq!(b.share_partition_offsets(GROUP, "t", 0), Some((2, 5)));
}

#[tokio::test(start_paused = true)]
async fn max_poll_records_bounds_a_poll() {
    let b = broker(2, 10, earliest());
    let mut c = consumer(&b, ConsumerOptions::new().max_poll_records(3)).await;
    let records = poll(&mut c).await;
    assert_eq!(records.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn auto_offset_reset_latest_skips_earlier_records_and_earliest_does_not() {
    let b = EmbeddedBroker::new();
    b.create_topic("t", 1).unwrap();
    b.produce("t", ProduceRecord::new().value("old")).unwrap();
    let mut latest = b.share_consumer("latest-group");
    latest.subscribe(vec!["t".into()]).await.unwrap();
    assert!(latest.poll(Duration::ZERO).await.unwrap().is_empty());
    b.produce("t", ProduceRecord::new().value("new")).unwrap();
    let got = latest.poll(Duration::ZERO).await.unwrap();
    assert_eq!(offsets(&got), vec![1]);
    assert!(
        b.record_state("latest-group", "t", 0, 0).is_none(),
        "offset 0 is before the group's start"
    );

    b.set_group_config(
        "earliest-group",
        GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest),
    )
    .unwrap();
    let mut earliest = b.share_consumer("earliest-group");
    earliest.subscribe(vec!["t".into()]).await.unwrap();
    assert_eq!(
        offsets(&earliest.poll(Duration::ZERO).await.unwrap()),
        vec![0, 1]
    );
}

#[tokio::test(start_paused = true)]
async fn close_commits_acks_and_releases_the_rest_at_once() {
    let b = broker(1, 3, earliest());
    let mut c = consumer(&b, ConsumerOptions::new()).await;
    let records = poll(&mut c).await;
    c.acknowledge(&records[0], AcknowledgeType::Accept).unwrap();
    c.close(Duration::from_secs(1)).await.unwrap();
    assert_eq!(state(&b, 0).0, RecordState::Acknowledged);
    assert_eq!(state(&b, 1), (RecordState::Available, 1));
    let mut other = consumer(&b, ConsumerOptions::new()).await;
    let got = poll(&mut other).await;
    assert_eq!(
        offsets(&got),
        vec![1, 2],
        "available without waiting for the lock"
    );
    assert!(matches!(
        c.poll(Duration::ZERO).await,
        Err(ConsumerError::Closed)
    ));
    assert!(matches!(
        c.commit_sync(Duration::ZERO).await,
        Err(ConsumerError::Closed)
    ));
    assert_eq!(c.group_metadata().member_epoch(), -1);
    c.close(Duration::from_secs(1))
        .await
        .expect("closing twice is a no-op");
}

#[tokio::test(start_paused = true)]
async fn a_stalled_consumer_keeps_its_locks_until_they_expire() {
    for stall_by_option in [false, true] {
        let b = broker(1, 2, earliest());
        let options = if stall_by_option {
            ConsumerOptions::new().on_drop(OnDrop::Stall)
        } else {
            ConsumerOptions::new()
        };
        let mut c = consumer(&b, options).await;
        assert_eq!(poll(&mut c).await.len(), 2);
        if stall_by_option {
            drop(c);
        } else {
            c.stall();
        }
        let mut other = consumer(&b, ConsumerOptions::new()).await;
        assert!(
            poll(&mut other).await.is_empty(),
            "a hung member releases nothing"
        );
        assert!(
            b.record_state(GROUP, "t", 0, 0)
                .unwrap()
                .member_id()
                .is_some()
        );
        tokio::time::advance(LOCK).await;
        let got = poll(&mut other).await;
        assert_eq!(offsets(&got), vec![0, 1]);
        assert!(got.iter().all(|r| r.delivery_count() == 2));
    }
}

#[tokio::test(start_paused = true)]
async fn a_dropped_consumer_is_a_closed_connection_and_releases_at_once() {
    let b = broker(1, 3, earliest().delivery_count_limit(2));
    let mut c = consumer(&b, ConsumerOptions::new()).await;
    let first = poll(&mut c).await;
    assert_eq!(first.len(), 3);
    // Acknowledged but never sent: lost with the process.
    c.acknowledge(&first[0], AcknowledgeType::Accept).unwrap();
    drop(c);
    for offset in 0..3 {
        assert_eq!(
            state(&b, offset),
            (RecordState::Available, 1),
            "offset {offset}"
        );
    }
    let mut d = consumer(&b, ConsumerOptions::new()).await;
    let second = poll(&mut d).await;
    assert_eq!(offsets(&second), [0, 1, 2]);
    assert!(second.iter().all(|r| r.delivery_count() == 2));
    drop(d);
    // Released at the delivery-count limit: archived.
    assert_eq!(state(&b, 0), (RecordState::Archived, 2));
    assert_eq!(b.state_counts(GROUP).archived, 3);
}

#[tokio::test(start_paused = true)]
async fn explicit_mode_requires_every_record_acknowledged_before_the_next_poll() {
    let b = broker(1, 3, earliest());
    let mut c = consumer(&b, ConsumerOptions::new()).await;
    let records = poll(&mut c).await;
    c.acknowledge(&records[0], AcknowledgeType::Accept).unwrap();
    match c.poll(Duration::ZERO).await {
        Err(ConsumerError::UnacknowledgedRecords { count, first }) => {
            assert_eq!(count, 2);
            assert_eq!(first.offset(), 1);
        }
        other => panic!("expected UnacknowledgedRecords, got {other:?}"),
    }
    // The rest can still be acknowledged, and then polling works.
    c.acknowledge(&records[1], AcknowledgeType::Accept).unwrap();
    c.acknowledge(&records[2], AcknowledgeType::Release)
        .unwrap();
    let again = poll(&mut c).await;
    assert_eq!(offsets(&again), vec![2]);
    assert_eq!(
        state(&b, 1).0,
        RecordState::Acknowledged,
        "acks rode on the poll"
    );
    let results = c.commit_sync(Duration::ZERO).await.unwrap();
    assert_eq!(
        results.get(&TopicPartition::new("t", 0)),
        Some(&Ok(())),
        "poll's acks reported"
    );
}

#[tokio::test(start_paused = true)]
async fn acknowledging_outside_the_last_poll_is_refused() {
    let b = broker(1, 2, earliest());
    let mut c = consumer(&b, ConsumerOptions::new().max_poll_records(1)).await;
    let first = poll(&mut c).await;
    let stranger = ConsumerRecord::new("t", 0, 1);
    assert!(matches!(
        c.acknowledge(&stranger, AcknowledgeType::Accept),
        Err(ConsumerError::NotInBatch { .. })
    ));
    c.acknowledge(&first[0], AcknowledgeType::Accept).unwrap();
    c.commit_sync(Duration::ZERO).await.unwrap();
    let err = c
        .acknowledge(&first[0], AcknowledgeType::Reject)
        .unwrap_err();
    assert!(
        matches!(err, ConsumerError::AlreadyAcknowledged { .. }),
        "{err}"
    );
    poll(&mut c).await;
    assert!(matches!(
        c.acknowledge(&first[0], AcknowledgeType::Accept),
        Err(ConsumerError::NotInBatch { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn implicit_mode_accepts_on_next_poll_and_on_commit() {
    let b = broker(1, 4, earliest());
    let options = ConsumerOptions::new()
        .acknowledgement_mode(AcknowledgementMode::Implicit)
        .max_poll_records(2);
    let mut c = consumer(&b, options).await;
    let records = poll(&mut c).await;
    let err = c
        .acknowledge(&records[0], AcknowledgeType::Accept)
        .unwrap_err();
    assert!(matches!(err, ConsumerError::ImplicitAcknowledgement));
    assert!(
        err.to_string()
            .contains("share.acknowledgement.mode=explicit")
    );
    let next = poll(&mut c).await;
    assert_eq!(offsets(&next), vec![2, 3]);
    assert_eq!(state(&b, 0).0, RecordState::Acknowledged);
    assert_eq!(state(&b, 2).0, RecordState::Acquired);
    assert!(c.commit_sync(Duration::ZERO).await.unwrap().is_success());
    assert_eq!(state(&b, 3).0, RecordState::Acknowledged);
}

#[tokio::test(start_paused = true)]
async fn implicit_close_releases_the_last_poll() {
    let b = broker(1, 1, earliest());
    let options = ConsumerOptions::new().acknowledgement_mode(AcknowledgementMode::Implicit);
    let mut c = consumer(&b, options).await;
    assert_eq!(poll(&mut c).await.len(), 1);
    c.close(Duration::ZERO).await.unwrap();
    assert_eq!(state(&b, 0), (RecordState::Available, 1));
}

#[tokio::test(start_paused = true)]
async fn commit_async_reports_per_partition() {
    let b = broker(2, 2, earliest());
    let mut c = consumer(&b, ConsumerOptions::new()).await;
    let records = poll(&mut c).await;
    ack_all(&mut c, &records, AcknowledgeType::Accept).await;
    let results = c.commit_async().unwrap().await.unwrap();
    assert_eq!(results.len(), 2);
    assert!(results.is_success());
    assert!(
        c.commit_async().unwrap().await.unwrap().is_empty(),
        "nothing pending"
    );
}

#[tokio::test(start_paused = true)]
async fn poll_waits_for_produce_and_times_out_when_idle() {
    let b = broker(1, 0, earliest());
    let mut c = consumer(&b, ConsumerOptions::new()).await;
    let started = tokio::time::Instant::now();
    assert!(c.poll(Duration::from_secs(2)).await.unwrap().is_empty());
    assert_eq!(started.elapsed(), Duration::from_secs(2));

    let producer = b.clone();
    let (got, ()) = tokio::join!(c.poll(Duration::from_secs(60)), async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        producer
            .produce("t", ProduceRecord::new().value("late"))
            .unwrap();
    });
    assert_eq!(offsets(&got.unwrap()), vec![0]);
}

#[tokio::test(start_paused = true)]
async fn payloads_headers_and_timestamps_arrive_intact() {
    let b = broker(1, 0, earliest());
    b.produce(
        "t",
        ProduceRecord::new()
            .key("k")
            .header("h", "1")
            .null_header("h")
            .header("empty", "")
            .timestamp(1_700_000_000_123),
    )
    .unwrap();
    let mut c = consumer(&b, ConsumerOptions::new()).await;
    let r = poll(&mut c).await.remove(0);
    assert_eq!(r.key(), Some(&Bytes::from_static(b"k")));
    assert_eq!(r.value(), None, "null value kept");
    let headers: Vec<(&str, Option<&[u8]>)> = r
        .headers()
        .iter()
        .map(|h| (h.key(), h.value().map(|v| v.as_ref())))
        .collect();
    assert_eq!(
        headers,
        vec![
            ("h", Some(&b"1"[..])),
            ("h", None),
            ("empty", Some(&b""[..]))
        ]
    );
    assert_eq!(r.timestamp(), 1_700_000_000_123);
    assert_eq!(r.timestamp_type(), TimestampType::CreateTime);
}

#[tokio::test(start_paused = true)]
async fn consumer_calls_in_the_wrong_order_fail_clearly() {
    let b = broker(1, 0, earliest());
    let mut c = b.share_consumer(GROUP);
    assert_eq!(c.group_metadata().member_epoch(), 0);
    assert!(matches!(
        c.poll(Duration::ZERO).await,
        Err(ConsumerError::NotSubscribed)
    ));
    // An empty list unsubscribes, as in Java: nothing to leave yet.
    c.subscribe(vec![]).await.unwrap();
    assert!(c.subscription().is_empty());
    assert!(matches!(
        c.subscribe(vec!["t".into(), " ".into()]).await,
        Err(ConsumerError::InvalidSubscription { .. })
    ));
    c.subscribe(vec!["t".into(), "t".into()]).await.unwrap();
    assert_eq!(c.subscription(), vec!["t".to_string()]);
}

#[test]
fn admin_errors_name_what_is_wrong() {
    let b = EmbeddedBroker::new();
    b.create_topic("t", 2).unwrap();
    assert_eq!(
        b.create_topic("t", 1),
        Err(EmbeddedError::TopicExists("t".into()))
    );
    assert!(matches!(
        b.create_topic("", 1),
        Err(EmbeddedError::InvalidTopic { .. })
    ));
    assert!(matches!(
        b.create_topic("a b", 1),
        Err(EmbeddedError::InvalidTopic { .. })
    ));
    assert!(matches!(
        b.create_topic("z", 0),
        Err(EmbeddedError::InvalidTopic { .. })
    ));
    assert_eq!(
        b.produce("nope", ProduceRecord::new()).unwrap_err(),
        EmbeddedError::UnknownTopic("nope".into())
    );
    let err = b
        .produce("t", ProduceRecord::new().partition(2))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "topic `t` has 2 partition(s); there is no partition 2"
    );
    let err = b
        .set_group_config(GROUP, GroupConfig::new().delivery_count_limit(11))
        .unwrap_err();
    assert!(
        err.to_string().contains("share.delivery.count.limit"),
        "{err}"
    );
    let err = b
        .set_group_config(
            GROUP,
            GroupConfig::new().record_lock_duration(Duration::ZERO),
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("share.record.lock.duration.ms"),
        "{err}"
    );
    let err = "sometimes".parse::<AutoOffsetReset>().unwrap_err();
    assert!(err.to_string().contains("share.auto.offset.reset"), "{err}");
}

#[test]
fn keyed_records_stick_to_a_partition_and_unkeyed_spread() {
    let b = EmbeddedBroker::new();
    b.create_topic("t", 3).unwrap();
    let p1 = b
        .produce("t", ProduceRecord::new().key("same"))
        .unwrap()
        .partition();
    let p2 = b
        .produce("t", ProduceRecord::new().key("same"))
        .unwrap()
        .partition();
    assert_eq!(p1, p2);
    let spread: std::collections::BTreeSet<i32> = (0..3)
        .map(|_| b.produce("t", ProduceRecord::new()).unwrap().partition())
        .collect();
    assert_eq!(spread.len(), 3);
    assert_eq!(b.topic_partitions().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn held_records_stay_across_polls_and_renew_can_be_turned_off() {
    let b = broker(1, 3, earliest());
    let mut c = consumer(&b, ConsumerOptions::new().max_poll_records(2)).await;
    assert!(c.supports_renew());
    let first = poll(&mut c).await;
    assert_eq!(offsets(&first), vec![0, 1]);
    c.hold_offset("t", 0, 0).unwrap();
    c.acknowledge(&first[1], AcknowledgeType::Accept).unwrap();
    // The held record does not block the next poll, and is not presented again.
    let second = poll(&mut c).await;
    assert_eq!(offsets(&second), vec![2]);
    c.acknowledge(&second[0], AcknowledgeType::Accept).unwrap();
    c.acknowledge_offset("t", 0, 0, AcknowledgeType::Renew)
        .unwrap();
    tokio::time::advance(LOCK - Duration::from_secs(1)).await;
    assert!(
        poll(&mut c).await.is_empty(),
        "renewed, held, not presented again"
    );
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(
        state(&b, 0),
        (RecordState::Acquired, 1),
        "the renewal outlived the first lock"
    );
    c.acknowledge_offset("t", 0, 0, AcknowledgeType::Accept)
        .unwrap();
    assert!(c.commit_sync(LOCK).await.unwrap().is_success());
    assert_eq!(state(&b, 0).0, RecordState::Acknowledged);

    let mut old = consumer(&b, ConsumerOptions::new().renew(false)).await;
    assert!(!old.supports_renew());
    assert!(matches!(
        old.acknowledge_offset("t", 0, 0, AcknowledgeType::Renew),
        Err(ConsumerError::Protocol(ProtocolError::Unsupported { .. }))
    ));
}

// ---------------------------------------------------------------------------------------
// The delivery-count limit and the group's dead-letter queue (KIP-1191)
// ---------------------------------------------------------------------------------------

const DLQ: &str = "dlq.t";

/// The headers of a record, in order, as text.
fn header_texts(record: &ConsumerRecord) -> Vec<(String, Option<String>)> {
    record
        .headers()
        .iter()
        .map(|h| {
            (
                h.key().to_owned(),
                h.value().map(|v| String::from_utf8_lossy(v).into_owned()),
            )
        })
        .collect()
}

/// What Kafka 4.4 writes in a dead letter's headers, in its order.
fn dead_letter_headers(
    partition: i32,
    offset: i64,
    delivery_count: u16,
    message: &str,
) -> Vec<(String, Option<String>)> {
    [
        ("__dlq.errors.topic", "t".to_owned()),
        ("__dlq.errors.partition", partition.to_string()),
        ("__dlq.errors.offset", offset.to_string()),
        ("__dlq.errors.group", GROUP.to_owned()),
        ("__dlq.errors.delivery.count", delivery_count.to_string()),
        ("__dlq.errors.message", message.to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), Some(v)))
    .collect()
}

const EXCEEDED: &str = "Offset delivery count exceeded the threshold.";
const REJECTED: &str = "Offset rejected by client.";

#[tokio::test(start_paused = true)]
async fn the_consumer_reports_its_groups_limit_and_dead_letter_queue() {
    let b = broker(1, 0, earliest());
    let c = consumer(&b, ConsumerOptions::new()).await;
    assert_eq!(
        c.delivery_count_limit(),
        Some(kafka_share_sink::DEFAULT_DELIVERY_COUNT_LIMIT)
    );
    assert_eq!(
        c.broker_dead_letter_queue(),
        kafka_share_sink::BrokerDeadLetterQueue::None
    );

    // A change is seen at once; a topic that does not exist is no queue.
    b.set_group_config(
        GROUP,
        earliest()
            .delivery_count_limit(3)
            .dead_letter_queue(DLQ, true),
    )
    .unwrap();
    assert_eq!(c.delivery_count_limit(), Some(3));
    assert_eq!(
        c.broker_dead_letter_queue(),
        kafka_share_sink::BrokerDeadLetterQueue::None
    );
    b.create_topic(DLQ, 1).unwrap();
    let boxed: Box<dyn ShareConsumer> = Box::new(c);
    assert_eq!(
        boxed.broker_dead_letter_queue(),
        kafka_share_sink::BrokerDeadLetterQueue::Topic {
            name: DLQ.to_owned(),
            copy_record: true
        }
    );
    assert_eq!(boxed.delivery_count_limit(), Some(3));
}

#[tokio::test(start_paused = true)]
async fn a_record_released_at_the_limit_goes_through_archiving_to_the_dead_letter_topic() {
    let b = EmbeddedBroker::new();
    b.create_topic("t", 1).unwrap();
    b.create_topic(DLQ, 1).unwrap();
    b.set_group_config(
        GROUP,
        earliest()
            .delivery_count_limit(2)
            .dead_letter_queue(DLQ, true),
    )
    .unwrap();
    b.produce(
        "t",
        ProduceRecord::new()
            .key("k")
            .value("poison")
            .header("source", "web")
            .timestamp(7),
    )
    .unwrap();
    let mut c = consumer(&b, ConsumerOptions::new()).await;
    let first = poll(&mut c).await;
    ack_all(&mut c, &first, AcknowledgeType::Release).await;
    let second = poll(&mut c).await;
    assert_eq!(second[0].delivery_count(), 2);

    b.hold_dead_letter_writes(true);
    ack_all(&mut c, &second, AcknowledgeType::Release).await;
    c.commit_sync(Duration::from_secs(1)).await.unwrap();
    assert_eq!(state(&b, 0), (RecordState::Archiving, 2));
    assert!(poll(&mut c).await.is_empty(), "never delivered again");
    assert_eq!(
        b.share_partition_offsets(GROUP, "t", 0),
        Some((0, 1)),
        "ARCHIVING holds the start offset"
    );
    let counts = b.state_counts(GROUP);
    assert_eq!((counts.archiving, counts.archived), (1, 0));
    assert!(b.read_log(DLQ, 0).unwrap().is_empty(), "not written yet");

    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    b.hold_dead_letter_writes(false);
    assert_eq!(state(&b, 0), (RecordState::Archived, 2));
    assert_eq!(b.share_partition_offsets(GROUP, "t", 0), Some((1, 1)));
    let counts = b.state_counts(GROUP);
    assert_eq!((counts.archiving, counts.archived), (0, 1));

    let log = b.read_log(DLQ, 0).unwrap();
    assert_eq!(log.len(), 1);
    let letter = &log[0];
    assert_eq!(letter.key().map(|k| &k[..]), Some(&b"k"[..]));
    assert_eq!(letter.value().map(|v| &v[..]), Some(&b"poison"[..]));
    assert_eq!(
        header_texts(letter),
        dead_letter_headers(0, 0, 2, EXCEEDED),
        "Kafka's context headers, not the record's own"
    );
    assert_eq!(letter.timestamp_type(), TimestampType::CreateTime);
    assert!(
        u128::try_from(letter.timestamp()).unwrap() >= before,
        "the time of the write, not the record's ({})",
        letter.timestamp()
    );
}

#[tokio::test(start_paused = true)]
async fn a_lock_expiring_or_a_member_leaving_at_the_limit_writes_a_dead_letter() {
    let b = broker(
        1,
        2,
        earliest()
            .delivery_count_limit(2)
            .dead_letter_queue(DLQ, false),
    );
    b.create_topic(DLQ, 1).unwrap();
    let mut c = consumer(&b, ConsumerOptions::new()).await;
    let first = poll(&mut c).await;
    ack_all(&mut c, &first, AcknowledgeType::Release).await;
    let second = poll(&mut c).await;
    assert_eq!(offsets(&second), [0, 1]);
    // Offset 0 is renewed and then left to time out; the consumer holding offset 1 closes.
    c.acknowledge(&second[0], AcknowledgeType::Renew).unwrap();
    c.acknowledge(&second[1], AcknowledgeType::Renew).unwrap();
    c.commit_sync(Duration::from_secs(1)).await.unwrap();
    tokio::time::advance(LOCK).await;
    assert_eq!(state(&b, 0), (RecordState::Archived, 2));
    assert_eq!(state(&b, 1), (RecordState::Archived, 2));
    let log = b.read_log(DLQ, 0).unwrap();
    assert_eq!(log.len(), 2);
    for (letter, offset) in log.iter().zip([0, 1]) {
        assert_eq!((letter.key(), letter.value()), (None, None), "no copy");
        assert_eq!(
            header_texts(letter),
            dead_letter_headers(0, offset, 2, EXCEEDED)
        );
    }

    // A member that closes while it holds a record on its last delivery.
    b.produce("t", ProduceRecord::new().partition(0).value("v2"))
        .unwrap();
    let mut d = consumer(&b, ConsumerOptions::new()).await;
    let got = poll(&mut d).await;
    ack_all(&mut d, &got, AcknowledgeType::Release).await;
    let got = poll(&mut d).await;
    assert_eq!(
        got.iter()
            .map(|r| (r.offset(), r.delivery_count()))
            .collect::<Vec<_>>(),
        [(2, 2)]
    );
    d.acknowledge(&got[0], AcknowledgeType::Renew).unwrap();
    d.commit_sync(Duration::from_secs(1)).await.unwrap();
    d.close(Duration::from_secs(1)).await.unwrap();
    assert_eq!(state(&b, 2), (RecordState::Archived, 2));
    let log = b.read_log(DLQ, 0).unwrap();
    assert_eq!(
        header_texts(&log[2]),
        dead_letter_headers(0, 2, 2, EXCEEDED)
    );
}

#[tokio::test(start_paused = true)]
async fn a_rejected_record_is_written_to_the_dead_letter_topic_partition_by_its_own() {
    // Source partition p goes to dead-letter partition p % 2.
    let b = broker(3, 3, earliest().dead_letter_queue(DLQ, true));
    b.create_topic(DLQ, 2).unwrap();
    let mut c = consumer(&b, ConsumerOptions::new()).await;
    let records = poll(&mut c).await;
    assert_eq!(records.len(), 3);
    ack_all(&mut c, &records, AcknowledgeType::Reject).await;
    c.commit_sync(Duration::from_secs(1)).await.unwrap();
    let zero = b.read_log(DLQ, 0).unwrap();
    let one = b.read_log(DLQ, 1).unwrap();
    let partitions = |log: &[ConsumerRecord]| {
        log.iter()
            .map(|r| {
                r.headers()
                    .last("__dlq.errors.partition")
                    .and_then(|h| h.value().cloned())
            })
            .collect::<Vec<_>>()
    };
    let mut on_zero = partitions(&zero);
    on_zero.sort();
    assert_eq!(on_zero, [Some(Bytes::from("0")), Some(Bytes::from("2"))]);
    assert_eq!(partitions(&one), [Some(Bytes::from("1"))]);
    let letter = &one[0];
    assert_eq!(header_texts(letter), dead_letter_headers(1, 0, 1, REJECTED));
    assert_eq!(letter.value().map(|v| &v[..]), Some(&b"v1"[..]));
    for partition in 0..3 {
        let view = b.record_state(GROUP, "t", partition, 0).unwrap();
        assert_eq!(
            (view.state(), view.delivery_count()),
            (RecordState::Archived, 1)
        );
    }
}

#[tokio::test(start_paused = true)]
async fn without_its_topic_the_record_is_archived_without_a_dead_letter() {
    let b = broker(
        1,
        1,
        earliest()
            .delivery_count_limit(2)
            .dead_letter_queue(DLQ, true),
    );
    let mut c = consumer(&b, ConsumerOptions::new()).await;
    let records = poll(&mut c).await;
    ack_all(&mut c, &records, AcknowledgeType::Reject).await;
    c.commit_sync(Duration::from_secs(1)).await.unwrap();
    assert_eq!(state(&b, 0), (RecordState::Archived, 1));
    assert!(matches!(
        b.read_log(DLQ, 0),
        Err(EmbeddedError::UnknownTopic(_))
    ));
    // Without a queue, a rejected record never enters ARCHIVING either.
    let b = broker(1, 1, earliest());
    b.create_topic(DLQ, 1).unwrap();
    let mut c = consumer(&b, ConsumerOptions::new()).await;
    b.hold_dead_letter_writes(true);
    let records = poll(&mut c).await;
    ack_all(&mut c, &records, AcknowledgeType::Reject).await;
    c.commit_sync(Duration::from_secs(1)).await.unwrap();
    assert_eq!(state(&b, 0), (RecordState::Archived, 1));
    assert!(b.read_log(DLQ, 0).unwrap().is_empty());
}

#[tokio::test]
async fn a_consumer_of_the_dead_letter_topic_is_woken_by_a_dead_letter() {
    let b = broker(
        1,
        1,
        GroupConfig::new()
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .record_lock_duration(Duration::from_millis(100))
            .delivery_count_limit(2)
            .dead_letter_queue(DLQ, true),
    );
    b.create_topic(DLQ, 1).unwrap();
    b.set_group_config(
        "readers",
        GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest),
    )
    .unwrap();
    let mut reader = b.share_consumer("readers");
    reader.subscribe(vec![DLQ.into()]).await.unwrap();
    let waiting = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let got = reader.poll(Duration::from_secs(20)).await.unwrap();
        (got, started.elapsed())
    });
    let mut c = consumer(&b, ConsumerOptions::new()).await;
    // Two deliveries, each held and left to time out: no acknowledgement is sent, and the
    // poll after the second finds the lock expired and writes the letter.
    for _ in 0..2 {
        assert_eq!(poll(&mut c).await.len(), 1);
        c.hold_offset("t", 0, 0).unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert!(poll(&mut c).await.is_empty());
    let (got, waited) = waiting.await.unwrap();
    assert_eq!(got.len(), 1, "the dead letter");
    assert!(
        waited < Duration::from_secs(5),
        "woken, not timed out: {waited:?}"
    );
    assert_eq!(
        header_texts(&got[0]),
        dead_letter_headers(0, 0, 2, EXCEEDED)
    );
}

#[test]
fn a_dead_letter_topic_kafka_would_refuse_is_an_invalid_group_config() {
    let b = EmbeddedBroker::new();
    for topic in ["", "__consumer_offsets"] {
        let err = b
            .set_group_config(GROUP, GroupConfig::new().dead_letter_queue(topic, false))
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("errors.deadletterqueue.topic.name"),
            "{err}"
        );
    }
}
