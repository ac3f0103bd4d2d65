package lifecycle_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// endAt reads the end time of sandbox id as GET reports it.
func (w *world) endAt(id string) time.Time {
	w.t.Helper()
	var info lifecycle.Info
	if st, raw := w.do("GET", "/sandboxes/"+id, "key-a", "", &info); st != http.StatusOK {
		w.t.Fatalf("GET %s = %d %s", id, st, raw)
	}
	end, err := time.Parse(time.RFC3339Nano, info.EndAt)
	if err != nil {
		w.t.Fatalf("endAt %q: %v", info.EndAt, err)
	}
	stored, ok := lifecycle.EndAt(bs(w.nsA, id))
	if !ok || !stored.Truncate(time.Millisecond).Equal(end) {
		w.t.Fatalf("GET endAt %v, annotation %v (%v)", end, stored, ok)
	}
	return end
}

// near fails unless got is within tol of want.
func near(t *testing.T, what string, got, want time.Time, tol time.Duration) {
	t.Helper()
	if d := got.Sub(want); d < -tol || d > tol {
		t.Fatalf("%s = %v, want %v ± %v", what, got, want, tol)
	}
}

// tokenExp decodes the exp claim of a token (verified elsewhere).
func tokenExp(t *testing.T, tok string) time.Time {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Exp int64 `json:"exp"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return time.Unix(c.Exp, 0)
}

// TestLifetime: create's timeout (default 300 s) sets the end time;
// POST /timeout sets it shorter or longer, capped at start + MaxTimeout;
// refreshes and connect only extend it; bad values are 400 and change
// nothing; tokens expire at start + MaxTimeout + the 30 s grace, so an
// extension never strands a token. Once its end has passed, the
// lifecycle routes, metrics and logs answer 404.
func TestLifetime(t *testing.T) {
	const maxTimeout = 20 * time.Minute
	w := startWorld(t, env.Config, worldOptions{maxTimeout: maxTimeout})
	const tol = 3 * time.Second

	before := time.Now()
	sb := w.create(`{"templateID":"base"}`)
	id := sb.SandboxID
	near(t, "default end", w.endAt(id), before.Add(lifecycle.DefaultTimeout), tol)
	start := bs(w.nsA, id).GetCreationTimestamp().Time
	near(t, "token exp", tokenExp(t, sb.EnvdAccessToken), start.Add(maxTimeout+lifecycle.DefaultTokenGrace), time.Second)

	sb2 := w.create(`{"templateID":"base","timeout":42}`)
	near(t, "end of a 42 s create", w.endAt(sb2.SandboxID), time.Now().Add(42*time.Second), tol)

	// Bad create timeouts: nothing is created.
	for _, body := range []string{`{"timeout":0}`, `{"timeout":-1}`, `{"timeout":1.5}`, `{"timeout":"60"}`, `{"timeout":null}`,
		`{"timeout":1201}`, `{"timeout":2147483648}`, `{"timeout":60,"timeout":70}`} {
		if st, raw := w.do("POST", "/v2/sandboxes", "key-a", body, nil); st != http.StatusBadRequest || !strings.Contains(string(raw), `"bad_request"`) {
			t.Errorf("create %s = %d %s; want 400 bad_request", body, st, raw)
		}
	}

	post := func(path, body string) (int, []byte) { return w.do("POST", "/sandboxes/"+id+path, "key-a", body, nil) }
	// setTimeout: longer, then shorter.
	if st, raw := post("/timeout", `{"timeout":900}`); st != http.StatusNoContent {
		t.Fatalf("timeout 900 = %d %s", st, raw)
	}
	near(t, "end after timeout 900", w.endAt(id), time.Now().Add(900*time.Second), tol)
	if st, raw := post("/timeout", `{"timeout":120}`); st != http.StatusNoContent {
		t.Fatalf("timeout 120 = %d %s", st, raw)
	}
	near(t, "end after timeout 120", w.endAt(id), time.Now().Add(120*time.Second), tol)
	// Longer than the maximum: capped at start + MaxTimeout, as E2B.
	if st, raw := post("/timeout", `{"timeout":86400}`); st != http.StatusNoContent {
		t.Fatalf("timeout 86400 = %d %s", st, raw)
	}
	near(t, "end capped", w.endAt(id), start.Add(maxTimeout), tol)
	if st, raw := post("/timeout", `{"timeout":120}`); st != http.StatusNoContent {
		t.Fatalf("timeout 120 = %d %s", st, raw)
	}
	end := w.endAt(id)
	for _, body := range []string{``, `{}`, `{"timeout":-5}`, `{"timeout":"x"}`, `[]`, `{"timeout":1,"timeout":2}`, `{"timeout":1e3}`} {
		if st, raw := post("/timeout", body); st != http.StatusBadRequest {
			t.Errorf("timeout %q = %d %s; want 400", body, st, raw)
		}
	}
	if got := w.endAt(id); !got.Equal(end) {
		t.Fatalf("a refused timeout moved the end: %v → %v", end, got)
	}

	// Refreshes only extend: 60 s is earlier than the end (120 s), so
	// nothing moves; 600 s extends; no body is 15 s.
	if st, raw := post("/refreshes", `{"duration":60}`); st != http.StatusNoContent {
		t.Fatalf("refresh 60 = %d %s", st, raw)
	}
	if got := w.endAt(id); !got.Equal(end) {
		t.Fatalf("a shorter refresh moved the end: %v → %v", end, got)
	}
	if st, raw := post("/refreshes", `{"duration":600}`); st != http.StatusNoContent {
		t.Fatalf("refresh 600 = %d %s", st, raw)
	}
	near(t, "end after refresh 600", w.endAt(id), time.Now().Add(600*time.Second), tol)
	for _, body := range []string{`{"duration":3601}`, `{"duration":-1}`, `{"duration":true}`} {
		if st, raw := post("/refreshes", body); st != http.StatusBadRequest {
			t.Errorf("refresh %s = %d %s; want 400", body, st, raw)
		}
	}
	if st, raw := post("/timeout", `{"timeout":5}`); st != http.StatusNoContent {
		t.Fatalf("timeout 5 = %d %s", st, raw)
	}
	if st, raw := post("/refreshes", ``); st != http.StatusNoContent {
		t.Fatalf("refresh without body = %d %s", st, raw)
	}
	near(t, "end after an empty refresh", w.endAt(id), time.Now().Add(lifecycle.DefaultRefresh), tol)

	// Connect with a timeout extends (never shortens); more than the
	// maximum is 400.
	var c sandboxBody
	if st, raw := w.do("POST", "/sandboxes/"+id+"/connect", "key-a", `{"timeout":700}`, &c); st != http.StatusOK {
		t.Fatalf("connect 700 = %d %s", st, raw)
	}
	near(t, "end after connect 700", w.endAt(id), time.Now().Add(700*time.Second), tol)
	near(t, "connect token exp", tokenExp(t, c.EnvdAccessToken), start.Add(maxTimeout+lifecycle.DefaultTokenGrace), time.Second)
	if st, raw := w.do("POST", "/v2/sandboxes/"+id+"/connect", "key-a", `{"timeout":10}`, nil); st != http.StatusOK {
		t.Fatalf("connect 10 = %d %s", st, raw)
	}
	near(t, "end after connect 10", w.endAt(id), time.Now().Add(700*time.Second), tol)
	if st, raw := w.do("POST", "/v2/sandboxes/"+id+"/connect", "key-a", `{"timeout":1201}`, nil); st != http.StatusBadRequest {
		t.Fatalf("connect 1201 = %d %s", st, raw)
	}

	// Once its end has passed (no end lies beyond start + MaxTimeout) the
	// sandbox is gone for the lifecycle routes.
	w.skew.Store(int64(maxTimeout + time.Minute))
	if st, raw := post("/timeout", `{"timeout":60}`); st != http.StatusNotFound {
		t.Fatalf("timeout on an expired sandbox = %d %s", st, raw)
	}
	// Its metrics and logs too, though they take the ownership check's
	// read instead of reading it again.
	for _, p := range []string{"/sandboxes/" + id + "/metrics", "/v2/sandboxes/" + id + "/logs"} {
		if st, raw := w.do("GET", p, "key-a", "", nil); st != http.StatusNotFound || !bytes.Contains(raw, []byte("sandbox_not_found")) {
			t.Fatalf("GET %s of an expired sandbox = %d %s", p, st, raw)
		}
	}
	w.skew.Store(0)
	if st, raw := post("/timeout", `{"timeout":1}`); st != http.StatusNoContent {
		t.Fatalf("timeout 1 = %d %s", st, raw)
	}
}

// TestExpiry: a sandbox whose end passes is deleted by the leader through
// the fail-closed delete (every object gone), and is gone for GET and
// connect from then on; setTimeout 0 ends it at once.
func TestExpiry(t *testing.T) {
	w := start(t)
	// u1's policy is read before its end comes near (1 s after a
	// setTimeout): created with a 2 s timeout, a loaded machine could let
	// the expiry delete it before the read.
	u1 := w.create(`{"templateID":"base","timeout":60,"network":{"ingress":[{"cidr":"203.0.113.0/24"}]}}`)
	policy := policyOf(t, w.nsA, bs(w.nsA, u1.SandboxID))
	if st, raw := w.do("POST", "/sandboxes/"+u1.SandboxID+"/timeout", "key-a", `{"timeout":1}`, nil); st != http.StatusNoContent {
		t.Fatalf("timeout 1 = %d %s", st, raw)
	}
	u2 := w.create(`{"templateID":"base"}`)
	if st, raw := w.do("POST", "/sandboxes/"+u2.SandboxID+"/timeout", "key-a", `{"timeout":0}`, nil); st != http.StatusNoContent {
		t.Fatalf("timeout 0 = %d %s", st, raw)
	}
	for _, id := range []string{u1.SandboxID, u2.SandboxID} {
		kubetest.Eventually(t, 30*time.Second, "sandbox "+id+" expired and deleted", func() (bool, error) {
			return bs(w.nsA, id) == nil, nil
		})
		for _, r := range [][2]string{{"GET", "/sandboxes/" + id}, {"POST", "/v2/sandboxes/" + id + "/connect"}} {
			if st, raw := w.do(r[0], r[1], "key-a", "{}", nil); st != http.StatusNotFound {
				t.Fatalf("%s %s after expiry = %d %s", r[0], r[1], st, raw)
			}
		}
	}
	// The policy goes after the BatchSandbox (once no pod it selects is
	// left), so it may outlive it by a moment.
	kubetest.Eventually(t, 30*time.Second, "the expired sandbox's policy removed", func() (bool, error) {
		return apierrors.IsNotFound(get(&networkingv1.NetworkPolicy{}, w.nsA, policy)), nil
	})
	w.assertGone(u1.SandboxID, policy)
}

// TestExpiryAfterRestart: the expiry loop is driven by the objects. A
// sandbox whose end passed while no corectl ran (the object is written
// before corectl starts) is deleted when corectl starts; one whose end is
// still ahead is left alone.
func TestExpiryAfterRestart(t *testing.T) {
	var expired, alive string
	w := startWorld(t, env.Config, worldOptions{before: func(w *world) {
		expired, alive = lifecycle.NewID("sb"), lifecycle.NewID("sb")
		for id, end := range map[string]time.Time{expired: time.Now().Add(-time.Minute), alive: time.Now().Add(time.Hour)} {
			u := kubetest.NewBatchSandbox(w.nsA, id, map[string]string{"allocation-id": lifecycle.NewID("al")})
			u.SetLabels(map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelClusterID: w.clusterID})
			u.SetAnnotations(map[string]string{v1alpha1.AnnotationLifecycle: lifecycle.StateReady,
				v1alpha1.AnnotationEndAt: end.UTC().Format(time.RFC3339Nano), v1alpha1.AnnotationCredential: "a"})
			if err := env.Client.Create(context.Background(), u); err != nil {
				t.Fatal(err)
			}
		}
	}})
	kubetest.Eventually(t, 30*time.Second, "the sandbox that expired while corectl was down is deleted", func() (bool, error) {
		return bs(w.nsA, expired) == nil, nil
	})
	if bs(w.nsA, alive) == nil {
		t.Fatal("a sandbox whose end is ahead was deleted")
	}
}
