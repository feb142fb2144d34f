//! Whether the topics of the exactly-once iteration exist: sources and targets checked once at
//! the setup ([`confirmed_partition_count`]), targets watched while a transaction's sends are slow
//! ([`watch_targets`]): a topic deleted meanwhile would keep its sends retrying until the
//! delivery timeout, and the next transaction's again.
//!
//! One answer that a topic is unknown is not proof that it is gone: a broker that restarted
//! a moment ago, or one whose metadata lags the controller's, answers
//! UNKNOWN_TOPIC_OR_PARTITION for a topic that exists. A topic counts as missing only when
//! [`CONFIRMATIONS`] answers in a row, [`WATCH_EVERY`] apart, say so.

use std::collections::HashMap;
use std::time::Duration;

use super::ErrorChain;
use crate::exactly_once::{ExactlyOnceCluster, ExactlyOnceError};

/// How long a transaction's sends may take before [`watch_targets`] first checks that their
/// topics still exist.
const WATCH_FIRST: Duration = Duration::from_secs(1);
/// How often it checks again.
const WATCH_EVERY: Duration = Duration::from_secs(2);
/// Answers in a row that must find a topic unknown before it counts as gone.
const CONFIRMATIONS: u32 = 2;

/// Completes with the first of `topics` found gone ([`GoneTopics`]), checking after
/// [`WATCH_FIRST`] and then every [`WATCH_EVERY`]; never while they all exist (or cannot be
/// checked).
///
/// # Cancel safety
///
/// Cancel safe: it only reads metadata; dropped, it forgets what it saw.
pub(super) async fn watch_targets(cluster: &dyn ExactlyOnceCluster, topics: &[String]) -> String {
    let mut gone = GoneTopics::default();
    let mut wait = WATCH_FIRST;
    loop {
        tokio::time::sleep(wait).await;
        wait = WATCH_EVERY;
        for topic in topics {
            let answer = match cluster.partition_count(topic).await {
                Ok(count) => Some(count.is_some()),
                Err(error) => {
                    tracing::debug!(%topic, error = %ErrorChain(&error), "could not check that a target exists");
                    None
                }
            };
            if gone.observe(topic, answer) {
                return topic.clone();
            }
        }
    }
}

/// The partition count of `topic`, `None` when [`CONFIRMATIONS`] answers in a row,
/// [`WATCH_EVERY`] apart, find it unknown (a topic that exists answers at once).
///
/// # Errors
///
/// The cluster's, as [`ExactlyOnceCluster::partition_count`] gives them.
///
/// # Cancel safety
///
/// Cancel safe: it only reads metadata.
pub(super) async fn confirmed_partition_count(
    cluster: &dyn ExactlyOnceCluster,
    topic: &str,
) -> Result<Option<i32>, ExactlyOnceError> {
    let mut gone = GoneTopics::default();
    loop {
        let count = cluster.partition_count(topic).await?;
        if count.is_some() || gone.observe(topic, Some(false)) {
            return Ok(count);
        }
        tokio::time::sleep(WATCH_EVERY).await;
    }
}

/// The unknown-topic answers in a row per topic, free of I/O.
#[derive(Debug, Default)]
struct GoneTopics {
    unknown_in_a_row: HashMap<String, u32>,
}

impl GoneTopics {
    /// Takes one check of `topic`: `Some(true)` it exists, `Some(false)` the broker does not
    /// know it, `None` the check failed (which neither confirms nor clears). True once the
    /// topic counts as gone.
    fn observe(&mut self, topic: &str, exists: Option<bool>) -> bool {
        match exists {
            Some(true) => {
                self.unknown_in_a_row.remove(topic);
                false
            }
            Some(false) => {
                let seen = self.unknown_in_a_row.entry(topic.to_owned()).or_default();
                *seen = seen.saturating_add(1);
                if *seen < CONFIRMATIONS {
                    tracing::debug!(%topic, "a target is unknown to the broker; checking again before taking it for gone");
                }
                *seen >= CONFIRMATIONS
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_unknown_answer_is_not_enough() {
        let mut gone = GoneTopics::default();
        assert!(!gone.observe("out", Some(false)));
        assert!(gone.observe("out", Some(false)));
    }

    #[test]
    fn an_answer_that_finds_the_topic_starts_the_count_again() {
        let mut gone = GoneTopics::default();
        assert!(!gone.observe("out", Some(false)));
        assert!(!gone.observe("out", Some(true)));
        assert!(!gone.observe("out", Some(false)));
        assert!(gone.observe("out", Some(false)));
    }

    #[test]
    fn a_failed_check_neither_confirms_nor_clears() {
        let mut gone = GoneTopics::default();
        assert!(!gone.observe("out", Some(false)));
        assert!(!gone.observe("out", None));
        assert!(gone.observe("out", Some(false)));
    }

    #[test]
    fn topics_are_counted_apart() {
        let mut gone = GoneTopics::default();
        assert!(!gone.observe("a", Some(false)));
        assert!(!gone.observe("b", Some(false)));
        assert!(!gone.observe("b", Some(true)));
        assert!(gone.observe("a", Some(false)));
        assert!(!gone.observe("b", Some(false)));
    }
}
