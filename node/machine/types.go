// Package machine is the machine API of sandbox nodes (spec
// node-protocol.md "Exact-match new installation", "Restart recovery"):
// the plain HTTP routes a node uses beside its WebSocket, on the same
// listener as /api/v1/sandbox-node/connect. A new node enrols with a
// one-time enrolment token and receives its node credential; an enrolled
// node reads its authenticated configuration (the exact runtime it must
// install, by generation and specification digest) and downloads the
// release manifest and artifacts from Core's immutable release store.
//
// The request and response types here are shared: Core's handler
// (Handler) decodes requests and encodes answers with them, and nodeagent
// decodes answers with the Decode* functions, which are as strict as the
// frame codec (unknown, case-variant, duplicate and null members are
// refused).
//
// Routes (the reference is docs/node-machine-api.md):
//
//	GET  /api/v1/sandbox-node/enrol   (enrolment token)          → 200 EnrolPreview
//	POST /api/v1/sandbox-node/enrol                              EnrolRequest → 201 EnrolResponse
//	GET  /api/v1/sandbox-node/config?node_id=<uuid>[&generation=<n>]   → 200 Config
//	GET  /api/v1/sandbox-node/releases/<source>/manifest.json    → 200 manifest bytes
//	GET  /api/v1/sandbox-node/releases/<source>/<artifact>       → 200/206 artifact bytes
package machine

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/sandgate/sandgate/internal/strictjson"
	"github.com/sandgate/sandgate/node/proto"
)

// Paths.
const (
	// Prefix is the common prefix of the machine API and of the connect
	// path.
	Prefix = "/api/v1/sandbox-node/"
	// EnrolPath is the enrolment route.
	EnrolPath = "/api/v1/sandbox-node/enrol"
	// ConfigPath is the authenticated configuration route.
	ConfigPath = "/api/v1/sandbox-node/config"
	// ReleasesPrefix is the prefix of the release downloads:
	// ReleasesPrefix + "<source>/manifest.json" or "<source>/<artifact>".
	ReleasesPrefix = "/api/v1/sandbox-node/releases/"
	// NodeIDHeader names the node on a release download authenticated
	// with a node credential.
	NodeIDHeader = "X-Sandgate-Node-Id"
)

// MaxBody is the largest request body and the largest JSON answer, in
// bytes (64 KiB); a larger enrolment body is answered 413.
const MaxBody = 64 << 10

// ManifestURL returns the path of a release's manifest.
func ManifestURL(source string) string { return ReleasesPrefix + source + "/manifest.json" }

// ArtifactURL returns the path of one of a release's artifacts.
func ArtifactURL(source, name string) string { return ReleasesPrefix + source + "/" + name }

// EnrolRequest is the body of POST EnrolPath.
type EnrolRequest struct {
	// EnrolmentToken is the one-time enrolment token the operator handed
	// out. Required.
	EnrolmentToken string `json:"enrolment_token"`
	// InstallationID is the UUID of the node's installation (lowercase).
	// Required.
	InstallationID string `json:"installation_id"`
	// Provider is the node's provider ("docker"). Required.
	Provider proto.Provider `json:"provider"`
	// BackendFingerprint is the provider backend's lowercase SHA-256 hex
	// fingerprint, as hello will state it. Required.
	BackendFingerprint string `json:"backend_fingerprint"`
	// MaxActive is how many operations the node runs at once, 1..32.
	// Required.
	MaxActive int `json:"max_active"`
	// MaxRetained is how many generations the node can retain, 0..1024.
	// Required.
	MaxRetained int `json:"max_retained"`
	// GenerationManagement says whether the node prepares and retains
	// generations (hello's generation_management). Optional; absent means
	// true (enrolled nodes are generation-managing unless they say not).
	GenerationManagement *bool `json:"generation_management,omitempty"`
	// Enrolled is the generation the node previewed and verified
	// (EnrolPreview.Enrolled). Optional; when given, Core enrols the node
	// only with exactly this generation and digest and otherwise refuses
	// (409 enrolment_changed) without using the token: a deployment change
	// between the preview and the enrolment never registers a node with a
	// runtime it did not verify.
	Enrolled *Generation `json:"enrolled,omitempty"`
}

