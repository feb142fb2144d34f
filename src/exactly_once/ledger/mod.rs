//! The ledger of ledger mode: claims of finished source offsets, written in the iteration's
//! transaction, read back `read_committed` when a record may have been finished before.
//!
//! Ledger partition `p % n` holds the claims of source partition `p` (of every source topic),
//! so a check waits only for the transactions that touched that ledger partition. A check
//! samples the ledger partition's high watermark *after* the acquisition and reads
//! `read_committed` up to it: the last stable offset holds the read back while a transaction
//! that wrote there before the sample is open, so when the read ends every claim committed
//! before the sample is in the index.

mod claim;
mod index;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use self::claim::Claim;
use self::index::ClaimIndex;
use super::{ExactlyOnceCluster, ExactlyOnceError};
use crate::producer::{IsolationLevel, ProducerRecord};
use crate::record::{RecordId, TopicPartition};
use crate::time::deadline_after;

/// How long one ledger read may wait on the broker for claims to arrive.
const READ_WAIT: Duration = Duration::from_millis(100);
/// The pause between two reads that made no progress (an open transaction holds the
/// last stable offset below the sample).
const NO_PROGRESS_PAUSE: Duration = Duration::from_millis(10);

/// The ledger topic, where this task reads it, and the claims read.
#[derive(Debug)]
pub(crate) struct Ledger {
    topic: String,
    partitions: i32,
    /// The next offset to read, per ledger partition read so far.
    positions: HashMap<i32, i64>,
    index: ClaimIndex,
    last_prune: Option<Instant>,
}

impl Ledger {
    pub(crate) fn new(topic: String, partitions: i32) -> Self {
        Self {
            topic,
            partitions: partitions.max(1),
            positions: HashMap::new(),
            index: ClaimIndex::default(),
            last_prune: None,
        }
    }

    pub(crate) fn topic(&self) -> &str {
        &self.topic
    }

    /// The ledger partition of a source partition.
    pub(crate) fn ledger_partition(&self, source_partition: i32) -> i32 {
        source_partition.rem_euclid(self.partitions)
    }

    /// Whether `offset` of `tp` is claimed by a committed transaction read so far.
    pub(crate) fn is_claimed(&self, tp: &TopicPartition, offset: i64) -> bool {
        self.index.contains(tp, offset)
    }

    /// Reads ledger partition `partition` `read_committed` up to its high watermark sampled
    /// now, waiting at most `timeout` for open transactions to end.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: what was read is kept, the position only moves past what was indexed.
    pub(crate) async fn catch_up(
        &mut self,
        cluster: &dyn ExactlyOnceCluster,
        partition: i32,
        timeout: Duration,
    ) -> Result<(), ExactlyOnceError> {
        let high_watermark = cluster
            .end_offset(&self.topic, partition, IsolationLevel::ReadUncommitted)
            .await
            .map_err(ExactlyOnceError::Read)?;
        let mut position = match self.positions.get(&partition) {
            Some(p) => *p,
            None => cluster.ledger_start_offset(&self.topic, partition).await?,
        };
        let deadline = deadline_after(Instant::now(), timeout);
        while position < high_watermark {
            let read = cluster
                .read(
                    &self.topic,
                    partition,
                    position,
                    IsolationLevel::ReadCommitted,
                    READ_WAIT,
                )
                .await
                .map_err(ExactlyOnceError::Read)?;
            for record in &read.records {
                let Some(value) = record.value() else {
                    continue;
                };
                match Claim::decode(value) {
                    Ok(claim) => {
                        let tp = TopicPartition::new(claim.topic.as_str(), claim.partition);
                        for (first, last) in claim.ranges {
                            self.index.insert(tp.clone(), first, last);
                        }
                    }
                    Err(error) => tracing::warn!(
                        ledger = %self.topic,
                        partition,
                        offset = record.offset(),
                        %error,
                        "skipping a record of the ledger topic that is not a claim: is another application writing to it?"
                    ),
                }
            }
            let progressed = read.next_offset > position;
            position = position.max(read.next_offset);
            self.positions.insert(partition, position);
            if position >= high_watermark {
                break;
            }
            if Instant::now() >= deadline {
                return Err(ExactlyOnceError::LedgerWait {
                    topic: self.topic.clone(),
                    partition,
                    high_watermark,
                    waited: timeout,
                });
            }
            if !progressed {
                tokio::time::sleep(NO_PROGRESS_PAUSE).await;
            }
        }
        Ok(())
    }

    /// One claim record per source partition of `finished`, each to its ledger partition.
    pub(crate) fn claims(
        &self,
        finished: &[RecordId],
        transactional_id: &str,
    ) -> Result<Vec<ProducerRecord>, ExactlyOnceError> {
        let mut by_partition: BTreeMap<TopicPartition, Vec<i64>> = BTreeMap::new();
        for id in finished {
            by_partition
                .entry(id.topic_partition())
                .or_default()
                .push(id.offset());
        }
        by_partition
            .into_iter()
            .map(|(tp, mut offsets)| {
                let claim = Claim {
                    topic: tp.topic().to_owned(),
                    partition: tp.partition(),
                    ranges: Claim::ranges_of(&mut offsets),
                    transactional_id: transactional_id.to_owned(),
                };
                let value: Bytes = claim.encode().map_err(|e| ExactlyOnceError::Ledger {
                    topic: self.topic.clone(),
                    reason: e.to_string(),
                })?;
                Ok(ProducerRecord::new(self.topic.as_str())
                    .partition(self.ledger_partition(tp.partition()))
                    .key(claim.key())
                    .value(value))
            })
            .collect()
    }

