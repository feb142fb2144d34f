//! Client-side bookkeeping of the last poll: which records may be acknowledged, which are
//! acknowledged, and which acknowledgements are still to be sent. Shared by every
//! [`ShareConsumer`](super::ShareConsumer) implementation, free of I/O.

use super::{AcknowledgeType, AcknowledgementMode, ConsumerError};
use crate::kafka::error::ProtocolError;
use crate::record::{ConsumerRecord, RecordId, TopicPartition};
use crate::topic_name::TopicName;

#[derive(Debug, Clone, Copy)]
struct Entry {
    partition: u32,
    offset: i64,
    ack: Option<AcknowledgeType>,
    sent: bool,
    /// Kept past the next poll without a final acknowledgement (see `hold`).
    held: bool,
    /// The record's delivery count, saturated (a group allows at most 10).
    delivery: u8,
}

impl Entry {
    /// A final acknowledgement (ACCEPT, RELEASE, REJECT) went out: nothing more to do.
    fn settled(&self) -> bool {
        self.sent && matches!(self.ack, Some(a) if a != AcknowledgeType::Renew)
    }

    /// An ACCEPT, RELEASE or REJECT was given, sent or not.
    fn finally_acknowledged(&self) -> bool {
        matches!(self.ack, Some(a) if a != AcknowledgeType::Renew)
    }

    /// Still waiting for the application to acknowledge it before the next poll.
    fn awaiting_ack(&self) -> bool {
        self.ack.is_none() && !self.held
    }
}

/// Acknowledgements of one partition, ready to be sent, in offset order: runs of
/// consecutive offsets of one type (a poll accepted whole is one run per partition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartitionAcks {
    pub(crate) partition: TopicPartition,
    pub(crate) runs: Vec<AckRun>,
}

/// Consecutive offsets, `first..=last`, acknowledged with one type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AckRun {
    pub(crate) first: i64,
    pub(crate) last: i64,
    pub(crate) ack: AcknowledgeType,
}

impl PartitionAcks {
    /// The acknowledgements of `offsets` (in increasing order), in runs.
    #[cfg(test)]
    pub(crate) fn of(partition: TopicPartition, offsets: Vec<(i64, AcknowledgeType)>) -> Self {
        let mut acks = Self {
            partition,
            runs: Vec::new(),
        };
        for (offset, ack) in offsets {
            acks.push(offset, ack);
        }
        acks
    }

    /// Every acknowledged offset with its type, in order.
    #[cfg(any(test, feature = "exactly-once"))]
    pub(crate) fn offsets(&self) -> impl Iterator<Item = (i64, AcknowledgeType)> + '_ {
        self.runs
            .iter()
            .flat_map(|run| (run.first..=run.last).map(move |offset| (offset, run.ack)))
    }

    /// Adds `offset`, past every offset added before.
    #[cfg(test)]
    fn push(&mut self, offset: i64, ack: AcknowledgeType) {
        if let Some(run) = self.runs.last_mut()
            && run.ack == ack
            && run.last.checked_add(1) == Some(offset)
        {
            run.last = offset;
            return;
        }
        self.runs.push(AckRun {
            first: offset,
            last: offset,
            ack,
        });
    }
}

/// The records of the last poll and their acknowledgement state.
#[derive(Debug, Default)]
pub(crate) struct InFlightBatch {
    partitions: Vec<TopicPartition>,
    /// Sorted by (partition index, offset).
    entries: Vec<Entry>,
    unacknowledged: usize,
    /// Where the next lookup looks first: one past the entry the last one found.
    /// Acknowledgements mostly come in poll order, which is entry order, so this turns the
    /// search into one comparison. Only a hint: a miss falls back to the search.
    cursor: usize,
}

