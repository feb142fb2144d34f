//! [`ClaimIndex`]: the committed claims read from the ledger, per source partition.

use std::collections::{BTreeMap, HashMap};

use crate::record::TopicPartition;

/// Claimed offsets per source partition, as disjoint inclusive ranges keyed by first offset.
#[derive(Debug, Default)]
pub(crate) struct ClaimIndex {
    partitions: HashMap<TopicPartition, BTreeMap<i64, i64>>,
}

impl ClaimIndex {
    /// Records a claimed range, merging it with overlapping or adjacent ones.
    pub(crate) fn insert(&mut self, tp: TopicPartition, first: i64, last: i64) {
        if last < first {
            return;
        }
        let ranges = self.partitions.entry(tp).or_default();
        let (mut first, mut last) = (first, last);
        // The range starting at or before `first` may overlap or touch it.
        if let Some((&f, &l)) = ranges.range(..=first).next_back() {
            if l.saturating_add(1) >= first {
                first = f;
                last = last.max(l);
            }
        }
        // Ranges starting inside (or just after) the new one are swallowed.
        let swallowed: Vec<i64> = ranges
            .range(first..=last.saturating_add(1))
            .map(|(&f, _)| f)
            .collect();
        for f in swallowed {
            if let Some(l) = ranges.remove(&f) {
                last = last.max(l);
            }
        }
        ranges.insert(first, last);
    }

    /// Whether `offset` of `tp` is claimed.
    pub(crate) fn contains(&self, tp: &TopicPartition, offset: i64) -> bool {
        self.partitions
            .get(tp)
            .and_then(|r| r.range(..=offset).next_back())
            .is_some_and(|(_, &last)| offset <= last)
    }

    /// Forgets claims below `start` (the share-partition start offset: records below it are
    /// settled and never delivered again).
    pub(crate) fn prune_below(&mut self, tp: &TopicPartition, start: i64) {
        let Some(ranges) = self.partitions.get_mut(tp) else {
            return;
        };
        let below: Vec<i64> = ranges.range(..start).map(|(&f, _)| f).collect();
        for f in below {
            if let Some(l) = ranges.remove(&f) {
                if l >= start {
                    ranges.insert(start, l);
                }
            }
        }
    }

    /// The number of ranges kept (for metrics and tests).
    pub(crate) fn ranges(&self) -> usize {
        self.partitions.values().map(BTreeMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp() -> TopicPartition {
        TopicPartition::new("t", 0)
    }

    #[test]
    fn ranges_merge_and_lookups_hit_only_claimed_offsets() {
        let mut index = ClaimIndex::default();
        index.insert(tp(), 10, 19);
        index.insert(tp(), 30, 39);
        index.insert(tp(), 20, 25);
        assert_eq!(index.ranges(), 2);
        index.insert(tp(), 26, 29);
        assert_eq!(index.ranges(), 1);
        for o in 10..=39 {
            assert!(index.contains(&tp(), o), "{o}");
        }
        assert!(!index.contains(&tp(), 9));
        assert!(!index.contains(&tp(), 40));
        assert!(!index.contains(&TopicPartition::new("t", 1), 15));
        index.insert(tp(), 5, 50);
        assert_eq!(index.ranges(), 1);
        assert!(index.contains(&tp(), 5) && index.contains(&tp(), 50));
    }

    #[test]
    fn pruning_keeps_what_is_at_or_above_the_start() {
        let mut index = ClaimIndex::default();
        index.insert(tp(), 0, 9);
        index.insert(tp(), 20, 29);
        index.prune_below(&tp(), 25);
        assert!(!index.contains(&tp(), 5));
        assert!(!index.contains(&tp(), 24));
        assert!(index.contains(&tp(), 25) && index.contains(&tp(), 29));
        assert_eq!(index.ranges(), 1);
    }
}
