#!/usr/bin/env bash
# devcluster.sh — a real Kubernetes control plane (embedded etcd + kube-apiserver, one
# process) on 127.0.0.1 for governor's tests and local development. See README.md.
#
#   devcluster.sh build       build the binary if go.mod/go.sum/main.go changed (cached)
#   devcluster.sh up          build if needed, start, wait for /readyz; last stdout line = kubeconfig path
#   devcluster.sh down        stop (SIGTERM, wait, then SIGKILL)
#   devcluster.sh status      running/stopped, URL, kubeconfig; exit 0 only if ready
#   devcluster.sh kubeconfig  print the admin kubeconfig path (exit 1 if not running)
#   devcluster.sh reset       down, then delete the state dir (etcd data, certs, tokens)
#
# Environment:
#   GOVERNOR_DEVCLUSTER_HOME           state/data/logs   (default ~/.cache/governor/devcluster/run)
#   GOVERNOR_DEVCLUSTER_BIN_DIR        built binary      (default ~/.cache/governor/devcluster/bin)
#   GOVERNOR_DEVCLUSTER_READY_TIMEOUT  seconds to wait for /readyz (default 120)
#   GOVERNOR_DEVCLUSTER_V              kube-apiserver log verbosity (default 1)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/governor/devcluster"
BIN_DIR="${GOVERNOR_DEVCLUSTER_BIN_DIR:-$CACHE_ROOT/bin}"
RUN_DIR="${GOVERNOR_DEVCLUSTER_HOME:-$CACHE_ROOT/run}"
READY_TIMEOUT="${GOVERNOR_DEVCLUSTER_READY_TIMEOUT:-120}"
VERBOSITY="${GOVERNOR_DEVCLUSTER_V:-1}"

BIN="$BIN_DIR/devcluster"
STAMP_FILE="$BIN_DIR/devcluster.stamp"
BUILD_LOG="$BIN_DIR/build.log"
PIDFILE="$RUN_DIR/devcluster.pid"
LOG="$RUN_DIR/devcluster.log"
ADMIN_KUBECONFIG="$RUN_DIR/admin.kubeconfig"

# Measured on a 2-core machine with Go 1.26 (README.md): a cold build puts ~0.6 GiB in the
# module cache, ~2.2 GiB in the build cache and writes a 106 MiB binary; plus ~1 GiB margin.
NEED_MB_COLD=4000 # module cache empty
NEED_MB_WARM=3300 # modules already downloaded, build cache empty

# shellcheck source=../lib/gobuild.sh
source "$HERE/../lib/gobuild.sh"

log() { echo "devcluster: $*" >&2; }
die() {
  echo "devcluster: error: $*" >&2
  exit 1
}

k8s_version() { awk '$1=="k8s.io/kubernetes" {print $2}' "$HERE/go.mod"; }

ldflags() { # strip symbols; stamp the version the API server reports (/version, kubectl version)
  local v minor
  v="$(k8s_version)"
  minor="${v#v*.}"
  minor="${minor%%.*}"
  local pkg=k8s.io/component-base/version
  echo "-s -w -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
}

stamp() { # what the binary is built from: go.mod, go.sum, main.go (+ the link flags)
  { (cd "$HERE" && cat go.mod go.sum main.go) && ldflags; } | sha256sum | cut -d' ' -f1
}

need_go() {
  command -v go >/dev/null 2>&1 ||
    die "go not found: install Go ≥ 1.24 (https://go.dev/dl or apt-get install golang); Go < 1.26 fetches the go1.26 toolchain itself (GOTOOLCHAIN=auto)"
  local v
  v="$(go env GOVERSION 2>/dev/null || true)" # e.g. go1.26.8; empty for Go < 1.14
  v="${v#go}"
  local major="${v%%.*}" rest="${v#*.}"
  local minor="${rest%%.*}"
  if [[ -z "$v" || "$major" != 1 || ! "$minor" =~ ^[0-9]+$ || "$minor" -lt 21 ]]; then
    die "go ${v:-(unknown version)} is too old: install Go ≥ 1.24 (https://go.dev/dl); Debian bookworm's golang (1.19) cannot build this"
  fi
}

free_mb() { # free MiB on the filesystem holding $1 (or its closest existing parent)
  local d="$1"
  while [[ ! -e "$d" ]]; do d="$(dirname "$d")"; done
  df -Pk "$d" | awk 'NR==2 {print int($4/1024)}'
}

check_disk() {
  local modcache gocache need free
  modcache="$(go env GOMODCACHE)"
  gocache="$(go env GOCACHE)"
  if [[ -d "$modcache/k8s.io/kubernetes@$(k8s_version)" ]]; then need=$NEED_MB_WARM; else need=$NEED_MB_COLD; fi
  # Module cache, build cache and binary usually share one filesystem; check the tightest.
  free=$(
    {
      free_mb "$modcache"
      free_mb "$gocache"
      free_mb "$BIN_DIR"
    } | sort -n | head -1
  )
  if ((free < need)); then
    die "not enough disk to build: need ~${need} MiB free (module cache $modcache, build cache $gocache, binary $BIN_DIR), have ${free} MiB"
  fi
}

is_built() {
  [[ -x "$BIN" && -f "$STAMP_FILE" && "$(cat "$STAMP_FILE")" == "$(stamp)" ]]
}

