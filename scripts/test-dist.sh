#!/usr/bin/env bash
# The release artifacts installed as users install them, from real package servers on 127.0.0.1.
#
#   scripts/test-dist.sh            standalone, or called by scripts/test
#
# Makes them (scripts/dist, into dist/), starts a PyPI-compatible index (pypiserver, from PyPI)
# and an npm registry (verdaccio, from npm; no uplink, so nothing is fetched from elsewhere),
# publishes the wheel and sdist, and the two npm tarballs (`npm publish`). Then, in fresh
# directories outside the repository, with no cargo or rustc on PATH:
#   - a fresh venv: pip install --index-url http://127.0.0.1:P/simple bucket-lease (wheels only),
#     then the README's Python example on a file store and on S3 (moto);
#   - a fresh npm project: npm install bucket-lease --registry http://127.0.0.1:P, then the
#     README's Node example (CommonJS and ESM) on the same stores;
#   - a Go program linking the C bundle (unpacked into a prefix), shared and -tags lease_static.
# Prints the install times and sizes (docs/benchmarks.md, "Install"). Servers stop on exit.
#
# Environment (optional; scripts/test sets them): CARGO_TARGET_DIR; LEASE_TEST_S3_MOTO (moto is
# started here otherwise); CI=true makes a missing moto a failure.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
. scripts/lib/component.sh
VERSION=$(workspace_version)
DIST=$ROOT/dist
SERVERS=$ROOT/.cache/dist-servers
PYPISERVER_VERSION=2.4.2
# The newest verdaccio that runs on Node 20 (6.9 and later need Node 22).
VERDACCIO_VERSION=6.8.0
say() { printf '\n--- dist: %s\n' "$*"; }

started=$(date +%s)
timings=()
step() {
  local name=$1 t0
  shift
  say "$name"
  t0=$(date +%s)
  "$@"
  timings+=("$(printf '%5ss  %s' $(($(date +%s) - t0)) "$name")")
}

tmp=$(mktemp -d /tmp/lease-dist.XXXXXX)
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  stop_own_s3
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# wait_http URL WHAT LOG: up to 60 s for URL to answer 200.
wait_http() {
  local i
  for i in $(seq 1 120); do
    if curl -fsS -o /dev/null "$1" 2>/dev/null; then return 0; fi
    sleep 0.5
  done
  cat "$3" >&2
  echo "$2 did not answer at $1 within 60 s (its log above)" >&2
  return 1
}

step "scripts/dist" scripts/dist

# --- The package servers.
PYPI_PORT=$(free_port)
NPM_PORT=$(free_port)
PYPI=http://127.0.0.1:$PYPI_PORT
NPM=http://127.0.0.1:$NPM_PORT
servers() {
  mkdir -p "$SERVERS"
  [ -x "$SERVERS/pypi/bin/pypi-server" ] || {
    python3 -m venv "$SERVERS/pypi"
    "$SERVERS/pypi/bin/pip" install --quiet --disable-pip-version-check "pypiserver==$PYPISERVER_VERSION"
  }
  [ -x "$SERVERS/npm/node_modules/.bin/verdaccio" ] || {
    mkdir -p "$SERVERS/npm"
    # One of verdaccio's dependencies asks for node-fetch by the dist-tag `cjs`, which the
    # registry here does not have; 2.7.0 is the CommonJS line that tag names.
    echo '{ "name": "dist-servers", "private": true, "overrides": { "node-fetch": "2.7.0" } }' \
      >"$SERVERS/npm/package.json"
    (cd "$SERVERS/npm" &&
      npm install --no-audit --no-fund --loglevel=error "verdaccio@$VERDACCIO_VERSION" >/dev/null)
  }
  # Publishing to pypiserver: its package directory is the index.
  mkdir -p "$tmp/pypi-packages"
  cp "$DIST"/bucket_lease-"$VERSION"-*.whl "$DIST/bucket_lease-$VERSION.tar.gz" "$tmp/pypi-packages/"
  "$SERVERS/pypi/bin/pypi-server" run -i 127.0.0.1 -p "$PYPI_PORT" "$tmp/pypi-packages" \
    >"$tmp/pypiserver.log" 2>&1 &
  pids+=($!)
  mkdir -p "$tmp/verdaccio"
  cat >"$tmp/verdaccio/config.yaml" <<EOF
storage: $tmp/verdaccio/storage
auth:
  htpasswd:
    file: $tmp/verdaccio/htpasswd
    max_users: 10
uplinks: {}
packages:
  '**':
    access: \$all
    publish: \$authenticated
log: { type: stdout, format: pretty, level: warn }
EOF
  "$SERVERS/npm/node_modules/.bin/verdaccio" --config "$tmp/verdaccio/config.yaml" \
    --listen "127.0.0.1:$NPM_PORT" >"$tmp/verdaccio.log" 2>&1 &
  pids+=($!)
  wait_http "$PYPI/simple/" pypiserver "$tmp/pypiserver.log"
  wait_http "$NPM/-/ping" verdaccio "$tmp/verdaccio.log"
  echo "pypiserver $PYPI, verdaccio $NPM"
}
step "package servers (pypiserver $PYPISERVER_VERSION, verdaccio $VERDACCIO_VERSION)" servers

