//! The embedded transaction coordinator: producer ids and epochs per transactional id, the
//! transaction each has open, and its timeout. Free of I/O (time is passed in): it says which
//! partitions need which marker, and the broker writes them.
//!
//! It follows Kafka's transactions v2 (KIP-890): `init` bumps the epoch, fencing every older
//! producer of the id and aborting the transaction it left open; every end of a transaction
//! (commit, abort, or the coordinator's abort after `transaction.timeout.ms`) bumps the epoch
//! again, so a producer still holding an older epoch is refused. An epoch that would reach
//! `i16::MAX` rolls over to a new producer id at epoch 0, as Kafka does.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::time::deadline_after;

/// A producer id and epoch.
pub(crate) type ProducerIdEpoch = (i64, i16);

/// Why a producer's (id, epoch) is no longer the current one of its transactional id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stale {
    /// Another producer with the same transactional id called `init` since.
    Fenced,
    /// The coordinator aborted the producer's transaction after its timeout; the producer
    /// may abort too (taking the new epoch) and go on.
    TimedOut,
}

/// A transaction that ended: the producer id its records carry and the partitions that
/// need its marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ended {
    pub(crate) producer_id: i64,
    pub(crate) partitions: BTreeSet<(Arc<str>, i32)>,
    /// The epoch the transaction ran under (its staged acknowledgements carry it).
    #[cfg(feature = "exactly-once")]
    pub(crate) producer_epoch: i16,
    /// The share partitions (group, topic, partition) holding its staged acknowledgements.
    #[cfg(feature = "exactly-once")]
    pub(crate) share_partitions: BTreeSet<SharePartitionKey>,
}

/// A share partition: (group, topic, partition).
#[cfg(feature = "exactly-once")]
pub(crate) type SharePartitionKey = (String, Arc<str>, i32);

#[derive(Debug)]
struct Ongoing {
    deadline: Instant,
    partitions: BTreeSet<(Arc<str>, i32)>,
    #[cfg(feature = "exactly-once")]
    share_partitions: BTreeSet<SharePartitionKey>,
}

impl Ongoing {
    fn new(deadline: Instant) -> Self {
        Self {
            deadline,
            partitions: BTreeSet::new(),
            #[cfg(feature = "exactly-once")]
            share_partitions: BTreeSet::new(),
        }
    }

    /// The transaction, ended, of (`producer_id`, `producer_epoch`).
    fn ended(self, producer_id: i64, producer_epoch: i16) -> Ended {
        #[cfg(not(feature = "exactly-once"))]
        let _ = producer_epoch;
        Ended {
            producer_id,
            partitions: self.partitions,
            #[cfg(feature = "exactly-once")]
            producer_epoch,
            #[cfg(feature = "exactly-once")]
            share_partitions: self.share_partitions,
        }
    }
}

#[derive(Debug)]
struct TransactionalId {
    producer_id: i64,
    epoch: i16,
    timeout: Duration,
    ongoing: Option<Ongoing>,
    /// The (id, epoch) whose transaction the coordinator aborted after its timeout, until
    /// that producer aborts too or another producer takes the id over.
    timed_out: Option<ProducerIdEpoch>,
}

#[derive(Debug, Default)]
pub(crate) struct Coordinator {
    next_producer_id: i64,
    ids: HashMap<String, TransactionalId>,
}

impl Coordinator {
    /// Every transactional id the coordinator knows.
    #[cfg(feature = "exactly-once")]
    pub(crate) fn transactional_ids(&self) -> impl Iterator<Item = &str> {
        self.ids.keys().map(String::as_str)
    }

    /// A fresh producer id (for idempotent producers, and new transactional ids).
    pub(crate) fn allocate_producer_id(&mut self) -> i64 {
        let id = self.next_producer_id;
        self.next_producer_id = self.next_producer_id.saturating_add(1);
        id
    }

