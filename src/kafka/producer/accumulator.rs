//! The records waiting to be written: per partition, batches in `send` order, with the
//! idempotent producer's sequence bookkeeping. Free of I/O: the sender asks what to send
//! ([`Accumulator::drain`]) and reports each answer ([`Accumulator::complete`]).
//!
//! # Sequence rules (idempotence)
//!
//! - A batch gets its producer id, epoch and base sequence when it is first sent, and is
//!   encoded once: every retry sends the same bytes (never re-batched).
//! - Up to `max_in_flight` batches of a partition are in flight, once one batch of the
//!   partition was confirmed under the current epoch (before that, one at a time: a broker
//!   that has no state for the producer on a partition takes any first sequence, so a
//!   second batch could be written while the first failed, e.g. with NOT_LEADER right
//!   after the topic was created). After any failure of a partition's batch, the partition
//!   sends one batch at a time, lowest sequence first, until nothing waits for a retry:
//!   retries never overtake each other.
//! - DUPLICATE_SEQUENCE_NUMBER is success (offset -1).
//! - A batch given up with its sequence (rejected, timed out, out of order at the head of
//!   the partition) leaves a gap: later batches of the partition get OUT_OF_ORDER from the
//!   broker, which then only means "not written". The idempotent producer then bumps its
//!   epoch (as Java's does since KIP-360): it waits until no batch is in flight and every
//!   batch whose write is unknown (lost answer) is resolved, asks InitProducerId for the
//!   next epoch, and gives the batches still waiting new sequences from 0 (same records,
//!   same batches, re-encoded under the new epoch). UNKNOWN_PRODUCER_ID (the broker forgot
//!   the producer) is handled the same way, the batch kept for a retry after the bump.
//! - In a transaction a gap is not repaired: the transaction must be aborted.
//!
//! # Batch size
//!
//! A batch is closed (ready to send) once it holds `batch.size` bytes, as in Java, unless its
//! partition could not send it now anyway: while a batch of the partition waits ahead of it,
//! or the partition has as many batches in flight as it may, or a retry or an epoch bump is
//! pending, the open batch keeps taking records up to `max_batch_size` (the smaller of
//! `max.request.size` and 256 KiB). A burst of sends
//! (a transaction's outputs, then `flush`) thus goes out in a few full requests instead of
//! one 16 KiB batch per round trip; a steady trickle is batched as before.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::fast_map::FastMap;
use super::outstanding::Outstanding;
use crate::kafka::codec::record_batch::{
    Compression, EncodeOptions, NewRecord, encode_batch_pooled,
};
use crate::kafka::net::frame_pool::{FramePool, PoolLimits};
use crate::producer::record::DeliverySender;
use crate::producer::{ProducerError, RecordMetadata};
use crate::time::deadline_after;

/// A topic partition.
pub(crate) type Tp = (Arc<str>, i32);

/// Bytes a record adds to a batch beyond its key, value and headers (varints, deltas).
const RECORD_OVERHEAD: usize = 21;
/// The fixed header of a record batch.
pub(crate) const BATCH_OVERHEAD: usize = 61;
/// The most an open batch grows past `batch.size` while its partition is backed up. Within
/// the broker's default `message.max.bytes` (1 MiB plus a batch header), so a grown batch fits
/// any topic with the default limit; 256 KiB because, measured side by side (benches/BENCHMARKS.md,
/// 2026-12-05), it sends as fast as 1 MiB (producer and exactly-once mirror rows) with 30 %
/// less peak memory and CPU per record, where 128 KiB slows the mirror's transactions.
pub(crate) const GROWN_BATCH_MAX: usize = 1 << 18;

/// The buffers a producer encodes its batches into and reuses, as Java's `BufferPool` (a
/// new buffer per batch costs the first touch of its pages, each batch again): batches from
/// 4 KiB (smaller ones are cheap to allocate) to 2 MiB, at most 32 idle buffers of at most
/// 4 MiB together.
const BATCH_BUFFERS: PoolLimits = PoolLimits {
    min: 4 << 10,
    max: 2 << 20,
    idle_buffers: 32,
    idle_bytes: 4 << 20,
};

/// The size estimate of one record in a batch.
pub(crate) fn record_size(record: &NewRecord) -> usize {
    let headers: usize = record
        .headers
        .iter()
        .map(|(k, v)| k.len() + v.as_ref().map_or(0, Bytes::len) + 10)
        .sum();
    RECORD_OVERHEAD
        + record.key.as_ref().map_or(0, Bytes::len)
        + record.value.as_ref().map_or(0, Bytes::len)
        + headers
}

/// The producer identity batches are written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProducerIdentity {
    pub(crate) id: i64,
    pub(crate) epoch: i16,
}

impl ProducerIdentity {
    /// No producer id: a producer without idempotence.
    pub(crate) const NONE: Self = Self { id: -1, epoch: -1 };
}

/// Where a batch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchState {
    /// Not sent yet.
    Queued,
    /// Sent, answer awaited.
    InFlight,
    /// Sent and failed; to be sent again from `at`. `unknown`: it may have been written
    /// (the answer was lost), so it must be resolved before an epoch bump.
    Retry { at: Instant, unknown: bool },
}

/// What [`Accumulator::append_with`] did with a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Appended {
    /// A batch of the partition was closed by it (full), or a growing batch took another
    /// `batch.size`: for the sticky partitioner.
    pub(crate) closed: bool,
    /// It joined the partition's open batch (which the sender knows of already) instead of
    /// starting one.
    pub(crate) joined: bool,
}

/// One batch of records of one partition.
#[derive(Debug)]
pub(crate) struct Batch {
    pub(crate) id: u64,
    pub(crate) tp: Tp,
    records: Vec<NewRecord>,
    senders: Vec<(u64, DeliverySender)>,
    bytes: usize,
    created: Instant,
    deadline: Instant,
    closed: bool,
    /// Base sequence, once sent (-1 without idempotence).
    sequence: Option<i32>,
    encoded: Option<Bytes>,
    pub(crate) state: BatchState,
    attempts: u32,
    last_error: Option<ProducerError>,
    /// A retry was due after the delivery timeout: the batch is given up.
    expired: bool,
}

impl Batch {
    /// Its size on the wire: exact once encoded, else the records' estimate and the header.
    fn size(&self) -> usize {
        self.encoded
            .as_ref()
            .map_or(self.bytes.saturating_add(BATCH_OVERHEAD), Bytes::len)
    }

    fn fail(self, error: &ProducerError, done: &mut Vec<u64>) {
        for (id, sender) in self.senders {
            done.push(id);
            let _ = sender.send(Err(error.clone()));
        }
    }

    fn succeed(self, base_offset: i64, append_time: i64, done: &mut Vec<u64>) {
        let topic = Arc::clone(&self.tp.0);
        for (i, ((id, sender), record)) in self.senders.into_iter().zip(&self.records).enumerate() {
            done.push(id);
            let offset = if base_offset < 0 {
                -1
            } else {
                base_offset.saturating_add(i as i64)
            };
            let timestamp = if append_time >= 0 {
                append_time
            } else {
                record.timestamp
            };
            let _ = sender.send(Ok(RecordMetadata {
                topic: Arc::clone(&topic),
                partition: self.tp.1,
                offset,
                timestamp,
            }));
        }
    }
}

/// What the broker said about one batch, as the sender classified it.
#[derive(Debug, Clone)]
pub(crate) enum BatchOutcome {
    /// Written at `base_offset`; `append_time` is -1 for create-time topics.
    Written { base_offset: i64, append_time: i64 },
    /// DUPLICATE_SEQUENCE_NUMBER: written by an earlier attempt.
    Duplicate,
    /// A retriable failure. `unknown`: the write may have happened (lost answer).
    Retriable { error: ProducerError, unknown: bool },
    /// OUT_OF_ORDER_SEQUENCE_NUMBER.
    OutOfOrder(ProducerError),
    /// UNKNOWN_PRODUCER_ID.
    UnknownProducer(ProducerError),
    /// MESSAGE_TOO_LARGE: the batch is larger than the topic takes. A batch of several
    /// records is split and sent again, as Java's `splitAndReenqueue`; a single record
    /// fails like [`BatchOutcome::Failed`].
    TooLarge(ProducerError),
    /// Not written, and never will be (rejected).
    Failed(ProducerError),
    /// Given up without knowing whether it was written (an answer that could not be read,
    /// or one without the partition): failed like [`BatchOutcome::Failed`], but it says
    /// nothing of the batches after it.
    GivenUp(ProducerError),
}

/// What an answer means beyond the batch itself.
#[derive(Debug, Clone, Default)]
pub(crate) struct Effects {
    /// A batch was given up with its sequence, or the producer id must be renewed: the
    /// idempotent producer must bump its epoch; a transaction must abort.
    pub(crate) gap: bool,
    /// Errors of batches given up (for the transaction's abortable error).
    pub(crate) failed: Option<ProducerError>,
}

