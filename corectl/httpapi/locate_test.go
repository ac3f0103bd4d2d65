package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/sandgate/sandgate/corectl/cluster"
	"github.com/sandgate/sandgate/corectl/httpapi"
	"github.com/sandgate/sandgate/corectl/sandbox"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// listCache is a synced informer cache holding items; List hands them
// all out (locate picks the sandbox by name).
type listCache []*sandbox.Cached

func (c listCache) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return nil
}

func (c listCache) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	list.(*sandbox.CachedList).Items = append([]*sandbox.Cached(nil), c...)
	return nil
}

// hungCache is the cache of a cluster whose apiserver has not answered
// since corectl started: a read waits for its sync, which never comes,
// until the request's context ends. It counts the reads.
type hungCache struct{ reads atomic.Int64 }

func (c *hungCache) Get(ctx context.Context, _ client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	c.reads.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

func (c *hungCache) List(ctx context.Context, _ client.ObjectList, _ ...client.ListOption) error {
	c.reads.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

// TestLocateLeavesOutAClusterNotSynced: the Locate question asks every
// cluster's cache; a cluster whose cache has not synced (its apiserver has
// not answered since corectl started) is not asked, so the answer about
// another cluster's sandbox is given, and a sandbox found nowhere else is
// answered 503 unavailable (it may be in the cluster left out), not
// not_found. Before, the question read the unsynced cache too and waited
// with it.
func TestLocateLeavesOutAClusterNotSynced(t *testing.T) {
	const tok = "test-internal-token-0123456789abcdef"
	live := listCache{{ObjectMeta: metav1.ObjectMeta{Name: "sb-live", Namespace: "project"}}}
	hung := &hungCache{}
	synced := false
	srv := &httpapi.Server{InternalToken: tok, Clusters: map[string]*httpapi.ClusterHandle{
		"c1": {Cluster: &cluster.Cluster{ID: "c1"}, Cache: live, CacheSynced: func() bool { return true }},
		"c2": {Cluster: &cluster.Cluster{ID: "c2"}, Cache: hung, CacheSynced: func() bool { return synced }},
	}}
	ask := func(id string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/internal/v1/authorize?sandbox="+id, nil)
		// A context that has ended: a read of the hung cache answers at
		// once with its error instead of holding the test.
		c, cancel := context.WithCancel(req.Context())
		cancel()
		req = req.WithContext(c)
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		return rec
	}
	if rec := ask("sb-live"); rec.Code != http.StatusOK || !bytesContain(rec.Body.Bytes(), `"allowed":true`) || !bytesContain(rec.Body.Bytes(), `"cluster":"c1"`) {
		t.Fatalf("a sandbox of the synced cluster: %d %s", rec.Code, rec.Body.String())
	}
	if rec := ask("sb-nowhere"); rec.Code != http.StatusServiceUnavailable || !bytesContain(rec.Body.Bytes(), `"error":"unavailable"`) {
		t.Fatalf("a sandbox in no synced cluster: %d %s; want 503 unavailable", rec.Code, rec.Body.String())
	}
	if n := hung.reads.Load(); n != 0 {
		t.Fatalf("the unsynced cluster's cache was read %d times", n)
	}
	// Once synced, the cluster is asked like any other (here its read
	// fails: the question answers 503 as before).
	synced = true
	if rec := ask("sb-live"); rec.Code != http.StatusServiceUnavailable || hung.reads.Load() != 1 {
		t.Fatalf("with both synced: %d %s, %d reads of c2; want c2 asked", rec.Code, rec.Body.String(), hung.reads.Load())
	}
}
