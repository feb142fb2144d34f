//! Shared helpers of the real-broker tests.
//!
//! The broker address comes from `KAFKA_BOOTSTRAP`, which `scripts/test.sh` sets after starting
//! a broker. Under that script `KAFKA_REQUIRE_BROKER=1` is set too, and a missing broker fails the
//! test. A plain `cargo test` without a broker skips the broker tests and says so.

#![allow(dead_code)]

/// The broker address, or `None` (with a note on stderr) when the tests may be skipped.
///
/// # Panics
///
/// When `KAFKA_REQUIRE_BROKER=1` and no address is set: the test command promised a broker.
pub(crate) fn bootstrap(test: &str) -> Option<String> {
    match std::env::var("KAFKA_BOOTSTRAP") {
        Ok(addr) if !addr.trim().is_empty() => Some(addr.trim().to_owned()),
        _ if std::env::var("KAFKA_REQUIRE_BROKER").as_deref() == Ok("1") => {
            panic!(
                "{test}: KAFKA_REQUIRE_BROKER=1 but KAFKA_BOOTSTRAP is not set: start a broker with scripts/kafka.sh"
            )
        }
        _ => {
            eprintln!("SKIPPED {test}: no broker (set KAFKA_BOOTSTRAP, or run ./scripts/test.sh)");
            None
        }
    }
}

/// A name unique to this test run, for topics and groups.
pub(crate) fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The events of one thread, kept as text.
///
/// Not a subscriber of its own set with `tracing::subscriber::set_default`: tracing caches
/// whether a call site is wanted when the call site is first reached, and while one scoped
/// subscriber is the only one registered it asks the subscriber *of the thread that got there
/// first*. A call site first reached by another test's thread while this test captured was
/// cached as unwanted, and this thread's events there were lost (it made
/// `kafka_security::failed_logins_log_no_secret` fail now and then). One global subscriber,
/// [`Router`], wants every call site and hands each event to the capture of its thread.
#[derive(Clone, Default)]
pub(crate) struct Capture(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Capture {
    pub(crate) fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// Keeps the events of this thread until the guard drops.
    ///
    /// # Panics
    ///
    /// When another global tracing subscriber was set in this test binary.
    pub(crate) fn set_default(&self) -> CaptureGuard {
        static ROUTER: std::sync::OnceLock<()> = std::sync::OnceLock::new();
        ROUTER.get_or_init(|| {
            tracing::subscriber::set_global_default(Router)
                .expect("no other global tracing subscriber in a test binary that captures");
        });
        let previous = CAPTURE.with(|c| c.borrow_mut().replace(self.clone()));
        CaptureGuard { previous }
    }

    fn push(&self, event: &tracing::Event<'_>) {
        let mut line = format!("{} ", event.metadata().level());
        event.record(&mut Line(&mut line));
        self.0.lock().unwrap().push(line);
    }
}

thread_local! {
    static CAPTURE: std::cell::RefCell<Option<Capture>> = const { std::cell::RefCell::new(None) };
}

/// Ends a [`Capture`] of this thread when dropped (the one before it, if any, goes on).
pub(crate) struct CaptureGuard {
    previous: Option<Capture>,
}

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CAPTURE.with(|c| *c.borrow_mut() = previous);
    }
}

struct Line<'a>(&'a mut String);

impl tracing::field::Visit for Line<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write as _;
        write!(self.0, "{}={:?} ", field.name(), value).unwrap();
    }
}

/// The global subscriber of a test binary that captures: every call site is wanted, and an
/// event goes to the [`Capture`] of the thread it happens on, if that thread has one.
struct Router;

