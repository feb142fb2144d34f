//! Records that arrive redelivered: put first, in small batches, each committed at once.
//!
//! A record that arrives with a delivery count above 1 failed an earlier delivery somewhere:
//! a `put` that failed, a lock that ran out, or a process that died while it held the record.
//! Only a failed `put` goes through the driver's [redelivery backoff](super::backoff); after a
//! crash the records simply arrive again, and in a crash loop (a record that brings the
//! process down, a target whose failure kills it) each restart used to spend a delivery of
//! the whole poll, so the group archived all of it at the limit. So when a poll brings such
//! records (except those this driver released itself after a failed `put`):
//!
//! - it puts the redelivered records first, the highest counts first, in batches of at most
//!   the poll's size halved per earlier delivery (half on the second delivery, a quarter on
//!   the third, ...), one by one on the last two deliveries the group allows, committing
//!   after each, so that when one of them brings the process down again the batches put
//!   before it are settled and only its own comes back (with the records not reached yet);
//! - records of an even delivery count go in the poll's order, of an odd count backwards, so a
//!   record that brings the process down does not keep the records behind it from being
//!   reached on the next delivery: in a crash loop on one bad record, that record alone
//!   reaches the delivery limit;
//! - then the records of the poll on their first delivery, in one batch.
//!
//! Nothing is polled while the queue drains, and records a Kafka consumer fetched ahead age
//! meanwhile: once a third of the lock has passed since the poll, what is left goes in one
//! batch.
//! The poll is not held back for a backoff first: nothing is polled while it waits, and a
//! Kafka consumer releases what it fetched ahead once that waited half its lock, so a hold
//! longer than that made the fetched-ahead records come back one delivery higher, to be held
//! in turn, until the group archived them.
//!
//! It applies to [`iteration`](super::ShareSinkTask::iteration) in explicit acknowledgement
//! mode with a consumer that holds and renews records (the exactly-once iteration settles a
//! poll in one transaction and does not split it); `redelivery.backoff.ms=0` turns it off
//! with the rest of the backoff.
//!
//! # Where a process can die
//!
//! Until its batch is put every record of the poll stays acquired and held, nothing about it
//! acknowledged: dead, the driver leaves the records to the group, which delivers them again
//! one delivery later, as it would have anyway. An iteration dropped during a `put` leaves
//! its batch to the next, which puts it again. [`run`](super::ShareSinkTask::run) takes a
//! shutdown only once the queue is drained; [`close`](super::ShareSinkTask::close) releases
//! what is still queued (a record on its last delivery is then archived by the group: counted
//! in `records_released_at_limit` and said at WARN). A driver that failed leaves the queue
//! to the consumer's close, which counts those records itself.

use std::collections::{HashSet, VecDeque};

use tokio::time::Instant;

use super::ShareSinkTask;
use super::dead_letter::GivenUp;
use crate::consumer::ShareConsumer;
use crate::error::Result;
use crate::record::{ConsumerRecord, RecordId, SinkRecord};

/// The most ids of records released after a failed `put` that are remembered; past it the
/// memory starts afresh (a forgotten record that comes back is only put first once more).
const RELEASED_MEMORY: usize = 100_000;

/// The share of the lock after which the rest of the queue goes in one batch.
const DRAIN_SHARE: u32 = 3;

/// A record of a poll waiting for its batch.
#[derive(Debug)]
struct QueuedRecord {
    sink: SinkRecord,
    /// The polled record, when the dead-letter queue needs its bytes.
    raw: Option<ConsumerRecord>,
    /// Its size, when `after.flush` bounds what waits for a flush.
    bytes: Option<u64>,
    /// Arrived redelivered (and not released by this driver after a failed `put`).
    redelivered: bool,
}

