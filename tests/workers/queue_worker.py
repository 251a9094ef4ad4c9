"""A Python worker of the queued-lock history test (tests/tests/queue_history.rs).

    python queue_worker.py LOG SPEC

Does exactly what `lease-queue-worker run LOG SPEC` does (tests/src/bin/queue-worker.rs has
the SPEC's fields), with the Python package: acquire, act (a belief check each time), read or
write the data, release, SPEC.iterations times, appending each event to LOG as a JSON line on
CLOCK_MONOTONIC (time.monotonic_ns, which every process of the machine shares).

Readers read through the grant's ``Lease.fenced_read``, which fences what it read (issue 22
item 5).
"""

import json
import os
import sys
import threading
import time

import lease


def main() -> None:
    log_path, spec_json = sys.argv[1:3]
    spec = json.loads(spec_json)
    name = spec["name"]

    def log(ev, t=None, **fields):
        line = {"t": time.monotonic_ns() if t is None else t, "w": name, "ev": ev, **fields}
        with open(log_path, "a") as f:
            f.write(json.dumps(line) + "\n")

    log("start", pid=os.getpid(), lang="python", gated=True)
    kwargs = dict(
        ttl=spec["ttl_ms"] / 1000,
        wait=spec.get("wait_ms", 120_000) / 1000,
        poll=spec["poll_ms"] / 1000,
        label=name,
        shared=spec["mode"] == "shared" and spec.get("permits") is None,
        queue=bool(spec.get("queue")),
    )
    if spec.get("permits") is not None:
        kwargs["permits"] = spec["permits"]
    scope = spec["scope"]
    if scope.startswith("path:"):
        kwargs["scope"] = scope[len("path:"):]
    elif scope.startswith("range:"):
        a, b = scope[len("range:"):].split("..")
        kwargs["range"] = (int(a), int(b))
    request = {k: spec.get(k) for k in ("lock", "mode", "scope", "permits", "ttl_ms", "poll_ms")}
    act_pause = spec["hold_ms"] / max(spec["acts"], 1) / 1000

    current = {"lease": None}
    ttl_ns = spec["ttl_ms"] * 1_000_000

    def watch_renewals():
        last = 0
        while True:
            held = current["lease"]
            if held is None:
                last = 0
            else:
                now = time.monotonic_ns()
                remaining = held.remaining()
                if remaining > 0:
                    deadline = now + int(remaining * 1e9)
                    if deadline > last + 5_000_000:
                        log("renewed", t=now, t_send=deadline - ttl_ns)
                    last = max(last, deadline)
            time.sleep(0.02)

    threading.Thread(target=watch_renewals, daemon=True).start()

    def read(held, key):
        try:
            o = held.fenced_read(key)
        except lease.LeaseError as e:
            return {"error": str(e)}
        return {"value": None if o is None else bytes(o.data).decode()}

    def write(held, key, value, checked=True, **kw):
        sent = time.monotonic_ns()
        try:
            held.fenced_put(key, value, **kw)
            outcome = "ok"
        except lease.LeaseError as e:
            outcome = kind(e)
        log("write", key=key, value=value, outcome=outcome, sent=sent, checked=checked)

    if spec.get("go"):
        # Warm: the first request (client, connection) before the clock runs; then the
        # round's start, which every worker's first request waits for.
        try:
            lease.status(spec["url"])
        except lease.LeaseError:
            pass
        log("ready")
        until = time.monotonic() + 120
        while not os.path.exists(spec["go"]):
            if time.monotonic() > until:
                sys.exit("queue_worker.py: the round's start %s never came" % spec["go"])
            time.sleep(0.005)

    for i in range(spec["iterations"]):
        log("request", **request)
        try:
            held = lease.acquire(spec["url"], **kwargs)
        except lease.LeaseError as e:
            log("error", kind=kind(e), message=str(e))
            time.sleep(max(spec.get("pause_ms", 0), 100) / 1000)
            continue
        log("grant", token=held.epoch, queued=held.grant is not None)
        current["lease"] = held
        data = spec.get("data")
        for a in range(spec["acts"]):
            t = time.monotonic_ns()
            try:
                held.ensure_held(0)
            except lease.LeaseError:
                log("lost", reason=str(held.lost_reason))
                break
            log("act", t=t)
            if data and spec.get("role") == "reader":
                log("read", key=data, **read(held, data))
            elif data and spec.get("role") == "writer":
                write(held, data, f"{name}:{held.epoch}:{i}:{a}")
            time.sleep(act_pause)
        else:
            t = time.monotonic_ns()
            try:
                held.ensure_held(0)
                log("end", t=t)
            except lease.LeaseError:
                log("lost", reason="at the end")
        current["lease"] = None
        try:
            held.release()
            outcome = "ok"
        except lease.LeaseError as e:
            outcome = kind(e)
        log("released", outcome=outcome)
        time.sleep(spec.get("pause_ms", 0) / 1000)
    log("done")


def kind(e: BaseException) -> str:
    """The library's stable error kind (``held``, ``lost``, ``fenced``, …), as Rust names it."""
    return getattr(e, "kind", type(e).__name__)


if __name__ == "__main__":
    main()
