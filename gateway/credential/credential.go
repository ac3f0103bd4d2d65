// Package credential resolves the resource credential named by an access
// token's credential_id claim (package token) to the compute cluster that
// serves it.
//
// A resource credential is, per the sandgate spec, "a credential already
// bound to ResourceSpecID, ResourceGroupID, ProjectNamespace and ClusterID;
// the sole source of truth for cluster selection at creation and at
// runtime". The gateway therefore re-reads the credential on every request
// (through a Source) instead of trusting any routing hint in the token.
//
// Two Sources are provided: File, a JSON or YAML file reloaded on change,
// and HTTP, a Portal-style HTTP endpoint with a short cache. Both return
// errors that callers classify with errors.Is against ErrNotFound,
// ErrDisabled and ErrUnavailable.
package credential

import (
	"context"
	"errors"
	"fmt"
)

// MaxIDLength bounds every ID field of a Credential, in bytes (253, the DNS
// name limit, so IDs fit Kubernetes object names).
const MaxIDLength = 253

// Sentinel errors. Lookup errors wrap exactly one of ErrNotFound,
// ErrDisabled and ErrUnavailable with the credential ID and a reason; they
// never contain HTTP header values or file contents.
var (
	// ErrNotFound: no credential has the requested ID (also returned,
	// without consulting the source, for IDs that cannot exist: empty,
	// longer than MaxIDLength, "." or "..").
	ErrNotFound = errors.New("credential: not found")

	// ErrDisabled: the credential exists but has enabled=false. Lookup
	// returns the credential alongside this error.
	ErrDisabled = errors.New("credential: disabled")

	// ErrUnavailable: the source cannot answer right now (HTTP transport
	// error or timeout, unexpected status, malformed response, caller's
	// context done). Callers should fail closed and may retry.
	ErrUnavailable = errors.New("credential: source unavailable")

	// ErrInvalid: credential data is malformed: a file that is not JSON or
	// YAML, has unknown or duplicate fields, wrong types, duplicate IDs,
	// is larger than MaxFileSize, or a Credential failing Validate.
	ErrInvalid = errors.New("credential: invalid credential data")

	// ErrInvalidConfig: NewHTTP was given an unusable HTTPConfig.
	ErrInvalidConfig = errors.New("credential: invalid configuration")
)

// Credential is one resource credential. JSON/YAML field names are given in
// the struct tags. Enabled defaults to false when absent, so a credential
// must be enabled explicitly.
type Credential struct {
	// ID is the credential ID named by the token's credential_id claim.
	ID string `json:"id"`
	// Enabled reports whether the credential may be used; disabled
	// credentials are refused with ErrDisabled.
	Enabled bool `json:"enabled"`
	// ResourceSpecID is the resource spec the credential is bound to
	// (optional). Carried, not read: a sandbox's size is its template's
	// (docs/credentials.md "resourceSpecId and resourceGroupId").
	ResourceSpecID string `json:"resourceSpecId"`
	// ResourceGroupID is the resource group the credential is bound to
	// (optional). Carried, not read; a group's ceiling is the project
	// namespace's ResourceQuota (docs/credentials.md).
	ResourceGroupID string `json:"resourceGroupId"`
	// ProjectNamespace is the Kubernetes namespace of the project.
	ProjectNamespace string `json:"projectNamespace"`
	// ClusterID is the compute cluster that serves the credential.
	ClusterID string `json:"clusterId"`
	// ProjectWide, when true, lets the credential see and act on every
	// sandbox of its ProjectNamespace (in its cluster), whoever created it;
	// false (the default, also when absent) limits it to the sandboxes it
	// created itself. corectl records the creating credential on each
	// sandbox and checks it on every sandbox route and in the data-plane
	// authorizer (spec §2.2 "tenant isolation", §3.3 ProviderAuthorizer;
	// docs/corectl.md "Ownership"). Grant it only to operator or project
	// administrator credentials.
	ProjectWide bool `json:"projectWide,omitempty"`
	// Limits are the credential's create limits, which corectl enforces
	// (package corectl/quota; docs/corectl.md "Per-credential limits");
	// nil or a zero field: no limit. The gateway does not read them.
	Limits *Limits `json:"limits,omitempty"`
}

