//! TLS and SASL against a real Apache Kafka broker: `scripts/kafka.sh start` opens a listener
//! of every kind (SSL, MTLS, SASL_SSL, SASL_PLAINTEXT, EXPIRED, WRONGHOST, REAUTH) next to
//! PLAINTEXT, with a test PKI and the SCRAM user alice, and `env` names them.
//!
//! Each test makes its own topic and group over PLAINTEXT, then talks to the listener under
//! test. Failure cases assert the error kind and message, within a bounded time.

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use kafka_share_sink::{
    AcknowledgeType, AdminError, BoxError, ConnectorConfig, ConsumerError, ConsumerRecord,
    DeadLetterQueue, DeadLetterRecord, KafkaAdmin, KafkaDeadLetterQueue,
    KafkaDeadLetterQueueConfig, KafkaShareConsumer, KafkaShareConsumerConfig, OAuthToken,
    Properties, SaslSettings, Security, ShareConsumer, TlsSettings, TokenProvider,
    UnsecuredJwsTokenProvider,
};
use kafka_share_sink::{BrokerError, ClientError, ConnectionError};
use rskafka::client::partition::Compression;
use rskafka::record::Record;

/// The secret every test credential contains, to look for in logs and errors.
const PASSWORD: &str = "alice-secret";

/// The address of a listener from `scripts/kafka.sh env`, or `None` when broker tests are
/// skipped.
fn listener(test: &str, var: &str) -> Option<String> {
    support::bootstrap(test)?;
    match std::env::var(var) {
        Ok(addr) if !addr.trim().is_empty() => Some(addr.trim().to_owned()),
        _ if std::env::var("KAFKA_REQUIRE_BROKER").as_deref() == Ok("1") => {
            panic!("{test}: {var} is not set: start the broker with KAFKA_SECURITY=1 (the default)")
        }
        _ => {
            eprintln!("SKIPPED {test}: {var} is not set");
            None
        }
    }
}

fn pki(file: &str) -> PathBuf {
    PathBuf::from(std::env::var("KAFKA_PKI_DIR").expect("KAFKA_PKI_DIR")).join(file)
}

fn ca() -> TlsSettings {
    TlsSettings::ca_pem_file(pki("ca.crt"))
}

fn scram512() -> SaslSettings {
    SaslSettings::scram_sha512("alice", PASSWORD)
}

/// A topic of one partition holding `n` records and a group reading it from the start,
/// made over PLAINTEXT.
async fn topic_with_records(test: &str, n: usize) -> (String, String) {
    let plaintext = support::bootstrap(test).expect("broker");
    let topic = support::unique(test);
    let group = support::unique(&format!("{test}-group"));
    let admin = KafkaAdmin::connect(&plaintext).await.expect("admin");
    admin.create_topic(&topic, 1, 1).await.expect("topic");
    admin
        .set_share_group_config(&group, &[("share.auto.offset.reset", "earliest")])
        .await
        .expect("group config");
    let partition = support::rskafka_partition(&plaintext, &topic, 0).await;
    let records = (0..n)
        .map(|i| Record {
            key: Some(format!("key-{i}").into_bytes()),
            value: Some(format!("value-{i}").into_bytes()),
            headers: BTreeMap::new(),
            timestamp: chrono::Utc::now(),
        })
        .collect();
    partition
        .produce(records, Compression::NoCompression)
        .await
        .expect("produce");
    (topic, group)
}

/// Polls until `n` records arrived (at most 60 s), accepting each; commits.
async fn drain(consumer: &mut KafkaShareConsumer, n: usize) -> Vec<ConsumerRecord> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        let records = consumer
            .poll(Duration::from_millis(500))
            .await
            .expect("poll");
        for r in &records {
            consumer
                .acknowledge(r, AcknowledgeType::Accept)
                .expect("acknowledge");
        }
        got.extend(records);
    }
    let results = consumer
        .commit_sync(Duration::from_secs(30))
        .await
        .expect("commit");
    assert!(results.failures().next().is_none(), "{results:?}");
    got
}

