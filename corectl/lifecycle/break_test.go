package lifecycle_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/sandbox"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestBreakOrphanScanKeepsTheLivePolicyWithoutOwnerRef: the egress policy
// of a live sandbox's current allocation that lost its owner reference
// (hand edit, restore from backup) still selects the sandbox's pods.
// Deleting it would leave the sandbox with unrestricted egress; the scan
// must leave it (it is not a leftover: its sandbox and allocation exist).
func TestBreakOrphanScanKeepsTheLivePolicyWithoutOwnerRef(t *testing.T) {
	w := start(t)
	w.waitStartupScan(t)
	ctx := context.Background()
	// An hour's timeout: the scan below runs past the orphan grace (5
	// minutes) but well before the sandbox expires, so the expiry
	// reconciler, which shares the orchestrator's clock and may wake for
	// any event on the BatchSandbox, leaves it alone.
	live := w.create(strings.Replace(restricted, `"timeout":300`, `"timeout":3600`, 1))
	name := policyOf(t, w.nsA, bs(w.nsA, live.SandboxID))
	np := &networkingv1.NetworkPolicy{}
	if err := get(np, w.nsA, name); err != nil {
		t.Fatal(err)
	}
	np.OwnerReferences = nil
	if err := env.Client.Update(ctx, np); err != nil {
		t.Fatal(err)
	}
	w.skew.Store(int64(10 * time.Minute)) // the orchestrator's clock (lo.Now reads it; the expiry reconciler shares it)
	rep, err := w.orch.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := get(&networkingv1.NetworkPolicy{}, w.nsA, name); err != nil {
		t.Fatalf("the live sandbox's egress policy %s was removed by the scan (%+v): %v", name, rep, err)
	}
	var st egress.Status
	if code, body := w.do("GET", "/sandboxes/"+live.SandboxID+"/network", "key-a", "", &st); code != 200 || st.ConfiguredEgress == nil {
		t.Fatalf("GET network after the scan: %d %s", code, body)
	}
}

// TestBreakCreateBodyDuplicateKeys: a create body with "network" twice
// would keep only the last (encoding/json), dropping the caller's egress
// allowlist for the template's defaults; it is refused as bad_request and
// nothing is created. A case variant ("Network") is an ignored unknown
// field, not a second network object.
func TestBreakCreateBodyDuplicateKeys(t *testing.T) {
	w := start(t)
	for _, body := range []string{
		`{"templateID":"base","network":{"egress":[{"cidr":"198.51.100.7"}]},"network":null}`,
		`{"templateID":"base","network":{"egress":[{"cidr":"198.51.100.7"}],"egress":[]}}`,
		`{"templateID":"base","network":{"egress":[{"cidr":"198.51.100.7"}],"EGRESS":[]}}`,
	} {
		var e struct{ Error, Message string }
		if code, _ := w.do("POST", "/v2/sandboxes", "key-a", body, &e); code != 400 || e.Error != "bad_request" {
			t.Fatalf("create %s: %d %s %s, want 400 bad_request", body, code, e.Error, e.Message)
		}
	}
	var sb sandboxBody
	body := `{"templateID":"base","network":{"egress":[{"cidr":"198.51.100.7"}]},"Network":null,"TemplateID":"other"}`
	if code, _ := w.do("POST", "/v2/sandboxes", "key-a", body, &sb); code != 201 || sb.TemplateID != "base" {
		t.Fatalf("create %s: %d, template %q", body, code, sb.TemplateID)
	}
	var st egress.Status
	if code, raw := w.do("GET", "/sandboxes/"+sb.SandboxID+"/network", "key-a", "", &st); code != 200 || st.ConfiguredEgress == nil ||
		len(*st.ConfiguredEgress) != 1 || (*st.ConfiguredEgress)[0].CIDR != "198.51.100.7/32" {
		t.Fatalf("egress after create: %d %s", code, raw)
	}
}

