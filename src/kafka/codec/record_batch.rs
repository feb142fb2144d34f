//! Kafka record batches (magic v2): a decoder and an encoder of our own.
//!
//! kafka-protocol's `RecordBatchDecoder` keeps headers in an `IndexMap`, so repeated header keys,
//! which Kafka allows, collapse into one (its encoder too), and it reserves the `recordsCount` of
//! the wire up front, so a small corrupt frame can make it allocate gigabytes. This codec keeps
//! headers as a list, in order and with duplicates, and bounds every allocation by the bytes it
//! was given: capacities are capped by what the remaining input could hold, and one batch may
//! decompress to at most [`MAX_DECOMPRESSED_BATCH`] bytes.
//!
//! Decoding has two steps, so a caller can skip batches it does not need before paying for them:
//! [`scan_batches`] frames the batches and checks each header and checksum, and
//! [`RawBatch::decode_within`] decompresses and parses the records of one batch, within a limit
//! the caller chooses, reporting what the decompression allocated. [`decode_batches`] does both
//! for every batch.
//!
//! A v2 batch, big-endian, at byte offsets from its start:
//!
//! ```text
//!  0 baseOffset i64       8 batchLength i32      12 partitionLeaderEpoch i32
//! 16 magic i8 (= 2)      17 crc u32: CRC32C of the bytes from attributes to the end
//! 21 attributes i16      23 lastOffsetDelta i32  27 baseTimestamp i64
//! 35 maxTimestamp i64    43 producerId i64       51 producerEpoch i16
//! 53 baseSequence i32    57 recordsCount i32     61 records, compressed per attributes bits 0-2
//! ```
//!
//! and a record: varint length, i8 attributes, varlong timestampDelta, varint offsetDelta, varint
//! key length (-1: null) and key, varint value length (-1: null) and value, varint header count,
//! and per header a varint key length and UTF-8 key, a varint value length (-1: null) and value.
//! Varints are zigzag-encoded, as in protobuf.

#![allow(
    dead_code,
    reason = "wired into records.rs and a producer separately; the tests use all of it"
)]

use std::io::{self, Read, Write};
use std::sync::Arc;

use bytes::{BufMut, Bytes};

use crate::kafka::net::frame_pool::FramePool;

/// Most bytes one batch may decompress to; a batch that would grow beyond is an error. Brokers
/// cap a batch at `message.max.bytes` (1 MiB by default) as written, so honest batches stay far
/// below unless they compress better than 64:1.
pub(crate) const MAX_DECOMPRESSED_BATCH: usize = 64 * 1024 * 1024;

/// `timestamp` of a record, or `baseTimestamp`/`maxTimestamp` of a batch, when there is none.
pub(crate) const NO_TIMESTAMP: i64 = -1;

/// `baseOffset` + `batchLength`.
const LENGTH_PREFIX: usize = 12;
/// Size of a v2 batch header, length prefix included.
const BATCH_HEADER: usize = 61;
const BATCH_LENGTH_AT: usize = 8;
const PARTITION_LEADER_EPOCH_AT: usize = 12;
const MAGIC_AT: usize = 16;
const CRC_AT: usize = 17;
const ATTRIBUTES_AT: usize = 21;
const LAST_OFFSET_DELTA_AT: usize = 23;
const BASE_TIMESTAMP_AT: usize = 27;
const MAX_TIMESTAMP_AT: usize = 35;
const PRODUCER_ID_AT: usize = 43;
const PRODUCER_EPOCH_AT: usize = 51;
const BASE_SEQUENCE_AT: usize = 53;
const RECORDS_COUNT_AT: usize = 57;

const MAGIC_V2: i8 = 2;

const COMPRESSION_MASK: i16 = 0x07;
const LOG_APPEND_TIME_FLAG: i16 = 0x08;
const TRANSACTIONAL_FLAG: i16 = 0x10;
const CONTROL_FLAG: i16 = 0x20;

/// The smallest record: one byte each for length, attributes, timestampDelta, offsetDelta, key
/// length, value length and header count.
const MIN_RECORD_SIZE: usize = 7;
/// The smallest header: one byte each for key length and value length.
const MIN_HEADER_SIZE: usize = 2;
/// Initial capacity caps: the byte bounds above keep a corrupt count from reserving more than the
/// input holds, these keep it from reserving more than a few pages before records really parse.
const MAX_INITIAL_RECORDS: usize = 4096;
const MAX_INITIAL_HEADERS: usize = 64;

/// Stream header of snappy-java's framing (`SnappyOutputStream`), which the Java client writes:
/// this magic, then a big-endian i32 version and minimum compatible version (both 1), then blocks
/// of a big-endian i32 length and that many bytes of raw snappy.
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_LEN: usize = 16;
/// snappy-java's default block size, which the Java client uses.
const XERIAL_BLOCK: usize = 32 * 1024;
/// No raw snappy element expands more than 64 output bytes from 3 input bytes, so a stream that
/// claims more than this many times its size is corrupt, and is refused before allocating.
const SNAPPY_MAX_EXPANSION: usize = 22;
/// Kafka's default `compression.zstd.level`.
const ZSTD_LEVEL: i32 = 3;

/// The codec of a batch's records, attributes bits 0-2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Compression {
    /// Uncompressed (0).
    #[default]
    None,
    /// gzip (1).
    Gzip,
    /// snappy (2): snappy-java's framing, or raw snappy as librdkafka writes it.
    Snappy,
    /// LZ4 frame format (3).
    Lz4,
    /// zstd (4).
    Zstd,
}

impl Compression {
    /// The codec id in attributes bits 0-2.
    pub(crate) const fn id(self) -> i16 {
        match self {
            Self::None => 0,
            Self::Gzip => 1,
            Self::Snappy => 2,
            Self::Lz4 => 3,
            Self::Zstd => 4,
        }
    }

    /// The codec with this id, if Kafka defines it.
    pub(crate) const fn from_id(id: i16) -> Option<Self> {
        match id {
            0 => Some(Self::None),
            1 => Some(Self::Gzip),
            2 => Some(Self::Snappy),
            3 => Some(Self::Lz4),
            4 => Some(Self::Zstd),
            _ => None,
        }
    }
}

/// What the timestamps of a batch mean, attributes bit 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum TimestampType {
    /// Set by the producer: each record's is `baseTimestamp + timestampDelta`.
    #[default]
    CreateTime,
    /// Set by the broker: every record's is the batch's `maxTimestamp`.
    LogAppendTime,
}

/// One decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// Absolute offset: `baseOffset + offsetDelta`.
    pub(crate) offset: i64,
    /// Per the batch's [`TimestampType`]; [`NO_TIMESTAMP`] when the producer set none.
    pub(crate) timestamp: i64,
    /// `None` for a null key; a slice of the (decompressed) batch.
    pub(crate) key: Option<Bytes>,
    /// `None` for a null value (a tombstone); a slice of the (decompressed) batch.
    pub(crate) value: Option<Bytes>,
    /// Headers in wire order, repeated keys kept; `None` for a null value.
    pub(crate) headers: Vec<(String, Option<Bytes>)>,
}

/// One decoded batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordBatch {
    /// Offset of the first record the batch was written with.
    pub(crate) base_offset: i64,
    /// `baseOffset + lastOffsetDelta`: compaction may have removed records up to it, so it need
    /// not be the offset of the last record in [`records`](Self::records).
    pub(crate) last_offset: i64,
    /// Leader epoch the batch was appended in.
    pub(crate) partition_leader_epoch: i32,
    /// Codec the records were compressed with.
    pub(crate) compression: Compression,
    /// What the record timestamps mean.
    pub(crate) timestamp_type: TimestampType,
    /// Written by a transactional producer (attributes bit 4).
    pub(crate) transactional: bool,
    /// Holds control records (transaction markers; attributes bit 5), not application data.
    pub(crate) control: bool,
    /// `baseTimestamp` of the header.
    pub(crate) base_timestamp: i64,
    /// `maxTimestamp` of the header: the log append time under
    /// [`TimestampType::LogAppendTime`].
    pub(crate) max_timestamp: i64,
    /// -1 without an idempotent or transactional producer.
    pub(crate) producer_id: i64,
    /// -1 without an idempotent or transactional producer.
    pub(crate) producer_epoch: i16,
    /// Sequence of the first record, -1 without an idempotent producer.
    pub(crate) base_sequence: i32,
    /// The records, in wire order.
    pub(crate) records: Vec<Record>,
}

/// Why a batch could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BatchErrorKind {
    /// `batchLength` is negative, so nothing from this batch on can be framed.
    #[error("negative batch length {0}: nothing after it can be framed")]
    NegativeLength(i32),
    /// The batch is shorter than a v2 batch header.
    #[error("a batch of {0} bytes is shorter than a v2 batch header")]
    TooShort(usize),
    /// Not a v2 batch: v0/v1 message sets predate Kafka 0.11 and are not decoded.
    #[error("unsupported magic {0}: only v2 record batches are decoded")]
    UnsupportedMagic(i8),
    /// The content does not match its checksum.
    #[error("CRC32C mismatch: the header says {stored:#010x}, the content gives {computed:#010x}")]
    CrcMismatch {
        /// The `crc` field.
        stored: u32,
        /// The checksum of the content.
        computed: u32,
    },
    /// Attributes bits 0-2 name no codec.
    #[error("unknown compression codec {0}")]
    UnknownCompression(i16),
    /// The codec rejected the records.
    #[error("{compression:?} decompression failed: {reason}")]
    Decompression {
        /// The batch's codec.
        compression: Compression,
        /// What the codec said.
        reason: String,
    },
    /// The records decompress to more than the limit.
    #[error("{compression:?} records decompress to more than {limit} bytes")]
    DecompressedTooLarge {
        /// The batch's codec.
        compression: Compression,
        /// The limit, [`MAX_DECOMPRESSED_BATCH`].
        limit: usize,
    },
    /// `recordsCount` is more than the offsets the batch spans (`lastOffsetDelta + 1`).
    #[error(
        "record count {count} is more than the {} offsets the batch spans (lastOffsetDelta {last_offset_delta})",
        last_offset_delta.saturating_add(1).max(0)
    )]
    MoreRecordsThanOffsets {
        /// The `recordsCount` field.
        count: i32,
        /// The `lastOffsetDelta` field.
        last_offset_delta: i64,
    },
    /// `recordsCount` is negative or more than the records' bytes can hold.
    #[error("record count {count} cannot be held by {bytes} bytes of records")]
    ImplausibleRecordCount {
        /// The `recordsCount` field.
        count: i32,
        /// Size of the (decompressed) records.
        bytes: usize,
    },
    /// A record is truncated or malformed.
    #[error("record {index}: {reason}")]
    MalformedRecord {
        /// Position of the record in the batch, from 0.
        index: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Bytes follow the last record `recordsCount` declares (the Java client refuses these too).
    #[error("{0} bytes follow the last declared record")]
    TrailingBytes(usize),
}

