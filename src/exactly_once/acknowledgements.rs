//! [`ShareAcknowledgements`]: acknowledgements of share-group records staged into a producer
//! transaction (KIP-1289) instead of being sent by the consumer.

use std::collections::BTreeMap;

use crate::consumer::AcknowledgeType;
use crate::record::TopicPartition;

/// Acknowledgements of a contiguous range of offsets of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcknowledgementBatch {
    first_offset: i64,
    last_offset: i64,
    types: Vec<AcknowledgeType>,
}

impl AcknowledgementBatch {
    /// The first offset of the range.
    pub fn first_offset(&self) -> i64 {
        self.first_offset
    }

    /// The last offset of the range (inclusive).
    pub fn last_offset(&self) -> i64 {
        self.last_offset
    }

    /// The acknowledgement of every offset of the range, in order.
    pub fn types(&self) -> &[AcknowledgeType] {
        &self.types
    }

    /// `(offset, type)` for every offset of the range.
    pub fn iter(&self) -> impl Iterator<Item = (i64, AcknowledgeType)> + '_ {
        // An inclusive range: an open one overflows past a range ending at i64::MAX.
        (self.first_offset..=self.last_offset).zip(self.types.iter().copied())
    }
}

/// Acknowledgements per partition, in offset order, to stage into a transaction with
/// [`Producer::send_share_acknowledgements`](crate::producer::Producer::send_share_acknowledgements).
///
/// Only [`AcknowledgeType::Accept`] and [`AcknowledgeType::Reject`] may be staged (KIP-1289
/// allows no RELEASE or RENEW inside a transaction); a consumer's
/// [`take_acknowledgements_for_transaction`](crate::ShareConsumer::take_acknowledgements_for_transaction)
/// hands them over instead of sending them itself.
///
/// ```
/// use kafka_share_sink::AcknowledgeType;
/// use kafka_share_sink::exactly_once::ShareAcknowledgements;
///
/// let mut acks = ShareAcknowledgements::new();
/// acks.add("orders", 0, 10, AcknowledgeType::Accept);
/// acks.add("orders", 0, 11, AcknowledgeType::Reject);
/// acks.add("orders", 0, 13, AcknowledgeType::Accept);
/// assert_eq!(acks.len(), 3);
/// let batches: Vec<_> = acks.iter().flat_map(|(_, b)| b).collect();
/// assert_eq!(batches.len(), 2); // 10..=11 and 13..=13
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShareAcknowledgements {
    partitions: BTreeMap<TopicPartition, Vec<AcknowledgementBatch>>,
    len: usize,
}

impl ShareAcknowledgements {
    /// No acknowledgements.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the acknowledgement of one offset. An offset following the last one added for its
    /// partition extends that range; any other starts a new one. Adding an offset twice keeps
    /// both: the broker refuses the set, as it would a consumer's.
    pub fn add(&mut self, topic: &str, partition: i32, offset: i64, ack: AcknowledgeType) {
        let batches = self
            .partitions
            .entry(TopicPartition::new(topic, partition))
            .or_default();
        self.len += 1;
        if let Some(last) = batches.last_mut() {
            if last.last_offset.checked_add(1) == Some(offset) {
                last.last_offset = offset;
                last.types.push(ack);
                return;
            }
        }
        batches.push(AcknowledgementBatch {
            first_offset: offset,
            last_offset: offset,
            types: vec![ack],
        });
    }

    /// Moves every acknowledgement of `other` into this set.
    pub fn append(&mut self, other: ShareAcknowledgements) {
        for (tp, batches) in other.partitions {
            for batch in batches {
                for (offset, ack) in batch.iter() {
                    self.add(tp.topic(), tp.partition(), offset, ack);
                }
            }
        }
    }

    /// The batches of every partition, in partition order.
    pub fn iter(&self) -> impl Iterator<Item = (&TopicPartition, &[AcknowledgementBatch])> {
        self.partitions.iter().map(|(tp, b)| (tp, b.as_slice()))
    }

    /// `(partition, offset, type)` for every acknowledgement.
    pub fn offsets(&self) -> impl Iterator<Item = (&TopicPartition, i64, AcknowledgeType)> {
        self.partitions.iter().flat_map(|(tp, batches)| {
            batches
                .iter()
                .flat_map(move |b| b.iter().map(move |(o, a)| (tp, o, a)))
        })
    }

    /// The number of acknowledged offsets.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there is nothing to stage.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_offsets_share_a_batch_and_gaps_split() {
        let mut acks = ShareAcknowledgements::new();
        for o in [5, 6, 7, 9] {
            acks.add("t", 1, o, AcknowledgeType::Accept);
        }
        acks.add("t", 0, 1, AcknowledgeType::Reject);
        let all: Vec<_> = acks
            .iter()
            .map(|(tp, b)| {
                (
                    tp.partition(),
                    b.iter()
                        .map(|b| (b.first_offset(), b.last_offset()))
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        assert_eq!(all, vec![(0, vec![(1, 1)]), (1, vec![(5, 7), (9, 9)])]);
        assert_eq!(acks.len(), 5);
        assert_eq!(acks.offsets().count(), 5);
    }

    #[test]
    fn a_range_ending_at_the_last_offset_there_is_iterates_without_overflow() {
        let mut acks = ShareAcknowledgements::new();
        for o in [i64::MAX - 1, i64::MAX] {
            acks.add("t", 0, o, AcknowledgeType::Accept);
        }
        let offsets: Vec<i64> = acks.offsets().map(|(_, o, _)| o).collect();
        assert_eq!(offsets, [i64::MAX - 1, i64::MAX]);
        let mut copy = ShareAcknowledgements::new();
        copy.append(acks);
        assert_eq!(copy.len(), 2);
    }
}
