#!/usr/bin/env bash
# Single-node Apache Kafka (KRaft, combined broker+controller) for real-broker tests.
#
# Runs Kafka as a plain Java process on 127.0.0.1 with jars fetched from Maven Central.
#
#   scripts/kafka.sh start              download (once), format fresh storage, start, wait until ready
#   scripts/kafka.sh stop               SIGTERM, wait up to KAFKA_STOP_TIMEOUT s, then SIGKILL
#                                       (stops the multi-node cluster's nodes too)
#   scripts/kafka.sh status             exit 0 if running, 1 otherwise
#   scripts/kafka.sh env                print KAFKA_BOOTSTRAP=127.0.0.1:PORT of the running broker
#   scripts/kafka.sh stop-node ID       stop one broker of the multi-node cluster (not node 1)
#   scripts/kafka.sh kill-node ID       the same with SIGKILL: a crash, no controlled shutdown
#   scripts/kafka.sh start-node ID      start that broker again on its old port and storage
#   scripts/kafka.sh run-class CLASS [ARGS...]   run a Java main class with the Kafka classpath
#   scripts/kafka.sh fetch              only download the jars into the cache
#   scripts/kafka.sh classpath          print the classpath (downloads if needed)
#
# Environment:
#   KAFKA_VERSION        Kafka release (default 4.4.0; 4.2.x works too, 4.0/4.1 best effort)
#   KAFKA_CACHE_DIR      jar cache (default $HOME/.cache/kafka-share-sink/kafka-$KAFKA_VERSION)
#   KAFKA_HEAP_OPTS      broker heap (default "-Xms256m -Xmx1g")
#   KAFKA_TOOL_HEAP_OPTS heap for run-class (default "-Xmx512m")
#   KAFKA_START_TIMEOUT  seconds to wait for readiness (default 90)
#   KAFKA_STOP_TIMEOUT   seconds to wait after SIGTERM (default 30)
#   KAFKA_EXTRA_PROPS    extra server.properties lines (newline separated k=v), appended last
#   KAFKA_SHARE_VERSION  force `--feature share.version=N` at format time (0 makes a broker without
#                        share groups, and start then does not insist on them; default: release default;
#                        4.1 gets 1 because it is off by default there)
#   KAFKA_TOOL_LOG_LEVEL log level of run-class tools on stderr (default WARN)
#   KAFKA_NODES          1 (default): the single node above. N >= 2: a loopback cluster of N nodes,
#                        node 1 the KRaft controller and a broker, nodes 2..N brokers only; start,
#                        status and env then mean that cluster (env prints KAFKA_BOOTSTRAP and
#                        KAFKA_MULTI_BOOTSTRAP, both the list of all brokers). Internal topics get
#                        min(N, 3) replicas, so stopping one broker (stop-node) keeps them available.
#   KAFKA_CLUSTER_HEAP_OPTS  heap of each cluster node (default "-Xms128m -Xmx512m")
#   KAFKA_SECURITY       1 (default): the single node also gets the TLS/SASL test listeners below, a
#                        test PKI made with openssl at start (target/kafka/pki) and SCRAM users
#                        (alice/alice-secret, SHA-256 and SHA-512). 0: PLAINTEXT only.
#                        `env` then also prints KAFKA_SSL_BOOTSTRAP (TLS), KAFKA_MTLS_BOOTSTRAP (TLS,
#                        client certificate required), KAFKA_SASL_SSL_BOOTSTRAP and
#                        KAFKA_SASL_PLAINTEXT_BOOTSTRAP (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER; PLAIN
#                        users alice/alice-secret and bob/bob-secret), KAFKA_EXPIRED_BOOTSTRAP and
#                        KAFKA_WRONGHOST_BOOTSTRAP (TLS with an expired / another host's certificate),
#                        KAFKA_REAUTH_BOOTSTRAP (SASL_PLAINTEXT, PLAIN/SCRAM-SHA-512/OAUTHBEARER, 5 s
#                        sessions) and KAFKA_PKI_DIR (ca.crt, client.pem, rogue-client.pem, ...).
#                        That node also runs an ACL authorizer (StandardAuthorizer, open where no ACL
#                        is set) and `env` prints KAFKA_ACLS=1, unless KAFKA_AUTHORIZER=0.
#
# State lives in <repo>/target/kafka/: server.properties, data/, logs/, kafka.pid, bootstrap; the
# cluster's in <repo>/target/kafka/cluster/: node-ID/{server.properties,data,logs,kafka.pid}, bootstrap.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"

KAFKA_VERSION="${KAFKA_VERSION:-4.4.0}"
KAFKA_CACHE_DIR="${KAFKA_CACHE_DIR:-${HOME:?HOME is not set}/.cache/kafka-share-sink/kafka-$KAFKA_VERSION}"
LOG4J_VERSION="${KAFKA_LOG4J_VERSION:-2.25.3}"
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms256m -Xmx1g}"
KAFKA_TOOL_HEAP_OPTS="${KAFKA_TOOL_HEAP_OPTS:--Xmx512m}"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
KAFKA_STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"

STATE_DIR="$REPO_ROOT/target/kafka"
DATA_DIR="$STATE_DIR/data"
LOG_DIR="$STATE_DIR/logs"
CONFIG_FILE="$STATE_DIR/server.properties"
PID_FILE="$STATE_DIR/kafka.pid"
BOOTSTRAP_FILE="$STATE_DIR/bootstrap"
VERSION_FILE="$STATE_DIR/version"
BROKER_LOG4J="$STATE_DIR/log4j2-broker.xml"
TOOLS_LOG4J="$STATE_DIR/log4j2-tools.xml"
LIB_DIR="$KAFKA_CACHE_DIR/libs"
CACHE_STAMP="$KAFKA_CACHE_DIR/.complete"
PKI_DIR="$STATE_DIR/pki"
SECURITY_ENV_FILE="$STATE_DIR/security.env"
KAFKA_SECURITY="${KAFKA_SECURITY:-1}"

JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"

log() { printf 'kafka.sh: %s\n' "$*" >&2; }
die() { printf 'kafka.sh: ERROR: %s\n' "$*" >&2; exit 1; }

need() { command -v "$1" >/dev/null 2>&1 || die "'$1' not found on PATH ($2)"; }

# with_lock FILE CMD...: run CMD holding an exclusive lock on FILE (serialises parallel callers,
# e.g. several test processes calling `start` at once). Without flock(1) it just runs CMD.
with_lock() {
  local lock="$1"; shift
  mkdir -p "$(dirname "$lock")"
  if command -v flock >/dev/null 2>&1; then
    (
      flock -w 600 9 || die "could not lock $lock within 600 s"
      "$@"
    ) 9>"$lock"
  else
    "$@"
  fi
}

