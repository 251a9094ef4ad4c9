#!/usr/bin/env python3
"""Fail when a crate's top-level modules import each other in a circle.

Usage: module-cycles.py SRC_DIR [SRC_DIR ...]   (each the `src/` of one crate)
       module-cycles.py --self-test              (the check finds a circle it is shown)

A module's dependencies are the `crate::NAME` paths in its code (test modules and comments left
out), and
`crate::Item` paths resolved through the crate root's `pub use NAME::{...}` re-exports. A
circle (Tarjan's strongly connected components) means the modules cannot be read or tested
one without the other; docs/verification.md says why the code keeps none.
"""
import os
import re
import sys
import tempfile


def modules(src):
    """{top-level module: its source text without test modules}"""
    out = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)[:-3].split(os.sep)
            if rel[-1] in ("tests",) or rel[-1].endswith("_tests"):
                continue
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            top = rel[0] if rel else ""
            text = open(os.path.join(dirpath, f), encoding="utf-8").read()
            text = text.split("#[cfg(test)]")[0]
            # Comments (and intra-doc links in them) are not imports.
            text = re.sub(r"(?m)^\s*//.*$", "", text)
            out[top] = out.get(top, "") + text
    return out


def graph(src):
    mods = modules(src)
    root = mods.get("", "")
    # `pub use NAME::{A, B}` / `pub use NAME::A` at the crate root: item -> module.
    owner = {}
    for m, items in re.findall(r"pub use ([a-z_]+)::\{?([^;}]*)\}?;", root):
        for item in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", items):
            owner[item] = m
    g = {}
    for m, text in mods.items():
        if not m:
            continue
        deps = set(re.findall(r"\bcrate::([a-z_][a-z0-9_]*)", text))
        deps |= {owner[i] for i in re.findall(r"\bcrate::([A-Z][A-Za-z0-9_]*)", text) if i in owner}
        g[m] = {d for d in deps if d != m and d in mods}
    return g


def circles(g):
    index, low, stack, on, found, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def self_test():
    with tempfile.TemporaryDirectory() as d:
        files = {
            "lib.rs": "mod a;\nmod b;\nmod c;\npub use c::Thing;\n",
            "a.rs": "use crate::b::x;\n",
            "b.rs": "use crate::Thing;\n",
            "c.rs": "pub struct Thing;\nfn f() { crate::a::y(); }\n#[cfg(test)]\nmod tests { use crate::b; }\n",
        }
        for name, text in files.items():
            open(os.path.join(d, name), "w").write(text)
        found = circles(graph(d))
        assert found == [["a", "b", "c"]], found
        open(os.path.join(d, "c.rs"), "w").write("pub struct Thing;\n")
        assert circles(graph(d)) == [], "a circle reported where there is none"
    print("module-cycles: self-test passed")


def main(args):
    if args == ["--self-test"]:
        self_test()
        return 0
    bad = 0
    for src in args:
        for comp in circles(graph(src)):
            print(f"{src}: modules import each other in a circle: {' -> '.join(comp)}")
            bad = 1
    if not bad:
        print(f"module-cycles: no circles in {', '.join(args)}")
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
