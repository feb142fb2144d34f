//! Kafka error codes as [`BrokerError`]s (inside any client's error), and names of APIs for
//! messages.

use kafka_protocol::ResponseError;
use kafka_protocol::messages::ApiKey;

use crate::kafka::error::{BrokerError, ClientError};

/// The name used for an error code kafka-protocol does not know.
pub(crate) const UNKNOWN_ERROR_NAME: &str = "UNKNOWN";

/// The [`BrokerError`] for a Kafka error `code` of the `api` response, or `None` when `code`
/// is 0 (no error).
///
/// The name is Kafka's UPPER_SNAKE name (`TOPIC_ALREADY_EXISTS`) and the retriable flag is
/// Kafka's classification, both from [`ResponseError`]. A code kafka-protocol does not know is
/// named [`UNKNOWN_ERROR_NAME`] and is not retriable. An empty `message` counts as none.
pub(crate) fn broker(api: &'static str, code: i16, message: Option<String>) -> Option<BrokerError> {
    let error = ResponseError::try_from_code(code)?;
    Some(BrokerError {
        api,
        code,
        name: error_name(code).unwrap_or(UNKNOWN_ERROR_NAME),
        message: message.filter(|m| !m.is_empty()),
        retriable: error.is_retriable(),
    })
}

/// [`broker`] as the [`ClientError::Broker`] of the layers below the clients (each client
/// maps it into its own error's `Broker` variant).
pub(crate) fn broker_error(
    api: &'static str,
    code: i16,
    message: Option<String>,
) -> Option<ClientError> {
    broker(api, code, message).map(ClientError::Broker)
}

/// LEADER_NOT_AVAILABLE (retriable) for a leader the client cannot reach through the last
/// Metadata answer: none was elected, or the one named is not among the answer's brokers (a
/// broker stopped or fenced a moment ago is dropped from the list before its partitions have
/// new leaders; Java's client takes such a leader for none, too). `what` says which.
pub(crate) fn leader_not_available(what: String) -> ClientError {
    ClientError::Broker(BrokerError {
        api: "Metadata",
        code: crate::kafka::cluster::metadata::LEADER_NOT_AVAILABLE,
        name: "LEADER_NOT_AVAILABLE",
        message: Some(what),
        retriable: true,
    })
}

/// Like [`broker_error`], for the usual `(error_code, error_message)` pair of a response,
/// as `Err` so that it can be used with `?`.
pub(crate) fn check(
    api: &'static str,
    code: i16,
    message: Option<&kafka_protocol::protocol::StrBytes>,
) -> Result<(), ClientError> {
    match broker_error(api, code, message.map(|m| m.as_str().to_owned())) {
        None => Ok(()),
        Some(error) => Err(error),
    }
}