    fn bump(&mut self, transactional_id: &str) {
        let exhausted = self
            .ids
            .get(transactional_id)
            .is_some_and(|e| e.epoch >= i16::MAX - 1);
        let fresh = exhausted.then(|| self.allocate_producer_id());
        if let Some(entry) = self.ids.get_mut(transactional_id) {
            match fresh {
                Some(id) => {
                    entry.producer_id = id;
                    entry.epoch = 0;
                }
                None => entry.epoch += 1,
            }
        }
    }

    /// InitProducerId: registers `transactional_id` (or bumps its epoch, fencing older
    /// producers), aborting the transaction it has open. Returns the new (id, epoch) and the
    /// aborted transaction, whose partitions need ABORT markers.
    pub(crate) fn init(
        &mut self,
        transactional_id: &str,
        timeout: Duration,
    ) -> (ProducerIdEpoch, Option<Ended>) {
        let mut aborted = None;
        if let Some(entry) = self.ids.get_mut(transactional_id) {
            entry.timeout = timeout;
            entry.timed_out = None;
            if let Some(ongoing) = entry.ongoing.take() {
                aborted = Some(ongoing.ended(entry.producer_id, entry.epoch));
                // The fencing abort bumps the epoch, and the new producer's bump follows.
                self.bump(transactional_id);
            }
            self.bump(transactional_id);
        } else {
            let producer_id = self.allocate_producer_id();
            self.ids.insert(
                transactional_id.to_owned(),
                TransactionalId {
                    producer_id,
                    epoch: 0,
                    timeout,
                    ongoing: None,
                    timed_out: None,
                },
            );
        }
        let entry = &self.ids[transactional_id];
        ((entry.producer_id, entry.epoch), aborted)
    }

    /// Whether `current` is still the id's current (id, epoch).
    pub(crate) fn check(
        &self,
        transactional_id: &str,
        current: ProducerIdEpoch,
    ) -> Result<(), Stale> {
        match self.ids.get(transactional_id) {
            Some(entry) if (entry.producer_id, entry.epoch) == current => Ok(()),
            Some(entry) if entry.timed_out == Some(current) => Err(Stale::TimedOut),
            _ => Err(Stale::Fenced),
        }
    }

    /// Adds a partition to the id's transaction, starting the transaction (and its timeout)
    /// at the first one, as a produce to a new partition does under transactions v2.
    pub(crate) fn add_partition(
        &mut self,
        transactional_id: &str,
        current: ProducerIdEpoch,
        partition: (Arc<str>, i32),
        now: Instant,
    ) -> Result<(), Stale> {
        self.ongoing(transactional_id, current, now)?
            .partitions
            .insert(partition);
        Ok(())
    }

    /// The id's transaction, started now (its timeout with it) if it has none, once `current`
    /// is checked to be the id's producer.
    fn ongoing(
        &mut self,
        transactional_id: &str,
        current: ProducerIdEpoch,
        now: Instant,
    ) -> Result<&mut Ongoing, Stale> {
        self.check(transactional_id, current)?;
        let Some(entry) = self.ids.get_mut(transactional_id) else {
            return Err(Stale::Fenced);
        };
        let timeout = entry.timeout;
        Ok(entry
            .ongoing
            .get_or_insert_with(|| Ongoing::new(deadline_after(now, timeout))))
    }

    /// Adds a share partition whose acknowledgements the id's transaction stages (KIP-1289),
    /// starting the transaction (and its timeout) if it has none: an ack-only transaction
    /// is a transaction.
    #[cfg(feature = "exactly-once")]
    pub(crate) fn add_share_partition(
        &mut self,
        transactional_id: &str,
        current: ProducerIdEpoch,
        share_partition: SharePartitionKey,
        now: Instant,
    ) -> Result<(), Stale> {
        self.ongoing(transactional_id, current, now)?
            .share_partitions
            .insert(share_partition);
        Ok(())
    }

