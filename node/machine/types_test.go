package machine

import (
	"errors"
	"strings"
	"testing"
)

const (
	testUUID   = "6f1c2d3e-4a5b-4c6d-8e7f-0123456789ab"
	testDigest = "abababababababababababababababababababababababababababababababab"
)

var validEnrol = `{"enrolment_token": "tok", "installation_id": "` + testUUID + `", "provider": "docker",
 "backend_fingerprint": "` + testDigest + `", "max_active": 4, "max_retained": 2}`

func TestDecodeEnrolRequest(t *testing.T) {
	r, err := DecodeEnrolRequest(strings.NewReader(validEnrol))
	if err != nil {
		t.Fatal(err)
	}
	if !r.GenerationManaging() || r.MaxActive != 4 {
		t.Fatalf("%+v", r)
	}
	r, err = DecodeEnrolRequest(strings.NewReader(strings.Replace(validEnrol, `"max_retained": 2`, `"max_retained": 2, "generation_management": false`, 1)))
	if err != nil || r.GenerationManaging() {
		t.Fatalf("generation_management false: %v", err)
	}
	rep := func(old, new string) string { return strings.Replace(validEnrol, old, new, 1) }
	for name, tc := range map[string]struct{ in, want string }{
		"missing token":   {rep(`"enrolment_token": "tok", `, ``), "missing member /enrolment_token"},
		"empty token":     {rep(`"tok"`, `""`), "enrolment_token must be"},
		"upper-case UUID": {rep(testUUID, strings.ToUpper(testUUID)), "installation_id"},
		"provider":        {rep(`"docker"`, `"podman"`), "provider must be"},
		"fingerprint":     {rep(testDigest, "ab"), "backend_fingerprint"},
		"max_active 0":    {rep(`"max_active": 4`, `"max_active": 0`), "max_active must be 1..32"},
		"max_active 33":   {rep(`"max_active": 4`, `"max_active": 33`), "max_active must be 1..32"},
		"max_retained":    {rep(`"max_retained": 2`, `"max_retained": 1025`), "max_retained must be 0..1024"},
		"unknown":         {rep(`"max_active"`, `"pool": "x", "max_active"`), "unknown member at /pool"},
		"case variant":    {rep(`"max_active"`, `"Max_Active"`), "missing member /max_active"},
		"duplicate":       {rep(`"max_active": 4`, `"max_active": 4, "max_active": 4`), "duplicate member"},
		"null":            {rep(`"tok"`, `null`), "null at /enrolment_token"},
		"not an object":   {`"tok"`, "must be a JSON object"},
		"trailing":        {validEnrol + "{}", "malformed JSON"},
	} {
		_, err := DecodeEnrolRequest(strings.NewReader(tc.in))
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "tok\"") {
			t.Errorf("%s: the error quotes the token", name)
		}
	}
	if _, err := DecodeEnrolRequest(strings.NewReader(validEnrol + strings.Repeat(" ", MaxBody))); !errors.Is(err, ErrTooLarge) {
		t.Errorf("too large: %v", err)
	}
}

func TestDecodeConfig(t *testing.T) {
	body := `{"node_id": "` + testUUID + `", "pool": "default",
	 "enrolled": {"deployment_generation": 7, "specification_digest": "` + testDigest + `"},
	 "deployment": {"generation": 8, "specification_digest": "` + testDigest + `", "serving_generation": null},
	 "runtimes": [{"generation": 8, "specification_digest": "` + testDigest + `", "source": "rel-8",
	   "manifest_url": "/api/v1/sandbox-node/releases/rel-8/manifest.json"}]}`
	c, err := DecodeConfig(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if c.Deployment.ServingGeneration != nil || c.Runtimes[0].Source != "rel-8" {
		t.Fatalf("%+v", c)
	}
	for name, tc := range map[string]struct{ in, want string }{
		"serving missing": {strings.Replace(body, `, "serving_generation": null`, ``, 1), "missing member /deployment/serving_generation"},
		"other null":      {strings.Replace(body, `"pool": "default"`, `"pool": null`, 1), "null at /pool"},
		"bad url":         {strings.Replace(body, `releases/rel-8/`, `releases/rel-9/`, 1), "runtimes[0]"},
		"bad pool":        {strings.Replace(body, `"default"`, `"Default"`, 1), "pool"},
	} {
		if _, err := DecodeConfig(strings.NewReader(tc.in)); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

func TestDecodeEnrolResponse(t *testing.T) {
	cred := strings.Repeat("A", 42) + "_"
	r, err := DecodeEnrolResponse(strings.NewReader(`{"node_id": "` + testUUID + `", "credential": "` + cred + `", "pool": "p1"}`))
	if err != nil || r.Credential != cred {
		t.Fatalf("%v", err)
	}
	if _, err := DecodeEnrolResponse(strings.NewReader(`{"node_id": "` + testUUID + `", "credential": "short", "pool": "p1"}`)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short credential: %v", err)
	}
}

func TestDecodeError(t *testing.T) {
	if e := DecodeError(strings.NewReader(`{"error": "enrolment_refused"}`)); e.Error != CodeEnrolmentRefused {
		t.Fatalf("%+v", e)
	}
	if e := DecodeError(strings.NewReader(`<html>`)); e.Error != "" {
		t.Fatalf("%+v", e)
	}
}

func TestIsPool(t *testing.T) {
	for s, want := range map[string]bool{"default": true, "gpu-1": true, "": false, "-a": false, "a-": false, "A": false,
		strings.Repeat("a", 63): true, strings.Repeat("a", 64): false, "a_b": false} {
		if IsPool(s) != want {
			t.Errorf("IsPool(%q) = %v", s, !want)
		}
	}
}