// TestBreakCreateDoesNotReviveASandboxBeingDeleted: a DELETE marks the
// sandbox Deleting while its create is at the token step (the create holds
// no lock there). The create must not turn it Ready again and answer 201
// with a token for a sandbox being torn down: its transition is
// conditional on Creating, so it fails and compensates.
func TestBreakCreateDoesNotReviveASandboxBeingDeleted(t *testing.T) {
	w := start(t)
	ctx := context.Background()
	release := w.holdAt(lifecycle.StepToken)
	type answer struct {
		status int
		body   []byte
	}
	answered := make(chan answer, 1)
	go func() {
		var out map[string]any
		st, body := w.do("POST", "/v2/sandboxes", "key-a", restricted, &out)
		answered <- answer{st, body}
	}()
	kubetest.Eventually(t, 30*time.Second, "the create to reach its token step", func() (bool, error) {
		return w.metrics().Value("corectl_lifecycle_steps_total", "step", "readiness", "outcome", "ok") == 1, nil
	})
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(sandbox.GVK.GroupVersion().WithKind("BatchSandboxList"))
	if err := env.Client.List(ctx, list, client.InNamespace(w.nsA)); err != nil || len(list.Items) != 1 {
		t.Fatalf("BatchSandboxes in %s: %d, %v; want the one being created", w.nsA, len(list.Items), err)
	}
	id := list.Items[0].GetName()
	// What DELETE's first step writes.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.AnnotationLifecycle, lifecycle.StateDeleting)
	if err := env.Client.Patch(ctx, bs(w.nsA, id), client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	close(release)
	a := <-answered
	if a.status == http.StatusCreated {
		t.Fatalf("the create answered 201 (with a token) for a sandbox marked Deleting")
	}
	if a.status != http.StatusInternalServerError || !strings.Contains(string(a.body), `"step":"token"`) {
		t.Fatalf("create = %d %s, want 500 create_failed at the token step", a.status, a.body)
	}
	if strings.Contains(string(a.body), "envdAccessToken") {
		t.Fatalf("a failed create carries a token: %s", a.body)
	}
	if u := bs(w.nsA, id); u != nil && u.GetAnnotations()[v1alpha1.AnnotationLifecycle] == lifecycle.StateReady {
		t.Fatalf("the sandbox marked Deleting was turned Ready")
	}
}

// heldCreate is a restricted create (key-a) sent in the background and
// held at the start of one of its steps.
type heldCreate struct {
	// id is the sandbox being created.
	id       string
	release  func()
	answered chan createAnswer
}

// createAnswer is the status and body of a create's answer.
type createAnswer struct {
	status int
	body   []byte
}

// createHeldAt sends a restricted create and returns once it waits at the
// start of step s (the world's Fault hook); the test's cleanup lets it go
// on if the test did not.
func (w *world) createHeldAt(s lifecycle.Step) *heldCreate {
	w.t.Helper()
	return w.createHeldWith(s, restricted)
}

// createHeldWith is createHeldAt for the create request body.
func (w *world) createHeldWith(s lifecycle.Step, body string) *heldCreate {
	w.t.Helper()
	release, held := w.hold(s)
	var once sync.Once
	h := &heldCreate{release: func() { once.Do(func() { close(release) }) }, answered: make(chan createAnswer, 1)}
	w.t.Cleanup(h.release)
	go func() {
		var out map[string]any
		st, raw := w.do("POST", "/v2/sandboxes", "key-a", body, &out)
		h.answered <- createAnswer{st, raw}
	}()
	select {
	case h.id = <-held:
	case a := <-h.answered:
		w.t.Fatalf("the create answered %d %s before its %s step", a.status, a.body, s)
	}
	return h
}

// finish lets the held create go on and returns its answer.
func (h *heldCreate) finish() createAnswer {
	h.release()
	return <-h.answered
}

// TestBreakPutDuringCreateStands: a PUT /network/ingress that lands after
// the sandbox's BatchSandbox exists (the sandbox is Creating, where the
// PUT is allowed, spec §5.3) but before the create writes its
// SandboxIngressAllowlist was answered 200 with its rules verified. The
// create, finishing afterwards, must not replace them with its initial
// rules: the PUT is the later writer. The create is held at the start of
// its desired step (hook), so the order is forced, not timed.
func TestBreakPutDuringCreateStands(t *testing.T) {
	w := start(t)
	h := w.createHeldAt(lifecycle.StepDesired)
	id := h.id

	const put = `{"ingress":[{"cidr":"192.0.2.0/24","description":"after the BatchSandbox"}]}`
	var ps ingressallow.Status
	if code, raw := w.do("PUT", "/sandboxes/"+id+"/network/ingress", "key-a", put, &ps); code != http.StatusOK ||
		ps.Desired == nil || !slices.Equal(ingressallow.CIDRs(*ps.Desired), []string{"192.0.2.0/24"}) || !ps.Ready {
		t.Fatalf("PUT while the create waits before its desired step = %d %s; want 200 with the PUT's rules verified", code, raw)
	}
	if a := h.finish(); a.status != http.StatusCreated {
		t.Fatalf("create = %d %s", a.status, a.body)
	}

	var st ingressallow.Status
	if code, raw := w.do("GET", "/sandboxes/"+id+"/network/ingress", "key-a", "", &st); code != http.StatusOK ||
		st.Desired == nil || !slices.Equal(ingressallow.CIDRs(*st.Desired), []string{"192.0.2.0/24"}) ||
		(*st.Desired)[0].Description != "after the BatchSandbox" || st.DesiredVersion != ps.DesiredVersion ||
		st.LastVerified == nil || len(*st.LastVerified) != 1 || (*st.LastVerified)[0].CIDR != "192.0.2.0/24" || !st.Ready {
		t.Fatalf("GET /network/ingress after the create = %d %s; want the PUT's rules (version %d), verified", code, raw, ps.DesiredVersion)
	}
	ing := &networkingv1.Ingress{}
	if err := get(ing, w.ingNS, ingressallow.IngressName(id)); err != nil {
		t.Fatal(err)
	}
	if v := ing.Annotations[ingressallow.AnnotationWhitelist]; v != "192.0.2.0/24" {
		t.Fatalf("carrier whitelist after the create = %q, want the PUT's 192.0.2.0/24", v)
	}
	var info lifecycle.Info
	if code, raw := w.do("GET", "/sandboxes/"+id, "key-a", "", &info); code != http.StatusOK || info.LifecycleState != lifecycle.StateReady {
		t.Fatalf("GET /sandboxes/%s = %d %s", id, code, raw)
	}
}

// carrierWrites records the whitelist of every write corectl sends for
// one managed Ingress (POST or PUT) while armed.
type carrierWrites struct {
	name  atomic.Value // the Ingress name to record (string)
	mu    sync.Mutex
	lists []string
}

func (c *carrierWrites) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		name, _ := c.name.Load().(string)
		if name != "" && r.Body != nil && (r.Method == http.MethodPut || r.Method == http.MethodPost) && strings.Contains(r.URL.Path, "/ingresses") {
			b, err := io.ReadAll(r.Body)
			_ = r.Body.Close()
			if err != nil {
				return nil, err
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
			// corectl's client sends built-in types as protobuf.
			obj, _, err := serializer.NewCodecFactory(env.Scheme).UniversalDeserializer().Decode(b, nil, nil)
			if ing, ok := obj.(*networkingv1.Ingress); err == nil && ok && ing.Name == name {
				c.mu.Lock()
				c.lists = append(c.lists, ing.Annotations[ingressallow.AnnotationWhitelist])
				c.mu.Unlock()
			}
		}
		return rt.RoundTrip(r)
	})
}