#[derive(Debug, Default)]
struct PartitionState {
    /// Batches not yet sent, in order; the last may still be open.
    queued: VecDeque<Batch>,
    /// Batches sent and not yet confirmed, by sequence.
    unacked: VecDeque<Batch>,
    next_sequence: i32,
    /// The sequence of the first batch given up, until the next epoch bump.
    gap_at: Option<i32>,
    /// A batch of the partition was confirmed under the current producer epoch. Until then
    /// one batch at a time is sent: a broker with no state for the producer on the
    /// partition accepts any first sequence, so a later batch could be written before an
    /// earlier one that failed.
    acked: bool,
}

impl PartitionState {
    /// Fails `batch` (taken out of the partition) at its delivery timeout; a batch that had a
    /// sequence leaves a gap.
    fn time_out(
        &mut self,
        batch: Batch,
        config: &AccumulatorConfig,
        done: &mut Vec<u64>,
        effects: &mut Effects,
    ) {
        let error = timeout_error(&batch, config);
        if let Some(sequence) = batch.sequence {
            self.gap_at = Some(self.gap_at.map_or(sequence, |g| g.min(sequence)));
            effects.gap = true;
        }
        batch.fail(&error, done);
        effects.failed = Some(error);
    }

    /// The broker refused the batch of sequence `gap`, so it wrote none after it under this
    /// epoch (it writes a producer's batches of a partition in sequence order): batches past
    /// it whose answer was lost are known not written, and do not hold up the epoch bump that
    /// renumbers them. Without this, a lost answer before a refusal left the bump waiting for
    /// a retry that the pending bump itself kept from being sent, until the delivery timeout.
    fn refused_at(&mut self, gap: i32) {
        self.gap_at = Some(self.gap_at.map_or(gap, |g| g.min(gap)));
        for batch in &mut self.unacked {
            if let (BatchState::Retry { unknown, .. }, Some(sequence)) =
                (&mut batch.state, batch.sequence)
                && sequence > gap
            {
                *unknown = false;
            }
        }
    }

    /// Whether a closed batch could not be sent at the next drain anyway: a batch waits
    /// ahead of the open one, a retry waits, or the partition's window is full.
    fn backed_up(&self, config: &AccumulatorConfig, bump_pending: bool) -> bool {
        if bump_pending || self.queued.len() > 1 {
            return true;
        }
        let window = if self.acked || !config.idempotent {
            config.max_in_flight.max(1)
        } else {
            1
        };
        self.unacked.len() >= window || self.has_retry()
    }

    fn in_flight(&self) -> usize {
        self.unacked
            .iter()
            .filter(|b| b.state == BatchState::InFlight)
            .count()
    }

    fn has_retry(&self) -> bool {
        self.unacked
            .iter()
            .any(|b| matches!(b.state, BatchState::Retry { .. }))
    }
}

/// Settings of the accumulator.
#[derive(Debug, Clone)]
pub(crate) struct AccumulatorConfig {
    pub(crate) batch_size: usize,
    /// How large an open batch may grow while its partition cannot send it (at least
    /// `batch_size`); see the module's "Batch size".
    pub(crate) max_batch_size: usize,
    pub(crate) linger: Duration,
    pub(crate) max_in_flight: usize,
    pub(crate) idempotent: bool,
    pub(crate) transactional: bool,
    pub(crate) compression: Compression,
    pub(crate) retry_backoff: Duration,
    pub(crate) retry_backoff_max: Duration,
    pub(crate) delivery_timeout: Duration,
}

/// A batch handed to the sender: what to put in a Produce request.
#[derive(Debug, Clone)]
pub(crate) struct Drained {
    pub(crate) tp: Tp,
    pub(crate) batch_id: u64,
    pub(crate) bytes: Bytes,
}

/// One [`Accumulator::drain`]: its inputs and what it picked so far.
struct Drain<'a, T> {
    now: Instant,
    flushing: bool,
    config: &'a AccumulatorConfig,
    buffers: &'a Arc<FramePool>,
    producer: ProducerIdentity,
    bump_pending: bool,
    place: &'a mut dyn FnMut(&Tp, usize) -> Option<T>,
    out: Vec<(Drained, T)>,
    closed: Vec<Tp>,
}

impl<T> Drain<'_, T> {
    /// Picks the partition's next batch to send, if any may go now.
    fn partition(&mut self, tp: &Tp, state: &mut PartitionState) {
        let in_flight = state.in_flight();
        // Retries first, one at a time, lowest sequence first.
        if state.has_retry() {
            if in_flight > 0 {
                return;
            }
            let Some(batch) = state
                .unacked
                .iter_mut()
                .find(|b| matches!(b.state, BatchState::Retry { .. }))
            else {
                return;
            };
            let BatchState::Retry { at, unknown } = batch.state else {
                return;
            };
            // While a bump is pending, only batches whose write is unknown are sent (to
            // resolve them); the others wait for their new sequence.
            if at > self.now || (self.bump_pending && !unknown) {
                return;
            }
            let Some(placed) = (self.place)(tp, batch.size()) else {
                return;
            };
            let bytes = encoded(batch, self.producer, self.config, self.buffers);
            batch.state = BatchState::InFlight;
            batch.attempts = batch.attempts.saturating_add(1);
            let drained = Drained {
                tp: tp.clone(),
                batch_id: batch.id,
                bytes,
            };
            self.out.push((drained, placed));
            return;
        }
        // Without idempotence a retry could reorder: Java keeps the order only for 1.
        let max_in_flight = self.config.max_in_flight.max(1);
        let window = if state.acked || !self.config.idempotent {
            max_in_flight
        } else {
            1
        };
        if self.bump_pending || in_flight >= window {
            return;
        }
        let several = state.queued.len() > 1;
        let Some(front) = state.queued.front_mut() else {
            return;
        };
        let ready = front.closed
            || self.flushing
            || several
            || front.bytes >= self.config.batch_size
            || self.now
                >= front
                    .created
                    .checked_add(self.config.linger)
                    .unwrap_or(front.created);
        if !ready {
            return;
        }
        let Some(placed) = (self.place)(tp, front.size()) else {
            return;
        };
        let Some(mut batch) = state.queued.pop_front() else {
            return;
        };
        if !batch.closed {
            batch.closed = true;
            self.closed.push(tp.clone());
        }
        if self.config.idempotent {
            batch.sequence = Some(state.next_sequence);
            state.next_sequence = state
                .next_sequence
                .wrapping_add(i32::try_from(batch.records.len()).unwrap_or(i32::MAX));
        }
        let bytes = encoded(&mut batch, self.producer, self.config, self.buffers);
        batch.state = BatchState::InFlight;
        batch.attempts = 1;
        let drained = Drained {
            tp: tp.clone(),
            batch_id: batch.id,
            bytes,
        };
        self.out.push((drained, placed));
        state.unacked.push_back(batch);
    }
}

/// All partitions' batches.
#[derive(Debug)]
pub(crate) struct Accumulator {
    config: AccumulatorConfig,
    partitions: FastMap<Tp, PartitionState>,
    producer: ProducerIdentity,
    next_batch: u64,
    /// Record ids not yet complete, for `flush`.
    incomplete: Outstanding,
    /// The idempotent producer must bump its epoch before sending new batches.
    bump_pending: bool,
    /// No batch that [`expire`](Self::expire) could give up has a deadline before this
    /// (`None`: no such batch). A lower bound, so `expire` looks at the batches only once it
    /// passed: a new batch's deadline is never earlier than an older one's (the same
    /// `delivery.timeout.ms` from a later creation), so only a batch that leaves the
    /// in-flight state can lower it ([`complete`](Self::complete) does).
    next_expiry: Option<Instant>,
    /// The largest batch each topic takes (its `max.message.bytes`), where known: a growing
    /// batch stops there.
    topic_max: FastMap<Arc<str>, usize>,
    /// Where in the partitions' order the next drain starts.
    drain_start: usize,
    /// The buffers batches are encoded into, reused once a batch is done with.
    buffers: Arc<FramePool>,
}

impl Accumulator {
    pub(crate) fn new(config: AccumulatorConfig) -> Self {
        Self {
            config,
            partitions: FastMap::default(),
            producer: ProducerIdentity::NONE,
            next_batch: 0,
            incomplete: Outstanding::default(),
            bump_pending: false,
            next_expiry: None,
            topic_max: FastMap::default(),
            drain_start: 0,
            buffers: Arc::new(FramePool::with_limits(BATCH_BUFFERS)),
        }
    }

    /// Notes the largest batch `topic` takes (its `max.message.bytes`): a batch of it grows
    /// no further, though never below `batch.size` (a topic below that refuses Java's
    /// batches too).
    pub(crate) fn set_topic_max(&mut self, topic: &Arc<str>, bytes: usize) {
        self.topic_max.insert(Arc::clone(topic), bytes);
    }

    /// Notes a batch that `expire` may give up at `deadline`.
    fn expiry_at(&mut self, deadline: Instant) {
        self.next_expiry = Some(self.next_expiry.map_or(deadline, |e| e.min(deadline)));
    }