/// The Kafka (`Errors.java`) name of a known error code, or `None`.
///
/// Generated from the `ResponseError` list of kafka-protocol 0.18.0; the unit test
/// `names_match_kafka_protocol` keeps the two in step.
const fn error_name(code: i16) -> Option<&'static str> {
    Some(match code {
        -1 => "UNKNOWN_SERVER_ERROR",
        1 => "OFFSET_OUT_OF_RANGE",
        2 => "CORRUPT_MESSAGE",
        3 => "UNKNOWN_TOPIC_OR_PARTITION",
        4 => "INVALID_FETCH_SIZE",
        5 => "LEADER_NOT_AVAILABLE",
        6 => "NOT_LEADER_OR_FOLLOWER",
        7 => "REQUEST_TIMED_OUT",
        8 => "BROKER_NOT_AVAILABLE",
        9 => "REPLICA_NOT_AVAILABLE",
        10 => "MESSAGE_TOO_LARGE",
        11 => "STALE_CONTROLLER_EPOCH",
        12 => "OFFSET_METADATA_TOO_LARGE",
        13 => "NETWORK_EXCEPTION",
        14 => "COORDINATOR_LOAD_IN_PROGRESS",
        15 => "COORDINATOR_NOT_AVAILABLE",
        16 => "NOT_COORDINATOR",
        17 => "INVALID_TOPIC_EXCEPTION",
        18 => "RECORD_LIST_TOO_LARGE",
        19 => "NOT_ENOUGH_REPLICAS",
        20 => "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        21 => "INVALID_REQUIRED_ACKS",
        22 => "ILLEGAL_GENERATION",
        23 => "INCONSISTENT_GROUP_PROTOCOL",
        24 => "INVALID_GROUP_ID",
        25 => "UNKNOWN_MEMBER_ID",
        26 => "INVALID_SESSION_TIMEOUT",
        27 => "REBALANCE_IN_PROGRESS",
        28 => "INVALID_COMMIT_OFFSET_SIZE",
        29 => "TOPIC_AUTHORIZATION_FAILED",
        30 => "GROUP_AUTHORIZATION_FAILED",
        31 => "CLUSTER_AUTHORIZATION_FAILED",
        32 => "INVALID_TIMESTAMP",
        33 => "UNSUPPORTED_SASL_MECHANISM",
        34 => "ILLEGAL_SASL_STATE",
        35 => "UNSUPPORTED_VERSION",
        36 => "TOPIC_ALREADY_EXISTS",
        37 => "INVALID_PARTITIONS",
        38 => "INVALID_REPLICATION_FACTOR",
        39 => "INVALID_REPLICA_ASSIGNMENT",
        40 => "INVALID_CONFIG",
        41 => "NOT_CONTROLLER",
        42 => "INVALID_REQUEST",
        43 => "UNSUPPORTED_FOR_MESSAGE_FORMAT",
        44 => "POLICY_VIOLATION",
        45 => "OUT_OF_ORDER_SEQUENCE_NUMBER",
        46 => "DUPLICATE_SEQUENCE_NUMBER",
        47 => "INVALID_PRODUCER_EPOCH",
        48 => "INVALID_TXN_STATE",
        49 => "INVALID_PRODUCER_ID_MAPPING",
        50 => "INVALID_TRANSACTION_TIMEOUT",
        51 => "CONCURRENT_TRANSACTIONS",
        52 => "TRANSACTION_COORDINATOR_FENCED",
        53 => "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        54 => "SECURITY_DISABLED",
        55 => "OPERATION_NOT_ATTEMPTED",
        56 => "KAFKA_STORAGE_ERROR",
        57 => "LOG_DIR_NOT_FOUND",
        58 => "SASL_AUTHENTICATION_FAILED",
        59 => "UNKNOWN_PRODUCER_ID",
        60 => "REASSIGNMENT_IN_PROGRESS",
        61 => "DELEGATION_TOKEN_AUTH_DISABLED",
        62 => "DELEGATION_TOKEN_NOT_FOUND",
        63 => "DELEGATION_TOKEN_OWNER_MISMATCH",
        64 => "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED",
        65 => "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
        66 => "DELEGATION_TOKEN_EXPIRED",
        67 => "INVALID_PRINCIPAL_TYPE",
        68 => "NON_EMPTY_GROUP",
        69 => "GROUP_ID_NOT_FOUND",
        70 => "FETCH_SESSION_ID_NOT_FOUND",
        71 => "INVALID_FETCH_SESSION_EPOCH",
        72 => "LISTENER_NOT_FOUND",
        73 => "TOPIC_DELETION_DISABLED",
        74 => "FENCED_LEADER_EPOCH",
        75 => "UNKNOWN_LEADER_EPOCH",
        76 => "UNSUPPORTED_COMPRESSION_TYPE",
        77 => "STALE_BROKER_EPOCH",
        78 => "OFFSET_NOT_AVAILABLE",
        79 => "MEMBER_ID_REQUIRED",
        80 => "PREFERRED_LEADER_NOT_AVAILABLE",
        81 => "GROUP_MAX_SIZE_REACHED",
        82 => "FENCED_INSTANCE_ID",
        83 => "ELIGIBLE_LEADERS_NOT_AVAILABLE",
        84 => "ELECTION_NOT_NEEDED",
        85 => "NO_REASSIGNMENT_IN_PROGRESS",
        86 => "GROUP_SUBSCRIBED_TO_TOPIC",
        87 => "INVALID_RECORD",
        88 => "UNSTABLE_OFFSET_COMMIT",
        89 => "THROTTLING_QUOTA_EXCEEDED",
        90 => "PRODUCER_FENCED",
        91 => "RESOURCE_NOT_FOUND",
        92 => "DUPLICATE_RESOURCE",
        93 => "UNACCEPTABLE_CREDENTIAL",
        94 => "INCONSISTENT_VOTER_SET",
        95 => "INVALID_UPDATE_VERSION",
        96 => "FEATURE_UPDATE_FAILED",
        97 => "PRINCIPAL_DESERIALIZATION_FAILURE",
        98 => "SNAPSHOT_NOT_FOUND",
        99 => "POSITION_OUT_OF_RANGE",
        100 => "UNKNOWN_TOPIC_ID",
        101 => "DUPLICATE_BROKER_REGISTRATION",
        102 => "BROKER_ID_NOT_REGISTERED",
        103 => "INCONSISTENT_TOPIC_ID",
        104 => "INCONSISTENT_CLUSTER_ID",
        105 => "TRANSACTIONAL_ID_NOT_FOUND",
        106 => "FETCH_SESSION_TOPIC_ID_ERROR",
        107 => "INELIGIBLE_REPLICA",
        108 => "NEW_LEADER_ELECTED",
        109 => "OFFSET_MOVED_TO_TIERED_STORAGE",
        110 => "FENCED_MEMBER_EPOCH",
        111 => "UNRELEASED_INSTANCE_ID",
        112 => "UNSUPPORTED_ASSIGNOR",
        113 => "STALE_MEMBER_EPOCH",
        114 => "MISMATCHED_ENDPOINT_TYPE",
        115 => "UNSUPPORTED_ENDPOINT_TYPE",
        116 => "UNKNOWN_CONTROLLER_ID",
        117 => "UNKNOWN_SUBSCRIPTION_ID",
        118 => "TELEMETRY_TOO_LARGE",
        119 => "INVALID_REGISTRATION",
        120 => "TRANSACTION_ABORTABLE",
        121 => "INVALID_RECORD_STATE",
        122 => "SHARE_SESSION_NOT_FOUND",
        123 => "INVALID_SHARE_SESSION_EPOCH",
        124 => "FENCED_STATE_EPOCH",
        125 => "INVALID_VOTER_KEY",
        126 => "DUPLICATE_VOTER",
        127 => "VOTER_NOT_FOUND",
        128 => "INVALID_REGULAR_EXPRESSION",
        129 => "REBOOTSTRAP_REQUIRED",
        130 => "STREAMS_INVALID_TOPOLOGY",
        131 => "STREAMS_INVALID_TOPOLOGY_EPOCH",
        132 => "STREAMS_TOPOLOGY_FENCED",
        133 => "SHARE_SESSION_LIMIT_REACHED",
        _ => return None,
    })
}

