package presence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/sandgate/sandgate/internal/kubeenv"
	"github.com/sandgate/sandgate/nodecore/hub"
)

var (
	kube *kubernetes.Clientset
	seq  atomic.Int64
)

func TestMain(m *testing.M) {
	kubeenv.Main(m, nil, nil, func(env *kubeenv.Env) (err error) {
		kube, err = kubernetes.NewForConfig(env.Config)
		return err
	})
}

// namespace creates a fresh namespace.
func namespace(t *testing.T) string {
	t.Helper()
	ns := fmt.Sprintf("presence-%d", seq.Add(1))
	if _, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// clock is a settable clock.
type clock struct{ off atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) advance(d time.Duration) { c.off.Add(int64(d)) }

// sinceRenew is how long ago, by c, renewTime t was.
func (c *clock) sinceRenew(t time.Time) time.Duration { return c.now().Sub(t) }

func replica(t *testing.T, ns, id string, c *clock) *Leases {
	t.Helper()
	cfg := Config{Leases: kube.CoordinationV1(), Namespace: ns, ReplicaID: id, Address: "http://" + id + ":30086"}
	if c != nil {
		cfg.Now = c.now
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var ctx = context.Background()

// TestAcquireRenewRelease: A claims a node (the Lease names A, its address
// and the epoch); B gets ErrHeld; a renewal within the renew interval
// writes nothing, one after it moves renewTime; after A releases, B
// claims it under a higher epoch and the transition is counted.
func TestAcquireRenewRelease(t *testing.T) {
	ns := namespace(t)
	var ca_ clock
	a, b := replica(t, ns, "replica-a", &ca_), replica(t, ns, "replica-b", nil)
	node := uuid.NewString()
	ca, err := a.Acquire(ctx, node, 1)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := kube.CoordinationV1().Leases(ns).Get(ctx, LeaseName(node), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holder(lease) != "replica-a" || lease.Annotations[AnnotationAddress] != "http://replica-a:30086" ||
		lease.Annotations[AnnotationEpoch] != fmt.Sprint(ca.Epoch()) || *lease.Spec.LeaseDurationSeconds != 30 ||
		lease.Labels[LabelKind] != KindNode || *lease.Spec.LeaseTransitions != 0 {
		t.Fatalf("Lease after A's claim: %+v %+v", lease.ObjectMeta, lease.Spec)
	}
	_, err = b.Acquire(ctx, node, 1)
	var held *hub.HeldError
	if !errors.Is(err, hub.ErrHeld) || !errors.As(err, &held) || held.Remaining <= 0 || held.Remaining > 30*time.Second {
		t.Fatalf("B's claim while A holds: %v, want a HeldError with the Lease's remaining time (0, 30s]", err)
	}
	if p, ok, err := b.Holder(ctx, node, true); err != nil || !ok || p.ID != "replica-a" || p.URL != "http://replica-a:30086" {
		t.Fatalf("Holder = %+v %v %v", p, ok, err)
	}
	before := lease.Spec.RenewTime.Time
	rv := lease.ResourceVersion
	if err := ca.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	lease, _ = kube.CoordinationV1().Leases(ns).Get(ctx, LeaseName(node), metav1.GetOptions{})
	if lease.ResourceVersion != rv {
		t.Fatalf("a renewal within the renew interval wrote the Lease")
	}
	ca_.advance(10 * time.Second)
	if err := ca.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	lease, _ = kube.CoordinationV1().Leases(ns).Get(ctx, LeaseName(node), metav1.GetOptions{})
	if !lease.Spec.RenewTime.After(before) {
		t.Fatalf("renewTime %v not after %v", lease.Spec.RenewTime, before)
	}
	if err := ca.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := b.Holder(ctx, node, true); ok {
		t.Fatal("a released Lease still has a holder")
	}
	cb, err := b.Acquire(ctx, node, 1)
	if err != nil {
		t.Fatal(err)
	}
	if cb.Epoch() <= ca.Epoch() {
		t.Fatalf("B's epoch %d is not above A's %d", cb.Epoch(), ca.Epoch())
	}
	lease, _ = kube.CoordinationV1().Leases(ns).Get(ctx, LeaseName(node), metav1.GetOptions{})
	if holder(lease) != "replica-b" || *lease.Spec.LeaseTransitions != 1 {
		t.Fatalf("Lease after B's claim: %+v", lease.Spec)
	}
	// A's old claim is gone: renewing it reports the loss, releasing it
	// leaves B's claim alone.
	ca_.advance(10 * time.Second)
	if err := ca.Renew(ctx); !errors.Is(err, hub.ErrLost) {
		t.Fatalf("renewing a lost claim: %v", err)
	}
	if err := ca.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if p, ok, _ := a.Holder(ctx, node, true); !ok || p.ID != "replica-b" {
		t.Fatalf("after A's late release the holder is %+v %v", p, ok)
	}
}

// slowLeases is a Leases client whose Update advances a clock by delay
// (an apiserver that takes that long to write), and fails while fail is
// set.
type slowLeases struct {
	coordinationclient.LeasesGetter
	clock *clock
	delay time.Duration
	fail  *atomic.Bool
}

func (s slowLeases) Leases(ns string) coordinationclient.LeaseInterface {
	return slowLease{s.LeasesGetter.Leases(ns), s}
}

type slowLease struct {
	coordinationclient.LeaseInterface
	s slowLeases
}

func (l slowLease) Update(ctx context.Context, lease *coordinationv1.Lease, o metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if l.s.fail != nil && l.s.fail.Load() {
		return nil, errors.New("the apiserver is unavailable")
	}
	got, err := l.LeaseInterface.Update(ctx, lease, o)
	l.s.clock.advance(l.s.delay)
	return got, err
}

// TestRenewDueFromRenewTime: with an apiserver that takes 3 s per write,
// heartbeats every 10 s (the renew interval) still renew at each
// heartbeat: the next renewal is due from the renewTime written, not from
// when the write returned (which skipped every other heartbeat's renewal:
// the Lease aged 20 s between writes).
func TestRenewDueFromRenewTime(t *testing.T) {
	ns := namespace(t)
	var c clock
	var results []string
	var failing atomic.Bool
	l, err := New(Config{Leases: slowLeases{kube.CoordinationV1(), &c, 3 * time.Second, &failing}, Namespace: ns,
		ReplicaID: "replica-a", Address: "http://replica-a:30086", Now: c.now,
		Renewed: func(r string) { results = append(results, r) }})
	if err != nil {
		t.Fatal(err)
	}
	node := uuid.NewString()
	cl, err := l.Acquire(ctx, node, 1)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := kube.CoordinationV1().Leases(ns).Get(ctx, LeaseName(node), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	last := lease.Spec.RenewTime.Time
	for hb := range 4 {
		// The next heartbeat, 10 s after the previous one began.
		c.advance(10*time.Second - c.sinceRenew(last))
		if err := cl.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		lease, err = kube.CoordinationV1().Leases(ns).Get(ctx, LeaseName(node), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := lease.Spec.RenewTime.Sub(last); got < 9*time.Second || got > 11*time.Second {
			t.Fatalf("heartbeat %d: renewTime moved by %s, want the 10 s between heartbeats", hb+1, got)
		}
		last = lease.Spec.RenewTime.Time
	}
	if got := fmt.Sprint(results); got != "[written written written written]" {
		t.Fatalf("Renewed saw %s, want four writes", got)
	}
	// A renewal within the renew interval writes nothing and reports
	// nothing; once the Lease is gone, the next one reports it lost.
	results = nil
	if err := cl.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := kube.CoordinationV1().Leases(ns).Delete(ctx, LeaseName(node), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.advance(10 * time.Second)
	if err := cl.Renew(ctx); !errors.Is(err, hub.ErrLost) {
		t.Fatalf("renewing a deleted Lease: %v", err)
	}
	if got := fmt.Sprint(results); got != "[lost]" {
		t.Fatalf("Renewed saw %s, want one loss", got)
	}
	// An apiserver that refuses the write: failed (not lost; the next
	// heartbeat tries again and succeeds).
	other, err := l.Acquire(ctx, uuid.NewString(), 1)
	if err != nil {
		t.Fatal(err)
	}
	results = nil
	failing.Store(true)
	c.advance(10 * time.Second)
	if err := other.Renew(ctx); err == nil || errors.Is(err, hub.ErrLost) {
		t.Fatalf("renewing while the apiserver refuses: %v", err)
	}
	failing.Store(false)
	if err := other.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(results); got != "[failed written]" {
		t.Fatalf("Renewed saw %s, want a failure, then a write", got)
	}
}

// TestExpiredClaimIsTakenOver: a claim not renewed for the lease duration
// (its replica died) is taken over; the dead replica's claim then
// reports ErrLost.
func TestExpiredClaimIsTakenOver(t *testing.T) {
	ns := namespace(t)
	var ca_, cb clock
	a, b := replica(t, ns, "replica-a", &ca_), replica(t, ns, "replica-b", &cb)
	node := uuid.NewString()
	ca, err := a.Acquire(ctx, node, 1)
	if err != nil {
		t.Fatal(err)
	}
	cb.advance(29 * time.Second)
	if _, err := b.Acquire(ctx, node, 1); !errors.Is(err, hub.ErrHeld) {
		t.Fatalf("before expiry: %v", err)
	}
	cb.advance(2 * time.Second)
	claimB, err := b.Acquire(ctx, node, 1)
	// A's renewal is due (its own clock says so) and finds the Lease taken.
	ca_.advance(31 * time.Second)
	if err != nil {
		t.Fatalf("after expiry: %v", err)
	}
	if claimB.Epoch() <= ca.Epoch() {
		t.Fatalf("epochs %d then %d", ca.Epoch(), claimB.Epoch())
	}
	if err := ca.Renew(ctx); !errors.Is(err, hub.ErrLost) {
		t.Fatalf("the expired claim's renewal: %v", err)
	}
}

// TestEpochsAcrossReplicas: three replicas claim 60 nodes each at the same
// time, then the nodes move around: no epoch is ever handed out by two
// replicas, every node's epochs increase with each claim, and all are at
// least the configured floor.
func TestEpochsAcrossReplicas(t *testing.T) {
	ns := namespace(t)
	reps := []*Leases{replica(t, ns, "r0", nil), replica(t, ns, "r1", nil), replica(t, ns, "r2", nil)}
	nodes := make([]string, 60)
	for i := range nodes {
		nodes[i] = uuid.NewString()
	}
	var mu sync.Mutex
	owner := map[int64]string{} // epoch → replica
	last := map[string]int64{}  // node → its latest epoch
	for round := range 3 {
		var wg sync.WaitGroup
		errs := make(chan error, len(nodes)*len(reps))
		for ri, r := range reps {
			for i, n := range nodes {
				if i%len(reps) != (ri+round)%len(reps) {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := r.Acquire(ctx, n, 5)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					if o, dup := owner[c.Epoch()]; dup && o != r.Self() {
						errs <- fmt.Errorf("epoch %d handed out by %s and %s", c.Epoch(), o, r.Self())
					}
					owner[c.Epoch()] = r.Self()
					if c.Epoch() <= last[n] || c.Epoch() < 5 {
						errs <- fmt.Errorf("node %s: epoch %d after %d", n, c.Epoch(), last[n])
					}
					last[n] = c.Epoch()
					mu.Unlock()
					if err := c.Release(ctx); err != nil {
						errs <- err
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
}

// TestCounterRecreatedAboveTheNodes: a deleted counter comes back above
// the highest epoch on the node Leases; a corrupt counter fails the claim
// and is left as it is.
func TestCounterRecreatedAboveTheNodes(t *testing.T) {
	ns := namespace(t)
	a := replica(t, ns, "replica-a", nil)
	n1, n2 := uuid.NewString(), uuid.NewString()
	c1, err := a.Acquire(ctx, n1, 40)
	if err != nil {
		t.Fatal(err)
	}
	if c1.Epoch() != 40 {
		t.Fatalf("first epoch %d, want the floor 40", c1.Epoch())
	}
	if err := kube.CoordinationV1().Leases(ns).Delete(ctx, EpochLeaseName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c2, err := a.Acquire(ctx, n2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if c2.Epoch() != 41 {
		t.Fatalf("epoch after the counter was deleted: %d, want 41", c2.Epoch())
	}
	cnt, err := kube.CoordinationV1().Leases(ns).Get(ctx, EpochLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cnt.Annotations[AnnotationEpoch] = "forty-two"
	if _, err := kube.CoordinationV1().Leases(ns).Update(ctx, cnt, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Acquire(ctx, uuid.NewString(), 1); err == nil || errors.Is(err, hub.ErrHeld) {
		t.Fatalf("claim with a corrupt counter: %v", err)
	}
	got, _ := kube.CoordinationV1().Leases(ns).Get(ctx, EpochLeaseName, metav1.GetOptions{})
	if got.Annotations[AnnotationEpoch] != "forty-two" {
		t.Fatalf("the corrupt counter was rewritten: %q", got.Annotations[AnnotationEpoch])
	}
}

// TestHolderWatchAndReplicas: with Start, Holder answers from the watched
// Leases and follows a release and a new claim; a fresh answer reads the
// apiserver; Replicas lists the replicas holding live claims.
func TestHolderWatchAndReplicas(t *testing.T) {
	ns := namespace(t)
	var cl clock
	a, b := replica(t, ns, "replica-a", &cl), replica(t, ns, "replica-b", &cl)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b.Start(wctx)
	n1, n2 := uuid.NewString(), uuid.NewString()
	c1, err := a.Acquire(ctx, n1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, n2, 1); err != nil {
		t.Fatal(err)
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond) // polling the informer's store
		}
	}
	eventually("the watch to see A's claim", func() bool {
		p, ok, _ := b.Holder(ctx, n1, false)
		return b.Synced() && ok && p.ID == "replica-a"
	})
	if err := c1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := b.Holder(ctx, n1, true); ok {
		t.Fatal("a fresh answer still names a holder")
	}
	eventually("the watch to see the release", func() bool {
		_, ok, _ := b.Holder(ctx, n1, false)
		return !ok
	})
	for _, r := range []*Leases{a, b} { // a lists, b reads its watch
		peers, err := r.Replicas(ctx)
		if err != nil || len(peers) != 1 || peers[0] != (Peer{ID: "replica-b", URL: "http://replica-b:30086"}) {
			t.Fatalf("Replicas on %s = %+v %v", r.Self(), peers, err)
		}
	}
	cl.advance(time.Minute)
	if peers, _ := b.Replicas(ctx); len(peers) != 0 {
		t.Fatalf("Replicas after every claim expired = %+v", peers)
	}
}

func TestNewChecksConfig(t *testing.T) {
	good := Config{Leases: kube.CoordinationV1(), Namespace: "ns", ReplicaID: "r", Address: "http://r:1"}
	for name, mutate := range map[string]func(*Config){
		"no client":    func(c *Config) { c.Leases = nil },
		"no namespace": func(c *Config) { c.Namespace = "" },
		"no replica":   func(c *Config) { c.ReplicaID = "" },
		"no address":   func(c *Config) { c.Address = "" },
		"short lease":  func(c *Config) { c.LeaseDuration = 5 * time.Second },
		"long renew":   func(c *Config) { c.RenewInterval = time.Minute },
	} {
		c := good
		mutate(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := New(good); err != nil {
		t.Fatal(err)
	}
}
