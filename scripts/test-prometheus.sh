#!/usr/bin/env bash
# A real Prometheus (Debian's `prometheus` package) scrapes `lease run --metrics` through a run
# with contention and a takeover, and the counters and histograms it stored are checked
# against the run's own history (issue 25).
#
# The run, on a file store under a scratch directory, ttl 3 s:
#   A holds the lease (its command sleeps), B waits for it, C gives up after --wait 1s;
#   A's `lease run` is killed with SIGKILL; B takes the lease over once A's ttl and grace have
#   passed, runs its command for 2 s and releases; B and C linger for one last scrape.
# Prometheus scrapes all three every 250 ms on 127.0.0.1 and is stopped at the end.
#
#   scripts/test-prometheus.sh            (LEASE_BIN: the `lease` CLI; default target/debug/lease)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
LEASE_BIN=${LEASE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/lease}
say() { echo "test-prometheus: $*"; }
fail() { echo "test-prometheus: FAILED: $*" >&2; exit 1; }

# --- Prometheus, from Debian's package when it is missing (no service is started: the
# install runs with policy-rc.d refusing starts, as in containers).
if ! command -v prometheus >/dev/null; then
  say "installing Debian's prometheus package"
  made_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
    made_policy=1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  if [ -n "$made_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
fi
[ -x "$LEASE_BIN" ] || fail "no lease CLI at $LEASE_BIN (cargo build -p lease-cli)"

SCRATCH=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$SCRATCH"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PROM=$(free_port); PA=$(free_port); PB=$(free_port); PC=$(free_port)
cat > "$SCRATCH/prometheus.yml" <<YML
global:
  scrape_interval: 250ms
  scrape_timeout: 200ms
scrape_configs:
  - job_name: lease
    static_configs:
      - targets: ['127.0.0.1:$PA', '127.0.0.1:$PB', '127.0.0.1:$PC']
YML
prometheus --config.file="$SCRATCH/prometheus.yml" --storage.tsdb.path="$SCRATCH/tsdb" \
  --web.listen-address="127.0.0.1:$PROM" --log.level=warn > "$SCRATCH/prometheus.log" 2>&1 &
pids+=($!)
API="http://127.0.0.1:$PROM"
for _ in $(seq 1 200); do
  curl -fsS "$API/-/ready" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "$API/-/ready" >/dev/null || { cat "$SCRATCH/prometheus.log"; fail "Prometheus did not start"; }
say "Prometheus on 127.0.0.1:$PROM scrapes 127.0.0.1:$PA, :$PB, :$PC"

LEASE="file://$SCRATCH/store/job"
now() { python3 -c 'import time; print(time.time())'; }
run() { # name port extra-args… -- command…
  local name=$1 port=$2
  shift 2
  "$LEASE_BIN" run --ttl 3s --label "$name" --metrics "127.0.0.1:$port" "$@" \
    > "$SCRATCH/$name.out" 2> "$SCRATCH/$name.err" &
}
wait_for() { # file
  for _ in $(seq 1 300); do [ -s "$1" ] && return 0; sleep 0.05; done
  fail "$1 never appeared"
}

run A "$PA" "$LEASE" -- sh -c "echo \$LEASE_EPOCH > $SCRATCH/A.epoch; exec sleep 600"
A_PID=$!; pids+=("$A_PID")
wait_for "$SCRATCH/A.epoch"
T_B_START=$(now)
run B "$PB" --metrics-linger 5s "$LEASE" -- sh -c "date +%s.%N > $SCRATCH/B.start; echo \$LEASE_EPOCH > $SCRATCH/B.epoch; sleep 2"
B_PID=$!; pids+=("$B_PID")
run C "$PC" --metrics-linger 5s --wait 1s "$LEASE" -- true
C_PID=$!; pids+=("$C_PID")
C_CODE=0; wait "$C_PID" || C_CODE=$?
[ "$C_CODE" = 75 ] || fail "C should give up with 75 (held), got $C_CODE: $(cat "$SCRATCH/C.err")"
sleep 1 # B waits, polling (Prometheus scrapes it meanwhile)
T_KILL=$(now)
kill -9 "$A_PID"
B_CODE=0; wait "$B_PID" || B_CODE=$?
[ "$B_CODE" = 0 ] || fail "B exited $B_CODE: $(cat "$SCRATCH/B.err")"
T_B_CMD=$(cat "$SCRATCH/B.start")
A_EPOCH=$(cat "$SCRATCH/A.epoch"); B_EPOCH=$(cat "$SCRATCH/B.epoch")
say "history: A epoch $A_EPOCH killed at $T_KILL; B started at $T_B_START, took over at $T_B_CMD (epoch $B_EPOCH); C gave up"

# --- What Prometheus stored, against the history.
export API PA PB PC T_B_START T_KILL T_B_CMD A_EPOCH B_EPOCH
python3 - <<'PY'
import json, os, sys, urllib.parse, urllib.request

api = os.environ["API"]
inst = {k: f"127.0.0.1:{os.environ['P' + k]}" for k in "ABC"}

def q(expr):
    url = f"{api}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        res = json.load(r)["data"]["result"]
    return float(res[0]["value"][1]) if res else None

def last(metric, who, **labels):
    sel = ",".join([f'instance="{inst[who]}"'] + [f'{k}="{v}"' for k, v in labels.items()])
    return q(f"max_over_time({metric}{{{sel}}}[10m])")

checks = []
def check(what, ok, got):
    checks.append((what, ok, got))

kill, b_start, b_cmd = (float(os.environ[k]) for k in ("T_KILL", "T_B_START", "T_B_CMD"))
check("A acquired once", last("lease_acquisitions_total", "A", lease="job", outcome="acquired") == 1, None)
check("B acquired once", last("lease_acquisitions_total", "B", lease="job", outcome="acquired") == 1, None)
check("C timed out once (contention)", last("lease_acquisitions_total", "C", lease="job", outcome="timeout") == 1, None)
check("C never acquired", last("lease_acquisitions_total", "C", lease="job", outcome="acquired") is None, None)
polls = last("lease_store_requests_total", "B", store="file", kind="get", status="200")
check("B read the record while waiting", polls is not None and polls >= 1, polls)
unchanged = last("lease_store_requests_total", "B", store="file", kind="get", status="304")
check("B's polls of an unchanged record were 304s", unchanged is not None and unchanged >= 1, unchanged)
renewals = last("lease_renewals_total", "A", lease="job", outcome="landed")
check("A renewed while it held", renewals is not None and renewals >= 1, renewals)
wait_sum = last("lease_acquire_wait_seconds_sum", "B", lease="job")
wait_count = last("lease_acquire_wait_seconds_count", "B", lease="job")
# B waited at least from its start until A was killed, and at most until its command ran.
check("B's wait in the histogram matches the history",
      wait_count == 1 and kill - b_start - 0.5 <= wait_sum <= b_cmd - b_start + 0.5, (wait_sum, kill - b_start, b_cmd - b_start))
hand = last("lease_handover_seconds_sum", "B", lease="job")
hcount = last("lease_handover_seconds_count", "B", lease="job")
# The lease was free from A's deadline (at most its ttl after the kill) until B took it:
# never longer than from the kill to B's command.
check("B's hand-over is a takeover after A's deadline", hcount == 1 and 0 <= hand <= b_cmd - kill + 0.5, (hand, b_cmd - kill))
bucket = last("lease_handover_seconds_bucket", "B", lease="job", le="+Inf")
check("histogram buckets stored", bucket == 1, bucket)
hold = last("lease_hold_seconds_count", "B", lease="job")
check("B's tenure ended (lingered for the last scrape)", hold == 1, hold)
cost = last("lease_store_cost_dollars_total", "B", store="file")
check("the file store costs nothing", cost == 0, cost)
bad = [c for c in checks if not c[1]]
for what, ok, got in checks:
    print(f"  {'ok ' if ok else 'BAD'} {what}" + (f"  ({got})" if got is not None else ""))
if bad:
    sys.exit(1)
PY

# The record tells the same story: A's tenure ended expired, B's epoch is above A's.
STATUS=$("$LEASE_BIN" status "$LEASE" --json)
python3 - "$STATUS" <<'PY'
import json, os, sys
s = json.loads(sys.argv[1])
a, b = int(os.environ["A_EPOCH"]), int(os.environ["B_EPOCH"])
assert s["state"] == "released" and s["epoch"] == b > a, s
assert [(t["epoch"], t["end"]) for t in s["history"]][:1] == [(a, "expired")], s["history"]
print("  ok  the record's history: A's tenure ended expired, B released")
PY
say "all checks passed"