npm_publish() {
  local token
  token=$(curl -fsS -X PUT -H 'content-type: application/json' \
    -d '{"name":"dist-test","password":"dist-test-password"}' \
    "$NPM/-/user/org.couchdb.user:dist-test" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).token))')
  printf '//127.0.0.1:%s/:_authToken=%s\n' "$NPM_PORT" "$token" >"$tmp/publish.npmrc"
  local t
  for t in "$DIST/bucket-lease-linux-x64-gnu-$VERSION.tgz" "$DIST/bucket-lease-$VERSION.tgz"; do
    npm publish "$t" --registry "$NPM" --userconfig "$tmp/publish.npmrc" --loglevel=error >/dev/null
  done
  curl -fsS "$NPM/bucket-lease" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const p=JSON.parse(s);console.log("published:", p.name, Object.keys(p.versions).join(","))})'
}
step "npm publish (bucket-lease-linux-x64-gnu, bucket-lease)" npm_publish

step "S3 test servers (moto)" need_s3 "$ROOT/.cache/dist-s3.env"
s3=${LEASE_TEST_S3_MOTO:-}
if [ -z "$s3" ]; then
  [ "${CI:-}" = "true" ] && { echo "moto could not be started (CI=true)" >&2; exit 1; }
  echo "!!! SKIPPING the S3 runs: LEASE_TEST_S3_MOTO is not set and moto could not be started" >&2
fi

# --- A user's machine: PATH without cargo or rustc, directories outside the repository.
user_path=""
IFS=: read -ra path_dirs <<<"$PATH"
for d in "${path_dirs[@]}"; do
  [ -x "$d/cargo" ] || [ -x "$d/rustc" ] || user_path=${user_path:+$user_path:}$d
done
as_user() { env PATH="$user_path" CARGO=/nonexistent "$@"; }
as_user sh -c '! command -v cargo && ! command -v rustc' >/dev/null ||
  { echo "cargo or rustc is still on the user PATH" >&2; exit 1; }
mkdir -p "$tmp/stores/file"
file_url="file://$tmp/stores/file"

# elapsed CMD…: runs CMD, prints its wall time in seconds (one decimal) on fd 3.
elapsed() {
  local t0 t1
  t0=$(date +%s%N)
  "$@"
  t1=$(date +%s%N)
  awk -v ns=$((t1 - t0)) 'BEGIN { printf "%.1f\n", ns / 1e9 }' >&3
}

# The first ```LANG block of README.md, as written.
readme_block() {
  awk -v lang="$1" '$0 == "```" lang {f = 1; next} f && /^```/ {exit} f' "$ROOT/README.md"
}

