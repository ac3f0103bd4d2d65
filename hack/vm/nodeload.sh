#!/usr/bin/env bash
# Run hack/nodeload inside a QEMU virtual machine, for node counts the host's
# RLIMIT_NOFILE does not allow (every simulated node is one socket in the gateway
# and one in the nodes' process; raising the hard limit needs CAP_SYS_RESOURCE,
# which a container or a CI sandbox often lacks). Inside the machine the script is
# PID 1 and root, so it raises the limit, widens the ephemeral port range and
# runs the built gateway and the load tool there, then powers the machine off.
#
# Usage:
#   bash hack/vm/nodeload.sh [nodeload flags…]
#   e.g. bash hack/vm/nodeload.sh -nodes 50000 -rate 0 -heartbeat 240s -settle 120s -nodes-gogc 100 -dial-concurrency 40
#
# The arguments reach the machine on the kernel command line, so they are limited to
# the characters [A-Za-z0-9._,=:/+-] (no spaces or quotes) and -caddy is the script's.
# Files nodeload writes (-profile, -trace, -gateway-output) stay in the machine's
# memory and are lost at power-off; -profile still prints the gateway's goroutine
# stacks and heap in use to the console.
#
# Environment:
#   VM_MEMORY  the machine's memory (default 14G; 50,000 nodes used about 1 GiB in
#              the gateway and 2 GiB more in the nodes' process)
#   VM_CPUS    its CPUs (default: the host's)
#   VM_ACCEL   tcg (default) or kvm. tcg emulates the CPU, 25-60 times slower than
#              the host: memory figures hold, CPU figures do not, and the
#              heartbeat interval must be long enough for the emulated CPUs (240 s
#              for 50,000 nodes). Use kvm where /dev/kvm runs a stock kernel (a
#              nested PVM host, kvm_pvm, does not: the guest hangs after
#              decompressing).
#
# What it needs: qemu-system-x86, cpio and busybox-static (apt-get install when
# missing; busybox-static is also what hack/docker/start.sh installs), and the kernel
# of Debian's linux-image-amd64, fetched with apt-get download into
# ${XDG_CACHE_HOME:-$HOME/.cache}/sandgate/vm (only its vmlinuz is unpacked, nothing
# is installed; fetched again when linux-image-amd64 names another kernel). It
# builds bin/caddy (make bin/caddy) and a static nodeload. The tool's output (the
# figures of docs/benchmarks.md) is the machine's console, printed here; the
# script exits with nodeload's status.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/sandgate/vm"
memory="${VM_MEMORY:-14G}"
cpus="${VM_CPUS:-$(nproc)}"
accel="${VM_ACCEL:-tcg}"

log() { echo "hack/vm/nodeload.sh: $*" >&2; }

case "$accel" in
  tcg | kvm) ;;
  *) log "VM_ACCEL must be tcg or kvm, not $accel"; exit 2 ;;
esac
for arg in "$@"; do
  if [[ ! $arg =~ ^[A-Za-z0-9._,=:/+-]+$ ]]; then
    log "a nodeload argument may hold only [A-Za-z0-9._,=:/+-]: $arg"
    exit 2
  fi
  case "$arg" in
    -caddy | --caddy | -caddy=* | --caddy=*) log "-caddy is set by the script (the machine's /caddy)"; exit 2 ;;
  esac
done

