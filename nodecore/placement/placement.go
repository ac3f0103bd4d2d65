// Package placement records which deployment generation of which node
// Core's allocations are placed on (spec node-protocol.md "Generation
// control" and "Local retention and helper lifecycle": "Core's durable
// retention of allocations and placements"). Core answers a node's
// retention request from it: a generation that any allocation placed on
// the node may still use is kept.
//
// A placement (node, generation, reference) is recorded before the first
// request naming it is sent to a generation-managing node, and stays
// until Core learns that the allocation is gone: a successful kill, or an
// operator's release. Recording more than is strictly in use only delays
// reclamation; forgetting a placement could let a node reclaim a runtime
// that a sandbox still needs, so the store errs on the side of keeping.
//
// The File store appends one JSON line per change to a journal and
// fsyncs it before Place or Release returns, replays it at start, and
// compacts it when it has grown to twice the live set. Several gateway
// replicas share a cluster-wide Store instead (package nodecore/kubestore),
// which also implements Syncer.
package placement

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/sandgate/sandgate/internal/atomicfile"
	"github.com/sandgate/sandgate/node/proto"
)

// Placement is one allocation placed on one generation of one node.
type Placement struct {
	// NodeID is the node's UUID.
	NodeID string `json:"node_id"`
	// Generation is the deployment generation the allocation belongs to.
	Generation int64 `json:"generation"`
	// Reference is the allocation's exact reference.
	Reference proto.Reference `json:"reference"`
}

// Compare orders placements of one node as List returns them: by
// generation, then tenant, environment and allocation ID (cmp.Compare's
// -1, 0, +1; NodeID is not compared).
func Compare(a, b Placement) int {
	return cmp.Or(cmp.Compare(a.Generation, b.Generation), cmp.Compare(a.Reference.TenantID, b.Reference.TenantID),
		cmp.Compare(a.Reference.EnvironmentID, b.Reference.EnvironmentID), cmp.Compare(a.Reference.AllocationID, b.Reference.AllocationID))
}

// Store records placements. Implementations are safe for concurrent use.
type Store interface {
	// Place records p; it is durable when Place returns nil. Recording
	// a placement that exists is a no-op.
	Place(p Placement) error
	// Release forgets p; it reports whether p was recorded.
	Release(p Placement) (bool, error)
	// InUse reports whether any placement names generation gen of node.
	InUse(nodeID string, gen int64) bool
	// List returns node's placements, by generation then reference.
	List(nodeID string) []Placement
}

// Syncer is a Store that several gateway replicas share, each answering
// from its own view that follows the others' changes with a delay (a
// watch). Sync reads one node's placements from the shared store itself,
// so that the answers that follow include every placement any replica
// had recorded when Sync was called. The hub syncs a node before its
// first retention answer on a connection: the replica that held the node
// before may have placed allocations this one has not seen yet.
type Syncer interface {
	// Sync refreshes node's placements; on error the view is unchanged
	// (the hub then keeps every generation the node asks about).
	Sync(ctx context.Context, nodeID string) error
}

// ErrJournal: the journal (or the shared store) cannot be read, parsed or
// written, or a placement is malformed; on a write error nothing changed.
var ErrJournal = errors.New("placement: journal")

// MaxLine bounds one journal line, in bytes.
const MaxLine = 4096

type key struct {
	node string
	gen  int64
	ref  proto.Reference
}

// Memory is a Store in memory only (no state_dir): placements survive a
// reload of the gateway, not a restart. Placements are indexed by node, so
// a node's lookups cost what that node has, not what every node has.
type Memory struct {
	mu     sync.Mutex
	placed int                                               // placements in total
	byNode map[string]map[int64]map[proto.Reference]struct{} // node → generation → references
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{byNode: map[string]map[int64]map[proto.Reference]struct{}{}}
}

func keyOf(p Placement) key { return key{p.NodeID, p.Generation, p.Reference} }

// has reports whether k is recorded; m.mu is held.
func (m *Memory) has(k key) bool {
	_, ok := m.byNode[k.node][k.gen][k.ref]
	return ok
}

