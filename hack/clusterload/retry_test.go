package main

import "testing"

func TestRetryableOnlyWhenNothingWasLeftBehind(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		body   string
		want   bool
	}{
		{"a credential limit", 429, `{"code":429,"error":"rate_limited","message":"rate_limited: rate limit exceeded"}`, true},
		{"a read before any write", 503, `{"code":503,"error":"unavailable","message":"unavailable: template read timed out"}`, true},
		{"the apiserver's 429 in a step, compensated", 500,
			`{"code":500,"error":"create_failed","message":"…","step":"CreateBatchSandbox","cleanup":["DeleteIngress","DeletePolicy"]}`, true},
		{"the readiness wait given up, compensated", 503,
			`{"code":503,"error":"sandbox_not_ready","message":"…","step":"WaitReady","cleanup":["DeleteBatchSandbox"]}`, true},
		{"a compensation step unconfirmed", 500,
			`{"code":500,"error":"create_failed","message":"…","step":"WriteIngress","cleanup":["DeleteIngress:unconfirmed"]}`, false},
		{"the Ingress left for cleanup", 500,
			`{"code":500,"error":"create_failed_ingress_pending_cleanup","message":"…","step":"WriteIngress","cleanup":["DeleteIngress"]}`, false},
		{"a 500 naming no step", 500, `{"code":500,"error":"create_failed","message":"…"}`, false},
		{"a 503 of another kind", 503, `{"code":503,"error":"lifecycle_disabled","message":"…"}`, false},
		{"the request's own fault", 400, `{"code":400,"error":"bad_request","message":"…"}`, false},
		{"a 429 from something else", 429, `too many`, false},
		{"a body that is not corectl's", 502, `<html>bad gateway</html>`, false},
		{"a conflict with a step", 409, `{"code":409,"error":"cni_unqualified","step":"Admit","cleanup":[]}`, false},
	} {
		if got := retryable(c.status, []byte(c.body)); got != c.want {
			t.Errorf("%s: retryable(%d) = %v, want %v", c.name, c.status, got, c.want)
		}
	}
}
