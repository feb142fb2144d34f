//! How many records to acquire: the ShareFetch record limit sized to the sink.
//!
//! Acquisition locks start ticking when the broker answers a ShareFetch, and every record
//! acquired must be processed by the application and acknowledged before its lock expires.
//! The broker, on the other hand, works per ShareFetch and per acquired batch far more than
//! per byte: acquiring in larger units costs it less per record. This module decides the
//! trade-off, with no I/O and no clock of its own:
//!
//! - [`SinkPace`] keeps an estimate of how long the application takes per record, from the
//!   time between a poll handing records out and the next poll (the consumer measures it).
//!   It follows a slower sink at once and a faster one gradually.
//! - [`Sizing::budget`] is how many records this member may hold acquired at once (waiting
//!   to be polled plus being processed): as many as the sink finishes in
//!   [`LOCK_SHARE`] of the lock, never fewer than `max.poll.records` (what Java
//!   acquires), never more than this member's fair share of the broker's in-flight limit
//!   ([`fair_share`]), and never more than fit in [`Sizing::max_bytes`] at the size records
//!   have had ([`RecordBytes`]): a record is a slice of the ShareFetch answer it came in,
//!   which stays in memory until its last record is dropped, so the records held bound the
//!   memory held.
//! - [`fair_share`] splits each assigned partition's record locks
//!   (`share.partition.max.record.locks`, for all members together) evenly among the
//!   members it is assigned to. The broker hands locks out first come, first served: a
//!   member that held all it could take (a fast sink's budget is thousands of records)
//!   would leave the other members of its partitions with nothing to process, so K tasks on
//!   P < K partitions would work like P. Held to its share, every member gets records, and a
//!   member alone on its partitions still takes all their locks.
//! - [`Sizing::acquire`] says whether to fetch now and how many records to ask for, so that
//!   the level never passes the budget. Fetching ahead starts only once the level is down to
//!   half the budget, so each acquisition is large (half the budget or more) instead of a
//!   trickle of small ones the size of what the application took since the last answer.
//!
//! With the budget kept, the last record of an acquisition is, by the estimate, processed
//! within a third of its lock; a record that still waits in the buffer for half its lock
//! (the sink slowed down more than twofold, or the application stopped polling) is released
//! rather than handed out ([`Sizing::stale_after`]), and acknowledgements with no fetch to
//! ride on go alone after at most [`Sizing::ack_linger`].

use std::time::Duration;

/// The share of the acquisition lock the budget may fill, as numerator and denominator: the
/// records held must be processable, at the measured pace, within a third of the lock. The
/// rest is margin: for a sink that slows down, for the acknowledgement to reach the broker,
/// and for the driver's own RENEW of a long `put` (at half the lock after the poll).
pub(crate) const LOCK_SHARE: (u32, u32) = (1, 3);

/// The weight of a new, faster sample in the pace estimate (a slower one replaces it).
const SPEED_UP_WEIGHT: f64 = 0.25;

/// How long the application takes per record, estimated from what it did between polls.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct SinkPace {
    /// Nanoseconds per record; `None` until the first sample.
    per_record_ns: Option<f64>,
    /// Polls of fewer records than this are no sample (see [`for_polls_of`](Self::for_polls_of)).
    min_records: usize,
}

impl SinkPace {
    /// A pace taken only from polls of at least half of `max_poll_records` records. Many
    /// sinks cost per batch as much as per record (a round trip, a transaction): a poll of a
    /// few leftover records takes as long as a full one, and its time per record would make
    /// the sink look many times slower than it is, shrinking every acquisition after it.
    pub(crate) fn for_polls_of(max_poll_records: usize) -> Self {
        Self {
            per_record_ns: None,
            min_records: max_poll_records.div_ceil(2),
        }
    }

    /// The application took `elapsed` for `records` records (from the poll that handed them
    /// out to the next poll). A slower pace is taken at once; a faster one moves the estimate
    /// a quarter of the way, so one quick batch does not make the next acquisition large.
    pub(crate) fn observe(&mut self, records: usize, elapsed: Duration) {
        if records == 0 || records < self.min_records {
            return;
        }
        // u128 -> f64 and usize -> f64 lose precision only far beyond any real value.
        #[allow(clippy::cast_precision_loss)]
        let sample = elapsed.as_nanos() as f64 / records as f64;
        self.per_record_ns = Some(match self.per_record_ns {
            Some(old) if sample < old => old + (sample - old) * SPEED_UP_WEIGHT,
            _ => sample,
        });
    }

