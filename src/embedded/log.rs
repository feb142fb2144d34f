//! The log of one partition of the embedded broker: data records and transaction markers,
//! one offset each, with the last stable offset. Free of I/O and of time.
//!
//! Offsets are indexes into the log. A record written in a transaction stays
//! [`TxnStatus::Open`] until its producer's COMMIT or ABORT marker is appended (a control
//! record, with an offset of its own, as in Kafka); then it is marked with the outcome, so
//! readers need no aborted-transaction index. The last stable offset is the first offset of
//! the oldest transaction still open in the partition, or the log end when none is.
//!
//! Entries are appended in produce batches, as a Kafka log holds record batches: records
//! produced together ([`EmbeddedBroker::produce_batch`]) form one batch, every other append
//! (a single produce, a producer's send, a marker, a dead letter) a batch of its own. Share
//! groups acquire whole batches in `batch_optimized` mode.
//!
//! [`EmbeddedBroker::produce_batch`]: super::EmbeddedBroker::produce_batch

use std::collections::HashMap;

use bytes::Bytes;

use crate::producer::IsolationLevel;
use crate::record::Headers;

/// How a transaction ended, as its marker says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxnOutcome {
    Commit,
    Abort,
}

/// What became of the transaction of a transactional record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxnStatus {
    Open,
    Ended(TxnOutcome),
}

/// What a log entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryKind {
    /// A data record outside any transaction.
    Plain,
    /// A data record of a transaction.
    Transactional(TxnStatus),
    /// A COMMIT or ABORT marker (control record): never given to readers or share consumers.
    Marker(TxnOutcome),
}

/// One entry of a partition's log.
#[derive(Debug, Clone)]
pub(crate) struct StoredRecord {
    pub(crate) key: Option<Bytes>,
    pub(crate) value: Option<Bytes>,
    pub(crate) headers: Headers,
    pub(crate) timestamp: i64,
    /// The producer id of the writer: none for [`EmbeddedBroker::produce`] and the
    /// group's dead letters, which the broker writes itself.
    ///
    /// [`EmbeddedBroker::produce`]: super::EmbeddedBroker::produce
    pub(crate) producer_id: Option<i64>,
    pub(crate) kind: EntryKind,
    /// The partition's leader epoch when the entry was appended (set by the log).
    pub(crate) leader_epoch: i32,
}

impl StoredRecord {
    /// A data record outside transactions.
    pub(crate) fn plain(
        key: Option<Bytes>,
        value: Option<Bytes>,
        headers: Headers,
        timestamp: i64,
        producer_id: Option<i64>,
    ) -> Self {
        Self {
            key,
            value,
            headers,
            timestamp,
            producer_id,
            kind: EntryKind::Plain,
            leader_epoch: 0,
        }
    }

    /// True for a data record a reader of `isolation` sees (markers never; records of
    /// aborted transactions and, below the LSO, of open ones only under read_uncommitted).
    pub(crate) fn visible(&self, isolation: IsolationLevel) -> bool {
        match self.kind {
            EntryKind::Plain => true,
            EntryKind::Marker(_) => false,
            EntryKind::Transactional(status) => {
                isolation == IsolationLevel::ReadUncommitted
                    || status == TxnStatus::Ended(TxnOutcome::Commit)
            }
        }
    }
}

/// The log of one partition.
#[derive(Debug, Clone, Default)]
pub(crate) struct PartitionLog {
    entries: Vec<StoredRecord>,
    /// The first offset of each producer's open transaction in this partition.
    open: HashMap<i64, i64>,
    /// The first offset of every batch, ascending: a batch runs up to the next one's start.
    batch_starts: Vec<i64>,
    /// The current leader epoch, stamped on every entry appended.
    leader_epoch: i32,
    /// The first offset of an entry that is not a plain data record (a transactional record
    /// or a marker), if any: every entry below it is visible to every reader.
    first_not_plain: Option<i64>,
}

impl PartitionLog {
    /// The high watermark: one past the last entry.
    pub(crate) fn end(&self) -> i64 {
        i64::try_from(self.entries.len()).unwrap_or(i64::MAX)
    }

    /// The last stable offset: the first offset of the oldest open transaction, else the end.
    pub(crate) fn last_stable_offset(&self) -> i64 {
        self.open
            .values()
            .copied()
            .min()
            .unwrap_or_else(|| self.end())
    }

