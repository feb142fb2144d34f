//! `KafkaProducer` against the fake broker: coordinator and partition errors a real broker
//! gives only under load or failure (CONCURRENT_TRANSACTIONS, TRANSACTION_ABORTABLE, a lost
//! EndTxn answer), the choice of transactions v1 by the `transaction.version` feature, and
//! Produce answers that cannot be decoded or leave a partition out.

#[path = "support/fake_broker.rs"]
mod fake_broker;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use fake_broker::{FakeBroker, Reply};
use kafka_protocol::messages::describe_transactions_response::TransactionState;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeTransactionsResponse, EndTxnRequest, InitProducerIdResponse,
    MetadataResponse, ProduceRequest, ProduceResponse, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_share_sink::ClientError;
use kafka_share_sink::ProtocolError;
use kafka_share_sink::producer::{
    KafkaProducer, KafkaProducerConfig, Producer, ProducerError, ProducerRecord,
};
use tokio::net::TcpListener;

const TOPIC: &str = "out";
const CONCURRENT_TRANSACTIONS: i16 = 51;
const TRANSACTION_ABORTABLE: i16 = 120;

/// A broker with the producer's APIs (Produce up to v12, EndTxn up to v5) and
/// `transaction.version` at `level`.
async fn broker(level: Option<i16>) -> FakeBroker {
    let broker = FakeBroker::start().await;
    broker.add_topic(TOPIC, 2);
    broker.advertise(ApiKey::InitProducerId, 0, 5);
    broker.advertise(ApiKey::Produce, 3, 12);
    broker.advertise(ApiKey::EndTxn, 0, 5);
    broker.advertise(ApiKey::AddPartitionsToTxn, 0, 5);
    broker.set_feature("transaction.version", level);
    broker
}

fn config(broker: &FakeBroker) -> KafkaProducerConfig {
    KafkaProducerConfig::new(broker.addr())
        .linger(Duration::from_millis(1))
        .retry_backoff(Duration::from_millis(10), Duration::from_millis(50))
        .delivery_timeout(Duration::from_secs(10))
}

async fn transactional(broker: &FakeBroker) -> KafkaProducer {
    let producer = KafkaProducer::connect(config(broker).transactional_id("faults"))
        .await
        .expect("connect");
    producer.init_transactions().await.expect("init");
    producer
}

fn record(partition: i32, value: &str) -> ProducerRecord {
    ProducerRecord::new(TOPIC)
        .partition(partition)
        .value(value.to_owned())
}

/// A Produce answer with `code` for every partition of the request.
fn produce_error(request: &fake_broker::Request, code: i16) -> Reply {
    let produce: ProduceRequest = request.decode().expect("a Produce request");
    let responses = produce
        .topic_data
        .iter()
        .map(|t| {
            TopicProduceResponse::default()
                .with_name(t.name.clone())
                .with_topic_id(t.topic_id)
                .with_partition_responses(
                    t.partition_data
                        .iter()
                        .map(|p| {
                            PartitionProduceResponse::default()
                                .with_index(p.index)
                                .with_error_code(code)
                                .with_base_offset(-1)
                        })
                        .collect(),
                )
        })
        .collect();
    Reply::message(
        &ProduceResponse::default().with_responses(responses),
        request.version(),
    )
}

fn committed_flags(broker: &FakeBroker) -> Vec<bool> {
    broker
        .requests_of(ApiKey::EndTxn)
        .iter()
        .map(|r| r.decode::<EndTxnRequest>().expect("EndTxn").committed)
        .collect()
}

#[tokio::test]
async fn concurrent_transactions_on_init_producer_id_is_retried() {
    let broker = broker(Some(2)).await;
    for _ in 0..2 {
        broker.once(ApiKey::InitProducerId, |r| {
            Reply::message(
                &InitProducerIdResponse::default().with_error_code(CONCURRENT_TRANSACTIONS),
                r.version(),
            )
        });
    }
    let producer = transactional(&broker).await;
    assert_eq!(
        broker.count(ApiKey::InitProducerId),
        3,
        "asked again until the previous transaction is done"
    );
    producer.begin_transaction().expect("begin");
    let sent = producer.send(record(0, "a")).expect("queued");
    producer.commit_transaction().await.expect("commit");
    sent.await.expect("written");
    assert_eq!(committed_flags(&broker), vec![true]);
}

