#!/usr/bin/env bash
# The Node package's tests: versions, the index.d.ts drift check, install the way a user does,
# node --test, the examples, a quick bench run.
#
#   scripts/test-node.sh            standalone, or called by scripts/test
#
# `npm install --ignore-scripts` in node/ brings the pinned dev tools (the napi-rs CLI for
# index.d.ts, TypeScript to type-check a user of it, proper-lockfile for the bench).
# `npm install $ROOT/node` into a fresh project outside the repository then builds and installs
# the package as a user's project would (its install script runs cargo: release build,
# --target x86_64-unknown-linux-gnu, sharing $CARGO_TARGET_DIR with the other release builds).
# The tests run with `node --test node/test/`
# (on file:// and on S3 through moto), the examples run once, the benchmark in --quick mode.
#
# Environment (all optional; scripts/test sets them):
#   CARGO_TARGET_DIR     shared cargo target dir (default ./target)
#   LEASE_BIN            the `lease` CLI (default: built here with cargo build -p lease-cli)
#   LEASE_CYCLE_BENCH    the Rust cycle benchmark (default: built here)
#   LEASE_TEST_S3_MOTO   S3 store URL of a moto server (default: started here with
#                        scripts/s3-servers.sh)
#   LEASE_TEST_PG        a PostgreSQL server for bucket-lease/pg's tests (default: started
#                        here with scripts/postgres.sh)
#   CI=true              a missing S3 server fails the S3 tests instead of skipping them
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
TRIPLE=${HOST_TARGET:-$(rustc -vV | sed -n 's/^host: //p')}
export LEASE_NODE_TARGET=$TRIPLE
say() { printf '\n--- node: %s\n' "$*"; }
. scripts/lib/component.sh
t_start=$(date +%s)

# --- Versions: the package's version is the workspace's.
say "versions"
command -v node >/dev/null || { echo "node is not installed (Node >= 18.18 needed)" >&2; exit 1; }
node -e 'const [a, b] = process.versions.node.split(".").map(Number);
  if (a < 18 || (a === 18 && b < 18)) { console.error("Node >= 18.18 needed, found " + process.version); process.exit(1); }'
ws_version=$(workspace_version)
check_version node/package.json "$(node -p 'require("./node/package.json").version')"
check_crate_version node/Cargo.toml
check_version "node/package-lock.json (run npm install in node/)" \
  "$(node -p 'require("./node/package-lock.json").version')"
check_version node/npm/linux-x64-gnu/package.json "$(node -p 'require("./node/npm/linux-x64-gnu/package.json").version')"
echo "workspace, node/package.json, node/package-lock.json: $ws_version (node $(node --version))"
check_sql_copy node/lease_fence.sql

# --- The CLI (for `lease break`) and the Rust baseline of the benchmark, with the same
# --target as the addon.
say "lease CLI and lease-cycle-bench"
need_cli_and_bench "$TRIPLE"

# --- The pinned dev tools, from node/package-lock.json.
# `npm install`, not `npm ci`: npm 11 leaves the other platforms' optional packages of the CLI's
# native helpers out of the lock file and then `npm ci` refuses that same lock file.
say "npm install --ignore-scripts in node/ (dev tools, as locked)"
(cd node && npm install --ignore-scripts --no-audit --no-fund --loglevel=error 2>&1 |
  grep -v -e 'Unknown user config' -e EBADENGINE || true)

# --- index.d.ts is generated from the Rust sources and types/header.d.ts.
say "index.d.ts drift check (napi build)"
(cd node && node scripts/types.js --check)

# --- The declarations describe what index.js exports: a TypeScript user's code type-checks.
say "tsc --strict on node/test-support/types-check.ts (index.d.ts as TypeScript users see it)"
(cd node && node_modules/.bin/tsc --noEmit --strict --target es2022 --module nodenext \
  --moduleResolution nodenext --lib es2022,esnext.disposable,esnext.asynciterable --types node \
  test-support/types-check.ts)
(cd node && node_modules/.bin/tsc --noEmit --strict --target es2022 --module nodenext \
  --moduleResolution nodenext --types node pg.d.ts)

# --- What users run: install the package by path into a project of their own.
say "npm install $ROOT/node (into a fresh project)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; stop_own_s3; stop_own_postgres' EXIT
mkdir -p "$tmp/app"
# The install script must build the addon: start without one.
rm -f node/lease.node
(cd "$tmp/app" && npm init -y >/dev/null && npm install --no-audit --no-fund "$ROOT/node" 2>&1 |
  grep -v -e 'Unknown user config' -e 'install-scripts' || true)
[ -f node/lease.node ] || { echo "npm install did not build node/lease.node (install script skipped?)" >&2; exit 1; }
(cd "$tmp/app" && node -e '
  const lease = require("bucket-lease");
  if (lease.version !== process.argv[1]) throw new Error(`version ${lease.version}, expected ${process.argv[1]}`);
  console.log("require(\"bucket-lease\"):", lease.version, require.resolve("bucket-lease"));' "$ws_version")
(cd "$tmp/app" && node --input-type=module -e '
  import * as lease from "bucket-lease";
  if (typeof lease.acquire !== "function") throw new Error("no acquire in the ESM namespace");
  console.log("import * as lease from \"bucket-lease\": ok");')

# --- S3 servers, unless the caller started them.
say "S3 test servers"
need_s3 "$ROOT/.cache/node-s3.env"
need_postgres "$ROOT/.cache/node-pg.env"

# --- The tests.
say "node --test node/test/"
node --test node/test/

say "examples"
# Two workers on one election: one leads and works, the other waits, then takes over.
export NODE_PATH="$tmp/app/node_modules"
node examples/node/leader-worker.js "file://$tmp/leader" --name a --steps 5 &
worker_a=$!
node examples/node/leader-worker.js "file://$tmp/leader" --name b --steps 3
wait "$worker_a"
unset NODE_PATH

say "benchmark (--quick: checks it runs; see docs/benchmarks.md for figures)"
node node/bench/cycle.js --quick

echo
echo "node: all passed in $(($(date +%s) - t_start))s"
