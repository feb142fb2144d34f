//! Reading ShareFetch and ShareAcknowledge answers: the records acquired, the acknowledgements
//! the consumer makes itself, and what the session book needs to know.

use std::collections::HashSet;
use std::time::Duration;

use super::cluster::Cluster;
use crate::kafka::codec::share_v2;
use crate::kafka::error::ClientError;
use crate::kafka::error::codes::broker_error;
use crate::kafka::session::acks::{AckRange, GAP, REJECT, RELEASE};
use crate::kafka::session::acquired::{AcquiredRange, DecodeBudget, extract};
use crate::kafka::session::book::{
    Answer, NodeId, PartitionAnswer, SessionPartition, session_gone,
};
use crate::kafka::session::ranges::OffsetRange;
use crate::record::{ConsumerRecord, TopicPartition};

const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const FENCED_LEADER_EPOCH: i16 = 74;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const UNKNOWN_TOPIC_ID: i16 = 100;

/// A partition error that means its leader moved or it vanished: ask for metadata again.
fn moved(code: i16) -> bool {
    matches!(
        code,
        NOT_LEADER_OR_FOLLOWER
            | FENCED_LEADER_EPOCH
            | UNKNOWN_TOPIC_OR_PARTITION
            | UNKNOWN_TOPIC_ID
    )
}

/// What one ShareFetch answer brought.
#[derive(Debug, Default)]
pub(crate) struct Fetched {
    /// For the session book.
    pub(crate) answer: Answer,
    /// The records acquired, partition by partition in offset order.
    pub(crate) records: Vec<ConsumerRecord>,
    /// Where a poll can end without splitting one of the broker's acquired ranges: the
    /// positions in `records`, ascending, just past the last record of each range (see
    /// [`range_ends`]).
    pub(crate) breaks: Vec<usize>,
    /// The most offsets one data batch of the answer spans (see
    /// [`Extracted::widest_batch`](crate::kafka::session::acquired::Extracted::widest_batch)).
    pub(crate) widest_batch: u64,
    /// GAP, REJECT and RELEASE acknowledgements the consumer makes itself.
    pub(crate) internal_acks: Vec<(TopicPartition, Vec<AckRange>)>,
    /// Leaders moved, or a topic id is unknown: refresh metadata.
    pub(crate) stale: bool,
    /// Some error came back (the engine backs off if no records came either).
    pub(crate) errors: bool,
    /// An error retrying cannot fix, for the next poll.
    pub(crate) fatal: Option<ClientError>,
    /// The acquisition lock duration the broker reported.
    pub(crate) lock_timeout: Option<Duration>,
    /// The bytes of the record sets `records` came from (what they keep in memory).
    pub(crate) record_bytes: usize,
    /// The partitions `records` came from.
    pub(crate) acquired_from: Vec<(SessionPartition, TopicPartition)>,
}

/// How many times `fetch.max.bytes` the records of one answer may decompress to. A broker
/// answers at most `fetch.max.bytes` of (compressed) batches; compressed data commonly
/// inflates a few times, and what does not fit is released, which costs a delivery. So the
/// budget leaves room for ordinary compression ratios while still bounding a hostile one.
const DECODE_BUDGET_FACTOR: usize = 4;

/// The decompression budget of one answer for a consumer with this `fetch.max.bytes`.
pub(crate) fn decode_budget(fetch_max_bytes: i32) -> DecodeBudget {
    let per_answer = usize::try_from(fetch_max_bytes.max(1)).unwrap_or(usize::MAX);
    DecodeBudget::new(per_answer.saturating_mul(DECODE_BUDGET_FACTOR))
}

/// Offset ranges acknowledged with one type.
fn ranges_of(offsets: &[OffsetRange], code: i8, out: &mut Vec<AckRange>) {
    out.extend(offsets.iter().map(|r| AckRange {
        first: r.first(),
        last: r.last(),
        code,
    }));
}