/// The rest of a poll that brought redelivered records.
#[derive(Debug, Default)]
pub(crate) struct RedeliveredArrivals {
    /// In put order: redelivered records (highest delivery count first), then the others.
    queue: VecDeque<QueuedRecord>,
    /// How many records the poll brought: the batches of redelivered records are fractions
    /// of it.
    poll_len: usize,
    /// The last delivery the group allows, when the poll was queued.
    last_delivery: u16,
    /// Past this, the rest of the queue goes in one batch.
    drain_by: Option<Instant>,
    /// The batch being put was taken from the queue and its `put` has not returned: an
    /// iteration dropped meanwhile leaves it to the next.
    in_flight: bool,
    /// The batch being put is of redelivered records.
    batch_redelivered: bool,
    /// A batch of redelivered records was put: commit at once.
    commit_requested: bool,
    /// Records this driver released after a failed `put` (they had their backoff).
    released: HashSet<RecordId>,
}

impl RedeliveredArrivals {
    /// Notes a record this driver released after a failed `put`.
    pub(crate) fn note_released(&mut self, id: &RecordId) {
        if self.released.len() >= RELEASED_MEMORY {
            self.released.clear();
        }
        self.released.insert(id.clone());
    }

    /// Whether records wait in the queue, or a batch taken from it has not been put yet.
    pub(crate) fn is_draining(&self) -> bool {
        !self.queue.is_empty() || self.in_flight
    }

    /// The `put` of the batch was dropped before it returned: the next iteration puts the
    /// batch again instead of taking a new one.
    pub(crate) fn put_again(&mut self) {
        self.in_flight = true;
    }

    /// The `put` of the batch returned (whatever its outcome).
    pub(crate) fn put_returned(&mut self) {
        self.in_flight = false;
    }

    /// The `put` of the batch succeeded: a batch of redelivered records asks for a commit.
    pub(crate) fn put_succeeded(&mut self) {
        self.commit_requested |= std::mem::take(&mut self.batch_redelivered);
    }

    /// Takes (and forgets) whether a put batch of redelivered records asks for a commit.
    pub(crate) fn take_commit_request(&mut self) -> bool {
        std::mem::take(&mut self.commit_requested)
    }

    /// Empties the queue (at close), with what the driver needs to release its records.
    pub(crate) fn clear_queue(&mut self) -> Vec<GivenUp> {
        self.commit_requested = false;
        self.batch_redelivered = false;
        self.in_flight = false;
        self.drain_by = None;
        self.queue
            .drain(..)
            .map(|q| GivenUp::from(&q.sink))
            .collect()
    }
}

/// How many records of a poll of `poll_len` a batch of records on their `delivery_count`-th
/// delivery holds, when the group allows `last_delivery` deliveries: half the poll on the
/// second delivery, halved again per delivery, at least one; one on the last two.
pub(crate) fn batch_len(poll_len: usize, delivery_count: u16, last_delivery: u16) -> usize {
    if delivery_count.saturating_add(1) >= last_delivery {
        return 1;
    }
    let halvings = u32::from(delivery_count.saturating_sub(1));
    poll_len.checked_shr(halvings).unwrap_or(0).max(1)
}

/// The put order of a poll: indexes of the redelivered records (`redelivered[i]`) by delivery
/// count, highest first, then the others in poll order. Redelivered records of an even count
/// keep the poll's order, those of an odd count take it backwards: a record that brought the
/// process down on one delivery is at the other end of the queue on the next, so it cannot
/// keep the records behind it from being put delivery after delivery.
fn put_order(counts: &[u16], redelivered: &[bool]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..counts.len()).collect();
    order.sort_by_key(|&i| {
        if redelivered[i] {
            let count = counts[i];
            let along = if count % 2 == 0 { i } else { counts.len() - i };
            (false, std::cmp::Reverse(count), along)
        } else {
            (true, std::cmp::Reverse(0), i)
        }
    });
    order
}