impl InFlightBatch {
    /// Replaces the batch with the records of a new poll. The previous batch must have had
    /// all its acknowledgements taken. Held records that are not settled stay; a new record
    /// with the coordinates of a held one (its lock expired and it was acquired again)
    /// replaces it.
    pub(crate) fn reset(&mut self, records: &[ConsumerRecord]) {
        let kept: Vec<(TopicPartition, Entry)> = self
            .entries
            .iter()
            .filter(|e| e.held && !e.settled())
            .map(|e| (self.partitions[e.partition as usize].clone(), *e))
            .collect();
        self.partitions.clear();
        self.entries.clear();
        self.entries.reserve(records.len() + kept.len());
        let any_kept = !kept.is_empty();
        for (tp, mut entry) in kept {
            entry.partition =
                partition_index_or_insert(&mut self.partitions, tp.topic_name(), tp.partition());
            self.entries.push(entry);
        }
        // Polls return runs of one partition: look the partition up once per run.
        let mut last: Option<(&TopicName, i32, u32)> = None;
        let mut sorted = true;
        let mut previous = self.entries.last().map(|e| (e.partition, e.offset));
        let Self {
            partitions,
            entries,
            ..
        } = self;
        entries.extend(records.iter().map(|record| {
            let (topic, p, offset) = (record.topic_name(), record.partition(), record.offset());
            let partition = match last {
                Some((last_topic, last_p, index)) if last_p == p && last_topic.same(topic) => index,
                _ => {
                    let index = partition_index_or_insert(partitions, topic, p);
                    last = Some((topic, p, index));
                    index
                }
            };
            if let Some(before) = previous {
                sorted &= before < (partition, offset);
            }
            previous = Some((partition, offset));
            Entry {
                partition,
                offset,
                ack: None,
                sent: false,
                held: false,
                delivery: u8::try_from(record.delivery_count()).unwrap_or(u8::MAX),
            }
        }));
        self.cursor = 0;
        if any_kept {
            // Stable, so a new entry sorts after the held one it replaces.
            self.entries.sort_by_key(|e| (e.partition, e.offset));
            self.entries.dedup_by(|later, earlier| {
                let same = (later.partition, later.offset) == (earlier.partition, earlier.offset);
                if same {
                    *earlier = *later;
                }
                same
            });
        } else if !sorted {
            self.entries
                .sort_unstable_by_key(|e| (e.partition, e.offset));
        }
        self.unacknowledged = if any_kept {
            self.entries.iter().filter(|e| e.awaiting_ack()).count()
        } else {
            // Every entry is new, none acknowledged.
            self.entries.len()
        };
    }

    fn partition_index(&self, topic: &str, partition: i32) -> Option<u32> {
        partition_index(&self.partitions, topic, partition)
    }

    /// Records an acknowledgement for one record of the batch.
    #[inline]
    pub(crate) fn acknowledge(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        ack: AcknowledgeType,
    ) -> Result<(), ConsumerError> {
        let Some(index) = self.index_of(topic, partition, offset) else {
            return Err(ConsumerError::NotInBatch {
                record: RecordId::new(topic, partition, offset),
            });
        };
        let entry = &mut self.entries[index];
        if entry.sent && entry.ack != Some(AcknowledgeType::Renew) {
            return Err(ConsumerError::AlreadyAcknowledged {
                record: RecordId::new(topic, partition, offset),
            });
        }
        if entry.awaiting_ack() {
            self.unacknowledged -= 1;
        }
        entry.ack = Some(ack);
        entry.sent = false;
        Ok(())
    }

    /// Acknowledges with `ack` every record that is not held and has no final
    /// acknowledgement (none, or a RENEW); returns how many.
    pub(crate) fn acknowledge_remaining(&mut self, ack: AcknowledgeType) -> usize {
        let mut count = 0;
        for entry in &mut self.entries {
            if entry.held || entry.ack.is_some_and(|a| a != AcknowledgeType::Renew) {
                continue;
            }
            if entry.ack.is_none() {
                self.unacknowledged -= 1;
            }
            entry.ack = Some(ack);
            entry.sent = false;
            count += 1;
        }
        count
    }

