// Package credential holds the credentials of sandbox nodes: the bearer
// secret a node sends when it dials Core's node connection
// (/api/v1/sandbox-node/connect, spec node-protocol.md "Connection") and
// the enrolled identity that secret authenticates.
//
// Secrets are never stored: a record holds the SHA-256 digest of the
// node's credential, and a presented credential is hashed and compared in
// constant time. Node credentials are random tokens of at least 128 bits
// chosen by the enrolment (not passwords), so one unsalted SHA-256 is a
// sound verifier: it cannot be reversed and there is no dictionary to try.
//
// A Store answers Authenticate; File is a Store read from a JSON or YAML
// file and reloaded when the file changes (package filewatch), so removing
// or disabling a node, or replacing its digest, revokes it at the node's
// next heartbeat.
package credential

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/sandgate/sandgate/node/proto"
)

// Sentinel errors. Authenticate errors wrap exactly one of ErrUnknownNode,
// ErrDisabled and ErrMismatch; they name the node ID, never a secret or a
// digest.
var (
	// ErrUnknownNode: no record has the node ID.
	ErrUnknownNode = errors.New("node credential: unknown node")
	// ErrDisabled: the node's record has enabled=false.
	ErrDisabled = errors.New("node credential: node disabled")
	// ErrMismatch: the presented credential is not the node's.
	ErrMismatch = errors.New("node credential: credential mismatch")
	// ErrInvalid: a credential file is malformed (syntax, unknown, null,
	// missing or duplicate members, a bad value, a repeated node ID, over
	// MaxFileSize bytes).
	ErrInvalid = errors.New("node credential: invalid node credential data")
)

// Digest is the SHA-256 digest of a node credential.
type Digest [sha256.Size]byte

// Sum returns the digest of a presented credential.
func Sum(credential string) Digest { return sha256.Sum256([]byte(credential)) }

// ParseDigest parses 64 lowercase hexadecimal digits. The error wraps
// ErrInvalid and does not repeat the input.
func ParseDigest(s string) (Digest, error) {
	var d Digest
	if !proto.IsDigest(s) {
		return d, fmt.Errorf("%w: a SHA-256 digest is 64 lowercase hexadecimal digits", ErrInvalid)
	}
	_, _ = hex.Decode(d[:], []byte(s))
	return d, nil
}

// Node is the enrolled identity of one sandbox node: what its hello must
// state (spec "Connection": "Core closes the connection unless the identity
// matches the authenticated node").
type Node struct {
	// NodeID is the node's UUID (lowercase, canonical form), the node_id of
	// the connect URL and of hello.
	NodeID string
	// Enabled: a disabled node is refused (ErrDisabled).
	Enabled bool
	// InstallationID is the UUID of the node's installation.
	InstallationID string
	// Provider is the node's provider ("docker" or "microsandbox").
	Provider string
	// BackendFingerprint is the lowercase SHA-256 hex fingerprint of the
	// provider backend.
	BackendFingerprint string
	// DeploymentGeneration is the enrolled deployment generation, > 0.
	DeploymentGeneration int64
	// SpecificationDigest is the enrolled generation's lowercase SHA-256
	// specification digest.
	SpecificationDigest string
	// GenerationManagement says whether the node prepares and retains
	// several deployment generations.
	GenerationManagement bool
	// Pool is the node pool whose deployment the node is told (pool.IsName;
	// pool.Default when the record names none).
	Pool string
}

// Store authenticates node credentials. Implementations are safe for
// concurrent use.
type Store interface {
	// Authenticate returns the node's enrolled identity when digest is the
	// digest of the node's credential and the node is enabled. Otherwise
	// the error wraps ErrUnknownNode, ErrDisabled or ErrMismatch. The
	// comparison takes the same time whether or not the node exists.
	Authenticate(nodeID string, digest Digest) (Node, error)
	// Nodes returns every enrolled node (enabled or not), sorted by NodeID.
	Nodes() []Node
}

// record is a Node with its credential digest and, during a rotation, the
// digest of the credential that replaces it.
type record struct {
	Node
	digest Digest
	// next is the digest of the node's next credential when hasNext: it
	// authenticates the node as digest does (OpenFile's
	// next_credential_sha256).
	next    Digest
	hasNext bool
}

// Check authenticates a presented digest against one record: n is the
// record's identity (nil: no such node) and want its credential digest.
// It is authenticate for stores that keep their records in their own
// form (the enrolled-node store); the comparison is constant time and
// takes the same time for an unknown node. Errors wrap ErrUnknownNode,
// ErrMismatch or ErrDisabled.
func Check(nodeID string, n *Node, want Digest, digest Digest) (Node, error) {
	if n == nil {
		return authenticate(nodeID, nil, digest)
	}
	return authenticate(nodeID, &record{Node: *n, digest: want}, digest)
}

// dummy is compared against when the node does not exist, so that the
// answer takes the same time.
var dummy Digest

// authenticate checks digest against r (nil: no such node) in constant
// time: both the record's digest and its next one are compared whether or
// not the record exists or has a next digest.
func authenticate(nodeID string, r *record, digest Digest) (Node, error) {
	want, next, hasNext := dummy, dummy, 0
	if r != nil {
		want = r.digest
		if r.hasNext {
			next, hasNext = r.next, 1
		}
	}
	m1 := subtle.ConstantTimeCompare(want[:], digest[:])
	m2 := subtle.ConstantTimeCompare(next[:], digest[:]) & hasNext
	match := m1|m2 == 1
	switch {
	case r == nil:
		return Node{}, fmt.Errorf("%w: %q", ErrUnknownNode, nodeID)
	case !match:
		return Node{}, fmt.Errorf("%w: node %q", ErrMismatch, nodeID)
	case !r.Enabled:
		return Node{}, fmt.Errorf("%w: %q", ErrDisabled, nodeID)
	}
	return r.Node, nil
}
