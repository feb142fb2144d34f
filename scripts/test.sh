#!/usr/bin/env bash
# Runs every test of the crate: unit tests, integration tests and doctests, all features.
# Usage: ./scripts/test.sh [extra cargo test arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo test --all-features "$@"
