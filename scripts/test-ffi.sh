#!/usr/bin/env bash
# liblease (the C ABI) and the Go binding: build, header drift, C tests (plain, valgrind, ASan),
# Go tests under -race, the examples, the cross-language test, and a quick benchmark run.
#
#   scripts/test-ffi.sh                   standalone, or called by scripts/test
#   scripts/test-ffi.sh --update-header   rewrite include/liblease.h from ffi/src, then test
#
# liblease is built in release mode for the explicit host target
# ($CARGO_TARGET_DIR/$HOST_TARGET/release): scripts/test already builds the core that way (the
# cycle-bench baseline, the Python and Node extensions), so there only the ffi crate compiles;
# the benchmark needs release code anyway, and valgrind runs optimized code several times faster.
# It is installed with ffi/install.sh into .cache/ffi/prefix (git-ignored), and everything after
# links it through pkg-config, as users do (PKG_CONFIG_PATH=.cache/ffi/prefix/lib/pkgconfig).
#
# Environment (all optional; scripts/test sets them):
#   CARGO_TARGET_DIR     cargo target dir (default ./target)
#   LEASE_BIN            the `lease` CLI (default: built here with cargo build -p lease-cli)
#   LEASE_CYCLE_BENCH    the Rust cycle benchmark (default: built here)
#   LEASE_TEST_S3_MOTO   S3 store URL of a moto server (default: started here)
#   LEASE_TEST_PG        a PostgreSQL server for pgfence's tests (default: started here)
#   CI=true              a missing S3 server fails instead of skipping the S3 runs
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
HOST_TARGET=${HOST_TARGET:-$(rustc -vV | sed -n 's/^host: //p')}
RELEASE=$CARGO_TARGET_DIR/$HOST_TARGET/release
PREFIX=$ROOT/.cache/ffi/prefix
BUILD=$ROOT/.cache/ffi/build
# Only the C and Go steps see it (`with_pc`): cargo must not, since aws-lc-sys's build script
# reruns (and aws-sdk-s3 and the core recompile, minutes) whenever PKG_CONFIG_PATH changes.
PC_PATH="$PREFIX/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
with_pc() { PKG_CONFIG_PATH=$PC_PATH "$@"; }
update_header=""
for arg in "$@"; do
  case $arg in
    --update-header) update_header=1 ;;
    *) echo "test-ffi.sh: unknown argument $arg" >&2; exit 64 ;;
  esac
done

started=$(date +%s)
timings=()
step() {
  local name=$1 t0
  shift
  printf '\n--- ffi: %s\n' "$name"
  t0=$(date +%s)
  "$@"
  timings+=("$(printf '%5ss  %s' $(($(date +%s) - t0)) "$name")")
}

in_ci() { [ "${CI:-}" = "true" ]; }
. scripts/lib/component.sh

# --- liblease, its header and its unit tests.
build_lib() {
  cargo build --release --target "$HOST_TARGET" -p lease-ffi
}

# The header cbindgen (pinned) writes from ffi/src must be the committed one:
# ffi/header (a tool of its own, so cbindgen's features never reach liblease's build) checks
# it, or rewrites it with --update-header. Then the crate's unit tests.
check_header() {
  if [ -n "$update_header" ]; then
    cargo run -q -p lease-ffi-header -- --write
  else
    cargo run -q -p lease-ffi-header -- --check
  fi
  cargo test -q --release --target "$HOST_TARGET" -p lease-ffi --lib
}

install_lib() {
  ffi/install.sh --prefix "$PREFIX" --from "$RELEASE"
  with_pc pkg-config --exists liblease liblease-static
  echo "pkg-config liblease $(with_pc pkg-config --modversion liblease): $(with_pc pkg-config --libs liblease)"
}

step "cargo build --release -p lease-ffi ($HOST_TARGET)" build_lib
step "header drift + unit tests" check_header
step "install into .cache/ffi/prefix" install_lib

# --- The CLI (for `lease break` and the cross-language test), the Rust bench baseline, and
# S3 (moto), unless the caller gave them.
step "lease CLI and lease-cycle-bench" need_cli_and_bench "$HOST_TARGET"
step "S3 test servers" need_s3 "$ROOT/.cache/ffi-s3.env"
step "PostgreSQL server" need_postgres "$ROOT/.cache/ffi-pg.env"
tmp=$(mktemp -d)
# File stores need their directory.
mkdir -p "$tmp/c-tests" "$tmp/example-c" "$tmp/example-go" "$tmp/cross" "$tmp/docs"
trap 'rm -rf "$tmp"; stop_own_s3; stop_own_postgres' EXIT
s3=${LEASE_TEST_S3_MOTO:-}
if [ -z "$s3" ]; then
  if in_ci; then
    echo "LEASE_TEST_S3_MOTO is not set and moto could not be started (CI=true: S3 runs are mandatory)" >&2
    exit 1
  fi
  echo "!!! SKIPPING the S3 runs: LEASE_TEST_S3_MOTO is not set and moto could not be started" >&2
fi
export LEASE_TEST_S3_MOTO=$s3

# --- C tests: -Wall -Wextra -Werror; plainly, under valgrind memcheck, under ASan + UBSan.
c_tests() {
  local store=$1
  with_pc make -s -C ffi/tests/c BUILD="$BUILD/c-tests" STORE="$store" check-plain check-valgrind check-asan
}
step "C tests on file:// (plain, valgrind, asan)" c_tests "file://$tmp/c-tests"
if [ -n "$s3" ]; then
  step "C tests on S3/moto (plain, valgrind, asan)" c_tests "$s3"
