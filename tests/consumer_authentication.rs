//! Credentials refused mid-run, on the fake broker speaking SASL/PLAIN: the share consumer
//! reports a typed authentication error from `poll` and `commit_sync` at once (and keeps
//! reporting it, handing out no more records), and dials the broker again at most once per
//! `reconnect.backoff.max.ms` while the credentials are refused.

#[path = "support/fake_broker.rs"]
mod fake_broker;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_broker::{FakeBroker, Reply};
use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateResponse, SaslHandshakeResponse, ShareFetchResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_share_sink::ConnectionError;
use kafka_share_sink::{
    AcknowledgeType, AcquisitionSizing, ConsumerError, KafkaShareConsumer,
    KafkaShareConsumerConfig, SaslSettings, Security, ShareConsumer,
};
use tokio::time::Instant;

/// Bound on anything that should happen at once, generous for a busy machine.
const PROMPTLY: Duration = Duration::from_secs(2);
const WAIT: Duration = Duration::from_secs(20);

/// A fake broker with SASL/PLAIN whose SaslAuthenticate succeeds until `refuse` is set, then
/// fails with SASL_AUTHENTICATION_FAILED; the times of the refusals are kept. Each ShareFetch
/// acquires the next three records of partition 0.
struct SaslBroker {
    broker: FakeBroker,
    refuse: Arc<AtomicBool>,
    refusals: Arc<Mutex<Vec<Instant>>>,
}

async fn sasl_broker() -> SaslBroker {
    let broker = FakeBroker::start().await;
    broker.add_topic("orders", 1);
    broker.set_heartbeat_interval(Duration::from_millis(100));
    broker.advertise(ApiKey::SaslHandshake, 0, 1);
    broker.advertise(ApiKey::SaslAuthenticate, 0, 2);
    broker.on(ApiKey::SaslHandshake, |request| {
        Reply::message(
            &SaslHandshakeResponse::default()
                .with_mechanisms(vec![StrBytes::from_static_str("PLAIN")]),
            request.version(),
        )
    });
    let refuse = Arc::new(AtomicBool::new(false));
    let refusals = Arc::new(Mutex::new(Vec::new()));
    let (refusing, refused) = (Arc::clone(&refuse), Arc::clone(&refusals));
    broker.on(ApiKey::SaslAuthenticate, move |request| {
        let response = if refusing.load(Ordering::SeqCst) {
            refused.lock().unwrap().push(Instant::now());
            SaslAuthenticateResponse::default()
                .with_error_code(58)
                .with_error_message(Some(StrBytes::from_static_str(
                    "Authentication failed: Invalid username or password",
                )))
        } else {
            SaslAuthenticateResponse::default()
        };
        Reply::message(&response, request.version())
    });
    let next = Arc::new(AtomicI64::new(0));
    broker.on(ApiKey::ShareFetch, move |request| {
        let body = request.share_fetch().expect("ShareFetch decodes");
        let Some(topic) = body.request.topics.first() else {
            return Reply::share_fetch(&ShareFetchResponse::default());
        };
        let base = next.fetch_add(3, Ordering::SeqCst);
        Reply::share_fetch_acquired(topic.topic_id, base..base + 3)
    });
    SaslBroker {
        broker,
        refuse,
        refusals,
    }
}

impl SaslBroker {
    fn refusals(&self) -> Vec<Instant> {
        self.refusals.lock().unwrap().clone()
    }
}

/// A consumer that fetches ahead (so records wait in its buffer when the refusal comes),
/// subscribed and past its first records.
async fn running_consumer(broker: &SaslBroker) -> KafkaShareConsumer {
    let config = KafkaShareConsumerConfig::new(broker.broker.addr(), "auth-group")
        .fetch_max_wait(Duration::from_millis(50))
        .acquisition_sizing(AcquisitionSizing::Fixed)
        .prefetch_records(30)
        .security(Security::sasl_plaintext(SaslSettings::plain("alice", "pw")));
    let mut consumer = KafkaShareConsumer::connect(config).await.expect("connect");
    consumer
        .subscribe(vec!["orders".to_owned()])
        .await
        .expect("subscribe");
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "no records within {WAIT:?}");
        let records = consumer
            .poll(Duration::from_millis(200))
            .await
            .expect("poll");
        for r in &records {
            consumer.acknowledge(r, AcknowledgeType::Accept).unwrap();
        }
        if !records.is_empty() {
            return consumer;
        }
    }
}

