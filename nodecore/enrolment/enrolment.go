// Package enrolment is Core's enrolment of sandbox nodes (spec
// node-protocol.md "Exact-match new installation"; the machine API's
// POST /api/v1/sandbox-node/enrol): one-time enrolment tokens that an
// operator issues for a node pool, and the store of the nodes that
// enrolled with them.
//
// A token is 32 random bytes (43 characters of base64url), shown once when
// issued; the store keeps only its SHA-256, its pool and its expiry. It
// can be used once: the enrolment records its use and the new node, with
// only the SHA-256 of the node credential it hands out, in one atomic,
// fsync'd replacement of the state file (internal/atomicfile) before the
// node is told anything, so a token is never used twice, even across a
// crash, and a node that was told its credential is always enrolled.
//
// Store implements credential.Store for the enrolled nodes; the gateway
// merges it with the operator's node credential file (credential.Merged).
// Store is the state file of one gateway; several gateway replicas share a
// cluster-wide store with the same methods instead (package
// nodecore/kubestore).
package enrolment

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/internal/atomicfile"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/credential"
	"github.com/sandgate/sandgate/nodecore/pool"
)

// Limits of Issue.
const (
	// MinTTL is the shortest token lifetime.
	MinTTL = time.Minute
	// MaxTTL is the longest token lifetime (30 days).
	MaxTTL = 30 * 24 * time.Hour
	// DefaultTTL is the lifetime when none is given.
	DefaultTTL = time.Hour
)

// Errors.
var (
	// ErrRefused: the enrolment token is unknown, already used or expired.
	// One error for the three, so that the machine API is no oracle.
	ErrRefused = errors.New("enrolment: token refused")
	// ErrInvalid: a bad pool name or lifetime, or a malformed request.
	ErrInvalid = errors.New("enrolment: invalid")
	// ErrState: the state file (or the shared store) cannot be read,
	// parsed or written; nothing changed.
	ErrState = errors.New("enrolment: state file")
)

// Request is what a node states when it enrols (the machine API's
// EnrolRequest without the token).
type Request struct {
	// InstallationID is the node installation's UUID.
	InstallationID string
	// Provider is the node's provider.
	Provider proto.Provider
	// BackendFingerprint is the provider backend's SHA-256 hex.
	BackendFingerprint string
	// MaxActive is 1..32, MaxRetained 0..1024 (recorded for operators).
	MaxActive, MaxRetained int
	// GenerationManagement is hello's generation_management.
	GenerationManagement bool
}

// Generation is the generation a new node is enrolled with.
type Generation struct {
	// Generation is the deployment generation, > 0.
	Generation int64
	// SpecificationDigest is its digest.
	SpecificationDigest string
}

// Enrolled is the result of an enrolment.
type Enrolled struct {
	// Node is the new node's record.
	Node credential.Node
	// Credential is the node credential, shown this once.
	Credential string
}

// Enrolments is what an enrolment store offers: credential.Store for the
// node connection, Check and Enrol for the machine API, Issue, Records,
// SetEnabled and Remove for the admin API, each as Store documents it.
// *Store implements it for one gateway; nodecore/kubestore's Enrolment for
// several replicas.
type Enrolments interface {
	credential.Store
	// Issue creates a one-time token for pool valid for ttl.
	Issue(pool string, ttl time.Duration) (string, time.Time, error)
	// Check returns the pool of a usable token without using it.
	Check(token string) (string, error)
	// Enrol uses token once and enrols a node.
	Enrol(token string, r Request, resolve func(pool string) (Generation, error)) (*Enrolled, error)
	// Records lists the enrolled nodes.
	Records() []Record
	// SetEnabled enables or disables a node; false when it does not exist.
	SetEnabled(nodeID string, enabled bool) (bool, error)
	// Remove forgets a node; false when it does not exist.
	Remove(nodeID string) (bool, error)
}

var _ Enrolments = (*Store)(nil)

// Store holds the tokens and the enrolled nodes. Its methods are safe for
// concurrent use.
type Store struct {
	path string
	now  func() time.Time

	mu    sync.Mutex
	state stateFile
	nodes map[string]*nodeRecord // by node ID, into state.Nodes
}

type stateFile struct {
	Version int           `json:"version"`
	Tokens  []tokenRecord `json:"tokens"`
	Nodes   []nodeRecord  `json:"nodes"`
}

type tokenRecord struct {
	TokenSHA256 string     `json:"token_sha256"`
	Pool        string     `json:"pool"`
	ExpiresAt   time.Time  `json:"expires_at"`
	UsedAt      *time.Time `json:"used_at,omitempty"`
	NodeID      string     `json:"node_id,omitempty"`
}

