package machine

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// FuzzDecodeEnrolRequest: any body is refused with ErrMalformed or
// ErrTooLarge, or gives a request that validates; the error never quotes
// the token.
func FuzzDecodeEnrolRequest(f *testing.F) {
	f.Add([]byte(validEnrol))
	f.Add([]byte(strings.TrimSuffix(validEnrol, "}") + `, "enrolled": {"deployment_generation": 7, "specification_digest": "` + testDigest + `"}}`))
	f.Add([]byte(`{"enrolment_token": null}`))
	f.Add([]byte(`{"enrolment_token": "SECRETSECRET", "installation_id": 1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeEnrolRequest(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error %v wraps neither ErrMalformed nor ErrTooLarge", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("an accepted request does not validate: %v", err)
		}
	})
}

// FuzzDecodeConfig: any answer is refused with ErrMalformed or
// ErrTooLarge, or gives a configuration that validates.
func FuzzDecodeConfig(f *testing.F) {
	f.Add([]byte(`{"node_id": "` + testUUID + `", "pool": "default",
	 "enrolled": {"deployment_generation": 7, "specification_digest": "` + testDigest + `"},
	 "deployment": {"generation": 8, "specification_digest": "` + testDigest + `", "serving_generation": null},
	 "runtimes": [{"generation": 8, "specification_digest": "` + testDigest + `", "source": "rel-8",
	   "manifest_url": "/api/v1/sandbox-node/releases/rel-8/manifest.json"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeConfig(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error %v wraps neither ErrMalformed nor ErrTooLarge", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("an accepted configuration does not validate: %v", err)
		}
	})
}
