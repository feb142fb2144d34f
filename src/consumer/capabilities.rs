//! [`ConsumerCapabilities`]: which optional parts of [`ShareConsumer`] an implementation has.

use std::fmt;

#[cfg(doc)]
use super::ShareConsumer;

/// One optional part of [`ShareConsumer`], whose default implementation refuses at run time.
///
/// Its `Display` names the capability and the method that provides it, for errors such as
/// [`Error::MissingCapability`](crate::Error::MissingCapability).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ConsumerCapability {
    /// RENEW acknowledgements work ([`ShareConsumer::acknowledge_offset`] with
    /// [`AcknowledgeType::Renew`](super::AcknowledgeType::Renew); Kafka 4.2+, or the embedded
    /// group).
    Renew,
    /// Records can be kept acquired across polls ([`ShareConsumer::hold_offset`], explicit
    /// acknowledgement mode).
    Hold,
    /// [`ShareConsumer::unsubscribe`].
    Unsubscribe,
    /// [`ShareConsumer::set_acknowledgement_commit_callback`].
    CommitCallback,
    /// Acknowledgements can be taken out for a producer transaction (KIP-1289:
    /// `ShareConsumer::take_acknowledgements_for_transaction`, feature `exactly-once`).
    TransactionalAcknowledgements,
}

impl ConsumerCapability {
    /// Every capability, in a fixed order.
    pub const ALL: [Self; 5] = [
        Self::Renew,
        Self::Hold,
        Self::Unsubscribe,
        Self::CommitCallback,
        Self::TransactionalAcknowledgements,
    ];

    /// The capability's bit in [`ConsumerCapabilities`].
    const fn bit(self) -> u8 {
        match self {
            Self::Renew => 1,
            Self::Hold => 1 << 1,
            Self::Unsubscribe => 1 << 2,
            Self::CommitCallback => 1 << 3,
            Self::TransactionalAcknowledgements => 1 << 4,
        }
    }
}

impl fmt::Display for ConsumerCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Renew => "RENEW acknowledgements (ShareConsumer::supports_renew; Kafka 4.2+)",
            Self::Hold => "holding records across polls (ShareConsumer::hold_offset)",
            Self::Unsubscribe => "unsubscribing (ShareConsumer::unsubscribe)",
            Self::CommitCallback => {
                "an acknowledgement commit callback \
                 (ShareConsumer::set_acknowledgement_commit_callback)"
            }
            Self::TransactionalAcknowledgements => {
                "acknowledgements staged into a transaction, KIP-1289 \
                 (ShareConsumer::take_acknowledgements_for_transaction)"
            }
        })
    }
}

/// What a [`ShareConsumer`] can do beyond its required methods, as reported by
/// [`ShareConsumer::capabilities`]: a set of [`ConsumerCapability`].
///
/// [`ShareSinkTask::initialize`](crate::ShareSinkTask::initialize) checks it against what its
/// settings need and refuses a consumer that lacks a capability with
/// [`Error::MissingCapability`](crate::Error::MissingCapability), instead of failing later in
/// an iteration.
///
/// ```
/// use kafka_share_sink::embedded::EmbeddedBroker;
/// use kafka_share_sink::{ConsumerCapabilities, ConsumerCapability, ShareConsumer};
///
/// let broker = EmbeddedBroker::new();
/// let consumer = broker.share_consumer("sink");
/// assert!(consumer.capabilities().contains(ConsumerCapability::Hold));
///
/// // What a consumer without optional methods reports (RENEW from `supports_renew`):
/// let minimal = ConsumerCapabilities::none().with(ConsumerCapability::Renew);
/// assert!(!minimal.contains(ConsumerCapability::Hold));
/// assert_eq!(minimal.iter().collect::<Vec<_>>(), [ConsumerCapability::Renew]);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct ConsumerCapabilities {
    bits: u8,
}

impl ConsumerCapabilities {
    /// No capability.
    pub const fn none() -> Self {
        Self { bits: 0 }
    }

    /// Every capability.
    pub const fn all() -> Self {
        let mut bits = 0;
        let mut i = 0;
        while i < ConsumerCapability::ALL.len() {
            bits |= ConsumerCapability::ALL[i].bit();
            i += 1;
        }
        Self { bits }
    }

    /// These capabilities and `capability`.
    #[must_use]
    pub const fn with(self, capability: ConsumerCapability) -> Self {
        Self {
            bits: self.bits | capability.bit(),
        }
    }

    /// These capabilities without `capability`.
    #[must_use]
    pub const fn without(self, capability: ConsumerCapability) -> Self {
        Self {
            bits: self.bits & !capability.bit(),
        }
    }

    /// These capabilities, with `capability` when `present`.
    #[must_use]
    pub const fn with_if(self, capability: ConsumerCapability, present: bool) -> Self {
        if present {
            self.with(capability)
        } else {
            self.without(capability)
        }
    }

    /// Whether `capability` is in the set.
    pub const fn contains(self, capability: ConsumerCapability) -> bool {
        self.bits & capability.bit() != 0
    }

    /// The first of `needed` that is not in the set, if any.
    pub fn missing(self, needed: &[ConsumerCapability]) -> Option<ConsumerCapability> {
        needed.iter().copied().find(|c| !self.contains(*c))
    }

    /// The capabilities in the set, in the order of [`ConsumerCapability::ALL`].
    pub fn iter(self) -> impl Iterator<Item = ConsumerCapability> {
        ConsumerCapability::ALL
            .into_iter()
            .filter(move |c| self.contains(*c))
    }
}

impl fmt::Debug for ConsumerCapabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl FromIterator<ConsumerCapability> for ConsumerCapabilities {
    fn from_iter<I: IntoIterator<Item = ConsumerCapability>>(iter: I) -> Self {
        iter.into_iter().fold(Self::none(), Self::with)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_are_distinct_and_all_has_every_capability() {
        let all = ConsumerCapabilities::all();
        assert_eq!(all.iter().count(), ConsumerCapability::ALL.len());
        for c in ConsumerCapability::ALL {
            let one = ConsumerCapabilities::none().with(c);
            assert_eq!(one.iter().collect::<Vec<_>>(), [c]);
            assert!(!all.without(c).contains(c));
        }
    }

    #[test]
    fn missing_names_the_first_absent_capability() {
        let caps: ConsumerCapabilities =
            [ConsumerCapability::Hold, ConsumerCapability::Unsubscribe]
                .into_iter()
                .collect();
        assert_eq!(
            caps.missing(&[ConsumerCapability::Hold, ConsumerCapability::Renew]),
            Some(ConsumerCapability::Renew)
        );
        assert_eq!(caps.missing(&[ConsumerCapability::Hold]), None);
        assert_eq!(format!("{caps:?}"), "{Hold, Unsubscribe}");
        assert!(
            ConsumerCapability::Renew
                .to_string()
                .contains("supports_renew")
        );
    }
}
