//! Turning the `Records` bytes of a ShareFetch partition into the records this member acquired.
//!
//! A response carries whole log batches, which may hold offsets acquired by other members and
//! control records. Only offsets inside `AcquiredRecords` are delivered, each with its range's
//! delivery count; acquired offsets with no data record (control records, compacted away) are
//! acknowledged as GAP; acquired offsets of a batch that cannot be decoded are rejected, as the
//! Java client does, since no retry can make a corrupt batch readable. Batches are decoded by
//! our own [`record_batch`] codec, which keeps repeated header keys (kafka-protocol's merges
//! them) and bounds its allocations by the input.

use std::sync::Arc;

use crate::kafka::codec::record_batch;
use crate::record::{ConsumerRecord, Headers, TimestampType};
use bytes::Bytes;

/// An acquired offset range with its delivery count, inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AcquiredRange {
    pub(crate) first: i64,
    pub(crate) last: i64,
    pub(crate) delivery_count: u16,
}

/// What one partition of a ShareFetch response yields.
#[derive(Debug, Default)]
pub(crate) struct Extracted {
    /// Records to hand to the application, in offset order.
    pub(crate) records: Vec<ConsumerRecord>,
    /// Acquired offsets with no data record: acknowledge as GAP.
    pub(crate) gaps: Vec<i64>,
    /// Acquired offsets in batches that could not be decoded: acknowledge as REJECT.
    pub(crate) corrupt: Vec<i64>,
    /// Acquired offsets from a batch the response cut short, or past the data it carried:
    /// acknowledge as RELEASE, so they come back at once instead of waiting for their lock.
    pub(crate) cut: Vec<i64>,
    /// Why batches could not be decoded, for the log.
    pub(crate) errors: Vec<String>,
}

fn convert(
    topic: &Arc<str>,
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
    ConsumerRecord::new(Arc::clone(topic), partition, record.offset)
        .with_key(record.key)
        .with_value(record.value)
        .with_headers(headers)
        .with_timestamp(record.timestamp, timestamp_type)
        .with_delivery_count(delivery_count)
}

fn delivery_count_at(acquired: &[AcquiredRange], offset: i64) -> Option<u16> {
    // Ranges are few and sorted; a linear scan from the start is fine.
    acquired
        .iter()
        .find(|r| r.first <= offset && offset <= r.last)
        .map(|r| r.delivery_count)
}

