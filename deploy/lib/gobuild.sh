# Sourced by the scripts that build Go tools (devcluster.sh, helm.sh, toxiproxy.sh): `go build`
# with progress, and a build cached by a stamp of its inputs.
#
#   need_go                            die (the caller's) unless a Go able to build these is on PATH
#   go_is_built BIN STAMP_FILE STAMP   exit 0 if BIN exists and was built from inputs hashing to STAMP
#   go_build_stamped NAME LOG BIN STAMP_FILE STAMP PKG [go build flags...]
#                                      build BIN (via BIN.tmp, so a failed build leaves no binary),
#                                      then record STAMP; on failure print LOG's tail, return 1
#
#   go_build_progress NAME LOG OUT PKG [go build flags...]
#
# Runs `go build -v -o OUT [flags] PKG` in the current directory, the full output in LOG, and
# prints "NAME: N/TOTAL packages, S s" to stderr while it runs (a line every 15 s; in place on a
# terminal) so that a cold build of several minutes is not a silent wait. TOTAL is what
# `go list -deps` names; packages already in the build cache are not printed by -v, so a warm
# build finishes below it. Returns go build's exit status.

go_build_progress() {
  local name="$1" log="$2" out="$3" pkg="$4"
  shift 4
  local total start=$SECONDS
  echo "$name: resolving modules (first run downloads them from the Go module proxy)" >&2
  if ! total="$(go list -deps "$pkg" 2>>"$log" | wc -l)"; then total="?"; fi
  : >"$log"
  local count=0 last=0 line tty=0
  [[ -t 2 ]] && tty=1
  # -v names each package as it is compiled: count them.
  while IFS= read -r line; do
    echo "$line" >>"$log"
    [[ "$line" =~ ^[A-Za-z0-9_./~-]+$ ]] && count=$((count + 1))
    if ((SECONDS - last >= (tty ? 1 : 15))); then
      last=$SECONDS
      if ((tty)); then
        printf '\r%s: %s/%s packages, %d s ' "$name" "$count" "$total" "$((SECONDS - start))" >&2
      else
        echo "$name: $count/$total packages, $((SECONDS - start)) s" >&2
      fi
    fi
  done < <(go build -v -o "$out" "$@" "$pkg" 2>&1; echo "__rc=$?")
  ((tty)) && echo >&2
  local rc
  rc="$(tail -n 1 "$log")"
  rc="${rc#__rc=}"
  sed -i '$d' "$log"
  echo "$name: $count/$total packages compiled in $((SECONDS - start)) s (exit $rc)" >&2
  return "$rc"
}

go_is_built() {
  [[ -x "$1" && -f "$2" && "$(cat "$2")" == "$3" ]]
}

go_build_stamped() {
  local name="$1" log="$2" bin="$3" stamp_file="$4" stamp="$5" pkg="$6"
  shift 6
  mkdir -p "$(dirname "$bin")"
  if ! GOWORK=off GOFLAGS="${GOFLAGS:-}" go_build_progress "$name" "$log" "$bin.tmp" "$pkg" "$@"; then
    tail -n 30 "$log" >&2 || true
    return 1
  fi
  mv -f "$bin.tmp" "$bin"
  echo "$stamp" >"$stamp_file"
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