type nodeRecord struct {
	NodeID               string    `json:"node_id"`
	Enabled              bool      `json:"enabled"`
	CredentialSHA256     string    `json:"credential_sha256"`
	InstallationID       string    `json:"installation_id"`
	Provider             string    `json:"provider"`
	BackendFingerprint   string    `json:"backend_fingerprint"`
	DeploymentGeneration int64     `json:"deployment_generation"`
	SpecificationDigest  string    `json:"specification_digest"`
	GenerationManagement bool      `json:"generation_management"`
	Pool                 string    `json:"pool"`
	MaxActive            int       `json:"max_active"`
	MaxRetained          int       `json:"max_retained"`
	EnrolledAt           time.Time `json:"enrolled_at"`

	digest credential.Digest
}

func (r *nodeRecord) node() credential.Node {
	return credential.Node{NodeID: r.NodeID, Enabled: r.Enabled, InstallationID: r.InstallationID,
		Provider: r.Provider, BackendFingerprint: r.BackendFingerprint, DeploymentGeneration: r.DeploymentGeneration,
		SpecificationDigest: r.SpecificationDigest, GenerationManagement: r.GenerationManagement, Pool: r.Pool}
}

// Open reads the store from path (mode 0600; created at the first change
// when missing). now is the clock (nil: time.Now). Errors wrap ErrState.
func Open(path string, now func() time.Time) (*Store, error) {
	if now == nil {
		now = time.Now
	}
	s := &Store{path: path, now: now, state: stateFile{Version: 1}, nodes: map[string]*nodeRecord{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrState, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f stateFile
	if err := dec.Decode(&f); err != nil || f.Version != 1 {
		return nil, fmt.Errorf("%w: %s is not an enrolment state file of version 1", ErrState, path)
	}
	for i := range f.Tokens {
		t := f.Tokens[i]
		if !proto.IsDigest(t.TokenSHA256) || !pool.IsName(t.Pool) {
			return nil, fmt.Errorf("%w: %s: tokens[%d] is malformed", ErrState, path, i)
		}
	}
	for i := range f.Nodes {
		r := &f.Nodes[i]
		d, err := credential.ParseDigest(r.CredentialSHA256)
		if err != nil || !proto.IsUUID(r.NodeID) || !pool.IsName(r.Pool) || s.nodes[r.NodeID] != nil {
			return nil, fmt.Errorf("%w: %s: nodes[%d] is malformed or repeated", ErrState, path, i)
		}
		r.digest = d
		s.nodes[r.NodeID] = r
	}
	s.state = f
	return s, nil
}

// MaxTokenLength is the longest token looked up; a longer one is refused
// unread.
const MaxTokenLength = 512

// digestOf returns the lowercase hex SHA-256 of a token.
func digestOf(token string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:])
}

// TokenDigest returns the lowercase hex SHA-256 a token is stored as, and
// false for a token that cannot be one (empty, or longer than
// MaxTokenLength).
func TokenDigest(token string) (string, bool) {
	if token == "" || len(token) > MaxTokenLength {
		return "", false
	}
	return digestOf(token), true
}

// NewSecret returns a new token or node credential: 32 random bytes as
// unpadded base64url (43 characters).
func NewSecret() (string, error) { return newSecret() }

// IssueTTL validates Issue's arguments and returns the token's lifetime
// (ttl, or DefaultTTL for 0). Errors wrap ErrInvalid.
func IssueTTL(poolName string, ttl time.Duration) (time.Duration, error) {
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if !pool.IsName(poolName) {
		return 0, fmt.Errorf("%w: pool must be 1..63 characters of [a-z0-9-]", ErrInvalid)
	}
	if ttl < MinTTL || ttl > MaxTTL {
		return 0, fmt.Errorf("%w: ttl must be between %s and %s", ErrInvalid, MinTTL, MaxTTL)
	}
	return ttl, nil
}

// Validate checks an enrolment request; the error wraps ErrInvalid.
func (r Request) Validate() error {
	switch {
	case !proto.IsUUID(r.InstallationID), !r.Provider.Valid(), !proto.IsDigest(r.BackendFingerprint),
		r.MaxActive < 1, r.MaxActive > proto.MaxActiveOperations, r.MaxRetained < 0, r.MaxRetained > proto.MaxRetainedGenerations:
		return fmt.Errorf("%w: malformed enrolment request", ErrInvalid)
	}
	return nil
}