// TestBreakPutDuringReadinessStandsAfterA403: a PUT /network/ingress made
// while the create waits for readiness replaces the create's rules. When
// the control-plane source then moves (NAT drift), readiness gets 403 and
// the carrier is rewritten with the rediscovered source: that rewrite must
// carry the PUT's rules, not the create's, so no write after the PUT's
// answer ever puts the create's rules back on the carrier. The create is
// held at the start of its readiness step (hook), and the drift is set
// before it goes on, so the 403 is certain.
func TestBreakPutDuringReadinessStandsAfterA403(t *testing.T) {
	var writes carrierWrites
	w := startWorld(t, env.Config, worldOptions{probe: true, wrap: writes.wrap})
	h := w.createHeldAt(lifecycle.StepReadiness)
	id := h.id

	before := w.putThenDrift(id, func() { writes.name.Store(ingressallow.IngressName(id)) })
	if a := h.finish(); a.status != http.StatusCreated {
		t.Fatalf("create = %d %s", a.status, a.body)
	}
	const want = "10.9.9.10/32,192.0.2.0/24"
	w.putStoodA403(id, before, want)
	writes.mu.Lock()
	lists := slices.Clone(writes.lists)
	writes.mu.Unlock()
	if len(lists) == 0 {
		t.Fatal("the carrier was not rewritten after the 403")
	}
	for i, l := range lists {
		if l != want {
			t.Fatalf("carrier write %d after the PUT was answered has whitelist %q, want %q (the PUT's rules and the new source); all: %q", i, l, want, lists)
		}
	}
}

// putThenDrift sends PUT /network/ingress 192.0.2.0/24 for sandbox id
// (held before its readiness step) and checks it is answered 200,
// verified; then runs answered, moves the NAT'd source nginx sees to
// 10.9.9.10 (so the next ping is refused) and returns the fixed entry's
// request number from then on.
func (w *world) putThenDrift(id string, answered func()) uint64 {
	w.t.Helper()
	var ps ingressallow.Status
	if code, raw := w.do("PUT", "/sandboxes/"+id+"/network/ingress", "key-a", `{"ingress":[{"cidr":"192.0.2.0/24"}]}`, &ps); code != http.StatusOK || !ps.Ready {
		w.t.Fatalf("PUT while the create waits for readiness = %d %s; want 200, verified", code, raw)
	}
	answered()
	w.mu.Lock()
	w.source = "10.9.9.10"
	w.mu.Unlock()
	return w.entry.Received()
}

