#!/usr/bin/env bash
# Check sandgate's Prometheus alert rules with promtool (the `make test` phase).
#
# Usage:
#   bash hack/monitoring/promtool.sh          # install promtool if missing, check and unit-test the rules
#   bash hack/monitoring/promtool.sh --path   # only install if missing; print promtool's path
#
# What it does, each step skipped when already done:
#   1. installs Debian's `prometheus` package (which ships promtool) with apt-get when no
#      promtool is on PATH (root only); apt's output goes to $SANDGATE_PROMTOOL_DIR/apt-get.log
#      (default /tmp/sandgate-promtool). The Prometheus server the package would start and
#      enable as a system service is kept stopped and disabled (see below);
#   2. `promtool check rules` on deploy/monitoring/rules.yaml: the file parses, every
#      expression is valid PromQL, every alert has the labels and annotations Prometheus needs;
#   3. `promtool test rules` on deploy/monitoring/rules_test.yaml: each alert fires, and stays
#      silent, on the series its test case writes;
#   4. `promtool check rules` on the Grafana dashboard's queries (the "expr" lines of
#      deploy/monitoring/sandgate-dashboard.json, written as recording rules to a temporary
#      file): each is valid PromQL.
#
# The system service: on a Debian host with systemd, installing `prometheus` starts and enables
# prometheus.service (a server on :9090 that scrapes the host from then on and at every boot).
# This script keeps that from happening, as hack/docker/start.sh does for docker.io: a temporary
# /usr/sbin/policy-rc.d (only if the host has none) answers "101, not allowed" to the package
# scripts' start requests during the install, and afterwards `systemctl disable --now` turns off
# the units the install enabled. Units of packages that were installed before are left alone.
# To run the server later: systemctl enable --now prometheus.service. Set
# SANDGATE_KEEP_SYSTEM_PROMETHEUS=1 to let the package start and enable it as usual.
#
# Every failure ends the script with a non-zero status and says why on stderr.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="${SANDGATE_PROMTOOL_DIR:-/tmp/sandgate-promtool}"
rules="$root/deploy/monitoring/rules.yaml"
tests="$root/deploy/monitoring/rules_test.yaml"

log() { echo "hack/monitoring/promtool.sh: $*" >&2; }
die() {
  log "FAILED: $*"
  exit 1
}

only_path=
case "${1:-}" in
  "") ;;
  --path) only_path=1 ;;
  *)
    log "unknown argument $1 (want nothing or --path)"
    exit 2
    ;;
esac

# 1. The package.
if ! command -v promtool >/dev/null 2>&1; then
  [[ $(id -u) == 0 ]] || die "need root to install Debian's prometheus package (apt-get), which ships promtool"
  mkdir -p "$dir"
  aptlog="$dir/apt-get.log"
  log "installing prometheus (for promtool) with apt-get (about a minute; output in $aptlog)"
  units=()
  dpkg-query -W -f='${Status}' prometheus 2>/dev/null | grep -q 'install ok installed' || units+=(prometheus.service)
  policy=
  if [[ ${SANDGATE_KEEP_SYSTEM_PROMETHEUS:-} != 1 && ! -e /usr/sbin/policy-rc.d ]]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\n# Written by sandgate hack/monitoring/promtool.sh during apt-get install; removed after it.\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  export DEBIAN_FRONTEND=noninteractive
  {
    apt-get update && apt-get install -y --no-install-recommends prometheus
  } >"$aptlog" 2>&1 || {
    tail -n 20 "$aptlog" >&2
    die "apt-get install prometheus failed (last lines above, all of it in $aptlog)"
  }
  if [[ -n $policy ]]; then
    rm -f "$policy"
    trap - EXIT
  fi
  if [[ ${SANDGATE_KEEP_SYSTEM_PROMETHEUS:-} != 1 && -d /run/systemd/system ]] && ((${#units[@]})); then
    log "disabling the system unit the install enabled: ${units[*]} (systemctl enable --now prometheus.service to use it)"
    systemctl disable --now "${units[@]}" >>"$aptlog" 2>&1 || log "systemctl disable ${units[*]} failed (see $aptlog); the Prometheus server may be running"
  fi
  command -v promtool >/dev/null 2>&1 || die "the prometheus package is installed but promtool is not on PATH"
fi
promtool="$(command -v promtool)"
if [[ -n $only_path ]]; then
  echo "$promtool"
  exit 0
fi
log "$("$promtool" --version 2>&1 | head -n 1)"

# 2. The rules parse and are valid PromQL.
log "promtool check rules deploy/monitoring/rules.yaml"
"$promtool" check rules "$rules" >&2 || die "promtool check rules $rules"

# 3. The rules' unit tests (their paths are relative to the test file).
log "promtool test rules deploy/monitoring/rules_test.yaml"
"$promtool" test rules "$tests" >&2 || die "promtool test rules $tests"

# 4. The dashboard's queries parse. The JSON holds one "expr" a line; its escapes are \" and \\.
dash="$root/deploy/monitoring/sandgate-dashboard.json"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
{
  echo "groups:"
  echo "  - name: sandgate-dashboard"
  echo "    rules:"
  n=0
  while IFS= read -r expr; do
    n=$((n + 1))
    expr="${expr//\\\"/\"}"
    expr="${expr//\\\\/\\}"
    expr="${expr//\'/\'\'}"
    echo "      - record: sandgate:dashboard_query_$n"
    echo "        expr: '$expr'"
  done < <(sed -n 's/^ *"expr": "\(.*\)",\{0,1\}$/\1/p' "$dash")
} >"$tmp/dashboard-queries.yaml"
queries="$(grep -c '^      - record:' "$tmp/dashboard-queries.yaml" || true)"
((queries > 0)) || die "found no \"expr\" line in $dash"
log "promtool check rules on the $queries queries of deploy/monitoring/sandgate-dashboard.json"
"$promtool" check rules "$tmp/dashboard-queries.yaml" >&2 || {
  cat -n "$tmp/dashboard-queries.yaml" >&2
  die "a query of $dash is not valid PromQL (the queries as rules above)"
}
