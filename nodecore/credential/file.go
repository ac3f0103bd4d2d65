package credential

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"go.uber.org/zap"

	"github.com/sandgate/sandgate/internal/filewatch"
	"github.com/sandgate/sandgate/internal/listfile"
	"github.com/sandgate/sandgate/internal/strictjson"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/pool"
)

// MaxFileSize is the largest node credential file accepted, in bytes
// (32 MiB). A node's record takes about 440 bytes as a one-line flow
// mapping (its ID, three 64-digit digests and its installation ID), so
// the limit holds some 75,000 nodes: above the 50,000 one gateway is
// sized for (docs/benchmarks.md), which need about 22 MB.
const MaxFileSize = 32 << 20

// fileRecord is one element of the file's "nodes" list.
type fileRecord struct {
	NodeID               string `json:"node_id"`
	Enabled              bool   `json:"enabled"`
	CredentialSHA256     string `json:"credential_sha256"`
	NextCredentialSHA256 string `json:"next_credential_sha256"`
	InstallationID       string `json:"installation_id"`
	Provider             string `json:"provider"`
	BackendFingerprint   string `json:"backend_fingerprint"`
	DeploymentGeneration int64  `json:"deployment_generation"`
	SpecificationDigest  string `json:"specification_digest"`
	GenerationManagement bool   `json:"generation_management"`
	Pool                 string `json:"pool"`
}

// requiredMembers are fileRecord's required JSON member names, in name
// order (the order missing members are reported in).
var requiredMembers = []string{
	"backend_fingerprint", "credential_sha256", "deployment_generation", "enabled", "installation_id",
	"node_id", "provider", "specification_digest",
}

// memberNames are all of fileRecord's JSON member names: requiredMembers
// (at the same indices), then the optional ones.
var memberNames = append(slices.Clip(requiredMembers), "generation_management", "pool", "next_credential_sha256")

// File is a Store read from a JSON or YAML file and reloaded when it
// changes. Authenticate and Nodes are lock-free reads of the immutable
// snapshot of the file's last good version (filewatch.Snapshot), which
// also provides Version, LastError and Close.
type File struct {
	*filewatch.Snapshot[map[string]*record]
}

var _ Store = (*File)(nil)

// OpenFile loads the node credential file at path and starts watching it.
//
// Format (JSON or YAML; YAML shown):
//
//	nodes:
//	  - node_id: 7c0e5f0a-4c1e-4e55-9a7e-2f1f6d1b9a01      # UUID, lowercase
//	    enabled: true
//	    credential_sha256: <64 lowercase hex digits>      # SHA-256 of the credential
//	    next_credential_sha256: <64 lowercase hex digits> # optional: a second credential, during a rotation
//	    installation_id: 0b6f2c9e-0d55-4a53-8f0e-5d1c2b3a4f60
//	    provider: docker                                  # or microsandbox
//	    backend_fingerprint: <64 lowercase hex digits>
//	    deployment_generation: 1                          # > 0
//	    specification_digest: <64 lowercase hex digits>
//	    generation_management: false                      # optional, default false
//	    pool: default                                     # optional, default "default"
//
// Decoding is strict: exactly the top-level key "nodes" holding a list;
// member names exact (case-sensitive), no unknown, null or duplicate
// members, every member but generation_management, pool and
// next_credential_sha256 required, values of the right type and form, node
// IDs unique; at most MaxFileSize bytes.
//
// next_credential_sha256 authenticates the node as credential_sha256 does:
// it is the rotation slot of docs/runbook.md "Node credentials" (the node's
// new credential is accepted before the node sends it, so the node can
// switch at any reconnect; the old one is then removed).
//
// The file is watched (package filewatch: in-place writes, rename-over and
// Kubernetes "..data" swaps) and re-read within a second of a change. A
// reload that fails keeps the previous version, records the reason for
// LastError and logs a warning with the path and reason (never file
// contents) on logger (nil: no logging). A file that has been missing for
// filewatch.DefaultMissingGrace (5 s) revokes every node: the empty list
// is served (live connections close at their next heartbeat) until the
// file is back.
//
// Errors: the os error, or an ErrInvalid-wrapped reason naming the element
// index and member (never a value), prefixed with the path; or the fsnotify
// error if the directory cannot be watched. Call Close to stop watching.
func OpenFile(path string, logger *zap.Logger) (*File, error) {
	snap, err := filewatch.Open(path, filewatch.Options[map[string]*record]{What: "node credential file",
		MaxSize: MaxFileSize, Parse: parse, Count: func(m map[string]*record) int { return len(m) },
		Empty: map[string]*record{}, Logger: logger})
	if err != nil {
		return nil, err
	}
	return &File{Snapshot: snap}, nil
}

// Authenticate implements Store against the most recently loaded version.
// It keeps answering from the last version after Close.
func (f *File) Authenticate(nodeID string, digest Digest) (Node, error) {
	return authenticate(nodeID, f.Load()[nodeID], digest)
}

