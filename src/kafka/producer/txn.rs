//! The transaction state machine and the classification of coordinator answers (§2.4 of
//! the exactly-once notes), free of I/O.

use std::collections::HashSet;
use std::sync::Arc;

use crate::kafka::error::BrokerError;
use crate::kafka::error::ClientError;
use crate::producer::ProducerError;

use super::accumulator::Tp;

/// Kafka error codes the transaction rules name.
pub(crate) mod code {
    pub(crate) const MESSAGE_TOO_LARGE: i16 = 10;
    pub(crate) const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    pub(crate) const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    pub(crate) const NOT_COORDINATOR: i16 = 16;
    pub(crate) const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
    pub(crate) const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;
    pub(crate) const INVALID_PRODUCER_EPOCH: i16 = 47;
    pub(crate) const INVALID_TXN_STATE: i16 = 48;
    pub(crate) const CONCURRENT_TRANSACTIONS: i16 = 51;
    pub(crate) const OPERATION_NOT_ATTEMPTED: i16 = 55;
    pub(crate) const UNKNOWN_PRODUCER_ID: i16 = 59;
    pub(crate) const PRODUCER_FENCED: i16 = 90;
    pub(crate) const TRANSACTION_ABORTABLE: i16 = 120;
}

/// The transaction protocol in use (KIP-890): chosen from the cluster's finalized
/// `transaction.version` feature, never from API versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxnVersion {
    /// AddPartitionsToTxn v≤3, Produce ≤ v11, EndTxn ≤ v4.
    V1,
    /// No AddPartitionsToTxn, Produce v12+, EndTxn v5 bumping the epoch.
    V2,
}

impl TxnVersion {
    /// The version for a finalized `transaction.version` level (`None`: not reported).
    pub(crate) fn from_feature(level: Option<i16>) -> Self {
        if level.is_some_and(|l| l >= 2) {
            Self::V2
        } else {
            Self::V1
        }
    }
}

/// Which coordinator call an answer belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CoordinatorCall {
    InitProducerId,
    AddPartitions,
    Commit,
    Abort,
}

/// What to do with a coordinator's error code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// No error.
    Done,
    /// Back off and send the same request again (CONCURRENT_TRANSACTIONS, other
    /// retriable codes).
    Retry,
    /// Look the coordinator up again, then retry.
    Rediscover,
    /// Another producer took over: fatal.
    Fenced,
    /// The transaction must be aborted.
    Abortable,
    /// The producer cannot go on.
    Fatal,
}

/// Java 4.4's rules for a coordinator answer (§2.4), with one documented divergence:
/// INVALID_TXN_STATE on a commit is abortable (the coordinator aborted the transaction
/// itself, after `transaction.timeout.ms`), so that an abort recovers.
pub(crate) fn classify(call: CoordinatorCall, error_code: i16, retriable: bool) -> Action {
    use code::*;
    match error_code {
        0 => Action::Done,
        CONCURRENT_TRANSACTIONS => Action::Retry,
        NOT_COORDINATOR | COORDINATOR_NOT_AVAILABLE | COORDINATOR_LOAD_IN_PROGRESS => {
            Action::Rediscover
        }
        PRODUCER_FENCED | INVALID_PRODUCER_EPOCH => Action::Fenced,
        TRANSACTION_ABORTABLE if call == CoordinatorCall::Abort => Action::Fatal,
        TRANSACTION_ABORTABLE | OPERATION_NOT_ATTEMPTED => Action::Abortable,
        UNKNOWN_PRODUCER_ID if call != CoordinatorCall::InitProducerId => Action::Abortable,
        INVALID_TXN_STATE if call == CoordinatorCall::Commit => Action::Abortable,
        _ if retriable => Action::Retry,
        _ => Action::Fatal,
    }
}

/// Where the transactional producer is.
#[derive(Debug, Clone)]
pub(crate) enum Phase {
    /// `init_transactions` not done (or must be done again after an unknown commit).
    Uninitialized,
    /// Between transactions.
    Ready,
    /// A transaction is open.
    InTransaction,
    /// A commit runs.
    Committing,
    /// An abort runs.
    Aborting,
    /// The open transaction must be aborted.
    Abortable(ProducerError),
    /// Nothing more can be done ([`ProducerError::is_fatal`] errors), except a new
    /// `init_transactions` after [`ProducerError::CommitOutcomeUnknown`].
    Fatal(ProducerError),
}

