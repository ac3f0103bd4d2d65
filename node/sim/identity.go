package sim

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/node/proto"
)

// The enrolment every simulated node shares besides its ID and credential.
var (
	// Installation is the simulated nodes' installation ID.
	Installation = "11111111-2222-4333-8444-555555555555"
	// Fingerprint is their backend fingerprint.
	Fingerprint = strings.Repeat("f", 64)
	// SpecDigest is the specification digest of their enrolled generation 1.
	SpecDigest = strings.Repeat("5a", 32)
)

// Identity is one simulated node's enrolment: its ID and its credential.
type Identity struct {
	// NodeID is a lowercase UUID.
	NodeID string
	// Credential is the node credential (48 hex digits).
	Credential string
}

// NewIdentity returns a node with a new random ID and credential.
func NewIdentity() Identity {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return Identity{NodeID: uuid.NewString(), Credential: hex.EncodeToString(b)}
}

// Record returns the node's record for a node credentials file (package
// nodecore/credential), one YAML list item on one line: enabled, docker,
// deployment generation 1, no generation management.
func (id Identity) Record() string {
	sum := sha256.Sum256([]byte(id.Credential))
	return fmt.Sprintf("  - {node_id: %q, enabled: true, credential_sha256: %q, installation_id: %q, provider: docker, backend_fingerprint: %q, deployment_generation: 1, specification_digest: %q}\n",
		id.NodeID, hex.EncodeToString(sum[:]), Installation, Fingerprint, SpecDigest)
}

// Hello returns the hello that matches Record, with a ready provider.
func (id Identity) Hello() proto.Hello {
	return proto.Hello{NodeID: id.NodeID, InstallationID: Installation, Provider: proto.ProviderDocker,
		BackendFingerprint: Fingerprint, DeploymentGeneration: 1, SpecificationDigest: SpecDigest,
		MaxActive: 8, Health: proto.Health{ProviderReady: true, Host: proto.HostMeasurements{CPUCount: 2,
			MemoryTotalBytes: 8 << 30, MemoryUsedBytes: 1 << 30, DiskTotalBytes: 100 << 30, DiskUsedBytes: 10 << 30}}}
}

// CredentialsFile returns a node credentials file enrolling ids.
func CredentialsFile(ids []Identity) string {
	var b strings.Builder
	b.WriteString("nodes:\n")
	for _, id := range ids {
		b.WriteString(id.Record())
	}
	return b.String()
}
