package pool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/sandgate/sandgate/internal/atomicfile"
)

// File is the Backend of one gateway: a JSON state file (mode 0600)
// replaced atomically (internal/atomicfile) by every Save. Versions are
// not used: one process writes the file.
type File struct {
	// Path is the state file; it is created by the first Save.
	Path string

	mu  sync.Mutex
	cur map[string]*State // the file's content after Load or Save
}

// fileState is the state file.
type fileState struct {
	Version int                  `json:"version"`
	Pools   map[string]*filePool `json:"pools"`
}

// filePool is one pool in the state file.
type filePool struct {
	Target  int64  `json:"target,omitempty"`
	Serving *int64 `json:"serving"`
	// Configured is the target and serving of the last config that
	// applied them.
	Configured  *fileConfigured          `json:"configured,omitempty"`
	Generations map[string]bindingRecord `json:"generations"`
}

type fileConfigured struct {
	Target  int64 `json:"target"`
	Serving int64 `json:"serving"`
}

type bindingRecord struct {
	SpecificationDigest string `json:"specification_digest"`
	Source              string `json:"source,omitempty"`
}

// Load implements Backend: the pools of the state file, none when it does
// not exist. Errors wrap ErrState.
func (f *File) Load() (map[string]*State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]*State{}
	b, err := os.ReadFile(f.Path)
	if errors.Is(err, os.ErrNotExist) {
		f.cur = out
		return clone(out), nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrState, err)
	}
	var fs fileState
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fs); err != nil || fs.Version != 1 {
		return nil, fmt.Errorf("%w: %s is not a pool state file of version 1", ErrState, f.Path)
	}
	for name, p := range fs.Pools {
		if p == nil || (p.Serving != nil && *p.Serving <= 0) {
			return nil, fmt.Errorf("%w: %s: pool %q is malformed", ErrState, f.Path, name)
		}
		s := &State{Target: p.Target, Generations: map[int64]Binding{}}
		if p.Serving != nil {
			s.Serving = *p.Serving
		}
		if p.Configured != nil {
			s.Configured = &Configured{Target: p.Configured.Target, Serving: p.Configured.Serving}
		}
		for g, b := range p.Generations {
			n, err := strconv.ParseInt(g, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: pool %q has a malformed generation", ErrState, f.Path, name)
			}
			s.Generations[n] = Binding{Generation: n, SpecificationDigest: b.SpecificationDigest, Source: b.Source}
		}
		if err := s.Validate(name); err != nil {
			return nil, fmt.Errorf("%w (%s)", err, f.Path)
		}
		out[name] = s
	}
	f.cur = out
	return clone(out), nil
}

// Save implements Backend: the whole file is replaced with the changes
// applied; on error the file is as it was.
func (f *File) Save(changes []Change) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur == nil {
		f.cur = map[string]*State{}
	}
	next := clone(f.cur)
	for _, c := range changes {
		if c.To == nil {
			delete(next, c.Name)
		} else {
			next[c.Name] = c.To.Clone()
		}
	}
	fs := fileState{Version: 1, Pools: map[string]*filePool{}}
	for name, s := range next {
		p := &filePool{Target: s.Target, Generations: map[string]bindingRecord{}}
		if s.Serving > 0 {
			v := s.Serving
			p.Serving = &v
		}
		if s.Configured != nil {
			p.Configured = &fileConfigured{Target: s.Configured.Target, Serving: s.Configured.Serving}
		}
		for g, b := range s.Generations {
			p.Generations[strconv.FormatInt(g, 10)] = bindingRecord{SpecificationDigest: b.SpecificationDigest, Source: b.Source}
		}
		fs.Pools[name] = p
	}
	b, err := json.MarshalIndent(fs, "", "  ")
	if err != nil {
		return fmt.Errorf("%w: %v", ErrState, err)
	}
	if err := atomicfile.Write(f.Path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("%w: %v", ErrState, err)
	}
	f.cur = next
	return nil
}

var _ Backend = (*File)(nil)