    /// The estimated time per record, if anything was measured.
    pub(crate) fn per_record(&self) -> Option<Duration> {
        self.per_record_ns.map(|ns| {
            // Saturating: a NaN or negative value cannot arise, a huge one is capped.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let ns = ns.clamp(0.0, u64::MAX as f64) as u64;
            Duration::from_nanos(ns)
        })
    }
}

/// How many bytes of answer one record keeps in memory, estimated from the answers: the
/// record sets' bytes over the records acquired from them (so it counts batch headers, and
/// records of a batch that were not acquired, which stay in memory all the same). It
/// follows larger records at once and smaller ones gradually, so one answer of small records
/// does not let the next acquisition outgrow the byte bound.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct RecordBytes {
    per_record: Option<f64>,
}

impl RecordBytes {
    /// An answer brought `records` records in `bytes` bytes of record sets.
    pub(crate) fn observe(&mut self, records: usize, bytes: usize) {
        if records == 0 {
            return;
        }
        // usize -> f64 loses precision only far beyond any real answer.
        #[allow(clippy::cast_precision_loss)]
        let sample = bytes as f64 / records as f64;
        self.per_record = Some(match self.per_record {
            Some(old) if sample < old => old + (sample - old) * SPEED_UP_WEIGHT,
            _ => sample,
        });
    }

    /// The estimated bytes per record (at least 1), if an answer brought records.
    pub(crate) fn get(&self) -> Option<usize> {
        self.per_record.map(|b| {
            // Saturating: a NaN or negative value cannot arise, a huge one is capped.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let b = b.clamp(1.0, usize::MAX as f64).ceil() as usize;
            b.max(1)
        })
    }
}

/// The record locks one member may hold at once on the partitions it fetches: of each
/// partition's `locks` (the group's in-flight limit per partition), the share of one of the
/// members it is assigned to (`sharers`, one count per partition fetched; a count of 0, not
/// known, is taken as this member alone), at least one record per partition. With no
/// partition known yet, one partition's limit.
///
/// The shares of a partition's members add up to no more than its limit, so no member's
/// share is taken by another that holds to its own.
pub(crate) fn fair_share(locks: usize, sharers: impl IntoIterator<Item = usize>) -> usize {
    let locks = locks.max(1);
    let mut partitions = 0usize;
    let mut share = 0usize;
    for members in sharers {
        partitions += 1;
        share = share.saturating_add((locks / members.max(1)).max(1));
    }
    if partitions == 0 { locks } else { share }
}

/// The ShareFetch `BatchSize` that lets every poll of `max_poll_records` take the broker's
/// acquired ranges whole, given `widest_batch`, the most offsets one log batch of the
/// partitions fetched has spanned (0: none seen yet).
///
/// In `batch_optimized` mode the broker cuts what it acquires into ranges at log batch
/// starts, closing a range at the first batch start at least `BatchSize` offsets past the
/// range's first offset (`SharePartition.createBatches`), and keeps each range as one
/// in-flight batch. A range therefore spans from `BatchSize` to `BatchSize + widest - 1`
/// offsets. An acknowledgement that covers only part of a range turns the broker's state
/// for that batch into a state per offset, which costs it several times more per record for
/// every later acknowledgement of the batch (a RENEW, then an ACCEPT).
///
/// Ranges of at most a [`RANGES_PER_POLL`]th of a poll: then the longest run of whole
/// ranges that fits a poll falls short of it by less than one range (the next range would
/// fit otherwise), so every poll can end on a range's end and still be nearly full
/// ([`Buffer::take`](super::buffer::Buffer::take)). Ranges of nearly a whole poll, as Java
/// asks (`max.poll.records`), do not: a poll that starts inside one (after one range too
/// long, or an answer's short last range) splits the next one too, and so on — measured,
/// nearly every acknowledgement of the mirror row split a range. The price is polls a few
/// records short (462 of 500 on average on the bench's slow-sink row; 442 with ranges of
/// half a poll), which a sink that costs per `put`, whatever its size, pays in full.
/// Batches wider than that share make ranges of one batch each (`BatchSize` 1), which
/// still fit a poll; batches wider than a poll are split by every poll whatever the
/// ranges: then it asks for `max.poll.records`, as Java, for the fewest ranges.
pub(crate) fn batch_size(max_poll_records: usize, widest_batch: u64) -> usize {
    let max = max_poll_records.max(1);
    let share = (max / RANGES_PER_POLL).max(1);
    let widest = usize::try_from(widest_batch).unwrap_or(usize::MAX).max(1);
    if widest > max {
        max
    } else if widest > share {
        1
    } else {
        share - (widest - 1)
    }
}

