#!/usr/bin/env bash
# End-to-end share-consumer benchmark (see BENCHMARKS.md): one broker started by scripts/kafka.sh,
# one topic produced once, then the clients drain it in turns A B C A B C ..., each run with a
# fresh share group set to share.auto.offset.reset=earliest:
#
#   A  this crate: KafkaShareConsumer under ShareSinkTask, a no-op sink, explicit acks
#      (examples/bench_consumer.rs)
#   B  Java org.apache.kafka.tools.ShareConsumerPerformance (kafka-tools jar, via kafka.sh run-class),
#      --fetch-size set to A's fetch.max.bytes
#   C  krafka's share consumer, explicit acks (benches/peers/, its own workspace and lockfile)
#
# Then a scale-out row: A with 1, 2, 4, 8 drivers in one share group on a 2-partition topic.
#
# Per run: records/s and MB/s with group join left out (the clock starts when the first records
# reach the client, see "Timing" below), the client process's user+sys CPU seconds and peak RSS
# (GNU time), and RSS sampled over the run. Then per round the ratios A/B and A/C, and medians.
#
# Usage: ./scripts/bench.sh            (quick check: BENCH_RECORDS=20000 BENCH_ROUNDS=1 ./scripts/bench.sh)
#
# Environment (defaults in brackets):
#   BENCH_RECORDS          records produced and consumed per run [1000000]
#   BENCH_RECORD_SIZE      value size in bytes, null keys [1024]
#   BENCH_PARTITIONS       partitions of the main topic [6]
#   BENCH_ROUNDS           rounds of the clients [3]
#   BENCH_CLIENTS          clients per round, in order [A B C]
#   BENCH_FETCH_MAX_BYTES  fetch.max.bytes of A and C and --fetch-size of B [52428800, A's default]
#   BENCH_MAX_POLL_RECORDS max.poll.records of all three [500, the default of all three]
#   BENCH_A_COMMIT         A's commit policy: every | records:N | interval:MS [every, the driver's default]
#   BENCH_C_COMMIT         C: every (commit after each poll, like A) | none (acks ride on the next fetch) [every]
#   BENCH_RUNTIME          tokio runtime of A and C: multi | current [multi]
#   BENCH_JAVA_HEAP        JVM heap options of B [-Xmx512m, kafka.sh's tool default]
#   BENCH_GROUP_CONFIG     extra share-group configs, space separated k=v [none]
#   BENCH_PRODUCER_PROPS   extra producer properties, space separated k=v [none: Java defaults]
#   BENCH_SCALE_DRIVERS    driver counts of the scale-out row; empty skips it [1 2 4 8]
#   BENCH_SCALE_PARTITIONS partitions of the scale-out topic [2]
#   BENCH_SCALE_RECORDS    records of the scale-out topic [BENCH_RECORDS]
#   BENCH_IDLE_TIMEOUT     seconds without records before a client gives up [60]
#   BENCH_PAUSE            seconds between runs, for the broker to settle [2]
#   BENCH_RSS_INTERVAL     seconds between RSS samples [0.2]
#   BENCH_PROFILE          1: after the rounds, profile one A and one C run with perf [0]
#   BENCH_DELETE_GROUPS    1: delete each share group after its run [1]
#   BENCH_OUT              results directory [target/bench/<date>-<time>]
#   BENCH_BOOTSTRAP        use this running broker instead of starting one (it is not stopped)
#   BENCH_NICE             nice level of the cargo builds [10]
#   KAFKA_VERSION, KAFKA_*  passed to scripts/kafka.sh (Kafka 4.2 or later)
#
# Timing. Java's tool starts its clock before subscribe, so it would count the group join. It is
# run with --show-detailed-stats --reporting-interval 50, so it prints a progress line when it
# handles its first record (the join always takes longer than 50 ms); the clock of B starts at
# that line's time and counts the records from that one on. A and C start theirs when their first
# poll returns records (A with several drivers: when every driver has had records) and count
# those records on. All three stop when the record that reaches BENCH_RECORDS has been handed
# over (A and C: acknowledged and, with the default commit policies, committed). CPU and RSS are
# the whole client process, JVM start-up, join and close included.
#
# Output: BENCH_OUT/runs.tsv (one line per run), BENCH_OUT/summary.md (the tables), logs per run.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO_ROOT="$(pwd)"

