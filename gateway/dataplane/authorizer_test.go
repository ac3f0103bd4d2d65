package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/gateway/authorizer"
)

// fakeAuthorizer answers a fixed decision and records what it was asked.
type fakeAuthorizer struct {
	mu    sync.Mutex
	d     authorizer.Decision
	err   error
	asked [][2]string
}

func (f *fakeAuthorizer) Authorize(_ context.Context, cred, sbx string) (authorizer.Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, [2]string{cred, sbx})
	return f.d, f.err
}

// TestAuthorizerCheck: with an authorizer, every refusal is its stable
// code on the Connect and REST routes, nothing reaches the fixed entry,
// and the authorizer is asked with the token's credential and sandbox
// after the credential and cluster checks; an allowed answer is served.
func TestAuthorizerCheck(t *testing.T) {
	fa := &fakeAuthorizer{}
	e := newTestEnvDeps(t, func(d *Deps) { d.Authorizer = fa })
	e.writeFile("home/user/f.txt", "hello")
	for _, tc := range []struct {
		name string
		d    authorizer.Decision
		err  error
		code Code
	}{
		{"not found (missing or another credential's)", authorizer.Decision{Reason: authorizer.ReasonNotFound}, nil, CodeSandboxNotFound},
		{"deleting", authorizer.Decision{Reason: authorizer.ReasonDeleting}, nil, CodeSandboxDeleting},
		{"expired", authorizer.Decision{Reason: authorizer.ReasonExpired}, nil, CodeSandboxExpired},
		{"unavailable", authorizer.Decision{}, errors.New("corectl down"), CodeAuthorizerUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fa.mu.Lock()
			fa.d, fa.err, fa.asked = tc.d, tc.err, nil
			fa.mu.Unlock()
			e.ingress.ResetRequests()
			// Connect unary.
			resp, body := e.unary("ListDir", `{"path":"/home/user"}`)
			var ce struct{ Code, Message string }
			_ = json.Unmarshal(body, &ce)
			if resp.StatusCode != 503 || ce.Code != string(tc.code.ConnectCode()) || !strings.HasPrefix(ce.Message, string(tc.code)+": ") {
				t.Fatalf("ListDir = %d %s", resp.StatusCode, body)
			}
			if o := e.waitOutcome(); o.Code != tc.code {
				t.Fatalf("outcome %q", o.Code)
			}
			// REST.
			resp, body = e.do(e.request(http.MethodGet, "/files?path=/home/user/f.txt", nil))
			if resp.StatusCode != tc.code.RESTStatus() || resp.Header.Get("Sandgate-Error-Code") != string(tc.code) {
				t.Fatalf("files.read = %d %s %v", resp.StatusCode, body, resp.Header)
			}
			e.waitOutcome()
			if n := len(e.ingress.Requests()); n != 0 {
				t.Fatalf("%d requests reached the fixed entry", n)
			}
			fa.mu.Lock()
			defer fa.mu.Unlock()
			if len(fa.asked) != 2 || fa.asked[0] != [2]string{"cred-a", testSandbox} {
				t.Fatalf("asked %v", fa.asked)
			}
		})
	}
	// The credential is checked before the authorizer is asked.
	fa.mu.Lock()
	fa.d, fa.err, fa.asked = authorizer.Decision{Allowed: true}, nil, nil
	fa.mu.Unlock()
	req := e.request(http.MethodGet, "/files?path=/home/user/f.txt", nil)
	req.Header.Set(HeaderAccessToken, e.mint("cred-off", testSandbox))
	if resp, body := e.do(req); resp.StatusCode != 401 {
		t.Fatalf("disabled credential = %d %s", resp.StatusCode, body)
	}
	e.waitOutcome()
	// Allowed: served.
	resp, body := e.do(e.request(http.MethodGet, "/files?path=/home/user/f.txt", nil))
	if resp.StatusCode != 200 || string(body) != "hello" {
		t.Fatalf("allowed read = %d %s", resp.StatusCode, body)
	}
	e.waitOutcome()
	fa.mu.Lock()
	defer fa.mu.Unlock()
	if len(fa.asked) != 1 {
		t.Fatalf("asked %v (the disabled credential must not reach the authorizer)", fa.asked)
	}
}
