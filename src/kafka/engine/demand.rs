//! The engine's view of its consumer, built only from the consumer's [`Command`]s and the
//! records the engine sent it: what the consumer holds (buffered and with the application),
//! whether a poll waits and until when, and what the sizing rule learned from it.
//!
//! The view lags the consumer by the commands still queued, and only ever towards holding
//! more: records the consumer took count as buffered until its `HandedOut` arrives, and the
//! application's records count as held until its `AppDone` arrives. The engine reads every
//! queued command before it plans, so the lag is at most what arrived while it planned.
//!
//! [`Command`]: super::channel::Command

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::channel::PartitionCounts;
use crate::record::TopicPartition;

#[derive(Debug, Default)]
pub(crate) struct Demand {
    /// Records sent to the consumer and not yet taken from its buffer, per partition.
    buffered: HashMap<TopicPartition, usize>,
    /// Their sum.
    buffered_total: usize,
    /// Records the last poll handed out whose acknowledgements the engine does not have yet.
    in_app: usize,
    /// Their partitions.
    in_app_partitions: Vec<TopicPartition>,
    /// A poll asked for records and none were sent since.
    wanted: bool,
    /// The waiting poll's deadline.
    poll_deadline: Option<Instant>,
    per_record: Option<Duration>,
    record_locks: Option<usize>,
    collect: bool,
}

impl Demand {
    /// Records were sent to the consumer's buffer: the poll that wanted some has them.
    pub(crate) fn sent(&mut self, counts: &PartitionCounts) {
        for (tp, n) in counts.iter() {
            let held = self.buffered.entry(tp.clone()).or_default();
            *held = held.saturating_add(n);
        }
        self.buffered_total = self.buffered_total.saturating_add(counts.total());
        if !counts.is_empty() {
            self.wanted = false;
        }
    }

    /// Records left the buffer (`Command::HandedOut`, `Command::Dropped`). Counts of records
    /// this view no longer has (sent before a clear) change nothing.
    fn left(&mut self, counts: &PartitionCounts) {
        for (tp, n) in counts.iter() {
            if let Some(held) = self.buffered.get_mut(tp) {
                let gone = n.min(*held);
                *held -= gone;
                self.buffered_total = self.buffered_total.saturating_sub(gone);
                if *held == 0 {
                    self.buffered.remove(tp);
                }
            }
        }
    }

    /// Records are with the application.
    fn add_to_app(&mut self, counts: &PartitionCounts) {
        self.in_app = self.in_app.saturating_add(counts.total());
        for tp in counts.partitions() {
            if !self.in_app_partitions.contains(tp) {
                self.in_app_partitions.push(tp.clone());
            }
        }
    }

    /// `Command::HandedOut`: the poll took `counts` to the application and waits no more.
    pub(crate) fn handed_out(&mut self, counts: &PartitionCounts) {
        self.left(counts);
        self.presented_again(counts);
    }

    /// `Command::PresentedAgain`: the poll presented records the application had before and
    /// waits no more.
    pub(crate) fn presented_again(&mut self, counts: &PartitionCounts) {
        self.add_to_app(counts);
        self.wanted = false;
        self.poll_deadline = None;
    }

    /// `Command::Dropped`.
    pub(crate) fn dropped(&mut self, counts: &PartitionCounts) {
        self.left(counts);
    }

    /// `Command::AppDone`: the application holds only what it `kept`.
    pub(crate) fn app_done(
        &mut self,
        kept: &PartitionCounts,
        per_record: Option<Duration>,
        record_locks: Option<usize>,
    ) {
        self.in_app = 0;
        self.in_app_partitions.clear();
        self.add_to_app(kept);
        self.per_record = per_record;
        self.record_locks = record_locks;
    }

    /// `Command::Want`.
    pub(crate) fn want(&mut self, deadline: Instant) {
        self.wanted = true;
        self.poll_deadline = Some(deadline);
    }

    /// `Command::GaveUp`: no poll waits, but the records are still wanted.
    pub(crate) fn gave_up(&mut self) {
        self.poll_deadline = None;
    }

    /// `Command::Collect`.
    pub(crate) fn set_collect(&mut self, collect: bool) {
        self.collect = collect;
    }

    /// `Command::Unsubscribe`: the application's records go back with the sessions, and no
    /// poll waits (a later one says so again).
    pub(crate) fn unsubscribed(&mut self) {
        self.in_app = 0;
        self.in_app_partitions.clear();
        self.wanted = false;
        self.poll_deadline = None;
    }

    /// The sessions closed after an unsubscribe: the records sent before are no longer in
    /// the buffer.
    pub(crate) fn cleared(&mut self) {
        self.buffered.clear();
        self.buffered_total = 0;
    }

    /// Records waiting in the consumer's buffer.
    pub(crate) fn buffered(&self) -> usize {
        self.buffered_total
    }

