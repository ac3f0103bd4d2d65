package release

import (
	"errors"
	"testing"
)

// FuzzParseManifest: any input is either refused with ErrInvalid or gives
// a manifest that validates and encodes to bytes that parse back to the
// same source and artifacts.
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(validManifest))
	f.Add([]byte(`{"schema": 1, "source": "a", "artifacts": [{"name": "i", "kind": "image", "sha256": "` +
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + `", "size": 1}]}`))
	f.Add([]byte(`{"schema":1,"schema":1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		enc, err := m.Encode()
		if err != nil {
			t.Fatalf("an accepted manifest does not encode: %v", err)
		}
		back, err := ParseManifest(enc)
		if err != nil || back.Source != m.Source || len(back.Artifacts) != len(m.Artifacts) {
			t.Fatalf("round trip: %v", err)
		}
		for i := range m.Artifacts {
			if back.Artifacts[i] != m.Artifacts[i] {
				t.Fatalf("artifact %d changed in the round trip", i)
			}
		}
	})
}

// FuzzParseProviderSpec: any input is refused with ErrInvalid or gives a
// spec that validates.
func FuzzParseProviderSpec(f *testing.F) {
	f.Add([]byte(`{"provider": "docker", "image_ref": "a:1", "command": ["sleep", "1"], "env": {"A": "1"}, "user": "1:1", "memory_bytes": 1, "nano_cpus": 1, "network_mode": "none"}`))
	f.Add([]byte(`{"provider": "docker", "image_ref": "a:1", "env": {}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseProviderSpec(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("an accepted spec does not validate: %v", err)
		}
	})
}