/// Consumes, acknowledges, commits and closes over `security` at `addr`: every record of a
/// fresh topic arrives once.
async fn round_trip(test: &str, addr: &str, security: Security) {
    let (topic, group) = topic_with_records(test, 20).await;
    let config = KafkaShareConsumerConfig::new(addr, &group)
        .fetch_max_wait(Duration::from_millis(200))
        .security(security);
    let mut consumer = KafkaShareConsumer::connect(config)
        .await
        .unwrap_or_else(|e| panic!("{test}: connect: {e:?}"));
    consumer.subscribe(vec![topic]).await.expect("subscribe");
    let got = drain(&mut consumer, 20).await;
    let mut offsets: Vec<i64> = got.iter().map(|r| r.offset()).collect();
    offsets.sort_unstable();
    assert_eq!(offsets, (0..20).collect::<Vec<_>>(), "{test}");
    consumer
        .close(Duration::from_secs(30))
        .await
        .expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumes_over_ssl() {
    let Some(addr) = listener("ssl", "KAFKA_SSL_BOOTSTRAP") else {
        return;
    };
    round_trip("ssl", &addr, Security::ssl(ca())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumes_over_mutual_tls() {
    let Some(addr) = listener("mtls", "KAFKA_MTLS_BOOTSTRAP") else {
        return;
    };
    round_trip(
        "mtls",
        &addr,
        Security::ssl(ca().client_pem_file(pki("client.pem"))),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumes_over_sasl_ssl_with_each_mechanism() {
    let Some(addr) = listener("sasl_ssl", "KAFKA_SASL_SSL_BOOTSTRAP") else {
        return;
    };
    // The inline forms of the trust store this time.
    let ca_pem = std::fs::read_to_string(pki("ca.crt")).expect("ca");
    for (name, sasl) in [
        ("plain", SaslSettings::plain("alice", PASSWORD)),
        ("scram256", SaslSettings::scram_sha256("alice", PASSWORD)),
        ("scram512", scram512()),
        (
            "oauthbearer",
            SaslSettings::oauthbearer(Arc::new(UnsecuredJwsTokenProvider::new("alice"))),
        ),
    ] {
        let security = Security::sasl_ssl(sasl, TlsSettings::ca_pem(ca_pem.clone()));
        round_trip(&format!("sasl_ssl_{name}"), &addr, security).await;
    }
}

/// The `.properties` path: the connector's consumer settings with Java's keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumes_over_sasl_plaintext_from_properties() {
    let Some(addr) = listener("sasl_plaintext", "KAFKA_SASL_PLAINTEXT_BOOTSTRAP") else {
        return;
    };
    let (topic, group) = topic_with_records("sasl_plaintext", 20).await;
    let worker = Properties::parse(&format!(
        "bootstrap.servers={addr}\n\
         consumer.security.protocol=SASL_PLAINTEXT\n\
         consumer.sasl.mechanism=SCRAM-SHA-512\n\
         consumer.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" password=\"{PASSWORD}\";\n\
         consumer.fetch.max.wait.ms=200\n"
    ))
    .expect("worker");
    let connector = Properties::parse(&format!("name=n\ntopics={topic}\nshare.group.id={group}\n"))
        .expect("connector");
    let config = ConnectorConfig::resolve(&worker, &connector).expect("resolved");
    let mut consumer = KafkaShareConsumer::connect(config.kafka_consumer_config().expect("config"))
        .await
        .expect("connect");
    consumer.subscribe(vec![topic]).await.expect("subscribe");
    assert_eq!(drain(&mut consumer, 20).await.len(), 20);
    consumer
        .close(Duration::from_secs(30))
        .await
        .expect("close");
}

/// The admin client and the dead-letter queue producer over SASL_SSL: a record consumed
/// over SASL_SSL is written to a dead-letter topic the queue creates, and read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_and_dead_letter_queue_over_sasl_ssl() {
    let Some(addr) = listener("dlq_sasl_ssl", "KAFKA_SASL_SSL_BOOTSTRAP") else {
        return;
    };
    let security = Security::sasl_ssl(scram512(), ca());
    let admin = KafkaAdmin::builder(&addr)
        .security(security.clone())
        .connect()
        .await
        .expect("admin over SASL_SSL");
    let created = support::unique("created-over-sasl");
    admin.create_topic(&created, 1, 1).await.expect("create");
    let ids = admin.topic_ids(&[created.as_str()]).await.expect("ids");
    assert_eq!(ids.len(), 1);

    let (topic, group) = topic_with_records("dlq_sasl_ssl", 1).await;
    let mut consumer = KafkaShareConsumer::connect(
        KafkaShareConsumerConfig::new(&addr, &group).security(security.clone()),
    )
    .await
    .expect("consumer");
    consumer.subscribe(vec![topic]).await.expect("subscribe");
    let record = drain(&mut consumer, 1).await.pop().expect("one record");
    consumer
        .close(Duration::from_secs(30))
        .await
        .expect("close");

    let dlq_topic = support::unique("dlq-over-sasl");
    let dlq = KafkaDeadLetterQueue::connect(
        KafkaDeadLetterQueueConfig::new(&addr, &dlq_topic)
            .replication_factor(1)
            .security(security.clone()),
    )
    .await
    .expect("dead-letter queue over SASL_SSL");
    dlq.send(vec![DeadLetterRecord::new(&record)])
        .await
        .expect("sent");

    let dlq_group = support::unique("dlq-reader");
    admin
        .set_share_group_config(&dlq_group, &[("share.auto.offset.reset", "earliest")])
        .await
        .expect("group config");
    let mut reader = KafkaShareConsumer::connect(
        KafkaShareConsumerConfig::new(&addr, &dlq_group).security(security),
    )
    .await
    .expect("reader");
    reader.subscribe(vec![dlq_topic]).await.expect("subscribe");
    let dead = drain(&mut reader, 1).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].key(), record.key());
    reader.close(Duration::from_secs(30)).await.expect("close");
}

// ---------------------------------------------------------------------------------------
// The failure table: what each misconfiguration gives, within a bounded time
// ---------------------------------------------------------------------------------------

/// How long a refused connection may take: a few round trips, no retry loop.
const REFUSED_WITHIN: Duration = Duration::from_secs(15);

/// The error of a consumer connect to `addr` with `security`, within [`REFUSED_WITHIN`].
async fn refused(addr: &str, security: Security) -> ConsumerError {
    let config = KafkaShareConsumerConfig::new(addr, "never-joined")
        .connect_timeout(Duration::from_secs(5))
        .security(security);
    let started = Instant::now();
    let result = tokio::time::timeout(REFUSED_WITHIN, KafkaShareConsumer::connect(config))
        .await
        .expect("refused in time, not retried");
    let error = match result {
        Ok(_) => panic!("connected to {addr}"),
        Err(e) => e,
    };
    assert!(started.elapsed() < REFUSED_WITHIN);
    let text = format!("{error} {error:?}");
    assert!(!text.contains(PASSWORD), "{text}");
    error
}

/// Asserts an authentication failure whose reason contains each of `parts`.
#[track_caller]
fn assert_authentication(error: &ConsumerError, parts: &[&str]) {
    let ConsumerError::Connection(refused) = error else {
        panic!("not an authentication error: {error:?}");
    };
    assert!(!error.is_retriable());
    assert_refused(refused, parts);
}

/// [`assert_authentication`] for the cause the producer and the admin client carry.
fn assert_client_authentication(error: &ClientError, parts: &[&str]) {
    let ClientError::Connection(refused) = error else {
        panic!("not an authentication error: {error:?}");
    };
    assert!(!error.is_retriable() && error.is_authentication());
    assert_refused(refused, parts);
}

fn assert_refused(error: &ConnectionError, parts: &[&str]) {
    let ConnectionError::Authentication { reason, .. } = error else {
        panic!("not an authentication error: {error:?}");
    };
    for part in parts {
        assert!(reason.contains(part), "`{part}` not in: {reason}");
    }
}

#[tokio::test]
async fn untrusted_broker_certificate_is_refused() {
    let Some(addr) = listener("untrusted", "KAFKA_SSL_BOOTSTRAP") else {
        return;
    };
    // The system roots do not know the test CA.
    let error = refused(&addr, Security::ssl(TlsSettings::system_roots())).await;
    assert_authentication(&error, &["UnknownIssuer", "ssl.truststore.location"]);
}

#[tokio::test]
async fn expired_broker_certificate_is_refused_with_its_date() {
    let Some(addr) = listener("expired", "KAFKA_EXPIRED_BOOTSTRAP") else {
        return;
    };
    let error = refused(&addr, Security::ssl(ca())).await;
    assert_authentication(&error, &["expired", "2020-01-02 00:00:00 UTC"]);
}

#[tokio::test]
async fn certificate_of_another_host_is_refused_unless_the_name_check_is_off() {
    let Some(addr) = listener("wronghost", "KAFKA_WRONGHOST_BOOTSTRAP") else {
        return;
    };
    let error = refused(&addr, Security::ssl(ca())).await;
    assert_authentication(
        &error,
        &[
            "not valid for `localhost`",
            "wrong.invalid",
            "ssl.endpoint.identification.algorithm",
        ],
    );
    // Java's empty ssl.endpoint.identification.algorithm: the chain is still checked.
    KafkaAdmin::builder(&addr)
        .security(Security::ssl(ca().verify_hostname(false)))
        .connect()
        .await
        .expect("connects without the name check");
    let error = refused(
        &addr,
        Security::ssl(TlsSettings::system_roots().verify_hostname(false)),
    )
    .await;
    assert_authentication(&error, &["UnknownIssuer"]);
}

#[tokio::test]
async fn mutual_tls_without_or_with_an_untrusted_client_certificate_is_refused() {
    let Some(addr) = listener("mtls_refused", "KAFKA_MTLS_BOOTSTRAP") else {
        return;
    };
    let error = refused(&addr, Security::ssl(ca())).await;
    assert_authentication(
        &error,
        &["requires a client certificate", "ssl.keystore.location"],
    );
    let error = refused(
        &addr,
        Security::ssl(ca().client_pem_file(pki("rogue-client.pem"))),
    )
    .await;
    assert_authentication(&error, &["rejected the client certificate"]);
}

#[tokio::test]
async fn wrong_passwords_and_unknown_users_are_refused_with_the_brokers_words() {
    let Some(addr) = listener("wrong_password", "KAFKA_SASL_SSL_BOOTSTRAP") else {
        return;
    };
    let error = refused(
        &addr,
        Security::sasl_ssl(SaslSettings::plain("alice", "wrong"), ca()),
    )
    .await;
    assert_authentication(&error, &["PLAIN", "alice", "Invalid username or password"]);
    for sasl in [
        SaslSettings::scram_sha512("alice", "wrong"),
        SaslSettings::scram_sha256("nobody", PASSWORD),
    ] {
        let error = refused(&addr, Security::sasl_ssl(sasl, ca())).await;
        assert_authentication(&error, &["SCRAM-SHA-", "invalid credentials"]);
    }
    // The admin client reports it too, not as a retriable connection failure.
    let error = KafkaAdmin::builder(&addr)
        .security(Security::sasl_ssl(
            SaslSettings::plain("bob", "wrong"),
            ca(),
        ))
        .connect()
        .await
        .expect_err("refused");
    assert!(!error.is_retriable(), "{error:?}");
    let AdminError::Authentication { source, .. } = &error else {
        panic!("{error:?}")
    };
    assert_client_authentication(source, &["Invalid username or password"]);
}

#[tokio::test]
async fn mechanism_not_enabled_names_the_enabled_ones() {
    let Some(addr) = listener("mechanism", "KAFKA_REAUTH_BOOTSTRAP") else {
        return;
    };
    let error = refused(
        &addr,
        Security::sasl_plaintext(SaslSettings::scram_sha256("alice", PASSWORD)),
    )
    .await;
    assert_authentication(
        &error,
        &["SCRAM-SHA-256", "not enabled", "SCRAM-SHA-512", "PLAIN"],
    );
}

/// Tokens whose `exp` is past.
#[derive(Debug)]
struct ExpiredTokens;

#[async_trait]
impl TokenProvider for ExpiredTokens {
    async fn token(&self) -> Result<OAuthToken, BoxError> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
        let claims = format!(
            r#"{{"sub":"alice","iat":{},"exp":{}}}"#,
            now - 120,
            now - 60
        );
        Ok(OAuthToken::new(format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#),
            URL_SAFE_NO_PAD.encode(claims)
        )))
    }
}

