#!/usr/bin/env bash
# A real Apache Kafka broker (KRaft, single node: broker+controller) on 127.0.0.1, no Docker.
#
#   bash deploy/kafka/kafka.sh up       resolve jars (once), format storage (once), start, wait,
#                                       print the bootstrap address as the last stdout line
#   bash deploy/kafka/kafka.sh down     SIGTERM, wait, SIGKILL after a bound
#   bash deploy/kafka/kafka.sh status   "running <bootstrap> pid <pid>" (exit 0) or "stopped" (exit 3)
#   bash deploy/kafka/kafka.sh resolve  only resolve the jars from Maven Central
#   bash deploy/kafka/kafka.sh reset    down, then delete this broker's data (topics, offsets)
#   bash deploy/kafka/kafka.sh destroy  down, then delete this broker's folder (data, log, config)
#   bash deploy/kafka/kafka.sh logs     print the path of the broker's log file
#   bash deploy/kafka/kafka.sh clients  print the folder of the client configs (secure broker)
#   bash deploy/kafka/kafka.sh run      the broker in the foreground (a container's command)
#
#   --secure (after the command; or GOVERNOR_KAFKA_SECURITY=sasl_ssl): the same commands for a
#   second, secure broker on its own ports: SASL_SSL with SCRAM-SHA-512 over TLS (a throwaway CA
#   and a broker certificate for IP 127.0.0.1 and localhost, made with keytool), the KRaft
#   StandardAuthorizer with allow.everyone.if.no.acl.found=false and `admin` its only super user,
#   one SCRAM user per governor principal (governor.events.PRINCIPALS). `up --secure` leaves it
#   ready: governor's topics and DLQs created and every ACL of the topic table in place (as admin,
#   `python -m governor.kafka_provision`), and writes for each principal
#   broker-<port>/clients/<principal>.properties (Java clients), <principal>.librdkafka.conf
#   (kcat -F, confluent-kafka) and <principal>.password, all mode 0600, beside ca.pem.
#
# Environment (all optional):
#   GOVERNOR_CACHE                  cache root (default ~/.cache/governor); jars in kafka/lib,
#                                   one folder per broker port in kafka/broker-<port> (data, log, pid)
#   GOVERNOR_KAFKA_PORT             client port (default 9092)
#   GOVERNOR_KAFKA_CONTROLLER_PORT  KRaft controller port (default 9093)
#   GOVERNOR_KAFKA_VERSION          org.apache.kafka:kafka_2.13 version (default 4.1.2)
#   GOVERNOR_KAFKA_HEAP             max heap (default 512m)
#   GOVERNOR_KAFKA_START_TIMEOUT    seconds to wait for the broker to answer (default 90)
#   GOVERNOR_KAFKA_STOP_TIMEOUT     seconds to wait after SIGTERM before SIGKILL (default 60)
#   GOVERNOR_KAFKA_SECURITY         sasl_ssl: as --secure; plaintext (default): the local play broker
#   GOVERNOR_KAFKA_SECURE_PORT      the secure broker's client port (default 9094)
#   GOVERNOR_KAFKA_SECURE_CONTROLLER_PORT  its KRaft controller port (default 9095)
#   GOVERNOR_KAFKA_PROXIED_PORT     with GOVERNOR_KAFKA_PROXY_PORT (plaintext broker only): a second
#   GOVERNOR_KAFKA_PROXY_PORT       listener, PROXIED, on 127.0.0.1:PROXIED_PORT that advertises
#                                   127.0.0.1:PROXY_PORT, where a Toxiproxy proxy forwards to
#                                   PROXIED_PORT (deploy/toxiproxy). Kafka clients reconnect to the
#                                   advertised address of the listener they bootstrapped on, so
#                                   clients bootstrapped at PROXY_PORT stay behind the proxy.
#                                   Unset (default): no such listener
#   GOVERNOR_KAFKA_LIB              Kafka's jars, if present already (no Maven resolve)
#   GOVERNOR_KAFKA_LISTEN_HOST      the secure listener's address (default 127.0.0.1)
#   GOVERNOR_KAFKA_ADVERTISED_HOST  the host clients use, also in the certificate (default 127.0.0.1)
#   GOVERNOR_PYTHON                 the Python with governor installed, for provisioning (default:
#                                   the repo's .venv, else `uv run python`)
set -euo pipefail

