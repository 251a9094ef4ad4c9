#!/usr/bin/env python3
"""Summarize a cargo-mutants run per file (scripts/mutants.sh prints it; docs/verification.md
records it).

    mutants-summary.py OUTCOMES_JSON [ALL_LIST]

OUTCOMES_JSON is mutants.out/outcomes.json. ALL_LIST, if given, is `cargo mutants --list`
without the exclusions of .cargo/mutants.toml: the difference per file is the excluded count.
Prints a Markdown table: mutants generated, excluded, caught, unviable, timeout, missed; then
every missed and timed-out mutant by name.
"""

import collections
import json
import sys

KINDS = {
    "CaughtMutant": "caught",
    "MissedMutant": "missed",
    "Unviable": "unviable",
    "Timeout": "timeout",
}


def main() -> int:
    outcomes = json.load(open(sys.argv[1]))["outcomes"]
    counts = collections.defaultdict(collections.Counter)
    notable = []
    for o in outcomes:
        mutant = o["scenario"]
        if not isinstance(mutant, dict) or "Mutant" not in mutant:
            continue  # the baseline
        m = mutant["Mutant"]
        kind = KINDS.get(o["summary"], o["summary"])
        counts[m["file"]][kind] += 1
        if kind in ("missed", "timeout"):
            notable.append(f"{kind.upper():8} {m['name']}")
    generated = collections.Counter()
    if len(sys.argv) > 2:
        for line in open(sys.argv[2]):
            if line.strip():
                generated[line.split(":", 1)[0]] += 1
    files = sorted(set(counts) | set(generated))
    print("| file | mutants | excluded | tested | caught | unviable | timeout | missed |")
    print("|---|---|---|---|---|---|---|---|")
    total = collections.Counter()
    for f in files:
        c = counts[f]
        tested = sum(c.values())
        row = {
            "mutants": generated[f] or tested,
            "excluded": (generated[f] - tested) if generated[f] else 0,
            "tested": tested,
            **{k: c[k] for k in ("caught", "unviable", "timeout", "missed")},
        }
        total.update(row)
        name = f.removeprefix("core/src/protocol/")
        print(f"| {name} | " + " | ".join(str(row[k]) for k in (
            "mutants", "excluded", "tested", "caught", "unviable", "timeout", "missed")) + " |")
    print("| **all** | " + " | ".join(str(total[k]) for k in (
        "mutants", "excluded", "tested", "caught", "unviable", "timeout", "missed")) + " |")
    for line in notable:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
