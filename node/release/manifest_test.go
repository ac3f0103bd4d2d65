package release

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

func hexSum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

const validManifest = `{"schema": 1, "source": "busybox-1.36",
 "artifacts": [
  {"name": "image.tar", "kind": "image", "sha256": "` + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + `", "size": 1234},
  {"name": "seccomp.json", "kind": "seccomp", "sha256": "` + "1123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + `", "size": 567},
  {"name": "provider.json", "kind": "provider_spec", "sha256": "` + "2123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + `", "size": 89}]}`

func TestParseManifest(t *testing.T) {
	m, err := ParseManifest([]byte(validManifest))
	if err != nil {
		t.Fatal(err)
	}
	if m.Source != "busybox-1.36" || len(m.Artifacts) != 3 {
		t.Fatalf("%+v", m)
	}
	if a, ok := m.Of(KindImage); !ok || a.Name != "image.tar" || a.Size != 1234 {
		t.Fatalf("image: %+v", a)
	}
	if _, ok := m.Artifact("manifest.json"); ok {
		t.Fatal("the manifest is not an artifact")
	}
	enc, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseManifest(enc)
	if err != nil || back.Source != m.Source || len(back.Artifacts) != 3 {
		t.Fatalf("round trip: %v", err)
	}
}

func TestParseManifestRefusals(t *testing.T) {
	replace := func(old, new string) string { return strings.Replace(validManifest, old, new, 1) }
	digest := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for name, tc := range map[string]struct{ in, want string }{
		"not JSON":            {`{"schema": 1,`, "malformed JSON"},
		"array":               {`[]`, "top-level value must be a JSON object"},
		"trailing data":       {validManifest + `{}`, "malformed JSON"},
		"unknown member":      {replace(`"schema": 1`, `"schema": 1, "extra": 2`), "unknown member at /extra"},
		"case variant":        {replace(`"schema"`, `"Schema"`), "missing member /schema"},
		"duplicate":           {replace(`"schema": 1`, `"schema": 1, "schema": 1`), "duplicate member"},
		"null":                {replace(`"source": "busybox-1.36"`, `"source": null`), "null at /source"},
		"missing size":        {replace(`, "size": 1234`, ``), "missing member /artifacts/0/size"},
		"string size":         {replace(`"size": 1234`, `"size": "1234"`), "wrong JSON kind or value at /artifacts/0/size"},
		"fraction":            {replace(`"size": 1234`, `"size": 12.5`), "wrong JSON kind or value at /artifacts/0/size"},
		"schema 2":            {replace(`"schema": 1`, `"schema": 2`), "/schema must be 1"},
		"bad source":          {replace(`"busybox-1.36"`, `"Busybox"`), "/source must be"},
		"source with slash":   {replace(`"busybox-1.36"`, `"a/b"`), "/source must be"},
		"bad name":            {replace(`"image.tar"`, `"../image.tar"`), "/artifacts/0/name"},
		"manifest name":       {replace(`"image.tar"`, `"manifest.json"`), "/artifacts/0/name"},
		"repeated name":       {replace(`"seccomp.json"`, `"image.tar"`), "/artifacts/1/name repeats"},
		"unknown kind":        {replace(`"kind": "seccomp"`, `"kind": "firmware"`), "/artifacts/1/kind"},
		"upper-case digest":   {replace(digest, strings.ToUpper(digest)), "/artifacts/0/sha256"},
		"zero size":           {replace(`"size": 1234`, `"size": 0`), "/artifacts/0/size must be"},
		"two images":          {replace(`"kind": "seccomp"`, `"kind": "image"`), "exactly one image"},
		"no provider spec":    {replace(`"kind": "provider_spec"`, `"kind": "seccomp"`), "exactly one provider_spec"},
		"two seccomps":        {replace(`"kind": "image"`, `"kind": "seccomp"`), "exactly one image"},
		"huge provider spec":  {replace(`"size": 89`, `"size": 70000`), "a provider spec is at most"},
		"no artifacts":        {`{"schema": 1, "source": "a", "artifacts": []}`, "1..3 artifacts"},
		"invalid UTF-8":       {replace(`"busybox-1.36"`, "\"bus\xffbox\""), "malformed JSON"},
		"over the size limit": {validManifest + strings.Repeat(" ", MaxManifestSize), "larger than 65536 bytes"},
	} {
		_, err := ParseManifest([]byte(tc.in))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid with %q", name, err, tc.want)
		}
	}
}

func TestVerifyManifest(t *testing.T) {
	b := []byte(validManifest)
	d := Digest(b)
	if d != hexSum(b) {
		t.Fatal("Digest is not the SHA-256 of the bytes")
	}
	if _, err := VerifyManifest(b, d, "busybox-1.36"); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyManifest(b, d, ""); err != nil {
		t.Fatal(err)
	}
	// One byte more (a trailing space) is another specification.
	if _, err := VerifyManifest(append(b, ' '), d, ""); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("changed bytes: %v", err)
	}
	if _, err := VerifyManifest(b, d, "other"); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("other source: %v", err)
	}
	bad := []byte(`{"schema": 2}`)
	if _, err := VerifyManifest(bad, Digest(bad), ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a matching digest does not make a bad manifest valid: %v", err)
	}
}

func TestArtifactVerify(t *testing.T) {
	data := []byte("the image bytes")
	a := Artifact{Name: "image.tar", Kind: KindImage, SHA256: hexSum(data), Size: int64(len(data))}
	if err := a.Verify(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string][]byte{
		"short":   data[:3],
		"long":    append(append([]byte{}, data...), 'x'),
		"changed": bytes.ToUpper(data),
	} {
		if err := a.Verify(bytes.NewReader(in)); !errors.Is(err, ErrChecksum) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := a.Verify(iotest.ErrReader(errors.New("cut"))); err == nil || errors.Is(err, ErrChecksum) {
		t.Errorf("read error: %v", err)
	}
	// A stream far longer than declared is not read to its end.
	r := &countingReader{}
	if err := a.Verify(r); !errors.Is(err, ErrChecksum) || r.n > a.Size+1 {
		t.Errorf("endless stream: %v after %d bytes", err, r.n)
	}
}

type countingReader struct{ n int64 }

func (c *countingReader) Read(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

func TestNames(t *testing.T) {
	for s, want := range map[string]bool{"a": true, "rel-1.2_3": true, "": false, "-a": false, "A": false,
		strings.Repeat("a", 63): true, strings.Repeat("a", 64): false, "a b": false, "..": false} {
		if IsSource(s) != want {
			t.Errorf("IsSource(%q) = %v", s, !want)
		}
	}
	for s, want := range map[string]bool{"image.tar": true, "Seccomp.JSON": true, ".hidden": false, "a/b": false,
		"manifest.json": false, strings.Repeat("a", 128): true, strings.Repeat("a", 129): false} {
		if IsArtifactName(s) != want {
			t.Errorf("IsArtifactName(%q) = %v", s, !want)
		}
	}
}

func TestBuildRefusals(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "image.tar"), []byte("i"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Build("rel", dir, map[Kind]string{KindImage: "image.tar"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("no provider spec: %v", err)
	}
	if _, err := Build("rel", dir, map[Kind]string{KindImage: "../image.tar", KindProviderSpec: "p"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("path: %v", err)
	}
	if _, err := Build("rel", dir, map[Kind]string{KindImage: "image.tar", KindProviderSpec: "missing"}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}
