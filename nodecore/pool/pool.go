// Package pool holds Core's node pools and their deployments (spec
// node-protocol.md "Generation control"): each pool has a target
// deployment generation with its specification digest and a nullable
// serving generation, which Core advertises to the pool's
// generation-managing nodes in welcome and every heartbeat_ack, and a
// table of the deployment generations it knows, each bound once and for
// all to one specification digest (and, for releases of the release
// store, to the release's source name).
//
// A Registry is shared by the configs a reload replaces, so its state
// outlives `caddy reload`. Pools are defined by the configuration; their
// deployment changes with the configuration or at run time (Set, the
// admin API). The latest change wins: a reload whose pool block keeps the
// same target and serving as the previous config keeps a deployment Set
// at run time; a reload that changes them applies the config's.
//
// The state is kept by a Backend and written there before a change takes
// effect: in memory only (Open("")), in a state file written atomically
// (Open(path), internal/atomicfile), or in a store that several gateway
// replicas share (package nodecore/kubestore: one NodePool object per pool,
// each change conditional on the version it was computed from, and every
// replica following the others' changes through Observe).
package pool

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/sandgate/sandgate/node/machine"
	"github.com/sandgate/sandgate/node/proto"
)

// Default is the pool of nodes that name none.
const Default = "default"

// MaxGenerations bounds the generation table of one pool.
const MaxGenerations = 1024

// IsName reports whether s is a pool name: 1..63 bytes of [a-z0-9-],
// starting and ending with a letter or digit (a DNS label). The rule is
// machine.IsPool's, which the node applies too.
func IsName(s string) bool { return machine.IsPool(s) }

// Errors; returned errors wrap one of them and name the pool and
// generation.
var (
	// ErrUnknownPool: the configuration defines no such pool.
	ErrUnknownPool = errors.New("pool: unknown pool")
	// ErrConflict: a generation is already bound to another
	// specification digest (or another release source); bindings never
	// change.
	ErrConflict = errors.New("pool: the generation is bound to another specification")
	// ErrUnbound: the target generation has no specification digest.
	ErrUnbound = errors.New("pool: the target generation is not bound to a specification digest")
	// ErrInvalid: a malformed name, generation, digest or source, or too
	// many generations.
	ErrInvalid = errors.New("pool: invalid")
	// ErrState: the backend cannot read or write the state (the state
	// file, or the shared store).
	ErrState = errors.New("pool: state file")
	// ErrStale: a Backend's Save found a pool changed since the version
	// the change was computed from; the Registry reloads and computes the
	// change again.
	ErrStale = errors.New("pool: the state changed elsewhere")
)

// Binding binds a deployment generation to its specification digest and,
// when it comes from the release store, the release's source name.
type Binding struct {
	// Generation is the deployment generation, > 0.
	Generation int64 `json:"generation"`
	// SpecificationDigest is its lowercase hex SHA-256 specification
	// digest.
	SpecificationDigest string `json:"specification_digest"`
	// Source is the release's source name; empty when the generation was
	// configured by digest only (no machine downloads for it).
	Source string `json:"source,omitempty"`
}

// Spec is one pool as a configuration defines it.
type Spec struct {
	// Bindings are the generations the config binds.
	Bindings []Binding
	// Target is the target generation, 0 for none (the pool then has no
	// deployment until one is Set).
	Target int64
	// Serving is the serving generation, 0 for null.
	Serving int64
}

// Status is one pool as the registry holds it.
type Status struct {
	// Name is the pool's name.
	Name string `json:"name"`
	// Deployment is the advertised deployment; absent when the pool has no
	// target.
	Deployment *proto.Deployment `json:"deployment,omitempty"`
	// Generations are the bound generations, ascending.
	Generations []Binding `json:"generations"`
}

// State is one pool's stored state, as a Backend keeps it.
type State struct {
	// Target is the target generation, 0 for none; when set it is bound
	// in Generations.
	Target int64
	// Serving is the serving generation, 0 for null.
	Serving int64
	// Configured is the target and serving of the last config that
	// applied its own; a config with the same values keeps a run-time
	// change. Nil: no config has applied one.
	Configured *Configured
	// Generations are the bound generations by number (Binding.Generation
	// equals the key).
	Generations map[int64]Binding
	// Version is the backend's version of this state (a Kubernetes
	// resourceVersion), "" for a pool the backend has not stored and for
	// backends without versions (the state file).
	Version string
}