impl tracing::Subscriber for Router {
    fn register_callsite(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        // Asked again at every event (`enabled`), never cached as unwanted.
        tracing::subscriber::Interest::sometimes()
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        CAPTURE.try_with(|c| c.borrow().is_some()).unwrap_or(false)
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        // A thread whose locals are gone (a worker shutting down) has no capture.
        let _ = CAPTURE.try_with(|c| {
            if let Some(capture) = &*c.borrow() {
                capture.push(event);
            }
        });
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Runs `f` and returns what it returned with the events of this thread during it.
pub(crate) fn captured<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    let capture = Capture::default();
    let guard = capture.set_default();
    let out = f();
    drop(guard);
    (out, capture.lines())
}

/// Reads a share group's configs until `done` holds, for at most 30 s, and returns them. A
/// group config set through the controller reaches a broker's view of the metadata a moment
/// later: a read (or a consumer) right after the change may still see the old value.
///
/// # Panics
///
/// When the read fails, or `done` still does not hold after 30 s.
pub(crate) async fn share_group_config_until(
    admin: &kafka_share_sink::KafkaAdmin,
    group: &str,
    done: impl Fn(&kafka_share_sink::ShareGroupConfigs) -> bool,
) -> kafka_share_sink::ShareGroupConfigs {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let configs = admin.share_group_config(group).await.expect("describe");
        if done(&configs) {
            return configs;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the group's configs never showed the change: {configs:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Produces `values` (no key, no headers) to one partition of `topic`, in produce batches of
/// at most `per_batch` records (a share fetch acquires whole batches).
pub(crate) async fn produce_values(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    values: impl IntoIterator<Item = Vec<u8>>,
    per_batch: usize,
) {
    use rskafka::client::partition::Compression;
    use rskafka::record::Record;

    let partition = rskafka_partition(bootstrap, topic, partition).await;
    let records: Vec<Record> = values
        .into_iter()
        .map(|value| Record {
            key: None,
            value: Some(value),
            headers: std::collections::BTreeMap::new(),
            timestamp: chrono::Utc::now(),
        })
        .collect();
    for batch in records.chunks(per_batch.max(1)) {
        partition
            .produce(batch.to_vec(), Compression::NoCompression)
            .await
            .expect("produce");
    }
}

/// An rskafka client of one partition of `topic` (`bootstrap`: one address, or several
/// separated by commas), waiting for the topic to be known.
pub(crate) async fn rskafka_partition(
    bootstrap: &str,
    topic: &str,
    partition: i32,
) -> rskafka::client::partition::PartitionClient {
    let client =
        rskafka::client::ClientBuilder::new(bootstrap.split(',').map(str::to_owned).collect())
            .build()
            .await
            .expect("rskafka client");
    client
        .partition_client(
            topic.to_owned(),
            partition,
            rskafka::client::partition::UnknownTopicHandling::Retry,
        )
        .await
        .expect("partition client")
}

/// [`bootstrap`] for a test that needs the broker's ACL authorizer: also asserts that
/// `scripts/kafka.sh env` said the broker runs one (`KAFKA_ACLS=1`).
pub(crate) fn bootstrap_with_acls(test: &str) -> Option<String> {
    let bootstrap = bootstrap(test)?;
    assert_eq!(
        std::env::var("KAFKA_ACLS").ok().as_deref(),
        Some("1"),
        "{test} needs a broker with an ACL authorizer: start it with scripts/kafka.sh \
         (KAFKA_SECURITY=1, the default) and export what `scripts/kafka.sh env` prints"
    );
    Some(bootstrap)
}

/// Adds ACLs to the test broker, as `kafka-acls.sh --add` does. Needs the broker's ACL
/// authorizer (`scripts/kafka.sh` starts it unless `KAFKA_AUTHORIZER=0`; `env` prints
/// `KAFKA_ACLS=1`).
pub(crate) fn acls(bootstrap: &str, args: &[&str]) {
    let output =
        std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/kafka.sh"))
            .args([
                "run-class",
                "org.apache.kafka.tools.AclCommand",
                "--bootstrap-server",
                bootstrap,
                "--add",
                "--force",
            ])
            .args(args)
            .output()
            .expect("scripts/kafka.sh run-class");
    assert!(
        output.status.success(),
        "AclCommand {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The end of `topic`/`partition` once no transaction is open there: a commit (or abort)
/// returns once it is decided and the coordinator writes its markers after, so the last
/// stable offset is asked for until it reaches the high watermark, at most `wait`.
///
/// # Panics
///
/// When the last stable offset is still below the end after `wait`, or an offset cannot be
/// read.
pub(crate) async fn stable_end(
    reader: &dyn kafka_share_sink::producer::LogReader,
    topic: &str,
    partition: i32,
    wait: std::time::Duration,
) -> i64 {
    use kafka_share_sink::producer::IsolationLevel;
    let give_up = tokio::time::Instant::now() + wait;
    loop {
        let stable = reader
            .end_offset(topic, partition, IsolationLevel::ReadCommitted)
            .await
            .expect("last stable offset");
        let high = reader
            .end_offset(topic, partition, IsolationLevel::ReadUncommitted)
            .await
            .expect("high watermark");
        if stable == high {
            return stable;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "`{topic}` partition {partition}: the last stable offset stayed at {stable} below the end {high}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
