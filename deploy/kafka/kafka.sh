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
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${GOVERNOR_CACHE:-$HOME/.cache/governor}/kafka"
LIB="$CACHE/lib"
HOST=127.0.0.1
PORT="${GOVERNOR_KAFKA_PORT:-9092}"
CPORT="${GOVERNOR_KAFKA_CONTROLLER_PORT:-9093}"
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
BOOTSTRAP="$HOST:$PORT"

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
# The pid in the pidfile, if that process is alive and is our broker (guards against pid reuse).
our_pid() {
  [[ -f "$PIDFILE" ]] || return 1
  local pid
  pid="$(cat "$PIDFILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$CONF" || return 1
  echo "$pid"
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# A Kafka Metadata (v4) request: ready when the broker lists at least one live broker and
# knows its controller. Exit 0 = ready.
metadata_ok() {
  command -v python3 >/dev/null 2>&1 || { port_open "$PORT"; return; }
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

# --- config -------------------------------------------------------------------------------------
write_config() {
  mkdir -p "$DATA"
  cat >"$CONF.tmp" <<EOF
# written by deploy/kafka/kafka.sh; edits are overwritten on the next 'up'
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$CPORT
listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CPORT
advertised.listeners=PLAINTEXT://$HOST:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
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
# governor creates its topics explicitly; auto-creation only helps ad-hoc tests and tools
auto.create.topics.enable=true
delete.topic.enable=true
# a dev/test broker: let the cleaner look at compacted topics often
log.cleaner.backoff.ms=1000
log.retention.check.interval.ms=30000
EOF
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
  java -Xmx256m -cp "$LIB/*" kafka.tools.StorageTool format -t "$cluster_id" -c "$CONF" \
    --ignore-formatted >>"$LOG" 2>&1 \
    || { tail -n 20 "$LOG" >&2; die "formatting KRaft storage failed (log: $LOG)"; }
}

# --- commands -----------------------------------------------------------------------------------
cmd_up() {
  mkdir -p "$INST"
  local pid
  if pid="$(our_pid)"; then
    if metadata_ok; then
      say "already running (pid $pid)"
      echo "$BOOTSTRAP"
      return 0
    fi
    say "pid $pid is running but not answering yet; waiting"
  elif port_open "$PORT"; then
    if metadata_ok; then
      say "a Kafka broker not started by this script already answers on $BOOTSTRAP; using it"
      echo "$BOOTSTRAP"
      return 0
    fi
    die "port $PORT is in use by something that is not a Kafka broker; set GOVERNOR_KAFKA_PORT"
  elif port_open "$CPORT"; then
    die "controller port $CPORT is in use; set GOVERNOR_KAFKA_CONTROLLER_PORT"
  else
    need_java
    resolve
    write_config
    format_storage
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
  local deadline=$((SECONDS + START_TIMEOUT))
  while ((SECONDS < deadline)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 30 "$LOG" >&2 || true
      rm -f "$PIDFILE"
      die "broker exited during start (log: $LOG)"
    fi
    if port_open "$PORT" && metadata_ok; then
      echo "$BOOTSTRAP"
      return 0
    fi
    sleep 0.2
  done
  tail -n 30 "$LOG" >&2 || true
  die "broker did not answer on $BOOTSTRAP within ${START_TIMEOUT}s (log: $LOG); still running as pid $pid"
}

cmd_down() {
  local pid
  if ! pid="$(our_pid)"; then
    rm -f "$PIDFILE"
    say "not running"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "pid $pid still alive after ${STOP_TIMEOUT}s; SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    rm -f "$JSA.$PORT.tmp"
  elif [[ -s "$JSA.$PORT.tmp" ]]; then
    mv -f "$JSA.$PORT.tmp" "$JSA"
  fi
  rm -f "$PIDFILE"
  say "stopped"
}

cmd_status() {
  local pid
  if pid="$(our_pid)" && metadata_ok; then
    echo "running $BOOTSTRAP pid $pid"
  elif [[ -n "${pid:-}" ]]; then
    echo "starting $BOOTSTRAP pid $pid"
  else
    echo "stopped"
    return 3
  fi
}

cmd_reset() {
  cmd_down
  rm -rf "$DATA" "$INST/cluster.id"
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
  *) echo "usage: $0 up|down|status|resolve|reset|destroy|logs" >&2; exit 2 ;;
esac