    /// Keeps a record past the next poll without a final acknowledgement: it no longer
    /// blocks the next poll, is not presented again after a RENEW, and can be acknowledged
    /// later by its coordinates. It stays until a final acknowledgement is sent for it, or
    /// until it is acquired again (its lock expired).
    pub(crate) fn hold(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<(), ConsumerError> {
        let Some(index) = self.index_of(topic, partition, offset) else {
            return Err(ConsumerError::NotInBatch {
                record: RecordId::new(topic, partition, offset),
            });
        };
        let entry = &mut self.entries[index];
        if entry.settled() {
            return Err(ConsumerError::AlreadyAcknowledged {
                record: RecordId::new(topic, partition, offset),
            });
        }
        if entry.awaiting_ack() {
            self.unacknowledged -= 1;
        }
        entry.held = true;
        Ok(())
    }

    #[inline]
    fn index_of(&mut self, topic: &str, partition: i32, offset: i64) -> Option<usize> {
        if let Some(e) = self.entries.get(self.cursor) {
            let tp = &self.partitions[e.partition as usize];
            if e.offset == offset && tp.partition() == partition && same_topic(tp.topic(), topic) {
                let index = self.cursor;
                self.cursor += 1;
                return Some(index);
            }
        }
        let index = self.partition_index(topic, partition).and_then(|p| {
            self.entries
                .binary_search_by_key(&(p, offset), |e| (e.partition, e.offset))
                .ok()
        })?;
        self.cursor = index + 1;
        Some(index)
    }

    /// Number of records with no acknowledgement yet.
    pub(crate) fn unacknowledged(&self) -> usize {
        self.unacknowledged
    }

    /// What explicit acknowledgement asks before the next poll: every record of the last one
    /// acknowledged (or held). Fails with [`ConsumerError::UnacknowledgedRecords`] otherwise.
    pub(crate) fn ensure_acknowledged(&self) -> Result<(), ConsumerError> {
        match self.first_unacknowledged() {
            None => Ok(()),
            Some(first) => Err(ConsumerError::UnacknowledgedRecords {
                count: self.unacknowledged(),
                first,
            }),
        }
    }

    /// The first record with no acknowledgement.
    pub(crate) fn first_unacknowledged(&self) -> Option<RecordId> {
        if self.unacknowledged == 0 {
            return None;
        }
        self.entries.iter().find(|e| e.awaiting_ack()).map(|e| {
            let tp = &self.partitions[e.partition as usize];
            RecordId::new(tp.topic_name().clone(), tp.partition(), e.offset)
        })
    }

    /// Takes the acknowledgements not yet sent, grouped by partition, and marks them sent.
    /// With `accept_unacknowledged` (implicit mode) records without one are accepted.
    pub(crate) fn take_unsent(&mut self, accept_unacknowledged: bool) -> Vec<PartitionAcks> {
        let Self {
            partitions,
            entries,
            unacknowledged,
            ..
        } = self;
        let mut out: Vec<PartitionAcks> = Vec::new();
        // The partition of `out`'s last entry.
        let mut out_partition: Option<u32> = None;
        let mut emit = |partition: u32, run: AckRun| {
            if out_partition != Some(partition) {
                out_partition = Some(partition);
                out.push(PartitionAcks {
                    partition: partitions[partition as usize].clone(),
                    runs: Vec::new(),
                });
            }
            if let Some(last) = out.last_mut() {
                last.runs.push(run);
            }
        };
        // The run being built, kept out of memory until it ends.
        let mut current: Option<(u32, AckRun)> = None;
        for entry in entries.iter_mut() {
            if entry.sent {
                continue;
            }
            let ack = match entry.ack {
                Some(ack) => ack,
                None if accept_unacknowledged => {
                    *unacknowledged -= 1;
                    entry.ack = Some(AcknowledgeType::Accept);
                    AcknowledgeType::Accept
                }
                None => continue,
            };
            entry.sent = true;
            match &mut current {
                Some((partition, run))
                    if *partition == entry.partition
                        && run.ack == ack
                        && run.last.checked_add(1) == Some(entry.offset) =>
                {
                    run.last = entry.offset;
                }
                _ => {
                    let next = AckRun {
                        first: entry.offset,
                        last: entry.offset,
                        ack,
                    };
                    if let Some((partition, run)) = current.replace((entry.partition, next)) {
                        emit(partition, run);
                    }
                }
            }
        }
        if let Some((partition, run)) = current {
            emit(partition, run);
        }
        out
    }

    /// The first acknowledgement not sent yet whose type `pick` picks.
    #[cfg(feature = "exactly-once")]
    pub(crate) fn first_unsent(
        &self,
        pick: impl Fn(AcknowledgeType) -> bool,
    ) -> Option<(RecordId, AcknowledgeType)> {
        self.entries.iter().find_map(|e| match e.ack {
            Some(ack) if !e.sent && pick(ack) => {
                let tp = &self.partitions[e.partition as usize];
                Some((
                    RecordId::new(tp.topic_name().clone(), tp.partition(), e.offset),
                    ack,
                ))
            }
            _ => None,
        })
    }

    /// The records whose last sent acknowledgement was RENEW and that are not held: they are
    /// still acquired and are presented again by the next poll, as in Java.
    pub(crate) fn renewed(&self) -> Vec<RecordId> {
        self.entries
            .iter()
            .filter(|e| e.sent && e.ack == Some(AcknowledgeType::Renew) && !e.held)
            .map(|e| {
                let tp = &self.partitions[e.partition as usize];
                RecordId::new(tp.topic_name().clone(), tp.partition(), e.offset)
            })
            .collect()
    }

    /// The partition of each held record that is not settled (one item per record): still
    /// with the application after [`clear_unheld`](Self::clear_unheld).
    pub(crate) fn held_partitions(&self) -> impl Iterator<Item = &TopicPartition> {
        self.entries
            .iter()
            .filter(|e| e.held && !e.settled())
            .map(|e| &self.partitions[e.partition as usize])
    }

    /// How many records of the batch, held ones included, have no final acknowledgement and
    /// are on delivery `limit` or later: what a close gives back to the group for it to
    /// archive (a group's limit is at most 10, far below the saturation of the count).
    pub(crate) fn unsettled_at(&self, limit: u16) -> usize {
        self.entries
            .iter()
            .filter(|e| !e.finally_acknowledged() && u16::from(e.delivery) >= limit)
            .count()
    }

    /// Forgets the batch except the held records that are not settled.
    pub(crate) fn clear_unheld(&mut self) {
        self.entries.retain(|e| e.held && !e.settled());
        self.unacknowledged = 0;
        self.cursor = 0;
    }

    /// Forgets the batch, held records included.
    pub(crate) fn clear(&mut self) {
        self.partitions.clear();
        self.entries.clear();
        self.unacknowledged = 0;
        self.cursor = 0;
    }
}

/// The index of a partition in `partitions`.
fn partition_index(partitions: &[TopicPartition], topic: &str, partition: i32) -> Option<u32> {
    // A poll spans few partitions; a linear scan beats hashing here.
    partitions
        .iter()
        .position(|tp| tp.partition() == partition && same_topic(tp.topic(), topic))
        .and_then(|i| u32::try_from(i).ok())
}

/// The index of a partition in `partitions`, added at the end if it is not there.
fn partition_index_or_insert(
    partitions: &mut Vec<TopicPartition>,
    topic: &TopicName,
    partition: i32,
) -> u32 {
    if let Some(i) = partition_index(partitions, topic, partition) {
        return i;
    }
    partitions.push(TopicPartition::new(topic.clone(), partition));
    u32::try_from(partitions.len() - 1).unwrap_or(u32::MAX)
}

/// Topic names compare equal; the same shared name is recognized without reading it.
fn same_topic(a: &str, b: &str) -> bool {
    std::ptr::eq(a, b) || a == b
}

/// `Err(Closed)` once the consumer is closed.
pub(crate) fn ensure_open(closed: bool) -> Result<(), ConsumerError> {
    if closed {
        Err(ConsumerError::Closed)
    } else {
        Ok(())
    }
}

/// What an acknowledgement by the application needs: an open consumer in explicit mode,
/// and for RENEW a group that takes it (`renew_refused` says why not when it does not).
pub(crate) fn check_acknowledgement(
    closed: bool,
    mode: AcknowledgementMode,
    ack: AcknowledgeType,
    renew_refused: impl FnOnce() -> Option<ProtocolError>,
) -> Result<(), ConsumerError> {
    ensure_open(closed)?;
    if mode == AcknowledgementMode::Implicit {
        return Err(ConsumerError::ImplicitAcknowledgement);
    }
    if ack == AcknowledgeType::Renew
        && let Some(refused) = renew_refused()
    {
        return Err(ConsumerError::Protocol(refused));
    }
    Ok(())
}

/// Writes, inside an `impl ShareConsumer for …`, the three methods by which the application
/// acknowledges the last poll's records, for a consumer that keeps them in an
/// [`InFlightBatch`] at `self.batch` and has `ensure_open()`, `implicit()` and
/// `check_acknowledgement(ack)` (an open consumer in explicit mode, and for RENEW a group
/// that takes it). Every consumer of this crate with its own batch checks them the same way.
macro_rules! acknowledgements_to_batch {
    () => {
        #[inline]
        fn acknowledge_offset(
            &mut self,
            topic: &str,
            partition: i32,
            offset: i64,
            ack: $crate::consumer::AcknowledgeType,
        ) -> Result<(), $crate::consumer::ConsumerError> {
            self.check_acknowledgement(ack)?;
            self.batch.acknowledge(topic, partition, offset, ack)
        }

        fn acknowledge_remaining(
            &mut self,
            ack: $crate::consumer::AcknowledgeType,
        ) -> Result<Option<usize>, $crate::consumer::ConsumerError> {
            self.check_acknowledgement(ack)?;
            Ok(Some(self.batch.acknowledge_remaining(ack)))
        }

        fn hold_offset(
            &mut self,
            topic: &str,
            partition: i32,
            offset: i64,
        ) -> Result<(), $crate::consumer::ConsumerError> {
            self.ensure_open()?;
            if self.implicit() {
                return Err($crate::consumer::ConsumerError::ImplicitAcknowledgement);
            }
            self.batch.hold(topic, partition, offset)
        }
    };
}
pub(crate) use acknowledgements_to_batch;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acknowledgement_needs_an_open_consumer_explicit_mode_and_renew_where_asked() {
        use AcknowledgementMode::{Explicit, Implicit};
        let refused = || {
            Some(ProtocolError::Unsupported {
                broker: "b".to_owned(),
                api: "ShareAcknowledge",
                wanted: "v2".to_owned(),
            })
        };
        let untouched = || -> Option<ProtocolError> { panic!("only RENEW asks") };
        assert!(matches!(
            check_acknowledgement(true, Explicit, AcknowledgeType::Accept, untouched),
            Err(ConsumerError::Closed)
        ));
        assert!(matches!(
            check_acknowledgement(false, Implicit, AcknowledgeType::Accept, untouched),
            Err(ConsumerError::ImplicitAcknowledgement)
        ));
        assert!(
            check_acknowledgement(false, Explicit, AcknowledgeType::Release, untouched).is_ok()
        );
        assert!(matches!(
            check_acknowledgement(false, Explicit, AcknowledgeType::Renew, refused),
            Err(ConsumerError::Protocol(ProtocolError::Unsupported { .. }))
        ));
        assert!(check_acknowledgement(false, Explicit, AcknowledgeType::Renew, || None).is_ok());
    }