#[track_caller]
fn assert_authentication(error: &ConsumerError) {
    let ConsumerError::Connection(ConnectionError::Authentication { reason, .. }) = error else {
        panic!("not an authentication error: {error:?}");
    };
    assert!(reason.contains("Invalid username or password"), "{reason}");
    assert!(!error.is_retriable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_refused_mid_run_fail_poll_and_commit_at_once_and_for_good() {
    let broker = sasl_broker().await;
    let mut consumer = running_consumer(&broker).await;
    assert_eq!(consumer.connection_counts().authentication_failures, 0);

    // The password changes on the broker; the group coordinator's connection is the first
    // to meet it (the broker drops it, the member reconnects), while the partition leader's
    // connection still works and keeps fetching ahead.
    broker.refuse.store(true, Ordering::SeqCst);
    broker
        .broker
        .once(ApiKey::ShareGroupHeartbeat, |_| Reply::Close);
    let deadline = Instant::now() + WAIT;
    let error = loop {
        assert!(Instant::now() < deadline, "no error within {WAIT:?}");
        match consumer.poll(Duration::from_millis(200)).await {
            Ok(records) => {
                for r in &records {
                    consumer.acknowledge(r, AcknowledgeType::Accept).unwrap();
                }
            }
            Err(e) => break e,
        }
    };
    let reported = Instant::now();
    assert_authentication(&error);
    let first = *broker.refusals().first().expect("a refusal at the broker");
    assert!(
        reported - first < PROMPTLY,
        "the error came {:?} after the first refusal",
        reported - first
    );

    // From now on, every poll and commit says so at once; no record is handed out, though
    // the leader's connection could still fetch some.
    for _ in 0..3 {
        let started = Instant::now();
        let error = consumer
            .poll(Duration::from_secs(30))
            .await
            .expect_err("still refused");
        assert_authentication(&error);
        assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());
    }
    let started = Instant::now();
    let error = consumer
        .commit_sync(Duration::from_secs(30))
        .await
        .expect_err("commit refused");
    assert_authentication(&error);
    assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());

    let counts = consumer.connection_counts();
    assert!(counts.authentication_failures >= 1, "{counts:?}");
    assert!(
        counts.failures >= counts.authentication_failures,
        "{counts:?}"
    );
    consumer
        .close(Duration::from_secs(10))
        .await
        .expect("close");
}

/// While the credentials are refused, the consumer's connections (bootstrap, coordinator,
/// leader, all to this one broker) together dial it at most once per
/// `reconnect.backoff.max.ms` (1 s by default): each refusal at the broker comes at least a
/// second after the previous one, instead of one every few milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_are_retried_at_most_once_per_maximum_backoff() {
    let broker = sasl_broker().await;
    let mut consumer = running_consumer(&broker).await;
    broker.refuse.store(true, Ordering::SeqCst);
    // Every connection is dropped, as by a broker restart: each wants a new one.
    broker.broker.disconnect_all();
    let deadline = Instant::now() + WAIT;
    while broker.refusals().len() < 4 {
        assert!(
            Instant::now() < deadline,
            "{} refusals within {WAIT:?}",
            broker.refusals().len()
        );
        // The consumer is being used meanwhile; its errors are the subject of the other
        // test.
        let _ = consumer.poll(Duration::from_millis(100)).await;
    }
    let refusals = broker.refusals();
    let gaps: Vec<Duration> = refusals.windows(2).map(|p| p[1] - p[0]).collect();
    for gap in &gaps {
        // The broker reads a refused attempt's SaslAuthenticate only after the client's
        // pause of 1 s (no jitter at the maximum) that followed the previous refusal.
        assert!(*gap >= Duration::from_millis(990), "gaps {gaps:?}");
    }
    // The last refusal may still be on its way to the client.
    let counts = consumer.connection_counts();
    assert!(
        counts.authentication_failures >= 3,
        "{counts:?} with {} refusals at the broker",
        refusals.len()
    );
    consumer
        .close(Duration::from_secs(10))
        .await
        .expect("close");
}
