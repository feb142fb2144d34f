//! The shared producer contract (tests/support/producer_contract.rs) against a real broker:
//! `KafkaProducer` writes and `KafkaLogReader` reads, running the very functions the embedded
//! broker runs in tests/producer_embedded.rs, so the two backends cannot drift apart.

#[path = "support/producer_contract.rs"]
mod producer_contract;
mod support;

use kafka_share_sink::KafkaAdmin;
use kafka_share_sink::producer::{
    KafkaLogReader, KafkaProducer, KafkaProducerConfig, LogReader, Producer,
};

use producer_contract::Backend;

struct Kafka {
    bootstrap: String,
    admin: KafkaAdmin,
}

#[async_trait::async_trait]
impl Backend for Kafka {
    async fn producer(&self, transactional_id: Option<&str>) -> Box<dyn Producer> {
        let mut config = KafkaProducerConfig::new(&self.bootstrap);
        if let Some(id) = transactional_id {
            config = config.transactional_id(id);
        }
        Box::new(
            KafkaProducer::connect(config)
                .await
                .expect("producer connects"),
        )
    }

    async fn create_topic(&self, name: &str, partitions: i32) {
        self.admin
            .create_topic(name, partitions, 1)
            .await
            .expect("topic created");
    }

    async fn reader(&self) -> Box<dyn LogReader> {
        Box::new(
            KafkaLogReader::builder(&self.bootstrap)
                .connect()
                .await
                .expect("reader connects"),
        )
    }
}

async fn kafka(test: &str) -> Option<Kafka> {
    let bootstrap = support::bootstrap(test)?;
    let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
    Some(Kafka { bootstrap, admin })
}

macro_rules! contract {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let Some(backend) = kafka(stringify!($name)).await else {
                return;
            };
            producer_contract::$name(&backend).await;
        }
    )*};
}

contract!(
    order_per_partition,
    headers_exact,
    keyed_records_go_to_murmur2_partitions,
    committed_visible_aborted_not,
    read_committed_stops_at_open_transaction,
    zombie_is_fenced,
    refused_sends_and_aborts,
    calls_out_of_turn_are_refused,
    init_again_aborts_the_open_transaction,
);

/// A write the broker refuses (a 2 MB record, over the broker's `message.max.bytes`) fails
/// its future and spoils the transaction: the commit fails with an error that asks for an
/// abort, the abort succeeds, and the producer goes on with the next transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_broker_refuses_makes_the_transaction_abortable() {
    use kafka_share_sink::producer::{IsolationLevel, ProducerError, ProducerRecord};
    let Some(kafka) = kafka("refused_write").await else {
        return;
    };
    let topic = support::unique("refused-write");
    kafka.create_topic(&topic, 1).await;
    let producer = KafkaProducer::connect(
        KafkaProducerConfig::new(&kafka.bootstrap)
            .transactional_id(support::unique("refused-write-tx"))
            .max_request_size(8 << 20),
    )
    .await
    .expect("producer");
    producer.init_transactions().await.expect("init");
    producer.begin_transaction().expect("begin");
    let small = producer
        .send(
            ProducerRecord::new(topic.as_str())
                .partition(0)
                .value("small"),
        )
        .expect("queued");
    let large = producer
        .send(
            ProducerRecord::new(topic.as_str())
                .partition(0)
                .value(vec![b'x'; 2 << 20]),
        )
        .expect("queued: only the broker knows its limit");
    let _ = small.await;
    let refused = large.await.expect_err("the broker refuses 2 MB");
    assert!(
        matches!(&refused, ProducerError::Rejected { partition: 0, source, .. }
            if source.to_string().contains("MESSAGE_TOO_LARGE")),
        "{refused:?}"
    );
    let commit = producer
        .commit_transaction()
        .await
        .expect_err("a transaction with a refused write cannot commit");
    assert!(commit.requires_abort() && !commit.is_fatal(), "{commit:?}");
    producer.abort_transaction().await.expect("abort");
    producer.begin_transaction().expect("begin");
    producer
        .send(
            ProducerRecord::new(topic.as_str())
                .partition(0)
                .value("next"),
        )
        .expect("queued")
        .await
        .expect("written");
    producer.commit_transaction().await.expect("commit");
    let reader = kafka.reader().await;
    // The commit returns once it is decided; the coordinator writes its markers after.
    // Wait until the last stable offset reaches the end (the commit marker's offset + 1).
    let end = support::stable_end(&*reader, &topic, 0, std::time::Duration::from_secs(30)).await;
    let read = reader
        .read(
            &topic,
            0,
            0,
            IsolationLevel::ReadCommitted,
            std::time::Duration::from_millis(500),
        )
        .await
        .expect("read");
    let values: Vec<_> = read
        .records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value().unwrap()).into_owned())
        .collect();
    assert_eq!(values, ["next"], "end offset {end}");
}
