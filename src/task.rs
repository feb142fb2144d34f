//! The user contract: [`SinkTask`], modelled on Kafka Connect's `SinkTask`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;

use crate::config::secret::RedactedMap;
use crate::delivered::Delivered;
use crate::error::TaskError;
use crate::record::{RecordId, SinkRecord, TopicPartition};

/// The string settings a task starts with (Connect's task config).
///
/// `Debug` shows secret values (`sasl.jaas.config`, `*.password`, `basic.auth.user.info`,
/// keys containing `secret`, with or without a prefix) as `[redacted]`; [`get`](Self::get)
/// returns them as they are.
///
/// ```
/// use kafka_share_sink::TaskConfig;
/// let config = TaskConfig::new().with("connection.password", "hunter2").with("table", "orders");
/// assert_eq!(config.get("connection.password"), Some("hunter2"));
/// assert_eq!(
///     format!("{config:?}"),
///     r#"TaskConfig { values: {"connection.password": [redacted], "table": "orders"} }"#
/// );
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TaskConfig {
    values: BTreeMap<String, String>,
}

impl fmt::Debug for TaskConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskConfig")
            .field(
                "values",
                &RedactedMap(self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
            )
            .finish()
    }
}

impl TaskConfig {
    /// No settings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces a setting.
    pub fn with(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.values.insert(key.into(), value.into());
        self
    }

    /// The value of a setting.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// Every setting, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for TaskConfig {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Self {
            values: iter
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }
}

#[derive(Debug)]
struct ContextInner {
    group_id: String,
    config: TaskConfig,
    commit_requested: AtomicBool,
}

/// What the driver gives a task at [`SinkTask::initialize`] (Connect's `SinkTaskContext`).
/// Cheap to clone; keep it to call [`request_commit`](Self::request_commit) later.
///
/// Connect's `offset`, `pause`, `resume` and `assignment` have no meaning in a share group,
/// where the broker hands records out one by one, and are not offered.
#[derive(Debug, Clone)]
pub struct SinkTaskContext {
    inner: Arc<ContextInner>,
}

impl SinkTaskContext {
    /// A context for `group_id`. The driver makes one; tests of a task may too.
    pub fn new(group_id: impl Into<String>, config: TaskConfig) -> Self {
        Self {
            inner: Arc::new(ContextInner {
                group_id: group_id.into(),
                config,
                commit_requested: AtomicBool::new(false),
            }),
        }
    }

    /// The share group the task drains.
    pub fn group_id(&self) -> &str {
        &self.inner.group_id
    }

    /// The task config.
    pub fn config(&self) -> &TaskConfig {
        &self.inner.config
    }

    /// Asks the driver to commit at the end of the next iteration, whatever the commit
    /// policy says. A hint, as in Connect.
    pub fn request_commit(&self) {
        self.inner.commit_requested.store(true, Ordering::Release);
    }

    /// Reads and clears the commit request.
    pub(crate) fn take_commit_request(&self) -> bool {
        self.inner.commit_requested.swap(false, Ordering::AcqRel)
    }
}

/// What a task's [`pre_commit`](SinkTask::pre_commit) says is durable in the external system.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// Every delivered record is durable.
    All,
    /// Nothing is durable yet.
    Nothing,
    /// Per original partition, every delivered record with an offset below the given one is
    /// durable (Connect's `preCommit` offsets).
    Below(BTreeMap<TopicPartition, i64>),
}

impl Durability {
    /// True if the record is covered.
    pub fn covers(&self, record: &RecordId) -> bool {
        match self {
            Self::All => true,
            Self::Nothing => false,
            Self::Below(offsets) => offsets
                .get(&record.topic_partition())
                .is_some_and(|below| record.offset() < *below),
        }
    }
}