impl<C: ShareConsumer> ShareSinkTask<C> {
    /// After a poll (explicit mode): when the batch holds records that arrived redelivered,
    /// holds the whole poll and queues it in put order (see the module), and returns whether
    /// it did; the batch is then empty and the queue's first batch comes next.
    pub(super) fn queue_redelivered(&mut self) -> Result<bool> {
        if !self.batch.iter().any(|r| r.delivery_count() > 1) || !self.can_hold_for_redelivery() {
            return Ok(false);
        }
        let arrivals = &mut self.redelivered_arrivals;
        let redelivered: Vec<bool> = self
            .batch
            .iter()
            .map(|r| r.delivery_count() > 1 && !arrivals.released.remove(r.original_id()))
            .collect();
        let arrived = redelivered.iter().filter(|r| **r).count();
        if arrived == 0 {
            return Ok(false);
        }
        let counts: Vec<u16> = self.batch.iter().map(SinkRecord::delivery_count).collect();
        let highest = counts.iter().copied().max().unwrap_or(2);
        let last_delivery = self.last_delivery_limit();
        let drain_by = self
            .lock_duration()
            .checked_div(DRAIN_SHARE)
            .and_then(|share| self.batch_acquired.checked_add(share));
        let order = put_order(&counts, &redelivered);
        let n = self.batch.len();
        let mut sinks: Vec<Option<SinkRecord>> = self.batch.drain(..).map(Some).collect();
        let mut raws: Vec<Option<ConsumerRecord>> = self.raw.drain(..).map(Some).collect();
        let bytes = std::mem::take(&mut self.batch_bytes);
        self.batch_is_poll = false;
        self.batch_delivered.clear();
        let mut queue = VecDeque::with_capacity(n);
        for i in order {
            let Some(sink) = sinks.get_mut(i).and_then(Option::take) else {
                continue;
            };
            let id = sink.original_id();
            if !self.held.contains(id) {
                self.consumer
                    .hold_offset(id.topic(), id.partition(), id.offset())?;
                self.held.insert(id.clone(), self.batch_acquired);
            }
            queue.push_back(QueuedRecord {
                raw: raws.get_mut(i).and_then(Option::take),
                bytes: bytes.get(i).copied(),
                redelivered: redelivered[i],
                sink,
            });
        }
        tracing::info!(
            records = arrived,
            poll = n,
            delivery_count = highest,
            first_batch = batch_len(n, highest, last_delivery),
            "records arrived redelivered (an earlier delivery failed, or a process died holding \
             them): putting them first, in small batches committed one by one"
        );
        self.metrics.records_put_first += arrived as u64;
        let arrivals = &mut self.redelivered_arrivals;
        arrivals.queue = queue;
        arrivals.poll_len = n;
        arrivals.last_delivery = last_delivery;
        arrivals.drain_by = drain_by;
        Ok(true)
    }

