#!/usr/bin/env bash
# Real S3 servers on 127.0.0.1 for the S3 store's tests: moto (mandatory) and MinIO (where Go is).
#
#   scripts/s3-servers.sh prepare            install moto's venv and build MinIO (both cached
#                                            under .cache/); safe to run in the background while
#                                            cargo builds: `start` waits for it
#   scripts/s3-servers.sh build-minio        only the MinIO build (cached)
#   scripts/s3-servers.sh start [--env-file F] [--no-minio]
#                                            start both on free ports, create the bucket
#                                            `lease-test` on each, write F (default
#                                            .cache/s3-servers/env) for the caller to source
#   scripts/s3-servers.sh stop [--env-file F]
#                                            stop what `start` started for that env file (PIDs
#                                            recorded under .cache/s3-servers/run-*/) and remove
#                                            MinIO's data
#   scripts/s3-servers.sh status [--env-file F]
#
# The env file holds `export` lines: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_REGION (test
# values that both servers accept), AWS_EC2_METADATA_DISABLED=true and empty AWS config files
# (so nothing ever asks an instance metadata service or reads a developer's profiles), and one
# store URL per server:
#   LEASE_TEST_S3_MOTO=s3://lease-test?endpoint=http://127.0.0.1:PORT&region=us-east-1&path_style=true&conditional_delete=true
#   LEASE_TEST_S3_MINIO=…   (absent when MinIO could not be built; LEASE_TEST_S3_MINIO_SKIPPED says why)
#
# Packages come only from PyPI (moto) and the Go module proxy (MinIO's source, built here).
set -euo pipefail

MOTO_VERSION=5.2.5
# MinIO has no semver tags; this is the module proxy's pseudo-version of its last commit
# (2026-02-12, `go list -m github.com/minio/minio@latest`).
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
BUCKET=lease-test
ACCESS_KEY=lease-test-key
SECRET_KEY=lease-test-secret-key

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=$ROOT/.cache
STATE=$CACHE/s3-servers
VENV=$CACHE/moto-venv-$MOTO_VERSION
MINIO_DIR=$CACHE/minio
MINIO_BIN=$MINIO_DIR/bin-$MINIO_VERSION/minio
MINIO_LOG=$MINIO_DIR/build-$MINIO_VERSION.log
MINIO_FAILED=$MINIO_DIR/build-$MINIO_VERSION.failed

say() { printf 's3-servers: %s\n' "$*" >&2; }
loud() {
  printf '\n%s\n' "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
  printf 's3-servers: %s\n' "$@" >&2
  printf '%s\n\n' "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

install_moto() {
  mkdir -p "$CACHE"
  exec 8>"$CACHE/moto-venv.lock"
  flock 8
  if [ -x "$VENV/bin/moto_server" ] && "$VENV/bin/python" -c 'import boto3, flask_cors' 2>/dev/null; then
    flock -u 8
    return 0
  fi
  say "installing moto[s3]==$MOTO_VERSION into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "moto[s3]==$MOTO_VERSION" flask flask-cors
  flock -u 8
}

# Build MinIO from source with the Go toolchain (cached). Returns non-zero when it cannot.
build_minio() {
  if [ -x "$MINIO_BIN" ]; then return 0; fi
  if ! command -v go >/dev/null 2>&1; then
    echo "go is not installed" >"$MINIO_FAILED.nogo"
    return 1
  fi
  mkdir -p "$MINIO_DIR"
  exec 9>"$MINIO_DIR/build.lock"
  flock 9
  if [ -x "$MINIO_BIN" ]; then flock -u 9; return 0; fi
  say "building MinIO $MINIO_VERSION with go install (cold: ~5 min on 2 cores; log: $MINIO_LOG)"
  local start end rc=0
  start=$(date +%s)
  (
    cd "$MINIO_DIR"
    GOBIN=$(dirname "$MINIO_BIN") CGO_ENABLED=0 GOFLAGS=-mod=mod \
      go install -trimpath "github.com/minio/minio@$MINIO_VERSION"
  ) >"$MINIO_LOG" 2>&1 || rc=$?
  end=$(date +%s)
  echo "build took $((end - start)) s, exit $rc" >>"$MINIO_LOG"
  if [ "$rc" -ne 0 ] || [ ! -x "$MINIO_BIN" ]; then
    tail -n 20 "$MINIO_LOG" >"$MINIO_FAILED"
    flock -u 9
    return 1
  fi
  rm -f "$MINIO_FAILED"
  say "MinIO built in $((end - start)) s: $MINIO_BIN"
  flock -u 9
}

wait_http() { # URL SECONDS PID
  local url=$1 limit=$2 pid=$3 i
  for ((i = 0; i < limit * 10; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then return 1; fi
    if curl -s -o /dev/null --max-time 1 "$url"; then return 0; fi
    sleep 0.1
  done
  return 1
}

create_bucket() { # ENDPOINT
  AWS_EC2_METADATA_DISABLED=true AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null \
    "$VENV/bin/python" - "$1" "$BUCKET" "$ACCESS_KEY" "$SECRET_KEY" <<'EOF'
import sys, boto3
from botocore.config import Config
endpoint, bucket, key, secret = sys.argv[1:5]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                  aws_access_key_id=key, aws_secret_access_key=secret,
                  config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 5}))
s3.create_bucket(Bucket=bucket)
s3.head_bucket(Bucket=bucket)
EOF
}