/// Extracts the acquired records of one partition. Never fails: what cannot be decoded is
/// reported in `corrupt` and `errors`.
pub(crate) fn extract(
    topic: &Arc<str>,
    partition: i32,
    data: Option<Bytes>,
    acquired: &[AcquiredRange],
) -> Extracted {
    let mut out = Extracted::default();
    let mut acquired: Vec<AcquiredRange> = acquired
        .iter()
        .copied()
        .filter(|r| r.first <= r.last)
        .collect();
    acquired.sort_by_key(|r| r.first);
    if acquired.is_empty() {
        return out;
    }
    // Offsets for which a data record (or a corrupt batch) was seen.
    let mut covered: Vec<i64> = Vec::new();
    let decoded = record_batch::decode_batches(data.unwrap_or_default());
    let cut_from = decoded.cut_from;
    // The last offset the complete batches speak for; past it nothing is known.
    let mut data_end: Option<i64> = None;
    for batch in decoded.batches {
        let last = match &batch {
            Ok(b) => b.last_offset,
            Err(e) => e.last_offset,
        };
        data_end = Some(data_end.map_or(last, |end| end.max(last)));
        match batch {
            Ok(batch) => {
                let timestamp_type = match batch.timestamp_type {
                    record_batch::TimestampType::CreateTime => TimestampType::CreateTime,
                    record_batch::TimestampType::LogAppendTime => TimestampType::LogAppendTime,
                };
                for record in batch.records {
                    let offset = record.offset;
                    let Some(dc) = delivery_count_at(&acquired, offset) else {
                        continue;
                    };
                    covered.push(offset);
                    if batch.control {
                        out.gaps.push(offset);
                    } else {
                        out.records
                            .push(convert(topic, partition, record, timestamp_type, dc));
                    }
                }
            }
            Err(error) => {
                out.errors.push(format!(
                    "batch at offsets {}..={} of {topic}-{partition} cannot be decoded: {error}",
                    error.base_offset, error.last_offset
                ));
                for r in &acquired {
                    let from = r.first.max(error.base_offset);
                    let to = r.last.min(error.last_offset);
                    for offset in from..=to {
                        covered.push(offset);
                        out.corrupt.push(offset);
                    }
                }
            }
        }
    }
    // Acquired offsets that no data record covered are gaps (control records, compaction)
    // when a complete batch spans them, as in the Java client. Past the last complete batch
    // (a cut-short batch, or data the response did not carry) they are released instead:
    // acknowledging a GAP there could archive records nobody has seen.
    covered.sort_unstable();
    covered.dedup();
    for r in &acquired {
        for offset in r.first..=r.last {
            if covered.binary_search(&offset).is_ok() {
                continue;
            }
            let beyond_data = data_end.is_none_or(|end| offset > end);
            if beyond_data || cut_from.is_some_and(|from| offset >= from) {
                out.cut.push(offset);
            } else {
                out.gaps.push(offset);
            }
        }
    }
    out.records.sort_by_key(ConsumerRecord::offset);
    out.gaps.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions};

    use kafka_protocol::records;

    use super::*;

    /// Offset of `recordsCount` in a v2 batch header.
    const RECORDS_COUNT_AT: usize = 57;

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

    fn range(first: i64, last: i64, dc: u16) -> AcquiredRange {
        AcquiredRange {
            first,
            last,
            delivery_count: dc,
        }
    }

    #[test]
    fn only_acquired_offsets_are_delivered_with_their_delivery_count() {
        let topic: Arc<str> = "t".into();
        let data = encode(
            &(0..6).map(|o| record(o, "v")).collect::<Vec<_>>(),
            Compression::None,
        );
        let got = extract(&topic, 2, Some(data), &[range(4, 5, 3), range(1, 2, 1)]);
        let seen: Vec<(i64, u16)> = got
            .records
            .iter()
            .map(|r| (r.offset(), r.delivery_count()))
            .collect();
        assert_eq!(seen, vec![(1, 1), (2, 1), (4, 3), (5, 3)]);
        assert!(got.gaps.is_empty() && got.corrupt.is_empty());
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
        let topic: Arc<str> = "t".into();
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
            let got = extract(&topic, 0, Some(data), &[range(0, 2, 1)]);
            assert_eq!(got.records.len(), 3, "{compression:?}: {:?}", got.errors);
        }
    }

    #[test]
    fn acquired_offsets_without_data_are_gaps_and_a_partial_batch_is_left_alone() {
        let topic: Arc<str> = "t".into();
        let mut first = encode(&[record(0, "a"), record(2, "c")], Compression::None).to_vec();
        let second = encode(&[record(3, "d"), record(4, "e")], Compression::None);
        first.extend_from_slice(&second[..second.len() - 5]); // truncated
        let got = extract(&topic, 0, Some(Bytes::from(first)), &[range(0, 4, 1)]);
        assert_eq!(
            got.records
                .iter()
                .map(ConsumerRecord::offset)
                .collect::<Vec<_>>(),
            vec![0, 2]
        );
        assert_eq!(got.gaps, vec![1], "offset 1 has no record");
        assert_eq!(
            got.cut,
            vec![3, 4],
            "3 and 4 were cut off: released, not gaps"
        );
    }

    #[test]
    fn a_corrupt_batch_rejects_its_acquired_offsets_and_never_panics() {
        let topic: Arc<str> = "t".into();
        let good = encode(&[record(0, "a"), record(1, "b")], Compression::None);
        let mut bad = good.to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 0xff; // breaks the CRC
        let got = extract(&topic, 0, Some(Bytes::from(bad)), &[range(0, 1, 1)]);
        assert!(got.records.is_empty());
        assert_eq!(got.corrupt, vec![0, 1]);
        assert_eq!(got.errors.len(), 1);

        // Every prefix and a huge record count: no panic, no huge allocation.
        for cut in 0..good.len() {
            let _ = extract(&topic, 0, Some(good.slice(..cut)), &[range(0, 1, 1)]);
        }
        let mut huge = good.to_vec();
        huge[RECORDS_COUNT_AT..RECORDS_COUNT_AT + 4].copy_from_slice(&i32::MAX.to_be_bytes());
        let got = extract(&topic, 0, Some(Bytes::from(huge)), &[range(0, 1, 1)]);
        assert_eq!(got.corrupt, vec![0, 1]);
    }

    #[test]
    fn acquired_offsets_past_the_data_are_released_not_gaps() {
        let topic: Arc<str> = "t".into();
        let data = encode(&[record(0, "a")], Compression::None);
        let got = extract(&topic, 0, Some(data), &[range(0, 2, 1)]);
        assert_eq!(got.records.len(), 1);
        assert!(got.gaps.is_empty(), "{:?}", got.gaps);
        assert_eq!(got.cut, vec![1, 2]);
        let got = extract(&topic, 0, None, &[range(5, 6, 1)]);
        assert_eq!((got.gaps.len(), got.cut.clone()), (0, vec![5, 6]));
    }
}
