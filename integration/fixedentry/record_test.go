package fixedentry_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/integration/fixedentry"
)

// TestResetDuringRequest: ResetRequests while a request is in flight
// neither breaks that request nor the Ingress: the request completes with
// the upstream's answer, the next one is served and recorded, and the
// record lists only requests that arrived after the reset.
func TestResetDuringRequest(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		_, _ = io.WriteString(w, "done "+r.URL.Path)
	}))
	t.Cleanup(backend.Close)
	in := fixedentry.New()
	front := httptest.NewServer(in)
	t.Cleanup(front.Close)
	t.Cleanup(in.CloseIdleConnections)
	in.SetSandbox("sbx-1", fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1",
		Ports: map[int]string{44772: strings.TrimPrefix(backend.URL, "http://")}})
	// The client's timeout is a safety net that turns a deadlocked
	// stand-in into a failure instead of a hung test.
	client := &http.Client{Timeout: waitLimit}
	get := func(path string) (string, error) {
		resp, err := client.Get(front.URL + "/sbx-1/44772" + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}

	slow := make(chan error, 1)
	go func() {
		body, err := get("/slow")
		if err == nil && body != "done /slow" {
			err = &unexpectedBody{body}
		}
		slow <- err
	}()
	select {
	case <-entered:
	case <-time.After(waitLimit):
		t.Fatal("the request never reached the upstream")
	}
	in.ResetRequests()
	close(release)
	if err := <-slow; err != nil {
		t.Fatalf("the request in flight during the reset: %v", err)
	}
	if body, err := get("/next"); err != nil || body != "done /next" {
		t.Fatalf("the request after the reset: %q, %v", body, err)
	}
	recs := make(chan []fixedentry.Request, 1)
	go func() { recs <- in.Requests() }()
	select {
	case got := <-recs:
		if len(got) != 1 || got[0].UpstreamPath != "/next" || got[0].Status != http.StatusOK || got[0].Seq != 2 {
			t.Fatalf("record after the reset = %+v", got)
		}
	case <-time.After(waitLimit):
		t.Fatal("Requests blocked: the Ingress's lock was never released")
	}
	if n := in.Received(); n != 2 {
		t.Fatalf("Received() = %d, want 2", n)
	}
}

type unexpectedBody struct{ body string }

func (e *unexpectedBody) Error() string { return "unexpected body " + e.body }

// TestRecordIsBounded: the record keeps the most recent requests up to
// its limit while Received counts them all; RequestsAfter selects by
// arrival number; a limit of 0 records nothing and lowering the limit
// drops the oldest records at once.
func TestRecordIsBounded(t *testing.T) {
	f := newFixture(t)
	f.in.SetRecordLimit(3)
	for range 5 {
		f.do(t, http.MethodGet, "/sbx-1/44772/x", nil, nil)
	}
	seqs := func(rs []fixedentry.Request) []uint64 {
		var out []uint64
		for _, r := range rs {
			out = append(out, r.Seq)
		}
		return out
	}
	if got := seqs(f.in.Requests()); len(got) != 3 || got[0] != 3 || got[2] != 5 {
		t.Fatalf("recorded %v, want [3 4 5]", got)
	}
	if n := f.in.Received(); n != 5 {
		t.Fatalf("Received() = %d, want 5", n)
	}
	if got := seqs(f.in.RequestsAfter(4)); len(got) != 1 || got[0] != 5 {
		t.Fatalf("RequestsAfter(4) = %v, want [5]", got)
	}
	f.in.SetRecordLimit(1)
	if got := seqs(f.in.Requests()); len(got) != 1 || got[0] != 5 {
		t.Fatalf("after lowering the limit: %v, want [5]", got)
	}
	f.in.SetRecordLimit(0)
	f.do(t, http.MethodGet, "/sbx-1/44772/x", nil, nil)
	if got := f.in.Requests(); len(got) != 0 || f.in.Received() != 6 {
		t.Fatalf("with the record off: %d recorded, Received() = %d", len(got), f.in.Received())
	}
	// Many requests with a small limit: memory stays at the limit.
	f.in.SetRecordLimit(2)
	for range 50 {
		f.do(t, http.MethodGet, "/sbx-1/44772/x", nil, nil)
	}
	if got := seqs(f.in.Requests()); len(got) != 2 || got[1] != 56 {
		t.Fatalf("after 50 more: %v", got)
	}
}
