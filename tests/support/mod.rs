//! Shared helpers of the real-broker tests.
//!
//! The broker address comes from `KAFKA_BOOTSTRAP`, which `scripts/test.sh` sets after starting
//! a broker. Under that script `KAFKA_REQUIRE_BROKER=1` is set too, and a missing broker fails the
//! test. A plain `cargo test` without a broker skips the broker tests and says so.

#![allow(dead_code)]

/// The broker address, or `None` (with a note on stderr) when the tests may be skipped.
///
/// # Panics
///
/// When `KAFKA_REQUIRE_BROKER=1` and no address is set: the test command promised a broker.
pub(crate) fn bootstrap(test: &str) -> Option<String> {
    match std::env::var("KAFKA_BOOTSTRAP") {
        Ok(addr) if !addr.trim().is_empty() => Some(addr.trim().to_owned()),
        _ if std::env::var("KAFKA_REQUIRE_BROKER").as_deref() == Ok("1") => {
            panic!(
                "{test}: KAFKA_REQUIRE_BROKER=1 but KAFKA_BOOTSTRAP is not set: start a broker with scripts/kafka.sh"
            )
        }
        _ => {
            eprintln!("SKIPPED {test}: no broker (set KAFKA_BOOTSTRAP, or run ./scripts/test.sh)");
            None
        }
    }
}

/// A name unique to this test run, for topics and groups.
pub(crate) fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
