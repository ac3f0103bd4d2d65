package release

import (
	"errors"
	"strings"
	"testing"
)

func TestParseProviderSpec(t *testing.T) {
	full := `{"provider": "docker", "image_ref": "sandgate-test/busybox:1", "command": ["sleep", "infinity"],
	 "env": {"LANG": "C.UTF-8"}, "user": "1000:1000", "memory_bytes": 536870912, "nano_cpus": 1000000000,
	 "network_mode": "none"}`
	s, err := ParseProviderSpec([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	if s.ImageRef != "sandgate-test/busybox:1" || s.Command[1] != "infinity" || s.NetworkMode != "none" {
		t.Fatalf("%+v", s)
	}
	if _, err := ParseProviderSpec([]byte(`{"provider": "docker", "image_ref": "a:1"}`)); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ in, want string }{
		"missing image_ref": {`{"provider": "docker"}`, "missing member /image_ref"},
		"microsandbox":      {`{"provider": "microsandbox", "image_ref": "a:1"}`, "/provider must be docker"},
		"space in ref":      {`{"provider": "docker", "image_ref": "a b"}`, "/image_ref"},
		"empty command":     {`{"provider": "docker", "image_ref": "a", "command": []}`, "/command"},
		"empty first arg":   {`{"provider": "docker", "image_ref": "a", "command": [""]}`, "/command"},
		"env with =":        {`{"provider": "docker", "image_ref": "a", "env": {"A=B": "1"}}`, "/env"},
		"empty env":         {`{"provider": "docker", "image_ref": "a", "env": {}}`, "/env is present but empty"},
		"zero memory":       {`{"provider": "docker", "image_ref": "a", "memory_bytes": 0}`, "/memory_bytes is present but empty"},
		"negative cpus":     {`{"provider": "docker", "image_ref": "a", "nano_cpus": -1}`, "/nano_cpus"},
		"host network":      {`{"provider": "docker", "image_ref": "a", "network_mode": "host"}`, "/network_mode must be none"},
		"unknown member":    {`{"provider": "docker", "image_ref": "a", "privileged": true}`, "unknown member at /privileged"},
		"null user":         {`{"provider": "docker", "image_ref": "a", "user": null}`, "null at /user"},
		"too large":         {`{"provider": "docker", "image_ref": "a"}` + strings.Repeat(" ", MaxProviderSpecSize), "larger than"},
	} {
		_, err := ParseProviderSpec([]byte(tc.in))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
