#!/usr/bin/env bash
# Runs every test of the crate: unit, integration and doc tests with all features, including the
# tests against a real Apache Kafka broker, which this script downloads (once), starts on loopback
# and stops again, even when tests fail.
#
# Usage: ./scripts/test.sh [extra cargo test arguments]
# KAFKA_VERSION picks the Kafka release (default 4.4.0).
set -euo pipefail
cd "$(dirname "$0")/.."

cleanup() { ./scripts/kafka.sh stop || true; }
trap cleanup EXIT

./scripts/kafka.sh start
eval "export $(./scripts/kafka.sh env)"
# The broker tests fail, instead of skipping, when the broker is missing.
export KAFKA_REQUIRE_BROKER=1
echo "test.sh: broker at $KAFKA_BOOTSTRAP (Kafka ${KAFKA_VERSION:-4.4.0})"

cargo test --all-features "$@"