    /// The producer identity batches are written with.
    pub(crate) fn producer(&self) -> ProducerIdentity {
        self.producer
    }

    /// Notes a record id, of `size` bytes, as incomplete (it may still wait for metadata).
    pub(crate) fn track(&mut self, id: u64, size: usize) {
        self.incomplete.insert(id, size);
    }

    /// The bytes of the records not yet complete, as `buffer.memory` counts them.
    pub(crate) fn buffered(&self) -> usize {
        self.incomplete.bytes()
    }

    /// Marks record ids complete.
    pub(crate) fn untrack(&mut self, ids: &[u64]) {
        for id in ids {
            self.incomplete.remove(*id);
        }
    }

    /// True when every record with an id below `upto` is complete.
    pub(crate) fn complete_below(&self, upto: u64) -> bool {
        self.incomplete.none_below(upto)
    }

    /// Batches in flight, over all partitions.
    pub(crate) fn in_flight(&self) -> usize {
        self.partitions
            .values()
            .map(PartitionState::in_flight)
            .sum()
    }

    /// True when the idempotent producer waits for an epoch bump.
    pub(crate) fn bump_pending(&self) -> bool {
        self.bump_pending
    }

    /// True when the pending epoch bump may be done now: nothing in flight and no batch
    /// whose write is unknown.
    pub(crate) fn ready_to_bump(&self) -> bool {
        self.bump_pending
            && self.partitions.values().all(|p| {
                p.unacked.iter().all(|b| {
                    !matches!(
                        b.state,
                        BatchState::InFlight | BatchState::Retry { unknown: true, .. }
                    )
                })
            })
    }

    /// Adopts a producer identity and starts every partition's sequences at 0. Batches
    /// waiting for a retry get new sequences in order, and are encoded again.
    pub(crate) fn reset_sequences(&mut self, producer: ProducerIdentity) {
        self.producer = producer;
        self.bump_pending = false;
        for state in self.partitions.values_mut() {
            state.next_sequence = 0;
            state.gap_at = None;
            state.acked = false;
            for batch in &mut state.unacked {
                let sequence = state.next_sequence;
                state.next_sequence = state
                    .next_sequence
                    .wrapping_add(i32::try_from(batch.records.len()).unwrap_or(i32::MAX));
                batch.sequence = Some(sequence);
                batch.encoded = None;
            }
        }
    }

    /// True when the partition has an open batch a record can still join.
    #[cfg(test)]
    pub(crate) fn has_open_batch(&self, tp: &Tp) -> bool {
        self.partitions
            .get(tp)
            .and_then(|p| p.queued.back())
            .is_some_and(|b| !b.closed)
    }

    /// Appends a record to the partition's open batch (or a new one). Returns true when a
    /// batch of the partition was closed by it (full), or a growing batch took another
    /// `batch.size`: for the sticky partitioner.
    pub(crate) fn append(
        &mut self,
        tp: Tp,
        id: u64,
        record: NewRecord,
        sender: DeliverySender,
        now: Instant,
    ) -> bool {
        let size = record_size(&record);
        self.append_with(tp, id, record, size, sender, || now)
            .closed
    }

    /// [`append`](Self::append) of a record whose [`record_size`] the caller knows, reading
    /// the clock (`now`) only when the record starts a batch, and saying whether it joined an
    /// open batch.
    pub(crate) fn append_with(
        &mut self,
        tp: Tp,
        id: u64,
        record: NewRecord,
        size: usize,
        sender: DeliverySender,
        now: impl FnOnce() -> Instant,
    ) -> Appended {
        let state = self.partitions.entry(tp.clone()).or_default();
        // Past `batch.size` only while the partition could not send the batch now anyway.
        let batch_size = if state.backed_up(&self.config, self.bump_pending) {
            // Never past what the topic takes (its max.message.bytes, when known).
            let topic_max = self.topic_max.get(&tp.0).copied().unwrap_or(usize::MAX);
            self.config
                .max_batch_size
                .min(topic_max)
                .max(self.config.batch_size)
        } else {
            self.config.batch_size
        };
        let mut closed = false;
        if let Some(open) = state.queued.back_mut().filter(|b| !b.closed) {
            if open.bytes.saturating_add(size) <= batch_size || open.records.is_empty() {
                let before = open.bytes;
                open.bytes = open.bytes.saturating_add(size);
                open.records.push(record);
                open.senders.push((id, sender));
                self.incomplete.insert(id, size);
                if open.bytes >= batch_size {
                    open.closed = true;
                    return Appended {
                        closed: true,
                        joined: true,
                    };
                }
                // A growing batch tells the sticky partitioner each time it takes another
                // `batch.size`, so keyless records spread over partitions as before.
                let unit = self.config.batch_size.max(1);
                return Appended {
                    closed: before / unit != open.bytes / unit,
                    joined: true,
                };
            }
            open.closed = true;
            closed = true;
        }
        let now = now();
        self.next_batch += 1;
        let full = BATCH_OVERHEAD + size >= batch_size;
        let deadline = deadline_after(now, self.config.delivery_timeout);
        self.next_expiry = Some(self.next_expiry.map_or(deadline, |e| e.min(deadline)));
        state.queued.push_back(Batch {
            id: self.next_batch,
            tp,
            records: vec![record],
            senders: vec![(id, sender)],
            bytes: BATCH_OVERHEAD + size,
            created: now,
            deadline,
            closed: full,
            sequence: None,
            encoded: None,
            state: BatchState::Queued,
            attempts: 0,
            last_error: None,
            expired: false,
        });
        self.incomplete.insert(id, size);
        Appended {
            closed: closed || full,
            joined: false,
        }
    }

    /// Picks at most one batch per partition to send now. `place` says whether a
    /// partition's batch of about the given size (exact for a batch sent before, the
    /// records' estimate plus the batch header otherwise) may be sent (leader known,
    /// connection has room, added to the transaction), and where: each `Some` gives one
    /// batch, returned with it, in the order of the calls. `flushing` sends open batches
    /// without waiting for `linger.ms`. Returns the batches, and the partitions whose open
    /// batch was closed by being drained.
    pub(crate) fn drain<T>(
        &mut self,
        now: Instant,
        flushing: bool,
        place: &mut dyn FnMut(&Tp, usize) -> Option<T>,
    ) -> (Vec<(Drained, T)>, Vec<Tp>) {
        let mut drain = Drain {
            now,
            flushing,
            config: &self.config,
            buffers: &self.buffers,
            producer: self.producer,
            bump_pending: self.bump_pending,
            place,
            out: Vec::new(),
            closed: Vec::new(),
        };
        // Each drain starts one partition further, as Java's `drainIndex`: when a
        // connection has room for only some of the partitions ready for it, the first in
        // the map's order must not be the only ones ever sent.
        let start = match self.partitions.len() {
            0 => 0,
            n => self.drain_start % n,
        };
        self.drain_start = start.wrapping_add(1);
        for (tp, state) in self.partitions.iter_mut().skip(start) {
            drain.partition(tp, state);
        }
        for (tp, state) in self.partitions.iter_mut().take(start) {
            drain.partition(tp, state);
        }
        (drain.out, drain.closed)
    }

