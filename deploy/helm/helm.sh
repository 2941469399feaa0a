#!/usr/bin/env bash
# helm.sh — real `helm`, built from its Go module (helm.sh/helm/v4, pinned in build/go.mod and
# build/go.sum; no binary download) and cached as ~/.cache/governor/helm/bin/helm.
#
#   helm.sh build   build if build/go.mod or build/go.sum changed (cached; progress on stderr)
#   helm.sh path    build if needed; print the binary's path as the last stdout line
#   helm.sh -- ARGS build if needed, then run `helm ARGS`
#
# Environment: GOVERNOR_HELM_BIN_DIR (default ~/.cache/governor/helm/bin).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN_DIR="${GOVERNOR_HELM_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/governor/helm/bin}"
BIN="$BIN_DIR/helm"
STAMP_FILE="$BIN_DIR/helm.stamp"
BUILD_LOG="$BIN_DIR/build.log"
# shellcheck source=../lib/gobuild.sh
source "$HERE/../lib/gobuild.sh"
LOG_NAME=helm
# shellcheck source=../lib/log.sh
source "$HERE/../lib/log.sh"

stamp() { (cd "$HERE/build" && cat go.mod go.sum) | sha256sum | cut -d' ' -f1; }

version() { awk '$1=="helm.sh/helm/v4" {print $2}' "$HERE/build/go.mod"; }

cmd_build() {
  go_is_built "$BIN" "$STAMP_FILE" "$(stamp)" && return 0
  need_go
  log "building helm $(version) from its Go module into $BIN (a first build takes 3-10 min on 2 cores; log: $BUILD_LOG)"
  local v
  v="$(version)"
  # The version `helm version` reports; -s -w: no symbols (a third of the size).
  (cd "$HERE/build" && go_build_stamped helm "$BUILD_LOG" "$BIN" "$STAMP_FILE" "$(stamp)" helm.sh/helm/v4/cmd/helm \
    -buildvcs=false -trimpath -ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$v") ||
    die "build failed (full log: $BUILD_LOG)"
  log "built: $BIN ($("$BIN" version --short 2>/dev/null || echo '?'))"
}

case "${1:-}" in
  build) cmd_build ;;
  path)
    cmd_build
    echo "$BIN"
    ;;
  --)
    shift
    cmd_build
    exec "$BIN" "$@"
    ;;
  *)
    echo "usage: $0 build|path|-- HELM-ARGS" >&2
    exit 2
    ;;
esac
