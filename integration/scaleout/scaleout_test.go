// Package scaleout tests the gateway as several replicas: three bin/caddy
// processes sharing node presence and owner epochs through Leases in a
// real kube-apiserver, 200 simulated nodes that reconnect like nodeagent.
package scaleout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/sandgate/sandgate/integration/replicas"
	"github.com/sandgate/sandgate/internal/kubeenv"
	"github.com/sandgate/sandgate/internal/scrapetest"
	"github.com/sandgate/sandgate/node/sim"
	"github.com/sandgate/sandgate/nodecore/presence"
)

const (
	nodeCount     = 200
	leaseDuration = 15 * time.Second
	heartbeat     = 3 * time.Second
	backoffMin    = 500 * time.Millisecond
	backoffMax    = 5 * time.Second
)

// logs collects each replica's output, shown when the test fails.
type logs struct {
	mu  sync.Mutex
	buf [3]strings.Builder
}

type replicaLog struct {
	l *logs
	i int
}

func (w replicaLog) Write(p []byte) (int, error) {
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	return w.l.buf[w.i].Write(p)
}

func (l *logs) dump(t *testing.T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.buf {
		s := l.buf[i].String()
		if len(s) > 20000 {
			s = "…" + s[len(s)-20000:]
		}
		t.Logf("replica-%d log:\n%s", i, s)
	}
}

