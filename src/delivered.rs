//! [`Delivered`]: the records put since the last commit, as
//! [`SinkTask::pre_commit`](crate::SinkTask::pre_commit) sees them.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use crate::record::{ConsumerRecord, RecordId, SinkRecord, TopicPartition};
use crate::topic_name::TopicName;

/// The records written by `put` since the last commit, by their original coordinates, in the
/// order they were put: what [`SinkTask::pre_commit`](crate::SinkTask::pre_commit) is asked
/// about.
///
/// Kept as runs of consecutive offsets of one partition (a poll brings runs), so it costs a
/// few dozen bytes per poll and partition rather than per record. Iterate the records with
/// [`iter`](Self::iter), the runs with [`ranges`](Self::ranges), or take Kafka Connect's view
/// (`preCommit`'s current offsets) with [`next_offsets`](Self::next_offsets).
///
/// ```
/// use kafka_share_sink::{Delivered, RecordId};
///
/// let delivered: Delivered = [
///     RecordId::new("orders", 0, 10),
///     RecordId::new("orders", 0, 11),
///     RecordId::new("orders", 1, 4),
/// ]
/// .into_iter()
/// .collect();
/// assert_eq!(delivered.len(), 3);
/// let ranges: Vec<_> = delivered
///     .ranges()
///     .map(|(tp, offsets)| (tp.to_string(), offsets))
///     .collect();
/// assert_eq!(ranges, [("orders-0".to_string(), 10..=11), ("orders-1".to_string(), 4..=4)]);
/// assert!(delivered.contains(&RecordId::new("orders", 0, 11)));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Delivered {
    runs: Vec<Run>,
    len: usize,
}

/// Offsets `first..=last` of one partition, put one after the other.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run {
    partition: TopicPartition,
    first: i64,
    last: i64,
}

impl Run {
    fn len(&self) -> usize {
        // `first <= last` always; the count of a run never exceeds the records pushed.
        usize::try_from(self.last.abs_diff(self.first))
            .unwrap_or(usize::MAX)
            .saturating_add(1)
    }

    fn holds(&self, id: &RecordId) -> bool {
        self.partition.partition() == id.partition()
            && (self.first..=self.last).contains(&id.offset())
            && self.partition.topic_name() == id.topic_name()
    }
}

impl Delivered {
    /// None delivered.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many records.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no record was delivered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds a record put after every one added before.
    pub fn push(&mut self, id: &RecordId) {
        self.len = self.len.saturating_add(1);
        self.push_run(id.topic_name(), id.partition(), id.offset(), id.offset());
    }

    /// [`push`](Self::push) of each polled record's coordinates, in order: one pass that
    /// keeps the current run in registers.
    pub(crate) fn extend_polled(&mut self, records: &[ConsumerRecord]) {
        let Some((first, rest)) = records.split_first() else {
            return;
        };
        let (mut topic, mut partition) = (first.topic_name(), first.partition());
        let (mut start, mut last) = (first.offset(), first.offset());
        for record in rest {
            let offset = record.offset();
            if last.checked_add(1) == Some(offset)
                && record.partition() == partition
                && record.topic_name() == topic
            {
                last = offset;
                continue;
            }
            self.push_run(topic, partition, start, last);
            (topic, partition) = (record.topic_name(), record.partition());
            (start, last) = (offset, offset);
        }
        self.push_run(topic, partition, start, last);
        self.len = self.len.saturating_add(records.len());
    }

    /// Adds the run `first..=last` (not counted in `len`), joining the last one when they meet.
    fn push_run(&mut self, topic: &TopicName, partition: i32, first: i64, last: i64) {
        if let Some(run) = self.runs.last_mut()
            && run.last.checked_add(1) == Some(first)
            && run.partition.partition() == partition
            && run.partition.topic_name() == topic
        {
            run.last = last;
            return;
        }
        self.runs.push(Run {
            partition: TopicPartition::new(topic, partition),
            first,
            last,
        });
    }