#[tokio::test]
async fn transaction_abortable_on_produce_makes_the_transaction_abort_only() {
    let broker = broker(Some(2)).await;
    broker.once(ApiKey::Produce, |r| produce_error(r, TRANSACTION_ABORTABLE));
    let producer = transactional(&broker).await;
    producer.begin_transaction().expect("begin");
    let refused = producer.send(record(0, "refused")).expect("queued");
    let error = refused.await.expect_err("refused by the broker");
    assert!(
        matches!(error, ProducerError::Abortable { .. }),
        "{error:?}"
    );
    let error = producer
        .commit_transaction()
        .await
        .expect_err("no commit after a refused write");
    assert!(error.requires_abort(), "{error:?}");
    assert!(!error.is_fatal(), "{error:?}");
    assert!(
        committed_flags(&broker).is_empty(),
        "no EndTxn(commit) was sent"
    );
    producer.abort_transaction().await.expect("abort");
    assert_eq!(committed_flags(&broker), vec![false]);
    // The producer goes on with the next transaction.
    producer.begin_transaction().expect("begin again");
    let sent = producer.send(record(0, "after")).expect("queued");
    producer.commit_transaction().await.expect("commit");
    sent.await.expect("written");
    assert_eq!(committed_flags(&broker), vec![false, true]);
}

#[tokio::test]
async fn a_lost_end_txn_answer_is_commit_outcome_unknown() {
    let broker = broker(Some(2)).await;
    broker.once(ApiKey::EndTxn, |_| Reply::Close);
    let producer = transactional(&broker).await;
    producer.begin_transaction().expect("begin");
    drop(producer.send(record(1, "x")).expect("queued"));
    let error = producer
        .commit_transaction()
        .await
        .expect_err("the answer was lost");
    assert!(
        matches!(error, ProducerError::CommitOutcomeUnknown { .. }),
        "{error:?}"
    );
    assert_eq!(
        broker.count(ApiKey::EndTxn),
        1,
        "a commit whose outcome is unknown is not sent again by itself"
    );
}

#[tokio::test]
async fn transaction_version_1_uses_the_v1_protocol_even_when_v2_is_offered() {
    let broker = broker(Some(1)).await;
    let producer = transactional(&broker).await;
    for round in 0..2 {
        producer.begin_transaction().expect("begin");
        let sent: Vec<_> = (0..2)
            .map(|p| {
                producer
                    .send(record(p, &format!("{round}-{p}")))
                    .expect("queued")
            })
            .collect();
        producer.commit_transaction().await.expect("commit");
        for s in sent {
            s.await.expect("written");
        }
    }
    let add = broker.requests_of(ApiKey::AddPartitionsToTxn);
    assert!(!add.is_empty(), "v1 adds the partitions to the transaction");
    assert!(
        add.iter().all(|r| r.version() <= 3),
        "AddPartitionsToTxn v0-v3"
    );
    let produce = broker.requests_of(ApiKey::Produce);
    assert!(!produce.is_empty());
    assert!(
        produce.iter().all(|r| r.version() <= 11),
        "Produce before v12: {:?}",
        produce.iter().map(|r| r.version()).collect::<Vec<_>>()
    );
    let end = broker.requests_of(ApiKey::EndTxn);
    assert_eq!(end.len(), 2);
    assert!(end.iter().all(|r| r.version() <= 4), "EndTxn before v5");
    assert_eq!(committed_flags(&broker), vec![true, true]);
}

#[tokio::test]
async fn transaction_version_2_adds_partitions_implicitly() {
    let broker = broker(Some(2)).await;
    let producer = transactional(&broker).await;
    producer.begin_transaction().expect("begin");
    let sent = producer.send(record(0, "v2")).expect("queued");
    producer.commit_transaction().await.expect("commit");
    sent.await.expect("written");
    assert_eq!(broker.count(ApiKey::AddPartitionsToTxn), 0);
    assert!(
        broker
            .requests_of(ApiKey::Produce)
            .iter()
            .all(|r| r.version() == 12)
    );
    assert!(
        broker
            .requests_of(ApiKey::EndTxn)
            .iter()
            .all(|r| r.version() == 5)
    );
}