    /// Where a reader of `isolation` reads up to.
    pub(crate) fn end_for(&self, isolation: IsolationLevel) -> i64 {
        match isolation {
            IsolationLevel::ReadCommitted => self.last_stable_offset(),
            _ => self.end(),
        }
    }

    /// The partition's current leader epoch.
    pub(crate) fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    /// A new leader: the epoch goes up by one (saturating). Returns the new epoch.
    pub(crate) fn bump_leader_epoch(&mut self) -> i32 {
        self.leader_epoch = self.leader_epoch.saturating_add(1);
        self.leader_epoch
    }

    /// Where the run of plain data records at the start of the log ends: every entry below
    /// this offset is one, visible under either isolation level.
    pub(crate) fn plain_end(&self) -> i64 {
        self.first_not_plain.unwrap_or_else(|| self.end())
    }

    pub(crate) fn get(&self, offset: i64) -> Option<&StoredRecord> {
        self.entries.get(usize::try_from(offset).ok()?)
    }

    /// One past the last offset of the batch holding `offset` (the log end for an offset
    /// past it).
    pub(crate) fn batch_end(&self, offset: i64) -> i64 {
        let next = self.batch_starts.partition_point(|start| *start <= offset);
        self.batch_starts
            .get(next)
            .copied()
            .unwrap_or_else(|| self.end())
    }

    /// Appends an entry outside transactions, as a batch of its own, and returns its offset.
    pub(crate) fn push(&mut self, mut record: StoredRecord) -> i64 {
        let offset = self.end();
        self.batch_starts.push(offset);
        if record.kind != EntryKind::Plain {
            self.first_not_plain.get_or_insert(offset);
        }
        record.leader_epoch = self.leader_epoch;
        self.entries.push(record);
        offset
    }

    /// Appends entries outside transactions as one batch and returns the first offset.
    pub(crate) fn push_batch(&mut self, records: Vec<StoredRecord>) -> i64 {
        let offset = self.end();
        if !records.is_empty() {
            self.batch_starts.push(offset);
            let epoch = self.leader_epoch;
            if let Some(i) = records.iter().position(|r| r.kind != EntryKind::Plain) {
                self.first_not_plain
                    .get_or_insert(offset.saturating_add(i64::try_from(i).unwrap_or(i64::MAX)));
            }
            self.entries.extend(records.into_iter().map(|mut r| {
                r.leader_epoch = epoch;
                r
            }));
        }
        offset
    }

    /// Appends a record of `producer_id`'s open transaction (opening it in this partition
    /// if needed) and returns its offset.
    pub(crate) fn push_transactional(&mut self, mut record: StoredRecord, producer_id: i64) -> i64 {
        let offset = self.end();
        self.batch_starts.push(offset);
        self.open.entry(producer_id).or_insert(offset);
        self.first_not_plain.get_or_insert(offset);
        record.producer_id = Some(producer_id);
        record.kind = EntryKind::Transactional(TxnStatus::Open);
        record.leader_epoch = self.leader_epoch;
        self.entries.push(record);
        offset
    }

