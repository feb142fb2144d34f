//! The share-group behaviour of `support/share_behaviour.rs` on a real Kafka broker; the
//! same scenarios run on the embedded group in `embedded_parity.rs`. Needs a broker (see
//! `tests/support/mod.rs`); produces with rskafka, where one produce call is one batch.

#[path = "support/share_behaviour.rs"]
mod share_behaviour;
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::{
    AcknowledgementMode, AcquisitionSizing, KafkaAdmin, KafkaShareConsumer,
    KafkaShareConsumerConfig, ShareAcquireMode, ShareConsumer,
};
use rskafka::client::partition::{Compression, PartitionClient};
use rskafka::record::Record;
use share_behaviour::{Backend, Group};

struct Kafka {
    bootstrap: String,
    topic: String,
    group: String,
    partition: PartitionClient,
}

impl Kafka {
    /// A fresh topic and group, or `None` when the broker tests are skipped.
    async fn new(test: &str, group: Group) -> Option<Self> {
        let bootstrap = support::bootstrap(test)?;
        let topic = support::unique(test);
        let group_id = support::unique(&format!("{test}-group"));
        let admin = KafkaAdmin::connect(&bootstrap)
            .await
            .expect("admin connects");
        admin
            .create_topic(&topic, 1, 1)
            .await
            .expect("topic created");
        let lock = group.lock.as_millis().to_string();
        let locks = group.max_record_locks.map(|l| l.to_string());
        let mut configs = vec![
            ("share.auto.offset.reset", "earliest"),
            ("share.record.lock.duration.ms", lock.as_str()),
        ];
        if let Some(locks) = &locks {
            configs.push(("share.partition.max.record.locks", locks.as_str()));
        }
        admin
            .set_share_group_config(&group_id, &configs)
            .await
            .expect("group configured");
        // Consumers must not start before the broker applies the configs.
        support::share_group_config_until(&admin, &group_id, |c| {
            c.get("share.record.lock.duration.ms") == Some(lock.as_str())
                && c.get("share.partition.max.record.locks")
                    == locks
                        .as_deref()
                        .or(c.get("share.partition.max.record.locks"))
        })
        .await;
        let partition = support::rskafka_partition(&bootstrap, &topic, 0).await;
        Some(Self {
            bootstrap,
            topic,
            group: group_id,
            partition,
        })
    }
}

#[async_trait]
impl Backend for Kafka {
    async fn consumer(
        &self,
        max_poll_records: usize,
        mode: ShareAcquireMode,
    ) -> Box<dyn ShareConsumer> {
        let config = KafkaShareConsumerConfig::new(&self.bootstrap, &self.group)
            .acknowledgement_mode(AcknowledgementMode::Explicit)
            .max_poll_records(i32::try_from(max_poll_records).unwrap())
            .share_acquire_mode(mode)
            // The embedded group hands a poll what one fetch acquired (whole batches); the
            // sized acquisition would hand it out max.poll.records at a time.
            .acquisition_sizing(AcquisitionSizing::Fixed)
            .fetch_max_wait(Duration::from_millis(200));
        let mut c = KafkaShareConsumer::connect(config)
            .await
            .expect("consumer connects");
        c.subscribe(vec![self.topic.clone()])
            .await
            .expect("subscribe");
        Box::new(c)
    }

    async fn produce_batch(&self, records: usize) {
        let batch = (0..records)
            .map(|i| Record {
                key: None,
                value: Some(format!("v{i}").into_bytes()),
                headers: BTreeMap::new(),
                timestamp: chrono::Utc::now(),
            })
            .collect();
        self.partition
            .produce(batch, Compression::NoCompression)
            .await
            .expect("produce");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_consumer_releases_its_records_at_once() {
    let Some(b) = Kafka::new("parity_drop", share_behaviour::DROP_GROUP).await else {
        return;
    };
    share_behaviour::a_dropped_consumer_releases_its_records_at_once(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_consumer_holds_its_records_until_their_locks_expire() {
    let Some(b) = Kafka::new("parity_stall", share_behaviour::STALL_GROUP).await else {
        return;
    };
    share_behaviour::a_stalled_consumer_holds_its_records_until_their_locks_expire(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_flight_cap_is_checked_before_acquiring_whole_batches() {
    let Some(b) = Kafka::new("parity_cap", share_behaviour::CAP_GROUP).await else {
        return;
    };
    share_behaviour::the_in_flight_cap_is_checked_before_acquiring_whole_batches(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisition_follows_the_acquire_mode() {
    let Some(b) = Kafka::new("parity_mode", share_behaviour::MODE_GROUP).await else {
        return;
    };
    share_behaviour::acquisition_follows_the_acquire_mode(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewing_poll_fetches_nothing_new() {
    let Some(b) = Kafka::new("parity_renew", share_behaviour::RENEW_GROUP).await else {
        return;
    };
    share_behaviour::a_renewing_poll_fetches_nothing_new(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_consumer_gets_its_first_records_after_initialisation() {
    let Some(b) = Kafka::new("parity_first", share_behaviour::FIRST_GROUP).await else {
        return;
    };
    let took =
        share_behaviour::a_new_consumer_gets_its_first_records_after_initialisation(&b).await;
    eprintln!("a new consumer's first records came {took:?} after its first poll");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsubscribe_releases_what_it_holds_and_subscribe_rejoins() {
    let Some(b) = Kafka::new("parity_unsubscribe", share_behaviour::UNSUBSCRIBE_GROUP).await else {
        return;
    };
    share_behaviour::unsubscribe_releases_what_it_holds_and_subscribe_rejoins(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commit_callback_sees_every_outcome_once() {
    let Some(b) = Kafka::new("parity_callback", share_behaviour::CALLBACK_GROUP).await else {
        return;
    };
    share_behaviour::the_commit_callback_sees_every_outcome_once(&b).await;
}

/// 100 records held under a cap of 100: accepting 10 in the middle frees no room, accepting
/// the first 10 frees room for 10, as on the embedded group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_at_the_cap_gets_more_only_when_the_window_start_moves() {
    let Some(b) = Kafka::new("parity_held_cap", share_behaviour::HELD_CAP_GROUP).await else {
        return;
    };
    share_behaviour::a_holder_at_the_cap_gets_more_only_when_the_window_start_moves(&b).await;
}
