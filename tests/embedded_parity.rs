//! The share-group behaviour of `support/share_behaviour.rs` on the embedded group; the same
//! scenarios run against a Kafka broker in `kafka_parity.rs`.

#[path = "support/share_behaviour.rs"]
mod share_behaviour;

use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::embedded::{
    AutoOffsetReset, ConsumerOptions, EmbeddedBroker, GroupConfig, ProduceRecord,
};
use kafka_share_sink::{AcknowledgementMode, ShareAcquireMode, ShareConsumer};
use share_behaviour::{Backend, Group};

const TOPIC: &str = "t";
const GROUP: &str = "g";

struct Embedded {
    broker: EmbeddedBroker,
    first_fetch_delay: Duration,
}

impl Embedded {
    fn new(group: Group) -> Self {
        let broker = EmbeddedBroker::new();
        broker.create_topic(TOPIC, 1).unwrap();
        let mut config = GroupConfig::new()
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .record_lock_duration(group.lock);
        if let Some(locks) = group.max_record_locks {
            config = config.partition_max_record_locks(locks);
        }
        broker.set_group_config(GROUP, config).unwrap();
        Self {
            broker,
            first_fetch_delay: Duration::ZERO,
        }
    }
}

#[async_trait]
impl Backend for Embedded {
    async fn consumer(
        &self,
        max_poll_records: usize,
        mode: ShareAcquireMode,
    ) -> Box<dyn ShareConsumer> {
        let options = ConsumerOptions::new()
            .acknowledgement_mode(AcknowledgementMode::Explicit)
            .max_poll_records(max_poll_records)
            .acquire_mode(mode)
            .first_fetch_delay(self.first_fetch_delay);
        let mut c = self.broker.share_consumer_with(GROUP, options);
        c.subscribe(vec![TOPIC.to_owned()]).await.unwrap();
        Box::new(c)
    }

    async fn produce_batch(&self, records: usize) {
        let batch = (0..records)
            .map(|i| ProduceRecord::new().value(format!("v{i}")))
            .collect();
        self.broker.produce_batch(TOPIC, 0, batch).unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_dropped_consumer_releases_its_records_at_once() {
    let b = Embedded::new(share_behaviour::DROP_GROUP);
    share_behaviour::a_dropped_consumer_releases_its_records_at_once(&b).await;
}

#[tokio::test(start_paused = true)]
async fn a_stalled_consumer_holds_its_records_until_their_locks_expire() {
    let b = Embedded::new(share_behaviour::STALL_GROUP);
    share_behaviour::a_stalled_consumer_holds_its_records_until_their_locks_expire(&b).await;
}

#[tokio::test(start_paused = true)]
async fn the_in_flight_cap_is_checked_before_acquiring_whole_batches() {
    let b = Embedded::new(share_behaviour::CAP_GROUP);
    share_behaviour::the_in_flight_cap_is_checked_before_acquiring_whole_batches(&b).await;
}

#[tokio::test(start_paused = true)]
async fn a_holder_at_the_cap_gets_more_only_when_the_window_start_moves() {
    let b = Embedded::new(share_behaviour::HELD_CAP_GROUP);
    share_behaviour::a_holder_at_the_cap_gets_more_only_when_the_window_start_moves(&b).await;
}

#[tokio::test(start_paused = true)]
async fn acquisition_follows_the_acquire_mode() {
    let b = Embedded::new(share_behaviour::MODE_GROUP);
    share_behaviour::acquisition_follows_the_acquire_mode(&b).await;
}

#[tokio::test(start_paused = true)]
async fn a_renewing_poll_fetches_nothing_new() {
    let b = Embedded::new(share_behaviour::RENEW_GROUP);
    share_behaviour::a_renewing_poll_fetches_nothing_new(&b).await;
}

#[tokio::test(start_paused = true)]
async fn a_new_consumer_gets_its_first_records_after_initialisation() {
    let mut b = Embedded::new(share_behaviour::FIRST_GROUP);
    let took =
        share_behaviour::a_new_consumer_gets_its_first_records_after_initialisation(&b).await;
    assert_eq!(took, Duration::ZERO, "no delay unless asked for");

    b = Embedded::new(share_behaviour::FIRST_GROUP);
    b.first_fetch_delay = Duration::from_secs(1);
    let took =
        share_behaviour::a_new_consumer_gets_its_first_records_after_initialisation(&b).await;
    assert!(
        took >= Duration::from_secs(1),
        "the delay was applied: {took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn unsubscribe_releases_what_it_holds_and_subscribe_rejoins() {
    let b = Embedded::new(share_behaviour::UNSUBSCRIBE_GROUP);
    share_behaviour::unsubscribe_releases_what_it_holds_and_subscribe_rejoins(&b).await;
}

#[tokio::test(start_paused = true)]
async fn the_commit_callback_sees_every_outcome_once() {
    let b = Embedded::new(share_behaviour::CALLBACK_GROUP);
    share_behaviour::the_commit_callback_sees_every_outcome_once(&b).await;
}