// TestScaleOut runs three replicas and 200 nodes: nodes spread over the
// replicas; an operation sent through any replica reaches its node once;
// a second connection of a live node is refused with 409 on every other
// replica; kill -9 of one replica puts its nodes back online through the
// others within the lease duration plus the backoff bound, with higher
// owner epochs, no epoch ever handed out by two replicas, and no
// operation replayed (operations in flight across the kill reached their
// node at most once).
func TestScaleOut(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	caddy := filepath.Join(root, "bin", "caddy")
	if _, err := os.Stat(caddy); err != nil {
		t.Fatalf("the gateway binary %s is missing; run `make build` first", caddy)
	}
	ke, err := kubeenv.Start(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ke.Stop()
	kube, err := kubernetes.NewForConfig(ke.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := "sandgate"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	ids := make([]sim.Identity, nodeCount)
	for i := range ids {
		ids[i] = sim.NewIdentity()
	}
	var out logs
	c, err := replicas.Start(replicas.Config{Caddy: caddy, Replicas: 3, Nodes: ids, Kubeconfig: ke.KubeConfig, Namespace: ns,
		LeaseDuration: leaseDuration, HeartbeatInterval: heartbeat, Output: func(i int) io.Writer { return replicaLog{&out, i} }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer func() {
		if t.Failed() {
			out.dump(t)
		}
	}()
	urls := c.URLs()
	replicaOf := map[string]int{}
	for i, u := range urls {
		replicaOf[u] = i
	}

	agents := make([]*sim.Agent, nodeCount)
	for i, id := range ids {
		order := []string{urls[i%3], urls[(i+1)%3], urls[(i+2)%3]}
		agents[i] = sim.StartAgent(sim.AgentConfig{Node: sim.Config{Credential: id.Credential, Hello: id.Hello(), HeartbeatInterval: heartbeat},
			URLs: order, BackoffMin: backoffMin, BackoffMax: backoffMax})
	}
	defer func() {
		for _, a := range agents {
			a.Stop()
		}
	}()
	// current returns the replica each node is connected to now (-1: none).
	current := func() []int {
		cur := make([]int, nodeCount)
		for i, a := range agents {
			cur[i] = -1
			if a.Current() != nil {
				conns := a.Connections()
				cur[i] = replicaOf[conns[len(conns)-1].URL]
			}
		}
		return cur
	}
	waitAll := func(what string, deadline time.Duration, ok func(cur []int) bool) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			if ok(current()) {
				return time.Since(start)
			}
			if time.Since(start) > deadline {
				cur := current()
				missing := 0
				for _, r := range cur {
					if r < 0 {
						missing++
					}
				}
				t.Fatalf("%s: not within %s (%d nodes not connected)", what, deadline, missing)
			}
			time.Sleep(100 * time.Millisecond) // polling the simulated nodes' state
		}
	}
	connectedAll := func(cur []int) bool {
		for _, r := range cur {
			if r < 0 {
				return false
			}
		}
		return true
	}
	took := waitAll("all nodes connected", time.Minute, connectedAll)
	spread := [3]int{}
	for _, r := range current() {
		spread[r]++
	}
	t.Logf("200 nodes connected in %s, spread over the replicas %v", took.Round(time.Millisecond), spread)
	for _, n := range spread {
		if n < 40 {
			t.Fatalf("nodes are not spread over the replicas: %v", spread)
		}
	}
	leases, err := kube.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{presence.LabelKind: presence.KindNode}.String()})
	if err != nil {
		t.Fatal(err)
	}
	if len(leases.Items) != nodeCount {
		t.Fatalf("%d node Leases, want %d", len(leases.Items), nodeCount)
	}

	// Operations through every replica reach their node exactly once.
	dispatched := map[string]int{} // allocation ID → node index
	var dmu sync.Mutex
	var outcomes sync.Map // allocation ID → outcome or refusal code
	send := func(via, i int, alloc string) (replicas.Answer, error) {
		dmu.Lock()
		dispatched[alloc] = i
		dmu.Unlock()
		body := []byte(fmt.Sprintf(`{"operation":"info","deployment_generation":1,"timeout_ms":5000,"reference":{"tenant_id":"t","environment_id":"e","allocation_id":%q}}`, alloc))
		a, err := c.Dispatch(ctx, via, ids[i].NodeID, body)
		switch {
		case err != nil:
			outcomes.Store(alloc, "transport: "+err.Error())
		case a.Status == 200:
			outcomes.Store(alloc, a.Result.Outcome)
		default:
			outcomes.Store(alloc, a.Refusal.Error.Code)
		}
		return a, err
	}
	var wg sync.WaitGroup
	for i := range ids {
		for via := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := send(via, i, fmt.Sprintf("n%d-via%d", i, via))
				if err != nil || a.Status != 200 || a.Result.Outcome != "success" {
					t.Errorf("node %d via replica-%d: %v %+v", i, via, err, a)
				}
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// Each replica forwarded the operations for the nodes held by the
	// others, and counted them (sandgate_node_forwarded_total).
	for r := range 3 {
		m, err := scrapetest.Get(nil, urls[r]+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := m.Value("sandgate_node_forwarded_total", "route", "operation", "result", "answered"), float64(nodeCount-spread[r]); got != want {
			t.Errorf("replica-%d: sandgate_node_forwarded_total{operation, answered} = %g, want %g (the nodes held elsewhere)", r, got, want)
		}
	}

	// 409 across replicas: a second connection of a live node, on each of
	// the other replicas.
	cur := current()
	for _, i := range []int{0, 1, 2} {
		for r := range 3 {
			if r == cur[i] {
				continue
			}
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := sim.Dial(dctx, sim.Config{URL: urls[r], Credential: ids[i].Credential, Hello: ids[i].Hello(), HeartbeatInterval: -1})
			cancel()
			var de *sim.DialError
			if !errors.As(err, &de) || de.Status != 409 {
				t.Fatalf("node %d live on replica-%d, second connection on replica-%d: %v, want 409", i, cur[i], r, err)
			}
		}
	}

	// Operations keep flowing through the surviving replicas while
	// replica-1 is killed; none is ever sent twice.
	stop := make(chan struct{})
	var loop sync.WaitGroup
	var seq atomic.Int64
	for w := range 8 {
		loop.Add(1)
		go func() {
			defer loop.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := rand.IntN(nodeCount)
				via := []int{0, 2}[rand.IntN(2)]
				_, _ = send(via, i, fmt.Sprintf("w%d-%d", w, seq.Add(1)))
				time.Sleep(5 * time.Millisecond) // a steady trickle, not a flood
			}
		}()
	}
	onDead := 0
	for _, r := range cur {
		if r == 1 {
			onDead++
		}
	}
	if err := c.Kill(1); err != nil {
		t.Fatal(err)
	}
	bound := leaseDuration + backoffMax + 10*time.Second
	recovered := waitAll("nodes of the killed replica online through the others", bound, func(cur []int) bool {
		for _, r := range cur {
			if r < 0 || r == 1 {
				return false
			}
		}
		return true
	})
	t.Logf("kill -9 of replica-1 (%d nodes): all nodes connected again after %s (lease %s, backoff max %s)",
		onDead, recovered.Round(time.Millisecond), leaseDuration, backoffMax)
	close(stop)
	loop.Wait()

	// After the failover every node takes operations through both
	// survivors.
	for i := range ids {
		for _, via := range []int{0, 2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := send(via, i, fmt.Sprintf("after-n%d-via%d", i, via))
				if err != nil || a.Status != 200 || a.Result.Outcome != "success" {
					t.Errorf("after the failover, node %d via replica-%d: %v %+v", i, via, err, a)
				}
			}()
		}
	}
	wg.Wait()
	cur = current()
	for _, i := range []int{0, 1, 2} {
		for _, r := range []int{0, 2} {
			if r == cur[i] {
				continue
			}
			_, err := sim.Dial(ctx, sim.Config{URL: urls[r], Credential: ids[i].Credential, Hello: ids[i].Hello(), HeartbeatInterval: -1})
			var de *sim.DialError
			if !errors.As(err, &de) || de.Status != 409 {
				t.Fatalf("after the failover, node %d live on replica-%d, second connection on replica-%d: %v, want 409", i, cur[i], r, err)
			}
		}
	}

	// No operation replayed: every allocation reached its node at most
	// once, and exactly once when its outcome was success; none reached
	// another node.
	received := map[string]int{}
	for i, a := range agents {
		for _, r := range a.Received() {
			alloc := r.Request.Reference.AllocationID
			received[alloc]++
			dmu.Lock()
			want, known := dispatched[alloc]
			dmu.Unlock()
			if !known || want != i {
				t.Errorf("node %d received %s, dispatched to node %d (known %v)", i, alloc, want, known)
			}
		}
	}
	counts := map[string]int{}
	for alloc := range dispatched {
		v, _ := outcomes.Load(alloc)
		outcome, _ := v.(string)
		counts[outcome]++
		switch {
		case received[alloc] > 1:
			t.Errorf("%s reached its node %d times (outcome %s)", alloc, received[alloc], outcome)
		case outcome == "success" && received[alloc] != 1:
			t.Errorf("%s succeeded but reached its node %d times", alloc, received[alloc])
		case (outcome == "node_offline" || outcome == "unavailable") && received[alloc] != 0:
			t.Errorf("%s was refused (%s) but reached its node", alloc, outcome)
		}
	}
	t.Logf("outcomes of %d operations: %v", len(dispatched), counts)

	// Epochs: each node's welcomes carry rising epochs, and no epoch was
	// handed out by two replicas.
	byEpoch := map[int64]int{}
	for i, a := range agents {
		var last int64
		for _, conn := range a.Connections() {
			e := conn.Welcome.OwnerEpoch
			if e <= last {
				t.Errorf("node %d: epoch %d after %d", i, e, last)
			}
			last = e
			r := replicaOf[conn.URL]
			if prev, seen := byEpoch[e]; seen && prev != r {
				t.Errorf("epoch %d handed out by replica-%d and replica-%d", e, prev, r)
			}
			byEpoch[e] = r
		}
		if _, lower := a.Refused(); lower != 0 {
			t.Errorf("node %d refused %d welcomes with a lower epoch", i, lower)
		}
	}
	epochs := make([]int64, 0, len(byEpoch))
	for e := range byEpoch {
		epochs = append(epochs, e)
	}
	sort.Slice(epochs, func(i, j int) bool { return epochs[i] < epochs[j] })
	t.Logf("%d distinct owner epochs, %d to %d", len(epochs), epochs[0], epochs[len(epochs)-1])

	// The survivors renewed their nodes' Leases (their nodes heartbeat
	// every 3 s, renewals are due every 4 s) and counted it.
	for _, r := range []int{0, 2} {
		m, err := scrapetest.Get(nil, urls[r]+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Value("sandgate_node_lease_renewals_total", "result", "written"); got == 0 {
			t.Errorf("replica-%d: sandgate_node_lease_renewals_total{written} = 0", r)
		}
	}

	// The list through a survivor shows every node online, each with the
	// replica holding it.
	list, err := c.Nodes(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	online := 0
	for _, s := range list.Nodes {
		if s.Online && (s.Replica == "replica-0" || s.Replica == "replica-2") {
			online++
		}
	}
	if online != nodeCount || list.Partial {
		t.Fatalf("the list through replica-0 shows %d of %d nodes online (partial %v)", online, nodeCount, list.Partial)
	}
}
