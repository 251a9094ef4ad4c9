"""Store requests while one Python process holds N queued locks: through one shared session
(lease.open_session) against a lease each (docs/benchmarks.md, "Shared sessions", "From
Python").

    python python/bench/shared_session.py [N] [TTL] [HOLD]     (defaults: 200 3 6)

Takes N locks on the file store (a fresh temporary directory) each way, then counts the
store's requests by kind (this process's lease_store_requests_total) over HOLD seconds of
holding. Prints one JSON line per mode.
"""

from __future__ import annotations

import collections
import json
import sys
import tempfile
import time
from typing import Counter, Dict

import lease


def requests() -> Counter[str]:
    c: Counter[str] = collections.Counter()
    for m in lease.metrics():
        if m["name"] == "lease_store_requests_total":
            for s in m["samples"]:
                c[s["labels"]["kind"]] += int(s["value"])
    return c


def held_for(hold: float) -> Dict[str, int]:
    a = requests()
    time.sleep(hold)
    b = requests()
    return {k: b[k] - a[k] for k in sorted(b) if b[k] - a[k]}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    ttl = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
    hold = float(sys.argv[3]) if len(sys.argv) > 3 else 6.0
    d = tempfile.mkdtemp()
    with lease.open_session(f"file://{d}", ttl=ttl) as s:
        t0 = time.monotonic()
        grants = [s.acquire(f"s-{i}", wait=30) for i in range(n)]
        took = time.monotonic() - t0
        counts = held_for(hold)
        assert all(g.held for g in grants)
    print(json.dumps({"mode": "shared session", "locks": n, "ttl": ttl, "hold_s": hold,
                      "acquire_all_s": round(took, 2), "requests": counts}))
    t0 = time.monotonic()
    leases = [lease.acquire(f"file://{d}/p-{i}", ttl=ttl, queue=True, wait=30) for i in range(n)]
    took = time.monotonic() - t0
    counts = held_for(hold)
    assert all(l.held for l in leases)
    for l in leases:
        l.release()
    print(json.dumps({"mode": "a lease each", "locks": n, "ttl": ttl, "hold_s": hold,
                      "acquire_all_s": round(took, 2), "requests": counts}))


if __name__ == "__main__":
    main()
