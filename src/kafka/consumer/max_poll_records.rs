//! `max.poll.records`: one value from the setting to the ShareFetch request.
//!
//! The setting is an `int` in Java (at least 1), the records a poll hands out are counted in
//! `usize` and the request's `MaxRecords` and `BatchSize` are INT32: this type holds the
//! value once, clamped to `1..=i32::MAX` where it is made, so that no conversion on the way
//! needs a fallback.

/// `max.poll.records`, between 1 and `i32::MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MaxPollRecords(i32);

impl MaxPollRecords {
    /// Java's default, 500.
    pub(crate) const DEFAULT: Self = Self(500);

    /// `records`, raised to 1 when below.
    pub(crate) fn new(records: i32) -> Self {
        Self(records.max(1))
    }

    /// As a count of records.
    pub(crate) fn get(self) -> usize {
        // At least 1 and at most i32::MAX: fits every usize this crate builds for.
        usize::try_from(self.0).map_or(usize::MAX, |n| n.max(1))
    }

    /// As the INT32 of the ShareFetch request (`MaxRecords`, `BatchSize`).
    pub(crate) fn wire(self) -> i32 {
        self.0
    }
}

impl Default for MaxPollRecords {
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_one_is_one_and_the_wire_value_is_the_count() {
        assert_eq!(MaxPollRecords::new(0).get(), 1);
        assert_eq!(MaxPollRecords::new(-7).wire(), 1);
        assert_eq!(MaxPollRecords::new(i32::MIN).get(), 1);
        let n = MaxPollRecords::new(1000);
        assert_eq!((n.get(), n.wire()), (1000, 1000));
        let max = MaxPollRecords::new(i32::MAX);
        assert_eq!(max.get(), usize::try_from(i32::MAX).unwrap());
        assert_eq!(max.wire(), i32::MAX);
        assert_eq!(MaxPollRecords::default().get(), 500);
    }
}
