package lifecycle_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/httpapi"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/sandbox"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// route is one sandbox route of the attack table: {id} is replaced by
// the sandbox ID.
type route struct {
	method, path, body string
	// ok is the status the owner gets.
	ok int
}

// sandboxRoutes lists every route on one sandbox.
var sandboxRoutes = []route{
	{"GET", "/sandboxes/{id}", "", http.StatusOK},
	{"GET", "/sandboxes/{id}/endpoints?port=6080", "", http.StatusOK},
	// The sandbox is restricted: the owner is told the Native Browser is
	// refused for it (409 native_restricted).
	{"GET", "/api/v1/sandbox/instances/{id}/endpoint?port=6080", "", http.StatusConflict},
	{"POST", "/sandboxes/{id}/connect", `{"timeout":300}`, http.StatusOK},
	{"POST", "/v2/sandboxes/{id}/connect", `{}`, http.StatusOK},
	{"GET", "/sandboxes/{id}/network", "", http.StatusOK},
	{"PUT", "/sandboxes/{id}/network", `{"defaultAction":"deny","egress":[{"cidr":"198.51.100.9"}]}`, http.StatusOK},
	{"PUT", "/sandboxes/{id}/network", `{"allowOut":["198.51.100.10"]}`, http.StatusNoContent},
	{"GET", "/api/v1/sandbox/instances/{id}/network", "", http.StatusOK},
	{"PUT", "/api/v1/sandbox/instances/{id}/network", `{"defaultAction":"deny","egress":[{"cidr":"198.51.100.9"}]}`, http.StatusOK},
	{"GET", "/sandboxes/{id}/network/ingress", "", http.StatusOK},
	{"PUT", "/sandboxes/{id}/network/ingress", `{"ingress":[{"cidr":"203.0.113.0/24"}]}`, http.StatusOK},
	{"GET", "/api/v1/sandbox/instances/{id}/network/ingress", "", http.StatusOK},
	{"PUT", "/api/v1/sandbox/instances/{id}/network/ingress", `{"ingress":[{"cidr":"203.0.113.0/24"}]}`, http.StatusOK},
	{"POST", "/sandboxes/{id}/timeout", `{"timeout":600}`, http.StatusNoContent},
	{"POST", "/sandboxes/{id}/refreshes", `{"duration":60}`, http.StatusNoContent},
	{"GET", "/sandboxes/{id}/metrics", "", http.StatusOK},
	{"POST", "/sandboxes/{id}/pause", "", http.StatusNotImplemented},
	{"POST", "/sandboxes/{id}/resume", "", http.StatusNotImplemented},
	{"GET", "/sandboxes/{id}/logs", "", http.StatusOK},
	{"GET", "/v2/sandboxes/{id}/logs", "", http.StatusOK},
	{"POST", "/sandboxes/{id}/fork", `{}`, http.StatusNotImplemented},
	{"POST", "/sandboxes/{id}/snapshots", `{}`, http.StatusNotImplemented},
	// DELETE last: the owner's deletes the sandbox.
	{"DELETE", "/sandboxes/{id}", "", http.StatusNoContent},
}

