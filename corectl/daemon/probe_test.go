package daemon

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// stuckCache is the informer cache of a manager whose apiserver hangs: it
// never syncs. WaitForCacheSync waits for its context and counts its calls.
type stuckCache struct {
	cache.Cache
	waits atomic.Int64
}

func (s *stuckCache) WaitForCacheSync(ctx context.Context) bool {
	s.waits.Add(1)
	<-ctx.Done()
	return false
}

// stuckManager is a manager with a stuckCache, never elected.
type stuckManager struct {
	manager.Manager
	c *stuckCache
}

func (m stuckManager) GetCache() cache.Cache    { return m.c }
func (m stuckManager) Elected() <-chan struct{} { return make(chan struct{}) }

// TestReadinessOfAReplacedClusterAsksNothing: once a cluster's manager was
// replaced (its apiserver hung past the renew deadline), the cluster no
// longer decides /readyz, and its check no longer waits for the new
// manager's caches, which do not sync while the apiserver hangs: before,
// every /readyz waited cacheSyncWait for each such cluster, one after the
// other. Before any replacement, the cluster's unsynced caches fail it.
func TestReadinessOfAReplacedClusterAsksNothing(t *testing.T) {
	c := &clusterRun{id: "c10", unbuilt: make(chan struct{})}
	req := httptest.NewRequest("GET", "/readyz", nil)
	c.running.Store(true)
	if err := c.ready(req); err == nil {
		t.Fatal("ready with no manager built yet")
	}
	sc := &stuckCache{}
	c.setManager(stuckManager{c: sc})
	if err := c.ready(req); err == nil {
		t.Fatal("ready with the caches not synced and no replacement")
	}
	if n := sc.waits.Load(); n != 1 {
		t.Fatalf("the first check waited for the caches %d times, want 1", n)
	}
	c.restarts.Store(1)
	if err := c.ready(req); err != nil {
		t.Fatalf("a replaced cluster failed readiness: %v", err)
	}
	if n := sc.waits.Load(); n != 1 {
		t.Fatalf("a replaced cluster's check waited for its caches (%d waits in all, want the first check's 1)", n)
	}
}

// nameReader is a cache answering every Get with its name in the
// object's labels.
type nameReader struct {
	client.Reader
	name string
}

func (n nameReader) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	obj.SetLabels(map[string]string{"reader": n.name})
	return nil
}

// TestSwapReaderBeforeTheFirstManager: until Run has built the cluster's
// first manager, a read of the API's cache view waits for it within the
// caller's context (as a read of the first cache waits for its sync),
// and fails with ErrNoCache when that context ends first; once set, reads
// go to the current cache.
func TestSwapReaderBeforeTheFirstManager(t *testing.T) {
	s := newSwapReader("c10")
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	var u unstructured.Unstructured
	if err := s.Get(ended, client.ObjectKey{Name: "x"}, &u); !errors.Is(err, ErrNoCache) {
		t.Fatalf("read with no manager built = %v, want ErrNoCache", err)
	}
	got := make(chan error, 1)
	var w unstructured.Unstructured
	go func() { got <- s.Get(context.Background(), client.ObjectKey{Name: "x"}, &w) }()
	s.set(nameReader{name: "first"})
	if err := <-got; err != nil || w.GetLabels()["reader"] != "first" {
		t.Fatalf("the waiting read = %v, %v; want the first manager's cache", err, w.GetLabels())
	}
	s.set(nameReader{name: "second"})
	if err := s.Get(ended, client.ObjectKey{Name: "x"}, &u); err != nil || u.GetLabels()["reader"] != "second" {
		t.Fatalf("read after the swap = %v, %v", err, u.GetLabels())
	}
}