RECORDS="${BENCH_RECORDS:-1000000}"
RECORD_SIZE="${BENCH_RECORD_SIZE:-1024}"
PARTITIONS="${BENCH_PARTITIONS:-6}"
ROUNDS="${BENCH_ROUNDS:-3}"
CLIENTS="${BENCH_CLIENTS:-A B C}"
FETCH_MAX_BYTES="${BENCH_FETCH_MAX_BYTES:-52428800}"
MAX_POLL_RECORDS="${BENCH_MAX_POLL_RECORDS:-500}"
A_COMMIT="${BENCH_A_COMMIT:-every}"
C_COMMIT="${BENCH_C_COMMIT:-every}"
RUNTIME="${BENCH_RUNTIME:-multi}"
JAVA_HEAP="${BENCH_JAVA_HEAP:--Xmx512m}"
GROUP_CONFIG="${BENCH_GROUP_CONFIG:-}"
PRODUCER_PROPS="${BENCH_PRODUCER_PROPS:-}"
SCALE_DRIVERS="${BENCH_SCALE_DRIVERS-1 2 4 8}"
SCALE_PARTITIONS="${BENCH_SCALE_PARTITIONS:-2}"
SCALE_RECORDS="${BENCH_SCALE_RECORDS:-$RECORDS}"
IDLE_TIMEOUT="${BENCH_IDLE_TIMEOUT:-60}"
PAUSE="${BENCH_PAUSE:-2}"
RSS_INTERVAL="${BENCH_RSS_INTERVAL:-0.2}"
PROFILE="${BENCH_PROFILE:-0}"
DELETE_GROUPS="${BENCH_DELETE_GROUPS:-1}"
NICE="${BENCH_NICE:-10}"
OUT="${BENCH_OUT:-target/bench/$(date +%Y%m%d-%H%M%S)}"
KAFKA_VERSION="${KAFKA_VERSION:-4.4.0}"
export KAFKA_VERSION

A_BIN="target/release/examples/bench_consumer"
PEERS_TARGET="target/bench-peers"
C_BIN="$PEERS_TARGET/release/krafka_share_consumer"
TIME_FMT='elapsed=%e user=%U sys=%S maxrss_kb=%M'

log() { printf 'bench.sh: %s\n' "$*" >&2; }
die() { printf 'bench.sh: ERROR: %s\n' "$*" >&2; exit 1; }

for n in "$RECORDS" "$RECORD_SIZE" "$PARTITIONS" "$ROUNDS" "$FETCH_MAX_BYTES" "$MAX_POLL_RECORDS" \
         "$SCALE_PARTITIONS" "$SCALE_RECORDS" "$IDLE_TIMEOUT"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "'$n' is not a positive integer (check the BENCH_* variables)"
done
for c in $CLIENTS; do [[ "$c" =~ ^[ABC]$ ]] || die "BENCH_CLIENTS: unknown client '$c' (A, B or C)"; done
for k in $SCALE_DRIVERS; do [[ "$k" =~ ^[1-9][0-9]*$ ]] || die "BENCH_SCALE_DRIVERS: '$k'"; done

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
if [[ " $CLIENTS " == *" C "* || "$PROFILE" == 1 ]]; then
  log "building client C (benches/peers, release, --locked)"
  nice -n "$NICE" cargo build --release --locked --manifest-path benches/peers/Cargo.toml \
    --target-dir "$PEERS_TARGET" >"$OUT/build-c.log" 2>&1 \
    || { tail -n 30 "$OUT/build-c.log" >&2; die "building C failed"; }
fi

# --- broker -----------------------------------------------------------------------------------
if [[ -n "${BENCH_BOOTSTRAP:-}" ]]; then
  BOOTSTRAP="$BENCH_BOOTSTRAP"
  log "using the broker at $BOOTSTRAP"
else
  STARTED_BROKER=1
  ./scripts/kafka.sh start
  BOOTSTRAP="$(./scripts/kafka.sh env | sed 's/^KAFKA_BOOTSTRAP=//')"
fi
[[ "$BOOTSTRAP" == 127.0.0.1:* || "$BOOTSTRAP" == localhost:* || "$BOOTSTRAP" == "[::1]:"* ]] \
  || die "only loopback brokers: $BOOTSTRAP"

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

