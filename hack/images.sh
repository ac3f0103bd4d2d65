#!/usr/bin/env bash
# Build the container images of the three programs with the Docker engine in
# $DOCKER_HOST (or Docker's default socket): `make images`. No registry is
# contacted: every image is FROM scratch with a static binary, Debian's CA
# bundle (package ca-certificates), a passwd/group file for the non-root user
# sandgate (65532), a writable /tmp and the user's home directory.
#
#   bash hack/images.sh [gateway] [corectl] [nodeagent]     (default: all three)
#
# Needs bin/caddy, bin/corectl and bin/nodeagent built with CGO_ENABLED=0
# (`make build` does). Tags sandgate/<name>:$IMAGE_TAG (default "dev") and
# prints one line per image: "<tag> <image ID> <size in bytes>".
#
# Each image carries the OCI labels of the build's version stamp
# (bash hack/version.sh --labels: org.opencontainers.image.revision, created,
# version) and a title. With IMAGE_VERSION_TAG=1 (`make images` sets it) each
# is also tagged sandgate/<name>:<stamp> (bash hack/version.sh --tag: the
# commit's first 12 hex digits, "-modified" for a tree with changes), the tag
# `make chart` writes as the chart's appVersion; a rebuild of the same stamp
# moves that tag too.
#
# The classic builder is used (DOCKER_BUILDKIT=0): it needs no BuildKit and
# caches layers by content, so a rebuild with unchanged binaries reuses the
# image (a few seconds). When a rebuild moves the tag to a new image, the
# image it pointed to before is removed if nothing else names it, so repeated
# builds do not pile up untagged images. The builder's output is shown only
# when a build fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tag="${IMAGE_TAG:-dev}"
names=("$@")
version_tag="$(bash hack/version.sh --tag)"
labels=()
while IFS= read -r l; do
  [[ -z "$l" ]] || labels+=(--label "$l")
done < <(bash hack/version.sh --labels)
[[ ${#names[@]} -gt 0 ]] || names=(gateway corectl nodeagent)
ca=/etc/ssl/certs/ca-certificates.crt
if [[ ! -s "$ca" ]]; then
  echo "hack/images.sh: $ca is missing: apt-get install -y ca-certificates" >&2
  exit 1
fi
for name in "${names[@]}"; do
  case "$name" in
    gateway) bin=caddy ;;
    corectl|nodeagent) bin="$name" ;;
    *) echo "hack/images.sh: unknown image $name (gateway, corectl, nodeagent)" >&2; exit 2 ;;
  esac
  [[ -x "bin/$bin" ]] || { echo "hack/images.sh: bin/$bin is missing: run make build" >&2; exit 1; }
  if ! go version -m "bin/$bin" | grep -q 'CGO_ENABLED=0'; then
    echo "hack/images.sh: bin/$bin is not a static build; build it with CGO_ENABLED=0 (make build does)" >&2
    exit 1
  fi
  ctx="bin/image/$name"
  rm -rf "$ctx"
  mkdir -p "$ctx/rootfs/etc/ssl/certs" "$ctx/rootfs/tmp" "$ctx/home"
  [[ "$name" != gateway ]] || mkdir -p "$ctx/rootfs/etc/caddy"
  cp deploy/images/passwd deploy/images/group "$ctx/rootfs/etc/"
  cp "$ca" "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
  chmod 1777 "$ctx/rootfs/tmp"
  cp "bin/$bin" "$ctx/$bin"
  cp "deploy/images/Dockerfile.$name" "$ctx/Dockerfile"
  ref="sandgate/$name:$tag"
  old="$(docker image inspect -f '{{.Id}}' "$ref" 2>/dev/null || true)"
  tags=(-t "$ref")
  [[ "${IMAGE_VERSION_TAG:-0}" != 1 || "$version_tag" == "$tag" ]] || tags+=(-t "sandgate/$name:$version_tag")
  if ! out="$(DOCKER_BUILDKIT=0 docker build "${tags[@]}" "${labels[@]}" \
    --label "org.opencontainers.image.title=sandgate $name" "$ctx" 2>&1)"; then
    printf '%s\n' "$out" >&2
    echo "hack/images.sh: building $ref failed" >&2
    exit 1
  fi
  id="$(docker image inspect -f '{{.Id}}' "$ref")"
  if [[ -n "$old" && "$old" != "$id" ]] && [[ "$(docker image inspect -f '{{len .RepoTags}}' "$old" 2>/dev/null)" == 0 ]]; then
    docker image rm "$old" >/dev/null 2>&1 || true
  fi
  if [[ ${#tags[@]} == 4 ]]; then echo "hack/images.sh: $ref also tagged ${tags[3]}" >&2; fi
  echo "$ref $id $(docker image inspect -f '{{.Size}}' "$ref")"
done
