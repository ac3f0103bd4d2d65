package enrolment

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/node/credential"
	"github.com/sandgate/sandgate/node/proto"
)

var (
	fp     = strings.Repeat("f", 64)
	digest = strings.Repeat("7a", 32)
	inst   = "11111111-2222-4333-8444-555555555555"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func request() Request {
	return Request{InstallationID: inst, Provider: proto.ProviderDocker, BackendFingerprint: fp, MaxActive: 4, MaxRetained: 2,
		GenerationManagement: true}
}

func resolve7(string) (Generation, error) {
	return Generation{Generation: 7, SpecificationDigest: digest}, nil
}

func open(t *testing.T) (*Store, *clock, string) {
	t.Helper()
	c := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	path := filepath.Join(t.TempDir(), "enrolment.json")
	s, err := Open(path, c.now)
	if err != nil {
		t.Fatal(err)
	}
	return s, c, path
}

func TestIssueEnrolAuthenticate(t *testing.T) {
	s, _, path := open(t)
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
	e, err := s.Enrol(tok, request(), func(p string) (Generation, error) {
		if p != "gpu" {
			t.Errorf("resolve got pool %q", p)
		}
		return resolve7(p)
	})
	if err != nil {
		t.Fatal(err)
	}
	n := e.Node
	if !proto.IsUUID(n.NodeID) || n.Pool != "gpu" || n.DeploymentGeneration != 7 || n.SpecificationDigest != digest ||
		!n.GenerationManagement || !n.Enabled || n.InstallationID != inst || len(e.Credential) != 43 {
		t.Fatalf("%+v", e)
	}
	if got, err := s.Authenticate(n.NodeID, credential.Sum(e.Credential)); err != nil || got != n {
		t.Fatalf("Authenticate: %+v %v", got, err)
	}
	if _, err := s.Authenticate(n.NodeID, credential.Sum(tok)); !errors.Is(err, credential.ErrMismatch) {
		t.Fatalf("wrong credential: %v", err)
	}
	if ns := s.Nodes(); len(ns) != 1 || ns[0] != n {
		t.Fatalf("%+v", ns)
	}
	// The file holds digests, never the token or the credential.
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), tok) || strings.Contains(string(b), e.Credential) {
		t.Fatal("the state file holds a secret")
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	// A restart reads the same node and still refuses the used token.
	s2, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Authenticate(n.NodeID, credential.Sum(e.Credential)); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Check(tok); !errors.Is(err, ErrRefused) {
		t.Fatalf("used token after restart: %v", err)
	}
}

// TestRefusalsWriteNothing: a reused, expired or unknown token, a resolve
// failure, a malformed request and a failed write each refuse the
// enrolment with the same error class and leave the file as it was.
func TestRefusalsWriteNothing(t *testing.T) {
	s, c, path := open(t)
	used, _, _ := s.Issue("default", time.Hour)
	if _, err := s.Enrol(used, request(), resolve7); err != nil {
		t.Fatal(err)
	}
	expiring, _, _ := s.Issue("default", time.Minute)
	fresh, _, _ := s.Issue("default", time.Hour)
	c.add(time.Minute)
	before, _ := os.ReadFile(path)
	noDeployment := errors.New("no deployment")
	for name, tc := range map[string]struct {
		token   string
		req     Request
		resolve func(string) (Generation, error)
		want    error
	}{
		"reused":        {used, request(), resolve7, ErrRefused},
		"expired":       {expiring, request(), resolve7, ErrRefused},
		"unknown":       {"x" + fresh[1:], request(), resolve7, ErrRefused},
		"empty":         {"", request(), resolve7, ErrRefused},
		"resolve fails": {fresh, request(), func(string) (Generation, error) { return Generation{}, noDeployment }, noDeployment},
		"bad request":   {fresh, Request{InstallationID: "x"}, resolve7, ErrInvalid},
	} {
		if _, err := s.Enrol(tc.token, tc.req, tc.resolve); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	after, _ := os.ReadFile(path)
	if string(before) != string(after) || len(s.Nodes()) != 1 {
		t.Fatal("a refused enrolment changed the store")
	}
	// A write that fails uses nothing: the state file's path is made a
	// non-empty directory, so the rename over it fails (whoever runs the
	// test, root included).
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enrol(fresh, request(), resolve7); !errors.Is(err, ErrState) {
		t.Fatalf("failed write: %v", err)
	}
	if _, err := s.Check(fresh); err != nil {
		t.Fatalf("the token was used by a failed write: %v", err)
	}
	if len(s.Nodes()) != 1 {
		t.Fatal("a node was added by a failed write")
	}
}

func TestConcurrentUseOfOneToken(t *testing.T) {
	s, _, _ := open(t)
	tok, _, _ := s.Issue("default", time.Hour)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Enrol(tok, request(), resolve7); err == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			} else if !errors.Is(err, ErrRefused) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if ok != 1 || len(s.Nodes()) != 1 {
		t.Fatalf("%d enrolments with one token", ok)
	}
}

func TestIssueRefusalsAndPruning(t *testing.T) {
	s, c, path := open(t)
	for name, tc := range map[string]struct {
		pool string
		ttl  time.Duration
	}{
		"bad pool":  {"Default", time.Hour},
		"short ttl": {"default", time.Second},
		"long ttl":  {"default", 31 * 24 * time.Hour},
	} {
		if _, _, err := s.Issue(tc.pool, tc.ttl); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a refused Issue wrote the file")
	}
	old, _, _ := s.Issue("default", time.Minute)
	c.add(2 * time.Minute)
	if _, _, err := s.Issue("default", 0); err != nil {
		t.Fatal(err)
	}
	if len(s.state.Tokens) != 1 {
		t.Fatalf("the expired token was not pruned: %d tokens", len(s.state.Tokens))
	}
	if _, err := s.Check(old); !errors.Is(err, ErrRefused) {
		t.Fatal(err)
	}
}

func TestOpenRefusesCorruptFiles(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"not JSON":     "{",
		"version 2":    `{"version": 2, "tokens": [], "nodes": []}`,
		"unknown":      `{"version": 1, "tokens": [], "nodes": [], "extra": 1}`,
		"bad token":    `{"version": 1, "tokens": [{"token_sha256": "x", "pool": "p", "expires_at": "2026-01-01T00:00:00Z"}], "nodes": []}`,
		"bad node id":  `{"version": 1, "tokens": [], "nodes": [{"node_id": "x", "credential_sha256": "` + digest + `", "pool": "p"}]}`,
		"bad cred sha": `{"version": 1, "tokens": [], "nodes": [{"node_id": "` + inst + `", "credential_sha256": "x", "pool": "p"}]}`,
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		_ = os.WriteFile(p, []byte(content), 0o600)
		if _, err := Open(p, nil); !errors.Is(err, ErrState) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestDisableEnableRemove(t *testing.T) {
	s, _, path := open(t)
	tok, _, _ := s.Issue("default", time.Hour)
	e, err := s.Enrol(tok, request(), resolve7)
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
	s2, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Authenticate(id, cred); !errors.Is(err, credential.ErrDisabled) {
		t.Fatalf("disabled after a restart: %v", err)
	}
	if found, _ := s.SetEnabled(id, true); !found {
		t.Fatal("not found")
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
}
