//! `KafkaLogReader` against the fake broker: corrupt batches, unsorted aborted-transaction
//! lists, leader moves and lost connections, errors that must not be retried.

#[path = "support/fake_broker.rs"]
mod fake_broker;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use fake_broker::{FakeBroker, Reply};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse,
    MetadataResponse, ProducerId, TopicName,
};
use kafka_protocol::protocol::{Message, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use kafka_share_sink::ConsumerError;
use kafka_share_sink::producer::{IsolationLevel, KafkaLogReader, LogReader};
use kafka_share_sink::{BrokerError, ProtocolError};

const TOPIC: &str = "ledger";
const WAIT: Duration = Duration::from_millis(10);

/// One batch of `count` records from `base`, by `producer` (-1: none).
fn batch(base: i64, count: i64, producer: i64, transactional: bool) -> Bytes {
    let records: Vec<Record> = (base..base + count)
        .map(|offset| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: producer,
            producer_epoch: if producer >= 0 { 0 } else { -1 },
            timestamp_type: TimestampType::Creation,
            offset,
            sequence: if producer >= 0 {
                i32::try_from(offset - base).unwrap()
            } else {
                -1
            },
            timestamp: 1_000,
            key: None,
            value: Some(Bytes::from(format!("v{offset}"))),
            headers: Default::default(),
        })
        .collect();
    encode(&records)
}

/// A transaction marker of `producer` at `offset`.
fn marker(offset: i64, producer: i64, abort: bool) -> Bytes {
    let mut key = Vec::new();
    key.extend_from_slice(&0i16.to_be_bytes());
    key.extend_from_slice(&(if abort { 0i16 } else { 1 }).to_be_bytes());
    let mut value = Vec::new();
    value.extend_from_slice(&0i16.to_be_bytes());
    value.extend_from_slice(&3i32.to_be_bytes());
    encode(&[Record {
        transactional: true,
        control: true,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: producer,
        producer_epoch: 0,
        timestamp_type: TimestampType::Creation,
        offset,
        sequence: -1,
        timestamp: 2_000,
        key: Some(key.into()),
        value: Some(value.into()),
        headers: Default::default(),
    }])
}

fn encode(records: &[Record]) -> Bytes {
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encodes");
    buf.freeze()
}

/// A Fetch answer for the request, with these records and aborted transactions.
fn fetch_answer(
    request: &fake_broker::Request,
    error: i16,
    records: Bytes,
    aborted: &[(i64, i64)],
    stable: i64,
) -> Reply {
    let asked: FetchRequest = request.decode().expect("a Fetch request");
    let topic = &asked.topics[0];
    let response = FetchResponse::default().with_responses(vec![
        FetchableTopicResponse::default()
            .with_topic(topic.topic.clone())
            .with_topic_id(topic.topic_id)
            .with_partitions(vec![
                PartitionData::default()
                    .with_partition_index(topic.partitions[0].partition)
                    .with_error_code(error)
                    .with_high_watermark(stable)
                    .with_last_stable_offset(stable)
                    .with_aborted_transactions(Some(
                        aborted
                            .iter()
                            .map(|(producer, first)| {
                                AbortedTransaction::default()
                                    .with_producer_id(ProducerId(*producer))
                                    .with_first_offset(*first)
                            })
                            .collect(),
                    ))
                    .with_records(Some(records)),
            ]),
    ]);
    Reply::message(&response, request.version())
}

async fn setup() -> (FakeBroker, KafkaLogReader) {
    setup_with(Duration::from_secs(5)).await
}

/// [`setup`] with the reader's request timeout.
async fn setup_with(request_timeout: Duration) -> (FakeBroker, KafkaLogReader) {
    let broker = FakeBroker::start().await;
    broker.add_topic(TOPIC, 1);
    broker.advertise(
        ApiKey::Fetch,
        FetchRequest::VERSIONS.min,
        FetchRequest::VERSIONS.max,
    );
    broker.advertise(
        ApiKey::ListOffsets,
        ListOffsetsRequest::VERSIONS.min,
        ListOffsetsRequest::VERSIONS.max,
    );
    let reader = KafkaLogReader::builder(broker.addr())
        .request_timeout(request_timeout)
        .connect()
        .await
        .expect("connects");
    (broker, reader)
}