/// A sink: the code that writes records to an external system. Implement it and hand it to
/// [`ShareSinkTask`](crate::ShareSinkTask).
///
/// Life cycle, as in Kafka Connect: [`initialize`](Self::initialize) →
/// [`start`](Self::start) → [`put`](Self::put) many times, with
/// [`pre_commit`](Self::pre_commit) before each acknowledgement commit →
/// [`stop`](Self::stop).
///
/// Records arrive at least once: a record may come again (its
/// [`delivery_count`](SinkRecord::delivery_count) is then above 1) after a retriable error, a
/// crash, or a lock that expired during a slow `put`. Make `put` idempotent. In a share group
/// records of one partition may also be spread over several tasks, so order across records is
/// not guaranteed.
///
/// The trait is object safe; the driver takes a `Box<dyn SinkTask>`.
///
/// ```
/// use kafka_share_sink::{SinkRecord, SinkTask, TaskConfig, TaskError};
///
/// struct Stdout;
///
/// #[async_trait::async_trait]
/// impl SinkTask for Stdout {
///     async fn start(&mut self, _config: &TaskConfig) -> Result<(), TaskError> {
///         Ok(())
///     }
///     async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
///         for r in records {
///             println!("{}-{}@{}: {:?}", r.topic(), r.partition(), r.offset(), r.value());
///         }
///         Ok(())
///     }
/// }
/// let _task: Box<dyn SinkTask> = Box::new(Stdout);
/// ```
#[async_trait]
pub trait SinkTask: Send {
    /// Receives the context before `start`. The default keeps nothing.
    fn initialize(&mut self, context: SinkTaskContext) {
        let _ = context;
    }

    /// Prepares the task (opens connections, reads settings).
    async fn start(&mut self, config: &TaskConfig) -> Result<(), TaskError>;

    /// Writes a batch. Called every iteration, with an empty batch when the poll brought
    /// nothing, so a task can flush on time.
    ///
    /// `Ok` means the records are written: the driver ACCEPTs them. A retriable error makes
    /// the driver RELEASE the whole batch for redelivery; a fatal one makes it REJECT the
    /// batch and stop. A panic is caught: the driver RELEASEs the batch and stops with the
    /// error [`TaskError::panicked`] tells apart. The driver owns the batch; clone what you
    /// keep.
    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError>;

    /// Makes everything written so far durable. The default does nothing.
    async fn flush(&mut self) -> Result<(), TaskError> {
        Ok(())
    }

    /// Called before each acknowledgement commit with the records put since the last one
    /// (by their original coordinates, as runs of offsets: see [`Delivered`]); says which
    /// are durable. The default calls [`flush`](Self::flush) and answers
    /// [`Durability::All`].
    ///
    /// With the acknowledge-after-put rule, records are already accepted when `put` returns,
    /// so a partial answer is logged as a warning: a task that only buffers in `put` should
    /// flush in `put`, or wait for the acknowledge-after-flush policy.
    async fn pre_commit(&mut self, delivered: &Delivered) -> Result<Durability, TaskError> {
        let _ = delivered;
        self.flush().await?;
        Ok(Durability::All)
    }

    /// Releases resources. Called once, after the last `put` and the final commit.
    async fn stop(&mut self) -> Result<(), TaskError> {
        Ok(())
    }

    /// The exactly-once entry point
    /// ([`ShareSinkTask::iteration_exactly_once`](crate::ShareSinkTask::iteration_exactly_once)):
    /// derives the records to produce from a batch and adds them to `output`. The driver
    /// sends them in one transaction with what settles the batch, so a `read_committed`
    /// reader sees each input's outputs exactly once.
    ///
    /// It may be called again with the same records after an aborted attempt (the transaction
    /// then discarded the earlier outputs), so it must not have side effects outside
    /// `output`. Its transaction begins after it returns. A retriable error releases the
    /// batch (a record on its last allowed delivery is dead-lettered in a transaction when a
    /// queue is set); a fatal one, or a panic (caught, see [`TaskError::panicked`]), releases
    /// the batch and stops the driver, nothing of `output` written (with a queue set, a record
    /// on its last delivery is first dead-lettered in a transaction of its own). The default
    /// fails fatally: implement it, or use [`MirrorTask`](crate::exactly_once::MirrorTask).
    #[cfg(feature = "exactly-once")]
    async fn put_transactional(
        &mut self,
        records: &[SinkRecord],
        output: &mut crate::exactly_once::TransactionalOutput,
    ) -> Result<(), TaskError> {
        let _ = (records, output);
        Err(TaskError::fatal(
            "this task does not implement SinkTask::put_transactional, which the exactly-once iteration calls",
        ))
    }

