// Package corectlcrash_test kills corectl replicas (bin/corectl, each its
// own process, against the real kube-apiserver) with SIGKILL in the middle
// of their work and checks what an operator relies on (docs/corectl.md
// "Cycles in several replicas", "Restarts, replicas, admins", "Orphan
// scan", "Egress PUT", "Probe-source discovery"): the surviving replica
// brings the sandbox's ingress allowlist or egress policy to a settled
// state, or removes what a dead create or a dead delete left behind, and
// no version of a carrier or egress policy the test can observe is ever
// unrestricted or wider than the rules asked for.
//
// The replica to be killed reaches the apiserver through a loopback proxy
// (apiProxy) that holds a chosen request until the test has killed the
// process (it is then never forwarded) or releases it: the kill lands
// exactly between two of the process's apiserver calls, with no sleeps.
package corectlcrash_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/sandbox"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The two desired versions of the leader tests: R1, then R2, which
// narrows it.
var (
	r1 = []string{"10.1.0.0/16", "10.2.0.0/16"}
	r2 = []string{"10.1.0.0/16"}
)

func rulesBody(set []string) string {
	parts := make([]string, len(set))
	for i, c := range set {
		parts[i] = `{"cidr":"` + c + `"}`
	}
	return `{"ingress":[` + strings.Join(parts, ",") + `]}`
}

// newID returns a sandbox ID unique across the apiserver's tests (an
// Ingress of another test with the same ID would claim the path).
func newID(prefix string) string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// carrierPath is the apiserver path of sandbox id's carrier.
func (w *world) carrierPath(id string) string {
	return "/apis/networking.k8s.io/v1/namespaces/" + w.ingNS + "/ingresses/" + ingressallow.IngressName(id)
}

// leaderScenario starts replica "killed" through a proxy and lets it take
// the Lease, then the standby "survivor" directly; makes a sandbox and
// has the leader verify R1 for it (a PUT through the survivor's API).
func leaderScenario(t *testing.T) (w *world, proxy *apiProxy, killed, survivor *corectlProc, killedID, id string) {
	w = newWorld(t)
	proxy = newAPIProxy(t, env.Config)
	killed = w.start("killed", proxy)
	killedID = w.awaitLeader("")
	survivor = w.start("survivor", nil)
	if h := w.leader(); h != killedID {
		t.Fatalf("the Lease moved to %q before the kill", h)
	}
	id = newID("sb")
	env.OwnedBatchSandbox(t, w.ns, id, "cred-a", map[string]string{"allocation-id": newID("al")})
	var st ingressallow.Status
	code, body, err := do(t, survivor.api, "PUT", "/sandboxes/"+id+"/network/ingress", rulesBody(r1), &st)
	if err != nil || code != 200 || st.VerificationState != v1alpha1.StateVerified {
		t.Fatalf("PUT R1 = %d %s %v", code, body, err)
	}
	return w, proxy, killed, survivor, killedID, id
}

// allowlist reads sandbox id's SandboxIngressAllowlist.
func (w *world) allowlist(id string) *v1alpha1.SandboxIngressAllowlist {
	w.t.Helper()
	al := &v1alpha1.SandboxIngressAllowlist{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: id}, al); err != nil {
		w.t.Fatal(err)
	}
	return al
}

// carrier reads sandbox id's carrier.
func (w *world) carrier(id string) *networkingv1.Ingress {
	w.t.Helper()
	ing := &networkingv1.Ingress{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: w.ingNS, Name: ingressallow.IngressName(id)}, ing); err != nil {
		w.t.Fatal(err)
	}
	return ing
}