fn offsets(read: &kafka_share_sink::producer::LogRead) -> Vec<i64> {
    read.records.iter().map(|r| r.offset()).collect()
}

#[tokio::test]
async fn a_corrupt_batch_is_a_protocol_error_not_a_panic() {
    let (broker, reader) = setup().await;
    let mut bad = batch(0, 3, -1, false).to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0x5a;
    let bad = Bytes::from(bad);
    broker.on(ApiKey::Fetch, move |r| {
        fetch_answer(r, 0, bad.clone(), &[], 3)
    });
    // kafka-protocol writes one batch per record here, and the last one is corrupt: the read
    // returns the records before it and stops there.
    let read = reader
        .read(TOPIC, 0, 0, IsolationLevel::ReadUncommitted, WAIT)
        .await
        .expect("the batches before the corrupt one");
    assert_eq!(offsets(&read), vec![0, 1]);
    assert_eq!(read.next_offset, 2);
    let error = reader
        .read(TOPIC, 0, 2, IsolationLevel::ReadUncommitted, WAIT)
        .await
        .expect_err("a corrupt batch");
    match &error {
        ConsumerError::Protocol(ProtocolError::Malformed { reason, .. }) => {
            assert!(reason.contains("CRC32C mismatch"), "{reason}");
            assert!(reason.contains(TOPIC), "{reason}");
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
    assert!(!error.is_retriable());
    assert_eq!(broker.count(ApiKey::Fetch), 2, "not retried");

    // Garbage that does not even frame as a batch.
    broker.on(ApiKey::Fetch, |r| {
        fetch_answer(r, 0, Bytes::from_static(&[0xff; 40]), &[], 3)
    });
    let error = reader
        .read(TOPIC, 0, 0, IsolationLevel::ReadCommitted, WAIT)
        .await
        .expect_err("garbage");
    assert!(
        matches!(
            error,
            ConsumerError::Protocol(ProtocolError::Malformed { .. })
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn an_unsorted_aborted_list_drops_exactly_the_aborted_transactions() {
    let (broker, reader) = setup().await;
    // Producer 1 aborts 0..=1, producer 3 aborts 2..=3, producer 2 commits 4..=5.
    let records: Bytes = [
        batch(0, 2, 1, true),
        batch(2, 2, 3, true),
        batch(4, 2, 2, true),
        marker(6, 1, true),
        marker(7, 3, true),
        marker(8, 2, false),
        batch(9, 1, -1, false),
    ]
    .concat()
    .into();
    broker.on(ApiKey::Fetch, move |r| {
        // Not sorted by first offset, as a broker may send it.
        fetch_answer(r, 0, records.clone(), &[(3, 2), (1, 0)], 10)
    });
    let read = reader
        .read(TOPIC, 0, 0, IsolationLevel::ReadCommitted, WAIT)
        .await
        .expect("reads");
    assert_eq!(offsets(&read), vec![4, 5, 9]);
    assert_eq!(read.next_offset, 10);
    let read = reader
        .read(TOPIC, 0, 0, IsolationLevel::ReadUncommitted, WAIT)
        .await
        .expect("reads");
    assert_eq!(offsets(&read), vec![0, 1, 2, 3, 4, 5, 9]);

    let sent = broker.requests_of(ApiKey::Fetch);
    let levels: Vec<i8> = sent
        .iter()
        .map(|r| r.decode::<FetchRequest>().expect("decodes").isolation_level)
        .collect();
    assert_eq!(levels, vec![1, 0]);
    // The fake broker offers Fetch v18: the topic goes by its id.
    let first: FetchRequest = sent[0].decode().expect("decodes");
    assert_eq!(sent[0].version(), FetchRequest::VERSIONS.max);
    assert_eq!(Some(first.topics[0].topic_id), broker.topic_id(TOPIC));
    assert_eq!(first.topics[0].partitions[0].fetch_offset, 0);
}

#[tokio::test]
async fn not_leader_refreshes_the_metadata_and_retries() {
    let (broker, reader) = setup().await;
    let records = batch(0, 2, -1, false);
    broker.on(ApiKey::Fetch, move |r| {
        fetch_answer(r, 0, records.clone(), &[], 2)
    });
    // NOT_LEADER_OR_FOLLOWER, then FENCED_LEADER_EPOCH, then the records.
    broker.once(ApiKey::Fetch, |r| fetch_answer(r, 6, Bytes::new(), &[], -1));
    broker.once(ApiKey::Fetch, |r| {
        fetch_answer(r, 74, Bytes::new(), &[], -1)
    });
    let metadata_before = broker.count(ApiKey::Metadata);
    let read = reader
        .read(TOPIC, 0, 0, IsolationLevel::ReadUncommitted, WAIT)
        .await
        .expect("reads after the retries");
    assert_eq!(offsets(&read), vec![0, 1]);
    assert_eq!(broker.count(ApiKey::Fetch), 3);
    // One lookup for the first attempt, one after each error.
    assert_eq!(broker.count(ApiKey::Metadata) - metadata_before, 3);
}

/// A broker stopped or fenced a moment ago leaves the Metadata answer's broker list before its
/// partitions have new leaders (seen on a three-node cluster whose broker was killed): the
/// leader it names has no address. That is a leader not known yet, looked up again, not a
/// malformed answer that stops the reader.
#[tokio::test]
async fn a_leader_the_answer_does_not_list_is_looked_up_again() {
    let (broker, reader) = setup().await;
    let records = batch(0, 1, -1, false);
    broker.on(ApiKey::Fetch, move |r| {
        fetch_answer(r, 0, records.clone(), &[], 1)
    });
    let addr = broker.addr();
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    let (host, port) = (host.to_owned(), port.parse::<i32>().expect("a port"));
    broker.once(ApiKey::Metadata, move |r| {
        let answer = MetadataResponse::default()
            .with_brokers(vec![
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(1))
                    .with_host(StrBytes::from_string(host.clone()))
                    .with_port(port),
            ])
            .with_topics(vec![
                MetadataResponseTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_static_str(TOPIC))))
                    .with_partitions(vec![
                        MetadataResponsePartition::default()
                            .with_partition_index(0)
                            .with_leader_id(BrokerId(2))
                            .with_replica_nodes(vec![BrokerId(2), BrokerId(1)])
                            .with_isr_nodes(vec![BrokerId(2), BrokerId(1)]),
                    ]),
            ]);
        Reply::message(&answer, r.version())
    });
    let metadata_before = broker.count(ApiKey::Metadata);
    let read = reader
        .read(TOPIC, 0, 0, IsolationLevel::ReadUncommitted, WAIT)
        .await
        .expect("reads once the leader is listed");
    assert_eq!(offsets(&read), vec![0]);
    assert_eq!(broker.count(ApiKey::Fetch), 1);
    assert_eq!(broker.count(ApiKey::Metadata) - metadata_before, 2);
}

#[tokio::test]
async fn a_lost_connection_is_retried_on_a_new_one() {
    let (broker, reader) = setup().await;
    let records = batch(0, 1, -1, false);
    broker.on(ApiKey::Fetch, move |r| {
        fetch_answer(r, 0, records.clone(), &[], 1)
    });
    broker.once(ApiKey::Fetch, |_| Reply::Close);
    let connections = broker.connections();
    let read = reader
        .read(TOPIC, 0, 0, IsolationLevel::ReadUncommitted, WAIT)
        .await
        .expect("reads on a new connection");
    assert_eq!(offsets(&read), vec![0]);
    assert!(broker.connections() > connections + 1);
}

#[tokio::test]
async fn a_leader_that_never_comes_back_fails_after_a_bounded_number_of_tries() {
    let (broker, reader) = setup().await;
    broker.on(ApiKey::Fetch, |r| fetch_answer(r, 6, Bytes::new(), &[], -1));
    let error = reader
        .read(TOPIC, 0, 0, IsolationLevel::ReadUncommitted, WAIT)
        .await
        .expect_err("gives up");
    assert!(
        matches!(
            error,
            ConsumerError::Broker(BrokerError {
                name: "NOT_LEADER_OR_FOLLOWER",
                ..
            })
        ),
        "{error:?}"
    );
    assert_eq!(broker.count(ApiKey::Fetch), 6);
}

#[tokio::test]
async fn offset_out_of_range_is_a_typed_error_at_once() {
    let (broker, reader) = setup().await;
    broker.on(ApiKey::Fetch, |r| fetch_answer(r, 1, Bytes::new(), &[], 5));
    let error = reader
        .read(TOPIC, 0, 50, IsolationLevel::ReadCommitted, WAIT)
        .await
        .expect_err("out of range");
    match &error {
        ConsumerError::Broker(BrokerError {
            api: "Fetch",
            name: "OFFSET_OUT_OF_RANGE",
            message: Some(message),
            ..
        }) => assert!(message.contains("offset 50"), "{message}"),
        other => panic!("expected OFFSET_OUT_OF_RANGE, got {other:?}"),
    }
    assert_eq!(broker.count(ApiKey::Fetch), 1);
}

#[tokio::test]
async fn an_unknown_topic_is_an_error_after_the_bounded_retries() {
    let (broker, reader) = setup().await;
    let error = reader
        .read("missing", 0, 0, IsolationLevel::ReadCommitted, WAIT)
        .await
        .expect_err("unknown");
    assert!(
        matches!(
            error,
            ConsumerError::Broker(BrokerError {
                name: "UNKNOWN_TOPIC_OR_PARTITION",
                ..
            })
        ),
        "{error:?}"
    );
    assert_eq!(broker.count(ApiKey::Fetch), 0);
}

#[tokio::test]
async fn end_offset_asks_list_offsets_for_the_latest_with_the_isolation_level() {
    let (broker, reader) = setup().await;
    let answered = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&answered);
    broker.on(ApiKey::ListOffsets, move |r| {
        let asked: ListOffsetsRequest = r.decode().expect("a ListOffsets request");
        seen.fetch_add(1, Ordering::SeqCst);
        // As a broker: the isolation level counts for consumers (replica id -1) only; a
        // replica's request gets the high watermark.
        let offset = if asked.isolation_level == 1 && asked.replica_id.0 == -1 {
            40
        } else {
            42
        };
        assert_eq!(asked.topics[0].partitions[0].timestamp, -1);
        let response = ListOffsetsResponse::default().with_topics(vec![
            ListOffsetsTopicResponse::default()
                .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partitions(vec![
                    ListOffsetsPartitionResponse::default()
                        .with_partition_index(0)
                        .with_offset(offset),
                ]),
        ]);
        Reply::message(&response, r.version())
    });
    let committed = reader
        .end_offset(TOPIC, 0, IsolationLevel::ReadCommitted)
        .await
        .expect("end offset");
    let uncommitted = reader
        .end_offset(TOPIC, 0, IsolationLevel::ReadUncommitted)
        .await
        .expect("end offset");
    assert_eq!((committed, uncommitted), (40, 42));
    assert_eq!(answered.load(Ordering::SeqCst), 2);
}

/// A Metadata request the broker never answers: the lookup times out and its connection is
/// left behind (a broker answers in order, so the next lookup on it would wait behind the
/// lost answer); the retry looks the leader up on a new connection and reads.
#[tokio::test]
async fn an_unanswered_metadata_request_leaves_its_connection_behind() {
    let (broker, reader) = setup_with(Duration::from_millis(500)).await;
    let records = batch(0, 1, -1, false);
    broker.on(ApiKey::Fetch, move |r| {
        fetch_answer(r, 0, records.clone(), &[], 1)
    });
    broker.once(ApiKey::Metadata, |_| Reply::Never);
    let metadata_before = broker.count(ApiKey::Metadata);
    let read = reader
        .read(TOPIC, 0, 0, IsolationLevel::ReadUncommitted, WAIT)
        .await
        .expect("reads after looking the leader up on a new connection");
    assert_eq!(offsets(&read), vec![0]);
    assert_eq!(broker.count(ApiKey::Metadata) - metadata_before, 2);
}
