//! A minimal `read_committed` reader for the producer tests: Fetch v11 with
//! isolation_level=1, dropping control records and the records of aborted transactions
//! (the response's `aborted_transactions`). Swap for the crate's `KafkaLogReader` once it
//! lands. Include with `#[path = "support/read_committed.rs"] mod read_committed;`.

#![allow(dead_code, reason = "each test binary uses part of it")]

use std::collections::HashSet;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, MetadataRequest, MetadataResponse, RequestHeader,
    ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{Record, RecordBatchDecoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn exchange<Req: Encodable + Sync, Resp: Decodable>(
    stream: &mut TcpStream,
    key: ApiKey,
    version: i16,
    request: &Req,
    header_version: i16,
    response_header_version: i16,
) -> Resp {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(1);
    let mut body = BytesMut::new();
    header.encode(&mut body, header_version).expect("header");
    request.encode(&mut body, version).expect("request");
    let mut frame = BytesMut::new();
    frame.put_i32(i32::try_from(body.len()).expect("size"));
    frame.extend_from_slice(&body);
    stream.write_all(&frame).await.expect("write");
    let size = stream.read_i32().await.expect("size");
    let mut buf = vec![0u8; usize::try_from(size).expect("positive")];
    stream.read_exact(&mut buf).await.expect("read");
    let mut buf = Bytes::from(buf);
    ResponseHeader::decode(&mut buf, response_header_version).expect("response header");
    Resp::decode(&mut buf, version).expect("response")
}

/// The leader's address of `topic`/`partition`, through `bootstrap` (one address).
async fn leader(bootstrap: &str, topic: &str, partition: i32) -> String {
    let first = bootstrap.split(',').next().expect("an address").trim();
    let mut stream = TcpStream::connect(first).await.expect("connect");
    let request = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
            TopicName(StrBytes::from_string(topic.to_owned())),
        ))]));
    let response: MetadataResponse =
        exchange(&mut stream, ApiKey::Metadata, 8, &request, 1, 0).await;
    let t = response
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == topic))
        .expect("topic in metadata");
    let p = t
        .partitions
        .iter()
        .find(|p| p.partition_index == partition)
        .expect("partition");
    let b = response
        .brokers
        .iter()
        .find(|b| b.node_id == p.leader_id)
        .expect("leader broker");
    format!("{}:{}", b.host.as_str(), b.port)
}

/// Every record of `topic`/`partition` a `read_committed` consumer sees, in offset order,
/// up to the last stable offset, once that reaches the high watermark (markers of a
/// transaction just ended are written a moment after EndTxn returns); at most 10 s.
pub(crate) async fn read_committed(bootstrap: &str, topic: &str, partition: i32) -> Vec<Record> {
    let address = leader(bootstrap, topic, partition).await;
    let mut stream = TcpStream::connect(&address).await.expect("connect leader");
    let mut offset = 0i64;
    let mut out = Vec::new();
    let mut aborted_pids: HashSet<i64> = HashSet::new();
    let mut aborted: Vec<(i64, i64)> = Vec::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let request = FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_max_wait_ms(100)
            .with_min_bytes(0)
            .with_max_bytes(16 << 20)
            .with_isolation_level(1)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partitions(vec![
                        FetchPartition::default()
                            .with_partition(partition)
                            .with_fetch_offset(offset)
                            .with_partition_max_bytes(8 << 20),
                    ]),
            ]);
        let response: FetchResponse =
            exchange(&mut stream, ApiKey::Fetch, 11, &request, 1, 0).await;
        let p = response
            .responses
            .first()
            .and_then(|t| t.partitions.first())
            .expect("one partition");
        assert_eq!(p.error_code, 0, "fetch error");
        for a in p.aborted_transactions.iter().flatten() {
            if !aborted.contains(&(a.producer_id.0, a.first_offset)) {
                aborted.push((a.producer_id.0, a.first_offset));
            }
        }
        let stable = p.last_stable_offset;
        let mut records = p.records.clone().unwrap_or_default();
        let mut progressed = false;
        while records.has_remaining() {
            let Ok(set) = RecordBatchDecoder::decode(&mut records) else {
                break;
            };
            for record in set.records {
                if record.offset < offset {
                    continue;
                }
                progressed = true;
                offset = record.offset + 1;
                for (pid, first) in &aborted {
                    if *pid == record.producer_id && record.offset >= *first {
                        aborted_pids.insert(*pid);
                    }
                }
                if record.control {
                    // A marker ends the producer's transaction.
                    aborted_pids.remove(&record.producer_id);
                    aborted.retain(|(pid, first)| {
                        !(*pid == record.producer_id && *first <= record.offset)
                    });
                    continue;
                }
                if record.transactional && aborted_pids.contains(&record.producer_id) {
                    continue;
                }
                out.push(record);
            }
        }
        let settled = stable >= p.high_watermark;
        if (!progressed || offset >= stable) && (settled || tokio::time::Instant::now() >= deadline)
        {
            return out;
        }
        if !progressed {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}