/// A batch that could not be decoded, with the offsets it spans.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("batch at offsets {base_offset}..={last_offset}: {kind}")]
pub(crate) struct BatchError {
    /// `baseOffset` of the batch.
    pub(crate) base_offset: i64,
    /// `baseOffset + lastOffsetDelta` when the header holds it (a v2 header), else `baseOffset`.
    pub(crate) last_offset: i64,
    /// What is wrong.
    pub(crate) kind: BatchErrorKind,
}

/// What [`decode_batches`] found in a `Records` field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DecodedBatches {
    /// Every complete batch, in order, decoded or not.
    pub(crate) batches: Vec<Result<RecordBatch, BatchError>>,
    /// Set when the bytes end in a partial batch (a fetch response may cut its last batch
    /// short; the broker sends it whole next time): the offset from which records are missing.
    /// That is the partial batch's `baseOffset` when at least its 8 bytes arrived, else one past
    /// the last offset of the batch before it, else `i64::MIN` (nothing arrived whole).
    pub(crate) cut_from: Option<i64>,
}

/// A complete batch whose framing, v2 header, checksum and codec [`scan_batches`] checked; its
/// records are still as on the wire (compressed, perhaps), a slice of the input.
/// [`decode_within`](Self::decode_within) decompresses and parses them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawBatch {
    /// `baseOffset` of the batch (not covered by the checksum).
    pub(crate) base_offset: i64,
    /// `baseOffset + lastOffsetDelta`, saturating at `i64::MAX`; as in
    /// [`RecordBatch::last_offset`], records may have been compacted away up to it.
    pub(crate) last_offset: i64,
    /// Codec of the records.
    pub(crate) compression: Compression,
    /// Holds control records (attributes bit 5), not application data.
    pub(crate) control: bool,
    /// The whole batch, length prefix included.
    bytes: Bytes,
}

/// What [`scan_batches`] found in a `Records` field: [`DecodedBatches`] before the records are
/// decoded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ScannedBatches {
    /// Every complete batch, in order: checked, or why not.
    pub(crate) batches: Vec<Result<RawBatch, BatchError>>,
    /// As [`DecodedBatches::cut_from`].
    pub(crate) cut_from: Option<i64>,
}

/// What [`RawBatch::decode_within`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decoded {
    /// The batch, or why it could not be decoded.
    pub(crate) batch: Result<RecordBatch, BatchError>,
    /// Bytes the decompression allocated: the capacity of the buffer the records slice (which
    /// stays allocated as long as any of them is alive), or of the buffer dropped when
    /// decompression failed. Never more than the limit it was given. 0 for an uncompressed
    /// batch, whose records slice the input.
    pub(crate) decompressed: usize,
}

/// A record to encode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NewRecord {
    /// Create time, or [`NO_TIMESTAMP`].
    pub(crate) timestamp: i64,
    /// `None` for a null key.
    pub(crate) key: Option<Bytes>,
    /// `None` for a null value (a tombstone).
    pub(crate) value: Option<Bytes>,
    /// Headers in order; keys may repeat and values may be null.
    pub(crate) headers: Vec<(String, Option<Bytes>)>,
}

/// How [`encode_batch`] writes a batch. The default is what a plain (non-idempotent) producer
/// sends: base offset 0, no compression, no producer id, create time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EncodeOptions {
    /// Offset of the first record; the others follow one by one. Brokers assign offsets on
    /// append, so a producer leaves this at 0.
    pub(crate) base_offset: i64,
    /// Codec of the records.
    pub(crate) compression: Compression,
    /// -1 from a producer; the leader sets it on append.
    pub(crate) partition_leader_epoch: i32,
    /// -1 without an idempotent or transactional producer.
    pub(crate) producer_id: i64,
    /// -1 without an idempotent or transactional producer.
    pub(crate) producer_epoch: i16,
    /// Sequence of the first record, -1 without an idempotent producer.
    pub(crate) base_sequence: i32,
    /// Sets attributes bit 4.
    pub(crate) transactional: bool,
    /// Sets attributes bit 5: the records are control records.
    pub(crate) control: bool,
    /// Writes a log-append-time batch as a broker does (attributes bit 3, this as
    /// `maxTimestamp`); `None` for create time.
    pub(crate) log_append_time: Option<i64>,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        Self {
            base_offset: 0,
            compression: Compression::None,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            transactional: false,
            control: false,
            log_append_time: None,
        }
    }
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// Decodes every batch of a `Records` field (of a Fetch or ShareFetch response, say). Never
/// panics and never fails as a whole: a batch that cannot be decoded is an error entry, and the
/// batches after it are still decoded, unless its length is negative (then nothing after it can
/// be framed and decoding stops there).
pub(crate) fn decode_batches(buf: Bytes) -> DecodedBatches {
    decode_batches_with_limit(buf, MAX_DECOMPRESSED_BATCH)
}

/// [`decode_batches`] with another decompressed size limit per batch.
fn decode_batches_with_limit(buf: Bytes, limit: usize) -> DecodedBatches {
    let scanned = scan_batches(buf);
    DecodedBatches {
        batches: scanned
            .batches
            .into_iter()
            .map(|batch| batch.and_then(|raw| raw.decode_capped(limit, limit).batch))
            .collect(),
        cut_from: scanned.cut_from,
    }
}

/// Frames every batch of a `Records` field and checks its header, checksum and codec, without
/// decompressing or parsing any record: the work is one checksum pass over the input, and the
/// list holds one entry per complete batch (at least 12 bytes each). Never panics; as in
/// [`decode_batches`], a batch with a negative length ends the list.
pub(crate) fn scan_batches(mut buf: Bytes) -> ScannedBatches {
    let mut out = ScannedBatches::default();
    // One past the last offset of the last complete batch.
    let mut next_offset: Option<i64> = None;
    while !buf.is_empty() {
        if buf.len() < LENGTH_PREFIX {
            out.cut_from = Some(if buf.len() >= 8 {
                be_i64(&buf, 0)
            } else {
                next_offset.unwrap_or(i64::MIN)
            });
            break;
        }
        let base_offset = be_i64(&buf, 0);
        let length = be_i32(&buf, BATCH_LENGTH_AT);
        let Ok(length) = usize::try_from(length) else {
            out.batches.push(Err(BatchError {
                base_offset,
                last_offset: last_offset_of(&buf, base_offset),
                kind: BatchErrorKind::NegativeLength(length),
            }));
            break;
        };
        if buf.len() - LENGTH_PREFIX < length {
            out.cut_from = Some(base_offset);
            break;
        }
        let checked = check_batch(buf.split_to(LENGTH_PREFIX + length));
        let last_offset = match &checked {
            Ok(batch) => batch.last_offset,
            Err(error) => error.last_offset,
        };
        next_offset = Some(last_offset.saturating_add(1));
        out.batches.push(checked);
    }
    out
}

/// `baseOffset + lastOffsetDelta` if `batch` holds a v2 header up to `lastOffsetDelta`, else
/// `base_offset`.
fn last_offset_of(batch: &[u8], base_offset: i64) -> i64 {
    if batch.len() >= LAST_OFFSET_DELTA_AT + 4 && i8::from_be_bytes([batch[MAGIC_AT]]) == MAGIC_V2 {
        base_offset.saturating_add(i64::from(be_i32(batch, LAST_OFFSET_DELTA_AT)))
    } else {
        base_offset
    }
}

/// Checks the framing, header, checksum and codec of one complete batch, length prefix included.
fn check_batch(batch: Bytes) -> Result<RawBatch, BatchError> {
    let base_offset = be_i64(&batch, 0);
    let last_offset = last_offset_of(&batch, base_offset);
    let fail = |kind| BatchError {
        base_offset,
        last_offset,
        kind,
    };
    if batch.len() <= MAGIC_AT {
        return Err(fail(BatchErrorKind::TooShort(batch.len())));
    }
    let magic = i8::from_be_bytes([batch[MAGIC_AT]]);
    if magic != MAGIC_V2 {
        return Err(fail(BatchErrorKind::UnsupportedMagic(magic)));
    }
    if batch.len() < BATCH_HEADER {
        return Err(fail(BatchErrorKind::TooShort(batch.len())));
    }
    let stored = be_u32(&batch, CRC_AT);
    let computed = crc32c::crc32c(&batch[ATTRIBUTES_AT..]);
    if stored != computed {
        return Err(fail(BatchErrorKind::CrcMismatch { stored, computed }));
    }
    let attributes = be_i16(&batch, ATTRIBUTES_AT);
    let codec = attributes & COMPRESSION_MASK;
    let compression = Compression::from_id(codec)
        .ok_or_else(|| fail(BatchErrorKind::UnknownCompression(codec)))?;
    Ok(RawBatch {
        base_offset,
        last_offset,
        compression,
        control: attributes & CONTROL_FLAG != 0,
        bytes: batch,
    })
}

impl RawBatch {
    /// Decompresses (to at most `limit` bytes, and never more than [`MAX_DECOMPRESSED_BATCH`])
    /// and parses the records. A batch that would decompress to more fails with
    /// [`BatchErrorKind::DecompressedTooLarge`] naming the limit applied; every other error
    /// is what [`decode_batches`] would report for the batch. An uncompressed batch is not
    /// decompressed, so no limit applies to it: its records slice the input.
    pub(crate) fn decode_within(self, limit: usize) -> Decoded {
        self.decode_capped(MAX_DECOMPRESSED_BATCH, limit)
    }

