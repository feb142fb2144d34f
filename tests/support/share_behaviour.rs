//! Behaviour a share group shows a sink, written once and run against both backends: the
//! embedded group (`tests/embedded_parity.rs`) and a real Kafka broker
//! (`tests/kafka_parity.rs`), so the embedded group cannot drift from the broker unnoticed.
//!
//! Each scenario takes a [`Backend`]: one topic with one partition, one share group reading
//! it from the earliest offset with the [`Group`] configs the scenario names, consumers in
//! explicit acknowledgement mode, and a way to produce one batch of records. Waits use the
//! tokio clock, so the embedded side runs them with paused time.

#![allow(dead_code)]

use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::{AcknowledgeType, ConsumerRecord, ShareAcquireMode, ShareConsumer};
use tokio::time::Instant;

/// The share-group configs a scenario needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Group {
    /// `share.record.lock.duration.ms`.
    pub(crate) lock: Duration,
    /// `share.partition.max.record.locks`, when not the default.
    pub(crate) max_record_locks: Option<usize>,
}

/// A topic, a group reading it, its consumers and its producer.
#[async_trait]
pub(crate) trait Backend: Send + Sync {
    /// A new consumer of the group, subscribed to the topic, in explicit mode.
    async fn consumer(
        &self,
        max_poll_records: usize,
        mode: ShareAcquireMode,
    ) -> Box<dyn ShareConsumer>;

    /// Produces `records` records to the partition as one batch.
    async fn produce_batch(&self, records: usize);
}

/// How long a poll waits each time.
const POLL: Duration = Duration::from_millis(500);

/// Polls until a poll returns records, for at most `within`, and returns them (empty if
/// none came).
async fn first_records(c: &mut dyn ShareConsumer, within: Duration) -> Vec<ConsumerRecord> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let records = c.poll(POLL).await.expect("poll");
        if !records.is_empty() {
            return records;
        }
    }
    Vec::new()
}

/// Polls for `period` and fails if any record comes.
async fn nothing_for(c: &mut dyn ShareConsumer, period: Duration, why: &str) {
    let deadline = Instant::now() + period;
    while Instant::now() < deadline {
        let records = c.poll(POLL).await.expect("poll");
        assert!(records.is_empty(), "{why}: got {:?}", offsets(&records));
    }
}

fn offsets(records: &[ConsumerRecord]) -> Vec<i64> {
    records.iter().map(ConsumerRecord::offset).collect()
}

fn counts(records: &[ConsumerRecord]) -> Vec<u16> {
    records.iter().map(ConsumerRecord::delivery_count).collect()
}

async fn accept(c: &mut dyn ShareConsumer, records: &[ConsumerRecord]) {
    for r in records {
        c.acknowledge(r, AcknowledgeType::Accept)
            .expect("acknowledge");
    }
    let results = c
        .commit_sync(Duration::from_secs(10))
        .await
        .expect("commit");
    assert!(results.is_success(), "{results:?}");
}

async fn close(mut c: Box<dyn ShareConsumer>) {
    c.close(Duration::from_secs(10)).await.expect("close");
}

const BATCH: ShareAcquireMode = ShareAcquireMode::BatchOptimized;
const RECORD_LIMIT: ShareAcquireMode = ShareAcquireMode::RecordLimit;

/// The group of [`a_dropped_consumer_releases_its_records_at_once`]: a lock long enough
/// that a release by lock expiry cannot pass for one at once.
pub(crate) const DROP_GROUP: Group = Group {
    lock: Duration::from_secs(30),
    max_record_locks: None,
};