# --- RSS sampler ------------------------------------------------------------------------------
# Every RSS_INTERVAL s: "ms_since_start rss_kb" of the largest process under ROOT (the client,
# not GNU time or kafka.sh's bash). Only builtins, besides sleep.
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
sample_rss() { # sample_rss ROOT_PID OUT_FILE
  local root="$1" out="$2" t0="${EPOCHREALTIME/./}" p key value unit best now
  : >"$out"
  while kill -0 "$root" 2>/dev/null; do
    best=0
    for p in $(descendants "$root"); do
      while read -r key value unit; do
        [[ "$key" == VmRSS: ]] && { ((value > best)) && best=$value; break; }
      done 2>/dev/null <"/proc/$p/status" || true
    done
    now="${EPOCHREALTIME/./}"
    printf '%d %d\n' $(((now - t0) / 1000)) "$best" >>"$out"
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
  sample_rss "$pid" "$OUT/$name.rss" &
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

# Java's dates are HH:mm:ss.SSS; this turns B's output into A's BENCH line.
java_to_bench() { # java_to_bench OUT_FILE RECORDS
  awk -v target="$2" '
    function ms(t,   a) { split(t, a, /[:.]/); return ((a[1] * 60 + a[2]) * 60 + a[3]) * 1000 + a[4] }
    /for share consumer/ { if (!seen) { split($0, f, /, */); t_first = ms(f[2]); r_first = f[6]; seen = 1 } next }
    /^WARNING/ { warn = 1; next }
    /^[0-9][0-9]:[0-9][0-9]:[0-9][0-9]\.[0-9]+, / { split($0, f, /, */); t_start = ms(f[1]); t_end = ms(f[2]); mb = f[3]; records = f[6] }
    END {
      if (records == "") { print "no final line in the Java output" > "/dev/stderr"; exit 1 }
      if (!seen) { print "no progress line in the Java output" > "/dev/stderr"; exit 1 }
      if (t_first < t_start) t_first += 86400000
      if (t_end < t_first) t_end += 86400000
      bytes = int(mb * 1048576 + 0.5)
      wr = records - r_first + 1
      printf "BENCH client=B records=%d bytes=%d window_records=%d window_bytes=%d window_ms=%d join_ms=%d redelivered=-1 drivers=1 complete=%d first_progress_records=%d\n",
        records, bytes, wr, (records > 0 ? int(bytes * wr / records + 0.5) : 0), t_end - t_first,
        t_first - t_start, (records >= target && !warn), r_first
    }' "$1"
}

bench_field() { # bench_field FILE KEY
  grep -m1 '^BENCH ' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"
}

RUNS="$OUT/runs.tsv"
printf 'kind\tround\tclient\tdrivers\trecords\twindow_records\twindow_ms\trecords_per_s\tMB_per_s\tcpu_s\tuser_s\tsys_s\tcpu_us_per_record\tpeak_rss_MB\trss_mid_MB\trss_late_MB\telapsed_s\tjoin_ms\tredelivered\n' >"$RUNS"

# record_run KIND ROUND CLIENT NAME EXPECTED: appends one line to runs.tsv and prints it.
record_run() {
  local kind="$1" round="$2" client="$3" name="$4" expected="$5"
  local bench="$OUT/$name.bench"
  if [[ "$client" == B ]]; then
    java_to_bench "$OUT/$name.out" "$expected" >"$bench"
  else
    grep -m1 '^BENCH ' "$OUT/$name.out" >"$bench" || die "$name printed no BENCH line"
  fi
  [[ "$(bench_field "$bench" complete)" == 1 ]] || die "$name did not consume $expected records: $(cat "$bench")"
  local t; t="$(cat "$OUT/$name.time")"
  awk -v kind="$kind" -v round="$round" -v client="$client" -v bench="$(cat "$bench")" -v t="$t" '
    function field(s, k,   n, i, a, kv) { n = split(s, a, " "); for (i = 1; i <= n; i++) { split(a[i], kv, "="); if (kv[1] == k) return kv[2] } return "" }
    { rss[NR] = $2; at[NR] = $1 }
    END {
      records = field(bench, "records"); wr = field(bench, "window_records"); wms = field(bench, "window_ms")
      wb = field(bench, "window_bytes"); user = field(t, "user"); sys = field(t, "sys")
      # RSS over the run: the largest sample in its second quarter and in its last quarter.
      last = at[NR]; mid = 0; late = 0
      for (i = 1; i <= NR; i++) {
        if (at[i] >= last / 4 && at[i] < last / 2 && rss[i] > mid) mid = rss[i]
        if (at[i] >= last * 3 / 4 && rss[i] > late) late = rss[i]
      }
      s = wms / 1000
      printf "%s\t%s\t%s\t%s\t%d\t%d\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.3f\t%.1f\t%.1f\t%.1f\t%s\t%s\t%s\n",
        kind, round, client, field(bench, "drivers"), records, wr, wms, wr / s, wb / 1048576 / s,
        user + sys, user, sys, (user + sys) * 1e6 / records, field(t, "maxrss_kb") / 1024,
        mid / 1024, late / 1024, field(t, "elapsed"), field(bench, "join_ms"), field(bench, "redelivered")
    }' "$OUT/$name.rss" | tee -a "$RUNS" >&2
}

run_client() { # run_client KIND ROUND CLIENT TOPIC RECORDS [DRIVERS]
  local kind="$1" round="$2" client="$3" topic="$4" records="$5" drivers="${6:-1}"
  local group="bench-$RUN_ID-$kind-r$round-$client-d$drivers"
  local name="$kind-r$round-$client-d$drivers"
  new_group "$group"
  sleep "$PAUSE"
  log "run $name: group $group"
  case "$client" in
    A) measure "$name" "$A_BIN" consume --bootstrap "$BOOTSTRAP" --topic "$topic" --group "$group" \
         --records "$records" --drivers "$drivers" --fetch-max-bytes "$FETCH_MAX_BYTES" \
         --max-poll-records "$MAX_POLL_RECORDS" --commit "$A_COMMIT" --runtime "$RUNTIME" \
         --idle-timeout-secs "$IDLE_TIMEOUT" ;;
    B) measure "$name" env KAFKA_TOOL_HEAP_OPTS="$JAVA_HEAP" ./scripts/kafka.sh run-class \
         org.apache.kafka.tools.ShareConsumerPerformance --bootstrap-server "$BOOTSTRAP" \
         --topic "$topic" --group "$group" --num-records "$records" --fetch-size "$FETCH_MAX_BYTES" \
         --command-property "max.poll.records=$MAX_POLL_RECORDS" --timeout "$((IDLE_TIMEOUT * 1000))" \
         --show-detailed-stats --reporting-interval 50 --date-format HH:mm:ss.SSS ;;
    C) measure "$name" "$C_BIN" --bootstrap "$BOOTSTRAP" --topic "$topic" --group "$group" \
         --records "$records" --fetch-max-bytes "$FETCH_MAX_BYTES" \
         --max-poll-records "$MAX_POLL_RECORDS" --commit "$C_COMMIT" --runtime "$RUNTIME" \
         --idle-timeout-secs "$IDLE_TIMEOUT" ;;
  esac
  record_run "$kind" "$round" "$client" "$name" "$records"
  delete_group "$group"
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
  echo "kafka: $KAFKA_VERSION (broker and Java clients)"
  echo "krafka: $(awk '/^name = "krafka"/ {getline; print $3}' benches/peers/Cargo.lock | tr -d '"')"
  echo "kafka-share-sink: $(git describe --always --dirty 2>/dev/null || echo unknown)"
  echo "settings: records=$RECORDS size=$RECORD_SIZE partitions=$PARTITIONS rounds=$ROUNDS" \
       "fetch.max.bytes=$FETCH_MAX_BYTES max.poll.records=$MAX_POLL_RECORDS A_commit=$A_COMMIT" \
       "C_commit=$C_COMMIT runtime=$RUNTIME java_heap='$JAVA_HEAP' group_config='$GROUP_CONFIG'" \
       "producer_props='$PRODUCER_PROPS'"
} >"$OUT/env.txt"
cat "$OUT/env.txt" >&2