/// The name of an API, e.g. `ShareFetch`, as used in errors and logs.
pub(crate) const fn api_name(key: ApiKey) -> &'static str {
    match key {
        ApiKey::Produce => "Produce",
        ApiKey::Fetch => "Fetch",
        ApiKey::ListOffsets => "ListOffsets",
        ApiKey::Metadata => "Metadata",
        ApiKey::OffsetCommit => "OffsetCommit",
        ApiKey::OffsetFetch => "OffsetFetch",
        ApiKey::FindCoordinator => "FindCoordinator",
        ApiKey::JoinGroup => "JoinGroup",
        ApiKey::Heartbeat => "Heartbeat",
        ApiKey::LeaveGroup => "LeaveGroup",
        ApiKey::SyncGroup => "SyncGroup",
        ApiKey::DescribeGroups => "DescribeGroups",
        ApiKey::ListGroups => "ListGroups",
        ApiKey::SaslHandshake => "SaslHandshake",
        ApiKey::ApiVersions => "ApiVersions",
        ApiKey::CreateTopics => "CreateTopics",
        ApiKey::DeleteTopics => "DeleteTopics",
        ApiKey::DeleteRecords => "DeleteRecords",
        ApiKey::InitProducerId => "InitProducerId",
        ApiKey::OffsetForLeaderEpoch => "OffsetForLeaderEpoch",
        ApiKey::AddPartitionsToTxn => "AddPartitionsToTxn",
        ApiKey::AddOffsetsToTxn => "AddOffsetsToTxn",
        ApiKey::EndTxn => "EndTxn",
        ApiKey::WriteTxnMarkers => "WriteTxnMarkers",
        ApiKey::TxnOffsetCommit => "TxnOffsetCommit",
        ApiKey::DescribeAcls => "DescribeAcls",
        ApiKey::CreateAcls => "CreateAcls",
        ApiKey::DeleteAcls => "DeleteAcls",
        ApiKey::DescribeConfigs => "DescribeConfigs",
        ApiKey::AlterConfigs => "AlterConfigs",
        ApiKey::AlterReplicaLogDirs => "AlterReplicaLogDirs",
        ApiKey::DescribeLogDirs => "DescribeLogDirs",
        ApiKey::SaslAuthenticate => "SaslAuthenticate",
        ApiKey::CreatePartitions => "CreatePartitions",
        ApiKey::CreateDelegationToken => "CreateDelegationToken",
        ApiKey::RenewDelegationToken => "RenewDelegationToken",
        ApiKey::ExpireDelegationToken => "ExpireDelegationToken",
        ApiKey::DescribeDelegationToken => "DescribeDelegationToken",
        ApiKey::DeleteGroups => "DeleteGroups",
        ApiKey::ElectLeaders => "ElectLeaders",
        ApiKey::IncrementalAlterConfigs => "IncrementalAlterConfigs",
        ApiKey::AlterPartitionReassignments => "AlterPartitionReassignments",
        ApiKey::ListPartitionReassignments => "ListPartitionReassignments",
        ApiKey::OffsetDelete => "OffsetDelete",
        ApiKey::DescribeClientQuotas => "DescribeClientQuotas",
        ApiKey::AlterClientQuotas => "AlterClientQuotas",
        ApiKey::DescribeUserScramCredentials => "DescribeUserScramCredentials",
        ApiKey::AlterUserScramCredentials => "AlterUserScramCredentials",
        ApiKey::Vote => "Vote",
        ApiKey::BeginQuorumEpoch => "BeginQuorumEpoch",
        ApiKey::EndQuorumEpoch => "EndQuorumEpoch",
        ApiKey::DescribeQuorum => "DescribeQuorum",
        ApiKey::AlterPartition => "AlterPartition",
        ApiKey::UpdateFeatures => "UpdateFeatures",
        ApiKey::Envelope => "Envelope",
        ApiKey::FetchSnapshot => "FetchSnapshot",
        ApiKey::DescribeCluster => "DescribeCluster",
        ApiKey::DescribeProducers => "DescribeProducers",
        ApiKey::BrokerRegistration => "BrokerRegistration",
        ApiKey::BrokerHeartbeat => "BrokerHeartbeat",
        ApiKey::UnregisterBroker => "UnregisterBroker",
        ApiKey::DescribeTransactions => "DescribeTransactions",
        ApiKey::ListTransactions => "ListTransactions",
        ApiKey::AllocateProducerIds => "AllocateProducerIds",
        ApiKey::ConsumerGroupHeartbeat => "ConsumerGroupHeartbeat",
        ApiKey::ConsumerGroupDescribe => "ConsumerGroupDescribe",
        ApiKey::ControllerRegistration => "ControllerRegistration",
        ApiKey::GetTelemetrySubscriptions => "GetTelemetrySubscriptions",
        ApiKey::PushTelemetry => "PushTelemetry",
        ApiKey::AssignReplicasToDirs => "AssignReplicasToDirs",
        ApiKey::ListConfigResources => "ListConfigResources",
        ApiKey::DescribeTopicPartitions => "DescribeTopicPartitions",
        ApiKey::ShareGroupHeartbeat => "ShareGroupHeartbeat",
        ApiKey::ShareGroupDescribe => "ShareGroupDescribe",
        ApiKey::ShareFetch => "ShareFetch",
        ApiKey::ShareAcknowledge => "ShareAcknowledge",
        ApiKey::AddRaftVoter => "AddRaftVoter",
        ApiKey::RemoveRaftVoter => "RemoveRaftVoter",
        ApiKey::UpdateRaftVoter => "UpdateRaftVoter",
        ApiKey::InitializeShareGroupState => "InitializeShareGroupState",
        ApiKey::ReadShareGroupState => "ReadShareGroupState",
        ApiKey::WriteShareGroupState => "WriteShareGroupState",
        ApiKey::DeleteShareGroupState => "DeleteShareGroupState",
        ApiKey::ReadShareGroupStateSummary => "ReadShareGroupStateSummary",
        ApiKey::DescribeShareGroupOffsets => "DescribeShareGroupOffsets",
        ApiKey::AlterShareGroupOffsets => "AlterShareGroupOffsets",
        ApiKey::DeleteShareGroupOffsets => "DeleteShareGroupOffsets",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `TopicAlreadyExists` → `TOPIC_ALREADY_EXISTS`.
    fn upper_snake(camel: &str) -> String {
        let mut out = String::new();
        for (i, c) in camel.chars().enumerate() {
            if c.is_ascii_uppercase() && i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_uppercase());
        }
        out
    }

    #[test]
    fn no_error_for_code_zero() {
        assert!(broker_error("Metadata", 0, Some("ignored".into())).is_none());
        assert!(check("Metadata", 0, None).is_ok());
    }

    #[test]
    fn known_code_has_kafka_name_and_flag() {
        let Some(ClientError::Broker(BrokerError {
            api,
            code,
            name,
            message,
            retriable,
        })) = broker_error("CreateTopics", 36, Some("Topic 'x' already exists.".into()))
        else {
            panic!("expected a broker error");
        };
        assert_eq!(
            (api, code, name),
            ("CreateTopics", 36, "TOPIC_ALREADY_EXISTS")
        );
        assert_eq!(message.as_deref(), Some("Topic 'x' already exists."));
        assert!(!retriable);
    }

    #[test]
    fn retriable_codes_are_retriable() {
        for (code, name) in [
            (6, "NOT_LEADER_OR_FOLLOWER"),
            (122, "SHARE_SESSION_NOT_FOUND"),
        ] {
            let error = broker_error("ShareFetch", code, None).expect("an error");
            assert!(error.is_retriable(), "{error}");
            assert!(matches!(error, ClientError::Broker(BrokerError { name: n, .. }) if n == name));
        }
        let error = broker_error("Metadata", -1, None).expect("an error");
        assert!(matches!(
            error,
            ClientError::Broker(BrokerError {
                name: "UNKNOWN_SERVER_ERROR",
                ..
            })
        ));
        assert!(!error.is_retriable());
    }

    #[test]
    fn unknown_code_is_named_unknown_and_not_retriable() {
        let error = broker_error("ShareFetch", 9999, Some(String::new())).expect("an error");
        let ClientError::Broker(BrokerError {
            code,
            name,
            message,
            retriable,
            ..
        }) = &error
        else {
            panic!("expected a broker error");
        };
        assert_eq!(
            (*code, *name, message, *retriable),
            (9999, "UNKNOWN", &None, false)
        );
        assert_eq!(
            error.to_string(),
            "broker answered ShareFetch with error 9999 (UNKNOWN)"
        );
    }

    #[test]
    fn check_carries_the_message() {
        let message = kafka_protocol::protocol::StrBytes::from_static_str("bad value");
        let error = check("IncrementalAlterConfigs", 40, Some(&message)).expect_err("an error");
        assert_eq!(
            error.to_string(),
            "broker answered IncrementalAlterConfigs with error 40 (INVALID_CONFIG): bad value"
        );
    }

    #[test]
    fn names_match_kafka_protocol() {
        for code in -1..=300 {
            match ResponseError::try_from_code(code) {
                None => assert_eq!(code, 0),
                Some(ResponseError::Unknown(_)) => assert_eq!(error_name(code), None, "{code}"),
                Some(known) => assert_eq!(
                    error_name(code).map(str::to_owned),
                    Some(upper_snake(&known.to_string())),
                    "{code}"
                ),
            }
        }
    }

    #[test]
    fn api_names_match_debug() {
        for key in ApiKey::iter() {
            assert_eq!(api_name(key), format!("{key:?}"));
        }
    }
}