// putStoodA403 checks what a create that met a readiness 403 after a PUT
// of 192.0.2.0/24 left: the fixed entry refused the ping of sandbox id
// after its request number before, the carrier's whitelist is want (the
// PUT's rules and the moved source), and GET shows the PUT's rules,
// verified.
func (w *world) putStoodA403(id string, before uint64, want string) {
	w.t.Helper()
	var forbidden bool
	for _, r := range w.entry.RequestsAfter(before) {
		forbidden = forbidden || (r.Path == "/"+id+"/44772/ping" && r.Status == http.StatusForbidden)
	}
	if !forbidden {
		w.t.Fatal("the moved probe source was never refused")
	}
	ing := &networkingv1.Ingress{}
	if err := get(ing, w.ingNS, ingressallow.IngressName(id)); err != nil {
		w.t.Fatal(err)
	}
	if v := ing.Annotations[ingressallow.AnnotationWhitelist]; v != want {
		w.t.Fatalf("carrier whitelist after the create = %q, want %q (the PUT's rules and the new source)", v, want)
	}
	// The rewrite was read back and verified: status.appliedVersion is the
	// carrier's version it read back (spec §5.2: the object version of the
	// last successful read-back), not the one before it.
	al := &v1alpha1.SandboxIngressAllowlist{}
	if err := get(al, w.nsA, id); err != nil {
		w.t.Fatal(err)
	}
	if al.Status.AppliedVersion != ing.ResourceVersion || !slices.Equal(al.Status.Applied, []string{"192.0.2.0/24"}) {
		w.t.Fatalf("allowlist status after the rewrite: applied %v at version %q; the carrier is at version %q", al.Status.Applied, al.Status.AppliedVersion, ing.ResourceVersion)
	}
	var st ingressallow.Status
	if code, raw := w.do("GET", "/sandboxes/"+id+"/network/ingress", "key-a", "", &st); code != http.StatusOK || !st.Ready ||
		st.Desired == nil || !slices.Equal(ingressallow.CIDRs(*st.Desired), []string{"192.0.2.0/24"}) {
		w.t.Fatalf("GET /network/ingress after the create = %d %s", code, raw)
	}
}

// TestBreakPutBetweenDesiredAndItsCycle: a PUT whose new desired version
// lands after the create wrote the allowlist but before the create's own
// cycle ran (the create holds the sandbox's lock, so the PUT's write goes
// through and its cycle waits). The create's cycle started from the older
// version: its conditional status writes fail, it retries from the PUT's
// version, and the PUT's rules are what the carrier holds when the create
// answers 201. The PUT's write is made by a hook on the create's own
// request (right after the apiserver answered the allowlist's create), so
// the order is forced.
func TestBreakPutBetweenDesiredAndItsCycle(t *testing.T) {
	var (
		target atomic.Value // the sandbox ID to act on (string)
		fired  atomic.Bool
		putErr = make(chan error, 1)
		w      *world
	)
	wrap := func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			id, _ := target.Load().(string)
			if id != "" && w.wroteAllowlist(r, resp, err) && fired.CompareAndSwap(false, true) {
				// What PUT /network/ingress writes (it then waits for the
				// cycle, which this test reads back below).
				putErr <- w.putBehindTheCreate(id)
			}
			return resp, err
		})
	}
	w = startWorld(t, env.Config, worldOptions{wrap: wrap})
	h, a := w.createTargeted(&target)
	if a.status != http.StatusCreated {
		t.Fatalf("create = %d %s", a.status, a.body)
	}
	if !fired.Load() {
		t.Fatal("the hook never saw the create's write of the allowlist")
	}
	if err := <-putErr; err != nil {
		t.Fatalf("the PUT's write between the create's write and its cycle: %v", err)
	}
	var st ingressallow.Status
	if code, raw := w.do("GET", "/sandboxes/"+h.id+"/network/ingress", "key-a", "", &st); code != http.StatusOK || !st.Ready ||
		st.DesiredVersion != 2 || st.Desired == nil || !slices.Equal(ingressallow.CIDRs(*st.Desired), []string{"192.0.2.0/24"}) {
		t.Fatalf("GET /network/ingress after the create = %d %s; want the PUT's rules at version 2, verified", code, raw)
	}
	ing := &networkingv1.Ingress{}
	if err := get(ing, w.ingNS, ingressallow.IngressName(h.id)); err != nil {
		t.Fatal(err)
	}
	if v := ing.Annotations[ingressallow.AnnotationWhitelist]; v != "192.0.2.0/24" {
		t.Fatalf("carrier whitelist when the create answered = %q, want the PUT's 192.0.2.0/24", v)
	}
}

// wroteAllowlist reports whether request r, answered resp or err, was
// corectl's successful write (POST) of a SandboxIngressAllowlist in the
// world's namespace A.
func (w *world) wroteAllowlist(r *http.Request, resp *http.Response, err error) bool {
	return err == nil && r.Method == http.MethodPost && resp.StatusCode == http.StatusCreated &&
		strings.HasSuffix(r.URL.Path, "/namespaces/"+w.nsA+"/sandboxingressallowlists")
}

// createTargeted sends a restricted create, stores its sandbox ID in
// target (which the world's transport hooks act on) while it waits at the
// start of its desired step, and returns it with its answer.
func (w *world) createTargeted(target *atomic.Value) (*heldCreate, createAnswer) {
	h := w.createHeldAt(lifecycle.StepDesired)
	target.Store(h.id)
	return h, h.finish()
}