// Configured is a config's target and serving (0: none, null).
type Configured struct {
	// Target is the config's target generation; 0 for none.
	Target int64
	// Serving is the config's serving generation; 0 for null.
	Serving int64
}

// Change is one pool's change, for Backend.Save.
type Change struct {
	// Name is the pool's name.
	Name string
	// From is the stored state the change was computed from (its Version
	// is the condition of the change; a backend that puts pools back
	// after a failure writes it); nil when the pool must not exist yet.
	From *State
	// To is the pool's new state; nil removes the pool. Save sets its
	// Version.
	To *State
}

// Backend keeps the pools' states. Implementations are safe for
// concurrent use; a Registry calls Save from one goroutine at a time.
type Backend interface {
	// Load returns every stored pool's state by name (a read of the
	// store itself, not of a cache). Errors wrap ErrState.
	Load() (map[string]*State, error)
	// Save stores the changes, each conditionally on its From state's
	// Version, and sets the Version of each stored state. An error wraps ErrStale
	// when a pool changed since its From version, and ErrState
	// otherwise; on error nothing was stored (a backend that stores pools
	// one by one puts back those it stored before the failure,
	// conditionally on their new version).
	Save(changes []Change) error
}

// maxAttempts bounds how often a change is computed again after a Save
// found the state changed elsewhere. Each such conflict means another
// replica's change was stored, so the bound is only reached when other
// replicas store this many changes while this one reloads and recomputes;
// between attempts the registry waits a random 0..attempt×retryStep.
const maxAttempts = 32

// retryStep scales the random wait before a change is computed again.
const retryStep = 5 * time.Millisecond

// Registry holds the pools. Its methods are safe for concurrent use.
type Registry struct {
	backend Backend // nil: memory only
	path    string  // the state file of Open, if any

	wmu sync.Mutex // serialises changes (compute, Save, apply)

	mu         sync.Mutex // guards the fields below; never held across Save
	state      map[string]*State
	configured map[string]bool
	version    uint64 // bumped by every change, for undo
}

// Open returns a registry with its state read from the state file at path
// (created on the first change when missing), or held in memory only when
// path is "". Errors wrap ErrState.
func Open(path string) (*Registry, error) {
	if path == "" {
		return &Registry{state: map[string]*State{}, configured: map[string]bool{}}, nil
	}
	r, err := New(&File{Path: path})
	if err != nil {
		return nil, err
	}
	r.path = path
	return r, nil
}

// New returns a registry whose state is kept by b, starting from what
// b.Load returns. Errors wrap ErrState.
func New(b Backend) (*Registry, error) {
	s, err := b.Load()
	if err != nil {
		return nil, err
	}
	if s == nil {
		s = map[string]*State{}
	}
	return &Registry{backend: b, state: s, configured: map[string]bool{}}, nil
}

// Path returns the state file's path ("" for memory only and for other
// backends).
func (r *Registry) Path() string { return r.path }

// Clone deep-copies a state.
func (s *State) Clone() *State {
	c := *s
	if s.Configured != nil {
		v := *s.Configured
		c.Configured = &v
	}
	c.Generations = maps.Clone(s.Generations)
	if c.Generations == nil {
		c.Generations = map[int64]Binding{}
	}
	return &c
}

// clone deep-copies a state map.
func clone(s map[string]*State) map[string]*State {
	out := make(map[string]*State, len(s))
	for k, p := range s {
		out[k] = p.Clone()
	}
	return out
}

// Validate checks a state read from a backend: positive generations,
// lowercase digests, a bound target. The error wraps ErrState and names
// the pool.
func (s *State) Validate(name string) error {
	if !IsName(name) || s.Target < 0 || s.Serving < 0 || len(s.Generations) > MaxGenerations {
		return fmt.Errorf("%w: pool %q is malformed", ErrState, name)
	}
	for g, b := range s.Generations {
		if g <= 0 || b.Generation != g || !proto.IsDigest(b.SpecificationDigest) {
			return fmt.Errorf("%w: pool %q has a malformed generation", ErrState, name)
		}
	}
	if _, ok := s.Generations[s.Target]; s.Target > 0 && !ok {
		return fmt.Errorf("%w: pool %q: target generation %d is not bound", ErrState, name, s.Target)
	}
	return nil
}

