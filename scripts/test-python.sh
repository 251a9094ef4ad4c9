#!/usr/bin/env bash
# The Python package's tests: install, build, pytest, mypy --strict, examples, a quick bench run.
#
#   scripts/test-python.sh            standalone, or called by scripts/test
#
# Creates .venv/python (git-ignored) with pinned test tools, `pip install ./python` into it
# (maturin builds the extension in release mode for x86_64-unknown-linux-gnu, sharing
# $CARGO_TARGET_DIR with the other release builds), then runs python/tests, mypy --strict on the
# package and the examples, the examples themselves, and the benchmark in --quick mode.
#
# Environment (all optional; scripts/test sets them):
#   CARGO_TARGET_DIR     shared cargo target dir (default ./target)
#   LEASE_BIN            the `lease` CLI (default: built here with cargo build -p lease-cli)
#   LEASE_CYCLE_BENCH    the Rust cycle benchmark (default: built here)
#   LEASE_TEST_S3_MOTO   S3 store URL of a moto server (default: started here with
#                        scripts/s3-servers.sh); LEASE_TEST_S3_MINIO likewise, when set
#   LEASE_TEST_PG        a PostgreSQL server for lease.pg's tests (default: started here with
#                        scripts/postgres.sh)
#   CI=true              missing S3 servers fail the S3 tests instead of skipping them
#   PYTHON               the interpreter for the venv (default python3; needs >= 3.9)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
PYTHON=${PYTHON:-python3}
VENV=$ROOT/.venv/python
TRIPLE=x86_64-unknown-linux-gnu
say() { printf '\n--- python: %s\n' "$*"; }
. scripts/lib/component.sh

# --- Versions: the package's version is the workspace's.
say "versions"
ws_version=$(workspace_version)
check_version python/pyproject.toml "$(sed -n 's/^version *= *"\(.*\)"/\1/p' python/pyproject.toml | head -n1)"
check_crate_version python/Cargo.toml
echo "workspace and python/pyproject.toml: $ws_version"
check_sql_copy python/lease/lease_fence.sql

# --- The venv with pinned test tools.
say "venv $VENV"
"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 9), sys.version' 
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  "pip>=23" "pytest==8.3.5" "mypy==1.15.0" "filelock==3.18.0" \
  "psycopg[binary]==3.3.9" "asyncpg==0.32.0" "prometheus_client==0.21.1"

# --- The CLI (for `lease break`) and the Rust baseline of the benchmark, with the same
# --target as the extension.
say "lease CLI and lease-cycle-bench"
need_cli_and_bench "$TRIPLE"

# --- pip install ./python: what users run. Release build, shared target triple.
say "pip install ./python"
export MATURIN_PEP517_ARGS="--target $TRIPLE"
"$VENV/bin/python" -m pip install --disable-pip-version-check --force-reinstall --no-deps ./python
"$VENV/bin/python" - "$ws_version" <<'EOF'
import sys, lease
assert lease.__version__ == sys.argv[1], (lease.__version__, sys.argv[1])
print("import lease:", lease.__version__, lease.__file__)
EOF

# --- S3 servers, unless the caller started them.
say "S3 test servers"
need_s3 "$ROOT/.cache/python-s3.env"
need_postgres "$ROOT/.cache/python-pg.env"
trap 'stop_own_s3; stop_own_postgres' EXIT

# --- The tests.
say "pytest"
# From the repo root, through the pytest script: `python -m pytest` inside python/ would put
# the source tree's lease/ (without the built extension) ahead of the installed package.
"$VENV/bin/pytest" -p no:cacheprovider python/tests

say "mypy --strict (package and examples)"
"$VENV/bin/python" -m mypy --strict --no-incremental python/lease examples/python examples/zombie/python \
  python/tests/pg_worker.py

# The stub of the compiled module (lease/_lease.pyi) against the module itself: every name,
# argument and default as it is at run time. From outside the repository, so the installed
# package is the one checked.
say "mypy.stubtest (lease/_lease.pyi against the compiled module)"
(cd /tmp && "$VENV/bin/python" -m mypy.stubtest lease --allowlist "$ROOT/python/stubtest-allowlist.txt")

say "examples"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; stop_own_s3; stop_own_postgres' EXIT
# Two workers on one election: one leads and works, the other waits, then takes over.
"$VENV/bin/python" examples/python/leader_worker.py "file://$tmp/leader" --name a --steps 5 &
worker_a=$!
"$VENV/bin/python" examples/python/leader_worker.py "file://$tmp/leader" --name b --steps 3
wait "$worker_a"
"$VENV/bin/python" examples/python/multiprocess_counter.py "file://$tmp/counter-lease" "$tmp/counter" --procs 4 --rounds 5
"$VENV/bin/python" examples/python/asyncio_lease.py "file://$tmp/async"

say "benchmark (--quick: checks it runs; see docs/benchmarks.md for figures)"
"$VENV/bin/python" python/bench/cycle.py --quick

echo
echo "python: all passed"
