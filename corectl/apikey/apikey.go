// Package apikey maps corectl API keys to resource credentials (spec §1.5,
// §3.1): a caller presents an API key, the key names a resource credential
// ID, and the credential — re-read through the gateway's credential model
// (package credential) on every request — gives the only cluster and
// project namespace the caller may touch.
//
// Keys are kept as SHA-256 digests in a YAML or JSON file, never in clear:
//
//	keys:
//	  - name: team-a               # for logs; unique
//	    sha256: 5e88…               # hex SHA-256 of the key
//	    credentialId: team-a-cred   # the resource credential it acts as
//	    templateAdmin: false        # may PUT template defaults
//
// Parse and Load read the file once (Keys); OpenFile keeps reading it as it
// changes (File), so a key removed or changed in the file is refused
// without a restart. Both are a Source.
package apikey

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/sandgate/sandgate/gateway/credential"
	"sigs.k8s.io/yaml"
)

// MaxFileSize bounds the key file, in bytes (1 MiB).
const MaxFileSize = 1 << 20

// Errors.
var (
	// ErrInvalid: the key file does not decode strictly or an entry is
	// invalid.
	ErrInvalid = errors.New("apikey: invalid key file")
	// ErrMissing: the request carries no API key.
	ErrMissing = errors.New("apikey: no API key")
	// ErrUnknown: the presented key matches no entry.
	ErrUnknown = errors.New("apikey: unknown API key")
	// ErrNoCredential: the key has no credential (a template-admin-only
	// key) and the route needs one.
	ErrNoCredential = errors.New("apikey: key has no resource credential")
)

// Entry is one API key.
type Entry struct {
	// Name identifies the key in logs; unique.
	Name string `json:"name"`
	// SHA256 is the lowercase hex SHA-256 digest of the key.
	SHA256 string `json:"sha256"`
	// CredentialID is the resource credential the key acts as; optional
	// for template admins.
	CredentialID string `json:"credentialId,omitempty"`
	// TemplateAdmin allows PUT of template defaults.
	TemplateAdmin bool `json:"templateAdmin,omitempty"`
}

// Source finds the entry of a presented API key: *Keys (one parsed
// version of the file) and *File (the file's last good version, reloaded
// as it changes).
type Source interface {
	// Lookup finds the entry of a presented key. Errors: ErrMissing (empty
	// key), ErrUnknown.
	Lookup(key string) (Entry, error)
}

var (
	_ Source = (*Keys)(nil)
	_ Source = (*File)(nil)
)

// Keys is a parsed key file.
type Keys struct {
	entries []Entry
	digests [][sha256.Size]byte
}

// Parse decodes a key file strictly: {"keys": [Entry, ...]} with unique
// names and digests, each digest 64 lowercase hex characters, and each
// entry with a credentialId or templateAdmin. Errors wrap ErrInvalid and
// name the entry index, never a digest.
func Parse(data []byte) (*Keys, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalid, MaxFileSize)
	}
	var f struct {
		Keys []Entry `json:"keys"`
	}
	if err := strictYAML(data, &f); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, err.Error())
	}
	k := &Keys{}
	names := map[string]bool{}
	for i, e := range f.Keys {
		d, err := hex.DecodeString(e.SHA256)
		switch {
		case e.Name == "" || names[e.Name]:
			return nil, fmt.Errorf("%w: keys[%d]: name empty or repeated", ErrInvalid, i)
		case err != nil || len(d) != sha256.Size || hex.EncodeToString(d) != e.SHA256:
			return nil, fmt.Errorf("%w: keys[%d]: sha256 must be 64 lowercase hex characters", ErrInvalid, i)
		case e.CredentialID == "" && !e.TemplateAdmin:
			return nil, fmt.Errorf("%w: keys[%d]: needs a credentialId or templateAdmin", ErrInvalid, i)
		}
		var dd [sha256.Size]byte
		copy(dd[:], d)
		for j, o := range k.digests {
			if o == dd {
				return nil, fmt.Errorf("%w: keys[%d] repeats the digest of keys[%d]", ErrInvalid, i, j)
			}
		}
		names[e.Name] = true
		k.entries = append(k.entries, e)
		k.digests = append(k.digests, dd)
	}
	return k, nil
}

// Load reads and parses the key file at path.
func Load(path string) (*Keys, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Size() > MaxFileSize {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrInvalid, path, MaxFileSize)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// Digest returns the hex SHA-256 of key, the form the file stores.
func Digest(key string) string {
	d := sha256.Sum256([]byte(key))
	return hex.EncodeToString(d[:])
}

// Lookup finds the entry of a presented key, comparing digests in constant
// time over all entries. Errors: ErrMissing (empty key), ErrUnknown.
func (k *Keys) Lookup(key string) (Entry, error) {
	if key == "" {
		return Entry{}, ErrMissing
	}
	d := sha256.Sum256([]byte(key))
	found := -1
	for i := range k.digests {
		if subtle.ConstantTimeCompare(d[:], k.digests[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Entry{}, ErrUnknown
	}
	return k.entries[found], nil
}

// Principal is an authenticated caller.
type Principal struct {
	// Key is the API key entry.
	Key Entry
	// Credential is the key's resource credential, re-read for this
	// request; zero when the key has none.
	Credential credential.Credential
}

// Authenticate resolves a presented key to a Principal. When needCredential
// is set the key must name a credential, which is looked up in src and
// must be enabled. Errors: ErrMissing, ErrUnknown, ErrNoCredential, or the
// credential package's ErrNotFound, ErrDisabled, ErrUnavailable.
func Authenticate(ctx context.Context, k Source, src credential.Source, key string, needCredential bool) (Principal, error) {
	e, err := k.Lookup(key)
	if err != nil {
		return Principal{}, err
	}
	p := Principal{Key: e}
	if e.CredentialID == "" {
		if needCredential {
			return Principal{}, ErrNoCredential
		}
		return p, nil
	}
	c, err := src.Lookup(ctx, e.CredentialID)
	if err != nil {
		if needCredential {
			return Principal{}, err
		}
		return p, nil
	}
	p.Credential = c
	return p, nil
}

// strictYAML decodes YAML or JSON into v: YAML scalars keep their YAML
// type (so `credentialId: off` is a boolean and refused for a string
// field, not silently turned into "false"), unknown and duplicate fields
// are errors, and exactly one document is allowed.
func strictYAML(data []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}