# Each env file has its own set of servers (PIDs, data dirs, logs), so two runs in one work tree
# with different env files never stop each other's servers.
use_env_file() { # ENV_FILE
  mkdir -p "$(dirname "$1")"
  ENV_FILE=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
  local id
  id=$(printf '%s' "$ENV_FILE" | cksum | cut -d' ' -f1)
  RUN=$STATE/run-$id
  mkdir -p "$RUN"
}

parse_env_file_arg() {
  ENV_ARG=$STATE/env
  WITH_MINIO=1
  while [ $# -gt 0 ]; do
    case "$1" in
      --env-file) ENV_ARG=$2; shift 2 ;;
      --env-file=*) ENV_ARG=${1#*=}; shift ;;
      --no-minio) WITH_MINIO=0; shift ;;
      *) say "unknown argument $1"; exit 64 ;;
    esac
  done
  use_env_file "$ENV_ARG"
}

record_pid() { echo "$1 $2" >>"$RUN/pids"; }

cmd_stop() {
  [ -f "$RUN/pids" ] || { say "nothing to stop"; return 0; }
  local pid name
  while read -r pid name; do
    [ -n "$pid" ] || continue
    # Only a process that is still the one we started (the PID could have been reused).
    if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$name"; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
      say "stopped $name (pid $pid)"
    fi
  done <"$RUN/pids"
  rm -f "$RUN/pids"
  if [ -f "$RUN/datadirs" ]; then
    while read -r d; do
      case "$d" in /tmp/lease-minio.*) rm -rf "$d" ;; esac
    done <"$RUN/datadirs"
    rm -f "$RUN/datadirs"
  fi
}