// EnrolResponse is the 201 answer of an enrolment.
type EnrolResponse struct {
	// NodeID is the node's new UUID (lowercase).
	NodeID string `json:"node_id"`
	// Credential is the node credential: 43 characters of unpadded
	// base64url (32 random bytes). It is shown once; Core keeps only its
	// SHA-256.
	Credential string `json:"credential"`
	// Pool is the node pool the token enrolled the node into.
	Pool string `json:"pool"`
}

// Generation is a deployment generation with its specification digest.
type Generation struct {
	// DeploymentGeneration is the generation, > 0.
	DeploymentGeneration int64 `json:"deployment_generation"`
	// SpecificationDigest is its lowercase hex SHA-256 specification
	// digest (of the release manifest's bytes).
	SpecificationDigest string `json:"specification_digest"`
}

// Runtime is one generation the node may install, with the release it
// comes from.
type Runtime struct {
	// Generation is the deployment generation, > 0.
	Generation int64 `json:"generation"`
	// SpecificationDigest is the SHA-256 of the release's manifest bytes:
	// the node verifies the downloaded manifest against it.
	SpecificationDigest string `json:"specification_digest"`
	// Source is the release's source name in Core's store.
	Source string `json:"source"`
	// ManifestURL is the path of the release's manifest (ManifestURL).
	ManifestURL string `json:"manifest_url"`
}

// Config is the 200 answer of GET ConfigPath: the node's enrolment, its
// pool's deployment, and the runtimes it may install.
type Config struct {
	// NodeID is the node's UUID.
	NodeID string `json:"node_id"`
	// Pool is the node's pool.
	Pool string `json:"pool"`
	// Enrolled is the enrolled generation hello must state.
	Enrolled Generation `json:"enrolled"`
	// Deployment is the pool's deployment, as welcome will advertise it.
	Deployment proto.Deployment `json:"deployment"`
	// Runtimes are the pool's target and serving generations (and the
	// enrolled one when it differs) that come from a release, by
	// ascending generation; with generation=N exactly that generation.
	Runtimes []Runtime `json:"runtimes"`
}

// EnrolPreview is the 200 answer of GET EnrolPath with an enrolment token
// (the token is not used): what the node will be enrolled with, so that it
// can download and verify the runtime before it uses the token.
type EnrolPreview struct {
	// Pool is the token's pool.
	Pool string `json:"pool"`
	// Enrolled is the generation a node enrolling now gets: the pool's
	// serving generation, or its target when it serves none.
	Enrolled Generation `json:"enrolled"`
	// Deployment is the pool's deployment.
	Deployment proto.Deployment `json:"deployment"`
	// Runtimes are the pool's target, serving and enrolled generations
	// that come from a release, by ascending generation.
	Runtimes []Runtime `json:"runtimes"`
}

// Error is the body of every refusal.
type Error struct {
	// Error is the refusal's code (Code* constants).
	Error string `json:"error"`
	// Detail explains the refusal (for invalid_request the member and
	// rule), never quoting a value; absent on 401s.
	Detail string `json:"detail,omitempty"`
}

// Refusal codes of Error.Error.
const (
	// CodeEnrolmentRefused (401): the enrolment token is unknown, used or
	// expired; one answer for all three, so the API is no oracle.
	CodeEnrolmentRefused = "enrolment_refused"
	// CodeInvalidRequest (400): a malformed body or query.
	CodeInvalidRequest = "invalid_request"
	// CodeRequestTooLarge (413): a body over MaxBody.
	CodeRequestTooLarge = "request_too_large"
	// CodeUnauthorized (401): no or a rejected credential.
	CodeUnauthorized = "unauthorized"
	// CodeGenerationUnknown (404): the pool has no runtime of the
	// requested generation.
	CodeGenerationUnknown = "generation_unknown"
	// CodeNotFound (404): no such path, release or artifact.
	CodeNotFound = "not_found"
	// CodeMethodNotAllowed (405): wrong method (Allow names the right one).
	CodeMethodNotAllowed = "method_not_allowed"
	// CodeUnsupportedMediaType (415): an enrolment body that is not
	// application/json.
	CodeUnsupportedMediaType = "unsupported_media_type"
	// CodeEnrolmentChanged (409): the pool's enrolled generation is no
	// longer the one the enrolment request states (the deployment changed
	// since the preview); the token was not used.
	CodeEnrolmentChanged = "enrolment_changed"
	// CodeDeploymentUnavailable (503): the pool has no deployment, or its
	// release is not in the store.
	CodeDeploymentUnavailable = "deployment_unavailable"
	// CodeReleaseDamaged (500): a stored artifact does not match its
	// manifest (the store was damaged; re-publish repairs it).
	CodeReleaseDamaged = "release_damaged"
	// CodeUnavailable (503): the service is not configured or is closing,
	// or a write failed.
	CodeUnavailable = "unavailable"
)