// bind adds b to p, refusing a conflict.
func bind(name string, p *State, b Binding) error {
	if b.Generation <= 0 || !proto.IsDigest(b.SpecificationDigest) {
		return fmt.Errorf("%w: pool %q: a binding needs a positive generation and a lowercase SHA-256 digest", ErrInvalid, name)
	}
	old, ok := p.Generations[b.Generation]
	switch {
	case !ok:
		if len(p.Generations) >= MaxGenerations {
			return fmt.Errorf("%w: pool %q: more than %d generations", ErrInvalid, name, MaxGenerations)
		}
		p.Generations[b.Generation] = b
	case old.SpecificationDigest != b.SpecificationDigest:
		return fmt.Errorf("%w: pool %q generation %d", ErrConflict, name, b.Generation)
	case b.Source != "" && old.Source != "" && old.Source != b.Source:
		return fmt.Errorf("%w: pool %q generation %d comes from release %q", ErrConflict, name, b.Generation, old.Source)
	case b.Source != "" && old.Source == "":
		p.Generations[b.Generation] = b
	}
	return nil
}

// equal reports whether two states hold the same pool (versions aside).
func equal(a, b *State) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Target != b.Target || a.Serving != b.Serving || (a.Configured == nil) != (b.Configured == nil) ||
		a.Configured != nil && *a.Configured != *b.Configured {
		return false
	}
	return maps.Equal(a.Generations, b.Generations)
}

// apply computes the state a config of specs leads to from s (modified in
// place) and returns the pools it changed.
func apply(s map[string]*State, specs map[string]Spec) ([]string, error) {
	names := make([]string, 0, len(specs))
	for n := range specs {
		names = append(names, n)
	}
	sort.Strings(names)
	var changed []string
	for _, name := range names {
		spec := specs[name]
		if !IsName(name) {
			return nil, fmt.Errorf("%w: pool name %q must be 1..63 characters of [a-z0-9-]", ErrInvalid, name)
		}
		if spec.Target < 0 || spec.Serving < 0 {
			return nil, fmt.Errorf("%w: pool %q: generations must be positive", ErrInvalid, name)
		}
		before := s[name]
		p := &State{Generations: map[int64]Binding{}}
		if before != nil {
			p = before.Clone()
		}
		for _, b := range spec.Bindings {
			if err := bind(name, p, b); err != nil {
				return nil, err
			}
		}
		want := Configured{Target: spec.Target, Serving: spec.Serving}
		if p.Configured == nil || *p.Configured != want {
			p.Configured = &want
			p.Target, p.Serving = spec.Target, spec.Serving
		}
		if _, ok := p.Generations[p.Target]; p.Target > 0 && !ok {
			return nil, fmt.Errorf("%w: pool %q generation %d", ErrUnbound, name, p.Target)
		}
		if !equal(before, p) {
			s[name] = p
			changed = append(changed, name)
		}
	}
	return changed, nil
}

// versions parses two versions as Kubernetes resourceVersions, decimal
// integers that grow with every write (comparable since Kubernetes 1.35);
// ok is false when either is not one (no versions).
func versions(a, b string) (x, y uint64, ok bool) {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return x, y, errA == nil && errB == nil
}

// Observe records a pool's state as the backend now holds it, changed by
// another gateway replica (a watch event) or read after a conflict. A
// state older than the one held (by its Version) is ignored, and so is a
// malformed one; a deleted pool (s nil) keeps its last state, so that
// deleting the object does not take a deployment away from running
// replicas (the next change or config writes it again).
func (r *Registry) Observe(name string, s *State) {
	if s == nil || s.Validate(name) != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.observe(name, s.Clone())
}