// putBehindTheCreate writes what a PUT /network/ingress of 192.0.2.0/24
// writes for sandbox id in namespace A (the PUT then waits for a cycle).
func (w *world) putBehindTheCreate(id string) error {
	_, err := w.orch.Ingress.SetDesired(context.Background(), w.nsA, id, []v1alpha1.IngressRule{{CIDR: "192.0.2.0/24"}})
	return err
}

// TestBreakPutBeforeTheOwnerBackfill: a PUT /network/ingress that lands
// after the BatchSandbox exists but before the create back-filled its
// UID onto the carrier it wrote first (its owner annotation still names
// no UID). The leader's cycle for the PUT must not judge that carrier
// foreign (409 CarrierForeign, a settled failure the create's own cycle
// then finds and fails on): it is the create's, half-way. The PUT's
// rules are applied once the back-fill is done, the PUT is answered for
// them and the create answers 201 with them in force. The create is held
// at the start of its owners step (hook) until the leader has run a
// cycle for the PUT's allowlist.
func TestBreakPutBeforeTheOwnerBackfill(t *testing.T) {
	w := start(t)
	h := w.createHeldAt(lifecycle.StepOwners)
	id := h.id

	put := make(chan createAnswer, 1)
	var ps ingressallow.Status
	go func() {
		code, raw := w.do("PUT", "/sandboxes/"+id+"/network/ingress", "key-a", `{"ingress":[{"cidr":"192.0.2.0/24"}]}`, &ps)
		put <- createAnswer{code, raw}
	}()
	// The carrier's own events wake cycles that find no allowlist
	// (NoChange); the PUT's is the first that ends otherwise.
	kubetest.Eventually(t, 30*time.Second, "the leader's cycle for the PUT's allowlist", func() (bool, error) {
		m := w.metrics()
		return m.Value("corectl_reconcile_total", "controller", "ingress")-
			m.Value("corectl_reconcile_total", "controller", "ingress", "outcome", string(ingressallow.OutcomeNoChange)) >= 1, nil
	})
	if a := h.finish(); a.status != http.StatusCreated {
		t.Fatalf("create = %d %s; want 201 (a PUT before the owner back-fill must not fail it)", a.status, a.body)
	}
	if a := <-put; a.status != http.StatusOK || ps.Desired == nil || !slices.Equal(ingressallow.CIDRs(*ps.Desired), []string{"192.0.2.0/24"}) || !ps.Ready {
		t.Fatalf("PUT before the owner back-fill = %d %s; want 200 with its rules verified", a.status, a.body)
	}
	var st ingressallow.Status
	if code, raw := w.do("GET", "/sandboxes/"+id+"/network/ingress", "key-a", "", &st); code != http.StatusOK || !st.Ready ||
		st.Desired == nil || !slices.Equal(ingressallow.CIDRs(*st.Desired), []string{"192.0.2.0/24"}) {
		t.Fatalf("GET /network/ingress after the create = %d %s; want the PUT's rules, verified", code, raw)
	}
	ing := &networkingv1.Ingress{}
	if err := get(ing, w.ingNS, ingressallow.IngressName(id)); err != nil {
		t.Fatal(err)
	}
	if v := ing.Annotations[ingressallow.AnnotationWhitelist]; v != "192.0.2.0/24" {
		t.Fatalf("carrier whitelist after the create = %q, want the PUT's 192.0.2.0/24", v)
	}
}

// TestBreakPutMakesTheCreateRestrictedThenA403: an unrestricted create
// (no carrier of its own) whose sandbox a PUT /network/ingress made
// restricted while it waited for readiness. The control-plane source then
// moves (NAT drift) and readiness gets 403 from the PUT's carrier: the
// 403 must rediscover the source and rewrite that carrier with the PUT's
// rules, as for a restricted create, instead of doing nothing until the
// readiness budget is spent and the create fails. The create is held at
// the start of its readiness step (hook) and the drift is set before it
// goes on, so the 403 is certain.
func TestBreakPutMakesTheCreateRestrictedThenA403(t *testing.T) {
	w := startWith(t, env.Config, true)
	h := w.createHeldWith(lifecycle.StepReadiness, `{"templateID":"base"}`)
	id := h.id
	if err := get(&networkingv1.Ingress{}, w.ingNS, ingressallow.IngressName(id)); !apierrors.IsNotFound(err) {
		t.Fatalf("the unrestricted create wrote a carrier (%v)", err)
	}
	before := w.putThenDrift(id, func() {})
	if a := h.finish(); a.status != http.StatusCreated {
		t.Fatalf("create = %d %s; want 201 after the 403 rewrote the PUT's carrier with the moved source", a.status, a.body)
	}
	w.putStoodA403(id, before, "10.9.9.10/32,192.0.2.0/24")
}

