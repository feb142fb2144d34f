//! [`LagReader`]: a share group's last lag read, and the task that reads it again every
//! refresh interval.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{debug, info, warn};

use super::{LagSource, ShareGroupLag};
use crate::consumer::ShareConsumer;
use crate::error::BoxError;
use crate::time::deadline_after;

/// The shortest refresh interval: a smaller one is raised to it.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// A read may take this long at least (or one refresh interval, when longer) before it is
/// given up as failed.
const MIN_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// A read of the lag that failed; the reader keeps its last read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LagError {
    /// The source answered with an error.
    #[error(
        "reading the lag of share group `{group}` failed (the last lag read is kept; check \
         that the cluster is reachable and allows describing the group's offsets)"
    )]
    Read {
        /// The share group.
        group: String,
        /// What the source said.
        #[source]
        source: BoxError,
    },
    /// The source did not answer in time.
    #[error(
        "reading the lag of share group `{group}` took longer than {timeout:?} and was given up \
         (the last lag read is kept)"
    )]
    Timeout {
        /// The share group.
        group: String,
        /// How long the read was given.
        timeout: Duration,
    },
}

/// The last lag read of one share group, refreshed in the background.
///
/// [`spawn`](Self::spawn) starts a tokio task that reads the lag from a [`LagSource`] at once
/// and then every refresh interval (`share.lag.refresh.interval.ms`, default 10 s). Reading
/// the last value ([`snapshot`](Self::snapshot)) never waits for the cluster. A read that
/// fails or takes longer than the interval (at least 5 s) keeps the last value, counts an
/// [error](Self::errors) and is logged once (a warning at the first failure, DEBUG while it
/// goes on, INFO when a read succeeds again); it never stops the reader, and never fails a
/// task.
///
/// Clones share the cache and the task; the task stops when the last clone is dropped.
/// With the feature `metrics`, every read is exported as the gauges `share-group-lag` and
/// `share-group-lag-sum` (see [`telemetry`](crate::telemetry#metrics)).
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use kafka_share_sink::embedded::{AutoOffsetReset, EmbeddedBroker, GroupConfig, ProduceRecord};
/// use kafka_share_sink::lag::LagReader;
/// use kafka_share_sink::ShareConsumer;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let broker = EmbeddedBroker::new();
/// broker.create_topic("events", 1)?;
/// broker.set_group_config("sink", GroupConfig::new().auto_offset_reset(AutoOffsetReset::Earliest))?;
/// broker.produce("events", ProduceRecord::new().value("e1"))?;
/// let mut consumer = broker.share_consumer("sink");
/// consumer.subscribe(vec!["events".into()]).await?;
/// consumer.poll(Duration::from_millis(10)).await?; // acquired, not done: still lag
///
/// let reader = LagReader::spawn(Arc::new(broker.clone()), "sink", Duration::from_secs(10));
/// let lag = reader.refresh().await?; // or wait for the background read
/// assert_eq!(lag.total(), 1);
/// assert_eq!(reader.snapshot().map(|l| l.total()), Some(1));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LagReader {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    source: Arc<dyn LagSource>,
    shared: Arc<Shared>,
    task: AbortHandle,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the reader's clones and its task share.
#[derive(Debug)]
struct Shared {
    group: String,
    interval: Duration,
    last: watch::Sender<Option<ShareGroupLag>>,
    errors: AtomicU64,
    /// The last read failed (a recovery is logged).
    failing: AtomicBool,
}

impl LagReader {
    /// Starts reading `group`'s lag from `source`: once now, then every `interval` (at least
    /// 100 ms), on a tokio task of its own.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, as `tokio::spawn`.
    pub fn spawn(source: Arc<dyn LagSource>, group: impl Into<String>, interval: Duration) -> Self {
        let (last, _) = watch::channel(None);
        let shared = Arc::new(Shared {
            group: group.into(),
            interval: interval.max(MIN_INTERVAL),
            last,
            errors: AtomicU64::new(0),
            failing: AtomicBool::new(false),
        });
        let task = tokio::spawn(refresh_loop(Arc::clone(&source), Arc::clone(&shared)));
        Self {
            inner: Arc::new(Inner {
                source,
                shared,
                task: task.abort_handle(),
            }),
        }
    }

    /// A reader of `consumer`'s group every `interval`, started now; `None` when reading is
    /// off (`interval` zero) or the consumer cannot tell its lag
    /// ([`ShareConsumer::lag_source`]). The driver and the supervisor start theirs here.
    pub(crate) fn of_consumer(consumer: &impl ShareConsumer, interval: Duration) -> Option<Self> {
        if interval.is_zero() {
            return None;
        }
        let source = consumer.lag_source()?;
        Some(Self::spawn(
            source,
            consumer.group_metadata().group_id(),
            interval,
        ))
    }