    /// Decodes the records: `cap` is the most any batch may hold (a record count it could not
    /// hold is corrupt), `limit` the most this decompression may produce.
    fn decode_capped(self, cap: usize, limit: usize) -> Decoded {
        let Self {
            base_offset,
            last_offset,
            compression,
            control,
            bytes: batch,
        } = self;
        let fail = |kind| BatchError {
            base_offset,
            last_offset,
            kind,
        };
        let attributes = be_i16(&batch, ATTRIBUTES_AT);
        let timestamp_type = if attributes & LOG_APPEND_TIME_FLAG != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        };
        let base_timestamp = be_i64(&batch, BASE_TIMESTAMP_AT);
        let max_timestamp = be_i64(&batch, MAX_TIMESTAMP_AT);
        let count = be_i32(&batch, RECORDS_COUNT_AT);
        let payload = batch.slice(BATCH_HEADER..);
        // Refuse a count no payload within the cap could hold before decompressing anything.
        if compression != Compression::None && !count_fits(count, cap) {
            return Decoded {
                batch: Err(fail(BatchErrorKind::ImplausibleRecordCount {
                    count,
                    bytes: cap,
                })),
                decompressed: 0,
            };
        }
        let (data, decompressed) = decompress(compression, payload, limit.min(cap));
        let batch = data
            .and_then(|data| {
                decode_records(
                    &data,
                    count,
                    RecordBase {
                        offset: base_offset,
                        last_delta: i64::from(be_i32(&batch, LAST_OFFSET_DELTA_AT)),
                        timestamp: base_timestamp,
                        log_append_time: (timestamp_type == TimestampType::LogAppendTime)
                            .then_some(max_timestamp),
                    },
                )
            })
            .map_err(fail)
            .map(|records| RecordBatch {
                base_offset,
                last_offset,
                partition_leader_epoch: be_i32(&batch, PARTITION_LEADER_EPOCH_AT),
                compression,
                timestamp_type,
                transactional: attributes & TRANSACTIONAL_FLAG != 0,
                control,
                base_timestamp,
                max_timestamp,
                producer_id: be_i64(&batch, PRODUCER_ID_AT),
                producer_epoch: be_i16(&batch, PRODUCER_EPOCH_AT),
                base_sequence: be_i32(&batch, BASE_SEQUENCE_AT),
                records,
            });
        Decoded {
            batch,
            decompressed,
        }
    }
}

/// Whether `count` records of at least [`MIN_RECORD_SIZE`] bytes fit in `bytes`.
fn count_fits(count: i32, bytes: usize) -> bool {
    usize::try_from(count)
        .ok()
        .and_then(|count| count.checked_mul(MIN_RECORD_SIZE))
        .is_some_and(|needed| needed <= bytes)
}

/// What the deltas of a batch's records are relative to.
#[derive(Debug, Clone, Copy)]
struct RecordBase {
    offset: i64,
    /// `lastOffsetDelta`: every record's `offsetDelta` is within `0..=last_delta`.
    last_delta: i64,
    timestamp: i64,
    /// `maxTimestamp` of a log-append-time batch, every record's timestamp.
    log_append_time: Option<i64>,
}

fn decode_records(
    data: &Bytes,
    count: i32,
    base: RecordBase,
) -> Result<Vec<Record>, BatchErrorKind> {
    let implausible = BatchErrorKind::ImplausibleRecordCount {
        count,
        bytes: data.len(),
    };
    if !count_fits(count, data.len()) {
        return Err(implausible);
    }
    // A batch spans `lastOffsetDelta + 1` offsets, one record each at most.
    if i64::from(count) > base.last_delta.saturating_add(1) {
        return Err(BatchErrorKind::MoreRecordsThanOffsets {
            count,
            last_offset_delta: base.last_delta,
        });
    }
    let count = usize::try_from(count).map_err(|_| implausible)?;
    let mut records: Vec<Record> = Vec::with_capacity(count.min(MAX_INITIAL_RECORDS));
    let mut cursor = Cursor::new(data);
    for index in 0..count {
        let malformed = |reason| BatchErrorKind::MalformedRecord { index, reason };
        let record = decode_record(&mut cursor, base).map_err(malformed)?;
        if records
            .last()
            .is_some_and(|last| record.offset <= last.offset)
        {
            return Err(malformed("offsets do not increase"));
        }
        records.push(record);
    }
    match cursor.remaining() {
        0 => Ok(records),
        left => Err(BatchErrorKind::TrailingBytes(left)),
    }
}

fn decode_record(cursor: &mut Cursor<'_>, base: RecordBase) -> Result<Record, &'static str> {
    let length = cursor
        .varint()
        .ok_or("record length is truncated or overlong")?;
    let length = usize::try_from(length).map_err(|_| "negative record length")?;
    let mut r = cursor
        .sub(length)
        .ok_or("record length runs past the batch")?;
    let _attributes = r.byte().ok_or("attributes are truncated")?;
    let timestamp_delta = r
        .varlong()
        .ok_or("timestampDelta is truncated or overlong")?;
    let offset_delta = r.varint().ok_or("offsetDelta is truncated or overlong")?;
    let key = r.nullable_bytes(
        "key length is truncated or overlong",
        "key length is below -1",
        "key runs past the record",
    )?;
    let value = r.nullable_bytes(
        "value length is truncated or overlong",
        "value length is below -1",
        "value runs past the record",
    )?;
    let count = r.varint().ok_or("header count is truncated or overlong")?;
    let count = usize::try_from(count).map_err(|_| "negative header count")?;
    if count > r.remaining() / MIN_HEADER_SIZE {
        return Err("header count exceeds what the record can hold");
    }
    let mut headers = Vec::with_capacity(count.min(MAX_INITIAL_HEADERS));
    for _ in 0..count {
        let key_length = r
            .varint()
            .ok_or("header key length is truncated or overlong")?;
        let key_length = usize::try_from(key_length).map_err(|_| "negative header key length")?;
        let key = r
            .slice(key_length)
            .ok_or("header key runs past the record")?;
        let key = std::str::from_utf8(key).map_err(|_| "header key is not UTF-8")?;
        let value = r.nullable_bytes(
            "header value length is truncated or overlong",
            "header value length is below -1",
            "header value runs past the record",
        )?;
        headers.push((key.to_owned(), value));
    }
    if r.remaining() != 0 {
        return Err("bytes follow the headers within the record length");
    }
    if offset_delta < 0 || i64::from(offset_delta) > base.last_delta {
        return Err("offsetDelta is outside the batch's offsets (0..=lastOffsetDelta)");
    }
    let offset = base
        .offset
        .checked_add(i64::from(offset_delta))
        .ok_or("baseOffset + offsetDelta overflows")?;
    Ok(Record {
        offset,
        // Wrapping, as Java's client adds them: any two i64 timestamps round-trip through a
        // batch (the producer's delta wraps too).
        timestamp: base
            .log_append_time
            .unwrap_or_else(|| base.timestamp.wrapping_add(timestamp_delta)),
        key,
        value,
        headers,
    })
}

/// Reads `buf[pos..end]`; every read is bounds-checked.
#[derive(Debug)]
struct Cursor<'a> {
    buf: &'a Bytes,
    pos: usize,
    end: usize,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a Bytes) -> Self {
        Self {
            buf,
            pos: 0,
            end: buf.len(),
        }
    }

    fn remaining(&self) -> usize {
        self.end - self.pos
    }

    fn byte(&mut self) -> Option<u8> {
        let b = *self.buf[..self.end].get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    /// A zigzag varint of at most 5 bytes, as Java's `ByteUtils.readVarint` reads it.
    fn varint(&mut self) -> Option<i32> {
        let mut raw: u32 = 0;
        for i in 0..5 {
            let b = self.byte()?;
            raw |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Some(((raw >> 1) as i32) ^ -((raw & 1) as i32));
            }
        }
        None
    }

    /// A zigzag varlong of at most 10 bytes, as Java's `ByteUtils.readVarlong` reads it.
    fn varlong(&mut self) -> Option<i64> {
        let mut raw: u64 = 0;
        for i in 0..10 {
            let b = self.byte()?;
            raw |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Some(((raw >> 1) as i64) ^ -((raw & 1) as i64));
            }
        }
        None
    }

    fn range(&mut self, n: usize) -> Option<std::ops::Range<usize>> {
        if n > self.remaining() {
            return None;
        }
        let start = self.pos;
        self.pos += n;
        Some(start..self.pos)
    }

    fn slice(&mut self, n: usize) -> Option<&'a [u8]> {
        let buf: &'a Bytes = self.buf;
        self.range(n).map(|range| &buf[range])
    }

    /// The next `n` bytes as a cursor of their own.
    fn sub(&mut self, n: usize) -> Option<Self> {
        let range = self.range(n)?;
        Some(Self {
            buf: self.buf,
            pos: range.start,
            end: range.end,
        })
    }

    /// A varint length (-1: null) and that many bytes, zero-copy.
    fn nullable_bytes(
        &mut self,
        bad_length: &'static str,
        below_minus_one: &'static str,
        too_long: &'static str,
    ) -> Result<Option<Bytes>, &'static str> {
        let length = self.varint().ok_or(bad_length)?;
        if length == -1 {
            return Ok(None);
        }
        let length = usize::try_from(length).map_err(|_| below_minus_one)?;
        let range = self.range(length).ok_or(too_long)?;
        Ok(Some(self.buf.slice(range)))
    }
}

/// The records of a batch, decompressed, with the capacity of the buffer decompression
/// allocated (whether it succeeded or not; at most `limit`); an uncompressed payload is returned
/// as is, allocating nothing.
fn decompress(
    compression: Compression,
    payload: Bytes,
    limit: usize,
) -> (Result<Bytes, BatchErrorKind>, usize) {
    let failed = |reason: String| BatchErrorKind::Decompression {
        compression,
        reason,
    };
    let bounded = |e| match e {
        Bounded::TooLarge => BatchErrorKind::DecompressedTooLarge { compression, limit },
        Bounded::Io(e) => failed(e.to_string()),
    };
    let mut out: Vec<u8> = Vec::new();
    let result = match compression {
        Compression::None => return (Ok(payload), 0),
        Compression::Gzip => {
            // Multi-member, as Java's GZIPInputStream reads.
            read_bounded(
                flate2::read::MultiGzDecoder::new(&payload[..]),
                limit,
                &mut out,
            )
            .map_err(bounded)
        }
        Compression::Snappy => snappy_decompress(&payload, limit, &mut out, failed),
        Compression::Lz4 => match lz4::Decoder::new(&payload[..]) {
            Err(e) => Err(failed(e.to_string())),
            Ok(mut decoder) => read_bounded(&mut decoder, limit, &mut out)
                .map_err(bounded)
                .and_then(|()| {
                    // The decoder ends quietly at the end of its input, frame complete or not.
                    decoder
                        .finish()
                        .1
                        .map_err(|_| failed("the LZ4 frame is truncated".to_owned()))
                }),
        },
        Compression::Zstd => match zstd::stream::read::Decoder::with_buffer(&payload[..]) {
            Err(e) => Err(failed(e.to_string())),
            Ok(decoder) => read_bounded(decoder, limit, &mut out).map_err(bounded),
        },
    };
    let allocated = out.capacity();
    (result.map(|()| Bytes::from(out)), allocated)
}

