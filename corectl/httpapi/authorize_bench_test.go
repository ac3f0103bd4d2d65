package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/httpapi"
	"github.com/sandgate/sandgate/corectl/lifecycle"
	"github.com/sandgate/sandgate/corectl/metrics"
	"github.com/sandgate/sandgate/corectl/sandbox"
	"github.com/sandgate/sandgate/gateway/credential"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// sharedCache is a client.Reader over fixed BatchSandboxes that hands out
// the stored object's maps without a copy, as the daemon's informer cache
// of BatchSandboxes does (UnsafeDisableDeepCopy, *sandbox.Cached).
type sharedCache map[client.ObjectKey]*sandbox.Cached

func (c sharedCache) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	u, ok := c[key]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Group: sandbox.GVK.Group, Resource: "batchsandboxes"}, key.Name)
	}
	*obj.(*sandbox.Cached) = *u
	return nil
}

func (c sharedCache) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return nil
}

// BenchmarkAuthorize is one authorizer question (GET
// /internal/v1/authorize) answered allowed from the cache, with a
// BatchSandbox carrying the annotations a create writes: its allocations
// per question are the authorizer's own (hack/corectlload measures its
// latency at 10,000 sandboxes). metrics=corectl is the route as corectl
// serves it, with its metrics (the route's counter and duration
// histogram and corectl_authorize_duration_seconds); metrics=none
// without them.
func BenchmarkAuthorize(b *testing.B) {
	for _, withMetrics := range []bool{false, true} {
		name := "metrics=none"
		if withMetrics {
			name = "metrics=corectl"
		}
		b.Run(name, func(b *testing.B) { benchmarkAuthorize(b, withMetrics) })
	}
}

// benchToken is the internal token of the benchmarks' servers.
const benchToken = "bench-internal-token-0123456789abcdef"

// benchServer is the benchmarks' authorizer: credential "own" and its
// ready sandbox sb-0123456789abcdef in a shared cache, corectl's metrics
// on when withMetrics is set.
func benchServer(withMetrics bool) *httpapi.Server {
	creds := credential.Static{"own": {ID: "own", Enabled: true, ProjectNamespace: "project", ClusterID: "c1"}}
	end := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	u := &sandbox.Cached{
		ObjectMeta: metav1.ObjectMeta{Name: "sb-0123456789abcdef", Namespace: "project", UID: "8d3c9a60-4a1e-4b6b-9a36-0f5d1f0f1a2b",
			Labels: map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelClusterID: "c1", v1alpha1.LabelCredential: "own"},
			Annotations: map[string]string{
				v1alpha1.AnnotationLifecycle: lifecycle.StateReady, v1alpha1.AnnotationCredential: "own", v1alpha1.AnnotationEndAt: end,
				v1alpha1.AnnotationMetadata: `{"team":"a"}`, lifecycle.EndpointsAnnotation: `["10.0.0.7"]`,
				lifecycle.AnnotationTemplateID: "base", lifecycle.AnnotationTrafficToken: "",
			}},
		Status: sandbox.CachedStatus{Ready: 1},
	}
	cache := sharedCache{{Namespace: "project", Name: "sb-0123456789abcdef"}: u}
	srv := &httpapi.Server{Credentials: creds, InternalToken: benchToken,
		Clusters: map[string]*httpapi.ClusterHandle{"c1": {Cluster: &cluster.Cluster{ID: "c1"}, Cache: cache}}}
	if withMetrics {
		srv.Metrics = metrics.New()
	}
	return srv
}

func benchmarkAuthorize(b *testing.B, withMetrics bool) {
	const tok = benchToken
	srv := benchServer(withMetrics)
	h := srv.Handler()
	req := httptest.NewRequest(http.MethodGet, "/internal/v1/authorize?credential=own&sandbox=sb-0123456789abcdef", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || !bytesContain(rec.Body.Bytes(), `"allowed":true`) {
		b.Fatalf("answer %d %s", rec.Code, rec.Body.String())
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
	}
}

func bytesContain(b []byte, s string) bool { return strings.Contains(string(b), s) }

// BenchmarkAuthorizeHTTP is one authorizer question through corectl's
// HTTP server (net/http on 127.0.0.1, corectl's metrics on), asked on one
// kept-alive connection by a client that allocates nothing, so its
// allocations per question are the server's: the HTTP server's, the
// metrics' and the handler's (what corectl's collector pays per question
// at 2,000 questions/s).
func BenchmarkAuthorizeHTTP(b *testing.B) {
	const tok = benchToken
	srv := benchServer(true)
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	conn, err := net.Dial("tcp", strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	req := []byte("GET /internal/v1/authorize?credential=own&sandbox=sb-0123456789abcdef HTTP/1.1\r\nHost: corectl\r\nAuthorization: Bearer " + tok + "\r\n\r\n")
	br := bufio.NewReader(conn)
	ask := func() {
		if _, err := conn.Write(req); err != nil {
			b.Fatal(err)
		}
		line, err := br.ReadSlice('\n')
		if err != nil || !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
			b.Fatalf("answer %q %v", line, err)
		}
		length := -1
		for {
			h, err := br.ReadSlice('\n')
			if err != nil {
				b.Fatal(err)
			}
			if len(h) <= 2 {
				break
			}
			if v, ok := bytes.CutPrefix(h, []byte("Content-Length: ")); ok {
				length = 0
				for _, c := range bytes.TrimSpace(v) {
					length = length*10 + int(c-'0')
				}
			}
		}
		if length < 0 {
			b.Fatal("answer without Content-Length")
		}
		body, err := br.Peek(length)
		if err != nil || !bytes.Contains(body, []byte(`"allowed":true`)) {
			b.Fatalf("body %q %v", body, err)
		}
		_, _ = br.Discard(length)
	}
	ask()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		ask()
	}
}
