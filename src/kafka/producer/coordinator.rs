//! The transaction coordinator: FindCoordinator (key type TRANSACTION), InitProducerId,
//! AddPartitionsToTxn and EndTxn, each retried by the rules of [`super::txn::classify`].
//! One request at a time: the caller holds the coordinator's lock across a call.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, DescribeTransactionsRequest,
    DescribeTransactionsResponse, EndTxnRequest, EndTxnResponse, InitProducerIdRequest,
    InitProducerIdResponse, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::{Message, StrBytes, VersionRange};
use tokio::time::Instant;
use tracing::debug;

use super::accumulator::{ProducerIdentity, Tp};
use super::cluster::Cluster;
use super::txn::{Action, CoordinatorCall, TxnVersion, classify, code, coordinator_error};
use crate::kafka::error::ClientError;
use crate::kafka::error::codes::broker_error;
use crate::kafka::error::{BrokerError, ConnectionError, ProtocolError};
use crate::kafka::net::connection::Connection;
use crate::kafka::net::coordinator::{TRANSACTION, find_coordinator_address};
use crate::producer::ProducerError;

/// The feature that selects the transaction protocol.
pub(crate) const TRANSACTION_VERSION: &str = "transaction.version";

/// EndTxn versions before transactions v2.
const END_TXN_V1: VersionRange = VersionRange { min: 0, max: 4 };
/// EndTxn of transactions v2.
const END_TXN_V2: VersionRange = VersionRange { min: 5, max: 5 };
/// AddPartitionsToTxn versions clients use.
const ADD_PARTITIONS_CLIENT: VersionRange = VersionRange { min: 0, max: 3 };
/// UNKNOWN_SERVER_ERROR.
const UNKNOWN_SERVER_ERROR: i16 = -1;
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
/// DescribeTransactions versions this client reads.
const DESCRIBE_TRANSACTIONS: VersionRange = VersionRange { min: 0, max: 0 };
/// The longest the next transaction's Produce requests wait for the last one's markers
/// ([`Coordinator::await_complete`]): past it, the broker's own retry of a produce that
/// meets the unfinished transaction (`add.partitions.to.txn.retry.backoff.max.ms`, 100 ms by
/// default) is no slower.
pub(crate) const AWAIT_COMPLETE_MAX: Duration = Duration::from_millis(100);
/// How often [`Coordinator::await_complete`] asks.
const AWAIT_COMPLETE_POLL: Duration = Duration::from_millis(1);

/// Retry settings of coordinator calls.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retry {
    pub(crate) first: Duration,
    pub(crate) max: Duration,
    /// The bound of one call, retries included.
    pub(crate) timeout: Duration,
}

/// The coordinator of one transactional id (or, without one, any broker for the idempotent
/// producer's InitProducerId).
#[derive(Debug)]
pub(crate) struct Coordinator {
    transactional_id: Option<String>,
    connection: Option<Connection>,
    /// DescribeTransactions was refused or is not served: [`await_complete`] no longer asks
    /// (until a connection to the coordinator is made again).
    ///
    /// [`await_complete`]: Self::await_complete
    describe_refused: bool,
}

/// One attempt's result: the error code and message, and the answer.
type Attempt<T> = Result<(i16, Option<String>, T), ClientError>;

impl Coordinator {
    pub(crate) fn new(transactional_id: Option<String>) -> Self {
        Self {
            transactional_id,
            connection: None,
            describe_refused: false,
        }
    }

