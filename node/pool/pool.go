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
// at run time; a reload that changes them applies the config's. With a
// state file the registry also survives a restart: the state is written
// atomically (internal/atomicfile) before a change takes effect.
package pool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"sort"
	"strconv"
	"sync"

	"github.com/sandgate/sandgate/internal/atomicfile"
	"github.com/sandgate/sandgate/node/proto"
)

// Default is the pool of nodes that name none.
const Default = "default"

// MaxGenerations bounds the generation table of one pool.
const MaxGenerations = 1024

// IsName reports whether s is a pool name: 1..63 bytes of [a-z0-9-],
// starting and ending with a letter or digit (a DNS label).
func IsName(s string) bool {
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
	// ErrState: the state file cannot be read, parsed or written.
	ErrState = errors.New("pool: state file")
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

// Registry holds the pools. Its methods are safe for concurrent use.
type Registry struct {
	path string // state file; "" keeps the state in memory only

	mu         sync.Mutex
	state      map[string]*poolState
	configured map[string]bool
	version    uint64 // bumped by every change, for undo
}

// poolState is one pool's state (also its form in the state file).
type poolState struct {
	Target  int64  `json:"target,omitempty"`
	Serving *int64 `json:"serving"`
	// Configured is the target and serving of the last config that
	// applied them: a config with the same values keeps a run-time change.
	Configured  *configured              `json:"configured,omitempty"`
	Generations map[string]bindingRecord `json:"generations"`
}

type configured struct {
	Target  int64 `json:"target"`
	Serving int64 `json:"serving"`
}

type bindingRecord struct {
	SpecificationDigest string `json:"specification_digest"`
	Source              string `json:"source,omitempty"`
}

type stateFile struct {
	Version int                   `json:"version"`
	Pools   map[string]*poolState `json:"pools"`
}

// Open returns a registry with its state read from path (created on the
// first change when missing), or held in memory only when path is "".
// Errors wrap ErrState.
func Open(path string) (*Registry, error) {
	r := &Registry{path: path, state: map[string]*poolState{}, configured: map[string]bool{}}
	if path == "" {
		return r, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrState, err)
	}
	var f stateFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil || f.Version != 1 {
		return nil, fmt.Errorf("%w: %s is not a pool state file of version 1", ErrState, path)
	}
	for name, p := range f.Pools {
		if !IsName(name) || p == nil || p.Target < 0 || (p.Serving != nil && *p.Serving <= 0) {
			return nil, fmt.Errorf("%w: %s: pool %q is malformed", ErrState, path, name)
		}
		for g, b := range p.Generations {
			if n, err := strconv.ParseInt(g, 10, 64); err != nil || n <= 0 || !proto.IsDigest(b.SpecificationDigest) {
				return nil, fmt.Errorf("%w: %s: pool %q has a malformed generation", ErrState, path, name)
			}
		}
		if p.Generations == nil {
			p.Generations = map[string]bindingRecord{}
		}
	}
	if f.Pools != nil {
		r.state = f.Pools
	}
	return r, nil
}

// Path returns the state file's path ("" for memory only).
func (r *Registry) Path() string { return r.path }

// clone deep-copies a state map.
func clone(s map[string]*poolState) map[string]*poolState {
	out := make(map[string]*poolState, len(s))
	for k, p := range s {
		c := *p
		if p.Serving != nil {
			v := *p.Serving
			c.Serving = &v
		}
		if p.Configured != nil {
			v := *p.Configured
			c.Configured = &v
		}
		c.Generations = maps.Clone(p.Generations)
		out[k] = &c
	}
	return out
}

// bind adds b to p, refusing a conflict.
func bind(name string, p *poolState, b Binding) error {
	if b.Generation <= 0 || !proto.IsDigest(b.SpecificationDigest) {
		return fmt.Errorf("%w: pool %q: a binding needs a positive generation and a lowercase SHA-256 digest", ErrInvalid, name)
	}
	key := strconv.FormatInt(b.Generation, 10)
	old, ok := p.Generations[key]
	switch {
	case !ok:
		if len(p.Generations) >= MaxGenerations {
			return fmt.Errorf("%w: pool %q: more than %d generations", ErrInvalid, name, MaxGenerations)
		}
		p.Generations[key] = bindingRecord{SpecificationDigest: b.SpecificationDigest, Source: b.Source}
	case old.SpecificationDigest != b.SpecificationDigest:
		return fmt.Errorf("%w: pool %q generation %d", ErrConflict, name, b.Generation)
	case b.Source != "" && old.Source != "" && old.Source != b.Source:
		return fmt.Errorf("%w: pool %q generation %d comes from release %q", ErrConflict, name, b.Generation, old.Source)
	case b.Source != "" && old.Source == "":
		p.Generations[key] = bindingRecord{SpecificationDigest: b.SpecificationDigest, Source: b.Source}
	}
	return nil
}