// Validate checks an enrolment request's fields (the token is checked
// only for presence and length here). The error names the member.
func (r *EnrolRequest) Validate() error {
	switch {
	case r.EnrolmentToken == "" || len(r.EnrolmentToken) > 512:
		return errors.New("enrolment_token must be 1..512 bytes")
	case !proto.IsUUID(r.InstallationID):
		return errors.New("installation_id must be a lowercase UUID")
	case !r.Provider.Valid():
		return errors.New("provider must be docker or microsandbox")
	case !proto.IsDigest(r.BackendFingerprint):
		return errors.New("backend_fingerprint must be 64 lowercase hexadecimal digits")
	case r.MaxActive < 1 || r.MaxActive > proto.MaxActiveOperations:
		return fmt.Errorf("max_active must be 1..%d", proto.MaxActiveOperations)
	case r.MaxRetained < 0 || r.MaxRetained > proto.MaxRetainedGenerations:
		return fmt.Errorf("max_retained must be 0..%d", proto.MaxRetainedGenerations)
	case r.Enrolled != nil && (r.Enrolled.DeploymentGeneration <= 0 || !proto.IsDigest(r.Enrolled.SpecificationDigest)):
		return errors.New("enrolled must hold a positive deployment_generation and a lowercase SHA-256 specification_digest")
	}
	return nil
}

// GenerationManaging returns GenerationManagement, true when absent.
func (r *EnrolRequest) GenerationManaging() bool {
	return r.GenerationManagement == nil || *r.GenerationManagement
}

// Validate checks an enrolment answer: a lowercase UUID, a 43-character
// base64url credential and a pool name.
func (r *EnrolResponse) Validate() error {
	switch {
	case !proto.IsUUID(r.NodeID):
		return errors.New("node_id must be a lowercase UUID")
	case !IsCredential(r.Credential):
		return errors.New("credential must be 43 characters of unpadded base64url")
	case !IsPool(r.Pool):
		return errors.New("pool must be a pool name")
	}
	return nil
}

// Validate checks a configuration answer: identities, digests and
// generations well formed, and every runtime's manifest_url the one of
// its source.
func (c *Config) Validate() error {
	switch {
	case !proto.IsUUID(c.NodeID):
		return errors.New("node_id must be a lowercase UUID")
	case !IsPool(c.Pool):
		return errors.New("pool must be a pool name")
	case c.Enrolled.DeploymentGeneration <= 0 || !proto.IsDigest(c.Enrolled.SpecificationDigest):
		return errors.New("enrolled must hold a positive generation and a digest")
	case c.Deployment.Generation <= 0 || !proto.IsDigest(c.Deployment.SpecificationDigest) ||
		(c.Deployment.ServingGeneration != nil && *c.Deployment.ServingGeneration <= 0):
		return errors.New("deployment must hold a positive generation, a digest and a positive or null serving_generation")
	}
	for i, r := range c.Runtimes {
		if r.Generation <= 0 || !proto.IsDigest(r.SpecificationDigest) || r.Source == "" ||
			r.ManifestURL != ManifestURL(r.Source) {
			return fmt.Errorf("runtimes[%d] is malformed", i)
		}
	}
	return nil
}

