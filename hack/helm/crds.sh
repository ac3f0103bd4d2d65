#!/usr/bin/env bash
# Print the paths of the third-party CRDs the chart's toggles render objects
# of, from their projects' pinned Go modules (downloaded once into the Go
# module cache, checked against go.sum's checksum database like any module):
#   HTTPRoute    sigs.k8s.io/gateway-api@v1.6.3, config/crd/standard/ (the standard channel)
#   Certificate  github.com/cert-manager/cert-manager@v1.21.2, deploy/crds/
# deploy/chart_test.go installs them in the test apiserver before the chart's
# dry run with every toggle on. (monitoring.coreos.com is not here: the
# Prometheus Operator's root module, which holds its CRD files, is not served
# by the module proxy this project reaches; the test checks those objects
# against deploy/monitoring instead.)
set -euo pipefail
GO="${GO:-go}"
dir() {
  (cd "$(mktemp -d)" && GOFLAGS= GOWORK=off "$GO" mod download -json "$1" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
}
gw="$(dir sigs.k8s.io/gateway-api@v1.6.3)"
cm="$(dir github.com/cert-manager/cert-manager@v1.21.2)"
for f in "$gw/config/crd/standard/gateway.networking.k8s.io_httproutes.yaml" "$cm/deploy/crds/cert-manager.io_certificates.yaml"; do
  [[ -f "$f" ]] || { echo "hack/helm/crds.sh: $f is missing" >&2; exit 1; }
  echo "$f"
done
