#!/usr/bin/env bash
# Yield-to-grant latency (docs/benchmarks.md, "Yield on request"): a holder `lease run
# --on-yield TERM` whose command exits on the signal, one waiter in another process; the time
# from just before `lease yield` starts to the waiter's command starting, N times per store.
# HOLDER_FLAGS (e.g. `--wake-hints off`: the holder learns at its next renewal, ttl/3) go to
# the holder's `lease run`.
#   bench/yield-latency.sh URL [N] [TTL]     (URL: a lock URL, e.g. file:///tmp/y/lock)
set -euo pipefail
URL=$1; N=${2:-10}; TTL=${3:-30s}
LEASE=${LEASE_BIN:-$(dirname "$0")/../target/debug/lease}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for i in $(seq 1 "$N"); do
  key="$URL-$i"
  case "$URL" in *\?*) key="${URL%%\?*}-$i?${URL#*\?}";; esac
  # shellcheck disable=SC2086
  "$LEASE" run --queue --ttl "$TTL" --on-yield TERM ${HOLDER_FLAGS:-} "$key" -- sh -c 'trap "exit 0" TERM; for i in $(seq 1 1200); do sleep 0.05; done' 2>/dev/null &
  holder=$!
  for _ in $(seq 1 200); do "$LEASE" status "$key" 2>/dev/null | grep -q '^state: *held' && break; sleep 0.05; done
  "$LEASE" run --queue --ttl "$TTL" "$key" -- sh -c "date +%s%N > $tmp/granted" 2>/dev/null &
  waiter=$!
  for _ in $(seq 1 200); do "$LEASE" status "$key" 2>/dev/null | grep -q '^waiting: *1' && break; sleep 0.05; done
  t0=$(date +%s%N)
  "$LEASE" yield "$key" >/dev/null
  wait "$waiter"; wait "$holder" || true
  echo $(( ($(cat "$tmp/granted") - t0) / 1000 ))
done | sort -n | awk '{a[NR]=$1} END {printf "n=%d median %.1f ms p90 %.1f ms max %.1f ms\n", NR, a[int((NR+1)/2)]/1000, a[int(NR*0.9+0.5)]/1000, a[NR]/1000}'
