package lifecycle_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/gateway/authorizer"
)

// authz asks the world's corectl authorization endpoint.
func (w *world) authz(token, cred, id string) (int, authorizer.Answer) {
	w.t.Helper()
	req, _ := http.NewRequest("GET", w.url+authorizer.Path+"?"+url.Values{"credential": {cred}, "sandbox": {id}}.Encode(), nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	var a authorizer.Answer
	_ = json.NewDecoder(resp.Body).Decode(&a)
	return resp.StatusCode, a
}

// TestAuthorizeEndpoint: corectl's answer to the gateway's authorizer for
// the owner, a project-wide credential, another credential of the
// namespace, another namespace's, an unknown credential and sandbox; a
// Deleting and an expired sandbox; a deleted one (the informer cache
// follows within the poll); and the internal token.
func TestAuthorizeEndpoint(t *testing.T) {
	w := start(t)
	id := w.create(`{"templateID":"base"}`).SandboxID
	end, _ := lifecycle.EndAt(bs(w.nsA, id))

	if st, _ := w.authz("", "a", id); st != http.StatusUnauthorized {
		t.Fatalf("no token = %d", st)
	}
	if st, _ := w.authz("wrong-token-wrong-token-wrong-token", "a", id); st != http.StatusUnauthorized {
		t.Fatalf("wrong token = %d", st)
	}
	kubetest.Eventually(t, 10*time.Second, "the owner is allowed", func() (bool, error) {
		st, a := w.authz(internalToken, "a", id)
		return st == 200 && a.Allowed, nil
	})
	st, a := w.authz(internalToken, "a", id)
	if got, err := time.Parse(time.RFC3339Nano, a.EndAt); st != 200 || err != nil || !got.Equal(end) {
		t.Fatalf("owner: %d %+v (end %v)", st, a, end)
	}
	for cred, want := range map[string]authorizer.Answer{
		"wide": {Allowed: true, EndAt: a.EndAt},
		"a2":   {Reason: authorizer.ReasonNotFound},
		"b":    {Reason: authorizer.ReasonNotFound},
		"none": {Reason: authorizer.ReasonNotFound},
	} {
		if st, got := w.authz(internalToken, cred, id); st != 200 || got != want {
			t.Errorf("credential %s: %d %+v, want %+v", cred, st, got, want)
		}
	}
	if st, got := w.authz(internalToken, "a", "sb00000000000000000000"); st != 200 || got.Reason != authorizer.ReasonNotFound {
		t.Errorf("unknown sandbox: %d %+v", st, got)
	}

	// Deleting, and expired: objects as a create in flight would leave
	// them (Creating, young: the expiry reconciler leaves those alone).
	mk := func(id, state string, end time.Time) {
		u := kubetest.NewBatchSandbox(w.nsA, id, map[string]string{"allocation-id": lifecycle.NewID("al")})
		u.SetLabels(map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelClusterID: w.clusterID})
		u.SetAnnotations(map[string]string{v1alpha1.AnnotationLifecycle: state, v1alpha1.AnnotationEndAt: end.UTC().Format(time.RFC3339Nano)})
		(&sandbox.Sandbox{Owner: "a"}).MarkOwner(u)
		if err := env.Client.Create(context.Background(), u); err != nil {
			t.Fatal(err)
		}
	}
	deleting, expired := lifecycle.NewID("sb"), lifecycle.NewID("sb")
	mk(deleting, lifecycle.StateDeleting, time.Now().Add(time.Hour))
	mk(expired, lifecycle.StateCreating, time.Now().Add(-time.Second))
	for id, want := range map[string]authorizer.Reason{deleting: authorizer.ReasonDeleting, expired: authorizer.ReasonExpired} {
		kubetest.Eventually(t, 10*time.Second, "sandbox "+string(want), func() (bool, error) {
			st, got := w.authz(internalToken, "a", id)
			return st == 200 && got == authorizer.Answer{Reason: want}, nil
		})
	}

	// Not serving (issue 30 item 9): a create not finished, and a
	// created sandbox whose pod is not ready, are not_ready (the data
	// plane's SANDBOX_NOT_READY); the pod ready again is allowed again.
	creating := lifecycle.NewID("sb")
	mk(creating, lifecycle.StateCreating, time.Now().Add(time.Hour))
	kubetest.Eventually(t, 10*time.Second, "a Creating sandbox is not_ready", func() (bool, error) {
		st, got := w.authz(internalToken, "a", creating)
		return st == 200 && got == authorizer.Answer{Reason: authorizer.ReasonNotReady}, nil
	})
	w.markReady(context.Background(), w.nsA, id, 0)
	kubetest.Eventually(t, 10*time.Second, "a sandbox whose pod is not ready is not_ready", func() (bool, error) {
		st, got := w.authz(internalToken, "a", id)
		return st == 200 && got == authorizer.Answer{Reason: authorizer.ReasonNotReady}, nil
	})
	w.markReady(context.Background(), w.nsA, id, 1)
	kubetest.Eventually(t, 10*time.Second, "the pod ready again is allowed", func() (bool, error) {
		st, got := w.authz(internalToken, "a", id)
		return st == 200 && got.Allowed, nil
	})

	// Deleted: not found once the informer has seen it.
	if st, raw := w.do("DELETE", "/sandboxes/"+id, "key-a", "", nil); st != http.StatusNoContent {
		t.Fatalf("DELETE = %d %s", st, raw)
	}
	kubetest.Eventually(t, 2*time.Second, "the deleted sandbox is not found", func() (bool, error) {
		st, got := w.authz(internalToken, "a", id)
		return st == 200 && got == authorizer.Answer{Reason: authorizer.ReasonNotFound}, nil
	})
	for _, q := range []string{"credential=a", "credential=a&credential=b&sandbox=" + id, "sandbox=" + id + "&sandbox=" + id} {
		req, _ := http.NewRequest("GET", w.url+authorizer.Path+"?"+q, nil)
		req.Header.Set("Authorization", "Bearer "+internalToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("query %s = %d", q, resp.StatusCode)
		}
	}
}

// TestPodServingReadsTheEndpointsAsUnmarshalWould: PodServing (ready 1)
// answers true exactly when json.Unmarshal of the endpoints annotation
// into a []string leaves it non-empty (the rule it had when it decoded the
// annotation per question), for well-formed, empty, malformed and
// mistyped values; ready 0 is never serving.
func TestPodServingReadsTheEndpointsAsUnmarshalWould(t *testing.T) {
	for _, v := range []string{
		`["10.0.0.7"]`, ` [ "10.0.0.7" , "10.0.0.8" ] `, `[]`, ` [ ] `, `[""]`, `[1]`, `[null]`, `[{"a":1}]`, `null`,
		`"10.0.0.7"`, `{"ip":"10.0.0.7"}`, `["10.0.0.7"`, `[`, `]`, `["a"]x`, `x`, ``, " \t\n[\n\"a\"]", `[,]`, `[] []`,
	} {
		var eps []string
		_ = json.Unmarshal([]byte(v), &eps)
		u := &sandbox.Cached{Status: sandbox.CachedStatus{Ready: 1}}
		u.Annotations = map[string]string{lifecycle.EndpointsAnnotation: v}
		if got, want := lifecycle.PodServing(u), len(eps) > 0; got != want {
			t.Errorf("endpoints %q: PodServing %v, json.Unmarshal gives %d addresses", v, got, len(eps))
		}
		u.Status.Ready = 0
		if lifecycle.PodServing(u) {
			t.Errorf("endpoints %q: serving with ready 0", v)
		}
	}
}
