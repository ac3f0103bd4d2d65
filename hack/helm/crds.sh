#!/usr/bin/env bash
# Print the paths of the Prometheus Operator's PodMonitor and PrometheusRule
# CRDs, one a line, for the chart's dry run with every toggle on
# (deploy/chart_apply_test.go, TestChartApply; the Gateway API and
# cert-manager CRDs come from their modules through deploy/edge_test.go's
# edgeCRDs). The Prometheus Operator's root module, which holds its CRD files,
# is not served by the module proxy this project reaches; its API types module
# is: our pinned controller-gen (hack/controllergen) generates the two CRDs
# from the Go types of
#   github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring@v0.95.2
# and their +kubebuilder markers, as the Prometheus Operator makes its own,
# into ${XDG_CACHE_HOME:-$HOME/.cache}/sandgate/monitoring-crds-v0.95.2/ once.
# The module is checked against the checksum database like any. Cost: the
# first time about 30 s (and controller-gen's build, about 2 min, unless make
# generate-check built it); then nothing.
set -euo pipefail
GO="${GO:-go}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { echo "hack/helm/crds.sh: $*" >&2; }

monitoring_version=v0.95.2
mon="${XDG_CACHE_HOME:-$HOME/.cache}/sandgate/monitoring-crds-$monitoring_version"
if [[ ! -s "$mon/monitoring.coreos.com_podmonitors.yaml" || ! -s "$mon/monitoring.coreos.com_prometheusrules.yaml" ]]; then
  log "generating the monitoring.coreos.com CRDs from pkg/apis/monitoring@$monitoring_version into $mon"
  cg="$(cd "$here/../controllergen" && GOFLAGS= GOWORK=off "$GO" tool -n controller-gen)"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  printf 'module sandgate.local/monitoringcrds\n\ngo 1.26.8\n' >"$work/go.mod"
  printf 'package monitoringcrds\n\nimport _ "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"\n' >"$work/types.go"
  (cd "$work" && GOFLAGS=-mod=mod GOWORK=off "$GO" get "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring@$monitoring_version" >/dev/null 2>&1 &&
    GOFLAGS=-mod=mod GOWORK=off "$GO" mod tidy >/dev/null 2>&1 &&
    GOFLAGS=-mod=mod GOWORK=off "$cg" crd:crdVersions=v1,maxDescLen=0 \
      paths=github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1 output:crd:dir="$work/out")
  mkdir -p "$mon"
  cp "$work/out/monitoring.coreos.com_podmonitors.yaml" "$work/out/monitoring.coreos.com_prometheusrules.yaml" "$mon/"
fi
for f in "$mon/monitoring.coreos.com_podmonitors.yaml" "$mon/monitoring.coreos.com_prometheusrules.yaml"; do
  [[ -f "$f" ]] || { log "$f is missing"; exit 1; }
  echo "$f"
done
