"""A worker that runs its job only while it is the leader.

    python examples/python/leader_worker.py LEASE_URL [--name NAME] [--steps N]

Start several on the same LEASE_URL (s3://bucket/elections/compactor, a file path, …): one
leads and works; the others wait. If the leader dies, another takes over after the ttl; if the
leader loses its lease (store unreachable, an operator ran `lease break`), it stops working at
once. Each step checks the lease first and hands its epoch (the fencing token) to the work.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time

import lease


def do_step(step: int, epoch: int) -> None:
    # Real work would pass `epoch` to whatever it writes, so a stale leader is refused.
    print(f"step {step} at epoch {epoch}", flush=True)
    time.sleep(0.1)


def run(url: str, name: str, steps: int) -> int:
    stop = threading.Event()
    election = lease.Election(url, ttl=5, label=name, data=f"{name}:8080")
    current = election.leader()
    print(f"{name}: leader now: {current.holder.label if current else 'nobody'}", flush=True)
    done = 0
    while done < steps and not stop.is_set():
        leadership = election.campaign()  # blocks until this worker leads
        print(f"{name}: leading at epoch {leadership.epoch}", flush=True)
        try:
            while done < steps and not leadership.lost.is_set():
                leadership.ensure_held(min_remaining=1)  # raises lease.LeaseLost
                do_step(done, leadership.epoch)
                done += 1
        except lease.LeaseLost as e:
            print(f"{name}: lost leadership, stopping work: {e}", flush=True)
            continue
        finally:
            try:
                election.resign()
            except lease.LeaseLost:
                pass
    print(f"{name}: did {done} steps", flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description="run a job only while leader")
    ap.add_argument("url")
    ap.add_argument("--name", default="worker")
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    return run(args.url, args.name, args.steps)


if __name__ == "__main__":
    sys.exit(main())
