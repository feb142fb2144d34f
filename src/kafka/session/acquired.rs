//! Turning the `Records` bytes of a ShareFetch partition into the records this member acquired.
//!
//! A response carries whole log batches, which may hold offsets acquired by other members and
//! control records. Only offsets inside `AcquiredRecords` are delivered, each with its range's
//! delivery count. Every other acquired offset is for the member to acknowledge itself, and
//! [`extract`] reports them as ranges, ready for acknowledgement batches:
//!
//! - GAP ([`Extracted::gaps`]): acquired offsets with no data record inside a complete batch or
//!   between complete batches (control records, compacted away), as in the Java client;
//! - REJECT ([`Extracted::corrupt`]): acquired offsets of a batch that cannot be decoded, as the
//!   Java client does, since no retry can make a corrupt batch readable;
//! - RELEASE ([`Extracted::cut`]): acquired offsets past the data the response carried, in a batch
//!   it cut short, or in a batch left compressed because the [`DecodeBudget`] ran out, so they
//!   come back at once instead of waiting for their lock. Acknowledging a GAP there could archive
//!   records nobody has seen.
//!
//! Batches are decoded by our own [`record_batch`] codec, which keeps repeated header keys
//! (kafka-protocol's merges them) and bounds its allocations by the input.
//!
//! # Work
//!
//! Offsets stay ranges end to end: an acquired range may span the whole offset space, and
//! nothing walks it offset by offset. [`extract`] sorts the acquired ranges and the batches,
//! then walks them together once, in offset order, so its work is O(r·log r + b·log b + n) for r
//! acquired ranges, b batches and n records, plus one checksum pass over the bytes and the
//! decompression of the batches it needs. Every output list is bounded by r + b + n entries, so
//! by the bytes received.
//!
//! # What a broken or hostile broker gets
//!
//! Nothing from the network can make [`extract`] panic, and every outcome is deterministic:
//!
//! - acquired ranges with `first > last` are dropped, negative offsets are dropped (a range
//!   reaching below 0 keeps its part from 0), and an offset several ranges claim belongs to the
//!   one whose `first` is lowest (of those starting there, the one earlier in the answer): it
//!   gets that range's delivery count and is reported once;
//! - batches are taken in `baseOffset` order (the order of the answer among equal ones), and a
//!   batch speaks for `baseOffset..=baseOffset + lastOffsetDelta` (just `baseOffset` when the
//!   delta is negative), minus the offsets earlier batches spoke for, and not beyond the offset
//!   before the next batch's `baseOffset` when that is higher: so a corrupt header claiming
//!   `lastOffsetDelta = i32::MAX` does not swallow the good batches after it;
//! - acquired offsets between batches are gaps, except right before a batch whose header did
//!   not verify: its `baseOffset` may be wrong (the checksum does not cover it), so they are
//!   released rather than archived unseen;
//! - a record is delivered only inside its batch's share and in increasing offset order: a
//!   record repeating or preceding an offset already seen is dropped.

use bytes::Bytes;

use crate::kafka::codec::record_batch::{
    self, BatchErrorKind, Compression, MAX_DECOMPRESSED_BATCH, RawBatch,
};
use crate::kafka::session::ranges::{OffsetRange, push_coalesced};
use crate::record::{ConsumerRecord, Headers, TimestampType};
use crate::topic_name::TopicName;

/// An acquired offset range with its delivery count, inclusive, as the broker sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AcquiredRange {
    pub(crate) first: i64,
    pub(crate) last: i64,
    pub(crate) delivery_count: u16,
}

/// How many bytes of decompressed records one ShareFetch answer may still produce: create one
/// per answer (with the consumer's `fetch.max.bytes`, say) and pass it to [`extract`] for every
/// partition of that answer.
///
/// # The rule
///
/// Only a compressed batch holding acquired offsets is decompressed (never one holding none, nor
/// a control batch, whose acquired offsets are gaps whatever it holds), and only while the budget
/// lasts: the first one of the answer always may use its own cap ([`MAX_DECOMPRESSED_BATCH`],
/// 64 MiB), so every answer makes progress; each later one at most what is left. A batch that
/// would decompress to more than that is not decoded: its acquired offsets are released
/// ([`Extracted::cut`]), not rejected, since nothing is wrong with it, and it spends what was
/// left, so every later compressed batch of the answer is released too.
///
/// Released records come back to the group, and every acquisition counts as a delivery: a
/// record released for the budget in several answers running reaches the group's delivery
/// limit (`group.share.delivery.count.limit`, 5 by default) and is archived undelivered.
/// Released records are the lowest offsets available again, so they tend to come early in the
/// next answer. But the budget counts decompressed bytes where `fetch.max.bytes` counts
/// compressed ones: an answer filled up to `fetch.max.bytes` with well-compressed data (large
/// records, or many per fetch) decompresses to several times that, so a budget of
/// `fetch.max.bytes` releases part of every such answer, and a partition always answered after
/// others that spend the budget could be released again and again. Size the budget with that
/// in mind.
///
/// Uncompressed batches are not counted: their records slice the answer's bytes, which are in
/// memory anyway, so decoding them allocates only the per-record structs below.
///
/// # The memory bound
///
/// What one answer holds at its peak is then about
///
/// - the answer's bytes (the frame), which uncompressed records slice;
/// - at most the larger of the budget and [`MAX_DECOMPRESSED_BATCH`] of decompressed buffers,
///   counted by their capacity: a failed decompression is charged what it allocated too, so
///   this also bounds the decompression work of the answer. A buffer stays allocated as long as
///   any record slicing it does, so this is what an answer allocates, not when it is freed;
/// - the structs of the decoded records, not counted by the budget: one batch's records while it
///   is decoded, and the [`ConsumerRecord`]s of the acquired ones, whose keys, values and header
///   values slice the buffers above. They grow linearly with the records' bytes, but not by a
///   small factor when the records are empty: a record struct is over 100 bytes for at least 7
///   on the wire, a header 56 for at least 2, so a batch of empty records or empty headers
///   makes structs some 15 to 30 times its decompressed size (up to twice that while vectors
///   grow).
#[derive(Debug)]
pub(crate) struct DecodeBudget {
    /// Bytes of decompressed output left.
    left: usize,
    /// Compressed batches decompressed (or tried) under this budget.
    batches: usize,
}

impl DecodeBudget {
    /// A budget of `bytes` of decompressed output for one answer.
    pub(crate) const fn new(bytes: usize) -> Self {
        Self {
            left: bytes,
            batches: 0,
        }
    }

    /// Bytes of decompressed output left.
    #[cfg_attr(not(test), allow(dead_code, reason = "for the fetch path's logs"))]
    pub(crate) const fn left(&self) -> usize {
        self.left
    }

    /// How many compressed batches were decompressed (or tried) under this budget so far.
    #[cfg_attr(not(test), allow(dead_code, reason = "for the fetch path's logs"))]
    pub(crate) const fn batches_decompressed(&self) -> usize {
        self.batches
    }

