#!/usr/bin/env bash
# devcluster.sh — a real Kubernetes control plane (embedded etcd + kube-apiserver, one
# process) on 127.0.0.1 for governor's tests and local development. See README.md.
#
#   devcluster.sh build       build both binaries if go.mod/go.sum/main.go changed (cached)
#   devcluster.sh up          build if needed, start, wait for /readyz; last stdout line = kubeconfig path
#   devcluster.sh up --with-hpa   also start kube-controller-manager with only the HPA controller
#   devcluster.sh down        stop both (SIGTERM, wait, then SIGKILL)
#   devcluster.sh hpa-down    stop only the kube-controller-manager
#   devcluster.sh status      running/stopped, URL, kubeconfig; exit 0 only if ready
#   devcluster.sh hpa-status  exit 0 only if the kube-controller-manager runs and is healthy
#   devcluster.sh kubeconfig  print the admin kubeconfig path (exit 1 if not running)
#   devcluster.sh reset       down, then delete the state dir (etcd data, certs, tokens)
#
# Environment:
#   GOVERNOR_DEVCLUSTER_HOME           state/data/logs   (default ~/.cache/governor/devcluster/run)
#   GOVERNOR_DEVCLUSTER_BIN_DIR        built binary      (default ~/.cache/governor/devcluster/bin)
#   GOVERNOR_DEVCLUSTER_READY_TIMEOUT  seconds to wait for /readyz (default 120)
#   GOVERNOR_DEVCLUSTER_V              kube-apiserver log verbosity (default 1)
#   GOVERNOR_DEVCLUSTER_HPA_SYNC_PERIOD  the HPA controller's sync period (default 15s, HPA's own;
#                                      tests and the sped-up demo scale it down)
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

# The upstream kube-controller-manager, built from the same module (go.mod's `tool` line), so
# it is the same k8s.io/kubernetes version as the API server and shares its caches.
KCM_PKG=k8s.io/kubernetes/cmd/kube-controller-manager
KCM_BIN="$BIN_DIR/kube-controller-manager"
KCM_STAMP_FILE="$BIN_DIR/kube-controller-manager.stamp"
KCM_BUILD_LOG="$BIN_DIR/kcm-build.log"
KCM_PIDFILE="$RUN_DIR/kcm.pid"
KCM_LOG="$RUN_DIR/kcm.log"
KCM_KUBECONFIG="$RUN_DIR/hpa-controller.kubeconfig"
HPA_SYNC_PERIOD="${GOVERNOR_DEVCLUSTER_HPA_SYNC_PERIOD:-15s}"

# Measured on a 2-core machine with Go 1.26 (README.md): a cold build puts ~0.6 GiB in the
# module cache, ~2.2 GiB in the build cache and writes a 106 MiB binary; plus ~1 GiB margin.
NEED_MB_COLD=4000 # module cache empty
NEED_MB_WARM=3300 # modules already downloaded, build cache empty

# shellcheck source=../lib/gobuild.sh
source "$HERE/../lib/gobuild.sh"
# shellcheck source=../lib/proc.sh
source "$HERE/../lib/proc.sh"
LOG_NAME=devcluster
# shellcheck source=../lib/log.sh
source "$HERE/../lib/log.sh"

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

is_built() { go_is_built "$BIN" "$STAMP_FILE" "$(stamp)"; }

kcm_stamp() { # go.mod + go.sum pin every package of it (+ the link flags)
  { (cd "$HERE" && cat go.mod go.sum) && echo "$KCM_PKG" && ldflags; } | sha256sum | cut -d' ' -f1
}

kcm_is_built() { go_is_built "$KCM_BIN" "$KCM_STAMP_FILE" "$(kcm_stamp)"; }

