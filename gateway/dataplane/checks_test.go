package dataplane

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/fixedentry"
	"github.com/sandgate/sandgate/internal/freeport"
)

// TestOrderOfChecks walks the checks of spec §3.3 in order: each row breaks
// one check while every earlier check passes, and must be answered with that
// check's stable code, in the shape the SDK decodes, without reaching the
// fixed entry.
func TestOrderOfChecks(t *testing.T) {
	e := newTestEnv(t)
	listDir := func(mutate func(r *http.Request)) *http.Request {
		req := e.request(http.MethodPost, "/filesystem.Filesystem/ListDir", strings.NewReader(`{"path":"/home/user"}`))
		req.Header.Set("Content-Type", "application/json")
		mutate(req)
		return req
	}
	cases := []struct {
		name       string
		req        *http.Request
		status     int
		code       Code
		connect    string
		restStatus bool
	}{
		{"unsupported connect method, no headers at all", func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, e.gateway.URL+"/process.Process/List", strings.NewReader(`{}`))
			r.RequestURI = ""
			r.Header.Set("Content-Type", "application/json")
			return r
		}(), 501, CodeUnsupportedOperation, "unimplemented", false},
		{"a signed file URL (downloadUrl) without the token", func() *http.Request {
			r := httptest.NewRequest(http.MethodGet, e.gateway.URL+"/files?path=%2Fa&username=user&signature=v1_abc&signature_expiration=1", nil)
			r.RequestURI = ""
			return r
		}(), 501, CodeUnsupportedOperation, "", true},
		{"wrong method on a connect route", listDir(func(r *http.Request) { r.Method = http.MethodGet }), 405, CodeMethodNotAllowed, "", true},
		{"missing sandbox id", listDir(func(r *http.Request) { r.Header.Del(HeaderSandboxID) }), 400, CodeSandboxHeaderMissing, "invalid_argument", false},
		{"missing sandbox port", listDir(func(r *http.Request) { r.Header.Del(HeaderSandboxPort) }), 400, CodeSandboxHeaderMissing, "invalid_argument", false},
		{"malformed sandbox id", listDir(func(r *http.Request) { r.Header.Set(HeaderSandboxID, "../etc") }), 400, CodeSandboxIDInvalid, "invalid_argument", false},
		{"upper-case sandbox id", listDir(func(r *http.Request) { r.Header.Set(HeaderSandboxID, "SBX1") }), 400, CodeSandboxIDInvalid, "invalid_argument", false},
		{"two sandbox ids", listDir(func(r *http.Request) { r.Header.Add(HeaderSandboxID, "other") }), 400, CodeSandboxIDInvalid, "invalid_argument", false},
		{"port is execd's real port", listDir(func(r *http.Request) { r.Header.Set(HeaderSandboxPort, "44772") }), 400, CodeSandboxPortInvalid, "invalid_argument", false},
		{"port with a suffix", listDir(func(r *http.Request) { r.Header.Set(HeaderSandboxPort, "49983x") }), 400, CodeSandboxPortInvalid, "invalid_argument", false},
		{"missing token", listDir(func(r *http.Request) { r.Header.Del(HeaderAccessToken) }), 401, CodeTokenMissing, "unauthenticated", false},
		{"garbage token", listDir(func(r *http.Request) { r.Header.Set(HeaderAccessToken, "not.a.jwt") }), 401, CodeTokenInvalid, "unauthenticated", false},
		{"expired token", listDir(func(r *http.Request) {
			tok, _ := e.key.Mint(tokenTarget("cred-a", testSandbox), time.Second, time.Now().Add(-time.Hour))
			r.Header.Set(HeaderAccessToken, tok)
		}), 401, CodeTokenExpired, "unauthenticated", false},
		{"token for another sandbox", listDir(func(r *http.Request) { r.Header.Set(HeaderAccessToken, e.mint("cred-a", "sbxother")) }), 403, CodeTargetMismatch, "permission_denied", false},
		{"token for another sandbox, header follows the token", listDir(func(r *http.Request) {
			r.Header.Set(HeaderAccessToken, e.mint("cred-a", "sbxother"))
			r.Header.Set(HeaderSandboxID, "sbxother")
		}), 502, CodeSandboxNotFound, "unavailable", false},
		{"unknown credential", listDir(func(r *http.Request) { r.Header.Set(HeaderAccessToken, e.mint("cred-none", testSandbox)) }), 401, CodeCredentialNotFound, "unauthenticated", false},
		{"disabled credential", listDir(func(r *http.Request) { r.Header.Set(HeaderAccessToken, e.mint("cred-off", testSandbox)) }), 401, CodeCredentialDisabled, "unauthenticated", false},
		{"credential on an unknown cluster", listDir(func(r *http.Request) { r.Header.Set(HeaderAccessToken, e.mint("cred-x", testSandbox)) }), 500, CodeClusterUnknown, "internal", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.ingress.ResetRequests()
			resp, body := e.do(tc.req)
			// The 502 row is the one that reaches the ingress: it proves the
			// sandbox ID never chooses anything but the URI inside the
			// credential's cluster.
			wantStatus := tc.status
			if tc.code == CodeSandboxNotFound {
				wantStatus = http.StatusServiceUnavailable
			}
			if resp.StatusCode != wantStatus {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, wantStatus, body)
			}
			if got := resp.Header.Get(ErrorHeader); got != string(tc.code) {
				t.Fatalf("%s = %q, want %q", ErrorHeader, got, tc.code)
			}
			if tc.restStatus {
				var rest struct{ Code int }
				if err := json.Unmarshal(body, &rest); err != nil || rest.Code != tc.status {
					t.Fatalf("REST body %s", body)
				}
			} else {
				var ce struct{ Code, Message string }
				if err := json.Unmarshal(body, &ce); err != nil || ce.Code != tc.connect || !strings.HasPrefix(ce.Message, string(tc.code)+": ") {
					t.Fatalf("Connect error body %s, want code %q and message prefix %s", body, tc.connect, tc.code)
				}
				if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
					t.Fatalf("Content-Type %q", ct)
				}
			}
			reqs := e.ingress.Requests()
			if tc.code == CodeSandboxNotFound {
				if len(reqs) != 1 || reqs[0].SandboxID != "sbxother" {
					t.Fatalf("ingress requests %+v", reqs)
				}
			} else if len(reqs) != 0 {
				t.Fatalf("a refused request reached the fixed entry: %+v", reqs)
			}
			o := e.waitOutcome()
			if o.Code != tc.code {
				t.Fatalf("outcome code %q, want %q", o.Code, tc.code)
			}
		})
	}
	if len(e.execd.Commands()) != 0 {
		t.Fatalf("execd ran commands: %+v", e.execd.Commands())
	}
}

