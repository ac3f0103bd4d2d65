package dataplane

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/gateway/authorizer"
	"github.com/sandgate/sandgate/gateway/credential"
)

// TestUnavailableSaysWhyInTheLog: when the credential source or the
// sandbox authorizer cannot answer, the request's log line says why (the
// source's own reason, which quotes no body and no header), and the SDK
// is told only that it could not be read. The reason was dropped: the
// log said "the resource credential could not be read" whatever the
// Portal had answered, though docs/dataplane.md promises the cause.
func TestUnavailableSaysWhyInTheLog(t *testing.T) {
	portal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"id": "cred-a", `))
	}))
	defer portal.Close()
	corectl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer corectl.Close()
	src, err := credential.NewHTTP(credential.HTTPConfig{URL: portal.URL + "/credentials/{id}",
		Header: http.Header{"Authorization": {"Bearer portal-secret"}}})
	if err != nil {
		t.Fatal(err)
	}
	az, err := authorizer.NewHTTP(authorizer.HTTPConfig{BaseURL: corectl.URL,
		Header: http.Header{"Authorization": {"Bearer corectl-secret"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		deps  func(*Deps)
		code  Code
		cause string
	}{
		{"credential source", func(d *Deps) { d.Credentials = src }, CodeCredentialUnavailable,
			"bad response: credential: invalid credential data: malformed JSON at byte 17: unexpected end of input"},
		{"authorizer", func(d *Deps) { d.Authorizer = az }, CodeAuthorizerUnavailable, "unexpected HTTP status 500"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newTestEnvDeps(t, c.deps)
			resp, body := e.unary("ListDir", `{"path":"/home/user"}`)
			if resp.Header.Get(ErrorHeader) != string(c.code) || strings.Contains(string(body), c.cause) {
				t.Fatalf("%d %s %s; want %s without the cause", resp.StatusCode, resp.Header.Get(ErrorHeader), body, c.code)
			}
			e.waitOutcome()
			logs := e.logs.FilterMessage("e2b data plane request").All()
			if len(logs) != 1 {
				t.Fatalf("%d request log lines", len(logs))
			}
			fields := logs[0].ContextMap()
			if cause, _ := fields["cause"].(string); !strings.Contains(cause, c.cause) {
				t.Fatalf("log fields %v; want a cause with %q", fields, c.cause)
			}
			for _, l := range e.logs.All() {
				for k, v := range l.ContextMap() {
					if s, _ := v.(string); strings.Contains(s, "secret") {
						t.Fatalf("log field %s = %q", k, s)
					}
				}
			}
		})
	}
}
