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

// raceCarrierWrite is a transport that, once armed, edits the managed
// carrier named carrier (an annotation of its own, through the test's own
// client, as another replica or an admin would) just before the daemon's
// next update of it goes out, so that update fails on its
// resourceVersion.
type raceCarrierWrite struct {
	next    http.RoundTripper
	ns      string
	carrier string
	armed   atomic.Bool
	raced   atomic.Int32
}

func (r *raceCarrierWrite) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPut && strings.HasSuffix(req.URL.Path, "/ingresses/"+r.carrier) && r.armed.CompareAndSwap(true, false) {
		ing := &networkingv1.Ingress{}
		key := client.ObjectKey{Namespace: r.ns, Name: r.carrier}
		if err := env.Client.Get(context.Background(), key, ing); err == nil {
			ing.Annotations["example.test/touched"] = "by another writer"
			if env.Client.Update(context.Background(), ing) == nil {
				r.raced.Add(1)
			}
		}
	}
	return r.next.RoundTrip(req)
}

// TestPutSupersededOnceIsApplied: a PUT /network/ingress whose cycle is
// superseded (another writer changed the carrier between the cycle's read
// and its write: code ConcurrentUpdate, nothing rolled back, retried by
// the reconciler) waits for the retry and is answered with its result,
// 200 Verified with its rules, instead of 409 ConcurrentUpdate for a
// version that was applied a few milliseconds later.
func TestPutSupersededOnceIsApplied(t *testing.T) {
	race := &raceCarrierWrite{carrier: ingressallow.IngressName("sbx")}
	a := startWrapped(t, func(rt http.RoundTripper) http.RoundTripper {
		race.next = rt
		return race
	})
	race.ns = a.ingNS
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
	if race.raced.Load() != 1 {
		t.Fatalf("the carrier update was raced %d times, want 1 (the test did not make the cycle superseded)", race.raced.Load())
	}
}

// removeAllowlistFirst is a transport that, once armed, deletes the
// sandbox's allowlist (through the test's own client, as a DELETE of the
// sandbox in another replica does) just before the daemon's next status
// write of it goes out.
type removeAllowlistFirst struct {
	next    http.RoundTripper
	ns, id  string
	armed   atomic.Bool
	removed atomic.Int32
}

func (r *removeAllowlistFirst) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPut && strings.HasSuffix(req.URL.Path, "/sandboxingressallowlists/"+r.id+"/status") && r.armed.CompareAndSwap(true, false) {
		al := &v1alpha1.SandboxIngressAllowlist{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: r.ns, Name: r.id}, al); err == nil &&
			env.Client.Delete(context.Background(), al) == nil {
			r.removed.Add(1)
		}
	}
	return r.next.RoundTrip(req)
}

// TestPutWhoseAllowlistIsRemoved: a PUT /network/ingress whose allowlist
// is removed before its cycle could record anything is answered at once,
// 409 sandbox_state_conflict, since its version will never be applied;
// it used to poll the missing allowlist for its whole wait bound and
// answer 202.
func TestPutWhoseAllowlistIsRemoved(t *testing.T) {
	rm := &removeAllowlistFirst{id: "sbx"}
	a := startWrapped(t, func(rt http.RoundTripper) http.RoundTripper {
		rm.next = rt
		return rm
	})
	rm.ns = a.nsA
	env.OwnedBatchSandbox(t, a.nsA, "sbx", "a", map[string]string{"allocation-id": "a1"})
	rm.armed.Store(true)
	st, code := a.errorCode("PUT", "/sandboxes/sbx/network/ingress", "key-a", `{"ingress":[{"cidr":"198.51.100.0/24"}]}`)
	if rm.removed.Load() != 1 {
		t.Fatalf("the allowlist was removed %d times, want 1 (the test shows nothing)", rm.removed.Load())
	}
	if st != 409 || code != httpapi.CodeSandboxStateConflict {
		t.Fatalf("PUT = %d %s; want 409 %s", st, code, httpapi.CodeSandboxStateConflict)
	}
}