#[tokio::test]
async fn a_garbled_produce_answer_is_retried_and_the_record_written_once() {
    let broker = broker(None).await;
    broker.once(ApiKey::Produce, |_| Reply::Garbled);
    let producer = KafkaProducer::connect(config(&broker))
        .await
        .expect("connect");
    let sent = producer.send(record(0, "v")).expect("queued");
    producer.flush().await.expect("flush");
    sent.await.expect("written by the second attempt");
    let produce = broker.requests_of(ApiKey::Produce);
    assert_eq!(produce.len(), 2);
    assert_eq!(
        produce[0].decode::<ProduceRequest>().unwrap().topic_data,
        produce[1].decode::<ProduceRequest>().unwrap().topic_data,
        "the same batch, byte for byte"
    );
}

#[tokio::test]
async fn produce_answers_that_never_decode_end_in_a_typed_timeout() {
    let broker = broker(None).await;
    // A body that claims 126 topics and holds none.
    broker.on(ApiKey::Produce, |_| {
        Reply::Body(Bytes::from_static(&[0x7f, 0xff, 0xff]))
    });
    let producer = giving_up_after(config(&broker), Duration::from_secs(2)).await;
    let error = undeliverable(&producer).await;
    let ProducerError::Timeout {
        last: Some(last), ..
    } = &error
    else {
        panic!("a delivery timeout: {error:?}");
    };
    assert!(
        matches!(&**last, ProducerError::Kafka { source } if matches!(**source, ClientError::Protocol(ProtocolError::Garbled { .. }))),
        "the last error says the answer could not be decoded: {last:?}"
    );
    assert!(broker.count(ApiKey::Produce) >= 2, "retried meanwhile");
}

#[tokio::test]
async fn a_produce_answer_without_the_partition_fails_the_batch() {
    let broker = broker(None).await;
    broker.once(ApiKey::Produce, |r| {
        Reply::message(&ProduceResponse::default(), r.version())
    });
    let producer = KafkaProducer::connect(config(&broker))
        .await
        .expect("connect");
    let sent = producer.send(record(1, "v")).expect("queued");
    let error = sent.await.expect_err("no answer for the partition");
    let ProducerError::Kafka { source } = &error else {
        panic!("a Kafka error: {error:?}");
    };
    assert!(
        matches!(&**source, ClientError::Protocol(ProtocolError::Malformed { reason, .. }) if reason.contains("partition 1")),
        "{source:?}"
    );
    // The producer goes on (after renewing its epoch).
    let next = producer.send(record(1, "w")).expect("queued");
    next.await.expect("written");
}

/// A Metadata answer for [`TOPIC`] (two partitions) naming `leader` the leader of both, and
/// listing the fake broker as node [`fake_broker::NODE_ID`] plus `extra` brokers.
fn metadata_naming(
    broker: &FakeBroker,
    leader: i32,
    extra: Vec<(i32, String)>,
) -> impl Fn(&fake_broker::Request) -> Reply + Send + Sync + 'static {
    let id = broker.topic_id(TOPIC).expect("topic");
    let mut listed = vec![(fake_broker::NODE_ID, broker.addr())];
    listed.extend(extra);
    move |request| {
        let brokers = listed
            .iter()
            .map(|(node, addr)| {
                let (host, port) = addr.rsplit_once(':').expect("host:port");
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(*node))
                    .with_host(StrBytes::from_string(host.to_owned()))
                    .with_port(port.parse().expect("port"))
            })
            .collect();
        let partitions = (0..2)
            .map(|p| {
                MetadataResponsePartition::default()
                    .with_partition_index(p)
                    .with_leader_id(BrokerId(leader))
            })
            .collect();
        let topic = MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_static_str(TOPIC))))
            .with_topic_id(id)
            .with_partitions(partitions);
        let response = MetadataResponse::default()
            .with_brokers(brokers)
            .with_controller_id(BrokerId(fake_broker::NODE_ID))
            .with_topics(vec![topic]);
        Reply::message(&response, request.version())
    }
}