// apply computes the state a config of specs leads to from s (modified in
// place).
func apply(s map[string]*poolState, specs map[string]Spec) error {
	names := make([]string, 0, len(specs))
	for n := range specs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		spec := specs[name]
		if !IsName(name) {
			return fmt.Errorf("%w: pool name %q must be 1..63 characters of [a-z0-9-]", ErrInvalid, name)
		}
		if spec.Target < 0 || spec.Serving < 0 {
			return fmt.Errorf("%w: pool %q: generations must be positive", ErrInvalid, name)
		}
		p := s[name]
		if p == nil {
			p = &poolState{Generations: map[string]bindingRecord{}}
			s[name] = p
		}
		for _, b := range spec.Bindings {
			if err := bind(name, p, b); err != nil {
				return err
			}
		}
		want := configured{Target: spec.Target, Serving: spec.Serving}
		if p.Configured == nil || *p.Configured != want {
			p.Configured = &want
			p.Target = spec.Target
			p.Serving = nil
			if spec.Serving > 0 {
				v := spec.Serving
				p.Serving = &v
			}
		}
		if p.Target > 0 {
			if _, ok := p.Generations[strconv.FormatInt(p.Target, 10)]; !ok {
				return fmt.Errorf("%w: pool %q generation %d", ErrUnbound, name, p.Target)
			}
		}
	}
	return nil
}

// Check reports whether Configure would accept specs (a dry run).
func (r *Registry) Check(specs map[string]Spec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return apply(clone(r.state), specs)
}

// Configure makes specs the configured pools: it adds their bindings
// (refusing a conflict with a generation already bound), applies each
// pool's target and serving when they differ from those of the last
// config that applied them, persists the state, and returns undo, which
// puts back the state Configure replaced provided nothing changed it
// since (the gateway undoes a config that was stopped before it took
// over). Pools the config does not name stay in the state file but have
// no deployment. Errors wrap ErrInvalid, ErrConflict, ErrUnbound or
// ErrState; on error nothing changed.
func (r *Registry) Configure(specs map[string]Spec) (undo func(), err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := clone(r.state)
	if err := apply(next, specs); err != nil {
		return func() {}, err
	}
	if err := r.persist(next); err != nil {
		return func() {}, err
	}
	prevState, prevConfigured := r.state, r.configured
	r.state = next
	r.configured = map[string]bool{}
	for n := range specs {
		r.configured[n] = true
	}
	r.version++
	v := r.version
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.version != v {
			return
		}
		if r.persist(prevState) != nil {
			return
		}
		r.state, r.configured = prevState, prevConfigured
		r.version++
	}, nil
}

// persist writes s to the state file; r.mu is held.
func (r *Registry) persist(s map[string]*poolState) error {
	if r.path == "" {
		return nil
	}
	b, err := json.MarshalIndent(stateFile{Version: 1, Pools: s}, "", "  ")
	if err != nil {
		return fmt.Errorf("%w: %v", ErrState, err)
	}
	if err := atomicfile.Write(r.path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("%w: %v", ErrState, err)
	}
	return nil
}

// deployment returns p's deployment; r.mu is held.
func deployment(p *poolState) (proto.Deployment, bool) {
	if p == nil || p.Target <= 0 {
		return proto.Deployment{}, false
	}
	b, ok := p.Generations[strconv.FormatInt(p.Target, 10)]
	if !ok {
		return proto.Deployment{}, false
	}
	d := proto.Deployment{Generation: p.Target, SpecificationDigest: b.SpecificationDigest}
	if p.Serving != nil {
		s := *p.Serving
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
	b, ok := p.Generations[strconv.FormatInt(gen, 10)]
	if !ok {
		return Binding{}, false
	}
	return Binding{Generation: gen, SpecificationDigest: b.SpecificationDigest, Source: b.Source}, true
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
// new state is persisted before it takes effect. It returns the new
// deployment. Errors: ErrUnknownPool, ErrInvalid (target ≤ 0, serving ≤
// 0, a bad binding or one for another generation than target),
// ErrConflict, ErrUnbound (target has no digest), ErrState; on error
// nothing changed.
func (r *Registry) Set(name string, target int64, serving *int64, binding *Binding) (proto.Deployment, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.configured[name] {
		return proto.Deployment{}, fmt.Errorf("%w: %q", ErrUnknownPool, name)
	}
	if target <= 0 || (serving != nil && *serving <= 0) {
		return proto.Deployment{}, fmt.Errorf("%w: pool %q: generations must be positive", ErrInvalid, name)
	}
	next := clone(r.state)
	p := next[name]
	if binding != nil {
		if binding.Generation != target {
			return proto.Deployment{}, fmt.Errorf("%w: pool %q: the binding is for another generation than the target", ErrInvalid, name)
		}
		if err := bind(name, p, *binding); err != nil {
			return proto.Deployment{}, err
		}
	}
	if _, ok := p.Generations[strconv.FormatInt(target, 10)]; !ok {
		return proto.Deployment{}, fmt.Errorf("%w: pool %q generation %d", ErrUnbound, name, target)
	}
	p.Target = target
	p.Serving = nil
	if serving != nil {
		s := *serving
		p.Serving = &s
	}
	if err := r.persist(next); err != nil {
		return proto.Deployment{}, err
	}
	r.state = next
	r.version++
	d, _ := deployment(p)
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
		for g, b := range p.Generations {
			n, _ := strconv.ParseInt(g, 10, 64)
			s.Generations = append(s.Generations, Binding{Generation: n, SpecificationDigest: b.SpecificationDigest, Source: b.Source})
		}
		sort.Slice(s.Generations, func(i, j int) bool { return s.Generations[i].Generation < s.Generations[j].Generation })
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
