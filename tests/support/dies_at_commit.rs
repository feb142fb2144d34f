//! A producer whose process dies at its first commit, before or after passing the commit on:
//! the call never returns, as a killed process's would not. Wraps any `Producer` (Kafka or
//! embedded). Include with `#[path = "support/dies_at_commit.rs"] mod dies_at_commit;`.

#![allow(dead_code, reason = "each test binary uses part of it")]

use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use kafka_share_sink::producer::{DeliveryFuture, Producer, ProducerError, ProducerRecord};

#[derive(Debug)]
pub(crate) struct DiesAtCommit<P> {
    inner: P,
    after: bool,
    died: AtomicBool,
}

impl<P> DiesAtCommit<P> {
    /// Dies at the commit: before passing it on, or (`after`) once it went through.
    pub(crate) fn new(inner: P, after: bool) -> Self {
        Self {
            inner,
            after,
            died: AtomicBool::new(false),
        }
    }

    /// Whether the commit was reached.
    pub(crate) fn died(&self) -> bool {
        self.died.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl<P: Producer> Producer for DiesAtCommit<P> {
    fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture, ProducerError> {
        self.inner.send(record)
    }
    async fn ready(&self) -> Result<(), ProducerError> {
        self.inner.ready().await
    }
    async fn flush(&self) -> Result<(), ProducerError> {
        self.inner.flush().await
    }
    fn transactional_id(&self) -> Option<&str> {
        self.inner.transactional_id()
    }
    async fn init_transactions(&self) -> Result<(), ProducerError> {
        self.inner.init_transactions().await
    }
    fn begin_transaction(&self) -> Result<(), ProducerError> {
        self.inner.begin_transaction()
    }
    async fn commit_transaction(&self) -> Result<(), ProducerError> {
        if self.after {
            self.inner.commit_transaction().await?;
        }
        self.died.store(true, Ordering::SeqCst);
        std::future::pending().await
    }
    async fn abort_transaction(&self) -> Result<(), ProducerError> {
        self.inner.abort_transaction().await
    }
}