    /// The records, in the order they were put.
    pub fn iter(&self) -> impl Iterator<Item = RecordId> + '_ {
        self.runs.iter().flat_map(|run| {
            (run.first..=run.last).map(move |offset| {
                RecordId::new(
                    run.partition.topic_name(),
                    run.partition.partition(),
                    offset,
                )
            })
        })
    }

    /// The runs of consecutive offsets of one partition, in the order they were put. A
    /// partition appears once per run: records of a partition put apart (other partitions,
    /// or offsets another consumer of the share group took, in between) make several.
    pub fn ranges(&self) -> impl Iterator<Item = (&TopicPartition, RangeInclusive<i64>)> + '_ {
        self.runs
            .iter()
            .map(|run| (&run.partition, run.first..=run.last))
    }

    /// True if the record is among them.
    pub fn contains(&self, id: &RecordId) -> bool {
        self.runs.iter().any(|run| run.holds(id))
    }

    /// Per partition, one past the highest offset delivered: what Kafka Connect's `preCommit`
    /// receives as the current offsets. In a share group the records below it were not
    /// necessarily all delivered to this task: other members take some.
    pub fn next_offsets(&self) -> BTreeMap<TopicPartition, i64> {
        let mut next: BTreeMap<TopicPartition, i64> = BTreeMap::new();
        for run in &self.runs {
            let after = run.last.saturating_add(1);
            next.entry(run.partition.clone())
                .and_modify(|n| *n = (*n).max(after))
                .or_insert(after);
        }
        next
    }

    /// Moves every record of `other` after those here, leaving `other` empty.
    pub(crate) fn append(&mut self, other: &mut Delivered) {
        let mut runs = other.runs.drain(..);
        if let Some(first) = runs.next() {
            let partition = &first.partition;
            self.push_run(
                partition.topic_name(),
                partition.partition(),
                first.first,
                first.last,
            );
            self.runs.extend(runs);
        }
        self.len = self.len.saturating_add(other.len);
        other.len = 0;
    }

    /// Forgets every record, keeping the allocation.
    pub(crate) fn clear(&mut self) {
        self.runs.clear();
        self.len = 0;
    }

    /// Adds the original coordinates of a batch, in order.
    pub(crate) fn extend_from_batch(&mut self, batch: &[SinkRecord]) {
        for record in batch {
            self.push(record.original_id());
        }
    }

    /// Removes one record; returns its position in [`iter`](Self::iter)'s order before the
    /// removal, `None` if it is not there.
    pub(crate) fn remove(&mut self, id: &RecordId) -> Option<usize> {
        let mut before = 0usize;
        let at = self.runs.iter().position(|run| {
            if run.holds(id) {
                return true;
            }
            before = before.saturating_add(run.len());
            false
        })?;
        let run = &mut self.runs[at];
        let offset = id.offset();
        let index = before.saturating_add(usize::try_from(offset.abs_diff(run.first)).unwrap_or(0));
        match (offset == run.first, offset == run.last) {
            (true, true) => {
                self.runs.remove(at);
            }
            (true, false) => run.first = offset.saturating_add(1),
            (false, true) => run.last = offset.saturating_sub(1),
            (false, false) => {
                let tail = Run {
                    partition: run.partition.clone(),
                    first: offset.saturating_add(1),
                    last: run.last,
                };
                run.last = offset.saturating_sub(1);
                self.runs.insert(at.saturating_add(1), tail);
            }
        }
        self.len = self.len.saturating_sub(1);
        Some(index)
    }
}