// observe installs s unless the held state is as new (by Version) or
// the same; r.mu is held.
func (r *Registry) observe(name string, s *State) {
	if cur := r.state[name]; cur != nil {
		if cur.Version == s.Version && equal(cur, s) {
			return
		}
		if x, y, ok := versions(s.Version, cur.Version); ok && x <= y {
			return
		}
	}
	r.state[name] = s
	r.version++
}

// change computes a change with f on a copy of the state and saves it,
// computing it again from a fresh Load when the backend reports a
// concurrent change. It returns the state before and after the change
// (the saved states carry their new Version) and the changed pools.
// r.wmu is held.
func (r *Registry) change(f func(next map[string]*State) ([]string, error)) (before, after map[string]*State, changed []string, err error) {
	for attempt := 1; ; attempt++ {
		r.mu.Lock()
		before = clone(r.state)
		r.mu.Unlock()
		after = clone(before)
		changed, err = f(after)
		if err != nil {
			return nil, nil, nil, err
		}
		changes := make([]Change, 0, len(changed))
		for _, n := range changed {
			changes = append(changes, Change{Name: n, From: before[n], To: after[n]})
		}
		if err = r.save(changes); err == nil {
			return before, after, changed, nil
		}
		if !errors.Is(err, ErrStale) {
			return nil, nil, nil, err
		}
		if attempt >= maxAttempts {
			return nil, nil, nil, fmt.Errorf("%w: %d concurrent changes in a row: %v", ErrState, attempt, err)
		}
		time.Sleep(rand.N(time.Duration(attempt) * retryStep))
		fresh, lerr := r.backend.Load()
		if lerr != nil {
			return nil, nil, nil, lerr
		}
		r.mu.Lock()
		for n, s := range fresh {
			if s.Validate(n) == nil {
				r.observe(n, s)
			}
		}
		r.mu.Unlock()
	}
}