/// Reads a ShareFetch answer from `node`.
pub(crate) fn fetch_answer(
    cluster: &Cluster,
    node: NodeId,
    response: share_v2::ShareFetchResponse,
    fetch_max_bytes: i32,
) -> Fetched {
    let mut budget = decode_budget(fetch_max_bytes);
    let mut out = Fetched {
        answer: Answer {
            error_code: response.error_code,
            error_message: response.error_message.as_ref().map(|m| m.to_string()),
            partitions: Vec::new(),
        },
        ..Fetched::default()
    };
    out.lock_timeout = lock_timeout(response.acquisition_lock_timeout_ms);
    if response.error_code != 0 {
        out.errors = true;
        match response.error_code {
            code if session_gone(code) => {
                tracing::debug!(
                    node,
                    code = response.error_code,
                    "share session lost; reopening"
                );
            }
            code => {
                if let Some(e) = broker_error(
                    "ShareFetch",
                    code,
                    response.error_message.map(|m| m.to_string()),
                ) {
                    if !e.is_retriable() {
                        out.fatal = Some(e);
                    }
                }
            }
        }
        return out;
    }
    // A broker names each partition once; a second entry for one is not read (its records would
    // reach the application twice, and be acknowledged twice). What it acquired stays locked
    // until the lock expires, and is delivered again then.
    let mut seen: HashSet<SessionPartition> = HashSet::new();
    for topic in response.responses {
        let Some(meta) = cluster.by_id.get(&topic.topic_id) else {
            // Not for a topic this session fetched; its acquired records (if any) stay locked
            // until they expire.
            tracing::warn!(topic_id = %topic.topic_id, "answer for an unknown topic id");
            out.stale = true;
            continue;
        };
        let name = meta.name.clone();
        for p in topic.partitions {
            let tp = TopicPartition::new(name.clone(), p.partition_index);
            if !seen.insert((topic.topic_id, p.partition_index)) {
                tracing::warn!(
                    %tp,
                    acquired = p.acquired_records.len(),
                    "the broker's ShareFetch answer names this partition more than once; the \
                     entries after the first are ignored (what they acquired is delivered \
                     again when its lock expires)"
                );
                out.errors = true;
                continue;
            }
            out.answer.partitions.push(PartitionAnswer {
                partition: tp.clone(),
                ack_code: p.acknowledge_error_code,
                ack_message: p.acknowledge_error_message.map(|m| m.to_string()),
            });
            match p.error_code {
                0 => {}
                code if moved(code) => {
                    tracing::debug!(%tp, code, "partition moved or vanished; refreshing metadata");
                    out.stale = true;
                    out.errors = true;
                    continue;
                }
                code => {
                    tracing::warn!(%tp, code, message = ?p.error_message, "fetch error for partition");
                    out.errors = true;
                    continue;
                }
            }
            if p.acquired_records.is_empty() {
                continue;
            }
            let ranges: Vec<AcquiredRange> = p
                .acquired_records
                .iter()
                .map(|a| AcquiredRange {
                    first: a.first_offset,
                    last: a.last_offset,
                    delivery_count: u16::try_from(a.delivery_count).unwrap_or(0),
                })
                .collect();
            let wire = p.records.as_ref().map_or(0, bytes::Bytes::len);
            let extracted = extract(&name, p.partition_index, p.records, &ranges, &mut budget);
            if !extracted.records.is_empty() {
                out.record_bytes = out.record_bytes.saturating_add(wire);
                out.acquired_from
                    .push(((topic.topic_id, p.partition_index), tp.clone()));
            }
            for error in &extracted.errors {
                tracing::error!(%tp, error, "rejecting records of a corrupt batch");
            }
            if extracted.more_errors > 0 {
                tracing::error!(
                    %tp,
                    batches = extracted.more_errors,
                    "rejecting records of more corrupt batches of this answer (their reasons not logged)"
                );
            }
            if extracted.over_budget_batches > 0 {
                tracing::warn!(
                    %tp,
                    batches = extracted.over_budget_batches,
                    "releasing records whose batches exceed this answer's decompression budget (4 x fetch.max.bytes)"
                );
            }
            let mut acks = Vec::new();
            ranges_of(&extracted.gaps, GAP, &mut acks);
            ranges_of(&extracted.corrupt, REJECT, &mut acks);
            ranges_of(&extracted.cut, RELEASE, &mut acks);
            if !acks.is_empty() {
                out.internal_acks.push((tp, acks));
            }
            out.widest_batch = out.widest_batch.max(extracted.widest_batch);
            range_ends(
                &ranges,
                &extracted.records,
                out.records.len(),
                &mut out.breaks,
            );
            out.records.extend(extracted.records);
        }
    }
    out
}