python_install() {
  local app=$tmp/py-app
  mkdir -p "$app"
  as_user python3 -m venv "$app/venv"
  # Binary only: a compile from the sdist would need cargo, which is not there.
  pip_s=$( { (cd "$app" && elapsed as_user "$app/venv/bin/pip" install --quiet --disable-pip-version-check \
    --no-cache-dir --only-binary :all: --index-url "$PYPI/simple" "bucket-lease==$VERSION") 3>&1 1>&2; } )
  echo "pip install bucket-lease: ${pip_s}s"
  # The README's example as written (extracted from README.md), its URL given as the argument;
  # then a check that it released the lease.
  {
    echo "import sys"
    readme_block python | sed 's|"s3://my-bucket/locks/gc"|sys.argv[1]|'
    cat <<'EOF'
st = lease.status(sys.argv[1])
assert st.state == "released", st
print("python:", lease.__version__, lease.__file__, sys.argv[1].split("?")[0], st.state)
EOF
  } >"$app/example.py"
  grep -q 'sys.argv\[1\], ttl' "$app/example.py" ||
    { echo "README.md's Python example no longer names s3://my-bucket/locks/gc" >&2; return 1; }
  (cd "$app" && as_user "$app/venv/bin/python" example.py "$file_url/py-gc")
  # lease.pg (fencing at PostgreSQL) ships with its SQL.
  (cd "$app" && as_user "$app/venv/bin/python" -c 'import lease.pg
assert "CREATE OR REPLACE FUNCTION lease_fence" in lease.pg.SCHEMA
print("python: lease.pg with its SQL,", len(lease.pg.SCHEMA), "bytes")')
  if [ -n "$s3" ]; then
    local s3_gc=${s3/\?//py-gc?}
    (cd "$app" && as_user "$app/venv/bin/python" example.py "$s3_gc")
  fi
}
step "pip install bucket-lease (fresh venv, no cargo) + the README example" python_install

node_install() {
  local app=$tmp/node-app
  mkdir -p "$app"
  (cd "$app" && as_user npm init -y >/dev/null)
  npm_s=$( { (cd "$app" && elapsed as_user npm install --no-audit --no-fund --loglevel=error \
    --cache "$tmp/npm-cache" --registry "$NPM" "bucket-lease@$VERSION" >/dev/null) 3>&1 1>&2; } )
  echo "npm install bucket-lease: ${npm_s}s"
  [ -f "$app/node_modules/bucket-lease-linux-x64-gnu/lease.node" ] ||
    { echo "npm did not install the platform package bucket-lease-linux-x64-gnu" >&2; return 1; }
  [ ! -e "$app/node_modules/bucket-lease/lease.node" ] ||
    { echo "bucket-lease has a lease.node of its own: it should use the platform package's" >&2; return 1; }
  # The README's example as written (extracted from README.md): in an async function as
  # CommonJS, and as an ES module; then a check that it released the lease.
  {
    readme_block js | sed -n '1p'
    echo "async function main(url) {"
    readme_block js | sed '1d' | sed "s|'s3://my-bucket/locks/gc'|url|"
    cat <<'EOF'
  const st = await lease.status(url);
  if (st.state !== 'released') throw new Error(`state ${st.state}`);
  console.log('node (cjs):', lease.version, require.resolve('bucket-lease'), url.split('?')[0], l.epoch, st.state);
}
main(process.argv[2]).catch((e) => { console.error(e); process.exit(1); });
EOF
  } >"$app/example.js"
  grep -q "acquire(url," "$app/example.js" ||
    { echo "README.md's Node example no longer names s3://my-bucket/locks/gc" >&2; return 1; }
  cat >"$app/example.mjs" <<'EOF'
import * as lease from 'bucket-lease';

const url = process.argv[2];
const l = await lease.acquire(url, { ttl: 30_000, wait: 60_000, label: 'gc-1' });
try {
  l.ensureHeld(5_000);
} finally {
  await l.release();
}
console.log('node (esm):', url.split('?')[0], l.epoch);
EOF
  (cd "$app" && as_user node example.js "$file_url/node-gc" && as_user node example.mjs "$file_url/node-gc")
  # bucket-lease/pg (fencing at PostgreSQL) ships with its SQL, for require and import.
  (cd "$app" && as_user node -e '
    const pg = require("bucket-lease/pg");
    if (!pg.SCHEMA.includes("CREATE OR REPLACE FUNCTION lease_fence")) throw new Error("no SQL in bucket-lease/pg");
    import("bucket-lease/pg").then((m) => {
      if (typeof m.fence !== "function") throw new Error("no fence in the ESM bucket-lease/pg");
      console.log("node: bucket-lease/pg with its SQL,", pg.SCHEMA.length, "bytes");
    });')
  if [ -n "$s3" ]; then
    local s3_gc=${s3/\?//node-gc?}
    (cd "$app" && as_user node example.js "$s3_gc" && as_user node example.mjs "$s3_gc")
  fi
}
step "npm install bucket-lease (fresh project, no cargo) + the README example" node_install

# Without its platform package (as on a platform with no prebuilt addon), require() fails with
# LEASE_NOT_BUILT and names the package to install.
node_without_addon() {
  local app=$tmp/node-app-no-addon
  mkdir -p "$app"
  (cd "$app" && as_user npm init -y >/dev/null &&
    as_user npm install --no-audit --no-fund --loglevel=error --omit=optional \
      --cache "$tmp/npm-cache" --registry "$NPM" "bucket-lease@$VERSION" >/dev/null)
  [ ! -e "$app/node_modules/bucket-lease-linux-x64-gnu" ] ||
    { echo "--omit=optional installed the platform package" >&2; return 1; }
  (cd "$app" && as_user node -e '
    try {
      require("bucket-lease");
    } catch (e) {
      if (e.code !== "LEASE_NOT_BUILT" || !e.message.includes("bucket-lease-linux-x64-gnu")) throw e;
      console.log("without the platform package:", e.code, "-", e.message.slice(0, 120) + "…");
      process.exit(0);
    }
    throw new Error("require(\"bucket-lease\") worked without an addon");')
}
step "npm install --omit=optional: require() says what is missing" node_without_addon

# The C bundle unpacked into a prefix, and a Go program outside the repository that links it
# through pkg-config (the Go module comes from the checkout by a replace directive: it is not
# published yet).
go_bundle() {
  local prefix=$tmp/prefix app=$tmp/go-app
  mkdir -p "$prefix" "$app"
  tar -C "$prefix" --strip-components=1 -xzf "$DIST/liblease-$VERSION-x86_64-linux-gnu.tar.gz"
  cp examples/go/leader_worker/main.go "$app/"
  cat >"$app/go.mod" <<EOF
module example.invalid/leaseapp

go 1.21

require github.com/lease-dev/lease/bindings/go v0.0.0

replace github.com/lease-dev/lease/bindings/go => $ROOT/bindings/go
EOF
  # CGO_LDFLAGS names the prefix because Go's build cache does not key a cgo package by what
  # pkg-config printed: seen here, a second run reused the link flags of the first run's
  # (deleted) prefix.
  local go_env=(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" CGO_LDFLAGS="-O2 -g -L$prefix/lib")
  (cd "$app" && as_user env "${go_env[@]}" go build -o leaseapp . &&
    as_user env "${go_env[@]}" go build -tags lease_static -o leaseapp-static .)
  local so
  so=$(ldd "$app/leaseapp" | awk '$1 == "liblease.so" { print $3 }')
  [ -n "$so" ] && [ "$(realpath "$so")" = "$prefix/lib/liblease.so" ] ||
    { echo "the shared build does not link the bundle's liblease.so (ldd: $so)" >&2; return 1; }
  if ldd "$app/leaseapp-static" | grep -q liblease; then
    echo "the lease_static build links liblease.so" >&2
    return 1
  fi
  mkdir -p "$tmp/stores/go"
  as_user "$app/leaseapp" "file://$tmp/stores/go" go-shared 1
  as_user "$app/leaseapp-static" "file://$tmp/stores/go" go-static 1
  if [ -n "$s3" ]; then
    as_user "$app/leaseapp-static" "$s3" go-static 1
  fi
}
step "Go program linking the C bundle (shared, -tags lease_static)" go_bundle

echo
echo "sizes:"
(cd "$DIST" && for f in *; do printf '%10s  %s\n' "$(stat -c %s "$f")" "$f"; done)
echo "install times: pip install ${pip_s}s, npm install ${npm_s}s (goal: < 15 s each)"
echo
printf '%s\n' "${timings[@]}"
echo "dist: all passed in $(($(date +%s) - started))s"
