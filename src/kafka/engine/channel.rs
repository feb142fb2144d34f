//! What the consumer and its engine tell each other: [`Command`]s from the consumer, in one
//! FIFO queue, and [`Update`]s from the engine, in another. They share no state: the
//! consumer keeps what it was told in its [`Inbox`](super::inbox::Inbox), the engine what
//! it was told in its [`Demand`](super::demand::Demand).
//!
//! Both queues are unbounded and sent to without an `.await`, so a caller's future can be
//! dropped at any point without losing what it handed over, and the engine never waits on a
//! consumer that is busy elsewhere. Their order is their meaning: acknowledgements come
//! before the news that the application is done with their records, and records come before
//! the [`Update::Cleared`] that drops them.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::consumer::{CommitResults, ConsumerError};
use crate::kafka::session::acks::AckRange;
use crate::record::{ConsumerRecord, TopicPartition};

/// What the consumer asks of its engine, or tells it.
#[derive(Debug)]
pub(crate) enum Command {
    /// The topics to find leaders for.
    Subscribe(Vec<String>),
    /// Acknowledgements to send with the next request to each partition's leader.
    Acknowledge(Vec<(TopicPartition, Vec<AckRange>)>),
    /// Leave the subscription: close every share session with the final epoch (sending the
    /// pending acknowledgements, releasing the rest), drop what was fetched, then answer
    /// with the outcomes gathered since the last commit and stay idle until a `Subscribe`.
    Unsubscribe(oneshot::Sender<CommitResults>),
    /// Send every pending acknowledgement now; answer with the outcomes gathered since the
    /// last commit once those queued before this command are settled. If the receiver is
    /// gone by then, the outcomes wait for the next commit.
    Commit(oneshot::Sender<CommitResults>),
    /// Finish what is in flight, send what is pending with epoch -1 (which releases
    /// everything else), answer with the outcomes, and stop.
    Close(oneshot::Sender<CommitResults>),
    /// A poll waits for records until `deadline`: fetch until some arrive (also after the
    /// poll gave up), and let the broker hold a fetch no longer than that.
    Want {
        /// When the waiting poll returns empty-handed.
        deadline: Instant,
    },
    /// The waiting poll returned empty-handed; the records it wanted are still wanted.
    GaveUp,
    /// A poll took these records from the buffer and handed them to the application, which
    /// holds them until the next [`Command::AppDone`]. Ends the poll's wait.
    HandedOut(PartitionCounts),
    /// A poll presented these renewed records to the application again: held by it until
    /// the next [`Command::AppDone`]. Ends the poll's wait.
    PresentedAgain(PartitionCounts),
    /// These records left the buffer without reaching the application: released (their
    /// acknowledgements came first), or their locks ran out.
    Dropped(PartitionCounts),
    /// The application is done with what the last poll handed out (its acknowledgements
    /// came first) except the records it `kept` (held without a final acknowledgement),
    /// with what the sizing rule needs to know.
    AppDone {
        /// Records the application holds on past this poll.
        kept: PartitionCounts,
        /// The application's measured time per record
        /// ([`SinkPace`](super::sizing::SinkPace)).
        per_record: Option<Duration>,
        /// The group's in-flight limit per partition as read from its configs.
        record_locks: Option<usize>,
    },
    /// A poll took the error of [`Update::Error`]: the engine may send the next one. (At
    /// most one waits, as a poll reports one.)
    ErrorTaken,
    /// Whether the consumer has an acknowledgement commit callback: with one, outcomes that
    /// no commit waits for (acknowledgements that rode on fetches) are sent as
    /// [`Update::Settled`].
    Collect(bool),
}

