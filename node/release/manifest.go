// Package release is a runtime release of sandbox nodes (spec
// node-protocol.md "Exact-match new installation"): the manifest that
// names a release's artifacts (the sandbox image as a `docker save`
// tarball, an optional seccomp profile, the provider spec) with their
// SHA-256 checksums and sizes, the provider spec's format, the
// specification digest that binds a deployment generation to exactly one
// release.
//
// Both ends import it. Core (the gateway) publishes releases into its
// immutable store (package nodecore/releasestore) and serves their
// manifests and artifacts over the machine API;
// nodeagent parses a downloaded manifest with VerifyManifest against the
// specification digest from its authenticated configuration and checks
// each artifact with Artifact.Verify before it uses a byte of it.
//
// The reference is docs/node-machine-api.md.
package release

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/sandgate/sandgate/internal/strictjson"
	"github.com/sandgate/sandgate/node/proto"
)

// Limits.
const (
	// MaxManifestSize is the largest manifest.json accepted, in bytes
	// (64 KiB).
	MaxManifestSize = 64 << 10
	// MaxProviderSpecSize is the largest provider spec accepted, in bytes
	// (64 KiB).
	MaxProviderSpecSize = 64 << 10
	// MaxArtifactSize is the largest artifact a manifest may declare, in
	// bytes (1 TiB).
	MaxArtifactSize = 1 << 40
	// SchemaVersion is the only manifest schema.
	SchemaVersion = 1
	// ManifestName is the manifest's file name in a release directory and
	// in the machine API's download path.
	ManifestName = "manifest.json"
)

// Sentinel errors; every error of this package wraps one of them.
var (
	// ErrInvalid: a manifest or provider spec is malformed (syntax,
	// unknown, case-variant, duplicate, null or missing members, a value
	// out of its rule, over its size limit).
	ErrInvalid = errors.New("release: invalid")
	// ErrDigestMismatch: the manifest's SHA-256 is not the expected
	// specification digest (provenance failed).
	ErrDigestMismatch = errors.New("release: manifest does not match the specification digest")
	// ErrChecksum: an artifact's bytes do not have the declared size or
	// SHA-256.
	ErrChecksum = errors.New("release: artifact bytes do not match the manifest")
	// ErrConflict: publishing would change bytes the store already holds
	// (the store is immutable).
	ErrConflict = errors.New("release: conflicts with the published release")
	// ErrNotFound: the store has no such release, or the release declares
	// no such artifact, or a declared artifact is missing from the store.
	ErrNotFound = errors.New("release: not found")
)

// Kind is an artifact kind.
type Kind string

// Artifact kinds.
const (
	// KindImage is the sandbox image as a `docker save` tarball; exactly
	// one per release.
	KindImage Kind = "image"
	// KindSeccomp is a seccomp profile (JSON); at most one per release.
	KindSeccomp Kind = "seccomp"
	// KindProviderSpec is the provider spec (ProviderSpec); exactly one per
	// release.
	KindProviderSpec Kind = "provider_spec"
)

// Manifest is a release's manifest.json. Example:
//
//	{"schema": 1, "source": "busybox-2026.12",
//	 "artifacts": [
//	   {"name": "image.tar", "kind": "image", "sha256": "<64 hex>", "size": 1234},
//	   {"name": "seccomp.json", "kind": "seccomp", "sha256": "<64 hex>", "size": 567},
//	   {"name": "provider.json", "kind": "provider_spec", "sha256": "<64 hex>", "size": 89}]}
type Manifest struct {
	// Schema is SchemaVersion (1).
	Schema int `json:"schema"`
	// Source is the release's name: 1..63 bytes of [a-z0-9._-], starting
	// with a letter or digit (IsSource).
	Source string `json:"source"`
	// Artifacts are the release's files: exactly one image, exactly one
	// provider_spec, at most one seccomp; names unique.
	Artifacts []Artifact `json:"artifacts"`
}

// Artifact is one file of a release.
type Artifact struct {
	// Name is the file name: 1..128 bytes of [A-Za-z0-9._-], starting with
	// a letter or digit, not "manifest.json" (IsArtifactName).
	Name string `json:"name"`
	// Kind is image, seccomp or provider_spec.
	Kind Kind `json:"kind"`
	// SHA256 is the file's lowercase hex SHA-256.
	SHA256 string `json:"sha256"`
	// Size is the file's size in bytes, 1..MaxArtifactSize.
	Size int64 `json:"size"`
}