// newSecret returns 32 random bytes as unpadded base64url (43 characters).
func newSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// Issue creates a one-time enrolment token for pool, valid for ttl (0:
// DefaultTTL; MinTTL..MaxTTL). It returns the token, shown this once, and
// its expiry. The token's SHA-256 is written to the state file before
// Issue returns. Errors: ErrInvalid, ErrState.
func (s *Store) Issue(poolName string, ttl time.Duration) (string, time.Time, error) {
	ttl, err := IssueTTL(poolName, ttl)
	if err != nil {
		return "", time.Time{}, err
	}
	token, err := newSecret()
	if err != nil {
		return "", time.Time{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UTC()
	expires := now.Add(ttl).Truncate(time.Second)
	next := s.state
	next.Tokens = append(pruned(s.state.Tokens, now), tokenRecord{TokenSHA256: digestOf(token), Pool: poolName, ExpiresAt: expires})
	if err := s.write(next); err != nil {
		return "", time.Time{}, err
	}
	s.state = next
	return token, expires, nil
}

// pruned returns the tokens that have not expired at now (an expired token
// is refused whether it is known or not, so forgetting it is safe).
func pruned(tokens []tokenRecord, now time.Time) []tokenRecord {
	out := make([]tokenRecord, 0, len(tokens)+1)
	for _, t := range tokens {
		if now.Before(t.ExpiresAt) {
			out = append(out, t)
		}
	}
	return out
}

// find returns the index of the usable token (known, unused, unexpired),
// or -1; s.mu is held.
func (s *Store) find(token string, now time.Time) int {
	d, ok := TokenDigest(token)
	if !ok {
		return -1
	}
	for i, t := range s.state.Tokens {
		if t.TokenSHA256 == d && t.UsedAt == nil && now.Before(t.ExpiresAt) {
			return i
		}
	}
	return -1
}

// Check returns the pool of a usable token (known, unused, unexpired)
// without using it, or ErrRefused. The machine API's enrolment preview and
// the downloads during enrolment use it.
func (s *Store) Check(token string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.find(token, s.now())
	if i < 0 {
		return "", ErrRefused
	}
	return s.state.Tokens[i].Pool, nil
}

// Enrol uses token once and enrols a new node. resolve gives the
// generation a new node of the token's pool is enrolled with; its error is
// returned as is and uses nothing. The token's use and the node record
// (with the SHA-256 of a new random credential, and a new node ID) are
// written in one atomic replacement of the state file before Enrol
// returns. Errors: ErrRefused (unknown, used or expired token), ErrInvalid
// (a malformed request), resolve's error, ErrState; on every error the
// token stays as it was and no node is added.
func (s *Store) Enrol(token string, r Request, resolve func(pool string) (Generation, error)) (*Enrolled, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UTC()
	i := s.find(token, now)
	if i < 0 {
		return nil, ErrRefused
	}
	poolName := s.state.Tokens[i].Pool
	gen, err := resolve(poolName)
	if err != nil {
		return nil, err
	}
	secret, err := newSecret()
	if err != nil {
		return nil, err
	}
	nodeID := uuid.NewString()
	rec := nodeRecord{NodeID: nodeID, Enabled: true, CredentialSHA256: digestOf(secret),
		InstallationID: r.InstallationID, Provider: string(r.Provider), BackendFingerprint: r.BackendFingerprint,
		DeploymentGeneration: gen.Generation, SpecificationDigest: gen.SpecificationDigest,
		GenerationManagement: r.GenerationManagement, Pool: poolName, MaxActive: r.MaxActive,
		MaxRetained: r.MaxRetained, EnrolledAt: now.Truncate(time.Second)}
	rec.digest = credential.Sum(secret)
	next := stateFile{Version: 1, Tokens: append([]tokenRecord(nil), s.state.Tokens...),
		Nodes: append(append([]nodeRecord(nil), s.state.Nodes...), rec)}
	used := now.Truncate(time.Second)
	next.Tokens[i].UsedAt, next.Tokens[i].NodeID = &used, nodeID
	next.Tokens = pruned(next.Tokens, now) // keeps token i: it has not expired
	if err := s.write(next); err != nil {
		return nil, err
	}
	s.setState(next)
	return &Enrolled{Node: rec.node(), Credential: secret}, nil
}

// Record is an enrolled node as the operator sees it (no digest).
type Record struct {
	// NodeID is the node's UUID.
	NodeID string `json:"node_id"`
	// Enabled: a disabled node is refused at connect and at its next
	// heartbeat (close code 4003).
	Enabled bool `json:"enabled"`
	// Pool is the node's pool.
	Pool string `json:"pool"`
	// InstallationID, Provider and BackendFingerprint are what hello
	// must state.
	InstallationID     string `json:"installation_id"`
	Provider           string `json:"provider"`
	BackendFingerprint string `json:"backend_fingerprint"`
	// DeploymentGeneration and SpecificationDigest are the enrolled
	// generation.
	DeploymentGeneration int64  `json:"deployment_generation"`
	SpecificationDigest  string `json:"specification_digest"`
	// GenerationManagement is hello's generation_management.
	GenerationManagement bool `json:"generation_management"`
	// MaxActive and MaxRetained are what the node stated at enrolment.
	MaxActive   int `json:"max_active"`
	MaxRetained int `json:"max_retained"`
	// EnrolledAt is when the node enrolled.
	EnrolledAt time.Time `json:"enrolled_at"`
}

// Records returns the enrolled nodes, sorted by node ID.
func (s *Store) Records() []Record {
	s.mu.Lock()
	out := make([]Record, 0, len(s.state.Nodes))
	for _, r := range s.state.Nodes {
		out = append(out, Record{NodeID: r.NodeID, Enabled: r.Enabled, Pool: r.Pool, InstallationID: r.InstallationID,
			Provider: r.Provider, BackendFingerprint: r.BackendFingerprint, DeploymentGeneration: r.DeploymentGeneration,
			SpecificationDigest: r.SpecificationDigest, GenerationManagement: r.GenerationManagement,
			MaxActive: r.MaxActive, MaxRetained: r.MaxRetained, EnrolledAt: r.EnrolledAt})
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

// SetEnabled enables or disables an enrolled node; the change is written
// before it takes effect. It reports whether the node exists. Errors:
// ErrState (nothing changed).
func (s *Store) SetEnabled(nodeID string, enabled bool) (bool, error) {
	return s.change(nodeID, func(nodes []nodeRecord, i int) []nodeRecord {
		nodes[i].Enabled = enabled
		return nodes
	})
}

// Remove forgets an enrolled node: its credential no longer
// authenticates. It reports whether the node existed. Errors: ErrState
// (nothing changed).
func (s *Store) Remove(nodeID string) (bool, error) {
	return s.change(nodeID, func(nodes []nodeRecord, i int) []nodeRecord {
		return append(nodes[:i], nodes[i+1:]...)
	})
}

// change applies f to a copy of the node list at the index of nodeID,
// writes the result and makes it current.
func (s *Store) change(nodeID string, f func(nodes []nodeRecord, i int) []nodeRecord) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := -1
	for j := range s.state.Nodes {
		if s.state.Nodes[j].NodeID == nodeID {
			i = j
			break
		}
	}
	if i < 0 {
		return false, nil
	}
	next := stateFile{Version: 1, Tokens: s.state.Tokens, Nodes: f(append([]nodeRecord(nil), s.state.Nodes...), i)}
	if err := s.write(next); err != nil {
		return true, err
	}
	s.setState(next)
	return true, nil
}

// setState makes f current and indexes its nodes; s.mu is held.
func (s *Store) setState(f stateFile) {
	s.state = f
	s.nodes = make(map[string]*nodeRecord, len(f.Nodes))
	for j := range s.state.Nodes {
		s.nodes[s.state.Nodes[j].NodeID] = &s.state.Nodes[j]
	}
}

// write replaces the state file with f; s.mu is held.
func (s *Store) write(f stateFile) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("%w: %v", ErrState, err)
	}
	if err := atomicfile.Write(s.path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("%w: %v", ErrState, err)
	}
	return nil
}

// Authenticate implements credential.Store for the enrolled nodes.
func (s *Store) Authenticate(nodeID string, digest credential.Digest) (credential.Node, error) {
	s.mu.Lock()
	r := s.nodes[nodeID]
	var rec *credential.Node
	var want credential.Digest
	if r != nil {
		n := r.node()
		rec, want = &n, r.digest
	}
	s.mu.Unlock()
	return credential.Check(nodeID, rec, want, digest)
}

// Nodes implements credential.Store.
func (s *Store) Nodes() []credential.Node {
	s.mu.Lock()
	out := make([]credential.Node, 0, len(s.nodes))
	for _, r := range s.nodes {
		out = append(out, r.node())
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

// Find implements credential.Finder.
func (s *Store) Find(nodeID string) (credential.Node, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.nodes[nodeID]
	if r == nil {
		return credential.Node{}, false
	}
	return r.node(), true
}

var (
	_ credential.Store  = (*Store)(nil)
	_ credential.Finder = (*Store)(nil)
)