/// How many acquired ranges a poll holds at least, once batches are narrow enough (see
/// [`batch_size`]): a poll of whole ranges is then at least `1 - 1/RANGES_PER_POLL` of
/// `max.poll.records`.
pub(crate) const RANGES_PER_POLL: usize = 4;

/// The widest batch to size the next `BatchSize` for, after an answer whose widest data
/// batch spanned `answer` offsets (0: none), when `previous` was the figure before: a wider
/// batch counts at once, and the figure halves with each answer of narrower batches, so one
/// wide batch (a compacted one, an unusual producer's, a hostile header) does not shrink
/// every later fetch's ranges.
pub(crate) fn widest_batch(previous: u64, answer: u64) -> u64 {
    if answer == 0 {
        previous
    } else {
        answer.max(previous / 2)
    }
}

/// The least `MaxBytes` a sized ShareFetch asks for.
pub(crate) const MIN_FETCH_BYTES: usize = 1 << 20;

/// The ShareFetch `MaxBytes` for a fetch of `records` records of about `per_record` bytes
/// each ([`RecordBytes`]) from a leader of `partitions` partitions: twice what the records
/// should take, for each partition, at least [`MIN_FETCH_BYTES`] and `min_bytes`
/// (`fetch.min.bytes`) per partition.
///
/// The broker reads each partition of a fetch from the log up to its share of `MaxBytes`
/// (an even share, Kafka's `PartitionMaxBytesStrategy`) and walks the batch headers of what
/// it read to acquire whole batches, whatever the record limit; with `fetch.max.bytes`
/// (50 MiB by default) it walks thousands of headers to acquire a few hundred records, on
/// every fetch and every retry of a fetch parked in its purgatory. Counting every partition
/// lets any one of them bring all the records; the margin keeps the records, not the bytes,
/// the limit of an answer. The broker counts each partition's bytes towards `fetch.min.bytes`
/// only up to that partition's share, so less than `min_bytes` per partition could leave a
/// waiting fetch unsatisfiable until its wait ends. The caller caps the result at
/// `fetch.max.bytes`. The broker still answers at least one batch, however large.
pub(crate) fn fetch_bytes(
    records: usize,
    per_record: usize,
    partitions: usize,
    min_bytes: i32,
) -> i32 {
    let partitions = partitions.max(1);
    let least = usize::try_from(min_bytes)
        .unwrap_or(0)
        .saturating_mul(partitions);
    let bytes = records
        .saturating_mul(per_record)
        .saturating_mul(2)
        .saturating_mul(partitions)
        .max(MIN_FETCH_BYTES)
        .max(least);
    i32::try_from(bytes).unwrap_or(i32::MAX)
}

/// The sizing rule's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sizing {
    /// `max.poll.records`: the least a budget is (Java's fixed acquisition) and the most a
    /// poll hands out.
    pub(crate) max_poll_records: usize,
    /// The setting [`max_record_locks`](crate::KafkaShareConsumerConfig::max_record_locks):
    /// the in-flight limit per partition assumed while the group's own
    /// (`share.partition.max.record.locks`, or the broker's
    /// `group.share.partition.max.record.locks`) is not known. The broker acquires at most
    /// that many records per partition at once, for all members together.
    pub(crate) max_record_locks: usize,
    /// The most bytes of answers the records held may keep in memory (see
    /// [`KafkaShareConsumerConfig::acquisition_max_bytes`](crate::KafkaShareConsumerConfig::acquisition_max_bytes)),
    /// except that two polls' worth (`max.poll.records` each) are always allowed.
    pub(crate) max_bytes: usize,
}