/// The transactional producer's state.
#[derive(Debug)]
pub(crate) struct TxnState {
    pub(crate) phase: Phase,
    /// The protocol of the open (or next) transaction.
    pub(crate) version: TxnVersion,
    /// TV1: partitions added to the open transaction.
    pub(crate) added: HashSet<Tp>,
    /// A batch of the open transaction was handed to a broker.
    pub(crate) sent_any: bool,
    /// Transactions v2: the last ended transaction's markers may still be being written.
    pub(crate) markers: Option<MarkersPending>,
    /// The number of the last transaction ended with markers pending.
    ended: u64,
}

/// After an EndTxn of transactions v2 (answered once the outcome is decided, before the
/// coordinator has written the markers): the next transaction's Produce requests wait until
/// the markers are written or `deadline` has passed. A Produce sent before would meet the
/// unfinished transaction in the leader's verification and wait the broker's own retry
/// backoff (`add.partitions.to.txn.retry.backoff.ms`, 20 ms by default), far longer than
/// the markers take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MarkersPending {
    /// Which ended transaction this is (so that a late answer about an older one does not
    /// lift the wait for a newer one).
    pub(crate) ended: u64,
    /// When the Produce requests go regardless.
    pub(crate) deadline: tokio::time::Instant,
}

fn state_error(operation: &'static str, reason: impl Into<String>) -> ProducerError {
    ProducerError::TransactionState {
        operation,
        reason: reason.into(),
    }
}

impl TxnState {
    pub(crate) fn new() -> Self {
        Self {
            phase: Phase::Uninitialized,
            version: TxnVersion::V2,
            added: HashSet::new(),
            sent_any: false,
            markers: None,
            ended: 0,
        }
    }

    /// An EndTxn of transactions v2 was answered: hold the next Produce requests until its
    /// markers are written, at most until `deadline`.
    pub(crate) fn markers_pending(&mut self, deadline: tokio::time::Instant) {
        self.ended = self.ended.wrapping_add(1);
        self.markers = Some(MarkersPending {
            ended: self.ended,
            deadline,
        });
    }

    /// The markers of ended transaction `ended` are written (or no longer waited for).
    pub(crate) fn markers_written(&mut self, ended: u64) {
        if self.markers.is_some_and(|m| m.ended == ended) {
            self.markers = None;
        }
    }

    /// The error for a call in a fatal state, if fatal.
    pub(crate) fn fatal(&self) -> Option<ProducerError> {
        match &self.phase {
            Phase::Fatal(error) => Some(error.clone()),
            _ => None,
        }
    }

    /// May `init_transactions` start? Also with a transaction open, one that must be aborted,
    /// or one whose abort failed or was cut short: InitProducerId for the transactional id
    /// aborts the transaction left open and bumps the epoch, so a driver recovers from an
    /// abort the coordinator did not answer by initializing again (Java retries the abort
    /// instead). The caller first fails what the transaction still has queued. Not during a
    /// commit: its outcome is for the commit to report.
    pub(crate) fn start_init(&mut self) -> Result<(), ProducerError> {
        match &self.phase {
            Phase::Uninitialized => Ok(()),
            Phase::InTransaction | Phase::Abortable(_) | Phase::Aborting => {
                self.phase = Phase::Uninitialized;
                self.added.clear();
                self.sent_any = false;
                Ok(())
            }
            Phase::Fatal(ProducerError::CommitOutcomeUnknown { .. }) => {
                self.phase = Phase::Uninitialized;
                Ok(())
            }
            Phase::Fatal(error) => Err(error.clone()),
            _ => Err(state_error(
                "init_transactions",
                "the producer is initialised already",
            )),
        }
    }

    /// `init_transactions` succeeded under `version`.
    pub(crate) fn init_done(&mut self, version: TxnVersion) {
        self.phase = Phase::Ready;
        self.version = version;
    }

