//! [`ExactlyOnceConfig`]: the settings of the exactly-once iteration.

use std::time::Duration;

use super::{ExactlyOnceError, ModePreference};
use crate::config::keys::{
    EXACTLY_ONCE_BARRIER_TIMEOUT_MS, EXACTLY_ONCE_LEDGER_PARTITIONS, EXACTLY_ONCE_LEDGER_TOPIC,
    EXACTLY_ONCE_MODE, EXACTLY_ONCE_ORPHAN_FENCING, EXACTLY_ONCE_PRUNE_INTERVAL_MS,
    EXACTLY_ONCE_STRICT,
};

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

    /// Settings for task `task_id` from a connector's properties: `name`, `tasks.max`
    /// (default 1) and the `exactly.once.*` keys named on the setters above
    /// (`exactly.once.mode`, `exactly.once.strict`, `exactly.once.ledger.topic`,
    /// `exactly.once.ledger.partitions`, `exactly.once.ledger.prune.interval.ms`,
    /// `exactly.once.barrier.timeout.ms`, `exactly.once.orphan.fencing`).
    ///
    /// ```
    /// use kafka_share_sink::Properties;
    /// use kafka_share_sink::exactly_once::ExactlyOnceConfig;
    ///
    /// let props: Properties = "name=mirror\ntasks.max=4\nexactly.once.strict=true\n".parse()?;
    /// let config = ExactlyOnceConfig::from_properties(&props, 3)?;
    /// assert_eq!(config.transactional_id(), "mirror-eos-3");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError`](crate::ConfigError) naming the key when one is missing or malformed.
    pub fn from_properties(
        props: &crate::Properties,
        task_id: u32,
    ) -> Result<Self, crate::ConfigError> {
        use crate::ConfigError;
        use crate::config::value::{LONG_MAX, boolean, millis, whole};
        let name = props
            .get("name")
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                ConfigError::missing(
                    "name",
                    "the connector's name: it makes the transactional ids and the ledger topic",
                )
            })?;
        let tasks_max = match props.get("tasks.max") {
            Some(raw) => whole(
                "tasks.max",
                raw,
                1,
                i64::from(i32::MAX),
                "a whole number, at least 1",
            )?,
            None => 1,
        };
        let tasks_max = u32::try_from(tasks_max).unwrap_or(u32::MAX);
        let mut config = Self::new(name, task_id, tasks_max);
        if let Some(raw) = props.get(EXACTLY_ONCE_MODE) {
            config.mode = raw.parse().map_err(|_| {
                ConfigError::invalid(EXACTLY_ONCE_MODE, raw, "auto, ledger or atomic")
            })?;
        }
        if let Some(raw) = props.get(EXACTLY_ONCE_STRICT) {
            config.strict = boolean(EXACTLY_ONCE_STRICT, raw)?;
        }
        if let Some(raw) = props.get(EXACTLY_ONCE_LEDGER_TOPIC) {
            config.ledger_topic = Some(raw.trim().to_owned());
        }
        if let Some(raw) = props.get(EXACTLY_ONCE_LEDGER_PARTITIONS) {
            let n = whole(
                EXACTLY_ONCE_LEDGER_PARTITIONS,
                raw,
                1,
                i64::from(i32::MAX),
                "a whole number, at least 1",
            )?;
            config.ledger_partitions = Some(i32::try_from(n).unwrap_or(i32::MAX));
        }
        if let Some(raw) = props.get(EXACTLY_ONCE_PRUNE_INTERVAL_MS) {
            config.prune_interval = millis(EXACTLY_ONCE_PRUNE_INTERVAL_MS, raw, 0, LONG_MAX)?;
        }
        if let Some(raw) = props.get(EXACTLY_ONCE_BARRIER_TIMEOUT_MS) {
            config.barrier_timeout = millis(EXACTLY_ONCE_BARRIER_TIMEOUT_MS, raw, 1, LONG_MAX)?;
        }
        if let Some(raw) = props.get(EXACTLY_ONCE_ORPHAN_FENCING) {
            config.fence_orphans = boolean(EXACTLY_ONCE_ORPHAN_FENCING, raw)?;
        }
        Ok(config)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Properties;

    fn props(text: &str) -> Properties {
        text.parse().expect("properties")
    }

    #[test]
    fn every_key_is_read() {
        let config = ExactlyOnceConfig::from_properties(
            &props(
                "name=m\ntasks.max=3\nexactly.once.mode=ledger\nexactly.once.strict=TRUE\n\
                 exactly.once.ledger.topic=claims\nexactly.once.ledger.partitions=12\n\
                 exactly.once.ledger.prune.interval.ms=500\nexactly.once.barrier.timeout.ms=2000\n\
                 exactly.once.orphan.fencing=false\n",
            ),
            2,
        )
        .expect("config");
        assert_eq!(config.transactional_id(), "m-eos-2");
        assert_eq!(config.tasks_max, 3);
        assert_eq!(config.mode, ModePreference::Ledger);
        assert!(config.strict);
        assert_eq!(config.ledger_topic(), "claims");
        assert_eq!(config.ledger_partitions, Some(12));
        assert_eq!(config.prune_interval, Duration::from_millis(500));
        assert_eq!(config.barrier_timeout, Duration::from_secs(2));
        assert!(!config.fence_orphans);
        assert!(config.validate().is_ok());
    }

    #[test]
    fn malformed_keys_are_named() {
        for (text, key) in [
            ("tasks.max=2", "name"),
            ("name=m\nexactly.once.mode=sometimes", "exactly.once.mode"),
            ("name=m\nexactly.once.strict=yes", "exactly.once.strict"),
            (
                "name=m\nexactly.once.ledger.partitions=0",
                "exactly.once.ledger.partitions",
            ),
            (
                "name=m\nexactly.once.barrier.timeout.ms=-1",
                "exactly.once.barrier.timeout.ms",
            ),
            ("name=m\ntasks.max=0", "tasks.max"),
        ] {
            let error = ExactlyOnceConfig::from_properties(&props(text), 0).expect_err(text);
            assert!(error.to_string().contains(key), "{text}: {error}");
        }
        let past =
            ExactlyOnceConfig::from_properties(&props("name=m\ntasks.max=2"), 2).expect("parsed");
        assert!(
            past.validate().is_err(),
            "task 2 of 2 is refused at initialize"
        );
    }
}