cmd_build_kcm() {
  if kcm_is_built; then
    log "kube-controller-manager up to date: $KCM_BIN"
    return 0
  fi
  need_go
  check_disk
  mkdir -p "$BIN_DIR"
  log "building kube-controller-manager $(k8s_version) into $KCM_BIN (log: $KCM_BUILD_LOG)"
  local start=$SECONDS
  (cd "$HERE" && go_build_stamped kube-controller-manager "$KCM_BUILD_LOG" "$KCM_BIN" "$KCM_STAMP_FILE" "$(kcm_stamp)" \
    "$KCM_PKG" -buildvcs=false -trimpath -ldflags="$(ldflags)") ||
    die "kube-controller-manager build failed (full log: $KCM_BUILD_LOG)"
  log "kube-controller-manager built in $((SECONDS - start))s"
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
  (cd "$HERE" && go_build_stamped devcluster "$BUILD_LOG" "$BIN" "$STAMP_FILE" "$(stamp)" \
    . -buildvcs=false -trimpath -ldflags="$(ldflags)") ||
    die "build failed (full log: $BUILD_LOG)"
  log "built in $((SECONDS - start))s"
}

pid_alive() { pid_of "$PIDFILE" "-state-dir $RUN_DIR -v " >/dev/null; } # our binary, our state dir

ready() {
  [[ -f "$RUN_DIR/api-url" && -f "$RUN_DIR/pki/ca.crt" ]] || return 1
  curl -fsS --max-time 3 --cacert "$RUN_DIR/pki/ca.crt" "$(cat "$RUN_DIR/api-url")/readyz" >/dev/null 2>&1
}

# The pid we just started, alive: not pid_alive's command-line check, which a check in the
# instant between fork and exec fails (the child still shows this script's command line).
started_alive() { kill -0 "$(cat "$1" 2>/dev/null)" 2>/dev/null; }

wait_ready() {
  local deadline=$((SECONDS + READY_TIMEOUT))
  while ((SECONDS < deadline)); do
    if ! started_alive "$PIDFILE"; then
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
  local with_hpa=0
  [[ "${1:-}" == "--with-hpa" ]] && with_hpa=1
  command -v curl >/dev/null 2>&1 || die "curl not found: install curl (used to probe /readyz)"
  lock
  if pid_alive; then
    wait_ready
    log "already running (pid $(cat "$PIDFILE")): $(cat "$RUN_DIR/api-url")"
    if [[ "$(cat "$RUN_DIR/running.stamp" 2>/dev/null || true)" != "$(stamp)" ]]; then
      log "note: it runs an older build than deploy/devcluster/ describes; '$0 down && $0 up' restarts it on the new one"
    fi
    ((with_hpa)) && kcm_up
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
  ((with_hpa)) && kcm_up
  echo "$ADMIN_KUBECONFIG"
}

# --- kube-controller-manager (HPA controller only) -----------------------------------------

kcm_alive() { pid_of "$KCM_PIDFILE" "--kubeconfig=$KCM_KUBECONFIG " >/dev/null; } # ours, our kubeconfig

kcm_ready() {
  [[ -f "$RUN_DIR/kcm-port" ]] || return 1
  curl -fsS --max-time 3 -k "https://127.0.0.1:$(cat "$RUN_DIR/kcm-port")/healthz" >/dev/null 2>&1
}

