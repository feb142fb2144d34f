//! What the consumer and its engine share: records fetched and not yet handed out, the error
//! a poll is to report, whether a poll waits, and the last lock duration.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::consumer::{CommitResults, ConsumerError};
use crate::record::ConsumerRecord;

/// State behind the mailbox's lock.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    /// Records the engine fetched that no poll has taken yet. A poll takes them all, in one
    /// step without an `.await`, so a cancelled poll leaves them for the next one.
    pub(crate) records: Vec<ConsumerRecord>,
    /// An error the next poll reports (one retrying cannot fix).
    pub(crate) error: Option<ConsumerError>,
    /// A poll asked for records and none were handed over since: the engine fetches (one
    /// answer at a time) until some arrive, even after that poll gave up.
    pub(crate) wanted: bool,
    /// The waiting poll's deadline, which bounds how long a fetch may wait on the broker.
    pub(crate) poll_deadline: Option<Instant>,
    /// The acquisition lock duration of the last answer.
    pub(crate) lock_timeout: Option<Duration>,
    /// The engine stopped (closed, or its consumer went away).
    pub(crate) stopped: bool,
    /// The consumer has an acknowledgement commit callback: the engine moves outcomes that
    /// no commit is waiting for (acknowledgements that rode on fetches) to `settled`.
    pub(crate) collect: bool,
    /// Outcomes moved here for the callback, taken by the consumer's next call.
    pub(crate) settled: CommitResults,
}

/// Shared by a [`KafkaShareConsumer`](crate::KafkaShareConsumer) and its engine task.
#[derive(Debug)]
pub(crate) struct Mailbox {
    slots: Mutex<Slots>,
    /// Bumped by the engine whenever a poll might find something new.
    news: watch::Sender<u64>,
    /// Wakes the engine (a poll started waiting).
    pub(crate) wake: Notify,
}

impl Mailbox {
    pub(crate) fn new() -> Self {
        Self {
            slots: Mutex::new(Slots::default()),
            news: watch::Sender::new(0),
            wake: Notify::new(),
        }
    }

    /// The slots, locked. Never held across an `.await`.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Tells waiting polls to look again.
    pub(crate) fn announce(&self) {
        self.news.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver of announcements.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.news.subscribe()
    }
}
