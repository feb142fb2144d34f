//! What the engine knows of the cluster: brokers, topic ids and partition leaders, refreshed
//! with Metadata.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use crate::kafka::cluster::metadata;
use crate::kafka::error::ClientError;
use crate::kafka::net::connection::Connection;
use crate::kafka::session::book::{NodeId, SessionPartition};
use crate::record::TopicPartition;
use crate::topic_name::TopicName as RecordTopic;

/// Java's `metadata.max.age.ms`.
pub(crate) const METADATA_MAX_AGE: Duration = Duration::from_secs(300);

#[derive(Debug, Clone)]
pub(crate) struct TopicMeta {
    /// Interned: every record of the topic carries it.
    pub(crate) name: RecordTopic,
    pub(crate) leaders: HashMap<i32, NodeId>,
}

/// Brokers, topic ids and leaders of the subscribed topics.
#[derive(Debug, Default, Clone)]
pub(crate) struct Cluster {
    pub(crate) brokers: HashMap<NodeId, String>,
    pub(crate) by_id: HashMap<Uuid, TopicMeta>,
    pub(crate) by_name: HashMap<Arc<str>, Uuid>,
    /// Something suggested the leaders moved: refresh before the next fetch.
    pub(crate) stale: bool,
    pub(crate) refreshed: Option<Instant>,
    /// The subscribed topics the last answer named with an error, and the error code.
    pub(crate) topic_errors: Vec<(String, i16)>,
}

impl Cluster {
    /// The topic id and leader of a partition, if known.
    pub(crate) fn leader(&self, tp: &TopicPartition) -> Option<(Uuid, NodeId)> {
        let id = *self.by_name.get(tp.topic())?;
        let leader = *self.by_id.get(&id)?.leaders.get(&tp.partition())?;
        Some((id, leader))
    }

    /// True when Metadata should be asked again before fetching `assignment`.
    pub(crate) fn needs_refresh(&self, assignment: &[(Uuid, Vec<i32>)], now: Instant) -> bool {
        self.stale
            || self
                .refreshed
                .is_none_or(|at| now.saturating_duration_since(at) >= METADATA_MAX_AGE)
            || assignment
                .iter()
                .any(|(id, _)| !self.by_id.contains_key(id))
    }

    /// The assigned partitions by their leader. A partition without a known leader marks the
    /// metadata stale and is left out until it has one.
    pub(crate) fn targets(
        &mut self,
        assignment: &[(Uuid, Vec<i32>)],
    ) -> HashMap<NodeId, BTreeSet<SessionPartition>> {
        let mut targets: HashMap<NodeId, BTreeSet<SessionPartition>> = HashMap::new();
        for (id, partitions) in assignment {
            let Some(meta) = self.by_id.get(id) else {
                continue;
            };
            for p in partitions {
                match meta.leaders.get(p) {
                    Some(node) => {
                        targets.entry(*node).or_default().insert((*id, *p));
                    }
                    None => self.stale = true,
                }
            }
        }
        targets
    }

    /// Merges a fresh answer in. A topic missing from it keeps what was known of it: records
    /// may still arrive for it on an open session, and the application may still acknowledge
    /// records of a topic it no longer subscribes to. Only one the answer named with an error
    /// (`errored`: a leader election, a deletion) leaves the metadata stale; one it left out
    /// (no longer asked for) is never in an answer again, and asking again for it would never
    /// end.
    pub(crate) fn update(&mut self, fresh: Cluster, errored: &[&str]) {
        let old = std::mem::replace(self, fresh);
        for (id, meta) in old.by_id {
            if !self.by_id.contains_key(&id) && !self.by_name.contains_key(meta.name.as_str()) {
                if errored.contains(&meta.name.as_str()) {
                    self.stale = true;
                }
                self.by_name.insert(meta.name.to_arc(), id);
                self.by_id.insert(id, meta);
            }
        }
        for (node, addr) in old.brokers {
            self.brokers.entry(node).or_insert(addr);
        }
    }
}

/// Asks `conn` for the leaders of `topics` (Metadata v10 or later: the engine needs topic
/// ids).
pub(crate) async fn fetch_metadata(
    conn: Connection,
    topics: Vec<String>,
) -> Result<Cluster, ClientError> {
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let snapshot = metadata::fetch(&conn, Some(&names), metadata::WITH_TOPIC_IDS).await?;
    let mut cluster = Cluster {
        refreshed: Some(Instant::now()),
        brokers: snapshot.brokers.into_iter().collect(),
        ..Cluster::default()
    };
    for (name, topic) in snapshot.topics {
        if topic.error_code != 0 {
            tracing::debug!(topic = %name, code = topic.error_code, "metadata error for topic");
            cluster.topic_errors.push((name, topic.error_code));
            continue;
        }
        // Only subscribed topics are asked for, so the interned names stay few.
        let name = RecordTopic::interned(&name);
        // A partition without a leader is left out: asking again finds it.
        let leaders = topic
            .partitions
            .iter()
            .filter_map(|(index, p)| Some((*index, p.leader?)))
            .collect();
        cluster.by_name.insert(Arc::from(name.as_str()), topic.id);
        cluster.by_id.insert(topic.id, TopicMeta { name, leaders });
    }
    Ok(cluster)
}