    fn batch() -> InFlightBatch {
        let records = vec![
            ConsumerRecord::new("b", 0, 5),
            ConsumerRecord::new("a", 1, 7),
            ConsumerRecord::new("a", 1, 6),
        ];
        let mut batch = InFlightBatch::default();
        batch.reset(&records);
        batch
    }

    #[test]
    fn acks_group_by_partition_in_offset_order() {
        let mut b = batch();
        assert_eq!(b.unacknowledged(), 3);
        b.acknowledge("a", 1, 7, AcknowledgeType::Release).unwrap();
        b.acknowledge("a", 1, 6, AcknowledgeType::Accept).unwrap();
        assert_eq!(b.unacknowledged(), 1);
        assert_eq!(b.first_unacknowledged(), Some(RecordId::new("b", 0, 5)));
        let sent = b.take_unsent(false);
        assert_eq!(
            sent,
            vec![PartitionAcks::of(
                TopicPartition::new("a", 1),
                vec![(6, AcknowledgeType::Accept), (7, AcknowledgeType::Release)],
            )]
        );
        assert!(b.take_unsent(false).is_empty(), "acks are sent once");
    }

    #[test]
    fn unsent_acks_come_as_runs_per_partition_broken_by_gaps_and_types() {
        // Partition a-0: 0..=5, offset 3 rejected, 6 missing, 7..=8; b-0: 10..=11; a-1: 2.
        let coordinates = [
            ("a", 0, 0),
            ("a", 0, 1),
            ("a", 0, 2),
            ("a", 0, 3),
            ("a", 0, 4),
            ("a", 0, 5),
            ("a", 0, 7),
            ("a", 0, 8),
            ("b", 0, 10),
            ("b", 0, 11),
            ("a", 1, 2),
        ];
        let records: Vec<ConsumerRecord> = coordinates
            .iter()
            .map(|&(t, p, o)| ConsumerRecord::new(t, p, o))
            .collect();
        let mut b = InFlightBatch::default();
        b.reset(&records);
        b.acknowledge("a", 0, 3, AcknowledgeType::Reject).unwrap();
        b.acknowledge("b", 0, 11, AcknowledgeType::Release).unwrap();
        // Implicit mode accepts the rest.
        let sent = b.take_unsent(true);
        use AcknowledgeType::{Accept, Reject, Release};
        let expected = vec![
            PartitionAcks::of(
                TopicPartition::new("a", 0),
                vec![
                    (0, Accept),
                    (1, Accept),
                    (2, Accept),
                    (3, Reject),
                    (4, Accept),
                    (5, Accept),
                    (7, Accept),
                    (8, Accept),
                ],
            ),
            PartitionAcks::of(TopicPartition::new("a", 1), vec![(2, Accept)]),
            PartitionAcks::of(
                TopicPartition::new("b", 0),
                vec![(10, Accept), (11, Release)],
            ),
        ];
        let runs = |acks: &[PartitionAcks]| -> Vec<(String, Vec<AckRun>)> {
            let mut v: Vec<_> = acks
                .iter()
                .map(|p| (p.partition.to_string(), p.runs.clone()))
                .collect();
            v.sort_by(|x, y| x.0.cmp(&y.0));
            v
        };
        assert_eq!(runs(&sent), runs(&expected));
        assert_eq!(
            sent[0].runs.len() + sent[1].runs.len() + sent[2].runs.len(),
            7
        );
        assert_eq!(b.unacknowledged(), 0);
        assert!(b.take_unsent(true).is_empty());
    }

