package controle2e_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// egressRule is one rule of corectl's GET /sandboxes/{id}/network view.
type egressRule struct {
	CIDR   string   `json:"cidr"`
	Except []string `json:"except"`
}

type networkView struct {
	Status             int           `json:"status"`
	NetworkReady       bool          `json:"networkReady"`
	ConfiguredEgress   *[]egressRule `json:"configuredEgress"`
	LastVerifiedEgress *[]egressRule `json:"lastVerifiedEgress"`
}

type networkResult struct {
	HasUpdateNetwork bool        `json:"hasUpdateNetwork"`
	Closed           networkView `json:"closed"`
	Created          networkView `json:"created"`
	Steps            []struct {
		Update json.RawMessage `json:"update"`
		OK     bool            `json:"ok"`
		Error  *struct {
			Name    string `json:"name"`
			Message string `json:"message"`
		} `json:"error"`
		View networkView `json:"view"`
	} `json:"steps"`
	Run  sdkAttempt `json:"run"`
	Kill sdkAttempt `json:"kill"`
}

// verified fails t unless v is a ready view whose configured and last
// verified egress are want.
func verified(t *testing.T, what string, v networkView, want []egressRule) {
	t.Helper()
	eq := func(a []egressRule) bool {
		return slices.EqualFunc(a, want, func(x, y egressRule) bool { return x.CIDR == y.CIDR && slices.Equal(x.Except, y.Except) })
	}
	if v.Status != 200 || !v.NetworkReady || v.ConfiguredEgress == nil || v.LastVerifiedEgress == nil ||
		!eq(*v.ConfiguredEgress) || !eq(*v.LastVerifiedEgress) {
		t.Fatalf("%s: network view %+v, want verified %+v", what, v, want)
	}
}

// TestSDKNetwork drives E2B's network surface from both pinned JS SDKs
// (both have Sandbox.updateNetwork): create with allowInternetAccess false
// and with network.denyOut, then updateNetwork with E2B's bodies, each
// checked against corectl's read-back of the NetworkPolicy; a domain name
// is refused (400: the SDKs raise SandboxError with corectl's message) and
// changes nothing.
func TestSDKNetwork(t *testing.T) {
	st := startStack(t, "")
	st.putTemplate(t, `{"egress":[{"cidr":"0.0.0.0/0"}]}`)
	for _, pkg := range sdkPackages {
		t.Run(pkg, func(t *testing.T) {
			var r networkResult
			runSDK(t, st.root, pkg, "network", 2*time.Minute, &r, "E2B_API_URL="+st.api, "E2B_SANDBOX_URL="+st.h.Gateway,
				"E2B_API_KEY=key-e2e")
			if !r.HasUpdateNetwork {
				t.Fatalf("%s has no Sandbox.prototype.updateNetwork", pkg)
			}
			verified(t, "allowInternetAccess false", r.Closed, []egressRule{})
			verified(t, "denyOut 10.0.0.0/8", r.Created, []egressRule{{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8"}}})
			want := [][]egressRule{
				{{CIDR: "1.1.1.1/32"}},
				{},
				{{CIDR: "0.0.0.0/0", Except: []string{"169.254.169.254/32"}}},
			}
			if len(r.Steps) != 4 {
				t.Fatalf("steps %+v", r.Steps)
			}
			for i, w := range want {
				if !r.Steps[i].OK {
					t.Fatalf("updateNetwork(%s): %+v", r.Steps[i].Update, r.Steps[i].Error)
				}
				verified(t, "updateNetwork("+string(r.Steps[i].Update)+")", r.Steps[i].View, w)
			}
			refused := r.Steps[3]
			if refused.OK || refused.Error == nil || refused.Error.Name != "SandboxError" ||
				!strings.Contains(refused.Error.Message, "400: bad_request: network.allowOut[0]: not supported: domain names") {
				t.Fatalf("a domain name: %+v", refused)
			}
			verified(t, "after the refusal", refused.View, want[2])
			if !r.Run.OK || !r.Kill.OK {
				t.Fatalf("run %+v kill %+v", r.Run, r.Kill)
			}
		})
	}
}

// TestSDKLimits: a credential's limits (credential record) from both
// pinned SDKs' point of view: over the concurrent-sandbox and the
// creates-per-minute limit Sandbox.create raises RateLimitError (429)
// with corectl's message; over the longest timeout, at create and at
// setTimeout, SandboxError (400).
func TestSDKLimits(t *testing.T) {
	for _, pkg := range sdkPackages {
		t.Run(pkg, func(t *testing.T) {
			// A stack per SDK: the creates-per-minute count is corectl's.
			st := startStack(t, "    limits: {concurrentSandboxes: 1, createsPerMinute: 2, maxTimeoutSeconds: 600}\n")
			var r struct {
				Second, SetTimeoutOver, SetTimeoutWithin, KillFirst, KillSecond, Third, LongTimeout sdkAttempt
			}
			runSDK(t, st.root, pkg, "limits", 2*time.Minute, &r, "E2B_API_URL="+st.api, "E2B_SANDBOX_URL="+st.h.Gateway,
				"E2B_API_KEY=key-e2e")
			refused := func(what string, a sdkAttempt, name, msg string) {
				t.Helper()
				if a.OK || a.Error == nil || a.Error.Name != name || !strings.Contains(a.Error.Message, msg) {
					t.Fatalf("%s: %+v, want %s with %q", what, a, name, msg)
				}
			}
			refused("a second live sandbox", r.Second, "RateLimitError",
				"Rate limit exceeded, please try again later - rate_limited: you have reached the maximum number of concurrent sandboxes (1) for this credential")
			refused("setTimeout over the limit", r.SetTimeoutOver, "SandboxError", "400: bad_request: timeout cannot be greater than 600 seconds")
			if !r.SetTimeoutWithin.OK {
				t.Fatalf("setTimeout within the limit: %+v", r.SetTimeoutWithin)
			}
			if !r.KillFirst.OK || !r.KillSecond.OK {
				t.Fatalf("kills %+v %+v", r.KillFirst, r.KillSecond)
			}
			refused("a third create in a minute", r.Third, "RateLimitError", "rate_limited: rate limit exceeded: at most 2 sandbox creates per minute")
			refused("a timeout over the limit", r.LongTimeout, "SandboxError", "400: bad_request: timeout cannot be greater than 600 seconds")
		})
	}
}
