#!/usr/bin/env bash
# toxiproxy.sh — a real Toxiproxy (network fault injection: latency, timeouts, cut connections)
# on 127.0.0.1, built from its Go module (github.com/Shopify/toxiproxy/v2, pinned by go.mod's
# `tool` line and go.sum here; no binary download) and cached like the dev control plane.
#
#   toxiproxy.sh build    build if go.mod/go.sum changed (cached; progress on stderr)
#   toxiproxy.sh path     build if needed; print the binary's path as the last stdout line
#   toxiproxy.sh up       build if needed, start, wait for the API; last stdout line = API URL
#   toxiproxy.sh down     stop (SIGTERM, wait, then SIGKILL)
#   toxiproxy.sh status   "running <url> pid <pid>" (exit 0) or "stopped" (exit 3)
#
# Proxies and toxics are made over its REST API (governor_tools.toxiproxy, the tests' fixture
# `toxiproxy`); the server starts with none.
#
# Environment (all optional):
#   GOVERNOR_TOXIPROXY_PORT      the REST API's port (default 8474, Toxiproxy's own)
#   GOVERNOR_TOXIPROXY_BIN_DIR   built binary (default ~/.cache/governor/toxiproxy/bin)
#   GOVERNOR_TOXIPROXY_HOME      pid and log  (default ~/.cache/governor/toxiproxy/run-<port>)
#   GOVERNOR_TOXIPROXY_START_TIMEOUT  seconds to wait for the API (default 30)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/governor/toxiproxy"
HOST=127.0.0.1
PORT="${GOVERNOR_TOXIPROXY_PORT:-8474}"
BIN_DIR="${GOVERNOR_TOXIPROXY_BIN_DIR:-$CACHE_ROOT/bin}"
RUN_DIR="${GOVERNOR_TOXIPROXY_HOME:-$CACHE_ROOT/run-$PORT}"
START_TIMEOUT="${GOVERNOR_TOXIPROXY_START_TIMEOUT:-30}"
PKG=github.com/Shopify/toxiproxy/v2/cmd/server
BIN="$BIN_DIR/toxiproxy-server"
STAMP_FILE="$BIN_DIR/toxiproxy-server.stamp"
BUILD_LOG="$BIN_DIR/build.log"
PIDFILE="$RUN_DIR/toxiproxy.pid"
LOG="$RUN_DIR/toxiproxy.log"
URL="http://$HOST:$PORT"
# shellcheck source=../lib/gobuild.sh
source "$HERE/../lib/gobuild.sh"
# shellcheck source=../lib/proc.sh
source "$HERE/../lib/proc.sh"
LOG_NAME=toxiproxy
# shellcheck source=../lib/log.sh
source "$HERE/../lib/log.sh"

version() { awk '$1=="github.com/Shopify/toxiproxy/v2" {print $2}' "$HERE/go.mod"; }

stamp() { (cd "$HERE" && cat go.mod go.sum) | sha256sum | cut -d' ' -f1; }

cmd_build() {
  go_is_built "$BIN" "$STAMP_FILE" "$(stamp)" && return 0
  need_go
  local v
  v="$(version)"
  log "building toxiproxy-server $v from its Go module into $BIN (log: $BUILD_LOG)"
  # The version `toxiproxy-server -version` and GET /version report; -s -w: no symbols.
  (cd "$HERE" && go_build_stamped toxiproxy-server "$BUILD_LOG" "$BIN" "$STAMP_FILE" "$(stamp)" "$PKG" \
    -buildvcs=false -trimpath -ldflags="-s -w -X github.com/Shopify/toxiproxy/v2.Version=${v#v}") ||
    die "build failed (full log: $BUILD_LOG)"
  log "built: $BIN ($("$BIN" -version 2>/dev/null | head -1 || echo '?'))"
}

our_pid() { pid_of "$PIDFILE" "toxiproxy-server -host $HOST -port $PORT"; }

# Ready = GET /version answers (no curl needed: bash's /dev/tcp).
api_ok() {
  port_open "$HOST" "$PORT" || return 1
  local reply
  reply="$(
    exec 3<>"/dev/tcp/$HOST/$PORT" || exit 1
    printf 'GET /version HTTP/1.0\r\nHost: %s\r\n\r\n' "$HOST:$PORT" >&3
    timeout 3 cat <&3
  )" 2>/dev/null || return 1
  [[ "$reply" == "HTTP/1."*" 200 "* ]]
}

cmd_up() {
  mkdir -p "$RUN_DIR"
  local pid
  if pid="$(our_pid)"; then
    api_ok && {
      log "already running (pid $pid)"
      echo "$URL"
      return 0
    }
  elif port_open "$HOST" "$PORT"; then
    die "port $PORT is in use by something else; set GOVERNOR_TOXIPROXY_PORT"
  else
    cmd_build
    [[ -f "$LOG" ]] && mv -f "$LOG" "$LOG.1"
    # setsid + nohup: the server outlives the shell (and the test session) that started it
    setsid nohup "$BIN" -host "$HOST" -port "$PORT" >>"$LOG" 2>&1 </dev/null 9>&- &
    pid=$!
    echo "$pid" >"$PIDFILE"
    log "started pid $pid, log $LOG"
  fi
  if wait_started "$pid" "$START_TIMEOUT" 0.2 20 toxiproxy-server api_ok; then
    echo "$URL"
    return 0
  fi
  die "toxiproxy-server did not answer on $URL within ${START_TIMEOUT}s (log: $LOG); still running as pid $pid"
}

cmd_down() {
  local pid
  if ! pid="$(our_pid)"; then
    rm -f "$PIDFILE"
    log "not running"
    return 0
  fi
  stop_pid "$pid" 10 || log "pid $pid still alive after 10s; killed"
  rm -f "$PIDFILE"
  log "stopped"
}

cmd_status() { report_status "$URL" api_ok; }

# One command at a time per server: concurrent `up`s wait for each other.
lock() {
  command -v flock >/dev/null 2>&1 || return 0
  mkdir -p "$RUN_DIR"
  exec 9>"$RUN_DIR/.lock"
  flock -w 600 9 || die "another toxiproxy.sh holds $RUN_DIR/.lock"
}

case "${1:-}" in
  build) cmd_build ;;
  path)
    cmd_build
    echo "$BIN"
    ;;
  up) lock; cmd_up ;;
  down) lock; cmd_down ;;
  status) cmd_status ;;
  *)
    echo "usage: $0 build|path|up|down|status" >&2
    exit 2
    ;;
esac
