// Package enrolmenttest is the contract of an enrolment store, as tests:
// one-time tokens (issued for a pool, single use, expiring, one error for
// unknown, used and expired), enrolment (a new node with only its
// credential's SHA-256 stored), refusals that store nothing, and the
// operator's disable, enable and remove. The state file's tests and the
// Kubernetes store's tests (package nodecore/kubestore) both run it.
package enrolmenttest

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/credential"
	"github.com/sandgate/sandgate/nodecore/enrolment"
)

// Enrolments is what an enrolment store implements.
type Enrolments = enrolment.Enrolments

// Store is one empty store under test.
type Store struct {
	// Open returns a new store on the storage with clock now (each call a
	// restart of the gateway, or another replica).
	Open func(t *testing.T, now func() time.Time) Enrolments
	// Snapshot returns everything stored, as text: to show that a refusal
	// stored nothing and that no secret is stored.
	Snapshot func(t *testing.T) string
	// Broken returns a store on the storage whose writes fail (a file
	// that cannot be replaced, an identity the apiserver refuses writes
	// to); reads work.
	Broken func(t *testing.T, now func() time.Time) Enrolments
	// Shared is true for a store several replicas use at once: the
	// replica tests run too.
	Shared bool
}

// Values of the test requests.
var (
	Fingerprint  = strings.Repeat("f", 64)
	Digest       = strings.Repeat("7a", 32)
	Installation = "11111111-2222-4333-8444-555555555555"
)