impl Sizing {
    /// How many records this member may hold acquired at once, given `share`, the record
    /// locks it may hold on the partitions it fetches ([`fair_share`]), with locks of
    /// `lock`, the sink's pace `per_record` (unknown: one poll's worth, as Java) and records
    /// of `record_bytes` bytes each (unknown: no byte bound yet; the first budget is one
    /// poll's worth anyway). A share smaller than one poll's worth still allows one poll's
    /// worth: the member then fetches only for a waiting poll, never ahead of it.
    pub(crate) fn budget(
        &self,
        lock: Duration,
        per_record: Option<Duration>,
        share: usize,
        record_bytes: Option<usize>,
    ) -> usize {
        let floor = self.max_poll_records.max(1);
        let cap = share.max(floor);
        let Some(per_record) = per_record else {
            return floor;
        };
        let (num, den) = LOCK_SHARE;
        let usable = lock.saturating_mul(num) / den;
        let per_record = per_record.as_nanos().max(1);
        let fits = usable.as_nanos() / per_record;
        // The byte bound leaves room for two polls' worth, as Java's consumer holds a batch
        // being processed and the next fetch: with less, a large max.poll.records could not
        // overlap fetching with the application and polls would come up short.
        let in_bytes = record_bytes
            .map_or(usize::MAX, |b| self.max_bytes / b.max(1))
            .max(floor.saturating_mul(2));
        usize::try_from(fits)
            .unwrap_or(usize::MAX)
            .min(in_bytes)
            .clamp(floor, cap)
    }

    /// Whether to acquire now, and at most how many records: `level` records are held
    /// (fetched and not yet polled, plus handed out and not yet acknowledged), `buffered` of
    /// them wait for a poll, and `poll_waits` says a poll found nothing and waits. A waiting
    /// poll always gets a fetch; otherwise a fetch runs ahead once the level is down to half
    /// the budget and there is room for at least one poll's worth, or once the next poll
    /// would come up short (fewer than `max.poll.records` wait) and the room can complete
    /// it. It asks for no more than the room left.
    pub(crate) fn acquire(
        &self,
        budget: usize,
        level: usize,
        buffered: usize,
        poll_waits: bool,
    ) -> Option<usize> {
        let floor = self.max_poll_records.max(1);
        let room = budget.saturating_sub(level);
        if poll_waits {
            return Some(room.max(floor));
        }
        let ahead = level <= budget / 2 && room >= floor;
        let short = floor.saturating_sub(buffered);
        let completes_next_poll = short > 0 && room >= short;
        (ahead || completes_next_poll).then_some(room)
    }

    /// A record that has waited this long since its acquisition without being polled is
    /// released instead of handed out: half the lock, by when the budget says it should
    /// long have been processed. Handed out later, a slow `put` could outlive its lock.
    pub(crate) fn stale_after(lock: Duration) -> Duration {
        lock / 2
    }

