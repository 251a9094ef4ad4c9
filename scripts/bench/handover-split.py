#!/usr/bin/env python3
"""Where each hand-over of `lease-queue-bench` went (docs/benchmarks.md, "Where a slow
hand-over goes"): from its standard error under LEASE_BENCH_DEBUG=1, each round split into the
release until its wake hint was sent (the release's record read and conditional write) and the
hint to the waiter's grant, with the record write's own time. For object stores: on the file
store the kernel wakes the waiter before any hint, so its "hint to grant" comes out negative.

    python3 scripts/bench/handover-split.py ERR_FILE
"""
import re
import sys

UNITS = {"ns": 1e-6, "µs": 1e-3, "ms": 1.0, "s": 1000.0}


def ms(text):
    m = re.match(r"[0-9.]+", text)
    return float(m.group()) * UNITS[text[m.end():]]


def span_ms(line):
    busy = re.search(r"time\.busy=(\S+)", line)[1]
    idle = re.search(r"time\.idle=(\S+)", line)[1]
    return ms(busy) + ms(idle)


def rounds(lines):
    """(hand-over, release until hint sent, hint to grant, record PUT) per round, in ms."""
    out, block = [], []
    for line in lines:
        m = re.match(r"round (\d+): hand-over ([\d.]+) ms, the release call [\d.]+ ms \(began at (\d+)", line)
        if not m:
            block.append(line)
            continue
        total, began = float(m[2]), int(m[3])
        after = [x for x in block if x[:1].isdigit() and int(x.split()[0]) > began]
        sent = [int(x.split()[0]) for x in after if "wake hints: sent one" in x]
        acquired = [int(x.split()[1]) for x in block if x.startswith("acquired ")]
        puts = [span_ms(x) for x in after if 'op="update"' in x and ".q/" not in x]
        if sent and acquired:
            out.append((total, (sent[0] - began) / 1e6, (acquired[-1] - sent[0]) / 1e6,
                        puts[0] if puts else float("nan")))
        block = []
    return sorted(out)


def main():
    rows = rounds(open(sys.argv[1], encoding="utf-8").read().splitlines())
    if not rows:
        sys.exit("no rounds with a hint sent: was LEASE_BENCH_DEBUG=1 set, and the mode queue-hints?")
    n = len(rows)
    print(f"rounds {n}")
    for name, q in [("median", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)]:
        t, a, b, put = rows[min(n - 1, round((n - 1) * q))]
        print(f"{name}: hand-over {t:.1f} ms = release until hint sent {a:.1f} "
              f"(of it the record PUT {put:.1f}) + hint to grant {b:.1f}")
    after = sorted(r[2] for r in rows)
    p = lambda q: after[min(n - 1, round((n - 1) * q))]
    print(f"hint to grant alone: median {p(0.5):.2f} p90 {p(0.9):.2f} p99 {p(0.99):.2f} max {after[-1]:.2f} ms")
    slow = [(round(r[0]), round(r[3])) for r in rows if r[0] > 50]
    print(f"hand-overs over 50 ms (hand-over, its record PUT): {len(slow)} {slow}")


if __name__ == "__main__":
    main()
