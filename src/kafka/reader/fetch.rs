//! The classic Fetch of one partition: building the request, finding the partition in the
//! answer, and turning its `Records` into a [`LogRead`]. No I/O.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::aborted::{AbortedTransactions, ControlType};
use crate::kafka::codec::record_batch::{
    self, BatchError, BatchErrorKind, Compression, MAX_DECOMPRESSED_BATCH,
};
use crate::producer::{IsolationLevel, LogRead};
use crate::record::{ConsumerRecord, Header, Headers, TimestampType};

/// The first Fetch version that names topics by id instead of by name.
pub(super) const TOPIC_ID_VERSION: i16 = 13;

/// Most bytes one read may decompress, over all its batches: the first compressed batch may
/// always use its own cap ([`MAX_DECOMPRESSED_BATCH`]), so every read makes progress; the
/// batches after it are left for the next read once the total reaches this.
pub(super) const MAX_DECOMPRESSED_PER_READ: usize = MAX_DECOMPRESSED_BATCH;

/// `isolation_level` of Fetch and ListOffsets.
pub(super) fn isolation_level(isolation: IsolationLevel) -> i8 {
    match isolation {
        IsolationLevel::ReadCommitted => 1,
        _ => 0,
    }
}

/// What one Fetch asks for.
#[derive(Debug, Clone)]
pub(super) struct Ask<'a> {
    pub(super) topic: &'a str,
    /// Used from [`TOPIC_ID_VERSION`] on.
    pub(super) topic_id: Uuid,
    pub(super) partition: i32,
    pub(super) from: i64,
    /// The leader epoch the metadata gave (-1: unknown), so that a stale leader says so.
    pub(super) leader_epoch: i32,
    pub(super) isolation: IsolationLevel,
    pub(super) max_wait: Duration,
    pub(super) max_bytes: i32,
}

/// A sessionless Fetch of one partition, as a consumer (replica id -1) sends it.
pub(super) fn request(ask: &Ask<'_>, version: i16) -> FetchRequest {
    let topic = FetchTopic::default().with_partitions(vec![
        FetchPartition::default()
            .with_partition(ask.partition)
            .with_fetch_offset(ask.from)
            .with_current_leader_epoch(if version >= 9 { ask.leader_epoch } else { -1 })
            .with_partition_max_bytes(ask.max_bytes),
    ]);
    let topic = if version >= TOPIC_ID_VERSION {
        topic.with_topic_id(ask.topic_id)
    } else {
        topic.with_topic(TopicName(StrBytes::from_string(ask.topic.to_owned())))
    };
    FetchRequest::default()
        .with_max_wait_ms(i32::try_from(ask.max_wait.as_millis()).unwrap_or(i32::MAX))
        .with_min_bytes(1)
        .with_max_bytes(ask.max_bytes)
        .with_isolation_level(isolation_level(ask.isolation))
        // Sessionless: session 0 at the final epoch.
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(vec![topic])
}

/// The answer's entry for the partition asked about, if it has one.
pub(super) fn partition_of(
    response: FetchResponse,
    ask: &Ask<'_>,
    version: i16,
) -> Option<PartitionData> {
    response
        .responses
        .into_iter()
        .filter(|t| {
            if version >= TOPIC_ID_VERSION {
                t.topic_id == ask.topic_id
            } else {
                t.topic.0.as_str() == ask.topic
            }
        })
        .flat_map(|t| t.partitions)
        .find(|p| p.partition_index == ask.partition)
}

/// What [`extract`] needs of a partition's answer.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fetched {
    /// The `Records` field.
    pub(crate) records: Option<Bytes>,
    /// `(producer_id, first_offset)` of the aborted transactions, in the broker's order.
    pub(crate) aborted: Vec<(i64, i64)>,
    pub(crate) high_watermark: i64,
    /// -1 when the broker does not know it.
    pub(crate) last_stable_offset: i64,
}

impl From<PartitionData> for Fetched {
    fn from(data: PartitionData) -> Self {
        Self {
            aborted: data
                .aborted_transactions
                .unwrap_or_default()
                .iter()
                .map(|a| (a.producer_id.0, a.first_offset))
                .collect(),
            records: data.records,
            high_watermark: data.high_watermark,
            last_stable_offset: data.last_stable_offset,
        }
    }
}

/// Why the records of an answer could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ExtractError {
    /// The first batch to read is corrupt.
    #[error("{0}")]
    Corrupt(#[from] BatchError),
    /// The answer holds bytes but no complete batch (brokers always send the first batch
    /// whole, however large).
    #[error("the answer holds {bytes} bytes of records but no complete batch")]
    NoCompleteBatch {
        /// Size of the `Records` field.
        bytes: usize,
    },
}