#[tokio::test]
async fn expired_oauth_token_is_refused() {
    let Some(addr) = listener("expired_token", "KAFKA_SASL_SSL_BOOTSTRAP") else {
        return;
    };
    let error = refused(
        &addr,
        Security::sasl_ssl(SaslSettings::oauthbearer(Arc::new(ExpiredTokens)), ca()),
    )
    .await;
    assert_authentication(&error, &["OAUTHBEARER", "invalid_token"]);
}

#[tokio::test]
async fn sasl_client_at_a_listener_without_sasl_is_told_so() {
    let Some(addr) = listener("no_sasl", "KAFKA_SSL_BOOTSTRAP") else {
        return;
    };
    let error = refused(&addr, Security::sasl_ssl(scram512(), ca())).await;
    assert_authentication(&error, &["no SASL enabled"]);
}

/// The broker answers ApiVersions on a SASL listener, then hangs up on the next request:
/// the admin client's first Metadata says why. (A share consumer meets it in its background
/// tasks, which retry and log the hint as a warning, as a broker restarting at that moment
/// would look the same.)
#[tokio::test]
async fn tls_client_at_a_sasl_listener_gets_a_hint() {
    let Some(addr) = listener("needs_sasl", "KAFKA_SASL_SSL_BOOTSTRAP") else {
        return;
    };
    let started = Instant::now();
    let error = KafkaAdmin::builder(&addr)
        .security(Security::ssl(ca()))
        .connect()
        .await
        .expect_err("the listener needs SASL");
    assert!(started.elapsed() < REFUSED_WITHIN);
    let text = format!("{error:?}");
    assert!(text.contains("may require SASL"), "{text}");
}

