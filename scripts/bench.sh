#!/usr/bin/env bash
# End-to-end share-consumer benchmark (see benches/BENCHMARKS.md): one broker started by scripts/kafka.sh,
# one topic produced once, then the clients drain it in turns A B C A B C ..., each run with a
# fresh share group set to share.auto.offset.reset=earliest:
#
#   A  this crate: KafkaShareConsumer under ShareSinkTask, a no-op sink, explicit acks
#      (examples/bench_consumer.rs)
#   B  Java org.apache.kafka.tools.ShareConsumerPerformance (kafka-tools jar, via kafka.sh run-class),
#      --fetch-size set to A's fetch.max.bytes
#   C  krafka's share consumer, explicit acks (benches/peers/, its own workspace and lockfile)
#   D  Java's classic KafkaConsumer (org.apache.kafka.tools.ConsumerPerformance) in a consumer
#      group on the same topic, fetch.max.bytes and max.poll.records as A: the ceiling the broker
#      allows for reading this topic
#
# A TLS row (BENCH_TLS, on by default): in every round (and in the warm-up), right after the plaintext runs,
# A and B drain the same topic again over the broker's SSL listener (server-authenticated TLS,
# hostname checked, trusting the test CA of scripts/kafka.sh), both given the same Java client
# properties file (security.protocol=SSL, ssl.truststore.type=PEM, ssl.truststore.location=CA):
# B as --command-config, A as bench_consumer's --client-config. C is not run over TLS.
#
# Then the slow-sink rows: A on the main topic, BENCH_SLOW_RECORDS records, with a sink whose put
# sleeps BENCH_SLOW_PUT_MS per batch, for each max.poll.records of BENCH_SLOW_FIXED_MPR with fixed
# acquisition (Java's: each fetch acquires max.poll.records) and with sized acquisition (the
# default) at the same max.poll.records, so both hand the sink batches of the same size (the sink
# costs per batch): throughput and lock losses (acknowledgements the broker refused because the
# lock had expired, and records delivered more than once), and sized ÷ fixed per batch size.
#
# Then a scale-out row: A with 1, 2, 4, 8 drivers in one share group on a 2-partition topic, with
# the no-op sink and with a sink whose put takes 10 ms per batch.
#
# Then a distributed row: BENCH_DIST_PROCESSES processes of A (2), each with BENCH_DIST_DRIVERS
# drivers (8), started together in one share group on the scale-out topic, at the scale-out
# row's put latencies. Each drains what the group hands it and stops once it has had records
# and then none for BENCH_DIST_IDLE_MS; the row adds up their records, requests and CPU, and
# times from the first process's clock start to the last one's last put.
#
# Then a producer row: this crate's KafkaProducer (examples/bench_producer.rs) against Java's
# org.apache.kafka.tools.ProducerPerformance, in turns P J P J ..., each writing BENCH_PRODUCER_RECORDS
# records of BENCH_RECORD_SIZE bytes (null keys, one random payload of letters, as the Java tool) to a
# fresh topic of BENCH_PARTITIONS partitions with the same settings (Java's defaults: acks=all,
# idempotence on, linger.ms 5, batch.size 16384, no compression; BENCH_PRODUCER_ROW_PROPS for both).
# Each times from its first send to its last acknowledgement; CPU and RSS as for the consumers.
#
# Then a mirror row (BENCH_MIRROR, on by default, so that every run reports every row): a source topic of BENCH_MIRROR_RECORDS records
# (BENCH_RECORD_SIZE bytes, BENCH_PARTITIONS partitions) copied to a fresh target topic of as many
# partitions, once per client, each in a fresh share group:
#
#   E  exactly once, ledger mode: examples/eos_mirror.rs (feature exactly-once) with
#      --exit-after-records; prints its time in ledger checks, sends, renewals and commits
#   F  the same pipeline at least once: examples/bench_mirror.rs, ShareSinkTask with a sink whose
#      put sends each record (MirrorTask::mirror) through the crate's idempotent KafkaProducer and
#      waits for every acknowledgement; acknowledged after put
#   G  Java at least once: scripts/bench/MirrorAtLeastOnce.java, KafkaShareConsumer (explicit acks)
#      + KafkaProducer, flush after each poll, then acknowledge and commitSync; compiled with javac
#      against `scripts/kafka.sh classpath`, class files cached under target/bench-java
#
# After each run the target is counted read_committed (bench_mirror count): E must hold exactly
# the records of the source, F and G at least as many (the excess is reported as duplicates); a
# run that falls short fails the script. One run per client (no rounds); before them, with
# BENCH_MIRROR_WARMUP > 0, one unrecorded run of each on that many records.
#
# Per run: records/s and MB/s with group join left out (the clock starts when the first records
# reach the client, see "Timing" below), the client process's user+sys CPU seconds and peak RSS
# (GNU time), and, sampled from /proc every BENCH_RSS_INTERVAL s, the RSS and CPU of the client and
# the CPU of the broker inside the clock's window. Then per round the ratios A/B and A/C, and medians;
# with the TLS row, A/B over TLS and each client's TLS ÷ plaintext of the same round.
#
# Usage: ./scripts/bench.sh            (quick check: BENCH_RECORDS=20000 BENCH_ROUNDS=1 ./scripts/bench.sh)
#
# Environment (defaults in brackets):
#   BENCH_RECORDS          records produced and consumed per run [1000000]
#   BENCH_RECORD_SIZE      value size in bytes, null keys [1024]
#   BENCH_PARTITIONS       partitions of the main topic [6]
#   BENCH_ROUNDS           rounds of the clients [3]
#   BENCH_CLIENTS          clients per round, in order; empty skips the consumer rounds [A B C D]
#   BENCH_A_ACQUISITION    A's acquisition: sized | fixed [sized, the default]
#   BENCH_A_MAX_BYTES      A's acquisition_max_bytes (sized only) [unset: the crate's default, 4 MiB]
#   BENCH_SLOW_PUT_MS      the slow-sink rows' put latencies in ms per batch; empty skips them [5 50]
#   BENCH_SLOW_FIXED_MPR   max.poll.records of the slow-sink runs, each fixed and sized [500 2000]
#   BENCH_SLOW_RECORDS     records per slow-sink run [200000, at most BENCH_RECORDS]
#   BENCH_FETCH_MAX_BYTES  fetch.max.bytes of A and C and --fetch-size of B [52428800, A's default]
#   BENCH_MAX_POLL_RECORDS max.poll.records of all three [500, the default of all three]
#   BENCH_A_COMMIT         A's commit policy: default | every | records:N | interval:MS [default: the driver's,
#                          once a second]
#   BENCH_C_COMMIT         C: every (commit after each poll, like A) | none (acks ride on the next fetch) [every]
#   BENCH_RUNTIME          tokio runtime of A and C: multi | current [multi]
#   BENCH_JAVA_HEAP        JVM heap options of B [-Xmx512m, kafka.sh's tool default]
#   BENCH_GROUP_CONFIG     extra share-group configs, space separated k=v [none]
#   BENCH_PRODUCER_PROPS   extra producer properties, space separated k=v [none: Java defaults]
#   BENCH_PRODUCER_ROUNDS  rounds of the producer row; 0 skips it [BENCH_ROUNDS]
#   BENCH_PRODUCER_RECORDS records per producer run [BENCH_RECORDS]
#   BENCH_PRODUCER_ROW_PROPS  producer properties of both P and J, space separated k=v [none]
#   BENCH_SCALE_DRIVERS    driver counts of the scale-out row; empty skips it [1 2 4 8]
#   BENCH_SCALE_PARTITIONS partitions of the scale-out topic [2]
#   BENCH_SCALE_RECORDS    records of the scale-out topic [BENCH_RECORDS]
#   BENCH_SCALE_PUT_MS     the scale-out row is run for each of these sink latencies: put sleeps
#                          this many ms per batch (0: the no-op sink) [0 10]
#   BENCH_DIST_PROCESSES   processes of the distributed row [2]
#   BENCH_DIST_DRIVERS     drivers per process of the distributed row; empty skips it [8]
#   BENCH_DIST_IDLE_MS     a process of the distributed row stops after this long without
#                          records, once it has had some [3000]
#   BENCH_IDLE_TIMEOUT     seconds without records before a client gives up [60]
#   BENCH_WARMUP_RECORDS   first, each client drains this many records once, unrecorded in the
#                          tables, to warm the broker's JIT; 0 skips [200000]
#   BENCH_PAUSE            seconds between runs, for the broker to settle [2]
#   BENCH_RSS_INTERVAL     seconds between RSS samples [0.2]
#   BENCH_TLS              1: the TLS row above (needs kafka.sh's TLS listeners, KAFKA_SECURITY=1,
#                          its default, or BENCH_TLS_BOOTSTRAP and BENCH_TLS_CA); 0 skips it [1]
#   BENCH_TLS_BOOTSTRAP    the SSL listener [KAFKA_SSL_BOOTSTRAP of `scripts/kafka.sh env`]
#   BENCH_TLS_CA           PEM file of the CA that signed its certificate [KAFKA_PKI_DIR/ca.crt]
#   BENCH_MIRROR           1: the mirror row above (E F G); 0 skips it [1]
#   BENCH_MIRROR_CLIENTS   its clients, in order [E F G]
#   BENCH_MIRROR_RECORDS   records of its source topic, each copied once per client [200000]
#   BENCH_MIRROR_WARMUP    records of one unrecorded warm-up run per client; 0 skips [20000]
#   BENCH_MIRROR_F_COMMIT  F's commit policy: default (the driver's) | every [default]
#   BENCH_PROFILE          1: after the rounds, profile one A and one C run with perf [0]
#   BENCH_DELETE_GROUPS    1: delete each share group after its run [1]
#   BENCH_OUT              results directory [target/bench/<date>-<time>]
#   BENCH_BOOTSTRAP        use this running broker instead of starting one (it is not stopped; nor
#                          is one already running from this checkout, which is used as well)
#   BENCH_NICE             nice level of the cargo builds [10]
#   KAFKA_VERSION, KAFKA_*  passed to scripts/kafka.sh (Kafka 4.2 or later)
#
# Timing. Java's tool starts its clock before subscribe, so it would count the group join. It is
# run with --show-detailed-stats --reporting-interval 50, so it prints a progress line when it
# handles its first record (the join always takes longer than 50 ms); the clock of B starts at
# that line's time and counts the records from that one on. A and C start theirs when their first
# poll returns records (A with several drivers: when every driver has had records) and count
# those records on. All three stop when the record that reaches BENCH_RECORDS has been handed
# over (A and C: acknowledged and, with the default commit policies, committed). "Whole" CPU and
# peak RSS are the whole client process, JVM start-up, join and close included; "window" CPU is
# the sampled rate while the clock ran.
#
# Output: BENCH_OUT/runs.tsv (one line per run), BENCH_OUT/summary.md (the tables), per run its
# stdout/stderr, GNU time and /proc samples; with BENCH_PROFILE=1, perf-A.txt and perf-C.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