/// Why [`read_bounded`] stopped.
#[derive(Debug)]
enum Bounded {
    TooLarge,
    Io(io::Error),
}

/// Reads `reader` to its end into `out`, refusing more than `limit` bytes. The buffer grows by
/// doubling but never beyond `limit`, so it holds at most twice what was really read.
fn read_bounded(mut reader: impl Read, limit: usize, out: &mut Vec<u8>) -> Result<(), Bounded> {
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Bounded::Io(e)),
        };
        let room = limit - out.len();
        if n > room {
            return Err(Bounded::TooLarge);
        }
        if out.capacity() - out.len() < n {
            // At least n (n <= room), at most room: doubling, capped at the limit.
            out.reserve_exact(out.capacity().max(n).min(room));
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// Snappy as Kafka clients write it: snappy-java's framing (the Java client, and
/// kafka-protocol), possibly several such streams back to back, or raw snappy (librdkafka).
/// Like snappy-java's `SnappyInputStream`, which the Java client and broker read with, anything
/// that does not start with the framing's magic is taken as raw snappy.
fn snappy_decompress(
    input: &[u8],
    limit: usize,
    out: &mut Vec<u8>,
    failed: impl Fn(String) -> BatchErrorKind,
) -> Result<(), BatchErrorKind> {
    if input.is_empty() {
        // Nothing compressed; snappy-java reads it as an empty stream.
        return Ok(());
    }
    if !input.starts_with(XERIAL_MAGIC) {
        return raw_snappy_into(input, out, limit, &failed);
    }
    let mut rest = input;
    while !rest.is_empty() {
        if rest.starts_with(XERIAL_MAGIC) {
            // A stream header, first or of a stream appended to the previous one.
            rest = rest
                .get(XERIAL_HEADER_LEN..)
                .ok_or_else(|| failed("truncated snappy-java stream header".to_owned()))?;
            continue;
        }
        let length = rest
            .get(..4)
            .map(|b| be_i32(b, 0))
            .ok_or_else(|| failed("truncated snappy-java block length".to_owned()))?;
        let block = usize::try_from(length)
            .ok()
            .and_then(|length| rest.get(4..4 + length))
            .ok_or_else(|| {
                failed(format!(
                    "snappy-java block of {length} bytes in {} bytes",
                    rest.len() - 4
                ))
            })?;
        raw_snappy_into(block, out, limit, &failed)?;
        rest = &rest[4 + block.len()..];
    }
    Ok(())
}

/// Appends one raw snappy stream to `out`, refusing to grow it beyond `limit`, and refusing a
/// claimed length its input cannot produce before allocating for it.
fn raw_snappy_into(
    input: &[u8],
    out: &mut Vec<u8>,
    limit: usize,
    failed: &impl Fn(String) -> BatchErrorKind,
) -> Result<(), BatchErrorKind> {
    let length = snap::raw::decompress_len(input).map_err(|e| failed(e.to_string()))?;
    if length > limit - out.len() {
        return Err(BatchErrorKind::DecompressedTooLarge {
            compression: Compression::Snappy,
            limit,
        });
    }
    if length > input.len().saturating_mul(SNAPPY_MAX_EXPANSION) {
        return Err(failed(format!(
            "{} bytes cannot expand to the {length} they claim",
            input.len()
        )));
    }
    let start = out.len();
    let needed = start + length; // <= limit, checked above
    if out.capacity() < needed {
        // Doubling as `resize` would, but capped at the limit, so the buffer never holds more.
        out.reserve_exact(needed.max(out.capacity().saturating_mul(2)).min(limit) - start);
    }
    out.resize(needed, 0);
    let written = snap::raw::Decoder::new()
        .decompress(input, &mut out[start..])
        .map_err(|e| failed(e.to_string()))?;
    out.truncate(start + written);
    Ok(())
}

/// Encodes `records` as one v2 batch with offsets `options.base_offset` onwards, in the layout
/// the Java producer writes (`baseTimestamp` is the first record's; snappy in snappy-java's
/// framing; LZ4 frames of independent 64 KiB blocks without checksums), with a correct CRC.
///
/// # Panics
///
/// If a key, value, header or the batch exceeds `i32::MAX` bytes, or there are more than
/// `i32::MAX` records, which no broker would accept either (`message.max.bytes`).
pub(crate) fn encode_batch(records: &[NewRecord], options: &EncodeOptions) -> Bytes {
    encode_batch_in(records, options, None)
}

/// [`encode_batch`] into a buffer of `pool`, which it goes back to when the batch's last
/// slice is dropped (uncompressed; compressed, the records' buffer goes back at once and the
/// compressed batch is allocated on its own).
pub(crate) fn encode_batch_pooled(
    records: &[NewRecord],
    options: &EncodeOptions,
    pool: &Arc<FramePool>,
) -> Bytes {
    encode_batch_in(records, options, Some(pool))
}

fn encode_batch_in(
    records: &[NewRecord],
    options: &EncodeOptions,
    pool: Option<&Arc<FramePool>>,
) -> Bytes {
    let base_timestamp = records.first().map_or(NO_TIMESTAMP, |r| r.timestamp);
    let max_timestamp = options.log_append_time.unwrap_or_else(|| {
        records
            .iter()
            .map(|r| r.timestamp)
            .max()
            .unwrap_or(NO_TIMESTAMP)
    });
    // Each record is written once, straight into the batch: its length first (computed),
    // then its fields. Uncompressed, the header's room comes first and is filled in place;
    // compressed, the records are the compressor's input.
    let uncompressed = options.compression == Compression::None;
    let room = if uncompressed { BATCH_HEADER } else { 0 };
    let sizes: usize = records
        .iter()
        .enumerate()
        .map(|(delta, r)| {
            let len = record_len(r, wire_len(delta), base_timestamp);
            len.saturating_add(varint_len(wire_len(len)))
        })
        .fold(room, usize::saturating_add);
    let mut body = pool.map_or_else(|| Vec::with_capacity(sizes), |pool| pool.take(sizes));
    body.resize(room, 0);
    for (delta, record) in records.iter().enumerate() {
        let delta = wire_len(delta);
        put_varint(
            &mut body,
            wire_len(record_len(record, delta, base_timestamp)),
        );
        encode_record(&mut body, record, delta, base_timestamp);
    }
    debug_assert_eq!(body.len(), sizes, "record_len agrees with encode_record");
    let mut attributes = options.compression.id();
    if options.log_append_time.is_some() {
        attributes |= LOG_APPEND_TIME_FLAG;
    }
    if options.transactional {
        attributes |= TRANSACTIONAL_FLAG;
    }
    if options.control {
        attributes |= CONTROL_FLAG;
    }
    let header = BatchHeader {
        base_offset: options.base_offset,
        partition_leader_epoch: options.partition_leader_epoch,
        attributes,
        last_offset_delta: wire_len(records.len().saturating_sub(1)),
        base_timestamp,
        max_timestamp,
        producer_id: options.producer_id,
        producer_epoch: options.producer_epoch,
        base_sequence: options.base_sequence,
        records_count: wire_len(records.len()),
    };
    if uncompressed {
        let payload = body.len() - BATCH_HEADER;
        write_header(&mut body, &header, payload);
        return match pool {
            Some(pool) => pool.freeze(body),
            None => Bytes::from(body),
        };
    }
    let compressed = compress(options.compression, &body);
    if let Some(pool) = pool {
        pool.recycle(body);
    }
    assemble(&header, &compressed)
}

/// The bytes [`encode_record`] writes for `record`.
fn record_len(record: &NewRecord, offset_delta: i32, base_timestamp: i64) -> usize {
    let bytes =
        |b: Option<&[u8]>| b.map_or(varint_len(-1), |b| varint_len(wire_len(b.len())) + b.len());
    let headers: usize = record
        .headers
        .iter()
        .map(|(key, value)| bytes(Some(key.as_bytes())) + bytes(value.as_deref()))
        .sum();
    1 + varlong_len(record.timestamp.wrapping_sub(base_timestamp))
        + varint_len(offset_delta)
        + bytes(record.key.as_deref())
        + bytes(record.value.as_deref())
        + varint_len(wire_len(record.headers.len()))
        + headers
}

/// The bytes of `value` as a zigzag varint.
fn varint_len(value: i32) -> usize {
    unsigned_varint_len(u64::from(((value << 1) ^ (value >> 31)) as u32))
}

/// The bytes of `value` as a zigzag varlong.
fn varlong_len(value: i64) -> usize {
    unsigned_varint_len(((value << 1) ^ (value >> 63)) as u64)
}

fn unsigned_varint_len(raw: u64) -> usize {
    // 7 bits a byte, at least one byte.
    let bits = (64 - raw.leading_zeros() as usize).max(1);
    bits.div_ceil(7)
}

/// A length or count as the i32 the wire holds.
fn wire_len(n: usize) -> i32 {
    i32::try_from(n).expect("a record batch holds less than i32::MAX of anything")
}

fn put_varint(buf: &mut Vec<u8>, value: i32) {
    put_unsigned_varint(buf, u64::from(((value << 1) ^ (value >> 31)) as u32));
}

fn put_varlong(buf: &mut Vec<u8>, value: i64) {
    put_unsigned_varint(buf, ((value << 1) ^ (value >> 63)) as u64);
}

fn put_unsigned_varint(buf: &mut Vec<u8>, mut raw: u64) {
    while raw >= 0x80 {
        buf.push((raw & 0x7f) as u8 | 0x80);
        raw >>= 7;
    }
    buf.push(raw as u8);
}

fn put_nullable_bytes(buf: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => put_varint(buf, -1),
        Some(bytes) => {
            put_varint(buf, wire_len(bytes.len()));
            buf.extend_from_slice(bytes);
        }
    }
}

/// A record without its length prefix.
fn encode_record(buf: &mut Vec<u8>, record: &NewRecord, offset_delta: i32, base_timestamp: i64) {
    buf.push(0); // attributes, unused
    put_varlong(buf, record.timestamp.wrapping_sub(base_timestamp));
    put_varint(buf, offset_delta);
    put_nullable_bytes(buf, record.key.as_deref());
    put_nullable_bytes(buf, record.value.as_deref());
    put_varint(buf, wire_len(record.headers.len()));
    for (key, value) in &record.headers {
        put_nullable_bytes(buf, Some(key.as_bytes()));
        put_nullable_bytes(buf, value.as_deref());
    }
}

