#!/usr/bin/env bash
# components.sh — install or build every real component the tests and the demo use. One script
# for `make test` and `.ci/run`, so a newcomer's run is CI's run.
#
#   bash deploy/components.sh ensure   install what is missing, build what is not cached
#   bash deploy/components.sh check    say what is missing (exit 1 if anything is); installs nothing
#
# System packages (Debian's): Java 17 + Maven (Kafka's jars are resolved with Maven), prometheus
# (+ promtool), kcat, redis-server, rabbitmq-server, kubectl. As root (or with password-less
# sudo) they are installed with apt-get; otherwise the exact command is printed and, under
# CI=true, the script fails (a missing component would fail the tests there anyway).
# Built from Go modules and cached (progress on stderr): the dev kube-apiserver + etcd and the
# kube-controller-manager (HPA controller; deploy/devcluster), helm (deploy/helm) and Toxiproxy
# (network faults; deploy/toxiproxy). Resolved from Maven Central and cached: Kafka's jars.
# Docker is not installed: the compose tests need a Docker engine and skip without one.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# command -> the Debian package that provides it
PACKAGES=(
  "java:openjdk-17-jre-headless"
  "mvn:maven"
  "prometheus:prometheus"
  "promtool:prometheus"
  "kcat:kcat"
  "redis-server:redis-server"
  "rabbitmq-server:rabbitmq-server"
  "kubectl:kubectl"
)

log() { echo "components: $*" >&2; }

is_ci() { [[ "${CI:-}" == "true" ]]; }

missing_packages() { # the Debian packages whose command is not on PATH, once each
  local entry cmd pkg seen=" "
  for entry in "${PACKAGES[@]}"; do
    cmd="${entry%%:*}"
    pkg="${entry#*:}"
    # rabbitmq-server lives in /usr/sbin, not on every user's PATH
    if ! command -v "$cmd" >/dev/null 2>&1 && [[ ! -x "/usr/sbin/$cmd" ]]; then
      [[ "$seen" == *" $pkg "* ]] || seen="$seen$pkg "
    fi
  done
  seen="${seen# }"
  echo "${seen% }"
}

apt_runner() { # how this user runs apt-get: "" as root, "sudo -n" with password-less sudo
  if [[ "$(id -u)" == 0 ]]; then
    echo ""
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    echo "sudo -n"
  else
    return 1
  fi
}

install_packages() {
  local missing
  missing="$(missing_packages)"
  [[ -z "$missing" ]] && return 0
  local run
  if ! command -v apt-get >/dev/null 2>&1 || ! run="$(apt_runner)"; then
    log "missing: $missing"
    log "install them with:  sudo apt-get update && sudo apt-get install -y $missing"
    log "(until then the tests that need them skip; under CI=true they fail)"
    is_ci && return 1
    return 0
  fi
  log "installing Debian packages: $missing"
  # shellcheck disable=SC2086  # $run is empty or "sudo -n"; $missing is a word list
  if ! { $run apt-get update -qq && DEBIAN_FRONTEND=noninteractive $run apt-get install -y -qq $missing >/dev/null; }; then
    log "apt-get install failed: run it yourself: sudo apt-get install -y $missing"
    is_ci && return 1
    return 0
  fi
  # Debian starts these daemons on install; the tests start their own on free ports.
  stop_package_daemons
}

stop_package_daemons() {
  local svc
  for svc in redis-server rabbitmq-server prometheus; do
    if command -v service >/dev/null 2>&1; then service "$svc" stop >/dev/null 2>&1 || true; fi
  done
}

build_go_tools() {
  local rc=0
  if ! command -v go >/dev/null 2>&1; then
    log "go not found: the dev kube-apiserver and helm are built from Go modules."
    log "install Go >= 1.24 (https://go.dev/dl; Debian bookworm's golang-go 1.19 is too old)"
    is_ci && return 1
    return 0
  fi
  bash "$HERE/devcluster/devcluster.sh" build || rc=1
  bash "$HERE/helm/helm.sh" build || rc=1
  bash "$HERE/toxiproxy/toxiproxy.sh" build || rc=1
  if ((rc)) && ! is_ci; then
    log "a build failed: the tests that need it skip"
    return 0
  fi
  return "$rc"
}

resolve_kafka() {
  command -v mvn >/dev/null 2>&1 || return 0 # said above
  bash "$HERE/kafka/kafka.sh" resolve >/dev/null || { is_ci && return 1; }
  return 0
}

cmd_ensure() {
  local start=$SECONDS rc=0
  install_packages || rc=1
  resolve_kafka || rc=1
  build_go_tools || rc=1
  ((SECONDS - start > 5)) && log "ready in $((SECONDS - start)) s"
  return "$rc"
}

cmd_check() {
  local missing rc=0
  missing="$(missing_packages)"
  if [[ -n "$missing" ]]; then
    echo "missing Debian packages: $missing"
    rc=1
  fi
  command -v go >/dev/null 2>&1 || {
    echo "missing: go (>= 1.24)"
    rc=1
  }
  return "$rc"
}

case "${1:-}" in
  ensure) cmd_ensure ;;
  check) cmd_check ;;
  *)
    echo "usage: $0 ensure|check" >&2
    exit 2
    ;;
esac