    /// Whether the index is due for pruning.
    pub(crate) fn prune_due(&self, interval: Duration) -> bool {
        self.last_prune.is_none_or(|at| at.elapsed() >= interval)
    }

    /// Forgets claims below the share-partition start offsets of `topic`.
    pub(crate) fn prune(&mut self, topic: &str, starts: &HashMap<i32, i64>) {
        for (&partition, &start) in starts {
            self.index
                .prune_below(&TopicPartition::new(topic, partition), start);
        }
    }

    pub(crate) fn pruned_now(&mut self) {
        self.last_prune = Some(Instant::now());
    }

    /// Ranges kept in the index.
    pub(crate) fn indexed_ranges(&self) -> usize {
        self.index.ranges()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::embedded::EmbeddedBroker;
    use crate::producer::Producer;

    const LEDGER: &str = "mirror.eos-ledger";

    /// Keeps the WARN events' messages.
    #[derive(Clone, Default)]
    struct Warnings(Arc<Mutex<Vec<String>>>);

    struct Message<'a>(&'a mut String);

    impl tracing::field::Visit for Message<'_> {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            use std::fmt::Write as _;
            let _ = write!(self.0, "{}={value:?} ", field.name());
        }
    }

    impl tracing::Subscriber for Warnings {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            if *event.metadata().level() == tracing::Level::WARN {
                let mut line = String::new();
                event.record(&mut Message(&mut line));
                self.0.lock().unwrap().push(line);
            }
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    fn ids(offsets: std::ops::RangeInclusive<i64>) -> Vec<RecordId> {
        offsets.map(|o| RecordId::new("in", 0, o)).collect()
    }

    /// Writes the claims of `offsets` of `in`-0 in a transaction that commits or aborts.
    async fn claim(
        ledger: &Ledger,
        producer: &dyn Producer,
        offsets: std::ops::RangeInclusive<i64>,
        commit: bool,
    ) {
        producer.begin_transaction().unwrap();
        for record in ledger.claims(&ids(offsets), "mirror-eos-0").unwrap() {
            producer.send(record).unwrap().await.unwrap();
        }
        if commit {
            producer.commit_transaction().await.unwrap();
        } else {
            producer.abort_transaction().await.unwrap();
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn catch_up_indexes_committed_claims_skips_the_rest_and_prune_forgets() {
        let warnings = Warnings::default();
        let _guard = tracing::subscriber::set_default(warnings.clone());
        let broker = EmbeddedBroker::new();
        broker.create_topic(LEDGER, 1).unwrap();
        let producer = broker.transactional_producer("mirror-eos-0").unwrap();
        producer.init_transactions().await.unwrap();
        let mut ledger = Ledger::new(LEDGER.to_owned(), 1);

        claim(&ledger, &producer, 0..=4, true).await;
        claim(&ledger, &producer, 5..=9, false).await;
        // Something that is not a claim, written by someone else.
        broker
            .produce(
                LEDGER,
                crate::embedded::ProduceRecord::new().value("not a claim"),
            )
            .unwrap();
        claim(&ledger, &producer, 10..=12, true).await;

        ledger
            .catch_up(&broker, 0, Duration::from_secs(1))
            .await
            .unwrap();
        let tp = TopicPartition::new("in", 0);
        for offset in (0..=4).chain(10..=12) {
            assert!(ledger.is_claimed(&tp, offset), "committed: {offset}");
        }
        for offset in (5..=9).chain([13]) {
            assert!(
                !ledger.is_claimed(&tp, offset),
                "aborted or never: {offset}"
            );
        }
        assert!(!ledger.is_claimed(&TopicPartition::new("in", 1), 0));
        assert_eq!(ledger.indexed_ranges(), 2);
        let warned = warnings.0.lock().unwrap().clone();
        assert_eq!(warned.len(), 1, "{warned:?}");
        assert!(warned[0].contains("not a claim"), "{warned:?}");

        // A later check reads on from where this one stopped.
        claim(&ledger, &producer, 13..=13, true).await;
        ledger
            .catch_up(&broker, 0, Duration::from_secs(1))
            .await
            .unwrap();
        assert!(ledger.is_claimed(&tp, 13));
        assert_eq!(ledger.indexed_ranges(), 2, "13 joins 10..=12");
        assert_eq!(
            warnings.0.lock().unwrap().len(),
            1,
            "the garbage is not read twice"
        );

        // The share-partition start offset moved to 3: claims below it are forgotten.
        ledger.prune("in", &HashMap::from([(0, 3)]));
        for offset in 0..3 {
            assert!(!ledger.is_claimed(&tp, offset), "pruned: {offset}");
        }
        for offset in (3..=4).chain(10..=13) {
            assert!(ledger.is_claimed(&tp, offset), "kept: {offset}");
        }
        ledger.prune("in", &HashMap::from([(0, 11)]));
        assert_eq!(ledger.indexed_ranges(), 1);
        assert!(!ledger.is_claimed(&tp, 10) && ledger.is_claimed(&tp, 11));
        // Another topic's start offsets leave `in` alone.
        ledger.prune("other", &HashMap::from([(0, 100)]));
        assert!(ledger.is_claimed(&tp, 13));
    }
}
