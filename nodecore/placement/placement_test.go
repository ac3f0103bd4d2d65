package placement

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sandgate/sandgate/node/proto"
)

const nodeA = "0a000000-0000-4000-8000-00000000000a"

func pl(gen int64, alloc string) Placement {
	return Placement{NodeID: nodeA, Generation: gen, Reference: proto.Reference{TenantID: "t", EnvironmentID: "e", AllocationID: alloc}}
}

func TestFileReplays(t *testing.T) {
	path := filepath.Join(t.TempDir(), "placements.jsonl")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []Placement{pl(1, "a"), pl(2, "c"), pl(1, "a")} {
		if err := s.Place(p); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := s.Release(pl(1, "a")); !ok || err != nil {
		t.Fatal(ok, err)
	}
	_ = s.Close()
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.List(nodeA); len(got) != 1 || got[0] != pl(2, "c") {
		t.Fatalf("after a restart: %+v", got)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
}

// TestFileTornLine: a crash in the middle of an append leaves a line
// without its newline; the journal is opened without it (that placement
// was never acknowledged) and the line is cut off.
func TestFileTornLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "placements.jsonl")
	s, _ := Open(path)
	_ = s.Place(pl(1, "a"))
	_ = s.Close()
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	_, _ = f.WriteString(`{"op":"place","node_id":"` + nodeA + `","gener`)
	f.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.List(nodeA); len(got) != 1 {
		t.Fatalf("%+v", got)
	}
	_ = s.Place(pl(2, "b"))
	_ = s.Close()
	s, err = Open(path)
	if err != nil || len(s.List(nodeA)) != 2 {
		t.Fatalf("after the torn line was cut: %v %+v", err, s.List(nodeA))
	}
	s.Close()
}

func TestFileRefusesMalformedJournal(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"not JSON":       "{\n",
		"unknown member": `{"op":"place","node_id":"` + nodeA + `","generation":1,"reference":{"tenant_id":"t","environment_id":"e","allocation_id":"a"},"x":1}` + "\n",
		"bad op":         `{"op":"drop","node_id":"` + nodeA + `","generation":1,"reference":{"tenant_id":"t","environment_id":"e","allocation_id":"a"}}` + "\n",
		"bad node":       `{"op":"place","node_id":"x","generation":1,"reference":{"tenant_id":"t","environment_id":"e","allocation_id":"a"}}` + "\n",
		"long line":      strings.Repeat("x", MaxLine+10) + "\n",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		_ = os.WriteFile(p, []byte(content), 0o600)
		if _, err := Open(p); !errors.Is(err, ErrJournal) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestFileCompacts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "placements.jsonl")
	s, _ := Open(path)
	defer s.Close()
	s.compactAt = 32
	_ = s.Place(pl(9, "keep"))
	for i := range 60 {
		p := pl(1, fmt.Sprintf("a%d", i))
		_ = s.Place(p)
		_, _ = s.Release(p)
	}
	b, _ := os.ReadFile(path)
	if n := strings.Count(string(b), "\n"); n >= 2*32 {
		t.Fatalf("the journal was not compacted: %d lines", n)
	}
	s2, err := Open(path)
	if err != nil || len(s2.List(nodeA)) != 1 {
		t.Fatalf("after compaction: %v", err)
	}
	s2.Close()
}

func TestFileWriteFailureChangesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "placements.jsonl")
	s, _ := Open(path)
	_ = s.f.Close() // the descriptor is gone: every append fails
	if err := s.Place(pl(1, "a")); !errors.Is(err, ErrJournal) {
		t.Fatal(err)
	}
	if s.InUse(nodeA, 1) {
		t.Fatal("a placement that was not written is in use")
	}
}

// BenchmarkFilePlace: new placements one after another (one fsync each).
func BenchmarkFilePlace(b *testing.B) {
	s, _ := Open(filepath.Join(b.TempDir(), "placements.jsonl"))
	defer s.Close()
	for i := 0; b.Loop(); i++ {
		_ = s.Place(pl(1, fmt.Sprintf("a%d", i)))
	}
}

// BenchmarkFilePlaceParallel: new placements from 64 goroutines, which
// share fsyncs.
func BenchmarkFilePlaceParallel(b *testing.B) {
	s, _ := Open(filepath.Join(b.TempDir(), "placements.jsonl"))
	defer s.Close()
	var n atomic.Int64
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = s.Place(pl(1, fmt.Sprintf("a%d", n.Add(1))))
		}
	})
}
