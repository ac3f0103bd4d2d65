#!/usr/bin/env bash
# Regenerate the Kubernetes files that controller-gen makes from our API types
# (docs/deploy.md "Generated files"), or check that the tree holds them.
#
# Usage:
#   bash hack/controllergen/generate.sh          # regenerate into the tree (make generate)
#   bash hack/controllergen/generate.sh --check  # regenerate into the tree, then fail when
#                                                # that changed anything (make generate-check)
#
# For each API package below, controller-gen writes
#   <package>/zz_generated.deepcopy.go   the DeepCopy functions (generator "object")
#   <crd directory>/<group>_<plural>.yaml one CRD manifest per root type (generator "crd")
# from the types and their +kubebuilder markers. The CRD directories hold generated
# manifests only: they are emptied first, so a removed type leaves no manifest behind.
#
# controller-gen is pinned in hack/controllergen/go.mod, a wrapper module with a
# `tool` directive (as hack/kube/apiserver pins kube-apiserver), so the main go.mod
# does not grow. `go tool -n` builds it into Go's build cache and prints its path; it
# then runs from the repository root, where it loads the API packages of the main
# module. (`go tool controller-gen` itself would run it inside the wrapper module,
# which cannot load packages outside it.)
#
# Cost: the first build of controller-gen about 2 minutes on 2 cores; then about a
# second to find it, and a few seconds per package to load and generate.
set -euo pipefail

GO="${GO:-go}"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

# Each API package and the directory of its CRD manifests.
apis=(
  "corectl/apis/v1alpha1 deploy/compute/crds"
  "nodecore/apis/v1alpha1 deploy/portal/crds"
)

log() { echo "hack/controllergen/generate.sh: $*" >&2; }

check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) log "unknown argument $1 (want nothing or --check)"; exit 2 ;;
esac

# The generated paths: each package's deepcopy file and each CRD directory.
generated=()
for a in "${apis[@]}"; do
  read -r pkg crds <<<"$a"
  generated+=("$pkg/zz_generated.deepcopy.go" "$crds")
done

# --check keeps a copy of what the tree holds now, to compare with afterwards.
if [[ $check == 1 ]]; then
  before="$(mktemp -d)"
  trap 'rm -rf "$before"' EXIT
  for p in "${generated[@]}"; do
    mkdir -p "$before/$(dirname "$p")"
    if [[ -e $p ]]; then cp -R "$p" "$before/$p"; fi
  done
fi

log "finding controller-gen ($(sed -n 's/^[[:space:]]*sigs.k8s.io\/controller-tools \(v[^ ]*\).*/\1/p' hack/controllergen/go.mod), hack/controllergen/go.mod; the first build takes about 2 minutes)"
cg="$("$GO" -C hack/controllergen tool -n controller-gen)"
[[ -x $cg ]] || { log "go tool -n controller-gen printed '$cg', not an executable"; exit 1; }

for a in "${apis[@]}"; do
  read -r pkg crds <<<"$a"
  log "generating $pkg/zz_generated.deepcopy.go and $crds/*.yaml from ./$pkg"
  rm -f "$pkg/zz_generated.deepcopy.go" "$crds"/*.yaml
  "$cg" object crd:crdVersions=v1,headerFile=hack/controllergen/crd-header.txt \
    paths="./$pkg" output:crd:artifacts:config="$crds"
done

if [[ $check == 0 ]]; then
  exit 0
fi
stale=0
for p in "${generated[@]}"; do
  if ! git --no-pager diff --no-index --exit-code "$before/$p" "$p" >&2; then
    stale=1
  fi
done
if [[ $stale == 1 ]]; then
  log "the generated files above were stale: they differ from what controller-gen makes of the"
  log "API types and their +kubebuilder markers. They are now regenerated in your tree: review and"
  log "commit them (never edit them by hand; change the types and run make generate)."
  exit 1
fi
log "the generated files are current"