SECURE=0
ARGS=()
for arg in "$@"; do
  if [[ "$arg" == "--secure" ]]; then SECURE=1; else ARGS+=("$arg"); fi
done
set -- "${ARGS[@]+"${ARGS[@]}"}"
case "${GOVERNOR_KAFKA_SECURITY:-plaintext}" in
  sasl_ssl | SASL_SSL) SECURE=1 ;;
  plaintext | PLAINTEXT) ;;
  *) echo "kafka.sh: GOVERNOR_KAFKA_SECURITY must be plaintext or sasl_ssl" >&2; exit 2 ;;
esac

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${GOVERNOR_CACHE:-$HOME/.cache/governor}/kafka"
LIB="${GOVERNOR_KAFKA_LIB:-$CACHE/lib}"
HOST=127.0.0.1
# Where clients reach the secure broker (a container: 0.0.0.0 and its service name); the
# certificate names this host too.
LISTEN_HOST="${GOVERNOR_KAFKA_LISTEN_HOST:-$HOST}"
ADVERTISED_HOST="${GOVERNOR_KAFKA_ADVERTISED_HOST:-$HOST}"
if ((SECURE)); then
  PORT="${GOVERNOR_KAFKA_SECURE_PORT:-9094}"
  CPORT="${GOVERNOR_KAFKA_SECURE_CONTROLLER_PORT:-9095}"
else
  PORT="${GOVERNOR_KAFKA_PORT:-9092}"
  CPORT="${GOVERNOR_KAFKA_CONTROLLER_PORT:-9093}"
fi
PROXIED_PORT="${GOVERNOR_KAFKA_PROXIED_PORT:-}"
PROXY_PORT="${GOVERNOR_KAFKA_PROXY_PORT:-}"
if [[ -n "$PROXIED_PORT" || -n "$PROXY_PORT" ]]; then
  [[ "$PROXIED_PORT" =~ ^[0-9]+$ && "$PROXY_PORT" =~ ^[0-9]+$ ]] || {
    echo "kafka.sh: set both GOVERNOR_KAFKA_PROXIED_PORT and GOVERNOR_KAFKA_PROXY_PORT (ports)" >&2
    exit 2
  }
  if ((SECURE)); then
    echo "kafka.sh: the proxied listener is for the plaintext broker only" >&2
    exit 2
  fi
fi
VERSION="${GOVERNOR_KAFKA_VERSION:-4.1.2}"
HEAP="${GOVERNOR_KAFKA_HEAP:-512m}"
START_TIMEOUT="${GOVERNOR_KAFKA_START_TIMEOUT:-90}"
STOP_TIMEOUT="${GOVERNOR_KAFKA_STOP_TIMEOUT:-60}"
INST="$CACHE/broker-$PORT"
DATA="$INST/data"
CONF="$INST/server.properties"
LOG="$INST/broker.log"
PIDFILE="$INST/broker.pid"
# AppCDS: the first broker run dumps the classes it loaded at exit (on `down`); later starts map
# them (about half the JVM start time here). A stale or broken archive is ignored by the JVM.
JSA="$CACHE/kafka-classes.jsa"
BOOTSTRAP="$ADVERTISED_HOST:$PORT"
SECRETS="$INST/secrets"
CLIENTS="$INST/clients"
# governor.events.PRINCIPALS (a unit test keeps the two lists equal)
PRINCIPALS="collector cluster-collector aggregator decider actuator admin viewer metrics-producer metrics-adapter"

die() { echo "kafka.sh: $*" >&2; exit 1; }
say() { echo "kafka.sh: $*" >&2; }

need_java() {
  command -v java >/dev/null 2>&1 \
    || die "java not found: install Java 17+ (apt-get install openjdk-17-jre-headless maven)"
  local v
  v="$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)"
  [[ -n "$v" && "$v" -ge 17 ]] \
    || die "Kafka 4 needs Java 17+, found '${v:-unknown}': apt-get install openjdk-17-jre-headless"
}

