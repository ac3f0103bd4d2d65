package corectlcrash_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/fixedentry"
	networkingv1 "k8s.io/api/networking/v1"
)

// natMoved is the probe source after the NAT moved (the first is
// probeSource, loopback).
const natMoved = "10.9.9.10"

// serveSandboxes lets creates in w pass readiness: a stand-in of
// OpenSandbox's controller marks each BatchSandbox of w.ns ready, and the
// fixed entry resolves sandboxes from the BatchSandboxes (as OpenSandbox's
// ingress does) to an execd stub.
func (w *world) serveSandboxes() {
	t := w.t
	t.Helper()
	ex := execdstub.New(execdstub.Config{Root: t.TempDir()})
	exSrv := httptest.NewServer(ex)
	t.Cleanup(func() { exSrv.Close(); ex.Close() })
	addr := strings.TrimPrefix(exSrv.URL, "http://")
	w.entry.SetResolver(func(id string) (fixedentry.Sandbox, bool) {
		r, ok := env.Resolve(context.Background(), id)
		return fixedentry.Sandbox{Ready: r.Ready, Endpoint: r.Endpoint, Namespace: r.Namespace,
			Ports: map[int]string{lifecycle.ExecdPort: addr}}, ok
	})
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := env.RunSandboxController(ctx, "127.0.0.1", func(err error) { t.Errorf("sandbox controller: %v", err) }, w.ns)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); wait() })
}

// rewriteKilledAt kills the replica serving a restricted create (not the
// leader) in its readiness 403 rewrite (RewriteProbeSources). The create
// discovers P = loopback and back-fills its carrier with U ∪ P; the test
// holds the back-fill and moves the NAT (every request now reaches the
// fixed entry from natMoved), so the create's readiness ping is refused
// (403), it rediscovers P' = natMoved and rewrites the carrier. With
// afterWrite false the kill comes at that carrier update (held, never
// sent), after the rewrite's status mark; with afterWrite true the update
// lands (U ∪ P') and the kill comes at its read-back. at checks the
// state left at the kill. Then: the create's caller gets no answer; the
// leader's orphan scan removes the abandoned create (carrier first), GET
// answers 404; no carrier version a watch saw allowed more than U ∪ P ∪
// P', and the carrier never came back after its deletion.
func rewriteKilledAt(t *testing.T, afterWrite bool, at func(w *world, id string, al *v1alpha1.SandboxIngressAllowlist, ing *networkingv1.Ingress)) {
	w := newWorld(t)
	w.serveSandboxes()
	sc := createAtBackfill(t, w)
	survivor, killed, proxy, log, created, id, u, backfill := sc.survivor, sc.killed, sc.proxy, sc.log, sc.created, sc.id, sc.u, sc.backfill
	carrierPath := w.carrierPath(id)

	// The NAT moves; the rewrite's carrier update (the first naming the
	// new source) is held, or its read-back.
	moved := natMoved
	w.nat.Store(&moved)
	wrote := false
	proxy.setHold(func(r *http.Request) bool {
		if r.URL.Path != carrierPath {
			return false
		}
		if r.Method == http.MethodPut {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				return false
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			if !bytes.Contains(body, []byte(natMoved+"/32")) {
				return false
			}
			if afterWrite {
				wrote = true
				return false
			}
			return true
		}
		return wrote && r.Method == http.MethodGet
	})
	backfill.release()
	awaitHeld(t, proxy, created, "its readiness rewrite")
	bs := w.batchSandbox(t, id, lifecycle.StateCreating, "the rewrite")
	at(w, id, w.allowlist(id), w.carrier(id))
	killed.kill(t)
	if err := <-created; err == nil {
		t.Fatal("the killed replica answered the create")
	}

	w.removed(t, survivor, bs, id, "", "the leader to remove the abandoned create")
	deletedLast(t, log)
	events := log.seen()
	neverWider(t, events, append(slices.Clone(u), probeSource, natMoved+"/32"))
}

// probes returns the carrier's recorded probe sources.
func probes(t *testing.T, ing *networkingv1.Ingress) []string {
	t.Helper()
	p, err := ingressallow.ProbeSources(ing)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReadinessRewriteKilledBeforeItsCarrierWrite: the kill comes after
// the rewrite's status mark and before its carrier update. Left: the
// allowlist Verified (the mark changes no state, only status.cycle), the
// carrier as back-filled, U ∪ P.
func TestReadinessRewriteKilledBeforeItsCarrierWrite(t *testing.T) {
	rewriteKilledAt(t, false, func(w *world, id string, al *v1alpha1.SandboxIngressAllowlist, ing *networkingv1.Ingress) {
		if al.Status.VerificationState != v1alpha1.StateVerified || al.Status.AppliedVersion != ing.ResourceVersion {
			t.Fatalf("at the held rewrite the allowlist is %s, applied version %s, the carrier at %s",
				al.Status.VerificationState, al.Status.AppliedVersion, ing.ResourceVersion)
		}
		if p := probes(t, ing); !slices.Equal(p, []string{probeSource}) {
			t.Fatalf("the carrier at the held rewrite records the probe sources %v", p)
		}
	})
}

// TestReadinessRewriteKilledAfterItsCarrierWrite: the rewrite's carrier
// update (U ∪ P') landed and its read-back is held: the allowlist still
// records the back-filled version as applied.
func TestReadinessRewriteKilledAfterItsCarrierWrite(t *testing.T) {
	rewriteKilledAt(t, true, func(w *world, id string, al *v1alpha1.SandboxIngressAllowlist, ing *networkingv1.Ingress) {
		if p := probes(t, ing); !slices.Equal(p, []string{natMoved + "/32"}) {
			t.Fatalf("the carrier at the held read-back records the probe sources %v", p)
		}
		if al.Status.VerificationState != v1alpha1.StateVerified || al.Status.AppliedVersion == ing.ResourceVersion {
			t.Fatalf("at the held read-back the allowlist is %s, applied version %s, the carrier at %s",
				al.Status.VerificationState, al.Status.AppliedVersion, ing.ResourceVersion)
		}
	})
}
