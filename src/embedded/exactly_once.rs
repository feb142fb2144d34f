//! [`ExactlyOnceCluster`] for the [`EmbeddedBroker`]: what the exactly-once iteration asks of
//! the cluster, in process.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::Instant;

use super::log::TxnOutcome;
use super::{EmbeddedBroker, EmbeddedError};
use crate::exactly_once::{ClusterCapabilities, ExactlyOnceCluster, ExactlyOnceError};
use crate::record::TopicPartition;

/// The embedded broker as the exactly-once iteration's cluster:
///
/// - `capabilities`: what [`EmbeddedBroker::set_capabilities`] set (by default a KIP-1289
///   cluster), with RENEW enabled for the group only where its
///   [`GroupConfig::renew_acknowledge_enable`](super::GroupConfig::renew_acknowledge_enable)
///   is on;
/// - `leader_epochs`: [`EmbeddedBroker::leader_epoch`] (raised by
///   [`fail_over`](EmbeddedBroker::fail_over)); unknown partitions are left out;
/// - `share_partition_start_offsets`: the partitions of the topic the group has read
///   ([`EmbeddedBroker::share_partition_offsets`]); the others are left out;
/// - `fence_transactional_id`: InitProducerId for the id, as a new producer's would be:
///   its epoch goes up and its open transaction is aborted, staged acknowledgements
///   included. An id no producer initialised is left alone.
///
/// ```
/// use kafka_share_sink::embedded::EmbeddedBroker;
/// use kafka_share_sink::exactly_once::ExactlyOnceCluster;
/// use kafka_share_sink::producer::{Producer, ProducerError};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let broker = EmbeddedBroker::new();
/// broker.create_ledger_topic("mirror.eos-ledger", 2).await?;
/// broker.create_ledger_topic("mirror.eos-ledger", 2).await?; // exists: fine
/// assert_eq!(broker.partition_count("mirror.eos-ledger").await?, Some(2));
///
/// let orphan = broker.transactional_producer("mirror-eos-3")?;
/// orphan.init_transactions().await?;
/// broker.fence_transactional_id("mirror-eos-3").await?;
/// assert!(matches!(orphan.begin_transaction(), Err(ProducerError::Fenced { .. })));
/// # Ok(()) }
/// ```
#[async_trait]
impl ExactlyOnceCluster for EmbeddedBroker {
    async fn capabilities(&self, group_id: &str) -> Result<ClusterCapabilities, ExactlyOnceError> {
        Ok(self.shared.lock().capabilities(group_id))
    }

    async fn partition_count(&self, topic: &str) -> Result<Option<i32>, ExactlyOnceError> {
        let state = self.shared.lock();
        Ok(state
            .topics
            .get(topic)
            .map(|t| i32::try_from(t.partitions.len()).unwrap_or(i32::MAX)))
    }

    async fn create_ledger_topic(
        &self,
        topic: &str,
        partitions: i32,
    ) -> Result<(), ExactlyOnceError> {
        let count = usize::try_from(partitions).unwrap_or(0);
        match self.create_topic(topic, count) {
            Ok(()) | Err(EmbeddedError::TopicExists(_)) => Ok(()),
            Err(error) => Err(ExactlyOnceError::Ledger {
                topic: topic.to_owned(),
                reason: error.to_string(),
            }),
        }
    }

    async fn leader_epochs(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, i32>, ExactlyOnceError> {
        let state = self.shared.lock();
        Ok(partitions
            .iter()
            .filter_map(|tp| {
                let log = state.partition_log(tp.topic(), tp.partition()).ok()?;
                Some((tp.clone(), log.leader_epoch()))
            })
            .collect())
    }

    async fn share_partition_start_offsets(
        &self,
        group_id: &str,
        topic: &str,
    ) -> Result<HashMap<i32, i64>, ExactlyOnceError> {
        let now = Instant::now();
        let mut state = self.shared.lock();
        let ended = state.expire_transactions(now);
        let expired = state.expire_group(group_id, now);
        if ended || expired {
            self.shared.changed.notify_waiters();
        }
        let name: Arc<str> = Arc::from(topic);
        Ok(state
            .groups
            .get(group_id)
            .map(|g| {
                g.partitions
                    .iter()
                    .filter(|((t, _), _)| *t == name)
                    .map(|((_, p), share)| (*p, share.start_offset()))
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn ledger_start_offset(
        &self,
        _topic: &str,
        _partition: i32,
    ) -> Result<i64, ExactlyOnceError> {
        // The embedded log never deletes records.
        Ok(0)
    }

    async fn transactional_ids(&self, prefix: &str) -> Result<Vec<String>, ExactlyOnceError> {
        let state = self.shared.lock();
        let mut ids: Vec<String> = state
            .coordinator
            .transactional_ids()
            .filter(|id| id.starts_with(prefix))
            .map(str::to_owned)
            .collect();
        ids.sort();
        Ok(ids)
    }

    async fn fence_transactional_id(&self, transactional_id: &str) -> Result<(), ExactlyOnceError> {
        let mut state = self.shared.lock();
        state.expire_transactions(Instant::now());
        state.flush_markers(transactional_id);
        if let Some(Some(aborted)) = state.coordinator.fence(transactional_id) {
            state.write_markers(&aborted, TxnOutcome::Abort);
        }
        drop(state);
        self.shared.changed.notify_waiters();
        Ok(())
    }
}