// TestBreakPutDuringAFailingUnrestrictedCreate: an unrestricted create
// (no carrier of its own) whose sandbox a PUT /network/ingress made
// restricted while it ran, and which then fails. Its compensation must
// revoke the PUT's carrier first and confirm it gone before it deletes
// the BatchSandbox (the fail-closed order, spec §5.2), and remove the
// PUT's allowlist, instead of leaving both for the orphan scan and owner
// GC. The create is held at the start of its readiness step (hook), the
// PUT is answered, then that step fails.
func TestBreakPutDuringAFailingUnrestrictedCreate(t *testing.T) {
	w := start(t)
	h := w.createHeldWith(lifecycle.StepReadiness, `{"templateID":"base"}`)
	var ps ingressallow.Status
	if code, raw := w.do("PUT", "/sandboxes/"+h.id+"/network/ingress", "key-a", `{"ingress":[{"cidr":"192.0.2.0/24"}]}`, &ps); code != http.StatusOK || !ps.Ready {
		t.Fatalf("PUT while the create waits for readiness = %d %s; want 200, verified", code, raw)
	}
	if err := get(&networkingv1.Ingress{}, w.ingNS, ingressallow.IngressName(h.id)); err != nil {
		t.Fatalf("the PUT's carrier: %v", err)
	}
	w.fail(lifecycle.StepReadiness)
	a := h.finish()
	var fb struct {
		Error   string   `json:"error"`
		Cleanup []string `json:"cleanup"`
	}
	if err := json.Unmarshal(a.body, &fb); err != nil || a.status != http.StatusServiceUnavailable || fb.Error != lifecycle.CodeNotReady {
		t.Fatalf("create = %d %s (%v); want 503 %s", a.status, a.body, err, lifecycle.CodeNotReady)
	}
	want := []string{"delete-ingress", "delete-desired", "delete-batchsandbox", "delete-policy"}
	if !slices.Equal(fb.Cleanup, want) {
		t.Fatalf("cleanup %v, want %v (the PUT's carrier first)", fb.Cleanup, want)
	}
	w.nothingLeft()
}

// TestBreakStaleAllowlistOfTheSameName: a SandboxIngressAllowlist left by
// an earlier sandbox of the same ID (owned by another BatchSandbox UID,
// e.g. before owner GC ran) is never adopted: the create fails at its
// desired step and says why. Its compensation removes the leftover with
// the rest (the BatchSandbox of that name is this create's, so nothing
// else can own it), so the name does not stay unusable: the next create
// of the same ID succeeds.
func TestBreakStaleAllowlistOfTheSameName(t *testing.T) {
	w := start(t)
	ctx := context.Background()
	id := lifecycle.NewID("sb")
	ctrl := true
	stale := &v1alpha1.SandboxIngressAllowlist{
		ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: w.nsA,
			Labels: (&sandbox.Sandbox{ID: id, Namespace: w.nsA}).IdentityLabels(w.clusterID),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: sandbox.GVK.GroupVersion().String(), Kind: sandbox.GVK.Kind, Name: id,
				UID: "00000000-0000-0000-0000-0000000000aa", Controller: &ctrl}}},
		Spec: v1alpha1.SandboxIngressAllowlistSpec{ClusterID: w.clusterID, Desired: []v1alpha1.IngressRule{{CIDR: "0.0.0.0/0"}}, Revision: 1},
	}
	if err := env.Client.Create(ctx, stale); err != nil {
		t.Fatal(err)
	}
	req := lifecycle.CreateRequest{CredentialID: "a", Namespace: w.nsA, TemplateID: "base", SandboxID: id,
		Network: json.RawMessage(`{"ingress":[{"cidr":"203.0.113.0/24"}]}`)}
	_, err := w.orch.Create(ctx, req)
	var ce *lifecycle.CreateError
	if !errors.As(err, &ce) || ce.Step != lifecycle.StepDesired || !strings.Contains(ce.Reason, "another BatchSandbox") {
		t.Fatalf("create over a stale allowlist = %v; want a CreateError at %s naming the other BatchSandbox", err, lifecycle.StepDesired)
	}
	if !slices.Equal(ce.Cleanup, []string{"delete-ingress", "delete-desired", "delete-batchsandbox", "delete-policy"}) {
		t.Fatalf("cleanup %v", ce.Cleanup)
	}
	w.nothingLeft()
	c, err := w.orch.Create(ctx, req)
	if err != nil {
		t.Fatalf("the next create of %s = %v; want it to succeed", id, err)
	}
	al := &v1alpha1.SandboxIngressAllowlist{}
	if err := get(al, w.nsA, id); err != nil || !slices.Equal(al.Status.LastVerified, []string{"203.0.113.0/24"}) ||
		len(al.OwnerReferences) != 1 || al.OwnerReferences[0].UID == stale.OwnerReferences[0].UID {
		t.Fatalf("allowlist of the next create %s: %+v %v", c.SandboxID, al, err)
	}
}