// Limits are a credential's create limits (E2B's team limits, per
// credential). Each field is 0 for "no limit" and must not be negative.
type Limits struct {
	// ConcurrentSandboxes is the most sandboxes the credential may have
	// created and not yet ended (being deleted or expired ones do not
	// count).
	ConcurrentSandboxes int `json:"concurrentSandboxes,omitempty"`
	// CreatesPerMinute is the most creates the credential may start in
	// any 60 seconds (refused creates do not count).
	CreatesPerMinute int `json:"createsPerMinute,omitempty"`
	// MaxTimeoutSeconds is the longest timeout a create of the credential
	// may ask for, in seconds (within corectl's -max-timeout).
	MaxTimeoutSeconds int `json:"maxTimeoutSeconds,omitempty"`
}

// Sees reports whether c may see and act on a sandbox whose creating
// credential is owner and which lives in namespace and cluster: the
// sandbox must be in c's cluster and project namespace, and either c
// created it (owner == c.ID) or c is ProjectWide. A sandbox without a
// recorded owner (owner "") is seen only by project-wide credentials.
func (c Credential) Sees(owner, namespace, cluster string) bool {
	if c.ID == "" || namespace != c.ProjectNamespace || cluster != c.ClusterID {
		return false
	}
	return c.ProjectWide || (owner != "" && owner == c.ID)
}

// fieldNames are the exact (case-sensitive) JSON member names of Credential.
var fieldNames = map[string]bool{
	"id": true, "enabled": true, "resourceSpecId": true,
	"resourceGroupId": true, "projectNamespace": true, "clusterId": true,
	"projectWide": true, "limits": true,
}

// Validate checks c: ID, ProjectNamespace and ClusterID must be non-empty,
// every ID field at most MaxIDLength bytes, ID not "." or ".." (they
// would be path segments in an HTTP source URL), no limit negative. The error wraps ErrInvalid
// and names the field, not its value.
func (c Credential) Validate() error {
	for _, f := range []struct {
		name     string
		value    string
		required bool
	}{
		{"id", c.ID, true},
		{"resourceSpecId", c.ResourceSpecID, false},
		{"resourceGroupId", c.ResourceGroupID, false},
		{"projectNamespace", c.ProjectNamespace, true},
		{"clusterId", c.ClusterID, true},
	} {
		if f.required && f.value == "" {
			return fmt.Errorf("%w: %s is empty", ErrInvalid, f.name)
		}
		if len(f.value) > MaxIDLength {
			return fmt.Errorf("%w: %s is longer than %d bytes", ErrInvalid, f.name, MaxIDLength)
		}
	}
	if c.ID == "." || c.ID == ".." {
		return fmt.Errorf("%w: id may not be %q", ErrInvalid, c.ID)
	}
	if l := c.Limits; l != nil {
		for _, f := range []struct {
			name string
			v    int
		}{{"concurrentSandboxes", l.ConcurrentSandboxes}, {"createsPerMinute", l.CreatesPerMinute}, {"maxTimeoutSeconds", l.MaxTimeoutSeconds}} {
			if f.v < 0 {
				return fmt.Errorf("%w: limits.%s is negative", ErrInvalid, f.name)
			}
		}
	}
	return nil
}

// Source looks credentials up by ID.
//
// Lookup returns the credential when it exists and is enabled. Otherwise the
// error wraps ErrNotFound (no such credential), ErrDisabled (exists with
// enabled=false; the credential is returned too) or ErrUnavailable (the
// source cannot answer). Implementations are safe for concurrent use.
type Source interface {
	// Lookup returns the credential with this ID (see above for its
	// errors).
	Lookup(ctx context.Context, id string) (Credential, error)
}

// checkLookupID refuses IDs no credential can have, so they never reach a
// file map or an HTTP URL.
func checkLookupID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty credential id", ErrNotFound)
	case len(id) > MaxIDLength:
		return fmt.Errorf("%w: credential id longer than %d bytes", ErrNotFound, MaxIDLength)
	case id == "." || id == "..":
		return fmt.Errorf("%w: credential id %q is not a valid id", ErrNotFound, id)
	}
	return nil
}

// answer turns a stored credential into Lookup's result.
func answer(c Credential) (Credential, error) {
	if !c.Enabled {
		return c, fmt.Errorf("%w: credential %q", ErrDisabled, c.ID)
	}
	return c, nil
}

// Static is a Source over a fixed in-memory set of credentials, keyed by
// ID: for embedding sandgate with credentials it already holds, and for
// tests. It answers as File does: ErrNotFound for an unknown ID, ErrDisabled
// (with the credential) for a disabled one; never ErrUnavailable.
type Static map[string]Credential

// Lookup implements Source; ctx is not used.
func (s Static) Lookup(_ context.Context, id string) (Credential, error) {
	c, ok := s[id]
	if !ok {
		return Credential{}, fmt.Errorf("%w: credential %q", ErrNotFound, id)
	}
	return answer(c)
}
