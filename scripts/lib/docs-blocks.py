#!/usr/bin/env python3
"""Fail when a fenced code block of the user docs is run by no test and says nothing about it.

Usage: docs-blocks.py [ROOT]        (the checkout; default: this script's)
       docs-blocks.py --self-test   (the check finds an unrun block it is shown)

Every block of README.md, python/README.md, node/README.md and docs/ffi.md is either in a
language a docs harness runs in that file (HARNESSED below: python/tests/test_readme.py,
node/test/readme.test.js, ffi/tests/docs/run.py, and core/src/lib.rs, which compiles the
README's Rust example as a doctest), or carries, on the line before its opening fence,
`<!-- docs-test: skip (REASON) -->` naming the test or script that runs its equivalent (the
marker node/test/readme.test.js reads). So a new block cannot slip in unrun. A marked block
in a harnessed language is skipped by the Node harness only; the others run every block of
their language, so a marker there would be a lie: it is refused too.
"""
import os
import re
import sys
import tempfile

# The languages each file's harnesses run, as written after the opening fence.
HARNESSED = {
    "README.md": {"python", "js", "go", "rust,no_run"},
    "python/README.md": {"python"},
    "node/README.md": {"js"},
    # The block without a language is the go.mod `require`/`replace` that run.py builds with.
    "docs/ffi.md": {"c", "go", ""},
}
# Harnesses that honour the skip marker, by language.
MARKER_HONOURED = {"js"}
MARKER = re.compile(r"^<!-- docs-test: skip \((.+)\) -->$")
FENCE = re.compile(r"^(```+|~~~+)(.*)$")


def blocks(text):
    """[(line number of the opening fence, info string, the line before it)]"""
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group(1), m.group(2).strip()
        before = lines[i - 1] if i > 0 else ""
        out.append((i + 1, info, before))
        # The block ends at the next fence of the same kind and at least the same length.
        j = i + 1
        while j < len(lines) and not (
            lines[j].startswith(fence[0] * len(fence)) and lines[j].strip(fence[0]) == ""
        ):
            j += 1
        i = j + 1
    return out


def problems(root, harnessed=HARNESSED):
    """What is wrong, one line each: `FILE:LINE: why`."""
    out = []
    for name, langs in harnessed.items():
        path = os.path.join(root, name)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for line, info, before in blocks(text):
            marker = MARKER.match(before)
            where = f"{name}:{line}"
            if info in langs:
                if marker and info not in MARKER_HONOURED:
                    out.append(
                        f"{where}: a ```{info} block is run by its harness, which does not read "
                        "the skip marker: remove the marker"
                    )
                continue
            if not marker:
                shown = info or "(no language)"
                out.append(
                    f"{where}: the ```{shown} block is run by no docs harness (these run "
                    f"{', '.join(sorted(langs))} here): put "
                    "`<!-- docs-test: skip (REASON) -->` on the line before it, naming the "
                    "test or script that runs its equivalent, or write it in a harnessed language"
                )
    return out


def self_test():
    """The check passes a file whose blocks are all accounted for, and names each kind of miss."""
    with tempfile.TemporaryDirectory() as root:
        good = (
            "# t\n\n```python\nprint(1)\n```\n\n"
            "<!-- docs-test: skip (scripts/test-python.sh runs it) -->\n"
            "```sh\npip install ./python\n```\n\n"
            "<!-- docs-test: skip (shows markdown) -->\n"
            "````markdown\n```sh\nnot a block of its own\n```\n````\n"
        )
        bad = (
            "```sh\nmake\n```\n\n"
            "<!-- docs-test: skip () -->\n```bash\nx\n```\n\n"
            "<!-- docs-test: skip (why) -->\n```python\nprint(2)\n```\n\n"
            "```\nno language\n```\n"
        )
        for name, text in (("good.md", good), ("bad.md", bad)):
            with open(os.path.join(root, name), "w", encoding="utf-8") as f:
                f.write(text)
        got = problems(root, {"good.md": {"python"}})
        assert got == [], got
        got = problems(root, {"bad.md": {"python"}})
        lines = [p.split(":")[1] for p in got]
        assert lines == ["1", "6", "11", "15"], got
        assert "```sh block is run by no docs harness" in got[0], got
        assert "remove the marker" in got[2], got
        assert "(no language)" in got[3], got
    print("docs-blocks self-test: ok (an unrun block, an empty reason, a needless marker and a "
          "block without a language are found; a marked block and a nested fence are not)")


def main(argv):
    if argv[1:] == ["--self-test"]:
        self_test()
        return 0
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    found = problems(root)
    for p in found:
        print(p, file=sys.stderr)
    if found:
        print(f"docs-blocks: {len(found)} block(s) run by no test and not marked", file=sys.stderr)
        return 1
    n = sum(len(blocks(open(os.path.join(root, f), encoding="utf-8").read())) for f in HARNESSED)
    print(f"docs-blocks: every one of the {n} code blocks of {', '.join(HARNESSED)} is run by a "
          "harness or says which test runs its equivalent")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