/// The records of `fetched` from offset `from` as a reader of `isolation` sees them.
///
/// Batches are taken in the answer's order; records before `from` (a batch may begin
/// earlier) and records at or past an offset already passed are skipped. Control batches are
/// never records. Under `read_committed` the batches of aborted transactions are dropped
/// ([`AbortedTransactions`]) and nothing at or past the last stable offset is read.
///
/// `next_offset` is one past the last batch consumed (control batches and dropped ones
/// included), or `from` when none was. A corrupt batch ends the read before it when something
/// was consumed, so the records before it are not lost; when it is the first, the read fails.
pub(crate) fn extract(
    topic: &Arc<str>,
    partition: i32,
    from: i64,
    isolation: IsolationLevel,
    fetched: Fetched,
) -> Result<LogRead, ExtractError> {
    let committed = isolation == IsolationLevel::ReadCommitted;
    let ends = (fetched.high_watermark, fetched.last_stable_offset);
    let mut aborted = AbortedTransactions::new(if committed {
        fetched.aborted
    } else {
        Vec::new()
    });
    let stable_end =
        (committed && fetched.last_stable_offset >= 0).then_some(fetched.last_stable_offset);
    let bytes = fetched.records.as_ref().map_or(0, Bytes::len);
    let scanned = record_batch::scan_batches(fetched.records.unwrap_or_default());
    if scanned.batches.is_empty() && bytes > 0 {
        return Err(ExtractError::NoCompleteBatch { bytes });
    }
    let mut records = Vec::new();
    let mut next = from;
    let mut decompressed = 0usize;
    let mut decompressed_any = false;
    for batch in scanned.batches {
        // A batch that does not verify fails the read wherever it claims to be: its
        // baseOffset is not covered by the checksum.
        let raw = match batch {
            Ok(raw) => raw,
            Err(error) => return corrupt(error, records, from, next, ends),
        };
        let last = raw.last_offset;
        if last < next {
            continue; // wholly before what is still to read
        }
        if stable_end.is_some_and(|end| raw.base_offset >= end) {
            break;
        }
        if raw.control && !committed {
            next = last.saturating_add(1);
            continue;
        }
        let compressed = raw.compression != Compression::None;
        let limit = if !compressed || !decompressed_any {
            MAX_DECOMPRESSED_BATCH
        } else if decompressed < MAX_DECOMPRESSED_PER_READ {
            MAX_DECOMPRESSED_PER_READ - decompressed
        } else {
            break; // the read's budget is spent: the rest comes next time
        };
        let decoded = raw.decode_within(limit);
        if compressed {
            decompressed = decompressed.saturating_add(decoded.decompressed);
            decompressed_any = true;
        }
        let batch = match decoded.batch {
            Ok(batch) => batch,
            Err(error)
                if limit < MAX_DECOMPRESSED_BATCH
                    && matches!(error.kind, BatchErrorKind::DecompressedTooLarge { .. }) =>
            {
                break; // beyond this read's budget, not its cap: read it next time
            }
            Err(error) => {
                return corrupt(error, records, from, next, ends);
            }
        };
        if batch.control {
            let marker = ControlType::of_key(batch.records.first().and_then(|r| r.key.as_deref()));
            aborted.control(batch.producer_id, last, marker);
            next = last.saturating_add(1);
            continue;
        }
        if committed && aborted.is_aborted(batch.producer_id, batch.transactional, last) {
            next = last.saturating_add(1);
            continue;
        }
        let timestamp_type = batch.timestamp_type;
        let mut stopped = false;
        for record in batch.records {
            if record.offset < next {
                continue;
            }
            if stable_end.is_some_and(|end| record.offset >= end) {
                stopped = true;
                break;
            }
            next = record.offset.saturating_add(1);
            records.push(convert(topic, partition, record, timestamp_type));
        }
        if stopped {
            // Defensive (brokers stop there): the last stable offset ends the read.
            break;
        }
        next = next.max(last.saturating_add(1));
    }
    Ok(LogRead::new(records, next, ends.0, ends.1))
}

/// A corrupt batch at `next`: the read so far when it consumed something, else the error.
fn corrupt(
    error: BatchError,
    records: Vec<ConsumerRecord>,
    from: i64,
    next: i64,
    (high_watermark, last_stable_offset): (i64, i64),
) -> Result<LogRead, ExtractError> {
    if next > from {
        Ok(LogRead::new(
            records,
            next,
            high_watermark,
            last_stable_offset,
        ))
    } else {
        Err(ExtractError::Corrupt(error))
    }
}

