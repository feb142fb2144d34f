//! The [`LagSource`]s of this crate: a Kafka cluster through an admin client, the cluster a
//! [`KafkaShareConsumer`](crate::KafkaShareConsumer) reads from, and the embedded broker.

use async_trait::async_trait;
use tokio::sync::Mutex;

use super::{LagSource, PartitionLag};
use crate::embedded::EmbeddedBroker;
use crate::error::BoxError;
use crate::kafka::admin::KafkaAdmin;
use crate::kafka::net::addresses::Addresses;
use crate::kafka::net::connection::ConnectionConfig;

/// DescribeShareGroupOffsets (v1 carries the lag: Kafka 4.4, KIP-1226), to the group's
/// coordinator.
#[async_trait]
impl LagSource for KafkaAdmin {
    async fn share_group_lag(&self, group: &str) -> Result<Vec<PartitionLag>, BoxError> {
        Ok(self
            .share_group_offsets(group)
            .await?
            .into_iter()
            .map(|p| PartitionLag::new(p.topic, p.partition, p.lag.and_then(|l| l.try_into().ok())))
            .collect())
    }
}

/// Computed from the group's record states, as Kafka 4.4 counts it.
#[async_trait]
impl LagSource for EmbeddedBroker {
    async fn share_group_lag(&self, group: &str) -> Result<Vec<PartitionLag>, BoxError> {
        Ok(self.group_lag(group))
    }
}

/// The cluster of a Kafka share consumer, read through an admin client of its own, made with
/// the consumer's connection settings (security included) at the first read and made again
/// after a read fails.
#[derive(Debug)]
pub(crate) struct KafkaLagSource {
    addresses: Addresses,
    config: ConnectionConfig,
    admin: Mutex<Option<KafkaAdmin>>,
}

impl KafkaLagSource {
    /// Reads through `addresses` (the consumer's: the brokers it knows, then the bootstrap
    /// list) with `config`; connects at the first read.
    pub(crate) fn new(addresses: Addresses, config: ConnectionConfig) -> Self {
        Self {
            addresses,
            config,
            admin: Mutex::new(None),
        }
    }
}

#[async_trait]
impl LagSource for KafkaLagSource {
    async fn share_group_lag(&self, group: &str) -> Result<Vec<PartitionLag>, BoxError> {
        let mut admin = self.admin.lock().await;
        let connected = match admin.take() {
            Some(connected) => connected,
            None => KafkaAdmin::open(self.addresses.clone(), self.config.clone())
                .await
                .map_err(|failure| failure.into_admin("share_group_lag"))?,
        };
        let read = connected.share_group_lag(group).await;
        // After a failure the next read connects again, where the consumer would.
        if read.is_ok() {
            *admin = Some(connected);
        }
        read
    }
}