// settled checks the end state an operator expects after a takeover: the
// allowlist Verified for its newest desired version gen (rules want), its
// LKG and applied set want, its applied version the carrier's; the carrier
// exactly the verified carrier of want with the probe source (CheckCarrier:
// owner, identity, path, no refused annotation, whitelist want ∪ P); the
// survivor's GET view Ready; and every carrier version the watch saw
// within allowed ∪ P, none deleted.
func settled(t *testing.T, w *world, survivor *corectlProc, id string, want []string, gen int64, allowed []string, log *eventLog) {
	t.Helper()
	al := w.allowlist(id)
	st := &al.Status
	if st.VerificationState != v1alpha1.StateVerified || al.Generation != gen || st.ObservedGeneration != gen ||
		!slices.Equal(st.LastVerified, want) || !slices.Equal(st.Applied, want) || st.LastErrorCode != "" {
		t.Fatalf("allowlist after the takeover: generation %d, status %+v", al.Generation, st)
	}
	if !meta.IsStatusConditionTrue(st.Conditions, ingressallow.ConditionReady) {
		t.Fatalf("allowlist not Ready: %+v", st.Conditions)
	}
	ing := w.carrier(id)
	if st.AppliedVersion != ing.ResourceVersion {
		t.Fatalf("appliedVersion %s, the carrier is at %s", st.AppliedVersion, ing.ResourceVersion)
	}
	sb, err := sandbox.Get(context.Background(), env.Client, w.ns, id, "allocation-id")
	if err != nil {
		t.Fatal(err)
	}
	if code, reason := ingressallow.CheckCarrier(w.cluster, sb, ing, want); code != "" {
		t.Fatalf("carrier after the takeover: %s: %s", code, reason)
	}
	if p, err := ingressallow.ProbeSources(ing); err != nil || !slices.Equal(p, []string{probeSource}) {
		t.Fatalf("carrier's probe sources %v %v", p, err)
	}
	var view ingressallow.Status
	if code, body, err := do(t, survivor.api, "GET", "/sandboxes/"+id+"/network/ingress", "", &view); err != nil || code != 200 ||
		!view.Ready || view.VerificationState != v1alpha1.StateVerified || view.DesiredVersion != gen {
		t.Fatalf("GET through the survivor = %d %s %v", code, body, err)
	}
	// The watch has caught up with the carrier read above.
	kubetest.Eventually(t, 10*time.Second, "the watch to see the carrier's last version", func() (bool, error) {
		ev := log.seen()
		return len(ev) > 0 && ev[len(ev)-1].Object.(*networkingv1.Ingress).ResourceVersion == ing.ResourceVersion, nil
	})
	events := log.seen()
	for _, ev := range events {
		if ev.Type == watch.Deleted {
			t.Fatalf("the carrier was deleted during the takeover: %s", ev.Object.(*networkingv1.Ingress).ResourceVersion)
		}
	}
	neverWider(t, events, append(slices.Clone(allowed), probeSource))
}

// TestLeaderKilledBeforeItsCarrierWrite kills the leader in the middle of
// a cycle for a PUT /network/ingress served by the other replica: after
// the cycle marked the allowlist Verifying, with its carrier update held
// (never sent). The standby takes the Lease, its reconciler finds the
// allowlist Verifying for desired version 2 and runs the cycle again; the
// PUT, still waiting on the survivor, is answered 200 with R2 verified.
// Then settled: Verified, the carrier exactly R2 ∪ P, never wider.
func TestLeaderKilledBeforeItsCarrierWrite(t *testing.T) {
	w, proxy, killed, survivor, killedID, id := leaderScenario(t)
	log := w.watchCarriers()
	path := w.carrierPath(id)
	proxy.setHold(func(r *http.Request) bool { return r.Method == http.MethodPut && r.URL.Path == path })

	put := putAsync(t, survivor.api, id, r2)
	awaitHeld(t, proxy, put, "the leader's carrier write")
	if al := w.allowlist(id); al.Status.VerificationState != v1alpha1.StateVerifying || al.Generation != 2 {
		t.Fatalf("at the held write the allowlist is %s at generation %d, want Verifying at 2", al.Status.VerificationState, al.Generation)
	}
	before := w.carrier(id)
	killed.kill(t)
	if h := w.awaitLeader(killedID); h == "" {
		t.Fatal("no new leader")
	}
	a := <-put
	if a.err != nil || a.code != 200 || a.st.VerificationState != v1alpha1.StateVerified || a.st.DesiredVersion != 2 {
		t.Fatalf("PUT R2 through the survivor = %d %s %v", a.code, a.body, a.err)
	}
	if after := w.carrier(id); after.ResourceVersion == before.ResourceVersion {
		t.Fatal("the survivor verified without writing over a carrier a dead cycle was about to write")
	}
	settled(t, w, survivor, id, r2, 2, r1, log)
}

