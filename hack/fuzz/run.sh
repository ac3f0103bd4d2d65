#!/usr/bin/env bash
# Runs every Go fuzz target of the module, one after the other, for FUZZTIME
# each (default 30s; any `go test -fuzztime` value). New targets are found
# on their own: the packages whose tests declare `func Fuzz…`, then
# `go test -list '^Fuzz'` in each for the exact names.
#
#   FUZZTIME=5s bash hack/fuzz/run.sh            every target for 5 s
#   bash hack/fuzz/run.sh ./gateway/connect      only that package's targets
#   FUZZFLAGS=-parallel=1 bash hack/fuzz/run.sh  more `go test` flags (one worker: a shared machine)
#
# A failing input is written by `go test` to the package's
# testdata/fuzz/<target>/ (commit it with the fix, so it stays a regression
# test); the script then exits 1 after running the remaining targets.
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
fuzztime=${FUZZTIME:-30s}

if [ $# -gt 0 ]; then
  pkgs=("$@")
else
  mapfile -t pkgs < <(grep -rlE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(' . \
    | grep -v '/node_modules/' | xargs -r -n1 dirname | sort -u)
fi

failed=()
count=0
start=$SECONDS
for pkg in "${pkgs[@]}"; do
  mapfile -t targets < <($GO test -run '^$' -list '^Fuzz' "$pkg" | grep -E '^Fuzz')
  for target in "${targets[@]}"; do
    count=$((count + 1))
    echo "fuzz: $pkg $target for $fuzztime"
    # shellcheck disable=SC2086 # FUZZFLAGS is a list of flags
    if ! $GO test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" ${FUZZFLAGS:-} "$pkg"; then
      failed+=("$pkg $target")
    fi
  done
done
echo "fuzz: $count targets in $((SECONDS - start)) s"
if [ ${#failed[@]} -gt 0 ]; then
  printf 'fuzz: FAILED %s\n' "${failed[@]}" >&2
  exit 1
fi
