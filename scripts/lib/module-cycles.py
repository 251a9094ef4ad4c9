#!/usr/bin/env python3
"""Fail when a crate's modules depend on each other in a circle, by import or by call.

Usage: module-cycles.py SRC_DIR [SRC_DIR ...]   (each the `src/` of one crate)
       module-cycles.py --self-test              (the check finds each kind of circle it is shown)

Every folder of a crate is checked on its own: its files and subfolders are the nodes (a
subfolder with everything in it), and a circle among them fails. The folder's own root
(`lib.rs`, `main.rs`, `mod.rs`) is the folder's face, like a crate root: its children may use it
and it may use them. So `store/url/` and `store/s3/` may not need each other, and neither may
`acquire.rs` and `queue.rs`.

A file depends on another when it
- names it by path: `crate::a::b::Item`, `super::x`, `self::x`, `use` trees with braces, and
  `crate::Item` / `crate::a::Item` through the `pub use` re-exports of a folder's root;
- calls a method defined there: `self.m()` and `Self::m()` inside `impl T`, `T::m()` for a `T`
  the file defines or imports, and `x.m()` (receiver unknown) for every method `m` that an
  `impl` away from its type's own file defines.

Calls cannot hide behind that last, loose rule, because of a rule this check also enforces: an
`impl` block for a type of the crate lives in the file that defines the type (or, for a type of
a folder's root, in that folder), and a trait impl may also live with its trait. A method call
then lands in its receiver's file, and the caller reaches that file through what it imports
(it got the value from somewhere it names). Calls through a `dyn Trait` land where the caller
cannot see; that is how a circle is broken (docs/verification.md §4), not one.

Comments, string literals, `#[cfg(test)]` code and `tests.rs` / `*_tests.rs` files are left out.
There are no exceptions: a circle is broken, not listed.
"""
import os
import re
import sys
import tempfile

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


# ---------------------------------------------------------------------------------------------
# Reading Rust source: comments and literals out, then items, paths and calls.