/// A producer with `config` whose records give up after `delivery` (a request after 1 s).
async fn giving_up_after(config: KafkaProducerConfig, delivery: Duration) -> KafkaProducer {
    KafkaProducer::connect(
        config
            .delivery_timeout(delivery)
            .request_timeout(Duration::from_secs(1)),
    )
    .await
    .expect("connect")
}

/// The error of a record to partition 0 that the producer cannot deliver (within 20 s: the
/// tests' delivery timeouts are a few seconds).
async fn undeliverable(producer: &KafkaProducer) -> ProducerError {
    let sent = producer.send(record(0, "v")).expect("queued");
    tokio::time::timeout(Duration::from_secs(20), sent)
        .await
        .expect("completes within its delivery timeout")
        .expect_err("never written")
}

/// [`undeliverable`], which must end in a delivery timeout.
async fn times_out(producer: &KafkaProducer) {
    let error = undeliverable(producer).await;
    assert!(
        matches!(error, ProducerError::Timeout { .. }),
        "a delivery timeout: {error:?}"
    );
}

/// A leader that drops every connection is dialled again at the producer's reconnect backoff
/// (50 ms doubling up to 1 s, per broker), not in a loop: over a 3 s delivery timeout that is
/// at most 8 attempts even with the jitter (12 allowed), and it keeps trying meanwhile.
#[tokio::test]
async fn a_leader_that_drops_every_connection_is_dialled_at_the_reconnect_backoff() {
    let broker = broker(None).await;
    let dropper = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let dropper_addr = dropper.local_addr().expect("addr").to_string();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counting = Arc::clone(&accepted);
    let accept = tokio::spawn(async move {
        while let Ok((stream, _)) = dropper.accept().await {
            counting.fetch_add(1, Ordering::SeqCst);
            drop(stream);
        }
    });
    broker.on(
        ApiKey::Metadata,
        metadata_naming(&broker, 2, vec![(2, dropper_addr)]),
    );
    let producer = giving_up_after(config(&broker), Duration::from_secs(3)).await;
    times_out(&producer).await;
    let dials = accepted.load(Ordering::SeqCst);
    accept.abort();
    assert!(
        (3..=12).contains(&dials),
        "the dropping leader was dialled {dials} times in 3 s"
    );
}

/// A leader the Metadata answer names but does not list has no address: the producer asks
/// the metadata again at its retry backoff (here 100 ms doubling up to 400 ms: about 9
/// answers in 3 s, 30 allowed) instead of failing a connection and asking again at once.
#[tokio::test]
async fn a_leader_missing_from_the_broker_list_is_asked_for_at_the_metadata_backoff() {
    let broker = broker(None).await;
    broker.on(ApiKey::Metadata, metadata_naming(&broker, 7, Vec::new()));
    let producer = giving_up_after(
        config(&broker).retry_backoff(Duration::from_millis(100), Duration::from_millis(400)),
        Duration::from_secs(3),
    )
    .await;
    times_out(&producer).await;
    let asked = broker.count(ApiKey::Metadata);
    assert!(
        (3..=30).contains(&asked),
        "Metadata was asked {asked} times in 3 s"
    );
}

/// A DescribeTransactions answer with one transaction in `state`, or with `code`.
fn described(request: &fake_broker::Request, state: &str, code: i16) -> Reply {
    let transaction = TransactionState::default()
        .with_error_code(code)
        .with_transactional_id(TransactionalId(StrBytes::from_string("faults".to_owned())))
        .with_transaction_state(StrBytes::from_string(state.to_owned()));
    Reply::message(
        &DescribeTransactionsResponse::default().with_transaction_states(vec![transaction]),
        request.version(),
    )
}