    #[test]
    fn lookups_in_and_out_of_poll_order_find_the_same_records() {
        let records: Vec<ConsumerRecord> = (0..4)
            .map(|o| ConsumerRecord::new("a", 0, o))
            .chain((0..3).map(|o| ConsumerRecord::new("b", 0, o)))
            .collect();
        let mut b = InFlightBatch::default();
        b.reset(&records);
        // In order, then a jump back, a jump forward, and a record of the other topic at the
        // position the last lookup points to.
        for (topic, offset) in [("a", 0), ("a", 1), ("a", 0), ("b", 1), ("a", 2), ("b", 2)] {
            b.acknowledge(topic, 0, offset, AcknowledgeType::Accept)
                .unwrap();
        }
        assert!(matches!(
            b.acknowledge("b", 0, 3, AcknowledgeType::Accept),
            Err(ConsumerError::NotInBatch { .. })
        ));
        assert_eq!(b.unacknowledged(), 2);
        assert_eq!(b.first_unacknowledged(), Some(RecordId::new("a", 0, 3)));
        b.acknowledge("a", 0, 3, AcknowledgeType::Release).unwrap();
        b.acknowledge("b", 0, 0, AcknowledgeType::Reject).unwrap();
        assert_eq!(b.first_unacknowledged(), None);
        let sent = b.take_unsent(false);
        assert_eq!(
            sent.iter()
                .map(|p| (p.partition.topic(), p.offsets().count()))
                .collect::<Vec<_>>(),
            vec![("a", 4), ("b", 3)]
        );
        assert_eq!(
            sent[0].offsets().nth(3),
            Some((3, AcknowledgeType::Release))
        );
        assert_eq!(sent[1].offsets().next(), Some((0, AcknowledgeType::Reject)));
        // Consecutive offsets of one type travel as one run.
        assert_eq!(
            sent[0].runs,
            vec![
                AckRun {
                    first: 0,
                    last: 2,
                    ack: AcknowledgeType::Accept
                },
                AckRun {
                    first: 3,
                    last: 3,
                    ack: AcknowledgeType::Release
                }
            ]
        );
    }