cmd_build() {
  if is_built; then
    log "binary up to date: $BIN"
    return 0
  fi
  need_go
  check_disk
  mkdir -p "$BIN_DIR"
  log "building kube-apiserver $(k8s_version) + etcd into $BIN"
  log "a first build takes 5-20 min on 2 cores, ~2 GiB RAM and ~3 GiB of Go caches; log: $BUILD_LOG"
  local start=$SECONDS
  if ! (cd "$HERE" && GOWORK=off GOFLAGS="${GOFLAGS:-}" go_build_progress devcluster "$BUILD_LOG" "$BIN.tmp" . -buildvcs=false -trimpath -ldflags="$(ldflags)"); then
    tail -n 30 "$BUILD_LOG" >&2 || true
    die "build failed (full log: $BUILD_LOG)"
  fi
  mv -f "$BIN.tmp" "$BIN"
  stamp >"$STAMP_FILE"
  log "built in $((SECONDS - start))s"
}

pid_alive() { # our binary, with our state dir, is running as the pid in the pidfile
  [[ -f "$PIDFILE" ]] || return 1
  local pid args
  pid="$(cat "$PIDFILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  args="$(ps -o args= -p "$pid" 2>/dev/null || true)"
  [[ "$args" == *devcluster*"-state-dir $RUN_DIR -v "* ]]
}

ready() {
  [[ -f "$RUN_DIR/api-url" && -f "$RUN_DIR/pki/ca.crt" ]] || return 1
  curl -fsS --max-time 3 --cacert "$RUN_DIR/pki/ca.crt" "$(cat "$RUN_DIR/api-url")/readyz" >/dev/null 2>&1
}

wait_ready() {
  local deadline=$((SECONDS + READY_TIMEOUT))
  while ((SECONDS < deadline)); do
    if ! pid_alive; then
      tail -n 40 "$LOG" >&2 || true
      die "devcluster exited during startup (log: $LOG)"
    fi
    if ready; then return 0; fi
    sleep 0.5
  done
  tail -n 40 "$LOG" >&2 || true
  die "kube-apiserver not ready after ${READY_TIMEOUT}s (log: $LOG; raise GOVERNOR_DEVCLUSTER_READY_TIMEOUT or run '$0 down')"
}

lock() { # serialise up/down between concurrent callers (e.g. parallel pytest workers)
  mkdir -p "$RUN_DIR"
  chmod 700 "$RUN_DIR"
  exec 9>"$RUN_DIR/.lock"
  command -v flock >/dev/null 2>&1 && flock 9 || true
}

cmd_up() {
  command -v curl >/dev/null 2>&1 || die "curl not found: install curl (used to probe /readyz)"
  lock
  if pid_alive; then
    wait_ready
    log "already running (pid $(cat "$PIDFILE")): $(cat "$RUN_DIR/api-url")"
    if [[ "$(cat "$RUN_DIR/running.stamp" 2>/dev/null || true)" != "$(stamp)" ]]; then
      log "note: it runs an older build than deploy/devcluster/ describes; '$0 down && $0 up' restarts it on the new one"
    fi
    echo "$ADMIN_KUBECONFIG"
    return 0
  fi
  rm -f "$PIDFILE" "$RUN_DIR/api-url"
  cmd_build
  log "starting (state: $RUN_DIR, log: $LOG)"
  echo "=== $(date -u +%FT%TZ) start" >>"$LOG"
  # New session: survives the caller's Ctrl-C / pytest exit; fd 9 (the lock) not inherited.
  setsid "$BIN" -state-dir "$RUN_DIR" -v "$VERBOSITY" </dev/null >>"$LOG" 2>&1 9>&- &
  echo $! >"$PIDFILE"
  stamp >"$RUN_DIR/running.stamp"
  local start=$SECONDS
  wait_ready
  log "ready in $((SECONDS - start))s: $(cat "$RUN_DIR/api-url")"
  echo "$ADMIN_KUBECONFIG"
}

cmd_down() {
  lock
  if ! pid_alive; then
    rm -f "$PIDFILE"
    log "not running"
    return 0
  fi
  local pid
  pid="$(cat "$PIDFILE")"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 30))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    log "still running after 30s, sending SIGKILL to $pid"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.5
  fi
  rm -f "$PIDFILE" "$RUN_DIR/api-url" "$RUN_DIR/running.stamp"
  log "stopped"
}

cmd_status() {
  if pid_alive; then
    local url="?"
    [[ -f "$RUN_DIR/api-url" ]] && url="$(cat "$RUN_DIR/api-url")"
    if ready; then
      echo "running (pid $(cat "$PIDFILE")), ready: $url"
      echo "kubeconfig: $ADMIN_KUBECONFIG"
      return 0
    fi
    echo "running (pid $(cat "$PIDFILE")), NOT ready: $url (log: $LOG)"
    return 1
  fi
  echo "stopped (state: $RUN_DIR)"
  if is_built; then echo "binary: $BIN (up to date)"; else echo "binary: not built or stale"; fi
  return 1
}

cmd_kubeconfig() {
  pid_alive && [[ -f "$ADMIN_KUBECONFIG" ]] || die "not running: run '$0 up'"
  echo "$ADMIN_KUBECONFIG"
}

cmd_reset() {
  cmd_down
  [[ -d "$RUN_DIR" ]] && rm -rf -- "$RUN_DIR"
  log "removed $RUN_DIR"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  build) cmd_build ;;
  kubeconfig) cmd_kubeconfig ;;
  reset) cmd_reset ;;
  *)
    echo "usage: $0 up|down|status|build|kubeconfig|reset" >&2
    exit 2
    ;;
esac
