package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/httpapi"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/gateway/credential"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// liveReader is the apiserver's copy of one BatchSandbox (nil: not found),
// counting the reads.
type liveReader struct {
	obj   *unstructured.Unstructured
	reads int
}

func (l *liveReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	l.reads++
	if l.obj == nil {
		return apierrors.NewNotFound(schema.GroupResource{Group: sandbox.GVK.Group, Resource: "batchsandboxes"}, key.Name)
	}
	l.obj.DeepCopyInto(obj.(*unstructured.Unstructured))
	return nil
}

func (l *liveReader) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// TestAuthorizeNotReadyReadAgain: a sandbox the cache shows Creating (its
// create's last write not yet seen, as when the SDK's first call follows
// the 201 at once) is read again from the apiserver before the answer
// is not_ready; a cached answer other than not_ready never reads it.
func TestAuthorizeNotReadyReadAgain(t *testing.T) {
	const tok = "test-internal-token-0123456789abcdef"
	const id = "sb-0123456789abcdef"
	creds := credential.Static{"own": {ID: "own", Enabled: true, ProjectNamespace: "project", ClusterID: "c1"},
		"other": {ID: "other", Enabled: true, ProjectNamespace: "project", ClusterID: "c1"}}
	end := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	cached := func(state string) *sandbox.Cached {
		return &sandbox.Cached{
			ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: "project", Annotations: map[string]string{
				v1alpha1.AnnotationLifecycle: state, v1alpha1.AnnotationCredential: "own", v1alpha1.AnnotationEndAt: end,
				lifecycle.EndpointsAnnotation: `["10.0.0.7"]`}},
			Status: sandbox.CachedStatus{Ready: 1},
		}
	}
	live := func(state string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(sandbox.GVK)
		u.SetName(id)
		u.SetNamespace("project")
		u.SetAnnotations(map[string]string{v1alpha1.AnnotationLifecycle: state, v1alpha1.AnnotationCredential: "own",
			v1alpha1.AnnotationEndAt: end, lifecycle.EndpointsAnnotation: `["10.0.0.7"]`})
		_ = unstructured.SetNestedField(u.Object, int64(1), "status", "ready")
		return u
	}
	for _, tc := range []struct {
		name      string
		cred      string
		cache     string
		live      *unstructured.Unstructured
		noReader  bool
		want      string
		wantReads int
	}{
		{name: "cache behind the create", cred: "own", cache: lifecycle.StateCreating, live: live(lifecycle.StateReady), want: `"allowed":true`, wantReads: 1},
		{name: "still creating", cred: "own", cache: lifecycle.StateCreating, live: live(lifecycle.StateCreating), want: `"reason":"not_ready"`, wantReads: 1},
		{name: "deleted meanwhile", cred: "own", cache: lifecycle.StateCreating, live: nil, want: `"reason":"not_found"`, wantReads: 1},
		{name: "no reader", cred: "own", cache: lifecycle.StateCreating, noReader: true, want: `"reason":"not_ready"`},
		{name: "ready in the cache", cred: "own", cache: lifecycle.StateReady, live: live(lifecycle.StateCreating), want: `"allowed":true`},
		{name: "another credential's", cred: "other", cache: lifecycle.StateCreating, live: live(lifecycle.StateReady), want: `"reason":"not_found"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lr := &liveReader{obj: tc.live}
			ch := &httpapi.ClusterHandle{Cluster: &cluster.Cluster{ID: "c1"},
				Cache: sharedCache{{Namespace: "project", Name: id}: cached(tc.cache)}, Reader: lr}
			if tc.noReader {
				ch.Reader = nil
			}
			srv := &httpapi.Server{Credentials: creds, InternalToken: tok, Clusters: map[string]*httpapi.ClusterHandle{"c1": ch}}
			req := httptest.NewRequest(http.MethodGet, "/internal/v1/authorize?credential="+tc.cred+"&sandbox="+id, nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, req)
			if rec.Code != http.StatusOK || !bytesContain(rec.Body.Bytes(), tc.want) {
				t.Fatalf("answer %d %s; want %s", rec.Code, rec.Body.String(), tc.want)
			}
			if lr.reads != tc.wantReads {
				t.Fatalf("%d reads from the apiserver; want %d", lr.reads, tc.wantReads)
			}
		})
	}
}

// TestAuthorizeNotReadyRereadsBounded: a credential whose sandboxes stay
// not ready (Creating, or a pod that does not serve: its tenant can make
// it so) cannot make corectl read the apiserver once per question without
// bound. The re-reads share the cluster's direct client's BatchSandbox rate
// limit with every ownership check, create and delete, and the gateway
// asks each of its replicas' questions about each sandbox once a second: 1,000
// questions in a row read the apiserver 1,000 times before the re-reads
// were bounded (per cluster: a burst of 100, then 50 a second). Over the
// bound the cache's not_ready answer stands.
func TestAuthorizeNotReadyRereadsBounded(t *testing.T) {
	const tok = "test-internal-token-0123456789abcdef"
	const id = "sb-0123456789abcdef"
	creds := credential.Static{"own": {ID: "own", Enabled: true, ProjectNamespace: "project", ClusterID: "c1"}}
	end := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	cached := &sandbox.Cached{
		ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: "project", Annotations: map[string]string{
			v1alpha1.AnnotationLifecycle: lifecycle.StateCreating, v1alpha1.AnnotationCredential: "own", v1alpha1.AnnotationEndAt: end}},
	}
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(sandbox.GVK)
	live.SetName(id)
	live.SetNamespace("project")
	live.SetAnnotations(map[string]string{v1alpha1.AnnotationLifecycle: lifecycle.StateCreating,
		v1alpha1.AnnotationCredential: "own", v1alpha1.AnnotationEndAt: end})
	lr := &liveReader{obj: live}
	ch := &httpapi.ClusterHandle{Cluster: &cluster.Cluster{ID: "c1"},
		Cache: sharedCache{{Namespace: "project", Name: id}: cached}, Reader: lr}
	srv := &httpapi.Server{Credentials: creds, InternalToken: tok, Clusters: map[string]*httpapi.ClusterHandle{"c1": ch}}
	h := srv.Handler()
	const questions = 1000
	start := time.Now()
	for range questions {
		req := httptest.NewRequest(http.MethodGet, "/internal/v1/authorize?credential=own&sandbox="+id, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || !bytesContain(rec.Body.Bytes(), `"reason":"not_ready"`) {
			t.Fatalf("answer %d %s; want not_ready", rec.Code, rec.Body.String())
		}
	}
	elapsed := time.Since(start)
	// The bucket's burst, and what its rate refilled while the questions
	// ran (computed from the time they took, not a speed goal).
	most := 100 + int(50*elapsed.Seconds()) + 1
	if lr.reads > most {
		t.Fatalf("%d questions read the apiserver %d times in %v; want at most %d", questions, lr.reads, elapsed, most)
	}
}

// keyedReader is the apiserver's copies of BatchSandboxes by name.
type keyedReader map[string]*unstructured.Unstructured

func (k keyedReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	u, ok := k[key.Name]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Group: sandbox.GVK.Group, Resource: "batchsandboxes"}, key.Name)
	}
	u.DeepCopyInto(obj.(*unstructured.Unstructured))
	return nil
}

func (k keyedReader) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// TestAuthorizeNotReadyRereadsShared: one credential keeping a sandbox not
// ready and asking about it without pause does not take the cluster's
// re-reads from another credential: the other's first question after its
// create, while the cache still shows Creating, is read again and
// allowed.
func TestAuthorizeNotReadyRereadsShared(t *testing.T) {
	const tok = "test-internal-token-0123456789abcdef"
	const noisyID, quietID = "sb-noisy0123456789ab", "sb-quiet0123456789ab"
	creds := credential.Static{"noisy": {ID: "noisy", Enabled: true, ProjectNamespace: "project", ClusterID: "c1"},
		"quiet": {ID: "quiet", Enabled: true, ProjectNamespace: "project", ClusterID: "c1"}}
	end := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	ann := func(state, cred string) map[string]string {
		return map[string]string{v1alpha1.AnnotationLifecycle: state, v1alpha1.AnnotationCredential: cred,
			v1alpha1.AnnotationEndAt: end, lifecycle.EndpointsAnnotation: `["10.0.0.7"]`}
	}
	cached := func(id, cred string) *sandbox.Cached {
		return &sandbox.Cached{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: "project", Annotations: ann(lifecycle.StateCreating, cred)},
			Status: sandbox.CachedStatus{Ready: 1}}
	}
	live := func(id, cred, state string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(sandbox.GVK)
		u.SetName(id)
		u.SetNamespace("project")
		u.SetAnnotations(ann(state, cred))
		_ = unstructured.SetNestedField(u.Object, int64(1), "status", "ready")
		return u
	}
	ch := &httpapi.ClusterHandle{Cluster: &cluster.Cluster{ID: "c1"},
		Cache:  sharedCache{{Namespace: "project", Name: noisyID}: cached(noisyID, "noisy"), {Namespace: "project", Name: quietID}: cached(quietID, "quiet")},
		Reader: keyedReader{noisyID: live(noisyID, "noisy", lifecycle.StateCreating), quietID: live(quietID, "quiet", lifecycle.StateReady)}}
	srv := &httpapi.Server{Credentials: creds, InternalToken: tok, Clusters: map[string]*httpapi.ClusterHandle{"c1": ch}}
	h := srv.Handler()
	ask := func(cred, id string) string {
		req := httptest.NewRequest(http.MethodGet, "/internal/v1/authorize?credential="+cred+"&sandbox="+id, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("answer %d %s", rec.Code, rec.Body.String())
		}
		return rec.Body.String()
	}
	for range 1000 {
		if a := ask("noisy", noisyID); !bytesContain([]byte(a), `"reason":"not_ready"`) {
			t.Fatalf("noisy answer %s; want not_ready", a)
		}
	}
	if a := ask("quiet", quietID); !bytesContain([]byte(a), `"allowed":true`) {
		t.Fatalf("the other credential's first question after its create: %s; want allowed (read again)", a)
	}
}
