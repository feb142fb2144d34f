//! [`SupervisorConfig`]: how many tasks, and how failed ones are restarted.

use std::time::Duration;

/// The most tasks one [`Supervisor`](super::Supervisor) runs: each is a share consumer with
/// its own connections and buffers, all in this process. A share group spreads records over
/// members in every process, so more processes in the same group scale further.
pub const MAX_TASKS: u32 = 4096;

/// How a [`Supervisor`](super::Supervisor) runs its tasks.
///
/// A failed task is restarted after `restart_backoff`, doubled at every consecutive failure
/// up to `restart_backoff_max` (300 ms, 600 ms, 1.2 s, ... as Connect's `errors.retry`
/// backoff). After `max_restarts` consecutive failures the task stays failed, as a Connect
/// task does until someone restarts it; the other tasks go on. A task that ran for
/// `healthy_after` before failing starts counting (and backing off) from the beginning.
///
/// ```
/// use std::time::Duration;
/// use kafka_share_sink::supervisor::SupervisorConfig;
/// let config = SupervisorConfig::new(4)
///     .restart_backoff(Duration::from_millis(300), Duration::from_secs(30))
///     .max_restarts(Some(5));
/// assert_eq!(config.tasks(), 4);
/// assert_eq!(config.backoff_for(3), Duration::from_millis(1200));
/// assert_eq!(config.backoff_for(30), Duration::from_secs(30));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupervisorConfig {
    tasks: u32,
    restart_backoff: Duration,
    restart_backoff_max: Duration,
    max_restarts: Option<u32>,
    healthy_after: Duration,
}

impl SupervisorConfig {
    /// `tasks` tasks (at least one), restarted after 300 ms doubling up to 60 s, at most 10
    /// times in a row; a task that ran 5 minutes is healthy again.
    pub fn new(tasks: u32) -> Self {
        Self {
            tasks: tasks.max(1),
            restart_backoff: Duration::from_millis(300),
            restart_backoff_max: Duration::from_secs(60),
            max_restarts: Some(10),
            healthy_after: Duration::from_secs(300),
        }
    }

    /// As [`new`](Self::new), with the connector's `tasks.max`.
    pub fn from_connector(config: &crate::ConnectorConfig) -> Self {
        Self::new(config.tasks_max())
    }

    /// The first restart delay and the longest.
    pub fn restart_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.restart_backoff = initial;
        self.restart_backoff_max = max.max(initial);
        self
    }

    /// Consecutive restarts before a task is left failed; `None` restarts for ever.
    pub fn max_restarts(mut self, max: Option<u32>) -> Self {
        self.max_restarts = max;
        self
    }

    /// How long a task must run before its failure count starts again.
    pub fn healthy_after(mut self, duration: Duration) -> Self {
        self.healthy_after = duration;
        self
    }

    /// The number of tasks.
    pub fn tasks(&self) -> u32 {
        self.tasks
    }

    /// Consecutive restarts allowed.
    pub fn restarts_allowed(&self) -> Option<u32> {
        self.max_restarts
    }

    pub(crate) fn healthy_duration(&self) -> Duration {
        self.healthy_after
    }

    /// The delay before restart number `attempt` (1 for the first) of a run of failures.
    pub fn backoff_for(&self, attempt: u32) -> Duration {
        let factor = attempt
            .checked_sub(1)
            .and_then(|shift| 1u32.checked_shl(shift))
            .unwrap_or(u32::MAX);
        self.restart_backoff
            .checked_mul(factor)
            .unwrap_or(self.restart_backoff_max)
            .min(self.restart_backoff_max)
    }
}