// TestOwnershipAttackTable: two credentials of one namespace (a, a2), a
// project-wide credential of it (wide) and one of another namespace (b).
// a creates a sandbox; on every sandbox route a2 and b get exactly the
// answer of a sandbox that does not exist and change nothing; wide and a
// are served. The creating credential is recorded on the BatchSandbox and
// copied to the carrier, the policy and the allowlist.
func TestOwnershipAttackTable(t *testing.T) {
	// The table covers every route of the API on one sandbox, the 501
	// ones included.
	covered := map[string]bool{}
	for _, r := range sandboxRoutes {
		p, _, _ := strings.Cut(r.path, "?")
		covered[r.method+" "+strings.ReplaceAll(p, "{id}", "{sandboxID}")] = true
	}
	for _, r := range httpapi.Routes {
		if strings.Contains(r.Pattern, "{sandboxID}") && !covered[r.Method+" "+r.Pattern] {
			t.Errorf("the attack table misses %s %s", r.Method, r.Pattern)
		}
	}
	for _, u := range httpapi.UnsupportedRoutes {
		if strings.Contains(u.Pattern, "{sandboxID}") && !covered[u.Method+" "+u.Pattern] {
			t.Errorf("the attack table misses %s %s (501)", u.Method, u.Pattern)
		}
	}
	w := start(t)
	id := w.create(restricted).SandboxID
	u := bs(w.nsA, id)
	policy := policyOf(t, w.nsA, u)

	// The owner marks on every object of the sandbox.
	ing := &networkingv1.Ingress{}
	np := &networkingv1.NetworkPolicy{}
	al := &v1alpha1.SandboxIngressAllowlist{}
	for _, o := range []struct {
		obj  metav1.Object
		get  func() error
		what string
	}{
		{u, func() error { return nil }, "BatchSandbox"},
		{ing, func() error { return get(ing, w.ingNS, ingressallow.IngressName(id)) }, "Ingress"},
		{np, func() error { return get(np, w.nsA, policy) }, "NetworkPolicy"},
		{al, func() error { return get(al, w.nsA, id) }, "SandboxIngressAllowlist"},
	} {
		if err := o.get(); err != nil {
			t.Fatalf("%s: %v", o.what, err)
		}
		if o.obj.GetAnnotations()[v1alpha1.AnnotationCredential] != "a" ||
			o.obj.GetLabels()[v1alpha1.LabelCredential] != sandbox.CredentialLabelValue("a") {
			t.Fatalf("%s owner marks: labels %v annotations %v", o.what, o.obj.GetLabels(), o.obj.GetAnnotations())
		}
	}

	// The answer for a sandbox that does not exist, per route.
	const ghost = "sb00000000000000000000"
	path := func(r route, id string) string { return strings.ReplaceAll(r.path, "{id}", id) }
	for _, r := range sandboxRoutes {
		wantSt, wantBody := w.do(r.method, path(r, ghost), "key-a", r.body, nil)
		if wantSt != http.StatusNotFound {
			t.Fatalf("%s %s on a missing sandbox = %d %s", r.method, r.path, wantSt, wantBody)
		}
		for _, key := range []string{"key-a2", "key-b"} {
			st, body := w.do(r.method, path(r, id), key, r.body, nil)
			if st != wantSt || !bytes.Equal(body, wantBody) {
				t.Errorf("%s %s %s = %d %s; want exactly the missing sandbox's %d %s", key, r.method, r.path, st, body, wantSt, wantBody)
			}
		}
	}
	// Nothing changed: the objects are as they were.
	for _, o := range []struct {
		obj  metav1.Object
		read func() error
		rv   string
	}{
		{np, func() error { return get(np, w.nsA, policy) }, np.GetResourceVersion()},
		{al, func() error { return get(al, w.nsA, id) }, al.GetResourceVersion()},
	} {
		if err := o.read(); err != nil || o.obj.GetResourceVersion() != o.rv {
			t.Fatalf("%T changed by another credential's request: %v rv %s → %s", o.obj, err, o.rv, o.obj.GetResourceVersion())
		}
	}
	if bs(w.nsA, id) == nil {
		t.Fatal("another credential's DELETE removed the sandbox")
	}
	if !w.endAtUnchanged(id, u) {
		t.Fatal("another credential's timeout or refresh moved the end time")
	}
	// The lists: a2 and b see nothing; wide and a see the sandbox.
	for key, want := range map[string]int{"key-a2": 0, "key-b": 0, "key-a": 1, "key-wide": 1} {
		for _, p := range []string{"/sandboxes", "/v2/sandboxes"} {
			var l []struct{ SandboxID string }
			if st, raw := w.do("GET", p, key, "", &l); st != http.StatusOK || len(l) != want || (want == 1 && l[0].SandboxID != id) {
				t.Errorf("%s GET %s = %d %s; want %d entries", key, p, st, raw, want)
			}
		}
	}

	// The project-wide credential and the owner are served on every route.
	for i, r := range sandboxRoutes {
		key := "key-wide"
		if i%2 == 1 {
			key = "key-a"
		}
		if r.method == "DELETE" {
			continue
		}
		if st, body := w.do(r.method, path(r, id), key, r.body, nil); st != r.ok {
			t.Errorf("%s %s %s = %d %s; want %d", key, r.method, r.path, st, body, r.ok)
		}
	}
	if st, body := w.do("DELETE", "/sandboxes/"+id, "key-wide", "", nil); st != http.StatusNoContent {
		t.Fatalf("project-wide DELETE = %d %s", st, body)
	}
	w.assertGone(id, policy)
}

// endAtUnchanged reports whether sandbox id's end time is still the one
// recorded in before.
func (w *world) endAtUnchanged(id string, before *unstructured.Unstructured) bool {
	a, _ := lifecycle.EndAt(before)
	b, _ := lifecycle.EndAt(bs(w.nsA, id))
	return a.Equal(b)
}