// TestErrorClasses pins the class of every stable code, so a code cannot
// silently move between classes.
func TestErrorClasses(t *testing.T) {
	want := map[Class][]Code{
		ClassRequest:    {CodeUnsupportedOperation, CodeUnknownRoute, CodeReservedRoute, CodeMethodNotAllowed, CodeSandboxHeaderMissing, CodeSandboxIDInvalid, CodeSandboxPortInvalid, CodeBadRequest, CodeCanceled, CodeUserUnknown, CodeWriteTooLarge},
		ClassCredential: {CodeTokenMissing, CodeTokenInvalid, CodeTokenExpired, CodeCredentialNotFound, CodeCredentialDisabled, CodeCredentialUnavailable},
		ClassTarget:     {CodeTargetMismatch, CodeSandboxDeleting, CodeSandboxExpired, CodeAuthorizerUnavailable},
		ClassRouting:    {CodeClusterUnknown, CodeSandboxNotFound, CodeSandboxNotReady, CodeIngressRouteRejected},
		ClassNetwork:    {CodeFixedEntryUnreachable, CodeSandboxUnreachable, CodeUpstreamTimeout, CodeGatewayBusy, CodeGatewayDraining},
		ClassExecution:  {CodeExecdRejected, CodeExecdUnauthorized, CodeExecdFailed, CodeExecdProtocol, CodeFileNotFound, CodeIsADirectory, CodeNotADirectory, CodeCommandTimeout, CodeProcessNotFound, CodeFileExists, CodePTYAttached, CodeStdinUnavailable, CodeWatcherNotFound},
	}
	n := 0
	for class, list := range want {
		for _, c := range list {
			n++
			if c.Class() != class {
				t.Errorf("%s is in class %q, want %q", c, c.Class(), class)
			}
			if c.ConnectCode() == "" || c.RESTStatus() == 0 {
				t.Errorf("%s has no Connect code or REST status", c)
			}
		}
	}
	if n != len(codes) {
		t.Fatalf("the test lists %d codes, the table has %d", n, len(codes))
	}
}

