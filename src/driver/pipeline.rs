//! The driver's conversion stage: poll, then key → value → header converters and the
//! transform chain for each record, with Connect's retry and tolerance rules
//! (`errors.retry.timeout`, `errors.tolerance`, `errors.log.*`).
//!
//! A filtered record is ACCEPTed at once, as Connect advances past it. A record that cannot
//! be converted stops the task under `errors.tolerance=none` (the whole poll is RELEASEd, so
//! nothing is lost) and is skipped under `all`: written to the dead-letter queue when one is
//! set, then REJECTed (accepted by the next poll in implicit acknowledgement mode, where a
//! failed dead-letter write stops the driver instead, so that close releases the poll).

use std::time::Duration;

use tokio::time::Instant;

use super::dead_letter::GivenUp;
use super::failure::Failure;
use super::held::retry_backoff;
use super::{
    ErrorChain, ErrorTolerance, IterationReport, ShareSinkTask, Split, Unfinished, Unheld,
};
use crate::consumer::{AcknowledgeType, AcknowledgementMode, ShareConsumer};
use crate::convert::StageFailure;
use crate::delivered::Delivered;
use crate::error::{Error, Result};
use crate::record::{ConsumerRecord, RecordId, SinkRecord};
use crate::time::deadline_after;

impl<C: ShareConsumer> ShareSinkTask<C> {
    /// Polls and builds the batch for `put`.
    pub(super) async fn poll_batch(&mut self, report: &mut IterationReport) -> Result<()> {
        // The last batch is finished: dropped before the poll waits, its records no longer
        // keep their fetch answer in memory while the next one arrives.
        self.batch.clear();
        self.batch_bytes.clear();
        self.raw.clear();
        self.batch_is_poll = false;
        self.batch_delivered.clear();
        let polled_at = Instant::now();
        let records = self.poll_consumer().await?;
        if !records.is_empty() {
            // Until `put` returned: see `resume_unfinished`.
            self.unfinished = Some(Unfinished::Converting);
        }
        self.batch.reserve(records.len());
        let last_delivery = self.last_delivery_limit();
        self.note_poll_acquired(polled_at);
        self.metrics.records_read += records.len() as u64;
        let passthrough = self.config.converters.is_byte_array()
            && self.config.transforms.is_empty()
            && !self.keeps_raw();
        // Record sizes bound what waits for a flush: needed only under after.flush.
        let track_bytes = self.tracks_flush_bytes();
        if passthrough && self.held.is_empty() {
            // Nothing to convert, filter or hold back: build the batch in one pass of known
            // length, which writes each record in place (no per-record move of a large
            // struct), counting as it goes.
            if track_bytes {
                self.batch_bytes.extend(records.iter().map(record_size));
            }
            // One pass over the records while the fetch has just written them: delivery
            // counts, and the batch's coordinates for `pre_commit`.
            let (redelivered, last) =
                count_and_note(&records, last_delivery, &mut self.batch_delivered);
            if records.iter().all(|r| r.headers().is_empty()) {
                let mut records = records;
                extend_batch_in_place(&mut self.batch, &mut records);
            } else {
                self.batch
                    .extend(records.into_iter().map(SinkRecord::from_consumer_record));
            }
            self.metrics.records_redelivered += redelivered;
            self.metrics.records_last_delivery += last as u64;
            report.last_delivery += last;
            self.batch_is_poll = true;
            self.built_whole();
            return Ok(());
        }
        let mut failed: Vec<(ConsumerRecord, StageFailure)> = Vec::new();
        let mut records = records.into_iter();
        while let Some(record) = records.next() {
            if record.delivery_count() > 1 {
                self.metrics.records_redelivered += 1;
            }
            let last = record.delivery_count() >= last_delivery;
            if last {
                self.metrics.records_last_delivery += 1;
                report.last_delivery += 1;
            }
            if !self.held.is_empty() {
                let id = record.id();
                if self.held.contains(&id) {
                    // Written already and waiting for a flush, but its lock ran out and the
                    // group handed it to us again: hold it anew instead of writing it twice.
                    self.metrics.lock_losses += 1;
                    if last {
                        self.metrics.last_delivery_lock_losses += 1;
                    }
                    self.consumer
                        .hold_offset(id.topic(), id.partition(), id.offset())?;
                    self.held.touch(&id, self.batch_acquired);
                    continue;
                }
            }
            let size = if track_bytes { record_size(&record) } else { 0 };
            if passthrough {
                self.batch.push(SinkRecord::from_consumer_record(record));
                if track_bytes {
                    self.batch_bytes.push(size);
                }
                continue;
            }
            let poll = Converting {
                batch: true,
                converted: &[],
                failed: &failed,
                rest: records.as_slice(),
            };
            match self.process(&record, poll).await {
                Ok(Some(sink)) => {
                    self.batch.push(sink);
                    if track_bytes {
                        self.batch_bytes.push(size);
                    }
                    if self.keeps_raw() {
                        self.raw.push(record);
                    }
                }
                Ok(None) => {
                    self.metrics.records_filtered += 1;
                    report.filtered += 1;
                    report.accepted += 1;
                    self.acknowledged_since_commit += 1;
                    if !self.implicit() {
                        self.consumer
                            .acknowledge(&record, AcknowledgeType::Accept)?;
                    }
                }
                Err(failure) => {
                    self.metrics.record_errors += 1;
                    self.log_error(&record, &failure);
                    if self.config.errors.tolerance == ErrorTolerance::None {
                        let rest: Vec<ConsumerRecord> = records.collect();
                        return Err(self.stop_on_record_error(record, failure, rest).await);
                    }
                    failed.push((record, failure));
                }
            }
        }
        if !failed.is_empty() {
            self.skip_failed(failed, report).await?;
        }
        self.built_whole();
        Ok(())
    }

