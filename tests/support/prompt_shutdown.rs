//! `run` with a shutdown signal that comes while the driver waits.

use std::time::Duration;

use kafka_share_sink::{ShareConsumer, ShareSinkTask};

/// Runs `driver` with a shutdown signal after 5 s (tokio clock) and asserts that it stopped
/// within 10 s: the shutdown was taken during whatever wait it was in, not after it.
pub(crate) async fn run_until_shutdown_at_5_s<C: ShareConsumer>(driver: &mut ShareSinkTask<C>) {
    let start = tokio::time::Instant::now();
    let run = driver.run(tokio::time::sleep(Duration::from_secs(5)));
    tokio::time::timeout(Duration::from_secs(3600), run)
        .await
        .expect("run did not stop within an hour of the shutdown")
        .expect("run");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "stopped after {:?}",
        start.elapsed()
    );
}
