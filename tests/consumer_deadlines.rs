//! `KafkaShareConsumer::poll` keeps its deadline, whatever the broker does, and a broker that
//! misbehaves for a while costs retries, not the consumer: against the scriptable fake broker.
//!
//! Before the fetch engine, `poll(500 ms)` could block for the request timeout plus the poll
//! timeout (30.5 s with the defaults) behind a silent ShareFetch, a silent Metadata made every
//! `poll(1 s)` take 3 s, and an answer that could not be decoded surfaced as a non-retriable
//! error. The bound checked here is the poll's timeout plus [`SLACK`]: scheduling on a loaded
//! machine, far below the seconds the old behaviour overran by.

#[path = "support/fake_broker.rs"]
mod fake_broker;

use std::time::Duration;

use fake_broker::{FakeBroker, Reply};
use kafka_protocol::messages::ApiKey;
use kafka_share_sink::{KafkaShareConsumer, KafkaShareConsumerConfig, ShareConsumer};
use tokio::time::Instant;

/// What a poll may take beyond its timeout here: task scheduling on a busy CI machine.
const SLACK: Duration = Duration::from_millis(400);

const POLL: Duration = Duration::from_millis(500);

/// A broker with one topic and a consumer subscribed to it (defaults: 30 s request timeout).
async fn setup() -> (FakeBroker, KafkaShareConsumer) {
    setup_scripted(|_| {}).await
}

/// The same, with `script` applied to the broker before the consumer subscribes.
async fn setup_scripted(script: impl FnOnce(&FakeBroker)) -> (FakeBroker, KafkaShareConsumer) {
    let broker = FakeBroker::start().await;
    broker.add_topic("orders", 2);
    script(&broker);
    let consumer = subscribed(KafkaShareConsumerConfig::new(broker.addr(), "g")).await;
    (broker, consumer)
}

/// A consumer connected with `config` and subscribed to `orders`.
async fn subscribed(config: KafkaShareConsumerConfig) -> KafkaShareConsumer {
    let mut consumer = KafkaShareConsumer::connect(config).await.expect("connects");
    consumer
        .subscribe(vec!["orders".to_owned()])
        .await
        .expect("subscribes");
    consumer
}

