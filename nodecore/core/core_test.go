package core

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/nodecore/credential"
	"github.com/sandgate/sandgate/nodecore/hub"
)

// refs is a Shared that counts references, as the app's UsagePool does.
type refs struct {
	mu     sync.Mutex
	held   map[string]io.Closer
	n      map[string]int
	closed []string
}

func newRefs() *refs { return &refs{held: map[string]io.Closer{}, n: map[string]int{}} }

func (r *refs) Hold(key string, open func() (io.Closer, error)) (io.Closer, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v, ok := r.held[key]; ok {
		r.n[key]++
		return v, true, nil
	}
	v, err := open()
	if err != nil {
		return nil, false, err
	}
	r.held[key], r.n[key] = v, 1
	return v, false, nil
}

func (r *refs) Release(key string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n[key] == 0 {
		return errors.New("released twice: " + key)
	}
	if r.n[key]--; r.n[key] > 0 {
		return nil
	}
	v := r.held[key]
	delete(r.held, key)
	r.closed = append(r.closed, key)
	return v.Close()
}

// total is the number of references held.
func (r *refs) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := 0
	for _, n := range r.n {
		t += n
	}
	return t
}

const digest7 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
const digest8 = "1123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// config is a one-gateway configuration with its state in dir and pool
// "default" at target.
func config(sh Shared, dir string, target int64) Config {
	return Config{
		StateDir: dir,
		Pools: map[string]*Pool{"default": {
			Generations: []PoolGeneration{{Generation: 7, SpecificationDigest: digest7}, {Generation: 8, SpecificationDigest: digest8}},
			Target:      target,
		}},
		Timers: testTimers,
		Shared: sh,
	}
}

var testTimers = hub.Timers{} // the protocol's defaults

// TestOpenReloadClose: a second configuration shares the first one's hub
// and state; Start makes its pools the running ones, Stop puts the first
// one's back, and the objects are closed only when both are closed, the
// hub last.
func TestOpenReloadClose(t *testing.T) {
	sh, dir := newRefs(), t.TempDir()
	first, err := Open(config(sh, dir, 7))
	if err != nil {
		t.Fatal(err)
	}
	if first.Enrolment() == nil || first.Credentials() == nil || first.Hub() == nil || first.Placements() == nil {
		t.Fatal("a state directory gives enrolment, credentials, a hub and placements")
	}
	if d, ok := first.Pools().Deployment("default"); !ok || d.Generation != 7 {
		t.Fatalf("the first configuration applies its pools at Open: %+v %v", d, ok)
	}
	if _, err := os.Stat(filepath.Join(dir, "pools.json")); err != nil {
		t.Errorf("pools.json: %v", err)
	}
	second, err := Open(config(sh, dir, 8))
	if err != nil {
		t.Fatal(err)
	}
	if second.Hub() != first.Hub() || second.Pools() != first.Pools() || second.Enrolment() != first.Enrolment() {
		t.Fatal("a reload shares the hub and the state")
	}
	if d, _ := second.Pools().Deployment("default"); d.Generation != 7 {
		t.Fatalf("a reload applies its pools at Start, not Open: generation %d", d.Generation)
	}
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	if d, _ := second.Pools().Deployment("default"); d.Generation != 8 {
		t.Fatalf("after Start: generation %d", d.Generation)
	}
	second.Stop(false, time.Second) // a failed reload: the first config's pools come back
	if d, _ := second.Pools().Deployment("default"); d.Generation != 7 {
		t.Fatalf("after Stop: generation %d", d.Generation)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if len(sh.closed) != 0 {
		t.Fatalf("closed while the first configuration holds them: %v", sh.closed)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if sh.total() != 0 {
		t.Fatalf("%d references left", sh.total())
	}
	if got := sh.closed[len(sh.closed)-1]; got != hubKey {
		t.Fatalf("closed %v: the hub is not last", sh.closed)
	}
	if err := first.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

// TestOpenRefusals: a refused configuration names its setting and leaves
// nothing held.
func TestOpenRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no way to authenticate nodes", func(c *Config) { c.StateDir = "" }, "a node credential source"},
		{"unbound target", func(c *Config) { c.Pools["default"].Target = 9 }, `pool "default": target generation 9 is not bound`},
		{"bad pool name", func(c *Config) { c.Pools["Bad"] = &Pool{} }, `pool "Bad": a pool name is`},
		{"deployment and pool default", func(c *Config) {
			c.Deployment = &Deployment{Generation: 1, SpecificationDigest: digest7}
		}, "deployment and pool default both"},
		{"release without a store", func(c *Config) {
			c.Pools["default"].Generations = append(c.Pools["default"].Generations, PoolGeneration{Generation: 9, Release: "rel-9"})
		}, "needs a release store"},
		{"unknown store", func(c *Config) { c.Store = "etcd" }, `store "etcd"`},
		{"kubernetes without the Portal cluster", func(c *Config) { c.Store = StoreKubernetes }, "needs the sandgate app's kubernetes block"},
		{"lower owner epoch", func(c *Config) { c.OwnerEpoch = 1 }, "owner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh, dir := newRefs(), t.TempDir()
			running, err := Open(Config{StateDir: dir, OwnerEpoch: 5, Timers: testTimers, Shared: sh})
			if err != nil {
				t.Fatal(err)
			}
			cfg := config(sh, dir, 7)
			cfg.OwnerEpoch = 5
			tc.edit(&cfg)
			if _, err := Open(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if err := running.Close(); err != nil {
				t.Fatal(err)
			}
			if sh.total() != 0 {
				t.Fatalf("%d references left after a refused Open", sh.total())
			}
		})
	}
}

// noNodes is an operator's credential source that knows no node.
type noNodes struct{}

func (noNodes) Authenticate(string, credential.Digest) (credential.Node, error) {
	return credential.Node{}, credential.ErrUnknownNode
}
func (noNodes) Nodes() []credential.Node { return nil }

// TestCredentialsMerge: the operator's source alone is used as it is; with
// enrolment the two are merged.
func TestCredentialsMerge(t *testing.T) {
	var operator credential.Store = noNodes{}
	sh := newRefs()
	c, err := Open(Config{Credentials: operator, Timers: testTimers, Shared: sh})
	if err != nil {
		t.Fatal(err)
	}
	if _, alone := c.Credentials().(noNodes); !alone || c.Enrolment() != nil {
		t.Fatalf("credentials %T, enrolment %v", c.Credentials(), c.Enrolment())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := Open(Config{Credentials: operator, StateDir: t.TempDir(), Timers: testTimers, Shared: sh})
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := d.Credentials().(credential.Merged); !ok || len(m) != 2 {
		t.Fatalf("with enrolment: %T %v", d.Credentials(), d.Credentials())
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}