need_mvn() {
  command -v mvn >/dev/null 2>&1 \
    || die "mvn not found: install Maven (apt-get install openjdk-17-jre-headless maven)"
}

# --- jars -------------------------------------------------------------------------------------
resolve() {
  if [[ -n "${GOVERNOR_KAFKA_LIB:-}" ]]; then
    return 0  # jars given (the apache/kafka image's /opt/kafka/libs)
  fi
  if [[ -f "$LIB/.resolved" && "$(cat "$LIB/.resolved")" == "$VERSION" ]]; then
    return 0
  fi
  need_java
  need_mvn
  mkdir -p "$CACHE"
  # one resolver per cache: brokers on other ports may be starting from $LIB
  if command -v flock >/dev/null 2>&1; then
    exec 8>"$CACHE/.resolve.lock"
    flock -w 1200 8 || die "another kafka.sh is resolving into $LIB"
    if [[ -f "$LIB/.resolved" && "$(cat "$LIB/.resolved")" == "$VERSION" ]]; then
      exec 8>&-
      return 0
    fi
  fi
  local tmp="$CACHE/lib.tmp.$$"
  rm -rf "$tmp"
  say "resolving org.apache.kafka:kafka_2.13:$VERSION from Maven Central into $LIB"
  if ! mvn -B -q -f "$HERE/pom.xml" -Dkafka.version="$VERSION" \
      dependency:copy-dependencies -DoutputDirectory="$tmp" >"$CACHE/resolve.log" 2>&1; then
    tail -n 30 "$CACHE/resolve.log" >&2
    rm -rf "$tmp"
    die "could not resolve Kafka $VERSION with mvn (log: $CACHE/resolve.log)"
  fi
  echo "$VERSION" >"$tmp/.resolved"
  rm -rf "$LIB" "$JSA" "$JSA".*.tmp
  mv "$tmp" "$LIB"
  exec 8>&- || true
}

# --- liveness -----------------------------------------------------------------------------------
# shellcheck source=../lib/proc.sh
source "$HERE/../lib/proc.sh"

our_pid() { pid_of "$PIDFILE" "$CONF"; } # alive, and our broker (guards against pid reuse)

# A Kafka Metadata (v4) request: ready when the broker lists at least one live broker and
# knows its controller. Exit 0 = ready.
metadata_ok() {
  if ((SECURE)); then secure_ready; return; fi
  command -v python3 >/dev/null 2>&1 || { port_open "$HOST" "$PORT"; return; }
  python3 - "$HOST" "$PORT" <<'PY'
import socket, struct, sys
host, port = sys.argv[1], int(sys.argv[2])
try:
    s = socket.create_connection((host, port), timeout=2)
    s.settimeout(3)
    cid = b"governor-kafka-sh"
    # header v1: api_key=3 (Metadata), api_version=4, correlation_id, client_id
    # body v4: topics=null (-1), allow_auto_topic_creation=false
    body = struct.pack(">hhih", 3, 4, 7, len(cid)) + cid + struct.pack(">ib", -1, 0)
    s.sendall(struct.pack(">i", len(body)) + body)
    def read(n):
        b = b""
        while len(b) < n:
            c = s.recv(n - len(b))
            if not c:
                raise EOFError
            b += c
        return b
    (size,) = struct.unpack(">i", read(4))
    buf = read(size)
    corr, _throttle, nbrokers = struct.unpack_from(">iii", buf, 0)
    off = 12
    for _ in range(nbrokers):
        off += 4
        (hl,) = struct.unpack_from(">h", buf, off); off += 2 + hl + 4
        (rl,) = struct.unpack_from(">h", buf, off); off += 2 + max(rl, 0)
    (cl,) = struct.unpack_from(">h", buf, off); off += 2 + max(cl, 0)
    (controller,) = struct.unpack_from(">i", buf, off)
    sys.exit(0 if corr == 7 and nbrokers >= 1 and controller >= 0 else 1)
except Exception:
    sys.exit(1)
PY
}

# `up`'s readiness: the port accepts connections and the Metadata request answers.
broker_answers() { port_open "$HOST" "$PORT" && metadata_ok; }

