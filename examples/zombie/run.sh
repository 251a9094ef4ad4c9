#!/usr/bin/env bash
# Play Kleppmann's zombie scenario with real processes:
#   1. the first holder writes, checks its lease, and is paused (SIGSTOP) before its next write;
#   2. it stays paused past its ttl; a newer holder takes over and writes;
#   3. the first holder is continued (SIGCONT) and writes: the store rejects it.
# Usage: examples/zombie/run.sh [LEASE_URL] [rust|python]
# Default URL: a lease in a temporary directory. Exit 0 when the zombie write was rejected.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=""
url=${1:-}
if [ -z "$url" ]; then
  tmp=$(mktemp -d)
  url="file://$tmp/zombie-lease"
fi
lang=${2:-rust}
case "$lang" in
  rust)
    zombie=("${LEASE_ZOMBIE_BIN:-${CARGO_TARGET_DIR:-$here/../../target}/debug/lease-zombie}")
    # On a fresh clone: build it (a debug build of the example, as `cargo build` makes it).
    if [ -z "${LEASE_ZOMBIE_BIN:-}" ] && [ ! -x "${zombie[0]}" ]; then
      echo "run.sh: building the example (cargo build -p lease-example-zombie)"
      (cd "$here/../.." && cargo build -q -p lease-example-zombie)
    fi
    ;;
  python)
    zombie=("${PYTHON:-python3}" "$here/python/zombie.py")
    "${zombie[0]}" -c 'import lease' 2>/dev/null || {
      echo "run.sh: ${zombie[0]} cannot import lease: install the Python package first" \
        "(pip install ./python, or PYTHON=/path/to/venv/bin/python)" >&2
      exit 69
    }
    ;;
  *) echo "unknown language $lang (rust or python)" >&2; exit 64 ;;
esac
# The data object lives in the lease's store. One per run: an object fenced under one lease
# refuses writes under any other lease, so runs must not share it.
data_key="${ZOMBIE_DATA_KEY:-zombie-data-$$-$(date +%s%N)}"

"${zombie[@]}" zombie "$url" "$data_key" &
pid=$!
# Wait (bounded) until the zombie has stopped itself.
for _ in $(seq 1 300); do
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || echo gone)
  [ "$state" = "T" ] && break
  [ "$state" = "gone" ] && { echo "the zombie exited early" >&2; exit 1; }
  sleep 0.1
done
[ "$state" = "T" ] || { echo "the zombie never paused" >&2; kill -9 "$pid"; exit 1; }
echo "run.sh: the first holder is paused; a newer holder waits for the lease to expire"
"${zombie[@]}" newer "$url" "$data_key"
echo "run.sh: continuing the paused holder"
kill -CONT "$pid"
status=0
wait "$pid" || status=$?
"${zombie[@]}" show "$url" "$data_key"
[ -n "$tmp" ] && rm -rf "$tmp"
exit "$status"