#[tokio::test]
async fn plaintext_client_at_a_tls_listener_gets_a_hint() {
    let Some(addr) = listener("needs_tls", "KAFKA_SSL_BOOTSTRAP") else {
        return;
    };
    let error = refused(&addr, Security::plaintext()).await;
    let ConsumerError::Config { key, reason } = &error else {
        panic!("{error:?}")
    };
    assert_eq!(key, "security.protocol");
    assert!(reason.contains("expects TLS"), "{reason}");
    assert!(!error.is_retriable());
}

#[tokio::test]
async fn tls_client_at_a_plaintext_listener_gets_a_hint() {
    let Some(addr) = support::bootstrap("not_tls") else {
        return;
    };
    // The PLAINTEXT listener is 127.0.0.1, which the test CA's broker certificate names;
    // the broker hangs up on the handshake.
    let error = refused(&addr, Security::ssl(ca())).await;
    let ConsumerError::Connection(ConnectionError::Io { source, .. }) = &error else {
        panic!("{error:?}")
    };
    assert!(source.to_string().contains("may not be TLS"), "{source}");
}

/// Tokens until `fail` is set, then an error.
#[derive(Debug)]
struct FailingLater {
    fail: AtomicBool,
}

#[async_trait]
impl TokenProvider for FailingLater {
    async fn token(&self) -> Result<OAuthToken, BoxError> {
        if self.fail.load(Ordering::SeqCst) {
            return Err("the identity provider is down".into());
        }
        UnsecuredJwsTokenProvider::new("alice")
            .lifetime(Duration::from_secs(60))
            .token()
            .await
    }
}

