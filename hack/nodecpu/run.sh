#!/usr/bin/env bash
# hack/nodecpu/run.sh BASE [ROUNDS]: the node operation path's CPU per
# operation, this work tree against the commit BASE, interleaved.
#
# Builds the test binaries of node/proto (BenchmarkDecode*, BenchmarkEncode*),
# nodecore/hub (BenchmarkDispatch, BenchmarkHeartbeat) and nodecore/api
# (BenchmarkOperation) twice: from the
# work tree ("new") and from BASE's tree with the work tree's benchmark
# files copied in ("old"; same benchmarks, old code). Then ROUNDS rounds
# (default 6), each running every binary once, old and new in an order that
# alternates by round, and prints benchstat's comparison of cpu-ns/op (the
# process's CPU per operation), sec/op, B/op and allocs/op, with the commit,
# the load average before and after and the wall time. Nothing is left
# behind but a temporary directory it removes.
set -euo pipefail
base=${1:?usage: hack/nodecpu/run.sh BASE [ROUNDS]}
rounds=${2:-6}
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
load0=$(cut -d' ' -f1-3 /proc/loadavg)

pkgs=(node/proto nodecore/hub nodecore/api)
benchfiles=(node/proto/bench_test.go nodecore/hub/bench_test.go nodecore/api/bench_test.go nodecore/api/api_test.go)
mkdir -p "$tmp/old"
git -C "$root" archive "$base" | tar -x -C "$tmp/old"
for f in "${benchfiles[@]}"; do cp "$root/$f" "$tmp/old/$f"; done
for p in "${pkgs[@]}"; do
	n=${p##*/}
	(cd "$root" && go test -c -o "$tmp/$n.new" "./$p")
	(cd "$tmp/old" && go test -c -o "$tmp/$n.old" "./$p")
done

run() { # run VARIANT
	for p in "${pkgs[@]}"; do
		n=${p##*/}
		(cd "$root/$p" && "$tmp/$n.$1" -test.run '^$' -test.bench 'Decode|Encode|Dispatch$|^BenchmarkHeartbeat$|Operation$' \
			-test.benchmem -test.benchtime 1s -test.count 1) | grep '^Benchmark' >>"$tmp/$1.txt"
	done
}
for ((i = 0; i < rounds; i++)); do
	if ((i % 2 == 0)); then run old; run new; else run new; run old; fi
done

echo "commit: $(git -C "$root" rev-parse --short HEAD) against $(git -C "$root" rev-parse --short "$base"), $rounds rounds"
echo "load average before: $load0, after: $(cut -d' ' -f1-3 /proc/loadavg)"
(cd "$tmp" && go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da old.txt new.txt)
echo "wall time: $(($(date +%s) - start)) s"
