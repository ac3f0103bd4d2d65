#!/usr/bin/env bash
# hack/netcpu/run.sh BASE [ROUNDS] [WORKERS]: corectl's CPU per reconciled
# sandbox network (BenchmarkReconcileSandboxNetworks, corectl/controller),
# this work tree against the commit BASE, interleaved.
#
# Builds the corectl/controller test binary twice: from the work tree
# ("new") and from BASE's tree with the work tree's controller_test.go
# copied in ("old": the same benchmark, the old code; when that file
# does not build against BASE, because the benchmark wires what BASE
# lacks, BASE's own controller_test.go, and the script says so). Then ROUNDS rounds
# (default 3), each running both binaries once, old and new in an order
# that alternates by round, each run 300 networks at WORKERS workers
# (default 8) against its own kube-apiserver and etcd (the cache of
# hack/kube/build.sh). It prints every run's line (corectl-cpu-ms/network
# is the test process's utime+stime from /proc per network, as
# docs/benchmarks.md "Sandbox networks per minute" reports it; B/op and
# allocs/op from -benchmem), then per variant the median and range of
# corectl's CPU and of the allocations per network, the median of
# new ÷ old per round, the load average before and after and the wall
# time. Nothing is left behind but a temporary directory it removes.
set -euo pipefail
base=${1:?usage: hack/netcpu/run.sh BASE [ROUNDS] [WORKERS]}
rounds=${2:-3}
workers=${3:-8}
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
load0=$(cut -d' ' -f1-3 /proc/loadavg)

mkdir -p "$tmp/old"
git -C "$root" archive "$base" | tar -x -C "$tmp/old"
cp "$tmp/old/corectl/controller/controller_test.go" "$tmp/controller_test.go.base"
cp "$root/corectl/controller/controller_test.go" "$tmp/old/corectl/controller/controller_test.go"
(cd "$root" && go test -c -o "$tmp/ctl.new" ./corectl/controller)
if ! (cd "$tmp/old" && go test -c -o "$tmp/ctl.old" ./corectl/controller 2>"$tmp/old-build.txt"); then
	# The work tree's benchmark wires something BASE does not have (e.g.
	# a new engine field): BASE runs its own benchmark, as it was.
	echo "old: the work tree's controller_test.go does not build at $base; BASE's own benchmark instead:"
	sed 's/^/  /' "$tmp/old-build.txt" | head -5
	cp "$tmp/controller_test.go.base" "$tmp/old/corectl/controller/controller_test.go"
	(cd "$tmp/old" && go test -c -o "$tmp/ctl.old" ./corectl/controller)
fi

run() { # run VARIANT ROUND
	local line
	line=$(cd "$root/corectl/controller" && "$tmp/ctl.$1" -test.run '^$' \
		-test.bench "ReconcileSandboxNetworks/workers=$workers\$" -test.benchtime 300x -test.benchmem \
		-test.timeout 30m | grep '^Benchmark')
	echo "$1 round $2 load $(cut -d' ' -f1 /proc/loadavg): $line"
	echo "$2 $(echo "$line" | awk '{for (i = 1; i < NF; i++) { if ($(i+1) == "corectl-cpu-ms/network") c = $i; if ($(i+1) == "allocs/op") a = $i }; print c, a}')" >>"$tmp/$1.txt"
}
for ((i = 1; i <= rounds; i++)); do
	if ((i % 2 == 1)); then run old "$i"; run new "$i"; else run new "$i"; run old "$i"; fi
done

summary() { # summary VARIANT: median (range) of CPU ms and allocations per network
	sort -n -k2 "$tmp/$1.txt" | awk -v v="$1" '{c[NR] = $2} END {printf "%s: corectl CPU %s ms per network (%s–%s)", v, c[int((NR + 1) / 2)], c[1], c[NR]}'
	sort -n -k3 "$tmp/$1.txt" | awk '{a[NR] = $3} END {printf ", %s allocations per network (%s–%s)\n", a[int((NR + 1) / 2)], a[1], a[NR]}'
}
echo "commit: $(git -C "$root" rev-parse --short HEAD) against $(git -C "$root" rev-parse --short "$base"), $rounds rounds, $workers workers, 300 networks a run"
summary old
summary new
awk 'NR == FNR {old[$1] = $2; next} {print $2 / old[$1]}' "$tmp/old.txt" "$tmp/new.txt" | sort -n |
	awk '{r[NR] = $1} END {printf "new ÷ old CPU per network, per round: median %.2f (%.2f–%.2f)\n", r[int((NR + 1) / 2)], r[1], r[NR]}'
echo "load average before: $load0, after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "wall time: $(($(date +%s) - start)) s"