    /// Ends `producer_id`'s open transaction in this partition: appends its marker and marks
    /// its records with the outcome. Returns the marker's offset, or `None` (nothing written)
    /// when the producer has no open transaction here.
    pub(crate) fn end_transaction(
        &mut self,
        producer_id: i64,
        outcome: TxnOutcome,
        timestamp: i64,
    ) -> Option<i64> {
        let first = self.open.remove(&producer_id)?;
        let from = usize::try_from(first).unwrap_or(usize::MAX);
        for entry in self.entries.iter_mut().skip(from) {
            if entry.producer_id == Some(producer_id)
                && entry.kind == EntryKind::Transactional(TxnStatus::Open)
            {
                entry.kind = EntryKind::Transactional(TxnStatus::Ended(outcome));
            }
        }
        let offset = self.end();
        self.batch_starts.push(offset);
        self.first_not_plain.get_or_insert(offset);
        self.entries.push(StoredRecord {
            key: None,
            value: None,
            headers: Headers::new(),
            timestamp,
            producer_id: Some(producer_id),
            kind: EntryKind::Marker(outcome),
            leader_epoch: self.leader_epoch,
        });
        Some(offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(value: &'static str) -> StoredRecord {
        StoredRecord::plain(
            None,
            Some(Bytes::from_static(value.as_bytes())),
            Headers::new(),
            0,
            None,
        )
    }

    fn visible(log: &PartitionLog, isolation: IsolationLevel) -> Vec<i64> {
        (0..log.end_for(isolation))
            .filter(|o| log.get(*o).is_some_and(|r| r.visible(isolation)))
            .collect()
    }

    #[test]
    fn lso_is_the_first_offset_of_the_oldest_open_transaction() {
        let mut log = PartitionLog::default();
        log.push(record("plain")); // 0
        log.push_transactional(record("a1"), 7); // 1
        log.push_transactional(record("b1"), 8); // 2
        log.push_transactional(record("a2"), 7); // 3
        assert_eq!((log.end(), log.last_stable_offset()), (4, 1));
        assert_eq!(log.end_transaction(8, TxnOutcome::Abort, 0), Some(4));
        assert_eq!(log.last_stable_offset(), 1, "7 is still open");
        assert_eq!(log.end_transaction(7, TxnOutcome::Commit, 0), Some(5));
        assert_eq!(log.last_stable_offset(), 6);
        assert_eq!(
            log.end_transaction(7, TxnOutcome::Commit, 0),
            None,
            "nothing open"
        );
        assert_eq!(visible(&log, IsolationLevel::ReadCommitted), [0, 1, 3]);
        assert_eq!(visible(&log, IsolationLevel::ReadUncommitted), [0, 1, 2, 3]);
    }

    #[test]
    fn plain_records_run_until_the_first_transactional_record_or_marker() {
        let mut log = PartitionLog::default();
        log.push(record("a")); // 0
        log.push_batch(vec![record("b"), record("c")]); // 1, 2
        assert_eq!(log.plain_end(), 3, "all plain: the log end");
        log.push_transactional(record("t"), 7); // 3
        log.push(record("d")); // 4
        assert_eq!(log.plain_end(), 3);
        log.end_transaction(7, TxnOutcome::Commit, 0); // marker at 5
        assert_eq!(log.plain_end(), 3, "the first one stays the bound");

        let mut markers_first = PartitionLog::default();
        markers_first.push(record("a")); // 0
        markers_first.end_transaction(9, TxnOutcome::Abort, 0); // no open transaction: nothing
        assert_eq!(markers_first.plain_end(), 1);
        let mut marker = record("m");
        marker.kind = EntryKind::Marker(TxnOutcome::Abort);
        markers_first.push_batch(vec![record("b"), marker]); // 1, 2
        assert_eq!(markers_first.plain_end(), 2);
    }

    #[test]
    fn batches_end_where_the_next_begins() {
        let mut log = PartitionLog::default();
        log.push(record("single")); // 0
        assert_eq!(
            log.push_batch(vec![record("a"), record("b"), record("c")]),
            1
        );
        assert_eq!(
            log.push_batch(Vec::new()),
            4,
            "an empty batch writes nothing"
        );
        log.push_transactional(record("t"), 7); // 4
        log.end_transaction(7, TxnOutcome::Commit, 0); // 5
        assert_eq!(log.batch_end(0), 1);
        for offset in 1..4 {
            assert_eq!(log.batch_end(offset), 4, "offset {offset}");
        }
        assert_eq!((log.batch_end(4), log.batch_end(5)), (5, 6));
        assert_eq!(log.batch_end(99), 6, "past the log: its end");
    }

    #[test]
    fn entries_carry_the_leader_epoch_of_their_append() {
        let mut log = PartitionLog::default();
        log.push(record("a"));
        assert_eq!(log.bump_leader_epoch(), 1);
        log.push_batch(vec![record("b"), record("c")]);
        log.push_transactional(record("t"), 3);
        log.bump_leader_epoch();
        log.end_transaction(3, TxnOutcome::Commit, 0);
        let epochs: Vec<i32> = (0..log.end())
            .map(|o| log.get(o).unwrap().leader_epoch)
            .collect();
        assert_eq!(epochs, [0, 1, 1, 1, 2]);
        assert_eq!(log.leader_epoch(), 2);
    }

    #[test]
    fn read_committed_stops_at_an_open_transaction() {
        let mut log = PartitionLog::default();
        log.push_transactional(record("open"), 1);
        log.push(record("after"));
        assert_eq!(log.end_for(IsolationLevel::ReadCommitted), 0);
        assert!(visible(&log, IsolationLevel::ReadCommitted).is_empty());
        assert_eq!(visible(&log, IsolationLevel::ReadUncommitted), [0, 1]);
    }
}