fi
# GCS and Azure: the same tests, plainly (memory errors do not depend on the store; valgrind
# and ASan runs on moto cover the C boundary).
c_tests_plain() {
  with_pc make -s -C ffi/tests/c BUILD="$BUILD/c-tests" STORE="$1" check-plain
}
for server in LEASE_TEST_GCS_FAKE LEASE_TEST_AZURE_AZURITE; do
  if [ -n "${!server:-}" ]; then
    step "C tests on ${!server%%\?*} (plain)" c_tests_plain "${!server}"
  elif [ "${CI:-}" = "true" ]; then
    echo "$server is not set (CI=true: every store's tests must run)" >&2
    exit 1
  else
    echo "!!! SKIPPING the C tests on $server: not set" >&2
  fi
done

# --- Go: vet and tests under the race detector, on file:// and S3.
go_tests() {
  (export PKG_CONFIG_PATH=$PC_PATH; cd bindings/go && go vet ./... &&
    LEASE_EXPECTED_VERSION=$(pkg-config --modversion liblease) go test -race -count=1 ./...)
}
step "go vet + go test -race ./... (bindings/go)" go_tests

# --- The client_golang collector of the lease metrics: a module of its own, so that only the
# programs that want Prometheus depend on client_golang.
prometheus_tests() {
  (export PKG_CONFIG_PATH=$PC_PATH; cd bindings/go/prometheus && go vet ./... && go test -count=1 ./...)
}
step "go prometheus collector (bindings/go/prometheus)" prometheus_tests

# --- pgfence (fencing at PostgreSQL): its tests are a module of their own, so that pgx is a
# dependency of the tests only. The histories run the Go worker (docs/postgres.md).
pgfence_tests() {
  check_sql_copy bindings/go/pgfence/lease_fence.sql
  (export PKG_CONFIG_PATH=$PC_PATH; cd bindings/go/pgfence/test && go vet ./... &&
    go build -o "$BUILD/pg_worker_go" ./worker &&
    LEASE_PG_GO_WORKER=$BUILD/pg_worker_go go test -count=1 ./...)
}
step "pgfence: go test (bindings/go/pgfence/test, real PostgreSQL)" pgfence_tests

# --- The examples, once each: two workers on one lease (one leads, one waits and takes over).
examples() {
  with_pc make -s -C examples/c BUILD="$BUILD/examples-c" STORE="file://$tmp/example-c" run
  (export PKG_CONFIG_PATH=$PC_PATH; cd examples/go && go vet ./... &&
    go build -o "$BUILD/leader_worker_go" ./leader_worker)
  "$BUILD/leader_worker_go" "file://$tmp/example-go" example-leader 3 &
  local first=$!
  sleep 0.3
  "$BUILD/leader_worker_go" "file://$tmp/example-go" example-leader 2
  wait "$first"
  # -tags lease_static links liblease.a (pkg-config liblease-static): no liblease.so needed.
  (export PKG_CONFIG_PATH=$PC_PATH; cd examples/go &&
    go build -tags lease_static -o "$BUILD/leader_worker_go_static" ./leader_worker)
  if ldd "$BUILD/leader_worker_go_static" | grep -q liblease; then
    echo "the lease_static build links liblease.so" >&2
    return 1
  fi
  "$BUILD/leader_worker_go_static" "file://$tmp/example-go" example-static 1
}
step "examples (C, Go)" examples

# --- docs/ffi.md's C and Go blocks, as written (ffi/tests/docs/run.py says how they are wrapped).
docs_blocks() {
  with_pc python3 ffi/tests/docs/run.py "$BUILD/docs" "file://$tmp/docs"
}
step "docs/ffi.md's C and Go blocks" docs_blocks

# --- Cross-language: a C worker, a Go worker and the CLI contend for one lease.
cross() {
  local cflags libs
  cflags=$(with_pc pkg-config --cflags liblease)
  libs=$(with_pc pkg-config --libs liblease)
  mkdir -p "$BUILD"
  # shellcheck disable=SC2086
  cc -std=c11 -Wall -Wextra -Werror -O2 $cflags -o "$BUILD/c_worker" ffi/tests/cross/c_worker.c $libs -pthread
  (export PKG_CONFIG_PATH=$PC_PATH; cd bindings/go && go build -o "$BUILD/go_worker" ./internal/crossworker)
  C_WORKER=$BUILD/c_worker GO_WORKER=$BUILD/go_worker ffi/tests/cross/run.sh "file://$tmp/cross"
  if [ -n "$s3" ]; then
    C_WORKER=$BUILD/c_worker GO_WORKER=$BUILD/go_worker ffi/tests/cross/run.sh "$s3"
  fi
}
step "cross-language (C, Go, CLI) on file:// and S3" cross

# --- The benchmark, --quick: checks it runs (figures: docs/benchmarks.md, `ffi/bench/run.py`).
bench() {
  local cflags libs
  cflags=$(with_pc pkg-config --cflags liblease)
  libs=$(with_pc pkg-config --libs liblease)
  # shellcheck disable=SC2086
  cc -std=c11 -Wall -Wextra -Werror -O2 $cflags -o "$BUILD/bench" ffi/bench/bench.c $libs -pthread
  cargo build -q --release --target "$HOST_TARGET" -p lease-ffi --example calls_bench
  python3 ffi/bench/run.py "$BUILD/bench" "$RELEASE/examples/calls_bench" "$LEASE_CYCLE_BENCH" --quick
}
step "benchmark (--quick)" bench

echo
echo "ffi: all passed in $(($(date +%s) - started))s"
printf '%s\n' "${timings[@]}"
