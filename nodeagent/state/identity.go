package state

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/sandgate/sandgate/internal/strictjson"
	"github.com/sandgate/sandgate/node/proto"
)

// IdentityRecord is the record `nodeagent enrol` writes: the node's
// enrolled identity.
const IdentityRecord = "node/identity.json"

// maxIdentity bounds the identity record, in bytes.
const maxIdentity = 4 << 10

// Identity is the node's enrolled identity (node/identity.json), JSON
// with exactly these members.
type Identity struct {
	// NodeID is the node's UUID, from Core's enrolment.
	NodeID string `json:"node_id"`
	// InstallationID is this installation's UUID.
	InstallationID string `json:"installation_id"`
	// CoreOrigin is Core's origin the node enrolled with.
	CoreOrigin string `json:"core_origin"`
	// Pool is the node pool Core enrolled the node into.
	Pool string `json:"pool"`
	// DeploymentGeneration and SpecificationDigest are the enrolled
	// generation hello states.
	DeploymentGeneration int64  `json:"deployment_generation"`
	SpecificationDigest  string `json:"specification_digest"`
}

var identitySchema = strictjson.Schema{Required: map[string][]string{
	"": {"node_id", "installation_id", "core_origin", "pool", "deployment_generation", "specification_digest"}}}

// ErrNoIdentity is returned by Identity when the node was never enrolled.
var ErrNoIdentity = errors.New("state: the node has no enrolled identity (run nodeagent enrol)")

// Identity reads the enrolled identity: ErrNoIdentity when there is none,
// an error naming the rule when it is malformed, larger than 4 KiB, or
// readable by group or others.
func (d *Dir) Identity() (*Identity, error) {
	path := filepath.Join(d.path, filepath.FromSlash(IdentityRecord))
	b, err := readRecord(path, maxIdentity, 0o077)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoIdentity
	}
	if err != nil {
		return nil, fmt.Errorf("state: %s must be a regular file of at most %d bytes without group or other permissions: %w", IdentityRecord, maxIdentity, err)
	}
	var id Identity
	if err := strictjson.Decode(b, &id, identitySchema); err != nil {
		return nil, fmt.Errorf("state: %s: %v", IdentityRecord, err)
	}
	if err := id.Validate(); err != nil {
		return nil, err
	}
	return &id, nil
}

// Validate checks the identity's fields.
func (id *Identity) Validate() error {
	switch {
	case !proto.IsUUID(id.NodeID) || !proto.IsUUID(id.InstallationID):
		return fmt.Errorf("state: %s: node_id and installation_id must be lowercase UUIDs", IdentityRecord)
	case id.CoreOrigin == "" || id.Pool == "":
		return fmt.Errorf("state: %s: core_origin and pool are required", IdentityRecord)
	case id.DeploymentGeneration <= 0 || !proto.IsDigest(id.SpecificationDigest):
		return fmt.Errorf("state: %s: a positive deployment_generation and a digest are required", IdentityRecord)
	}
	return nil
}

// StoreIdentity writes the enrolled identity (atomically, mode 0600).
func (d *Dir) StoreIdentity(id *Identity) error {
	if err := id.Validate(); err != nil {
		return err
	}
	b, err := strictjson.Encode(id)
	if err != nil {
		return err
	}
	return d.Store(IdentityRecord, b)
}