fn compress(compression: Compression, body: &[u8]) -> Vec<u8> {
    const IN_MEMORY: &str = "compressing into memory cannot fail";
    match compression {
        Compression::None => body.to_vec(),
        Compression::Gzip => {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(body).expect(IN_MEMORY);
            encoder.finish().expect(IN_MEMORY)
        }
        Compression::Snappy => {
            let mut out = Vec::with_capacity(XERIAL_HEADER_LEN + body.len());
            out.extend_from_slice(XERIAL_MAGIC);
            out.put_i32(1); // version
            out.put_i32(1); // minimum compatible version
            let mut encoder = snap::raw::Encoder::new();
            for block in body.chunks(XERIAL_BLOCK) {
                let compressed = encoder.compress_vec(block).expect(IN_MEMORY);
                out.put_i32(wire_len(compressed.len()));
                out.extend_from_slice(&compressed);
            }
            out
        }
        Compression::Lz4 => {
            let mut encoder = lz4::EncoderBuilder::new()
                .block_size(lz4::BlockSize::Max64KB)
                .block_mode(lz4::BlockMode::Independent)
                .checksum(lz4::ContentChecksum::NoChecksum)
                .build(Vec::new())
                .expect(IN_MEMORY);
            encoder.write_all(body).expect(IN_MEMORY);
            let (out, result) = encoder.finish();
            result.expect(IN_MEMORY);
            out
        }
        Compression::Zstd => zstd::bulk::compress(body, ZSTD_LEVEL).expect(IN_MEMORY),
    }
}

/// The header fields of a batch, as written.
#[derive(Debug, Clone, Copy)]
struct BatchHeader {
    base_offset: i64,
    partition_leader_epoch: i32,
    attributes: i16,
    last_offset_delta: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    records_count: i32,
}

/// A batch of `header` and the (compressed) records `payload`, with its length and CRC.
fn assemble(header: &BatchHeader, payload: &[u8]) -> Bytes {
    let mut buf = Vec::with_capacity(BATCH_HEADER + payload.len());
    buf.resize(BATCH_HEADER, 0);
    buf.extend_from_slice(payload);
    write_header(&mut buf, header, payload.len());
    Bytes::from(buf)
}

