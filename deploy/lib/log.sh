# Sourced by the deploy scripts that build or run a component (devcluster.sh, helm.sh,
# toxiproxy.sh): their messages on stderr, prefixed with LOG_NAME (set before sourcing).
#
#   log MESSAGE...   "LOG_NAME: MESSAGE"
#   die MESSAGE...   "LOG_NAME: error: MESSAGE", then exit 1

log() { echo "$LOG_NAME: $*" >&2; }
die() {
  echo "$LOG_NAME: error: $*" >&2
  exit 1
}
