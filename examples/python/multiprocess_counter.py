"""Processes of one machine (or many, on S3) taking turns on one lease.

    python examples/python/multiprocess_counter.py LEASE_URL COUNTER_FILE [--procs N] [--rounds R]

Each process increments a counter file under the lease, R times; the lease makes the
read-modify-write exclusive, so the final count is exactly N × R. Each holder checks the lease
before writing and records the epoch it wrote at.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
from typing import List

import lease


def work(url: str, counter: str, rounds: int) -> List[int]:
    epochs: List[int] = []
    for _ in range(rounds):
        with lease.acquire(url, ttl=10, wait=60, label=f"pid {os.getpid()}") as held:
            with open(counter) as f:
                n = int(f.read() or "0")
            held.ensure_held(min_remaining=1)  # still ours before the write
            with open(counter, "w") as f:
                f.write(str(n + 1))
            epochs.append(held.epoch)
    return epochs


def main() -> int:
    ap = argparse.ArgumentParser(description="processes taking turns on one lease")
    ap.add_argument("url")
    ap.add_argument("counter")
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with open(args.counter, "w") as f:
        f.write("0")
    with multiprocessing.get_context("spawn").Pool(args.procs) as pool:
        results = pool.starmap(work, [(args.url, args.counter, args.rounds)] * args.procs)
    epochs = sorted(e for r in results for e in r)
    with open(args.counter) as f:
        total = int(f.read())
    print(f"counter = {total}, epochs {epochs[0]}..{epochs[-1]}, all distinct: "
          f"{len(set(epochs)) == len(epochs)}")
    return 0 if total == args.procs * args.rounds and len(set(epochs)) == len(epochs) else 1


if __name__ == "__main__":
    sys.exit(main())
