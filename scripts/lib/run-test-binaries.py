#!/usr/bin/env python3
"""Run the test binaries `cargo test --no-run` built, a few at a time, and say how long each took.

Usage: run-test-binaries.py [--lanes N] [--timeout SECONDS] BUILD_JSON
       (BUILD_JSON: the output of `cargo test --no-run --message-format=json-render-diagnostics`)

Why not `cargo test`: it runs the binaries one after another, and most of the Rust tests' time
is spent waiting (on store servers, child processes, ttls running out), not computing. Each
binary already runs its own tests two at a time (one per core); running two binaries side by
side fills the waits of one with the other. The binaries never share a store key: every test
names its own prefix, as it must to run beside the other tests of its binary.

Each binary runs as `cargo test` runs it: from its package's directory, with
CARGO_MANIFEST_DIR and CARGO_PKG_NAME set. Its output is printed whole when it ends, so the
outputs of binaries running side by side do not interleave. A binary still running after
--timeout seconds is killed and fails. All of them run even when one fails; the exit status is
1 if any failed, and the failures are named again at the end.

The slowest binaries start first (SLOWEST_FIRST, measured: docs/benchmarks.md), so no lane is
left with a long one at the end; a binary missing from that list only costs time, never a test.
"""

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

# The slowest binaries of `cargo test` (their target names), slowest first, as measured in the
# cold CI run of docs/benchmarks.md ("CI run"): fenced_rmw 112 s, multiprocess 40 s, ...
SLOWEST_FIRST = [
    "fenced_rmw",
    "multiprocess",
    "in_process",
    "queue",
    "queue_request_counts",
    "s3_faults",
    "history",
    "store_request_counts",
    "store_clocks",
    "shared_session",
    "unavailable",
    "cloud_tokens",
    "zombie",
    "store_s3",
]


@dataclass
class Binary:
    name: str  # an integration test's target name; else `name (lib)`, `name (bin)`
    exe: str
    package_dir: str
    package: str


def binaries(build_json):
    """The test binaries in a cargo build's JSON messages."""
    found = []
    seen = set()
    with open(build_json) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            m = json.loads(line)
            if m.get("reason") != "compiler-artifact" or not m.get("executable"):
                continue
            if not m["profile"]["test"] or m["executable"] in seen:
                continue
            seen.add(m["executable"])
            target = m["target"]
            kind = target["kind"][0]
            found.append(Binary(
                name=target["name"] if kind == "test" else f"{target['name']} ({kind})",
                exe=m["executable"],
                package_dir=os.path.dirname(m["manifest_path"]),
                package=package_name(m["package_id"]),
            ))
    return found


def order(found):
    """The slowest known first, then the rest as cargo built them."""
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    return sorted(found, key=lambda b: rank.get(b.name, len(rank)))


def package_name(package_id):
    # `path+file:///work/core#bucket-lease@0.1.0` or, older, `bucket-lease 0.1.0 (path+…)`.
    if "#" in package_id:
        tail = package_id.rsplit("#", 1)[1]
        return tail.split("@", 1)[0] if "@" in tail else os.path.basename(package_id.split("#")[0])
    return package_id.split(" ", 1)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lanes", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("build_json")
    args = ap.parse_args()
    if args.lanes < 1:
        ap.error("--lanes must be at least 1")

    found = order(binaries(args.build_json))
    if not found:
        print(f"no test binary in {args.build_json}: was it made by `cargo test --no-run "
              "--message-format=json-render-diagnostics`?", file=sys.stderr)
        return 1

    todo = queue.Queue()
    for b in found:
        todo.put(b)
    print_lock = threading.Lock()
    results = []  # (seconds, name, outcome)

    def run(b):
        env = dict(os.environ, CARGO_MANIFEST_DIR=b.package_dir, CARGO_PKG_NAME=b.package)
        t0 = time.monotonic()
        try:
            p = subprocess.run([b.exe], cwd=b.package_dir, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=args.timeout)
            out, outcome = p.stdout, ("ok" if p.returncode == 0 else f"failed (exit {p.returncode})")
        except subprocess.TimeoutExpired as e:
            out, outcome = e.stdout or b"", f"killed after {args.timeout:.0f} s"
        secs = time.monotonic() - t0
        with print_lock:
            print(f"\n--- {b.name}: {outcome} in {secs:.1f} s ({os.path.relpath(b.exe)})", flush=True)
            sys.stdout.write(out.decode(errors="replace"))
            sys.stdout.flush()
            results.append((secs, b.name, outcome))

    def lane():
        while True:
            try:
                b = todo.get_nowait()
            except queue.Empty:
                return
            run(b)

    t0 = time.monotonic()
    lanes = [threading.Thread(target=lane) for _ in range(args.lanes)]
    for t in lanes:
        t.start()
    for t in lanes:
        t.join()
    wall = time.monotonic() - t0

    total = sum(r[0] for r in results)
    print(f"\n=== {len(results)} test binaries in {wall:.0f} s ({total:.0f} s one after another), "
          f"{args.lanes} at a time; the slowest:")
    for secs, name, outcome in sorted(results, reverse=True)[:12]:
        print(f"{secs:7.1f} s  {name}  {outcome}")
    failed = [r for r in results if r[2] != "ok"]
    for _, name, outcome in failed:
        print(f"FAILED: {name}: {outcome}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