    /// Makes the next queued batch the batch to put, if records are queued, and returns
    /// whether it did: the batch an iteration dropped during its `put` left, else the next
    /// redelivered records (as many as their delivery count allows, asking for a commit once
    /// put), or else (or once the queue has drained for a third of the lock) every record
    /// left. They stay held until the put settles them.
    pub(super) fn take_queued_batch(&mut self) -> bool {
        let now = Instant::now();
        let arrivals = &mut self.redelivered_arrivals;
        if arrivals.in_flight {
            // Still the batch: nothing else writes it before a put returns.
            return true;
        }
        let Some(first) = arrivals.queue.front() else {
            return false;
        };
        let late = arrivals.drain_by.is_some_and(|by| now >= by);
        let take = if first.redelivered && !late {
            let len = batch_len(
                arrivals.poll_len,
                first.sink.delivery_count(),
                arrivals.last_delivery,
            );
            arrivals
                .queue
                .iter()
                .take(len)
                .take_while(|q| q.redelivered)
                .count()
        } else {
            arrivals.queue.len()
        };
        arrivals.batch_redelivered = first.redelivered;
        arrivals.in_flight = true;
        self.batch.clear();
        self.raw.clear();
        self.batch_bytes.clear();
        self.batch_delivered.clear();
        self.batch_is_poll = false;
        // Their locks run from their acquisition or last renewal, not from now.
        let mut acquired = now;
        for queued in arrivals.queue.drain(..take) {
            if let Some(since) = self.held.since(queued.sink.original_id()) {
                acquired = acquired.min(since);
            }
            self.batch.push(queued.sink);
            if let Some(raw) = queued.raw {
                self.raw.push(raw);
            }
            if let Some(bytes) = queued.bytes {
                self.batch_bytes.push(bytes);
            }
        }
        self.batch_acquired = acquired;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_halve_per_earlier_delivery_and_are_single_on_the_last_two() {
        assert_eq!(batch_len(500, 2, 10), 250);
        assert_eq!(batch_len(500, 3, 10), 125);
        assert_eq!(batch_len(500, 5, 10), 31);
        assert_eq!(batch_len(500, 8, 10), 3);
        assert_eq!(batch_len(500, 9, 10), 1, "one before the last");
        assert_eq!(batch_len(500, 10, 10), 1, "the last");
        assert_eq!(batch_len(500, 3, 5), 125);
        assert_eq!(batch_len(500, 4, 5), 1);
        assert_eq!(batch_len(1, 2, 10), 1);
        assert_eq!(batch_len(0, 2, 10), 1);
        assert_eq!(batch_len(usize::MAX, u16::MAX, u16::MAX), 1);
        assert_eq!(
            batch_len(usize::MAX, 70, u16::MAX),
            1,
            "past the width of usize"
        );
        assert_eq!(batch_len(8, 1, 10), 8, "a first delivery is the whole poll");
        assert_eq!(batch_len(8, 0, 10), 8);
    }

    #[test]
    fn redelivered_records_go_first_highest_count_first_then_the_others_in_poll_order() {
        let counts = [1, 3, 2, 1, 3, 2, 4, 2];
        let redelivered = [false, true, true, false, true, false, true, true];
        // Index 5 arrived with count 2 but was released by this driver: not redelivered here.
        // Count 3 (odd) backwards: 4 before 1; count 2 (even) forwards: 2 before 7.
        assert_eq!(put_order(&counts, &redelivered), [6, 4, 1, 2, 7, 0, 3, 5]);
        assert_eq!(put_order(&[], &[]), Vec::<usize>::new());
    }

    /// Crash loop: `n` records, the one at `poison` brings the process down whenever it is
    /// put, the group allows `last` deliveries. Returns the records settled before the group
    /// archives what is left.
    fn crash_loop(n: usize, poison: usize, last: u16) -> Vec<usize> {
        let mut left: Vec<usize> = (0..n).collect();
        let mut settled = Vec::new();
        // The first delivery puts the whole poll, and dies.
        for count in 2..=last {
            let counts = vec![count; left.len()];
            let order = put_order(&counts, &vec![true; left.len()]);
            let queue: Vec<usize> = order.iter().map(|&i| left[i]).collect();
            let len = batch_len(left.len(), count, last);
            for chunk in queue.chunks(len) {
                if chunk.contains(&poison) {
                    break;
                }
                settled.extend_from_slice(chunk);
            }
            left.retain(|r| !settled.contains(r));
        }
        settled.sort_unstable();
        settled
    }

    #[test]
    fn in_a_crash_loop_only_the_record_that_crashes_reaches_the_limit() {
        for (n, last) in [(8, 5), (13, 3), (500, 5), (500, 10)] {
            for poison in 0..n {
                let expected: Vec<usize> = (0..n).filter(|r| *r != poison).collect();
                assert_eq!(
                    crash_loop(n, poison, last),
                    expected,
                    "{n} records, poison at {poison}, limit {last}"
                );
            }
        }
    }
}