    /// Sets `batch_acquired` for the records of the poll started at `poll_started`. Records
    /// fetched ahead were acquired before the poll: their locks run from then; so do those
    /// of records presented again after a dropped iteration renewed them.
    pub(super) fn note_poll_acquired(&mut self, poll_started: Instant) {
        self.batch_acquired = self
            .consumer
            .last_poll_acquired_at()
            .into_iter()
            .chain(self.presented_again_from.take())
            .fold(poll_started, Instant::min);
    }

    /// The batch holds every record of the poll it is to hold: dropped from here on, the
    /// iteration can put it again.
    fn built_whole(&mut self) {
        if self.unfinished.is_some() {
            self.unfinished = Some(Unfinished::Putting);
        }
    }

    /// Converts and transforms one record of `poll`, retrying retriable failures for
    /// `errors.retry.timeout` with Connect's backoff, the poll's locks renewed meanwhile.
    /// `Ok(None)`: filtered.
    pub(super) async fn process(
        &mut self,
        record: &ConsumerRecord,
        poll: Converting<'_>,
    ) -> std::result::Result<Option<SinkRecord>, StageFailure> {
        let timeout = self.config.errors.retry_timeout;
        // errors.retry.timeout=0 (the default): a failure is final, and no clock is read
        // for a record that converts.
        let no_retry = timeout.is_some_and(|t| t.is_zero());
        let deadline = if no_retry {
            None
        } else {
            timeout.map(|t| deadline_after(Instant::now(), t))
        };
        let mut attempt = 0;
        loop {
            let result = self
                .config
                .converters
                .convert(record)
                .and_then(|sink| self.config.transforms.apply(sink));
            let failure = match result {
                Ok(outcome) => return Ok(outcome),
                Err(failure) => failure,
            };
            self.metrics.record_failures += 1;
            if !failure.is_retriable() || no_retry {
                return Err(failure);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(failure);
            }
            attempt += 1;
            self.metrics.retries += 1;
            let mut delay = retry_backoff(attempt, self.config.errors.retry_delay_max);
            if let Some(d) = deadline {
                delay = delay.min(d.saturating_duration_since(now));
            }
            tracing::debug!(stage = %failure.stage(), attempt, ?delay, "retriable failure, retrying");
            self.sleep_converting(delay, record, &poll).await;
        }
    }