/// Writes the header into the first [`BATCH_HEADER`] bytes of `buf`, which the `payload`
/// bytes of records follow, and the CRC over both.
fn write_header(buf: &mut [u8], header: &BatchHeader, payload: usize) {
    let mut at = &mut buf[..BATCH_HEADER];
    at.put_i64(header.base_offset);
    at.put_i32(wire_len(BATCH_HEADER - LENGTH_PREFIX + payload));
    at.put_i32(header.partition_leader_epoch);
    at.put_i8(MAGIC_V2);
    at.put_u32(0); // CRC, below
    at.put_i16(header.attributes);
    at.put_i32(header.last_offset_delta);
    at.put_i64(header.base_timestamp);
    at.put_i64(header.max_timestamp);
    at.put_i64(header.producer_id);
    at.put_i16(header.producer_epoch);
    at.put_i32(header.base_sequence);
    at.put_i32(header.records_count);
    debug_assert!(at.is_empty());
    let crc = crc32c::crc32c(&buf[ATTRIBUTES_AT..]);
    buf[CRC_AT..ATTRIBUTES_AT].copy_from_slice(&crc.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records as kp;
    use proptest::prelude::*;

    use super::*;

    const CODECS: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    fn b(s: &str) -> Bytes {
        Bytes::from(s.to_owned())
    }

    fn new_record(
        timestamp: i64,
        key: Option<&str>,
        value: Option<&str>,
        headers: &[(&str, Option<&str>)],
    ) -> NewRecord {
        NewRecord {
            timestamp,
            key: key.map(b),
            value: value.map(b),
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.map(b)))
                .collect(),
        }
    }

    /// Compressible but not trivially so, and larger than a snappy-java block or an LZ4 block.
    fn big_value() -> Bytes {
        (0..200_000u32)
            .map(|i| u8::try_from((i * 7 + i / 13) % 251).unwrap())
            .collect::<Vec<u8>>()
            .into()
    }

    fn the_only_batch(decoded: &DecodedBatches) -> &RecordBatch {
        assert_eq!(decoded.batches.len(), 1, "{decoded:?}");
        assert_eq!(decoded.cut_from, None);
        match &decoded.batches[0] {
            Ok(batch) => batch,
            Err(e) => panic!("{e}"),
        }
    }

    fn the_only_error(decoded: &DecodedBatches) -> &BatchError {
        assert_eq!(decoded.batches.len(), 1, "{decoded:?}");
        match &decoded.batches[0] {
            Ok(batch) => panic!("decoded {batch:?}"),
            Err(e) => e,
        }
    }

    /// `batch` with its header patched by `patch` and `payload` as records; length and CRC
    /// recomputed.
    fn rebuild(batch: &[u8], payload: &[u8], patch: impl FnOnce(&mut [u8])) -> Bytes {
        let mut out = batch[..BATCH_HEADER].to_vec();
        patch(&mut out);
        out.extend_from_slice(payload);
        let length = wire_len(out.len() - LENGTH_PREFIX);
        out[BATCH_LENGTH_AT..BATCH_LENGTH_AT + 4].copy_from_slice(&length.to_be_bytes());
        let crc = crc32c::crc32c(&out[ATTRIBUTES_AT..]);
        out[CRC_AT..ATTRIBUTES_AT].copy_from_slice(&crc.to_be_bytes());
        out.into()
    }

    fn set_i32(at: usize, value: i32) -> impl FnOnce(&mut [u8]) {
        move |h| h[at..at + 4].copy_from_slice(&value.to_be_bytes())
    }

    fn set_attributes(value: i16) -> impl FnOnce(&mut [u8]) {
        move |h| h[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&value.to_be_bytes())
    }

    /// kafka-protocol's headers (an `IndexMap`) as ours.
    fn headers_of<'a>(
        map: impl IntoIterator<Item = (&'a StrBytes, &'a Option<Bytes>)>,
    ) -> Vec<(String, Option<Bytes>)> {
        map.into_iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn a_pooled_batch_is_the_same_bytes_and_gives_its_buffer_back() {
        use crate::kafka::net::frame_pool::PoolLimits;
        let pool = Arc::new(FramePool::with_limits(PoolLimits {
            min: 1,
            max: usize::MAX,
            idle_buffers: 4,
            idle_bytes: usize::MAX,
        }));
        let records: Vec<NewRecord> = (0..20)
            .map(|i| new_record(1_000 + i, Some("key"), Some("a value of some length"), &[]))
            .collect();
        for compression in CODECS {
            let options = EncodeOptions {
                compression,
                ..EncodeOptions::default()
            };
            let pooled = encode_batch_pooled(&records, &options, &pool);
            assert_eq!(pooled, encode_batch(&records, &options), "{compression:?}");
            drop(pooled);
            // Uncompressed, the batch's own buffer; compressed, the records' buffer at once.
            // (20 records of 30 bytes or more; a new buffer would have a capacity of 8.)
            let idle = pool.take(1);
            assert!(
                idle.capacity() >= 600,
                "{compression:?}: no buffer came back"
            );
            pool.recycle(idle);
        }
    }

    #[test]
    fn round_trip_keeps_duplicate_and_null_headers_with_every_codec() {
        let records = vec![
            new_record(
                1_000,
                Some("k0"),
                Some("v0"),
                &[
                    ("h", Some("1")),
                    ("h", Some("2")),
                    ("n", None),
                    ("h", Some("3")),
                    ("n", None),
                ],
            ),
            new_record(999, None, None, &[]),
            new_record(1_005, Some(""), Some(""), &[("", Some("")), ("ü", None)]),
            NewRecord {
                timestamp: 1_001,
                key: Some(b("big")),
                value: Some(big_value()),
                headers: vec![("h".to_owned(), None)],
            },
        ];
        for compression in CODECS {
            let options = EncodeOptions {
                base_offset: 42,
                compression,
                partition_leader_epoch: 3,
                producer_id: 7,
                producer_epoch: 1,
                base_sequence: 10,
                transactional: true,
                ..EncodeOptions::default()
            };
            let encoded = encode_batch(&records, &options);
            if compression != Compression::None {
                assert!(encoded.len() < 100_000, "{compression:?} compresses");
            }
            let decoded = decode_batches(encoded.clone());
            let batch = the_only_batch(&decoded);
            assert_eq!(
                (batch.base_offset, batch.last_offset),
                (42, 45),
                "{compression:?}"
            );
            assert_eq!(batch.compression, compression);
            assert_eq!(batch.timestamp_type, TimestampType::CreateTime);
            assert!(batch.transactional && !batch.control);
            assert_eq!((batch.base_timestamp, batch.max_timestamp), (1_000, 1_005));
            assert_eq!(
                (
                    batch.partition_leader_epoch,
                    batch.producer_id,
                    batch.producer_epoch,
                    batch.base_sequence
                ),
                (3, 7, 1, 10)
            );
            assert_eq!(batch.records.len(), records.len());
            for (i, (got, sent)) in batch.records.iter().zip(&records).enumerate() {
                assert_eq!(got.offset, 42 + i64::try_from(i).unwrap());
                assert_eq!(got.timestamp, sent.timestamp);
                assert_eq!(got.key, sent.key, "{compression:?} record {i}");
                assert_eq!(got.value, sent.value, "{compression:?} record {i}");
                assert_eq!(got.headers, sent.headers, "{compression:?} record {i}");
            }
            if compression == Compression::None {
                // Keys and values are slices of the input, not copies.
                let input = encoded.as_ptr_range();
                for record in &batch.records {
                    for bytes in record.key.iter().chain(&record.value) {
                        assert!(bytes.is_empty() || input.contains(&bytes.as_ptr()));
                    }
                }
            }
        }
    }

    fn kp_record(offset: i64, producer_id: i64, headers: &[(&str, Option<&str>)]) -> kp::Record {
        kp::Record {
            transactional: producer_id >= 0,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 4,
            producer_id,
            producer_epoch: if producer_id >= 0 { 2 } else { -1 },
            timestamp_type: kp::TimestampType::Creation,
            offset,
            // offset - sequence constant keeps records in one batch.
            sequence: i32::try_from(offset).unwrap() + 100,
            timestamp: 5_000 - offset,
            key: (offset % 2 == 0).then(|| Bytes::from(format!("key-{offset}"))),
            value: (offset != 13).then(|| Bytes::from(format!("value-{offset}"))),
            headers: headers
                .iter()
                .map(|(k, v)| (StrBytes::from_string((*k).to_owned()), v.map(b)))
                .collect(),
        }
    }

    fn kp_encode(records: &[kp::Record], compression: kp::Compression) -> Bytes {
        let mut buf = BytesMut::new();
        kp::RecordBatchEncoder::encode(
            &mut buf,
            records.iter(),
            &kp::RecordEncodeOptions {
                version: 2,
                compression,
            },
        )
        .unwrap();
        buf.freeze()
    }

    fn kp_compression(compression: Compression) -> kp::Compression {
        match compression {
            Compression::None => kp::Compression::None,
            Compression::Gzip => kp::Compression::Gzip,
            Compression::Snappy => kp::Compression::Snappy,
            Compression::Lz4 => kp::Compression::Lz4,
            Compression::Zstd => kp::Compression::Zstd,
        }
    }

    #[test]
    fn decodes_kafka_protocol_batches_with_every_codec() {
        let records = [
            kp_record(10, -1, &[("a", Some("1")), ("b", None)]),
            kp_record(11, -1, &[]),
            // A gap, as compaction leaves.
            kp_record(13, -1, &[("ü", Some(""))]),
            // Another producer: a second batch.
            kp_record(14, 9, &[("a", Some("2"))]),
            kp_record(15, 9, &[]),
        ];
        for compression in CODECS {
            let decoded = decode_batches(kp_encode(&records, kp_compression(compression)));
            assert_eq!(decoded.cut_from, None);
            let batches: Vec<&RecordBatch> = decoded
                .batches
                .iter()
                .map(|b| b.as_ref().unwrap())
                .collect();
            assert_eq!(batches.len(), 2, "{compression:?}");
            assert_eq!((batches[0].base_offset, batches[0].last_offset), (10, 13));
            assert_eq!((batches[1].base_offset, batches[1].last_offset), (14, 15));
            for batch in &batches {
                assert_eq!(batch.compression, compression);
                assert_eq!(batch.partition_leader_epoch, 4);
                assert!(!batch.control);
            }
            assert_eq!((batches[1].producer_id, batches[1].producer_epoch), (9, 2));
            assert!(batches[1].transactional && !batches[0].transactional);
            let got: Vec<&Record> = batches.iter().flat_map(|b| &b.records).collect();
            assert_eq!(got.len(), records.len());
            for (got, sent) in got.into_iter().zip(&records) {
                assert_eq!(got.offset, sent.offset);
                assert_eq!(got.timestamp, sent.timestamp);
                assert_eq!(got.key, sent.key);
                assert_eq!(got.value, sent.value);
                assert_eq!(got.headers, headers_of(&sent.headers));
            }
        }
    }

    #[test]
    fn kafka_protocol_decodes_our_batches_with_every_codec() {
        let records = vec![
            new_record(
                2_000,
                Some("k"),
                Some("v"),
                &[("a", Some("1")), ("b", None), ("", Some(""))],
            ),
            new_record(1_990, None, None, &[]),
            NewRecord {
                timestamp: 2_010,
                key: Some(b("big")),
                value: Some(big_value()),
                headers: vec![("ü".to_owned(), Some(b("x")))],
            },
        ];
        for compression in CODECS {
            let options = EncodeOptions {
                base_offset: 7,
                compression,
                producer_id: 3,
                producer_epoch: 5,
                base_sequence: 20,
                ..EncodeOptions::default()
            };
            let mut encoded = encode_batch(&records, &options);
            let sets = kp::RecordBatchDecoder::decode_all(&mut encoded).unwrap();
            assert_eq!(sets.len(), 1);
            assert_eq!(sets[0].compression, kp_compression(compression));
            assert_eq!(sets[0].records.len(), records.len());
            for (i, (got, sent)) in sets[0].records.iter().zip(&records).enumerate() {
                let i = i32::try_from(i).unwrap();
                assert_eq!(got.offset, 7 + i64::from(i));
                assert_eq!(got.sequence, 20 + i);
                assert_eq!(got.timestamp, sent.timestamp, "{compression:?}");
                assert_eq!(got.timestamp_type, kp::TimestampType::Creation);
                assert_eq!((got.producer_id, got.producer_epoch), (3, 5));
                assert!(!got.transactional && !got.control);
                assert_eq!(got.key, sent.key);
                assert_eq!(got.value, sent.value, "{compression:?}");
                assert_eq!(headers_of(&got.headers), sent.headers);
            }
        }
    }

    #[test]
    fn kafka_protocol_collapses_duplicate_header_keys_where_we_do_not() {
        let records = [new_record(
            1,
            None,
            Some("v"),
            &[("h", Some("1")), ("h", Some("2"))],
        )];
        let mut encoded = encode_batch(&records, &EncodeOptions::default());
        let ours = decode_batches(encoded.clone());
        assert_eq!(the_only_batch(&ours).records[0].headers.len(), 2);
        let theirs = kp::RecordBatchDecoder::decode_all(&mut encoded).unwrap();
        assert_eq!(theirs[0].records[0].headers.len(), 1);
    }

    #[test]
    fn snappy_is_read_raw_and_in_concatenated_snappy_java_streams() {
        let records = [
            new_record(1, Some("a"), Some("one"), &[("h", None)]),
            new_record(2, Some("b"), Some("two"), &[("h", Some("x")), ("h", None)]),
        ];
        let plain = encode_batch(&records, &EncodeOptions::default());
        let expected = the_only_batch(&decode_batches(plain.clone()))
            .records
            .clone();
        let body = &plain[BATCH_HEADER..];
        let snappy = set_attributes(Compression::Snappy.id());

        // Raw snappy, as librdkafka writes it.
        let raw = snap::raw::Encoder::new().compress_vec(body).unwrap();
        let batch = rebuild(&plain, &raw, snappy);
        assert_eq!(
            the_only_batch(&decode_batches(batch)).records,
            expected,
            "raw"
        );

        // Two snappy-java streams back to back, the second of two blocks.
        let (first, second) = body.split_at(body.len() / 2);
        let mut framed = compress(Compression::Snappy, first);
        framed.extend_from_slice(&compress(Compression::Snappy, &[]));
        framed.extend_from_slice(XERIAL_MAGIC);
        framed.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
        for block in second.chunks(second.len() / 2 + 1) {
            let compressed = snap::raw::Encoder::new().compress_vec(block).unwrap();
            framed.extend_from_slice(&wire_len(compressed.len()).to_be_bytes());
            framed.extend_from_slice(&compressed);
        }
        let batch = rebuild(&plain, &framed, set_attributes(Compression::Snappy.id()));
        assert_eq!(
            the_only_batch(&decode_batches(batch)).records,
            expected,
            "concatenated snappy-java streams"
        );
    }

    #[test]
    fn a_corrupt_crc_is_an_error_entry_and_the_next_batch_still_decodes() {
        let first = encode_batch(
            &[
                new_record(1, None, Some("a"), &[]),
                new_record(2, None, Some("b"), &[]),
            ],
            &EncodeOptions {
                base_offset: 10,
                ..EncodeOptions::default()
            },
        );
        let second = encode_batch(
            &[new_record(3, None, Some("c"), &[])],
            &EncodeOptions {
                base_offset: 12,
                ..EncodeOptions::default()
            },
        );
        let mut buf = first.to_vec();
        let last = buf.len() - 1;
        buf[last] ^= 0xff;
        buf.extend_from_slice(&second);
        let decoded = decode_batches(buf.into());
        assert_eq!(decoded.batches.len(), 2);
        assert_eq!(decoded.cut_from, None);
        let error = decoded.batches[0].as_ref().unwrap_err();
        assert_eq!((error.base_offset, error.last_offset), (10, 11));
        assert!(matches!(error.kind, BatchErrorKind::CrcMismatch { .. }));
        assert!(error.to_string().contains("10..=11"), "{error}");
        let batch = decoded.batches[1].as_ref().unwrap();
        assert_eq!(batch.records[0].value, Some(b("c")));
    }

    #[test]
    fn every_prefix_decodes_the_whole_batches_and_reports_the_cut() {
        for compression in CODECS {
            let options = |base_offset| EncodeOptions {
                base_offset,
                compression,
                ..EncodeOptions::default()
            };
            let first = encode_batch(
                &[
                    new_record(1, Some("k"), Some("a"), &[("h", None), ("h", Some("1"))]),
                    new_record(2, None, Some("b"), &[]),
                ],
                &options(100),
            );
            // Compaction left a gap: the first ends at 101, the second starts at 105.
            let second = encode_batch(&[new_record(3, None, Some("c"), &[])], &options(105));
            let buf = Bytes::from([first.to_vec(), second.to_vec()].concat());
            for cut in 0..=buf.len() {
                let decoded = decode_batches(buf.slice(..cut));
                let whole = usize::from(cut >= first.len()) + usize::from(cut == buf.len());
                assert_eq!(decoded.batches.len(), whole, "{compression:?} cut at {cut}");
                assert!(decoded.batches.iter().all(Result::is_ok));
                let expected_cut = if cut == 0 || cut == first.len() || cut == buf.len() {
                    None
                } else if cut < first.len() {
                    Some(if cut >= 8 { 100 } else { i64::MIN })
                } else {
                    Some(if cut - first.len() >= 8 { 105 } else { 102 })
                };
                assert_eq!(
                    decoded.cut_from, expected_cut,
                    "{compression:?} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn a_prefix_of_the_records_with_a_valid_crc_is_an_error_entry() {
        for compression in CODECS {
            let batch = encode_batch(
                &[
                    new_record(1, Some("k"), Some("abc"), &[("h", None), ("h", Some("1"))]),
                    new_record(2, None, Some("defgh"), &[("x", Some("y"))]),
                ],
                &EncodeOptions {
                    base_offset: 5,
                    compression,
                    ..EncodeOptions::default()
                },
            );
            let payload = &batch[BATCH_HEADER..];
            for cut in 0..payload.len() {
                let decoded = decode_batches(rebuild(&batch, &payload[..cut], |_| {}));
                let error = the_only_error(&decoded);
                assert_eq!(
                    (error.base_offset, error.last_offset),
                    (5, 6),
                    "{compression:?} cut at {cut}"
                );
            }
            // And one byte more is one byte too many.
            let mut longer = payload.to_vec();
            longer.push(0);
            let decoded = decode_batches(rebuild(&batch, &longer, |_| {}));
            if compression == Compression::None {
                assert_eq!(
                    the_only_error(&decoded).kind,
                    BatchErrorKind::TrailingBytes(1)
                );
            } else {
                // Codecs differ on trailing garbage; none may panic.
                assert_eq!(decoded.batches.len(), 1);
            }
        }
    }

    /// One uncompressed record with the given body (everything after its length).
    fn batch_of_raw_record(body: &[u8]) -> Bytes {
        let mut payload = Vec::new();
        put_varint(&mut payload, wire_len(body.len()));
        payload.extend_from_slice(body);
        let template = encode_batch(&[NewRecord::default()], &EncodeOptions::default());
        rebuild(&template, &payload, |_| {})
    }

    fn record_error(body: &[u8]) -> &'static str {
        match the_only_error(&decode_batches(batch_of_raw_record(body))).kind {
            BatchErrorKind::MalformedRecord { index: 0, reason } => reason,
            ref other => panic!("{other:?}"),
        }
    }

    /// attributes, timestampDelta, offsetDelta
    const RECORD_START: [u8; 3] = [0, 0, 0];

    fn varint(value: i32) -> Vec<u8> {
        let mut buf = Vec::new();
        put_varint(&mut buf, value);
        buf
    }

    #[test]
    fn huge_counts_and_lengths_are_errors_not_allocations() {
        // recordsCount, uncompressed and compressed.
        for compression in CODECS {
            let batch = encode_batch(
                &[new_record(1, None, Some("v"), &[])],
                &EncodeOptions {
                    compression,
                    ..EncodeOptions::default()
                },
            );
            for count in [i32::MAX, 1 << 20, -1, i32::MIN] {
                let huge = rebuild(
                    &batch,
                    &batch[BATCH_HEADER..],
                    set_i32(RECORDS_COUNT_AT, count),
                );
                let decoded = decode_batches(huge);
                let kind = &the_only_error(&decoded).kind;
                assert!(
                    matches!(kind, BatchErrorKind::ImplausibleRecordCount { count: c, .. } if *c == count),
                    "{compression:?} {count}: {kind:?}"
                );
            }
        }
        let null = varint(-1);
        let max = varint(i32::MAX);
        let body = |parts: &[&[u8]]| [&RECORD_START[..], &parts.concat()].concat();
        // Header count.
        assert_eq!(
            record_error(&body(&[&null, &null, &max])),
            "header count exceeds what the record can hold"
        );
        // Key and value lengths.
        assert_eq!(
            record_error(&body(&[&max, &null, &varint(0)])),
            "key runs past the record"
        );
        assert_eq!(
            record_error(&body(&[&null, &max, &varint(0)])),
            "value runs past the record"
        );
        assert_eq!(
            record_error(&body(&[&varint(-2), &null, &varint(0)])),
            "key length is below -1"
        );
        // Header key and value lengths.
        assert_eq!(
            record_error(&body(&[&null, &null, &varint(1), &max, &null])),
            "header key runs past the record"
        );
        assert_eq!(
            record_error(&body(&[&null, &null, &varint(1), &varint(0), &max])),
            "header value runs past the record"
        );
        assert_eq!(
            record_error(&body(&[&null, &null, &varint(1), &varint(-1), &null])),
            "negative header key length"
        );
        // A varint of more than 5 bytes.
        assert_eq!(
            record_error(&body(&[&[0xff; 6], &null, &varint(0)])),
            "key length is truncated or overlong"
        );
        // Bytes left inside the record.
        assert_eq!(
            record_error(&body(&[&null, &null, &varint(0), &[0]])),
            "bytes follow the headers within the record length"
        );
        // Record length.
        let mut payload = varint(i32::MAX);
        payload.extend_from_slice(&RECORD_START);
        let template = encode_batch(&[NewRecord::default()], &EncodeOptions::default());
        let kind = the_only_error(&decode_batches(rebuild(&template, &payload, |_| {})))
            .kind
            .clone();
        assert_eq!(
            kind,
            BatchErrorKind::MalformedRecord {
                index: 0,
                reason: "record length runs past the batch"
            }
        );
        // A sane record still decodes through the same path.
        let fine = decode_batches(batch_of_raw_record(&body(&[
            &null,
            &varint(1),
            b"v",
            &varint(1),
            &varint(1),
            b"h",
            &null,
        ])));
        let record = &the_only_batch(&fine).records[0];
        assert_eq!(record.value, Some(b("v")));
        assert_eq!(record.headers, vec![("h".to_owned(), None)]);
    }

    /// A record's offset comes from the batch: its `offsetDelta` within
    /// `0..=lastOffsetDelta`, increasing record after record, and no more records than
    /// offsets. A broker that says otherwise gets its batch refused, not offsets wrapped or
    /// jumped (a log reader would skip ahead by what `offsetDelta` said).
    #[test]
    fn offsets_outside_their_batch_or_out_of_order_are_refused() {
        let null = varint(-1);
        let record = |offset_delta: i32, timestamp_delta: i64| {
            let mut body = vec![0];
            put_varlong(&mut body, timestamp_delta);
            body.extend(varint(offset_delta));
            body.extend([&null[..], &null[..], &varint(0)[..]].concat());
            let mut framed = varint(wire_len(body.len()));
            framed.extend(body);
            framed
        };
        let template = encode_batch(
            &[NewRecord::default(), NewRecord::default()],
            &EncodeOptions::default(),
        );
        let batch_of = |records: &[Vec<u8>], last_delta: i32| {
            rebuild(&template, &records.concat(), |h| {
                set_i32(LAST_OFFSET_DELTA_AT, last_delta)(h);
                set_i32(RECORDS_COUNT_AT, i32::try_from(records.len()).unwrap())(h);
            })
        };
        let error_of = |bytes: Bytes| the_only_error(&decode_batches(bytes)).kind.clone();
        // Sound: deltas 0 and 1 of a batch spanning two offsets, or 0 and 5 of six.
        for (deltas, last) in [([0, 1], 1), ([0, 5], 5)] {
            let records: Vec<Vec<u8>> = deltas.iter().map(|d| record(*d, 0)).collect();
            let decoded = decode_batches(batch_of(&records, last));
            let offsets: Vec<i64> = the_only_batch(&decoded)
                .records
                .iter()
                .map(|r| r.offset)
                .collect();
            assert_eq!(offsets, deltas.map(i64::from));
        }
        assert_eq!(
            error_of(batch_of(&[record(0, 0), record(1, 0)], 0)),
            BatchErrorKind::MoreRecordsThanOffsets {
                count: 2,
                last_offset_delta: 0
            }
        );
        for (records, reason) in [
            (
                vec![record(0, 0), record(i32::MAX, 0)],
                "offsetDelta is outside the batch's offsets (0..=lastOffsetDelta)",
            ),
            (
                vec![record(-1, 0), record(1, 0)],
                "offsetDelta is outside the batch's offsets (0..=lastOffsetDelta)",
            ),
            (vec![record(1, 0), record(1, 0)], "offsets do not increase"),
            (vec![record(1, 0), record(0, 0)], "offsets do not increase"),
        ] {
            let kind = error_of(batch_of(&records, 1));
            assert!(
                matches!(kind, BatchErrorKind::MalformedRecord { reason: r, .. } if r == reason),
                "{reason}: {kind:?}"
            );
        }
        // baseOffset near i64::MAX: the record's offset would wrap.
        let near_max = rebuild(
            &batch_of(&[record(0, 0), record(1, 0)], 1),
            &[record(0, 0), record(1, 0)].concat(),
            |h| {
                h[..8].copy_from_slice(&(i64::MAX).to_be_bytes());
            },
        );
        let kind = error_of(near_max);
        assert!(
            matches!(
                kind,
                BatchErrorKind::MalformedRecord {
                    index: 1,
                    reason: "baseOffset + offsetDelta overflows"
                }
            ),
            "{kind:?}"
        );
    }

    #[test]
    fn an_invalid_utf8_header_key_fails_its_batch_only() {
        let null = varint(-1);
        let bad = batch_of_raw_record(
            &[
                &RECORD_START[..],
                &null,
                &null,
                &varint(1),
                &varint(1),
                &[0xff],
                &null,
            ]
            .concat(),
        );
        let good = encode_batch(
            &[new_record(1, None, Some("v"), &[])],
            &EncodeOptions {
                base_offset: 1,
                ..EncodeOptions::default()
            },
        );
        let decoded = decode_batches([bad.to_vec(), good.to_vec()].concat().into());
        assert_eq!(decoded.batches.len(), 2);
        assert_eq!(
            decoded.batches[0].as_ref().unwrap_err().kind,
            BatchErrorKind::MalformedRecord {
                index: 0,
                reason: "header key is not UTF-8"
            }
        );
        assert!(decoded.batches[1].is_ok());
    }

    #[test]
    fn decompression_is_bounded() {
        let records = [NewRecord {
            value: Some(Bytes::from(vec![b'x'; 4096])),
            ..NewRecord::default()
        }];
        for compression in CODECS {
            let batch = encode_batch(
                &records,
                &EncodeOptions {
                    compression,
                    ..EncodeOptions::default()
                },
            );
            assert!(decode_batches_with_limit(batch.clone(), 5000).batches[0].is_ok());
            let decoded = decode_batches_with_limit(batch, 4000);
            if compression == Compression::None {
                // Nothing to decompress: the input bounds it.
                the_only_batch(&decoded);
            } else {
                assert_eq!(
                    the_only_error(&decoded).kind,
                    BatchErrorKind::DecompressedTooLarge {
                        compression,
                        limit: 4000
                    }
                );
            }
        }
    }

    #[test]
    fn a_zstd_bomb_stops_at_the_limit() {
        let bomb = zstd::bulk::compress(&vec![0u8; MAX_DECOMPRESSED_BATCH + 1], 1).unwrap();
        assert!(bomb.len() < 100_000);
        let template = encode_batch(
            &[NewRecord::default()],
            &EncodeOptions {
                compression: Compression::Zstd,
                ..EncodeOptions::default()
            },
        );
        let decoded = decode_batches(rebuild(&template, &bomb, |_| {}));
        assert_eq!(
            the_only_error(&decoded).kind,
            BatchErrorKind::DecompressedTooLarge {
                compression: Compression::Zstd,
                limit: MAX_DECOMPRESSED_BATCH
            }
        );
    }

    #[test]
    fn scanning_checks_headers_without_decompressing() {
        let bomb = zstd::bulk::compress(&vec![0u8; MAX_DECOMPRESSED_BATCH + 1], 1).unwrap();
        let template = encode_batch(
            &[NewRecord::default()],
            &EncodeOptions {
                base_offset: 9,
                compression: Compression::Zstd,
                control: true,
                ..EncodeOptions::default()
            },
        );
        let bomb = rebuild(&template, &bomb, |_| {});
        let mut corrupt = template.to_vec();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 0xff;
        let scanned = scan_batches([&bomb[..], &corrupt, &template[..20]].concat().into());
        assert_eq!(scanned.batches.len(), 2);
        assert_eq!(scanned.cut_from, Some(9));
        let raw = scanned.batches[0].as_ref().unwrap();
        assert_eq!(
            (
                raw.base_offset,
                raw.last_offset,
                raw.compression,
                raw.control
            ),
            (9, 9, Compression::Zstd, true)
        );
        assert!(matches!(
            scanned.batches[1].as_ref().unwrap_err().kind,
            BatchErrorKind::CrcMismatch { .. }
        ));
        // Only decoding decompresses, within the limit asked for.
        let decoded = raw.clone().decode_within(1000);
        assert_eq!(
            decoded.batch.unwrap_err().kind,
            BatchErrorKind::DecompressedTooLarge {
                compression: Compression::Zstd,
                limit: 1000
            }
        );
        assert!(decoded.decompressed <= 1000, "{}", decoded.decompressed);
        // A limit above the cap is the cap.
        let decoded = raw.clone().decode_within(usize::MAX);
        assert_eq!(
            decoded.batch.unwrap_err().kind,
            BatchErrorKind::DecompressedTooLarge {
                compression: Compression::Zstd,
                limit: MAX_DECOMPRESSED_BATCH
            }
        );
        assert!(decoded.decompressed <= MAX_DECOMPRESSED_BATCH);
    }

    #[test]
    fn decoding_reports_what_decompression_allocated_and_stays_within_the_limit() {
        let records = [NewRecord {
            value: Some(big_value()),
            ..NewRecord::default()
        }];
        for compression in CODECS {
            let batch = encode_batch(
                &records,
                &EncodeOptions {
                    compression,
                    ..EncodeOptions::default()
                },
            );
            let raw = || scan_batches(batch.clone()).batches.remove(0).unwrap();
            let fits = raw().decode_within(usize::MAX);
            let size = fits.batch.unwrap().records[0].value.as_ref().unwrap().len();
            assert_eq!(size, 200_000);
            if compression == Compression::None {
                assert_eq!(fits.decompressed, 0, "the records slice the input");
                continue;
            }
            assert!(fits.decompressed > size, "{compression:?}");
            // Just enough: the buffer never grows past the limit (snappy's blocks included).
            let limit = fits.decompressed.min(MAX_DECOMPRESSED_BATCH) - 1;
            for limit in [limit, 250_001] {
                let decoded = raw().decode_within(limit);
                assert!(decoded.decompressed <= limit, "{compression:?} {limit}");
                if let Err(e) = decoded.batch {
                    assert!(
                        matches!(e.kind, BatchErrorKind::DecompressedTooLarge { limit: l, .. } if l == limit),
                        "{compression:?} {limit}: {e}"
                    );
                }
            }
            let short = raw().decode_within(150_000);
            assert!(short.decompressed <= 150_000, "{compression:?}");
            assert!(short.batch.is_err(), "{compression:?}");
        }
    }

    #[test]
    fn raw_snappy_claiming_more_than_it_can_hold_is_refused_before_allocating() {
        let template = encode_batch(&[NewRecord::default()], &EncodeOptions::default());
        let mut claim = Vec::new();
        put_unsigned_varint(&mut claim, 60 << 20);
        claim.extend_from_slice(&[0; 8]);
        let batch = rebuild(&template, &claim, set_attributes(Compression::Snappy.id()));
        let decoded = decode_batches(batch);
        let kind = &the_only_error(&decoded).kind;
        assert!(
            matches!(kind, BatchErrorKind::Decompression { compression: Compression::Snappy, reason } if reason.contains("cannot expand")),
            "{kind:?}"
        );
    }

    #[test]
    fn control_batches_are_flagged() {
        // A COMMIT marker: key version 0 type 1, value version 0 coordinator epoch 5.
        let marker = NewRecord {
            timestamp: 77,
            key: Some(Bytes::from_static(&[0, 0, 0, 1])),
            value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 5])),
            headers: Vec::new(),
        };
        let mut encoded = encode_batch(
            std::slice::from_ref(&marker),
            &EncodeOptions {
                base_offset: 30,
                producer_id: 8,
                producer_epoch: 0,
                transactional: true,
                control: true,
                ..EncodeOptions::default()
            },
        );
        let decoded = decode_batches(encoded.clone());
        let batch = the_only_batch(&decoded);
        assert!(batch.control && batch.transactional);
        assert_eq!((batch.base_offset, batch.last_offset), (30, 30));
        assert_eq!(batch.records[0].key, marker.key);
        let theirs = kp::RecordBatchDecoder::decode_all(&mut encoded).unwrap();
        assert!(theirs[0].records[0].control);
    }

    #[test]
    fn log_append_time_batches_give_every_record_the_max_timestamp() {
        let records = [
            new_record(1_000, None, Some("a"), &[]),
            new_record(1_001, None, Some("b"), &[]),
        ];
        for compression in CODECS {
            let encoded = encode_batch(
                &records,
                &EncodeOptions {
                    compression,
                    log_append_time: Some(9_999),
                    ..EncodeOptions::default()
                },
            );
            assert_ne!(encoded[ATTRIBUTES_AT + 1] & 0x08, 0);
            let decoded = decode_batches(encoded);
            let batch = the_only_batch(&decoded);
            assert_eq!(batch.timestamp_type, TimestampType::LogAppendTime);
            assert_eq!((batch.base_timestamp, batch.max_timestamp), (1_000, 9_999));
            assert!(batch.records.iter().all(|r| r.timestamp == 9_999));
        }
        // Create time: base + delta.
        let decoded = decode_batches(encode_batch(&records, &EncodeOptions::default()));
        let timestamps: Vec<i64> = the_only_batch(&decoded)
            .records
            .iter()
            .map(|r| r.timestamp)
            .collect();
        assert_eq!(timestamps, vec![1_000, 1_001]);
    }

    #[test]
    fn framing_errors() {
        let good = encode_batch(
            &[new_record(1, None, Some("v"), &[])],
            &EncodeOptions {
                base_offset: 3,
                ..EncodeOptions::default()
            },
        );
        // Another magic: not covered by the CRC, refused before it.
        let mut legacy = good.to_vec();
        legacy[MAGIC_AT] = 1;
        let decoded = decode_batches([legacy, good.to_vec()].concat().into());
        assert_eq!(
            decoded.batches[0].as_ref().unwrap_err(),
            &BatchError {
                base_offset: 3,
                last_offset: 3,
                kind: BatchErrorKind::UnsupportedMagic(1)
            }
        );
        assert!(decoded.batches[1].is_ok());

        // An unknown codec.
        let odd = rebuild(&good, &good[BATCH_HEADER..], set_attributes(5));
        assert_eq!(
            the_only_error(&decode_batches(odd)).kind,
            BatchErrorKind::UnknownCompression(5)
        );

        // A batch shorter than its header.
        let mut short = good[..30].to_vec();
        short[BATCH_LENGTH_AT..BATCH_LENGTH_AT + 4].copy_from_slice(&18i32.to_be_bytes());
        assert_eq!(
            the_only_error(&decode_batches(short.into())).kind,
            BatchErrorKind::TooShort(30)
        );

        // A negative length ends decoding.
        let mut negative = good.to_vec();
        negative.extend_from_slice(&good[..LAST_OFFSET_DELTA_AT + 4]);
        let at = good.len() + BATCH_LENGTH_AT;
        negative[at..at + 4].copy_from_slice(&(-1i32).to_be_bytes());
        negative.extend_from_slice(&good);
        let decoded = decode_batches(negative.into());
        assert_eq!(decoded.batches.len(), 2);
        assert!(decoded.batches[0].is_ok());
        assert_eq!(
            decoded.batches[1].as_ref().unwrap_err().kind,
            BatchErrorKind::NegativeLength(-1)
        );
        assert_eq!(decoded.cut_from, None);

        // Nothing at all.
        assert_eq!(decode_batches(Bytes::new()), DecodedBatches::default());
    }

    #[test]
    fn an_empty_batch_round_trips() {
        for compression in CODECS {
            let decoded = decode_batches(encode_batch(
                &[],
                &EncodeOptions {
                    compression,
                    ..EncodeOptions::default()
                },
            ));
            let batch = the_only_batch(&decoded);
            assert!(batch.records.is_empty(), "{compression:?}");
            assert_eq!(batch.base_timestamp, NO_TIMESTAMP);
        }
    }

    fn arb_bytes() -> impl Strategy<Value = Option<Bytes>> {
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40).prop_map(Bytes::from))
    }

    fn arb_record() -> impl Strategy<Value = NewRecord> {
        (
            any::<i64>(),
            arb_bytes(),
            arb_bytes(),
            proptest::collection::vec(("[a-c]{0,2}|\\PC{0,3}", arb_bytes()), 0..5),
        )
            .prop_map(|(timestamp, key, value, headers)| NewRecord {
                timestamp,
                key,
                value,
                headers,
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn any_records_round_trip(
            records in proptest::collection::vec(arb_record(), 0..6),
            codec in 0..5i16,
            base_offset in 0..i64::from(i32::MAX),
        ) {
            let compression = Compression::from_id(codec).unwrap();
            let options = EncodeOptions { base_offset, compression, ..EncodeOptions::default() };
            let decoded = decode_batches(encode_batch(&records, &options));
            let batch = the_only_batch(&decoded);
            prop_assert_eq!(batch.records.len(), records.len());
            for (i, (got, sent)) in batch.records.iter().zip(&records).enumerate() {
                prop_assert_eq!(got.offset, base_offset + i64::try_from(i).unwrap());
                prop_assert_eq!(got.timestamp, sent.timestamp);
                prop_assert_eq!(&got.key, &sent.key);
                prop_assert_eq!(&got.value, &sent.value);
                prop_assert_eq!(&got.headers, &sent.headers);
            }
        }

        #[test]
        fn any_records_bytes_with_a_valid_crc_never_panic(
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            codec in 0..8i16,
            count in prop_oneof![0..4i32, any::<i32>()],
        ) {
            let template = encode_batch(&[NewRecord::default()], &EncodeOptions::default());
            let batch = rebuild(&template, &payload, |h| {
                set_attributes(codec)(h);
                set_i32(RECORDS_COUNT_AT, count)(h);
            });
            prop_assert_eq!(decode_batches(batch).batches.len(), 1);
        }

        #[test]
        fn any_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_batches(buf.into());
        }
    }
}