# --- the secure broker: certificates, users, client configs -----------------------------------
PY_ARGS=()
python_cmd() {
  if [[ -n "${GOVERNOR_PYTHON:-}" ]]; then
    PY_ARGS=("$GOVERNOR_PYTHON")
  elif [[ -x "$HERE/../../.venv/bin/python" ]]; then
    PY_ARGS=("$HERE/../../.venv/bin/python")
  else
    command -v uv >/dev/null 2>&1 \
      || die "no Python with governor installed: set GOVERNOR_PYTHON or run make setup"
    PY_ARGS=(uv run --frozen --project "$HERE/../.." python)
  fi
}

# Ready = admin authenticates over SASL_SSL (our CA) and the broker lists its metadata.
secure_ready() {
  port_open "$HOST" "$PORT" || return 1
  [[ -f "$CLIENTS/admin.librdkafka.conf" ]] || return 1
  python_cmd
  "${PY_ARGS[@]}" -m governor.kafka_provision ping --config "$CLIENTS/admin.librdkafka.conf" \
    >/dev/null 2>&1
}

password_of() { sed -n "s/^$1=//p" "$SECRETS/passwords"; }

random_secret() { head -c 48 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | cut -c1-32; }

make_secrets() {
  mkdir -p "$SECRETS"
  chmod 700 "$SECRETS"
  if [[ ! -f "$SECRETS/passwords" ]]; then
    local p
    (
      umask 077
      for p in $PRINCIPALS keystore; do echo "$p=$(random_secret)"; done >"$SECRETS/passwords.tmp"
    )
    mv "$SECRETS/passwords.tmp" "$SECRETS/passwords"
  fi
  local q
  for q in $PRINCIPALS; do # a principal added since these secrets were made
    [[ -n "$(password_of "$q")" ]] && continue
    # SCRAM users are made when the storage is formatted: a formatted broker cannot get one here.
    [[ -f "$DATA/meta.properties" ]] \
      && die "principal $q is new since $DATA was formatted: kafka.sh reset --secure, then up --secure"
    (umask 077 && echo "$q=$(random_secret)" >>"$SECRETS/passwords")
  done
  [[ -f "$SECRETS/broker.p12" && -f "$SECRETS/truststore.p12" && -f "$SECRETS/ca.pem" ]] \
    && return 0
  command -v keytool >/dev/null 2>&1 || die "keytool not found (it comes with the JDK/JRE)"
  local ks san
  ks="$(password_of keystore)"
  san="SAN=IP:$HOST,DNS:localhost"
  [[ "$ADVERTISED_HOST" =~ ^[0-9.]+$ ]] || san="$san,DNS:$ADVERTISED_HOST"
  kt() { keytool -J-Xmx64m "$@" >>"$SECRETS/keytool.log" 2>&1; }
  rm -f "$SECRETS"/*.p12 "$SECRETS"/*.pem "$SECRETS"/*.csr
  say "making a throwaway CA and a broker certificate ($san) in $SECRETS"
  kt -genkeypair -alias ca -keyalg RSA -keysize 2048 -validity 3650 -dname "CN=governor dev CA" \
    -ext bc:c -ext KU=keyCertSign,cRLSign -keystore "$SECRETS/ca.p12" -storetype PKCS12 \
    -storepass "$ks" || die "keytool: CA (log: $SECRETS/keytool.log)"
  kt -exportcert -rfc -alias ca -keystore "$SECRETS/ca.p12" -storepass "$ks" \
    -file "$SECRETS/ca.pem" || die "keytool: export the CA"
  kt -genkeypair -alias broker -keyalg RSA -keysize 2048 -validity 825 -dname "CN=localhost" \
    -ext "$san" -keystore "$SECRETS/broker.p12" -storetype PKCS12 -storepass "$ks" \
    || die "keytool: broker key"
  kt -certreq -alias broker -keystore "$SECRETS/broker.p12" -storepass "$ks" \
    -file "$SECRETS/broker.csr" || die "keytool: broker CSR"
  kt -gencert -rfc -alias ca -keystore "$SECRETS/ca.p12" -storepass "$ks" -validity 825 \
    -ext "$san" -ext KU=digitalSignature,keyEncipherment -ext EKU=serverAuth,clientAuth \
    -infile "$SECRETS/broker.csr" -outfile "$SECRETS/broker.pem" \
    || die "keytool: sign the broker certificate"
  kt -importcert -noprompt -alias ca -file "$SECRETS/ca.pem" -keystore "$SECRETS/broker.p12" \
    -storepass "$ks" || die "keytool: CA into the keystore"
  kt -importcert -noprompt -alias broker -file "$SECRETS/broker.pem" \
    -keystore "$SECRETS/broker.p12" -storepass "$ks" || die "keytool: chain into the keystore"
  kt -importcert -noprompt -alias ca -file "$SECRETS/ca.pem" -keystore "$SECRETS/truststore.p12" \
    -storetype PKCS12 -storepass "$ks" || die "keytool: truststore"
  chmod 600 "$SECRETS"/*
}

write_clients() {
  mkdir -p "$CLIENTS"
  chmod 700 "$CLIENTS"
  cp "$SECRETS/ca.pem" "$CLIENTS/ca.pem"
  local p pw
  (
    umask 077
    for p in $PRINCIPALS; do
      pw="$(password_of "$p")"
      printf '%s' "$pw" >"$CLIENTS/$p.password"
      cat >"$CLIENTS/$p.properties" <<EOF
# $p on the secure governor broker (Java clients: --command-config, --producer.config)
bootstrap.servers=$BOOTSTRAP
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$p" password="$pw";
ssl.truststore.type=PEM
ssl.truststore.location=$CLIENTS/ca.pem
EOF
      cat >"$CLIENTS/$p.librdkafka.conf" <<EOF
# $p on the secure governor broker (kcat -F FILE, confluent-kafka)
bootstrap.servers=$BOOTSTRAP
security.protocol=SASL_SSL
sasl.mechanisms=SCRAM-SHA-512
sasl.username=$p
sasl.password=$pw
ssl.ca.location=$CLIENTS/ca.pem
EOF
    done
  )
  chmod 600 "$CLIENTS"/*
}

scram_args() {
  local p
  for p in $PRINCIPALS; do
    printf -- '--add-scram\nSCRAM-SHA-512=[name=%s,password=%s]\n' "$p" "$(password_of "$p")"
  done
}

provision() {
  python_cmd
  "${PY_ARGS[@]}" -m governor.kafka_provision apply --config "$CLIENTS/admin.librdkafka.conf" \
    >"$INST/provision.log" 2>&1 || {
    tail -n 20 "$INST/provision.log" >&2
    die "provisioning topics and ACLs failed (log: $INST/provision.log)"
  }
  say "$(tail -n 1 "$INST/provision.log")"
  say "client configs for each principal in $CLIENTS: <principal>.librdkafka.conf (kcat -F)," \
    "<principal>.properties, <principal>.password; CA $CLIENTS/ca.pem"
}

# --- config -------------------------------------------------------------------------------------
# The plaintext broker: one PLAINTEXT listener; topics may appear when a client asks for them.
# With PROXIED_PORT/PROXY_PORT also a PROXIED listener advertised at the Toxiproxy port.
plaintext_listeners() {
  local listen="" advertised="" protocols=""
  if [[ -n "$PROXIED_PORT" ]]; then
    listen=",PROXIED://$HOST:$PROXIED_PORT"
    advertised=",PROXIED://$HOST:$PROXY_PORT"
    protocols=",PROXIED:PLAINTEXT"
  fi
  cat <<EOF
listeners=PLAINTEXT://$HOST:$PORT$listen,CONTROLLER://$HOST:$CPORT
advertised.listeners=PLAINTEXT://$HOST:$PORT$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT$protocols
# governor creates its topics explicitly; auto-creation only helps ad-hoc tests and tools
auto.create.topics.enable=true
EOF
}

# The secure broker: clients on SASL_SSL (SCRAM-SHA-512); the controller listener stays on
# loopback with SASL PLAIN for admin alone (SCRAM credentials live in the metadata the controller
# serves, so they cannot authenticate the controller itself).
secure_listeners() {
  local ks admin
  ks="$(password_of keystore)"
  admin="$(password_of admin)"
  cat <<EOF
listeners=SASL_SSL://$LISTEN_HOST:$PORT,CONTROLLER://$HOST:$CPORT
advertised.listeners=SASL_SSL://$ADVERTISED_HOST:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=SASL_SSL
listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$admin" user_admin="$admin";
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$admin";
ssl.keystore.type=PKCS12
ssl.keystore.location=$SECRETS/broker.p12
ssl.keystore.password=$ks
ssl.key.password=$ks
ssl.truststore.type=PKCS12
ssl.truststore.location=$SECRETS/truststore.p12
ssl.truststore.password=$ks
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin
allow.everyone.if.no.acl.found=false
# admin creates every topic (kafka_provision): nothing appears because a client asked for it
auto.create.topics.enable=false
EOF
}

# One broker config for both modes: the mode's listeners and security, the rest shared.
write_config() {
  mkdir -p "$DATA"
  local flag=""
  if ((SECURE)); then flag=" --secure"; fi
  (
    umask 077 # the secure config holds the keystore's and admin's passwords
    {
      echo "# written by deploy/kafka/kafka.sh$flag; edits are overwritten on the next 'up'"
      cat <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$CPORT
EOF
      if ((SECURE)); then secure_listeners; else plaintext_listeners; fi
      cat <<EOF
log.dirs=$DATA
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=8
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
delete.topic.enable=true
# a dev/test broker: let the cleaner look at compacted topics often
log.cleaner.backoff.ms=1000
log.retention.check.interval.ms=30000
EOF
    } >"$CONF.tmp"
  )
  mv "$CONF.tmp" "$CONF"
}

format_storage() {
  [[ -f "$DATA/meta.properties" ]] && return 0
  local cluster_id
  if [[ -f "$INST/cluster.id" ]]; then
    cluster_id="$(cat "$INST/cluster.id")"
  else
    # 16 random bytes, base64url without padding: the format Kafka's random-uuid prints. Like
    # Kafka's Uuid.randomUuid, never one starting with '-': the storage tool would take it for
    # an option ("argument --cluster-id/-t: expected one argument"), once in 64 formats.
    cluster_id=-
    while [[ "$cluster_id" == -* ]]; do
      cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n' | cut -c1-22)"
    done
    echo "$cluster_id" >"$INST/cluster.id"
  fi
  local scram=()
  if ((SECURE)); then mapfile -t scram < <(scram_args); fi
  java -Xmx256m -cp "$LIB/*" kafka.tools.StorageTool format -t "$cluster_id" -c "$CONF" \
    --ignore-formatted "${scram[@]+"${scram[@]}"}" >>"$LOG" 2>&1 \
    || { tail -n 20 "$LOG" >&2; die "formatting KRaft storage failed (log: $LOG)"; }
}

# What `up` and `run` need before the JVM: Kafka's jars, and for the secure broker its secrets
# and each principal's client configs, then the broker config and formatted storage.
prepare() {
  need_java
  resolve
  if ((SECURE)); then
    [[ -f "$DATA/meta.properties" && ! -f "$SECRETS/passwords" ]] \
      && die "$DATA holds a secure broker whose passwords are gone: kafka.sh reset --secure"
    make_secrets
    write_clients
  fi
  write_config
  format_storage
}

# --- commands -----------------------------------------------------------------------------------
cmd_up() {
  mkdir -p "$INST"
  local pid
  if pid="$(our_pid)"; then
    if metadata_ok; then
      say "already running (pid $pid)"
      if ((SECURE)); then provision; fi
      echo "$BOOTSTRAP"
      return 0
    fi
    say "pid $pid is running but not answering yet; waiting"
  elif port_open "$HOST" "$PORT"; then
    if ((!SECURE)) && metadata_ok; then
      say "a Kafka broker not started by this script already answers on $BOOTSTRAP; using it"
      echo "$BOOTSTRAP"
      return 0
    fi
    die "port $PORT is in use by something that is not a Kafka broker; set GOVERNOR_KAFKA_PORT"
  elif port_open "$HOST" "$CPORT"; then
    die "controller port $CPORT is in use; set GOVERNOR_KAFKA_CONTROLLER_PORT"
  else
    prepare
    [[ -f "$LOG" ]] && mv -f "$LOG" "$LOG.1"
    local cds
    if [[ -s "$JSA" ]]; then
      cds="-XX:SharedArchiveFile=$JSA"
    else
      rm -f "$JSA.$PORT.tmp"
      cds="-XX:ArchiveClassesAtExit=$JSA.$PORT.tmp"
    fi
    # setsid + nohup: the broker outlives the shell (and the test session) that started it
    setsid nohup java "-Xmx$HEAP" "-Xms$HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
      "$cds" -Xlog:cds=off -Xlog:cds+dynamic=off \
      -Djava.awt.headless=true \
      -Dorg.slf4j.simpleLogger.showDateTime=true \
      -Dorg.slf4j.simpleLogger.dateTimeFormat="yyyy-MM-dd'T'HH:mm:ss.SSSZ" \
      -Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients=warn \
      -cp "$LIB/*" kafka.Kafka "$CONF" >>"$LOG" 2>&1 </dev/null 8>&- 9>&- &
    pid=$!
    echo "$pid" >"$PIDFILE"
    say "started pid $pid, log $LOG"
  fi
  if wait_started "$pid" "$START_TIMEOUT" 0.5 30 broker broker_answers; then
    if ((SECURE)); then provision; fi
    echo "$BOOTSTRAP"
    return 0
  fi
  tail -n 30 "$LOG" >&2 || true
  die "broker did not answer on $BOOTSTRAP within ${START_TIMEOUT}s (log: $LOG); still running as pid $pid"
}

# In the foreground, for a container (compose.yaml): secrets, config and storage as `up` makes
# them, then the broker replaces this shell. Provisioning is a separate one-shot there.
cmd_run() {
  prepare
  exec java "-Xmx$HEAP" "-Xms$HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -Djava.awt.headless=true -cp "$LIB/*" kafka.Kafka "$CONF"
}

cmd_down() {
  local pid
  if ! pid="$(our_pid)"; then
    rm -f "$PIDFILE"
    say "not running"
    return 0
  fi
  if ! stop_pid "$pid" "$STOP_TIMEOUT"; then
    say "pid $pid still alive after ${STOP_TIMEOUT}s: killed"
    rm -f "$JSA.$PORT.tmp"
  elif [[ -s "$JSA.$PORT.tmp" ]]; then
    mv -f "$JSA.$PORT.tmp" "$JSA"
  fi
  rm -f "$PIDFILE"
  say "stopped"
}

cmd_status() { report_status "$BOOTSTRAP" metadata_ok; }

cmd_reset() {
  cmd_down
  rm -rf "$DATA" "$INST/cluster.id" "$SECRETS" "$CLIENTS"
  say "deleted $DATA"
}

cmd_destroy() {
  cmd_down
  rm -rf "$INST"
  say "deleted $INST"
}

# One command at a time per broker: concurrent `up`s (several test sessions, make and the CLI)
# wait for each other instead of racing to start two JVMs on one data directory. The broker
# itself does not inherit the lock (9>&- above).
lock() {
  command -v flock >/dev/null 2>&1 || return 0
  mkdir -p "$INST"
  exec 9>"$INST/.lock"
  flock -w $((START_TIMEOUT + STOP_TIMEOUT + 600)) 9 || die "another kafka.sh holds $INST/.lock"
}

case "${1:-}" in
  up) lock; cmd_up ;;
  down) lock; cmd_down ;;
  status) cmd_status ;;
  resolve) resolve; echo "$LIB" ;;
  reset) lock; cmd_reset ;;
  destroy) lock; cmd_destroy ;;
  logs) echo "$LOG" ;;
  clients) echo "$CLIENTS" ;;
  run) mkdir -p "$INST"; cmd_run ;;
  *) echo "usage: $0 up|down|status|resolve|reset|destroy|logs|clients [--secure]" >&2; exit 2 ;;
esac
