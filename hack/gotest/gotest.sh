#!/usr/bin/env bash
# Run `go test` with the given arguments and, when it fails, end with what failed.
#
# Usage:
#   GO=go bash hack/gotest/gotest.sh [go test flags and packages…]
#
# The output streams as go test prints it (a line per package as each finishes) and is
# also kept in a file under ${TMPDIR:-/tmp}. When go test exits non-zero, the script
# prints, last, a summary of that file: the packages that failed (`FAIL <package>`),
# each failed test with the lines after it (`--- FAIL: …`), and for a binary stopped by
# -timeout the tests that were still running (`panic: test timed out` and its
# `running tests:` list), so that the end of a long log (which is what a CI page
# shows) names the failure, not the last goroutine of a timeout's stack dump. The
# summary is at most 80 lines; the whole output stays in the file it names. When go
# test passes, the file is removed. Exits with go test's status.
set -uo pipefail

go=${GO:-go}
log=$(mktemp "${TMPDIR:-/tmp}/sandgate-gotest.XXXXXX") || exit 2
"$go" test "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if ((status != 0)); then
  echo "==> go test failed (exit status $status); what failed (the whole output is in $log):"
  # A timeout's panic and the tests it names; each failed test with the lines of its
  # message (indented, as go test prints them); the failed packages.
  awk '
    /^panic: test timed out/ { print; timeout = 1; next }
    timeout && /^[ \t]/ { print; next }
    { timeout = 0 }
    /^[ \t]*--- FAIL/ { print; failed = 1; n = 0; next }
    failed && /^[ \t]+[^ \t-]/ && n < 6 { print; n++; next }
    { failed = 0 }
    /^FAIL[ \t]/ { print }
  ' "$log" | head -n 80
else
  rm -f "$log"
fi
exit "$status"
