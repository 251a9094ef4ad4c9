#!/usr/bin/env python3
"""The cost of lease_fence on a one-row transaction, against the same transaction without it,
in one run (docs/benchmarks.md, "Fencing at PostgreSQL").

Usage: postgres/bench/fence_cost.py [--rounds N] [--seconds S] [--durable]

Starts a PostgreSQL server of its own (scripts/postgres.sh; --durable: fsync on, the server's
defaults, so each commit waits for the disk; else fsync off, where the fence's share is
largest), installs lease_fence, and runs pgbench (one client, prepared statements) over
loopback in alternating rounds of S seconds:

  plain         BEGIN; UPDATE counter SET n = n + 1 WHERE id = 1; COMMIT
  fenced        BEGIN; SELECT lease_fence('bench', TOKEN); UPDATE …; COMMIT
  plain-pipe    the plain transaction in one pipeline (\\startpipeline … \\endpipeline)
  fenced-pipe   the fenced one in one pipeline: the fence rides in the same round trip

and prints each variant's median latency over the rounds and the median of the per-round
ratios fenced/plain (the machine's load changes between rounds, not within one).
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKEN = "file:///bench/lease#1795630000000@0123456789abcdef0123456789abcdef"
SCRIPTS = {
    "plain": "BEGIN;\nUPDATE counter SET n = n + 1 WHERE id = 1;\nCOMMIT;\n",
    "fenced": f"BEGIN;\nSELECT lease_fence('bench', '{TOKEN}');\nUPDATE counter SET n = n + 1 WHERE id = 1;\nCOMMIT;\n",
    "plain-pipe": "\\startpipeline\nBEGIN;\nUPDATE counter SET n = n + 1 WHERE id = 1;\nCOMMIT;\n\\endpipeline\n",
    "fenced-pipe": f"\\startpipeline\nBEGIN;\nSELECT lease_fence('bench', '{TOKEN}');\nUPDATE counter SET n = n + 1 WHERE id = 1;\nCOMMIT;\n\\endpipeline\n",
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--seconds", type=int, default=3)
    p.add_argument("--durable", action="store_true")
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="lease-pg-bench.")
    env_file = os.path.join(tmp, "env")
    start = [os.path.join(ROOT, "scripts/postgres.sh"), "start", "--env-file", env_file]
    subprocess.run(start + (["--durable"] if args.durable else []), check=True)
    try:
        lines = [x.strip().removeprefix("export ") for x in open(env_file)]
        env = dict(x.split("=", 1) for x in lines if x)
        dsn, bindir = env["LEASE_TEST_PG"].strip("'"), env["LEASE_TEST_PG_BIN"].strip("'")
        psql = [os.path.join(bindir, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", dsn]
        subprocess.run(psql + ["-1", "-f", os.path.join(ROOT, "postgres/lease_fence.sql")], check=True)
        subprocess.run(psql + ["-c", "CREATE TABLE counter (id int PRIMARY KEY, n bigint); INSERT INTO counter VALUES (1, 0)"], check=True)
        files = {}
        for name, text in SCRIPTS.items():
            files[name] = os.path.join(tmp, name + ".sql")
            with open(files[name], "w") as f:
                f.write(text)
        lat: dict[str, list[float]] = {k: [] for k in SCRIPTS}
        for r in range(args.rounds):
            for name in SCRIPTS:
                out = subprocess.run(
                    [os.path.join(bindir, "pgbench"), "-n", "-M", "prepared", "-c", "1", "-T", str(args.seconds),
                     "-f", files[name], dsn], check=True, capture_output=True, text=True).stdout
                m = re.search(r"latency average = ([0-9.]+) ms", out)
                assert m, out
                lat[name].append(float(m.group(1)) * 1000)
        load = open("/proc/loadavg").read().split()[:3]
        mode = "fsync on (durable commits)" if args.durable else "fsync off"
        print(f"\n{mode}; {args.rounds} rounds of {args.seconds:g} s per variant; load average {' '.join(load)}\n")
        print("| variant | median latency (µs) | fenced / plain (median of rounds) |")
        print("|---|---|---|")
        for name in SCRIPTS:
            base = name.replace("fenced", "plain")
            ratio = ""
            if name != base:
                ratios = [f / b for f, b in zip(lat[name], lat[base])]
                ratio = f"{statistics.median(ratios):.2f} (+{(statistics.median(ratios) - 1) * 100:.0f} %)"
            print(f"| {name} | {statistics.median(lat[name]):.0f} | {ratio} |")
    finally:
        subprocess.run([os.path.join(ROOT, "scripts/postgres.sh"), "stop", "--env-file", env_file], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