/// Appends to `breaks` the positions just past the last record of each acquired range, for
/// `records` (one partition's, in offset order) placed at `base` in the answer's records.
///
/// The broker keeps each AcquiredRecords entry as one in-flight batch and tracks its state as
/// a whole until an acknowledgement covers only part of it; from then on it keeps a state per
/// offset (`SharePartition.maybeInitializeOffsetStateUpdate`), which costs it far more per
/// record for the rest of the batch's life. A poll that ends at one of these positions leaves
/// every range it hands out whole, so its acknowledgements split none.
fn range_ends(
    ranges: &[AcquiredRange],
    records: &[ConsumerRecord],
    base: usize,
    breaks: &mut Vec<usize>,
) {
    if records.is_empty() {
        return;
    }
    let mut ends: Vec<i64> = ranges.iter().map(|r| r.last).collect();
    ends.sort_unstable();
    let from = breaks.len();
    for end in ends {
        // Records are in offset order: those up to `end` come first.
        let at = records.partition_point(|r| r.offset() <= end);
        if at > 0 && breaks.get(from..).and_then(<[usize]>::last) != Some(&(base + at)) {
            breaks.push(base + at);
        }
    }
    // The partition's last record ends this partition's part of the answer either way.
    if breaks.get(from..).and_then(<[usize]>::last) != Some(&(base + records.len())) {
        breaks.push(base + records.len());
    }
}

/// The acquisition lock duration a ShareFetch or ShareAcknowledge (v2+) answer reports;
/// `None` for 0 or less (not reported).
pub(crate) fn lock_timeout(millis: i32) -> Option<Duration> {
    (millis > 0).then(|| Duration::from_millis(u64::from(millis.unsigned_abs())))
}

/// Reads a ShareAcknowledge answer: the book's view, and whether leaders moved.
pub(crate) fn acknowledge_answer(
    cluster: &Cluster,
    response: share_v2::ShareAcknowledgeResponse,
) -> (Answer, bool) {
    let mut stale = false;
    let mut answer = Answer {
        error_code: response.error_code,
        error_message: response.error_message.map(|m| m.to_string()),
        partitions: Vec::new(),
    };
    for topic in response.responses {
        let Some(meta) = cluster.by_id.get(&topic.topic_id) else {
            continue;
        };
        for p in topic.partitions {
            // A broker that lost the leadership answers NOT_LEADER_OR_FOLLOWER, or
            // UNKNOWN_TOPIC_OR_PARTITION once it dropped the share-partition.
            stale |= moved(p.error_code);
            answer.partitions.push(PartitionAnswer {
                partition: TopicPartition::new(meta.name.clone(), p.partition_index),
                ack_code: p.error_code,
                ack_message: p.error_message.map(|m| m.to_string()),
            });
        }
    }
    (answer, stale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(first: i64, last: i64) -> AcquiredRange {
        AcquiredRange {
            first,
            last,
            delivery_count: 1,
        }
    }

    fn records(offsets: &[i64]) -> Vec<ConsumerRecord> {
        offsets
            .iter()
            .map(|&o| ConsumerRecord::new("t", 0, o))
            .collect()
    }

    #[test]
    fn a_break_follows_the_last_record_of_each_acquired_range() {
        let mut breaks = vec![3];
        // Ranges out of order, one ending on a gap (offset 6 has no record), one without
        // records at all (20..=25), and the last ending past the records.
        let ranges = [
            range(7, 9),
            range(0, 4),
            range(5, 6),
            range(20, 25),
            range(10, 14),
        ];
        let got = records(&[0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 12]);
        range_ends(&ranges, &got, 3, &mut breaks);
        assert_eq!(breaks, [3, 3 + 5, 3 + 6, 3 + 9, 3 + 11]);
        range_ends(&ranges, &[], 14, &mut breaks);
        assert_eq!(breaks.len(), 5, "no records, no break");
        // Ranges that end before the records, or none: only the partition's end.
        let mut breaks = Vec::new();
        range_ends(&[range(0, 1)], &records(&[5, 6]), 0, &mut breaks);
        assert_eq!(breaks, [2]);
    }
}