    /// The most the next compressed batch may decompress to, or `None` when nothing is left.
    fn allowance(&self) -> Option<usize> {
        if self.batches == 0 {
            // The first batch of an answer: progress whatever the budget.
            Some(MAX_DECOMPRESSED_BATCH)
        } else if self.left == 0 {
            None
        } else {
            Some(self.left.min(MAX_DECOMPRESSED_BATCH))
        }
    }

    /// Counts one decompression that allocated `bytes`.
    fn charge(&mut self, bytes: usize) {
        self.batches = self.batches.saturating_add(1);
        self.left = self.left.saturating_sub(bytes);
    }

    /// A batch did not fit in what was left: nothing is left for later batches.
    fn exhaust(&mut self) {
        self.left = 0;
    }
}

/// What one partition of a ShareFetch response yields. The offset lists are sorted, disjoint
/// and coalesced, and disjoint from each other and from the records' offsets; together with the
/// records they cover exactly the acquired offsets (validated as the module says).
#[derive(Debug, Default)]
pub(crate) struct Extracted {
    /// Records to hand to the application, in increasing offset order.
    pub(crate) records: Vec<ConsumerRecord>,
    /// Acquired offsets with no data record: acknowledge as GAP.
    pub(crate) gaps: Vec<OffsetRange>,
    /// Acquired offsets in batches that could not be decoded: acknowledge as REJECT.
    pub(crate) corrupt: Vec<OffsetRange>,
    /// Acquired offsets from a batch the response cut short, past the data it carried, or in a
    /// batch the [`DecodeBudget`] could not pay for: acknowledge as RELEASE, so they come back
    /// at once instead of waiting for their lock.
    pub(crate) cut: Vec<OffsetRange>,
    /// Why batches holding acquired offsets could not be decoded, for the log: the first
    /// [`MAX_ERRORS_KEPT`] of them.
    pub(crate) errors: Vec<String>,
    /// How many more batches could not be decoded than `errors` holds (a frame of corrupt
    /// 12-byte batches would otherwise make a string and a log line of each).
    pub(crate) more_errors: usize,
    /// Compressed batches of this partition decompressed (or tried).
    pub(crate) decompressed_batches: usize,
    /// Compressed batches of this partition whose acquired offsets were released because the
    /// [`DecodeBudget`] ran out: worth a log line, they are not errors.
    pub(crate) over_budget_batches: usize,
    /// The most offsets one intact data batch holding acquired records spans (base to last
    /// offset); 0 when there was none. The broker cuts its acquisitions at batch starts, so
    /// this bounds how far past the requested batch size an acquired range can reach.
    pub(crate) widest_batch: u64,
}

/// How many reasons for undecodable batches one partition's extraction keeps for the log.
pub(crate) const MAX_ERRORS_KEPT: usize = 8;

impl Extracted {
    /// Notes a batch that could not be decoded: its reason kept (made only then) while fewer
    /// than [`MAX_ERRORS_KEPT`] are, counted after that.
    fn note_error(&mut self, reason: impl FnOnce() -> String) {
        if self.errors.len() < MAX_ERRORS_KEPT {
            self.errors.push(reason());
        } else {
            self.more_errors = self.more_errors.saturating_add(1);
        }
    }
}

fn convert(
    topic: &TopicName,
    partition: i32,
    record: record_batch::Record,
    timestamp_type: TimestampType,
    delivery_count: u16,
) -> ConsumerRecord {
    let headers: Headers = record
        .headers
        .into_iter()
        .map(|(k, v)| crate::record::Header::new(k, v))
        .collect();
    let timestamp_type = if record.timestamp < 0 {
        TimestampType::NoTimestampType
    } else {
        timestamp_type
    };
    ConsumerRecord::new(topic.clone(), partition, record.offset)
        .with_key(record.key)
        .with_value(record.value)
        .with_headers(headers)
        .with_timestamp(record.timestamp, timestamp_type)
        .with_delivery_count(delivery_count)
}

/// An acquired range once validated: not empty, not negative.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owned {
    range: OffsetRange,
    delivery_count: u16,
}

/// The acquired ranges as [`extract`] uses them: sorted, disjoint, non-negative, adjacent ranges
/// of one delivery count merged. An offset several ranges claim goes to the one starting lowest
/// as sent (negative offsets included), the earlier one in `acquired` on a tie (the sort is
/// stable).
fn normalize(acquired: &[AcquiredRange]) -> Vec<Owned> {
    let mut sorted: Vec<AcquiredRange> = acquired
        .iter()
        .filter(|r| r.first <= r.last && r.last >= 0)
        .copied()
        .collect();
    sorted.sort_by_key(|r| r.first);
    let mut out: Vec<Owned> = Vec::with_capacity(sorted.len());
    // The first offset no range kept so far holds; `None` once one reaches i64::MAX. Starting
    // at 0 drops negative offsets.
    let mut free = Some(0i64);
    for r in sorted {
        let Some(from) = free else { break };
        let Some(range) = OffsetRange::new(r.first.max(from), r.last) else {
            continue; // wholly claimed by earlier ranges
        };
        free = range.after();
        match out.last_mut() {
            Some(prev)
                if prev.delivery_count == r.delivery_count
                    && prev.range.after() == Some(range.first()) =>
            {
                prev.range = OffsetRange::new(prev.range.first(), range.last()).unwrap_or(range);
            }
            _ => out.push(Owned {
                range,
                delivery_count: r.delivery_count,
            }),
        }
    }
    out
}

/// A forward-only walk over normalized acquired ranges. Every query starts after where the
/// previous one ended, so each range is passed once over the whole extraction.
#[derive(Debug)]
struct Acquired<'a> {
    ranges: &'a [Owned],
    /// Ranges before this one end before every offset still to be queried.
    at: usize,
}

impl Acquired<'_> {
    fn skip_before(&mut self, offset: i64) {
        while self
            .ranges
            .get(self.at)
            .is_some_and(|r| r.range.last() < offset)
        {
            self.at += 1;
        }
    }

    /// The delivery count of `offset`, if acquired.
    fn delivery_count(&mut self, offset: i64) -> Option<u16> {
        self.skip_before(offset);
        self.ranges
            .get(self.at)
            .filter(|r| r.range.contains(offset))
            .map(|r| r.delivery_count)
    }

    /// Whether any offset of `within` is acquired.
    fn any_within(&mut self, within: OffsetRange) -> bool {
        self.skip_before(within.first());
        self.ranges
            .get(self.at)
            .is_some_and(|r| r.range.first() <= within.last())
    }

    /// Appends the acquired parts of `within` to `to`.
    fn each_within(&mut self, within: OffsetRange, to: &mut Vec<OffsetRange>) {
        self.skip_before(within.first());
        while let Some(r) = self.ranges.get(self.at) {
            let Some(part) = r.range.intersection(within) else {
                break; // starts after `within`
            };
            push_coalesced(to, part);
            if r.range.last() > within.last() {
                break; // the rest may belong to the next query
            }
            self.at += 1;
        }
    }
}

