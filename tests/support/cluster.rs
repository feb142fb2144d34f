//! The three-node cluster of `scripts/kafka.sh` (`KAFKA_NODES=3`) for tests that kill its
//! brokers. Include with `#[path = "support/cluster.rs"] mod cluster;` next to `support`.

#![allow(dead_code, reason = "each test binary uses part of it")]

use std::path::PathBuf;

use super::support;

/// The bootstrap list and the `scripts/kafka.sh` of the cluster, or `None` to skip.
pub(crate) fn cluster(test: &str) -> Option<(String, PathBuf)> {
    support::bootstrap(test)?;
    let bootstrap = match std::env::var("KAFKA_MULTI_BOOTSTRAP") {
        Ok(list) if !list.trim().is_empty() => list.trim().to_owned(),
        _ if std::env::var("KAFKA_REQUIRE_BROKER").as_deref() == Ok("1") => panic!(
            "{test}: KAFKA_REQUIRE_BROKER=1 but KAFKA_MULTI_BOOTSTRAP is not set: start a cluster \
             with KAFKA_NODES=3 scripts/kafka.sh start and export what `scripts/kafka.sh env` prints"
        ),
        _ => {
            eprintln!("SKIPPED {test}: needs a multi-broker cluster (KAFKA_MULTI_BOOTSTRAP)");
            return None;
        }
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let ours = std::fs::read_to_string(root.join("target/kafka/cluster/bootstrap")).ok();
    if ours.as_deref().map(str::trim) != Some(bootstrap.as_str()) {
        assert!(
            std::env::var("KAFKA_REQUIRE_BROKER").as_deref() != Ok("1"),
            "{test}: KAFKA_MULTI_BOOTSTRAP is not the cluster of scripts/kafka.sh"
        );
        eprintln!("SKIPPED {test}: the cluster is not the one of scripts/kafka.sh");
        return None;
    }
    Some((bootstrap, root.join("scripts/kafka.sh")))
}

/// Kills a node now; starts it again when dropped (even when the test fails), so later
/// tests find every broker.
pub(crate) struct Killed {
    script: PathBuf,
    node: String,
}

impl Killed {
    pub(crate) fn node(script: &PathBuf, node: i32) -> Self {
        let node = node.to_string();
        let status = std::process::Command::new(script)
            .args(["kill-node", &node])
            .status()
            .expect("run scripts/kafka.sh");
        assert!(status.success(), "kill-node {node}: {status}");
        Self {
            script: script.clone(),
            node,
        }
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = std::process::Command::new(&self.script)
            .args(["start-node", &self.node])
            .status();
    }
}