free_port() { # a port free on 127.0.0.1 now (the kernel picks it)
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

kcm_identity() {
  # Least privilege, as upstream runs it: the process authenticates as
  # system:kube-controller-manager (client cert from the cluster CA; the bootstrap RBAC binds that
  # user to what a controller manager needs to mint controller tokens), and with
  # --use-service-account-credentials the HPA controller itself acts as
  # kube-system/horizontal-pod-autoscaler, bound to system:controller:horizontal-pod-autoscaler.
  local pki="$RUN_DIR/pki"
  if [[ ! -f "$pki/kcm.crt" ]]; then
    command -v openssl >/dev/null 2>&1 || die "openssl not found: install openssl (the controller manager's client certificate)"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$pki/kcm.key" \
      -out "$pki/kcm.csr" -subj "/CN=system:kube-controller-manager" >/dev/null 2>&1
    openssl x509 -req -in "$pki/kcm.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
      -days 3650 -out "$pki/kcm.crt" >/dev/null 2>&1 || die "cannot sign the controller manager's certificate"
    rm -f "$pki/kcm.csr"
    chmod 600 "$pki/kcm.key"
  fi
  cat >"$KCM_KUBECONFIG" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: devcluster
  cluster:
    server: $(cat "$RUN_DIR/api-url")
    certificate-authority: $pki/ca.crt
users:
- name: system:kube-controller-manager
  user:
    client-certificate: $pki/kcm.crt
    client-key: $pki/kcm.key
contexts:
- name: devcluster
  context: {cluster: devcluster, user: system:kube-controller-manager}
current-context: devcluster
KUBECONFIG
  chmod 600 "$KCM_KUBECONFIG"
}

kcm_up() { # the API server runs; the lock is held
  if kcm_alive; then
    log "kube-controller-manager already running (pid $(cat "$KCM_PIDFILE"))"
    return 0
  fi
  cmd_build_kcm
  kcm_identity
  local port
  port="$(free_port)"
  echo "$port" >"$RUN_DIR/kcm-port"
  echo "$HPA_SYNC_PERIOD" >"$RUN_DIR/kcm-sync-period" # what tests scale trace time by
  log "starting kube-controller-manager (HPA only, sync ${HPA_SYNC_PERIOD}, log: $KCM_LOG)"
  echo "=== $(date -u +%FT%TZ) start" >>"$KCM_LOG"
  setsid "$KCM_BIN" --kubeconfig="$KCM_KUBECONFIG" \
    --authentication-kubeconfig="$KCM_KUBECONFIG" --authorization-kubeconfig="$KCM_KUBECONFIG" \
    --controllers=horizontalpodautoscaling --use-service-account-credentials=true \
    --leader-elect=false --horizontal-pod-autoscaler-sync-period="$HPA_SYNC_PERIOD" \
    --bind-address=127.0.0.1 --secure-port="$port" --cert-dir="$RUN_DIR/kcm-certs" \
    --profiling=false --v="$VERBOSITY" </dev/null >>"$KCM_LOG" 2>&1 9>&- &
  echo $! >"$KCM_PIDFILE"
  local start=$SECONDS deadline=$((SECONDS + READY_TIMEOUT))
  while ! kcm_ready; do
    if ! started_alive "$KCM_PIDFILE"; then
      tail -n 40 "$KCM_LOG" >&2 || true
      die "kube-controller-manager exited during startup (log: $KCM_LOG)"
    fi
    ((SECONDS < deadline)) || die "kube-controller-manager not healthy after ${READY_TIMEOUT}s (log: $KCM_LOG)"
    sleep 0.5
  done
  log "kube-controller-manager ready in $((SECONDS - start))s"
}

kcm_down() { # the lock is held
  if ! kcm_alive; then
    rm -f "$KCM_PIDFILE"
    return 0
  fi
  local pid
  pid="$(cat "$KCM_PIDFILE")"
  stop_pid "$pid" 30 || true
  rm -f "$KCM_PIDFILE" "$RUN_DIR/kcm-port" "$RUN_DIR/kcm-sync-period"
  log "kube-controller-manager stopped"
}

cmd_hpa_down() {
  lock
  kcm_down
}

cmd_hpa_status() {
  if kcm_alive && kcm_ready; then
    echo "kube-controller-manager running (pid $(cat "$KCM_PIDFILE")), healthy: https://127.0.0.1:$(cat "$RUN_DIR/kcm-port")"
    return 0
  fi
  echo "kube-controller-manager not running or not healthy"
  return 1
}

cmd_down() {
  lock
  kcm_down
  if ! pid_alive; then
    rm -f "$PIDFILE"
    log "not running"
    return 0
  fi
  local pid
  pid="$(cat "$PIDFILE")"
  stop_pid "$pid" 30 || log "still running after 30s: killed $pid"
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
  up) cmd_up "${2:-}" ;;
  down) cmd_down ;;
  hpa-down) cmd_hpa_down ;;
  status) cmd_status ;;
  hpa-status) cmd_hpa_status ;;
  build) cmd_build && cmd_build_kcm ;;
  kubeconfig) cmd_kubeconfig ;;
  reset) cmd_reset ;;
  *)
    echo "usage: $0 up [--with-hpa]|down|hpa-down|status|hpa-status|build|kubeconfig|reset" >&2
    exit 2
    ;;
esac
