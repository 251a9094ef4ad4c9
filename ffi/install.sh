#!/usr/bin/env bash
# Install liblease into a prefix: include/liblease.h, lib/liblease.{so,a},
# lib/pkgconfig/liblease.pc (shared) and liblease-static.pc (static).
#
#   cargo build --release -p lease-ffi
#   ffi/install.sh --prefix /usr/local [--from target/release] [--strip-static]
#
# --from          the directory holding the built liblease.so and liblease.a
#                 (default: $CARGO_TARGET_DIR or ./target, then release/)
# --strip-static  drop debug info from the installed liblease.a (the release profile keeps
#                 line tables: ~380 MB with them, ~115 MB without); links of Go programs are
#                 then much faster. The shared library keeps its debug info.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=""
from=""
strip_static=false
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) prefix=$2; shift 2 ;;
    --from) from=$2; shift 2 ;;
    --strip-static) strip_static=true; shift ;;
    *) echo "install.sh: unknown argument $1" >&2; exit 64 ;;
  esac
done
[ -n "$prefix" ] || { echo "usage: ffi/install.sh --prefix DIR [--from DIR] [--strip-static]" >&2; exit 64; }
from=${from:-${CARGO_TARGET_DIR:-$ROOT/target}/release}
for f in liblease.so liblease.a; do
  [ -f "$from/$f" ] || { echo "install.sh: $from/$f is missing: build it first (cargo build --release -p lease-ffi)" >&2; exit 1; }
done
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)

# The workspace version: the one every crate, binding and package carries.
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml")
[ -n "$version" ] || { echo "install.sh: no workspace version in Cargo.toml" >&2; exit 1; }
# What `rustc --print native-static-libs` reports for this crate on x86_64-linux-gnu.
native_libs="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"

mkdir -p "$prefix/include" "$prefix/lib/pkgconfig"
install -m 644 "$ROOT/include/liblease.h" "$prefix/include/liblease.h"
# Copy only what changed, so an unchanged library keeps its mtime (and `make` stays quiet).
install_if_changed() {
  if ! cmp -s "$1" "$2"; then install -m "$3" "$1" "$2"; fi
}
install_if_changed "$from/liblease.so" "$prefix/lib/liblease.so" 755
if $strip_static; then
  tmp=$(mktemp "$prefix/lib/.liblease.a.XXXXXX")
  # Strip only when the source is newer than what is installed (stripping takes seconds).
  if [ ! -f "$prefix/lib/liblease.a" ] || [ "$from/liblease.a" -nt "$prefix/lib/liblease.a" ]; then
    strip --strip-debug -o "$tmp" "$from/liblease.a"
    chmod 644 "$tmp"
    mv "$tmp" "$prefix/lib/liblease.a"
  else
    rm -f "$tmp"
  fi
else
  install_if_changed "$from/liblease.a" "$prefix/lib/liblease.a" 644
fi
for pc in liblease liblease-static; do
  sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" -e "s|@NATIVE_STATIC_LIBS@|$native_libs|g" \
    "$ROOT/ffi/$pc.pc.in" > "$prefix/lib/pkgconfig/$pc.pc"
done
echo "installed liblease $version into $prefix (PKG_CONFIG_PATH=$prefix/lib/pkgconfig)"