// Nodes implements Store.
func (f *File) Nodes() []Node {
	m := f.Load()
	out := make([]Node, 0, len(m))
	for _, r := range m {
		out = append(out, r.Node)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

// parse decodes the content of a node credential file (format: OpenFile)
// into records by node ID, one record at a time (package listfile).
// Errors wrap ErrInvalid.
func parse(data []byte) (map[string]*record, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalid, MaxFileSize)
	}
	out := map[string]*record{}
	first := map[string]int{}
	err := listfile.Parse(data, listfile.Format{Key: "nodes", Noun: "member", Invalid: ErrInvalid},
		func(i int, raw []byte) error {
			r, err := decodeRecord(raw)
			if err != nil {
				return fmt.Errorf("nodes[%d]: %w", i, err)
			}
			if j, dup := first[r.NodeID]; dup {
				return fmt.Errorf("%w: nodes[%d] repeats the node_id of nodes[%d]", ErrInvalid, i, j)
			}
			first[r.NodeID] = i
			out[r.NodeID] = r
			return nil
		})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// decodeRecord strictly decodes one node record (a JSON object) in one
// pass of the tokenizer and one typed decode: unknown and null members are
// refused in document order, then missing required members in name order,
// then a value of the wrong JSON kind; the record is then validated.
// Errors wrap ErrInvalid and name the member, never its value; a record
// that is not one well-formed JSON object also wraps strictjson's class
// (ErrMalformed with the byte offset, ErrNotObject with the kind it is,
// ErrDuplicateMember with the pointer).
func decodeRecord(raw []byte) (*record, error) {
	var present uint32 // bit i: memberNames[i] seen
	err := strictjson.EachMember(raw, func(name string, v jsontext.Value) error {
		i := slices.Index(memberNames, name)
		switch {
		case i < 0:
			return fmt.Errorf("%w: unknown member %q", ErrInvalid, name)
		case v.Kind() == 'n':
			return fmt.Errorf("%w: member %s is null", ErrInvalid, name)
		case name == "pool" && string(v) == `""`:
			return fmt.Errorf("%w: pool must be 1..63 characters of [a-z0-9-], present only when not empty", ErrInvalid)
		case name == "next_credential_sha256" && string(v) == `""`:
			return fmt.Errorf("%w: next_credential_sha256 must be 64 lowercase hexadecimal digits, present only during a rotation", ErrInvalid)
		}
		present |= 1 << i
		return nil
	})
	switch {
	case errors.Is(err, strictjson.ErrMalformed), errors.Is(err, strictjson.ErrNotObject), errors.Is(err, strictjson.ErrDuplicateMember):
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	case err != nil:
		return nil, err
	}
	for i, name := range requiredMembers {
		if present&(1<<i) == 0 {
			return nil, fmt.Errorf("%w: missing member %s", ErrInvalid, name)
		}
	}
	var fr fileRecord
	if err := jsonv2.Unmarshal(raw, &fr, strictjson.Options); err != nil {
		if m, got, want, ok := strictjson.KindMismatch(err); ok {
			return nil, fmt.Errorf("%w: member %s is a JSON %s, want a %s", ErrInvalid, m, got, want)
		}
		return nil, fmt.Errorf("%w: undecodable node record", ErrInvalid)
	}
	return fr.validate()
}

func (fr fileRecord) validate() (*record, error) {
	switch {
	case !proto.IsUUID(fr.NodeID):
		return nil, fmt.Errorf("%w: node_id must be a lowercase UUID", ErrInvalid)
	case !proto.IsUUID(fr.InstallationID):
		return nil, fmt.Errorf("%w: installation_id must be a lowercase UUID", ErrInvalid)
	case !proto.Provider(fr.Provider).Valid():
		return nil, fmt.Errorf("%w: provider must be docker or microsandbox", ErrInvalid)
	case !proto.IsDigest(fr.BackendFingerprint):
		return nil, fmt.Errorf("%w: backend_fingerprint must be 64 lowercase hexadecimal digits", ErrInvalid)
	case fr.DeploymentGeneration <= 0:
		return nil, fmt.Errorf("%w: deployment_generation must be positive", ErrInvalid)
	case !proto.IsDigest(fr.SpecificationDigest):
		return nil, fmt.Errorf("%w: specification_digest must be 64 lowercase hexadecimal digits", ErrInvalid)
	case fr.Pool != "" && !pool.IsName(fr.Pool):
		return nil, fmt.Errorf("%w: pool must be 1..63 characters of [a-z0-9-], starting and ending with a letter or digit", ErrInvalid)
	}
	poolName := fr.Pool
	if poolName == "" {
		poolName = pool.Default
	}
	d, err := ParseDigest(fr.CredentialSHA256)
	if err != nil {
		return nil, fmt.Errorf("credential_sha256: %w", err)
	}
	var next Digest
	if fr.NextCredentialSHA256 != "" {
		if next, err = ParseDigest(fr.NextCredentialSHA256); err != nil {
			return nil, fmt.Errorf("next_credential_sha256: %w", err)
		}
	}
	return &record{
		Node: Node{
			NodeID:               fr.NodeID,
			Enabled:              fr.Enabled,
			InstallationID:       fr.InstallationID,
			Provider:             fr.Provider,
			BackendFingerprint:   fr.BackendFingerprint,
			DeploymentGeneration: fr.DeploymentGeneration,
			SpecificationDigest:  fr.SpecificationDigest,
			GenerationManagement: fr.GenerationManagement,
			Pool:                 poolName,
		},
		digest:  d,
		next:    next,
		hasNext: fr.NextCredentialSHA256 != "",
	}, nil
}
