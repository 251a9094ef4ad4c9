#!/usr/bin/env bash
# Cross-language test of issue 4: a C worker (liblease), a Go worker (the Go binding) and the
# lease CLI (`lease run`, the Rust core) contend for one lease in one store. Each appends
# "START LANG PID EPOCH" / "END LANG PID EPOCH" lines around its critical section to one history
# file (O_APPEND, one write per line); the check then requires, from the recorded history:
# one holder at a time (START and END strictly alternate, each END matching its START), epochs
# strictly increasing across all three languages (one shared sequence), and every round of
# every worker present.
#
#   ffi/tests/cross/run.sh LEASE_STORE
#
# Environment: C_WORKER, GO_WORKER (built binaries), LEASE_BIN (the CLI); ROUNDS (default 5
# per worker), HOLD_MS (default 30).
set -euo pipefail

store=${1:?usage: run.sh LEASE_STORE}
: "${C_WORKER:?C_WORKER is not set}" "${GO_WORKER:?GO_WORKER is not set}" "${LEASE_BIN:?LEASE_BIN is not set}"
rounds=${ROUNDS:-5}
hold_ms=${HOLD_MS:-30}
name="cross-$$-$(date +%s%N)"
# The lease URL of `name`: before the store URL's query, if any.
case $store in
  *\?*) url="${store%%\?*}"; url="${url%/}/$name?${store#*\?}" ;;
  *) url="${store%/}/$name" ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
history=$tmp/history

cli_worker() {
  local i
  for ((i = 0; i < rounds; i++)); do
    HISTORY=$history HOLD=$(awk "BEGIN{print $hold_ms/1000}") \
      "$LEASE_BIN" run --ttl 5s --wait 2m "$url" -- sh -c '
        printf "START cli %s %s\n" "$$" "$LEASE_EPOCH" >> "$HISTORY"
        sleep "$HOLD"
        printf "END cli %s %s\n" "$$" "$LEASE_EPOCH" >> "$HISTORY"'
  done
}

t0=$(date +%s%N)
"$C_WORKER" "$store" "$name" "$history" "$rounds" "$hold_ms" & c_pid=$!
"$GO_WORKER" "$store" "$name" "$history" "$rounds" "$hold_ms" & go_pid=$!
cli_worker & cli_pid=$!
status=0
for pid in $c_pid $go_pid $cli_pid; do
  wait "$pid" || { echo "cross: worker $pid failed" >&2; status=1; }
done
[ $status -eq 0 ] || exit 1

awk -v rounds="$rounds" '
  $1 == "START" {
    if (open) { printf "line %d: %s starts while %s holds the lease\n", NR, $2 " " $3, who; bad = 1 }
    if (n > 0 && $4 + 0 <= last + 0) { printf "line %d: epoch %s after %s\n", NR, $4, last; bad = 1 }
    open = 1; who = $2 " " $3; epoch = $4; last = $4; n++; count[$2]++; next
  }
  $1 == "END" {
    if (!open || $2 " " $3 != who || $4 != epoch) { printf "line %d: END without its START: %s\n", NR, $0; bad = 1 }
    open = 0; next
  }
  { printf "line %d: not a history line: %s\n", NR, $0; bad = 1 }
  END {
    if (open) { print "the last section never ended"; bad = 1 }
    for (lang in count) printf "  %s: %d sections\n", lang, count[lang]
    if (count["c"] != rounds || count["go"] != rounds || count["cli"] != rounds) {
      printf "expected %d sections per language\n", rounds; bad = 1
    }
    printf "  %d sections, epochs strictly increasing up to %s\n", n, last
    exit bad
  }' "$history" || { echo "cross: history check FAILED on $store:"; cat "$history"; exit 1; }
echo "cross: ok on ${store%%\?*} ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"
