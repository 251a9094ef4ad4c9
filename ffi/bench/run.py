#!/usr/bin/env python3
"""liblease's benchmark: calls through the C ABI versus the same calls in Rust.

    python3 ffi/bench/run.py C_BENCH CALLS_BENCH CYCLE_BENCH [--quick] [--markdown]

C_BENCH is ffi/bench/bench.c built against liblease (scripts/test-ffi.sh builds it),
CALLS_BENCH the Rust baseline of the calls (cargo build --release -p lease-ffi --example
calls_bench), CYCLE_BENCH the Rust baseline of the cycle (lease-cycle-bench). All run on
memory://, so the figures are the library's own cost with no store I/O. Each figure is the
median of several rounds that alternate C and Rust, so drift of the machine hits both alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from typing import Dict, List


def run_json(cmd: List[str]) -> Dict[str, float]:
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def fmt(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} µs"
    return f"{ns:.1f} ns"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("c_bench")
    ap.add_argument("calls_bench")
    ap.add_argument("cycle_bench")
    ap.add_argument("--quick", action="store_true", help="a few iterations: checks it runs")
    ap.add_argument("--markdown", action="store_true", help="print a table for docs/benchmarks.md")
    args = ap.parse_args()
    calls, cycles, rounds = (10_000, 200, 1) if args.quick else (20_000_000, 20_000, 5)

    c: Dict[str, List[float]] = {"epoch_ns": [], "remaining_ns": [], "cycle_ns": []}
    rust: Dict[str, List[float]] = {"epoch_ns": [], "remaining_ns": [], "cycle_ns": []}
    for r in range(rounds):
        got = run_json([args.c_bench, "memory://ffi-bench", str(calls), str(cycles)])
        for k in c:
            c[k].append(got[k])
        got = run_json([args.calls_bench, "memory://ffi-bench/calls", str(calls)])
        rust["epoch_ns"].append(got["epoch_ns"])
        rust["remaining_ns"].append(got["remaining_ns"])
        got = run_json([args.cycle_bench, "memory://ffi-bench/cycle", str(cycles), str(cycles // 10 + 1)])
        rust["cycle_ns"].append(got["ns_per_cycle"])
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)

    rows = [
        ("`lease_epoch` vs `Lease::epoch`", "epoch_ns"),
        ("`lease_remaining_ms` vs `Lease::remaining`", "remaining_ns"),
        ("acquire + release cycle (memory://)", "cycle_ns"),
    ]
    ratio = {}
    if args.markdown:
        print("| call | C (liblease) | Rust (core) | ratio C / Rust |")
        print("|---|---|---|---|")
    for label, k in rows:
        cm, rm = statistics.median(c[k]), statistics.median(rust[k])
        ratio[k] = cm / rm if rm > 0 else float("inf")
        if args.markdown:
            print(f"| {label} | {fmt(cm)} | {fmt(rm)} | {ratio[k]:.2f}× |")
        else:
            print(f"{label:45} C {fmt(cm):>10}   Rust {fmt(rm):>10}   ratio {ratio[k]:.2f}x")
    if not args.quick:
        goal = "within" if ratio["cycle_ns"] <= 1.2 else "OVER"
        print(f"\ncycle ratio {ratio['cycle_ns']:.2f}x: {goal} the 1.2x goal "
              f"({rounds} rounds, {calls} calls, {cycles} cycles each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
