package daemon

import (
	"context"
	"runtime/debug"
	"sync"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/controller"
	"github.com/sandgate/sandgate/internal/gcpolicy"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// maxReplayWait bounds how long the first orphan scan waits for the
// start-up replay (replayOver): past it the scan runs anyway, so a cluster
// whose controllers never drain their queues (steady load) is still
// scanned at start-up.
const maxReplayWait = 3 * time.Minute

// replayPoll is how often replayOver reads the controllers' queue depths.
const replayPoll = 250 * time.Millisecond

// replayOver returns the wait of a cluster's first orphan scan: it
// returns once mgr's informers of every kind its controllers watch
// (BatchSandboxes, Ingresses, NetworkPolicies, SandboxIngressAllowlists)
// have synced and the work queues of the cluster's controllers (queues,
// read by their lengths: controller.Queues.Pending) are empty, or after
// maxReplayWait. It is false when ctx ended first. The lengths are read
// every replayPoll from the queues themselves: gathering the whole metrics
// registry for their workqueue_depth gauges four times a second
// allocated every series of the process each time.
//
// At 10,000 sandboxes the replay (the informers' lists and the
// controllers' start-up reconciles) is corectl's heap peak; a scan running
// beside it held its list pages on top (docs/benchmarks.md, issue 33).
func replayOver(mgr manager.Manager, queues *controller.Queues) func(ctx context.Context) bool {
	return func(ctx context.Context) bool {
		ctx, cancel := context.WithTimeout(ctx, maxReplayWait)
		defer cancel()
		// The informers the controllers use (the same objects, so the
		// same informers): requested here in case a controller has not
		// started its sources yet.
		for _, obj := range []client.Object{batchSandboxes(), &networkingv1.Ingress{}, &networkingv1.NetworkPolicy{}, &v1alpha1.SandboxIngressAllowlist{}} {
			if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
				return ctxAlive(ctx)
			}
		}
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return ctxAlive(ctx)
		}
		t := time.NewTicker(replayPoll)
		defer t.Stop()
		for queues.Pending() {
			select {
			case <-ctx.Done():
				return ctxAlive(ctx)
			case <-t.C:
			}
		}
		return true
	}
}

// ctxAlive is what replayOver returns once its own context ended: true
// when only maxReplayWait passed (the scan runs), false when the caller's
// context ended.
func ctxAlive(ctx context.Context) bool {
	return context.Cause(ctx) == context.DeadlineExceeded
}

// startupGCPercent is the collector's GOGC while a replay runs
// (startupGC): the heap then grows to 1.5 times the live heap before a
// collection, instead of twice.
const startupGCPercent = 50

// startupGC lowers the collector's target (GOGC) while a replay runs: at
// the process's start (every cluster's informers list their objects) and
// whenever a replica becomes a cluster's leader (its controllers' informers
// and start-up requests). It restores the target once no cluster's replay
// is pending: a cluster's replay is over when its orphan scanner's wait
// (replayOver) returns, or maxReplayWait after it began (a standby never
// replays as leader until elected). At 10,000 sandboxes the live heap is
// highest during the replay (119 against 88 MB after it, with
// GODEBUG=gctrace=1), and with GOGC 100 the heap reached twice that, the
// process's RSS peak (docs/benchmarks.md, issue 33). An operator's GOGC
// (the environment variable, set and not empty: gcpolicy.OperatorGOGC,
// the gateway's rule too) is never changed; an empty GOGC= is no setting.
type startupGC struct {
	mu      sync.Mutex
	env     bool              // the operator set GOGC (gcpolicy.OperatorGOGC): nothing is lowered
	pending map[string]uint64 // cluster ID -> generation of its pending replay
	gen     uint64
	prev    int // the GOGC to restore; -2: nothing lowered
}

// newStartupGC returns a startupGC that has lowered nothing.
func newStartupGC() *startupGC {
	return &startupGC{env: gcpolicy.OperatorGOGC(), pending: map[string]uint64{}, prev: -2}
}

// lower lowers GOGC to startupGCPercent for a replay of cluster id, until
// replayed(id) or maxReplayWait.
func (g *startupGC) lower(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.env {
		return
	}
	g.gen++
	gen := g.gen
	g.pending[id] = gen
	if g.prev == -2 {
		g.prev = debug.SetGCPercent(startupGCPercent)
	}
	time.AfterFunc(maxReplayWait, func() { g.end(id, gen) })
}

// replayed records that cluster id's replay is over, restoring GOGC once
// no cluster's is pending.
func (g *startupGC) replayed(id string) { g.end(id, 0) }

// end ends cluster id's pending replay (only generation gen's, unless gen
// is 0), restoring GOGC once none is pending.
func (g *startupGC) end(id string, gen uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if cur, ok := g.pending[id]; ok && (gen == 0 || cur == gen) {
		delete(g.pending, id)
	}
	if len(g.pending) == 0 && g.prev != -2 {
		debug.SetGCPercent(g.prev)
		g.prev = -2
	}
}

// restore sets GOGC back and forgets every pending replay.
func (g *startupGC) restore() {
	g.mu.Lock()
	defer g.mu.Unlock()
	clear(g.pending)
	if g.prev != -2 {
		debug.SetGCPercent(g.prev)
		g.prev = -2
	}
}