// save stores changes in the backend (none: memory only) and then in the
// registry. r.wmu is held.
func (r *Registry) save(changes []Change) error {
	if len(changes) == 0 {
		return nil
	}
	if r.backend != nil {
		if err := r.backend.Save(changes); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range changes {
		if c.To == nil {
			delete(r.state, c.Name)
		} else if r.backend == nil {
			r.state[c.Name] = c.To.Clone()
		} else {
			r.observe(c.Name, c.To.Clone())
		}
	}
	r.version++
	return nil
}

// Check reports whether Configure would accept specs (a dry run).
func (r *Registry) Check(specs map[string]Spec) error {
	r.mu.Lock()
	next := clone(r.state)
	r.mu.Unlock()
	_, err := apply(next, specs)
	return err
}

// Configure makes specs the configured pools: it adds their bindings
// (refusing a conflict with a generation already bound), applies each
// pool's target and serving when they differ from those of the last
// config that applied them, stores the state, and returns undo, which
// puts back the targets, servings and configuration records Configure
// replaced provided nothing changed them since (the gateway undoes a
// config that was stopped before it took over); the bindings Configure
// added stay, because once stored a binding may have been advertised and
// it never changes. Pools the config does not name stay stored but have
// no deployment. Errors wrap ErrInvalid, ErrConflict, ErrUnbound or
// ErrState; on error nothing changed.
func (r *Registry) Configure(specs map[string]Spec) (undo func(), err error) {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	before, after, changed, err := r.change(func(next map[string]*State) ([]string, error) { return apply(next, specs) })
	if err != nil {
		return func() {}, err
	}
	r.mu.Lock()
	prevConfigured := r.configured
	r.configured = map[string]bool{}
	for n := range specs {
		r.configured[n] = true
	}
	r.version++
	v := r.version
	r.mu.Unlock()
	return func() {
		r.wmu.Lock()
		defer r.wmu.Unlock()
		r.mu.Lock()
		current := r.version == v
		r.mu.Unlock()
		if !current {
			return
		}
		changes := make([]Change, 0, len(changed))
		for _, n := range changed {
			// The bindings stay: once stored, a binding may have been
			// advertised (by this replica's heartbeats or another's),
			// and it never changes.
			to := &State{}
			if b := before[n]; b != nil {
				to = b.Clone()
			}
			to.Generations = maps.Clone(after[n].Generations)
			changes = append(changes, Change{Name: n, From: after[n], To: to})
		}
		if r.save(changes) != nil {
			return
		}
		r.mu.Lock()
		r.configured = prevConfigured
		r.version++
		r.mu.Unlock()
	}, nil
}

// deployment returns p's deployment.
func deployment(p *State) (proto.Deployment, bool) {
	if p == nil || p.Target <= 0 {
		return proto.Deployment{}, false
	}
	b, ok := p.Generations[p.Target]
	if !ok {
		return proto.Deployment{}, false
	}
	d := proto.Deployment{Generation: p.Target, SpecificationDigest: b.SpecificationDigest}
	if p.Serving > 0 {
		s := p.Serving
		d.ServingGeneration = &s
	}
	return d, true
}

// Deployment returns the deployment of pool name, and false when the
// configuration defines no such pool or the pool has no target.
func (r *Registry) Deployment(name string) (proto.Deployment, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.configured[name] {
		return proto.Deployment{}, false
	}
	return deployment(r.state[name])
}

// Binding returns generation gen of pool name, and false when the pool is
// not configured or gen is not bound.
func (r *Registry) Binding(name string, gen int64) (Binding, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.state[name]
	if !r.configured[name] || p == nil {
		return Binding{}, false
	}
	b, ok := p.Generations[gen]
	return b, ok
}

// HasSource reports whether pool name is configured and binds a
// generation to release source (the releases a node of the pool may
// download).
func (r *Registry) HasSource(name, source string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.state[name]
	if !r.configured[name] || p == nil || source == "" {
		return false
	}
	for _, b := range p.Generations {
		if b.Source == source {
			return true
		}
	}
	return false
}

// Configured reports whether the configuration defines pool name.
func (r *Registry) Configured(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.configured[name]
}

// Set changes the deployment of pool name at run time: target becomes the
// target generation and serving the serving generation (nil: null),
// after binding, when given, has been added to the pool's generations. The
// new state is stored before it takes effect. It returns the new
// deployment. Errors: ErrUnknownPool, ErrInvalid (target ≤ 0, serving ≤
// 0, a bad binding or one for another generation than target),
// ErrConflict, ErrUnbound (target has no digest), ErrState; on error
// nothing changed.
func (r *Registry) Set(name string, target int64, serving *int64, binding *Binding) (proto.Deployment, error) {
	if !r.Configured(name) {
		return proto.Deployment{}, fmt.Errorf("%w: %q", ErrUnknownPool, name)
	}
	if target <= 0 || (serving != nil && *serving <= 0) {
		return proto.Deployment{}, fmt.Errorf("%w: pool %q: generations must be positive", ErrInvalid, name)
	}
	if binding != nil && binding.Generation != target {
		return proto.Deployment{}, fmt.Errorf("%w: pool %q: the binding is for another generation than the target", ErrInvalid, name)
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	_, after, _, err := r.change(func(next map[string]*State) ([]string, error) {
		p := next[name]
		if p == nil {
			p = &State{Generations: map[int64]Binding{}}
			next[name] = p
		}
		if binding != nil {
			if err := bind(name, p, *binding); err != nil {
				return nil, err
			}
		}
		if _, ok := p.Generations[target]; !ok {
			return nil, fmt.Errorf("%w: pool %q generation %d", ErrUnbound, name, target)
		}
		p.Target, p.Serving = target, 0
		if serving != nil {
			p.Serving = *serving
		}
		return []string{name}, nil
	})
	if err != nil {
		return proto.Deployment{}, err
	}
	d, _ := deployment(after[name])
	return d, nil
}

// Pools returns every configured pool, sorted by name.
func (r *Registry) Pools() []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Status, 0, len(r.configured))
	for name := range r.configured {
		p := r.state[name]
		s := Status{Name: name, Generations: []Binding{}}
		if d, ok := deployment(p); ok {
			s.Deployment = &d
		}
		if p != nil {
			for _, b := range p.Generations {
				s.Generations = append(s.Generations, b)
			}
		}
		sort.Slice(s.Generations, func(i, j int) bool { return s.Generations[i].Generation < s.Generations[j].Generation })
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
