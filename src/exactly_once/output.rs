//! [`TransactionalOutput`]: what a task produces for its batch in the exactly-once iteration.

use crate::producer::ProducerRecord;

/// Collects the records a task derives from its batch in
/// [`SinkTask::put_transactional`](crate::SinkTask::put_transactional). The driver sends them
/// in the iteration's transaction, with the records that settle the batch, once
/// `put_transactional` returned `Ok`; on an error nothing of them is sent.
#[derive(Debug, Default)]
pub struct TransactionalOutput {
    records: Vec<ProducerRecord>,
}

impl TransactionalOutput {
    /// An empty output.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a record to produce in the transaction.
    pub fn send(&mut self, record: ProducerRecord) {
        self.records.push(record);
    }

    /// The records added so far.
    pub fn records(&self) -> &[ProducerRecord] {
        &self.records
    }

    /// The number of records added so far.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True when nothing was added.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub(crate) fn take(&mut self) -> Vec<ProducerRecord> {
        std::mem::take(&mut self.records)
    }
}

/// A topic the exactly-once iteration writes for the records of a source topic, as a task
/// declares it in
/// [`SinkTask::transactional_outputs`](crate::SinkTask::transactional_outputs): the driver
/// checks it at [`initialize`](crate::ShareSinkTask::initialize) and refuses a target that
/// cannot take what the task will write.
///
/// ```
/// use kafka_share_sink::exactly_once::OutputTarget;
///
/// let target = OutputTarget::new("backup.orders").keeping_partitions(true);
/// assert_eq!(target.topic(), "backup.orders");
/// assert!(target.keeps_partitions());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputTarget {
    topic: String,
    keeps_partitions: bool,
}

impl OutputTarget {
    /// A target topic; records go to whichever partition the producer picks.
    pub fn new(topic: impl Into<String>) -> Self {
        Self {
            topic: topic.into(),
            keeps_partitions: false,
        }
    }

    /// Whether each output goes to the partition its source record came from; the target
    /// then needs at least as many partitions as the source.
    pub fn keeping_partitions(mut self, keep: bool) -> Self {
        self.keeps_partitions = keep;
        self
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Whether outputs keep their source partition.
    pub fn keeps_partitions(&self) -> bool {
        self.keeps_partitions
    }
}
