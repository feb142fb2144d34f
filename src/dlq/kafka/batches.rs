//! Dead-letter records to record batches: a partition per record, as Kafka's Java producer
//! picks it, then batches of bounded size per partition, encoded once and resent as they are.

use std::time::SystemTime;

use bytes::Bytes;

use crate::dlq::DeadLetterRecord;
use crate::kafka::codec::record_batch::{EncodeOptions, NewRecord, encode_batch};
use crate::kafka::producer::partitioner::partition_for_key;

/// Most estimated bytes of records in one batch: below the broker's default
/// `message.max.bytes` (1 MiB plus a little), and Java's default `max.request.size`
/// (1 MiB). A single larger record still gets a batch of its own, which the broker may
/// refuse with MESSAGE_TOO_LARGE.
const MAX_BATCH_BYTES: usize = 1_000_000;

/// Bytes a record takes on the wire besides its key, value and header bytes, at most
/// (length, attributes, deltas, length prefixes).
const RECORD_OVERHEAD: usize = 32;

/// One encoded batch for one partition.
#[derive(Debug, Clone)]
pub(super) struct Batch {
    /// The partition it goes to.
    pub(super) partition: i32,
    /// The encoded v2 record batch.
    pub(super) bytes: Bytes,
}

/// Splits `records` over `partitions` partitions (at least 1): a keyed record goes to
/// `murmur2(key) % partitions`, as the Java producer's default partitioner sends it; every
/// unkeyed record goes to partition `unkeyed % partitions` (sticky, as Java's partitioner
/// is for a batch). Per partition, records keep their order and are cut into batches of at
/// most [`MAX_BATCH_BYTES`]. A record without a timestamp gets `now_ms`.
pub(super) fn batches(
    records: Vec<DeadLetterRecord>,
    partitions: usize,
    unkeyed: usize,
    now_ms: i64,
) -> Vec<Batch> {
    let partitions = partitions.max(1);
    let mut by_partition: Vec<Vec<NewRecord>> = vec![Vec::new(); partitions];
    for record in records {
        let partition = record.key.as_ref().map_or(unkeyed % partitions, |key| {
            partition_for_key(key, partitions)
        });
        by_partition[partition].push(NewRecord {
            timestamp: record.timestamp.unwrap_or(now_ms),
            headers: record
                .headers
                .iter()
                .map(|h| (h.key().to_owned(), h.value().cloned()))
                .collect(),
            key: record.key,
            value: record.value,
        });
    }
    let mut out = Vec::new();
    for (partition, records) in by_partition.iter().enumerate() {
        let partition = i32::try_from(partition).unwrap_or(i32::MAX);
        let mut start = 0;
        let mut size = 0;
        for (i, record) in records.iter().enumerate() {
            let record_size = estimated_size(record);
            if i > start && size + record_size > MAX_BATCH_BYTES {
                out.push(encode(partition, &records[start..i]));
                start = i;
                size = 0;
            }
            size += record_size;
        }
        if start < records.len() {
            out.push(encode(partition, &records[start..]));
        }
    }
    out
}

/// The time now in milliseconds since the epoch, as Kafka's producer stamps records.
pub(super) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn encode(partition: i32, records: &[NewRecord]) -> Batch {
    Batch {
        partition,
        bytes: encode_batch(records, &EncodeOptions::default()),
    }
}

fn estimated_size(record: &NewRecord) -> usize {
    let len = |b: &Option<Bytes>| b.as_ref().map_or(0, Bytes::len);
    RECORD_OVERHEAD
        + len(&record.key)
        + len(&record.value)
        + record
            .headers
            .iter()
            .map(|(k, v)| RECORD_OVERHEAD + k.len() + len(v))
            .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::codec::record_batch::decode_batches;
    use crate::record::{ConsumerRecord, Headers, TimestampType};

    fn record(key: Option<&'static [u8]>, value: Vec<u8>) -> DeadLetterRecord {
        let mut headers = Headers::new();
        headers.push("h", Some(Bytes::from_static(b"1")));
        headers.push("h", None);
        DeadLetterRecord::new(
            &ConsumerRecord::new("t", 0, 0)
                .with_key(key.map(Bytes::from_static))
                .with_value(Some(value.into()))
                .with_headers(headers)
                .with_timestamp(-1, TimestampType::NoTimestampType),
        )
    }

    #[test]
    fn keyed_records_follow_murmur2_and_unkeyed_ones_stick_together() {
        // Kafka's Utils.murmur2: "foobar" -> 1357151166 (positive), % 4 = 2; "21" -> % 4 = 0.
        let records = vec![
            record(Some(b"foobar"), vec![1]),
            record(None, vec![2]),
            record(Some(b"21"), vec![3]),
            record(None, vec![4]),
        ];
        let out = batches(records, 4, 5, 77);
        let placed: Vec<(i32, Vec<u8>)> = out
            .iter()
            .flat_map(|b| {
                let decoded = decode_batches(b.bytes.clone());
                let batch = decoded.batches[0].clone().expect("our own batch decodes");
                batch
                    .records
                    .into_iter()
                    .map(|r| (b.partition, r.value.unwrap().to_vec()))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(
            placed,
            vec![(0, vec![3]), (1, vec![2]), (1, vec![4]), (2, vec![1])]
        );
    }

    #[test]
    fn headers_and_missing_timestamps_are_encoded() {
        let out = batches(vec![record(None, vec![9])], 1, 0, 1_234);
        let decoded = decode_batches(out[0].bytes.clone());
        let r = &decoded.batches[0].as_ref().unwrap().records[0];
        assert_eq!(r.timestamp, 1_234);
        assert_eq!(
            r.headers,
            vec![
                ("h".to_owned(), Some(Bytes::from_static(b"1"))),
                ("h".to_owned(), None)
            ]
        );
    }

    #[test]
    fn large_sets_are_cut_into_bounded_batches_in_order() {
        let records: Vec<_> = (0..5u8)
            .map(|i| record(None, vec![i; MAX_BATCH_BYTES / 2]))
            .collect();
        let out = batches(records, 1, 0, 0);
        // Two records of half the limit each do not fit together with their overhead.
        assert_eq!(out.len(), 5);
        let firsts: Vec<u8> = out
            .iter()
            .map(|b| {
                let decoded = decode_batches(b.bytes.clone());
                decoded.batches[0].as_ref().unwrap().records[0]
                    .value
                    .as_ref()
                    .unwrap()[0]
            })
            .collect();
        assert_eq!(firsts, vec![0, 1, 2, 3, 4]);
        let small: Vec<_> = (0..3u8).map(|i| record(None, vec![i; 10])).collect();
        assert_eq!(batches(small, 1, 0, 0).len(), 1);
    }
}