// TestLeaderKilledAfterItsCarrierWrite kills the leader that serves the
// PUT /network/ingress itself (the API replica and the cycle are one
// process): its carrier update of R2 has landed, its read-back GET is held,
// so the allowlist is left Verifying with a carrier no cycle recorded. The
// PUT's caller gets no answer (the connection dies). The standby takes the
// Lease and settles it: Verified for version 2, the carrier exactly R2 ∪ P
// and recorded as applied, never wider at any version.
func TestLeaderKilledAfterItsCarrierWrite(t *testing.T) {
	w, proxy, killed, survivor, killedID, id := leaderScenario(t)
	log := w.watchCarriers()
	path := w.carrierPath(id)
	proxy.setHold(writeThenRead(path))
	put := make(chan error, 1)
	go func() {
		_, _, err := do(t, killed.api, "PUT", "/sandboxes/"+id+"/network/ingress", rulesBody(r2), nil)
		put <- err
	}()
	awaitHeld(t, proxy, put, "the leader's read-back")
	al := w.allowlist(id)
	if al.Status.VerificationState != v1alpha1.StateVerifying || al.Generation != 2 {
		t.Fatalf("at the held read-back the allowlist is %s at generation %d, want Verifying at 2", al.Status.VerificationState, al.Generation)
	}
	written := w.carrier(id)
	if mark := strconv.FormatInt(al.Status.Cycle, 10); written.Annotations[ingressallow.AnnotationCycle] != mark {
		t.Fatalf("the held cycle's write is not on the carrier: mark %q, the cycle is %s", written.Annotations[ingressallow.AnnotationCycle], mark)
	}
	killed.kill(t)
	if err := <-put; err == nil {
		t.Fatal("the killed replica answered the PUT")
	}
	w.awaitLeader(killedID)
	kubetest.Eventually(t, 30*time.Second, "the survivor to settle the allowlist", func() (bool, error) {
		al := w.allowlist(id)
		return al.Status.VerificationState == v1alpha1.StateVerified && al.Status.ObservedGeneration == 2, nil
	})
	if got := w.allowlist(id); got.Status.AppliedVersion == written.ResourceVersion {
		t.Fatal("the survivor recorded the dead cycle's write, which no read-back of its own confirmed")
	}
	settled(t, w, survivor, id, r2, 2, r1, log)
}

// TestCreateKilledAtTheOwnerBackfill kills the replica serving a create
// (not the leader) between its BatchSandbox and the owner back-fill: the
// back-fill's carrier update is held, never sent. Left behind: the
// BatchSandbox Creating, the carrier of the create's rules U ∪ P with no
// owner UID, the egress policy. The leader's orphan scan takes the create
// for abandoned once it is older than -orphan-grace plus -ready-budget and
// deletes it through the fail-closed delete: carrier, policy and
// BatchSandbox all gone. Before, nothing removed it until its end time
// (the create's timeout, 300 s here); the carrier never held more than U ∪
// P at any version.
func TestCreateKilledAtTheOwnerBackfill(t *testing.T) {
	w := newWorld(t)
	sc := createAtBackfill(t, w)
	survivor, killed, log, created, id, u := sc.survivor, sc.killed, sc.log, sc.created, sc.id, sc.u
	ctx := context.Background()
	bs := w.batchSandbox(t, id, lifecycle.StateCreating, "the back-fill")
	labels, _, _ := unstructured.NestedStringMap(bs.Object, "spec", "template", "metadata", "labels")
	policy := egress.PolicyName(labels["allocation-id"])
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: policy}, &networkingv1.NetworkPolicy{}); err != nil {
		t.Fatalf("the create's policy: %v", err)
	}
	before := w.carrier(id)
	if !strings.HasSuffix(before.Annotations[v1alpha1.AnnotationOwner], "/") {
		t.Fatalf("the carrier names an owner UID before the back-fill: %q", before.Annotations[v1alpha1.AnnotationOwner])
	}
	killed.kill(t)
	if err := <-created; err == nil {
		t.Fatal("the killed replica answered the create")
	}

	w.removed(t, survivor, bs, id, policy, "the leader to remove the abandoned create")
	deletedLast(t, log)
	events := log.seen()
	neverWider(t, events, append(slices.Clone(u), probeSource))
}