    /// The topics [`put_transactional`](Self::put_transactional) writes for records of
    /// `source`, when the task knows them in advance. The driver checks each at
    /// [`initialize`](crate::ShareSinkTask::initialize), before anything is read: the topic
    /// must exist, and one that keeps the source partition needs at least as many partitions
    /// as `source`. A target that cannot take what the task will write is refused there
    /// ([`ExactlyOnceError::UnfitTarget`](crate::exactly_once::ExactlyOnceError::UnfitTarget)),
    /// not found out transaction by transaction. The default declares nothing (no check);
    /// [`MirrorTask`](crate::exactly_once::MirrorTask) declares its renamed topic.
    #[cfg(feature = "exactly-once")]
    fn transactional_outputs(&self, source: &str) -> Vec<crate::exactly_once::OutputTarget> {
        let _ = source;
        Vec::new()
    }

    /// True when the task writes only through
    /// [`put_transactional`](Self::put_transactional) (its `put` fails for every batch).
    /// [`ShareSinkTask::initialize`](crate::ShareSinkTask::initialize) then refuses a driver
    /// not set up with
    /// [`with_exactly_once`](crate::ShareSinkTask::with_exactly_once), before it subscribes:
    /// `iteration()` would hand the task a poll it cannot write, and a fatal `put` rejects its
    /// batch (the group archives it). The default is false;
    /// [`MirrorTask`](crate::exactly_once::MirrorTask) says true.
    #[cfg(feature = "exactly-once")]
    fn requires_exactly_once(&self) -> bool {
        false
    }
}

#[async_trait]
impl<T: SinkTask + ?Sized> SinkTask for Box<T> {
    fn initialize(&mut self, context: SinkTaskContext) {
        (**self).initialize(context);
    }
    async fn start(&mut self, config: &TaskConfig) -> Result<(), TaskError> {
        (**self).start(config).await
    }
    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        (**self).put(records).await
    }
    async fn flush(&mut self) -> Result<(), TaskError> {
        (**self).flush().await
    }
    async fn pre_commit(&mut self, delivered: &Delivered) -> Result<Durability, TaskError> {
        (**self).pre_commit(delivered).await
    }
    async fn stop(&mut self) -> Result<(), TaskError> {
        (**self).stop().await
    }

    #[cfg(feature = "exactly-once")]
    async fn put_transactional(
        &mut self,
        records: &[SinkRecord],
        output: &mut crate::exactly_once::TransactionalOutput,
    ) -> Result<(), TaskError> {
        (**self).put_transactional(records, output).await
    }

    #[cfg(feature = "exactly-once")]
    fn transactional_outputs(&self, source: &str) -> Vec<crate::exactly_once::OutputTarget> {
        (**self).transactional_outputs(source)
    }

    #[cfg(feature = "exactly-once")]
    fn requires_exactly_once(&self) -> bool {
        (**self).requires_exactly_once()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durability_below_is_per_partition_and_exclusive() {
        let below = Durability::Below([(TopicPartition::new("t", 0), 10)].into_iter().collect());
        assert!(below.covers(&RecordId::new("t", 0, 9)));
        assert!(!below.covers(&RecordId::new("t", 0, 10)));
        assert!(!below.covers(&RecordId::new("t", 1, 0)));
        assert!(Durability::All.covers(&RecordId::new("x", 0, 0)));
        assert!(!Durability::Nothing.covers(&RecordId::new("x", 0, 0)));
    }

    #[test]
    fn commit_request_is_taken_once() {
        let ctx = SinkTaskContext::new("g", TaskConfig::new().with("a", "b"));
        assert_eq!(ctx.config().get("a"), Some("b"));
        assert!(!ctx.take_commit_request());
        ctx.clone().request_commit();
        assert!(ctx.take_commit_request());
        assert!(!ctx.take_commit_request());
    }
}
