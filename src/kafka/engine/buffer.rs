//! Records fetched and not yet handed out, kept by the consumer: a poll takes them in one
//! step without an `.await`, so a cancelled poll leaves them for the next one.

use std::collections::VecDeque;

use tokio::time::Instant;

use crate::record::ConsumerRecord;

/// One ShareFetch answer's records, in order, with the moment they were acquired.
#[derive(Debug)]
struct Acquired {
    at: Instant,
    records: std::vec::IntoIter<ConsumerRecord>,
    /// How many records the answer brought (so `total - records.len()` were taken).
    total: usize,
    /// Positions in the answer's records, ascending, where a take ends without splitting
    /// one of the broker's acquired ranges (see
    /// [`Fetched::breaks`](super::responses::Fetched::breaks)); the answer's end is one too.
    breaks: Vec<usize>,
}

impl Acquired {
    /// One answer's `records`, acquired `at`, with `breaks` (ascending positions in
    /// `records`, none past its end); the end of `records` is added as a break if missing.
    fn new(at: Instant, records: Vec<ConsumerRecord>, mut breaks: Vec<usize>) -> Self {
        debug_assert!(
            breaks.windows(2).all(|w| w[0] < w[1]) && breaks.last() <= Some(&records.len()),
            "breaks ascend within the records"
        );
        if breaks.last() != Some(&records.len()) {
            breaks.push(records.len());
        }
        Self {
            at,
            total: records.len(),
            records: records.into_iter(),
            breaks,
        }
    }

    /// How many of this answer's remaining records a take of at most `max` of them can
    /// hand out ending on a break (0 when none is in reach).
    fn aligned_within(&self, max: usize) -> usize {
        let taken = self.total - self.records.len();
        let limit = taken.saturating_add(max);
        let i = self.breaks.partition_point(|&b| b <= limit);
        match i.checked_sub(1).map(|i| self.breaks[i]) {
            Some(b) if b > taken => (b - taken).min(max),
            _ => 0,
        }
    }
}

/// Records fetched and not yet polled, oldest acquisition first.
#[derive(Debug, Default)]
pub(crate) struct Buffer {
    chunks: VecDeque<Acquired>,
    len: usize,
}

impl Buffer {
    /// Appends the records of one answer, acquired `at`, whose takes best end at `breaks`
    /// (positions in `records`, ascending; the end of `records` always is one).
    pub(crate) fn push(&mut self, at: Instant, records: Vec<ConsumerRecord>, breaks: Vec<usize>) {
        if records.is_empty() {
            return;
        }
        self.len = self.len.saturating_add(records.len());
        self.chunks.push_back(Acquired::new(at, records, breaks));
    }

    /// When the oldest waiting record was acquired.
    pub(crate) fn oldest(&self) -> Option<Instant> {
        self.chunks.front().map(|c| c.at)
    }

    /// How many records wait.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many waiting records `f` says yes to.
    pub(crate) fn count(&self, f: impl Fn(&ConsumerRecord) -> bool) -> usize {
        self.chunks
            .iter()
            .flat_map(|c| c.records.as_slice())
            .filter(|r| f(r))
            .count()
    }

    /// Drops everything.
    pub(crate) fn clear(&mut self) {
        self.chunks.clear();
        self.len = 0;
    }

    /// How many records a take of at most `max` hands out: the most that end on a break (an
    /// acquired range handed out whole, see
    /// [`Fetched::breaks`](super::responses::Fetched::breaks)), if that is at least half of
    /// `max`; else `max` (a range larger than the take is split: better than polls far
    /// smaller than asked for). A take of at least what waits hands out all of it.
    fn aligned(&self, max: usize) -> usize {
        let n = max.min(self.len);
        let mut whole = 0;
        for chunk in &self.chunks {
            let left = chunk.records.len();
            if whole + left <= n {
                whole += left;
                continue;
            }
            whole += chunk.aligned_within(n - whole);
            break;
        }
        if whole.saturating_mul(2) >= n {
            whole
        } else {
            n
        }
    }