# --- main rounds ------------------------------------------------------------------------------
TOPIC="bench-$RUN_ID-p$PARTITIONS"
produce "$TOPIC" "$PARTITIONS" "$RECORDS"
for ((round = 1; round <= ROUNDS; round++)); do
  for client in $CLIENTS; do
    run_client main "$round" "$client" "$TOPIC" "$RECORDS"
  done
done

# --- scale-out row ----------------------------------------------------------------------------
if [[ -n "$SCALE_DRIVERS" ]]; then
  SCALE_TOPIC="bench-$RUN_ID-p$SCALE_PARTITIONS"
  produce "$SCALE_TOPIC" "$SCALE_PARTITIONS" "$SCALE_RECORDS"
  for k in $SCALE_DRIVERS; do
    run_client scale 1 A "$SCALE_TOPIC" "$SCALE_RECORDS" "$k"
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
      perf record -F 499 -g -o "$OUT/perf-$client.data" -- "${cmd[@]}" >"$OUT/perf-$client.out" 2>"$OUT/perf-$client.err" \
        || die "perf record of $client failed (see $OUT/perf-$client.err)"
      perf report -i "$OUT/perf-$client.data" --no-children --sort dso,symbol --stdio 2>/dev/null \
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
    function median(a, n,   i, j, t) {
      for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    NR == 1 { next }
    $1 == "main" { rps[$2, $3] = $8; mbs[$2, $3] = $9; cpu[$2, $3] = $13; rss[$2, $3] = $14; if ($2 > rounds) rounds = $2; has[$3] = 1 }
    $1 == "scale" { sk[++ns] = $4; srps[ns] = $8; scpu[ns] = $13; srss[ns] = $14 }
    END {
      print "| round | A rec/s | B rec/s | C rec/s | A/B rec/s | A/C rec/s | CPU µs/rec A / B / C | A CPU/rec ÷ B | peak RSS MB A / B / C | A RSS ÷ B |"
      print "|---|---|---|---|---|---|---|---|---|---|"
      for (r = 1; r <= rounds; r++) {
        ab = (rps[r, "B"] > 0) ? rps[r, "A"] / rps[r, "B"] : 0
        ac = (rps[r, "C"] > 0) ? rps[r, "A"] / rps[r, "C"] : 0
        cb = (cpu[r, "B"] > 0) ? cpu[r, "A"] / cpu[r, "B"] : 0
        mb = (rss[r, "B"] > 0) ? rss[r, "A"] / rss[r, "B"] : 0
        m_ab[r] = ab; m_ac[r] = ac; m_cb[r] = cb; m_mb[r] = mb
        for (c = 1; c <= 3; c++) { x = substr("ABC", c, 1); v_rps[x, r] = rps[r, x]; v_cpu[x, r] = cpu[r, x]; v_rss[x, r] = rss[r, x] }
        printf "| %d | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f / %.2f / %.2f | %.2f | %.1f / %.1f / %.1f | %.3f |\n",
          r, rps[r, "A"], rps[r, "B"], rps[r, "C"], ab, ac, cpu[r, "A"], cpu[r, "B"], cpu[r, "C"], cb,
          rss[r, "A"], rss[r, "B"], rss[r, "C"], mb
      }
      for (c = 1; c <= 3; c++) {
        x = substr("ABC", c, 1)
        for (r = 1; r <= rounds; r++) { t1[r] = v_rps[x, r]; t2[r] = v_cpu[x, r]; t3[r] = v_rss[x, r] }
        med_rps[x] = median(t1, rounds); med_cpu[x] = median(t2, rounds); med_rss[x] = median(t3, rounds)
      }
      printf "| **median** | %.0f | %.0f | %.0f | **%.2f** | **%.2f** | %.2f / %.2f / %.2f | **%.2f** | %.1f / %.1f / %.1f | **%.3f** |\n",
        med_rps["A"], med_rps["B"], med_rps["C"], median(m_ab, rounds), median(m_ac, rounds),
        med_cpu["A"], med_cpu["B"], med_cpu["C"], median(m_cb, rounds),
        med_rss["A"], med_rss["B"], med_rss["C"], median(m_mb, rounds)
      if (ns) {
        print ""
        print "| A drivers | rec/s | × 1 driver | CPU µs/rec | peak RSS MB |"
        print "|---|---|---|---|---|"
        for (i = 1; i <= ns; i++)
          printf "| %d | %.0f | %.2f | %.2f | %.1f |\n", sk[i], srps[i], srps[i] / srps[1], scpu[i], srss[i]
      }
    }' "$RUNS"
}
{
  echo '```'
  cat "$OUT/env.txt"
  echo '```'
  echo
  summarize
  echo
  echo 'Raw runs (kind, round, client, drivers, records, window_records, window_ms, records/s, MB/s,'
  echo 'CPU s, user s, sys s, CPU µs/record, peak RSS MB, RSS MB max in 2nd quarter, in last quarter,'
  echo 'elapsed s, join ms, redelivered):'
  echo
  echo '```'
  cat "$RUNS"
  echo '```'
} >"$OUT/summary.md"
echo >&2
cat "$OUT/summary.md"
log "done: $OUT/summary.md"