    /// `begin_transaction`.
    pub(crate) fn begin(&mut self, version: TxnVersion) -> Result<(), ProducerError> {
        if let Some(error) = self.fatal() {
            return Err(error);
        }
        match self.phase {
            Phase::Ready => {
                self.phase = Phase::InTransaction;
                self.version = version;
                self.added.clear();
                self.sent_any = false;
                Ok(())
            }
            Phase::Uninitialized => Err(state_error(
                "begin_transaction",
                "call init_transactions first",
            )),
            _ => Err(state_error(
                "begin_transaction",
                "a transaction is open already: commit or abort it first",
            )),
        }
    }

    /// May a record be sent now?
    pub(crate) fn check_send(&self) -> Result<(), ProducerError> {
        match &self.phase {
            Phase::InTransaction => Ok(()),
            Phase::Abortable(error) => Err(ProducerError::Abortable {
                reason: format!("the transaction failed earlier ({error})"),
                source: Some(Arc::new(error.clone())),
            }),
            Phase::Fatal(error) => Err(error.clone()),
            Phase::Committing | Phase::Aborting => Err(state_error(
                "send",
                "the transaction is being completed: begin a new one first",
            )),
            Phase::Ready | Phase::Uninitialized => Err(state_error(
                "send",
                "a transactional producer sends inside a transaction: call begin_transaction",
            )),
        }
    }

    /// A batch of the open transaction failed with `error`.
    pub(crate) fn batch_failed(&mut self, error: &ProducerError) {
        if matches!(self.phase, Phase::Fatal(_)) {
            return;
        }
        if error.is_fatal() {
            self.phase = Phase::Fatal(error.clone());
        } else if matches!(self.phase, Phase::InTransaction | Phase::Committing) {
            self.phase = Phase::Abortable(error.clone());
        }
    }

    /// `commit_transaction` starts.
    pub(crate) fn start_commit(&mut self) -> Result<(), ProducerError> {
        match &self.phase {
            Phase::InTransaction => {
                self.phase = Phase::Committing;
                Ok(())
            }
            Phase::Abortable(error) => Err(ProducerError::Abortable {
                reason: format!("the transaction cannot commit, abort it ({error})"),
                source: Some(Arc::new(error.clone())),
            }),
            Phase::Fatal(error) => Err(error.clone()),
            _ => Err(state_error(
                "commit_transaction",
                "no transaction is open: call begin_transaction",
            )),
        }
    }

    /// `abort_transaction` starts.
    pub(crate) fn start_abort(&mut self) -> Result<(), ProducerError> {
        match &self.phase {
            Phase::InTransaction | Phase::Abortable(_) | Phase::Committing | Phase::Aborting => {
                self.phase = Phase::Aborting;
                Ok(())
            }
            Phase::Fatal(error) => Err(error.clone()),
            _ => Err(state_error(
                "abort_transaction",
                "no transaction is open: call begin_transaction",
            )),
        }
    }

    /// The commit or abort finished (or the error it ended with).
    pub(crate) fn finish(&mut self, outcome: &Result<(), ProducerError>) {
        self.phase = match outcome {
            Ok(()) => Phase::Ready,
            Err(error) if error.is_fatal() => Phase::Fatal(error.clone()),
            Err(error @ ProducerError::Abortable { .. }) => Phase::Abortable(error.clone()),
            // A commit that could not reach the coordinator: still open, abortable.
            Err(error) => Phase::Abortable(error.clone()),
        };
        self.added.clear();
        if outcome.is_ok() {
            self.sent_any = false;
        }
    }
}