    /// Waits `delay` before a conversion is tried again, renewing at half their lock the
    /// records of the poll not settled yet (`record`, and those `poll` names) and the held
    /// ones: retries may run for `errors.retry.timeout`, far past a lock. The poll's records
    /// are renewed, not held: the consumer presents them again at its next poll if the
    /// iteration is dropped before they are settled, so that they are converted again.
    async fn sleep_converting(
        &mut self,
        delay: Duration,
        record: &ConsumerRecord,
        poll: &Converting<'_>,
    ) {
        let sleep = tokio::time::sleep(delay);
        if !self.can_renew() {
            // Implicit mode, or a broker without RENEW: the locks run from the poll.
            return sleep.await;
        }
        let batch: &[SinkRecord] = if poll.batch { &self.batch } else { &[] };
        let unsettled: Vec<RecordId> = batch
            .iter()
            .map(|r| r.original_id().clone())
            .chain(poll.converted.iter().map(ConsumerRecord::id))
            .chain(std::iter::once(record.id()))
            .chain(poll.failed.iter().map(|(r, _)| r.id()))
            .chain(poll.rest.iter().map(ConsumerRecord::id))
            .collect();
        let Split {
            renewal,
            batch_acquired,
            ..
        } = self.split_for_wait("a conversion retry");
        renewal
            .around(sleep, Some((Unheld::Renew(&unsettled), batch_acquired)))
            .await;
    }

    /// Connect's `LogReporter`, through tracing, under `errors.log.enable`.
    pub(super) fn log_error(&mut self, record: &ConsumerRecord, failure: &StageFailure) {
        let (enabled, include_messages) = self.config.errors.log_value();
        if !enabled {
            return;
        }
        self.metrics.errors_logged += 1;
        let task = format!("{}-{}", self.config.connector_name, self.config.task_id);
        if include_messages {
            tracing::error!(
                task = %task,
                stage = %failure.stage(),
                class = failure.class_name(),
                topic = record.topic(),
                partition = record.partition(),
                offset = record.offset(),
                timestamp = record.timestamp(),
                timestamp_type = ?record.timestamp_type(),
                error = %ErrorChain(failure),
                "Error encountered in task {task}. Executing stage '{}' with class '{}', where consumed record is {{topic='{}', partition={}, offset={}, timestamp={}, timestampType={:?}}}.",
                failure.stage(),
                failure.class_name(),
                record.topic(),
                record.partition(),
                record.offset(),
                record.timestamp(),
                record.timestamp_type(),
            );
        } else {
            tracing::error!(
                task = %task,
                stage = %failure.stage(),
                class = failure.class_name(),
                error = %ErrorChain(failure),
                "Error encountered in task {task}. Executing stage '{}' with class '{}'.",
                failure.stage(),
                failure.class_name(),
            );
        }
    }

    /// `errors.tolerance=none`: RELEASE everything this poll brought (the failing record, the
    /// records converted before it, those not reached yet), commit, and fail the task.
    pub(super) async fn stop_on_record_error(
        &mut self,
        record: ConsumerRecord,
        failure: StageFailure,
        rest: Vec<ConsumerRecord>,
    ) -> Error {
        let id = record.id();
        if self.consumer.acknowledgement_mode() == AcknowledgementMode::Explicit {
            // Released on their last delivery (the failing record and the others of its
            // poll, which share its count when it failed before), the group archives them.
            let poll: Vec<GivenUp> = std::iter::once(GivenUp::from(&record))
                .chain(self.batch.iter().map(GivenUp::from))
                .chain(rest.iter().map(GivenUp::from))
                .collect();
            self.release_given_up(&poll);
            if let Err(e) = self.commit_acknowledgements().await {
                // The task's own error matters more. Releases that did not reach the broker
                // expire with their locks and the records come back: nothing is lost.
                tracing::warn!(error = %ErrorChain(&e), "could not commit the releases");
            }
        }
        self.batch.clear();
        self.raw.clear();
        tracing::error!(record = %id, error = %ErrorChain(&failure), "record could not be processed and errors.tolerance=none: stopping");
        Error::Record {
            record: id,
            source: failure,
        }
    }