// TestUpstreamFailures maps each failure of the fixed entry and the ingress
// to its distinct code (spec §3.3; docs/wire-facts.md §X2.6).
func TestUpstreamFailures(t *testing.T) {
	e := newTestEnv(t)
	closedAddr, held, err := freeport.Refusing()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })

	cases := []struct {
		name   string
		setup  func()
		status int
		code   Code
	}{
		{"sandbox unknown to the ingress", func() { e.ingress.RemoveSandbox(testSandbox) }, 503, CodeSandboxNotFound},
		{"sandbox not ready", func() { e.ingress.SetSandbox(testSandbox, fixedentry.Sandbox{Ready: false, Endpoint: "127.0.0.1"}) }, 503, CodeSandboxNotReady},
		{"no endpoint", func() { e.ingress.SetSandbox(testSandbox, fixedentry.Sandbox{Ready: true}) }, 503, CodeSandboxNotReady},
		{"pod unreachable", func() {
			e.ingress.SetSandbox(testSandbox, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Ports: map[int]string{44772: closedAddr}})
		}, 503, CodeSandboxUnreachable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup()
			resp, body := e.unary("ListDir", `{"path":"/home/user"}`)
			if resp.StatusCode != tc.status || resp.Header.Get(ErrorHeader) != string(tc.code) {
				t.Fatalf("status %d code %q body %s; want %d %s", resp.StatusCode, resp.Header.Get(ErrorHeader), body, tc.status, tc.code)
			}
			if !strings.Contains(string(body), `"code":"unavailable"`) {
				t.Fatalf("body %s", body)
			}
		})
	}
}

// TestFixedEntryDown: a cluster whose fixed entry does not answer is a
// network failure, not a sandbox failure.
func TestFixedEntryDown(t *testing.T) {
	e := newTestEnv(t)
	closedAddr, held, err := freeport.Refusing()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })
	h := newHandlerWithCluster(t, e, &url.URL{Scheme: "http", Host: closedAddr})
	rec := httptest.NewRecorder()
	req := e.request(http.MethodPost, "/filesystem.Filesystem/ListDir", strings.NewReader(`{"path":"/home/user"}`))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	if rec.Code != 503 || rec.Header().Get(ErrorHeader) != string(CodeFixedEntryUnreachable) {
		t.Fatalf("status %d code %q body %s", rec.Code, rec.Header().Get(ErrorHeader), rec.Body)
	}
}

func newHandlerWithCluster(t *testing.T, e *testEnv, fe *url.URL) *Handler {
	t.Helper()
	verifier, err := tokenVerifier(e)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{}, Deps{Tokens: verifier, Credentials: e.creds,
		Clusters: fakeClusters{"cluster-a": {ID: "cluster-a", FixedEntry: fe}}, Execd: newClient()})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestExecdAccessToken: a cluster's execd access token is sent as
// X-EXECD-ACCESS-TOKEN; a wrong one is the platform's fault
// (EXECD_UNAUTHORIZED), never reported as the user's token being bad.
func TestExecdAccessToken(t *testing.T) {
	e := newTestEnv(t, func(_ *Config, x *execdstub.Config) { x.AccessToken = "s3cret" })
	fe := e.fixedEntryURL()
	for _, tc := range []struct {
		token  string
		status int
		code   Code
	}{{"s3cret", 200, ""}, {"wrong", 500, CodeExecdUnauthorized}, {"", 500, CodeExecdUnauthorized}} {
		verifier, _ := tokenVerifier(e)
		h, err := New(Config{}, Deps{Tokens: verifier, Credentials: e.creds,
			Clusters: fakeClusters{"cluster-a": {ID: "cluster-a", FixedEntry: fe, ExecdAccessToken: tc.token}}, Execd: newClient()})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		req := e.request(http.MethodPost, "/filesystem.Filesystem/ListDir", strings.NewReader(`{"path":"/home/user"}`))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		if rec.Code != tc.status || rec.Header().Get(ErrorHeader) != string(tc.code) {
			t.Fatalf("token %q: %d %q %s", tc.token, rec.Code, rec.Header().Get(ErrorHeader), rec.Body)
		}
		if strings.Contains(rec.Body.String(), "s3cret") {
			t.Fatal("execd token in the response")
		}
	}
	for _, r := range e.ingress.Requests() {
		if r.Header.Get(HeaderAccessToken) != "" {
			t.Fatal("the E2B access token was forwarded to the fixed entry")
		}
	}
}

// TestErrorsDoc: docs/errors.md lists every code with the class, Connect
// code, REST status and /health status the gateway sends, and nothing
// else.
func TestErrorsDoc(t *testing.T) {
	b, err := os.ReadFile("../../docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `([A-Z_]+)` \\| ([a-z_]+) \\| ([a-z_]+) \\| ([0-9]+) \\| ([0-9]+) \\|")
	seen := map[Code]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		c := Code(m[1])
		if _, ok := codes[c]; !ok {
			t.Errorf("docs/errors.md lists %s, which the gateway does not have", c)
			continue
		}
		seen[c] = true
		got := []string{string(c.Class()), string(c.ConnectCode()), strconv.Itoa(c.RESTStatus()), strconv.Itoa(c.HealthStatus())}
		if !slices.Equal(got, m[2:6]) {
			t.Errorf("docs/errors.md says %s is %v, the gateway sends %v", c, m[2:6], got)
		}
	}
	for c := range codes {
		if !seen[c] {
			t.Errorf("docs/errors.md does not list %s", c)
		}
	}
}