    /// Takes at most `max` records from the front, in order, ending where the broker's
    /// acquired ranges end when that costs at most half the take (see [`aligned`]).
    ///
    /// [`aligned`]: Self::aligned
    pub(crate) fn take(&mut self, max: usize) -> Vec<ConsumerRecord> {
        let n = self.aligned(max);
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let Some(front) = self.chunks.front_mut() else {
                break;
            };
            out.extend(front.records.by_ref().take(n - out.len()));
            if front.records.as_slice().is_empty() {
                self.chunks.pop_front();
            }
        }
        self.len -= out.len();
        out
    }

    /// Takes every record acquired at or before `cutoff`, except those `keep` says stay (in
    /// order, at the front, with their acquisition time).
    pub(crate) fn take_acquired_by(
        &mut self,
        cutoff: Instant,
        keep: impl Fn(&ConsumerRecord) -> bool,
    ) -> Vec<ConsumerRecord> {
        let mut out = Vec::new();
        let mut kept = Vec::new();
        while self.chunks.front().is_some_and(|c| c.at <= cutoff) {
            if let Some(chunk) = self.chunks.pop_front() {
                let (stay, go): (Vec<_>, Vec<_>) = chunk.records.partition(|r| keep(r));
                out.extend(go);
                if !stay.is_empty() {
                    // Where its ranges end is not kept: only the end of what stays is a break.
                    let end = stay.len();
                    kept.push(Acquired::new(chunk.at, stay, vec![end]));
                }
            }
        }
        for chunk in kept.into_iter().rev() {
            self.chunks.push_front(chunk);
        }
        self.len -= out.len();
        out
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn records(offsets: std::ops::Range<i64>) -> Vec<ConsumerRecord> {
        offsets.map(|o| ConsumerRecord::new("t", 0, o)).collect()
    }

    /// Breaks after every record: takes as if acquired ranges did not matter.
    fn singles(n: usize) -> Vec<usize> {
        (1..=n).collect()
    }

    fn offsets(records: &[ConsumerRecord]) -> Vec<i64> {
        records.iter().map(ConsumerRecord::offset).collect()
    }

    #[test]
    fn the_buffer_hands_out_in_order_across_answers_and_at_most_what_is_asked() {
        let t0 = Instant::now();
        let mut buffer = Buffer::default();
        buffer.push(t0, records(0..3), singles(3));
        buffer.push(t0, Vec::new(), Vec::new());
        buffer.push(t0 + Duration::from_secs(1), records(3..5), singles(2));
        assert_eq!(buffer.len(), 5);
        assert_eq!(buffer.oldest(), Some(t0));
        assert_eq!(buffer.count(|r| r.offset() % 2 == 0), 3);
        assert_eq!(offsets(&buffer.take(2)), [0, 1]);
        assert_eq!(buffer.count(|r| r.offset() % 2 == 0), 2);
        assert_eq!(
            buffer.oldest(),
            Some(t0),
            "the first answer's last record waits"
        );
        assert_eq!(offsets(&buffer.take(2)), [2, 3]);
        assert_eq!(buffer.len(), 1);
        assert_eq!(buffer.oldest(), Some(t0 + Duration::from_secs(1)));
        assert_eq!(offsets(&buffer.take(usize::MAX)), [4]);
        assert!(buffer.is_empty());
        assert!(buffer.take(10).is_empty());
    }

    #[test]
    fn the_buffer_gives_up_what_was_acquired_by_a_moment() {
        let t0 = Instant::now();
        let mut buffer = Buffer::default();
        buffer.push(t0, records(0..3), singles(3));
        buffer.push(t0 + Duration::from_secs(1), records(3..5), singles(2));
        buffer.push(t0 + Duration::from_secs(2), records(5..6), singles(1));
        assert_eq!(buffer.take(1).len(), 1);
        assert!(
            buffer
                .take_acquired_by(t0 - Duration::from_millis(1), |_| false)
                .is_empty()
        );
        assert_eq!(
            offsets(&buffer.take_acquired_by(t0 + Duration::from_secs(1), |_| false)),
            [1, 2, 3, 4]
        );
        assert_eq!(buffer.len(), 1);
        buffer.clear();
        assert!(buffer.is_empty());
    }

    #[test]
    fn records_the_buffer_is_told_to_keep_stay_first_in_line_with_their_acquisition() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let mut buffer = Buffer::default();
        buffer.push(t0, records(0..4), singles(4));
        buffer.push(t1, records(4..6), singles(2));
        buffer.push(t1 + Duration::from_secs(1), records(6..7), singles(1));
        let kept = [1, 2, 5];
        let taken = buffer.take_acquired_by(t1, |r| kept.contains(&r.offset()));
        assert_eq!(offsets(&taken), [0, 3, 4]);
        assert_eq!(buffer.len(), 4);
        assert_eq!(buffer.oldest(), Some(t0));
        assert_eq!(offsets(&buffer.take(usize::MAX)), [1, 2, 5, 6]);
    }

    #[test]
    fn a_take_ends_where_an_acquired_range_ends_when_that_costs_at_most_half() {
        let t0 = Instant::now();
        let mut buffer = Buffer::default();
        // Ranges 0..=4, 5..=8, 9..=11 in one answer; 12..=19 in the next.
        buffer.push(t0, records(0..12), vec![5, 9, 12]);
        buffer.push(t0, records(12..20), vec![8]);
        assert_eq!(offsets(&buffer.take(8)), [0, 1, 2, 3, 4], "5 of 8, not 8");
        assert_eq!(
            offsets(&buffer.take(8)),
            [5, 6, 7, 8, 9, 10, 11],
            "to the answer's end"
        );
        assert_eq!(
            offsets(&buffer.take(3)),
            [12, 13, 14],
            "a range larger than the take is split"
        );
        assert_eq!(offsets(&buffer.take(100)), (15..20).collect::<Vec<_>>());
        // A whole range shorter than half the take does not make the poll small.
        buffer.push(t0, records(20..22), vec![2]);
        buffer.push(t0, records(22..40), vec![18]);
        assert_eq!(buffer.take(10).len(), 10);
        // Fewer than half of `max` in reach, and less than `max` waiting: the first range.
        buffer.clear();
        buffer.push(t0, records(0..6), vec![3, 6]);
        assert_eq!(offsets(&buffer.take(5)), [0, 1, 2]);
        assert_eq!(offsets(&buffer.take(5)), [3, 4, 5]);
    }

    proptest::proptest! {
        /// With the broker's ranges at most a quarter of a poll (what
        /// [`batch_size`](super::super::sizing::batch_size) asks for when log batches are that
        /// narrow), however answers and their ranges fall, every take ends on a range's end
        /// and, while a poll's worth waits, hands out more than three quarters of a poll.
        #[test]
        fn ranges_of_a_quarter_of_a_poll_are_never_split_and_fill_three_quarters(
            max in 4usize..600,
            answers in proptest::collection::vec(
                proptest::collection::vec(1usize..=1000, 1..12),
                1..12,
            ),
        ) {
            let share = max / super::super::sizing::RANGES_PER_POLL;
            let t0 = Instant::now();
            let mut buffer = Buffer::default();
            let mut ends = std::collections::BTreeSet::new();
            let mut next: i64 = 0;
            for pieces in answers {
                let first = next;
                let mut breaks = Vec::new();
                let mut at = 0usize;
                for piece in pieces {
                    // Each range 1..=share records long.
                    let len = 1 + piece % share;
                    at += len;
                    breaks.push(at);
                    next += i64::try_from(len).unwrap();
                    ends.insert(next);
                }
                buffer.push(t0, records(first..next), breaks);
            }
            while !buffer.is_empty() {
                let waiting = buffer.len();
                let taken = buffer.take(max);
                proptest::prop_assert!(!taken.is_empty() && taken.len() <= max);
                let end = taken.last().unwrap().offset() + 1;
                proptest::prop_assert!(ends.contains(&end), "a take split a range: it ends before {end}");
                if waiting >= max {
                    proptest::prop_assert!(
                        taken.len() > max - share,
                        "{} of {max} taken with {waiting} waiting",
                        taken.len()
                    );
                }
            }
        }
    }
}
