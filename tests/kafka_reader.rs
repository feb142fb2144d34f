//! `KafkaLogReader` against a real broker (skipped without `KAFKA_BOOTSTRAP`).
//!
//! Data is written by two other producers: rskafka, an independent implementation, with every
//! compression codec (its header map allows unique keys and non-null values only), and the
//! crate's dead-letter queue, whose headers keep order, repeated keys and null values.

// `support` is shared with other test targets; its `pub` items are reachable only here.
#[allow(unreachable_pub)]
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use chrono::{TimeZone, Utc};
use kafka_share_sink::BrokerError;
use kafka_share_sink::producer::{IsolationLevel, KafkaLogReader, LogReader};
use kafka_share_sink::{
    ConsumerRecord, DeadLetterQueue, DeadLetterRecord, Headers, KafkaAdmin, KafkaDeadLetterQueue,
    KafkaDeadLetterQueueConfig, TimestampType,
};
use rskafka::client::partition::{Compression, OffsetAt};
use rskafka::record::Record;

const BOTH: [IsolationLevel; 2] = [
    IsolationLevel::ReadUncommitted,
    IsolationLevel::ReadCommitted,
];
const CODECS: [Compression; 5] = [
    Compression::NoCompression,
    Compression::Gzip,
    Compression::Lz4,
    Compression::Snappy,
    Compression::Zstd,
];
/// Records per codec.
const PER_CODEC: i64 = 4;
const TIMEOUT: Duration = Duration::from_secs(30);

/// What rskafka wrote at `offset`.
fn expected(offset: i64) -> (Bytes, Bytes, Vec<(String, Option<Bytes>)>, i64) {
    (
        Bytes::from(format!("key-{offset}")),
        Bytes::from(format!("value-{offset}-{}", "x".repeat(50))),
        vec![
            ("a-codec".to_owned(), Some(Bytes::from(format!("{offset}")))),
            ("b-empty".to_owned(), Some(Bytes::new())),
        ],
        1_700_000_000_000 + offset,
    )
}

fn seen(record: &ConsumerRecord) -> (Bytes, Bytes, Vec<(String, Option<Bytes>)>, i64) {
    (
        record.key().cloned().expect("a key"),
        record.value().cloned().expect("a value"),
        record
            .headers()
            .iter()
            .map(|h| (h.key().to_owned(), h.value().cloned()))
            .collect(),
        record.timestamp(),
    )
}

