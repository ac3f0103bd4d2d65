#!/usr/bin/env bash
# Start a private Docker engine for the nodeagent tests, once, and print its DOCKER_HOST.
#
# Usage:
#   DOCKER_HOST="$(bash hack/docker/start.sh)"        # start if needed; print unix://…/docker.sock
#   bash hack/docker/start.sh --stop                   # stop the engine this script started
#
# What it does, each step skipped when already done (so running it twice is cheap):
#   1. installs Debian's docker.io and busybox-static with apt-get when missing (root only),
#      apt's output in $SANDGATE_DOCKER_DIR/apt-get.log; the system Docker service that the
#      docker.io package would start and enable is kept stopped and disabled (see below);
#   2. starts dockerd with its own socket, data root, exec root and pidfile under
#      $SANDGATE_DOCKER_DIR (default /tmp/sandgate-docker); it never touches a system
#      Docker (/var/run/docker.sock, /var/lib/docker);
#   3. waits until the engine answers (at most $SANDGATE_DOCKER_WAIT seconds, default 60);
#   4. builds the test image $SANDGATE_TEST_IMAGE (default sandgate-test/busybox:1) with
#      `docker import` of a root filesystem made from Debian's static busybox: no image
#      registry is needed.
#
# The system Docker service: on a Debian host with systemd, installing docker.io starts and
# enables docker.service, docker.socket and containerd.service (a second engine that owns
# /var/run/docker.sock, docker0 and iptables rules, and starts on every boot). When this
# script installs the package, it keeps that from happening: a temporary
# /usr/sbin/policy-rc.d (only if the host has none) answers "101, not allowed" to the
# package scripts' start requests during the install, and afterwards
# `systemctl disable` turns off the units the install enabled. Units of packages that were
# installed before are left alone. To use the system service later:
#   systemctl enable --now docker.service
# Set SANDGATE_KEEP_SYSTEM_DOCKER=1 to let the packages start and enable it as usual.
#
# The engine runs without a bridge network (--bridge=none, no iptables changes), so it
# cannot disturb another engine's docker0; containers get only a loopback interface.
# Logs go to $SANDGATE_DOCKER_DIR/dockerd.log. Every failure ends the script with a
# non-zero status and says why on stderr; stdout carries only the DOCKER_HOST value.
set -euo pipefail

dir="${SANDGATE_DOCKER_DIR:-/tmp/sandgate-docker}"
image="${SANDGATE_TEST_IMAGE:-sandgate-test/busybox:1}"
wait_seconds="${SANDGATE_DOCKER_WAIT:-60}"
sock="$dir/docker.sock"
pidfile="$dir/docker.pid"
host="unix://$sock"

log() { echo "hack/docker/start.sh: $*" >&2; }
die() {
  log "FAILED: $*"
  exit 1
}