/// Under transactions v2 EndTxn answers before the coordinator has written the markers. The
/// commit returns then; the next transaction's first Produce waits until DescribeTransactions
/// says the state moved past PrepareCommit, so that it does not meet the last transaction
/// unfinished (and wait the broker's retry backoff). A refusal of DescribeTransactions ends
/// the waiting for good; the transactions go on.
#[tokio::test]
async fn a_v2_transaction_sends_once_the_coordinator_has_completed_the_last_one() {
    let broker = broker(Some(2)).await;
    broker.advertise(ApiKey::DescribeTransactions, 0, 0);
    for state in ["PrepareCommit", "PrepareCommit", "CompleteCommit"] {
        broker.once(ApiKey::DescribeTransactions, move |r| {
            described(r, state, 0)
        });
    }
    // TRANSACTIONAL_ID_AUTHORIZATION_FAILED after the second commit: no more asking.
    broker.once(ApiKey::DescribeTransactions, |r| described(r, "", 53));
    let producer = transactional(&broker).await;
    for (i, value) in ["a", "b", "c"].into_iter().enumerate() {
        producer.begin_transaction().expect("begin");
        let sent = producer.send(record(1, value)).expect("queued");
        producer.flush().await.expect("flush");
        sent.await.expect("written");
        if i == 1 {
            let described = broker.requests_of(ApiKey::DescribeTransactions);
            assert_eq!(
                described.len(),
                3,
                "asked until the transaction was complete"
            );
            assert!(
                described[0].at >= broker.requests_of(ApiKey::EndTxn)[0].at,
                "asked after the EndTxn"
            );
            assert!(
                broker.requests_of(ApiKey::Produce)[1].at >= described[2].at,
                "the next transaction's Produce went before the last one was complete"
            );
        }
        producer.commit_transaction().await.expect("commit");
    }
    // The third transaction's Produce went after the refusal, without asking again.
    let described = broker
        .wait_for(ApiKey::DescribeTransactions, 4, Duration::from_secs(10))
        .await;
    assert!(broker.requests_of(ApiKey::Produce)[2].at >= described[3].at);
    assert_eq!(
        broker.count(ApiKey::DescribeTransactions),
        4,
        "not asked again"
    );
    assert_eq!(committed_flags(&broker), vec![true, true, true]);
}

/// A coordinator slow to answer DescribeTransactions holds the next transaction's Produce
/// only until the wait's bound (100 ms after the EndTxn's answer), not until it answers.
#[tokio::test]
async fn a_slow_describe_holds_the_next_produce_only_until_the_bound() {
    let broker = broker(Some(2)).await;
    broker.advertise(ApiKey::DescribeTransactions, 0, 0);
    broker.on(ApiKey::DescribeTransactions, |r| {
        Reply::Delay(
            Duration::from_secs(30),
            Box::new(described(r, "PrepareCommit", 0)),
        )
    });
    let producer = transactional(&broker).await;
    producer.begin_transaction().expect("begin");
    drop(producer.send(record(0, "a")).expect("queued"));
    producer.commit_transaction().await.expect("commit");
    let ended = broker.requests_of(ApiKey::EndTxn)[0].at;
    producer.begin_transaction().expect("begin");
    let sent = producer.send(record(0, "b")).expect("queued");
    producer.flush().await.expect("flush");
    sent.await.expect("written");
    let produced = broker.requests_of(ApiKey::Produce)[1].at;
    assert!(
        produced >= ended + Duration::from_millis(100),
        "the Produce went {:?} after the EndTxn, before the wait's bound",
        produced - ended
    );
    assert!(
        broker.requests_of(ApiKey::Produce)[1].at
            < broker.requests_of(ApiKey::DescribeTransactions)[0].at + Duration::from_secs(30),
        "the Produce waited for the slow answer"
    );
}