# --- version helpers --------------------------------------------------------------------------
# ver_ge A B: true when dotted version A >= B (numeric per component).
ver_ge() {
  local -a a b
  IFS=. read -r -a a <<<"$1"
  IFS=. read -r -a b <<<"$2"
  local i x y
  for i in 0 1 2; do
    x="${a[$i]:-0}"; y="${b[$i]:-0}"
    x="${x%%[!0-9]*}"; y="${y%%[!0-9]*}"
    x="${x:-0}"; y="${y:-0}"
    if ((10#$x > 10#$y)); then return 0; fi
    if ((10#$x < 10#$y)); then return 1; fi
  done
  return 0
}

[[ "$KAFKA_VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+([.-][A-Za-z0-9.-]+)?$ ]] \
  || die "KAFKA_VERSION='$KAFKA_VERSION' does not look like a Kafka release (e.g. 4.4.0)"
ver_ge "$KAFKA_VERSION" 4.0.0 || die "KAFKA_VERSION=$KAFKA_VERSION: share groups need Kafka 4.0 or newer"

KAFKA_NODES="${KAFKA_NODES:-1}"
[[ "$KAFKA_NODES" =~ ^[1-9]$ ]] || die "KAFKA_NODES='$KAFKA_NODES': give a node count from 1 to 9"
KAFKA_CLUSTER_HEAP_OPTS="${KAFKA_CLUSTER_HEAP_OPTS:--Xms128m -Xmx512m}"
CLUSTER_DIR="$STATE_DIR/cluster"
CLUSTER_BOOTSTRAP_FILE="$CLUSTER_DIR/bootstrap"
CLUSTER_VERSION_FILE="$CLUSTER_DIR/version"

# --- download ---------------------------------------------------------------------------------
write_pom() {
  cat >"$1" <<POM
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by kafka-share-sink scripts/kafka.sh: resolves a Kafka $KAFKA_VERSION runtime classpath. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.kafka-share-sink</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>$KAFKA_VERSION</version>
  <packaging>pom</packaging>
  <dependencies>
    <!-- Broker (kafka.Kafka, kafka.tools.StorageTool) and its runtime dependencies. -->
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <!-- CLI tools: TopicCommand, FeatureCommand, ShareConsumerPerformance, ProducerPerformance, ... -->
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>$KAFKA_VERSION</version>
      <exclusions>
        <!-- Only needed by the Connect plugin-path tool; pulls in Jetty/Jersey. -->
        <exclusion>
          <groupId>org.apache.kafka</groupId>
          <artifactId>connect-runtime</artifactId>
        </exclusion>
      </exclusions>
    </dependency>
    <!-- Logging backend: Kafka 4.x logs through slf4j 1.7 and ships log4j2 in its distribution. -->
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
  </dependencies>
  <build>
    <pluginManagement>
      <plugins>
        <plugin>
          <groupId>org.apache.maven.plugins</groupId>
          <artifactId>maven-dependency-plugin</artifactId>
          <version>3.8.1</version>
        </plugin>
      </plugins>
    </pluginManagement>
  </build>
</project>
POM
}

ensure_jars() { with_lock "$KAFKA_CACHE_DIR.lock" ensure_jars_locked; }

ensure_jars_locked() {
  local pom_new stamp_want
  mkdir -p "$KAFKA_CACHE_DIR"
  pom_new="$(mktemp "$KAFKA_CACHE_DIR/pom.XXXXXX")"
  write_pom "$pom_new"
  stamp_want="$(cksum <"$pom_new")"
  if [[ -f "$CACHE_STAMP" && "$(cat "$CACHE_STAMP")" == "$stamp_want" ]] \
     && compgen -G "$LIB_DIR/kafka_2.13-*.jar" >/dev/null; then
    rm -f "$pom_new"
    return 0
  fi
  need mvn "install Maven, e.g. apt-get install maven"
  mv -f "$pom_new" "$KAFKA_CACHE_DIR/pom.xml"
  log "downloading Kafka $KAFKA_VERSION jars via Maven into $LIB_DIR ..."
  local t0=$SECONDS
  rm -rf "$LIB_DIR.tmp"
  if ! mvn -B -q -f "$KAFKA_CACHE_DIR/pom.xml" \
        org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$LIB_DIR.tmp" >"$KAFKA_CACHE_DIR/mvn.log" 2>&1; then
    tail -n 40 "$KAFKA_CACHE_DIR/mvn.log" >&2 || true
    die "Maven could not resolve org.apache.kafka:kafka_2.13:$KAFKA_VERSION (does that release exist? full log: $KAFKA_CACHE_DIR/mvn.log)"
  fi
  compgen -G "$LIB_DIR.tmp/kafka_2.13-$KAFKA_VERSION.jar" >/dev/null \
    || die "Maven finished but kafka_2.13-$KAFKA_VERSION.jar is missing in $LIB_DIR.tmp"
  rm -rf "$LIB_DIR"
  mv "$LIB_DIR.tmp" "$LIB_DIR"
  printf '%s\n' "$stamp_want" >"$CACHE_STAMP"
  log "downloaded $(find "$LIB_DIR" -name '*.jar' | wc -l) jars in $((SECONDS - t0)) s"
}

classpath() { printf '%s/*' "$LIB_DIR"; }

# --- logging configs --------------------------------------------------------------------------
write_log4j_configs() {
  mkdir -p "$STATE_DIR" "$LOG_DIR"
  # Broker: everything to target/kafka/logs/server.log (plus controller/state-change noise split off).
  cat >"$BROKER_LOG4J" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by scripts/kafka.sh. Broker logs go to files under ${sys:kafka.logs.dir}. -->
<Configuration status="WARN">
  <Appenders>
    <File name="server" fileName="${sys:kafka.logs.dir}/server.log">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
    <File name="controller" fileName="${sys:kafka.logs.dir}/controller.log">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
    <File name="stateChange" fileName="${sys:kafka.logs.dir}/state-change.log">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="server"/></Root>
    <Logger name="org.apache.kafka.controller" level="INFO" additivity="false"><AppenderRef ref="controller"/></Logger>
    <Logger name="state.change.logger" level="INFO" additivity="false"><AppenderRef ref="stateChange"/></Logger>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="org.apache.kafka.coordinator.group" level="INFO"/>
    <Logger name="org.apache.kafka.coordinator.share" level="INFO"/>
  </Loggers>
</Configuration>
XML
  # Tools run via run-class: quiet, to stderr, so their stdout stays parseable.
  cat >"$TOOLS_LOG4J" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by scripts/kafka.sh. Tool logs go to stderr. -->
<Configuration status="WARN">
  <Appenders>
    <Console name="stderr" target="SYSTEM_ERR">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="${sys:kafka.tool.log.level:-WARN}"><AppenderRef ref="stderr"/></Root>
  </Loggers>
</Configuration>
XML
}

java_tool() {
  # java_tool CLASS ARGS... : run a Kafka main class in the foreground with tool logging.
  need "$JAVA" "install a JDK 17+, e.g. apt-get install openjdk-17-jre-headless"
  local cls="$1"; shift
  # shellcheck disable=SC2086
  "$JAVA" $KAFKA_TOOL_HEAP_OPTS -Djava.awt.headless=true \
    -Dlog4j2.shutdownHookEnabled=false \
    -Dlog4j2.configurationFile="$TOOLS_LOG4J" -Dkafka.tool.log.level="${KAFKA_TOOL_LOG_LEVEL:-WARN}" \
    -cp "$(classpath)" "$cls" "$@"
}

# --- process state ----------------------------------------------------------------------------
running_pid() {
  # Prints the broker pid and returns 0 if our broker is alive; returns 1 otherwise.
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$PID_FILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # Guard against pid reuse: the process must be a java running our server.properties.
  if [[ -r "/proc/$pid/cmdline" ]]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$CONFIG_FILE" || return 1
  fi
  printf '%s\n' "$pid"
}

# --- ports ------------------------------------------------------------------------------------
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

free_ports() {
  # Prints $1 (default two) distinct free loopback TCP ports.
  local count="${1:-2}"
  if command -v python3 >/dev/null 2>&1; then
    python3 - "$count" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
PY
    return
  fi
  local found=() p tries=0
  while ((${#found[@]} < count)); do
    ((tries++ < 200)) || die "could not find free loopback ports"
    p=$((20000 + RANDOM % 40000))
    [[ " ${found[*]-} " == *" $p "* ]] && continue
    port_in_use "$p" || found+=("$p")
  done
  echo "${found[*]}"
}

new_cluster_id() {
  # Kafka cluster ids are base64url (no padding) encodings of 16 random bytes.
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import base64,os
while True:
    s = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
    if not s.startswith("-"): print(s); break'
  else
    java_tool kafka.tools.StorageTool random-uuid
  fi
}

# --- test PKI (KAFKA_SECURITY=1) ---------------------------------------------------------------
# gen_pki DIR: a CA; broker certificates for localhost/127.0.0.1, for another host, and expired
# (2020-01-01..02); a client certificate (CN=alice); a client certificate from an untrusted CA.
# PEM only; keys unencrypted. `*.pem` = key + certificate, as Kafka's ssl.keystore.type=PEM reads.
gen_pki() {
  need openssl "install OpenSSL, e.g. apt-get install openssl"
  local dir="$1" days=3650
  rm -rf "$dir"
  mkdir -p "$dir"
  (
    cd "$dir"
    openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days "$days" \
      -subj "/CN=kafka-share-sink test CA" -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign" -keyout ca.key -out ca.crt 2>/dev/null
    # leaf NAME SUBJECT SAN EKU CA_PREFIX
    leaf() {
      local name="$1" subj="$2" san="$3" eku="$4" ca="$5"
      openssl req -newkey rsa:2048 -nodes -sha256 -subj "$subj" -keyout "$name.key" -out "$name.csr" 2>/dev/null
      {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$eku"
        if [[ -n "$san" ]]; then echo "subjectAltName=$san"; fi
      } >"$name.ext"
      openssl x509 -req -in "$name.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial -sha256 \
        -days "$days" -extfile "$name.ext" -out "$name.crt" 2>/dev/null
      cat "$name.key" "$name.crt" >"$name.pem"
      rm -f "$name.csr" "$name.ext"
    }
    leaf broker "/CN=localhost" "DNS:localhost,IP:127.0.0.1" serverAuth ca
    leaf client "/CN=alice" "" clientAuth ca
    leaf wronghost "/CN=wrong.invalid" "DNS:wrong.invalid" serverAuth ca
    openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days "$days" -subj "/CN=rogue CA" \
      -addext "basicConstraints=critical,CA:TRUE" -keyout rogue-ca.key -out rogue-ca.crt 2>/dev/null
    leaf rogue-client "/CN=mallory" "" clientAuth rogue-ca
    # The expired certificate needs `openssl ca`, which can date a certificate in the past.
    mkdir -p ca-db && : >ca-db/index.txt && echo 1000 >ca-db/serial
    cat >ca-db/ca.cnf <<'CNF'
[ ca ]
default_ca = test_ca
[ test_ca ]
database = ca-db/index.txt
serial = ca-db/serial
new_certs_dir = ca-db
certificate = ca.crt
private_key = ca.key
default_md = sha256
policy = anything
unique_subject = no
copy_extensions = none
[ anything ]
commonName = supplied
[ expired_ext ]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost,IP:127.0.0.1
CNF
    openssl req -newkey rsa:2048 -nodes -sha256 -subj "/CN=localhost" -keyout expired.key -out expired.csr 2>/dev/null
    openssl ca -batch -notext -config ca-db/ca.cnf -extensions expired_ext \
      -startdate 20200101000000Z -enddate 20200102000000Z -in expired.csr -out expired.crt 2>/dev/null
    cat expired.key expired.crt >expired.pem
    rm -f expired.csr
  ) || die "generating the test PKI in $dir failed"
}

# security_props PKI SSL MTLS SASL_SSL SASL_PLAINTEXT EXPIRED WRONGHOST REAUTH: the listener
# settings of the TLS/SASL test listeners (PLAINTEXT stays the inter-broker listener).
security_props() {
  local pki="$1" p_ssl="$2" p_mtls="$3" p_saslssl="$4" p_saslpt="$5" p_exp="$6" p_wrong="$7" p_reauth="$8"
  local plain="org.apache.kafka.common.security.plain.PlainLoginModule required"
  local scram="org.apache.kafka.common.security.scram.ScramLoginModule required;"
  local oauth='org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="broker";'
  local l
  cat <<PROPS

# --- TLS and SASL test listeners (KAFKA_SECURITY=1) ---
# TLS: PEM key+chain and PEM CA, made by gen_pki at start.
ssl.keystore.type=PEM
ssl.keystore.location=$pki/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$pki/ca.crt
# MTLS requires a client certificate (client.pem authenticates as User:CN=alice).
listener.name.mtls.ssl.client.auth=required
# Listeners that serve bad certificates.
listener.name.expired.ssl.keystore.type=PEM
listener.name.expired.ssl.keystore.location=$pki/expired.pem
listener.name.wronghost.ssl.keystore.type=PEM
listener.name.wronghost.ssl.keystore.location=$pki/wronghost.pem
PROPS
  if [[ "${KAFKA_AUTHORIZER:-1}" == 1 ]]; then
    cat <<'PROPS'
# ACLs, for the tests of writes the broker refuses (TOPIC_AUTHORIZATION_FAILED). A resource
# without any ACL stays open to everyone, so only what a test denies is denied; no super users,
# so a DENY binds the plaintext listener's User:ANONYMOUS too.
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=true
PROPS
  fi
  for l in sasl_ssl sasl_plaintext; do
    cat <<PROPS
listener.name.$l.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER
listener.name.$l.plain.sasl.jaas.config=$plain user_alice="alice-secret" user_bob="bob-secret";
listener.name.$l.scram-sha-256.sasl.jaas.config=$scram
listener.name.$l.scram-sha-512.sasl.jaas.config=$scram
listener.name.$l.oauthbearer.sasl.jaas.config=$oauth
PROPS
  done
  cat <<PROPS
# REAUTH: 5 s sessions, so re-authentication (KIP-368) happens within a test.
listener.name.reauth.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512,OAUTHBEARER
listener.name.reauth.plain.sasl.jaas.config=$plain user_alice="alice-secret";
listener.name.reauth.scram-sha-512.sasl.jaas.config=$scram
listener.name.reauth.oauthbearer.sasl.jaas.config=$oauth
listener.name.reauth.connections.max.reauth.ms=5000
PROPS
}

# --- server.properties ------------------------------------------------------------------------
write_server_properties() {
  local port="$1" cport="$2"
  local listeners="PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport"
  local advertised="$listeners" protocols="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
  if [[ "$KAFKA_SECURITY" == 1 ]]; then
    local -a p
    read -r -a p <<<"$3"
    # TLS listeners advertise localhost, the name their certificates carry.
    listeners+=",SSL://127.0.0.1:${p[0]},MTLS://127.0.0.1:${p[1]},SASL_SSL://127.0.0.1:${p[2]},SASL_PLAINTEXT://127.0.0.1:${p[3]},EXPIRED://127.0.0.1:${p[4]},WRONGHOST://127.0.0.1:${p[5]},REAUTH://127.0.0.1:${p[6]}"
    advertised+=",SSL://localhost:${p[0]},MTLS://localhost:${p[1]},SASL_SSL://localhost:${p[2]},SASL_PLAINTEXT://127.0.0.1:${p[3]},EXPIRED://localhost:${p[4]},WRONGHOST://localhost:${p[5]},REAUTH://127.0.0.1:${p[6]}"
    protocols+=",SSL:SSL,MTLS:SSL,SASL_SSL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,EXPIRED:SSL,WRONGHOST:SSL,REAUTH:SASL_PLAINTEXT"
  fi
  cat >"$CONFIG_FILE" <<PROPS
# Generated by scripts/kafka.sh for Kafka $KAFKA_VERSION (single node, test use only).
# --- KRaft combined mode, loopback only ---
# One process is both broker and controller: no ZooKeeper, no second JVM.
process.roles=broker,controller
# The only node of the cluster.
node.id=1
# Controller quorum reached through the loopback controller listener (dynamic quorum, --standalone).
controller.quorum.bootstrap.servers=127.0.0.1:$cport
# Bind only to loopback, on ports picked free at start time.
listeners=$listeners
# Clients (and the node itself) reach the broker over loopback.
advertised.listeners=$advertised
# Inter-broker traffic uses the plaintext listener.
inter.broker.listener.name=PLAINTEXT
# Which listener speaks the controller protocol.
controller.listener.names=CONTROLLER
# PLAINTEXT for the node itself; the TLS/SASL test listeners when KAFKA_SECURITY=1.
listener.security.protocol.map=$protocols
# Storage formatted fresh by every start.
log.dirs=$DATA_DIR

# --- small machine (2 cores) ---
# Fewer network threads than the sample's 3: one client at a time in tests.
num.network.threads=2
# Fewer I/O threads than the sample's 8.
num.io.threads=4
# Recovery of a fresh log dir needs no parallelism.
num.recovery.threads.per.data.dir=1

# --- fast single-node settings ---
# Topics created without a partition count get one partition.
num.partitions=1
# Tests create their topics explicitly; typos must not silently create topics.
auto.create.topics.enable=false
# Only one broker: internal topics cannot have more replicas.
default.replication.factor=1
# __consumer_offsets must fit one broker.
offsets.topic.replication.factor=1
# One partition for __consumer_offsets instead of 50: faster coordinator load on a 2-core box.
offsets.topic.num.partitions=1
# __transaction_state must fit one broker.
transaction.state.log.replication.factor=1
# ...and accept writes with only that one replica in sync.
transaction.state.log.min.isr=1
# One partition instead of 50 for __transaction_state.
transaction.state.log.num.partitions=1
# __share_group_state must fit one broker (must be set before first share-group use).
share.coordinator.state.topic.replication.factor=1
# ...and accept writes with only that one replica in sync.
share.coordinator.state.topic.min.isr=1
# One partition instead of 50 for __share_group_state: faster share-coordinator load.
share.coordinator.state.topic.num.partitions=1
# Classic groups rebalance at once instead of waiting 3 s for more members.
group.initial.rebalance.delay.ms=0
PROPS
  if [[ "$KAFKA_SECURITY" == 1 ]]; then
    local -a p
    read -r -a p <<<"$3"
    security_props "$PKI_DIR" "${p[@]}" >>"$CONFIG_FILE"
  fi
  append_common_props "$CONFIG_FILE"
}

# append_common_props FILE: the share-group timeouts, the version-specific settings and
# KAFKA_EXTRA_PROPS, which the single node and every cluster node share.
append_common_props() {
  local file="$1"
  cat >>"$file" <<'PROPS'

# --- retention: records are kept whatever their timestamps ---
# Tests write records stamped years ago (CreateTime 2023, as a mirror of old data would). With the
# default 7-day time retention the broker's check (every 5 min) deletes such a segment, the active
# one included, so a test that reads the topic back later found it empty now and then.
log.retention.ms=-1

# --- transactions: a transaction left open past transaction.timeout.ms is aborted within 1 s ---
# The coordinator looks for timed-out transactions every second instead of every 10 s.
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000

# --- share groups: short timeouts so lock expiry / member fencing tests run in seconds ---
# Broker-wide default acquisition lock: 5 s instead of 30 s.
group.share.record.lock.duration.ms=5000
# Allow group/consumer configs down to 1 s (default minimum 15 s).
group.share.min.record.lock.duration.ms=1000
# Share member heartbeat every 1 s instead of 5 s.
group.share.heartbeat.interval.ms=1000
# Allow heartbeat intervals down to 500 ms (default minimum 5 s).
group.share.min.heartbeat.interval.ms=500
# A silent share member is fenced after 10 s instead of 45 s.
group.share.session.timeout.ms=10000
# Allow session timeouts down to 2 s (default minimum 45 s).
group.share.min.session.timeout.ms=2000
PROPS

  if ! ver_ge "$KAFKA_VERSION" 4.1.0; then
    cat >>"$file" <<'PROPS'

# --- Kafka 4.0 only: share groups are early access ---
# 4.0 has no share.version feature; share groups are switched on by the protocol list.
group.coordinator.rebalance.protocols=classic,consumer,share
# 4.0 marks the share RPCs unstable; they are refused without this.
unstable.api.versions.enable=true
PROPS
  fi
  if ver_ge "$KAFKA_VERSION" 4.3.0; then
    cat >>"$file" <<'PROPS'

# --- Kafka 4.3+ (KIP-1263) ---
# Recompute share-group assignments every 100 ms instead of 1 s: new members get partitions sooner.
group.share.assignment.interval.ms=100
PROPS
  fi
  if [[ -n "${KAFKA_EXTRA_PROPS:-}" ]]; then
    printf '\n# --- from KAFKA_EXTRA_PROPS ---\n%s\n' "$KAFKA_EXTRA_PROPS" >>"$file"
  fi
}

# --- commands ---------------------------------------------------------------------------------
cmd_start() {
  local pid
  if pid="$(running_pid)"; then
    local running_version
    running_version="$(cat "$VERSION_FILE" 2>/dev/null || echo '?')"
    if [[ "$running_version" != "$KAFKA_VERSION" ]]; then
      die "Kafka $running_version is already running (pid $pid) but KAFKA_VERSION=$KAFKA_VERSION was requested; run 'scripts/kafka.sh stop' first"
    fi
    if [[ -s "$BOOTSTRAP_FILE" ]]; then
      log "Kafka $running_version already running (pid $pid, $(cat "$BOOTSTRAP_FILE"))"
      return 0
    fi
    die "Kafka is running (pid $pid) but never became ready; run 'scripts/kafka.sh stop' first"
  fi
  need "$JAVA" "install a JDK 17+, e.g. apt-get install openjdk-17-jre-headless"
  ensure_jars
  write_log4j_configs

  local t0=$SECONDS port cport share_version="${KAFKA_SHARE_VERSION:-}" secure_ports=""
  rm -rf "$DATA_DIR" "$LOG_DIR" "$PID_FILE" "$BOOTSTRAP_FILE" "$SECURITY_ENV_FILE"
  mkdir -p "$DATA_DIR" "$LOG_DIR"
  if [[ "$KAFKA_SECURITY" == 1 ]]; then
    local -a all
    read -r -a all <<<"$(free_ports 9)"
    port="${all[0]}" cport="${all[1]}" secure_ports="${all[*]:2}"
    gen_pki "$PKI_DIR"
  else
    read -r port cport <<<"$(free_ports)"
  fi
  write_server_properties "$port" "$cport" "$secure_ports"

  # 4.1: share groups are a preview, off unless share.version=1 is finalized at format time.
  # 4.2+: the default metadata version already enables share.version=1 on fresh clusters.
  if [[ -z "$share_version" ]] && ver_ge "$KAFKA_VERSION" 4.1.0 && ! ver_ge "$KAFKA_VERSION" 4.2.0; then
    share_version=1
  fi
  local -a format_args=(format --standalone -t "$(new_cluster_id)" -c "$CONFIG_FILE")
  [[ -n "$share_version" ]] && format_args+=(--feature "share.version=$share_version")
  # SCRAM users are bootstrap records. format.log then holds their salted keys: it stays in
  # target/kafka/logs, out of CI output.
  [[ "$KAFKA_SECURITY" == 1 ]] && format_args+=(
    --add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]'
    --add-scram 'SCRAM-SHA-512=[name=alice,password=alice-secret]')
  if ! java_tool kafka.tools.StorageTool "${format_args[@]}" >"$LOG_DIR/format.log" 2>&1; then
    cat "$LOG_DIR/format.log" >&2
    die "kafka.tools.StorageTool ${format_args[*]} failed"
  fi

  log "starting Kafka $KAFKA_VERSION on 127.0.0.1:$port (controller 127.0.0.1:$cport)"
  # shellcheck disable=SC2086
  nohup "$JAVA" $KAFKA_HEAP_OPTS -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
    -Djava.awt.headless=true \
    -Dkafka.logs.dir="$LOG_DIR" -Dlog4j2.configurationFile="$BROKER_LOG4J" \
    -cp "$(classpath)" kafka.Kafka "$CONFIG_FILE" \
    </dev/null >"$LOG_DIR/stdout.log" 2>&1 9>&- &   # 9>&-: the broker must not inherit the start lock
  pid=$!
  echo "$pid" >"$PID_FILE"
  echo "$KAFKA_VERSION" >"$VERSION_FILE"

  fail_start() {
    log "$1"
    for f in "$LOG_DIR/stdout.log" "$LOG_DIR/server.log"; do
      [[ -s "$f" ]] && { echo "----- tail of $f -----" >&2; tail -n 60 "$f" >&2; }
    done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$PID_FILE"
    die "Kafka $KAFKA_VERSION did not come up (logs: $LOG_DIR)"
  }

  local deadline=$((SECONDS + KAFKA_START_TIMEOUT))
  until grep -q "Kafka Server started" "$LOG_DIR/server.log" 2>/dev/null && port_in_use "$port"; do
    kill -0 "$pid" 2>/dev/null || fail_start "the broker process exited during startup"
    ((SECONDS < deadline)) || fail_start "timed out after ${KAFKA_START_TIMEOUT}s waiting for 'Kafka Server started'"
    sleep 0.5
  done

  # Ask the broker over the client protocol: proves it answers and that share groups are on.
  local features=""
  until features="$(java_tool org.apache.kafka.tools.FeatureCommand \
                      --bootstrap-server "127.0.0.1:$port" describe 2>&1)"; do
    kill -0 "$pid" 2>/dev/null || fail_start "the broker process exited during startup"
    ((SECONDS < deadline)) || fail_start "broker does not answer FeatureCommand describe: $features"
    sleep 1
  done
  if [[ "$share_version" == "0" ]]; then
    # Asked for on purpose: a broker without share groups, for the tests of that error.
    log "share.version=0: share groups disabled as requested"
  elif ver_ge "$KAFKA_VERSION" 4.1.0; then
    local sv
    sv="$(sed -n 's/.*Feature: share\.version.*FinalizedVersionLevel: \([0-9][0-9]*\).*/\1/p' <<<"$features" | head -n1)"
    if [[ -z "$sv" || "$sv" -lt 1 ]]; then
      printf '%s\n' "$features" >&2
      fail_start "share.version is not finalized >= 1, share groups are disabled"
    fi
    log "share.version=$sv finalized"
  fi
  printf '%s\n' "$features" >"$LOG_DIR/features.txt"

  if [[ "$KAFKA_SECURITY" == 1 ]]; then
    local -a p
    read -r -a p <<<"$secure_ports"
    local acls=""
    [[ "${KAFKA_AUTHORIZER:-1}" == 1 ]] && acls=" KAFKA_ACLS=1"
    echo "KAFKA_SSL_BOOTSTRAP=localhost:${p[0]} KAFKA_MTLS_BOOTSTRAP=localhost:${p[1]} KAFKA_SASL_SSL_BOOTSTRAP=localhost:${p[2]} KAFKA_SASL_PLAINTEXT_BOOTSTRAP=127.0.0.1:${p[3]} KAFKA_EXPIRED_BOOTSTRAP=localhost:${p[4]} KAFKA_WRONGHOST_BOOTSTRAP=localhost:${p[5]} KAFKA_REAUTH_BOOTSTRAP=127.0.0.1:${p[6]} KAFKA_PKI_DIR=$PKI_DIR${acls}" >"$SECURITY_ENV_FILE"
  fi
  echo "127.0.0.1:$port" >"$BOOTSTRAP_FILE"
  log "Kafka $KAFKA_VERSION ready at 127.0.0.1:$port (pid $pid) in $((SECONDS - t0)) s"
}

cmd_stop() {
  local pid
  if ! pid="$(running_pid)"; then
    rm -f "$PID_FILE" "$BOOTSTRAP_FILE"
    log "Kafka is not running"
    return 0
  fi
  log "stopping Kafka (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + KAFKA_STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      log "still running after ${KAFKA_STOP_TIMEOUT}s, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
      break
    fi
    sleep 0.5
  done
  rm -f "$PID_FILE" "$BOOTSTRAP_FILE" "$SECURITY_ENV_FILE"
  log "stopped"
}

cmd_status() {
  local pid
  if pid="$(running_pid)"; then
    echo "running: pid $pid, bootstrap $(cat "$BOOTSTRAP_FILE" 2>/dev/null || echo 'not ready'), version $(cat "$VERSION_FILE" 2>/dev/null || echo '?')"
    return 0
  fi
  echo "not running"
  return 1
}

cmd_env() {
  running_pid >/dev/null || die "Kafka is not running (run: scripts/kafka.sh start)"
  [[ -s "$BOOTSTRAP_FILE" ]] || die "Kafka is running but not ready yet ($BOOTSTRAP_FILE missing)"
  # One line, so that `eval "export $(scripts/kafka.sh env)"` exports every variable.
  echo "KAFKA_BOOTSTRAP=$(cat "$BOOTSTRAP_FILE")${SECURITY_ENV_FILE:+ $(cat "$SECURITY_ENV_FILE" 2>/dev/null)}"
}

cmd_run_class() {
  (($# >= 1)) || die "usage: scripts/kafka.sh run-class CLASS [ARGS...]"
  ensure_jars
  write_log4j_configs_if_missing
  java_tool "$@"
}

write_log4j_configs_if_missing() {
  [[ -f "$TOOLS_LOG4J" && -f "$BROKER_LOG4J" ]] || write_log4j_configs
}

# --- multi-node cluster (KAFKA_NODES >= 2) ------------------------------------------------------
# Node 1 is the KRaft controller (a standalone quorum) and a broker; nodes 2..N are brokers only.
# Each node has its own port, storage, logs and pid under target/kafka/cluster/node-ID/.

node_dir() { printf '%s/node-%s' "$CLUSTER_DIR" "$1"; }

# node_pid ID: prints the pid of cluster node ID and returns 0 if it is alive.
node_pid() {
  local dir pid
  dir="$(node_dir "$1")"
  [[ -f "$dir/kafka.pid" ]] || return 1
  pid="$(cat "$dir/kafka.pid" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  if [[ -r "/proc/$pid/cmdline" ]]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$dir/server.properties" || return 1
  fi
  printf '%s\n' "$pid"
}

# cluster_node_ids: the ids of the nodes that have a state directory, in order.
cluster_node_ids() {
  local d
  # An `if`, not `[[ ]] &&`: with no cluster the loop must still end with status 0, or
  # pipefail fails the caller.
  for d in "$CLUSTER_DIR"/node-*; do
    if [[ -d "$d" ]]; then printf '%s\n' "${d##*/node-}"; fi
  done | sort -n
}

cluster_running() {
  local id
  for id in $(cluster_node_ids); do
    node_pid "$id" >/dev/null && return 0
  done
  return 1
}

# write_node_properties ID PORT CONTROLLER_PORT NODES
write_node_properties() {
  local id="$1" port="$2" cport="$3" nodes="$4" dir file roles listeners irf
  dir="$(node_dir "$id")"
  file="$dir/server.properties"
  irf=$((nodes < 3 ? nodes : 3))
  if [[ "$id" == 1 ]]; then
    roles="broker,controller"
    listeners="PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport"
  else
    roles="broker"
    listeners="PLAINTEXT://127.0.0.1:$port"
  fi
  cat >"$file" <<PROPS
# Generated by scripts/kafka.sh for Kafka $KAFKA_VERSION (node $id of a $nodes-node test cluster).
# --- KRaft, loopback only: node 1 is the controller (and a broker), the others are brokers ---
process.roles=$roles
node.id=$id
# The controller quorum: node 1 alone (dynamic quorum, formatted --standalone).
controller.quorum.bootstrap.servers=127.0.0.1:$cport
listeners=$listeners
advertised.listeners=$listeners
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data

# --- several JVMs on a small machine ---
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
background.threads=2

# --- topics ---
num.partitions=1
auto.create.topics.enable=false
# Tests choose the replication factor of their topics.
default.replication.factor=1
# Tests move leaders themselves; the controller must not move them back on its own.
auto.leader.rebalance.enable=false

# --- internal topics: min(nodes, 3) replicas, writable with one in sync, one partition each ---
# With a replica on another node they stay available while one broker is stopped (stop-node).
offsets.topic.replication.factor=$irf
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=$irf
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=$irf
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=1
group.initial.rebalance.delay.ms=0

# --- broker liveness: a broker that died without a controlled shutdown is fenced in 3 s ---
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=3000
PROPS
  append_common_props "$file"
}

# launch_node ID: starts the JVM of cluster node ID in the background and records its pid.
launch_node() {
  local id="$1" dir pid
  dir="$(node_dir "$id")"
  mkdir -p "$dir/logs"
  # shellcheck disable=SC2086
  nohup "$JAVA" $KAFKA_CLUSTER_HEAP_OPTS -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:ParallelGCThreads=1 -XX:ConcGCThreads=1 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
    -Djava.awt.headless=true \
    -Dkafka.logs.dir="$dir/logs" -Dlog4j2.configurationFile="$BROKER_LOG4J" \
    -cp "$(classpath)" kafka.Kafka "$dir/server.properties" \
    </dev/null >>"$dir/logs/stdout.log" 2>&1 9>&- &   # 9>&-: the node must not inherit the lock
  pid=$!
  echo "$pid" >"$dir/kafka.pid"
}

# started_count ID: how often node ID logged that it started (its server.log survives restarts).
started_count() {
  local log
  log="$(node_dir "$1")/logs/server.log"
  [[ -f "$log" ]] || { echo 0; return; }
  grep -c "Kafka Server started" "$log" || true
}

# kill_node ID [SIGNAL]: signals node ID and waits up to KAFKA_STOP_TIMEOUT s, then SIGKILL.
kill_node() {
  local id="$1" signal="${2:-TERM}" pid dir
  dir="$(node_dir "$id")"
  if ! pid="$(node_pid "$id")"; then
    rm -f "$dir/kafka.pid"
    return 0
  fi
  log "stopping node $id (pid $pid)"
  kill "-$signal" "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + KAFKA_STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      log "node $id still running after ${KAFKA_STOP_TIMEOUT}s, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
      break
    fi
    sleep 0.5
  done
  rm -f "$dir/kafka.pid"
}

# wait_nodes_ready DEADLINE ID:BEFORE...: waits until each node ID logged one more start than
# BEFORE and listens on its port.
wait_nodes_ready() {
  local deadline="$1" spec id before port
  shift
  for spec in "$@"; do
    id="${spec%%:*}"
    before="${spec#*:}"
    port="$(sed -n 's#^listeners=PLAINTEXT://127\.0\.0\.1:\([0-9]*\).*#\1#p' "$(node_dir "$id")/server.properties")"
    until (($(started_count "$id") > before)) && port_in_use "$port"; do
      node_pid "$id" >/dev/null || fail_cluster "node $id exited during startup"
      ((SECONDS < deadline)) || fail_cluster "timed out waiting for node $id to start"
      sleep 0.5
    done
  done
}

fail_cluster() {
  log "$1"
  local id f
  for id in $(cluster_node_ids); do
    for f in "$(node_dir "$id")/logs/stdout.log" "$(node_dir "$id")/logs/server.log"; do
      [[ -s "$f" ]] && { echo "----- tail of $f -----" >&2; tail -n 30 "$f" >&2; }
    done
  done
  for id in $(cluster_node_ids); do
    kill_node "$id" KILL
  done
  rm -f "$CLUSTER_BOOTSTRAP_FILE"
  die "the $KAFKA_NODES-node Kafka $KAFKA_VERSION cluster did not come up (logs: $CLUSTER_DIR/node-*/logs)"
}

cmd_start_cluster() {
  local nodes="$KAFKA_NODES" id
  if cluster_running; then
    local running_version all=1
    running_version="$(cat "$CLUSTER_VERSION_FILE" 2>/dev/null || echo '?')"
    for id in $(seq 1 "$nodes"); do node_pid "$id" >/dev/null || all=0; done
    if [[ "$running_version" == "$KAFKA_VERSION" && "$all" == 1 && -s "$CLUSTER_BOOTSTRAP_FILE" \
          && "$(cluster_node_ids | wc -l)" == "$nodes" ]]; then
      log "$nodes-node Kafka $running_version cluster already running ($(cat "$CLUSTER_BOOTSTRAP_FILE"))"
      return 0
    fi
    die "a Kafka $running_version cluster of $(cluster_node_ids | wc -l) nodes is running but $nodes nodes of $KAFKA_VERSION were requested, or it is not complete; run 'scripts/kafka.sh stop' first"
  fi
  need "$JAVA" "install a JDK 17+, e.g. apt-get install openjdk-17-jre-headless"
  ensure_jars
  write_log4j_configs

  local t0=$SECONDS cport share_version="${KAFKA_SHARE_VERSION:-}" cluster_id
  local -a ports
  rm -rf "$CLUSTER_DIR"
  mkdir -p "$CLUSTER_DIR"
  read -r -a ports <<<"$(free_ports $((nodes + 1)))"
  cport="${ports[0]}"
  cluster_id="$(new_cluster_id)"
  if [[ -z "$share_version" ]] && ver_ge "$KAFKA_VERSION" 4.1.0 && ! ver_ge "$KAFKA_VERSION" 4.2.0; then
    share_version=1
  fi

  # Format every node's storage with the same cluster id, in parallel.
  local -a format_pids=()
  for id in $(seq 1 "$nodes"); do
    mkdir -p "$(node_dir "$id")/data" "$(node_dir "$id")/logs"
    write_node_properties "$id" "${ports[$id]}" "$cport" "$nodes"
    local -a format_args=(format -t "$cluster_id" -c "$(node_dir "$id")/server.properties")
    [[ "$id" == 1 ]] && format_args+=(--standalone)
    [[ -n "$share_version" ]] && format_args+=(--feature "share.version=$share_version")
    java_tool kafka.tools.StorageTool "${format_args[@]}" >"$(node_dir "$id")/logs/format.log" 2>&1 &
    format_pids+=($!)
  done
  for id in $(seq 1 "$nodes"); do
    if ! wait "${format_pids[$((id - 1))]}"; then
      cat "$(node_dir "$id")/logs/format.log" >&2
      die "formatting the storage of node $id failed"
    fi
  done

  local bootstrap="" ready=()
  for id in $(seq 1 "$nodes"); do
    bootstrap+="${bootstrap:+,}127.0.0.1:${ports[$id]}"
    launch_node "$id"
    ready+=("$id:0")
  done
  log "starting a $nodes-node Kafka $KAFKA_VERSION cluster at $bootstrap (controller 127.0.0.1:$cport)"
  local deadline=$((SECONDS + 2 * KAFKA_START_TIMEOUT))
  wait_nodes_ready "$deadline" "${ready[@]}"

  # Over the client protocol: share groups are on, and every broker is registered and unfenced.
  local features="" versions="" registered=0
  until features="$(java_tool org.apache.kafka.tools.FeatureCommand --bootstrap-server "$bootstrap" describe 2>&1)"; do
    ((SECONDS < deadline)) || fail_cluster "the cluster does not answer FeatureCommand describe: $features"
    sleep 1
  done
  if [[ "$share_version" != "0" ]] && ver_ge "$KAFKA_VERSION" 4.1.0; then
    local sv
    sv="$(sed -n 's/.*Feature: share\.version.*FinalizedVersionLevel: \([0-9][0-9]*\).*/\1/p' <<<"$features" | head -n1)"
    [[ -n "$sv" && "$sv" -ge 1 ]] || fail_cluster "share.version is not finalized >= 1, share groups are disabled"
  fi
  printf '%s\n' "$features" >"$CLUSTER_DIR/features.txt"
  until ((registered == nodes)); do
    versions="$(java_tool org.apache.kafka.tools.BrokerApiVersionsCommand --bootstrap-server "$bootstrap" 2>&1 || true)"
    registered="$(grep -cE '^127\.0\.0\.1:[0-9]+ \(id: [0-9]+' <<<"$versions" || true)"
    ((registered == nodes)) && break
    ((SECONDS < deadline)) || fail_cluster "only $registered of $nodes brokers are registered: $versions"
    sleep 1
  done

  echo "$KAFKA_VERSION" >"$CLUSTER_VERSION_FILE"
  echo "$bootstrap" >"$CLUSTER_BOOTSTRAP_FILE"
  log "$nodes-node Kafka $KAFKA_VERSION cluster ready at $bootstrap in $((SECONDS - t0)) s"
}

cmd_stop_cluster() {
  local ids id
  ids="$(cluster_node_ids)"
  [[ -n "$ids" ]] || return 0
  if ! cluster_running; then
    rm -f "$CLUSTER_BOOTSTRAP_FILE" "$CLUSTER_DIR"/node-*/kafka.pid
    return 0
  fi
  # Brokers first, together (their controlled shutdown needs the controller), then node 1.
  local -a stoppers=()
  for id in $ids; do
    [[ "$id" == 1 ]] && continue
    kill_node "$id" &
    stoppers+=($!)
  done
  for id in "${stoppers[@]}"; do wait "$id" || true; done
  kill_node 1
  rm -f "$CLUSTER_BOOTSTRAP_FILE"
  log "cluster stopped"
}

# node_arg ID: checks that ID names a broker node of the cluster that may be stopped and started.
node_arg() {
  [[ "${1:-}" =~ ^[0-9]+$ ]] || die "usage: scripts/kafka.sh stop-node|kill-node|start-node ID"
  [[ -d "$(node_dir "$1")" ]] || die "the cluster has no node $1 (nodes: $(cluster_node_ids | tr '\n' ' '))"
  [[ "$1" != 1 ]] || die "node 1 is the cluster's only controller; stop the whole cluster with 'stop'"
}

# cmd_stop_node ID [SIGNAL]: TERM (a controlled shutdown that moves its leaders first) or KILL.
cmd_stop_node() {
  node_arg "$@"
  node_pid "$1" >/dev/null || { log "node $1 is not running"; return 0; }
  kill_node "$1" "${2:-TERM}"
  log "node $1 stopped (SIG${2:-TERM})"
}

cmd_start_node() {
  node_arg "$@"
  local id="$1" t0=$SECONDS before
  node_pid 1 >/dev/null || die "the cluster's controller (node 1) is not running; run 'KAFKA_NODES=N scripts/kafka.sh start'"
  if node_pid "$id" >/dev/null; then
    log "node $id is already running"
    return 0
  fi
  before="$(started_count "$id")"
  launch_node "$id"
  wait_nodes_ready $((SECONDS + KAFKA_START_TIMEOUT)) "$id:$before"
  log "node $id started again in $((SECONDS - t0)) s"
}

cmd_status_cluster() {
  local ids id pid up=0 total=0
  ids="$(cluster_node_ids)"
  if [[ -z "$ids" ]] || ! cluster_running; then
    echo "cluster not running"
    return 1
  fi
  for id in $ids; do
    total=$((total + 1))
    if pid="$(node_pid "$id")"; then
      up=$((up + 1))
      echo "node $id: running, pid $pid"
    else
      echo "node $id: stopped"
    fi
  done
  echo "cluster: $up of $total nodes running, bootstrap $(cat "$CLUSTER_BOOTSTRAP_FILE" 2>/dev/null || echo 'not ready'), version $(cat "$CLUSTER_VERSION_FILE" 2>/dev/null || echo '?')"
  ((up == total))
}

cmd_env_cluster() {
  cluster_running || die "the Kafka cluster is not running (run: KAFKA_NODES=3 scripts/kafka.sh start)"
  [[ -s "$CLUSTER_BOOTSTRAP_FILE" ]] || die "the cluster is running but not ready yet ($CLUSTER_BOOTSTRAP_FILE missing)"
  local list
  list="$(cat "$CLUSTER_BOOTSTRAP_FILE")"
  # One line, so that `eval "export $(scripts/kafka.sh env)"` exports both.
  echo "KAFKA_BOOTSTRAP=$list KAFKA_MULTI_BOOTSTRAP=$list"
}

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
}

main() {
  local cmd="${1:-}"
  (($#)) && shift
  case "$cmd" in
    start)
      if ((KAFKA_NODES > 1)); then
        with_lock "$STATE_DIR/.lock" cmd_start_cluster
      else
        with_lock "$STATE_DIR/.lock" cmd_start
      fi ;;
    stop) with_lock "$STATE_DIR/.lock" cmd_stop; with_lock "$STATE_DIR/.lock" cmd_stop_cluster ;;
    stop-node) with_lock "$STATE_DIR/.lock" cmd_stop_node "${1:-}" TERM ;;
    kill-node) with_lock "$STATE_DIR/.lock" cmd_stop_node "${1:-}" KILL ;;
    start-node) with_lock "$STATE_DIR/.lock" cmd_start_node "$@" ;;
    status) if ((KAFKA_NODES > 1)); then cmd_status_cluster; else cmd_status; fi ;;
    env)
      if ((KAFKA_NODES > 1)) || { ! running_pid >/dev/null && cluster_running; }; then
        cmd_env_cluster
      else
        cmd_env
      fi ;;
    run-class) cmd_run_class "$@" ;;
    fetch) ensure_jars; log "jars in $LIB_DIR" ;;
    classpath) ensure_jars; classpath; echo ;;
    -h|--help|help) usage ;;
    *) usage; die "unknown command '${cmd}'" ;;
  esac
}

main "$@"
