#!/usr/bin/env python3
"""docs/ffi.md's C and Go blocks, and README.md's Go block, run as written against a store.

Usage: run.py BUILD_DIR STORE_URL   (PKG_CONFIG_PATH must find liblease)

A C block that defines a function is compiled at file scope and called by a harness (its
contract is checked: the counter it increments counts every call); any other C block is
compiled inside `main`, given what it uses without declaring (`rt`, `store`, a held lease `l`,
`err`, a buffer `buf` of `len` bytes). The Go block is the body of a function given `ctx`,
`steps` and `doStep`, built in a module whose go.mod is the doc's own `require`/`replace`
block with the checkout's path. `s3://my-bucket?…` URLs become STORE_URL. -Wall -Werror, with
unused variables allowed (a fragment reads values to show how).
"""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "ffi.md"
README = ROOT / "README.md"
MODULE = "github.com/lease-dev/lease/bindings/go"
C_HEAD = """#include <liblease.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
"""


def blocks(lang, doc=DOC):
    return re.findall(r"^```" + lang + r"\n(.*?)^```$", doc.read_text(), flags=re.S | re.M)


def sh(*cmd, cwd=None, env=None):
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, check=True)


def pkg_config(*args):
    return subprocess.run(["pkg-config", *args, "liblease"], check=True, capture_output=True,
                          text=True).stdout.split()


def c_program(block, n):
    if re.match(r"^\w[\w\s\*]*\s\**(\w+)\(", block):
        name = re.match(r"^\w[\w\s\*]*\s\**(\w+)\(", block).group(1)
        assert name == "increment", f"a C function block the harness does not know: {name}"
        body = f"""
  for (int i = 0; i < 3; i++) {{
    if (increment(l, store, "docs/counter", &err) != LEASE_OK) goto fail;
  }}
  lease_object *obj = NULL;
  if (lease_fenced_get(store, "docs/counter", &obj, &err) != LEASE_OK) goto fail;
  size_t n = 0;
  const uint8_t *p = lease_object_data(obj, &n);
  if (n != 1 || p[0] != '3') {{ fprintf(stderr, "counter %.*s, expected 3\\n", (int)n, p); return 1; }}
  lease_object_free(obj);
"""
        top = block
    else:
        body, top = "{\n" + block + "\n}\n", ""
    return f"""{C_HEAD}
{top}
int main(int argc, char **argv) {{
  (void)argc;
  lease_runtime *rt = NULL; lease_store *store = NULL; lease *l = NULL; lease_error *err = NULL;
  const uint8_t buf[] = "docs block {n}"; size_t len = sizeof buf - 1;
  if (lease_runtime_new(NULL, &rt, &err) != LEASE_OK) goto fail;
  if (lease_store_open(rt, argv[1], &store, &err) != LEASE_OK) goto fail;
  if (lease_acquire(store, "docs-lease-{n}", NULL, &l, &err) != LEASE_OK) goto fail;
  (void)buf; (void)len;
  {body}
  if (lease_release(l, &err) != LEASE_OK) goto fail;
  lease_free(l); lease_store_free(store); lease_runtime_free(rt);
  return 0;
fail:
  fprintf(stderr, "docs block {n}: %s\\n", err ? lease_error_message(err) : "?");
  return 1;
}}
"""


def go_program(block):
    imports = re.findall(r'^import (\w+ )?"([^"]+)"\n', block, flags=re.M)
    if not imports:  # a fragment that names the package without importing it
        imports = [("lease ", MODULE)]
    body = re.sub(r'^import .*\n', "", block, flags=re.M)
    body = re.sub(r'"s3://my-bucket\?[^"]*"', "os.Args[1]", body)
    body = "\n".join("\t" + line for line in body.splitlines())
    named = "\n".join(f'\t{alias}"{path}"' for alias, path in imports)
    return f"""package main

import (
\t"context"
\t"errors"
\t"fmt"
\t"os"
\t"time"
{named}
)

var _ = errors.Is
var _ = time.Second

func doStep(step int, epoch uint64) {{ fmt.Println("step", step, "at epoch", epoch) }}

func run(ctx context.Context, steps []int) error {{
{body}
}}

func main() {{
\tif err := run(context.Background(), []int{{1, 2, 3}}); err != nil {{
\t\tfmt.Fprintln(os.Stderr, err)
\t\tos.Exit(1)
\t}}
}}
"""


def main():
    build, store = Path(sys.argv[1]), sys.argv[2]
    build.mkdir(parents=True, exist_ok=True)
    cflags, libs = pkg_config("--cflags"), pkg_config("--libs")
    c_blocks = blocks("c")
    assert len(c_blocks) >= 2, "docs/ffi.md has no C blocks"
    for n, block in enumerate(c_blocks):
        src = build / f"docs_block_{n}.c"
        src.write_text(c_program(block, n))
        exe = build / f"docs_block_{n}"
        sh("cc", "-std=c11", "-D_DEFAULT_SOURCE", "-Wall", "-Wextra", "-Werror",
           "-Wno-unused-variable", "-Wno-unused-but-set-variable", *cflags, "-o", exe, src,
           *libs, "-pthread")
        sh(exe, store)
    go_blocks = blocks("go")
    assert len(go_blocks) >= 2, "docs/ffi.md lost Go blocks (the binding's, queued locks')"
    readme_go = blocks("go", README)
    assert len(readme_go) == 1, "README.md should have one Go block"
    go_blocks += readme_go
    # Every fenced block, with its language ("" for the go.mod one): pairing bare ``` lines
    # alone would take a block's closing fence for an opening one.
    mod_block = [b for lang, b in re.findall(r"^```(\w*)\n(.*?)^```$", DOC.read_text(),
                                             flags=re.S | re.M)
                 if lang == "" and "replace github.com/lease-dev/lease/bindings/go" in b]
    assert mod_block, "docs/ffi.md lost its go.mod require/replace block"
    app = build / "docs-go"
    app.mkdir(exist_ok=True)
    gomod = mod_block[0].replace("/path/to/lease/bindings/go", str(ROOT / "bindings" / "go"))
    (app / "go.mod").write_text(f"module docsexample\n\ngo 1.21\n\n{gomod}")
    env = dict(os.environ, GOFLAGS="-mod=mod")
    for n, block in enumerate(go_blocks):
        (app / "main.go").write_text(go_program(block))
        sh("go", "build", "-o", app / f"docs-go-{n}", ".", cwd=app, env=env)
        sh(app / f"docs-go-{n}", store)
    print("docs/ffi.md and README.md: every C and Go block ran")


if __name__ == "__main__":
    main()
