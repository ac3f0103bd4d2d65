package harness

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sandgate/sandgate/internal/freeport"
)

// TestBindWatch: the phrase is found when the gateway's log line arrives
// in pieces, and not in output that only resembles it.
func TestBindWatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   bool
	}{
		{"one write", []string{`{"msg":"listen tcp 127.0.0.1:1: bind: address already in use"}`}, true},
		{"split", []string{`bind: address al`, `ready in`, ` use"}`}, true},
		{"byte by byte", splitBytes("x address already in use y"), true},
		{"other failure", []string{`bind: permission denied`, `address already`, ` taken`}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &BindWatch{}
			for _, w := range tc.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if b.InUse() != tc.want {
				t.Fatalf("inUse = %v, want %v", b.InUse(), tc.want)
			}
			if len(b.tail) >= len(addrInUse) {
				t.Fatalf("kept %d bytes", len(b.tail))
			}
		})
	}
}

func splitBytes(s string) []string {
	out := make([]string, len(s))
	for i := range s {
		out[i] = s[i : i+1]
	}
	return out
}

// TestBindWatchLost: a start lost its port when the output said so or
// the error is freeport.ErrShared (wrapped or not), and not for another
// error with quiet output.
func TestBindWatchLost(t *testing.T) {
	other := errors.New("gateway exited: exit status 1")
	if (&BindWatch{}).Lost(other) {
		t.Fatal("another error with nothing in the output counts as a lost port")
	}
	if !(&BindWatch{}).Lost(fmt.Errorf("127.0.0.1:1: %w", freeport.ErrShared)) {
		t.Fatal("a shared port does not count as lost")
	}
	b := &BindWatch{}
	_, _ = b.Write([]byte(`listen tcp 127.0.0.1:1: bind: address already in use`))
	if !b.Lost(other) {
		t.Fatal("output naming the port in use does not count as lost")
	}
}