cmd_start() {
  local env_file=$ENV_FILE with_minio=$WITH_MINIO
  cmd_stop >/dev/null 2>&1 || true
  rm -f "$env_file"
  install_moto

  local lines=()
  lines+=("export AWS_ACCESS_KEY_ID='$ACCESS_KEY'")
  lines+=("export AWS_SECRET_ACCESS_KEY='$SECRET_KEY'")
  lines+=("export AWS_REGION=us-east-1")
  lines+=("export AWS_EC2_METADATA_DISABLED=true")
  lines+=("export AWS_CONFIG_FILE=/dev/null")
  lines+=("export AWS_SHARED_CREDENTIALS_FILE=/dev/null")
  lines+=("unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3")

  # moto: mandatory.
  local port pid
  port=$(free_port)
  setsid "$VENV/bin/moto_server" -H 127.0.0.1 -p "$port" >"$RUN/moto.log" 2>&1 </dev/null &
  pid=$!
  record_pid "$pid" moto_server
  if ! wait_http "http://127.0.0.1:$port/moto-api/" 60 "$pid"; then
    tail -n 20 "$RUN/moto.log" >&2 || true
    loud "moto server did not start on 127.0.0.1:$port (log above)"
    cmd_stop
    exit 1
  fi
  create_bucket "http://127.0.0.1:$port"
  # moto honours If-Match on DeleteObject (checked by the conformance suite); MinIO ignores it.
  lines+=("export LEASE_TEST_S3_MOTO='s3://$BUCKET?endpoint=http://127.0.0.1:$port&region=us-east-1&path_style=true&conditional_delete=true'")
  lines+=("export LEASE_TEST_S3_MOTO_RESET='http://127.0.0.1:$port/moto-api/reset'")
  say "moto $MOTO_VERSION on 127.0.0.1:$port (pid $pid)"

  # MinIO: where it can be built.
  if [ "$with_minio" = 1 ]; then
    if build_minio; then
      local data
      data=$(mktemp -d /tmp/lease-minio.XXXXXX)
      echo "$data" >>"$RUN/datadirs"
      port=$(free_port)
      MINIO_ROOT_USER=$ACCESS_KEY MINIO_ROOT_PASSWORD=$SECRET_KEY MINIO_BROWSER=off \
        MINIO_UPDATE=off MINIO_CALLHOME_ENABLE=off \
        setsid "$MINIO_BIN" server --quiet --address "127.0.0.1:$port" "$data" \
        >"$RUN/minio.log" 2>&1 </dev/null &
      pid=$!
      record_pid "$pid" minio
      if wait_http "http://127.0.0.1:$port/minio/health/live" 60 "$pid" &&
        create_bucket "http://127.0.0.1:$port"; then
        lines+=("export LEASE_TEST_S3_MINIO='s3://$BUCKET?endpoint=http://127.0.0.1:$port&region=us-east-1&path_style=true'")
        say "MinIO $MINIO_VERSION on 127.0.0.1:$port (pid $pid)"
      else
        tail -n 20 "$RUN/minio.log" >&2 || true
        loud "MinIO did not start: the S3 tests run on moto only (log above)"
        lines+=("export LEASE_TEST_S3_MINIO_SKIPPED='MinIO did not start, see $RUN/minio.log'")
      fi
    else
      local why="the MinIO build failed, see $MINIO_LOG"
      [ -f "$MINIO_FAILED.nogo" ] && why="Go is not installed, so MinIO cannot be built"
      loud "MinIO NOT TESTED: $why" "The S3 tests run on moto only."
      lines+=("export LEASE_TEST_S3_MINIO_SKIPPED='$why'")
    fi
  else
    lines+=("export LEASE_TEST_S3_MINIO_SKIPPED='--no-minio was given'")
  fi

  mkdir -p "$(dirname "$env_file")"
  printf '%s\n' "${lines[@]}" >"$env_file"
  say "wrote $env_file; source it, run the tests, then: $0 stop --env-file $env_file"
}

cmd_status() {
  [ -f "$RUN/pids" ] || { say "not running"; return 0; }
  local pid name
  while read -r pid name; do
    if kill -0 "$pid" 2>/dev/null; then say "$name running (pid $pid)"; else say "$name exited (pid $pid)"; fi
  done <"$RUN/pids"
  [ -f "$ENV_FILE" ] && cat "$ENV_FILE"
  return 0
}

case "${1:-}" in
  prepare)
    install_moto
    build_minio || loud "MinIO could not be built (see $MINIO_LOG); the S3 tests will run on moto only"
    ;;
  build-minio) build_minio ;;
  start) shift; parse_env_file_arg "$@"; cmd_start ;;
  stop) shift; parse_env_file_arg "$@"; cmd_stop ;;
  status) shift; parse_env_file_arg "$@"; cmd_status ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'
    exit 64
    ;;
esac