var (
	sourcePattern   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	artifactPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
)

// IsSource reports whether s is a valid release source name: 1..63 bytes
// of [a-z0-9._-] starting with a letter or digit.
func IsSource(s string) bool { return sourcePattern.MatchString(s) }

// IsArtifactName reports whether s is a valid artifact name: 1..128 bytes
// of [A-Za-z0-9._-] starting with a letter or digit, and not the manifest's
// own name.
func IsArtifactName(s string) bool { return artifactPattern.MatchString(s) && s != ManifestName }

// Digest returns the specification digest of a release: the lowercase hex
// SHA-256 of its exact manifest.json bytes.
func Digest(manifest []byte) string {
	sum := sha256.Sum256(manifest)
	return hex.EncodeToString(sum[:])
}

// ParseManifest decodes and validates manifest.json bytes. Decoding is
// strict: at most MaxManifestSize bytes, exactly one JSON object, member
// names exact and unique, no unknown members, no nulls, every member
// required. Errors wrap ErrInvalid and name the JSON pointer of the
// offending member, never a value.
func ParseManifest(b []byte) (*Manifest, error) {
	if len(b) > MaxManifestSize {
		return nil, fmt.Errorf("%w: manifest larger than %d bytes", ErrInvalid, MaxManifestSize)
	}
	var m Manifest
	if err := strictDecode(b, &m, manifestRequired); err != nil {
		return nil, fmt.Errorf("%w: manifest: %s", ErrInvalid, err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// VerifyManifest is the node's provenance check: the SHA-256 of b must be
// wantDigest (the specification digest from Core's authenticated
// configuration), else ErrDigestMismatch; then b is parsed
// (ParseManifest) and, when wantSource is not empty, its source must be
// wantSource (ErrDigestMismatch otherwise).
func VerifyManifest(b []byte, wantDigest, wantSource string) (*Manifest, error) {
	if len(b) > MaxManifestSize {
		return nil, fmt.Errorf("%w: manifest larger than %d bytes", ErrInvalid, MaxManifestSize)
	}
	if Digest(b) != wantDigest {
		return nil, ErrDigestMismatch
	}
	m, err := ParseManifest(b)
	if err != nil {
		return nil, err
	}
	if wantSource != "" && m.Source != wantSource {
		return nil, fmt.Errorf("%w: the manifest names another source", ErrDigestMismatch)
	}
	return m, nil
}

// Validate checks the rules of the manifest's fields. Errors wrap
// ErrInvalid and name the member.
func (m *Manifest) Validate() error {
	switch {
	case m.Schema != SchemaVersion:
		return fmt.Errorf("%w: manifest /schema must be %d", ErrInvalid, SchemaVersion)
	case !IsSource(m.Source):
		return fmt.Errorf("%w: manifest /source must be 1..63 characters of [a-z0-9._-] starting with a letter or digit", ErrInvalid)
	case len(m.Artifacts) == 0 || len(m.Artifacts) > 3:
		return fmt.Errorf("%w: manifest /artifacts must hold 1..3 artifacts", ErrInvalid)
	}
	names := map[string]bool{}
	kinds := map[Kind]int{}
	for i, a := range m.Artifacts {
		at := fmt.Sprintf("manifest /artifacts/%d", i)
		switch {
		case !IsArtifactName(a.Name):
			return fmt.Errorf("%w: %s/name must be 1..128 characters of [A-Za-z0-9._-] starting with a letter or digit, not %s", ErrInvalid, at, ManifestName)
		case names[a.Name]:
			return fmt.Errorf("%w: %s/name repeats an earlier artifact's name", ErrInvalid, at)
		case a.Kind != KindImage && a.Kind != KindSeccomp && a.Kind != KindProviderSpec:
			return fmt.Errorf("%w: %s/kind must be image, seccomp or provider_spec", ErrInvalid, at)
		case !proto.IsDigest(a.SHA256):
			return fmt.Errorf("%w: %s/sha256 must be 64 lowercase hexadecimal digits", ErrInvalid, at)
		case a.Size < 1 || a.Size > MaxArtifactSize:
			return fmt.Errorf("%w: %s/size must be 1..%d bytes", ErrInvalid, at, int64(MaxArtifactSize))
		case a.Kind == KindProviderSpec && a.Size > MaxProviderSpecSize:
			return fmt.Errorf("%w: %s/size: a provider spec is at most %d bytes", ErrInvalid, at, MaxProviderSpecSize)
		}
		names[a.Name] = true
		kinds[a.Kind]++
	}
	switch {
	case kinds[KindImage] != 1:
		return fmt.Errorf("%w: manifest /artifacts must hold exactly one image", ErrInvalid)
	case kinds[KindProviderSpec] != 1:
		return fmt.Errorf("%w: manifest /artifacts must hold exactly one provider_spec", ErrInvalid)
	case kinds[KindSeccomp] > 1:
		return fmt.Errorf("%w: manifest /artifacts must hold at most one seccomp", ErrInvalid)
	}
	return nil
}

// Artifact returns the artifact called name and true, or false.
func (m *Manifest) Artifact(name string) (Artifact, bool) {
	for _, a := range m.Artifacts {
		if a.Name == name {
			return a, true
		}
	}
	return Artifact{}, false
}

// Of returns the artifact of kind k and true, or false (seccomp is
// optional).
func (m *Manifest) Of(k Kind) (Artifact, bool) {
	for _, a := range m.Artifacts {
		if a.Kind == k {
			return a, true
		}
	}
	return Artifact{}, false
}

// Verify reads r to its end and checks that it holds exactly a.Size bytes
// whose SHA-256 is a.SHA256. It reads at most a.Size+1 bytes, so a longer
// stream is refused without being read to its end. Errors wrap
// ErrChecksum, or are r's read error.
func (a Artifact) Verify(r io.Reader) error {
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(r, a.Size+1))
	if err != nil {
		return err
	}
	if n != a.Size {
		return fmt.Errorf("%w: %s: size differs", ErrChecksum, a.Name)
	}
	if hex.EncodeToString(h.Sum(nil)) != a.SHA256 {
		return fmt.Errorf("%w: %s: SHA-256 differs", ErrChecksum, a.Name)
	}
	return nil
}

// Encode returns the manifest as compact JSON with a trailing newline, the
// form `caddy sandgate-release` writes; its Digest is the specification
// digest. It validates m first.
func (m *Manifest) Encode() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	b, err := jsonv2.Marshal(m, jsonv2.Deterministic(true))
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// manifestRequired lists the required members of the manifest's objects,
// by the JSON pointer of the object with array indices as "-".
var manifestRequired = map[string][]string{
	"":             {"schema", "source", "artifacts"},
	"/artifacts/-": {"name", "kind", "sha256", "size"},
}

// strictDecode decodes b strictly (package strictjson) into v.
func strictDecode(b []byte, v any, required map[string][]string) error {
	return strictjson.Decode(b, v, strictjson.Schema{Required: required})
}

// hashReader returns the lowercase hex SHA-256 of r's bytes and their
// count.
func hashReader(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// Build writes a manifest for the files in dir, named by kind (files
// without a kind are left out), and returns its bytes; it does not write
// it. The artifact names are the files' base names. Errors: ErrInvalid for
// an invalid source or file name, or a manifest that breaks a rule (e.g.
// no image); the os error.
func Build(source, dir string, files map[Kind]string) ([]byte, error) {
	m := &Manifest{Schema: SchemaVersion, Source: source}
	kinds := make([]Kind, 0, len(files))
	for k := range files {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i] < kinds[j] })
	for _, k := range kinds {
		name := files[k]
		if filepath.Base(name) != name {
			return nil, fmt.Errorf("%w: artifact %q must be a file name inside %s", ErrInvalid, name, dir)
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		a := Artifact{Name: name, Kind: k}
		h, n, err := hashReader(f)
		f.Close()
		if err != nil {
			return nil, err
		}
		a.SHA256, a.Size = h, n
		m.Artifacts = append(m.Artifacts, a)
	}
	return m.Encode()
}