// TestBreakPutAndCreateBothCreateTheAllowlist: a PUT /network/ingress
// that read no allowlist (so it goes on to create one) while the create,
// at its desired step, creates it first. The PUT's create then meets
// AlreadyExists: it must read again and write its rules as a new desired
// version over the create's (not fail, not be dropped), be answered for
// them, and the create must answer 201 with the PUT's rules in force.
// Ordered by a hook on corectl's transport: the PUT's read that found
// nothing is held until the create's own write of the allowlist was
// answered.
func TestBreakPutAndCreateBothCreateTheAllowlist(t *testing.T) {
	var (
		target      atomic.Value // the sandbox ID (string)
		sawNone     = make(chan struct{})
		createWrote = make(chan struct{})
		once1       sync.Once
		once2       sync.Once
		w           *world
	)
	wrap := func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			id, _ := target.Load().(string)
			resp, err := rt.RoundTrip(r)
			if id == "" || err != nil {
				return resp, err
			}
			coll := "/namespaces/" + w.nsA + "/sandboxingressallowlists"
			switch {
			case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, coll+"/"+id) && resp.StatusCode == http.StatusNotFound:
				// The PUT's read: it found none. Hold it until the
				// create's write below was answered.
				held := false
				once1.Do(func() { held = true; close(sawNone) })
				if held {
					select {
					case <-createWrote:
					case <-r.Context().Done():
					}
				}
			case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, coll) && resp.StatusCode == http.StatusCreated:
				once2.Do(func() { close(createWrote) })
			}
			return resp, err
		})
	}
	w = startWorld(t, env.Config, worldOptions{wrap: wrap})
	h := w.createHeldAt(lifecycle.StepDesired)
	target.Store(h.id)

	put := make(chan createAnswer, 1)
	var ps ingressallow.Status
	go func() {
		code, raw := w.do("PUT", "/sandboxes/"+h.id+"/network/ingress", "key-a", `{"ingress":[{"cidr":"192.0.2.0/24"}]}`, &ps)
		put <- createAnswer{code, raw}
	}()
	select {
	case <-sawNone:
	case a := <-put:
		t.Fatalf("the PUT answered %d %s before its read of the allowlist was seen", a.status, a.body)
	}
	if a := h.finish(); a.status != http.StatusCreated {
		t.Fatalf("create = %d %s", a.status, a.body)
	}
	if a := <-put; a.status != http.StatusOK || ps.DesiredVersion != 2 || ps.Desired == nil ||
		!slices.Equal(ingressallow.CIDRs(*ps.Desired), []string{"192.0.2.0/24"}) || !ps.Ready {
		t.Fatalf("PUT = %d %s; want 200 with its rules at version 2 (over the create's), verified", a.status, a.body)
	}
	ing := &networkingv1.Ingress{}
	if err := get(ing, w.ingNS, ingressallow.IngressName(h.id)); err != nil {
		t.Fatal(err)
	}
	if v := ing.Annotations[ingressallow.AnnotationWhitelist]; v != "192.0.2.0/24" {
		t.Fatalf("carrier whitelist = %q, want the PUT's 192.0.2.0/24", v)
	}
	var info lifecycle.Info
	if code, raw := w.do("GET", "/sandboxes/"+h.id, "key-a", "", &info); code != http.StatusOK || info.LifecycleState != lifecycle.StateReady ||
		info.Ingress == nil || !info.Ingress.Ready {
		t.Fatalf("GET /sandboxes/%s = %d %s", h.id, code, raw)
	}
}

// TestBreakPutDuringCompensation: a PUT /network/ingress while a failed
// create compensates. The compensation is the sandbox's deletion (spec
// §5.2's fail-closed order), so the sandbox must already read as Deleting
// there: the PUT is refused at once (409, spec §5.3) instead of writing a
// new desired version that nothing will apply (its cycle would wait for
// the compensation, find the sandbox gone, and the PUT be answered only
// when its wait ran out), and GET answers 404 naming Deleting, not 200
// Creating. The
// create fails its readiness step (fault) and is held at the start of
// its compensation (hook).
func TestBreakPutDuringCompensation(t *testing.T) {
	w := start(t)
	w.fail(lifecycle.StepReadiness)
	h := w.createHeldAt(lifecycle.StepDeleteIngress)
	w.goneForE2B(h.id, lifecycle.StateDeleting)
	var e struct{ Error, Message string }
	if code, raw := w.do("PUT", "/sandboxes/"+h.id+"/network/ingress", "key-a", `{"ingress":[{"cidr":"192.0.2.0/24"}]}`, &e); code != http.StatusConflict {
		t.Fatalf("PUT during the compensation = %d %s; want 409", code, raw)
	}
	if a := h.finish(); a.status != http.StatusServiceUnavailable || !strings.Contains(string(a.body), lifecycle.CodeNotReady) {
		t.Fatalf("create = %d %s; want 503 %s", a.status, a.body, lifecycle.CodeNotReady)
	}
	w.nothingLeft()
}