need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v cpio >/dev/null || need+=(cpio)
# The machine's shell and tools: Debian's static busybox, the package
# hack/docker/start.sh installs for the test image.
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'install ok installed' || need+=(busybox-static)
if ((${#need[@]})); then
  log "installing ${need[*]} (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >&2
fi

mkdir -p "$cache"
kernel="$cache/vmlinuz"
busybox=/bin/busybox
pkg="$(apt-cache depends linux-image-amd64 | sed -n 's/^ *Depends: \(linux-image-[^ ]*\)$/\1/p' | head -n 1)"
[[ -n $pkg ]] || { log "apt-cache names no kernel package for linux-image-amd64"; exit 1; }
# The work directory of this run: the downloads, the initramfs and the console log
# (two runs at once do not share them).
work="$(mktemp -d "$cache/run.XXXXXX")"
trap 'rm -rf "$work"' EXIT
[[ -x $busybox ]] || { log "busybox-static is installed but $busybox is missing"; exit 1; }
if [[ ! -s $kernel || "$(cat "$cache/kernel.pkg" 2>/dev/null)" != "$pkg" ]]; then
  log "fetching $pkg (apt-get download)"
  (cd "$work" && apt-get download "$pkg") >&2
  dpkg-deb -x "$work"/*.deb "$work/x"
  found_kernel="$(find "$work/x/boot" -name 'vmlinuz-*' -type f | head -n 1)"
  [[ -n $found_kernel ]] || { log "$pkg holds no vmlinuz"; exit 1; }
  # Copied under another name, then renamed: an interrupted copy is never taken
  # for a good one.
  cp "$found_kernel" "$kernel.tmp" && mv "$kernel.tmp" "$kernel"
  echo "$pkg" >"$cache/kernel.pkg"
  rm -rf "$work/x" "$work"/*.deb
fi

log "building bin/caddy (make bin/caddy) and a static nodeload"
make -C "$root" --no-print-directory bin/caddy >&2
initdir="$work/initramfs"
mkdir -p "$initdir"/{bin,proc,sys,dev,tmp,root}
(cd "$root" && CGO_ENABLED=0 go build -o "$initdir/nodeload" ./hack/nodeload)
cp "$root/bin/caddy" "$initdir/caddy"
cp "$busybox" "$initdir/bin/busybox"
cat >"$initdir/init" <<'EOF'
#!/bin/busybox sh
# PID 1 of the machine: mounts, loopback, limits, then nodeload with the
# arguments passed on the kernel command line (nodeload_args="…").
/bin/busybox --install -s /bin
export PATH=/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
ip link set lo up
echo "1024 65535" >/proc/sys/net/ipv4/ip_local_port_range
echo 65535 >/proc/sys/net/core/somaxconn
echo 65535 >/proc/sys/net/ipv4/tcp_max_syn_backlog
ulimit -n 200000
args=$(sed -n 's/.*nodeload_args="\([^"]*\)".*/\1/p' /proc/cmdline)
echo "vm: $(nproc) CPUs, $(sed -n 's/MemTotal: *//p' /proc/meminfo), RLIMIT_NOFILE $(ulimit -n), kernel $(uname -r)"
echo "vm: nodeload -caddy /caddy $args"
/nodeload -caddy /caddy $args
echo "vm: nodeload exit status $?"
poweroff -f
EOF
chmod +x "$initdir/init"
(cd "$initdir" && find . | cpio -o -H newc 2>/dev/null) >"$work/initramfs.cpio"
rm -rf "$initdir"

accelflags=(-accel tcg,thread=multi -cpu max)
if [[ $accel == kvm ]]; then accelflags=(-enable-kvm -cpu host); fi
log "booting a $accel machine ($cpus CPUs, $memory); nodeload's output follows"
out="$work/console.log"
qemu-system-x86_64 "${accelflags[@]}" -smp "$cpus" -m "$memory" -nographic -no-reboot -nic none \
  -kernel "$kernel" -initrd "$work/initramfs.cpio" \
  -append "console=ttyS0 quiet panic=-1 nodeload_args=\"$*\"" </dev/null | tr -d '\r' | tee "$out" | grep -v $'^\e' || true
status="$(sed -n 's/^vm: nodeload exit status \([0-9]*\)$/\1/p' "$out")"
if [[ -z $status ]]; then
  cp "$out" "$cache/console.log"
  log "the machine stopped before nodeload ended (console: $cache/console.log)"
  exit 1
fi
exit "$status"
