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