    /// Records with the application.
    pub(crate) fn in_app(&self) -> usize {
        self.in_app
    }

    /// A poll wants records and none wait for it.
    pub(crate) fn wanted(&self) -> bool {
        self.wanted && self.buffered_total == 0
    }

    /// Whether a poll still wants records that have not come (also after it gave up).
    pub(crate) fn wants_any(&self) -> bool {
        self.wanted
    }

    /// The waiting poll's deadline.
    pub(crate) fn poll_deadline(&self) -> Option<Instant> {
        self.poll_deadline
    }

    pub(crate) fn per_record(&self) -> Option<Duration> {
        self.per_record
    }

    pub(crate) fn record_locks(&self) -> Option<usize> {
        self.record_locks
    }

    pub(crate) fn collect(&self) -> bool {
        self.collect
    }

    /// Whether the consumer may hold a record of `tp`: buffered, or with the application.
    pub(crate) fn holds(&self, tp: &TopicPartition) -> bool {
        self.buffered.contains_key(tp) || self.in_app_partitions.contains(tp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::ConsumerRecord;

    fn counts(records: &[(&str, i32, i64)]) -> PartitionCounts {
        let records: Vec<ConsumerRecord> = records
            .iter()
            .map(|&(t, p, o)| ConsumerRecord::new(t, p, o))
            .collect();
        PartitionCounts::of(&records)
    }

    #[test]
    fn what_the_consumer_holds_follows_its_commands() {
        let a0 = TopicPartition::new("a", 0);
        let a1 = TopicPartition::new("a", 1);
        let mut demand = Demand::default();
        let deadline = Instant::now();
        demand.want(deadline);
        assert!(demand.wanted());
        assert_eq!(demand.poll_deadline(), Some(deadline));

        demand.sent(&counts(&[("a", 0, 0), ("a", 0, 1), ("a", 1, 0)]));
        assert_eq!(demand.buffered(), 3);
        assert!(
            !demand.wanted(),
            "records went to the poll that wanted them"
        );
        assert!(demand.holds(&a0) && demand.holds(&a1));

        // The poll takes the two of a-0; a-1's record waits.
        demand.handed_out(&counts(&[("a", 0, 0), ("a", 0, 1)]));
        assert_eq!((demand.buffered(), demand.in_app()), (1, 2));
        assert_eq!(demand.poll_deadline(), None);
        assert!(demand.holds(&a0), "with the application");

        demand.app_done(&counts(&[]), Some(Duration::from_millis(1)), Some(200));
        assert!(!demand.holds(&a0));
        assert!(demand.holds(&a1), "still buffered");
        assert_eq!(demand.per_record(), Some(Duration::from_millis(1)));
        assert_eq!(demand.record_locks(), Some(200));

        demand.dropped(&counts(&[("a", 1, 0)]));
        assert!(!demand.holds(&a1));
        assert_eq!(demand.buffered(), 0);

        // Records the application keeps (held) and renewed ones presented again stay with
        // it, and count towards what this member holds.
        demand.sent(&counts(&[("a", 0, 3)]));
        demand.handed_out(&counts(&[("a", 0, 3)]));
        demand.app_done(&counts(&[("a", 0, 3)]), None, None);
        assert_eq!(demand.in_app(), 1);
        assert!(demand.holds(&a0));
        demand.presented_again(&counts(&[("a", 1, 1), ("a", 1, 2)]));
        assert_eq!(demand.in_app(), 3);
        assert!(demand.holds(&a0) && demand.holds(&a1));
        demand.app_done(&counts(&[]), None, None);
        assert!(!demand.holds(&a0) && !demand.holds(&a1));

        // A poll that gave up still wants records; an unsubscribe forgets that, and what the
        // application had.
        demand.want(deadline);
        demand.gave_up();
        assert!(demand.wanted());
        assert_eq!(demand.poll_deadline(), None);
        demand.handed_out(&counts(&[]));
        demand.want(deadline);
        demand.unsubscribed();
        assert!(!demand.wanted());
        assert_eq!(demand.poll_deadline(), None);

        // A clear drops the buffered records; a poll that waits after the unsubscribe keeps
        // waiting through it.
        demand.sent(&counts(&[("a", 0, 4), ("a", 0, 5)]));
        demand.want(deadline);
        demand.cleared();
        assert_eq!(demand.buffered(), 0);
        assert!(demand.wanted() && !demand.holds(&a0));

        // Counts of records taken before the clear, arriving after it and after new records,
        // take nothing from the new ones.
        demand.sent(&counts(&[("a", 1, 7)]));
        demand.handed_out(&counts(&[("a", 0, 4), ("a", 0, 5)]));
        assert_eq!(demand.buffered(), 1);
        assert!(demand.holds(&a1));
    }
}
