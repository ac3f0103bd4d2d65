#!/usr/bin/env bash
# Print the path of a headless-capable Chromium for the browser tests, installing Debian's
# chromium package with apt-get when none is on the PATH (root only).
#
# Usage:
#   CHROMIUM="$(bash hack/browser/chromium.sh)"
#
# apt's output goes to $SANDGATE_CHROMIUM_DIR/apt-get.log (default /tmp/sandgate-chromium).
# The package starts no service. Every failure ends the script with a non-zero status and says
# why on stderr; stdout carries only the path.
set -euo pipefail

dir="${SANDGATE_CHROMIUM_DIR:-/tmp/sandgate-chromium}"
log() { echo "hack/browser/chromium.sh: $*" >&2; }
die() {
  log "FAILED: $*"
  exit 1
}

for name in chromium chromium-browser; do
  if path="$(command -v "$name")"; then
    echo "$path"
    exit 0
  fi
done
[[ $(id -u) == 0 ]] || die "need root to install chromium (apt-get)"
mkdir -p "$dir"
aptlog="$dir/apt-get.log"
log "installing chromium with apt-get (output in $aptlog)"
export DEBIAN_FRONTEND=noninteractive
apt-get update >>"$aptlog" 2>&1 || log "apt-get update failed; trying the install with the lists there are"
apt-get install -y --no-install-recommends chromium >>"$aptlog" 2>&1 || die "apt-get install chromium failed; see $aptlog"
path="$(command -v chromium)" || die "chromium is not on the PATH after its install"
echo "$path"
