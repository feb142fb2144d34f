//! Errors of share consumers and of acknowledgements.

use std::time::Duration;

use crate::record::RecordId;

/// Errors of a [`ShareConsumer`](crate::ShareConsumer) call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumerError {
    /// The consumer was closed; build a new one.
    #[error("the share consumer is closed")]
    Closed,
    /// `poll` was called before `subscribe`.
    #[error("poll called before subscribe: call subscribe(topics) first")]
    NotSubscribed,
    /// `subscribe` was given no topic, or an empty or duplicate name.
    #[error("invalid subscription: {reason}")]
    InvalidSubscription {
        /// What is wrong with the topic list.
        reason: String,
    },
    /// Explicit mode: the previous poll still has records that were not acknowledged.
    #[error(
        "{count} record(s) of the previous poll are not acknowledged (first: {first}); in explicit \
         acknowledgement mode every record must be acknowledged (ACCEPT, RELEASE, REJECT or RENEW) \
         before the next poll"
    )]
    UnacknowledgedRecords {
        /// How many records of the previous poll have no acknowledgement.
        count: usize,
        /// The first of them.
        first: RecordId,
    },
    /// `acknowledge` was called on a consumer in implicit acknowledgement mode.
    #[error(
        "acknowledge called in implicit acknowledgement mode, where the next poll or commit \
         accepts every record; use share.acknowledgement.mode=explicit to acknowledge records \
         one by one"
    )]
    ImplicitAcknowledgement,
    /// The record is not part of the last poll, so it cannot be acknowledged.
    #[error(
        "record {record} cannot be acknowledged: it is not part of the last poll (acknowledge \
         records before polling again)"
    )]
    NotInBatch {
        /// The record named in the call.
        record: RecordId,
    },
    /// The record's acknowledgement was already sent; only a RENEW may be followed by
    /// another acknowledgement.
    #[error("record {record} was already acknowledged and the acknowledgement sent")]
    AlreadyAcknowledged {
        /// The record named in the call.
        record: RecordId,
    },
    /// The call did not finish in time.
    #[error("the share consumer call did not finish within {0:?}")]
    Timeout(Duration),
}

impl ConsumerError {
    /// True when the same call may succeed later without any change by the caller.
    pub fn is_retriable(&self) -> bool {
        matches!(self, Self::Timeout(_))
    }
}

/// Why the acknowledgements of one partition failed, as reported by a commit.
///
/// The acknowledgements of a partition are applied all together or not at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AckError {
    /// INVALID_RECORD_STATE (121): a record was not acquired by this member any more, most
    /// often because its acquisition lock expired. Nothing of the partition was acknowledged;
    /// the records are (or will be) delivered again. Not retried.
    #[error("acknowledgement refused with INVALID_RECORD_STATE: {detail}")]
    InvalidRecordState {
        /// Which record and why.
        detail: String,
    },
    /// Another error code from the broker.
    #[error("acknowledgement refused with broker error code {code}")]
    Broker {
        /// The Kafka error code.
        code: i16,
        /// The broker's error message, if it sent one.
        message: Option<String>,
    },
    /// No answer arrived before the commit deadline.
    #[error("acknowledgement timed out")]
    Timeout,
}

impl AckError {
    /// True when the acknowledgement failed because the record's acquisition lock was lost.
    pub fn is_lock_lost(&self) -> bool {
        matches!(self, Self::InvalidRecordState { .. })
    }
}
