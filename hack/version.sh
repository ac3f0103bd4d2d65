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
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
commit="$(git rev-parse HEAD 2>/dev/null)" || exit 0
time="$(git show -s --format=%cI HEAD)"
modified=false
[[ -z "$(git status --porcelain 2>/dev/null)" ]] || modified=true
pkg=github.com/sandgate/sandgate/internal/version
echo "-X $pkg.commit=$commit -X $pkg.time=$time -X $pkg.modified=$modified"