    /// Acknowledgements with no fetch to carry them are sent in a ShareAcknowledge of their
    /// own after at most this long: a tenth of the lock, at most a second, at least a
    /// millisecond.
    pub(crate) fn ack_linger(lock: Duration) -> Duration {
        (lock / 10).clamp(Duration::from_millis(1), Duration::from_secs(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZING: Sizing = Sizing {
        max_poll_records: 500,
        max_record_locks: 2000,
        max_bytes: usize::MAX,
    };
    const LOCK: Duration = Duration::from_secs(30);

    /// The share of a member alone on `partitions` partitions: all their locks.
    fn alone(partitions: usize) -> usize {
        fair_share(SIZING.max_record_locks, vec![1; partitions])
    }

    fn us(n: u64) -> Option<Duration> {
        Some(Duration::from_micros(n))
    }

    #[test]
    fn an_unknown_pace_acquires_one_poll_like_java() {
        assert_eq!(SIZING.budget(LOCK, None, alone(6), None), 500);
    }

    #[test]
    fn a_fast_sink_acquires_up_to_the_in_flight_limit_of_its_partitions() {
        // 1 µs a record: ten million would fit in 10 s; the broker allows 2000 per partition.
        assert_eq!(SIZING.budget(LOCK, us(1), alone(6), None), 12_000);
        assert_eq!(SIZING.budget(LOCK, us(1), alone(1), None), 2000);
        // No assignment known yet: one partition's worth.
        assert_eq!(SIZING.budget(LOCK, us(1), alone(0), None), 2000);
    }

    #[test]
    fn a_slow_sink_acquires_what_it_finishes_in_a_third_of_the_lock() {
        // 50 ms per batch of 500 = 100 µs a record; a 5 s lock: 1.67 s / 100 µs = 16,666.
        let lock = Duration::from_secs(5);
        assert_eq!(SIZING.budget(lock, us(100), alone(100), None), 16_666);
        // 1 ms a record: 1666 records in a third of 5 s.
        assert_eq!(SIZING.budget(lock, us(1000), alone(6), None), 1666);
        // Slower than a poll's worth per third of the lock: never below max.poll.records.
        assert_eq!(SIZING.budget(lock, us(100_000), alone(6), None), 500);
    }

    #[test]
    fn what_the_budget_allows_is_processed_within_a_third_of_the_lock() {
        let lock = Duration::from_secs(5);
        for per_record_us in [1, 7, 100, 333, 1000, 3333] {
            let per = Duration::from_micros(per_record_us);
            for partitions in [1, 6, 100] {
                let budget = SIZING.budget(lock, Some(per), alone(partitions), None);
                if budget > SIZING.max_poll_records {
                    let work = per * u32::try_from(budget).unwrap();
                    assert!(work <= lock / 3, "{per:?} x {budget} = {work:?}");
                }
            }
        }
    }

    #[test]
    fn a_budget_never_overflows() {
        let huge = Sizing {
            max_poll_records: usize::MAX,
            max_record_locks: usize::MAX,
            max_bytes: usize::MAX,
        };
        assert_eq!(
            huge.budget(Duration::MAX, Some(Duration::ZERO), usize::MAX, None),
            usize::MAX
        );
        assert_eq!(
            SIZING.budget(Duration::MAX, Some(Duration::ZERO), alone(6), None),
            12_000
        );
        assert_eq!(SIZING.budget(Duration::ZERO, us(1), alone(6), None), 500);
        assert_eq!(
            SIZING.budget(LOCK, Some(Duration::MAX), alone(6), None),
            500
        );
    }

    const MIB: usize = 1 << 20;

    #[test]
    fn the_byte_bound_caps_a_fast_sinks_budget_to_what_fits_in_it() {
        let bounded = Sizing {
            max_bytes: 4 * MIB,
            ..SIZING
        };
        // 1 KiB records plus batch overhead: 4 MiB hold 3855 of 1088 bytes, not 12,000.
        assert_eq!(bounded.budget(LOCK, us(1), alone(6), Some(1088)), 3855);
        // The bound is in bytes: records four times as large, a quarter as many (but at
        // least two polls' worth).
        assert_eq!(bounded.budget(LOCK, us(1), alone(6), Some(4 * 1088)), 1000);
        assert_eq!(bounded.budget(LOCK, us(1), alone(6), Some(64 * 1024)), 1000);
        // Tiny records: the broker's in-flight limit is the bound again.
        assert_eq!(bounded.budget(LOCK, us(1), alone(6), Some(10)), 12_000);
        // A slow sink is bounded by its lock first.
        let lock = Duration::from_secs(5);
        assert_eq!(bounded.budget(lock, us(1000), alone(6), Some(1088)), 1666);
        // Unknown size (no answer yet): the other bounds alone.
        assert_eq!(bounded.budget(LOCK, us(1), alone(6), None), 12_000);
        // A record size of 0 cannot divide by zero.
        assert_eq!(bounded.budget(LOCK, us(1), alone(6), Some(0)), 12_000);
    }

    #[test]
    fn what_the_budget_holds_stays_within_the_byte_bound_beyond_two_polls() {
        for max_bytes in [MIB, 4 * MIB, 64 * MIB] {
            let bounded = Sizing {
                max_bytes,
                ..SIZING
            };
            for bytes in [1, 100, 1088, 10_000, 1 << 20] {
                for partitions in [1, 6, 100] {
                    let budget = bounded.budget(LOCK, us(1), alone(partitions), Some(bytes));
                    let held = budget.saturating_mul(bytes);
                    assert!(
                        held <= max_bytes || budget <= 1000,
                        "{max_bytes} {bytes} {partitions}: {budget} records"
                    );
                    // Fetching ahead never takes the level past the budget, so the bytes
                    // held stay within the bound too.
                    for level in [0, budget / 2, budget] {
                        if let Some(n) = bounded.acquire(budget, level, level, false) {
                            assert!((level + n) * bytes <= max_bytes.max(1000 * bytes));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_record_size_follows_larger_records_at_once_and_smaller_ones_gradually() {
        let mut size = RecordBytes::default();
        assert_eq!(size.get(), None);
        size.observe(0, 1000);
        assert_eq!(size.get(), None, "no records, no sample");
        size.observe(1000, 1_088_000);
        assert_eq!(size.get(), Some(1088));
        size.observe(1000, 88_000);
        // A quarter of the way from 1088 to 88.
        assert_eq!(size.get(), Some(838));
        size.observe(10, 100_000);
        assert_eq!(size.get(), Some(10_000), "larger: at once");
        size.observe(1, 0);
        assert!(size.get().unwrap() >= 1);
        size.observe(1, usize::MAX);
        assert!(size.get().unwrap() > 1 << 60);
    }

    #[test]
    fn members_sharing_a_partition_split_its_locks() {
        // Alone: every lock of every partition.
        assert_eq!(fair_share(2000, [1, 1]), 4000);
        // Unknown counts (0) count as alone; no partition yet: one partition's worth.
        assert_eq!(fair_share(2000, [0]), 2000);
        assert_eq!(fair_share(2000, []), 2000);
        // 8 members on 2 partitions, 4 on each: 500 each, the 2000 of a partition split.
        assert_eq!(fair_share(2000, [4]), 500);
        // 2 processes x 8 members on the same 2 partitions.
        assert_eq!(fair_share(2000, [8]), 250);
        // Shared unevenly: each partition its own share.
        assert_eq!(fair_share(2000, [4, 1, 3]), 500 + 2000 + 666);
        // More members than locks: still one record per partition.
        assert_eq!(fair_share(100, [1000, 1000]), 2);
        assert_eq!(fair_share(0, [1]), 1);
        assert_eq!(fair_share(usize::MAX, [1, 1]), usize::MAX);
    }

    #[test]
    fn a_fast_sink_that_shares_its_partitions_holds_to_its_share() {
        // The scale-out row: put takes 10 ms per 500 records (20 µs a record), 1 KiB records,
        // a 30 s lock. Alone on 2 partitions, the byte bound (4 MiB) holds it.
        let sizing = Sizing {
            max_bytes: 4 * MIB,
            ..SIZING
        };
        let budget = |sharers: &[usize]| {
            sizing.budget(
                LOCK,
                us(20),
                fair_share(2000, sharers.iter().copied()),
                Some(1088),
            )
        };
        assert_eq!(budget(&[1, 1]), 3855);
        // 2 members, one partition each: the byte bound still.
        assert_eq!(budget(&[1]), 2000);
        // 4 members, 2 on each partition: 1000 each, so half of it can be fetched ahead of
        // a batch being processed.
        assert_eq!(budget(&[2]), 1000);
        assert_eq!(sizing.acquire(1000, 500, 0, false), Some(500));
        // 8 members, 4 on each: one poll's worth each, fetched when the poll comes.
        assert_eq!(budget(&[4]), 500);
        assert_eq!(sizing.acquire(500, 500, 0, false), None);
        assert_eq!(sizing.acquire(500, 0, 0, true), Some(500));
        // 16 members on 2 partitions: the share (250) is below a poll; one poll's worth is
        // still asked for by a waiting poll, and nothing ahead of it.
        assert_eq!(budget(&[8]), 500);
    }

    proptest::proptest! {
        /// However the group's members are spread over the partitions, the shares of a
        /// partition's members fit in its locks, and a member's budget never passes its
        /// share (or one poll's worth, if more), so no member holding its budget keeps
        /// another from holding its own — each starts with a poll's worth at least when the
        /// shares allow one.
        #[test]
        fn the_members_budgets_fit_in_the_locks_of_their_partitions(
            locks in 1usize..10_000,
            max_poll_records in 1usize..3000,
            assignment in proptest::collection::vec(
                proptest::collection::btree_set(0usize..6, 1..4), 1..40),
            per_record_ns in 1u64..10_000_000,
            record_bytes in proptest::option::of(1usize..100_000),
        ) {
            let sizing = Sizing { max_poll_records, max_record_locks: locks, max_bytes: 4 * MIB };
            let mut members = [0usize; 6];
            for partitions in &assignment {
                for p in partitions {
                    members[*p] += 1;
                }
            }
            let per = Some(Duration::from_nanos(per_record_ns));
            let mut held = [0usize; 6];
            for partitions in &assignment {
                let share = fair_share(locks, partitions.iter().map(|p| members[*p]));
                let budget = sizing.budget(LOCK, per, share, record_bytes);
                proptest::prop_assert!(budget <= share.max(max_poll_records));
                proptest::prop_assert!(budget >= max_poll_records);
                // Fetching ahead stays within the budget at every level.
                for level in [0, budget / 2, budget.saturating_sub(1), budget] {
                    if let Some(n) = sizing.acquire(budget, level, level, false) {
                        proptest::prop_assert!(level + n <= budget);
                    }
                }
                for p in partitions {
                    held[*p] += (locks / members[*p]).max(1);
                }
            }
            for p in 0..6 {
                if members[p] > 0 && members[p] <= locks {
                    proptest::prop_assert!(held[p] <= locks, "partition {}: {} of {}", p, held[p], locks);
                }
            }
        }
    }

    #[test]
    fn a_waiting_poll_always_gets_a_fetch() {
        assert_eq!(SIZING.acquire(12_000, 0, 0, true), Some(12_000));
        assert_eq!(SIZING.acquire(500, 0, 0, true), Some(500));
        // Even when the level says full (records in the application's hands, e.g. implicit
        // mode): at least one poll's worth.
        assert_eq!(SIZING.acquire(500, 500, 0, true), Some(500));
    }

    #[test]
    fn fetching_ahead_waits_for_half_the_budget_and_asks_for_the_room() {
        // A batch in the application, the buffer nearly full: nothing yet.
        assert_eq!(SIZING.acquire(12_000, 11_000, 10_500, false), None);
        assert_eq!(SIZING.acquire(12_000, 6001, 5501, false), None);
        // Down to half: refill to the budget in one acquisition.
        assert_eq!(SIZING.acquire(12_000, 6000, 5500, false), Some(6000));
        assert_eq!(SIZING.acquire(12_000, 500, 0, false), Some(11_500));
        // A budget of one poll never fetches ahead of a batch being processed.
        assert_eq!(SIZING.acquire(500, 500, 0, false), None);
        assert_eq!(SIZING.acquire(500, 0, 0, false), Some(500));
        // Room for less than a poll, and a full poll waits: wait.
        assert_eq!(SIZING.acquire(800, 400, 500, false), None);
    }

    #[test]
    fn the_level_never_passes_the_budget_by_fetching_ahead() {
        for budget in [500, 501, 999, 1000, 2000, 12_000] {
            for level in 0..=budget {
                for buffered in [0, 1, 250, 499, 500, level] {
                    let buffered = buffered.min(level);
                    if let Some(n) = SIZING.acquire(budget, level, buffered, false) {
                        assert!(level + n <= budget, "{budget} {level} {buffered} {n}");
                        // Enough for a poll's worth, counting what already waits.
                        assert!(buffered + n >= 500, "{budget} {level} {buffered} {n}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_short_next_poll_is_completed_ahead_of_time() {
        let large = Sizing {
            max_poll_records: 2000,
            ..SIZING
        };
        // Budget of about two polls: one batch with the application, 40 records waiting.
        // The level is above half the budget, but the next poll would get 40: fetch the room.
        assert_eq!(large.acquire(4040, 2040, 40, false), Some(2000));
        // A full poll waits: nothing to complete.
        assert_eq!(large.acquire(4040, 4040, 2040, false), None);
        // Half a poll waits and the room completes it: fetch.
        assert_eq!(large.acquire(4040, 3000, 1000, false), Some(1040));
        // The room cannot complete the next poll: wait for the application.
        assert_eq!(large.acquire(4040, 3500, 500, false), None);
        // The byte bound leaves two polls' worth even for large records.
        let bounded = Sizing {
            max_bytes: 4 * MIB,
            ..large
        };
        assert_eq!(bounded.budget(LOCK, us(1), alone(6), Some(4 * 1088)), 4000);
    }

    #[test]
    fn the_pace_follows_a_slower_sink_at_once_and_a_faster_one_gradually() {
        let mut pace = SinkPace::default();
        assert_eq!(pace.per_record(), None);
        pace.observe(0, Duration::from_secs(1));
        assert_eq!(pace.per_record(), None, "no records, no sample");
        let mut polls_of_500 = SinkPace::for_polls_of(500);
        polls_of_500.observe(2000 / 4, Duration::from_millis(50));
        // Ten leftover records in a put that costs 50 ms per batch: no sample (it would say
        // 5 ms per record, 200 times the pace of the full polls).
        polls_of_500.observe(10, Duration::from_millis(50));
        assert_eq!(polls_of_500.per_record(), us(100));
        polls_of_500.observe(250, Duration::from_millis(50));
        assert_eq!(
            polls_of_500.per_record(),
            us(200),
            "half a poll is a sample"
        );
        pace.observe(500, Duration::from_millis(50));
        assert_eq!(pace.per_record(), us(100));
        pace.observe(500, Duration::from_millis(5));
        // A quarter of the way from 100 µs to 10 µs.
        assert_eq!(pace.per_record(), Some(Duration::from_nanos(77_500)));
        pace.observe(500, Duration::from_millis(500));
        assert_eq!(pace.per_record(), us(1000), "slower: at once");
        for _ in 0..40 {
            pace.observe(500, Duration::from_micros(500));
        }
        assert!(pace.per_record().unwrap() < Duration::from_micros(2));
        pace.observe(1, Duration::MAX);
        assert!(pace.per_record().unwrap() > Duration::from_secs(1_000_000));
    }

    #[test]
    fn stale_records_and_lingering_acknowledgements_stay_well_inside_the_lock() {
        assert_eq!(Sizing::stale_after(LOCK), Duration::from_secs(15));
        assert_eq!(Sizing::ack_linger(LOCK), Duration::from_secs(1));
        assert_eq!(
            Sizing::ack_linger(Duration::from_secs(5)),
            Duration::from_millis(500)
        );
        assert_eq!(Sizing::ack_linger(Duration::ZERO), Duration::from_millis(1));
    }

    #[test]
    fn the_batch_size_keeps_an_acquired_range_within_a_quarter_of_a_poll() {
        assert_eq!(
            batch_size(500, 0),
            125,
            "nothing seen yet: a quarter of a poll"
        );
        assert_eq!(batch_size(500, 1), 125);
        assert_eq!(batch_size(500, 15), 111);
        assert_eq!(batch_size(500, 125), 1);
        assert_eq!(
            batch_size(500, 126),
            1,
            "one batch per range: still within a poll"
        );
        assert_eq!(batch_size(500, 500), 1);
        assert_eq!(
            batch_size(500, 501),
            500,
            "wider than a poll: split either way"
        );
        assert_eq!(batch_size(500, u64::MAX), 500);
        assert_eq!(batch_size(1, 15), 1);
        assert_eq!(batch_size(0, 15), 1);
        assert_eq!(batch_size(1, 1), 1);
        // The broker's cut: a range closes at the first batch start `batch_size` or more
        // past its first offset, so with batches of `widest` it spans at most
        // `batch_size + widest - 1`: at most a quarter of a poll when the batches allow it,
        // and always within a poll when a batch fits one.
        for max in [1usize, 2, 7, 100, 500, 1000] {
            let share = (max / RANGES_PER_POLL).max(1);
            for widest in 1u64..=1100 {
                let b = batch_size(max, widest);
                let w = usize::try_from(widest).unwrap();
                let longest = b + w - 1;
                if w <= share {
                    assert!(longest <= share, "max {max}, widest {widest}: {b}");
                } else if w <= max {
                    assert!(longest <= max, "max {max}, widest {widest}: {b}");
                }
                assert!((1..=max.max(1)).contains(&b));
            }
        }
    }

    #[test]
    fn one_wide_batch_fades_from_the_batch_size() {
        assert_eq!(widest_batch(0, 15), 15);
        assert_eq!(
            widest_batch(15, 0),
            15,
            "an answer without batches changes nothing"
        );
        assert_eq!(widest_batch(15, 400), 400, "wider: at once");
        let mut w = 400;
        let mut answers = 0;
        while w > 15 {
            w = widest_batch(w, 15);
            answers += 1;
        }
        assert_eq!(
            (w, answers),
            (15, 5),
            "halves per narrower answer, down to the answers'"
        );
    }

    #[test]
    fn a_sized_fetch_asks_for_twice_its_records_bytes_per_partition() {
        assert_eq!(fetch_bytes(500, 1100, 1, 1), 1_100_000);
        assert_eq!(fetch_bytes(500, 1100, 3, 1), 3_300_000);
        assert_eq!(
            fetch_bytes(500, 1100, 0, 1),
            1_100_000,
            "no partition known: one"
        );
        let least = i32::try_from(MIN_FETCH_BYTES).unwrap();
        assert_eq!(fetch_bytes(10, 100, 2, 1), least);
        assert_eq!(fetch_bytes(usize::MAX, 2, 1, 1), i32::MAX);
        // `fetch.min.bytes` per partition, so a waiting fetch can be satisfied.
        assert_eq!(fetch_bytes(10, 100, 2, 1_000_000), 2_000_000);
        assert_eq!(fetch_bytes(10, 100, 3, i32::MAX), i32::MAX);
        assert_eq!(
            fetch_bytes(10, 100, 2, -5),
            least,
            "a negative minimum is none"
        );
    }
}