    /// Reports the answer for a batch in flight. Completes the records' futures of a
    /// written or failed batch; returns the ids of the records completed and the effects.
    pub(crate) fn complete(
        &mut self,
        tp: &Tp,
        batch_id: u64,
        outcome: BatchOutcome,
        now: Instant,
    ) -> (Vec<u64>, Effects) {
        let mut done = Vec::new();
        let mut effects = Effects::default();
        let config = self.config.clone();
        let Some(state) = self.partitions.get_mut(tp) else {
            return (done, effects);
        };
        let Some(position) = state.unacked.iter().position(|b| b.id == batch_id) else {
            return (done, effects);
        };
        let earlier_unconfirmed = position > 0;
        let outcome = match outcome {
            BatchOutcome::TooLarge(error)
                if state
                    .unacked
                    .get(position)
                    .is_none_or(|b| b.records.len() < 2) =>
            {
                BatchOutcome::Failed(error)
            }
            other => other,
        };
        // A broker's refusal says that nothing after the batch was written either.
        let (outcome, refused) = match outcome {
            BatchOutcome::GivenUp(error) => (BatchOutcome::Failed(error), false),
            other => (other, true),
        };
        let after_gap = |batch: &Batch, gap_at: Option<i32>| matches!((batch.sequence, gap_at), (Some(s), Some(g)) if s > g);
        match outcome {
            BatchOutcome::Written {
                base_offset,
                append_time,
            } => {
                if let Some(batch) = state.unacked.remove(position) {
                    state.acked = true;
                    batch.succeed(base_offset, append_time, &mut done);
                }
            }
            BatchOutcome::Duplicate => {
                if let Some(batch) = state.unacked.remove(position) {
                    state.acked = true;
                    batch.succeed(-1, -1, &mut done);
                }
            }
            BatchOutcome::Retriable { error, unknown } => {
                let gap_at = state.gap_at;
                if let Some(batch) = state.unacked.get_mut(position) {
                    let unknown = unknown && !after_gap(batch, gap_at);
                    retry_or_expire(batch, error, unknown, now, &config);
                }
            }
            BatchOutcome::OutOfOrder(error) => {
                let gap_at = state.gap_at;
                let past_gap = state
                    .unacked
                    .get(position)
                    .is_some_and(|b| after_gap(b, gap_at));
                // Behind an earlier batch still to be written (one in flight, one to be sent
                // again, the parts of a split), this one was not written either: send it
                // again after them, in a transaction too (as Java does). Past a sequence
                // given up, only an epoch bump renumbers it, which a transaction does not
                // have: it aborts.
                let behind = if config.transactional {
                    earlier_unconfirmed && !past_gap
                } else {
                    earlier_unconfirmed || past_gap
                };
                if behind {
                    // An earlier batch was not written (yet): this one was not either.
                    if let Some(batch) = state.unacked.get_mut(position) {
                        retry_or_expire(batch, error, false, now, &config);
                    }
                } else if let Some(batch) = state.unacked.remove(position) {
                    // At the head: the broker's sequence and ours differ. Give the batch up.
                    state.refused_at(batch.sequence.unwrap_or(0));
                    batch.fail(&error, &mut done);
                    effects.gap = true;
                    effects.failed = Some(error);
                }
            }
            BatchOutcome::UnknownProducer(error) => {
                if config.transactional {
                    if let Some(batch) = state.unacked.remove(position) {
                        batch.fail(&error, &mut done);
                    }
                    effects.failed = Some(error);
                } else if let Some(batch) = state.unacked.get_mut(position) {
                    // Not written; sent again under the bumped epoch.
                    retry_or_expire(batch, error, false, now, &config);
                }
                effects.gap = true;
            }
            BatchOutcome::TooLarge(error) => {
                if let Some(batch) = state.unacked.remove(position) {
                    if batch.deadline <= now {
                        // Its delivery timeout ran out while it was in flight: given up, as
                        // a retry would be, with the error before this one (the records are
                        // not too large; the batch they were in was).
                        state.time_out(batch, &config, &mut done, &mut effects);
                    } else {
                        tracing::debug!(
                            topic = %tp.0,
                            partition = tp.1,
                            records = batch.records.len(),
                            bytes = batch.bytes,
                            %error,
                            "a batch larger than its topic takes is split and sent again"
                        );
                        // Half the refused batch's records at most, so a split always
                        // shrinks, and never past batch.size: the topic takes less than it
                        // grew to.
                        let half = BATCH_OVERHEAD
                            .saturating_add(batch.bytes.saturating_sub(BATCH_OVERHEAD) / 2);
                        let target = half.min(config.batch_size);
                        for (i, part) in split(batch, target, &mut self.next_batch, now)
                            .into_iter()
                            .enumerate()
                        {
                            state.unacked.insert(position + i, part);
                        }
                        // The topic takes less than the batch grew to: grow no more.
                        let limit = self
                            .topic_max
                            .entry(Arc::clone(&tp.0))
                            .or_insert(usize::MAX);
                        *limit = (*limit).min(config.batch_size);
                    }
                }
            }
            BatchOutcome::Failed(error) | BatchOutcome::GivenUp(error) => {
                if let Some(batch) = state.unacked.remove(position) {
                    if let Some(sequence) = batch.sequence {
                        if refused {
                            state.refused_at(sequence);
                        } else {
                            state.gap_at = Some(state.gap_at.map_or(sequence, |g| g.min(sequence)));
                        }
                        // Later batches of the partition in flight will be refused.
                        effects.gap =
                            state.unacked.iter().any(|b| b.sequence.is_some()) || config.idempotent;
                    }
                    batch.fail(&error, &mut done);
                }
                effects.failed = Some(error);
            }
        }
        // A retry past its deadline was given up by `retry_or_expire`.
        if let Some(position) = state.unacked.iter().position(|b| b.expired) {
            if let Some(batch) = state.unacked.remove(position) {
                state.time_out(batch, &config, &mut done, &mut effects);
            }
        }
        // A batch sent again later can now expire: `expire` must look at it.
        let waiting = state
            .unacked
            .iter()
            .find(|b| b.id == batch_id && b.state != BatchState::InFlight)
            .map(|b| b.deadline);
        if let Some(deadline) = waiting {
            self.expiry_at(deadline);
        }
        if effects.gap && config.idempotent && !config.transactional {
            self.bump_pending = true;
        }
        self.untrack(&done);
        (done, effects)
    }

    /// Fails the batches past their delivery timeout that are not in flight.
    ///
    /// The sender calls it every turn (after each `send` that woke it, each answer): until the
    /// earliest deadline a batch could be given up at, it returns at once without looking at
    /// any partition.
    pub(crate) fn expire(&mut self, now: Instant) -> (Vec<u64>, Effects) {
        let mut done = Vec::new();
        let mut effects = Effects::default();
        if self.next_expiry.is_none_or(|at| now < at) {
            return (done, effects);
        }
        let mut next: Option<Instant> = None;
        let mut consider = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        for state in self.partitions.values_mut() {
            while state.queued.front().is_some_and(|b| b.deadline <= now) {
                if let Some(batch) = state.queued.pop_front() {
                    let error = timeout_error(&batch, &self.config);
                    batch.fail(&error, &mut done);
                    effects.failed = Some(error);
                }
            }
            // Queued batches' deadlines grow from the front.
            if let Some(front) = state.queued.front() {
                consider(front.deadline);
            }
            let expired = |b: &Batch| b.deadline <= now && b.state != BatchState::InFlight;
            if state.unacked.iter().any(expired) {
                let mut kept = VecDeque::with_capacity(state.unacked.len());
                for batch in std::mem::take(&mut state.unacked) {
                    if expired(&batch) {
                        state.time_out(batch, &self.config, &mut done, &mut effects);
                    } else {
                        kept.push_back(batch);
                    }
                }
                state.unacked = kept;
            }
            // In flight past its deadline: it can expire only after its answer, and
            // `complete` notes it then.
            for batch in state
                .unacked
                .iter()
                .filter(|b| b.deadline > now || b.state != BatchState::InFlight)
            {
                consider(batch.deadline);
            }
        }
        self.next_expiry = next;
        if effects.gap && self.config.idempotent && !self.config.transactional {
            self.bump_pending = true;
        }
        self.untrack(&done);
        (done, effects)
    }

    /// Fails every batch not in flight with `error` (an aborted transaction, a closed or
    /// fenced producer).
    pub(crate) fn fail_waiting(&mut self, error: &ProducerError) -> Vec<u64> {
        let mut done = Vec::new();
        for state in self.partitions.values_mut() {
            for batch in state.queued.drain(..) {
                batch.fail(error, &mut done);
            }
            let mut kept = VecDeque::new();
            for batch in state.unacked.drain(..) {
                if batch.state == BatchState::InFlight {
                    kept.push_back(batch);
                } else {
                    batch.fail(error, &mut done);
                }
            }
            state.unacked = kept;
        }
        self.untrack(&done);
        done
    }

