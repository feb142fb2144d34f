//! Inclusive offset ranges, kept as ranges from the fetch answer to the acknowledgement.
//!
//! A ShareFetch answer hands out acquired offsets as ranges, and ShareAcknowledge takes
//! acknowledgement batches, which are ranges too. A range from the network may span the whole
//! offset space, so nothing here walks a range offset by offset, and arithmetic on its ends is
//! checked.

/// The offsets `first..=last`; never empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct OffsetRange {
    first: i64,
    last: i64,
}

impl OffsetRange {
    /// `first..=last`, or `None` when `first > last`.
    pub(crate) const fn new(first: i64, last: i64) -> Option<Self> {
        if first <= last {
            Some(Self { first, last })
        } else {
            None
        }
    }

    /// The first offset.
    pub(crate) const fn first(self) -> i64 {
        self.first
    }

    /// The last offset, inclusive.
    pub(crate) const fn last(self) -> i64 {
        self.last
    }

    /// How many offsets the range holds: `None` only for `i64::MIN..=i64::MAX`, whose 2^64
    /// offsets a `u64` cannot count.
    #[cfg_attr(
        not(test),
        allow(dead_code, reason = "for the acknowledgement path; tested here")
    )]
    pub(crate) const fn count(self) -> Option<u64> {
        self.last.abs_diff(self.first).checked_add(1)
    }

    /// Whether `offset` is in the range.
    pub(crate) const fn contains(self, offset: i64) -> bool {
        self.first <= offset && offset <= self.last
    }

    /// The offsets both ranges hold, if any.
    pub(crate) fn intersection(self, other: Self) -> Option<Self> {
        Self::new(self.first.max(other.first), self.last.min(other.last))
    }

    /// The offset right after the range: `None` when it ends at `i64::MAX`.
    pub(crate) const fn after(self) -> Option<i64> {
        self.last.checked_add(1)
    }
}

/// Appends `range` to `ranges`, which are sorted, disjoint and coalesced (no two touch), and
/// stay so: a range that overlaps or touches the last one is merged into it. `range` must not
/// start before the last range does (callers append in offset order).
pub(crate) fn push_coalesced(ranges: &mut Vec<OffsetRange>, range: OffsetRange) {
    if let Some(last) = ranges.last_mut() {
        debug_assert!(
            range.first >= last.first,
            "{range:?} appended after {last:?}"
        );
        // `last.after()` is `None` when the last range reaches i64::MAX: then `range` (which
        // starts at or after it) overlaps it.
        if last.after().is_none_or(|after| range.first <= after) {
            last.last = last.last.max(range.last);
            return;
        }
    }
    ranges.push(range);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(first: i64, last: i64) -> OffsetRange {
        OffsetRange::new(first, last).unwrap()
    }

    #[test]
    fn counting_is_checked_at_the_ends_of_the_offset_space() {
        assert_eq!(OffsetRange::new(3, 2), None);
        assert_eq!(r(5, 5).count(), Some(1));
        assert_eq!(r(0, i64::MAX).count(), Some(1 << 63));
        assert_eq!(r(i64::MIN, -1).count(), Some(1 << 63));
        assert_eq!(r(i64::MIN + 1, i64::MAX).count(), Some(u64::MAX));
        assert_eq!(r(i64::MIN, i64::MAX).count(), None);
        assert_eq!(r(0, i64::MAX).after(), None);
        assert_eq!(r(0, i64::MAX - 1).after(), Some(i64::MAX));
        assert!(r(0, i64::MAX).contains(i64::MAX) && !r(1, 2).contains(0));
    }

    #[test]
    fn intersections() {
        assert_eq!(r(0, 10).intersection(r(5, 20)), Some(r(5, 10)));
        assert_eq!(r(0, 10).intersection(r(10, 20)), Some(r(10, 10)));
        assert_eq!(r(0, 10).intersection(r(11, 20)), None);
        assert_eq!(
            r(0, i64::MAX).intersection(r(i64::MAX, i64::MAX)),
            Some(r(i64::MAX, i64::MAX))
        );
    }

    #[test]
    fn appending_coalesces_touching_and_overlapping_ranges() {
        let mut ranges = Vec::new();
        push_coalesced(&mut ranges, r(0, 0));
        push_coalesced(&mut ranges, r(1, 3)); // touches
        push_coalesced(&mut ranges, r(2, 2)); // inside
        push_coalesced(&mut ranges, r(5, 6)); // apart
        push_coalesced(&mut ranges, r(6, 9)); // overlaps
        assert_eq!(ranges, vec![r(0, 3), r(5, 9)]);
        push_coalesced(&mut ranges, r(i64::MAX - 1, i64::MAX));
        push_coalesced(&mut ranges, r(i64::MAX, i64::MAX)); // after a range ending at MAX
        assert_eq!(ranges, vec![r(0, 3), r(5, 9), r(i64::MAX - 1, i64::MAX)]);
        let mut whole = vec![r(i64::MIN, 0)];
        push_coalesced(&mut whole, r(1, i64::MAX));
        assert_eq!(whole, vec![r(i64::MIN, i64::MAX)]);
        assert_eq!(whole[0].count(), None);
    }
}