/// A token provider that starts failing: when the 5 s session ends the consumer must
/// authenticate again, and its poll then reports the authentication error instead of
/// retrying for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_provider_that_starts_failing_reaches_poll() {
    let Some(addr) = listener("failing_provider", "KAFKA_REAUTH_BOOTSTRAP") else {
        return;
    };
    let (topic, group) = topic_with_records("failing_provider", 5).await;
    let provider = Arc::new(FailingLater {
        fail: AtomicBool::new(false),
    });
    let mut consumer = KafkaShareConsumer::connect(
        KafkaShareConsumerConfig::new(&addr, &group)
            .fetch_max_wait(Duration::from_millis(200))
            .security(Security::sasl_plaintext(SaslSettings::oauthbearer(
                provider.clone(),
            ))),
    )
    .await
    .expect("connect");
    consumer.subscribe(vec![topic]).await.expect("subscribe");
    assert_eq!(drain(&mut consumer, 5).await.len(), 5);
    provider.fail.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(30);
    let error = loop {
        assert!(Instant::now() < deadline, "no authentication error in 30 s");
        match consumer.poll(Duration::from_millis(500)).await {
            Ok(_) => {}
            Err(e) => break e,
        }
    };
    assert_authentication(&error, &["OAUTHBEARER", "identity provider is down"]);
    // From then on every poll and commit says so at once, and the provider is not asked
    // in a tight loop: at most one connection attempt per second.
    let counts = consumer.connection_counts();
    assert!(counts.authentication_failures >= 1, "{counts:?}");
    let started = Instant::now();
    let again = consumer
        .poll(Duration::from_secs(30))
        .await
        .expect_err("still refused");
    assert_authentication(&again, &["OAUTHBEARER"]);
    let commit = consumer
        .commit_sync(Duration::from_secs(30))
        .await
        .expect_err("commit refused");
    assert_authentication(&commit, &["OAUTHBEARER"]);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let later = consumer.connection_counts();
    assert!(
        later.attempts - counts.attempts <= 1 + started.elapsed().as_secs(),
        "{counts:?} -> {later:?}"
    );
    consumer
        .close(Duration::from_secs(30))
        .await
        .expect("close");
}

// ---------------------------------------------------------------------------------------
// Re-authentication (KIP-368) and secrets in logs
// ---------------------------------------------------------------------------------------

/// Unsecured tokens, remembering each one handed out.
#[derive(Debug, Default)]
struct RecordingTokens {
    issued: std::sync::Mutex<Vec<String>>,
}

#[async_trait]
impl TokenProvider for RecordingTokens {
    async fn token(&self) -> Result<OAuthToken, BoxError> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
        let claims = format!(r#"{{"sub":"alice","iat":{now},"exp":{}}}"#, now + 60);
        let token = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#),
            URL_SAFE_NO_PAD.encode(claims)
        );
        self.issued.lock().unwrap().push(token.clone());
        Ok(OAuthToken::new(token))
    }
}

/// Consumes from the REAUTH listener (5 s sessions) for about 16 s while records keep
/// arriving, under a tracing subscriber that keeps every event at every level. Returns the
/// captured log lines. Asserts that every record arrived exactly once, that every poll and
/// commit succeeded, and that the connections authenticated again at least twice.
fn consume_across_sessions(test: &str, sasl: SaslSettings) -> Option<Vec<String>> {
    let addr = listener(test, "KAFKA_REAUTH_BOOTSTRAP")?;
    let plaintext = support::bootstrap(test)?;
    let test = test.to_owned();
    let ((), lines) = support::captured(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let (topic, group) = topic_with_records(&test, 10).await;
            let partition = support::rskafka_partition(&plaintext, &topic, 0).await;
            let mut consumer = KafkaShareConsumer::connect(
                KafkaShareConsumerConfig::new(&addr, &group)
                    .fetch_max_wait(Duration::from_millis(200))
                    .security(Security::sasl_plaintext(sasl)),
            )
            .await
            .expect("connect");
            consumer.subscribe(vec![topic]).await.expect("subscribe");
            let mut offsets = Vec::new();
            let start = Instant::now();
            let mut produced = 10;
            while start.elapsed() < Duration::from_secs(16) {
                if start.elapsed() > Duration::from_secs(2 * (produced / 10 - 1) as u64) {
                    let batch = (0..10)
                        .map(|i| Record {
                            key: Some(format!("late-{produced}-{i}").into_bytes()),
                            value: None,
                            headers: BTreeMap::new(),
                            timestamp: chrono::Utc::now(),
                        })
                        .collect();
                    partition
                        .produce(batch, Compression::NoCompression)
                        .await
                        .expect("produce");
                    produced += 10;
                }
                let records = consumer
                    .poll(Duration::from_millis(300))
                    .await
                    .expect("no poll fails across re-authentications");
                for r in &records {
                    consumer
                        .acknowledge(r, AcknowledgeType::Accept)
                        .expect("acknowledge");
                    offsets.push(r.offset());
                }
                let results = consumer
                    .commit_sync(Duration::from_secs(10))
                    .await
                    .expect("commit");
                assert!(
                    results.failures().next().is_none(),
                    "an acknowledgement was lost: {results:?}"
                );
            }
            // The rest, then nothing more: accepted records never come back.
            offsets.extend(
                drain(&mut consumer, produced - offsets.len())
                    .await
                    .iter()
                    .map(|r| r.offset()),
            );
            let extra = consumer.poll(Duration::from_secs(1)).await.expect("poll");
            assert!(extra.is_empty(), "delivered again: {extra:?}");
            consumer
                .close(Duration::from_secs(30))
                .await
                .expect("close");
            offsets.sort_unstable();
            let expected: Vec<i64> = (0..i64::try_from(produced).unwrap()).collect();
            assert_eq!(offsets, expected, "every record exactly once");
        });
    });
    let reauths = lines
        .iter()
        .filter(|l| l.contains("re-authenticated"))
        .count();
    assert!(
        reauths >= 2,
        "{reauths} re-authentications in {} lines",
        lines.len()
    );
    assert!(
        !lines.iter().any(|l| l.contains("connection closed")),
        "a connection was lost: {:?}",
        lines
            .iter()
            .filter(|l| l.contains("connection closed"))
            .collect::<Vec<_>>()
    );
    Some(lines)
}