RECORDS="${BENCH_RECORDS:-1000000}"
RECORD_SIZE="${BENCH_RECORD_SIZE:-1024}"
PARTITIONS="${BENCH_PARTITIONS:-6}"
ROUNDS="${BENCH_ROUNDS:-3}"
CLIENTS="${BENCH_CLIENTS-A B C D}"
A_ACQUISITION="${BENCH_A_ACQUISITION:-sized}"
A_MAX_BYTES="${BENCH_A_MAX_BYTES:-}"
SLOW_PUT_MS="${BENCH_SLOW_PUT_MS-5 50}"
SLOW_FIXED_MPR="${BENCH_SLOW_FIXED_MPR-500 2000}"
SLOW_RECORDS="${BENCH_SLOW_RECORDS:-200000}"
FETCH_MAX_BYTES="${BENCH_FETCH_MAX_BYTES:-52428800}"
MAX_POLL_RECORDS="${BENCH_MAX_POLL_RECORDS:-500}"
A_COMMIT="${BENCH_A_COMMIT:-default}"
C_COMMIT="${BENCH_C_COMMIT:-every}"
RUNTIME="${BENCH_RUNTIME:-multi}"
JAVA_HEAP="${BENCH_JAVA_HEAP:--Xmx512m}"
GROUP_CONFIG="${BENCH_GROUP_CONFIG:-}"
PRODUCER_PROPS="${BENCH_PRODUCER_PROPS:-}"
PRODUCER_ROUNDS="${BENCH_PRODUCER_ROUNDS:-$ROUNDS}"
PRODUCER_RECORDS="${BENCH_PRODUCER_RECORDS:-$RECORDS}"
PRODUCER_ROW_PROPS="${BENCH_PRODUCER_ROW_PROPS:-}"
SCALE_DRIVERS="${BENCH_SCALE_DRIVERS-1 2 4 8}"
SCALE_PARTITIONS="${BENCH_SCALE_PARTITIONS:-2}"
SCALE_RECORDS="${BENCH_SCALE_RECORDS:-$RECORDS}"
SCALE_PUT_MS="${BENCH_SCALE_PUT_MS-0 10}"
DIST_PROCESSES="${BENCH_DIST_PROCESSES:-2}"
DIST_DRIVERS="${BENCH_DIST_DRIVERS-8}"
DIST_IDLE_MS="${BENCH_DIST_IDLE_MS:-3000}"
IDLE_TIMEOUT="${BENCH_IDLE_TIMEOUT:-60}"
WARMUP_RECORDS="${BENCH_WARMUP_RECORDS:-200000}"
PAUSE="${BENCH_PAUSE:-2}"
RSS_INTERVAL="${BENCH_RSS_INTERVAL:-0.2}"
PROFILE="${BENCH_PROFILE:-0}"
TLS="${BENCH_TLS:-1}"
DELETE_GROUPS="${BENCH_DELETE_GROUPS:-1}"
MIRROR="${BENCH_MIRROR:-1}"
MIRROR_CLIENTS="${BENCH_MIRROR_CLIENTS-E F G}"
MIRROR_RECORDS="${BENCH_MIRROR_RECORDS:-200000}"
MIRROR_WARMUP="${BENCH_MIRROR_WARMUP:-20000}"
MIRROR_F_COMMIT="${BENCH_MIRROR_F_COMMIT:-default}"
NICE="${BENCH_NICE:-10}"
OUT="${BENCH_OUT:-target/bench/$(date +%Y%m%d-%H%M%S)}"
KAFKA_VERSION="${KAFKA_VERSION:-4.4.0}"
export KAFKA_VERSION

TARGET_DIR="${CARGO_TARGET_DIR:-target}"
A_BIN="$TARGET_DIR/release/examples/bench_consumer"
P_BIN="$TARGET_DIR/release/examples/bench_producer"
PEERS_TARGET="$TARGET_DIR/bench-peers"
C_BIN="$PEERS_TARGET/release/krafka_share_consumer"
E_BIN="$TARGET_DIR/release/examples/eos_mirror"
F_BIN="$TARGET_DIR/release/examples/bench_mirror"
G_DIR="$TARGET_DIR/bench-java"
TIME_FMT='elapsed=%e user=%U sys=%S maxrss_kb=%M'

log() { printf 'bench.sh: %s\n' "$*" >&2; }
die() { printf 'bench.sh: ERROR: %s\n' "$*" >&2; exit 1; }

for n in "$RECORDS" "$RECORD_SIZE" "$PARTITIONS" "$ROUNDS" "$FETCH_MAX_BYTES" "$MAX_POLL_RECORDS" \
         "$SCALE_PARTITIONS" "$SCALE_RECORDS" "$IDLE_TIMEOUT"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "'$n' is not a positive integer (check the BENCH_* variables)"