def strip(text):
    """The code without comments, string and char literals (kept as `""` / `' '`), and without
    the items under `#[cfg(test)]`."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 260]) and not re.match(
                r"[A-Za-z0-9_]", text[i - 1] if i else " "):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            out.append('""')
            i = n if end < 0 else end + 1 + len(hashes)
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:i + 12])
            if m:
                out.append("' '")
                i += len(m.group(0))
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    code = "".join(out)
    # Each item under `#[cfg(test)]` (a test module, a helper) out: through its `;` or its block.
    while True:
        at = code.find("#[cfg(test)]")
        if at < 0:
            return code
        brace, semi = code.find("{", at), code.find(";", at)
        end = semi if semi >= 0 and (brace < 0 or semi < brace) else matching_brace(code, brace)
        code = code[:at] + code[end + 1:]


def matching_brace(code, open_at):
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code)


def use_paths(code):
    """[(path segments, the name it binds)] of every `use` tree, braces expanded."""
    out = []
    for m in re.finditer(r"\buse\s+([^;]+);", code):
        out.extend(expand(normalize(m.group(1)), []))
    return out


def expand(tree, prefix):
    """`a::{b, c::d as e}` -> [([a, b], b), ([a, c, d], e)] (whitespace already normalized)."""
    if "{" in tree:
        head, _, rest = tree.partition("{")
        body = rest[: rest.rfind("}")]
        base = prefix + [s for s in head.split("::") if s]
        parts, depth, cur = [], 0, ""
        for ch in body:
            depth += {"{": 1, "}": -1}.get(ch, 0)
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        return [x for p in parts if p.strip() for x in expand(p.strip(), base)]
    path, name = tree, None
    m = re.match(r"^(.*\S) as (" + IDENT + r")$", tree)
    if m:
        path, name = m.group(1), m.group(2)
    segs = prefix + [s for s in path.split("::") if s]
    if segs and segs[-1] == "self":
        segs = segs[:-1]
    return [(segs, name or (segs[-1] if segs else None))]


def normalize(tree):
    tree = re.sub(r"\s+", " ", tree)
    return re.sub(r"\s*(::|\{|\}|,)\s*", r"\1", tree).strip()


class File:
    def __init__(self, src, rel):
        self.rel = rel  # e.g. "store/url/mod.rs"
        parts = rel[:-3].split("/")
        if parts[-1] in ("mod", "lib", "main"):
            parts = parts[:-1]
        self.mod = tuple(parts)  # module path from the crate root
        self.is_root = rel.endswith(("mod.rs", "lib.rs", "main.rs"))
        with open(os.path.join(src, rel), encoding="utf-8") as f:
            self.code = strip(f.read())
        self.types = set(re.findall(
            r"\b(?:struct|enum|union|trait|type)\s+(" + IDENT + ")", self.code))
        self.traits = set(re.findall(r"\btrait\s+(" + IDENT + ")", self.code))
        self.uses = use_paths(self.code)
        # impl blocks: (type, trait or None, start, end)
        self.impls = []
        for m in re.finditer(r"\bimpl\b", self.code):
            before = self.code[: m.start()].rstrip()
            if before and before[-1] not in ";{}]" and not before.endswith("unsafe"):
                continue  # `-> impl Trait`, `x: impl Trait`: not an impl block
            brace = self.code.find("{", m.end())
            semi = self.code.find(";", m.end())
            if brace < 0 or (0 <= semi < brace):
                continue
            header = re.sub(r"\s+", " ", self.code[m.end():brace])
            header = re.sub(r"^\s*<[^{]*?>\s*(?=[A-Za-z_&(])", "", header)  # impl<'a, T>
            header = header.split(" where ")[0]
            trait, ty = None, header
            if " for " in f" {header} ":
                trait, ty = re.split(r"\s+for\s+", header.strip(), maxsplit=1)
                trait = trait.split("<")[0].split("::")[-1].strip()
            ty = ty.strip().lstrip("&").split("<")[0].strip()
            end = matching_brace(self.code, brace)
            self.impls.append((ty, trait, brace, end))

    def impl_at(self, pos):
        for ty, trait, start, end in self.impls:
            if start <= pos <= end:
                return ty, trait
        return None, None


def load(src):
    files = {}
    for dirpath, dirs, names in os.walk(src):
        rel_dir = os.path.relpath(dirpath, src)
        if rel_dir == "bin" or rel_dir.startswith("bin" + os.sep):
            continue  # binaries are crates of their own
        for f in names:
            if not f.endswith(".rs") or f == "tests.rs" or f.endswith("_tests.rs"):
                continue
            rel = os.path.normpath(os.path.join(rel_dir, f)).replace(os.sep, "/")
            files[rel] = File(src, rel)
    return files


# ---------------------------------------------------------------------------------------------
# The graph of files.

class Crate:
    def __init__(self, src):
        self.src = src
        self.files = load(src)
        self.by_mod = {f.mod: f for f in self.files.values()}
        # (module, name) -> module it is re-exported from (`pub use` in a module).
        self.reexports = {}
        for f in self.files.values():
            for m in re.finditer(r"\bpub(?:\([a-z]+\))?\s+use\s+([^;]+);", f.code):
                for segs, name in expand(normalize(m.group(1)), []):
                    target = self.absolute(f, segs)
                    if target and name:
                        self.reexports[(f.mod, name)] = target
        # Inherent methods: (type, method) -> {file}; and methods of impls away from their type.
        self.methods, self.away, self.folder_away = {}, {}, {}
        self.misplaced = []
        for f in self.files.values():
            for ty, trait, start, end in f.impls:
                home = self.home_of(ty, f)
                ty = ty.split("::")[-1]
                body = f.code[start:end]
                names = set(re.findall(r"\bfn\s+(" + IDENT + ")", body))
                if home is None:
                    continue
                if trait is None:
                    for n in names:
                        self.methods.setdefault((home.rel, ty, n), set()).add(f.rel)
                if f is home:
                    continue
                if self.at_home(f, home, trait):
                    if trait is None and home.is_root:  # a sibling of its folder may call it
                        for n in names:
                            self.folder_away.setdefault(n, set()).add((f.rel, home.mod))
                    continue
                self.misplaced.append((f.rel, ty, trait, home.rel))
                if trait is None:
                    for n in names:
                        self.away.setdefault(n, set()).add(f.rel)

    def home_of(self, ty, f):
        """The file that defines the type `ty` (a name, or a path) as file `f` sees it: `f`
        itself, what `f` imports under that name or through a glob, or None (another crate's)."""
        segs = ty.split("::")
        if len(segs) > 1:
            mod = self.absolute(f, segs[:-1])
            g = self.by_mod.get(mod) if mod else None
            return g if g and segs[-1] in g.types else None
        if ty in f.types:
            return f
        for segs, name in f.uses:
            if name == ty:
                mod = self.absolute(f, segs)
                g = self.by_mod.get(mod) if mod else None
                return g if g and ty in g.types else None
        for segs, name in f.uses:
            if name == "*":
                mod = self.absolute(f, segs[:-1])
                g = self.by_mod.get(mod) if mod else None
                if g and ty in g.types:
                    return g
        return None

    def methods_of(self, ty, name, f):
        """The files defining the method `name` of the type `ty` as file `f` sees it."""
        home = self.home_of(ty, f)
        if home is None:
            return set()
        return self.methods.get((home.rel, ty.split("::")[-1], name), set())

    def at_home(self, f, home, trait):
        """Whether an impl in `f` for a type of `home` is where the rule puts it."""
        if f is home:
            return True
        if home.is_root and f.mod[: len(home.mod)] == home.mod:
            return True  # a folder's root type, implemented in its folder
        if trait is not None and trait in f.traits:
            return True  # a trait impl beside its trait
        return False

    def absolute(self, f, segs):
        """The module (tuple) a path in file `f` points into, or None (another crate)."""
        if not segs:
            return None
        if segs[0] == "crate":
            base, rest = (), segs[1:]
        elif segs[0] in ("super", "self"):
            base, rest = f.mod, list(segs)
            while rest and rest[0] in ("super", "self"):
                if rest[0] == "super":
                    base = base[:-1]
                rest = rest[1:]
        elif (f.mod + (segs[0],)) in self.by_mod and re.search(
                r"\bmod\s+" + re.escape(segs[0]) + r"\s*;", f.code):
            base, rest = f.mod, segs
        else:
            return None
        return self.resolve(tuple(base), list(rest))

    def resolve(self, base, rest):
        mod = base
        for s in rest:
            if mod + (s,) in self.by_mod:
                mod = mod + (s,)
            elif (mod, s) in self.reexports:
                return self.reexports[(mod, s)]
            else:
                break
        return mod if mod in self.by_mod else None

    def edges(self):
        """{(from file, to file): set of reasons}"""
        out = {}

        def add(f, g, why):
            if g is not None and g is not f:
                out.setdefault((f.rel, g.rel), set()).add(why)

        for f in self.files.values():
            for segs, _ in f.uses:
                mod = self.absolute(f, segs)
                add(f, self.by_mod.get(mod), "use " + "::".join(segs))
            for m in re.finditer(r"\b((?:crate|super|self)(?:::" + IDENT + ")+)", f.code):
                segs = m.group(1).split("::")
                mod = self.absolute(f, segs)
                add(f, self.by_mod.get(mod), m.group(1))
            for m in re.finditer(r"(\.|\bSelf::|\b[A-Z][A-Za-z0-9_]*::)\s*(" + IDENT
                                 + r")\s*(?:::<[^()]*>)?\(", f.code):
                how, name = m.group(1), m.group(2)
                ty, _ = f.impl_at(m.start())
                receiver = f.code[max(0, m.start() - 40):m.start()]
                if how == "." and re.search(r"(?<![.\w])self\s*$", receiver) and ty:
                    targets = self.methods_of(ty, name, f)
                    why = f"self.{name}()"
                elif how == "Self::" and ty:
                    targets = self.methods_of(ty, name, f)
                    why = f"Self::{name}()"
                elif how.endswith("::"):
                    if f.code[max(0, m.start() - 2):m.start()] == "::":
                        continue  # a path such as other_crate::Type::m(): not this crate's
                    t = how[:-2]
                    targets = self.methods_of(t, name, f)
                    why = f"{t}::{name}()"
                else:
                    targets = set(self.away.get(name, set())) | {
                        g for g, folder in self.folder_away.get(name, set())
                        if f.mod[: len(folder)] == folder}
                    why = f".{name}()"
                for g in targets:
                    add(f, self.files[g], why)
        return out


def circles(graph):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, found, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def shortest_cycle(graph, comp):
    """The shortest loop through the nodes of `comp`, as [a, b, ..., a] (breadth first)."""
    best = None
    for start in sorted(comp):
        prev, queue, last = {start: None}, [start], None
        while queue and last is None:
            v = queue.pop(0)
            for w in sorted(graph.get(v, ())):
                if w == start:
                    last = v
                    break
                if w in comp and w not in prev:
                    prev[w] = v
                    queue.append(w)
        if last is None:
            continue
        chain = []
        while last is not None:
            chain.append(last)
            last = prev[last]
        loop = chain[::-1] + [start]
        if best is None or len(loop) < len(best):
            best = loop
    return best


def check(src, label=None):
    """One line per problem, saying what to fix."""
    label = label or src
    crate = Crate(src)
    problems = []
    for rel, ty, trait, home in sorted(crate.misplaced):
        what = f"impl {trait} for {ty}" if trait else f"impl {ty}"
        problems.append(
            f"{label}/{rel}: `{what}` is away from {label}/{home}, where {ty} is defined: a "
            f"call to its methods reaches {rel} without importing it. Move the methods to "
            f"{home} (delegating to a function here that does not need {ty}), or make them "
            "functions of this file")
    edges = crate.edges()
    folders = {f.mod for f in crate.files.values() if f.is_root}
    for folder in sorted(folders):
        graph, why = {}, {}
        for (a, b), reasons in edges.items():
            ma, mb = crate.files[a].mod, crate.files[b].mod
            d = len(folder)
            if ma[:d] != folder or mb[:d] != folder or len(ma) == d or len(mb) == d:
                continue  # outside this folder, or its root: the folder's face
            ca, cb = ma[d], mb[d]
            if ca == cb:
                continue
            graph.setdefault(ca, set()).add(cb)
            why.setdefault((ca, cb), []).append(f"{a} -> {b} ({', '.join(sorted(reasons)[:3])})")
        for comp in circles(graph):
            where = "/".join((label,) + folder)
            loop = shortest_cycle(graph, comp)
            links = [w for x, y in zip(loop, loop[1:]) for w in why[(x, y)]]
            problems.append(
                f"{where}: {', '.join(comp)} depend on each other in a circle, e.g. "
                f"{' -> '.join(loop)}: " + "; ".join(links)
                + ". Move what they share into a module both may use (or the folder's root), "
                "or pass it in")
    return problems


# ---------------------------------------------------------------------------------------------
# Self-test: each kind of circle is found, and a tree without one passes.

def write(root, files):
    for name, text in files.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def self_test():
    cases = {
        # Imports through the crate root's re-exports (the check's first rule).
        "import circle of three": ({
            "lib.rs": "mod a;\nmod b;\nmod c;\npub use c::Thing;\n",
            "a.rs": "use crate::b::x;\n",
            "b.rs": "use crate::Thing;\n",
            "c.rs": "pub struct Thing;\nfn f() { crate::a::y(); }\n"
                    "#[cfg(test)]\nmod tests { use crate::b; }\n",
        }, ["a, b, c depend on each other"]),
        # Two folders of `store/` that need each other (`super::` and a brace tree).
        "siblings in a folder": ({
            "lib.rs": "pub mod store;\n",
            "store/mod.rs": "pub mod url;\npub mod s3;\npub trait Store {}\n",
            "store/url/mod.rs": "use super::{s3::S3, Store};\npub fn open() { S3::open(); }\n"
                                "pub(crate) fn with_query() {}\n",
            "store/s3/mod.rs": "pub struct S3;\nimpl S3 { pub fn open() { "
                               "super::url::with_query(); } }\n",
        }, ["store: s3, url depend on each other", "super::url::with_query"]),
        # A method defined away from its type (an `impl Client` in another file) is refused,
        # and its call without an import is an edge: the loop a -> b -> a is found.
        "a call through an impl away from its type": ({
            "lib.rs": "mod client;\nmod a;\nmod b;\n",
            "client.rs": "pub struct Client;\nimpl Client { pub fn get(&self) {} }\n",
            "a.rs": "use crate::client::Client;\nimpl Client { pub fn go(&self) { "
                    "crate::b::helper(self); } }\n",
            "b.rs": "pub fn helper(c: &crate::client::Client) { c.go(); }\n",
        }, ["`impl Client` is away from", "a, b depend on each other", "b.rs -> a.rs (.go())"]),
        # `self.m()` of a folder root's type, defined in a sibling file of the folder.
        "self calls across a folder": ({
            "lib.rs": "mod s3;\n",
            "s3/mod.rs": "mod classify;\nmod client;\npub struct S3;\n",
            "s3/classify.rs": "impl super::S3 { pub(super) fn classify(&self) { self.send(); } }\n",
            "s3/client.rs": "impl super::S3 { pub(super) fn send(&self) { self.classify(); } }\n",
        }, ["s3: classify, client depend on each other", "(self.send())"]),
        # A free function called by its full path, with no `use`, and a string that only looks
        # like a path (not an edge).
        "free functions by path": ({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "pub fn f() { crate::b::g(); }\n",
            "b.rs": "pub fn g() { let _ = \"crate::a::f\"; crate::a::f(); }\n",
        }, ["a, b depend on each other"]),
    }
    with tempfile.TemporaryDirectory() as d:
        for name, (files, expected) in cases.items():
            root = os.path.join(d, name.replace(" ", "-"))
            write(root, files)
            got = check(root, "x")
            text = "\n".join(got)
            for e in expected:
                assert e in text, f"{name}: expected {e!r} in:\n{text}"
        # Negative controls: the same shapes without a circle pass. A facade method may
        # delegate to a driver that takes the layer below it (not the facade), and a type's
        # methods may live in its folder (the URL factory in `url/open.rs`, which nothing
        # imports, while the backends take what they share from the folder's root).
        clean = {
            "lib.rs": "pub mod store;\nmod client;\nmod io;\nmod a;\npub use client::Client;\n",
            "store/mod.rs": "pub mod url;\npub mod s3;\npub(crate) fn with_query() {}\n",
            "store/url/mod.rs": "mod open;\npub struct StoreUrl;\n",
            "store/url/open.rs": "impl super::StoreUrl { pub fn open(&self) { "
                                 "crate::store::s3::S3::open(); } }\n",
            "store/s3/mod.rs": "pub struct S3;\nimpl S3 { pub fn open() { super::with_query(); "
                               "} }\n",
            "io.rs": "pub(crate) struct Io;\nimpl Io { pub(crate) fn get(&self) {} }\n",
            "client.rs": "pub struct Client { io: crate::io::Io }\nimpl Client { pub fn go(&self) "
                         "{ crate::a::go(&self.io) } }\nimpl std::fmt::Debug for Client {}\n",
            "a.rs": "pub(crate) fn go(io: &crate::io::Io) { let s = \"crate::client\"; io.get(); }\n",
        }
        root = os.path.join(d, "clean")
        write(root, clean)
        got = check(root, "x")
        assert got == [], got
        # The circle the factory's place avoids: a backend that opens by URL.
        write(root, {"store/s3/mod.rs": "pub struct S3;\nimpl S3 { pub fn open() { "
                                        "crate::store::url::StoreUrl.open(); } }\n"})
        got = check(root, "x")
        assert any("store: s3, url depend on each other" in p for p in got), got
        # The circle the facade avoids: a driver that takes the facade and calls back into it.
        write(root, {"store/s3/mod.rs": "pub struct S3;\nimpl S3 { pub fn open() {} }\n",
                     "a.rs": "pub(crate) fn go(c: &crate::Client) { c.go(); }\n"})
        got = check(root, "x")
        assert any("a, client depend on each other" in p for p in got), got
    print("module-cycles: self-test passed (import circles through re-exports, `super::` and "
          "brace trees; impls away from their type; calls through `self.m()`, `T::m()` and "
          "`x.m()` across files; free functions by path; trees without a circle pass)")


def main(args):
    if args == ["--self-test"]:
        self_test()
        return 0
    bad = 0
    for src in args:
        label = src.rstrip("/")
        for p in check(src, label):
            print(p)
            bad = 1
    if not bad:
        print(f"module-cycles: no circles in {', '.join(args)}")
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
