package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/httpapi"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// beforeFirst is a transport that, once armed, runs do (another writer's
// change, through the test's own client) just before the daemon's next
// request with method and a path ending in suffix goes out, and counts
// the times do reported it changed something.
type beforeFirst struct {
	next           http.RoundTripper
	method, suffix string
	do             func() bool
	armed          atomic.Bool
	done           atomic.Int32
}

func (b *beforeFirst) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == b.method && strings.HasSuffix(req.URL.Path, b.suffix) && b.armed.CompareAndSwap(true, false) && b.do() {
		b.done.Add(1)
	}
	return b.next.RoundTrip(req)
}

// startBefore starts the daemon with b on its apiserver connection.
func startBefore(t *testing.T, b *beforeFirst) *api {
	return startWrapped(t, func(rt http.RoundTripper) http.RoundTripper {
		b.next = rt
		return b
	})
}

// TestPutSupersededOnceIsApplied: a PUT /network/ingress whose cycle is
// superseded (another writer changed the carrier between the cycle's read
// and its write: code ConcurrentUpdate, nothing rolled back, retried by
// the reconciler) waits for the retry and is answered with its result,
// 200 Verified with its rules, instead of 409 ConcurrentUpdate for a
// version that was applied a few milliseconds later.
func TestPutSupersededOnceIsApplied(t *testing.T) {
	var a *api
	carrier := ingressallow.IngressName("sbx")
	// Just before the daemon's next update of the carrier, an edit of it
	// (as another replica or an admin would make) makes that update fail
	// on its resourceVersion.
	race := &beforeFirst{method: http.MethodPut, suffix: "/ingresses/" + carrier, do: func() bool {
		ing := &networkingv1.Ingress{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: a.ingNS, Name: carrier}, ing); err != nil {
			return false
		}
		ing.Annotations["example.test/touched"] = "by another writer"
		return env.Client.Update(context.Background(), ing) == nil
	}}
	a = startBefore(t, race)
	env.OwnedBatchSandbox(t, a.nsA, "sbx", "a", map[string]string{"allocation-id": "a1"})
	var st ingressallow.Status
	if code := a.do("PUT", "/sandboxes/sbx/network/ingress", "key-a", `{"ingress":[{"cidr":"203.0.113.0/24"}]}`, &st); code != 200 || st.VerificationState != "Verified" {
		t.Fatalf("first PUT = %d %+v", code, st)
	}
	race.armed.Store(true)
	if code := a.do("PUT", "/sandboxes/sbx/network/ingress", "key-a", `{"ingress":[{"cidr":"198.51.100.0/24"}]}`, &st); code != 200 ||
		st.VerificationState != "Verified" || st.LastVerified == nil || len(*st.LastVerified) != 1 || (*st.LastVerified)[0].CIDR != "198.51.100.0/24" {
		t.Fatalf("superseded PUT = %d %+v", code, st)
	}
	if race.done.Load() != 1 {
		t.Fatalf("the carrier update was raced %d times, want 1 (the test did not make the cycle superseded)", race.done.Load())
	}
}

// TestPutWhoseAllowlistIsRemoved: a PUT /network/ingress whose allowlist
// is removed before its cycle could record anything is answered at once,
// 409 sandbox_state_conflict, since its version will never be applied;
// it used to poll the missing allowlist for its whole wait bound and
// answer 202.
func TestPutWhoseAllowlistIsRemoved(t *testing.T) {
	var a *api
	// Just before the daemon's next status write of the allowlist, the
	// allowlist is deleted, as a DELETE of the sandbox in another replica
	// does.
	rm := &beforeFirst{method: http.MethodPut, suffix: "/sandboxingressallowlists/sbx/status", do: func() bool {
		al := &v1alpha1.SandboxIngressAllowlist{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: a.nsA, Name: "sbx"}, al); err != nil {
			return false
		}
		return env.Client.Delete(context.Background(), al) == nil
	}}
	a = startBefore(t, rm)
	env.OwnedBatchSandbox(t, a.nsA, "sbx", "a", map[string]string{"allocation-id": "a1"})
	rm.armed.Store(true)
	st, code := a.errorCode("PUT", "/sandboxes/sbx/network/ingress", "key-a", `{"ingress":[{"cidr":"198.51.100.0/24"}]}`)
	if rm.done.Load() != 1 {
		t.Fatalf("the allowlist was removed %d times, want 1 (the test shows nothing)", rm.done.Load())
	}
	if st != 409 || code != httpapi.CodeSandboxStateConflict {
		t.Fatalf("PUT = %d %s; want 409 %s", st, code, httpapi.CodeSandboxStateConflict)
	}
}