/// A consumer that goes away without closing (its process died, its connections closed):
/// the group releases its records at once, each with the delivery count it has (bumped
/// when acquired, Kafka 4.2+), so the next consumer gets them with count 2 well before
/// their lock would have expired.
pub(crate) async fn a_dropped_consumer_releases_its_records_at_once(b: &dyn Backend) {
    b.produce_batch(5).await;
    let mut survivor = b.consumer(500, BATCH).await;
    let mut crashed = b.consumer(500, BATCH).await;
    let held = first_records(crashed.as_mut(), Duration::from_secs(30)).await;
    assert_eq!(offsets(&held), [0, 1, 2, 3, 4]);
    assert_eq!(counts(&held), [1; 5]);
    // Acknowledged, never sent: lost with the process.
    crashed
        .acknowledge(&held[0], AcknowledgeType::Accept)
        .expect("acknowledge");
    let dropped = Instant::now();
    drop(crashed);
    let again = first_records(survivor.as_mut(), DROP_GROUP.lock / 2).await;
    assert!(
        dropped.elapsed() < DROP_GROUP.lock,
        "released at once, not by the lock"
    );
    assert_eq!(offsets(&again), [0, 1, 2, 3, 4], "every record back");
    assert_eq!(
        counts(&again),
        [2; 5],
        "the count bumped at acquisition stays"
    );
    accept(survivor.as_mut(), &again).await;
    close(survivor).await;
}

/// The group of [`a_stalled_consumer_holds_its_records_until_their_locks_expire`].
pub(crate) const STALL_GROUP: Group = Group {
    lock: Duration::from_secs(4),
    max_record_locks: None,
};

/// A consumer that stays connected but stops polling keeps its records until their locks
/// expire; then another consumer gets them with count 2.
pub(crate) async fn a_stalled_consumer_holds_its_records_until_their_locks_expire(b: &dyn Backend) {
    b.produce_batch(5).await;
    let mut other = b.consumer(500, BATCH).await;
    let mut stalled = b.consumer(500, BATCH).await;
    let held = first_records(stalled.as_mut(), Duration::from_secs(30)).await;
    assert_eq!(offsets(&held), [0, 1, 2, 3, 4]);
    nothing_for(other.as_mut(), STALL_GROUP.lock / 2, "still locked").await;
    let again = first_records(other.as_mut(), STALL_GROUP.lock * 4).await;
    assert_eq!(offsets(&again), [0, 1, 2, 3, 4]);
    assert_eq!(counts(&again), [2; 5]);
    accept(other.as_mut(), &again).await;
    close(other).await;
    // Only now does the stalled consumer go.
    drop(stalled);
}

/// The group of [`the_in_flight_cap_is_checked_before_acquiring_whole_batches`]: Kafka's
/// smallest `share.partition.max.record.locks`.
pub(crate) const CAP_GROUP: Group = Group {
    lock: Duration::from_secs(30),
    max_record_locks: Some(100),
};

/// `share.partition.max.record.locks` is checked before acquiring, and whole batches are
/// acquired: 150 records produced together are held at once under a cap of 100, then
/// nothing new is acquired until the in-flight window is below the cap again, and then a
/// whole batch of 10 passes it again.
pub(crate) async fn the_in_flight_cap_is_checked_before_acquiring_whole_batches(b: &dyn Backend) {
    b.produce_batch(150).await;
    let mut holder = b.consumer(500, BATCH).await;
    let held = first_records(holder.as_mut(), Duration::from_secs(30)).await;
    assert_eq!(held.len(), 150, "the whole batch, past the cap of 100");
    b.produce_batch(10).await;
    let mut other = b.consumer(500, BATCH).await;
    nothing_for(
        other.as_mut(),
        Duration::from_secs(2),
        "the window is over the cap",
    )
    .await;
    // Accepting 51 leaves 99 in flight: room for one record, so the whole next batch.
    accept(holder.as_mut(), &held[..51]).await;
    let next = first_records(other.as_mut(), Duration::from_secs(30)).await;
    assert_eq!(offsets(&next), (150..160).collect::<Vec<_>>());
    accept(other.as_mut(), &next).await;
    accept(holder.as_mut(), &held[51..]).await;
    close(other).await;
    close(holder).await;
}

/// The group of [`a_holder_at_the_cap_gets_more_only_when_the_window_start_moves`]:
/// Kafka's smallest `share.partition.max.record.locks`.
pub(crate) const HELD_CAP_GROUP: Group = Group {
    lock: Duration::from_secs(60),
    max_record_locks: Some(100),
};

/// Holds every record of `records` past the next poll without acknowledging it.
fn hold(c: &mut dyn ShareConsumer, records: &[ConsumerRecord]) {
    for r in records {
        c.hold_offset(r.topic(), r.partition(), r.offset())
            .expect("hold");
    }
}