/// Equal when they hold the same records in the same order, however their runs were split.
impl PartialEq for Delivered {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for Delivered {}

impl FromIterator<RecordId> for Delivered {
    fn from_iter<I: IntoIterator<Item = RecordId>>(ids: I) -> Self {
        let mut delivered = Self::new();
        delivered.extend(ids);
        delivered
    }
}

impl Extend<RecordId> for Delivered {
    fn extend<I: IntoIterator<Item = RecordId>>(&mut self, ids: I) {
        for id in ids {
            self.push(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(topic: &str, partition: i32, offset: i64) -> RecordId {
        RecordId::new(topic, partition, offset)
    }

    fn ids(d: &Delivered) -> Vec<(String, i32, i64)> {
        d.iter()
            .map(|r| (r.topic().to_owned(), r.partition(), r.offset()))
            .collect()
    }

    #[test]
    fn consecutive_offsets_of_one_partition_share_a_run_and_order_is_kept() {
        let pushed = [
            id("a", 0, 5),
            id("a", 0, 6),
            id("a", 1, 7),
            id("b", 1, 8),
            id("a", 0, 7),
            id("a", 0, 9),
        ];
        let d: Delivered = pushed.iter().cloned().collect();
        assert_eq!(d.len(), 6);
        assert_eq!(d.ranges().count(), 5, "{d:?}");
        assert_eq!(d.iter().collect::<Vec<_>>(), pushed);
        assert!(d.contains(&id("a", 0, 6)));
        assert!(!d.contains(&id("a", 0, 8)));
        assert!(!d.contains(&id("b", 0, 8)));
        assert_eq!(
            d.next_offsets(),
            BTreeMap::from([
                (TopicPartition::new("a", 0), 10),
                (TopicPartition::new("a", 1), 8),
                (TopicPartition::new("b", 1), 9),
            ])
        );
    }

    #[test]
    fn a_batch_adds_its_original_coordinates_not_the_transformed_ones() {
        let batch: Vec<SinkRecord> = (0..3)
            .map(|offset| SinkRecord::new("t", 0, offset).with_topic_partition("u", 2))
            .collect();
        let mut d: Delivered = [id("s", 0, 9)].into_iter().collect();
        d.extend_from_batch(&batch);
        assert_eq!(
            ids(&d),
            [
                ("s".into(), 0, 9),
                ("t".into(), 0, 0),
                ("t".into(), 0, 1),
                ("t".into(), 0, 2)
            ]
        );
        assert_eq!(d.ranges().count(), 2);
        let mut split: Delivered = [id("t", 0, 0), id("x", 0, 0), id("t", 0, 1)]
            .into_iter()
            .collect();
        split.remove(&id("x", 0, 0));
        assert_eq!(split.ranges().count(), 2);
        assert_eq!(
            split,
            [id("t", 0, 0), id("t", 0, 1)].into_iter().collect(),
            "the same records in the same order"
        );
    }

    #[test]
    fn polled_records_make_the_runs_their_ids_make() {
        let coordinates = [
            ("a", 0, 3),
            ("a", 0, 4),
            ("a", 1, 5),
            ("a", 0, 5),
            ("b", 0, 6),
            ("b", 0, 7),
        ];
        let records: Vec<ConsumerRecord> = coordinates
            .iter()
            .map(|&(t, p, o)| ConsumerRecord::new(t, p, o))
            .collect();
        let mut polled: Delivered = [id("a", 0, 2)].into_iter().collect();
        polled.extend_polled(&records);
        polled.extend_polled(&[]);
        let pushed: Delivered = std::iter::once(id("a", 0, 2))
            .chain(coordinates.iter().map(|&(t, p, o)| id(t, p, o)))
            .collect();
        assert_eq!(polled.len(), 7);
        assert_eq!(
            polled.ranges().collect::<Vec<_>>(),
            pushed.ranges().collect::<Vec<_>>()
        );
    }

    #[test]
    fn append_joins_the_runs_that_meet() {
        let mut d: Delivered = [id("t", 0, 0), id("t", 0, 1)].into_iter().collect();
        let mut more: Delivered = [id("t", 0, 2), id("t", 1, 0), id("t", 0, 3)]
            .into_iter()
            .collect();
        d.append(&mut more);
        assert!(more.is_empty() && more.ranges().count() == 0);
        assert_eq!(d.len(), 5);
        assert_eq!(d.ranges().count(), 3, "{d:?}");
        let expected: Delivered = [0, 1, 2]
            .map(|o| id("t", 0, o))
            .into_iter()
            .chain([id("t", 1, 0), id("t", 0, 3)])
            .collect();
        assert_eq!(d, expected);
        d.append(&mut Delivered::new());
        assert_eq!(d.len(), 5);
    }

    #[test]
    fn remove_splits_runs_and_reports_the_position() {
        let mut d: Delivered = (0..5)
            .map(|o| id("t", 0, o))
            .chain([id("t", 1, 0)])
            .collect();
        assert_eq!(d.remove(&id("t", 0, 2)), Some(2));
        assert_eq!(d.remove(&id("t", 0, 0)), Some(0));
        assert_eq!(d.remove(&id("t", 0, 4)), Some(2));
        assert_eq!(d.remove(&id("t", 1, 0)), Some(2));
        assert_eq!(d.remove(&id("t", 1, 0)), None);
        assert_eq!(d.len(), 2);
        assert_eq!(ids(&d), [("t".into(), 0, 1), ("t".into(), 0, 3)]);
        assert_eq!(d.remove(&id("t", 0, 1)), Some(0));
        assert_eq!(d.remove(&id("t", 0, 3)), Some(0));
        assert!(d.is_empty());
        assert_eq!(d, Delivered::new());
        assert_eq!(d.ranges().count(), 0);
    }
}
