//! What a cluster offers for exactly-once, and which mode follows from it.

use std::fmt;

/// What the cluster (and this client) offer for exactly-once delivery, as found at
/// [`initialize`](crate::ShareSinkTask::initialize).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ClusterCapabilities {
    /// The finalized `share.version` feature level (0 when not finalized). KIP-1289 needs 3.
    pub share_version: i16,
    /// The finalized `transaction.version` feature level (0 when not finalized).
    /// Transactions v2 (KIP-890) need 2.
    pub transaction_version: i16,
    /// The brokers answer transactional share acknowledgements (KIP-1289's
    /// TxnShareAcknowledge) in a form this client speaks.
    pub transactional_share_acknowledge: bool,
    /// The share-partition leaders take RENEW acknowledgements and keep the delivery count on a
    /// session release (Kafka 4.2+: ShareAcknowledge v2).
    pub renew: bool,
    /// The group leaves RENEW on (`share.renew.acknowledge.enable`, default true).
    pub renew_enabled_for_group: bool,
}

impl ClusterCapabilities {
    /// Capabilities with every level at zero and nothing supported.
    pub fn none() -> Self {
        Self::default()
    }

    /// Sets the finalized `share.version`.
    pub fn with_share_version(mut self, level: i16) -> Self {
        self.share_version = level;
        self
    }

    /// Sets the finalized `transaction.version`.
    pub fn with_transaction_version(mut self, level: i16) -> Self {
        self.transaction_version = level;
        self
    }

    /// Sets whether transactional share acknowledgements can be sent.
    pub fn with_transactional_share_acknowledge(mut self, supported: bool) -> Self {
        self.transactional_share_acknowledge = supported;
        self
    }

    /// Sets whether RENEW is supported, and whether the group leaves it on.
    pub fn with_renew(mut self, supported: bool, enabled_for_group: bool) -> Self {
        self.renew = supported;
        self.renew_enabled_for_group = enabled_for_group;
        self
    }

    /// Whether KIP-1289's atomic acknowledgements can be used.
    pub fn atomic_acknowledgements(&self) -> bool {
        self.share_version >= 3
            && self.transaction_version >= 2
            && self.transactional_share_acknowledge
    }

    /// What ledger mode lacks here, if anything.
    pub(crate) fn ledger_missing(&self) -> Option<&'static str> {
        if self.transaction_version < 2 {
            Some(
                "transaction.version 2 (transactions v2, KIP-890) finalized on the cluster: run `kafka-features.sh upgrade --feature transaction.version=2`",
            )
        } else if !self.renew {
            Some(
                "RENEW acknowledgements (Kafka 4.2 or newer: ShareAcknowledge v2); Kafka 4.1 and older brokers cannot tell this client it still owns a record before it commits",
            )
        } else if !self.renew_enabled_for_group {
            Some(
                "RENEW enabled for the share group: set the group's share.renew.acknowledge.enable=true",
            )
        } else {
            None
        }
    }
}

/// How the exactly-once iteration settles its input, chosen at
/// [`initialize`](crate::ShareSinkTask::initialize) from [`ClusterCapabilities`] and reported by
/// [`ShareSinkTask::exactly_once_mode`](crate::ShareSinkTask::exactly_once_mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ExactlyOnceMode {
    /// KIP-1289: the acknowledgements are staged into the producer transaction; its commit
    /// or abort settles outputs and inputs together.
    AtomicAcknowledgements,
    /// Kafka 4.2–4.4: claims of the processed source ranges go to a ledger topic in the
    /// transaction, locks are renewed before the commit, inputs are accepted after it, and a
    /// redelivered record already claimed is accepted without being processed again.
    Ledger,
}

impl fmt::Display for ExactlyOnceMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::AtomicAcknowledgements => "atomic-acknowledgements",
            Self::Ledger => "ledger",
        })
    }
}