    #[test]
    fn unknown_record_and_double_ack_are_refused() {
        let mut b = batch();
        assert!(matches!(
            b.acknowledge("a", 1, 8, AcknowledgeType::Accept),
            Err(ConsumerError::NotInBatch { .. })
        ));
        b.acknowledge("b", 0, 5, AcknowledgeType::Accept).unwrap();
        // Replacing before sending is allowed.
        b.acknowledge("b", 0, 5, AcknowledgeType::Reject).unwrap();
        b.take_unsent(false);
        assert!(matches!(
            b.acknowledge("b", 0, 5, AcknowledgeType::Accept),
            Err(ConsumerError::AlreadyAcknowledged { .. })
        ));
    }

    #[test]
    fn renewed_records_can_be_acknowledged_again() {
        let mut b = batch();
        b.acknowledge("b", 0, 5, AcknowledgeType::Renew).unwrap();
        b.take_unsent(false);
        assert_eq!(b.renewed(), vec![RecordId::new("b", 0, 5)]);
        b.acknowledge("b", 0, 5, AcknowledgeType::Accept).unwrap();
        assert!(b.renewed().is_empty());
        assert_eq!(
            b.take_unsent(false)[0].offsets().collect::<Vec<_>>(),
            vec![(5, AcknowledgeType::Accept)]
        );
    }

