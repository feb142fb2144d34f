//! [`KafkaExactlyOnceCluster`]: the cluster side of the exactly-once iteration on a real
//! Kafka cluster.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use async_trait::async_trait;

use super::{ClusterCapabilities, ExactlyOnceCluster, ExactlyOnceError};
use crate::consumer::ConsumerError;
use crate::kafka::admin::{AdminError, KafkaAdmin, OffsetSpec};
use crate::kafka::error::BrokerError;
use crate::producer::{
    IsolationLevel, KafkaLogReader, KafkaProducer, KafkaProducerConfig, LogRead, LogReader,
    Producer,
};
use crate::record::TopicPartition;

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const TOPIC_ALREADY_EXISTS: i16 = 36;

/// The exactly-once iteration's view of a Kafka cluster: an admin client (features, topics,
/// leader epochs, share-group offsets, transactions), a `read_committed` reader of the
/// ledger, and producers made only to fence orphaned transactional ids.
///
/// ```no_run
/// use kafka_share_sink::exactly_once::KafkaExactlyOnceCluster;
/// use kafka_share_sink::producer::KafkaProducerConfig;
///
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let config = KafkaProducerConfig::new("localhost:9092").transactional_id("mirror-eos-0");
/// let cluster = KafkaExactlyOnceCluster::connect(&config).await?;
/// println!("connected: {cluster:?}");
/// # Ok(()) }
/// # fn main() { let _ = f; }
/// ```
#[derive(Debug)]
pub struct KafkaExactlyOnceCluster {
    admin: KafkaAdmin,
    reader: KafkaLogReader,
    producer_config: KafkaProducerConfig,
    replication_factor: Option<i16>,
}

impl KafkaExactlyOnceCluster {
    /// Connects to the cluster `producer_config` writes to, with its security settings.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is changed on the cluster.
    pub async fn connect(producer_config: &KafkaProducerConfig) -> Result<Self, ExactlyOnceError> {
        let bootstrap = producer_config.bootstrap.clone();
        let security = producer_config.security.clone();
        let admin = KafkaAdmin::builder(bootstrap.clone())
            .security(security.clone())
            .connect()
            .await
            .map_err(|e| ExactlyOnceError::cluster("connecting the admin client", e))?;
        let reader = KafkaLogReader::builder(bootstrap)
            .security(security)
            .connect()
            .await
            .map_err(ExactlyOnceError::Read)?;
        Ok(Self {
            admin,
            reader,
            producer_config: producer_config.clone(),
            replication_factor: None,
        })
    }

    /// The replication factor of a ledger topic this cluster creates; by default 3, or the
    /// number of brokers when fewer (`exactly.once.ledger.replication.factor`).
    pub fn ledger_replication_factor(mut self, factor: i16) -> Self {
        self.replication_factor = Some(factor);
        self
    }

    /// The admin client, for inspection.
    pub fn admin(&self) -> &KafkaAdmin {
        &self.admin
    }
}

fn broker_code(error: &AdminError) -> Option<i16> {
    match error {
        AdminError::Broker {
            error: BrokerError { code, .. },
            ..
        } => Some(*code),
        _ => None,
    }
}

#[async_trait]
impl LogReader for KafkaExactlyOnceCluster {
    async fn read(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        isolation: IsolationLevel,
        max_wait: Duration,
    ) -> Result<LogRead, ConsumerError> {
        self.reader
            .read(topic, partition, from, isolation, max_wait)
            .await
    }

    async fn end_offset(
        &self,
        topic: &str,
        partition: i32,
        isolation: IsolationLevel,
    ) -> Result<i64, ConsumerError> {
        self.reader.end_offset(topic, partition, isolation).await
    }
}

#[async_trait]
impl ExactlyOnceCluster for KafkaExactlyOnceCluster {
    async fn capabilities(&self, group_id: &str) -> Result<ClusterCapabilities, ExactlyOnceError> {
        let facts = self
            .admin
            .api_facts()
            .await
            .map_err(|e| ExactlyOnceError::cluster("reading the cluster's features", e))?;
        let renew = facts.share_acknowledge_max.is_some_and(|v| v >= 2);
        let enabled = match self.admin.share_group_config(group_id).await {
            Ok(configs) => configs
                .get("share.renew.acknowledge.enable")
                .is_none_or(|v| !v.eq_ignore_ascii_case("false")),
            Err(error) => {
                tracing::warn!(group = group_id, %error, "could not read the group's share.renew.acknowledge.enable; assuming the default (on)");
                true
            }
        };
        Ok(ClusterCapabilities::none()
            .with_share_version(facts.share_version)
            .with_transaction_version(facts.transaction_version)
            // KIP-1289's wire format is a draft: this client does not send it yet.
            .with_transactional_share_acknowledge(false)
            .with_renew(renew, enabled))
    }

