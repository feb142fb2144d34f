//! Counts of the share-group requests the engine sends, read by the consumer's
//! [`request_counts`](crate::KafkaShareConsumer::request_counts).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::kafka::codec::share_v2::FetchTopic;

/// How many ShareFetch and ShareAcknowledge requests a [`KafkaShareConsumer`] sent, and how
/// its acknowledgements travelled: riding on a ShareFetch (no round trip of their own) or in
/// a ShareAcknowledge (a commit, close, RENEW, or acknowledgements that waited too long for a
/// fetch). Counted when a request is sent, whatever its answer.
///
/// Offsets are counted as the acknowledgement ranges span them, gaps included.
///
/// [`KafkaShareConsumer`]: crate::KafkaShareConsumer
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestCounts {
    /// ShareFetch requests.
    pub share_fetches: u64,
    /// ShareFetch requests that carried acknowledgements.
    pub share_fetches_with_acknowledgements: u64,
    /// ShareAcknowledge requests.
    pub share_acknowledges: u64,
    /// Offsets acknowledged on ShareFetch requests.
    pub offsets_acknowledged_on_fetch: u64,
    /// Offsets acknowledged in ShareAcknowledge requests.
    pub offsets_acknowledged_alone: u64,
}

/// The engine's side: atomics, bumped once per request sent.
#[derive(Debug, Default)]
pub(crate) struct RequestCounters {
    share_fetches: AtomicU64,
    share_fetches_with_acknowledgements: AtomicU64,
    share_acknowledges: AtomicU64,
    offsets_acknowledged_on_fetch: AtomicU64,
    offsets_acknowledged_alone: AtomicU64,
}

impl RequestCounters {
    pub(crate) fn fetch_sent(&self, topics: &[FetchTopic]) {
        self.share_fetches.fetch_add(1, Ordering::Relaxed);
        let offsets = acknowledged_offsets(topics);
        if offsets > 0 {
            self.share_fetches_with_acknowledgements
                .fetch_add(1, Ordering::Relaxed);
            self.offsets_acknowledged_on_fetch
                .fetch_add(offsets, Ordering::Relaxed);
        }
    }

    pub(crate) fn acknowledge_sent(&self, topics: &[FetchTopic]) {
        self.share_acknowledges.fetch_add(1, Ordering::Relaxed);
        self.offsets_acknowledged_alone
            .fetch_add(acknowledged_offsets(topics), Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> RequestCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RequestCounts {
            share_fetches: get(&self.share_fetches),
            share_fetches_with_acknowledgements: get(&self.share_fetches_with_acknowledgements),
            share_acknowledges: get(&self.share_acknowledges),
            offsets_acknowledged_on_fetch: get(&self.offsets_acknowledged_on_fetch),
            offsets_acknowledged_alone: get(&self.offsets_acknowledged_alone),
        }
    }
}

/// The offsets the acknowledgement ranges of a request span.
fn acknowledged_offsets(topics: &[FetchTopic]) -> u64 {
    topics
        .iter()
        .flat_map(|t| &t.partitions)
        .flat_map(|p| &p.acknowledgement_batches)
        .map(|b| {
            b.last_offset
                .checked_sub(b.first_offset)
                .and_then(|d| d.checked_add(1))
                .and_then(|n| u64::try_from(n).ok())
                .unwrap_or(0)
        })
        .fold(0, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::codec::share_v2::{AcknowledgementBatch, FetchPartition};

    fn topic(batches: &[(i64, i64)]) -> FetchTopic {
        FetchTopic {
            partitions: vec![FetchPartition {
                acknowledgement_batches: batches
                    .iter()
                    .map(|&(first_offset, last_offset)| AcknowledgementBatch {
                        first_offset,
                        last_offset,
                        acknowledge_types: vec![1],
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn counts_requests_and_the_offsets_their_ranges_span() {
        let counters = RequestCounters::default();
        counters.fetch_sent(&[topic(&[])]);
        counters.fetch_sent(&[topic(&[(0, 9), (12, 12)]), topic(&[(5, 6)])]);
        counters.acknowledge_sent(&[topic(&[(20, 29)])]);
        // A range the wrong way round counts nothing (and does not wrap).
        counters.acknowledge_sent(&[topic(&[(9, 0)])]);
        assert_eq!(
            counters.snapshot(),
            RequestCounts {
                share_fetches: 2,
                share_fetches_with_acknowledgements: 1,
                share_acknowledges: 2,
                offsets_acknowledged_on_fetch: 13,
                offsets_acknowledged_alone: 10,
            }
        );
    }
}