/// The error for a coordinator answer classified as `action`.
pub(crate) fn coordinator_error(
    action: &Action,
    transactional_id: &str,
    source: ClientError,
    call: CoordinatorCall,
) -> ProducerError {
    match action {
        Action::Fenced => ProducerError::Fenced {
            transactional_id: transactional_id.to_owned(),
            source: Arc::new(source),
        },
        Action::Abortable => {
            let reason = match (call, &source) {
                (CoordinatorCall::Commit, ClientError::Broker(BrokerError { code, .. }))
                    if *code == code::INVALID_TXN_STATE =>
                {
                    "the coordinator refused the commit: it has aborted the transaction itself \
                     (it was open longer than transaction.timeout.ms)"
                        .to_owned()
                }
                _ => format!("the coordinator answered {source}"),
            };
            ProducerError::Abortable {
                reason,
                source: Some(Arc::new(ProducerError::kafka(source))),
            }
        }
        _ => ProducerError::kafka(source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(code: i16) -> ClientError {
        ClientError::Broker(BrokerError {
            api: "EndTxn",
            code,
            name: "X",
            message: None,
            retriable: false,
        })
    }

    /// `init_transactions` may start again with a transaction left open (its abort failed
    /// or was cut short), not during a commit nor between transactions.
    #[test]
    fn init_may_start_again_over_a_transaction_left_open() {
        let failed = ProducerError::Abortable {
            reason: "x".to_owned(),
            source: None,
        };
        for phase in [
            Phase::InTransaction,
            Phase::Abortable(failed.clone()),
            Phase::Aborting,
        ] {
            let mut txn = TxnState::new();
            txn.phase = phase;
            txn.sent_any = true;
            txn.start_init().expect("init over an open transaction");
            assert!(matches!(txn.phase, Phase::Uninitialized));
            assert!(!txn.sent_any);
        }
        for phase in [Phase::Ready, Phase::Committing] {
            let mut txn = TxnState::new();
            txn.phase = phase;
            assert!(matches!(
                txn.start_init(),
                Err(ProducerError::TransactionState { .. })
            ));
        }
    }

    #[test]
    fn version_comes_from_the_feature_level_only() {
        assert_eq!(TxnVersion::from_feature(None), TxnVersion::V1);
        assert_eq!(TxnVersion::from_feature(Some(0)), TxnVersion::V1);
        assert_eq!(TxnVersion::from_feature(Some(1)), TxnVersion::V1);
        assert_eq!(TxnVersion::from_feature(Some(2)), TxnVersion::V2);
        assert_eq!(TxnVersion::from_feature(Some(3)), TxnVersion::V2);
    }

    #[test]
    fn every_error_rule_of_the_coordinator() {
        use CoordinatorCall::*;
        use code::*;
        for call in [InitProducerId, AddPartitions, Commit, Abort] {
            assert_eq!(classify(call, 0, false), Action::Done);
            assert_eq!(classify(call, CONCURRENT_TRANSACTIONS, true), Action::Retry);
            for c in [
                NOT_COORDINATOR,
                COORDINATOR_NOT_AVAILABLE,
                COORDINATOR_LOAD_IN_PROGRESS,
            ] {
                assert_eq!(classify(call, c, true), Action::Rediscover);
            }
            assert_eq!(classify(call, PRODUCER_FENCED, false), Action::Fenced);
            assert_eq!(
                classify(call, INVALID_PRODUCER_EPOCH, false),
                Action::Fenced
            );
            assert_eq!(
                classify(call, 49, false),
                Action::Fatal,
                "INVALID_PRODUCER_ID_MAPPING"
            );
            assert_eq!(classify(call, 53, false), Action::Fatal, "authorization");
            assert_eq!(classify(call, 7, true), Action::Retry, "REQUEST_TIMED_OUT");
        }
        assert_eq!(
            classify(Commit, TRANSACTION_ABORTABLE, false),
            Action::Abortable
        );
        assert_eq!(
            classify(AddPartitions, TRANSACTION_ABORTABLE, false),
            Action::Abortable
        );
        assert_eq!(classify(Abort, TRANSACTION_ABORTABLE, false), Action::Fatal);
        assert_eq!(
            classify(Commit, INVALID_TXN_STATE, false),
            Action::Abortable
        );
        assert_eq!(classify(Abort, INVALID_TXN_STATE, false), Action::Fatal);
        assert_eq!(
            classify(AddPartitions, UNKNOWN_PRODUCER_ID, false),
            Action::Abortable
        );
        assert_eq!(
            classify(AddPartitions, OPERATION_NOT_ATTEMPTED, false),
            Action::Abortable
        );
        assert_eq!(
            classify(InitProducerId, 50, false),
            Action::Fatal,
            "INVALID_TRANSACTION_TIMEOUT"
        );
    }

    #[test]
    fn transitions_of_a_transaction() {
        let mut txn = TxnState::new();
        assert!(matches!(
            txn.check_send(),
            Err(ProducerError::TransactionState { .. })
        ));
        assert!(matches!(
            txn.begin(TxnVersion::V2),
            Err(ProducerError::TransactionState { .. })
        ));
        txn.start_init().expect("first init");
        txn.init_done(TxnVersion::V2);
        assert!(txn.start_init().is_err(), "init twice");
        assert!(txn.check_send().is_err(), "send outside a transaction");
        txn.begin(TxnVersion::V1).expect("begin");
        assert_eq!(txn.version, TxnVersion::V1);
        assert!(txn.begin(TxnVersion::V1).is_err(), "begin while open");
        txn.check_send().expect("send inside");
        txn.start_commit().expect("commit");
        txn.finish(&Ok(()));
        assert!(matches!(txn.phase, Phase::Ready));
        assert!(txn.start_commit().is_err(), "commit without a transaction");
        assert!(txn.start_abort().is_err(), "abort without a transaction");
    }

    #[test]
    fn a_failed_send_makes_the_transaction_abortable_and_abort_recovers() {
        let mut txn = TxnState::new();
        txn.start_init().unwrap();
        txn.init_done(TxnVersion::V2);
        txn.begin(TxnVersion::V2).unwrap();
        txn.batch_failed(&ProducerError::Rejected {
            topic: "x".into(),
            partition: 0,
            source: Arc::new(broker(87)),
        });
        let send = txn.check_send().unwrap_err();
        assert!(send.requires_abort(), "{send}");
        let commit = txn.start_commit().unwrap_err();
        assert!(
            matches!(commit, ProducerError::Abortable { .. }),
            "{commit}"
        );
        txn.start_abort()
            .expect("abort allowed after a failed send");
        txn.finish(&Ok(()));
        txn.begin(TxnVersion::V2).expect("next transaction");
    }

    #[test]
    fn fenced_is_final_and_unknown_commit_needs_init() {
        let mut txn = TxnState::new();
        txn.start_init().unwrap();
        txn.init_done(TxnVersion::V2);
        txn.begin(TxnVersion::V2).unwrap();
        txn.start_commit().unwrap();
        let unknown = ProducerError::CommitOutcomeUnknown {
            transactional_id: "t".into(),
            source: Arc::new(broker(-1)),
        };
        txn.finish(&Err(unknown));
        assert!(matches!(
            txn.begin(TxnVersion::V2),
            Err(ProducerError::CommitOutcomeUnknown { .. })
        ));
        txn.start_init()
            .expect("init again after an unknown commit");
        txn.init_done(TxnVersion::V2);
        txn.begin(TxnVersion::V2).unwrap();
        let fenced = coordinator_error(&Action::Fenced, "t", broker(90), CoordinatorCall::Commit);
        txn.batch_failed(&fenced);
        assert!(matches!(
            txn.check_send(),
            Err(ProducerError::Fenced { .. })
        ));
        assert!(matches!(
            txn.start_abort(),
            Err(ProducerError::Fenced { .. })
        ));
        assert!(matches!(
            txn.start_init(),
            Err(ProducerError::Fenced { .. })
        ));
    }

    #[test]
    fn a_commit_refused_after_a_coordinator_timeout_says_so_and_is_abortable() {
        let error = coordinator_error(
            &classify(CoordinatorCall::Commit, code::INVALID_TXN_STATE, false),
            "t",
            broker(code::INVALID_TXN_STATE),
            CoordinatorCall::Commit,
        );
        assert!(error.requires_abort());
        assert!(
            error.to_string().contains("transaction.timeout.ms"),
            "{error}"
        );
        let mut txn = TxnState::new();
        txn.start_init().unwrap();
        txn.init_done(TxnVersion::V2);
        txn.begin(TxnVersion::V2).unwrap();
        txn.start_commit().unwrap();
        txn.finish(&Err(error));
        txn.start_abort().expect("abort after the refused commit");
    }
}
