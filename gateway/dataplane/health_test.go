package dataplane

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/sandgate/sandgate/integration/fixedentry"
	"github.com/sandgate/sandgate/internal/freeport"
)

// TestHealth: GET /health is answered from execd's /ping through the fixed
// entry, after the routing checks: 204 no-store for a running sandbox, 502
// (isRunning() false) for a sandbox that is unknown, not ready or whose pod
// does not answer, and an error the SDK raises for what says nothing about
// the sandbox.
func TestHealth(t *testing.T) {
	closedAddr, held, err := freeport.Refusing()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })
	closedURL := &url.URL{Scheme: "http", Host: closedAddr}
	ok := func(*testEnv) {}
	cases := []struct {
		name   string
		setup  func(*testEnv)
		mutate func(*testEnv, *http.Request)
		h      func(*testEnv) http.Handler
		status int
		code   Code
	}{
		{"running", ok, nil, nil, 204, ""},
		{"not ready", func(e *testEnv) {
			e.ingress.SetSandbox(testSandbox, fixedentry.Sandbox{Ready: false, Endpoint: "127.0.0.1"})
		}, nil, nil, 502, CodeSandboxNotReady},
		{"pod unreachable", func(e *testEnv) {
			e.ingress.SetSandbox(testSandbox, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Ports: map[int]string{44772: closedAddr}})
		}, nil, nil, 502, CodeSandboxUnreachable},
		{"deleted", func(e *testEnv) { e.ingress.RemoveSandbox(testSandbox) }, nil, nil, 502, CodeSandboxNotFound},
		{"fixed entry down", ok, nil, func(e *testEnv) http.Handler { return newHandlerWithCluster(t, e, closedURL) }, 503, CodeFixedEntryUnreachable},
		{"no routing header", ok, func(_ *testEnv, r *http.Request) { r.Header.Del(HeaderSandboxID) }, nil, 400, CodeSandboxHeaderMissing},
		{"bad token", ok, func(_ *testEnv, r *http.Request) { r.Header.Set(HeaderAccessToken, "garbage") }, nil, 401, CodeTokenInvalid},
		{"token for another sandbox", ok, func(e *testEnv, r *http.Request) { r.Header.Set(HeaderAccessToken, e.mint("cred-a", "other")) }, nil, 403, CodeTargetMismatch},
		{"POST", ok, func(_ *testEnv, r *http.Request) { r.Method = http.MethodPost }, nil, 405, CodeMethodNotAllowed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t)
			tc.setup(e)
			req := e.request(http.MethodGet, "/health", nil)
			if tc.mutate != nil {
				tc.mutate(e, req)
			}
			var status int
			var hdr http.Header
			var body []byte
			if tc.h != nil {
				rec := httptest.NewRecorder()
				tc.h(e).ServeHTTP(rec, req)
				status, hdr, body = rec.Code, rec.Header(), rec.Body.Bytes()
			} else {
				resp, b := e.do(req)
				status, hdr, body = resp.StatusCode, resp.Header, b
			}
			if status != tc.status || hdr.Get(ErrorHeader) != string(tc.code) {
				t.Fatalf("status %d code %q body %s; want %d %q", status, hdr.Get(ErrorHeader), body, tc.status, tc.code)
			}
			if tc.status == 204 {
				if len(body) != 0 || hdr.Get("Cache-Control") != "no-store" {
					t.Fatalf("body %q Cache-Control %q", body, hdr.Get("Cache-Control"))
				}
				return
			}
			var rest struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(body, &rest); err != nil || rest.Code != tc.status {
				t.Fatalf("REST error body %s: %v", body, err)
			}
		})
	}
}
