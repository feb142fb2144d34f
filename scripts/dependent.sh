#!/usr/bin/env bash
# Builds kafka-share-sink as a service that depends on it from a registry gets it, and runs the
# hostile-broker cases through that build: `cargo package --workspace` makes the .crate files
# of the crate and of its wire codecs (protocol/), they are unpacked under target/dependent/,
# and the small crate in .ci/dependent/ compiles them (not this repository's sources: nothing
# outside the packages reaches it) with tests/hostile_broker.rs as its test. A decoder that
# trusts a count off the wire aborts that test binary; the test also bounds what the process
# allocates. Peak RSS of the run is printed and held under 400 MB.
set -euo pipefail
cd "$(dirname "$0")/.."

root="$PWD"
out="$root/target/dependent"
rm -rf "$out" "$root/target/package"/kafka-share-sink*.crate
# --no-verify: the packages are built below, as the dependent builds them.
cargo package --workspace --no-verify --allow-dirty --quiet
mkdir -p "$out"
for crate in "$root"/target/package/kafka-share-sink-0.1.0.crate \
  "$root"/target/package/kafka-share-sink-protocol-0.1.0.crate; do
  # -m: the files get the time of unpacking, not the archive's, so cargo rebuilds what changed
  # since the last run (an older time would let it reuse a stale build of these paths).
  tar xzmf "$crate" -C "$out"
done

cd "$root/.ci/dependent"
# The same target directory as the repository's builds, so registry dependencies compiled
# with the same features are reused.
export CARGO_TARGET_DIR="$root/target"
cargo test --no-run --quiet
rss_log="$out/rss"
/usr/bin/time -f '%M' -o "$rss_log" cargo test --quiet
peak_kb="$(tail -n 1 "$rss_log")"
echo "dependent.sh: hostile-broker cases through the packaged crate passed; peak RSS ${peak_kb} KB"
if [ "$peak_kb" -gt 409600 ]; then
  echo "dependent.sh: peak RSS ${peak_kb} KB is over 400 MB" >&2
  exit 1
fi
