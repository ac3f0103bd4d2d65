#!/usr/bin/env bash
# Check the Helm chart deploy/chart/sandgate (make helm-check, run by make vet):
#   1. its copies of deploy/'s files are current (hack/helm/sync.sh --check);
#   2. `helm lint --strict` with the default values, with ci/all-on-values.yaml
#      (every toggle on) and with ci/tls-caddy-values.yaml (tlsCaddy, which
#      excludes the Ingress and HTTPRoute toggles);
#   3. `helm template` with each, which fails on any template or schema error.
# The helm binary is the pinned one of hack/helm/go.mod, built once and cached
# (hack/helm/build.sh). deploy/chart_test.go compares the rendering with the
# kustomize bases and dry-runs it on a real kube-apiserver.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
chart=deploy/chart/sandgate
bash hack/helm/sync.sh --check
helm="$(bash hack/helm/build.sh)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for values in "" "$chart/ci/all-on-values.yaml" "$chart/ci/tls-caddy-values.yaml"; do
  args=()
  [[ -z "$values" ]] || args=(-f "$values")
  "$helm" lint --strict "$chart" "${args[@]}"
  "$helm" template sandgate "$chart" --namespace sandgate "${args[@]}" >"$out/rendered.yaml"
  echo "hack/helm/check.sh: helm template ${values:-(default values)}: $(grep -c '^kind:' "$out/rendered.yaml") objects"
done
