//! The exactly-once cluster's questions survive a broker that is briefly unreachable, on the
//! fake broker: listing the transactional ids asks every broker the metadata names, and one
//! restarting (its connections dropped) is asked again until it answers, not skipped and not
//! fatal at once.
#![cfg(feature = "exactly-once")]

#[path = "support/fake_broker.rs"]
mod fake_broker;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use fake_broker::{FakeBroker, Reply};
use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::{
    ApiKey, BrokerId, ListTransactionsResponse, MetadataResponse, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_share_sink::exactly_once::{ExactlyOnceCluster, KafkaExactlyOnceCluster};
use kafka_share_sink::producer::KafkaProducerConfig;
use tokio::net::{TcpListener, TcpStream};

/// Connections the flaky address drops before it passes them on.
const DROPPED: usize = 3;

fn knows(broker: &FakeBroker, id: &'static str) {
    broker.advertise(ApiKey::ListTransactions, 0, 1);
    broker.on(ApiKey::ListTransactions, move |request| {
        Reply::message(
            &ListTransactionsResponse::default().with_transaction_states(vec![
                TransactionState::default()
                    .with_transactional_id(TransactionalId(StrBytes::from_static_str(id)))
                    .with_transaction_state(StrBytes::from_static_str("Ongoing")),
            ]),
            request.version(),
        )
    });
}

fn broker_at(id: i32, address: &str) -> MetadataResponseBroker {
    let (host, port) = address.rsplit_once(':').expect("host:port");
    MetadataResponseBroker::default()
        .with_node_id(BrokerId(id))
        .with_host(StrBytes::from_string(host.to_owned()))
        .with_port(port.parse().expect("port"))
}

#[tokio::test]
async fn a_restarting_broker_is_asked_again_for_its_transactions() {
    let first = FakeBroker::start().await;
    let second = FakeBroker::start().await;
    knows(&first, "eos-a-0");
    knows(&second, "eos-b-1");

    // The second broker's address drops its first connections, as a broker restarting does,
    // then passes them on.
    let flaky = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let flaky_address = flaky.local_addr().expect("address").to_string();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&accepted);
    let behind = second.addr();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = flaky.accept().await {
            if counted.fetch_add(1, Ordering::SeqCst) < DROPPED {
                drop(inbound);
                continue;
            }
            let behind = behind.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(&behind).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    let brokers = vec![broker_at(1, &first.addr()), broker_at(2, &flaky_address)];
    first.on(ApiKey::Metadata, move |request| {
        Reply::message(
            &MetadataResponse::default()
                .with_brokers(brokers.clone())
                .with_controller_id(BrokerId(1)),
            request.version(),
        )
    });

    let cluster = KafkaExactlyOnceCluster::connect(&KafkaProducerConfig::new(first.addr()))
        .await
        .expect("connect");
    let mut ids = cluster
        .transactional_ids("eos-")
        .await
        .expect("both brokers answer, the second after its restart");
    ids.sort();
    assert_eq!(ids, ["eos-a-0", "eos-b-1"]);
    assert!(
        accepted.load(Ordering::SeqCst) > DROPPED,
        "asked again after the dropped connections"
    );
}
