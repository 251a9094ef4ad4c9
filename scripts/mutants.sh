#!/usr/bin/env bash
# Mutation testing of the protocol's decisions (issue 30; docs/verification.md, "Mutation
# testing"): cargo-mutants changes core/src/protocol/ one operator at a time and asks whether the
# core crate's own tests (no servers) notice. Settings and the equivalent mutants left out, each
# with its reason: .cargo/mutants.toml.
#
#   scripts/mutants.sh            every mutant of core/src/protocol/ (see docs/verification.md
#                                 for the time; run it under `nice -n 19` on a shared machine)
#   scripts/mutants.sh --record   the same, then record in .cargo/mutants-pinned every file
#                                 none of whose mutants was missed: the base of --changed
#   scripts/mutants.sh --changed  only the mutants in lines that differ from the recorded
#                                 versions (what ./scripts/test runs): fails if one is missed,
#                                 or if there are more than LEASE_MUTANTS_MAX (default 40, about 4 minutes:
#                                 then run --record instead, and commit .cargo/mutants-pinned)
#   scripts/mutants.sh --advance  --changed, then, when every mutant was caught, record the
#                                 checked files' committed versions as pinned: their other lines'
#                                 mutants were caught at the recorded version, by tests that only
#                                 grow (a merge keeps the bounded check small; the full run,
#                                 --record, stays the authority and re-checks every line)
#   scripts/mutants.sh --record-files FILE...
#                                 every mutant of the named protocol files (no filter by diff),
#                                 then update their lines of .cargo/mutants-pinned (the others are
#                                 left as they are): pinned when every mutant of the file was
#                                 tested and caught, unviable or excluded, and the file is
#                                 committed unchanged; `-` otherwise. For those files it is what
#                                 --record is (the full run, one file at a time), so a pin means
#                                 the same; it takes minutes where --record takes ~40
#
# Arguments after `--` go to cargo-mutants (`-- --re '^core/src/protocol/hold\.rs:'`: one file's
# mutants; `-f FILE` does not narrow the run, cargo-mutants adds it to the configuration's
# examine_globs, which already name every protocol file).
# cargo-mutants is installed from crates.io into .cache/ the first time it is needed; builds go
# to $CARGO_TARGET_DIR/mutants (dependencies compiled once), results to
# $CARGO_TARGET_DIR/mutants-out/mutants.out.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
VERSION=27.1.0
TOOL="$ROOT/.cache/cargo-mutants-$VERSION/bin/cargo-mutants"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="$TARGET/mutants-out"
PINNED=.cargo/mutants-pinned
MAX="${LEASE_MUTANTS_MAX:-40}"

mode=full
files=()
case "${1:-}" in
  --changed | --record | --advance) mode=${1#--}; shift ;;
  --record-files)
    mode=record-files
    shift
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
      files+=("$1")
      shift
    done
    ;;