// TestCreateCycleKilledAfterItsCarrierWrite kills the replica serving a
// create (not the leader) in the create's own first ingress cycle, after
// its carrier write. A PUT /network/ingress of R, served by the leader's
// replica while the create is held before its desired step, made the
// allowlist, so the create's cycle applies R over the create's U (spec
// §5.3: the PUT is the later writer). The leader's own cycle for the PUT
// is held at its Verifying write; the create's cycle marks Verifying,
// writes the carrier and is killed at its read-back: the allowlist is left
// Verifying with a carrier no cycle recorded. Then the leader's held
// Verifying goes out and fails on the allowlist's resourceVersion (the
// dead cycle's Verifying came after its read), so nothing stale is
// recorded; its retry finds the Verifying left behind, writes the carrier
// itself and verifies it. The PUT is answered 200 with R; the create's
// caller gets no answer; the allowlist is settled as in the leader tests;
// the carrier never held more than U ∪ R ∪ P, and was never deleted.
func TestCreateCycleKilledAfterItsCarrierWrite(t *testing.T) {
	w := newWorld(t)
	lproxy := newAPIProxy(t, env.Config)
	leader := w.start("leader", lproxy)
	w.awaitLeader("")
	kproxy := newAPIProxy(t, env.Config)
	killed := w.start("killed", kproxy)
	alPath := "/apis/network.sandgate.io/v1alpha1/namespaces/" + w.ns + "/sandboxingressallowlists"
	kproxy.setHold(func(r *http.Request) bool { return r.Method == http.MethodPost && r.URL.Path == alPath })
	log := w.watchCarriers()

	u, rr := []string{"198.51.100.0/24"}, []string{"203.0.113.0/24"}
	created := make(chan error, 1)
	go func() {
		_, _, err := do(t, killed.api, "POST", "/sandboxes",
			`{"templateID":"base","timeout":300,"network":{"ingress":[{"cidr":"198.51.100.0/24"}]}}`, nil)
		created <- err
	}()
	desired := awaitHeld(t, kproxy, created, "its desired step")
	var list unstructured.UnstructuredList
	list.SetGroupVersionKind(sandbox.GVK.GroupVersion().WithKind("BatchSandboxList"))
	if err := env.Client.List(context.Background(), &list, client.InNamespace(w.ns)); err != nil || len(list.Items) != 1 {
		t.Fatalf("the create's BatchSandbox: %d %v", len(list.Items), err)
	}
	id := list.Items[0].GetName()

	// The PUT, on the leader's replica; the leader's cycle for it is held
	// at its Verifying.
	statusPath := alPath + "/" + id + "/status"
	lproxy.setHold(func(r *http.Request) bool { return r.Method == http.MethodPut && r.URL.Path == statusPath })
	put := putAsync(t, leader.api, id, rr)
	leaderVerifying := awaitHeld(t, lproxy, put, "the leader's cycle")
	lproxy.setHold(nil)

	// The create's cycle: its Verifying and carrier write go out, its
	// read-back is held.
	carrierPath := w.carrierPath(id)
	kproxy.setHold(writeThenRead(carrierPath))
	desired.release()
	awaitHeld(t, kproxy, created, "its cycle's read-back")
	al := w.allowlist(id)
	if al.Status.VerificationState != v1alpha1.StateVerifying || al.Generation != 1 || !slices.Equal(ingressallow.CIDRs(al.Spec.Desired), rr) {
		t.Fatalf("at the held read-back the allowlist is %s at generation %d with %v, want Verifying at 1 with the PUT's rules",
			al.Status.VerificationState, al.Generation, al.Spec.Desired)
	}
	written := w.carrier(id)
	sb, err := sandbox.Get(context.Background(), env.Client, w.ns, id, "allocation-id")
	if err != nil {
		t.Fatal(err)
	}
	if mark := strconv.FormatInt(al.Status.Cycle, 10); written.Annotations[ingressallow.AnnotationCycle] != mark {
		t.Fatalf("the create's cycle's write is not on the carrier: mark %q, the cycle is %s", written.Annotations[ingressallow.AnnotationCycle], mark)
	}
	if code, reason := ingressallow.CheckCarrier(w.cluster, sb, written, rr); code != "" {
		t.Fatalf("the create's cycle wrote %s: %s", code, reason)
	}
	killed.kill(t)
	if err := <-created; err == nil {
		t.Fatal("the killed replica answered the create")
	}
	leaderVerifying.release()
	a := <-put
	if a.err != nil || a.code != 200 || a.st.VerificationState != v1alpha1.StateVerified || a.st.DesiredVersion != 1 {
		t.Fatalf("PUT through the leader = %d %s %v", a.code, a.body, a.err)
	}
	if got := w.allowlist(id); got.Status.AppliedVersion == written.ResourceVersion {
		t.Fatal("the leader recorded the dead cycle's write, which no read-back of its own confirmed")
	}
	settled(t, w, leader, id, rr, 1, append(slices.Clone(u), rr...), log)
}
