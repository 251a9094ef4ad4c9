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

# need_postgres ENV_FILE: a PostgreSQL server for the database fencing tests (docs/postgres.md),
# unless the caller gave LEASE_TEST_PG: started with scripts/postgres.sh, its details in
# ENV_FILE (sourced here). stop_own_postgres, for an EXIT trap, stops only what it started.
OWN_PG_ENV=""
need_postgres() {
  [ -z "${LEASE_TEST_PG:-}" ] || return 0
  echo "starting a PostgreSQL server (scripts/postgres.sh)"
  if scripts/postgres.sh start --env-file "$1"; then
    OWN_PG_ENV=$1
    set -a
    # shellcheck disable=SC1090
    . "$1"
    set +a
  else
    echo "!!! could not start PostgreSQL: the database fencing tests will fail (CI) or skip" >&2
  fi
}
stop_own_postgres() {
  if [ -n "$OWN_PG_ENV" ]; then
    scripts/postgres.sh stop --env-file "$OWN_PG_ENV" >/dev/null 2>&1 || true
  fi
}

# check_sql_copy COPY: a package's copy of postgres/lease_fence.sql (packages cannot read
# outside their folder) is the canonical file, byte for byte.
check_sql_copy() {
  cmp -s postgres/lease_fence.sql "$1" || {
    echo "$1 differs from postgres/lease_fence.sql: cp postgres/lease_fence.sql $1" >&2
    exit 1
  }
}