/// A decoded record as a [`ConsumerRecord`], delivered once: headers as on the wire (order,
/// repeated keys, null values), no timestamp type when it has no timestamp.
fn convert(
    topic: &Arc<str>,
    partition: i32,
    record: record_batch::Record,
    timestamp_type: record_batch::TimestampType,
) -> ConsumerRecord {
    let headers: Headers = record
        .headers
        .into_iter()
        .map(|(key, value)| Header::new(key, value))
        .collect();
    let timestamp_type = match timestamp_type {
        _ if record.timestamp < 0 => TimestampType::NoTimestampType,
        record_batch::TimestampType::CreateTime => TimestampType::CreateTime,
        record_batch::TimestampType::LogAppendTime => TimestampType::LogAppendTime,
    };
    ConsumerRecord::new(Arc::clone(topic), partition, record.offset)
        .with_key(record.key)
        .with_value(record.value)
        .with_headers(headers)
        .with_timestamp(record.timestamp, timestamp_type)
        .with_delivery_count(1)
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::*;
    use crate::kafka::codec::record_batch::{EncodeOptions, NewRecord, encode_batch};

    const NO_PRODUCER: i64 = -1;

    fn value(offset: i64) -> Bytes {
        Bytes::from(format!("v{offset}"))
    }

    /// A data batch of `count` records from `base`, by `producer` (transactional or not).
    fn data(base: i64, count: i64, producer: i64, transactional: bool) -> Bytes {
        data_with(base, count, producer, transactional, Compression::None)
    }

    fn data_with(
        base: i64,
        count: i64,
        producer: i64,
        transactional: bool,
        compression: Compression,
    ) -> Bytes {
        let records: Vec<NewRecord> = (base..base + count)
            .map(|offset| NewRecord {
                timestamp: 1_000 + offset,
                key: Some(Bytes::from(format!("k{offset}"))),
                value: Some(value(offset)),
                headers: Vec::new(),
            })
            .collect();
        encode_batch(
            &records,
            &EncodeOptions {
                base_offset: base,
                compression,
                producer_id: producer,
                producer_epoch: if producer >= 0 { 0 } else { -1 },
                base_sequence: if producer >= 0 { 0 } else { -1 },
                transactional,
                ..EncodeOptions::default()
            },
        )
    }

    /// A transaction marker of `producer` at `offset`: key `version 0, type`, value
    /// `version 0, coordinator epoch 7`.
    fn marker(offset: i64, producer: i64, abort: bool) -> Bytes {
        let kind: i16 = if abort { 0 } else { 1 };
        let mut key = BytesMut::new();
        key.extend_from_slice(&0i16.to_be_bytes());
        key.extend_from_slice(&kind.to_be_bytes());
        let mut value = BytesMut::new();
        value.extend_from_slice(&0i16.to_be_bytes());
        value.extend_from_slice(&7i32.to_be_bytes());
        encode_batch(
            &[NewRecord {
                timestamp: 5_000,
                key: Some(key.freeze()),
                value: Some(value.freeze()),
                headers: Vec::new(),
            }],
            &EncodeOptions {
                base_offset: offset,
                producer_id: producer,
                producer_epoch: 0,
                transactional: true,
                control: true,
                ..EncodeOptions::default()
            },
        )
    }

    fn joined(batches: &[Bytes]) -> Bytes {
        batches.concat().into()
    }

    fn fetched(batches: &[Bytes], aborted: &[(i64, i64)], lso: i64) -> Fetched {
        Fetched {
            records: Some(joined(batches)),
            aborted: aborted.to_vec(),
            high_watermark: 100,
            last_stable_offset: lso,
        }
    }

    fn read(from: i64, isolation: IsolationLevel, fetched: Fetched) -> LogRead {
        extract(&Arc::from("t"), 0, from, isolation, fetched).expect("reads")
    }

    fn offsets(read: &LogRead) -> Vec<i64> {
        read.records.iter().map(ConsumerRecord::offset).collect()
    }

    const COMMITTED: IsolationLevel = IsolationLevel::ReadCommitted;
    const UNCOMMITTED: IsolationLevel = IsolationLevel::ReadUncommitted;

    /// Producer 1 aborts a transaction at 0..=1 and writes on in it at 4, producer 2 commits
    /// one at 2..=3, producer 1 then commits one at 7..=8, plain records at 10..=11, and
    /// producer 3 aborts one at 12..=13 (its marker at 14).
    fn interleaved() -> Vec<Bytes> {
        vec![
            data(0, 2, 1, true),
            data(2, 2, 2, true),
            data(4, 1, 1, true),
            marker(5, 2, false),
            marker(6, 1, true),
            data(7, 2, 1, true),
            marker(9, 1, false),
            data(10, 2, NO_PRODUCER, false),
            data(12, 2, 3, true),
            marker(14, 3, true),
        ]
    }

    #[test]
    fn read_committed_drops_aborted_transactions_of_interleaved_producers_from_an_unsorted_list() {
        // The broker's list out of order: sorted client-side.
        let aborted = [(3, 12), (1, 0)];
        let got = read(0, COMMITTED, fetched(&interleaved(), &aborted, 15));
        assert_eq!(offsets(&got), vec![2, 3, 7, 8, 10, 11]);
        assert_eq!(got.next_offset, 15);
        assert_eq!((got.high_watermark, got.last_stable_offset), (100, 15));
        let values: Vec<_> = got.records.iter().map(|r| r.value().cloned()).collect();
        assert_eq!(values[0], Some(value(2)));
    }

    #[test]
    fn read_uncommitted_keeps_every_data_record_and_no_control_record() {
        let got = read(
            0,
            UNCOMMITTED,
            fetched(&interleaved(), &[(3, 12), (1, 0)], 15),
        );
        assert_eq!(offsets(&got), vec![0, 1, 2, 3, 4, 7, 8, 10, 11, 12, 13]);
        assert_eq!(got.next_offset, 15);
    }

    #[test]
    fn an_abort_marker_ends_the_aborted_range_so_a_later_transaction_is_kept() {
        // Producer 1: aborted at 0, marker at 1, a new (committed) transaction at 2..=3.
        let batches = [
            data(0, 1, 1, true),
            marker(1, 1, true),
            data(2, 2, 1, true),
            marker(4, 1, false),
        ];
        let got = read(0, COMMITTED, fetched(&batches, &[(1, 0)], 5));
        assert_eq!(offsets(&got), vec![2, 3]);
        assert_eq!(got.next_offset, 5);
        // Listed after the marker: the second transaction aborted too.
        let got = read(0, COMMITTED, fetched(&batches, &[(1, 2), (1, 0)], 5));
        assert_eq!(offsets(&got), Vec::<i64>::new());
        assert_eq!(got.next_offset, 5);
    }

    #[test]
    fn a_transaction_aborted_before_from_is_still_dropped_after_it() {
        // The transaction began at 0, the read starts at 2 inside it.
        let batches = [data(0, 2, 1, true), data(2, 2, 1, true), marker(4, 1, true)];
        let got = read(2, COMMITTED, fetched(&batches, &[(1, 0)], 5));
        assert!(got.records.is_empty());
        assert_eq!(got.next_offset, 5);
    }

    #[test]
    fn non_transactional_batches_of_a_producer_id_are_kept() {
        // An idempotent (not transactional) producer whose id is listed: kept.
        let batches = [data(0, 2, 1, false)];
        let got = read(0, COMMITTED, fetched(&batches, &[(1, 0)], 2));
        assert_eq!(offsets(&got), vec![0, 1]);
    }

    #[test]
    fn records_before_from_in_a_batch_starting_earlier_are_skipped() {
        for compression in [Compression::None, Compression::Zstd, Compression::Gzip] {
            let batches = [data_with(0, 5, NO_PRODUCER, false, compression)];
            let got = read(2, UNCOMMITTED, fetched(&batches, &[], 5));
            assert_eq!(offsets(&got), vec![2, 3, 4], "{compression:?}");
            assert_eq!(got.next_offset, 5);
        }
    }

    #[test]
    fn read_committed_stops_at_the_last_stable_offset() {
        let batches = [data(0, 2, NO_PRODUCER, false), data(2, 2, 1, true)];
        let got = read(0, COMMITTED, fetched(&batches, &[], 2));
        assert_eq!(offsets(&got), vec![0, 1]);
        assert_eq!(got.next_offset, 2);
        let got = read(0, UNCOMMITTED, fetched(&batches, &[], 2));
        assert_eq!(offsets(&got), vec![0, 1, 2, 3]);
        assert_eq!(got.next_offset, 4);
    }

    #[test]
    fn an_empty_answer_reads_nothing_and_stays_at_from() {
        let got = read(
            7,
            COMMITTED,
            Fetched {
                records: None,
                high_watermark: 7,
                last_stable_offset: 7,
                ..Fetched::default()
            },
        );
        assert!(got.records.is_empty());
        assert_eq!(got.next_offset, 7);
    }

    fn corrupted(batch: &Bytes) -> Bytes {
        let mut bytes = batch.to_vec();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        bytes.into()
    }

    #[test]
    fn a_corrupt_first_batch_is_an_error_and_one_after_good_ones_ends_the_read_before_it() {
        let good = data(0, 2, NO_PRODUCER, false);
        let bad = corrupted(&data(2, 2, NO_PRODUCER, false));
        let error = extract(
            &Arc::from("t"),
            0,
            2,
            UNCOMMITTED,
            fetched(std::slice::from_ref(&bad), &[], 4),
        )
        .expect_err("corrupt");
        assert!(
            matches!(&error, ExtractError::Corrupt(e) if e.base_offset == 2),
            "{error:?}"
        );
        let got = read(0, UNCOMMITTED, fetched(&[good, bad], &[], 4));
        assert_eq!(offsets(&got), vec![0, 1]);
        assert_eq!(got.next_offset, 2);
    }

    #[test]
    fn a_batch_cut_short_is_left_for_the_next_read() {
        let whole = data(0, 2, NO_PRODUCER, false);
        let next = data(2, 2, NO_PRODUCER, false);
        let cut = next.slice(..next.len() - 3);
        let got = read(0, UNCOMMITTED, fetched(&[whole, cut.clone()], &[], 4));
        assert_eq!(offsets(&got), vec![0, 1]);
        assert_eq!(got.next_offset, 2);
        let error = extract(&Arc::from("t"), 0, 2, UNCOMMITTED, fetched(&[cut], &[], 4))
            .expect_err("nothing whole");
        assert!(
            matches!(error, ExtractError::NoCompleteBatch { .. }),
            "{error:?}"
        );
    }

    #[test]
    fn headers_timestamps_and_delivery_count_are_kept() {
        let headers = vec![
            ("a".to_owned(), Some(Bytes::from_static(b"1"))),
            ("a".to_owned(), None),
            ("b".to_owned(), Some(Bytes::new())),
            ("a".to_owned(), Some(Bytes::from_static(b"2"))),
        ];
        let records = [
            NewRecord {
                timestamp: 42,
                key: None,
                value: None,
                headers: headers.clone(),
            },
            NewRecord {
                timestamp: -1,
                ..NewRecord::default()
            },
        ];
        let create = encode_batch(&records, &EncodeOptions::default());
        let appended = encode_batch(
            &records[..1],
            &EncodeOptions {
                base_offset: 2,
                log_append_time: Some(99),
                ..EncodeOptions::default()
            },
        );
        let got = read(0, UNCOMMITTED, fetched(&[create, appended], &[], 3));
        let kept: Vec<(String, Option<Bytes>)> = got.records[0]
            .headers()
            .iter()
            .map(|h| (h.key().to_owned(), h.value().cloned()))
            .collect();
        assert_eq!(kept, headers);
        let stamps: Vec<_> = got
            .records
            .iter()
            .map(|r| (r.timestamp(), r.timestamp_type(), r.delivery_count()))
            .collect();
        assert_eq!(
            stamps,
            vec![
                (42, TimestampType::CreateTime, 1),
                (-1, TimestampType::NoTimestampType, 1),
                (99, TimestampType::LogAppendTime, 1),
            ]
        );
        assert_eq!(got.records[0].key(), None);
        assert_eq!(got.records[0].value(), None);
    }

    #[test]
    fn the_request_names_the_topic_by_id_from_v13_and_sets_isolation() {
        let ask = Ask {
            topic: "t",
            topic_id: Uuid::from_u128(7),
            partition: 3,
            from: 11,
            leader_epoch: 4,
            isolation: COMMITTED,
            max_wait: Duration::MAX,
            max_bytes: 1 << 20,
        };
        let v12 = request(&ask, 12);
        assert_eq!(v12.topics[0].topic.0.as_str(), "t");
        assert_eq!(v12.isolation_level, 1);
        assert_eq!(v12.max_wait_ms, i32::MAX);
        assert_eq!(v12.replica_id.0, -1);
        assert_eq!(v12.topics[0].partitions[0].fetch_offset, 11);
        assert_eq!(v12.topics[0].partitions[0].current_leader_epoch, 4);
        let v13 = request(&ask, 13);
        assert_eq!(v13.topics[0].topic_id, Uuid::from_u128(7));
        assert!(v13.topics[0].topic.0.is_empty());
        let v4 = request(&ask, 4);
        assert_eq!(v4.topics[0].partitions[0].current_leader_epoch, -1);
        let mut buf = BytesMut::new();
        use kafka_protocol::protocol::Encodable;
        for version in [4, 12, 13, 18] {
            request(&ask, version)
                .encode(&mut buf, version)
                .expect("encodes");
        }
    }
}