esac
[ "${1:-}" = "--" ] && shift
if { [ "$mode" = record ] || [ "$mode" = record-files ]; } && [ $# -gt 0 ]; then
  echo "mutants: --$mode takes no cargo-mutants arguments: it must see every mutant" >&2
  exit 2
fi

install() {
  if [ ! -x "$TOOL" ]; then
    echo "installing cargo-mutants $VERSION into .cache/ (once)"
    cargo install --locked --quiet --version "$VERSION" cargo-mutants \
      --root "$ROOT/.cache/cargo-mutants-$VERSION"
  fi
}

mutants() {
  CARGO_TARGET_DIR="$TARGET/mutants" "$TOOL" mutants --colors never "$@"
}

# The protocol's source files that can hold mutants (test modules cannot).
protocol_files() {
  git ls-files -co --exclude-standard core/src/protocol | grep '\.rs$' |
    grep -v -e '/tests\.rs$' -e '/testing\.rs$' | sort
}

# The version of $1 recorded as pinned: a blob id, `-` (not yet pinned), or nothing.
recorded() {
  awk -v p="$1" '$1 == p { print $2 }' "$PINNED" 2>/dev/null || true
}

# The per-file table of the last run; arguments narrow the list of mutants generated (the
# files a --record-files run tested), so that the others do not count as excluded.
summary() {
  local all
  all=$(mktemp)
  mutants --list --no-config -p bucket-lease -f 'core/src/protocol/**/*.rs' "$@" >"$all"
  python3 scripts/lib/mutants-summary.py "$OUT/mutants.out/outcomes.json" "$all"
  rm -f "$all"
}

# After a --changed run in which no mutant was missed (cargo-mutants exits non-zero otherwise,
# and set -e stops before this): each checked file, when committed unchanged, is pinned at HEAD.
advance() {
  local path tmp
  tmp=$(mktemp)
  cp "$PINNED" "$tmp"
  for path in "$@"; do
    if git diff --quiet HEAD -- "$path" && git cat-file -e "HEAD:$path"; then
      awk -v p="$path" -v b="$(git rev-parse "HEAD:$path")" \
        '$1 == p { print p, b; done = 1; next } { print } END { if (!done) print p, b }' \
        "$tmp" >"$tmp.new" && mv "$tmp.new" "$tmp"
      echo "mutants: $path pinned at its committed version"
    else
      echo "mutants: $path has uncommitted changes: commit, then run --advance again" >&2
    fi
  done
  mv "$tmp" "$PINNED"
}

if [ "$mode" = changed ] || [ "$mode" = advance ]; then
  checked=()
  diff_file="$TARGET/mutants-changed.diff"
  mkdir -p "$TARGET"
  : >"$diff_file"
  old=$(mktemp)
  for path in $(protocol_files); do
    want=$(recorded "$path")
    if [ "$want" = "-" ]; then
      echo "mutants: $path is not pinned yet (issue 30 phase 2): not checked"
      continue
    fi
    have=$(git hash-object "$path")
    [ "$want" = "$have" ] && continue
    # The recorded version as the base; a new file, or a version this clone lacks, is new whole.
    if [ -n "$want" ] && git cat-file -e "$want" 2>/dev/null; then
      git cat-file blob "$want" >"$old"
    else
      : >"$old"
    fi
    diff -u --label "a/$path" --label "b/$path" "$old" "$path" >>"$diff_file" || true
    checked+=("$path")
  done
  rm -f "$old"
  if [ ! -s "$diff_file" ]; then
    echo "mutants: no pinned protocol file changed since the last full run: nothing to mutate"
    exit 0
  fi
  install
  count=$(mutants --list --in-diff "$diff_file" "$@" | grep -c . || true)
  echo "mutants: $count mutants in the lines changed since the last full run"
  if [ "$count" -eq 0 ]; then
    [ "$mode" = advance ] && advance "${checked[@]}"
    exit 0
  fi
  if [ "$count" -gt "$MAX" ]; then
    echo "mutants: more than $MAX: run scripts/mutants.sh --record (the full run) and commit" \
      "$PINNED instead" >&2
    exit 1
  fi
  mutants --in-diff "$diff_file" -o "$OUT" "$@"
  [ "$mode" = advance ] && advance "${checked[@]}"
  exit 0
fi

# The version of $1 to record after the last run: its committed blob when every one of its
# mutants (the list under .cargo/mutants.toml's exclusions) has an outcome in the run, each
# caught or unviable, and the file is committed unchanged; `-` otherwise. (Counting outcomes
# against the list, not only looking for missed ones, keeps a run that stopped early — a
# failed baseline, an interrupt — from pinning what it never tested.)
pin_of() {
  local path=$1 listed
  listed=$(mktemp)
  mutants --list --re "^$(re_quote "$path"):" >"$listed"
  if python3 - "$OUT/mutants.out/outcomes.json" "$path" "$listed" <<'PY' &&
import json, sys
outcomes = json.load(open(sys.argv[1]))["outcomes"]
path = sys.argv[2]
# (cargo-mutants 27 lists some "delete field" mutants of other files under --re: keep this file's.)
want = {line.rstrip("\n") for line in open(sys.argv[3]) if line.startswith(path + ":")}
good = {o["scenario"]["Mutant"]["name"] for o in outcomes
        if isinstance(o["scenario"], dict) and "Mutant" in o["scenario"]
        and o["scenario"]["Mutant"]["file"] == path
        and o["summary"] in ("CaughtMutant", "Unviable")}
sys.exit(0 if want <= good else 1)
PY
    git diff --quiet HEAD -- "$path" && git cat-file -e "HEAD:$path"; then
    echo "$path $(git rev-parse "HEAD:$path")"
  else
    echo "$path -"
  fi
  rm -f "$listed"
}

re_quote() {
  printf '%s' "$1" | sed 's/[].[^$*+?(){}|\\]/\\&/g'
}

# Rewrite $PINNED: the named files from the last run (pin_of), every other protocol file as
# recorded before (`-` when it had no line).
write_pins() {
  local path tmp want
  tmp=$(mktemp)
  {
    echo "# Each protocol file at the version (git blob) whose every mutant the last full run of"
    echo "# scripts/mutants.sh (--record, or --record-files for that file) saw caught, unviable"
    echo "# or excluded; \`-\`: not pinned yet. The base of \`scripts/mutants.sh --changed\`."
    for path in $(protocol_files); do
      if printf '%s\n' "$@" | grep -qxF "$path"; then
        pin_of "$path"
      else
        want=$(recorded "$path")
        echo "$path ${want:--}"
      fi
    done
  } >"$tmp"
  mv "$tmp" "$PINNED"
  echo "recorded in $PINNED:"
  cat "$PINNED"
}

install
status=0
if [ "$mode" = record-files ]; then
  if [ ${#files[@]} -eq 0 ]; then
    echo "mutants: --record-files needs at least one file of core/src/protocol/" >&2
    exit 2
  fi
  alternatives=""
  for path in "${files[@]}"; do
    if ! protocol_files | grep -qxF "$path"; then
      echo "mutants: $path is not a protocol source file (scripts/mutants.sh lists them:" \
        "core/src/protocol/*.rs, not tests)" >&2
      exit 2
    fi
    alternatives="${alternatives:+$alternatives|}$(re_quote "$path")"
  done
  # Every mutant of those files: cargo-mutants adds `-f` to the configuration's
  # examine_globs (it would mutate every protocol file), so the files are chosen by name.
  mutants -o "$OUT" --re "^($alternatives):" || status=$?
  summary --re "^($alternatives):"
  write_pins "${files[@]}"
  exit "$status"
fi
mutants -o "$OUT" "$@" || status=$?
summary
if [ "$mode" = record ]; then
  # shellcheck disable=SC2046 # one path per word
  write_pins $(protocol_files)
fi
exit "$status"