running_pid() {
  local pid
  [[ -f $pidfile ]] || return 1
  pid="$(cat "$pidfile" 2>/dev/null)" || return 1
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

if [[ ${1:-} == --stop ]]; then
  if pid="$(running_pid)"; then
    log "stopping dockerd $pid"
    kill "$pid"
    for _ in $(seq 1 60); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    kill -0 "$pid" 2>/dev/null && die "dockerd $pid did not stop within 30 s"
  fi
  exit 0
elif [[ -n ${1:-} ]]; then
  log "unknown argument $1 (want nothing or --stop)"
  exit 2
fi

# 1. Packages.
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'install ok installed' || missing+=(busybox-static)
if ((${#missing[@]})); then
  [[ $(id -u) == 0 ]] || die "need root to install ${missing[*]} (apt-get)"
  mkdir -p "$dir"
  aptlog="$dir/apt-get.log"
  log "installing ${missing[*]} with apt-get (1-2 minutes; output in $aptlog)"
  # The service units this install may bring: only those of packages not yet installed
  # are disabled afterwards.
  units=()
  for pkg_unit in docker.io:docker.service docker.io:docker.socket containerd:containerd.service; do
    dpkg-query -W -f='${Status}' "${pkg_unit%%:*}" 2>/dev/null | grep -q 'install ok installed' ||
      units+=("${pkg_unit#*:}")
  done
  policy=
  if [[ ${SANDGATE_KEEP_SYSTEM_DOCKER:-} != 1 && ! -e /usr/sbin/policy-rc.d ]]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\n# Written by sandgate hack/docker/start.sh during apt-get install; removed after it.\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  export DEBIAN_FRONTEND=noninteractive
  {
    apt-get update && apt-get install -y --no-install-recommends "${missing[@]}"
  } >"$aptlog" 2>&1 || {
    tail -n 20 "$aptlog" >&2
    die "apt-get install ${missing[*]} failed (last lines above, all of it in $aptlog)"
  }
  if [[ -n $policy ]]; then
    rm -f "$policy"
    trap - EXIT
  fi
  if [[ ${SANDGATE_KEEP_SYSTEM_DOCKER:-} != 1 && -d /run/systemd/system ]] && ((${#units[@]})); then
    log "disabling the system units the install enabled: ${units[*]} (systemctl enable --now docker.service to use them)"
    systemctl disable --now "${units[@]}" >>"$aptlog" 2>&1 || log "systemctl disable ${units[*]} failed (see $aptlog); the system Docker may be running"
  fi
fi
# Debian's own client when present (the engine is Debian's 20.10; any newer client negotiates).
docker=/usr/bin/docker
[[ -x $docker ]] || docker="$(command -v docker)" || die "no docker client found after installing docker.io"
busybox=/bin/busybox
[[ -x $busybox ]] || die "busybox-static is installed but $busybox is missing"

dk() { "$docker" -H "$host" "$@"; }

# 2. The engine.
mkdir -p "$dir"
if ! running_pid >/dev/null; then
  [[ $(id -u) == 0 ]] || die "dockerd needs root"
  rm -f "$pidfile" "$sock"
  log "starting dockerd under $dir"
  setsid dockerd \
    --data-root "$dir/data" \
    --exec-root "$dir/exec" \
    --pidfile "$pidfile" \
    -H "$host" \
    --bridge=none --iptables=false --ip-masq=false --ip-forward=false \
    >"$dir/dockerd.log" 2>&1 </dev/null &
  started=$!
  disown "$started" 2>/dev/null || true
fi

# 3. Wait for it to answer.
deadline=$((SECONDS + wait_seconds))
until dk version >/dev/null 2>&1; do
  if [[ -n ${started:-} ]] && ! kill -0 "$started" 2>/dev/null; then
    tail -n 30 "$dir/dockerd.log" >&2 || true
    die "dockerd exited while starting (log above, full log in $dir/dockerd.log)"
  fi
  if ((SECONDS >= deadline)); then
    tail -n 30 "$dir/dockerd.log" >&2 || true
    die "dockerd did not answer on $host within ${wait_seconds} s (log above)"
  fi
  sleep 0.5
done

# 4. The test image.
if ! dk image inspect "$image" >/dev/null 2>&1; then
  log "building $image from $busybox"
  root="$(mktemp -d)"
  trap 'rm -rf "$root"' EXIT
  mkdir -p "$root"/{bin,etc,tmp,root,proc,sys,dev,work}
  chmod 1777 "$root/tmp"
  cp "$busybox" "$root/bin/busybox"
  # Applets as symlinks to /bin/busybox, as the container will see it.
  for applet in $("$busybox" --list); do
    [[ $applet == busybox ]] || ln -sf /bin/busybox "$root/bin/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
  tar -C "$root" -c . | dk import \
    --change 'ENV PATH=/bin' \
    --change 'WORKDIR /' \
    --change 'CMD ["/bin/sh"]' \
    - "$image" >&2 || die "docker import of the busybox root filesystem failed"
  dk run --rm --network none "$image" /bin/true >&2 || die "the imported image $image cannot run /bin/true"
fi

echo "$host"
