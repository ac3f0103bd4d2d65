#!/usr/bin/env bash
# Install the Debian Python packages the E2B Python SDK needs to run from its source
# (the real-peer tier, integration/realpeers), once, and print the interpreter's path.
#
# Usage:
#   python="$(bash hack/peers/python.sh)"     # install what is missing; print /usr/bin/python3
#
# No Python package index is used: the SDK's dependencies come from Debian's apt, and the
# three things Debian's packages lack are bridged by integration/realpeers/python/bridges.py.
# apt's output goes to $SANDGATE_PEERS_APT_LOG (default /tmp/sandgate-peers-apt-get.log).
# Each failure ends the script with a non-zero status and says why on stderr; stdout carries
# only the interpreter's path.
set -euo pipefail

python=/usr/bin/python3
packages=(python3 python3-httpx python3-httpcore python3-protobuf python3-attr python3-packaging
  python3-dateutil python3-typing-extensions python3-wcmatch python3-rich python3-h2)
aptlog="${SANDGATE_PEERS_APT_LOG:-/tmp/sandgate-peers-apt-get.log}"

log() { echo "hack/peers/python.sh: $*" >&2; }
die() {
  log "FAILED: $*"
  exit 1
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  [[ $(id -u) == 0 ]] || die "need root to install ${missing[*]} (apt-get)"
  log "installing ${missing[*]} with apt-get (about a minute; waits up to 10 min for another apt-get to finish; output in $aptlog)"
  export DEBIAN_FRONTEND=noninteractive
  {
    apt-get -o DPkg::Lock::Timeout=600 update &&
      apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${missing[@]}"
  } >"$aptlog" 2>&1 || {
    tail -n 20 "$aptlog" >&2
    die "apt-get install ${missing[*]} failed (last lines above, all of it in $aptlog)"
  }
fi
[[ -x $python ]] || die "$python is missing after installing python3"
"$python" -c 'import httpx, httpcore, google.protobuf, attr, packaging, dateutil, typing_extensions, wcmatch, rich, h2' ||
  die "$python cannot import the SDK's dependencies"
echo "$python"