/// The cap bounds the in-flight window (share-partition start offset to end offset), not
/// the records still locked (Kafka's `SharePartition.canAcquireRecords` and
/// `numInFlightRecords`): a consumer holding 100 records under a cap of 100 that accepts
/// 10 of them in the middle of the window gets nothing more on its next poll, as the
/// window did not shrink; accepting the first 10 moves the start offset and frees room for
/// 10, so its next poll gets the next batch of 10.
pub(crate) async fn a_holder_at_the_cap_gets_more_only_when_the_window_start_moves(
    b: &dyn Backend,
) {
    // 200 records in batches of 10: the cap falls on a batch boundary.
    for _ in 0..20 {
        b.produce_batch(10).await;
    }
    let mut holder = b.consumer(1000, BATCH).await;
    let held = first_records(holder.as_mut(), Duration::from_secs(30)).await;
    assert_eq!(
        offsets(&held),
        (0..100).collect::<Vec<_>>(),
        "up to the cap of 100, whole batches"
    );

    // Accepting 40..50 leaves the window 0..100: still at the cap.
    hold(holder.as_mut(), &held[..40]);
    hold(holder.as_mut(), &held[50..]);
    accept(holder.as_mut(), &held[40..50]).await;
    nothing_for(
        holder.as_mut(),
        Duration::from_secs(3),
        "records accepted in the middle of the window free no room",
    )
    .await;

    // Accepting 0..10 moves the start to 10: the window 10..100 has room for 10.
    let ack = |c: &mut dyn ShareConsumer, range: std::ops::Range<usize>, ack| {
        for r in &held[range] {
            c.acknowledge_offset(r.topic(), r.partition(), r.offset(), ack)
                .expect("acknowledge a held record");
        }
    };
    ack(holder.as_mut(), 0..10, AcknowledgeType::Accept);
    let results = holder
        .commit_sync(Duration::from_secs(10))
        .await
        .expect("commit");
    assert!(results.is_success(), "{results:?}");
    let next = first_records(holder.as_mut(), Duration::from_secs(30)).await;
    assert_eq!(
        offsets(&next),
        (100..110).collect::<Vec<_>>(),
        "room for 10 after the start moved: the next batch of 10"
    );

    ack(holder.as_mut(), 10..40, AcknowledgeType::Accept);
    ack(holder.as_mut(), 50..100, AcknowledgeType::Accept);
    accept(holder.as_mut(), &next).await;
    close(holder).await;
}

/// The group of [`acquisition_follows_the_acquire_mode`].
pub(crate) const MODE_GROUP: Group = Group {
    lock: Duration::from_secs(30),
    max_record_locks: None,
};

/// `batch_optimized` hands out whole batches (20 records produced together, in one poll of
/// a consumer with `max.poll.records=3`, none for a second consumer); `record_limit` at
/// most `max.poll.records` a poll, the rest of the batch staying available to others.
pub(crate) async fn acquisition_follows_the_acquire_mode(b: &dyn Backend) {
    b.produce_batch(20).await;
    let mut first = b.consumer(3, BATCH).await;
    let mut second = b.consumer(3, BATCH).await;
    let whole = first_records(first.as_mut(), Duration::from_secs(30)).await;
    assert_eq!(
        offsets(&whole),
        (0..20).collect::<Vec<_>>(),
        "the whole batch"
    );
    nothing_for(
        second.as_mut(),
        Duration::from_secs(2),
        "the batch went whole",
    )
    .await;
    accept(first.as_mut(), &whole).await;
    // No consumer in batch_optimized mode may be fetching when the next batch comes.
    close(first).await;
    close(second).await;

    let mut strict = b.consumer(3, RECORD_LIMIT).await;
    let mut peer = b.consumer(3, RECORD_LIMIT).await;
    b.produce_batch(20).await;
    let mine = first_records(strict.as_mut(), Duration::from_secs(30)).await;
    assert_eq!(
        mine.len(),
        3,
        "max.poll.records, strictly: {:?}",
        offsets(&mine)
    );
    let theirs = first_records(peer.as_mut(), Duration::from_secs(30)).await;
    assert!(
        !theirs.is_empty() && theirs.len() <= 3,
        "the rest of the batch is left to others: {:?}",
        offsets(&theirs)
    );
    assert!(
        theirs.iter().all(|r| !offsets(&mine).contains(&r.offset())),
        "no record twice"
    );
    accept(strict.as_mut(), &mine).await;
    accept(peer.as_mut(), &theirs).await;
    close(strict).await;
    close(peer).await;
}

