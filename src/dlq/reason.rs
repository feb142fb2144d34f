//! [`DeadLetterReason`]: why a record was dead-lettered, as one short, stable word in the
//! [`REASON`](super::headers::REASON) header of every dead letter the driver writes.

use std::fmt;

/// Why the driver gave up on a record, written to the `__connect.errors.reason` header of
/// its dead letter (always, with or without Connect's other context headers).
///
/// The values are stable, lower case, dot-separated words, so that a consumer of the
/// dead-letter topic can route or count on them without parsing exception messages.
///
/// | Variant | Header value | When |
/// |---|---|---|
/// | [`Conversion`](Self::Conversion) | `conversion` | a key, value or header converter refused the record (`errors.tolerance=all`) |
/// | [`Transform`](Self::Transform) | `transform` | a transform or its predicate failed (`errors.tolerance=all`) |
/// | [`Put`](Self::Put) | `put` | the sink task's `put` failed with a fatal error |
/// | [`DeliveryLimit`](Self::DeliveryLimit) | `delivery.limit` | `put` failed retriably on the record's last allowed delivery (`max.delivery.attempts`, or the group's delivery-count limit) |
/// | [`Flush`](Self::Flush) | `flush` | the record was written on its last allowed delivery, but the flush that followed did not make it durable (`ack.policy=after.flush`) |
/// | [`RecordTooLarge`](Self::RecordTooLarge) | `record.too.large` | exactly-once: an output of the record is larger than the producer or the topic accepts |
/// | [`OutputRefused`](Self::OutputRefused) | `output.refused` | exactly-once: an output of the record was refused for another reason (invalid, a timestamp out of range) |
///
/// ```
/// use kafka_share_sink::DeadLetterReason;
///
/// assert_eq!(DeadLetterReason::DeliveryLimit.as_str(), "delivery.limit");
/// assert_eq!(DeadLetterReason::RecordTooLarge.to_string(), "record.too.large");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeadLetterReason {
    /// A converter refused the record.
    Conversion,
    /// A transform or its predicate failed.
    Transform,
    /// A fatal `put` error.
    Put,
    /// A retriable `put` error on the record's last allowed delivery.
    DeliveryLimit,
    /// Not made durable by the flush after its last allowed delivery.
    Flush,
    /// An exactly-once output of the record is too large.
    RecordTooLarge,
    /// An exactly-once output of the record was refused for what it holds.
    OutputRefused,
}

impl DeadLetterReason {
    /// The header value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Conversion => "conversion",
            Self::Transform => "transform",
            Self::Put => "put",
            Self::DeliveryLimit => "delivery.limit",
            Self::Flush => "flush",
            Self::RecordTooLarge => "record.too.large",
            Self::OutputRefused => "output.refused",
        }
    }

    /// The reason of a record that failed at `stage` of the conversion pipeline: a transform
    /// (or its predicate), else a converter.
    pub(crate) fn of_stage(stage: crate::stage::Stage) -> Self {
        match stage {
            crate::stage::Stage::Transformation => Self::Transform,
            _ => Self::Conversion,
        }
    }
}

impl fmt::Display for DeadLetterReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::Stage;

    #[test]
    fn values_are_short_and_distinct() {
        let all = [
            DeadLetterReason::Conversion,
            DeadLetterReason::Transform,
            DeadLetterReason::Put,
            DeadLetterReason::DeliveryLimit,
            DeadLetterReason::Flush,
            DeadLetterReason::RecordTooLarge,
            DeadLetterReason::OutputRefused,
        ];
        let values: std::collections::BTreeSet<&str> = all.iter().map(|r| r.as_str()).collect();
        assert_eq!(values.len(), all.len());
        for value in values {
            assert!(
                value.chars().all(|c| c.is_ascii_lowercase() || c == '.'),
                "{value}"
            );
        }
    }

    #[test]
    fn a_stage_names_its_reason() {
        assert_eq!(
            DeadLetterReason::of_stage(Stage::ValueConverter),
            DeadLetterReason::Conversion
        );
        assert_eq!(
            DeadLetterReason::of_stage(Stage::HeaderConverter),
            DeadLetterReason::Conversion
        );
        assert_eq!(
            DeadLetterReason::of_stage(Stage::Transformation),
            DeadLetterReason::Transform
        );
    }
}
