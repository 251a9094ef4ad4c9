"""Acquire/release cycle from Python vs Rust (lease-cycle-bench), and py-filelock.

    python python/bench/cycle.py [--quick] [--rust PATH] [--markdown]

Measures, in one run on one machine, the cost of one acquire + release of an uncontended
lease on memory:// and file:// from Python (``lease.acquire(url).release()`` and the same with
``with``), the same loop in Rust ($LEASE_CYCLE_BENCH, built from tests/src/bin/cycle-bench.rs),
and py-filelock's ``with FileLock(path):`` on the same directory. Each figure is the median of
several alternating rounds, so drift of the machine hits both sides alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List

import lease


def py_cycle(url: str, n: int) -> float:
    acquire = lease.acquire
    t0 = time.perf_counter_ns()
    for _ in range(n):
        acquire(url, ttl=30, wait=10).release()
    return (time.perf_counter_ns() - t0) / n


def py_with_cycle(url: str, n: int) -> float:
    acquire = lease.acquire
    t0 = time.perf_counter_ns()
    for _ in range(n):
        with acquire(url, ttl=30, wait=10):
            pass
    return (time.perf_counter_ns() - t0) / n


def filelock_cycle(path: str, n: int) -> float:
    from filelock import FileLock

    lock = FileLock(path)
    t0 = time.perf_counter_ns()
    for _ in range(n):
        with lock:
            pass
    return (time.perf_counter_ns() - t0) / n


def rust_cycle(rust: str, url: str, n: int) -> float:
    out = subprocess.run(
        [rust, url, str(n), str(max(1, n // 10))],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["ns_per_cycle"])


def median_of(rounds: int, f: Callable[[], float]) -> float:
    return statistics.median(f() for _ in range(rounds))


def fmt(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} µs"
    return f"{ns:.0f} ns"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few iterations: checks it runs")
    ap.add_argument("--rust", default=os.environ.get("LEASE_CYCLE_BENCH"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--markdown", action="store_true", help="print the table for benchmarks.md")
    args = ap.parse_args()
    if not args.rust:
        print("set LEASE_CYCLE_BENCH or pass --rust PATH (cargo build --release -p "
              "lease-systests --bin lease-cycle-bench)", file=sys.stderr)
        return 2
    rounds = 1 if args.quick else args.rounds
    n_mem = 200 if args.quick else 20000
    n_file = 20 if args.quick else 1000
    results: Dict[str, Dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="lease-bench-") as d:
        cases = [
            ("memory", f"memory://bench/cycle-{os.getpid()}", n_mem),
            ("file", f"file://{d}/cycle", n_file),
        ]
        for name, url, n in cases:
            py_cycle(url, max(1, n // 10))  # warm up: runtime, store, client memo
            py_with_cycle(url, max(1, n // 10))
            rs: List[float] = []
            py: List[float] = []
            pw: List[float] = []
            for _ in range(rounds):
                rs.append(rust_cycle(args.rust, url, n))
                py.append(py_cycle(url, n))
                pw.append(py_with_cycle(url, n))
            results[name] = {
                "rust_ns": statistics.median(rs),
                "python_ns": statistics.median(py),
                "python_with_ns": statistics.median(pw),
                "iterations": n,
            }
        lock_path = os.path.join(d, "filelock.lock")
        filelock_cycle(lock_path, max(1, n_file // 10))
        results["file"]["filelock_ns"] = median_of(
            rounds, lambda: filelock_cycle(lock_path, n_file * 10)
        )
    for name, r in results.items():
        r["ratio"] = r["python_ns"] / r["rust_ns"]
        r["ratio_with"] = r["python_with_ns"] / r["rust_ns"]
    print(json.dumps(results))
    if args.markdown:
        print()
        print("| store | Rust | Python `acquire().release()` | ratio | Python `with acquire()` | ratio |")
        print("|---|---|---|---|---|---|")
        for name, r in results.items():
            print(
                f"| {name} | {fmt(r['rust_ns'])} | {fmt(r['python_ns'])} | {r['ratio']:.2f}× "
                f"| {fmt(r['python_with_ns'])} | {r['ratio_with']:.2f}× |"
            )
        f = results["file"]
        print()
        print("| on one directory | per acquire + release |")
        print("|---|---|")
        print(f"| py-filelock `with FileLock(path)` | {fmt(f['filelock_ns'])} |")
        print(f"| lease `with lease.acquire(file://…)` | {fmt(f['python_with_ns'])} |")
        print(f"| ratio | {f['python_with_ns'] / f['filelock_ns']:.0f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