// add records k, which is not recorded; m.mu is held.
func (m *Memory) add(k key) {
	gens := m.byNode[k.node]
	if gens == nil {
		gens = map[int64]map[proto.Reference]struct{}{}
		m.byNode[k.node] = gens
	}
	refs := gens[k.gen]
	if refs == nil {
		refs = map[proto.Reference]struct{}{}
		gens[k.gen] = refs
	}
	refs[k.ref] = struct{}{}
	m.placed++
}

// remove forgets k, which is recorded; m.mu is held.
func (m *Memory) remove(k key) {
	gens := m.byNode[k.node]
	delete(gens[k.gen], k.ref)
	if len(gens[k.gen]) == 0 {
		delete(gens, k.gen)
	}
	if len(gens) == 0 {
		delete(m.byNode, k.node)
	}
	m.placed--
}

// all returns every placement; m.mu is held.
func (m *Memory) all() []Placement {
	out := make([]Placement, 0, m.placed)
	for node, gens := range m.byNode {
		for gen, refs := range gens {
			for ref := range refs {
				out = append(out, Placement{NodeID: node, Generation: gen, Reference: ref})
			}
		}
	}
	return out
}

// Place implements Store; a malformed placement is refused (ErrJournal).
func (m *Memory) Place(p Placement) error {
	if !Valid(p) {
		return fmt.Errorf("%w: malformed placement", ErrJournal)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if k := keyOf(p); !m.has(k) {
		m.add(k)
	}
	return nil
}

// Release implements Store.
func (m *Memory) Release(p Placement) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := keyOf(p)
	if !m.has(k) {
		return false, nil
	}
	m.remove(k)
	return true, nil
}

// InUse implements Store.
func (m *Memory) InUse(nodeID string, gen int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.byNode[nodeID][gen]) > 0
}

// List implements Store.
func (m *Memory) List(nodeID string) []Placement {
	m.mu.Lock()
	var out []Placement
	for gen, refs := range m.byNode[nodeID] {
		for ref := range refs {
			out = append(out, Placement{NodeID: nodeID, Generation: gen, Reference: ref})
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, Compare)
	return out
}

// File is a Store backed by a journal file. Concurrent Place and
// Release calls share fsyncs (group commit): each writes its line, and one
// fsync makes every line written before it durable.
type File struct {
	*Memory
	path      string
	f         *os.File // the journal, opened for appending; guarded by Memory.mu
	lines     int      // lines in the journal; guarded by Memory.mu
	written   uint64   // lines appended since Open; guarded by Memory.mu
	compactAt int      // the least journal length worth compacting

	syncMu sync.Mutex // held while fsyncing; taken before Memory.mu
	synced uint64     // lines known durable; guarded by syncMu
}

// entry is one journal line.
type entry struct {
	Op string `json:"op"` // "place" or "release"
	Placement
}

// Open opens (or creates, mode 0600) the journal at path and replays it.
// Errors wrap ErrJournal and name the line; a torn last line (a crash in
// the middle of an append) is ignored and cut off.
func Open(path string) (*File, error) {
	s := &File{Memory: NewMemory(), path: path, compactAt: 1024}
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %v", ErrJournal, err)
	}
	good := 0 // bytes of complete lines
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, MaxLine), MaxLine)
	n := 0
	for sc.Scan() {
		line := sc.Bytes()
		n++
		end := good + len(line) + 1
		if end > len(b) { // the last line has no newline: torn
			break
		}
		var e entry
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil || !Valid(e.Placement) || (e.Op != "place" && e.Op != "release") {
			return nil, fmt.Errorf("%w: %s line %d is malformed", ErrJournal, path, n)
		}
		k := keyOf(e.Placement)
		switch {
		case e.Op == "place" && !s.has(k):
			s.add(k)
		case e.Op == "release" && s.has(k):
			s.remove(k)
		}
		s.lines++
		good = end
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s line %d: %v", ErrJournal, path, n+1, err)
	}
	if good < len(b) {
		if err := os.Truncate(path, int64(good)); err != nil {
			return nil, fmt.Errorf("%w: cutting a torn line: %v", ErrJournal, err)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrJournal, err)
	}
	s.f = f
	if err := atomicfile.SyncDir(filepath.Dir(path)); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %v", ErrJournal, err)
	}
	return s, nil
}