    /// After an EndTxn under transactions v2: waits until the coordinator has written the
    /// transaction's markers (its state is no longer `PrepareCommit` or `PrepareAbort`), at
    /// most until `deadline`. Best effort: any error ends the wait.
    ///
    /// Why: EndTxn v5 answers once the commit is decided, before the markers are written.
    /// The next transaction's first Produce then meets a coordinator still completing the
    /// last one: the partition leader's verification is refused with CONCURRENT_TRANSACTIONS
    /// and retried by the broker after `add.partitions.to.txn.retry.backoff.ms` (20 ms by
    /// default), far longer than the markers take. Measured on the mirror row, a third of
    /// the transactions paid those 20 ms; the markers took about 4 ms on the same machine.
    /// The sender holds the next transaction's Produce requests until this returns
    /// ([`MarkersPending`](super::txn::MarkersPending)), so the wait overlaps with whatever
    /// the application does between the transactions.
    pub(crate) async fn await_complete(&mut self, cluster: &Cluster, deadline: Instant) {
        if self.describe_refused {
            return;
        }
        let Some(id) = self.transactional_id.clone() else {
            return;
        };
        loop {
            let Ok(asked) = tokio::time::timeout_at(deadline, self.describe(cluster, &id)).await
            else {
                return;
            };
            let state = match asked {
                Ok(state) => state,
                Err(DescribeFailed::Refused(reason)) => {
                    debug!(%reason, "DescribeTransactions refused: the next transactions' sends no longer wait for the markers");
                    self.describe_refused = true;
                    return;
                }
                Err(DescribeFailed::Other(reason)) => {
                    debug!(%reason, "DescribeTransactions failed; not waiting for the markers");
                    return;
                }
            };
            if !matches!(state.as_str(), "PrepareCommit" | "PrepareAbort") {
                return;
            }
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            // The markers take a few milliseconds: look again soon, not after a backoff that
            // would outlast them.
            tokio::time::sleep_until(
                crate::time::deadline_after(now, AWAIT_COMPLETE_POLL).min(deadline),
            )
            .await;
        }
    }