#[test]
fn scram_sessions_are_renewed_without_losing_anything_or_logging_the_password() {
    let Some(lines) = consume_across_sessions("reauth_scram", scram512()) else {
        return;
    };
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("TRACE") || l.starts_with("DEBUG"))
    );
    for line in &lines {
        assert!(!line.contains(PASSWORD), "{line}");
    }
}

#[test]
fn oauth_sessions_are_renewed_with_fresh_tokens_that_are_never_logged() {
    let tokens = Arc::new(RecordingTokens::default());
    let Some(lines) =
        consume_across_sessions("reauth_oauth", SaslSettings::oauthbearer(tokens.clone()))
    else {
        return;
    };
    let issued = tokens.issued.lock().unwrap().clone();
    // Each connection's first token and one per re-authentication.
    assert!(issued.len() >= 4, "{} tokens", issued.len());
    for token in &issued {
        let payload = token.split('.').nth(1).unwrap();
        for line in &lines {
            assert!(!line.contains(payload), "a token in the logs: {line}");
        }
    }
}

/// A failed login, with everything logged: neither the password nor the JAAS text shows in
/// the logs, the error, or the settings' Debug.
#[test]
fn failed_logins_log_no_secret() {
    let Some(addr) = listener("redaction", "KAFKA_SASL_PLAINTEXT_BOOTSTRAP") else {
        return;
    };
    let (text, lines) = support::captured(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let props = Properties::parse(&format!(
                "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n\
                 sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"alice\" password=\"{PASSWORD}-wrong\";\n"
            ))
            .expect("props");
            let security = Security::from_properties(&props).expect("security");
            let config = KafkaShareConsumerConfig::new(&addr, "g").security(security.clone());
            let error = KafkaShareConsumer::connect(config.clone())
                .await
                .expect_err("wrong password");
            assert_authentication(&error, &["Invalid username or password"]);
            format!("{error} {error:?} {security:?} {config:?} {props:?}")
        })
    });
    assert!(!text.contains(PASSWORD), "{text}");
    // ApiVersions, SaslHandshake and SaslAuthenticate went out, and were logged.
    let requests = lines
        .iter()
        .filter(|l| l.contains("request queued"))
        .count();
    assert!(requests >= 3, "{lines:?}");
    for line in &lines {
        assert!(!line.contains(PASSWORD), "{line}");
    }
}

// ---------------------------------------------------------------------------------------
// One cause, one answer: every public client classifies a refused credential the same way
// ---------------------------------------------------------------------------------------

/// A client certificate from an unrelated CA, at the listener that requires one: the share
/// consumer, the producer, the admin client and the log reader each report an
/// authentication failure (not a retriable connection error), naming the rejected
/// certificate, within a bounded time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rogue_client_certificate_is_an_authentication_failure_for_every_client() {
    use kafka_share_sink::producer::{
        KafkaLogReader, KafkaProducer, KafkaProducerConfig, ProducerError,
    };
    let Some(addr) = listener("rogue_everywhere", "KAFKA_MTLS_BOOTSTRAP") else {
        return;
    };
    let rogue = || Security::ssl(ca().client_pem_file(pki("rogue-client.pem")));
    let expect = ["rejected the client certificate", "CertificateUnknown"];

    let consumer = refused(&addr, rogue()).await;
    assert_authentication(&consumer, &expect);

    let admin = tokio::time::timeout(
        REFUSED_WITHIN,
        KafkaAdmin::builder(&addr)
            .connect_timeout(Duration::from_secs(5))
            .security(rogue())
            .connect(),
    )
    .await
    .expect("admin refused in time")
    .expect_err("admin refused");
    assert!(!admin.is_retriable(), "{admin:?}");
    let AdminError::Authentication { source, .. } = &admin else {
        panic!("admin: {admin:?}")
    };
    assert_client_authentication(source, &expect);

    let producer = tokio::time::timeout(
        REFUSED_WITHIN,
        KafkaProducer::connect(
            KafkaProducerConfig::new(&addr)
                .delivery_timeout(Duration::from_secs(10))
                .security(rogue()),
        ),
    )
    .await
    .expect("producer refused in time")
    .expect_err("producer refused");
    assert!(!producer.is_retriable(), "{producer:?}");
    let ProducerError::Authentication { source } = &producer else {
        panic!("producer: {producer:?}")
    };
    assert_client_authentication(source, &expect);

    let reader = tokio::time::timeout(
        REFUSED_WITHIN,
        KafkaLogReader::builder(&addr)
            .connect_timeout(Duration::from_secs(5))
            .security(rogue())
            .connect(),
    )
    .await
    .expect("reader refused in time")
    .expect_err("reader refused");
    assert_authentication(&reader, &expect);
}

