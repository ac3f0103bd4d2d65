package daemon

import (
	"context"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/cache"
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
