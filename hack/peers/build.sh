#!/usr/bin/env bash
# Build the real programs sandgate talks to (the "real-peer tier" of the tests) from
# their upstream source archives, once, and print the directory that holds them.
#
# Usage:
#   SANDGATE_PEERS=<dir> bash hack/peers/build.sh     # build if missing; print the directory
#
# <dir> holds the upstream source archives and a SHA256SUMS file listing them:
#   opensandbox-4db3a993.tar.gz        OpenSandbox at 4db3a993 (top directory opensandbox-4db3a993/):
#                                      components/{execd,ingress,internal}, kubernetes/
#   opensandbox-execd-v1.0.18.tar.gz   execd at docker/execd/v1.0.18 (opensandbox-execd-v1.0.18/):
#                                      components/{execd,internal}
#   e2b-python-sdk-2.24.0.tar.gz       the E2B Python SDK 2.24.0 (e2b-python-sdk-2.24.0/):
#                                      packages/python-sdk/{e2b,e2b_connect}
# From an OpenSandbox checkout, `git archive` makes the first two (README "The real-peer
# tier"). Every archive is checked against SHA256SUMS before anything is unpacked.
#
# What lands in ${XDG_CACHE_HOME:-$HOME/.cache}/sandgate/peers-<digest>/ (<digest>: the
# first 16 hex digits of the SHA-256 of SHA256SUMS and of this script's pins), built in a
# temporary directory beside it and moved into place only when everything succeeded:
#   execd-head, execd-v1.0.18        execd (components/execd), CGO off
#   opensandbox-ingress              the OpenSandbox Ingress (components/ingress)
#   opensandbox-controller           the BatchSandbox controller (kubernetes/cmd/controller)
#   crd/                             the controller's CRDs (kubernetes/config/crd/bases)
#   kwok, kwok-stages/               sigs.k8s.io/kwok ${KWOK_VERSION} from the Go module proxy, and
#                                    its node/fast, node/heartbeat and pod/fast stages
#   python-sdk/                      the Python SDK's e2b and e2b_connect packages, unpacked
# There is no kube-scheduler: the tests give the pod template a nodeName.
# A second run finds the directory, checks the archives again (a second) and prints it.
#
# Cost, cold: about 10 minutes of CPU on 2 cores (the ingress about 5, the controller 2.5,
# kwok 2, each execd 1) and a few hundred MB of modules in GOMODCACHE.
# Progress lines go to stderr; stdout carries only the directory.
set -euo pipefail

KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
GO="${GO:-go}"
# Bump when what this script builds changes, so an old cache is not reused.
RECIPE=1

log() { echo "hack/peers/build.sh: $*" >&2; }
die() {
  log "FAILED: $*"
  exit 1
}

src="${SANDGATE_PEERS:-}"
[[ -n $src ]] || die "SANDGATE_PEERS is not set: point it at the directory with the OpenSandbox and E2B Python SDK archives and their SHA256SUMS"
[[ -d $src ]] || die "SANDGATE_PEERS=$src is not a directory"
src="$(cd "$src" && pwd)"
sums="$src/SHA256SUMS"
[[ -f $sums ]] || die "$sums is missing"

main=opensandbox-4db3a993 execd18=opensandbox-execd-v1.0.18 pysdk=e2b-python-sdk-2.24.0
for a in "$main" "$execd18" "$pysdk"; do
  grep -qE "^[0-9a-f]{64}  $a\.tar\.gz$" "$sums" || die "$sums does not list $a.tar.gz"
done
log "checking the archives against $sums"
(cd "$src" && sha256sum --quiet --strict -c SHA256SUMS >&2) || die "an archive in $src does not match SHA256SUMS"

digest="$({ cat "$sums"; echo "kwok=$KWOK_VERSION recipe=$RECIPE"; } | sha256sum | cut -c1-16)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/sandgate"
dest="$cache/peers-$digest"
if [[ -x $dest/execd-head && -x $dest/opensandbox-controller ]]; then
  log "cached: $dest"
  echo "$dest"
  exit 0
fi

mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.peers.XXXXXX")"
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
work="$tmp/.src"
mkdir -p "$work"
for a in "$main" "$execd18" "$pysdk"; do
  tar -C "$work" -xzf "$src/$a.tar.gz"
  [[ -d $work/$a ]] || die "$a.tar.gz has no top directory $a/"
done

# build <what> <about> <dir> <out> <package>: a static, trimmed Go build in the upstream
# module at <dir> (its own go.mod and go.sum; modules from the Go proxy).
build() {
  local what=$1 about=$2 dir=$3 out=$4 pkg=$5 start=$SECONDS
  log "building $what ($about cold)"
  (cd "$dir" && CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=mod "$GO" build -buildvcs=false -trimpath -ldflags "-s -w" \
    -o "$tmp/$out" "$pkg") || die "building $what failed"
  log "built $what in $((SECONDS - start)) s"
}

build "execd (HEAD, 4db3a993)" "about a minute" "$work/$main/components/execd" execd-head .
build "execd v1.0.18" "about a minute" "$work/$execd18/components/execd" execd-v1.0.18 .
build "the OpenSandbox controller" "about 3 minutes" "$work/$main/kubernetes" opensandbox-controller ./cmd/controller
build "the OpenSandbox Ingress" "about 5 minutes" "$work/$main/components/ingress" opensandbox-ingress .

log "building kwok $KWOK_VERSION from the Go module proxy (about 2 minutes cold)"
start=$SECONDS
(cd "$work" && GOWORK=off GOFLAGS= CGO_ENABLED=0 GOBIN="$tmp" "$GO" install -trimpath -ldflags "-s -w" \
  "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION") || die "building kwok failed"
log "built kwok in $((SECONDS - start)) s"
kwokdir="$(cd "$work" && GOWORK=off GOFLAGS= "$GO" mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -d $kwokdir/kustomize/stage ]] || die "cannot find kwok's stages in the module cache ($kwokdir)"
mkdir -p "$tmp/kwok-stages"
for s in node/fast node/heartbeat pod/fast; do
  f=("$kwokdir/kustomize/stage/$s"/*.yaml)
  [[ -f ${f[0]} ]] || die "kwok $KWOK_VERSION has no stage $s"
  for y in "${f[@]}"; do
    [[ $(basename "$y") == kustomization.yaml ]] || cp "$y" "$tmp/kwok-stages/${s//\//-}-$(basename "$y")"
  done
done
chmod u+w "$tmp/kwok-stages"/* # copies of the module cache's read-only files

mkdir -p "$tmp/crd" "$tmp/python-sdk"
cp "$work/$main/kubernetes/config/crd/bases"/*.yaml "$tmp/crd/"
cp -r "$work/$pysdk/packages/python-sdk/e2b" "$work/$pysdk/packages/python-sdk/e2b_connect" "$tmp/python-sdk/"
cp "$work/$pysdk/packages/python-sdk/pyproject.toml" "$tmp/python-sdk/"

"$tmp/execd-head" --help >/dev/null 2>&1 || die "the built execd does not run"
chmod -R u+w "$work"
rm -rf "$work"
chmod 755 "$tmp"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
log "built: $dest"
echo "$dest"
