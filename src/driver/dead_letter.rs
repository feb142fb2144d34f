//! What the driver does around giving up on records, in both iterations: the dead-letter
//! circuit breaker's check before each dead-letter write or REJECT
//! ([`DeadLetterBreaker`](crate::DeadLetterBreaker)), and one dead-letter home per record:
//! how a record is acknowledged once its own dead-letter queue has it.

use tokio::time::Instant;

use super::failure::Failure;
use super::{ErrorChain, IterationReport, ShareSinkTask};
use crate::consumer::{AcknowledgeType, BrokerDeadLetterQueue, ShareConsumer};
use crate::dlq::BreakerTripped;
use crate::dlq::breaker::{BreakerWindow, SharedBreakerWindow};
use crate::error::{Error, Result};
use crate::record::{ConsumerRecord, RecordId, SinkRecord};

/// A record given up on and RELEASEd: its id and the delivery it is on, so that one on its
/// last allowed delivery (which the group archives when it comes back) is counted.
#[derive(Debug, Clone)]
pub(super) struct GivenUp {
    pub(super) id: RecordId,
    pub(super) delivery: u16,
}

/// A dead-letter write cut short by a dropped iteration: what it was writing (admitted to
/// the breaker at `admitted_at`), and the records held only while it ran (converted beside
/// them, not yet put). The next iteration, or `close`, finishes it.
#[derive(Debug)]
pub(super) struct InterruptedWrite {
    pub(super) letters: Vec<(ConsumerRecord, Failure)>,
    pub(super) admitted_at: Instant,
    pub(super) beside: Vec<GivenUp>,
}

impl From<&ConsumerRecord> for GivenUp {
    fn from(record: &ConsumerRecord) -> Self {
        Self {
            id: record.id(),
            delivery: record.delivery_count(),
        }
    }
}

impl From<&SinkRecord> for GivenUp {
    fn from(record: &SinkRecord) -> Self {
        Self {
            id: record.original_id().clone(),
            delivery: record.delivery_count(),
        }
    }
}

impl<C: ShareConsumer> ShareSinkTask<C> {
    /// The records finished with otherwise than given up on, as the counters have them: put
    /// (by `put` or in a committed transaction) or dropped by a transform.
    fn finished_otherwise(&self) -> u64 {
        self.metrics
            .records_put
            .saturating_add(self.metrics.records_filtered)
    }

    /// The records finished otherwise since the breaker's window last heard of them.
    fn finished_since_observed(&mut self) -> u64 {
        let finished = self.finished_otherwise();
        let added = finished.saturating_sub(self.breaker_observed);
        self.breaker_observed = finished;
        added
    }

    fn breaker_window(&self) -> std::sync::MutexGuard<'_, BreakerWindow> {
        self.breaker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Tells the breaker's window what was put or filtered by now; called after each
    /// iteration, so that records finished long ago do not count as recent.
    pub(super) fn observe_dead_letter_breaker(&mut self) {
        let added = self.finished_since_observed();
        self.breaker_window().observe(Instant::now(), added);
    }

    /// Shares the breaker's window with the drivers that ran the same task before (and after)
    /// this one, so that a restart does not start a fresh window. Its settings win over this
    /// driver's config.
    pub(crate) fn share_dead_letter_breaker(&mut self, window: SharedBreakerWindow) {
        self.breaker = window;
    }

    /// Before giving up on `n` records (a dead-letter write, or a REJECT): `Ok` and counted,
    /// or why the breaker trips (nothing counted; the trip is counted and logged at ERROR).
    pub(super) fn admit_dead_letters(&mut self, n: usize) -> Result<Instant, BreakerTripped> {
        let added = self.finished_since_observed();
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        let now = Instant::now();
        let admitted = self.breaker_window().admit(now, added, n);
        let Err(tripped) = admitted else {
            return Ok(now);
        };
        self.metrics.dead_letter_breaker_trips += 1;
        tracing::error!(
            records = n,
            given_up = tripped.given_up,
            finished = tripped.finished,
            window_ms = u64::try_from(tripped.window.as_millis()).unwrap_or(u64::MAX),
            setting = tripped.limit.key(),
            "{tripped}; the task stops"
        );
        Err(tripped)
    }

