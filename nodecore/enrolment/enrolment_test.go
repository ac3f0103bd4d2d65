package enrolment

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
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

// TestPruning: Issue forgets expired tokens, and the state file is
// private.
func TestPruning(t *testing.T) {
	s, c, path := open(t)
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
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
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