    #[test]
    fn held_records_survive_polls_until_a_final_ack_is_sent() {
        let mut b = batch();
        b.hold("b", 0, 5).unwrap();
        b.acknowledge("a", 1, 6, AcknowledgeType::Accept).unwrap();
        assert_eq!(b.first_unacknowledged(), Some(RecordId::new("a", 1, 7)));
        b.hold("a", 1, 7).unwrap();
        assert_eq!(
            b.unacknowledged(),
            0,
            "held records do not block the next poll"
        );
        assert_eq!(
            b.take_unsent(false),
            vec![PartitionAcks::of(
                TopicPartition::new("a", 1),
                vec![(6, AcknowledgeType::Accept)],
            )],
            "held records send nothing until acknowledged"
        );
        b.clear_unheld();
        b.reset(&[ConsumerRecord::new("c", 0, 1)]);
        assert_eq!(b.unacknowledged(), 1);
        // A held record renewed stays held and is not presented again.
        b.acknowledge("b", 0, 5, AcknowledgeType::Renew).unwrap();
        b.acknowledge("c", 0, 1, AcknowledgeType::Accept).unwrap();
        assert_eq!(b.take_unsent(false).len(), 2);
        assert!(b.renewed().is_empty());
        b.reset(&[]);
        // Acknowledged later by coordinates, then gone after the ack is sent.
        b.acknowledge("b", 0, 5, AcknowledgeType::Accept).unwrap();
        b.acknowledge("a", 1, 7, AcknowledgeType::Release).unwrap();
        let mut sent: Vec<_> = b
            .take_unsent(false)
            .into_iter()
            .flat_map(|p| {
                p.offsets()
                    .map(|a| (p.partition.clone(), a))
                    .collect::<Vec<_>>()
            })
            .collect();
        sent.sort_by_key(|(tp, (offset, _))| (tp.clone(), *offset));
        assert_eq!(
            sent,
            vec![
                (TopicPartition::new("a", 1), (7, AcknowledgeType::Release)),
                (TopicPartition::new("b", 0), (5, AcknowledgeType::Accept))
            ]
        );
        b.reset(&[]);
        assert!(matches!(
            b.acknowledge("b", 0, 5, AcknowledgeType::Accept),
            Err(ConsumerError::NotInBatch { .. })
        ));
    }