    /// `errors.tolerance=all`: the failed records are skipped, written to the dead-letter
    /// queue first when one is set.
    async fn skip_failed(
        &mut self,
        failed: Vec<(ConsumerRecord, StageFailure)>,
        report: &mut IterationReport,
    ) -> Result<()> {
        let failed: Vec<(ConsumerRecord, Failure)> = failed
            .into_iter()
            .map(|(record, failure)| {
                let failure = Failure::of_stage(&failure);
                (record, failure)
            })
            .collect();
        let skipped = match self.dead_letter_then_reject(failed, true, report).await {
            Ok(n) => n,
            // Implicit mode releases nothing one by one: the stopped driver's close does.
            Err(error @ Error::DeadLetterBreaker(_)) if !self.implicit() => {
                // The records converted beside the failed ones were not put: released too.
                let given_up: Vec<GivenUp> = self.batch.iter().map(GivenUp::from).collect();
                self.release_given_up(&given_up);
                self.batch.clear();
                self.raw.clear();
                if let Err(e) = self.commit_acknowledgements().await {
                    tracing::warn!(error = %ErrorChain(&e), "could not commit the releases");
                }
                return Err(error);
            }
            Err(error) => return Err(error),
        };
        self.metrics.records_skipped += skipped as u64;
        Ok(())
    }
}

/// The records of a poll being converted, besides the one converted now: what a
/// conversion retry keeps acquired.
pub(super) struct Converting<'a> {
    /// The driver's batch holds the records of this poll converted so far.
    pub(super) batch: bool,
    /// Records of this poll converted so far, kept elsewhere than the driver's batch.
    pub(super) converted: &'a [ConsumerRecord],
    /// Records of this poll that failed, to be skipped when the poll is converted.
    pub(super) failed: &'a [(ConsumerRecord, StageFailure)],
    /// Records of this poll not converted yet.
    pub(super) rest: &'a [ConsumerRecord],
}

/// How many of `records` were redelivered and how many are on their last delivery, noting
/// their coordinates in `delivered`. In passes of their own: counters updated inside the
/// conversion's closure live in memory, one store-to-load chain per record.
fn count_and_note(
    records: &[ConsumerRecord],
    last_delivery: u16,
    delivered: &mut Delivered,
) -> (u64, usize) {
    delivered.extend_polled(records);
    records.iter().fold((0, 0), |(redelivered, last), record| {
        let count = record.delivery_count();
        (
            redelivered + u64::from(count > 1),
            last + usize::from(count >= last_delivery),
        )
    })
}

/// Converts records without headers into `batch` in one pass of known length, reading each
/// in place (see [`SinkRecord::take_from_consumer_record_without_headers`]).
#[inline]
fn extend_batch_in_place(batch: &mut Vec<SinkRecord>, records: &mut [ConsumerRecord]) {
    let schema = SinkRecord::optional_bytes_schema();
    batch.extend(
        records
            .iter_mut()
            .map(|record| SinkRecord::take_from_consumer_record_without_headers(record, schema)),
    );
}

/// The bytes of a record's key, value and headers as polled.
fn record_size(record: &ConsumerRecord) -> u64 {
    let len = |b: Option<&bytes::Bytes>| b.map_or(0, |b| b.len() as u64);
    let headers: u64 = record
        .headers()
        .iter()
        .map(|h| (h.key().len() as u64).saturating_add(len(h.value())))
        .fold(0, u64::saturating_add);
    len(record.key())
        .saturating_add(len(record.value()))
        .saturating_add(headers)
}
