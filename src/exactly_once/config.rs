//! [`ExactlyOnceConfig`]: the settings of the exactly-once iteration.

use std::time::Duration;

use super::{ExactlyOnceError, ModePreference};

/// Settings of the exactly-once iteration
/// ([`ShareSinkTask::with_exactly_once`](crate::ShareSinkTask::with_exactly_once)).
///
/// ```
/// use kafka_share_sink::exactly_once::ExactlyOnceConfig;
///
/// let config = ExactlyOnceConfig::new("mirror", 2, 4);
/// assert_eq!(config.transactional_id(), "mirror-eos-2");
/// assert_eq!(config.ledger_topic(), "mirror.eos-ledger");
/// ```
#[derive(Debug, Clone)]
pub struct ExactlyOnceConfig {
    pub(crate) connector: String,
    pub(crate) task_id: u32,
    pub(crate) tasks_max: u32,
    pub(crate) ledger_topic: Option<String>,
    pub(crate) ledger_partitions: Option<i32>,
    pub(crate) mode: ModePreference,
    pub(crate) strict: bool,
    pub(crate) prune_interval: Duration,
    pub(crate) barrier_timeout: Duration,
    pub(crate) fence_orphans: bool,
}

impl ExactlyOnceConfig {
    /// Settings for task `task_id` of `tasks_max` tasks of connector `connector`.
    pub fn new(connector: impl Into<String>, task_id: u32, tasks_max: u32) -> Self {
        Self {
            connector: connector.into(),
            task_id,
            tasks_max,
            ledger_topic: None,
            ledger_partitions: None,
            mode: ModePreference::Auto,
            strict: false,
            prune_interval: Duration::from_secs(30),
            barrier_timeout: Duration::from_secs(60),
            fence_orphans: true,
        }
    }

    /// The transactional id this task's producer must use: `<connector>-eos-<task>`, stable
    /// across restarts so that a restarted task fences its predecessor (as Connect's
    /// exactly-once source tasks do).
    pub fn transactional_id(&self) -> String {
        transactional_id(&self.connector, self.task_id)
    }

    /// The ledger topic: `exactly.once.ledger.topic`, by default `<connector>.eos-ledger`.
    pub fn ledger_topic(&self) -> String {
        self.ledger_topic
            .clone()
            .unwrap_or_else(|| format!("{}.eos-ledger", self.connector))
    }

    /// Sets the ledger topic (`exactly.once.ledger.topic`).
    pub fn with_ledger_topic(mut self, topic: impl Into<String>) -> Self {
        self.ledger_topic = Some(topic.into());
        self
    }

    /// The partition count of a ledger topic created by the task; by default the largest
    /// partition count of the source topics, so that each source partition has a ledger
    /// partition of its own (`exactly.once.ledger.partitions`).
    pub fn with_ledger_partitions(mut self, partitions: i32) -> Self {
        self.ledger_partitions = Some(partitions);
        self
    }

    /// Which mode is allowed (`exactly.once.mode`: auto, ledger, atomic).
    pub fn with_mode(mut self, mode: ModePreference) -> Self {
        self.mode = mode;
        self
    }

    /// Ledger mode: check every record against the ledger, not only redeliveries
    /// (`exactly.once.strict`). This also covers a share partition that is reloaded without
    /// a leader change, at the cost of a ledger read per iteration.
    pub fn with_strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// How often the ledger index forgets claims below the share-partition start offsets
    /// (`exactly.once.ledger.prune.interval.ms`).
    pub fn with_prune_interval(mut self, interval: Duration) -> Self {
        self.prune_interval = interval;
        self
    }

    /// How long a ledger check may wait for other tasks' open transactions to end before the
    /// iteration gives up and releases its records (`exactly.once.barrier.timeout.ms`).
    pub fn with_barrier_timeout(mut self, timeout: Duration) -> Self {
        self.barrier_timeout = timeout;
        self
    }

    /// Whether `initialize` of task 0 fences the transactional ids of task slots at and above
    /// `tasks_max` (orphans of a connector whose task count shrank). On by default.
    pub fn with_orphan_fencing(mut self, fence: bool) -> Self {
        self.fence_orphans = fence;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), ExactlyOnceError> {
        if self.connector.trim().is_empty() {
            return Err(ExactlyOnceError::Config {
                key: "name",
                reason:
                    "the connector name makes the transactional ids and the ledger topic; set one"
                        .to_owned(),
            });
        }
        if self.tasks_max == 0 || self.task_id >= self.tasks_max {
            return Err(ExactlyOnceError::Config {
                key: "tasks.max",
                reason: format!(
                    "task {} of {} tasks: the task id must be below tasks.max",
                    self.task_id, self.tasks_max
                ),
            });
        }
        if self.ledger_partitions.is_some_and(|p| p <= 0) {
            return Err(ExactlyOnceError::Config {
                key: "exactly.once.ledger.partitions",
                reason: "must be at least 1".to_owned(),
            });
        }
        Ok(())
    }
}

/// `<connector>-eos-<task>`.
pub(crate) fn transactional_id(connector: &str, task: u32) -> String {
    format!("{connector}-eos-{task}")
}