    /// The share group.
    pub fn group(&self) -> &str {
        &self.inner.shared.group
    }

    /// How often the lag is read.
    pub fn interval(&self) -> Duration {
        self.inner.shared.interval
    }

    /// The last lag read successfully, with when it was read; `None` before the first
    /// successful read. Never waits.
    pub fn snapshot(&self) -> Option<ShareGroupLag> {
        self.inner.shared.last.borrow().clone()
    }

    /// Reads that failed or timed out so far.
    pub fn errors(&self) -> u64 {
        self.inner.shared.errors.load(Ordering::Relaxed)
    }

    /// Whether `other` is a clone of this reader (the same cache and task).
    pub fn is_same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// A receiver that sees every successful read, to wait for one
    /// (`receiver.wait_for(|lag| ...)`).
    pub fn subscribe(&self) -> watch::Receiver<Option<ShareGroupLag>> {
        self.inner.shared.last.subscribe()
    }

    /// Reads the lag now, on the caller's task, and keeps it as the last read (the background
    /// reads go on at their own pace).
    ///
    /// # Errors
    ///
    /// [`LagError::Read`] when the source failed, [`LagError::Timeout`] when it took longer
    /// than the refresh interval (at least 5 s); the failure is counted in
    /// [`errors`](Self::errors) and the last read is kept.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before it completes, nothing is kept and nothing is counted.
    pub async fn refresh(&self) -> Result<ShareGroupLag, LagError> {
        read_once(&*self.inner.source, &self.inner.shared).await
    }
}

/// How long one read may take.
fn read_timeout(interval: Duration) -> Duration {
    interval.max(MIN_READ_TIMEOUT)
}

/// Reads once, keeps a success, counts and logs a failure.
async fn read_once(source: &dyn LagSource, shared: &Shared) -> Result<ShareGroupLag, LagError> {
    let group = shared.group.as_str();
    let timeout = read_timeout(shared.interval);
    let answer = tokio::time::timeout_at(
        deadline_after(Instant::now(), timeout),
        source.share_group_lag(group),
    )
    .await;
    let result = match answer {
        Ok(Ok(partitions)) => Ok(ShareGroupLag::new(group, partitions)),
        Ok(Err(source)) => Err(LagError::Read {
            group: group.to_owned(),
            source,
        }),
        Err(_) => Err(LagError::Timeout {
            group: group.to_owned(),
            timeout,
        }),
    };
    match &result {
        Ok(lag) => {
            if shared.failing.swap(false, Ordering::Relaxed) {
                info!(group, total = lag.total(), "share group lag read again");
            }
            #[cfg(feature = "metrics")]
            crate::telemetry::export::share_group_lag(lag);
            shared.last.send_replace(Some(lag.clone()));
        }
        Err(error) => {
            let errors = shared
                .errors
                .fetch_add(1, Ordering::Relaxed)
                .saturating_add(1);
            #[cfg(feature = "metrics")]
            crate::telemetry::export::share_group_lag_errors(group, errors);
            let cause = std::error::Error::source(error).map(ToString::to_string);
            if shared.failing.swap(true, Ordering::Relaxed) {
                debug!(group, errors, %error, ?cause, "reading the share group lag failed again");
            } else {
                warn!(group, %error, ?cause, "reading the share group lag failed");
            }
        }
    }
    result
}