done
[[ "$WARMUP_RECORDS" =~ ^[0-9]+$ ]] || die "BENCH_WARMUP_RECORDS: '$WARMUP_RECORDS'"
[[ "$PRODUCER_ROUNDS" =~ ^[0-9]+$ ]] || die "BENCH_PRODUCER_ROUNDS: '$PRODUCER_ROUNDS'"
[[ "$PRODUCER_RECORDS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_PRODUCER_RECORDS: '$PRODUCER_RECORDS'"
for kv in $PRODUCER_ROW_PROPS; do [[ "$kv" == ?*=* ]] || die "BENCH_PRODUCER_ROW_PROPS: '$kv' is not k=v"; done
for c in $CLIENTS; do [[ "$c" =~ ^[ABCD]$ ]] || die "BENCH_CLIENTS: unknown client '$c' (A, B, C or D)"; done
[[ "$A_ACQUISITION" == sized || "$A_ACQUISITION" == fixed ]] || die "BENCH_A_ACQUISITION: '$A_ACQUISITION' (sized or fixed)"
for k in $SLOW_PUT_MS $SLOW_FIXED_MPR; do [[ "$k" =~ ^[0-9]+$ ]] || die "BENCH_SLOW_PUT_MS/BENCH_SLOW_FIXED_MPR: '$k'"; done
[[ "$SLOW_RECORDS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_SLOW_RECORDS: '$SLOW_RECORDS'"
[[ "$TLS" == 0 || "$TLS" == 1 ]] || die "BENCH_TLS: '$TLS' (0 or 1)"
for k in $SCALE_DRIVERS; do [[ "$k" =~ ^[1-9][0-9]*$ ]] || die "BENCH_SCALE_DRIVERS: '$k'"; done
for k in $SCALE_PUT_MS; do [[ "$k" =~ ^[0-9]+$ ]] || die "BENCH_SCALE_PUT_MS: '$k'"; done
for k in "$DIST_PROCESSES" $DIST_DRIVERS "$DIST_IDLE_MS"; do
  [[ "$k" =~ ^[1-9][0-9]*$ ]] || die "BENCH_DIST_PROCESSES/BENCH_DIST_DRIVERS/BENCH_DIST_IDLE_MS: '$k'"
done
[[ "$MIRROR" == 0 || "$MIRROR" == 1 ]] || die "BENCH_MIRROR: '$MIRROR' (0 or 1)"
for c in $MIRROR_CLIENTS; do [[ "$c" =~ ^[EFG]$ ]] || die "BENCH_MIRROR_CLIENTS: unknown client '$c' (E, F or G)"; done
[[ "$MIRROR_RECORDS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_MIRROR_RECORDS: '$MIRROR_RECORDS'"
[[ "$MIRROR_WARMUP" =~ ^[0-9]+$ ]] || die "BENCH_MIRROR_WARMUP: '$MIRROR_WARMUP'"
[[ "$MIRROR_F_COMMIT" == default || "$MIRROR_F_COMMIT" == every ]] || die "BENCH_MIRROR_F_COMMIT: '$MIRROR_F_COMMIT' (default or every)"

# --- tools ------------------------------------------------------------------------------------
ver_ge() { # ver_ge A B: dotted version A >= B
  local IFS=.; local -a a=($1) b=($2); local i
  for i in 0 1 2; do
    ((10#${a[i]:-0} > 10#${b[i]:-0})) && return 0
    ((10#${a[i]:-0} < 10#${b[i]:-0})) && return 1
  done
  return 0
}
ver_ge "${KAFKA_VERSION%%-*}" 4.2.0 || die "KAFKA_VERSION=$KAFKA_VERSION: the benchmark needs Kafka 4.2 or later"

GNU_TIME=/usr/bin/time
ensure_gnu_time() {
  if [[ -x "$GNU_TIME" ]] && "$GNU_TIME" -f '%M' -o /dev/null true 2>/dev/null; then return; fi
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    log "GNU time missing: installing the 'time' package with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q time >/dev/null \
      || die "apt-get install time failed"
  fi
  [[ -x "$GNU_TIME" ]] && "$GNU_TIME" -f '%M' -o /dev/null true 2>/dev/null \
    || die "GNU time (/usr/bin/time) is needed for CPU and peak RSS: install the 'time' package"
}
ensure_gnu_time
command -v cargo >/dev/null || die "cargo not found"

# --- cleanup: everything this script starts is stopped on exit -------------------------------
STARTED_BROKER=0
CHILD_PIDS=()
cleanup() {
  local pid p
  for pid in "${CHILD_PIDS[@]}"; do
    for p in $(descendants "$pid"); do kill "$p" 2>/dev/null || true; done
  done
  if ((STARTED_BROKER)); then ./scripts/kafka.sh stop || true; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$OUT"
log "results in $OUT"

# --- build ------------------------------------------------------------------------------------
log "building client A (release)"
nice -n "$NICE" cargo build --release --example bench_consumer >"$OUT/build-a.log" 2>&1 \
  || { tail -n 30 "$OUT/build-a.log" >&2; die "building A failed"; }
if ((PRODUCER_ROUNDS > 0)); then
  log "building producer P (release)"
  nice -n "$NICE" cargo build --release --example bench_producer >"$OUT/build-p.log" 2>&1 \
    || { tail -n 30 "$OUT/build-p.log" >&2; die "building P failed"; }
fi
if [[ " $CLIENTS " == *" C "* || "$PROFILE" == 1 ]]; then
  log "building client C (benches/peers, release, --locked)"
  nice -n "$NICE" cargo build --release --locked --manifest-path benches/peers/Cargo.toml \
    --target-dir "$PEERS_TARGET" >"$OUT/build-c.log" 2>&1 \
    || { tail -n 30 "$OUT/build-c.log" >&2; die "building C failed"; }
fi

if [[ "$MIRROR" == 1 ]]; then
  log "building mirror clients E and F (release, feature exactly-once)"
  nice -n "$NICE" cargo build --release --features exactly-once --example eos_mirror --example bench_mirror \
    >"$OUT/build-mirror.log" 2>&1 || { tail -n 30 "$OUT/build-mirror.log" >&2; die "building E and F failed"; }
  if [[ " $MIRROR_CLIENTS " == *" G "* ]]; then
    # Compiled again only when the source or the Kafka version changed.
    G_STAMP="$G_DIR/kafka-version"
    if [[ ! -f "$G_DIR/MirrorAtLeastOnce.class" || scripts/bench/MirrorAtLeastOnce.java -nt "$G_DIR/MirrorAtLeastOnce.class" \
          || "$(cat "$G_STAMP" 2>/dev/null)" != "$KAFKA_VERSION" ]]; then
      command -v javac >/dev/null || die "javac not found: the mirror row's client G needs a JDK"
      log "compiling mirror client G (javac)"
      mkdir -p "$G_DIR"
      javac -d "$G_DIR" -cp "$(./scripts/kafka.sh classpath)" scripts/bench/MirrorAtLeastOnce.java \
        >"$OUT/build-g.log" 2>&1 || { cat "$OUT/build-g.log" >&2; die "compiling G failed"; }
      echo "$KAFKA_VERSION" >"$G_STAMP"
    fi
  fi
fi

# --- broker -----------------------------------------------------------------------------------
# kafka_env NAME: one variable of `scripts/kafka.sh env`, which prints them all on one line
# (KAFKA_BOOTSTRAP, and with its TLS/SASL listeners KAFKA_SSL_BOOTSTRAP, KAFKA_PKI_DIR, ...).
kafka_env() { ./scripts/kafka.sh env | tr ' ' '\n' | sed -n "s/^$1=//p"; }
if [[ -n "${BENCH_BOOTSTRAP:-}" ]]; then
  BOOTSTRAP="$BENCH_BOOTSTRAP"
  log "using the broker at $BOOTSTRAP"
elif ./scripts/kafka.sh status >/dev/null 2>&1; then
  # Someone's broker from this checkout: use it, and leave it running.
  BOOTSTRAP="$(kafka_env KAFKA_BOOTSTRAP)"
  log "using the broker already running from this checkout at $BOOTSTRAP (it is not stopped)"
else
  STARTED_BROKER=1
  # No ACL authorizer (the tests' broker has one): the rows measure the broker as shipped.
  KAFKA_AUTHORIZER=0 ./scripts/kafka.sh start
  BOOTSTRAP="$(kafka_env KAFKA_BOOTSTRAP)"
fi
# The broker's CPU is sampled too, when it is the one scripts/kafka.sh runs from this checkout.
BROKER_PID=""
if [[ "$(cat target/kafka/bootstrap 2>/dev/null)" == "$BOOTSTRAP" ]]; then
  BROKER_PID="$(cat target/kafka/kafka.pid 2>/dev/null || true)"
fi
[[ "$BOOTSTRAP" == 127.0.0.1:* || "$BOOTSTRAP" == localhost:* || "$BOOTSTRAP" == "[::1]:"* ]] \
  || die "only loopback brokers: $BOOTSTRAP"

# The TLS row: the SSL listener, the CA, and the client properties file A and B share.
TLS_BOOTSTRAP="" TLS_CLIENTS="" TLS_CONFIG="$OUT/tls-client.properties"
if [[ "$TLS" == 1 ]]; then
  TLS_BOOTSTRAP="${BENCH_TLS_BOOTSTRAP:-}"
  TLS_CA="${BENCH_TLS_CA:-}"
  if [[ -z "${BENCH_BOOTSTRAP:-}" ]]; then
    [[ -n "$TLS_BOOTSTRAP" ]] || TLS_BOOTSTRAP="$(kafka_env KAFKA_SSL_BOOTSTRAP)"
    if [[ -z "$TLS_CA" ]]; then
      TLS_CA="$(kafka_env KAFKA_PKI_DIR)"
      TLS_CA="${TLS_CA:+$TLS_CA/ca.crt}"
    fi
  fi
  [[ -n "$TLS_BOOTSTRAP" && -n "$TLS_CA" ]] \
    || die "BENCH_TLS=1: the broker has no SSL listener known to kafka.sh env (started with KAFKA_SECURITY=0?); restart it, set BENCH_TLS_BOOTSTRAP and BENCH_TLS_CA, or skip the row with BENCH_TLS=0"
  [[ "$TLS_BOOTSTRAP" == 127.0.0.1:* || "$TLS_BOOTSTRAP" == localhost:* || "$TLS_BOOTSTRAP" == "[::1]:"* ]] \
    || die "only loopback brokers: $TLS_BOOTSTRAP"
  [[ -r "$TLS_CA" ]] || die "BENCH_TLS=1: CA file $TLS_CA is not readable"
  TLS_CA="$(cd "$(dirname "$TLS_CA")" && pwd)/$(basename "$TLS_CA")"
  {
    echo "# Written by scripts/bench.sh: the TLS row's client settings, for A and B alike."
    echo "security.protocol=SSL"
    echo "ssl.truststore.type=PEM"
    echo "ssl.truststore.location=$TLS_CA"
  } >"$TLS_CONFIG"
  for client in $CLIENTS; do
    if [[ "$client" == C ]]; then log "the TLS row runs A and B only, not C"; else TLS_CLIENTS+="${TLS_CLIENTS:+ }$client"; fi
  done
  log "TLS row: $TLS_CLIENTS over $TLS_BOOTSTRAP, CA $TLS_CA"
fi

run_class() { ./scripts/kafka.sh run-class "$@"; }
admin() { "$A_BIN" "$@" --bootstrap "$BOOTSTRAP"; }
RUN_ID="$(date +%H%M%S)-$$"

produce() { # produce TOPIC PARTITIONS RECORDS
  local topic="$1" partitions="$2" records="$3" kv
  admin create-topic --topic "$topic" --partitions "$partitions"
  local -a props=()
  for kv in $PRODUCER_PROPS; do props+=(--command-property "$kv"); done
  log "producing $records records of $RECORD_SIZE bytes to $topic ($partitions partitions)"
  run_class org.apache.kafka.tools.ProducerPerformance --bootstrap-server "$BOOTSTRAP" \
    --topic "$topic" --num-records "$records" --record-size "$RECORD_SIZE" --throughput -1 \
    "${props[@]}" >"$OUT/produce-$topic.log" 2>&1 \
    || { tail -n 20 "$OUT/produce-$topic.log" >&2; die "producing failed"; }
  tail -n 1 "$OUT/produce-$topic.log" >&2
  # The end offsets per partition: they must add up to the records produced.
  run_class org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$BOOTSTRAP" --topic "$topic" \
    >"$OUT/offsets-$topic.txt" 2>>"$OUT/produce-$topic.log"
  local total
  total="$(awk -F: '{s += $NF} END {print s + 0}' "$OUT/offsets-$topic.txt")"
  ((total == records)) || die "$topic holds $total records, not $records"
  log "end offsets of $topic: $(awk -F: '{printf "%s ", $NF}' "$OUT/offsets-$topic.txt")"
}

new_group() { # new_group NAME: configure a fresh share group
  local group="$1" kv
  local -a sets=(--set share.auto.offset.reset=earliest)
  for kv in $GROUP_CONFIG; do sets+=(--set "$kv"); done
  admin group-config --group "$group" "${sets[@]}"
}

delete_group() {
  [[ "$DELETE_GROUPS" == 1 ]] || return 0
  run_class org.apache.kafka.tools.consumer.group.ShareGroupCommand --bootstrap-server "$BOOTSTRAP" \
    --delete --group "$1" >>"$OUT/groups.log" 2>&1 || log "could not delete group $1 (see groups.log)"
}

# --- sampler ----------------------------------------------------------------------------------
# Every RSS_INTERVAL s: "unix_ms rss_kb cpu_ticks broker_ticks": RSS and utime+stime of the
# largest process under ROOT (the client, not GNU time or kafka.sh's bash), and utime+stime of the
# broker (-1 if unknown). Only builtins, besides sleep.
cpu_ticks() { # cpu_ticks PID: utime+stime in clock ticks, or -1
  local line; local -a stat
  read -r line 2>/dev/null <"/proc/$1/stat" || { echo -1; return; }
  read -r -a stat <<<"${line##*) }"   # fields from 3 (state) on: utime is 14, stime 15
  echo $((stat[11] + stat[12]))
}
descendants() {
  local -a queue=("$1") kids
  local p
  while ((${#queue[@]})); do
    p="${queue[0]}"; queue=("${queue[@]:1}")
    printf '%s\n' "$p"
    kids=()
    read -r -a kids 2>/dev/null <"/proc/$p/task/$p/children" || true
    ((${#kids[@]})) && queue+=("${kids[@]}")
  done
}
sample() { # sample ROOT_PID OUT_FILE
  local root="$1" out="$2" p key value unit best best_pid now
  : >"$out"
  while kill -0 "$root" 2>/dev/null; do
    best=0; best_pid=""
    for p in $(descendants "$root"); do
      while read -r key value unit; do
        [[ "$key" == VmRSS: ]] && { ((value > best)) && { best=$value; best_pid=$p; }; break; }
      done 2>/dev/null <"/proc/$p/status" || true
    done
    now="${EPOCHREALTIME/./}"
    if [[ -n "$best_pid" ]]; then
      printf '%d %d %d %d\n' $((now / 1000)) "$best" "$(cpu_ticks "$best_pid")" \
        "$( [[ -n "$BROKER_PID" ]] && cpu_ticks "$BROKER_PID" || echo -1)" >>"$out"
    fi
    sleep "$RSS_INTERVAL"
  done
}

# --- one run ----------------------------------------------------------------------------------
# measure NAME CMD...: runs CMD under GNU time with the RSS sampler; output in $OUT/NAME.*
measure() {
  local name="$1"; shift
  "$GNU_TIME" -f "$TIME_FMT" -o "$OUT/$name.time" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err" &
  local pid=$!
  CHILD_PIDS+=("$pid")
  date +%s%3N >"$OUT/$name.started"
  sample "$pid" "$OUT/$name.samples" &
  local sampler=$!
  CHILD_PIDS+=("$sampler")
  local rc=0
  wait "$pid" || rc=$?
  wait "$sampler" 2>/dev/null || true
  CHILD_PIDS=()
  if ((rc != 0)); then
    tail -n 20 "$OUT/$name.err" >&2
    die "$name failed (exit $rc); logs in $OUT/$name.{out,err}"
  fi
}

# B runs with TZ=UTC and prints HH:mm:ss.SSS; this turns its output into A's BENCH line, with
# the times made Unix milliseconds again from the run's start (REF_MS).
java_to_bench() { # java_to_bench OUT_FILE RECORDS REF_MS
  awk -v target="$2" -v ref="$3" '
    function ms(t,   a, x) {
      split(t, a, /[:.]/); x = ref - ref % 86400000 + ((a[1] * 60 + a[2]) * 60 + a[3]) * 1000 + a[4]
      return x < ref - 3600000 ? x + 86400000 : x
    }
    /for share consumer/ { if (!seen) { split($0, f, /, */); t_first = ms(f[2]); r_first = f[6]; seen = 1 } next }
    /^WARNING/ { warn = 1; next }
    /^[0-9][0-9]:[0-9][0-9]:[0-9][0-9]\.[0-9]+, / { split($0, f, /, */); t_start = ms(f[1]); t_end = ms(f[2]); mb = f[3]; records = f[6] }
    END {
      if (records == "") { print "no final line in the Java output" > "/dev/stderr"; exit 1 }
      if (!seen) { print "no progress line in the Java output" > "/dev/stderr"; exit 1 }
      bytes = int(mb * 1048576 + 0.5)
      wr = records - r_first + 1
      printf "BENCH client=B records=%d bytes=%d window_records=%d window_bytes=%d window_ms=%d join_ms=%d redelivered=-1 drivers=1 complete=%d first_progress_records=%d window_start_unix_ms=%.0f window_end_unix_ms=%.0f\n",
        records, bytes, wr, (records > 0 ? int(bytes * wr / records + 0.5) : 0), t_end - t_first,
        t_first - t_start, (records >= target && !warn), r_first, t_first, t_end
    }' "$1"
}

# D (ConsumerPerformance without detailed stats) prints one final line: start.time, end.time, MB,
# MB/s, records, records/s, rebalance.time.ms (the group join), fetch.time.ms (the rest). Its
# window starts when the join ends (start + rebalance) and ends at end.time, as A's and B's start
# with the first records: the join is not timed.
java_classic_to_bench() { # java_classic_to_bench OUT_FILE RECORDS REF_MS
  awk -v target="$2" -v ref="$3" '
    function ms(t,   a, x) {
      split(t, a, /[:.]/); x = ref - ref % 86400000 + ((a[1] * 60 + a[2]) * 60 + a[3]) * 1000 + a[4]
      return x < ref - 3600000 ? x + 86400000 : x
    }
    /^WARNING/ { warn = 1; next }
    /^[0-9][0-9]:[0-9][0-9]:[0-9][0-9]\.[0-9]+, [0-9][0-9]:/ { split($0, f, /, */); t_start = ms(f[1]); t_end = ms(f[2]); mb = f[3]; records = f[5]; join = f[7]; fetch = f[8] }
    END {
      if (records == "") { print "no final line in the Java output" > "/dev/stderr"; exit 1 }
      bytes = int(mb * 1048576 + 0.5)
      printf "BENCH client=D records=%d bytes=%d window_records=%d window_bytes=%d window_ms=%d join_ms=%d redelivered=-1 drivers=1 complete=%d window_start_unix_ms=%.0f window_end_unix_ms=%.0f\n",
        records, bytes, records, bytes, fetch, t_start + join - ref, (records >= target && !warn), t_start + join, t_end
    }' "$1"
}

bench_field() { # bench_field FILE KEY
  grep -m1 '^BENCH ' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"
}

RUNS="$OUT/runs.tsv"
printf 'kind\tround\tclient\tdrivers\trecords\twindow_records\twindow_ms\trecords_per_s\tMB_per_s\tcpu_s\tuser_s\tsys_s\tcpu_us_per_record\twindow_cpu_us_per_record\tpeak_rss_MB\trss_1st_half_MB\trss_2nd_half_MB\telapsed_s\tjoin_ms\tredelivered\tbroker_cpu_us_per_record\trecords_per_poll\tcommits\tput_latency_ms\tacquisition\tmax_poll_records\tlock_losses\trequests_per_1000_records\n' >"$RUNS"
CLK_TCK="$(getconf CLK_TCK 2>/dev/null || echo 100)"

# record_run KIND ROUND CLIENT NAME EXPECTED PUT_MS: appends one line to runs.tsv and prints it.
#   cpu_us_per_record         user+sys of the whole process (GNU time) over all records
#   window_cpu_us_per_record  the sampled CPU rate inside the clock's window, over the records
#                             counted there ("na" when the window holds fewer than 2 samples)
#   rss_1st/2nd_half_MB       the largest RSS sample in the first and second half of the window
#   broker_cpu_us_per_record  the broker's sampled CPU rate inside the window, over the records
#   records_per_poll, commits A and C: polls that returned records, and commits ("na" for B, D)
#   acquisition, max_poll_records  A's acquisition (sized | fixed; "na" for the others) and max.poll.records
#   lock_losses               A: acknowledgements refused because the lock had expired ("na" for the others)
#   requests_per_1000_records A: ShareFetch plus ShareAcknowledge requests per 1,000 records ("na" for the others)
record_run() {
  local kind="$1" round="$2" client="$3" name="$4" expected="$5" put_ms="$6" acq="${7:-na}" mpr="${8:-$MAX_POLL_RECORDS}"
  local bench="$OUT/$name.bench"
  if [[ "$client" == B ]]; then
    java_to_bench "$OUT/$name.out" "$expected" "$(cat "$OUT/$name.started")" >"$bench"
  elif [[ "$client" == D ]]; then
    java_classic_to_bench "$OUT/$name.out" "$expected" "$(cat "$OUT/$name.started")" >"$bench"
  else
    grep -m1 '^BENCH ' "$OUT/$name.out" >"$bench" || die "$name printed no BENCH line"
  fi
  [[ "$(bench_field "$bench" complete)" == 1 ]] || die "$name did not consume $expected records: $(cat "$bench")"
  local t; t="$(cat "$OUT/$name.time")"
  awk -v kind="$kind" -v round="$round" -v client="$client" -v bench="$(cat "$bench")" -v t="$t" \
      -v tck="$CLK_TCK" -v put_ms="$put_ms" -v acq="$acq" -v mpr="$mpr" '
    function field(s, k,   n, i, a, kv) { n = split(s, a, " "); for (i = 1; i <= n; i++) { split(a[i], kv, "="); if (kv[1] == k) return kv[2] } return "" }
    { at[NR] = $1; rss[NR] = $2; cpu[NR] = $3; bcpu[NR] = $4 }
    END {
      records = field(bench, "records"); wr = field(bench, "window_records"); wms = field(bench, "window_ms")
      wb = field(bench, "window_bytes"); user = field(t, "user"); sys = field(t, "sys")
      ws = field(bench, "window_start_unix_ms"); we = field(bench, "window_end_unix_ms"); half = (ws + we) / 2
      first = 0; last = 0; r1 = "na"; r2 = "na"
      for (i = 1; i <= NR; i++) {
        if (at[i] < ws || at[i] > we) continue
        if (!first) first = i
        last = i
        if (at[i] < half) { if (r1 == "na" || rss[i] > r1) r1 = rss[i] } else if (r2 == "na" || rss[i] > r2) r2 = rss[i]
      }
      wcpu = "na"; bw = "na"
      if (first && last > first && at[last] > at[first] && wr > 0) {
        wcpu = sprintf("%.3f", (cpu[last] - cpu[first]) / tck / (at[last] - at[first]) * wms * 1e6 / wr)
        if (bcpu[first] >= 0 && bcpu[last] >= 0)
          bw = sprintf("%.3f", (bcpu[last] - bcpu[first]) / tck / (at[last] - at[first]) * wms * 1e6 / wr)
      }
      polls = field(bench, "polls"); commits = field(bench, "commits"); losses = field(bench, "lock_losses")
      if (losses == "") losses = "na"
      sf = field(bench, "share_fetches"); sa = field(bench, "share_acknowledges")
      rpk = (sf != "" && records > 0) ? sprintf("%.2f", (sf + sa) * 1000 / records) : "na"
      rpp = polls > 0 ? sprintf("%.0f", records / polls) : "na"
      if (commits == "") commits = "na"
      s = wms / 1000
      r1 = r1 == "na" ? r1 : sprintf("%.1f", r1 / 1024); r2 = r2 == "na" ? r2 : sprintf("%.1f", r2 / 1024)
      printf "%s\t%s\t%s\t%s\t%d\t%d\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.3f\t%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
        kind, round, client, field(bench, "drivers"), records, wr, wms, wr / s, wb / 1048576 / s,
        user + sys, user, sys, (user + sys) * 1e6 / records, wcpu, field(t, "maxrss_kb") / 1024,
        r1, r2, field(t, "elapsed"), field(bench, "join_ms"), field(bench, "redelivered"), bw, rpp, commits, put_ms,
        acq, mpr, losses, rpk
    }' "$OUT/$name.samples" | tee -a "$RUNS" >&2
}

run_client() { # run_client KIND ROUND CLIENT TOPIC RECORDS [DRIVERS [PUT_MS [ACQUISITION [MAX_POLL_RECORDS]]]]
  local kind="$1" round="$2" client="$3" topic="$4" records="$5" drivers="${6:-1}" put_ms="${7:-0}"
  local acq="${8:-$A_ACQUISITION}" mpr="${9:-$MAX_POLL_RECORDS}"
  [[ "$client" == A ]] || acq=na
  local name="$kind-r$round-$client-d$drivers-p$put_ms-$acq-m$mpr"
  local group="bench-$RUN_ID-$name"
  # Kinds tls and warmup-tls: over the SSL listener, with the client properties for it.
  local bootstrap="$BOOTSTRAP"
  local -a a_sec=() b_sec=()
  if [[ "$kind" == tls || "$kind" == warmup-tls ]]; then
    bootstrap="$TLS_BOOTSTRAP"
    a_sec=(--client-config "$TLS_CONFIG")
    b_sec=(--command-config "$TLS_CONFIG")
  fi
  [[ "$client" == D ]] || new_group "$group"
  sleep "$PAUSE"
  log "run $name: group $group${a_sec[*]:+, over TLS at $bootstrap}"
  case "$client" in
    A) measure "$name" "$A_BIN" consume --bootstrap "$bootstrap" --topic "$topic" --group "$group" \
         --records "$records" --drivers "$drivers" --fetch-max-bytes "$FETCH_MAX_BYTES" \
         --max-poll-records "$mpr" --commit "$A_COMMIT" --runtime "$RUNTIME" \
         --idle-timeout-secs "$IDLE_TIMEOUT" --put-latency-ms "$put_ms" --acquisition "$acq" ${A_MAX_BYTES:+--acquisition-max-bytes "$A_MAX_BYTES"} "${a_sec[@]}" ;;
    B) measure "$name" env TZ=UTC KAFKA_TOOL_HEAP_OPTS="$JAVA_HEAP" ./scripts/kafka.sh run-class \
         org.apache.kafka.tools.ShareConsumerPerformance --bootstrap-server "$bootstrap" "${b_sec[@]}" \
         --topic "$topic" --group "$group" --num-records "$records" --fetch-size "$FETCH_MAX_BYTES" \
         --command-property "max.poll.records=$MAX_POLL_RECORDS" --timeout "$((IDLE_TIMEOUT * 1000))" \
         --show-detailed-stats --reporting-interval 50 --date-format HH:mm:ss.SSS ;;
    C) measure "$name" "$C_BIN" --bootstrap "$BOOTSTRAP" --topic "$topic" --group "$group" \
         --records "$records" --fetch-max-bytes "$FETCH_MAX_BYTES" \
         --max-poll-records "$MAX_POLL_RECORDS" --commit "$C_COMMIT" --runtime "$RUNTIME" \
         --idle-timeout-secs "$IDLE_TIMEOUT" ;;
    D) printf 'fetch.max.bytes=%s\nmax.poll.records=%s\nauto.offset.reset=earliest\n' "$FETCH_MAX_BYTES" "$MAX_POLL_RECORDS" \
         >"$OUT/$name.properties"
       # Over TLS D needs the SSL settings in the one properties file it reads (it spoke
       # PLAINTEXT to the SSL listener before, and consumed nothing).
       if [[ ${#b_sec[@]} -gt 0 ]]; then cat "$TLS_CONFIG" >>"$OUT/$name.properties"; fi
       measure "$name" env TZ=UTC KAFKA_TOOL_HEAP_OPTS="$JAVA_HEAP" ./scripts/kafka.sh run-class \
         org.apache.kafka.tools.ConsumerPerformance --bootstrap-server "$bootstrap" --topic "$topic" \
         --group "$group" --num-records "$records" --command-config "$OUT/$name.properties" \
         --timeout "$((IDLE_TIMEOUT * 1000))" --date-format HH:mm:ss.SSS ;;
  esac
  record_run "$kind" "$round" "$client" "$name" "$records" "$put_ms" "$acq" "$mpr"
  [[ "$client" == D ]] || delete_group "$group"
}

# --- environment ------------------------------------------------------------------------------
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu: $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)"
  echo "memory: $(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "kernel: $(uname -sr)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "rustc: $(rustc --version)"
  echo "java: $(java -version 2>&1 | head -n1)"
  echo "kafka: broker $(cat target/kafka/version 2>/dev/null || echo "$KAFKA_VERSION"), Java clients and tools $KAFKA_VERSION"
  echo "krafka: $(awk '/^name = "krafka"/ {getline; print $3}' benches/peers/Cargo.lock | tr -d '"')"
  echo "kafka-share-sink: $(git describe --always --dirty 2>/dev/null || echo unknown)"
  echo "settings: records=$RECORDS size=$RECORD_SIZE partitions=$PARTITIONS rounds=$ROUNDS warmup=$WARMUP_RECORDS" \
       "fetch.max.bytes=$FETCH_MAX_BYTES max.poll.records=$MAX_POLL_RECORDS A_commit=$A_COMMIT A_acquisition=$A_ACQUISITION A_max_bytes=${A_MAX_BYTES:-default}" \
       "C_commit=$C_COMMIT runtime=$RUNTIME java_heap='$JAVA_HEAP' group_config='$GROUP_CONFIG'" \
       "producer_props='$PRODUCER_PROPS'"
  if [[ "$MIRROR" == 1 ]]; then
    echo "mirror row: clients $MIRROR_CLIENTS, records=$MIRROR_RECORDS warmup=$MIRROR_WARMUP F_commit=$MIRROR_F_COMMIT" \
         "max.poll.records=$MAX_POLL_RECORDS partitions=$PARTITIONS"
  fi
  if [[ "$TLS" == 1 ]]; then
    echo "tls row: clients $TLS_CLIENTS over the SSL listener $TLS_BOOTSTRAP (security.protocol=SSL, PEM truststore: the CA of $TLS_CA)"
  fi
} >"$OUT/env.txt"
cat "$OUT/env.txt" >&2

# --- main rounds ------------------------------------------------------------------------------
TOPIC="bench-$RUN_ID-p$PARTITIONS"
[[ -z "$CLIENTS" ]] || produce "$TOPIC" "$PARTITIONS" "$RECORDS"
# A fresh broker JVM is not yet compiled hot: the first runs on it are slower whoever runs them.
if ((WARMUP_RECORDS > 0)); then
  for client in $CLIENTS; do
    run_client warmup 0 "$client" "$TOPIC" "$((WARMUP_RECORDS < RECORDS ? WARMUP_RECORDS : RECORDS))"
  done
  # The broker's TLS path has its own code to compile.
  for client in $TLS_CLIENTS; do
    run_client warmup-tls 0 "$client" "$TOPIC" "$((WARMUP_RECORDS < RECORDS ? WARMUP_RECORDS : RECORDS))"
  done
fi
for ((round = 1; round <= ROUNDS; round++)); do
  for client in $CLIENTS; do
    run_client main "$round" "$client" "$TOPIC" "$RECORDS"
  done
  for client in $TLS_CLIENTS; do
    run_client tls "$round" "$client" "$TOPIC" "$RECORDS"
  done
done

# --- slow-sink rows ---------------------------------------------------------------------------
if [[ -n "$SLOW_PUT_MS" && -n "$CLIENTS" ]]; then
  slow_records=$((SLOW_RECORDS < RECORDS ? SLOW_RECORDS : RECORDS))
  for put_ms in $SLOW_PUT_MS; do
    for mpr in $SLOW_FIXED_MPR; do
      run_client slow 1 A "$TOPIC" "$slow_records" 1 "$put_ms" fixed "$mpr"
      run_client slow 1 A "$TOPIC" "$slow_records" 1 "$put_ms" sized "$mpr"
    done
  done
fi

# --- scale-out row ----------------------------------------------------------------------------
if [[ -n "$SCALE_DRIVERS" && -n "$SCALE_PUT_MS" ]]; then
  SCALE_TOPIC="bench-$RUN_ID-p$SCALE_PARTITIONS"
  produce "$SCALE_TOPIC" "$SCALE_PARTITIONS" "$SCALE_RECORDS"
  for put_ms in $SCALE_PUT_MS; do
    for k in $SCALE_DRIVERS; do
      run_client scale 1 A "$SCALE_TOPIC" "$SCALE_RECORDS" "$k" "$put_ms"
    done
  done
fi

# --- distributed row --------------------------------------------------------------------------
# combine_runs NAME N: makes NAME.{out,time,samples,started} of the runs NAME-x1 .. NAME-xN, run
# at the same time: one BENCH line with their counts added up, the window from the earliest
# start to the latest end; their CPU seconds and peak RSS added up; samples at the first run's
# times, each adding every run's latest RSS and CPU ticks (the broker's from the first run).
combine_runs() {
  local name="$1" n="$2" i
  local -a outs=() times=() samples=()
  for ((i = 1; i <= n; i++)); do
    outs+=("$OUT/$name-x$i.out"); times+=("$OUT/$name-x$i.time"); samples+=("$OUT/$name-x$i.samples")
  done
  cp "$OUT/$name-x1.started" "$OUT/$name.started"
  awk -v target="$SCALE_RECORDS" '
    function field(s, k,   n, i, a, kv) { n = split(s, a, " "); for (i = 1; i <= n; i++) { split(a[i], kv, "="); if (kv[1] == k) return kv[2] } return "" }
    /^BENCH / {
      split("records bytes window_records window_bytes redelivered drivers polls commits lock_losses share_fetches fetches_with_acks share_acknowledges", keys, " ")
      for (k in keys) sum[keys[k]] += field($0, keys[k])
      s = field($0, "window_start_unix_ms"); e = field($0, "window_end_unix_ms"); j = field($0, "join_ms")
      if (start == "" || s < start) start = s
      if (end == "" || e > end) end = e
      if (j > join) join = j
    }
    END {
      printf "BENCH client=A records=%.0f bytes=%.0f window_records=%.0f window_bytes=%.0f window_ms=%.3f join_ms=%.0f redelivered=%.0f drivers=%d complete=%d window_start_unix_ms=%.0f window_end_unix_ms=%.0f polls=%.0f commits=%.0f lock_losses=%.0f share_fetches=%.0f fetches_with_acks=%.0f share_acknowledges=%.0f\n",
        sum["records"], sum["bytes"], sum["window_records"], sum["window_bytes"], end - start, join, sum["redelivered"],
        sum["drivers"], (sum["records"] >= target), start, end, sum["polls"], sum["commits"], sum["lock_losses"],
        sum["share_fetches"], sum["fetches_with_acks"], sum["share_acknowledges"]
    }' "${outs[@]}" >"$OUT/$name.out"
  awk '
    function field(s, k,   n, i, a, kv) { n = split(s, a, " "); for (i = 1; i <= n; i++) { split(a[i], kv, "="); if (kv[1] == k) return kv[2] } return "" }
    /^elapsed=/ { e = field($0, "elapsed"); if (e > el) el = e; u += field($0, "user"); s += field($0, "sys"); m += field($0, "maxrss_kb") }
    END { printf "elapsed=%s user=%.2f sys=%.2f maxrss_kb=%d\n", el, u, s, m }' "${times[@]}" >"$OUT/$name.time"
  awk -v n="$n" '
    FNR == 1 { f++ }
    { at[f, FNR] = $1; rss[f, FNR] = $2; cpu[f, FNR] = $3; bk[f, FNR] = $4; len[f] = FNR }
    END {
      for (i = 1; i <= len[1]; i++) {
        r = 0; c = 0
        for (g = 1; g <= n; g++) {
          last = 0
          for (k = 1; k <= len[g] && at[g, k] <= at[1, i]; k++) last = k
          if (last) { r += rss[g, last]; c += cpu[g, last] }
        }
        printf "%.0f %.0f %.0f %.0f\n", at[1, i], r, c, bk[1, i]
      }
    }' "${samples[@]}" >"$OUT/$name.samples"
}

run_distributed() { # run_distributed PUT_MS
  local put_ms="$1" i rc=0
  local name="dist-r1-A-x$DIST_PROCESSES-d$DIST_DRIVERS-p$put_ms-$A_ACQUISITION-m$MAX_POLL_RECORDS"
  local group="bench-$RUN_ID-$name"
  local -a pids=()
  new_group "$group"
  sleep "$PAUSE"
  log "run $name: $DIST_PROCESSES processes x $DIST_DRIVERS drivers, group $group"
  for ((i = 1; i <= DIST_PROCESSES; i++)); do
    measure "$name-x$i" "$A_BIN" consume --bootstrap "$BOOTSTRAP" --topic "$SCALE_TOPIC" --group "$group" \
      --records "$SCALE_RECORDS" --drivers "$DIST_DRIVERS" --fetch-max-bytes "$FETCH_MAX_BYTES" \
      --max-poll-records "$MAX_POLL_RECORDS" --commit "$A_COMMIT" --runtime "$RUNTIME" \
      --idle-timeout-secs "$IDLE_TIMEOUT" --put-latency-ms "$put_ms" --acquisition "$A_ACQUISITION" \
      ${A_MAX_BYTES:+--acquisition-max-bytes "$A_MAX_BYTES"} --stop-when-idle-ms "$DIST_IDLE_MS" &
    pids+=("$!")
  done
  CHILD_PIDS+=("${pids[@]}")
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  CHILD_PIDS=()
  ((rc == 0)) || die "$name: a process failed (exit $rc); logs in $OUT/$name-x*.{out,err}"
  combine_runs "$name" "$DIST_PROCESSES"
  record_run dist 1 A "$name" "$SCALE_RECORDS" "$put_ms" "$A_ACQUISITION" "$MAX_POLL_RECORDS"
  delete_group "$group"
}

if [[ -n "$DIST_DRIVERS" && -n "$SCALE_PUT_MS" ]]; then
  SCALE_TOPIC="bench-$RUN_ID-p$SCALE_PARTITIONS"
  [[ -n "$SCALE_DRIVERS" ]] || produce "$SCALE_TOPIC" "$SCALE_PARTITIONS" "$SCALE_RECORDS"
  for put_ms in $SCALE_PUT_MS; do
    run_distributed "$put_ms"
  done
fi

# --- producer row -----------------------------------------------------------------------------
# P: examples/bench_producer; J: Java's ProducerPerformance. Same topic layout, records and
# properties; a fresh topic per run. One line per run in producer.tsv.
PRODUCER_RUNS="$OUT/producer.tsv"
printf 'round\tclient\trecords\twindow_ms\trecords_per_s\tMB_per_s\tcpu_s\tcpu_us_per_record\tpeak_rss_MB\tbroker_cpu_us_per_record\n' >"$PRODUCER_RUNS"
run_producer() { # run_producer ROUND CLIENT
  local round="$1" client="$2" kv
  local name="producer-r$round-$client" topic="bench-$RUN_ID-producer-r$round-$client"
  admin create-topic --topic "$topic" --partitions "$PARTITIONS"
  sleep "$PAUSE"
  log "run $name: $PRODUCER_RECORDS records to $topic"
  local -a p_props=() j_props=()
  for kv in $PRODUCER_ROW_PROPS; do p_props+=(--producer-property "$kv"); j_props+=("$kv"); done
  case "$client" in
    P) measure "$name" "$P_BIN" --bootstrap "$BOOTSTRAP" --topic "$topic" --records "$PRODUCER_RECORDS" \
         --record-size "$RECORD_SIZE" "${p_props[@]}" ;;
    J) measure "$name" env KAFKA_TOOL_HEAP_OPTS="$JAVA_HEAP" ./scripts/kafka.sh run-class \
         org.apache.kafka.tools.ProducerPerformance --topic "$topic" --num-records "$PRODUCER_RECORDS" \
         --record-size "$RECORD_SIZE" --throughput -1 \
         --producer-props "bootstrap.servers=$BOOTSTRAP" "${j_props[@]}" ;;
  esac
  # Both print "N records sent, R records/sec (M MB/sec), ..." last.
  local line
  line="$(grep -E '^[0-9]+ records sent, ' "$OUT/$name.out" | tail -n 1)"
  [[ -n "$line" ]] || die "$name printed no summary line (see $OUT/$name.out)"
  awk -v line="$line" -v t="$(cat "$OUT/$name.time")" -v tck="$CLK_TCK" -v round="$round" -v client="$client" \
      -v expected="$PRODUCER_RECORDS" -v size="$RECORD_SIZE" '
    function field(s, k,   n, i, a, kv) { n = split(s, a, " "); for (i = 1; i <= n; i++) { split(a[i], kv, "="); if (kv[1] == k) return kv[2] } return "" }
    { bcpu[NR] = $4 }
    END {
      split(line, w, " "); records = w[1]; rps = w[4]
      if (records != expected) { print "wrote " records " records, not " expected > "/dev/stderr"; exit 1 }
      cpu = field(t, "user") + field(t, "sys"); wms = rps > 0 ? records / rps * 1000 : 0
      bw = (NR > 1 && bcpu[1] >= 0 && bcpu[NR] >= 0) ? sprintf("%.3f", (bcpu[NR] - bcpu[1]) / tck * 1e6 / records) : "na"
      printf "%s\t%s\t%d\t%.0f\t%.0f\t%.2f\t%.2f\t%.3f\t%.1f\t%s\n", round, client, records, wms, rps,
        rps * size / 1048576, cpu, cpu * 1e6 / records, field(t, "maxrss_kb") / 1024, bw
    }' "$OUT/$name.samples" | tee -a "$PRODUCER_RUNS" >&2 || die "$name: bad run"
}
if ((PRODUCER_ROUNDS > 0)); then
  for ((round = 1; round <= PRODUCER_ROUNDS; round++)); do
    run_producer "$round" P
    run_producer "$round" J
  done
fi

# --- mirror row -------------------------------------------------------------------------------
# E, F, G copy the same source topic to a fresh target each; one line per recorded run in
# mirror.tsv, with the count of the target read read_committed and E's split of its window.
MIRROR_RUNS="$OUT/mirror.tsv"
printf 'client\trecords\twindow_ms\trecords_per_s\tcpu_us_per_record\twindow_cpu_us_per_record\tpeak_rss_MB\tbroker_cpu_us_per_record\ttarget_records\tduplicates\tredelivered\ttransactions\tledger_ms\tsend_ms\trenew_ms\tcommit_ms\trest_ms\n' >"$MIRROR_RUNS"
run_mirror() { # run_mirror KIND CLIENT SOURCE RECORDS
  local kind="$1" client="$2" source="$3" records="$4"
  local name="$kind-$client" group="bench-$RUN_ID-$kind-$client"
  local prefix="$name." target="$kind-$client.$source"
  new_group "$group"
  admin create-topic --topic "$target" --partitions "$PARTITIONS"
  sleep "$PAUSE"
  log "run $name: $records records of $source to $target, group $group"
  case "$client" in
    E) measure "$name" "$E_BIN" --bootstrap "$BOOTSTRAP" --topic "$source" --group "$group" --prefix "$prefix" \
         --connector "$group" --exit-after-records "$records" --max-poll-records "$MAX_POLL_RECORDS" \
         --idle-exit-secs "$IDLE_TIMEOUT" ;;
    F) measure "$name" "$F_BIN" mirror --bootstrap "$BOOTSTRAP" --topic "$source" --group "$group" --prefix "$prefix" \
         --records "$records" --max-poll-records "$MAX_POLL_RECORDS" --commit "$MIRROR_F_COMMIT" \
         --idle-timeout-secs "$IDLE_TIMEOUT" ;;
    # shellcheck disable=SC2086
    G) measure "$name" java $JAVA_HEAP -cp "$(./scripts/kafka.sh classpath):$G_DIR" MirrorAtLeastOnce \
         "$BOOTSTRAP" "$source" "$target" "$group" "$records" "$MAX_POLL_RECORDS" "$IDLE_TIMEOUT" ;;
  esac
  if [[ "$client" == E ]] && ! grep -q 'mode Some(Ledger)' "$OUT/$name.err"; then
    die "$name: eos_mirror did not run in ledger mode, which this row measures: $(grep -m1 'mode' "$OUT/$name.err")"
  fi
  record_run "$kind" 1 "$client" "$name" "$records" 0 na "$MAX_POLL_RECORDS"
  delete_group "$group"
  [[ "$kind" == mirror ]] || return 0
  # Every record copied? E: exactly the source's records; F and G: at least those.
  local counted
  "$F_BIN" count --bootstrap "$BOOTSTRAP" --topic "$target" --partitions "$PARTITIONS" >"$OUT/$name.count" 2>&1 \
    || { cat "$OUT/$name.count" >&2; die "$name: counting $target failed"; }
  counted="$(sed -n 's/^COUNT //p' "$OUT/$name.count")"
  [[ "$counted" =~ ^[0-9]+$ ]] || die "$name: no count of $target (see $OUT/$name.count)"
  if ((counted < records)) || [[ "$client" == E && "$counted" != "$records" ]]; then
    die "$name: $target holds $counted records read_committed, expected $([[ $client == E ]] && echo exactly || echo at least) $records"
  fi
  log "$name: $target holds $counted records read_committed (source $records)"
  tail -n 1 "$RUNS" | awk -F'\t' -v client="$client" -v counted="$counted" -v expected="$records" -v bench="$(cat "$OUT/$name.bench")" '
    function field(s, k,   n, i, a, kv) { n = split(s, a, " "); for (i = 1; i <= n; i++) { split(a[i], kv, "="); if (kv[1] == k) return kv[2] } return "na" }
    {
      tx = field(bench, "transactions"); l = field(bench, "ledger_ms"); se = field(bench, "send_ms")
      rn = field(bench, "renew_ms"); cm = field(bench, "commit_ms")
      rest = l == "na" ? "na" : sprintf("%.1f", $7 - l - se - rn - cm)
      printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", client, $6, $7, $8, $13, $14, $15, $21,
        counted, counted - expected, field(bench, "redelivered"), tx, l, se, rn, cm, rest
    }' | tee -a "$MIRROR_RUNS" >&2
}
if [[ "$MIRROR" == 1 && -n "$MIRROR_CLIENTS" ]]; then
  MIRROR_SOURCE="bench-$RUN_ID-mirror-src"
  produce "$MIRROR_SOURCE" "$PARTITIONS" "$MIRROR_RECORDS"
  if ((MIRROR_WARMUP > 0)); then
    for client in $MIRROR_CLIENTS; do
      run_mirror warmup-mirror "$client" "$MIRROR_SOURCE" "$((MIRROR_WARMUP < MIRROR_RECORDS ? MIRROR_WARMUP : MIRROR_RECORDS))"
    done
  fi
  for client in $MIRROR_CLIENTS; do
    run_mirror mirror "$client" "$MIRROR_SOURCE" "$MIRROR_RECORDS"
  done
fi

# --- profiles ---------------------------------------------------------------------------------
if [[ "$PROFILE" == 1 ]]; then
  if command -v perf >/dev/null 2>&1; then
    for client in A C; do
      group="bench-$RUN_ID-profile-$client"
      new_group "$group"
      log "profiling $client with perf"
      if [[ "$client" == A ]]; then
        cmd=("$A_BIN" consume --bootstrap "$BOOTSTRAP" --topic "$TOPIC" --group "$group" --records "$RECORDS"
             --fetch-max-bytes "$FETCH_MAX_BYTES" --max-poll-records "$MAX_POLL_RECORDS" --commit "$A_COMMIT"
             --runtime "$RUNTIME")
      else
        cmd=("$C_BIN" --bootstrap "$BOOTSTRAP" --topic "$TOPIC" --group "$group" --records "$RECORDS"
             --fetch-max-bytes "$FETCH_MAX_BYTES" --max-poll-records "$MAX_POLL_RECORDS" --commit "$C_COMMIT"
             --runtime "$RUNTIME")
      fi
      perf record -F 2999 -g -o "$OUT/perf-$client.data" -- "${cmd[@]}" >"$OUT/perf-$client.out" 2>"$OUT/perf-$client.err" \
        || die "perf record of $client failed (see $OUT/perf-$client.err)"
      perf report -i "$OUT/perf-$client.data" --no-children --sort dso,symbol --stdio -g none 2>/dev/null \
        | grep -v '^$' | head -n 80 >"$OUT/perf-$client.txt" || true
      perf report -i "$OUT/perf-$client.data" --children --sort symbol --stdio -g none 2>/dev/null \
        | grep -v '^$' | head -n 80 >"$OUT/perf-$client-children.txt" || true
      delete_group "$group"
    done
  else
    log "perf not found: no profiles"
  fi
fi

# --- summary ----------------------------------------------------------------------------------
summarize() {
  awk -F'\t' '
    function median(a, n,   i, j, t, b, m) {
      m = 0
      for (i = 1; i <= n; i++) if (a[i] != "" && a[i] != "na") b[++m] = a[i] + 0
      if (!m) return "na"
      for (i = 2; i <= m; i++) for (j = i; j > 1 && b[j - 1] > b[j]; j--) { t = b[j]; b[j] = b[j - 1]; b[j - 1] = t }
      return m % 2 ? b[(m + 1) / 2] : (b[m / 2] + b[m / 2 + 1]) / 2
    }
    function ratio(x, y) { return (x == "" || y == "" || x == "na" || y == "na" || y + 0 == 0) ? "na" : x / y }
    function f(x, fmt) { return x == "na" || x == "" ? "–" : sprintf(fmt, x) }
    NR == 1 { next }
    $1 == "main" {
      r = $2; c = $3; if (r > rounds) rounds = r
      rps[r, c] = $8; mbs[r, c] = $9; cpu[r, c] = $13; wcpu[r, c] = $14; rss[r, c] = $15; h1[r, c] = $16; h2[r, c] = $17; bk[r, c] = $21
    }
    $1 == "tls" {
      r = $2; c = $3; if (r > trounds) trounds = r
      trps[r, c] = $8; tmbs[r, c] = $9; tcpu[r, c] = $13; twcpu[r, c] = $14; trss[r, c] = $15; tbk[r, c] = $21
    }
    $1 == "slow" { nsl++; sl_put[nsl] = $24; sl_acq[nsl] = $25; sl_mpr[nsl] = $26; sl_rps[nsl] = $8; sl_loss[nsl] = $27; sl_red[nsl] = $20; sl_bk[nsl] = $21; sl_cpu[nsl] = $14; sl_rpp[nsl] = $22; sl_rss[nsl] = $15 }
    $1 == "scale" { sk[++ns] = $4; srps[ns] = $8; scpu[ns] = $13; swcpu[ns] = $14; srss[ns] = $15; sbk[ns] = $21; sput[ns] = $24; srq[ns] = $28; if (!($24 in base)) base[$24] = $8; if ($4 == 8) eight[$24] = $8 }
    $1 == "dist" { dk[++ndist] = $4; drps[ndist] = $8; dcpu[ndist] = $13; dwcpu[ndist] = $14; drss[ndist] = $15; dbk[ndist] = $21; dput[ndist] = $24; drq[ndist] = $28; dloss[ndist] = $27; dred[ndist] = $20 }
    END {
      for (r = 1; r <= rounds; r++) {
        ab[r] = ratio(rps[r, "A"], rps[r, "B"]); ac[r] = ratio(rps[r, "A"], rps[r, "C"])
        cb[r] = ratio(cpu[r, "A"], cpu[r, "B"]); wcb[r] = ratio(wcpu[r, "A"], wcpu[r, "B"])
        mb[r] = ratio(rss[r, "A"], rss[r, "B"]); grow[r] = ratio(h2[r, "A"], h1[r, "A"])
        for (k = 1; k <= 3; k++) {
          x = substr("ABC", k, 1)
          c_rps[x, r] = rps[r, x]; c_mbs[x, r] = mbs[r, x]; c_cpu[x, r] = cpu[r, x]; c_wcpu[x, r] = wcpu[r, x]; c_rss[x, r] = rss[r, x]; c_bk[x, r] = bk[r, x]
        }
      }
      for (k = 1; k <= 3; k++) {
        x = substr("ABC", k, 1)
        for (r = 1; r <= rounds; r++) { t1[r] = c_rps[x, r]; t2[r] = c_cpu[x, r]; t3[r] = c_wcpu[x, r]; t4[r] = c_rss[x, r]; t5[r] = c_mbs[x, r]; t6[r] = c_bk[x, r] }
        m_rps[x] = median(t1, rounds); m_cpu[x] = median(t2, rounds); m_wcpu[x] = median(t3, rounds); m_rss[x] = median(t4, rounds); m_mbs[x] = median(t5, rounds); m_bk[x] = median(t6, rounds)
      }

      print "Throughput (records/s, MB/s of key+value bytes; group join not timed):"
      print ""
      print "| round | A rec/s | B rec/s | C rec/s | A MB/s | B MB/s | C MB/s | A/B | A/C |"
      print "|---|---|---|---|---|---|---|---|---|"
      for (r = 1; r <= rounds; r++)
        printf "| %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", r, f(rps[r, "A"], "%.0f"), f(rps[r, "B"], "%.0f"), f(rps[r, "C"], "%.0f"),
          f(mbs[r, "A"], "%.1f"), f(mbs[r, "B"], "%.1f"), f(mbs[r, "C"], "%.1f"), f(ab[r], "%.2f"), f(ac[r], "%.2f")
      printf "| median | %s | %s | %s | %s | %s | %s | **%s** | **%s** |\n", f(m_rps["A"], "%.0f"), f(m_rps["B"], "%.0f"), f(m_rps["C"], "%.0f"),
        f(m_mbs["A"], "%.1f"), f(m_mbs["B"], "%.1f"), f(m_mbs["C"], "%.1f"), f(median(ab, rounds), "%.2f"), f(median(ac, rounds), "%.2f")
      print ""
      print "CPU per record (µs; whole process = user+sys over the run incl. start-up, join and close;"
      print "window = sampled CPU rate while the clock ran):"
      print ""
      print "| round | whole A | whole B | whole C | A ÷ B | window A | window B | window C | A ÷ B |"
      print "|---|---|---|---|---|---|---|---|---|"
      for (r = 1; r <= rounds; r++)
        printf "| %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", r, f(cpu[r, "A"], "%.2f"), f(cpu[r, "B"], "%.2f"), f(cpu[r, "C"], "%.2f"), f(cb[r], "%.3f"),
          f(wcpu[r, "A"], "%.2f"), f(wcpu[r, "B"], "%.2f"), f(wcpu[r, "C"], "%.2f"), f(wcb[r], "%.3f")
      printf "| median | %s | %s | %s | **%s** | %s | %s | %s | **%s** |\n", f(m_cpu["A"], "%.2f"), f(m_cpu["B"], "%.2f"), f(m_cpu["C"], "%.2f"), f(median(cb, rounds), "%.3f"),
        f(m_wcpu["A"], "%.2f"), f(m_wcpu["B"], "%.2f"), f(m_wcpu["C"], "%.2f"), f(median(wcb, rounds), "%.3f")
      print ""
      print "The broker, in the same windows (sampled CPU µs per record; the client and the broker share the cores):"
      print ""
      print "| round | broker for A | for B | for C |"
      print "|---|---|---|---|"
      for (r = 1; r <= rounds; r++)
        printf "| %d | %s | %s | %s |\n", r, f(bk[r, "A"], "%.2f"), f(bk[r, "B"], "%.2f"), f(bk[r, "C"], "%.2f")
      printf "| median | %s | %s | %s |\n", f(m_bk["A"], "%.2f"), f(m_bk["B"], "%.2f"), f(m_bk["C"], "%.2f")
      print ""
      print "Memory (peak RSS of the client process, MB; A over the window: largest sample in its 1st and 2nd half):"
      print ""
      print "| round | A | B | C | A ÷ B | A 1st half | A 2nd half | 2nd ÷ 1st |"
      print "|---|---|---|---|---|---|---|---|"
      for (r = 1; r <= rounds; r++)
        printf "| %d | %s | %s | %s | %s | %s | %s | %s |\n", r, f(rss[r, "A"], "%.1f"), f(rss[r, "B"], "%.1f"), f(rss[r, "C"], "%.1f"), f(mb[r], "%.3f"),
          f(h1[r, "A"], "%.1f"), f(h2[r, "A"], "%.1f"), f(grow[r], "%.2f")
      printf "| median | %s | %s | %s | **%s** | | | %s |\n", f(m_rss["A"], "%.1f"), f(m_rss["B"], "%.1f"), f(m_rss["C"], "%.1f"), f(median(mb, rounds), "%.3f"), f(median(grow, rounds), "%.2f")
      if (trounds) {
        for (r = 1; r <= trounds; r++) {
          tab[r] = ratio(trps[r, "A"], trps[r, "B"]); tcb[r] = ratio(tcpu[r, "A"], tcpu[r, "B"])
          twcb[r] = ratio(twcpu[r, "A"], twcpu[r, "B"]); tmb[r] = ratio(trss[r, "A"], trss[r, "B"])
          for (k = 1; k <= 2; k++) {
            x = substr("AB", k, 1)
            q_rps[x, r] = ratio(trps[r, x], rps[r, x]); q_cpu[x, r] = ratio(tcpu[r, x], cpu[r, x])
            q_wcpu[x, r] = ratio(twcpu[r, x], wcpu[r, x]); q_bk[x, r] = ratio(tbk[r, x], bk[r, x]); q_rss[x, r] = ratio(trss[r, x], rss[r, x])
          }
        }
        for (k = 1; k <= 2; k++) {
          x = substr("AB", k, 1)
          for (r = 1; r <= trounds; r++) {
            t1[r] = trps[r, x]; t2[r] = tcpu[r, x]; t3[r] = twcpu[r, x]; t4[r] = trss[r, x]; t5[r] = tmbs[r, x]; t6[r] = tbk[r, x]
            u1[r] = q_rps[x, r]; u2[r] = q_cpu[x, r]; u3[r] = q_wcpu[x, r]; u4[r] = q_bk[x, r]; u5[r] = q_rss[x, r]
          }
          mt_rps[x] = median(t1, trounds); mt_cpu[x] = median(t2, trounds); mt_wcpu[x] = median(t3, trounds)
          mt_rss[x] = median(t4, trounds); mt_mbs[x] = median(t5, trounds); mt_bk[x] = median(t6, trounds)
          mq_rps[x] = median(u1, trounds); mq_cpu[x] = median(u2, trounds); mq_wcpu[x] = median(u3, trounds)
          mq_bk[x] = median(u4, trounds); mq_rss[x] = median(u5, trounds)
        }
        print ""
        print "Over TLS (the SSL listener of the broker, same topic, right after the plaintext runs of the round;"
        print "TLS ÷ plain = rec/s of a client over TLS ÷ its plaintext rec/s in the same round):"
        print ""
        print "| round | A rec/s | B rec/s | A MB/s | B MB/s | A/B | A TLS ÷ plain | B TLS ÷ plain |"
        print "|---|---|---|---|---|---|---|---|"
        for (r = 1; r <= trounds; r++)
          printf "| %d | %s | %s | %s | %s | %s | %s | %s |\n", r, f(trps[r, "A"], "%.0f"), f(trps[r, "B"], "%.0f"),
            f(tmbs[r, "A"], "%.1f"), f(tmbs[r, "B"], "%.1f"), f(tab[r], "%.2f"), f(q_rps["A", r], "%.2f"), f(q_rps["B", r], "%.2f")
        printf "| median | %s | %s | %s | %s | **%s** | **%s** | **%s** |\n", f(mt_rps["A"], "%.0f"), f(mt_rps["B"], "%.0f"),
          f(mt_mbs["A"], "%.1f"), f(mt_mbs["B"], "%.1f"), f(median(tab, trounds), "%.2f"), f(mq_rps["A"], "%.2f"), f(mq_rps["B"], "%.2f")
        print ""
        print "CPU (µs per record, as above), broker CPU and peak RSS (MB) over TLS:"
        print ""
        print "| round | whole A | whole B | A ÷ B | window A | window B | A ÷ B | broker for A | for B | RSS A | RSS B | A ÷ B |"
        print "|---|---|---|---|---|---|---|---|---|---|---|---|"
        for (r = 1; r <= trounds; r++)
          printf "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r, f(tcpu[r, "A"], "%.2f"), f(tcpu[r, "B"], "%.2f"), f(tcb[r], "%.3f"),
            f(twcpu[r, "A"], "%.2f"), f(twcpu[r, "B"], "%.2f"), f(twcb[r], "%.3f"), f(tbk[r, "A"], "%.2f"), f(tbk[r, "B"], "%.2f"),
            f(trss[r, "A"], "%.1f"), f(trss[r, "B"], "%.1f"), f(tmb[r], "%.3f")
        printf "| median | %s | %s | **%s** | %s | %s | **%s** | %s | %s | %s | %s | **%s** |\n", f(mt_cpu["A"], "%.2f"), f(mt_cpu["B"], "%.2f"), f(median(tcb, trounds), "%.3f"),
          f(mt_wcpu["A"], "%.2f"), f(mt_wcpu["B"], "%.2f"), f(median(twcb, trounds), "%.3f"), f(mt_bk["A"], "%.2f"), f(mt_bk["B"], "%.2f"),
          f(mt_rss["A"], "%.1f"), f(mt_rss["B"], "%.1f"), f(median(tmb, trounds), "%.3f")
        print ""
        print "TLS ÷ plaintext per client (medians of the per-round ratios; above 1 = TLS costs more, for rec/s below 1 = slower):"
        print ""
        print "| client | rec/s | CPU whole | CPU window | broker CPU | peak RSS |"
        print "|---|---|---|---|---|---|"
        for (k = 1; k <= 2; k++) {
          x = substr("AB", k, 1)
          printf "| %s | %s | %s | %s | %s | %s |\n", x, f(mq_rps[x], "%.2f"), f(mq_cpu[x], "%.2f"), f(mq_wcpu[x], "%.2f"), f(mq_bk[x], "%.2f"), f(mq_rss[x], "%.2f")
        }
      }
      nd = 0
      for (r = 1; r <= rounds; r++) if (rps[r, "D"] != "") nd++
      if (nd) {
        for (r = 1; r <= rounds; r++) {
          ad[r] = ratio(rps[r, "A"], rps[r, "D"]); dcb[r] = ratio(wcpu[r, "A"], wcpu[r, "D"]); drs[r] = ratio(rss[r, "A"], rss[r, "D"])
          t1[r] = rps[r, "D"]; t2[r] = wcpu[r, "D"]; t3[r] = bk[r, "D"]; t4[r] = rss[r, "D"]; t5[r] = cpu[r, "D"]
        }
        print ""
        print "Against the classic consumer D (Java KafkaConsumer in a consumer group, same topic; A/D = A rec/s over D rec/s"
        print "of the same round; CPU = window µs per record; broker = broker CPU µs per record in the window):"
        print ""
        print "| round | A rec/s | D rec/s | A/D | A/B | CPU A | CPU D | A ÷ D CPU | broker for A | B | C | D | RSS D MB |"
        print "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        for (r = 1; r <= rounds; r++)
          printf "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r, f(rps[r, "A"], "%.0f"), f(rps[r, "D"], "%.0f"), f(ad[r], "%.2f"), f(ab[r], "%.2f"),
            f(wcpu[r, "A"], "%.2f"), f(wcpu[r, "D"], "%.2f"), f(dcb[r], "%.3f"), f(bk[r, "A"], "%.2f"), f(bk[r, "B"], "%.2f"), f(bk[r, "C"], "%.2f"), f(bk[r, "D"], "%.2f"), f(rss[r, "D"], "%.1f")
        printf "| median | %s | %s | **%s** | **%s** | %s | %s | **%s** | %s | %s | %s | %s | %s |\n", f(m_rps["A"], "%.0f"), f(median(t1, rounds), "%.0f"), f(median(ad, rounds), "%.2f"), f(median(ab, rounds), "%.2f"),
          f(m_wcpu["A"], "%.2f"), f(median(t2, rounds), "%.2f"), f(median(dcb, rounds), "%.3f"), f(m_bk["A"], "%.2f"), f(m_bk["B"], "%.2f"), f(m_bk["C"], "%.2f"), f(median(t3, rounds), "%.2f"), f(median(t4, rounds), "%.1f")
      }
      if (nsl) {
        print ""
        print "Slow sink (A, one driver, put sleeps the given ms per batch; fixed = each fetch acquires max.poll.records,"
        print "as Java; sized = the default; lock losses = acknowledgements refused for an expired lock; redelivered ="
        print "records put with a delivery count above 1):"
        print ""
        print "| put ms | acquisition | max.poll.records | rec/s | lock losses | redelivered | records/poll | CPU µs/rec window | broker µs/rec | peak RSS MB |"
        print "|---|---|---|---|---|---|---|---|---|---|"
        for (i = 1; i <= nsl; i++) {
          printf "| %s | %s | %s | %.0f | %s | %s | %s | %s | %s | %.1f |\n", sl_put[i], sl_acq[i], sl_mpr[i], sl_rps[i], sl_loss[i], sl_red[i], sl_rpp[i], f(sl_cpu[i], "%.2f"), f(sl_bk[i], "%.2f"), sl_rss[i]
          sl_key = sl_put[i] " ms, max.poll.records " sl_mpr[i]
          if (sl_acq[i] == "fixed") sl_fixed[sl_key] = sl_rps[i]; else sl_sized[sl_key] = sl_rps[i]
        }
        print ""
        print "Sized ÷ fixed at the same put latency and max.poll.records (batches of the same size):"
        for (k in sl_sized)
          if (k in sl_fixed && sl_fixed[k] > 0)
            printf "  %s: %.2f\n", k, sl_sized[k] / sl_fixed[k]
      }
      if (ns) {
        print ""
        print "Scale-out (A: K drivers in one process and one share group, on the scale-out topic; put sleeps"
        print "the given ms per batch, 0 = the no-op sink; × first = rec/s over the first row of that latency):"
        print ""
        print "| put ms | drivers | rec/s | × first | CPU µs/rec whole | CPU µs/rec window | broker µs/rec | requests /1k rec | peak RSS MB |"
        print "|---|---|---|---|---|---|---|---|---|"
        for (i = 1; i <= ns; i++)
          printf "| %s | %d | %.0f | %.2f | %s | %s | %s | %s | %.1f |\n", sput[i], sk[i], srps[i], srps[i] / base[sput[i]], f(scpu[i], "%.2f"), f(swcpu[i], "%.2f"), f(sbk[i], "%.2f"), f(srq[i], "%.1f"), srss[i]
      }
      if (ndist) {
        print ""
        print "Distributed (A: processes × drivers each, started together in one share group on the scale-out topic;"
        print "records, CPU and RSS of the processes added up; × 8 in one = rec/s over the scale-out row of 8 drivers"
        print "at that latency):"
        print ""
        print "| put ms | drivers | rec/s | × 8 in one | CPU µs/rec whole | CPU µs/rec window | broker µs/rec | requests /1k rec | lock losses | redelivered | peak RSS MB |"
        print "|---|---|---|---|---|---|---|---|---|---|---|"
        for (i = 1; i <= ndist; i++)
          printf "| %s | %d | %.0f | %s | %s | %s | %s | %s | %s | %s | %.1f |\n", dput[i], dk[i], drps[i], f(ratio(drps[i], eight[dput[i]]), "%.2f"), f(dcpu[i], "%.2f"), f(dwcpu[i], "%.2f"), f(dbk[i], "%.2f"), f(drq[i], "%.1f"), dloss[i], dred[i], drss[i]
      }
    }' "$RUNS"
}
summarize_mirror() {
  awk -F'\t' '
    function f(x, fmt) { return x == "na" || x == "" ? "–" : sprintf(fmt, x) }
    function ratio(x, y) { return (x == "" || y == "" || x == "na" || y == "na" || y + 0 == 0) ? "na" : x / y }
    NR == 1 { next }
    { n++; c[n] = $1; rps[$1] = $4; line[n] = $0 }
    END {
      if (!n) exit
      print "Mirror row (one run each; E = eos_mirror exactly once in ledger mode, F = the same Rust pipeline at least once,"
      print "G = Java share consumer + producer at least once; rec/s with group join not timed; CPU µs per record: whole"
      print "process and sampled in the window; broker µs per record in the window; target = records a read_committed"
      print "reader sees in the target topic, dup = target - source):"
      print ""
      print "| client | rec/s | CPU µs/rec whole | window | peak RSS MB | broker µs/rec | target | dup | redelivered |"
      print "|---|---|---|---|---|---|---|---|---|"
      for (i = 1; i <= n; i++) {
        split(line[i], a, "\t")
        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", a[1], f(a[4], "%.0f"), f(a[5], "%.2f"), f(a[6], "%.2f"), f(a[7], "%.1f"), f(a[8], "%.2f"), a[9], a[10], a[11]
      }
      print ""
      printf "E/F rec/s: **%s**; E/G: **%s**; F/G: %s\n", f(ratio(rps["E"], rps["F"]), "%.2f"), f(ratio(rps["E"], rps["G"]), "%.2f"), f(ratio(rps["F"], rps["G"]), "%.2f")
      for (i = 1; i <= n; i++) {
        split(line[i], a, "\t")
        if (a[1] != "E" || a[13] == "na") continue
        w = a[3]
        print ""
        printf "Where E'"'"'s window goes (%.0f ms, %d records, %s transactions, %.0f records per transaction):\n", w, a[2], a[12], (a[12] > 0 ? a[2] / a[12] : 0)
        print ""
        print "| ledger checks | sends + flush | renewals | commits | rest (poll, put, acks) |"
        print "|---|---|---|---|---|"
        printf "| %.0f ms (%.0f%%) | %.0f ms (%.0f%%) | %.0f ms (%.0f%%) | %.0f ms (%.0f%%) | %.0f ms (%.0f%%) |\n", a[13], 100 * a[13] / w, a[14], 100 * a[14] / w,
          a[15], 100 * a[15] / w, a[16], 100 * a[16] / w, a[17], 100 * a[17] / w
        if (a[12] > 0)
          printf "\nPer transaction: sends %.1f ms, renewal %.1f ms, commit %.1f ms, rest %.1f ms.\n", a[14] / a[12], a[15] / a[12], a[16] / a[12], a[17] / a[12]
      }
    }' "$MIRROR_RUNS"
}
summarize_producer() {
  awk -F'\t' '
    function median(a, n,   i, j, t, b, m) {
      m = 0
      for (i = 1; i <= n; i++) if (a[i] != "" && a[i] != "na") b[++m] = a[i] + 0
      if (!m) return "na"
      for (i = 2; i <= m; i++) for (j = i; j > 1 && b[j - 1] > b[j]; j--) { t = b[j]; b[j] = b[j - 1]; b[j - 1] = t }
      return m % 2 ? b[(m + 1) / 2] : (b[m / 2] + b[m / 2 + 1]) / 2
    }
    function f(x, fmt) { return x == "na" || x == "" ? "–" : sprintf(fmt, x) }
    NR == 1 { next }
    { r = $1; c = $2; if (r > rounds) rounds = r; rps[r, c] = $5; cpu[r, c] = $8; rss[r, c] = $9; bk[r, c] = $10 }
    END {
      if (!rounds) exit
      print "Producer row (P = this crate, J = Java ProducerPerformance; rec/s from first send to last acknowledgement;"
      print "CPU µs per record = user+sys of the whole process; broker µs per record over the whole run):"
      print ""
      print "| round | P rec/s | J rec/s | P/J | P CPU µs/rec | J CPU µs/rec | J ÷ P CPU | P RSS MB | J RSS MB | broker for P | for J |"
      print "|---|---|---|---|---|---|---|---|---|---|---|"
      for (r = 1; r <= rounds; r++) {
        q[r] = rps[r, "J"] > 0 ? rps[r, "P"] / rps[r, "J"] : "na"; qc[r] = cpu[r, "P"] > 0 ? cpu[r, "J"] / cpu[r, "P"] : "na"
        printf "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r, f(rps[r, "P"], "%.0f"), f(rps[r, "J"], "%.0f"), f(q[r], "%.2f"),
          f(cpu[r, "P"], "%.2f"), f(cpu[r, "J"], "%.2f"), f(qc[r], "%.1f"), f(rss[r, "P"], "%.1f"), f(rss[r, "J"], "%.1f"), f(bk[r, "P"], "%.2f"), f(bk[r, "J"], "%.2f")
      }
      printf "| median | | | **%s** | | | **%s** | | | | |\n", f(median(q, rounds), "%.2f"), f(median(qc, rounds), "%.1f")
    }' "$PRODUCER_RUNS"
}
{
  echo '```'
  cat "$OUT/env.txt"
  echo '```'
  echo
  summarize
  echo
  summarize_producer
  echo
  summarize_mirror
  echo
  echo 'Raw runs (runs.tsv; warmup runs are not in the tables above):'
  echo
  echo '```'
  cat "$RUNS"
  echo '```'
  echo
  echo 'Producer runs (producer.tsv):'
  echo
  echo '```'
  cat "$PRODUCER_RUNS"
  echo '```'
  if [[ "$MIRROR" == 1 ]]; then
    echo
    echo 'Mirror runs (mirror.tsv):'
    echo
    echo '```'
    cat "$MIRROR_RUNS"
    echo '```'
  fi
} >"$OUT/summary.md"
echo >&2
cat "$OUT/summary.md"
log "done: $OUT/summary.md"