    /// Takes back from the breaker's count the records of `given_up`, admitted at `at`, that
    /// come back after all: their dead-letter write failed and they were released before their
    /// last delivery. Those on their last delivery stay counted: the group archives them.
    pub(super) fn refund_dead_letters(&mut self, at: Instant, given_up: &[GivenUp]) {
        let last = self.group_delivery_limit();
        let back = given_up.iter().filter(|g| g.delivery < last).count();
        if back > 0 {
            self.breaker_window()
                .refund(at, u64::try_from(back).unwrap_or(u64::MAX));
        }
    }

    /// Finishes a dead-letter write an iteration dropped: releases the records held only
    /// while it ran, takes its records back from the breaker's count, and writes them again.
    pub(super) async fn finish_interrupted_write(
        &mut self,
        report: &mut IterationReport,
    ) -> Result<()> {
        let Some(write) = self.interrupted_write.take() else {
            return Ok(());
        };
        tracing::warn!(
            records = write.letters.len(),
            beside = write.beside.len(),
            "the last iteration was dropped during a dead-letter write; writing its records \
             again and releasing those converted beside them"
        );
        let released = self.release_given_up(&write.beside);
        report.released += usize::try_from(released).unwrap_or(usize::MAX);
        // Released by this driver: back on their next delivery, they are not taken for
        // records a crash brought back.
        for record in &write.beside {
            self.redelivered_arrivals.note_released(&record.id);
        }
        self.breaker_window().refund(
            write.admitted_at,
            u64::try_from(write.letters.len()).unwrap_or(u64::MAX),
        );
        self.dead_letter_then_reject(write.letters, false, report)
            .await?;
        Ok(())
    }

    /// The breaker tripped: RELEASEs `records` (nothing is rejected or dead-lettered: the
    /// group delivers them again, or archives those on their last delivery), commits so that
    /// the releases take effect at once, and returns the error that stops the driver. Records
    /// it holds besides are released when it is closed, or come back when their locks expire.
    pub(super) async fn trip_dead_letter_breaker(
        &mut self,
        tripped: BreakerTripped,
        records: Vec<GivenUp>,
    ) -> Error {
        let released = self.release_given_up(&records);
        if let Err(e) = self.commit_acknowledgements().await {
            // Releases that did not reach the broker expire with their locks: the records
            // come back all the same.
            tracing::warn!(error = %ErrorChain(&e), "could not commit the releases of the tripped breaker");
        }
        tracing::info!(
            records = released,
            "dead-letter circuit breaker: released instead of dead-lettered"
        );
        Error::DeadLetterBreaker(tripped)
    }

    /// RELEASEs `records` (and forgets them as held); one no longer ours (a lock lost, already
    /// acknowledged, staged in a transaction) is skipped. Those on their last allowed delivery
    /// are counted as released at the limit, also when skipped: given up on, the group
    /// archives them however they go back (where the driver releases records one by one, as
    /// `release_failed_batch` does, it counts only those it released). One whose RELEASE
    /// failed otherwise stays with the consumer, whose close counts it. Returns how many were
    /// released.
    pub(super) fn release_given_up(&mut self, records: &[GivenUp]) -> u64 {
        let mut released = 0;
        let mut gone_back = Vec::with_capacity(records.len());
        for GivenUp { id, delivery } in records {
            self.held.remove(id);
            match self.consumer.acknowledge_offset(
                id.topic(),
                id.partition(),
                id.offset(),
                AcknowledgeType::Release,
            ) {
                Ok(()) => {
                    released += 1;
                    gone_back.push(*delivery);
                }
                Err(e) => {
                    if e.is_not_held() {
                        gone_back.push(*delivery);
                    }
                    tracing::debug!(record = %id, error = %ErrorChain(&e), "not released");
                }
            }
        }
        self.note_released_among(gone_back);
        self.metrics.records_released += released;
        self.acknowledged_since_commit += released;
        released
    }

    /// How a record is acknowledged once the driver's own dead-letter queue confirmed it: one
    /// home per record. A REJECTed record is written by the broker to the group's dead-letter
    /// queue (KIP-1191, Kafka 4.4) when the group has one, so it would be in both: it is
    /// ACCEPTed instead, also when the consumer cannot tell. Only a group known to have no
    /// such queue gets the REJECT, which archives the record and counts it as rejected.
    pub(super) fn acknowledgement_after_dead_letter(&self) -> AcknowledgeType {
        match self.consumer.broker_dead_letter_queue() {
            BrokerDeadLetterQueue::None => AcknowledgeType::Reject,
            _ => AcknowledgeType::Accept,
        }
    }
}
