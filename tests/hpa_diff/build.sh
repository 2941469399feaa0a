#!/usr/bin/env bash
# build.sh — build the hpa-diff harness (README.md) if its inputs changed; print its path.
#
# The harness lives beside deploy/devcluster: its go.mod IS deploy/devcluster's go.mod and
# go.sum (same k8s.io/kubernetes version, same replace lines, same Go module and build caches),
# with only the module path renamed. Upstream's pkg/controller/podautoscaler is copied from the
# module cache into the build dir, clock.patch is applied, and our governor_diff.go is added.
#
# Environment: GOVERNOR_DEVCLUSTER_BIN_DIR (default ~/.cache/governor/devcluster/bin) holds the
# binary, its stamp and build log; the build dir is ~/.cache/governor/devcluster/hpa-diff-src.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEVCLUSTER="$(cd "$HERE/../../deploy/devcluster" && pwd)"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/governor/devcluster"
BIN_DIR="${GOVERNOR_DEVCLUSTER_BIN_DIR:-$CACHE_ROOT/bin}"
SRC="$CACHE_ROOT/hpa-diff-src"
BIN="$BIN_DIR/hpa-diff"
STAMP_FILE="$BIN.stamp"
LOG="$BIN_DIR/hpa-diff-build.log"
PKG=pkg/controller/podautoscaler
UPSTREAM_FILES=(doc.go horizontal.go rate_limiters.go replica_calculator.go)

die() {
  echo "hpa-diff: error: $*" >&2
  exit 1
}

k8s_version() { awk '$1=="k8s.io/kubernetes" {print $2}' "$DEVCLUSTER/go.mod"; }

stamp() {
  {
    cat "$DEVCLUSTER/go.mod" "$DEVCLUSTER/go.sum" "$HERE/main.go" "$HERE/clock.patch" \
      "$HERE/podautoscaler/governor_diff.go" "$HERE/build.sh"
    go env GOVERSION
  } | sha256sum | cut -d' ' -f1
}

command -v go >/dev/null 2>&1 || die "go not found: install Go >= 1.24 (see deploy/devcluster/README.md)"
mkdir -p "$BIN_DIR"
exec 9>"$BIN.lock"
flock 9 # one build at a time (parallel test workers)

if [[ -x "$BIN" && -f "$STAMP_FILE" && "$(cat "$STAMP_FILE")" == "$(stamp)" ]]; then
  echo "$BIN"
  exit 0
fi

version="$(k8s_version)"
modcache="$(go env GOMODCACHE)"
upstream="$modcache/k8s.io/kubernetes@$version/$PKG"
if [[ ! -d "$upstream" ]]; then
  echo "hpa-diff: downloading k8s.io/kubernetes@$version into the module cache" >&2
  (cd "$DEVCLUSTER" && GOWORK=off go mod download k8s.io/kubernetes) || die "cannot download k8s.io/kubernetes@$version"
fi

echo "hpa-diff: building against k8s.io/kubernetes $version (log: $LOG)" >&2
rm -rf "$SRC"
mkdir -p "$SRC/podautoscaler"
sed 's|^module .*|module governor.dev/hpadiff|' "$DEVCLUSTER/go.mod" >"$SRC/go.mod"
cp "$DEVCLUSTER/go.sum" "$SRC/go.sum"
cp "$HERE/main.go" "$SRC/main.go"
for f in "${UPSTREAM_FILES[@]}"; do
  install -m 0644 "$upstream/$f" "$SRC/podautoscaler/$f"
done
apply_patch() { # patch(1) where installed, else git's (the build dir is outside any repository)
  if command -v patch >/dev/null 2>&1; then
    patch --quiet -p1 -d "$SRC/podautoscaler" <"$HERE/clock.patch"
  else
    (cd "$SRC/podautoscaler" && git apply -p1 "$HERE/clock.patch")
  fi
}
apply_patch || die "clock.patch does not apply to $version: regenerate it (README.md)"
cp "$HERE/podautoscaler/governor_diff.go" "$SRC/podautoscaler/"

start=$SECONDS
# -mod=mod only records hashes of modules deploy/devcluster's own build does not need (e.g.
# k8s.io/metrics) in the build dir's go.sum; every version comes from deploy/devcluster/go.mod.
if ! (cd "$SRC" && GOWORK=off GOFLAGS=-mod=mod nice go build -buildvcs=false -trimpath -o "$BIN.tmp" .) >"$LOG" 2>&1; then
  tail -n 30 "$LOG" >&2 || true
  die "build failed (full log: $LOG)"
fi
mv -f "$BIN.tmp" "$BIN"
stamp >"$STAMP_FILE"
echo "hpa-diff: built in $((SECONDS - start)) s" >&2
echo "$BIN"