/// Which mode the user allows (`exactly.once.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ModePreference {
    /// Atomic acknowledgements where the cluster has them, else the ledger.
    #[default]
    Auto,
    /// Always the ledger (for example while records claimed in ledger mode may still be
    /// redelivered after a switch).
    Ledger,
    /// Atomic acknowledgements only; refused where the cluster lacks them.
    Atomic,
}

impl std::str::FromStr for ModePreference {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "ledger" => Ok(Self::Ledger),
            "atomic" | "atomic-acknowledgements" => Ok(Self::Atomic),
            other => Err(format!(
                "`{other}` is not an exactly-once mode: use auto, ledger or atomic"
            )),
        }
    }
}

/// The mode for these capabilities, or what is missing.
pub(crate) fn choose_mode(
    capabilities: &ClusterCapabilities,
    preference: ModePreference,
) -> Result<ExactlyOnceMode, &'static str> {
    let atomic = capabilities.atomic_acknowledgements();
    match preference {
        ModePreference::Atomic if atomic => Ok(ExactlyOnceMode::AtomicAcknowledgements),
        ModePreference::Atomic => Err(if capabilities.transaction_version < 2 {
            "transaction.version 2 finalized on the cluster (atomic acknowledgements need transactions v2)"
        } else if capabilities.share_version < 3 {
            "share.version 3 finalized on the cluster (KIP-1289 transactional share acknowledgements; no Kafka release has it yet)"
        } else {
            "the TxnShareAcknowledge RPC in a form this client speaks (the cluster finalized share.version 3, but KIP-1289's wire format is not final)"
        }),
        ModePreference::Auto if atomic => Ok(ExactlyOnceMode::AtomicAcknowledgements),
        ModePreference::Auto | ModePreference::Ledger => match capabilities.ledger_missing() {
            None => Ok(ExactlyOnceMode::Ledger),
            Some(missing) => Err(missing),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kafka_4_4() -> ClusterCapabilities {
        ClusterCapabilities::none()
            .with_share_version(2)
            .with_transaction_version(2)
            .with_renew(true, true)
    }

    #[test]
    fn kafka_4_4_gets_the_ledger_and_kip_1289_gets_atomic_acknowledgements() {
        assert_eq!(
            choose_mode(&kafka_4_4(), ModePreference::Auto),
            Ok(ExactlyOnceMode::Ledger)
        );
        let kip = kafka_4_4()
            .with_share_version(3)
            .with_transactional_share_acknowledge(true);
        assert_eq!(
            choose_mode(&kip, ModePreference::Auto),
            Ok(ExactlyOnceMode::AtomicAcknowledgements)
        );
        assert_eq!(
            choose_mode(&kip, ModePreference::Ledger),
            Ok(ExactlyOnceMode::Ledger)
        );
        assert!(
            choose_mode(&kafka_4_4(), ModePreference::Atomic)
                .unwrap_err()
                .contains("share.version 3")
        );
    }

    #[test]
    fn each_missing_capability_is_named() {
        let tv1 = kafka_4_4().with_transaction_version(1);
        assert!(
            choose_mode(&tv1, ModePreference::Auto)
                .unwrap_err()
                .contains("transaction.version 2")
        );
        let kafka_4_1 = kafka_4_4().with_renew(false, false);
        assert!(
            choose_mode(&kafka_4_1, ModePreference::Auto)
                .unwrap_err()
                .contains("4.2")
        );
        let off = kafka_4_4().with_renew(true, false);
        assert!(
            choose_mode(&off, ModePreference::Auto)
                .unwrap_err()
                .contains("share.renew.acknowledge.enable")
        );
        // share.version 3 without the RPC in a form we speak: not atomic, ledger still works.
        let draft = kafka_4_4().with_share_version(3);
        assert_eq!(
            choose_mode(&draft, ModePreference::Auto),
            Ok(ExactlyOnceMode::Ledger)
        );
        assert!(
            choose_mode(&draft, ModePreference::Atomic)
                .unwrap_err()
                .contains("not final")
        );
    }
}
