package kubestore

import (
	"context"
	"fmt"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandgate/sandgate/node/proto"
	v1 "github.com/sandgate/sandgate/nodecore/apis/v1alpha1"
	"github.com/sandgate/sandgate/nodecore/placement"
)

// maxWriteAttempts bounds how often one write is computed again after a
// concurrent change.
const maxWriteAttempts = 16

// Placements is the placement.Store over NodePlacements objects, one per
// node (deleted when it holds none). A new placement is written to the
// apiserver before Place returns; the calls for one node that arrive
// while a write of that node is in flight share the next write (group
// commit), so a burst of creates on one node costs a few writes, not one
// each. Placing what the replica's view already holds costs nothing (the
// hub places on every request to a generation-managing node).
type Placements struct {
	s    *Store
	view *mirror[*nodeSet]

	mu     sync.Mutex
	queues map[string]*queue // node → calls waiting for its next write
}

// refKey is one placement of a node.
type refKey struct {
	gen int64
	ref proto.Reference
}

// nodeSet is one node's placements, never modified once in the view.
type nodeSet struct {
	refs map[refKey]struct{}
	gens map[int64]int // placements per generation
}

func (n *nodeSet) has(k refKey) bool {
	if n == nil {
		return false
	}
	_, ok := n.refs[k]
	return ok
}

func (n *nodeSet) len() int {
	if n == nil {
		return 0
	}
	return len(n.refs)
}

func setOf(p *v1.NodePlacements) *nodeSet {
	n := &nodeSet{refs: make(map[refKey]struct{}, len(p.Spec.Placements)), gens: map[int64]int{}}
	for _, a := range p.Spec.Placements {
		k := refKey{gen: a.Generation, ref: proto.Reference{TenantID: a.TenantID, EnvironmentID: a.EnvironmentID, AllocationID: a.AllocationID}}
		if _, ok := n.refs[k]; !ok {
			n.refs[k] = struct{}{}
			n.gens[k.gen]++
		}
	}
	return n
}

// op is one Place or Release waiting for its node's write.
type op struct {
	release bool
	k       refKey
	done    chan result // buffered: the writer never blocks
}

type result struct {
	found bool // a release found the placement
	err   error
}

type queue struct{ pending []*op }

func newPlacements(s *Store) *Placements {
	p := &Placements{s: s, view: newMirror[*nodeSet](), queues: map[string]*queue{}}
	_, _ = s.placementInformer.AddEventHandler(handlers(func(o *v1.NodePlacements) {
		p.view.put(o.Name, o.ResourceVersion, setOf(o))
	}, func(o *v1.NodePlacements) {
		p.view.remove(o.Name, o.ResourceVersion)
	}))
	return p
}

func keyOf(pl placement.Placement) refKey { return refKey{gen: pl.Generation, ref: pl.Reference} }

// Place implements placement.Store: a placement the view does not hold is
// written (with the others waiting for the node) before Place returns.
// Errors wrap placement.ErrJournal: a malformed placement, a node that
// has v1alpha1.MaxPlacements already, an apiserver that cannot be
// written; then nothing was recorded.
func (p *Placements) Place(pl placement.Placement) error {
	if !placement.Valid(pl) {
		return fmt.Errorf("%w: malformed placement", placement.ErrJournal)
	}
	k := keyOf(pl)
	if n, _, _ := p.view.get(pl.NodeID); n.has(k) {
		return nil
	}
	return p.commit(pl.NodeID, &op{k: k, done: make(chan result, 1)}).err
}

// Release implements placement.Store. A placement the view does not hold
// is looked up in the apiserver first (another replica may have made it a
// moment ago). Errors wrap placement.ErrJournal; the placement then stays.
func (p *Placements) Release(pl placement.Placement) (bool, error) {
	if !placement.Valid(pl) {
		return false, nil
	}
	k := keyOf(pl)
	if n, _, _ := p.view.get(pl.NodeID); !n.has(k) {
		ctx, cancel := p.s.request()
		err := p.refresh(ctx, pl.NodeID)
		cancel()
		if err != nil {
			return false, err
		}
		if n, _, _ := p.view.get(pl.NodeID); !n.has(k) {
			return false, nil
		}
	}
	r := p.commit(pl.NodeID, &op{release: true, k: k, done: make(chan result, 1)})
	return r.found, r.err
}

// InUse implements placement.Store, from the view.
func (p *Placements) InUse(nodeID string, gen int64) bool {
	n, _, _ := p.view.get(nodeID)
	return n != nil && n.gens[gen] > 0
}

// List implements placement.Store, from the view.
func (p *Placements) List(nodeID string) []placement.Placement {
	n, _, _ := p.view.get(nodeID)
	if n == nil {
		return nil
	}
	out := make([]placement.Placement, 0, len(n.refs))
	for k := range n.refs {
		out = append(out, placement.Placement{NodeID: nodeID, Generation: k.gen, Reference: k.ref})
	}
	slices.SortFunc(out, placement.Compare)
	return out
}

// Sync implements placement.Syncer: one read of the node's NodePlacements
// from the apiserver into the view. Errors wrap placement.ErrJournal.
func (p *Placements) Sync(ctx context.Context, nodeID string) error {
	ctx, cancel := context.WithTimeout(ctx, p.s.cfg.RequestTimeout)
	defer cancel()
	return p.refresh(ctx, nodeID)
}