// TestBreakDeleteDuringTheHeldCreate: a DELETE while the create waits at
// the start of its desired step (hook) removes the sandbox (204). The
// create then goes on: it must not answer 201 for a deleted sandbox, its
// answer names the step and nothing else (no cleanup noise about the
// BatchSandbox being gone already), and it leaves nothing behind, not
// even the allowlist it wrote after the DELETE.
func TestBreakDeleteDuringTheHeldCreate(t *testing.T) {
	w := start(t)
	h := w.createHeldAt(lifecycle.StepDesired)
	if code, raw := w.do("DELETE", "/sandboxes/"+h.id, "key-a", "", nil); code != http.StatusNoContent {
		t.Fatalf("DELETE during the create = %d %s", code, raw)
	}
	a := h.finish()
	var fb struct {
		Error, Message, Step string
		Cleanup              []string
	}
	if err := json.Unmarshal(a.body, &fb); err != nil || a.status != http.StatusInternalServerError || fb.Step != string(lifecycle.StepDesired) {
		t.Fatalf("create after the DELETE = %d %s (%v); want 500 at step %s", a.status, a.body, err, lifecycle.StepDesired)
	}
	if strings.Contains(fb.Message, "cleanup") {
		t.Fatalf("create's answer reports a cleanup failure: %s", fb.Message)
	}
	w.nothingLeft()
}

// TestBreakCreateCycleSuperseded: the create's own cycle ends Superseded
// (another writer's version of the carrier came between its read and its
// write: here an admin's edit, made by the hook just before the cycle's
// carrier update goes out). Nothing of the cycle's is on the carrier and
// nothing was rolled back; the create must retry the cycle, not fail on
// it (a Superseded record is UnverifiedSpec ConcurrentUpdate) and not
// answer before the retry verified. The cycle writes because a PUT's
// rules (192.0.2.0/24) replaced the create's right after the create wrote
// its allowlist (as in TestBreakPutBetweenDesiredAndItsCycle).
func TestBreakCreateCycleSuperseded(t *testing.T) {
	var (
		target  atomic.Value // the sandbox ID to act on (string)
		put     atomic.Bool
		edited  atomic.Bool
		hookErr = make(chan error, 2)
		w       *world
	)
	wrap := func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			id, _ := target.Load().(string)
			if id != "" && put.Load() && r.Method == http.MethodPut &&
				strings.HasSuffix(r.URL.Path, "/namespaces/"+w.ingNS+"/ingresses/"+ingressallow.IngressName(id)) && edited.CompareAndSwap(false, true) {
				ing := &networkingv1.Ingress{}
				err := get(ing, w.ingNS, ingressallow.IngressName(id))
				if err == nil {
					ing.Annotations["example.com/edited-by"] = "admin"
					err = env.Client.Update(context.Background(), ing)
				}
				hookErr <- err
			}
			resp, err := rt.RoundTrip(r)
			if id != "" && w.wroteAllowlist(r, resp, err) && put.CompareAndSwap(false, true) {
				hookErr <- w.putBehindTheCreate(id)
			}
			return resp, err
		})
	}
	w = startWorld(t, env.Config, worldOptions{wrap: wrap})
	h, a := w.createTargeted(&target)
	if a.status != http.StatusCreated {
		t.Fatalf("create whose cycle was superseded once = %d %s; want 201 after the retry", a.status, a.body)
	}
	if !put.Load() || !edited.Load() {
		t.Fatalf("hooks fired: PUT %v, edit before the cycle's carrier update %v", put.Load(), edited.Load())
	}
	for range 2 {
		if err := <-hookErr; err != nil {
			t.Fatalf("hook: %v", err)
		}
	}
	al := &v1alpha1.SandboxIngressAllowlist{}
	if err := get(al, w.nsA, h.id); err != nil {
		t.Fatal(err)
	}
	if st := al.Status; st.VerificationState != v1alpha1.StateVerified || st.ObservedGeneration != al.Generation ||
		!slices.Equal(st.LastVerified, []string{"192.0.2.0/24"}) || st.Cycle != 2 {
		t.Fatalf("allowlist when the create answered: %s %s (observed %d of %d, LKG %v, cycle %d); want Verified 192.0.2.0/24 by cycle 2 (cycle 1 superseded)",
			st.VerificationState, st.LastErrorCode, st.ObservedGeneration, al.Generation, st.LastVerified, st.Cycle)
	}
	ing := &networkingv1.Ingress{}
	if err := get(ing, w.ingNS, ingressallow.IngressName(h.id)); err != nil {
		t.Fatal(err)
	}
	if ing.Annotations[ingressallow.AnnotationWhitelist] != "192.0.2.0/24" || ing.Annotations["example.com/edited-by"] != "admin" {
		t.Fatalf("carrier annotations = %v; want the PUT's set, the admin's annotation kept", ing.Annotations)
	}
}