// IsCredential reports whether s has the form of a node credential
// issued by enrolment: 43 characters of unpadded base64url.
func IsCredential(s string) bool {
	if len(s) != 43 {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// IsPool reports whether s is a pool name: 1..63 bytes of [a-z0-9-],
// starting and ending with a letter or digit (a DNS label). It is the one
// pool-name rule: Core's pool registry (nodecore/pool.IsName) and the
// node both apply it.
func IsPool(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// Required members of each body, by object pointer (array elements "-").
var (
	enrolRequestRequired = map[string][]string{"": {"enrolment_token", "installation_id", "provider",
		"backend_fingerprint", "max_active", "max_retained"}, "/enrolled": {"deployment_generation", "specification_digest"}}
	enrolResponseRequired = map[string][]string{"": {"node_id", "credential", "pool"}}
	configRequired        = map[string][]string{
		"":            {"node_id", "pool", "enrolled", "deployment", "runtimes"},
		"/enrolled":   {"deployment_generation", "specification_digest"},
		"/deployment": {"generation", "specification_digest", "serving_generation"},
		"/runtimes/-": {"generation", "specification_digest", "source", "manifest_url"},
	}
	previewRequired = map[string][]string{
		"":            {"pool", "enrolled", "deployment", "runtimes"},
		"/enrolled":   {"deployment_generation", "specification_digest"},
		"/deployment": {"generation", "specification_digest", "serving_generation"},
		"/runtimes/-": {"generation", "specification_digest", "source", "manifest_url"},
	}
	configNullable = map[string]bool{"/deployment/serving_generation": true}
)

// DecodeEnrolRequest reads at most MaxBody bytes of r and decodes an
// enrolment request strictly, then validates it. Errors: ErrTooLarge for
// a longer body, or an ErrMalformed-wrapped reason naming the member.
func DecodeEnrolRequest(r io.Reader) (*EnrolRequest, error) {
	var v EnrolRequest
	if err := decode(r, &v, enrolRequestRequired); err != nil {
		return nil, err
	}
	if err := v.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrMalformed, err)
	}
	return &v, nil
}

// DecodeEnrolResponse decodes and validates an enrolment answer (the
// node's side), as strictly as DecodeEnrolRequest.
func DecodeEnrolResponse(r io.Reader) (*EnrolResponse, error) {
	var v EnrolResponse
	if err := decode(r, &v, enrolResponseRequired); err != nil {
		return nil, err
	}
	if err := v.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrMalformed, err)
	}
	return &v, nil
}

// DecodeConfig decodes and validates a configuration answer (the node's
// side), as strictly as DecodeEnrolRequest.
func DecodeConfig(r io.Reader) (*Config, error) {
	var v Config
	if err := decode(r, &v, configRequired); err != nil {
		return nil, err
	}
	if err := v.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrMalformed, err)
	}
	return &v, nil
}

// DecodeEnrolPreview decodes and validates an enrolment preview (the
// node's side), as strictly as DecodeConfig.
func DecodeEnrolPreview(r io.Reader) (*EnrolPreview, error) {
	var v EnrolPreview
	if err := decode(r, &v, previewRequired); err != nil {
		return nil, err
	}
	c := Config{NodeID: "00000000-0000-4000-8000-000000000000", Pool: v.Pool, Enrolled: v.Enrolled,
		Deployment: v.Deployment, Runtimes: v.Runtimes}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrMalformed, err)
	}
	return &v, nil
}

// DecodeError decodes a refusal body; a body that is not one yields an
// Error with code "" (the caller goes by the status).
func DecodeError(r io.Reader) Error {
	var e Error
	if err := decode(r, &e, map[string][]string{"": {"error"}}); err != nil {
		return Error{}
	}
	return e
}

// Decoding errors.
var (
	// ErrTooLarge: the body is over MaxBody bytes.
	ErrTooLarge = errors.New("machine: body larger than 64 KiB")
	// ErrMalformed: the body is not the expected JSON object.
	ErrMalformed = errors.New("machine: malformed body")
)

// decode reads at most MaxBody bytes of r and decodes one object strictly
// into v (package strictjson).
func decode(r io.Reader, v any, required map[string][]string) error {
	b, err := io.ReadAll(io.LimitReader(r, MaxBody+1))
	if err != nil {
		return fmt.Errorf("%w: reading the body failed", ErrMalformed)
	}
	if len(b) > MaxBody {
		return ErrTooLarge
	}
	if err := strictjson.Decode(b, v, strictjson.Schema{Required: required, Nullable: configNullable}); err != nil {
		return fmt.Errorf("%w: %s", ErrMalformed, err)
	}
	return nil
}

// Encode returns v as JSON with a trailing newline.
func Encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	if err := jsonv2.MarshalWrite(&buf, v, jsonv2.Deterministic(true)); err != nil {
		return nil, err
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}
