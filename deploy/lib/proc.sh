# Sourced by the scripts that run a local server (kafka.sh, devcluster.sh, toxiproxy.sh):
# which pid is ours, whether a port answers, and a stop that cannot hang.
#
#   pid_of PIDFILE PATTERN   print the pid in PIDFILE if that process is alive and its command
#                            line contains PATTERN (a pid reused by another program is not ours)
#   port_open HOST PORT      exit 0 if something accepts TCP connections there (bash /dev/tcp)
#   stop_pid PID SECONDS     SIGTERM, wait up to SECONDS, then SIGKILL and wait until it is gone;
#                            exit 0 if it left on SIGTERM, 1 if it had to be killed
#   wait_started PID SECONDS INTERVAL TAIL WHAT READY...
#                            poll every INTERVAL s until the command READY succeeds (exit 0)
#                            or SECONDS passed (exit 1); if PID exits first: the last TAIL
#                            lines of the caller's LOG, its PIDFILE removed, and its die
#                            "WHAT exited during start"
#   report_status WHERE READY...  the `status` command of kafka.sh and toxiproxy.sh: "running
#                            WHERE pid P" if the caller's our_pid finds P and the command READY
#                            succeeds, "starting WHERE pid P" if only P is found, else "stopped"
#                            and exit 3

pid_of() {
  local pidfile="$1" pattern="$2" pid
  [[ -f "$pidfile" ]] || return 1
  pid="$(cat "$pidfile" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$pattern" || return 1
  echo "$pid"
}

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

stop_pid() {
  local pid="$1" timeout="$2"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + timeout))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  kill -0 "$pid" 2>/dev/null || return 0
  kill -KILL "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  return 1
}

wait_started() {
  local pid="$1" timeout="$2" interval="$3" tail="$4" what="$5"
  shift 5
  local deadline=$((SECONDS + timeout))
  while ((SECONDS < deadline)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n "$tail" "$LOG" >&2 || true
      rm -f "$PIDFILE"
      die "$what exited during start (log: $LOG)"
    fi
    "$@" && return 0
    sleep "$interval"
  done
  return 1
}

report_status() {
  local where="$1" pid
  shift
  if pid="$(our_pid)" && "$@"; then
    echo "running $where pid $pid"
  elif [[ -n "${pid:-}" ]]; then
    echo "starting $where pid $pid"
  else
    echo "stopped"
    return 3
  fi
}