/// For [`Extracted::errors`].
fn undecodable(topic: &str, partition: i32, error: &record_batch::BatchError) -> String {
    format!(
        "batch at offsets {}..={} of {topic}-{partition} cannot be decoded: {}",
        error.base_offset, error.last_offset, error.kind
    )
}

/// `baseOffset` and `baseOffset + lastOffsetDelta` of a batch, checked or not.
fn span_of(batch: &Result<RawBatch, record_batch::BatchError>) -> (i64, i64) {
    match batch {
        Ok(b) => (b.base_offset, b.last_offset),
        Err(e) => (e.base_offset, e.last_offset),
    }
}

/// Extracts the acquired records of one partition, decompressing within `budget` (shared by the
/// partitions of one answer; see [`DecodeBudget`]). Never fails: what cannot be decoded is
/// reported in `corrupt` and `errors`, what cannot be decoded now in `cut`.
pub(crate) fn extract(
    topic: &TopicName,
    partition: i32,
    data: Option<Bytes>,
    acquired: &[AcquiredRange],
    budget: &mut DecodeBudget,
) -> Extracted {
    let mut out = Extracted::default();
    let acquired = normalize(acquired);
    if acquired.is_empty() {
        return out;
    }
    let mut acquired = Acquired {
        ranges: &acquired,
        at: 0,
    };
    let scanned = record_batch::scan_batches(data.unwrap_or_default());
    let cut_from = scanned.cut_from;
    let mut batches = scanned.batches;
    // A log's batches come in offset order; stable, so the first of equal ones wins.
    batches.sort_by_key(|batch| span_of(batch).0);
    // The first offset not classified yet; `None` once everything through i64::MAX is.
    let mut next = Some(0i64);
    let mut batches = batches.into_iter().peekable();
    while let Some(batch) = batches.next() {
        let Some(from) = next else { break };
        let (base, last) = span_of(&batch);
        let first = base.max(from);
        let mut last = last.max(base);
        if let Some((following, _)) = batches.peek().map(span_of) {
            if following > first {
                last = last.min(following - 1);
            }
        }
        let Some(share) = OffsetRange::new(first, last) else {
            continue; // earlier batches spoke for all of it
        };
        if let Some(hole) = OffsetRange::new(from, first.saturating_sub(1)) {
            if batch.is_ok() {
                // Between complete batches (or before the first): compacted away, unless the
                // response was cut short before it.
                classify_hole(&mut acquired, hole, cut_from, &mut out);
            } else {
                // Before a batch whose header did not verify, so whose baseOffset may be
                // wrong: its records may be in the hole, and a gap would archive them.
                acquired.each_within(hole, &mut out.cut);
            }
        }
        next = share.after();
        match batch {
            Err(error) => {
                if acquired.any_within(share) {
                    out.note_error(|| undecodable(topic, partition, &error));
                    acquired.each_within(share, &mut out.corrupt);
                }
            }
            // Control records are never delivered: no need to decompress them.
            Ok(raw) if raw.control => acquired.each_within(share, &mut out.gaps),
            Ok(raw) => {
                if acquired.any_within(share) {
                    let span = u64::try_from(raw.last_offset.saturating_sub(raw.base_offset))
                        .unwrap_or(0)
                        .saturating_add(1);
                    out.widest_batch = out.widest_batch.max(span);
                    decode_share(
                        topic,
                        partition,
                        raw,
                        share,
                        &mut acquired,
                        budget,
                        &mut out,
                    );
                }
            }
        }
    }
    // Past the last complete batch nothing is known: release.
    if let Some(rest) = next.and_then(|from| OffsetRange::new(from, i64::MAX)) {
        acquired.each_within(rest, &mut out.cut);
    }
    out
}

/// Acquired offsets of `hole`, which no complete batch speaks for: gaps, except from `cut_from`
/// on, where the response was cut short (released).
fn classify_hole(
    acquired: &mut Acquired<'_>,
    hole: OffsetRange,
    cut_from: Option<i64>,
    out: &mut Extracted,
) {
    let cut = cut_from.and_then(|from| OffsetRange::new(from.max(hole.first()), hole.last()));
    let gap = match cut_from {
        // Empty when `from` is at or before the hole's start (i64::MIN included).
        Some(from) => OffsetRange::new(hole.first(), from.saturating_sub(1).min(hole.last())),
        None => Some(hole),
    };
    if let Some(gap) = gap {
        acquired.each_within(gap, &mut out.gaps);
    }
    if let Some(cut) = cut {
        acquired.each_within(cut, &mut out.cut);
    }
}

