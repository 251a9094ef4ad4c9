# Sourced by the component scripts (test-python.sh, test-ffi.sh, test-node.sh), from the
# repository root: what each needs from the rest of the project when scripts/test did not
# provide it, written once.

# The workspace's version, which every package carries.
workspace_version() {
  sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml
}

# check_version WHAT VERSION: fail unless VERSION (what WHAT says) is the workspace's.
check_version() {
  local ws
  ws=$(workspace_version)
  if [ -z "$ws" ] || [ "$ws" != "$2" ]; then
    echo "version drift: workspace $ws, $1 $2" >&2
    exit 1
  fi
}

# check_crate_version CARGO_TOML: the crate takes its version from the workspace.
check_crate_version() {
  grep -q '^version.workspace = true' "$1" || {
    echo "$1 must use version.workspace = true" >&2
    exit 1
  }
}

# need_cli_and_bench TRIPLE: LEASE_BIN (the CLI, for `lease break`) and LEASE_CYCLE_BENCH (the
# Rust baseline of the benchmarks), built here unless the caller gave them. The baseline is
# built for TRIPLE, the --target of the bindings' release builds, so that all of them share one
# release build of the core.
need_cli_and_bench() {
  if [ -z "${LEASE_BIN:-}" ]; then
    echo "building the lease CLI"
    cargo build -q -p lease-cli
    export LEASE_BIN="$CARGO_TARGET_DIR/debug/lease"
  fi
  if [ -z "${LEASE_CYCLE_BENCH:-}" ]; then
    echo "building lease-cycle-bench ($1)"
    cargo build -q --release --target "$1" -p lease-systests --bin lease-cycle-bench
    export LEASE_CYCLE_BENCH="$CARGO_TARGET_DIR/$1/release/lease-cycle-bench"
  fi
}

# need_s3 ENV_FILE: the store test servers (moto, fake-gcs-server, Azurite; not MinIO, whose
# first build is slow), unless the caller gave LEASE_TEST_S3_MOTO: started with their details in
# ENV_FILE (sourced here). stop_own_s3, for an EXIT trap, stops only what need_s3 started, never
# the caller's servers.
OWN_S3_ENV=""
need_s3() {
  [ -z "${LEASE_TEST_S3_MOTO:-}" ] && [ -x scripts/stores.sh ] || return 0
  echo "starting the store test servers (scripts/stores.sh)"
  mkdir -p "$(dirname "$1")"
  if scripts/stores.sh start --no-minio --env-file "$1"; then
    OWN_S3_ENV=$1
    set -a
    # shellcheck disable=SC1090
    . "$1"
    set +a
  else
    echo "!!! could not start the store test servers: their tests will fail (CI) or skip" >&2
  fi
}
stop_own_s3() {
  if [ -n "$OWN_S3_ENV" ]; then
    scripts/stores.sh stop --env-file "$OWN_S3_ENV" >/dev/null 2>&1 || true
  fi
}