// refresh reads node's object into the view.
func (p *Placements) refresh(ctx context.Context, node string) error {
	var o v1.NodePlacements
	err := p.s.client.Get(ctx, client.ObjectKey{Namespace: p.s.cfg.Namespace, Name: node}, &o)
	switch {
	case apierrors.IsNotFound(err):
		p.view.remove(node, "")
		return nil
	case err != nil:
		return fmt.Errorf("%w: reading the placements of node %s: %v", placement.ErrJournal, node, err)
	}
	p.view.put(node, o.ResourceVersion, setOf(&o))
	return nil
}

// commit queues o for node's next write; the first caller for a node
// writes, batch after batch, until no call is waiting.
func (p *Placements) commit(node string, o *op) result {
	p.mu.Lock()
	if q := p.queues[node]; q != nil {
		q.pending = append(q.pending, o)
		p.mu.Unlock()
		return <-o.done
	}
	q := &queue{}
	p.queues[node] = q
	p.mu.Unlock()
	batch := []*op{o}
	for len(batch) > 0 {
		p.write(node, batch)
		p.mu.Lock()
		batch, q.pending = q.pending, nil
		if len(batch) == 0 {
			delete(p.queues, node)
		}
		p.mu.Unlock()
	}
	return <-o.done
}

// write applies a batch to node's object, computed again from a fresh read
// after a concurrent change, and delivers each call's result.
func (p *Placements) write(node string, batch []*op) {
	deliver := func(rs []result) {
		for i, o := range batch {
			o.done <- rs[i]
		}
	}
	fail := func(err error) {
		rs := make([]result, len(batch))
		for i := range rs {
			rs[i].err = err
		}
		deliver(rs)
	}
	for attempt := 1; attempt <= maxWriteAttempts; attempt++ {
		cur, rv, exists := p.view.get(node)
		next, rs, changed := apply(cur, batch)
		if !changed {
			deliver(rs)
			return
		}
		ctx, cancel := p.s.request()
		obj := &v1.NodePlacements{ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: p.s.cfg.Namespace, Labels: labels(""), ResourceVersion: rv}}
		for k := range next.refs {
			obj.Spec.Placements = append(obj.Spec.Placements, v1.PlacedAllocation{Generation: k.gen,
				TenantID: k.ref.TenantID, EnvironmentID: k.ref.EnvironmentID, AllocationID: k.ref.AllocationID})
		}
		slices.SortFunc(obj.Spec.Placements, compareAllocations)
		var err error
		switch {
		case !exists:
			obj.ResourceVersion = ""
			err = p.s.client.Create(ctx, obj)
		case next.len() == 0:
			err = p.s.client.Delete(ctx, obj, client.Preconditions{ResourceVersion: &rv})
		default:
			err = p.s.client.Update(ctx, obj)
		}
		if err == nil {
			if next.len() == 0 {
				p.view.remove(node, rv)
			} else {
				p.view.put(node, obj.ResourceVersion, next)
			}
			cancel()
			deliver(rs)
			return
		}
		if !conflict(err) {
			cancel()
			fail(fmt.Errorf("%w: writing the placements of node %s: %v", placement.ErrJournal, node, err))
			return
		}
		err = p.refresh(ctx, node)
		cancel()
		if err != nil {
			fail(err)
			return
		}
	}
	fail(fmt.Errorf("%w: the placements of node %s changed %d times during one write", placement.ErrJournal, node, maxWriteAttempts))
}

// apply computes a node's placements after a batch: each call's result,
// and whether anything changed. A place beyond v1alpha1.MaxPlacements is
// refused.
func apply(cur *nodeSet, batch []*op) (*nodeSet, []result, bool) {
	next := &nodeSet{refs: make(map[refKey]struct{}, cur.len()+len(batch)), gens: map[int64]int{}}
	if cur != nil {
		for k := range cur.refs {
			next.refs[k] = struct{}{}
			next.gens[k.gen]++
		}
	}
	rs := make([]result, len(batch))
	changed := false
	for i, o := range batch {
		_, has := next.refs[o.k]
		switch {
		case o.release && has:
			delete(next.refs, o.k)
			if next.gens[o.k.gen]--; next.gens[o.k.gen] == 0 {
				delete(next.gens, o.k.gen)
			}
			rs[i].found, changed = true, true
		case o.release, has:
		case len(next.refs) >= v1.MaxPlacements:
			rs[i].err = fmt.Errorf("%w: the node has %d placements, the most one node may have", placement.ErrJournal, v1.MaxPlacements)
		default:
			next.refs[o.k] = struct{}{}
			next.gens[o.k.gen]++
			changed = true
		}
	}
	return next, rs, changed
}

// compareAllocations orders a NodePlacements' list as placement.Compare
// orders placements.
func compareAllocations(a, b v1.PlacedAllocation) int {
	return placement.Compare(placedOf(a), placedOf(b))
}

func placedOf(a v1.PlacedAllocation) placement.Placement {
	return placement.Placement{Generation: a.Generation,
		Reference: proto.Reference{TenantID: a.TenantID, EnvironmentID: a.EnvironmentID, AllocationID: a.AllocationID}}
}

var (
	_ placement.Store  = (*Placements)(nil)
	_ placement.Syncer = (*Placements)(nil)
)