    #[test]
    fn unsettled_records_at_the_limit_are_those_without_a_final_acknowledgement() {
        let at = |offset, count| ConsumerRecord::new("t", 0, offset).with_delivery_count(count);
        let mut b = InFlightBatch::default();
        b.reset(&[at(0, 3), at(1, 3), at(2, 2), at(3, 3), at(4, 300)]);
        assert_eq!(b.unsettled_at(3), 4, "nothing acknowledged yet");
        b.acknowledge("t", 0, 0, AcknowledgeType::Accept).unwrap();
        b.acknowledge("t", 0, 1, AcknowledgeType::Release).unwrap();
        b.acknowledge("t", 0, 3, AcknowledgeType::Renew).unwrap();
        b.hold("t", 0, 4).unwrap();
        assert_eq!(
            b.unsettled_at(3),
            2,
            "a renewed record and a held one (its count saturated) go back at close"
        );
        b.take_unsent(false);
        b.clear_unheld();
        assert_eq!(
            b.unsettled_at(3),
            1,
            "the held one stays with the application"
        );
        assert_eq!(b.unsettled_at(2), 1);
    }

    #[test]
    fn a_held_record_acquired_again_is_replaced_by_the_new_delivery() {
        let mut b = batch();
        b.hold("b", 0, 5).unwrap();
        b.acknowledge("a", 1, 6, AcknowledgeType::Accept).unwrap();
        b.acknowledge("a", 1, 7, AcknowledgeType::Accept).unwrap();
        b.take_unsent(false);
        b.reset(&[
            ConsumerRecord::new("b", 0, 5),
            ConsumerRecord::new("b", 0, 6),
        ]);
        assert_eq!(
            b.unacknowledged(),
            2,
            "the new delivery must be acknowledged again"
        );
        assert_eq!(b.first_unacknowledged(), Some(RecordId::new("b", 0, 5)));
    }

    #[test]
    fn acknowledging_the_rest_skips_held_and_settled_records_and_takes_renewed_ones() {
        let records: Vec<ConsumerRecord> = (0..5).map(|o| ConsumerRecord::new("a", 0, o)).collect();
        let mut b = InFlightBatch::default();
        b.reset(&records);
        b.acknowledge("a", 0, 0, AcknowledgeType::Release).unwrap();
        b.hold("a", 0, 1).unwrap();
        b.acknowledge("a", 0, 2, AcknowledgeType::Renew).unwrap();
        b.take_unsent(false);
        assert_eq!(b.unacknowledged(), 2, "3 and 4");
        // 2 was renewed (not final), 3 and 4 have nothing: all three are accepted; 0 keeps
        // its RELEASE, 1 stays held.
        assert_eq!(b.acknowledge_remaining(AcknowledgeType::Accept), 3);
        assert_eq!(b.unacknowledged(), 0);
        assert_eq!(b.first_unacknowledged(), None);
        let sent: Vec<_> = b
            .take_unsent(false)
            .iter()
            .flat_map(PartitionAcks::offsets)
            .collect();
        assert_eq!(
            sent,
            vec![
                (2, AcknowledgeType::Accept),
                (3, AcknowledgeType::Accept),
                (4, AcknowledgeType::Accept)
            ]
        );
        assert_eq!(
            b.acknowledge_remaining(AcknowledgeType::Accept),
            0,
            "nothing left"
        );
        // The held record is still acknowledged by its coordinates.
        b.acknowledge("a", 0, 1, AcknowledgeType::Accept).unwrap();
    }

    #[test]
    fn implicit_mode_accepts_everything_unacknowledged() {
        let mut b = batch();
        b.acknowledge("a", 1, 6, AcknowledgeType::Release).unwrap();
        let sent = b.take_unsent(true);
        let all: Vec<_> = sent.iter().flat_map(PartitionAcks::offsets).collect();
        assert_eq!(
            all,
            vec![
                (5, AcknowledgeType::Accept),
                (6, AcknowledgeType::Release),
                (7, AcknowledgeType::Accept)
            ]
        );
        assert_eq!(b.unacknowledged(), 0);
    }
}
