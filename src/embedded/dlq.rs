//! [`EmbeddedDeadLetterQueue`]: a dead-letter topic of the embedded broker, with failures
//! on demand.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{EmbeddedBroker, EmbeddedError, ProduceRecord};
use crate::dlq::{DeadLetterError, DeadLetterQueue, DeadLetterRecord};

/// A dead-letter queue on a topic of an [`EmbeddedBroker`], made by
/// [`EmbeddedBroker::dead_letter_queue`]. Records are appended through the broker's produce
/// path, so share consumers of the topic see them and
/// [`EmbeddedBroker::read_log`] returns them as written.
///
/// A `send` writes all its records or none. [`fail_next`](Self::fail_next) makes the next
/// sends fail instead, to test what a sink does when its dead-letter queue is down. Clones
/// share the topic and the failure count.
///
/// ```
/// use kafka_share_sink::embedded::EmbeddedBroker;
/// use kafka_share_sink::{ConsumerRecord, DeadLetterQueue, DeadLetterRecord};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let broker = EmbeddedBroker::new();
/// let dlq = broker.dead_letter_queue("dlq")?;
/// let record = DeadLetterRecord::new(&ConsumerRecord::new("orders", 0, 3));
///
/// dlq.fail_next(1);
/// let error = dlq.send(vec![record.clone()]).await.unwrap_err();
/// assert!(error.is_retriable());
/// assert!(broker.read_log("dlq", 0)?.is_empty());
///
/// dlq.send(vec![record]).await?;
/// assert_eq!(broker.read_log("dlq", 0)?.len(), 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct EmbeddedDeadLetterQueue {
    broker: EmbeddedBroker,
    topic: Arc<str>,
    failures: Arc<AtomicUsize>,
}

impl EmbeddedDeadLetterQueue {
    pub(super) fn new(broker: EmbeddedBroker, topic: &str) -> Self {
        Self {
            broker,
            topic: topic.into(),
            failures: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Makes the next `sends` calls of `send` fail with the retriable
    /// [`DeadLetterError::Injected`], writing nothing. `fail_next(usize::MAX)` keeps the
    /// queue down until `fail_next(0)`.
    pub fn fail_next(&self, sends: usize) {
        self.failures.store(sends, Ordering::SeqCst);
    }

    /// Takes one injected failure, if any is left.
    fn take_failure(&self) -> bool {
        self.failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

#[async_trait::async_trait]
impl DeadLetterQueue for EmbeddedDeadLetterQueue {
    fn topic(&self) -> &str {
        &self.topic
    }

    async fn send(&self, records: Vec<DeadLetterRecord>) -> Result<(), DeadLetterError> {
        if self.take_failure() {
            return Err(DeadLetterError::Injected {
                topic: self.topic.to_string(),
            });
        }
        let embedded = |source: EmbeddedError| DeadLetterError::Embedded {
            topic: self.topic.to_string(),
            source,
        };
        {
            let mut state = self.broker.shared.lock();
            // Only an unknown topic can fail an append without a partition: check it first,
            // so that a send writes all of its records or none.
            if !state.topics.contains_key(&*self.topic) {
                return Err(embedded(EmbeddedError::UnknownTopic(
                    self.topic.to_string(),
                )));
            }
            for record in records {
                let produce = ProduceRecord {
                    partition: None,
                    key: record.key,
                    value: record.value,
                    headers: record.headers,
                    timestamp: record.timestamp,
                };
                state.append(&self.topic, produce).map_err(embedded)?;
            }
        }
        self.broker.shared.changed.notify_waiters();
        Ok(())
    }
}