    /// InitProducerId by someone else than the id's producer (a successor fencing it): bumps
    /// the epoch of a known id and aborts its open transaction, keeping its timeout. `None`
    /// for an id never initialised: there is nothing to fence.
    #[cfg(feature = "exactly-once")]
    pub(crate) fn fence(&mut self, transactional_id: &str) -> Option<Option<Ended>> {
        let timeout = self.ids.get(transactional_id)?.timeout;
        Some(self.init(transactional_id, timeout).1)
    }

    /// EndTxn: ends the id's transaction (if it has one) and bumps the epoch. Returns the new
    /// (id, epoch) and the ended transaction, whose partitions need the marker.
    pub(crate) fn end(
        &mut self,
        transactional_id: &str,
        current: ProducerIdEpoch,
    ) -> Result<(ProducerIdEpoch, Option<Ended>), Stale> {
        self.check(transactional_id, current)?;
        let Some(entry) = self.ids.get_mut(transactional_id) else {
            return Err(Stale::Fenced);
        };
        let ended = entry
            .ongoing
            .take()
            .map(|ongoing| ongoing.ended(entry.producer_id, entry.epoch));
        self.bump(transactional_id);
        let entry = &self.ids[transactional_id];
        Ok(((entry.producer_id, entry.epoch), ended))
    }

    /// The producer whose transaction timed out aborts too: it takes the current (id, epoch).
    pub(crate) fn acknowledge_timeout(
        &mut self,
        transactional_id: &str,
        stale: ProducerIdEpoch,
    ) -> Option<ProducerIdEpoch> {
        let entry = self.ids.get_mut(transactional_id)?;
        if entry.timed_out != Some(stale) {
            return None;
        }
        entry.timed_out = None;
        Some((entry.producer_id, entry.epoch))
    }

