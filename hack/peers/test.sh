#!/usr/bin/env bash
# Run the real-peer tier's tests (integration/realpeers) so that their result shows in `make test`'s
# output: one line per test and subtest (the SDK suites, per execd version, mode and SDK), and the
# line saying the tier is off when it is.
#
# Usage:
#   bash hack/peers/test.sh      # with SANDGATE_PEERS_BIN, SANDGATE_PEERS_PYTHON and KUBEBUILDER_ASSETS set
#
# The whole `go test -v` output goes to $SANDGATE_PEERS_TEST_LOG (default: a new
# /tmp/sandgate-realpeers-test.XXXXXX.log, so that runs of several checkouts do not mix); on
# failure it is printed and its path named; on success the default file is removed (a file
# SANDGATE_PEERS_TEST_LOG names is kept, and its path printed). Exits with go test's status.
set -uo pipefail
cd "$(dirname "$0")/../.."
GO="${GO:-go}"
log="${SANDGATE_PEERS_TEST_LOG:-}"
own_log=
if [[ -z $log ]]; then
  log=$(mktemp /tmp/sandgate-realpeers-test.XXXXXX.log) || exit 2
  own_log=1
fi

"$GO" test -count=1 -v -timeout 20m ./integration/realpeers/ >"$log" 2>&1
status=$?
grep -E '^(real-peer tier off|[[:space:]]*--- (PASS|FAIL|SKIP)|ok|FAIL)' "$log" >&2
if ((status != 0)); then
  echo "hack/peers/test.sh: go test failed; its whole output ($log):" >&2
  cat "$log" >&2
elif [[ -n $own_log ]]; then
  rm -f "$log"
else
  echo "hack/peers/test.sh: the whole output is in $log" >&2
fi
exit "$status"