    async fn partition_count(&self, topic: &str) -> Result<Option<i32>, ExactlyOnceError> {
        match self.admin.partitions(topic).await {
            Ok(partitions) => Ok(Some(i32::try_from(partitions.len()).unwrap_or(i32::MAX))),
            Err(e) if broker_code(&e) == Some(UNKNOWN_TOPIC_OR_PARTITION) => Ok(None),
            Err(e) => Err(ExactlyOnceError::cluster("reading a topic's partitions", e)),
        }
    }

    async fn create_ledger_topic(
        &self,
        topic: &str,
        partitions: i32,
    ) -> Result<(), ExactlyOnceError> {
        let factor = match self.replication_factor {
            Some(f) => f,
            None => {
                let brokers = self
                    .admin
                    .broker_ids()
                    .await
                    .map_err(|e| ExactlyOnceError::cluster("counting the brokers", e))?
                    .len();
                i16::try_from(brokers.clamp(1, 3)).unwrap_or(3)
            }
        };
        let min_isr = if factor >= 3 { "2" } else { "1" };
        match self
            .admin
            .create_topic_with(
                topic,
                partitions,
                factor,
                &[
                    ("cleanup.policy", "delete"),
                    ("min.insync.replicas", min_isr),
                ],
            )
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if broker_code(&e) == Some(TOPIC_ALREADY_EXISTS) => Ok(()),
            // A lost connection, a timeout, a controller moving: asked again, not the topic's
            // fault (a retry that finds it made gets TOPIC_ALREADY_EXISTS).
            Err(e) if e.is_retriable() => Err(ExactlyOnceError::cluster(
                "creating the exactly-once ledger topic",
                e,
            )),
            Err(e) => Err(ExactlyOnceError::Ledger {
                topic: topic.to_owned(),
                reason: format!(
                    "it could not be created ({e}); create it with one partition per source partition and cleanup.policy=delete"
                ),
            }),
        }
    }

    async fn topic_config(
        &self,
        topic: &str,
        key: &str,
    ) -> Result<Option<String>, ExactlyOnceError> {
        let configs = self
            .admin
            .topic_config(topic)
            .await
            .map_err(|e| ExactlyOnceError::cluster("reading the ledger topic's settings", e))?;
        Ok(configs.get(key).map(str::to_owned))
    }

    async fn leader_epochs(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, i32>, ExactlyOnceError> {
        let topics: BTreeSet<&str> = partitions.iter().map(TopicPartition::topic).collect();
        let mut epochs = HashMap::with_capacity(partitions.len());
        for topic in topics {
            let placements = self
                .admin
                .partitions(topic)
                .await
                .map_err(|e| ExactlyOnceError::cluster("reading leader epochs", e))?;
            for p in placements {
                if p.leader.is_some() {
                    epochs.insert(TopicPartition::new(topic, p.partition), p.leader_epoch);
                }
            }
        }
        Ok(epochs)
    }

    async fn share_partition_start_offsets(
        &self,
        group_id: &str,
        topic: &str,
    ) -> Result<HashMap<i32, i64>, ExactlyOnceError> {
        let offsets = self
            .admin
            .share_group_offsets(group_id)
            .await
            .map_err(|e| ExactlyOnceError::cluster("reading share-partition start offsets", e))?;
        Ok(offsets
            .into_iter()
            .filter(|o| o.topic == topic)
            .filter_map(|o| o.start_offset.map(|s| (o.partition, s)))
            .collect())
    }

    async fn ledger_start_offset(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<i64, ExactlyOnceError> {
        let starts = self
            .admin
            .list_offsets(topic, OffsetSpec::Earliest)
            .await
            .map_err(|e| ExactlyOnceError::cluster("reading the ledger's start offsets", e))?;
        Ok(starts.get(&partition).copied().unwrap_or(0))
    }

    async fn transactional_ids(&self, prefix: &str) -> Result<Vec<String>, ExactlyOnceError> {
        self.admin
            .transactional_ids(prefix)
            .await
            .map_err(|e| ExactlyOnceError::cluster("listing transactions", e))
    }

    async fn fence_transactional_id(&self, transactional_id: &str) -> Result<(), ExactlyOnceError> {
        let config = self
            .producer_config
            .clone()
            .transactional_id(transactional_id);
        let producer = KafkaProducer::connect(config)
            .await
            .map_err(ExactlyOnceError::Producer)?;
        producer
            .init_transactions()
            .await
            .map_err(ExactlyOnceError::Producer)
    }
}
