package e2bdataplane

import (
	"context"
	"net/http"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/sandgate/sandgate/gateway/dataplane"
	"github.com/sandgate/sandgate/gateway/upstream"
)

// TestAccessLogLevel checks the access log's level of each outcome: a
// sandbox that is gone is logged at info (Caddy's default for a 5xx is
// error), the platform's failures and successes keep Caddy's level.
func TestAccessLogLevel(t *testing.T) {
	for _, c := range []struct {
		code dataplane.Code
		want any
	}{
		{dataplane.CodeSandboxNotFound, "info"},
		{dataplane.CodeSandboxDeleting, "info"},
		{dataplane.CodeSandboxExpired, "info"},
		{dataplane.CodeSandboxNotReady, "info"},
		{dataplane.CodeSandboxUnreachable, "info"},
		{dataplane.CodeFixedEntryUnreachable, nil},
		{dataplane.CodeAuthorizerUnavailable, nil},
		{dataplane.CodeExecdProtocol, nil},
		{"", nil},
	} {
		vars := map[string]any{}
		ctx := context.WithValue(context.Background(), caddyhttp.VarsCtxKey, vars)
		setAccessLogLevel(dataplane.Outcome{Code: c.code, Context: ctx})
		if got := vars[caddyhttp.LogLevelVar]; got != c.want {
			t.Errorf("%q: access log level %v, want %v", c.code, got, c.want)
		}
	}
	// GATEWAY_BUSY at the credential's own bound is the tenant's matter;
	// at the gateway's, the platform's.
	for _, own := range []bool{true, false} {
		vars := map[string]any{}
		ctx := context.WithValue(context.Background(), caddyhttp.VarsCtxKey, vars)
		bound := map[bool]dataplane.Bound{true: dataplane.BoundRequestsPerCredential, false: dataplane.BoundRequests}[own]
		setAccessLogLevel(dataplane.Outcome{Code: dataplane.CodeGatewayBusy, Bound: bound, Context: ctx})
		if got, want := vars[caddyhttp.LogLevelVar], map[bool]any{true: "info", false: nil}[own]; got != want {
			t.Errorf("GATEWAY_BUSY, own bound %v: access log level %v, want %v", own, got, want)
		}
	}
	// An outcome without a context (or one without Caddy's variables)
	// changes nothing and does not panic.
	setAccessLogLevel(dataplane.Outcome{Code: dataplane.CodeSandboxNotFound})
	setAccessLogLevel(dataplane.Outcome{Code: dataplane.CodeSandboxNotFound, Context: context.Background()})
}

// TestUnaryClientChoice: without unary_client the unary calls go through
// the data plane's own client when the transport block speaks HTTP/1.1
// without HTTP/3, else through the transport; "transport" always takes
// the transport; "builtin" over a transport it cannot stand beside is
// refused.
func TestUnaryClientChoice(t *testing.T) {
	rt := func(versions ...string) *reverseproxy.HTTPTransport {
		return &reverseproxy.HTTPTransport{Transport: &http.Transport{}, Versions: versions}
	}
	for _, c := range []struct {
		choice string
		rt     *reverseproxy.HTTPTransport
		want   string // "builtin", "transport" or "error"
	}{
		{"", rt("1.1", "2"), "builtin"},
		{"", rt("1.1"), "builtin"},
		{"", rt("h2c"), "transport"},
		{"", rt("1.1", "2", "3"), "transport"},
		{"builtin", rt("1.1", "2"), "builtin"},
		{"builtin", rt("h2c"), "error"},
		{"builtin", rt("1.1", "3"), "error"},
		{"transport", rt("1.1", "2"), "transport"},
	} {
		h := &Handler{UnaryClient: c.choice}
		got, err := h.unaryClient(c.rt)
		var is string
		switch {
		case err != nil:
			is = "error"
		case got == http.RoundTripper(c.rt):
			is = "transport"
		default:
			if _, ok := got.(*upstream.Transport); ok && h.unary == got {
				is = "builtin"
			}
		}
		if is != c.want {
			t.Errorf("unary_client %q over versions %v: %s (%T, %v), want %s", c.choice, c.rt.Versions, is, got, err, c.want)
		}
	}
}
