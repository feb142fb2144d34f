//! [`LogReader`] for the [`EmbeddedBroker`]: reading a partition back, `read_committed` or
//! `read_uncommitted`, as a classic consumer without a group does.

use std::pin::pin;
use std::time::Duration;

use tokio::time::Instant;

use super::{EmbeddedBroker, EmbeddedError, PartitionLog};
use crate::consumer::ConsumerError;
use crate::kafka::error::BrokerError;
use crate::producer::{IsolationLevel, LogRead, LogReader};
use crate::time::deadline_after;

/// At most this many records a read, as a fetch is bounded by its bytes.
const MAX_RECORDS_PER_READ: usize = 500;

fn unknown(error: &EmbeddedError) -> ConsumerError {
    ConsumerError::Broker(BrokerError {
        api: "Fetch",
        code: 3,
        name: "UNKNOWN_TOPIC_OR_PARTITION",
        message: Some(error.to_string()),
        retriable: false,
    })
}

/// One read of `log` from `from` (checked to lie within it).
fn read_from(
    log: &PartitionLog,
    topic: &super::Topic,
    partition: i32,
    from: i64,
    isolation: IsolationLevel,
) -> LogRead {
    let end = log.end_for(isolation);
    let mut records = Vec::new();
    let mut next = from.max(0);
    while next < end && records.len() < MAX_RECORDS_PER_READ {
        if log.get(next).is_some_and(|r| r.visible(isolation)) {
            if let Some(record) = topic.record(partition, next, 1) {
                records.push(record);
            }
        }
        next += 1;
    }
    LogRead::new(records, next.max(from), log.end(), log.last_stable_offset())
}

/// The embedded broker reads its logs as Kafka's fetch does: `read_uncommitted` up to the
/// high watermark, every data record; `read_committed` up to the last stable offset,
/// records outside transactions and of committed transactions only. Markers (control
/// records) are never returned; `next_offset` moves past them and past aborted records
/// skipped. At most 500 records a read. The delivery count of each record is 1.
///
/// A read from the end waits up to `max_wait` (tokio clock) for records, or for an open
/// transaction to end or time out. A read from an offset below 0 or past the high
/// watermark fails with OFFSET_OUT_OF_RANGE; an unknown topic or partition with
/// UNKNOWN_TOPIC_OR_PARTITION.
#[async_trait::async_trait]
impl LogReader for EmbeddedBroker {
    async fn read(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        isolation: IsolationLevel,
        max_wait: Duration,
    ) -> Result<LogRead, ConsumerError> {
        let deadline = deadline_after(Instant::now(), max_wait);
        loop {
            let mut changed = pin!(self.shared.changed.notified());
            changed.as_mut().enable();
            let now = Instant::now();
            let next_timeout = {
                let mut state = self.shared.lock();
                if state.expire_transactions(now) {
                    self.shared.changed.notify_waiters();
                }
                let log = state
                    .partition_log(topic, partition)
                    .map_err(|e| unknown(&e))?;
                if from < 0 || from > log.end() {
                    return Err(ConsumerError::Broker(BrokerError {
                        api: "Fetch",
                        code: 1,
                        name: "OFFSET_OUT_OF_RANGE",
                        message: Some(format!(
                            "offset {from} is outside partition {partition} of `{topic}`, \
                             which ends at {}",
                            log.end()
                        )),
                        retriable: false,
                    }));
                }
                let read = match state.topics.get(topic) {
                    Some(t) => read_from(log, t, partition, from, isolation),
                    None => return Err(unknown(&EmbeddedError::UnknownTopic(topic.to_owned()))),
                };
                if !read.records.is_empty() || read.next_offset > from || now >= deadline {
                    return Ok(read);
                }
                state.next_transaction_deadline()
            };
            let wake = next_timeout.map_or(deadline, |d| d.min(deadline));
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    async fn end_offset(
        &self,
        topic: &str,
        partition: i32,
        isolation: IsolationLevel,
    ) -> Result<i64, ConsumerError> {
        let mut state = self.shared.lock();
        if state.expire_transactions(Instant::now()) {
            self.shared.changed.notify_waiters();
        }
        let log = state
            .partition_log(topic, partition)
            .map_err(|e| unknown(&e))?;
        Ok(log.end_for(isolation))
    }
}
