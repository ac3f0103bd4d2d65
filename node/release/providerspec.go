package release

import (
	"fmt"
	"strings"

	"github.com/sandgate/sandgate/internal/strictjson"
	"github.com/sandgate/sandgate/node/proto"
)

// ProviderSpec is a release's provider spec (the provider_spec artifact,
// provider.json): how the node's provider runs sandboxes of this release.
// Example:
//
//	{"provider": "docker", "image_ref": "sandgate-test/busybox:1",
//	 "command": ["sleep", "infinity"], "env": {"LANG": "C.UTF-8"},
//	 "user": "1000:1000", "memory_bytes": 536870912, "nano_cpus": 1000000000,
//	 "network_mode": "none"}
//
// nodeagent owns the members the Docker provider needs and may add
// optional ones (recorded in docs/node-machine-api.md).
type ProviderSpec struct {
	// Provider is the provider type the release is for ("docker").
	// Required.
	Provider proto.Provider `json:"provider"`
	// ImageRef is the image's name:tag inside the image tarball: 1..512
	// bytes of printable ASCII without spaces. Required.
	ImageRef string `json:"image_ref"`
	// Command replaces the image's command: 1..4096 elements, the first
	// non-empty. Optional.
	Command []string `json:"command,omitempty"`
	// Env are environment variables for every sandbox: at most 1024,
	// names non-empty without "=". Optional.
	Env map[string]string `json:"env,omitempty"`
	// User is the user (and group) the sandbox runs as, e.g. "1000:1000";
	// 1..64 bytes of printable ASCII without spaces. Optional.
	User string `json:"user,omitempty"`
	// MemoryBytes caps each sandbox's memory, > 0 bytes. Optional.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// NanoCPUs caps each sandbox's CPU, in 1e-9 CPUs, > 0. Optional.
	NanoCPUs int64 `json:"nano_cpus,omitempty"`
	// NetworkMode is "none" (no network). Optional: absent is the
	// provider's default network.
	NetworkMode string `json:"network_mode,omitempty"`
}

var providerSpecRequired = map[string][]string{"": {"provider", "image_ref"}}

// ParseProviderSpec decodes and validates provider spec bytes, as strictly
// as ParseManifest (at most MaxProviderSpecSize bytes; optional members
// may be absent but not empty). Errors wrap ErrInvalid and name the
// member, never a value.
func ParseProviderSpec(b []byte) (*ProviderSpec, error) {
	if len(b) > MaxProviderSpecSize {
		return nil, fmt.Errorf("%w: provider spec larger than %d bytes", ErrInvalid, MaxProviderSpecSize)
	}
	var s ProviderSpec
	if err := strictDecode(b, &s, providerSpecRequired); err != nil {
		return nil, fmt.Errorf("%w: provider spec: %s", ErrInvalid, err)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	// An optional member present but empty is refused like the frames do.
	present := strictjson.Members(b)
	for _, m := range []string{"command", "env", "user", "memory_bytes", "nano_cpus", "network_mode"} {
		if v, ok := present[m]; ok && strictjson.IsEmpty(v) {
			return nil, fmt.Errorf("%w: provider spec /%s is present but empty", ErrInvalid, m)
		}
	}
	return &s, nil
}

// Validate checks the rules of the spec's fields. Errors wrap ErrInvalid
// and name the member.
func (s *ProviderSpec) Validate() error {
	bad := func(member, rule string) error {
		return fmt.Errorf("%w: provider spec /%s %s", ErrInvalid, member, rule)
	}
	switch {
	case s.Provider != proto.ProviderDocker:
		return bad("provider", "must be docker (the only provider with releases)")
	case !printableNoSpace(s.ImageRef, proto.MaxImageReferenceBytes):
		return bad("image_ref", "must be 1..512 bytes of printable ASCII without spaces")
	case s.Command != nil && (len(s.Command) == 0 || len(s.Command) > proto.MaxCommandArgs || s.Command[0] == ""):
		return bad("command", "must hold 1..4096 elements, the first non-empty")
	case len(s.Env) > proto.MaxCommandEnv:
		return bad("env", "must hold at most 1024 variables")
	case s.User != "" && !printableNoSpace(s.User, 64):
		return bad("user", "must be 1..64 bytes of printable ASCII without spaces")
	case s.MemoryBytes < 0:
		return bad("memory_bytes", "must be positive")
	case s.NanoCPUs < 0:
		return bad("nano_cpus", "must be positive")
	case s.NetworkMode != "" && s.NetworkMode != "none":
		return bad("network_mode", "must be none")
	}
	for _, a := range s.Command {
		if strings.IndexByte(a, 0) >= 0 {
			return bad("command", "must not contain NUL bytes")
		}
	}
	for k, v := range s.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return bad("env", "names must be non-empty without '=' and no NUL bytes")
		}
	}
	return nil
}

func printableNoSpace(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := range len(s) {
		if s[i] <= 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