    /// The coordinator's state of transaction `id` (`Ongoing`, `PrepareCommit`, ...).
    async fn describe(&mut self, cluster: &Cluster, id: &str) -> Result<String, DescribeFailed> {
        let connection = self
            .connection(cluster)
            .await
            .map_err(|e| DescribeFailed::Other(e.to_string()))?;
        let version = connection
            .negotiate(ApiKey::DescribeTransactions, DESCRIBE_TRANSACTIONS)
            .map_err(|e| DescribeFailed::Refused(e.to_string()))?;
        let request = DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![TransactionalId(StrBytes::from_string(id.to_owned()))]);
        let response: DescribeTransactionsResponse = connection
            .request(ApiKey::DescribeTransactions, version, &request)
            .await
            .map_err(|e| DescribeFailed::Other(e.to_string()))?;
        let Some(state) = response.transaction_states.into_iter().next() else {
            return Err(DescribeFailed::Other(
                "an answer without the transaction".to_owned(),
            ));
        };
        match state.error_code {
            0 => Ok(state.transaction_state.to_string()),
            TRANSACTIONAL_ID_AUTHORIZATION_FAILED => Err(DescribeFailed::Refused(
                "TRANSACTIONAL_ID_AUTHORIZATION_FAILED".to_owned(),
            )),
            code => {
                if code == code::NOT_COORDINATOR {
                    self.connection = None;
                }
                Err(DescribeFailed::Other(format!("error code {code}")))
            }
        }
    }

    /// The `transaction.version` level the coordinator's broker reports, if connected.
    pub(crate) fn transaction_version(&self) -> Option<TxnVersion> {
        self.connection
            .as_ref()
            .map(|c| TxnVersion::from_feature(c.finalized_feature(TRANSACTION_VERSION)))
    }

    fn id(&self) -> &str {
        self.transactional_id.as_deref().unwrap_or("")
    }

    /// A connection to the coordinator, looked up if needed.
    async fn connection(&mut self, cluster: &Cluster) -> Result<Connection, ClientError> {
        if let Some(c) = self.connection.as_ref().filter(|c| c.is_reusable()) {
            return Ok(c.clone());
        }
        let Some(id) = self.transactional_id.clone() else {
            let via = cluster.any_connection().await?;
            self.connection = Some(via.clone());
            return Ok(via);
        };
        let address = cluster
            .on_any_connection(|via| async move {
                find_coordinator_address(&via, TRANSACTION, &id).await
            })
            .await?;
        let fresh = cluster.open_address(&address).await?;
        debug!(
            coordinator = fresh.broker(),
            "transaction coordinator found"
        );
        self.connection = Some(fresh.clone());
        // Another broker (the coordinator moved), perhaps other permissions: ask again.
        self.describe_refused = false;
        Ok(fresh)
    }

    /// Runs `once` until the coordinator answers without a retriable error, within
    /// `retry.timeout`.
    async fn call<T, F, Fut>(
        &mut self,
        cluster: &Cluster,
        call: CoordinatorCall,
        api: &'static str,
        retry: Retry,
        mut once: F,
    ) -> Result<T, ProducerError>
    where
        F: FnMut(Connection) -> Fut,
        Fut: Future<Output = Attempt<T>>,
    {
        let deadline = crate::time::deadline_after(Instant::now(), retry.timeout);
        let mut backoff = retry
            .first
            .min(Duration::from_millis(20))
            .max(Duration::from_millis(1));
        let mut last: Option<ProducerError> = None;
        loop {
            if Instant::now() >= deadline {
                return Err(ProducerError::Timeout {
                    timeout: retry.timeout,
                    last: last.map(Arc::new),
                });
            }
            let connection = match self.connection(cluster).await {
                Ok(c) => c,
                Err(error) => {
                    self.connection = None;
                    if matches!(
                        error,
                        ClientError::Broker(BrokerError {
                            retriable: false,
                            ..
                        })
                    ) || matches!(
                        error,
                        ClientError::Connection(ConnectionError::Authentication { .. })
                            | ClientError::Config { .. }
                    ) {
                        return Err(ProducerError::kafka(error));
                    }
                    last = Some(ProducerError::kafka(error));
                    sleep_backoff(&mut backoff, retry.max, deadline).await;
                    continue;
                }
            };
            match once(connection.clone()).await {
                Err(error) => {
                    // The request may have reached the coordinator: a commit's outcome is
                    // then unknown. Anything else is retried, on a new connection if this
                    // one closed or the request timed out (also when it was the cluster-wide
                    // one, without a transactional id: `Connection::is_reusable`).
                    self.connection = None;
                    if call == CoordinatorCall::Commit {
                        return Err(ProducerError::CommitOutcomeUnknown {
                            transactional_id: self.id().to_owned(),
                            source: Arc::new(error),
                        });
                    }
                    if matches!(
                        error,
                        ClientError::Protocol(ProtocolError::Unsupported { .. })
                            | ClientError::Protocol(ProtocolError::Malformed { .. })
                    ) {
                        return Err(ProducerError::kafka(error));
                    }
                    last = Some(ProducerError::kafka(error));
                }
                Ok((0, _, answer)) => return Ok(answer),
                Ok((error_code, message, _)) => {
                    let Some(error) = broker_error(api, error_code, message) else {
                        return Err(ProducerError::Kafka {
                            source: Arc::new(ClientError::Protocol(ProtocolError::Malformed {
                                broker: "coordinator".to_owned(),
                                reason: format!("{api} answered error code {error_code}"),
                            })),
                        });
                    };
                    if call == CoordinatorCall::Commit && error_code == UNKNOWN_SERVER_ERROR {
                        return Err(ProducerError::CommitOutcomeUnknown {
                            transactional_id: self.id().to_owned(),
                            source: Arc::new(error),
                        });
                    }
                    let action = classify(call, error_code, error.is_retriable());
                    debug!(api, %error, ?action, "coordinator answered an error");
                    match action {
                        Action::Done => {}
                        Action::Retry => {
                            last = Some(ProducerError::kafka(error));
                        }
                        Action::Rediscover => {
                            self.connection = None;
                            last = Some(ProducerError::kafka(error));
                        }
                        Action::Fenced | Action::Abortable | Action::Fatal => {
                            return Err(coordinator_error(&action, self.id(), error, call));
                        }
                    }
                }
            }
            sleep_backoff(&mut backoff, retry.max, deadline).await;
        }
    }

    /// InitProducerId: a new producer id (`current` = None) or the next epoch of `current`.
    pub(crate) async fn init_producer_id(
        &mut self,
        cluster: &Cluster,
        transaction_timeout: Duration,
        current: Option<ProducerIdentity>,
        retry: Retry,
    ) -> Result<ProducerIdentity, ProducerError> {
        let txn_id = self.transactional_id.clone();
        let timeout_ms = i32::try_from(transaction_timeout.as_millis()).unwrap_or(i32::MAX);
        let current = current.unwrap_or(ProducerIdentity::NONE);
        self.call(
            cluster,
            CoordinatorCall::InitProducerId,
            "InitProducerId",
            retry,
            |connection| {
                let txn_id = txn_id.clone();
                async move {
                    let ours = if current.id >= 0 {
                        VersionRange {
                            min: 3,
                            max: InitProducerIdRequest::VERSIONS.max,
                        }
                    } else {
                        InitProducerIdRequest::VERSIONS
                    };
                    let version = connection.negotiate(ApiKey::InitProducerId, ours)?;
                    let request = InitProducerIdRequest::default()
                        .with_transactional_id(
                            txn_id.map(|t| TransactionalId(StrBytes::from_string(t))),
                        )
                        .with_transaction_timeout_ms(timeout_ms)
                        .with_producer_id(ProducerId(current.id))
                        .with_producer_epoch(current.epoch);
                    let response: InitProducerIdResponse = connection
                        .request(ApiKey::InitProducerId, version, &request)
                        .await?;
                    Ok((
                        response.error_code,
                        None,
                        ProducerIdentity {
                            id: response.producer_id.0,
                            epoch: response.producer_epoch,
                        },
                    ))
                }
            },
        )
        .await
    }

    /// AddPartitionsToTxn v≤3 (transactions v1).
    pub(crate) async fn add_partitions(
        &mut self,
        cluster: &Cluster,
        producer: ProducerIdentity,
        partitions: &[Tp],
        retry: Retry,
    ) -> Result<(), ProducerError> {
        let txn_id = self.id().to_owned();
        let mut topics: Vec<AddPartitionsToTxnTopic> = Vec::new();
        for (topic, partition) in partitions {
            if let Some(t) = topics.iter_mut().find(|t| t.name.0.as_str() == &**topic) {
                t.partitions.push(*partition);
            } else {
                topics.push(
                    AddPartitionsToTxnTopic::default()
                        .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                        .with_partitions(vec![*partition]),
                );
            }
        }
        self.call(
            cluster,
            CoordinatorCall::AddPartitions,
            "AddPartitionsToTxn",
            retry,
            |connection| {
                let request = AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(
                        txn_id.clone(),
                    )))
                    .with_v3_and_below_producer_id(ProducerId(producer.id))
                    .with_v3_and_below_producer_epoch(producer.epoch)
                    .with_v3_and_below_topics(topics.clone());
                async move {
                    let version =
                        connection.negotiate(ApiKey::AddPartitionsToTxn, ADD_PARTITIONS_CLIENT)?;
                    let response: AddPartitionsToTxnResponse = connection
                        .request(ApiKey::AddPartitionsToTxn, version, &request)
                        .await?;
                    // The first error of a partition stands for the call; a partition that
                    // failed with OPERATION_NOT_ATTEMPTED only waits on another's error.
                    let mut worst = 0;
                    for topic in &response.results_by_topic_v3_and_below {
                        for p in &topic.results_by_partition {
                            if p.partition_error_code != 0
                                && (worst == 0 || worst == code::OPERATION_NOT_ATTEMPTED)
                            {
                                worst = p.partition_error_code;
                            }
                        }
                    }
                    Ok((worst, None, ()))
                }
            },
        )
        .await
    }

    /// EndTxn: commits or aborts; under transactions v2 returns the next producer identity.
    pub(crate) async fn end_txn(
        &mut self,
        cluster: &Cluster,
        producer: ProducerIdentity,
        commit: bool,
        version: TxnVersion,
        retry: Retry,
    ) -> Result<Option<ProducerIdentity>, ProducerError> {
        let txn_id = self.id().to_owned();
        let call = if commit {
            CoordinatorCall::Commit
        } else {
            CoordinatorCall::Abort
        };
        self.call(cluster, call, "EndTxn", retry, |connection| {
            let request = EndTxnRequest::default()
                .with_transactional_id(TransactionalId(StrBytes::from_string(txn_id.clone())))
                .with_producer_id(ProducerId(producer.id))
                .with_producer_epoch(producer.epoch)
                .with_committed(commit);
            async move {
                let ours = match version {
                    TxnVersion::V1 => END_TXN_V1,
                    TxnVersion::V2 => END_TXN_V2,
                };
                let v = connection.negotiate(ApiKey::EndTxn, ours)?;
                let response: EndTxnResponse =
                    connection.request(ApiKey::EndTxn, v, &request).await?;
                let next = (v >= 5).then_some(ProducerIdentity {
                    id: response.producer_id.0,
                    epoch: response.producer_epoch,
                });
                Ok((response.error_code, None, next))
            }
        })
        .await
    }
}

/// Why [`Coordinator::describe`] gave no state.
enum DescribeFailed {
    /// Not allowed or not served: not asked again.
    Refused(String),
    /// This time.
    Other(String),
}

async fn sleep_backoff(backoff: &mut Duration, max: Duration, deadline: Instant) {
    let until = crate::time::deadline_after(Instant::now(), *backoff).min(deadline);
    tokio::time::sleep_until(until).await;
    *backoff = backoff
        .saturating_mul(2)
        .min(max.max(Duration::from_millis(1)));
}