/// The group of [`a_renewing_poll_fetches_nothing_new`].
pub(crate) const RENEW_GROUP: Group = Group {
    lock: Duration::from_secs(30),
    max_record_locks: None,
};

/// A poll that re-presents renewed records returns only those: new records wait for the
/// next poll.
pub(crate) async fn a_renewing_poll_fetches_nothing_new(b: &dyn Backend) {
    b.produce_batch(1).await;
    let mut c = b.consumer(500, BATCH).await;
    assert!(c.supports_renew(), "the backend takes RENEW");
    let first = first_records(c.as_mut(), Duration::from_secs(30)).await;
    assert_eq!(offsets(&first), [0]);
    b.produce_batch(2).await;
    c.acknowledge(&first[0], AcknowledgeType::Renew)
        .expect("renew");
    let renewed = c.poll(Duration::from_secs(5)).await.expect("poll");
    assert_eq!(offsets(&renewed), [0], "only the renewed record");
    assert_eq!(counts(&renewed), [1], "a renewal is no new delivery");
    accept(c.as_mut(), &renewed).await;
    let next = first_records(c.as_mut(), Duration::from_secs(30)).await;
    assert_eq!(offsets(&next), [1, 2], "the new records, on the next poll");
    accept(c.as_mut(), &next).await;
    close(c).await;
}

/// The group of [`a_new_consumer_gets_its_first_records_after_initialisation`].
pub(crate) const FIRST_GROUP: Group = Group {
    lock: Duration::from_secs(30),
    max_record_locks: None,
};

/// A new consumer's first records may take a while (a broker initialises the share
/// partition first); a consumer that polls until they come gets them all. Returns how long
/// they took from the first poll.
pub(crate) async fn a_new_consumer_gets_its_first_records_after_initialisation(
    b: &dyn Backend,
) -> Duration {
    b.produce_batch(3).await;
    let mut c = b.consumer(500, BATCH).await;
    let start = Instant::now();
    let records = first_records(c.as_mut(), Duration::from_secs(30)).await;
    let took = start.elapsed();
    assert_eq!(offsets(&records), [0, 1, 2]);
    accept(c.as_mut(), &records).await;
    close(c).await;
    took
}

/// The group of [`unsubscribe_releases_what_it_holds_and_subscribe_rejoins`]: a lock long
/// enough that a release by lock expiry cannot pass for one at once.
pub(crate) const UNSUBSCRIBE_GROUP: Group = Group {
    lock: Duration::from_secs(30),
    max_record_locks: None,
};