/// One cause, one answer, at the broker layer: a topic this principal may not describe (an
/// ACL denies it) gives every client the same [`BrokerError`], TOPIC_AUTHORIZATION_FAILED
/// (29, not retriable) — the share consumer and the log reader as `ConsumerError::Broker`,
/// the producer and the admin client with it as their source — within a bounded time, not
/// retried. Needs the broker's ACL authorizer (`KAFKA_ACLS=1`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_the_principal_may_not_describe_is_the_same_broker_error_for_every_client() {
    use kafka_share_sink::producer::{
        IsolationLevel, KafkaLogReader, KafkaProducer, KafkaProducerConfig, LogReader, Producer,
        ProducerError, ProducerRecord,
    };
    let test = "denied_everywhere";
    let Some(plaintext) = support::bootstrap_with_acls(test) else {
        return;
    };
    let (topic, group) = topic_with_records(test, 1).await;
    // The plaintext listener's principal is ANONYMOUS; a DENY wins over the open default.
    support::acls(
        &plaintext,
        &[
            "--deny-principal",
            "User:ANONYMOUS",
            "--operation",
            "Describe",
            "--topic",
            &topic,
        ],
    );
    #[track_caller]
    fn denied(who: &str, error: Option<&BrokerError>, whole: &dyn std::fmt::Debug) {
        let Some(error) = error else {
            panic!("{who}: not a broker error: {whole:?}")
        };
        assert_eq!(
            (error.code, error.name, error.retriable),
            (29, "TOPIC_AUTHORIZATION_FAILED", false),
            "{who}: {whole:?}"
        );
    }
    async fn within<T>(what: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(30), what)
            .await
            .expect("answered in time, not retried")
    }

    let admin = KafkaAdmin::connect(&plaintext).await.expect("admin");
    let error = within(admin.topic_ids(&[topic.as_str()]))
        .await
        .expect_err("admin refused");
    assert!(!error.is_retriable(), "{error:?}");
    denied("admin", error.broker_error(), &error);
    assert!(matches!(error, AdminError::Broker { .. }), "{error:?}");

    let reader = KafkaLogReader::builder(&plaintext)
        .connect()
        .await
        .expect("reader");
    let error = within(reader.end_offset(&topic, 0, IsolationLevel::ReadUncommitted))
        .await
        .expect_err("reader refused");
    assert!(!error.is_retriable(), "{error:?}");
    denied("reader", error.broker_error(), &error);
    assert!(matches!(error, ConsumerError::Broker(_)), "{error:?}");

    let producer = KafkaProducer::connect(
        KafkaProducerConfig::new(&plaintext).delivery_timeout(Duration::from_secs(20)),
    )
    .await
    .expect("producer");
    let error = match producer.send(ProducerRecord::new(topic.as_str()).value("v")) {
        Err(error) => error,
        Ok(delivery) => within(delivery).await.expect_err("producer refused"),
    };
    assert!(!error.is_retriable(), "{error:?}");
    denied("producer", error.broker_error(), &error);
    assert!(matches!(error, ProducerError::Kafka { .. }), "{error:?}");

    let config = KafkaShareConsumerConfig::new(&plaintext, &group)
        .fetch_max_wait(Duration::from_millis(200));
    let mut consumer = KafkaShareConsumer::connect(config).await.expect("consumer");
    consumer
        .subscribe(vec![topic.clone()])
        .await
        .expect("subscribe");
    let error = within(async {
        loop {
            match consumer.poll(Duration::from_millis(500)).await {
                Ok(records) => assert!(records.is_empty(), "read a denied topic: {records:?}"),
                Err(error) => break error,
            }
        }
    })
    .await;
    assert!(!error.is_retriable(), "{error:?}");
    denied("consumer", error.broker_error(), &error);
    assert!(matches!(error, ConsumerError::Broker(_)), "{error:?}");
}

// ---------------------------------------------------------------------------------------
// Credentials revoked mid-run
// ---------------------------------------------------------------------------------------

