#!/usr/bin/env python3
"""Fail when a fenced code block of the user docs is run by no test and says nothing about it,
or when a document names a path the repository does not have.

Usage: docs-blocks.py [ROOT]        (the checkout; default: this script's)
       docs-blocks.py --self-test   (the check finds an unrun block and a missing path it is shown)

Every block of README.md, python/README.md, node/README.md and docs/ffi.md is either in a
language a docs harness runs in that file (HARNESSED below: python/tests/test_readme.py,
node/test/readme.test.js, ffi/tests/docs/run.py, and core/src/lib.rs, which compiles the
README's Rust example as a doctest), or carries, on the line before its opening fence,
`<!-- docs-test: skip (REASON) -->` naming the test or script that runs its equivalent (the
marker node/test/readme.test.js reads). So a new block cannot slip in unrun. A marked block
in a harnessed language is skipped by the Node harness only; the others run every block of
their language, so a marker there would be a lie: it is refused too.

Paths: every Markdown file of the repository may name only files and folders that exist. A path
is what a code span, a link or a code block names that starts with a folder of the repository
(`core/src/queue.rs`, `scripts/`), or, outside code blocks, a file name with a source file's
extension (`queue.rs`, `store/url/mod.rs`); it exists when it is found from the repository's
root, from the document's folder, or as the end of a tracked path. Build outputs git ignores
(`node/lease.node`), URLs, placeholders and globs do not count.
"""
import os
import re
import subprocess
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


# The second rule: every repository path a document names exists. A path is named in a code
# span, a link or a code block, and is a path when it starts with a folder of the repository
# (`core/src/queue.rs`, `scripts/`) or ends with a source file's extension (`queue.rs`,
# `store/url/mod.rs`); URLs, placeholders and globs (`$X`, `*`, `…`, `{`, `<`) are not paths.
EXTENSIONS = ("rs", "py", "pyi", "sh", "js", "mjs", "ts", "go", "c", "h", "toml", "md")
WORD = re.compile(r"[A-Za-z0-9_./@+:#-]+")


