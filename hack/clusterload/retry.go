package main

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/sandgate/sandgate/corectl/httpapi"
	"github.com/sandgate/sandgate/corectl/lifecycle"
)

// maxRetries bounds the retries of one measured create (retryable).
const maxRetries = 3

// retryable reports whether a create answered status with body b may be
// sent again without leaving a sandbox behind or creating one twice:
//   - 429 rate_limited and 503 unavailable before any step (a credential
//     limit, or a read the create needs, such as the template, failed):
//     corectl refused before writing anything;
//   - 500 or 503 naming the failed step (a *lifecycle.CreateError: an
//     apiserver's 429, a timeout, a readiness wait given up) whose
//     compensation confirmed every step it undid (no "<step>:unconfirmed"
//     and not create_failed_ingress_pending_cleanup, which leave the
//     sandbox CleanupFailed).
//
// Anything else is not: no answer at all (the create may have been
// written), a 4xx the request itself caused, a 500 without a step.
func retryable(status int, b []byte) bool {
	var f httpapi.CreateFailure
	if err := json.Unmarshal(b, &f); err != nil {
		return false
	}
	switch {
	case status == http.StatusTooManyRequests && f.Error == httpapi.CodeRateLimited:
		return true
	case status == http.StatusServiceUnavailable && f.Step == "" && f.Error == httpapi.CodeUnavailable:
		return true
	case (status == http.StatusInternalServerError || status == http.StatusServiceUnavailable) && f.Step != "":
		if f.Error == lifecycle.CodeIngressPendingCleanup {
			return false
		}
		for _, c := range f.Cleanup {
			if strings.HasSuffix(c, ":unconfirmed") {
				return false
			}
		}
		return true
	}
	return false
}