/// Decodes a batch holding acquired offsets in `share`, within the budget, and sorts those
/// offsets into records, gaps, corrupt or cut.
fn decode_share(
    topic: &TopicName,
    partition: i32,
    raw: RawBatch,
    share: OffsetRange,
    acquired: &mut Acquired<'_>,
    budget: &mut DecodeBudget,
    out: &mut Extracted,
) {
    let compressed = raw.compression != Compression::None;
    let limit = if compressed {
        let Some(limit) = budget.allowance() else {
            out.over_budget_batches += 1;
            acquired.each_within(share, &mut out.cut);
            return;
        };
        limit
    } else {
        // Nothing to decompress: the records slice the input.
        MAX_DECOMPRESSED_BATCH
    };
    let decoded = raw.decode_within(limit);
    if compressed {
        budget.charge(decoded.decompressed);
        out.decompressed_batches += 1;
    }
    let batch = match decoded.batch {
        Ok(batch) => batch,
        Err(error)
            if limit < MAX_DECOMPRESSED_BATCH
                && matches!(error.kind, BatchErrorKind::DecompressedTooLarge { .. }) =>
        {
            // Beyond the budget, not its cap: nothing wrong with it, it comes back later.
            budget.exhaust();
            out.over_budget_batches += 1;
            acquired.each_within(share, &mut out.cut);
            return;
        }
        Err(error) => {
            out.note_error(|| undecodable(topic, partition, &error));
            acquired.each_within(share, &mut out.corrupt);
            return;
        }
    };
    let timestamp_type = match batch.timestamp_type {
        record_batch::TimestampType::CreateTime => TimestampType::CreateTime,
        record_batch::TimestampType::LogAppendTime => TimestampType::LogAppendTime,
    };
    // -1: written before leader epochs were recorded (message format < 2): unknown.
    let leader_epoch = (batch.partition_leader_epoch >= 0).then_some(batch.partition_leader_epoch);
    // The first offset of the share no record has passed yet; `None` past i64::MAX.
    let mut cursor = Some(share.first());
    for record in batch.records {
        let Some(from) = cursor else { break };
        let offset = record.offset;
        if offset < from || offset > share.last() {
            continue; // outside the share, or not in increasing order
        }
        if let Some(missing) = OffsetRange::new(from, offset.saturating_sub(1)) {
            acquired.each_within(missing, &mut out.gaps);
        }
        if let Some(delivery_count) = acquired.delivery_count(offset) {
            out.records.push(
                convert(topic, partition, record, timestamp_type, delivery_count)
                    .with_leader_epoch(leader_epoch),
            );
        }
        cursor = offset.checked_add(1);
    }
    if let Some(rest) = cursor.and_then(|from| OffsetRange::new(from, share.last())) {
        acquired.each_within(rest, &mut out.gaps);
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions};
    use proptest::prelude::*;

    use kafka_protocol::records;

    use super::*;
    use crate::kafka::codec::record_batch::{EncodeOptions, NewRecord, encode_batch};

    /// Offset of `crc` in a v2 batch header, and of the attributes it covers from.
    const CRC_AT: usize = 17;
    const ATTRIBUTES_AT: usize = 21;
    /// Offset of `lastOffsetDelta` in a v2 batch header.
    const LAST_OFFSET_DELTA_AT: usize = 23;
    /// Offset of `recordsCount` in a v2 batch header.
    const RECORDS_COUNT_AT: usize = 57;
    /// The consumer's default `fetch.max.bytes`.
    const FETCH_MAX_BYTES: usize = 52_428_800;

    fn record(offset: i64, value: &str) -> Record {
        Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: records::TimestampType::Creation,
            offset,
            // offset - sequence constant keeps the records in one batch.
            sequence: i32::try_from(offset).unwrap(),
            timestamp: 1_000 + offset,
            key: None,
            value: Some(Bytes::from(value.to_owned())),
            headers: [(StrBytes::from_static_str("h"), None)]
                .into_iter()
                .collect(),
        }
    }

    fn encode(records: &[Record], compression: Compression) -> Bytes {
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            records.iter(),
            &RecordEncodeOptions {
                version: 2,
                compression,
            },
        )
        .unwrap();
        buf.freeze()
    }

    /// One batch of `count` records from `base`, each valued with its offset; ours encodes
    /// base offsets up to i64::MAX.
    fn batch(base: i64, count: usize, compression: record_batch::Compression) -> Bytes {
        let records: Vec<NewRecord> = (0..count)
            .map(|i| NewRecord {
                timestamp: 1,
                value: Some(Bytes::from((base + i64::try_from(i).unwrap()).to_string())),
                ..NewRecord::default()
            })
            .collect();
        encode_batch(
            &records,
            &EncodeOptions {
                base_offset: base,
                compression,
                ..EncodeOptions::default()
            },
        )
    }

    /// Sets `lastOffsetDelta`; with `crc`, recomputes the checksum it is covered by.
    fn set_last_offset_delta(batch: &[u8], delta: i32, crc: bool) -> Vec<u8> {
        let mut out = batch.to_vec();
        out[LAST_OFFSET_DELTA_AT..LAST_OFFSET_DELTA_AT + 4].copy_from_slice(&delta.to_be_bytes());
        if crc {
            let crc = crc32c::crc32c(&out[ATTRIBUTES_AT..]);
            out[CRC_AT..ATTRIBUTES_AT].copy_from_slice(&crc.to_be_bytes());
        }
        out
    }

    fn range(first: i64, last: i64, dc: u16) -> AcquiredRange {
        AcquiredRange {
            first,
            last,
            delivery_count: dc,
        }
    }

    fn r(first: i64, last: i64) -> OffsetRange {
        OffsetRange::new(first, last).unwrap()
    }

    /// `extract` of partition 0 of topic "t", with a budget of its own.
    fn extract_alone(data: Option<Bytes>, acquired: &[AcquiredRange]) -> Extracted {
        let topic = TopicName::interned("t");
        let mut budget = DecodeBudget::new(FETCH_MAX_BYTES);
        extract(&topic, 0, data, acquired, &mut budget)
    }

    fn offsets(got: &Extracted) -> Vec<i64> {
        got.records.iter().map(ConsumerRecord::offset).collect()
    }

    #[test]
    fn only_acquired_offsets_are_delivered_with_their_delivery_count() {
        let topic = TopicName::interned("t");
        let data = encode(
            &(0..6).map(|o| record(o, "v")).collect::<Vec<_>>(),
            Compression::None,
        );
        let mut budget = DecodeBudget::new(FETCH_MAX_BYTES);
        let got = extract(
            &topic,
            2,
            Some(data),
            &[range(4, 5, 3), range(1, 2, 1)],
            &mut budget,
        );
        let seen: Vec<(i64, u16)> = got
            .records
            .iter()
            .map(|r| (r.offset(), r.delivery_count()))
            .collect();
        assert_eq!(seen, vec![(1, 1), (2, 1), (4, 3), (5, 3)]);
        assert!(got.gaps.is_empty() && got.corrupt.is_empty() && got.cut.is_empty());
        let r = &got.records[0];
        assert_eq!((r.topic(), r.partition(), r.timestamp()), ("t", 2, 1_001));
        assert_eq!(r.timestamp_type(), TimestampType::CreateTime);
        assert_eq!(
            r.headers().iter().next().map(|h| (h.key(), h.value())),
            Some(("h", None))
        );
    }

    #[test]
    fn every_codec_decodes() {
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let data = encode(
                &(0..3).map(|o| record(o, "payload")).collect::<Vec<_>>(),
                compression,
            );
            let got = extract_alone(Some(data), &[range(0, 2, 1)]);
            assert_eq!(got.records.len(), 3, "{compression:?}: {:?}", got.errors);
            let compressed = usize::from(compression != Compression::None);
            assert_eq!(got.decompressed_batches, compressed, "{compression:?}");
        }
    }

    #[test]
    fn acquired_offsets_without_data_are_gaps_and_a_partial_batch_is_left_alone() {
        let mut first = encode(&[record(0, "a"), record(2, "c")], Compression::None).to_vec();
        let second = encode(&[record(3, "d"), record(4, "e")], Compression::None);
        first.extend_from_slice(&second[..second.len() - 5]); // truncated
        let got = extract_alone(Some(Bytes::from(first)), &[range(0, 4, 1)]);
        assert_eq!(offsets(&got), vec![0, 2]);
        assert_eq!(got.gaps, vec![r(1, 1)], "offset 1 has no record");
        assert_eq!(
            got.cut,
            vec![r(3, 4)],
            "3 and 4 were cut off: released, not gaps"
        );
    }

    #[test]
    fn a_corrupt_batch_rejects_its_acquired_offsets_and_never_panics() {
        let good = encode(&[record(0, "a"), record(1, "b")], Compression::None);
        let mut bad = good.to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 0xff; // breaks the CRC
        let got = extract_alone(Some(Bytes::from(bad)), &[range(0, 1, 1)]);
        assert!(got.records.is_empty());
        assert_eq!(got.corrupt, vec![r(0, 1)]);
        assert_eq!(got.errors.len(), 1);

        // Every prefix and a huge record count: no panic, no huge allocation.
        for cut in 0..good.len() {
            let _ = extract_alone(Some(good.slice(..cut)), &[range(0, 1, 1)]);
        }
        let mut huge = good.to_vec();
        huge[RECORDS_COUNT_AT..RECORDS_COUNT_AT + 4].copy_from_slice(&i32::MAX.to_be_bytes());
        let got = extract_alone(Some(Bytes::from(huge)), &[range(0, 1, 1)]);
        assert_eq!(got.corrupt, vec![r(0, 1)]);
    }

    #[test]
    fn acquired_offsets_past_the_data_are_released_not_gaps() {
        let data = encode(&[record(0, "a")], Compression::None);
        let got = extract_alone(Some(data), &[range(0, 2, 1)]);
        assert_eq!(got.records.len(), 1);
        assert!(got.gaps.is_empty(), "{:?}", got.gaps);
        assert_eq!(got.cut, vec![r(1, 2)]);
        let got = extract_alone(None, &[range(5, 6, 1)]);
        assert_eq!((got.gaps.len(), got.cut.clone()), (0, vec![r(5, 6)]));
    }

    /// Regression: `[0, i64::MAX]` was expanded offset by offset until the allocator aborted.
    #[test]
    fn the_whole_offset_space_stays_one_range() {
        use record_batch::Compression::None as Plain;
        let got = extract_alone(Some(batch(0, 3, Plain)), &[range(0, i64::MAX, 2)]);
        assert_eq!(offsets(&got), vec![0, 1, 2]);
        assert!(got.records.iter().all(|r| r.delivery_count() == 2));
        assert_eq!(got.cut, vec![r(3, i64::MAX)]);
        assert!(got.gaps.is_empty() && got.corrupt.is_empty());

        // Data at the very end of the offset space: arithmetic there is checked.
        let end = batch(i64::MAX - 2, 3, Plain);
        let got = extract_alone(Some(end.clone()), &[range(0, i64::MAX, 1)]);
        assert_eq!(offsets(&got), vec![i64::MAX - 2, i64::MAX - 1, i64::MAX]);
        assert_eq!(got.gaps, vec![r(0, i64::MAX - 3)], "before the first batch");
        assert!(got.cut.is_empty());
        let got = extract_alone(
            Some(end),
            &[
                range(i64::MAX, i64::MAX, 1),
                range(i64::MAX - 2, i64::MAX - 2, 1),
            ],
        );
        assert_eq!(offsets(&got), vec![i64::MAX - 2, i64::MAX]);
        // A batch at i64::MAX whose delta points past it.
        let past = set_last_offset_delta(&batch(i64::MAX, 1, Plain), i32::MAX, true);
        let got = extract_alone(Some(past.into()), &[range(i64::MAX - 1, i64::MAX, 1)]);
        assert_eq!(offsets(&got), vec![i64::MAX]);
        assert_eq!(got.gaps, vec![r(i64::MAX - 1, i64::MAX - 1)]);
    }

    /// Regression: 30M acquired offsets without data cost one list entry each.
    #[test]
    fn thirty_million_offsets_without_data_are_one_released_range() {
        let got = extract_alone(None, &[range(0, 30_000_000, 1)]);
        assert_eq!(got.cut, vec![r(0, 30_000_000)]);
        assert!(got.records.is_empty() && got.gaps.is_empty() && got.corrupt.is_empty());
        let data = batch(0, 1, record_batch::Compression::None);
        let got = extract_alone(Some(data), &[range(0, 30_000_000, 1)]);
        assert_eq!(offsets(&got), vec![0]);
        assert_eq!(got.cut, vec![r(1, 30_000_000)]);
    }

    /// Regression: a corrupt header claiming `lastOffsetDelta = i32::MAX` had every acquired
    /// offset of its 2^31 rejected one by one.
    #[test]
    fn a_corrupt_batch_claiming_two_billion_offsets_is_one_rejected_range() {
        use record_batch::Compression::None as Plain;
        let corrupt = set_last_offset_delta(&batch(0, 2, Plain), i32::MAX, false);
        let acquired = [range(0, 5_000_000_000, 1)];
        let got = extract_alone(Some(corrupt.clone().into()), &acquired);
        assert!(got.records.is_empty());
        let end = i64::from(i32::MAX);
        assert_eq!(got.corrupt, vec![r(0, end)]);
        assert_eq!(got.cut, vec![r(end + 1, 5_000_000_000)]);
        assert_eq!(got.errors.len(), 1);

        // It does not swallow the good batch after it: its claim ends where that one starts.
        let mut data = corrupt;
        data.extend_from_slice(&batch(10, 3, Plain));
        let got = extract_alone(Some(data.into()), &acquired);
        assert_eq!(got.corrupt, vec![r(0, 9)]);
        assert_eq!(offsets(&got), vec![10, 11, 12]);
        assert_eq!(got.cut, vec![r(13, 5_000_000_000)]);

        // The same claim with a valid checksum is a batch compacted down to two records.
        let claim = set_last_offset_delta(&batch(0, 2, Plain), i32::MAX, true);
        let got = extract_alone(Some(claim.into()), &acquired);
        assert_eq!(offsets(&got), vec![0, 1]);
        assert_eq!(got.gaps, vec![r(2, end)]);
        assert_eq!(got.cut, vec![r(end + 1, 5_000_000_000)]);
    }

    #[test]
    fn a_corrupt_batch_out_of_place_neither_hides_good_batches_nor_turns_offsets_into_gaps() {
        use record_batch::Compression::None as Plain;
        // A flipped baseOffset (not covered by the checksum) and a flipped payload byte.
        let mut corrupt = batch(1_000, 2, Plain).to_vec();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 0xff;
        let data = [&batch(0, 3, Plain)[..], &corrupt, &batch(3, 3, Plain)].concat();
        let got = extract_alone(Some(data.into()), &[range(0, 2_000, 1)]);
        assert_eq!(offsets(&got), vec![0, 1, 2, 3, 4, 5]);
        assert!(got.gaps.is_empty(), "{:?}", got.gaps);
        assert_eq!(got.corrupt, vec![r(1_000, 1_001)]);
        assert_eq!(got.cut, vec![r(6, 999), r(1_002, 2_000)]);
    }

    /// Regression: the delivery count of each record was found by scanning the acquired
    /// ranges, so 160k single-offset ranges × 10k records were 10^9 steps.
    #[test]
    fn many_single_offset_ranges_and_records_are_matched_in_one_walk() {
        let dc = |o: i64| 1 + u16::try_from(o % 3).unwrap();
        let acquired: Vec<AcquiredRange> = (0..160_000).map(|o| range(o, o, dc(o))).collect();
        let mut data = Vec::new();
        for i in 0..10 {
            data.extend_from_slice(&batch(
                150_000 + i * 1_000,
                1_000,
                record_batch::Compression::None,
            ));
        }
        let got = extract_alone(Some(data.into()), &acquired);
        assert_eq!(got.records.len(), 10_000);
        for (record, offset) in got.records.iter().zip(150_000..) {
            assert_eq!(
                (record.offset(), record.delivery_count()),
                (offset, dc(offset))
            );
            assert_eq!(record.value().unwrap(), offset.to_string().as_bytes());
        }
        // 150k single-offset ranges before the data, one gap range.
        assert_eq!(got.gaps, vec![r(0, 149_999)]);
        assert!(got.cut.is_empty() && got.corrupt.is_empty());
    }

    /// 24 tiny zstd batches, each inflating to just under 64 MiB, at offsets 0..24.
    fn zstd_bombs() -> Bytes {
        let big = NewRecord {
            value: Some(Bytes::from(vec![0u8; MAX_DECOMPRESSED_BATCH - 64])),
            ..NewRecord::default()
        };
        let one = encode_batch(
            std::slice::from_ref(&big),
            &EncodeOptions {
                compression: record_batch::Compression::Zstd,
                ..EncodeOptions::default()
            },
        );
        assert!(one.len() < 10_000, "{}", one.len());
        let mut data = Vec::new();
        for base in 0..24i64 {
            // baseOffset is not covered by the checksum.
            data.extend_from_slice(&base.to_be_bytes());
            data.extend_from_slice(&one[8..]);
        }
        data.into()
    }

    /// Regression: every batch of an answer was decompressed, acquired or not: 1.5 GB for one
    /// acquired record.
    #[test]
    fn only_batches_holding_acquired_offsets_are_decompressed_within_the_budget() {
        let topic = TopicName::interned("t");
        let data = zstd_bombs();
        let mut budget = DecodeBudget::new(FETCH_MAX_BYTES);
        let got = extract(
            &topic,
            0,
            Some(data.clone()),
            &[range(17, 17, 1)],
            &mut budget,
        );
        assert_eq!(offsets(&got), vec![17]);
        assert_eq!(
            got.records[0].value().map(Bytes::len),
            Some(MAX_DECOMPRESSED_BATCH - 64)
        );
        assert_eq!(got.decompressed_batches, 1);
        assert_eq!(budget.batches_decompressed(), 1);
        assert!(got.cut.is_empty() && got.gaps.is_empty() && got.corrupt.is_empty());
        assert_eq!(budget.left(), 0, "64 MiB spent the 50 MiB budget");

        // All 24 acquired: the first batch always decodes, the rest come back later.
        let mut budget = DecodeBudget::new(FETCH_MAX_BYTES);
        let got = extract(
            &topic,
            0,
            Some(data.clone()),
            &[range(0, 23, 1)],
            &mut budget,
        );
        assert_eq!(offsets(&got), vec![0]);
        assert_eq!(got.cut, vec![r(1, 23)], "released, not rejected");
        assert!(got.corrupt.is_empty() && got.errors.is_empty());
        assert_eq!((got.decompressed_batches, got.over_budget_batches), (1, 23));
        // The budget is the answer's: the next partition gets nothing decompressed.
        let got = extract(&topic, 1, Some(data), &[range(3, 3, 1)], &mut budget);
        assert_eq!(got.cut, vec![r(3, 3)]);
        assert_eq!((got.decompressed_batches, got.over_budget_batches), (0, 1));
        assert_eq!(budget.batches_decompressed(), 1);
    }

    #[test]
    fn a_batch_beyond_the_budget_is_released_and_spends_it() {
        use record_batch::Compression::{Gzip, None as Plain};
        // Each gzip batch decompresses to some 600 bytes.
        let big = |base: i64, compression| {
            let records = [NewRecord {
                value: Some(Bytes::from(vec![b'x'; 580])),
                ..NewRecord::default()
            }];
            let options = EncodeOptions {
                base_offset: base,
                compression,
                ..EncodeOptions::default()
            };
            encode_batch(&records, &options)
        };
        let data: Bytes = [big(0, Gzip), big(1, Gzip), big(2, Plain), big(3, Gzip)]
            .concat()
            .into();
        let topic = TopicName::interned("t");
        let mut budget = DecodeBudget::new(1_000);
        let got = extract(&topic, 0, Some(data), &[range(0, 3, 1)], &mut budget);
        // 0 fits; 1 does not fit in what is left and spends it; 2 is uncompressed and costs
        // nothing; 3 finds nothing left.
        assert_eq!(offsets(&got), vec![0, 2]);
        assert_eq!(got.cut, vec![r(1, 1), r(3, 3)]);
        assert!(got.corrupt.is_empty() && got.gaps.is_empty());
        assert_eq!((got.decompressed_batches, got.over_budget_batches), (2, 2));
        assert_eq!(budget.left(), 0);
    }

    /// A frame of nothing but corrupt 12-byte batches (a base offset and a zero length each):
    /// every acquired offset rejected, but only the first reasons kept for the log, the rest
    /// counted.
    #[test]
    fn reasons_for_corrupt_batches_are_kept_up_to_a_few_and_counted_after() {
        let mut data = Vec::new();
        for base in 0..20i64 {
            data.extend_from_slice(&base.to_be_bytes());
            data.extend_from_slice(&0i32.to_be_bytes());
        }
        let topic = TopicName::interned("t");
        let got = extract(
            &topic,
            0,
            Some(Bytes::from(data)),
            &[range(0, 19, 1)],
            &mut DecodeBudget::new(1 << 20),
        );
        assert!(got.records.is_empty());
        assert_eq!(got.errors.len(), MAX_ERRORS_KEPT);
        assert_eq!(got.errors.len() + got.more_errors, 20);
        let rejected: i64 = got.corrupt.iter().map(|c| c.last() - c.first() + 1).sum();
        assert_eq!(rejected, 20, "{:?}", got.corrupt);
    }

    #[test]
    fn the_first_batch_of_an_answer_decodes_even_without_budget_and_a_bomb_is_rejected() {
        let topic = TopicName::interned("t");
        let data = batch(0, 3, record_batch::Compression::Lz4);
        let got = extract(
            &topic,
            0,
            Some(data),
            &[range(0, 2, 1)],
            &mut DecodeBudget::new(0),
        );
        assert_eq!(offsets(&got), vec![0, 1, 2]);
        // A batch beyond its own 64 MiB cap is corrupt, whatever the budget.
        let bomb = zstd::bulk::compress(&vec![0u8; MAX_DECOMPRESSED_BATCH + 1], 1).unwrap();
        let template = batch(5, 1, record_batch::Compression::Zstd);
        let mut bad = template[..61].to_vec();
        bad.extend_from_slice(&bomb);
        let length = i32::try_from(bad.len() - 12).unwrap();
        bad[8..12].copy_from_slice(&length.to_be_bytes());
        let crc = crc32c::crc32c(&bad[ATTRIBUTES_AT..]);
        bad[CRC_AT..ATTRIBUTES_AT].copy_from_slice(&crc.to_be_bytes());
        let mut budget = DecodeBudget::new(usize::MAX);
        let got = extract(&topic, 0, Some(bad.into()), &[range(5, 5, 1)], &mut budget);
        assert_eq!(got.corrupt, vec![r(5, 5)]);
        assert_eq!(got.errors.len(), 1);
        assert!(budget.left() < usize::MAX, "what it allocated was charged");
    }

    #[test]
    fn control_batches_are_gaps_without_being_decompressed() {
        let marker = encode_batch(
            &[NewRecord::default()],
            &EncodeOptions {
                base_offset: 3,
                compression: record_batch::Compression::Zstd,
                producer_id: 1,
                producer_epoch: 0,
                transactional: true,
                control: true,
                ..EncodeOptions::default()
            },
        );
        let mut data = batch(0, 3, record_batch::Compression::None).to_vec();
        data.extend_from_slice(&marker);
        data.extend_from_slice(&batch(4, 1, record_batch::Compression::None));
        let got = extract_alone(Some(data.into()), &[range(1, 4, 1)]);
        assert_eq!(offsets(&got), vec![1, 2, 4]);
        assert_eq!(got.gaps, vec![r(3, 3)]);
        assert_eq!(got.decompressed_batches, 0);
    }

    #[test]
    fn hostile_acquired_ranges_are_validated_deterministically() {
        let data = batch(0, 12, record_batch::Compression::None);
        let acquired = [
            range(5, 9, 2),
            range(0, 6, 1),
            range(0, 3, 7),   // claimed by the one before, earlier in the answer
            range(-5, -1, 1), // negative: dropped
            range(8, 2, 1),   // first > last: dropped
            range(-3, 1, 4),  // starts lowest: owns 0 and 1
            range(9, 9, 5),   // a duplicate offset
        ];
        let got = extract_alone(Some(data), &acquired);
        let seen: Vec<(i64, u16)> = got
            .records
            .iter()
            .map(|r| (r.offset(), r.delivery_count()))
            .collect();
        assert_eq!(
            seen,
            vec![
                (0, 4),
                (1, 4),
                (2, 1),
                (3, 1),
                (4, 1),
                (5, 1),
                (6, 1),
                (7, 2),
                (8, 2),
                (9, 2)
            ]
        );
        assert!(got.gaps.is_empty() && got.cut.is_empty() && got.corrupt.is_empty());
        // The order the ranges come in only matters for ties: reversed, [0, 3] comes before
        // [0, 6] and owns 2 and 3.
        let mut reversed = acquired;
        reversed.reverse();
        let again = extract_alone(
            Some(batch(0, 12, record_batch::Compression::None)),
            &reversed,
        );
        let dcs: Vec<u16> = again.records.iter().map(|r| r.delivery_count()).collect();
        assert_eq!(dcs, vec![4, 4, 7, 7, 1, 1, 1, 2, 2, 2]);
    }

    #[test]
    fn hostile_batches_deliver_each_offset_once_in_order() {
        // Records out of order within a batch: the batch is corrupt (no broker writes one),
        // its acquired offsets rejected with the reason logged, not some of them taken for
        // gaps unseen.
        let data = encode(
            &[record(5, "5"), record(3, "3"), record(4, "4")],
            Compression::None,
        );
        let got = extract_alone(Some(data), &[range(3, 5, 1)]);
        assert_eq!(offsets(&got), Vec::<i64>::new());
        assert_eq!(got.corrupt, vec![r(3, 5)]);
        assert!(got.gaps.is_empty());
        assert!(
            got.errors[0].contains("offsets do not increase"),
            "{:?}",
            got.errors
        );

        // A batch sent twice: delivered once.
        let twice = batch(0, 5, record_batch::Compression::None);
        let data = [twice.clone(), twice].concat();
        let got = extract_alone(Some(data.into()), &[range(0, 4, 1)]);
        assert_eq!(offsets(&got), vec![0, 1, 2, 3, 4]);

        // Overlapping batches: the earlier one speaks up to where the next starts.
        let first = encode(
            &(0..5).map(|o| record(o, "first")).collect::<Vec<_>>(),
            Compression::None,
        );
        let second = encode(
            &(2..7).map(|o| record(o, "second")).collect::<Vec<_>>(),
            Compression::None,
        );
        let data = [first, second].concat();
        let got = extract_alone(Some(data.into()), &[range(0, 6, 1)]);
        let values: Vec<&[u8]> = got
            .records
            .iter()
            .map(|r| r.value().unwrap().as_ref())
            .collect();
        assert_eq!(offsets(&got), vec![0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(&values[1..3], &[&b"first"[..], b"second"]);
    }

    // ---- property: every acquired offset ends in exactly one place ----

    /// Offsets the generators pick: mostly small, some at the ends of the offset space.
    fn arb_offset() -> impl Strategy<Value = i64> {
        prop_oneof![
            8 => -5..80i64,
            2 => (i64::MAX - 300)..=i64::MAX,
            1 => Just(i64::MIN),
            1 => any::<i64>(),
        ]
    }

    fn arb_acquired() -> impl Strategy<Value = Vec<AcquiredRange>> {
        let one = prop_oneof![
            (arb_offset(), arb_offset()),
            (arb_offset(), 0..20i64).prop_map(|(a, n)| (a, a.saturating_add(n))),
            (arb_offset(), Just(i64::MAX)),
        ];
        proptest::collection::vec((one, 1..4u16), 0..10).prop_map(|ranges| {
            ranges
                .into_iter()
                .map(|((first, last), dc)| range(first, last, dc))
                .collect()
        })
    }

    /// What may be wrong with a batch.
    #[derive(Debug, Clone, Copy)]
    enum Damage {
        None,
        /// A flipped payload byte: the checksum fails.
        Crc,
        /// `lastOffsetDelta` set, checksum recomputed (or not).
        Delta(i32, bool),
    }

    #[derive(Debug, Clone)]
    struct BatchSpec {
        base: i64,
        /// Offsets after `base` holding a record: sorted, distinct, not empty.
        deltas: Vec<u8>,
        codec: i16,
        control: bool,
        damage: Damage,
    }

    fn arb_batch(base: impl Strategy<Value = i64>) -> impl Strategy<Value = BatchSpec> {
        (
            base,
            proptest::collection::btree_set(0..12u8, 1..6),
            0..5i16,
            proptest::bool::weighted(0.15),
            prop_oneof![
                6 => Just(Damage::None),
                1 => Just(Damage::Crc),
                1 => (prop_oneof![Just(i32::MAX), Just(-1), 0..30i32], any::<bool>())
                    .prop_map(|(delta, crc)| Damage::Delta(delta, crc)),
            ],
        )
            .prop_map(|(base, deltas, codec, control, damage)| BatchSpec {
                base,
                deltas: deltas.into_iter().collect(),
                codec,
                control,
                damage,
            })
    }

    fn kp_compression(codec: i16) -> Compression {
        match codec {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            _ => Compression::Zstd,
        }
    }

    /// The batch of `spec`, each record valued with its offset.
    fn encode_spec(spec: &BatchSpec) -> Vec<u8> {
        let records: Vec<Record> = spec
            .deltas
            .iter()
            .map(|&d| {
                let offset = spec.base + i64::from(d);
                let mut rec = record(0, &offset.to_string());
                rec.offset = offset;
                rec.sequence = i32::from(d);
                rec.control = spec.control;
                rec
            })
            .collect();
        let mut out = encode(&records, kp_compression(spec.codec)).to_vec();
        match spec.damage {
            Damage::None => {}
            Damage::Crc => {
                let last = out.len() - 1;
                out[last] ^= 0x55;
            }
            Damage::Delta(delta, crc) => out = set_last_offset_delta(&out, delta, crc),
        }
        out
    }

    /// The acquired offsets as a set of ranges, computed independently of `normalize`.
    fn union_of(acquired: &[AcquiredRange]) -> Vec<OffsetRange> {
        let mut ranges: Vec<OffsetRange> = acquired
            .iter()
            .filter_map(|a| OffsetRange::new(a.first.max(0), a.last))
            .collect();
        ranges.sort();
        let mut out = Vec::new();
        for range in ranges {
            push_coalesced(&mut out, range);
        }
        out
    }

    /// The delivery count the module documents: the range with the lowest `first` wins, the
    /// earlier one on a tie.
    fn delivery_count_of(acquired: &[AcquiredRange], offset: i64) -> Option<u16> {
        acquired
            .iter()
            .enumerate()
            .filter(|(_, a)| a.first <= offset && offset <= a.last)
            .min_by_key(|(i, a)| (a.first, *i))
            .map(|(_, a)| a.delivery_count)
    }

    fn assert_coalesced(list: &[OffsetRange]) -> Result<(), TestCaseError> {
        for pair in list.windows(2) {
            prop_assert!(
                pair[0].after().is_some_and(|after| after < pair[1].first()),
                "not sorted and coalesced: {:?}",
                list
            );
        }
        Ok(())
    }

    /// Every acquired offset is in exactly one of records, gaps, corrupt and cut, and nothing
    /// else is; the lists are sorted and coalesced; records are in order, with the documented
    /// delivery count and their own value.
    fn check_partition(acquired: &[AcquiredRange], got: &Extracted) -> Result<(), TestCaseError> {
        for list in [&got.gaps, &got.corrupt, &got.cut] {
            assert_coalesced(list)?;
        }
        let mut all: Vec<OffsetRange> = Vec::new();
        let mut previous: Option<i64> = None;
        for record in &got.records {
            let offset = record.offset();
            prop_assert!(previous.is_none_or(|p| p < offset), "records out of order");
            previous = Some(offset);
            prop_assert_eq!(
                Some(record.delivery_count()),
                delivery_count_of(acquired, offset)
            );
            prop_assert_eq!(
                record.value().map(|v| v.to_vec()),
                Some(offset.to_string().into_bytes())
            );
            all.push(OffsetRange::new(offset, offset).unwrap());
        }
        all.extend(got.gaps.iter().chain(&got.corrupt).chain(&got.cut));
        all.sort();
        for pair in all.windows(2) {
            prop_assert!(pair[0].last() < pair[1].first(), "{:?} twice", pair);
        }
        let mut covered = Vec::new();
        for range in all {
            push_coalesced(&mut covered, range);
        }
        prop_assert_eq!(covered, union_of(acquired));
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Any acquired ranges (huge, overlapping, negative, empty) against any batches
        /// (overlapping, out of order, corrupt, at the end of the offset space, cut short),
        /// within any budget.
        #[test]
        fn every_acquired_offset_ends_in_exactly_one_place(
            acquired in arb_acquired(),
            specs in proptest::collection::vec(
                arb_batch(prop_oneof![
                    6 => -5..70i64,
                    1 => (i64::MAX - 300)..=(i64::MAX - 40),
                ]),
                0..6,
            ),
            cut in proptest::option::weighted(0.2, any::<proptest::sample::Index>()),
            budget in prop_oneof![Just(usize::MAX), 0..3_000usize],
        ) {
            let mut data: Vec<u8> = specs.iter().flat_map(encode_spec).collect();
            if let Some(cut) = cut {
                data.truncate(cut.index(data.len() + 1));
            }
            let topic = TopicName::interned("t");
            let mut budget = DecodeBudget::new(budget);
            let got = extract(&topic, 0, Some(data.into()), &acquired, &mut budget);
            check_partition(&acquired, &got)?;
        }

        /// Honest batches (in order, apart, whole, sound) and an unlimited budget: each
        /// acquired offset is exactly where the Java client would put it.
        #[test]
        fn honest_batches_are_classified_exactly(
            acquired in arb_acquired(),
            specs in proptest::collection::vec(arb_batch(0..6i64), 0..6),
            limited in proptest::option::of(0..3_000usize),
        ) {
            // Lay the batches out one after another, 0 to 5 offsets apart.
            let mut next = 0i64;
            let mut data = Vec::new();
            // Offset -> Some(true) record, Some(false) gap, up to the last batch.
            let mut expected: Vec<bool> = Vec::new();
            let mut uncompressed: Vec<i64> = Vec::new();
            for spec in &specs {
                let mut spec = spec.clone();
                spec.base += next;
                spec.damage = Damage::None;
                data.extend_from_slice(&encode_spec(&spec));
                let last = spec.base + i64::from(*spec.deltas.last().unwrap());
                expected.resize(usize::try_from(last + 1).unwrap(), false);
                for &d in &spec.deltas {
                    let offset = spec.base + i64::from(d);
                    expected[usize::try_from(offset).unwrap()] = !spec.control;
                    if spec.codec == 0 && !spec.control {
                        uncompressed.push(offset);
                    }
                }
                next = last + 1;
            }
            let acquired_at = |o: i64| delivery_count_of(&acquired, o).is_some() && o >= 0;
            let mut records = Vec::new();
            let mut gaps = Vec::new();
            for (offset, is_record) in (0i64..).zip(&expected) {
                if !acquired_at(offset) {
                    continue;
                }
                if *is_record {
                    records.push(offset);
                } else {
                    push_coalesced(&mut gaps, OffsetRange::new(offset, offset).unwrap());
                }
            }
            let tail = OffsetRange::new(next, i64::MAX).unwrap();
            let cut: Vec<OffsetRange> = union_of(&acquired)
                .into_iter()
                .filter_map(|a| a.intersection(tail))
                .collect();

            let topic = TopicName::interned("t");
            let mut budget = DecodeBudget::new(limited.unwrap_or(usize::MAX));
            let got = extract(&topic, 0, Some(data.into()), &acquired, &mut budget);
            check_partition(&acquired, &got)?;
            prop_assert!(got.corrupt.is_empty() && got.errors.is_empty(), "{:?}", got.errors);
            if limited.is_none() {
                prop_assert_eq!(offsets(&got), records);
                prop_assert_eq!(&got.gaps, &gaps);
                prop_assert_eq!(&got.cut, &cut);
                prop_assert_eq!(got.over_budget_batches, 0);
            } else {
                // Within a budget, compressed batches may be released instead (their records
                // and gaps alike), and nothing else changes.
                let got_records = offsets(&got);
                for offset in uncompressed.iter().filter(|o| acquired_at(**o)) {
                    prop_assert!(got_records.contains(offset), "{} not delivered", offset);
                }
                prop_assert!(got_records.iter().all(|o| records.contains(o)));
                let within = |part: &OffsetRange, of: &[OffsetRange]| {
                    of.iter().any(|r| r.first() <= part.first() && part.last() <= r.last())
                };
                prop_assert!(got.gaps.iter().all(|g| within(g, &gaps)), "{:?}", got.gaps);
                prop_assert!(cut.iter().all(|c| within(c, &got.cut)), "{:?}", got.cut);
            }
        }
    }
}
