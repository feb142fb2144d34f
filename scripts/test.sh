#!/usr/bin/env bash
# Runs every test of the crate: unit, integration and doc tests with all features, including the
# tests against a real Apache Kafka broker, which this script downloads (once), starts on loopback
# and stops again, even when tests fail. That broker also opens the TLS and SASL test listeners
# (scripts/kafka.sh, KAFKA_SECURITY=1), so the security tests (tests/kafka_security.rs) run in
# the same first pass at no extra broker start. Then the leader-move tests run against a three-node
# cluster, a smoke subset of the broker tests against the first release where share groups are
# production ready, and a check against a cluster whose share groups are turned off. First, with
# no broker, scripts/dependent.sh builds the packaged crate as a service that depends on it does
# and runs the hostile-broker cases through that build.
#
# Usage: ./scripts/test.sh [extra cargo test arguments]
#   KAFKA_VERSION        the main Kafka release (default 4.4.0)
#   KAFKA_SMOKE_VERSION  the release of the smoke run (default 4.2.2; empty skips it)
set -euo pipefail
cd "$(dirname "$0")/.."

# `stop` stops the single broker and every node of the cluster.
cleanup() { ./scripts/kafka.sh stop || true; }
trap cleanup EXIT
# On Ctrl-C or SIGTERM exit through the EXIT trap too, so no broker is left running.
trap 'exit 130' INT TERM

start_broker() {
  ./scripts/kafka.sh start
  eval "export $(./scripts/kafka.sh env)"
  # The broker tests fail, instead of skipping, when the broker is missing.
  export KAFKA_REQUIRE_BROKER=1
  echo "test.sh: broker at $KAFKA_BOOTSTRAP (Kafka ${KAFKA_VERSION:-4.4.0})"
}

./scripts/dependent.sh

main_version="${KAFKA_VERSION:-4.4.0}"
start_broker
cargo test --all-features "$@"

# The later brokers need no TLS/SASL listeners; the security tests ran above.
unset KAFKA_SSL_BOOTSTRAP KAFKA_MTLS_BOOTSTRAP KAFKA_SASL_SSL_BOOTSTRAP KAFKA_SASL_PLAINTEXT_BOOTSTRAP \
  KAFKA_EXPIRED_BOOTSTRAP KAFKA_WRONGHOST_BOOTSTRAP KAFKA_REAUTH_BOOTSTRAP KAFKA_PKI_DIR KAFKA_ACLS
export KAFKA_SECURITY=0

# Leader moves need several brokers: a three-node cluster for those tests alone.
./scripts/kafka.sh stop
KAFKA_NODES=3 start_broker
cargo test --all-features --test kafka_leader_move --test kafka_producer_cluster \
  --test kafka_exactly_once_crash -- --ignored
unset KAFKA_MULTI_BOOTSTRAP

# A cluster with share groups turned off: the consumer must say so clearly.
./scripts/kafka.sh stop
KAFKA_SHARE_VERSION=0 start_broker
cargo test --all-features --test kafka_share_disabled -- --ignored

smoke="${KAFKA_SMOKE_VERSION-4.2.2}"
if [ -n "$smoke" ] && [ "$smoke" != "$main_version" ]; then
  ./scripts/kafka.sh stop
  export KAFKA_VERSION="$smoke"
  start_broker
  cargo test --all-features --test kafka_consumer --test kafka_admin -- \
    consumes_ten release_redelivers close_makes lock_expiry two_members every_codec implicit_mode renew_keeps \
    create_topic share_group_config topic_ids
  # Ledger-mode exactly-once on the oldest release it supports (RENEW came in 4.2; the group
  # config share.renew.acknowledge.enable only in 4.3: there its test checks it reads as on).
  cargo test --all-features --test kafka_exactly_once -- \
    ledger_mode a_task_that_dies task_0_fences renew_disabled
fi