def tracked(root):
    """The repository's files and folders, as paths from its root (folders end with `/`)."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True,
                             check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        out = [os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
               for d, _, fs in os.walk(root) for f in fs if ".git" not in d.split(os.sep)]
    paths = set()
    for f in filter(None, out):
        paths.add(f)
        parts = f.split("/")
        for i in range(1, len(parts)):
            paths.add("/".join(parts[:i]) + "/")
    return paths


def candidates(text):
    """[(line number, word, the language of its code block or None)]: what a document names
    that may be a path."""
    out, block = [], None  # the language of the code block we are in, if any
    for n, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if m:
            block = None if block is not None else m.group(2).strip()
            continue
        if block is not None:
            words = WORD.findall(line)
        else:
            spans = re.findall(r"`([^`]+)`", line) + re.findall(r"\]\(([^)\s]+)\)", line)
            words = [w for span in spans for w in span.split()]
        out.extend((n, w, block) for w in words)
    return out


def as_path(word, tops, block):
    """The path `word` names, or None when it names none. In a code block (`block` is its
    language) only paths from a folder of the repository count (`cc worker.c` is the reader's
    file), but for a `text` block: a listing of the tree, whose every name counts."""
    if "://" in word or any(c in word for c in "$*{<…~") or word.startswith(("/", "./", "../")):
        return None
    word = word.split("::")[0]  # `core/tests/in_process/protocol.rs::a_test`
    word = re.sub(r"#.*$", "", word)  # a link's anchor
    word = re.sub(r"(:\d+)+$", "", word).rstrip(".,:;)")
    if "/" in word and word.split("/")[0] + "/" in tops:
        return word
    if (block is not None and block != "text") or word.startswith("."):
        return None
    return word if re.search(r"\.(" + "|".join(EXTENSIONS) + r")$", word) else None


def ignored(root, paths):
    """The paths git ignores (build outputs such as `node/lease.node`)."""
    if not paths:
        return set()
    r = subprocess.run(["git", "-C", root, "check-ignore", "--stdin", "-z"],
                       input="\0".join(paths).encode(), capture_output=True)
    return set(filter(None, r.stdout.decode().split("\0")))


def missing_paths(root, names):
    """`FILE:LINE: why` for each path named in the files `names` that the tree does not have."""
    have = tracked(root)
    tops = {p for p in have if p.count("/") == 1 and p.endswith("/")}
    found = []
    for name in names:
        with open(os.path.join(root, name), encoding="utf-8") as f:
            text = f.read()
        here = os.path.dirname(name)
        for line, word, block in candidates(text):
            path = as_path(word, tops, block)
            if path is None:
                continue
            local = os.path.normpath(os.path.join(here, path)).replace(os.sep, "/")
            forms = {path, path.rstrip("/"), path.rstrip("/") + "/", local, local + "/"}
            if forms & have or any(p.endswith("/" + path) for p in have):
                continue
            found.append((name, line, path, local))
    outputs = ignored(root, sorted({p for _, _, p, _ in found} | {p for _, _, _, p in found}))
    return [
        f"{name}:{line}: `{path}` is not a file or folder of the repository (looked for from "
        f"its root, from {os.path.dirname(name) or '.'}/, and as the end of a path): write the "
        "path as it is now, or leave it out"
        for name, line, path, local in found
        if path not in outputs and local not in outputs
    ]


def documents(root):
    """Every tracked Markdown file."""
    return sorted(p for p in tracked(root) if p.endswith(".md"))


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
    with tempfile.TemporaryDirectory() as root:
        tree = {
            "core/src/queue.rs": "", "core/src/store/url/mod.rs": "", "python/lease/x.py": "",
            ".gitignore": "*.node\n",
            "docs/a.md": (
                "Drivers: `core/src/queue.rs`, `queue.rs`, `store/url/` and `core/src/store/`,\n"
                "[the URLs](../core/src/store/url/mod.rs#L3), `python/lease/x.py:12`, built to\n"
                "`node/lease.node`; keys `locks/gc`, `s3://b/x.rs`, `tests/*.rs`, `$HOME/x.rs`.\n"
                "```sh\ncc worker.c && core/src/queue.rs\n```\n"
                "Gone: `core/src/store/url.rs`, `store/file.rs`, [x](stores.md),\n"
                "```text\ncore/src/registry.rs\n  queue.rs, registry.rs\n```\n"
            ),
        }
        write_tree(root, tree)
        subprocess.run(["git", "-C", root, "init", "-q"], check=True)
        subprocess.run(["git", "-C", root, "add", "-A"], check=True)
        got = missing_paths(root, ["docs/a.md"])
        named = [(p.split(":")[1], p.split("`")[1]) for p in got]
        assert named == [("7", "core/src/store/url.rs"), ("7", "store/file.rs"),
                         ("7", "stores.md"), ("9", "core/src/registry.rs"),
                         ("10", "registry.rs")], got
        assert "write the path as it is now" in got[0], got
    print("docs-blocks self-test: ok (an unrun block, an empty reason, a needless marker and a "
          "block without a language are found; a marked block and a nested fence are not; "
          "paths that are gone are found, in spans, links and code blocks, while paths that "
          "exist, build outputs, keys, URLs and globs are not)")


def write_tree(root, files):
    for name, text in files.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


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
    docs = documents(root)
    gone = missing_paths(root, docs)
    for p in gone:
        print(p, file=sys.stderr)
    if gone:
        print(f"docs-blocks: {len(gone)} path(s) named in the docs do not exist", file=sys.stderr)
    if found or gone:
        return 1
    n = sum(len(blocks(open(os.path.join(root, f), encoding="utf-8").read())) for f in HARNESSED)
    print(f"docs-blocks: every one of the {n} code blocks of {', '.join(HARNESSED)} is run by a "
          "harness or says which test runs its equivalent; every path named in the "
          f"{len(docs)} Markdown files exists")
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv))
