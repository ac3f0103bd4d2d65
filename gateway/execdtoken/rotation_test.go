package execdtoken

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// fakeExecd answers Accepts as an execd started with token would, counting
// the questions; fail, when set, is every answer's error.
type fakeExecd struct {
	token string
	fail  error
	asked []string
}

func (f *fakeExecd) accepts(_ context.Context, tok string) (bool, error) {
	f.asked = append(f.asked, tok)
	if f.fail != nil {
		return false, f.fail
	}
	return tok == f.token, nil
}

// TestChooserFindsEachSandboxsSecret: with two secrets, a sandbox created
// under either one is sent its own token; the choice is asked once and
// then remembered; a secret dropped from the list is no longer used; an
// unanswered question is not remembered; Forget asks again.
func TestChooserFindsEachSandboxsSecret(t *testing.T) {
	oldS, newS := []byte(strings.Repeat("o", 32)), []byte(strings.Repeat("n", 32))
	both := [][]byte{oldS, newS}
	var c Chooser
	ctx := t.Context()

	old := &fakeExecd{token: Derive(oldS, "sbx-old")}
	nw := &fakeExecd{token: Derive(newS, "sbx-new")}
	for range 3 {
		if got := c.Token(ctx, "c1", "sbx-old", both, old.accepts); got != old.token {
			t.Fatalf("old sandbox: token %q, want the old secret's", got)
		}
		if got := c.Token(ctx, "c1", "sbx-new", both, nw.accepts); got != nw.token {
			t.Fatalf("new sandbox: token %q, want the new secret's", got)
		}
	}
	if len(old.asked) != 1 || len(nw.asked) != 2 {
		t.Errorf("asked the old sandbox %d times and the new one %d times, want 1 and 2 (then remembered)", len(old.asked), len(nw.asked))
	}
	// The same sandbox ID in another cluster is another sandbox.
	other := &fakeExecd{token: Derive(oldS, "sbx-new")}
	if got := c.Token(ctx, "c2", "sbx-new", both, other.accepts); got != other.token {
		t.Errorf("cluster c2's sbx-new: token %q, want the old secret's", got)
	}

	// The old secret removed (the rotation's last step): the new
	// sandbox's remembered secret is still there and used, unasked.
	nw.asked = nil
	if got := c.Token(ctx, "c1", "sbx-new", [][]byte{newS}, nw.accepts); got != nw.token || len(nw.asked) != 0 {
		t.Errorf("one secret: token %q after %d questions, want the new secret's without asking", got, len(nw.asked))
	}
	// A list without the remembered secret asks again.
	third := []byte(strings.Repeat("t", 32))
	nw.asked = nil
	if got := c.Token(ctx, "c1", "sbx-new", [][]byte{third, oldS}, nw.accepts); got != Derive(third, "sbx-new") || len(nw.asked) != 2 {
		t.Errorf("without the remembered secret: token %q after %d questions, want the first secret's after 2", got, len(nw.asked))
	}

	// No answer (the sandbox not ready, the entry unreachable): the
	// first secret's token, nothing remembered, the first error stops.
	down := &fakeExecd{token: Derive(newS, "sbx-down"), fail: errors.New("unreachable")}
	if got := c.Token(ctx, "c1", "sbx-down", both, down.accepts); got != Derive(oldS, "sbx-down") || len(down.asked) != 1 {
		t.Errorf("unreachable: token %q after %d questions, want the first secret's after 1", got, len(down.asked))
	}
	down.fail = nil
	if got := c.Token(ctx, "c1", "sbx-down", both, down.accepts); got != down.token || len(down.asked) != 3 {
		t.Errorf("reachable again: token %q after %d questions, want the new secret's after 3", got, len(down.asked))
	}
	// Refused by both: the first secret's token, not remembered.
	stray := &fakeExecd{token: "started with something else"}
	c.Token(ctx, "c1", "sbx-stray", both, stray.accepts)
	c.Token(ctx, "c1", "sbx-stray", both, stray.accepts)
	if len(stray.asked) != 4 {
		t.Errorf("a sandbox no secret opens was asked %d times in two requests, want 4", len(stray.asked))
	}

	c.Forget("c1", "sbx-old")
	c.Token(ctx, "c1", "sbx-old", both, old.accepts)
	if len(old.asked) != 2 {
		t.Errorf("after Forget the old sandbox was asked %d times in all, want 2", len(old.asked))
	}
}

// TestChooserOneSecretAsksNothing: with one secret the token is derived
// at once, as before rotations existed.
func TestChooserOneSecretAsksNothing(t *testing.T) {
	s := []byte(strings.Repeat("s", 32))
	var c Chooser
	f := &fakeExecd{}
	if got := c.Token(t.Context(), "c1", "sbx", [][]byte{s}, f.accepts); got != Derive(s, "sbx") || len(f.asked) != 0 {
		t.Errorf("one secret: %q after %d questions", got, len(f.asked))
	}
	if got := c.Token(t.Context(), "c1", "sbx", nil, f.accepts); got != "" {
		t.Errorf("no secret: %q, want none", got)
	}
}

// TestChooserBounded: past MaxSandboxes, remembering one more forgets
// another.
func TestChooserBounded(t *testing.T) {
	a, b := []byte(strings.Repeat("a", 32)), []byte(strings.Repeat("b", 32))
	c := Chooser{MaxSandboxes: 8}
	for i := range 100 {
		id := "sbx-" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26))
		f := &fakeExecd{token: Derive(b, id)}
		if got := c.Token(t.Context(), "c1", id, [][]byte{a, b}, f.accepts); got != f.token {
			t.Fatalf("%s: wrong token", id)
		}
	}
	if n := c.Len(); n != 8 {
		t.Errorf("remembers %d sandboxes, want the bound 8", n)
	}
}
