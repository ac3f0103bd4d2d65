#!/usr/bin/env bash
# Build kubectl of the kube-apiserver version hack/kube/build.sh builds, once,
# and print its path: deploy's tests run it against that apiserver
# (TestPruneGenerated: kubectl apply -k and its --prune, as docs/deploy.md
# gives them), and it is the client to try those commands with by hand.
#
# Usage:
#   bash hack/kube/kubectl.sh        # build if missing; print the binary's path on stdout
#
# kubectl comes from hack/kube/apiserver's wrapper module (its second go.mod
# `tool`, the same k8s.io/kubernetes and published staging modules as
# kube-apiserver). The binary goes to $SANDGATE_KUBECTL_DIR, default
#   ${XDG_CACHE_HOME:-$HOME/.cache}/sandgate/kubectl-<K8S_VERSION>/kubectl
# and the build is skipped when it is there and reports the pinned version.
# A kubectl on the PATH is not used: its version may be far from the
# apiserver's (kubectl supports one minor version of skew).
#
# Cost, after hack/kube/build.sh: under a minute on 2 cores (a few small
# modules more); warm: nothing.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.37.2}"
GO="${GO:-go}"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="${SANDGATE_KUBECTL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sandgate/kubectl-${K8S_VERSION}}"

log() { echo "hack/kube/kubectl.sh: $*" >&2; }

# client_version prints what the kubectl at $1 says its version is. Its
# output is read whole before grep looks at it: with pipefail, grep -q ending
# the pipe at the first match would fail the pipeline by kubectl's SIGPIPE.
client_version() { local out; out="$("$1" version --client 2>/dev/null)" || true; grep -m1 '^Client Version:' <<<"$out" || true; }

if [[ -x "$dest/kubectl" ]] && [[ "$(client_version "$dest/kubectl")" == "Client Version: ${K8S_VERSION}" ]]; then
  log "cached: $dest/kubectl"
  echo "$dest/kubectl"
  exit 0
fi
grep -qE "[[:space:]]k8s.io/kubernetes ${K8S_VERSION}( |$)" "$here/apiserver/go.mod" ||
  { log "hack/kube/apiserver/go.mod does not pin k8s.io/kubernetes ${K8S_VERSION}; run bash hack/kube/build.sh --regen"; exit 1; }

mkdir -p "$dest"
tmp="$(mktemp "$dest/kubectl.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
vpkg=k8s.io/component-base/version
ldflags="-s -w -X $vpkg.gitVersion=${K8S_VERSION} -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=${minor} -X $vpkg.gitTreeState=clean"
log "building kubectl ${K8S_VERSION} into $dest"
(cd "$here/apiserver" && CGO_ENABLED=0 GOFLAGS=-mod=readonly GOWORK=off "$GO" build -buildvcs=false -trimpath -ldflags "$ldflags" \
  -o "$tmp" k8s.io/kubernetes/cmd/kubectl)
got="$(client_version "$tmp")"
[[ "$got" == "Client Version: ${K8S_VERSION}" ]] || { log "built kubectl reports '${got}', want ${K8S_VERSION}"; exit 1; }
chmod 755 "$tmp"
mv "$tmp" "$dest/kubectl"
trap - EXIT
echo "$dest/kubectl"
