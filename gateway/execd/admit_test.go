package execd

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// TestReadAtAdmits: ReadAt (a process record's read, through Do) calls
// Target.Admit once the answer's head has arrived, before its body is read;
// a refusal is the call's error and the answer is closed unread (an execd
// that starts its answer and never ends it cannot hold the call).
func TestReadAtAdmits(t *testing.T) {
	bodyRead := make(chan struct{})
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusPartialContent)
		_, _ = io.WriteString(w, "{")
		http.NewResponseController(w).Flush()
		select { // the answer never ends while the test runs
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	fe, _ := url.Parse(srv.URL)
	refused := errors.New("no slot")
	var calls int
	tgt := Target{FixedEntry: fe, SandboxID: "sb1", Admit: func() error {
		calls++
		select {
		case <-bodyRead:
			t.Error("Admit after the body was read")
		default:
		}
		return refused
	}}
	_, err := (&Client{}).ReadAt(context.Background(), tgt, "/home/user/.rec", 0, 1024)
	if !errors.Is(err, refused) || calls != 1 {
		t.Fatalf("ReadAt = %v after %d Admit calls, want the refusal after 1", err, calls)
	}

	// Admitted, the read goes on as before.
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusPartialContent)
		_, _ = io.WriteString(w, "abc")
	}))
	defer ok.Close()
	fe, _ = url.Parse(ok.URL)
	calls = 0
	tgt = Target{FixedEntry: fe, SandboxID: "sb1", Admit: func() error { calls++; return nil }}
	b, err := (&Client{}).ReadAt(context.Background(), tgt, "/home/user/.rec", 0, 1024)
	if err != nil || string(b) != "abc" || calls != 1 {
		t.Fatalf("ReadAt = %q, %v after %d Admit calls", b, err, calls)
	}
}
