#!/usr/bin/env bash
# Print the Go linker flags that stamp a sandgate binary with the commit it is built from.
#
# Usage:
#   go build -ldflags "$(bash hack/version.sh)" ./corectl/cmd/corectl
#   go run ./hack/buildgateway -ldflags "$(bash hack/version.sh)"
#
# The flags set three variables of package internal/version (what `caddy sandgate-version`,
# `corectl -version` and `nodeagent --version` print):
#   commit    the 40-hex commit of HEAD
#   time      its commit time (ISO 8601)
#   modified  "true" when `git status --porcelain` lists anything (uncommitted or untracked files)
# Outside a git checkout it prints nothing and the binaries report "unknown commit".
# The Makefile keeps the output in bin/.version and rebuilds the binaries when it changes.
#
#   bash hack/version.sh --tag     the same stamp as an image tag and chart appVersion:
#                                  the commit's first 12 hex digits, "-modified" appended
#                                  when modified is true; "dev" outside a git checkout
#                                  (hack/images.sh tags the images with it, `make chart`
#                                  packages the chart with it)
#   bash hack/version.sh --labels  the OCI image labels of that stamp, one
#                                  "org.opencontainers.image.<key>=<value>" a line
#                                  (revision, created, version); nothing outside git
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mode="${1:-}"
case "$mode" in
  ""|--tag|--labels) ;;
  *) echo "hack/version.sh: unknown argument $mode (want nothing, --tag or --labels)" >&2; exit 2 ;;
esac
if ! commit="$(git rev-parse HEAD 2>/dev/null)"; then
  [[ "$mode" != --tag ]] || echo dev
  exit 0
fi
time="$(git show -s --format=%cI HEAD)"
modified=false
[[ -z "$(git status --porcelain 2>/dev/null)" ]] || modified=true
tag="${commit:0:12}"
[[ $modified == false ]] || tag="$tag-modified"
case "$mode" in
  --tag) echo "$tag"; exit 0 ;;
  --labels)
    echo "org.opencontainers.image.revision=$commit"
    echo "org.opencontainers.image.created=$time"
    echo "org.opencontainers.image.version=$tag"
    exit 0 ;;
esac
pkg=github.com/sandgate/sandgate/internal/version
echo "-X $pkg.commit=$commit -X $pkg.time=$time -X $pkg.modified=$modified"
