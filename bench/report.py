#!/usr/bin/env python3
"""Turn criterion's estimates for core/benches/lease.rs into the table of docs/benchmarks.md.

Usage: cargo bench -p bucket-lease --bench lease && python3 bench/report.py [TARGET_DIR]

Each lease operation is shown beside its floor (the raw store writes it needs), both measured
in the same run, and their ratio.
"""
import json
import os
import sys

target = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CARGO_TARGET_DIR", "target")
root = os.path.join(target, "criterion")


def estimate(group, bench):
    path = os.path.join(root, group, bench, "new", "estimates.json")
    with open(path) as f:
        e = json.load(f)
    return e["median"]["point_estimate"]


def fmt(ns):
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} µs"
    return f"{ns:.0f} ns"


print("| store | operation | lease | floor (raw store writes) | ratio |")
print("|---|---|---|---|---|")
for group in ("memory", "file"):
    for op, floor, what in (("cycle", "floor_2_puts", "acquire + release"), ("renew", "floor_1_put", "renew")):
        lease, base = estimate(group, op), estimate(group, floor)
        print(f"| {group} | {what} | {fmt(lease)} | {fmt(base)} | {lease / base:.2f}× |")
