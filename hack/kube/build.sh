#!/usr/bin/env bash
# Build kube-apiserver and etcd from the Go module proxy for envtest, once.
#
# Usage:
#   bash hack/kube/build.sh          # build if missing; print the asset directory on stdout
#   bash hack/kube/build.sh --regen  # only rewrite hack/kube/{apiserver,etcd}/go.mod and go.sum
#                                    # (after changing K8S_VERSION / ETCD_VERSION); no build
#
# The binaries go to $SANDGATE_KUBE_ASSETS, default
#   ${XDG_CACHE_HOME:-$HOME/.cache}/sandgate/kube-<K8S_VERSION>-etcd-<ETCD_VERSION>/
# and the build is skipped when both are there and kube-apiserver reports the pinned
# version. Use the printed directory as KUBEBUILDER_ASSETS; corectl's tests also find
# the default directory on their own.
#
# Why wrapper modules (docs/kube-apiserver.md): k8s.io/kubernetes
# requires its staging modules at v0.0.0 and replaces them with ./staging/..., so
# `go install k8s.io/kubernetes/cmd/kube-apiserver@v1.37.2` is refused. The module in
# hack/kube/apiserver requires k8s.io/kubernetes and replaces every staging module with
# its published v0.<minor>.<patch>; hack/kube/etcd requires go.etcd.io/etcd/server/v3,
# whose root package is etcd's main. Both list the binary with a go.mod `tool`
# directive, so they contain no Go files and stay out of the main module.
#
# Cost, cold: about 8-10 minutes on 2 cores, peak 2.4 GB RSS (the link), GOMODCACHE
# +1 GB, GOCACHE +3 GB. Warm: nothing (skip) or a few seconds (re-link).
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
GO="${GO:-go}"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="${SANDGATE_KUBE_ASSETS:-${XDG_CACHE_HOME:-$HOME/.cache}/sandgate/kube-${K8S_VERSION}-etcd-${ETCD_VERSION}}"

log() { echo "hack/kube/build.sh: $*" >&2; }

regen=0
case "${1:-}" in
  --regen) regen=1 ;;
  "") ;;
  *) log "unknown argument $1 (want nothing or --regen)"; exit 2 ;;
esac

if [[ $regen == 0 && -x "$dest/kube-apiserver" && -x "$dest/etcd" ]] &&
  "$dest/kube-apiserver" --version 2>/dev/null | grep -qx "Kubernetes ${K8S_VERSION}"; then
  log "cached: $dest"
  echo "$dest"
  exit 0
fi

# The staging modules, read from k8s.io/kubernetes's own go.mod (its replace lines).
regen_apiserver() {
  local dir="$here/apiserver" kmod minor staging
  # Downloaded outside any module, so no go.mod or go.sum is touched.
  kmod="$(cd "$(mktemp -d)" && GOFLAGS= GOWORK=off "$GO" mod download -json "k8s.io/kubernetes@${K8S_VERSION}" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  [[ -f "$kmod" ]] || { log "cannot read the go.mod of k8s.io/kubernetes@${K8S_VERSION}"; exit 1; }
  minor="v0.${K8S_VERSION#v1.}"
  staging="$(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$kmod" |
    grep -vx -e k8s.io/sample-cli-plugin -e k8s.io/sample-controller)"
  rm -f "$dir/go.mod" "$dir/go.sum"
  (
    cd "$dir"
    "$GO" mod init github.com/sandgate/sandgate/hack/kube/apiserver >/dev/null 2>&1
    "$GO" mod edit -go=1.26.8 -require="k8s.io/kubernetes@${K8S_VERSION}"
    for m in $staging; do "$GO" mod edit -replace="$m=$m@$minor"; done
    "$GO" mod edit -tool=k8s.io/kubernetes/cmd/kube-apiserver
    # kubectl of the same version, built by hack/kube/kubectl.sh.
    "$GO" mod edit -tool=k8s.io/kubernetes/cmd/kubectl
    "$GO" mod tidy
  )
}

regen_etcd() {
  local dir="$here/etcd"
  rm -f "$dir/go.mod" "$dir/go.sum"
  (
    cd "$dir"
    "$GO" mod init github.com/sandgate/sandgate/hack/kube/etcd >/dev/null 2>&1
    "$GO" mod edit -go=1.26.8 -require="go.etcd.io/etcd/server/v3@${ETCD_VERSION}"
    "$GO" mod edit -tool=go.etcd.io/etcd/server/v3
    "$GO" mod tidy
  )
}

mkdir -p "$here/apiserver" "$here/etcd"
if [[ $regen == 1 || ! -f "$here/apiserver/go.mod" ]]; then log "writing hack/kube/apiserver/go.mod"; regen_apiserver; fi
if [[ $regen == 1 || ! -f "$here/etcd/go.mod" ]]; then log "writing hack/kube/etcd/go.mod"; regen_etcd; fi
if [[ $regen == 1 ]]; then exit 0; fi
grep -qE "[[:space:]]k8s.io/kubernetes ${K8S_VERSION}( |$)" "$here/apiserver/go.mod" ||
  { log "hack/kube/apiserver/go.mod does not pin k8s.io/kubernetes ${K8S_VERSION}; run with --regen"; exit 1; }
grep -qE "[[:space:]]go.etcd.io/etcd/server/v3 ${ETCD_VERSION}( |$)" "$here/etcd/go.mod" ||
  { log "hack/kube/etcd/go.mod does not pin etcd ${ETCD_VERSION}; run with --regen"; exit 1; }

mkdir -p "$(dirname "$dest")"
tmp="$(mktemp -d "$(dirname "$dest")/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
vpkg=k8s.io/component-base/version
ldflags="-s -w -X $vpkg.gitVersion=${K8S_VERSION} -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=${minor} -X $vpkg.gitTreeState=clean"
log "building kube-apiserver ${K8S_VERSION} (about 8 minutes cold)"
(cd "$here/apiserver" && CGO_ENABLED=0 GOFLAGS=-mod=readonly "$GO" build -buildvcs=false -trimpath -ldflags "$ldflags" \
  -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
log "building etcd ${ETCD_VERSION}"
(cd "$here/etcd" && CGO_ENABLED=0 GOFLAGS=-mod=readonly "$GO" build -buildvcs=false -trimpath -ldflags "-s -w" \
  -o "$tmp/etcd" go.etcd.io/etcd/server/v3)

"$tmp/kube-apiserver" --version | grep -qx "Kubernetes ${K8S_VERSION}" ||
  { log "built kube-apiserver reports $("$tmp/kube-apiserver" --version), want ${K8S_VERSION}"; exit 1; }
"$tmp/etcd" --version >/dev/null

chmod 755 "$tmp"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
log "built: $dest"
echo "$dest"