/// What the engine tells its consumer. The consumer is told the engine stopped by the
/// queue closing.
#[derive(Debug)]
pub(crate) enum Update {
    /// One ShareFetch answer's records, acquired `at`, whose takes best end at `breaks`
    /// (see [`Buffer::push`](super::buffer::Buffer::push)).
    Records {
        at: Instant,
        records: Vec<ConsumerRecord>,
        breaks: Vec<usize>,
    },
    /// The acquisition lock duration the brokers reported last.
    LockTimeout(Duration),
    /// An error the next poll reports (one retrying cannot fix). None is sent after it
    /// before a [`Command::ErrorTaken`].
    Error(ConsumerError),
    /// A broker refused this consumer's credentials or certificate: every later poll and
    /// commit reports it, and the engine acquires nothing more.
    Refused { broker: String, reason: String },
    /// Outcomes no commit waits for, for the acknowledgement commit callback.
    Settled(CommitResults),
    /// The sessions closed after an unsubscribe: the records sent before this were
    /// released with them.
    Cleared,
    /// The group membership changed: a waiting poll looks at it again.
    MembershipChanged,
}

/// How many records of each partition a group of records holds, in order of first
/// appearance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PartitionCounts(Vec<(TopicPartition, usize)>);

/// One count per partition given, once for each time it is given.
impl<'a> FromIterator<&'a TopicPartition> for PartitionCounts {
    fn from_iter<I: IntoIterator<Item = &'a TopicPartition>>(partitions: I) -> Self {
        let mut counts = Self::default();
        for tp in partitions {
            counts.add(tp, 1);
        }
        counts
    }
}

impl PartitionCounts {
    /// Counts `records` (an answer's records come partition by partition, so this mostly
    /// compares each record with the one before).
    pub(crate) fn of(records: &[ConsumerRecord]) -> Self {
        let mut counts: Vec<(TopicPartition, usize)> = Vec::new();
        for r in records {
            let same =
                |tp: &TopicPartition| tp.partition() == r.partition() && tp.topic() == r.topic();
            if let Some((_, n)) = counts.last_mut().filter(|(tp, _)| same(tp)) {
                *n += 1;
            } else if let Some((_, n)) = counts.iter_mut().find(|(tp, _)| same(tp)) {
                *n += 1;
            } else {
                counts.push((
                    TopicPartition::new(r.topic_name().clone(), r.partition()),
                    1,
                ));
            }
        }
        Self(counts)
    }

    /// Counts `n` more records of `tp`.
    fn add(&mut self, tp: &TopicPartition, n: usize) {
        match self.0.iter_mut().rev().find(|(t, _)| t == tp) {
            Some((_, m)) => *m += n,
            None => self.0.push((tp.clone(), n)),
        }
    }

    /// Adds `other`'s counts.
    pub(crate) fn extend(&mut self, other: &Self) {
        for (tp, n) in other.iter() {
            self.add(tp, n);
        }
    }

    /// The records counted.
    pub(crate) fn total(&self) -> usize {
        self.0.iter().map(|(_, n)| n).sum()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each partition with its count.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&TopicPartition, usize)> {
        self.0.iter().map(|(tp, n)| (tp, *n))
    }

    /// The partitions, each once.
    pub(crate) fn partitions(&self) -> impl Iterator<Item = &TopicPartition> {
        self.0.iter().map(|(tp, _)| tp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_partitions_in_order_of_first_appearance() {
        let records = [
            ("a", 0, 1),
            ("a", 0, 2),
            ("b", 0, 1),
            ("a", 1, 5),
            ("a", 0, 3),
        ]
        .map(|(t, p, o)| ConsumerRecord::new(t, p, o));
        let counts = PartitionCounts::of(&records);
        let seen: Vec<(String, i32, usize)> = counts
            .iter()
            .map(|(tp, n)| (tp.topic().to_owned(), tp.partition(), n))
            .collect();
        assert_eq!(
            seen,
            [
                ("a".to_owned(), 0, 3),
                ("b".to_owned(), 0, 1),
                ("a".to_owned(), 1, 1)
            ]
        );
        assert_eq!(counts.total(), 5);
        assert!(PartitionCounts::of(&[]).is_empty());
        // Counted from partitions and added up, the same.
        let partitions: Vec<TopicPartition> = records
            .iter()
            .map(ConsumerRecord::topic_partition)
            .collect();
        let mut again: PartitionCounts = partitions[..3].iter().collect();
        again.extend(&partitions[3..].iter().collect());
        assert_eq!(again, counts);
    }
}