    /// Aborts every transaction open past its timeout at `now`, bumping its epoch. Returns
    /// the aborted transactions, whose partitions need ABORT markers.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<Ended> {
        let due: Vec<String> = self
            .ids
            .iter()
            .filter(|(_, e)| e.ongoing.as_ref().is_some_and(|o| o.deadline <= now))
            .map(|(id, _)| id.clone())
            .collect();
        let mut ended = Vec::with_capacity(due.len());
        for id in due {
            let Some(entry) = self.ids.get_mut(&id) else {
                continue;
            };
            let Some(ongoing) = entry.ongoing.take() else {
                continue;
            };
            entry.timed_out = Some((entry.producer_id, entry.epoch));
            ended.push(ongoing.ended(entry.producer_id, entry.epoch));
            self.bump(&id);
        }
        ended
    }

    /// When the next open transaction times out.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.ids
            .values()
            .filter_map(|e| e.ongoing.as_ref().map(|o| o.deadline))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn tp(p: i32) -> (Arc<str>, i32) {
        (Arc::from("t"), p)
    }

    #[test]
    fn init_fences_the_older_producer_and_aborts_its_transaction() {
        let now = Instant::now();
        let mut c = Coordinator::default();
        let (old, aborted) = c.init("tx", MINUTE);
        assert_eq!((old.1, aborted), (0, None));
        c.add_partition("tx", old, tp(1), now).unwrap();
        let (new, aborted) = c.init("tx", MINUTE);
        assert_eq!(new.0, old.0, "same producer id");
        assert!(new.1 > old.1);
        assert_eq!(aborted.unwrap().partitions, BTreeSet::from([tp(1)]));
        assert_eq!(c.check("tx", old), Err(Stale::Fenced));
        assert_eq!(c.end("tx", old).unwrap_err(), Stale::Fenced);
        assert_eq!(c.check("tx", new), Ok(()));
    }

    #[test]
    fn every_end_bumps_the_epoch() {
        let now = Instant::now();
        let mut c = Coordinator::default();
        let (first, _) = c.init("tx", MINUTE);
        c.add_partition("tx", first, tp(0), now).unwrap();
        let (second, ended) = c.end("tx", first).unwrap();
        assert_eq!(second, (first.0, first.1 + 1));
        assert_eq!(ended.unwrap().producer_id, first.0);
        assert_eq!(
            c.check("tx", first),
            Err(Stale::Fenced),
            "a zombie at the old epoch"
        );
        let (third, ended) = c.end("tx", second).unwrap();
        assert_eq!((third.1, ended), (second.1 + 1, None));
    }

    #[test]
    fn a_transaction_past_its_timeout_is_aborted_and_its_producer_may_abort_too() {
        let now = Instant::now();
        let mut c = Coordinator::default();
        let (ours, _) = c.init("tx", MINUTE);
        c.add_partition("tx", ours, tp(0), now).unwrap();
        assert_eq!(c.next_deadline(), Some(now + MINUTE));
        assert!(c.expire(now + MINUTE - Duration::from_millis(1)).is_empty());
        let ended = c.expire(now + MINUTE);
        assert_eq!(ended.len(), 1);
        assert_eq!(c.next_deadline(), None);
        assert_eq!(c.check("tx", ours), Err(Stale::TimedOut));
        let next = c.acknowledge_timeout("tx", ours).unwrap();
        assert_eq!(next, (ours.0, ours.1 + 1));
        assert_eq!(c.check("tx", next), Ok(()));
        assert_eq!(c.acknowledge_timeout("tx", ours), None, "once");
    }

    #[test]
    fn a_timed_out_producer_taken_over_is_fenced() {
        let now = Instant::now();
        let mut c = Coordinator::default();
        let (ours, _) = c.init("tx", MINUTE);
        c.add_partition("tx", ours, tp(0), now).unwrap();
        c.expire(now + MINUTE);
        c.init("tx", MINUTE);
        assert_eq!(c.check("tx", ours), Err(Stale::Fenced));
    }

    #[cfg(feature = "exactly-once")]
    #[test]
    fn an_ack_only_transaction_is_a_transaction_and_every_end_names_its_share_partitions() {
        let now = Instant::now();
        let mut c = Coordinator::default();
        let (ours, _) = c.init("tx", MINUTE);
        let share = (String::from("g"), Arc::<str>::from("in"), 0);
        c.add_share_partition("tx", ours, share.clone(), now)
            .unwrap();
        assert_eq!(c.next_deadline(), Some(now + MINUTE), "its timeout runs");
        let (_, ended) = c.end("tx", ours).unwrap();
        let ended = ended.unwrap();
        assert!(ended.partitions.is_empty());
        assert_eq!(ended.share_partitions, BTreeSet::from([share.clone()]));
        assert_eq!((ended.producer_id, ended.producer_epoch), ours);

        // A fence aborts the transaction open at the fenced epoch.
        let (next, _) = c.init("tx", MINUTE);
        c.add_share_partition("tx", next, share.clone(), now)
            .unwrap();
        let aborted = c.fence("tx").unwrap().unwrap();
        assert_eq!(aborted.producer_epoch, next.1);
        assert_eq!(c.check("tx", next), Err(Stale::Fenced));
        assert!(c.fence("unknown").is_none());
        // A timed-out transaction names its share partitions too.
        let (third, _) = c.init("tx", MINUTE);
        c.add_share_partition("tx", third, share, now).unwrap();
        assert_eq!(c.expire(now + MINUTE)[0].producer_epoch, third.1);
    }

    #[test]
    fn an_exhausted_epoch_rolls_over_to_a_new_producer_id() {
        let mut c = Coordinator::default();
        let (mut current, _) = c.init("tx", MINUTE);
        let first = current.0;
        c.ids.get_mut("tx").unwrap().epoch = i16::MAX - 2;
        current = (first, i16::MAX - 2);
        let (next, _) = c.end("tx", current).unwrap();
        assert_eq!(next, (first, i16::MAX - 1));
        let (rolled, _) = c.end("tx", next).unwrap();
        assert_ne!(rolled.0, first);
        assert_eq!(rolled.1, 0);
    }
}