// Clock is a settable clock.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock at 2026-12-01 12:00 UTC.
func NewClock() *Clock { return &Clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Add moves the clock.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Request is a valid enrolment request.
func Request() enrolment.Request {
	return enrolment.Request{InstallationID: Installation, Provider: proto.ProviderDocker, BackendFingerprint: Fingerprint,
		MaxActive: 4, MaxRetained: 2, GenerationManagement: true}
}

// Resolve7 enrols at generation 7.
func Resolve7(string) (enrolment.Generation, error) {
	return enrolment.Generation{Generation: 7, SpecificationDigest: Digest}, nil
}

// Run runs every contract test; newStore returns an empty store.
func Run(t *testing.T, newStore func(t *testing.T) Store) {
	t.Run("IssueEnrolAuthenticate", func(t *testing.T) { IssueEnrolAuthenticate(t, newStore(t)) })
	t.Run("RefusalsStoreNothing", func(t *testing.T) { RefusalsStoreNothing(t, newStore(t)) })
	t.Run("FailedWriteUsesNothing", func(t *testing.T) { FailedWriteUsesNothing(t, newStore(t)) })
	t.Run("ConcurrentUseOfOneToken", func(t *testing.T) { ConcurrentUseOfOneToken(t, newStore(t)) })
	t.Run("IssueRefusals", func(t *testing.T) { IssueRefusals(t, newStore(t)) })
	t.Run("DisableEnableRemove", func(t *testing.T) { DisableEnableRemove(t, newStore(t)) })
	if s := newStore(t); s.Shared {
		t.Run("Replicas", func(t *testing.T) { Replicas(t, s) })
	}
}

// IssueEnrolAuthenticate: a token for a pool, its preview, the
// enrolment, the node's credential authenticating it, nothing secret
// stored, and after a restart the node still enrolled and the token still
// used.
func IssueEnrolAuthenticate(t *testing.T, st Store) {
	c := NewClock()
	s := st.Open(t, c.Now)
	tok, exp, err := s.Issue("gpu", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != 43 || !exp.Equal(time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)) {
		t.Fatalf("%q %v", tok, exp)
	}
	if p, err := s.Check(tok); err != nil || p != "gpu" {
		t.Fatalf("Check: %q %v", p, err)
	}
	e, err := s.Enrol(tok, Request(), func(p string) (enrolment.Generation, error) {
		if p != "gpu" {
			t.Errorf("resolve got pool %q", p)
		}
		return Resolve7(p)
	})
	if err != nil {
		t.Fatal(err)
	}
	n := e.Node
	if !proto.IsUUID(n.NodeID) || n.Pool != "gpu" || n.DeploymentGeneration != 7 || n.SpecificationDigest != Digest ||
		!n.GenerationManagement || !n.Enabled || n.InstallationID != Installation || n.Provider != "docker" ||
		n.BackendFingerprint != Fingerprint || len(e.Credential) != 43 {
		t.Fatalf("%+v", e)
	}
	if got, err := s.Authenticate(n.NodeID, credential.Sum(e.Credential)); err != nil || got != n {
		t.Fatalf("Authenticate: %+v %v", got, err)
	}
	if _, err := s.Authenticate(n.NodeID, credential.Sum(tok)); !errors.Is(err, credential.ErrMismatch) {
		t.Fatalf("wrong credential: %v", err)
	}
	if _, err := s.Authenticate("0e000000-0000-4000-8000-00000000000e", credential.Sum(e.Credential)); !errors.Is(err, credential.ErrUnknownNode) {
		t.Fatalf("unknown node: %v", err)
	}
	if ns := s.Nodes(); len(ns) != 1 || ns[0] != n {
		t.Fatalf("%+v", ns)
	}
	if got, ok := credential.Find(s, n.NodeID); !ok || got != n {
		t.Fatalf("Find: %+v %v", got, ok)
	}
	if _, ok := credential.Find(s, "0e000000-0000-4000-8000-00000000000e"); ok {
		t.Fatal("Find: an unknown node was found")
	}
	rs := s.Records()
	if len(rs) != 1 || rs[0].NodeID != n.NodeID || rs[0].Pool != "gpu" || rs[0].MaxActive != 4 || rs[0].MaxRetained != 2 ||
		!rs[0].EnrolledAt.Equal(c.Now()) || !rs[0].Enabled {
		t.Fatalf("%+v", rs)
	}
	// The store holds digests, never the token or the credential.
	if snap := st.Snapshot(t); strings.Contains(snap, tok) || strings.Contains(snap, e.Credential) {
		t.Fatal("the store holds a secret")
	}
	// A restart reads the same node and still refuses the used token.
	s2 := st.Open(t, c.Now)
	if _, err := s2.Authenticate(n.NodeID, credential.Sum(e.Credential)); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Check(tok); !errors.Is(err, enrolment.ErrRefused) {
		t.Fatalf("used token after restart: %v", err)
	}
	if _, err := s2.Enrol(tok, Request(), Resolve7); !errors.Is(err, enrolment.ErrRefused) {
		t.Fatalf("used token after restart: %v", err)
	}
}

// RefusalsStoreNothing: a reused, expired or unknown token, a resolve
// failure and a malformed request each refuse the enrolment with their
// error class and store nothing.
func RefusalsStoreNothing(t *testing.T, st Store) {
	c := NewClock()
	s := st.Open(t, c.Now)
	used, _, _ := s.Issue("default", time.Hour)
	if _, err := s.Enrol(used, Request(), Resolve7); err != nil {
		t.Fatal(err)
	}
	expiring, _, _ := s.Issue("default", time.Minute)
	fresh, _, _ := s.Issue("default", time.Hour)
	c.Add(time.Minute)
	// unknown differs from fresh in its first character only.
	unknown := "x" + fresh[1:]
	if fresh[0] == 'x' {
		unknown = "y" + fresh[1:]
	}
	before := st.Snapshot(t)
	noDeployment := errors.New("no deployment")
	for name, tc := range map[string]struct {
		token   string
		req     enrolment.Request
		resolve func(string) (enrolment.Generation, error)
		want    error
	}{
		"reused":        {used, Request(), Resolve7, enrolment.ErrRefused},
		"expired":       {expiring, Request(), Resolve7, enrolment.ErrRefused},
		"unknown":       {unknown, Request(), Resolve7, enrolment.ErrRefused},
		"empty":         {"", Request(), Resolve7, enrolment.ErrRefused},
		"too long":      {strings.Repeat("x", 600), Request(), Resolve7, enrolment.ErrRefused},
		"resolve fails": {fresh, Request(), func(string) (enrolment.Generation, error) { return enrolment.Generation{}, noDeployment }, noDeployment},
		"bad request":   {fresh, enrolment.Request{InstallationID: "x"}, Resolve7, enrolment.ErrInvalid},
	} {
		if _, err := s.Enrol(tc.token, tc.req, tc.resolve); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	for _, tok := range []string{used, expiring, unknown, ""} {
		if _, err := s.Check(tok); !errors.Is(err, enrolment.ErrRefused) {
			t.Errorf("Check: %v", err)
		}
	}
	if after := st.Snapshot(t); before != after || len(s.Nodes()) != 1 {
		t.Fatalf("a refused enrolment changed the store:\n%s\n%s", before, after)
	}
	if p, err := s.Check(fresh); err != nil || p != "default" {
		t.Fatalf("the fresh token: %q %v", p, err)
	}
}

// FailedWriteUsesNothing: an enrolment whose write fails is refused with
// enrolment.ErrState; the token stays usable and no node is added.
func FailedWriteUsesNothing(t *testing.T, st Store) {
	c := NewClock()
	s := st.Open(t, c.Now)
	fresh, _, err := s.Issue("default", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	b := st.Broken(t, c.Now)
	if _, err := b.Enrol(fresh, Request(), Resolve7); !errors.Is(err, enrolment.ErrState) {
		t.Fatalf("failed write: %v", err)
	}
	if _, _, err := b.Issue("default", time.Hour); !errors.Is(err, enrolment.ErrState) {
		t.Fatalf("failed Issue: %v", err)
	}
	if _, err := b.Check(fresh); err != nil {
		t.Fatalf("the token was used by a failed write: %v", err)
	}
	if len(b.Nodes()) != 0 || len(b.Records()) != 0 {
		t.Fatal("a node was added by a failed write")
	}
}

// ConcurrentUseOfOneToken: eight enrolments with one token at once enrol
// exactly one node; the others are refused with ErrRefused.
func ConcurrentUseOfOneToken(t *testing.T, st Store) {
	s := st.Open(t, nil)
	tok, _, _ := s.Issue("default", time.Hour)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Enrol(tok, Request(), Resolve7); err == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			} else if !errors.Is(err, enrolment.ErrRefused) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if ok != 1 || len(s.Nodes()) != 1 || len(st.Open(t, nil).Nodes()) != 1 {
		t.Fatalf("%d enrolments with one token", ok)
	}
}

// IssueRefusals: a bad pool name or lifetime is refused with ErrInvalid
// and stores nothing; an expired token is refused.
func IssueRefusals(t *testing.T, st Store) {
	c := NewClock()
	s := st.Open(t, c.Now)
	before := st.Snapshot(t)
	for name, tc := range map[string]struct {
		pool string
		ttl  time.Duration
	}{
		"bad pool":  {"Default", time.Hour},
		"short ttl": {"default", time.Second},
		"long ttl":  {"default", 31 * 24 * time.Hour},
	} {
		if _, _, err := s.Issue(tc.pool, tc.ttl); !errors.Is(err, enrolment.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if after := st.Snapshot(t); after != before {
		t.Fatal("a refused Issue stored something")
	}
	old, _, _ := s.Issue("default", time.Minute)
	if _, exp, err := s.Issue("default", 0); err != nil || !exp.Equal(c.Now().Add(enrolment.DefaultTTL)) {
		t.Fatal(exp, err)
	}
	c.Add(2 * time.Minute)
	if _, err := s.Check(old); !errors.Is(err, enrolment.ErrRefused) {
		t.Fatal(err)
	}
}

// DisableEnableRemove: a disabled node is refused (ErrDisabled), also
// after a restart; enabled again it authenticates; removed it is unknown.
func DisableEnableRemove(t *testing.T, st Store) {
	s := st.Open(t, nil)
	tok, _, _ := s.Issue("default", time.Hour)
	e, err := s.Enrol(tok, Request(), Resolve7)
	if err != nil {
		t.Fatal(err)
	}
	id, cred := e.Node.NodeID, credential.Sum(e.Credential)
	if found, err := s.SetEnabled(id, false); !found || err != nil {
		t.Fatal(found, err)
	}
	if _, err := s.Authenticate(id, cred); !errors.Is(err, credential.ErrDisabled) {
		t.Fatalf("disabled: %v", err)
	}
	if rs := s.Records(); len(rs) != 1 || rs[0].Enabled || rs[0].NodeID != id || rs[0].MaxRetained != 2 {
		t.Fatalf("%+v", rs)
	}
	// The change survives a restart.
	if _, err := st.Open(t, nil).Authenticate(id, cred); !errors.Is(err, credential.ErrDisabled) {
		t.Fatalf("disabled after a restart: %v", err)
	}
	if found, err := s.SetEnabled(id, true); !found || err != nil {
		t.Fatal(found, err)
	}
	if _, err := s.Authenticate(id, cred); err != nil {
		t.Fatal(err)
	}
	if found, err := s.Remove(id); !found || err != nil {
		t.Fatal(found, err)
	}
	if _, err := s.Authenticate(id, cred); !errors.Is(err, credential.ErrUnknownNode) {
		t.Fatalf("removed: %v", err)
	}
	if found, _ := s.Remove(id); found {
		t.Fatal("removed twice")
	}
	if found, _ := s.SetEnabled("0e000000-0000-4000-8000-00000000000e", false); found {
		t.Fatal("an unknown node was found")
	}
	if _, err := st.Open(t, nil).Authenticate(id, cred); !errors.Is(err, credential.ErrUnknownNode) {
		t.Fatalf("removed, after a restart: %v", err)
	}
}

// Replicas: two stores on one shared storage, as two gateway replicas. A
// token issued on A is usable on B at once, and only once (a second use
// on A is refused); the node enrolled on B authenticates on A at once;
// eight enrolments with one token spread over both enrol exactly one
// node.
func Replicas(t *testing.T, st Store) {
	a, b := st.Open(t, nil), st.Open(t, nil)
	tok, _, err := a.Issue("default", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := b.Check(tok); err != nil || p != "default" {
		t.Fatalf("B's preview of A's token: %q %v", p, err)
	}
	e, err := b.Enrol(tok, Request(), Resolve7)
	if err != nil {
		t.Fatalf("B enrols with A's token: %v", err)
	}
	if _, err := a.Enrol(tok, Request(), Resolve7); !errors.Is(err, enrolment.ErrRefused) {
		t.Fatalf("second use on A: %v", err)
	}
	// Authentication on A right after the enrolment on B: a node ID A's
	// view does not know yet is read from the store (credential.Refresher).
	var auth credential.Store = a
	if _, ok := a.(credential.Refresher); ok {
		auth = credential.Merged{a}
	}
	if _, err := auth.Authenticate(e.Node.NodeID, credential.Sum(e.Credential)); err != nil {
		t.Fatalf("A authenticates the node enrolled on B: %v", err)
	}
	tok2, _, _ := a.Issue("default", time.Hour)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			if _, err := s.Enrol(tok2, Request(), Resolve7); err == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			} else if !errors.Is(err, enrolment.ErrRefused) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if ok != 1 || len(st.Open(t, nil).Nodes()) != 2 {
		t.Fatalf("%d enrolments with one token across two replicas", ok)
	}
}
