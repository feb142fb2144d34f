//! Shared by the exactly-once real-broker tests: a source topic filled with `r-<i>` values, a
//! `copy.` target, a share group reading from the earliest offset, and the checks that the
//! target holds every value exactly once. Include with `#[path = "support/eos.rs"] mod eos;`
//! next to `read_committed` and `support`.

#![allow(dead_code, reason = "each test binary uses part of it")]

use std::collections::BTreeMap;

use kafka_share_sink::KafkaAdmin;
use kafka_share_sink::producer::{KafkaProducer, KafkaProducerConfig, Producer, ProducerRecord};

use super::{read_committed, support};

pub(crate) struct Setup {
    pub(crate) bootstrap: String,
    pub(crate) source: String,
    pub(crate) target: String,
    pub(crate) group: String,
}

pub(crate) const PARTITIONS: i32 = 3;

/// Topics with `replicas` replicas and `records` source records.
pub(crate) async fn setup(bootstrap: String, records: usize, replicas: i16) -> Setup {
    let source = support::unique("eos-src");
    let target = format!("copy.{source}");
    let group = support::unique("eos-group");
    let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
    admin
        .create_topic(&source, PARTITIONS, replicas)
        .await
        .expect("source");
    admin
        .create_topic(&target, PARTITIONS, replicas)
        .await
        .expect("target");
    admin
        .set_share_group_config(&group, &[("share.auto.offset.reset", "earliest")])
        .await
        .expect("group config");
    let producer = KafkaProducer::connect(KafkaProducerConfig::new(bootstrap.clone()))
        .await
        .expect("producer");
    let mut sends = Vec::with_capacity(records);
    for i in 0..records {
        let partition = i32::try_from(i).expect("small") % PARTITIONS;
        sends.push(
            producer
                .send(
                    ProducerRecord::new(source.as_str())
                        .partition(partition)
                        .value(format!("r-{i}")),
                )
                .expect("send"),
        );
    }
    producer.flush().await.expect("flush");
    for s in sends {
        s.await.expect("delivered");
    }
    Setup {
        bootstrap,
        source,
        target,
        group,
    }
}

/// Every value of the target, read `read_committed`, with how often it was seen.
pub(crate) async fn output(s: &Setup) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for p in 0..PARTITIONS {
        for record in read_committed::read_committed(&s.bootstrap, &s.target, p).await {
            let value = String::from_utf8(record.value.map(|v| v.to_vec()).unwrap_or_default())
                .expect("utf8");
            *seen.entry(value).or_insert(0) += 1;
        }
    }
    seen
}

pub(crate) fn assert_exactly_once(seen: &BTreeMap<String, usize>, records: usize) {
    let duplicates: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicates.is_empty(),
        "duplicates in the output: {duplicates:?}"
    );
    let missing: Vec<usize> = (0..records)
        .filter(|i| !seen.contains_key(&format!("r-{i}")))
        .collect();
    assert!(
        missing.is_empty(),
        "{} records missing, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    assert_eq!(seen.len(), records, "unexpected values in the output");
}

/// Whether the group has finished every source record (share-group lag 0 everywhere).
pub(crate) async fn settled(s: &Setup) -> bool {
    let admin = KafkaAdmin::connect(&s.bootstrap).await.expect("admin");
    let offsets = admin.share_group_offsets(&s.group).await.expect("offsets");
    offsets.len() == PARTITIONS as usize && offsets.iter().all(|o| o.lag == Some(0))
}