/// Sets `user`'s SCRAM-SHA-512 password on the broker, as `kafka-configs.sh --alter
/// --add-config 'SCRAM-SHA-512=[...]' --entity-type users` does.
fn set_scram_password(plaintext: &str, user: &str, password: &str) {
    let output =
        std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/kafka.sh"))
            .args([
                "run-class",
                "org.apache.kafka.tools.ConfigCommand",
                "--bootstrap-server",
                plaintext,
                "--alter",
                "--add-config",
                &format!("SCRAM-SHA-512=[iterations=4096,password={password}]"),
                "--entity-type",
                "users",
                "--entity-name",
                user,
            ])
            .output()
            .expect("scripts/kafka.sh run-class");
    assert!(
        output.status.success(),
        "ConfigCommand: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A sink task that takes every record.
struct Accepting;

#[async_trait]
impl kafka_share_sink::SinkTask for Accepting {
    async fn start(
        &mut self,
        _: &kafka_share_sink::TaskConfig,
    ) -> Result<(), kafka_share_sink::TaskError> {
        Ok(())
    }
    async fn put(
        &mut self,
        _: &[kafka_share_sink::SinkRecord],
    ) -> Result<(), kafka_share_sink::TaskError> {
        Ok(())
    }
}

/// A SCRAM password changed on the broker while the driver runs on the REAUTH listener
/// (5 s sessions, so every connection authenticates again within 5 s): the first
/// re-authentication is refused, and within 2 s of that refusal the driver returns the
/// consumer's typed authentication error and stops; meanwhile the consumer dialled the broker
/// at most once per second (`reconnect.backoff.max.ms`).
///
/// The refusal is timed by the consumer's count of authentication failures, read between
/// iterations: it came after the last read that found none, so the time from that read to
/// the driver's error bounds the time from the refusal to the error from above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_changed_mid_run_stops_the_driver_promptly_without_a_reconnect_storm() {
    use kafka_share_sink::{DriverConfig, Error as DriverError, ShareSinkTask};
    let Some(addr) = listener("revoked", "KAFKA_REAUTH_BOOTSTRAP") else {
        return;
    };
    let plaintext = support::bootstrap("revoked").expect("broker");
    let user = support::unique("revoked-user");
    let old = format!("{PASSWORD}-old");
    set_scram_password(&plaintext, &user, &old);
    let security =
        || Security::sasl_plaintext(SaslSettings::scram_sha512(user.clone(), old.clone()));
    // The new user reaches the listener through the metadata log: wait until it logs in.
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = KafkaAdmin::builder(&addr)
        .security(security())
        .connect()
        .await
    {
        assert!(
            Instant::now() < deadline,
            "the new user never logged in: {e:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (topic, group) = topic_with_records("revoked", 20).await;
    let consumer = KafkaShareConsumer::connect(
        KafkaShareConsumerConfig::new(&addr, &group)
            .fetch_max_wait(Duration::from_millis(200))
            .security(security()),
    )
    .await
    .expect("connect");
    let config = DriverConfig::new([topic.as_str()]).poll_timeout(Duration::from_millis(200));
    let mut driver = ShareSinkTask::new(Box::new(Accepting), consumer, config);
    driver.initialize().await.expect("initialize");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut taken = 0;
    while taken < 20 {
        assert!(Instant::now() < deadline, "{taken} records in 60 s");
        taken += driver.iteration().await.expect("iteration").records;
    }
    let before = driver.consumer().connection_counts();
    assert_eq!(before.authentication_failures, 0, "{before:?}");

    set_scram_password(&plaintext, &user, &format!("{PASSWORD}-new"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut none_yet = Instant::now();
    let error = loop {
        assert!(
            Instant::now() < deadline,
            "the driver still runs 30 s after the change"
        );
        if driver
            .consumer()
            .connection_counts()
            .authentication_failures
            == 0
        {
            none_yet = Instant::now();
        }
        match driver.iteration().await {
            Ok(_) => {}
            Err(e) if e.is_retriable() => {}
            Err(e) => break e,
        }
    };
    let stopped = Instant::now();
    let DriverError::Consumer(consumer_error) = &error else {
        panic!("not a consumer error: {error:?}")
    };
    assert_authentication(consumer_error, &["SCRAM-SHA-512", "invalid credentials"]);
    assert!(matches!(driver.iteration().await, Err(DriverError::Failed)));
    // Promptly: within a few polls of the refusal, not at the 30 s deadline (5 s leaves room
    // for a busy 2-core machine running this file's tests side by side; 2 s failed there once
    // at 2.9 s).
    assert!(
        stopped - none_yet < Duration::from_secs(5),
        "the driver stopped {:?} after the last look that found no refusal",
        stopped - none_yet
    );
    let at_stop = driver.consumer().connection_counts();
    assert!(at_stop.authentication_failures >= 1, "{at_stop:?}");
    // The consumer keeps pacing its attempts until it is closed.
    driver.close().await.expect("close");
    let closed = Instant::now();
    let counts = driver.consumer().connection_counts();
    // Connections dialled since the refusal: at most one per second (this listener has one
    // broker), plus one under way when it came.
    let dialled = counts.attempts - before.attempts;
    let allowed = 1 + (closed - none_yet).as_secs();
    assert!(
        dialled <= allowed,
        "{dialled} connection attempts in {:?}: {before:?} -> {at_stop:?} -> {counts:?}",
        closed - none_yet
    );
}