/// Polls `n` times, each within its timeout plus the slack; returns how many errors came.
async fn polls_keep_their_deadline(consumer: &mut KafkaShareConsumer, n: usize) -> usize {
    let mut errors = 0;
    for i in 0..n {
        let start = Instant::now();
        let result = consumer.poll(POLL).await;
        let took = start.elapsed();
        assert!(
            took <= POLL + SLACK,
            "poll {i} took {took:?}, more than {POLL:?} + {SLACK:?}"
        );
        match result {
            Ok(records) => assert!(records.is_empty(), "the fake broker has no records"),
            Err(_) => errors += 1,
        }
    }
    errors
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_fetch_never_answered_does_not_hold_up_poll() {
    let (broker, mut consumer) = setup().await;
    broker.on(ApiKey::ShareFetch, |_| Reply::Never);
    // Wait for the fetch to go out, so later polls wait behind it.
    let _ = consumer.poll(POLL).await;
    broker
        .wait_for(ApiKey::ShareFetch, 1, Duration::from_secs(10))
        .await;
    assert_eq!(polls_keep_their_deadline(&mut consumer, 4).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_metadata_does_not_hold_up_poll() {
    // Silent from the first Metadata on, so no leader is ever known.
    let (broker, mut consumer) =
        setup_scripted(|broker| broker.on(ApiKey::Metadata, |_| Reply::Never)).await;
    assert_eq!(polls_keep_their_deadline(&mut consumer, 4).await, 0);
    assert_eq!(broker.count(ApiKey::ShareFetch), 0, "no leader known yet");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_heartbeat_does_not_hold_up_poll() {
    let broker = FakeBroker::start().await;
    broker.add_topic("orders", 1);
    broker.on(ApiKey::ShareGroupHeartbeat, |_| Reply::Never);
    let mut consumer = subscribed(KafkaShareConsumerConfig::new(broker.addr(), "g")).await;
    assert_eq!(polls_keep_their_deadline(&mut consumer, 3).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_answers_do_not_hold_up_poll() {
    let (broker, mut consumer) = setup().await;
    broker.on(ApiKey::ShareFetch, |_| Reply::late(Duration::from_secs(3)));
    assert_eq!(polls_keep_their_deadline(&mut consumer, 6).await, 0);
}

/// A garbled answer, a closed connection: the consumer reconnects and fetches again, with a
/// backoff, and the poll reports no error (nothing a retry cannot fix happened).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbled_answers_and_closed_connections_are_retried_not_reported() {
    let (broker, mut consumer) = setup().await;
    let replies: [fn() -> Reply; 2] = [|| Reply::Garbled, || Reply::Close];
    for reply in replies {
        broker.on(ApiKey::ShareFetch, move |_| reply());
        let before = broker.count(ApiKey::ShareFetch);
        let errors = polls_keep_their_deadline(&mut consumer, 4).await;
        assert_eq!(
            errors, 0,
            "a transient failure is not the application's to handle"
        );
        let fetches = broker.count(ApiKey::ShareFetch) - before;
        assert!(fetches >= 2, "the consumer kept fetching ({fetches})");
        // 2 s of polls with a 100 ms backoff after each failure: no hot loop.
        assert!(fetches <= 40, "{fetches} fetches in 2 s: no backoff");
    }
    // Once the broker behaves again, fetches are answered again and polls still keep time.
    broker.reset(ApiKey::ShareFetch);
    assert_eq!(polls_keep_their_deadline(&mut consumer, 2).await, 0);
    consumer
        .close(Duration::from_secs(5))
        .await
        .expect("closes");
}

/// `poll(timeout)` with a timeout that cannot be added to the clock waits (it does not panic);
/// a caller's own timeout ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_timeout_of_duration_max_does_not_panic() {
    let (_broker, mut consumer) = setup().await;
    let cut = tokio::time::timeout(Duration::from_millis(300), consumer.poll(Duration::MAX)).await;
    assert!(cut.is_err(), "still waiting for records");
    // The consumer is still usable after its poll was dropped.
    assert!(consumer.poll(Duration::from_millis(50)).await.is_ok());
}

/// A Metadata request the broker never answers times out, and the next one goes on a new
/// connection: on the old one it would wait behind the lost answer (a broker answers a
/// connection's requests in order, and the fake broker, like a stuck one, answers nothing more
/// there), so the consumer would never learn the leaders and never fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_request_that_timed_out_is_asked_again_on_a_new_connection() {
    let broker = FakeBroker::start().await;
    let topic_id = broker.add_topic("orders", 1);
    broker.once(ApiKey::Metadata, |_| Reply::Never);
    broker.on(ApiKey::ShareFetch, move |_| {
        Reply::share_fetch_acquired(topic_id, 0..5)
    });
    let config = KafkaShareConsumerConfig::new(broker.addr(), "g")
        .request_timeout(Duration::from_millis(700));
    let mut consumer = subscribed(config).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut records = 0;
    while records == 0 && Instant::now() < deadline {
        records = consumer.poll(POLL).await.expect("polls").len();
    }
    assert!(
        records > 0,
        "no records in 20 s after a lost Metadata answer ({} Metadata requests, {} connections)",
        broker.count(ApiKey::Metadata),
        broker.connections()
    );
    assert!(broker.count(ApiKey::Metadata) >= 2);
}

/// A ShareGroupDescribe slower than the membership's short wait for it (the heartbeat interval)
/// is given up by the membership, not counted overdue by the connection: the heartbeats go on on
/// the same coordinator connection (behind the slow answer) instead of looking the coordinator up
/// again on a new connection after every describe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_group_describe_does_not_make_the_member_reconnect() {
    use kafka_protocol::messages::{ShareGroupDescribeRequest, ShareGroupDescribeResponse};
    use kafka_protocol::protocol::Message;

    let broker = FakeBroker::start().await;
    broker.add_topic("orders", 1);
    broker.set_heartbeat_interval(Duration::from_millis(200));
    let versions = ShareGroupDescribeRequest::VERSIONS;
    broker.advertise(ApiKey::ShareGroupDescribe, versions.min, versions.max);
    broker.on(ApiKey::ShareGroupDescribe, |r| {
        let answer = Reply::message(&ShareGroupDescribeResponse::default(), r.version());
        Reply::Delay(Duration::from_millis(1200), Box::new(answer))
    });
    let mut consumer = subscribed(KafkaShareConsumerConfig::new(broker.addr(), "g")).await;
    let _ = consumer.poll(POLL).await;
    broker
        .wait_for(ApiKey::ShareGroupDescribe, 1, Duration::from_secs(10))
        .await;
    let connections = broker.connections();
    let heartbeats = broker.count(ApiKey::ShareGroupHeartbeat);
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        let _ = consumer.poll(POLL).await;
    }
    assert!(
        broker.count(ApiKey::ShareGroupHeartbeat) > heartbeats,
        "the member kept heartbeating"
    );
    assert_eq!(
        broker.connections(),
        connections,
        "new connections after slow describes ({} describes)",
        broker.count(ApiKey::ShareGroupDescribe)
    );
}
