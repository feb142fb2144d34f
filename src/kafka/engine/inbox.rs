//! The consumer's side of the engine's [`Update`]s: the records fetched and not yet handed
//! out, the error the next poll reports, a refusal every poll reports, the lock duration,
//! and outcomes set aside for the commit callback. Only the consumer touches it.

use std::time::Duration;

use tokio::sync::mpsc;

use super::buffer::Buffer;
use super::channel::Update;
use crate::consumer::{CommitResults, ConsumerError};
use crate::kafka::error::ConnectionError;

#[derive(Debug)]
pub(crate) struct Inbox {
    updates: mpsc::UnboundedReceiver<Update>,
    /// Records the engine fetched that no poll has taken yet, with when they were acquired.
    pub(crate) records: Buffer,
    /// An error the next poll reports.
    error: Option<ConsumerError>,
    /// A broker refused this consumer's credentials (`broker`, `reason` of
    /// [`ConnectionError::Authentication`]): every later poll and commit reports it.
    refused: Option<(String, String)>,
    /// The engine stopped (closed, or failed).
    stopped: bool,
    /// The acquisition lock duration of the last answer.
    lock_timeout: Option<Duration>,
    /// Outcomes no commit waited for, for the callback.
    settled: CommitResults,
}

impl Inbox {
    pub(crate) fn new(updates: mpsc::UnboundedReceiver<Update>) -> Self {
        Self {
            updates,
            records: Buffer::default(),
            error: None,
            refused: None,
            stopped: false,
            lock_timeout: None,
            settled: CommitResults::new(),
        }
    }

    /// Takes in every update that has arrived. Never waits.
    pub(crate) fn drain(&mut self) {
        loop {
            match self.updates.try_recv() {
                Ok(update) => self.apply(update),
                Err(mpsc::error::TryRecvError::Empty) => return,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    self.stopped = true;
                    return;
                }
            }
        }
    }

    /// Waits for the next update and takes it in; returns at once when the engine stopped.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an update is taken in within the poll that receives it.
    pub(crate) async fn next(&mut self) {
        if self.stopped {
            return;
        }
        match self.updates.recv().await {
            Some(update) => self.apply(update),
            None => self.stopped = true,
        }
    }

    fn apply(&mut self, update: Update) {
        match update {
            Update::Records {
                at,
                records,
                breaks,
            } => self.records.push(at, records, breaks),
            Update::LockTimeout(lock) => self.lock_timeout = Some(lock),
            Update::Error(error) => {
                self.error.get_or_insert(error);
            }
            Update::Refused { broker, reason } => {
                self.refused.get_or_insert((broker, reason));
            }
            Update::Settled(results) => self.settled.merge(results),
            Update::Cleared => self.records.clear(),
            Update::MembershipChanged => {}
        }
    }

    /// The authentication error every poll and commit reports once a broker refused this
    /// consumer's credentials.
    pub(crate) fn refusal(&self) -> Option<ConsumerError> {
        self.refused.as_ref().map(|(broker, reason)| {
            ConsumerError::Connection(ConnectionError::Authentication {
                broker: broker.clone(),
                reason: reason.clone(),
            })
        })
    }

    /// The error the next poll reports, once.
    pub(crate) fn take_error(&mut self) -> Option<ConsumerError> {
        self.error.take()
    }

    /// Whether the engine stopped (after the updates it sent before).
    pub(crate) fn stopped(&self) -> bool {
        self.stopped
    }

    /// The acquisition lock duration the brokers reported last.
    pub(crate) fn lock_timeout(&self) -> Option<Duration> {
        self.lock_timeout
    }

    /// The outcomes set aside for the callback.
    pub(crate) fn take_settled(&mut self) -> CommitResults {
        std::mem::take(&mut self.settled)
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::*;
    use crate::record::ConsumerRecord;

    #[test]
    fn updates_are_taken_in_order_and_the_queue_closing_says_stopped() {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut inbox = Inbox::new(rx);
        let at = Instant::now();
        let records = |r: std::ops::Range<i64>| r.map(|o| ConsumerRecord::new("t", 0, o)).collect();
        tx.send(Update::Records {
            at,
            records: records(0..3),
            breaks: vec![3],
        })
        .unwrap();
        tx.send(Update::Cleared).unwrap();
        tx.send(Update::Records {
            at,
            records: records(3..5),
            breaks: vec![2],
        })
        .unwrap();
        tx.send(Update::LockTimeout(Duration::from_secs(15)))
            .unwrap();
        tx.send(Update::Error(ConsumerError::Closed)).unwrap();
        tx.send(Update::Error(ConsumerError::NotSubscribed))
            .unwrap();
        tx.send(Update::Refused {
            broker: "b:9093".to_owned(),
            reason: "SASL refused".to_owned(),
        })
        .unwrap();
        inbox.drain();
        assert_eq!(
            inbox.records.len(),
            2,
            "the clear dropped what came before it"
        );
        assert_eq!(inbox.lock_timeout(), Some(Duration::from_secs(15)));
        assert!(
            matches!(inbox.take_error(), Some(ConsumerError::Closed)),
            "the first error"
        );
        assert!(inbox.take_error().is_none(), "reported once");
        assert!(inbox.refusal().is_some());
        assert!(inbox.refusal().is_some(), "reported every time");
        assert!(!inbox.stopped());
        drop(tx);
        inbox.drain();
        assert!(inbox.stopped());
        assert_eq!(inbox.records.len(), 2, "records sent before the stop stay");
    }
}
