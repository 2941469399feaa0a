# Sourced by the scripts that build Go tools (devcluster.sh, helm.sh): `go build` with progress.
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
