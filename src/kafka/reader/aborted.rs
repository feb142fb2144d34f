//! Which transactional batches a `read_committed` reader drops: the aborted-transaction
//! bookkeeping of a Fetch answer, as a plain state machine fed batches in offset order.
//!
//! A Fetch answer (v4+) lists the aborted transactions that overlap what it returns, each as
//! `(producer_id, first_offset)`: the producer's transaction that began at `first_offset` was
//! aborted. Brokers need not sort the list, so [`AbortedTransactions::new`] sorts it by first
//! offset. Walking the batches in offset order:
//!
//! 1. before a batch is judged, every listed transaction whose first offset is at or before the
//!    batch's last offset becomes *open-aborted* for its producer;
//! 2. a data batch that is transactional and whose producer has an open-aborted transaction is
//!    dropped;
//! 3. the producer's ABORT marker (a control batch whose control record has type 0) closes its
//!    open-aborted transaction, so its later transactions are kept unless listed too.
//!
//! A COMMIT marker changes nothing here: a committed transaction is never listed. This is the
//! walk the Java consumer does with its `abortedProducerIds`.

use std::collections::HashSet;

/// The control record type of an ABORT marker (the key is `version: i16, type: i16`).
const ABORT: i16 = 0;
/// The control record type of a COMMIT marker.
const COMMIT: i16 = 1;

/// What a control record says, from its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ControlType {
    /// A transaction's ABORT marker.
    Abort,
    /// A transaction's COMMIT marker.
    Commit,
    /// Another type, or a key too short to say: ignored, as the Java client does with types
    /// it does not know.
    Other,
}

impl ControlType {
    /// The type in a control record's key (`version: i16, type: i16`, big-endian).
    pub(crate) fn of_key(key: Option<&[u8]>) -> Self {
        match key {
            Some([_, _, high, low, ..]) => match i16::from_be_bytes([*high, *low]) {
                ABORT => Self::Abort,
                COMMIT => Self::Commit,
                _ => Self::Other,
            },
            _ => Self::Other,
        }
    }
}

/// The aborted transactions of one Fetch answer for one partition, consumed as the batches
/// are walked in offset order.
#[derive(Debug, Default)]
pub(crate) struct AbortedTransactions {
    /// `(first_offset, producer_id)`, sorted; `next` is the first not yet opened.
    pending: Vec<(i64, i64)>,
    next: usize,
    /// Producers whose listed transaction has begun and whose ABORT marker has not come yet.
    open: HashSet<i64>,
}

impl AbortedTransactions {
    /// The bookkeeping for the answer's list of `(producer_id, first_offset)`, in any order.
    pub(crate) fn new(aborted: impl IntoIterator<Item = (i64, i64)>) -> Self {
        let mut pending: Vec<(i64, i64)> = aborted
            .into_iter()
            .map(|(producer_id, first_offset)| (first_offset, producer_id))
            .collect();
        pending.sort_unstable();
        Self {
            pending,
            next: 0,
            open: HashSet::new(),
        }
    }

    /// Opens every listed transaction that begins at or before `last_offset`.
    fn open_up_to(&mut self, last_offset: i64) {
        while let Some(&(first_offset, producer_id)) = self.pending.get(self.next) {
            if first_offset > last_offset {
                break;
            }
            self.open.insert(producer_id);
            self.next += 1;
        }
    }

    /// Whether a data batch of `producer_id` spanning up to `last_offset` belongs to an
    /// aborted transaction. Call for every data batch, in offset order.
    pub(crate) fn is_aborted(
        &mut self,
        producer_id: i64,
        transactional: bool,
        last_offset: i64,
    ) -> bool {
        self.open_up_to(last_offset);
        transactional && self.open.contains(&producer_id)
    }

    /// A control batch of `producer_id` spanning up to `last_offset` whose marker is
    /// `marker`. Call for every control batch, in offset order.
    pub(crate) fn control(&mut self, producer_id: i64, last_offset: i64, marker: ControlType) {
        self.open_up_to(last_offset);
        if marker == ControlType::Abort {
            self.open.remove(&producer_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_keys_name_abort_and_commit() {
        assert_eq!(ControlType::of_key(Some(&[0, 0, 0, 0])), ControlType::Abort);
        assert_eq!(
            ControlType::of_key(Some(&[0, 0, 0, 1])),
            ControlType::Commit
        );
        assert_eq!(ControlType::of_key(Some(&[0, 0, 0, 5])), ControlType::Other);
        assert_eq!(ControlType::of_key(Some(&[0, 0, 0])), ControlType::Other);
        assert_eq!(ControlType::of_key(None), ControlType::Other);
    }

    #[test]
    fn a_listed_transaction_opens_at_its_first_offset_and_closes_at_its_abort_marker() {
        let mut aborted = AbortedTransactions::new([(9, 10), (8, 3)]);
        // Producer 8 from offset 3, producer 9 from 10, whatever the list's order.
        assert!(!aborted.is_aborted(8, true, 2));
        assert!(aborted.is_aborted(8, true, 3));
        assert!(!aborted.is_aborted(9, true, 5));
        aborted.control(8, 6, ControlType::Commit);
        assert!(
            aborted.is_aborted(8, true, 7),
            "a commit marker closes nothing"
        );
        aborted.control(8, 8, ControlType::Abort);
        assert!(!aborted.is_aborted(8, true, 9));
        assert!(aborted.is_aborted(9, true, 12));
        assert!(
            !aborted.is_aborted(9, false, 13),
            "only transactional batches"
        );
    }
}
