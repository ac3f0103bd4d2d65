package e2bdataplane

import (
	"context"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sandgate/sandgate/gateway/dataplane"
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
	// An outcome without a context (or one without Caddy's variables)
	// changes nothing and does not panic.
	setAccessLogLevel(dataplane.Outcome{Code: dataplane.CodeSandboxNotFound})
	setAccessLogLevel(dataplane.Outcome{Code: dataplane.CodeSandboxNotFound, Context: context.Background()})
}