/// A cluster that takes records more slowly than they are sent: `ready` waits while the
/// records not yet written hold `buffer.memory`, reports `BufferFull` (retriable, with the
/// numbers) once `max.block.ms` has passed, and returns once the records are written.
#[tokio::test]
async fn ready_reports_a_full_buffer_after_max_block_and_returns_once_records_are_written() {
    use kafka_share_sink::producer::DeliveryFuture;
    let broker = broker(None).await;
    broker.on(ApiKey::Produce, |_| {
        Reply::late(Duration::from_millis(1_500))
    });
    let producer = KafkaProducer::connect(
        config(&broker)
            .buffer_memory(4_000)
            .max_block(Duration::from_millis(200)),
    )
    .await
    .expect("connect");
    producer.ready().await.expect("an empty buffer has room");
    let sent: Vec<DeliveryFuture> = (0..4)
        .map(|i| {
            producer
                .send(record(0, &format!("{i:0>1000}")))
                .expect("queued")
        })
        .collect();
    let started = tokio::time::Instant::now();
    let full = producer.ready().await.expect_err("the buffer is full");
    let waited = started.elapsed();
    assert!(
        matches!(
            full,
            ProducerError::BufferFull {
                buffered,
                buffer_memory: 4_000,
                waited,
            } if buffered >= 4_000 && waited == Duration::from_millis(200)
        ),
        "{full:?}"
    );
    assert!(full.is_retriable());
    assert!(
        waited >= Duration::from_millis(200) && waited < Duration::from_millis(1_400),
        "gave up after max.block.ms, before the answer: {waited:?}"
    );
    // Asked again until the late answer lands: room once the records are written.
    let deadline = started + Duration::from_secs(20);
    loop {
        match producer.ready().await {
            Ok(()) => break,
            Err(ProducerError::BufferFull { .. }) if tokio::time::Instant::now() < deadline => {}
            Err(other) => panic!("{other:?}"),
        }
    }
    assert!(
        started.elapsed() >= Duration::from_millis(1_000),
        "not before the answer"
    );
    for future in sent {
        future.await.expect("written");
    }
}

/// A producer with `config` whose requests time out after 500 ms.
async fn impatient(config: KafkaProducerConfig) -> KafkaProducer {
    KafkaProducer::connect(config.request_timeout(Duration::from_millis(500)))
        .await
        .expect("connect")
}

/// `future`'s output, which must come within 20 s.
async fn within_20_s<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), future)
        .await
        .expect("done within 20 s")
}

/// An InitProducerId the broker never answers, for an idempotent producer (which asks it on
/// the cluster-wide connection): the attempt times out, that connection is left behind (a
/// broker answers in order, later requests would wait behind it) and the next attempt gets a
/// producer id on a new one.
#[tokio::test]
async fn an_unanswered_init_producer_id_is_asked_again_on_a_new_connection() {
    let broker = broker(None).await;
    broker.once(ApiKey::InitProducerId, |_| Reply::Never);
    let producer = impatient(config(&broker).idempotence(true)).await;
    let sent = producer.send(record(0, "a")).expect("queued");
    within_20_s(sent)
        .await
        .expect("written with the producer id of the second attempt");
    assert_eq!(broker.count(ApiKey::InitProducerId), 2);
}

/// The same for FindCoordinator, which a transactional producer asks on the cluster-wide
/// connection before it meets its coordinator.
#[tokio::test]
async fn an_unanswered_find_coordinator_is_asked_again_on_a_new_connection() {
    let broker = broker(Some(2)).await;
    broker.once(ApiKey::FindCoordinator, |_| Reply::Never);
    let producer = impatient(config(&broker).transactional_id("faults")).await;
    within_20_s(producer.init_transactions())
        .await
        .expect("initialised after asking again");
    assert_eq!(broker.count(ApiKey::FindCoordinator), 2);
}

/// A Produce request the leader never answers: it times out, its connection is closed (as
/// Java's client closes a connection whose request timed out: the broker answers in order, so
/// every later request on it would wait behind the lost answer) and the batch is sent again on
/// a new connection, where it is written.
#[tokio::test]
async fn an_unanswered_produce_is_sent_again_on_a_new_connection() {
    let broker = broker(None).await;
    broker.once(ApiKey::Produce, |_| Reply::Never);
    let producer = impatient(config(&broker).idempotence(true)).await;
    let first = producer.send(record(0, "a")).expect("queued");
    within_20_s(first)
        .await
        .expect("written by a later attempt");
    // Later records to the same leader go through too, not behind the lost answer.
    let second = producer.send(record(1, "b")).expect("queued");
    within_20_s(second).await.expect("written");
    let produce = broker.requests_of(ApiKey::Produce);
    assert!(produce.len() >= 2, "{} Produce requests", produce.len());
    assert_eq!(
        produce[0].decode::<ProduceRequest>().unwrap().topic_data,
        produce[1].decode::<ProduceRequest>().unwrap().topic_data,
        "the same batch, byte for byte, with its sequence"
    );
    assert_ne!(
        produce[0].connection, produce[1].connection,
        "sent again on a new connection"
    );
}