/// Reads at once, then at every tick of the interval; a read that overruns delays the next.
async fn refresh_loop(source: Arc<dyn LagSource>, shared: Arc<Shared>) {
    let mut ticks = tokio::time::interval(shared.interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        // A failure is counted and logged by the read, and the last value stays.
        let _ = read_once(&*source, &shared).await;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::lag::PartitionLag;

    /// Answers from a script, one answer per read; `Hang` never answers.
    #[derive(Debug, Default)]
    struct Scripted {
        answers: Mutex<VecDeque<Answer>>,
        reads: AtomicU64,
    }

    #[derive(Debug)]
    enum Answer {
        Lag(u64),
        Fail,
        Hang,
    }

    impl Scripted {
        fn new(answers: impl IntoIterator<Item = Answer>) -> Arc<Self> {
            Arc::new(Self {
                answers: Mutex::new(answers.into_iter().collect()),
                reads: AtomicU64::new(0),
            })
        }

        fn reads(&self) -> u64 {
            self.reads.load(Ordering::SeqCst)
        }
    }

    #[async_trait]
    impl LagSource for Scripted {
        async fn share_group_lag(&self, _group: &str) -> Result<Vec<PartitionLag>, BoxError> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            let answer = self.answers.lock().unwrap().pop_front();
            match answer {
                Some(Answer::Lag(n)) => Ok(vec![PartitionLag::new("t", 0, Some(n))]),
                None => Ok(vec![PartitionLag::new("t", 0, Some(0))]),
                Some(Answer::Fail) => Err("broker says no".into()),
                Some(Answer::Hang) => std::future::pending().await,
            }
        }
    }

    const INTERVAL: Duration = Duration::from_secs(10);

    /// Lets the reader's task run up to its next wait.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    fn total(reader: &LagReader) -> Option<u64> {
        reader.snapshot().map(|l| l.total())
    }

    #[tokio::test(start_paused = true)]
    async fn reads_at_once_then_every_interval() {
        let source = Scripted::new([Answer::Lag(7), Answer::Lag(5), Answer::Lag(0)]);
        let reader = LagReader::spawn(source.clone(), "g", INTERVAL);
        assert_eq!(reader.group(), "g");
        settle().await;
        assert_eq!((source.reads(), total(&reader)), (1, Some(7)));
        tokio::time::advance(INTERVAL - Duration::from_millis(1)).await;
        settle().await;
        assert_eq!(source.reads(), 1, "not before the interval");
        assert_eq!(
            reader.snapshot().unwrap().age(),
            INTERVAL - Duration::from_millis(1)
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        settle().await;
        assert_eq!((source.reads(), total(&reader)), (2, Some(5)));
        tokio::time::advance(INTERVAL).await;
        settle().await;
        assert_eq!((source.reads(), total(&reader)), (3, Some(0)));
        assert_eq!(reader.errors(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_read_keeps_the_last_value_and_counts() {
        let source = Scripted::new([Answer::Lag(3), Answer::Fail, Answer::Fail, Answer::Lag(1)]);
        let reader = LagReader::spawn(source.clone(), "g", INTERVAL);
        settle().await;
        let first = reader.snapshot().unwrap();
        for errors in 1..=2 {
            tokio::time::advance(INTERVAL).await;
            settle().await;
            assert_eq!(reader.errors(), errors);
            assert_eq!(
                reader.snapshot(),
                Some(first.clone()),
                "the last read stays"
            );
        }
        tokio::time::advance(INTERVAL).await;
        settle().await;
        assert_eq!((total(&reader), reader.errors()), (Some(1), 2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_read_times_out_and_the_reads_go_on() {
        let source = Scripted::new([Answer::Hang, Answer::Lag(4)]);
        let reader = LagReader::spawn(source.clone(), "g", INTERVAL);
        settle().await;
        assert_eq!((source.reads(), total(&reader)), (1, None));
        // The read is given one interval, and the next starts at the following tick.
        tokio::time::advance(INTERVAL).await;
        settle().await;
        assert_eq!(reader.errors(), 1);
        assert_eq!((source.reads(), total(&reader)), (2, Some(4)));
    }

    #[tokio::test(start_paused = true)]
    async fn refresh_reads_now_and_reports_a_failure() {
        let source = Scripted::new([Answer::Lag(2), Answer::Lag(9), Answer::Fail]);
        let reader = LagReader::spawn(source.clone(), "g", INTERVAL);
        settle().await;
        assert_eq!(reader.refresh().await.unwrap().total(), 9);
        assert_eq!(total(&reader), Some(9));
        let error = reader.refresh().await.unwrap_err();
        assert!(matches!(&error, LagError::Read { group, .. } if group == "g"));
        assert!(error.to_string().contains("last lag read is kept"));
        assert_eq!((total(&reader), reader.errors()), (Some(9), 1));
    }

    #[tokio::test(start_paused = true)]
    async fn the_task_stops_with_the_last_clone() {
        let source = Scripted::new([]);
        let reader = LagReader::spawn(source.clone(), "g", Duration::ZERO);
        assert_eq!(reader.interval(), MIN_INTERVAL);
        let clone = reader.clone();
        settle().await;
        drop(reader);
        tokio::time::advance(MIN_INTERVAL).await;
        settle().await;
        assert_eq!(source.reads(), 2, "a clone keeps it reading");
        drop(clone);
        settle().await;
        tokio::time::advance(MIN_INTERVAL * 5).await;
        settle().await;
        assert_eq!(source.reads(), 2);
        assert_eq!(
            Arc::strong_count(&source),
            1,
            "the task let go of the source"
        );
    }
}
