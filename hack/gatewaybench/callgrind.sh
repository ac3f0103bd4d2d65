#!/bin/bash
# callgrind.sh CADDY PROXY C [gatewaybench flags...]
#
# The user-space instructions of one whole proxy process (PROXY: gateway or
# reverse_proxy) per ListDir, a count the machine's load does not move: runs
# hack/gatewaybench with CADDY, the named proxy under
# `valgrind --tool=callgrind --instr-atstart=no` (GODEBUG=asyncpreemptoff=1,
# which valgrind needs), switches counting on once the proxy is up and off
# when its c = C cell has ended, and prints the instructions divided by the
# cell's requests. The other processes run as usual. The callgrind output
# (for callgrind_annotate; build bin/caddy with symbols for names:
# go run ./hack/buildgateway -manifest xcaddy.toml -ldflags "$(bash hack/version.sh) -s=false -w=false")
# and gatewaybench's output stay in $OUT (default a new directory under
# /tmp). CELL sets the cell's length (default 20s: about 2,000 to 8,000
# requests under valgrind, so that several collections fall in it);
# EXECD_BIN the real execd (default ~/.cache/sandgate/peers-*/execd-head).
# Extra flags go to gatewaybench (e.g. -gateway-only-env GOGC=off).
# docs/benchmarks.md "Issue 33: the liveness peek, the runtime's share, and
# the request's system calls".
set -euo pipefail
caddy=$(realpath "$1") proxy=$2 c=$3
shift 3
case $proxy in gateway | reverse_proxy) ;; *) echo "callgrind.sh: PROXY is gateway or reverse_proxy" >&2; exit 2 ;; esac
out=${OUT:-$(mktemp -d /tmp/gatewaybench-callgrind.XXXXXX)}
mkdir -p "$out"
execd=${EXECD_BIN:-$(ls -d ~/.cache/sandgate/peers-*/execd-head | head -1)}
wrap=$out/caddy-wrapper.sh
cat >"$wrap" <<EOF
#!/bin/sh
case "\$*" in
*/$proxy.Caddyfile*) GODEBUG=asyncpreemptoff=1 exec valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$out/callgrind.%p.out "$caddy" "\$@" ;;
esac
exec "$caddy" "\$@"
EOF
chmod +x "$wrap"
go build -o "$out/gatewaybench" ./hack/gatewaybench
"$out/gatewaybench" -caddy "$wrap" -execd-bin "$execd" -only listdir -rounds 1 -cell "${CELL:-20s}" -warmup 1ms \
	-concurrency "$c" "$@" >"$out/gatewaybench.txt" 2>&1 &
bench=$!
pid=
while [ -z "$pid" ]; do
	kill -0 $bench 2>/dev/null || { cat "$out/gatewaybench.txt" >&2; exit 1; }
	pid=$(grep -o "$proxy pid [0-9]*" "$out/gatewaybench.txt" | awk '{print $3}' || true)
	[ -n "$pid" ] || sleep 0.1
done
callgrind_control -i on "$pid" >/dev/null 2>&1
until grep -q "round 1 c=$c *$proxy " "$out/gatewaybench.txt"; do
	kill -0 $bench 2>/dev/null || { cat "$out/gatewaybench.txt" >&2; exit 1; }
	sleep 0.05
done
callgrind_control -i off "$pid" >/dev/null 2>&1
wait $bench
requests=$(grep "round 1 c=$c *$proxy " "$out/gatewaybench.txt" | awk '{print $5}')
ir=$(awk '/^totals:/ {print $2}' "$out/callgrind.$pid.out")
echo "$proxy c=$c: $ir instructions over $requests requests: $((ir / requests)) per request (output in $out)"