// Valid reports whether p is well formed: a node UUID, a positive
// generation and a reference of identifiers (proto.IsIdentifier).
func Valid(p Placement) bool {
	return proto.IsUUID(p.NodeID) && p.Generation > 0 && proto.IsIdentifier(p.Reference.TenantID) &&
		proto.IsIdentifier(p.Reference.EnvironmentID) && proto.IsIdentifier(p.Reference.AllocationID)
}

// Close closes the journal.
func (s *File) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// write appends one entry (not yet durable) and returns its number;
// s.mu is held.
func (s *File) write(e entry) (uint64, error) {
	if s.f == nil {
		return 0, fmt.Errorf("%w: closed", ErrJournal)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrJournal, err)
	}
	if _, err := s.f.Write(append(b, '\n')); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrJournal, err)
	}
	s.lines++
	s.written++
	return s.written, nil
}

// sync makes line n durable: unless a concurrent fsync already covered
// it, it fsyncs the journal (covering every line written so far).
func (s *File) sync(n uint64) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if s.synced >= n {
		return nil
	}
	s.mu.Lock()
	f, upto := s.f, s.written
	s.mu.Unlock()
	if f == nil {
		return fmt.Errorf("%w: closed", ErrJournal)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("%w: %v", ErrJournal, err)
	}
	s.synced = upto
	return nil
}

// compact rewrites the journal with the live placements when it has
// grown past twice their number (and 1024 lines); s.mu is held. A failed
// compaction keeps the old journal.
func (s *File) compact() {
	if s.lines < s.compactAt || s.lines < 2*s.placed {
		return
	}
	var buf bytes.Buffer
	for _, p := range s.all() {
		b, _ := json.Marshal(entry{Op: "place", Placement: p})
		buf.Write(append(b, '\n'))
	}
	if err := atomicfile.Write(s.path, buf.Bytes(), 0o600); err != nil {
		return
	}
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	s.f.Close()
	s.f, s.lines = f, s.placed
	// The rewritten journal was fsync'd whole: everything is durable.
	s.synced = s.written
}

// Place implements Store: a new placement is appended and fsync'd before
// Place returns. It counts as in use from the moment it is written (a
// placement whose fsync then fails stays in use in memory: keeping more
// is safe). Errors wrap ErrJournal.
func (s *File) Place(p Placement) error {
	if !Valid(p) {
		return fmt.Errorf("%w: malformed placement", ErrJournal)
	}
	s.mu.Lock()
	k := keyOf(p)
	if s.has(k) {
		s.mu.Unlock()
		return nil
	}
	n, err := s.write(entry{Op: "place", Placement: p})
	if err == nil {
		s.add(k)
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.sync(n)
}

// Release implements Store: the release is appended and fsync'd before
// Release returns (a release whose fsync fails may come back after a
// restart: keeping more is safe).
func (s *File) Release(p Placement) (bool, error) {
	s.syncMu.Lock() // compaction below replaces the journal
	s.mu.Lock()
	k := keyOf(p)
	if !s.has(k) {
		s.mu.Unlock()
		s.syncMu.Unlock()
		return false, nil
	}
	n, err := s.write(entry{Op: "release", Placement: p})
	if err == nil {
		s.remove(k)
		if s.f.Sync() != nil {
			err = fmt.Errorf("%w: fsync failed", ErrJournal)
		} else {
			s.synced = n
			s.compact()
		}
	}
	s.mu.Unlock()
	s.syncMu.Unlock()
	return err == nil, err
}

var (
	_ Store = (*Memory)(nil)
	_ Store = (*File)(nil)
)
