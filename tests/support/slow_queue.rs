//! A dead-letter queue that takes its time: for tests of what the driver does while a
//! dead-letter write runs, or when an iteration is dropped during one.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::{DeadLetterError, DeadLetterQueue, DeadLetterRecord};

/// Takes `delay` before each write (a slow or unavailable queue, up to its delivery timeout,
/// 120 s by default), then writes to `inner`.
#[derive(Debug)]
pub(crate) struct SlowQueue {
    pub(crate) inner: Arc<dyn DeadLetterQueue>,
    pub(crate) delay: Duration,
}

#[async_trait]
impl DeadLetterQueue for SlowQueue {
    fn topic(&self) -> &str {
        self.inner.topic()
    }

    async fn send(&self, records: Vec<DeadLetterRecord>) -> Result<(), DeadLetterError> {
        tokio::time::sleep(self.delay).await;
        self.inner.send(records).await
    }
}