    /// The earliest time after `now` something becomes sendable or expires; `now` is the
    /// time [`drain`](Self::drain) and [`expire`](Self::expire) were given in this turn.
    ///
    /// A time at or before `now` is left out: what was due then was drained or expired in
    /// this turn, or is held back by something only an event ends (the partition's in-flight
    /// window, the connection's, an unknown leader, an epoch bump), and each of those events
    /// wakes the sender. Counting it would wake the sender at once, over and over, until the
    /// event came: a busy loop that cost the producer most of its CPU while batches were in
    /// flight.
    pub(crate) fn next_wakeup(&self, now: Instant) -> Option<Instant> {
        let linger = self.config.linger;
        let mut next: Option<Instant> = None;
        let mut consider = |t: Instant| {
            if t > now {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        for state in self.partitions.values() {
            if let Some(front) = state.queued.front() {
                consider(front.created.checked_add(linger).unwrap_or(front.created));
                consider(front.deadline);
            }
            for batch in &state.unacked {
                if let BatchState::Retry { at, .. } = batch.state {
                    consider(at);
                    consider(batch.deadline);
                }
            }
        }
        next
    }

    /// True when some partition has a queued batch (for the TV1 add-partitions step).
    pub(crate) fn partitions_with_data(&self) -> Vec<Tp> {
        self.partitions
            .iter()
            .filter(|(_, s)| !s.queued.is_empty() || !s.unacked.is_empty())
            .map(|(tp, _)| tp.clone())
            .collect()
    }
}

fn timeout_error(batch: &Batch, config: &AccumulatorConfig) -> ProducerError {
    ProducerError::Timeout {
        timeout: config.delivery_timeout,
        last: batch.last_error.clone().map(Arc::new),
    }
}

/// The records of `batch`, refused as too large, as batches of at most `target` bytes (at
/// least one record each), in order, sent again at once: each keeps the part of the
/// refused batch's sequence range its records had, so batches sent after it stay in
/// sequence, and the batch's delivery deadline.
fn split(batch: Batch, target: usize, next_id: &mut u64, now: Instant) -> Vec<Batch> {
    let mut parts: Vec<Batch> = Vec::new();
    let mut sequence = batch.sequence;
    for (record, sender) in batch.records.into_iter().zip(batch.senders) {
        let size = record_size(&record);
        let fits = parts
            .last()
            .is_some_and(|p| p.bytes.saturating_add(size) <= target);
        if !fits {
            if let (Some(s), Some(last)) = (sequence.as_mut(), parts.last()) {
                *s = s.wrapping_add(i32::try_from(last.records.len()).unwrap_or(i32::MAX));
            }
            *next_id += 1;
            parts.push(Batch {
                id: *next_id,
                tp: batch.tp.clone(),
                records: Vec::new(),
                senders: Vec::new(),
                bytes: BATCH_OVERHEAD,
                created: batch.created,
                deadline: batch.deadline,
                closed: true,
                sequence,
                encoded: None,
                state: BatchState::Retry {
                    at: now,
                    unknown: false,
                },
                attempts: 0,
                last_error: None,
                expired: false,
            });
        }
        if let Some(part) = parts.last_mut() {
            part.bytes = part.bytes.saturating_add(size);
            part.records.push(record);
            part.senders.push(sender);
        }
    }
    parts
}

fn retry_or_expire(
    batch: &mut Batch,
    error: ProducerError,
    unknown: bool,
    now: Instant,
    config: &AccumulatorConfig,
) {
    let exponent = batch.attempts.saturating_sub(1).min(20);
    let backoff = config
        .retry_backoff
        .saturating_mul(1u32 << exponent)
        .min(config.retry_backoff_max);
    batch.last_error = Some(error);
    batch.expired = batch.deadline <= now;
    batch.state = BatchState::Retry {
        at: deadline_after(now, backoff),
        unknown,
    };
}

fn encoded(
    batch: &mut Batch,
    producer: ProducerIdentity,
    config: &AccumulatorConfig,
    buffers: &Arc<FramePool>,
) -> Bytes {
    if let Some(bytes) = &batch.encoded {
        return bytes.clone();
    }
    let options = EncodeOptions {
        compression: config.compression,
        producer_id: if config.idempotent { producer.id } else { -1 },
        producer_epoch: if config.idempotent {
            producer.epoch
        } else {
            -1
        },
        base_sequence: batch.sequence.unwrap_or(-1),
        transactional: config.transactional,
        ..EncodeOptions::default()
    };
    let bytes = encode_batch_pooled(&batch.records, &options, buffers);
    batch.encoded = Some(bytes.clone());
    bytes
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;
    use crate::kafka::error::ClientError;
    use crate::producer::DeliveryFuture;

    const SECOND: Duration = Duration::from_secs(1);

    fn config(idempotent: bool, transactional: bool) -> AccumulatorConfig {
        AccumulatorConfig {
            // Every record fills its batch: one record, one batch.
            batch_size: 1,
            max_batch_size: 1,
            linger: Duration::ZERO,
            max_in_flight: 5,
            idempotent,
            transactional,
            compression: Compression::None,
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: SECOND,
            delivery_timeout: Duration::from_secs(10),
        }
    }

    fn tp() -> Tp {
        (Arc::from("t"), 0)
    }

    fn error() -> ProducerError {
        ProducerError::Kafka {
            source: Arc::new(ClientError::Timeout(SECOND)),
        }
    }

    fn record(i: usize) -> NewRecord {
        NewRecord {
            timestamp: 0,
            key: None,
            value: Some(Bytes::from(format!("v{i}"))),
            headers: Vec::new(),
        }
    }

    /// An accumulator with producer 7, epoch 0 and `n` one-record batches of partition 0.
    fn filled(
        config: AccumulatorConfig,
        n: usize,
        now: Instant,
    ) -> (Accumulator, Vec<DeliveryFuture>) {
        let mut acc = Accumulator::new(config);
        acc.reset_sequences(ProducerIdentity { id: 7, epoch: 0 });
        let mut futures = Vec::new();
        for i in 0..n {
            let (sender, future) = DeliveryFuture::channel();
            acc.append(tp(), i as u64, record(i), sender, now);
            futures.push(future);
        }
        (acc, futures)
    }

    /// As [`filled`], after a first batch (record id 1000) was confirmed: the partition
    /// pipelines. The `n` batches get sequences from 1.
    fn pipelining(
        config: AccumulatorConfig,
        n: usize,
        now: Instant,
    ) -> (Accumulator, Vec<DeliveryFuture>) {
        let (mut acc, _) = filled(config, 0, now);
        let (sender, _first) = DeliveryFuture::channel();
        acc.append(tp(), 1000, record(1000), sender, now);
        confirm_first(&mut acc, now);
        let mut futures = Vec::new();
        for i in 0..n {
            let (sender, future) = DeliveryFuture::channel();
            acc.append(tp(), i as u64, record(i), sender, now);
            futures.push(future);
        }
        (acc, futures)
    }

    fn drain(acc: &mut Accumulator, now: Instant) -> Vec<Drained> {
        let (drained, _) = acc.drain(now, false, &mut |_, _| Some(()));
        drained.into_iter().map(|(batch, ())| batch).collect()
    }

    /// Drains until nothing more is sent now.
    /// Sends and confirms the first batch, so that the partition may pipeline.
    fn confirm_first(acc: &mut Accumulator, now: Instant) {
        let first = drain(acc, now);
        assert_eq!(first.len(), 1);
        acc.complete(&tp(), first[0].batch_id, written(0), now);
    }

    fn drain_all(acc: &mut Accumulator, now: Instant) -> Vec<Drained> {
        let mut out = Vec::new();
        loop {
            let more = drain(acc, now);
            if more.is_empty() {
                return out;
            }
            out.extend(more);
        }
    }

    /// (producer id, epoch, base sequence) of an encoded batch.
    fn header(bytes: &Bytes) -> (i64, i16, i32) {
        let id = i64::from_be_bytes(bytes[43..51].try_into().unwrap());
        let epoch = i16::from_be_bytes(bytes[51..53].try_into().unwrap());
        let sequence = i32::from_be_bytes(bytes[53..57].try_into().unwrap());
        (id, epoch, sequence)
    }

    fn written(offset: i64) -> BatchOutcome {
        BatchOutcome::Written {
            base_offset: offset,
            append_time: -1,
        }
    }

    fn retriable(unknown: bool) -> BatchOutcome {
        BatchOutcome::Retriable {
            error: error(),
            unknown,
        }
    }

    fn outcome(future: DeliveryFuture) -> Option<Result<RecordMetadata, ProducerError>> {
        future.now_or_never()
    }

    /// Records of `record(i)`'s size: 21 bytes of overhead plus "v0".."v9".
    const SMALL: usize = RECORD_OVERHEAD + 2;

    /// Batches of about ten small records (`batch.size`), growing to about forty.
    fn growing(idempotent: bool) -> AccumulatorConfig {
        AccumulatorConfig {
            batch_size: BATCH_OVERHEAD + 10 * SMALL,
            max_batch_size: BATCH_OVERHEAD + 40 * SMALL,
            ..config(idempotent, false)
        }
    }

    fn append_n(acc: &mut Accumulator, from: usize, n: usize, now: Instant) {
        for i in from..from + n {
            let (sender, _future) = DeliveryFuture::channel();
            acc.append(tp(), i as u64, record(i % 10), sender, now);
        }
    }

    fn batch_sizes(acc: &Accumulator) -> Vec<usize> {
        acc.partitions[&tp()]
            .queued
            .iter()
            .map(|b| b.records.len())
            .collect()
    }

    #[test]
    fn the_clock_is_read_for_a_new_batch_only() {
        let now = Instant::now();
        let mut acc = Accumulator::new(growing(false));
        let mut append = |i: usize, clock: &dyn Fn() -> Instant| {
            let (sender, _future) = DeliveryFuture::channel();
            let record = record(i % 10);
            let size = record_size(&record);
            acc.append_with(tp(), i as u64, record, size, sender, clock)
        };
        let first = append(0, &|| now);
        assert_eq!(
            first,
            Appended {
                closed: false,
                joined: false
            }
        );
        // Records that join the open batch: the clock is not read.
        for i in 1..9 {
            let appended = append(i, &|| panic!("clock read for a record that joins a batch"));
            assert!(appended.joined, "record {i}");
        }
        // The tenth fills it (batch.size): closed, and still no clock.
        let tenth = append(9, &|| {
            panic!("clock read for the record that fills a batch")
        });
        assert_eq!(
            tenth,
            Appended {
                closed: true,
                joined: true
            }
        );
        // The next starts a batch: the clock is read.
        let read = std::cell::Cell::new(false);
        let eleventh = append(10, &|| {
            read.set(true);
            now
        });
        assert!(read.get() && !eleventh.joined);
    }

    #[test]
    fn a_partition_that_can_send_closes_its_batch_at_batch_size() {
        let now = Instant::now();
        // Without idempotence the window is the whole max.in.flight: nothing is backed up
        // until a closed batch waits.
        let mut acc = Accumulator::new(growing(false));
        append_n(&mut acc, 0, 10, now);
        assert_eq!(batch_sizes(&acc), vec![10]);
        assert!(!acc.has_open_batch(&tp()), "closed at batch.size");
    }

    #[test]
    fn a_backed_up_partition_grows_its_open_batch_up_to_the_maximum_and_sends_it_whole() {
        let now = Instant::now();
        let mut acc = Accumulator::new(growing(true));
        acc.reset_sequences(ProducerIdentity { id: 7, epoch: 0 });
        // The first batch of the partition goes alone; while it is in flight the partition
        // cannot send another, so the next one takes records past batch.size.
        append_n(&mut acc, 0, 10, now);
        let first = drain_all(&mut acc, now);
        assert_eq!(first.len(), 1);
        append_n(&mut acc, 10, 100, now);
        assert_eq!(
            batch_sizes(&acc),
            vec![40, 40, 20],
            "grown to the maximum, then closed; the rest waits behind them"
        );
        for batch in &acc.partitions[&tp()].queued {
            assert!(batch.bytes <= growing(true).max_batch_size);
        }
        // Once the first is confirmed the grown batches go out as they are.
        acc.complete(&tp(), first[0].batch_id, written(0), now);
        let sent = drain_all(&mut acc, now);
        let sequences: Vec<i32> = sent.iter().map(|d| header(&d.bytes).2).collect();
        assert_eq!(
            sequences,
            vec![10, 50, 90],
            "consecutive sequences over grown batches"
        );
    }

    #[test]
    fn a_batch_grows_no_further_than_its_topic_takes() {
        let now = Instant::now();
        let mut acc = Accumulator::new(growing(true));
        acc.reset_sequences(ProducerIdentity { id: 7, epoch: 0 });
        // The topic's max.message.bytes: 25 records' worth.
        acc.set_topic_max(&tp().0, BATCH_OVERHEAD + 25 * SMALL);
        append_n(&mut acc, 0, 10, now);
        let first = drain_all(&mut acc, now);
        assert_eq!(first.len(), 1);
        append_n(&mut acc, 10, 60, now);
        assert_eq!(
            batch_sizes(&acc),
            vec![25, 25, 10],
            "grown to the topic's limit only"
        );
        // A topic limit below batch.size leaves batch.size (Java's batches would not fit
        // either).
        let mut acc = Accumulator::new(growing(true));
        acc.reset_sequences(ProducerIdentity { id: 7, epoch: 0 });
        acc.set_topic_max(&tp().0, BATCH_OVERHEAD + 3 * SMALL);
        append_n(&mut acc, 0, 10, now);
        drain_all(&mut acc, now);
        append_n(&mut acc, 10, 30, now);
        assert_eq!(batch_sizes(&acc), vec![10, 10, 10]);
    }

    fn too_large() -> BatchOutcome {
        BatchOutcome::TooLarge(error())
    }

    #[test]
    fn a_batch_refused_as_too_large_is_split_in_sequence_and_the_topic_grows_no_more() {
        split_and_sent_again(false);
    }

    #[test]
    fn in_a_transaction_the_batch_behind_a_split_one_is_sent_again_not_given_up() {
        split_and_sent_again(true);
    }

    fn split_and_sent_again(transactional: bool) {
        let now = Instant::now();
        let mut acc = Accumulator::new(AccumulatorConfig {
            transactional,
            ..growing(true)
        });
        acc.reset_sequences(ProducerIdentity { id: 7, epoch: 0 });
        let mut futures = Vec::new();
        let mut append = |acc: &mut Accumulator, range: std::ops::Range<usize>| {
            for i in range {
                let (sender, future) = DeliveryFuture::channel();
                acc.append(tp(), i as u64, record(i % 10), sender, now);
                futures.push(future);
            }
        };
        append(&mut acc, 0..10);
        let first = drain_all(&mut acc, now);
        append(&mut acc, 10..60);
        assert_eq!(batch_sizes(&acc), vec![40, 10]);
        acc.complete(&tp(), first[0].batch_id, written(0), now);
        let sent = drain_all(&mut acc, now);
        assert_eq!(sent.len(), 2, "the grown batch and the one behind it");
        // The topic takes less than 40 records: the grown batch is refused, the one behind
        // it comes back out of order.
        let (done, effects) = acc.complete(&tp(), sent[0].batch_id, too_large(), now);
        assert!(done.is_empty(), "no record failed");
        assert!(!effects.gap && effects.failed.is_none(), "{effects:?}");
        let (done, effects) = acc.complete(
            &tp(),
            sent[1].batch_id,
            BatchOutcome::OutOfOrder(error()),
            now,
        );
        assert!(done.is_empty(), "behind the split batch, not given up");
        assert!(!effects.gap && effects.failed.is_none(), "{effects:?}");
        // Sent again as batches of batch.size (ten records), one at a time, lowest sequence
        // first, covering the refused batch's sequence range; then the one behind it.
        let mut sequences = Vec::new();
        let mut offset = 10;
        for _ in 0..5 {
            let retry = drain_all(&mut acc, now + SECOND * 2);
            assert_eq!(retry.len(), 1, "one at a time");
            let (id, epoch, sequence) = header(&retry[0].bytes);
            assert_eq!((id, epoch), (7, 0));
            sequences.push(sequence);
            acc.complete(&tp(), retry[0].batch_id, written(offset), now);
            offset += 10;
        }
        assert_eq!(sequences, vec![10, 20, 30, 40, 50]);
        let offsets: Vec<i64> = futures
            .into_iter()
            .skip(10)
            .map(|f| outcome(f).expect("done").expect("written").offset)
            .collect();
        assert_eq!(
            offsets,
            (10..60).collect::<Vec<i64>>(),
            "every record, in order"
        );
        // The topic's batches no longer grow past batch.size.
        let more = drain_all(&mut acc, now);
        assert!(more.is_empty());
        append_n(&mut acc, 60, 30, now);
        let sent = drain_all(&mut acc, now);
        append_n(&mut acc, 90, 30, now);
        assert_eq!(sent.len(), 3);
        assert!(
            batch_sizes(&acc).iter().all(|n| *n <= 10),
            "{:?}",
            batch_sizes(&acc)
        );
    }

    #[test]
    fn a_batch_refused_as_too_large_after_its_delivery_timeout_fails_with_the_timeout() {
        let now = Instant::now();
        let (mut acc, futures) = filled(growing(true), 20, now);
        let sent = drain_all(&mut acc, now);
        assert_eq!(sent.len(), 1);
        let late = now + Duration::from_secs(11);
        let (done, effects) = acc.complete(&tp(), sent[0].batch_id, too_large(), late);
        assert_eq!(done.len(), 10, "the batch's records, not split");
        for future in futures.into_iter().take(10) {
            let failed = outcome(future).expect("done").expect_err("failed");
            assert!(
                matches!(failed, ProducerError::Timeout { last: None, .. }),
                "a timeout, not a record too large: {failed:?}"
            );
        }
        assert!(effects.failed.is_some());
        // A split part that waits past the deadline is given up by `expire`.
        let (mut acc, futures) = filled(growing(true), 20, now);
        let sent = drain_all(&mut acc, now);
        acc.complete(&tp(), sent[0].batch_id, too_large(), now);
        let (expired, _) = acc.expire(late);
        assert_eq!(expired.len(), 20, "both parts and the batch behind them");
        assert!(
            futures
                .into_iter()
                .all(|f| outcome(f).is_some_and(|r| r.is_err()))
        );
    }

    #[test]
    fn a_single_record_too_large_fails_and_a_split_shrinks_every_time() {
        let now = Instant::now();
        let (mut acc, futures) = filled(config(true, false), 1, now);
        let sent = drain_all(&mut acc, now);
        let (done, effects) = acc.complete(&tp(), sent[0].batch_id, too_large(), now);
        assert_eq!(done, vec![0]);
        assert!(effects.failed.is_some());
        let failed = outcome(futures.into_iter().next().unwrap()).expect("done");
        assert!(failed.is_err());
        // With batch.size above what the topic takes, each split halves the batch: 8
        // records refused again and again end as single records, never the same batch.
        let mut acc = Accumulator::new(AccumulatorConfig {
            batch_size: BATCH_OVERHEAD + 8 * SMALL,
            max_batch_size: BATCH_OVERHEAD + 8 * SMALL,
            ..config(false, false)
        });
        append_n(&mut acc, 0, 8, now);
        let mut sizes = Vec::new();
        let mut later = now;
        for _ in 0..20 {
            later += SECOND;
            let sent = drain_all(&mut acc, later);
            let Some(d) = sent.first() else { break };
            let records = acc.partitions[&tp()]
                .unacked
                .iter()
                .find(|b| b.id == d.batch_id)
                .map(|b| b.records.len())
                .unwrap();
            sizes.push(records);
            acc.complete(&tp(), d.batch_id, too_large(), later);
        }
        assert_eq!(&sizes[..4], &[8, 4, 2, 1], "{sizes:?}");
        assert!(acc.partitions[&tp()].unacked.is_empty(), "{sizes:?}");
    }

    #[test]
    fn a_grown_open_batch_goes_without_waiting_for_linger() {
        let now = Instant::now();
        let config = AccumulatorConfig {
            linger: Duration::from_secs(60),
            ..growing(true)
        };
        let mut acc = Accumulator::new(config);
        acc.reset_sequences(ProducerIdentity { id: 7, epoch: 0 });
        append_n(&mut acc, 0, 10, now);
        let first = drain_all(&mut acc, now);
        assert_eq!(first.len(), 1);
        // 15 records: past batch.size but under the maximum, still open.
        append_n(&mut acc, 10, 15, now);
        assert_eq!(batch_sizes(&acc), vec![15]);
        assert!(acc.has_open_batch(&tp()));
        acc.complete(&tp(), first[0].batch_id, written(0), now);
        let sent = drain_all(&mut acc, now);
        assert_eq!(sent.len(), 1, "full by batch.size: not held for linger.ms");
    }

    #[test]
    fn at_most_max_in_flight_batches_per_partition_with_consecutive_sequences() {
        let now = Instant::now();
        let (mut acc, _futures) = filled(config(true, false), 8, now);
        let first = drain_all(&mut acc, now);
        assert_eq!(first.len(), 1, "the first batch of a partition goes alone");
        acc.complete(&tp(), first[0].batch_id, written(100), now);
        let sent = drain_all(&mut acc, now);
        assert_eq!(sent.len(), 5, "the in-flight window");
        let sequences: Vec<i32> = sent.iter().map(|d| header(&d.bytes).2).collect();
        assert_eq!(sequences, vec![1, 2, 3, 4, 5]);
        assert!(sent.iter().all(|d| header(&d.bytes).0 == 7));
        assert_eq!(acc.in_flight(), 5);
        // One answer frees one place.
        let (done, _) = acc.complete(&tp(), sent[0].batch_id, written(101), now);
        assert_eq!(done, vec![1]);
        let more = drain_all(&mut acc, now);
        assert_eq!(more.len(), 1);
        assert_eq!(header(&more[0].bytes).2, 6);
    }

    #[test]
    fn retries_go_one_at_a_time_lowest_sequence_first_with_the_same_bytes() {
        let now = Instant::now();
        let (mut acc, futures) = pipelining(config(true, false), 4, now);
        let sent = drain_all(&mut acc, now);
        assert_eq!(sent.len(), 4);
        // A cut connection: every batch failed, maybe written.
        for d in &sent[..3] {
            acc.complete(&tp(), d.batch_id, retriable(true), now);
        }
        // Nothing is retried while a batch of the partition is still in flight.
        let later = now + SECOND;
        assert!(drain_all(&mut acc, later).is_empty());
        acc.complete(&tp(), sent[3].batch_id, retriable(true), now);
        // Not before the backoff.
        assert!(drain_all(&mut acc, now).is_empty());
        for (i, original) in sent.iter().enumerate() {
            let retry = drain_all(&mut acc, later + SECOND * i as u32);
            assert_eq!(retry.len(), 1, "one retry at a time");
            assert_eq!(retry[0].batch_id, original.batch_id, "in sequence order");
            assert_eq!(retry[0].bytes, original.bytes, "byte for byte");
            acc.complete(&tp(), retry[0].batch_id, written(10 + i as i64), later);
        }
        let offsets: Vec<i64> = futures
            .into_iter()
            .map(|f| outcome(f).unwrap().unwrap().offset)
            .collect();
        assert_eq!(offsets, vec![10, 11, 12, 13]);
    }

    #[test]
    fn new_batches_wait_until_the_retries_are_done() {
        let now = Instant::now();
        let (mut acc, _futures) = pipelining(config(true, false), 2, now);
        let sent = drain_all(&mut acc, now);
        acc.complete(&tp(), sent[0].batch_id, retriable(false), now);
        acc.complete(&tp(), sent[1].batch_id, retriable(false), now);
        let (sender, _late) = DeliveryFuture::channel();
        acc.append(tp(), 99, record(99), sender, now);
        let later = now + SECOND;
        let retry = drain_all(&mut acc, later);
        assert_eq!(retry.len(), 1);
        assert_eq!(retry[0].batch_id, sent[0].batch_id);
        acc.complete(&tp(), retry[0].batch_id, written(0), later);
        // The last retry goes first; once none waits, the new batch may follow it.
        let next = drain_all(&mut acc, later);
        assert_eq!(next.len(), 2);
        assert_eq!(next[0].batch_id, sent[1].batch_id);
        assert_eq!(next[0].bytes, sent[1].bytes);
        assert_eq!(header(&next[1].bytes).2, 3, "the new batch follows");
    }

    #[test]
    fn nothing_overtakes_a_first_batch_that_failed() {
        let now = Instant::now();
        let (mut acc, _futures) = filled(config(true, false), 3, now);
        let first = drain_all(&mut acc, now);
        assert_eq!(first.len(), 1);
        // NOT_LEADER_OR_FOLLOWER right after the topic was created.
        acc.complete(&tp(), first[0].batch_id, retriable(false), now);
        let later = now + SECOND;
        let retry = drain_all(&mut acc, later);
        assert_eq!(retry.len(), 1, "the first batch again, alone");
        assert_eq!(retry[0].bytes, first[0].bytes);
        acc.complete(&tp(), retry[0].batch_id, written(0), later);
        let rest = drain_all(&mut acc, later);
        let sequences: Vec<i32> = rest.iter().map(|d| header(&d.bytes).2).collect();
        assert_eq!(sequences, vec![1, 2], "then pipelined");
    }

    #[test]
    fn a_duplicate_is_a_success_without_offset() {
        let now = Instant::now();
        let (mut acc, futures) = filled(config(true, false), 1, now);
        let sent = drain_all(&mut acc, now);
        let (done, effects) = acc.complete(&tp(), sent[0].batch_id, BatchOutcome::Duplicate, now);
        assert_eq!(done, vec![0]);
        assert!(!effects.gap && effects.failed.is_none());
        let meta = outcome(futures.into_iter().next().unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(meta.offset, -1);
        assert_eq!(meta.partition, 0);
        assert!(acc.complete_below(1));
        assert!(!acc.bump_pending());
    }

    #[test]
    fn out_of_order_behind_an_unwritten_batch_is_retried() {
        let now = Instant::now();
        let (mut acc, mut futures) = pipelining(config(true, false), 2, now);
        let sent = drain_all(&mut acc, now);
        acc.complete(&tp(), sent[0].batch_id, retriable(false), now);
        let (done, effects) = acc.complete(
            &tp(),
            sent[1].batch_id,
            BatchOutcome::OutOfOrder(error()),
            now,
        );
        assert!(done.is_empty(), "not failed");
        assert!(!effects.gap && !acc.bump_pending());
        let later = now + SECOND;
        for (i, original) in sent.iter().enumerate() {
            let retry = drain_all(&mut acc, later);
            assert_eq!(retry.len(), 1);
            assert_eq!(retry[0].batch_id, original.batch_id);
            acc.complete(&tp(), original.batch_id, written(i as i64), later);
        }
        assert!(outcome(futures.remove(1)).unwrap().is_ok());
    }

    #[test]
    fn out_of_order_at_the_head_fails_the_batch_and_bumps_the_epoch() {
        let now = Instant::now();
        let (mut acc, mut futures) = pipelining(config(true, false), 3, now);
        let sent = drain_all(&mut acc, now);
        let (done, effects) = acc.complete(
            &tp(),
            sent[0].batch_id,
            BatchOutcome::OutOfOrder(error()),
            now,
        );
        assert_eq!(done, vec![0]);
        assert!(effects.gap);
        assert!(outcome(futures.remove(0)).unwrap().is_err());
        assert!(acc.bump_pending());
        assert!(!acc.ready_to_bump(), "batches still in flight");
        // The later batches are refused too: not written, kept for the new epoch.
        for d in &sent[1..] {
            let (done, _) = acc.complete(&tp(), d.batch_id, BatchOutcome::OutOfOrder(error()), now);
            assert!(done.is_empty());
        }
        assert!(acc.ready_to_bump());
        // Nothing is sent until the bump.
        assert!(drain_all(&mut acc, now + SECOND).is_empty());
        acc.reset_sequences(ProducerIdentity { id: 7, epoch: 1 });
        let mut resent = Vec::new();
        let mut at = now + SECOND;
        while resent.len() < 2 {
            let more = drain_all(&mut acc, at);
            for d in &more {
                acc.complete(&tp(), d.batch_id, written(resent.len() as i64), at);
            }
            resent.extend(more);
            at += SECOND;
        }
        let headers: Vec<(i64, i16, i32)> = resent.iter().map(|d| header(&d.bytes)).collect();
        assert_eq!(
            headers,
            vec![(7, 1, 0), (7, 1, 1)],
            "renumbered from 0 under the new epoch"
        );
        for future in futures {
            assert!(outcome(future).unwrap().is_ok());
        }
    }

    #[test]
    fn a_bump_waits_until_writes_of_unknown_outcome_are_resolved() {
        let now = Instant::now();
        let (mut acc, _futures) = pipelining(config(true, false), 2, now);
        let sent = drain_all(&mut acc, now);
        // The first answer was lost; the second batch is rejected for good.
        acc.complete(&tp(), sent[0].batch_id, retriable(true), now);
        let (_, effects) =
            acc.complete(&tp(), sent[1].batch_id, BatchOutcome::Failed(error()), now);
        assert!(effects.gap && acc.bump_pending());
        assert!(!acc.ready_to_bump(), "the lost answer is unresolved");
        let (sender, _late) = DeliveryFuture::channel();
        acc.append(tp(), 9, record(9), sender, now);
        // Only the unresolved batch goes, under the old epoch and sequence.
        let later = now + SECOND;
        let retry = drain_all(&mut acc, later);
        assert_eq!(retry.len(), 1);
        assert_eq!(retry[0].bytes, sent[0].bytes);
        acc.complete(&tp(), retry[0].batch_id, BatchOutcome::Duplicate, later);
        assert!(acc.ready_to_bump());
    }

    #[test]
    fn a_refusal_resolves_the_lost_answers_after_it_an_unreadable_answer_does_not() {
        let now = Instant::now();
        for (outcome, resolved) in [
            (BatchOutcome::Failed(error()), true),
            (BatchOutcome::GivenUp(error()), false),
        ] {
            let (mut acc, _futures) = pipelining(config(true, false), 2, now);
            let sent = drain_all(&mut acc, now);
            // The second answer was lost; then the first batch is given up.
            acc.complete(&tp(), sent[1].batch_id, retriable(true), now);
            let (_, effects) = acc.complete(&tp(), sent[0].batch_id, outcome, now);
            assert!(effects.gap && acc.bump_pending());
            // Refused: the broker wrote nothing after it, so the bump may renumber the lost
            // batch. Unreadable: the first batch may have been written, and the second too.
            assert_eq!(acc.ready_to_bump(), resolved);
        }
    }

    #[test]
    fn unknown_producer_keeps_the_batch_for_the_new_epoch() {
        let now = Instant::now();
        let (mut acc, futures) = filled(config(true, false), 1, now);
        let sent = drain_all(&mut acc, now);
        let (done, effects) = acc.complete(
            &tp(),
            sent[0].batch_id,
            BatchOutcome::UnknownProducer(error()),
            now,
        );
        assert!(done.is_empty());
        assert!(effects.gap && acc.ready_to_bump());
        acc.reset_sequences(ProducerIdentity { id: 8, epoch: 0 });
        let retry = drain_all(&mut acc, now + SECOND);
        assert_eq!(retry.len(), 1);
        assert_eq!(header(&retry[0].bytes), (8, 0, 0));
        acc.complete(&tp(), retry[0].batch_id, written(5), now + SECOND);
        let meta = outcome(futures.into_iter().next().unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(meta.offset, 5);
    }

    #[test]
    fn in_a_transaction_a_gap_fails_without_a_bump() {
        let now = Instant::now();
        let (mut acc, mut futures) = pipelining(config(true, true), 2, now);
        let sent = drain_all(&mut acc, now);
        let (done, effects) = acc.complete(
            &tp(),
            sent[0].batch_id,
            BatchOutcome::OutOfOrder(error()),
            now,
        );
        assert_eq!(done, vec![0]);
        assert!(effects.gap && effects.failed.is_some());
        assert!(!acc.bump_pending(), "a transaction aborts instead");
        let (done, effects) = acc.complete(
            &tp(),
            sent[1].batch_id,
            BatchOutcome::UnknownProducer(error()),
            now,
        );
        assert_eq!(done, vec![1]);
        assert!(effects.failed.is_some());
        assert!(outcome(futures.remove(1)).unwrap().is_err());
    }

    #[test]
    fn the_delivery_timeout_fails_waiting_batches_but_not_those_in_flight() {
        let now = Instant::now();
        let mut config = config(true, false);
        config.max_in_flight = 1;
        let (mut acc, mut futures) = filled(config, 3, now);
        let sent = drain_all(&mut acc, now);
        assert_eq!(sent.len(), 1);
        let past = now + Duration::from_secs(11);
        let (done, effects) = acc.expire(past);
        assert_eq!(done, vec![1, 2], "the queued ones, not the one in flight");
        assert!(!effects.gap, "queued batches have no sequence yet");
        assert!(matches!(
            outcome(futures.remove(1)).unwrap(),
            Err(ProducerError::Timeout { .. })
        ));
        // A retry due after the deadline is given up, leaving a gap.
        let (done, effects) = acc.complete(&tp(), sent[0].batch_id, retriable(false), past);
        assert_eq!(done, vec![0]);
        assert!(effects.gap && acc.bump_pending());
        let Err(ProducerError::Timeout { last, .. }) = outcome(futures.remove(0)).unwrap() else {
            panic!("a timeout");
        };
        assert!(last.is_some(), "names the last error");
    }

    #[test]
    fn a_retry_waiting_past_its_deadline_expires_with_a_gap() {
        let now = Instant::now();
        let (mut acc, _futures) = filled(config(true, false), 1, now);
        let sent = drain_all(&mut acc, now);
        acc.complete(&tp(), sent[0].batch_id, retriable(false), now);
        assert_eq!(acc.expire(now + SECOND).0, Vec::<u64>::new());
        let (done, effects) = acc.expire(now + Duration::from_secs(10));
        assert_eq!(done, vec![0]);
        assert!(effects.gap && acc.bump_pending());
    }

    /// A batch ready but held back by the partition's in-flight window is not a reason to
    /// wake the sender (the answer that frees the window is): only times still to come are.
    #[test]
    fn a_batch_held_back_by_the_window_wakes_nobody_before_its_deadline() {
        let now = Instant::now();
        let mut config = config(true, false);
        config.linger = Duration::from_millis(5);
        let (mut acc, _futures) = filled(config, 3, now);
        // Before the first answer one batch at a time is in flight.
        assert_eq!(drain_all(&mut acc, now).len(), 1);
        let later = now + Duration::from_millis(50);
        assert!(
            drain_all(&mut acc, later).is_empty(),
            "held back by the window"
        );
        let wake = acc.next_wakeup(later).expect("the delivery deadline");
        assert!(wake > later, "not a time already past: {wake:?}");
        assert_eq!(
            wake,
            now + Duration::from_secs(10),
            "the front batch's deadline"
        );
    }

    /// Batches `expire(now)` should give up: past their deadline and not in flight.
    fn expirable(acc: &Accumulator, now: Instant) -> usize {
        acc.partitions
            .values()
            .map(|p| {
                p.queued.iter().filter(|b| b.deadline <= now).count()
                    + p.unacked
                        .iter()
                        .filter(|b| b.deadline <= now && b.state != BatchState::InFlight)
                        .count()
            })
            .sum()
    }

    proptest::proptest! {
        /// `expire` skips its scan until the earliest deadline a batch could be given up at;
        /// whatever happens in between (records appended at later times, batches sent,
        /// answered, sent again), once it has run no batch it should have given up is left.
        #[test]
        fn expire_never_leaves_an_expirable_batch(
            steps in proptest::collection::vec((0u8..4, 0u64..4_000, 0i32..3), 1..60),
        ) {
            let start = Instant::now();
            let mut config = config(true, false);
            config.delivery_timeout = Duration::from_secs(5);
            let mut acc = Accumulator::new(config);
            acc.reset_sequences(ProducerIdentity { id: 7, epoch: 0 });
            let mut now = start;
            let mut in_flight: Vec<Drained> = Vec::new();
            let mut futures = Vec::new();
            for (i, (op, advance_ms, partition)) in steps.into_iter().enumerate() {
                now += Duration::from_millis(advance_ms);
                match op {
                    0 => {
                        let (sender, future) = DeliveryFuture::channel();
                        acc.append((Arc::from("t"), partition), i as u64, record(i), sender, now);
                        futures.push(future);
                    }
                    1 => in_flight.extend(
                        acc.drain(now, true, &mut |_, _| Some(())).0.into_iter().map(|(b, ())| b),
                    ),
                    2 => {
                        if let Some(sent) = in_flight.pop() {
                            acc.complete(&sent.tp, sent.batch_id, retriable(false), now);
                        }
                    }
                    _ => {
                        if !in_flight.is_empty() {
                            let sent = in_flight.remove(0);
                            acc.complete(&sent.tp, sent.batch_id, written(0), now);
                        }
                    }
                }
                acc.expire(now);
                proptest::prop_assert_eq!(expirable(&acc, now), 0, "after step {}", i);
            }
        }
    }
}
