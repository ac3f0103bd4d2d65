// Package version tells which sandgate commit a binary was built from, so an
// operator can answer "what is running": `caddy sandgate-version`,
// `corectl -version` and `nodeagent --version` print String.
//
// The values are set at link time by hack/version.sh, whose output the
// Makefile passes to every build (`go build -ldflags`, and
// `go run ./hack/buildgateway -ldflags` for bin/caddy, which xcaddy builds
// in a module of its own, so Go's own VCS stamping cannot see this
// repository). A binary built without those flags reports "unknown".
package version

import (
	"regexp"
	"strings"
)

// Set by the linker: -X github.com/sandgate/sandgate/internal/version.commit=… (see hack/version.sh).
var (
	commit   string // 40 lowercase hex digits of the commit
	time     string // its commit time, ISO 8601
	modified string // "true" when the work tree had changes at build time
)

// Unknown is the Commit of a binary built without the stamp.
const Unknown = "unknown"

var hexCommit = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Info is the stamp of this binary.
type Info struct {
	// Commit is the full commit hash, or Unknown when the binary was built
	// without hack/version.sh's flags (or they were malformed).
	Commit string
	// Time is the commit's time in ISO 8601 as git prints it, or "".
	Time string
	// Modified is true when the work tree had uncommitted or untracked files
	// at build time: the binary may contain code that no commit holds.
	Modified bool
}

// Get returns the stamp of the running binary.
func Get() Info {
	if !hexCommit.MatchString(commit) {
		return Info{Commit: Unknown}
	}
	return Info{Commit: commit, Time: strings.TrimSpace(time), Modified: modified == "true"}
}

// String is the one line the binaries print, e.g.
//
//	sandgate commit 6658b6a5889cb76b4f02d3ab98ba558cb5d8a135 (2026-12-01T06:17:28+00:00)
//	sandgate commit 6658b6a5889cb76b4f02d3ab98ba558cb5d8a135 (2026-12-01T06:17:28+00:00) with uncommitted changes
//	sandgate commit unknown (built without hack/version.sh)
func (i Info) String() string {
	if i.Commit == Unknown {
		return "sandgate commit unknown (built without hack/version.sh)"
	}
	s := "sandgate commit " + i.Commit
	if i.Time != "" {
		s += " (" + i.Time + ")"
	}
	if i.Modified {
		s += " with uncommitted changes"
	}
	return s
}