/// `unsubscribe` (as Java's) sends what was acknowledged, releases the rest at once, and
/// leaves: polls fail with `NotSubscribed` until `subscribe` rejoins, and an empty
/// `subscribe` means the same.
pub(crate) async fn unsubscribe_releases_what_it_holds_and_subscribe_rejoins(b: &dyn Backend) {
    use kafka_share_sink::ConsumerError;

    b.produce_batch(5).await;
    let mut leaver = b.consumer(500, BATCH).await;
    let topics = leaver.subscription();
    let held = first_records(leaver.as_mut(), Duration::from_secs(30)).await;
    assert_eq!(offsets(&held), [0, 1, 2, 3, 4]);
    leaver
        .acknowledge(&held[0], AcknowledgeType::Accept)
        .expect("acknowledge");
    let mut other = b.consumer(500, BATCH).await;
    let started = Instant::now();
    leaver.unsubscribe().await.expect("unsubscribe");
    assert!(leaver.subscription().is_empty());
    assert!(matches!(
        leaver.poll(Duration::ZERO).await,
        Err(ConsumerError::NotSubscribed)
    ));
    leaver
        .unsubscribe()
        .await
        .expect("a second unsubscribe does nothing");
    let again = first_records(other.as_mut(), UNSUBSCRIBE_GROUP.lock / 2).await;
    assert!(
        started.elapsed() < UNSUBSCRIBE_GROUP.lock,
        "released at once, not by the lock"
    );
    assert_eq!(
        offsets(&again),
        [1, 2, 3, 4],
        "the accepted record stays accepted"
    );
    assert_eq!(counts(&again), [2; 4]);
    accept(other.as_mut(), &again).await;

    leaver
        .subscribe(topics.clone())
        .await
        .expect("subscribe rejoins");
    b.produce_batch(1).await;
    let fresh = first_records(leaver.as_mut(), Duration::from_secs(30)).await;
    assert_eq!(
        offsets(&fresh),
        [5],
        "the member rejoined and fetches again"
    );
    accept(leaver.as_mut(), &fresh).await;
    leaver
        .subscribe(Vec::new())
        .await
        .expect("an empty subscribe unsubscribes");
    assert!(matches!(
        leaver.poll(Duration::ZERO).await,
        Err(ConsumerError::NotSubscribed)
    ));
    close(leaver).await;
    close(other).await;
}

/// The group of [`the_commit_callback_sees_every_outcome_once`].
pub(crate) const CALLBACK_GROUP: Group = Group {
    lock: Duration::from_secs(30),
    max_record_locks: None,
};

/// The acknowledgement commit callback (Java's `AcknowledgementCommitCallback`) gets every
/// acknowledgement's outcome once: of acknowledgements that rode on a fetch (without any
/// commit), of a `commit_sync`, and of `close`.
pub(crate) async fn the_commit_callback_sees_every_outcome_once(b: &dyn Backend) {
    use std::sync::{Arc, Mutex};

    let seen: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let mut c = b.consumer(500, BATCH).await;
    c.set_acknowledgement_commit_callback(Some(Box::new(move |results| {
        for (tp, result) in results.iter() {
            sink.lock().unwrap().push((tp.to_string(), result.is_ok()));
        }
    })))
    .expect("callbacks are supported");
    let count = || seen.lock().unwrap().len();

    b.produce_batch(3).await;
    let first = first_records(c.as_mut(), Duration::from_secs(30)).await;
    assert_eq!(offsets(&first), [0, 1, 2]);
    for r in &first {
        c.acknowledge(r, AcknowledgeType::Accept)
            .expect("acknowledge");
    }
    // No commit: the acknowledgements ride on the next fetches, and their outcome reaches
    // the callback from inside a later poll.
    let deadline = Instant::now() + Duration::from_secs(30);
    while count() == 0 {
        assert!(
            Instant::now() < deadline,
            "the ridden acknowledgement was never reported"
        );
        let records = c.poll(POLL).await.expect("poll");
        assert!(records.is_empty());
    }
    assert_eq!(count(), 1, "{:?}", seen.lock().unwrap());

    b.produce_batch(1).await;
    let second = first_records(c.as_mut(), Duration::from_secs(30)).await;
    assert_eq!(offsets(&second), [3]);
    c.acknowledge(&second[0], AcknowledgeType::Accept)
        .expect("acknowledge");
    let results = c
        .commit_sync(Duration::from_secs(10))
        .await
        .expect("commit");
    assert!(results.is_success(), "{results:?}");
    assert_eq!(
        count(),
        2,
        "the commit's outcome, once: {:?}",
        seen.lock().unwrap()
    );
    let again = c
        .commit_sync(Duration::from_secs(10))
        .await
        .expect("commit");
    assert!(again.is_empty());
    assert_eq!(count(), 2, "nothing new, nothing reported");

    b.produce_batch(1).await;
    let third = first_records(c.as_mut(), Duration::from_secs(30)).await;
    assert_eq!(offsets(&third), [4]);
    c.acknowledge(&third[0], AcknowledgeType::Accept)
        .expect("acknowledge");
    c.close(Duration::from_secs(10)).await.expect("close");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "close reports its outcome too: {seen:?}");
    assert!(seen.iter().all(|(_, ok)| *ok), "{seen:?}");
}