async fn reader(bootstrap: &str) -> KafkaLogReader {
    KafkaLogReader::builder(bootstrap)
        .client_id("reader-test")
        .connect()
        .await
        .expect("reader connects")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_every_codec_read_back_from_the_start_and_the_middle() {
    let Some(bootstrap) =
        support::bootstrap("records_of_every_codec_read_back_from_the_start_and_the_middle")
    else {
        return;
    };
    let topic = support::unique("reader-codecs");
    KafkaAdmin::connect(&bootstrap)
        .await
        .expect("admin")
        .create_topic(&topic, 1, 1)
        .await
        .expect("topic");
    let partition = support::rskafka_partition(&bootstrap, &topic, 0).await;
    let mut offset = 0;
    for codec in CODECS {
        let records: Vec<Record> = (offset..offset + PER_CODEC)
            .map(|o| {
                let (key, value, headers, timestamp) = expected(o);
                Record {
                    key: Some(key.to_vec()),
                    value: Some(value.to_vec()),
                    headers: headers
                        .into_iter()
                        .map(|(k, v)| (k, v.unwrap_or_default().to_vec()))
                        .collect::<BTreeMap<_, _>>(),
                    timestamp: Utc.timestamp_millis_opt(timestamp).unwrap(),
                }
            })
            .collect();
        let written = partition.produce(records, codec).await.expect("produced");
        assert_eq!(written.first(), Some(&offset), "{codec:?}");
        offset += PER_CODEC;
    }
    let end = offset;
    let rskafka_end = partition
        .get_offset(OffsetAt::Latest)
        .await
        .expect("latest");
    assert_eq!(rskafka_end, end);

    let reader = reader(&bootstrap).await;
    for isolation in BOTH {
        assert_eq!(
            reader.end_offset(&topic, 0, isolation).await.expect("end"),
            end,
            "{isolation:?}"
        );
        for from in [0, 6] {
            let records = reader
                .read_until(&topic, 0, from, end, isolation, TIMEOUT)
                .await
                .expect("reads to the end");
            let offsets: Vec<i64> = records.iter().map(ConsumerRecord::offset).collect();
            assert_eq!(offsets, (from..end).collect::<Vec<_>>(), "{isolation:?}");
            for record in &records {
                assert_eq!(seen(record), expected(record.offset()), "{isolation:?}");
                assert_eq!(record.timestamp_type(), TimestampType::CreateTime);
                assert_eq!(record.delivery_count(), 1);
                assert_eq!((record.topic(), record.partition()), (topic.as_str(), 0));
            }
        }
        // From the middle of a compressed batch (gzip holds 4..=7): the read starts at 6.
        let read = reader
            .read(&topic, 0, 6, isolation, Duration::from_millis(100))
            .await
            .expect("reads");
        assert_eq!(read.records.first().map(ConsumerRecord::offset), Some(6));
        assert_eq!((read.high_watermark, read.last_stable_offset), (end, end));
        // At the end: nothing, and the next read starts there again.
        let read = reader
            .read(&topic, 0, end, isolation, Duration::from_millis(100))
            .await
            .expect("reads at the end");
        assert!(read.records.is_empty());
        assert_eq!(read.next_offset, end);
    }

    let error = reader
        .read(
            &topic,
            0,
            end + 100,
            IsolationLevel::ReadCommitted,
            Duration::ZERO,
        )
        .await
        .expect_err("past the end");
    assert!(
        matches!(
            error,
            kafka_share_sink::ConsumerError::Broker(BrokerError {
                name: "OFFSET_OUT_OF_RANGE",
                ..
            })
        ),
        "{error:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_and_null_headers_read_back_exactly() {
    let Some(bootstrap) = support::bootstrap("repeated_and_null_headers_read_back_exactly") else {
        return;
    };
    let topic = support::unique("reader-headers");
    let dlq = KafkaDeadLetterQueue::connect(
        KafkaDeadLetterQueueConfig::new(&bootstrap, &topic)
            .replication_factor(1)
            .delivery_timeout(Duration::from_secs(30)),
    )
    .await
    .expect("dead-letter queue");
    let mut headers = Headers::new();
    headers.push("trace", Some(Bytes::from_static(b"a")));
    headers.push("none", None);
    headers.push("trace", Some(Bytes::from_static(b"b")));
    headers.push("empty", Some(Bytes::new()));
    headers.push("trace", None);
    let record = ConsumerRecord::new("orders", 0, 9)
        .with_key(None)
        .with_value(Some(Bytes::from_static(&[0x00, 0xff])))
        .with_headers(headers.clone())
        .with_timestamp(1_700_000_000_321, TimestampType::CreateTime);
    dlq.send(vec![
        DeadLetterRecord::new(&record),
        DeadLetterRecord::new(&record),
    ])
    .await
    .expect("written");

    let reader = reader(&bootstrap).await;
    for isolation in BOTH {
        let end = reader.end_offset(&topic, 0, isolation).await.expect("end");
        assert_eq!(end, 2);
        let read = reader
            .read_until(&topic, 0, 0, end, isolation, TIMEOUT)
            .await
            .expect("reads");
        assert_eq!(read.len(), 2);
        for got in &read {
            assert_eq!(got.headers(), &headers, "{isolation:?}");
            assert_eq!(got.key(), None);
            assert_eq!(got.value(), record.value());
            assert_eq!(got.timestamp(), 1_700_000_000_321);
        }
    }
}
