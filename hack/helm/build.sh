#!/usr/bin/env bash
# Build the helm command line (helm.sh/helm/v4, pinned in hack/helm/go.mod) once
# and print its path: the chart's lint and template checks (hack/helm/check.sh,
# `make helm-check`) and the chart's Go tests (deploy/chart_test.go, through
# SANDGATE_HELM) run it.
#
# Usage:
#   bash hack/helm/build.sh        # build if missing; print the binary's path on stdout
#
# hack/helm is a wrapper module with a go.mod `tool` directive (like
# hack/controllergen and hack/kube/apiserver): helm's dependencies stay out of
# the main go.mod. The binary goes to $SANDGATE_HELM_DIR, default
#   ${XDG_CACHE_HOME:-$HOME/.cache}/sandgate/helm-<first 16 hex of sha256(go.mod, go.sum)>/helm
# (their contents only, not where the checkout is), so a changed pin builds a
# new one, and an unchanged pin is a cache hit in any clone (nothing is built).
#
# Cost, cold: about 3-4 minutes on 2 cores (GOMODCACHE +0.3 GB); warm: nothing.
set -euo pipefail

GO="${GO:-go}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sum="$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)"
dest="${SANDGATE_HELM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sandgate/helm-$sum}"

log() { echo "hack/helm/build.sh: $*" >&2; }

if [[ -x "$dest/helm" ]]; then
  log "cached: $dest/helm"
  echo "$dest/helm"
  exit 0
fi

mkdir -p "$dest"
tmp="$(mktemp "$dest/helm.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
version="$(cd "$here" && GOFLAGS=-mod=readonly GOWORK=off "$GO" list -m -f '{{.Version}}' helm.sh/helm/v4)"
log "building helm $version into $dest (a few minutes, once)"
# helm's own Makefile stamps its version the same way.
(cd "$here" && CGO_ENABLED=0 GOFLAGS=-mod=readonly GOWORK=off "$GO" build -trimpath \
  -ldflags "-X helm.sh/helm/v4/internal/version.version=$version" -o "$tmp" helm.sh/helm/v4/cmd/helm)
mv "$tmp" "$dest/helm"
echo "$dest/helm"
