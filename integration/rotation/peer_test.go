package rotation

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/integration/replicas"
	"github.com/sandgate/sandgate/internal/scrapetest"
	"github.com/sandgate/sandgate/node/sim"
	"github.com/sandgate/sandgate/nodecore/api"
)

// nodeService is the gateway's Service as the nodes reach it: a reverse
// proxy (WebSocket upgrades included) over the live replicas in turn. It
// notes the replica each node's latest accepted connection (101) reached,
// and when.
type nodeService struct {
	mu       sync.Mutex
	live     []*replicas.Replica
	next     int
	holder   map[string]*replicas.Replica
	holderAt map[string]time.Time
	// connected is closed and replaced at each accepted connection.
	connected chan struct{}
}

func (s *nodeService) set(live []*replicas.Replica) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live = slices.Clone(live)
}

// nextConnection returns a channel closed at the next accepted
// connection.
func (s *nodeService) nextConnection() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connected
}

// holderOf returns the replica node's latest accepted connection reached
// (nil: none yet), once the node is welcomed on it: the agent is
// connected and its latest welcome came after that connection's 101.
// Between the two the node's Lease names the replica already but the
// connection is not live there: a call for the node is answered
// node_offline, by the holder or through a forward, as a call made on the
// holder would be.
func (s *nodeService) holderOf(node string, a *sim.Agent) *replicas.Replica {
	s.mu.Lock()
	h, at := s.holder[node], s.holderAt[node]
	s.mu.Unlock()
	conns := a.Connections()
	if h == nil || a.Current() == nil || len(conns) == 0 || !conns[len(conns)-1].At.After(at) {
		return nil
	}
	return h
}

func (s *nodeService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if len(s.live) == 0 {
		s.mu.Unlock()
		http.Error(w, "no replica", http.StatusServiceUnavailable)
		return
	}
	rep := s.live[s.next%len(s.live)]
	s.next++
	s.mu.Unlock()
	node := r.URL.Query().Get("node_id")
	u, _ := url.Parse(rep.URL)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.StatusCode == http.StatusSwitchingProtocols {
			s.mu.Lock()
			s.holder[node], s.holderAt[node] = rep, time.Now()
			close(s.connected)
			s.connected = make(chan struct{})
			s.mu.Unlock()
		}
		return nil
	}
	rp.ServeHTTP(w, r)
}

// peerPair is a forwarded request's route: the replica the client called
// and the replica holding the node.
type peerPair struct{ via, holder string }

// TestPeerTokenRotationWithProcesses follows docs/runbook.md "Peer token"
// with bin/caddy replicas as separate processes sharing node presence
// through Leases in the real kube-apiserver (presence kubernetes with
// peer_token_file), 8 simulated nodes connected through a Service in front
// of the replicas (they reconnect like nodeagent), and clients calling the
// internal node API the whole time, each call sent to a replica that does
// not hold the node (the replica its latest connection reached, once the
// node is welcomed there), so that it is forwarded to the holder with the
// peer token. Each step edits the peer token file and rolls the two replicas
// one at a time: the new process takes forwarded traffic (sent by it, and
// once the old one's nodes moved, received by it) before the next one is
// replaced. Step 1 (old, new), step 2 (new, old), step 3 (new). No
// forwarded request is refused; a node's operation answered node_offline
// or with an unknown outcome by a call that began or ended while an old
// replica stopped (its nodes move: a rolling update's effect, not the
// token's) is counted apart. At the end a forwarded request with the old token is refused
// (401) and one with the new token answered, and no token is in a log.
func TestPeerTokenRotationWithProcesses(t *testing.T) {
	root := repoRoot(t)
	const oldTok, newTok = "peer-token-old-0123456789abcdef0123456789abcdef", "peer-token-new-0123456789abcdef0123456789abcdef"
	const nodes = 8
	const heartbeat = 3 * time.Second
	ns := env.Namespace(t)
	dir := t.TempDir()
	var logs []string
	ids := make([]sim.Identity, nodes)
	for i := range ids {
		ids[i] = sim.NewIdentity()
	}
	c, err := replicas.Start(replicas.Config{Caddy: filepath.Join(root, "bin", "caddy"), Replicas: 2, Nodes: ids,
		Kubeconfig: env.KubeConfig, Namespace: ns, HeartbeatInterval: heartbeat, PeerToken: oldTok + "\n",
		Output: func(i int) io.Writer {
			p := filepath.Join(dir, fmt.Sprintf("replica-%d.log", i))
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			logs = append(logs, p)
			return f
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	index := map[*replicas.Replica]int{}
	for i, r := range c.Replicas {
		index[r] = i
	}

	svc := &nodeService{holder: map[string]*replicas.Replica{}, holderAt: map[string]time.Time{}, connected: make(chan struct{})}
	live := slices.Clone(c.Replicas)
	svc.set(live)
	svcURL := serve(t, svc)
	agents := make([]*sim.Agent, nodes)
	for i, id := range ids {
		agents[i] = sim.StartAgent(sim.AgentConfig{Node: sim.Config{Credential: id.Credential, Hello: id.Hello(), HeartbeatInterval: heartbeat},
			URLs: []string{svcURL}, BackoffMin: 200 * time.Millisecond, BackoffMax: 2 * time.Second})
	}
	t.Cleanup(func() {
		for _, a := range agents {
			a.Stop()
		}
	})

	// The clients' view, under mu: the live replicas, each one's requests
	// in flight (the roll takes its write lock before stopping it, as the
	// Service stops sending to a pod before the kubelet signals it), the
	// phase, and the answered requests per route.
	var mu sync.Mutex
	inUse := map[*replicas.Replica]*sync.RWMutex{}
	for _, r := range live {
		inUse[r] = &sync.RWMutex{}
	}
	phase := "start"
	served := map[peerPair]int{}
	changed := make(chan struct{})
	var sent, refused, moved atomic.Int64
	var refusals, moves sync.Map
	var seq atomic.Int64
	client := keepAliveClient
	operation := func(ctx context.Context, via *replicas.Replica, node, auth, forwardedBy string) (int, []byte, error) {
		body := fmt.Sprintf(`{"operation":"info","deployment_generation":1,"timeout_ms":5000,"reference":{"tenant_id":"t","environment_id":"e","allocation_id":"op-%d"}}`, seq.Add(1))
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, via.APIURL+api.Prefix+"/"+node+"/operations", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+auth)
		req.Header.Set("Content-Type", "application/json")
		if forwardedBy != "" {
			req.Header.Set(api.ForwardedHeader, forwardedBy)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, b, err
	}
	ctx, stop := context.WithCancel(context.Background())
	var clients sync.WaitGroup
	for w := range 4 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for n := w; ctx.Err() == nil; n++ {
				node, agent := ids[n%nodes].NodeID, agents[n%nodes]
				next, welcomed := svc.nextConnection(), agent.Changed()
				holder := svc.holderOf(node, agent)
				mu.Lock()
				var via *replicas.Replica
				for k := range live {
					if r := live[(n+k)%len(live)]; r != holder {
						via = r
						break
					}
				}
				ph := phase
				if holder == nil || via == nil {
					// Not connected yet: wait for a connection or a welcome.
					mu.Unlock()
					select {
					case <-next:
					case <-welcomed:
					case <-ctx.Done():
					}
					continue
				}
				lock := inUse[via]
				lock.RLock()
				mu.Unlock()
				code, b, err := operation(ctx, via, node, c.APIToken, "")
				lock.RUnlock()
				if ctx.Err() != nil {
					return
				}
				sent.Add(1)
				var res api.OperationResult
				var refusal api.Error
				if err == nil && code == http.StatusOK {
					err = json.Unmarshal(b, &res)
				} else if err == nil {
					err = json.Unmarshal(b, &refusal)
				}
				mu.Lock()
				end := phase
				mu.Unlock()
				what := fmt.Sprintf("%s: %s → %s: %d %s%s %v", ph, via.ID, holder.ID, code, res.Outcome, refusal.Error.Code, err)
				switch {
				case err == nil && code == http.StatusOK && res.Outcome == "success":
					mu.Lock()
					served[peerPair{via.ID, holder.ID}]++
					close(changed)
					changed = make(chan struct{})
					mu.Unlock()
				case err == nil && (strings.Contains(ph, " stop ") || strings.Contains(end, " stop ")) &&
					(refusal.Error.Code == "node_offline" || refusal.Error.Code == "unavailable" || (code == http.StatusOK && res.Outcome == "unknown")):
					moved.Add(1)
					moves.Store(what, true)
				default:
					refused.Add(1)
					refusals.Store(what, true)
				}
			}
		}()
	}
	t.Cleanup(func() { stop(); clients.Wait() })

	// until waits for cond over the answered routes (a notice at each
	// answer).
	until := func(what string, cond func(map[peerPair]int) bool) {
		t.Helper()
		deadline := time.After(wait)
		for {
			mu.Lock()
			ok, ch := cond(served), changed
			mu.Unlock()
			if ok {
				return
			}
			select {
			case <-ch:
			case <-deadline:
				var kinds []string
				refusals.Range(func(k, _ any) bool { kinds = append(kinds, k.(string)); return true })
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("%s: not within %s (answered: %v; %d refused: %.2000s)", what, wait, served, refused.Load(), kinds)
			}
		}
	}
	// everyPair waits until every ordered pair of live replicas has n
	// more answered forwarded requests than it had at the call.
	everyPair := func(what string, n int) {
		t.Helper()
		mu.Lock()
		base := maps.Clone(served)
		rs := slices.Clone(live)
		mu.Unlock()
		until(what, func(s map[peerPair]int) bool {
			for _, x := range rs {
				for _, y := range rs {
					if p := (peerPair{x.ID, y.ID}); x != y && s[p] < base[p]+n {
						return false
					}
				}
			}
			return true
		})
	}
	// connected waits until every node's latest connection is to a live
	// replica and the node is connected (polling the simulated nodes).
	connected := func(what string) {
		t.Helper()
		deadline := time.Now().Add(wait)
		for {
			mu.Lock()
			rs := slices.Clone(live)
			mu.Unlock()
			all := true
			for i, a := range agents {
				if h := svc.holderOf(ids[i].NodeID, a); h == nil || !slices.Contains(rs, h) {
					all = false
				}
			}
			if all {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the nodes are not all connected to live replicas within %s", what, wait)
			}
			time.Sleep(50 * time.Millisecond) // polling the simulated nodes' state
		}
	}
	setPhase := func(p string) {
		mu.Lock()
		phase = p
		mu.Unlock()
	}
	// roll replaces each replica in turn: the new process joins the
	// clients' and the nodes' Service and forwards before the old one
	// leaves both and stops; once the old one's nodes moved, every pair of
	// live replicas forwards both ways.
	roll := func(step string) {
		t.Helper()
		mu.Lock()
		olds := slices.Clone(live)
		mu.Unlock()
		for _, old := range olds {
			setPhase(step + " start " + old.ID + "'s successor")
			nr, err := c.Add()
			if err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			index[nr] = len(c.Replicas) - 1
			mu.Lock()
			inUse[nr] = &sync.RWMutex{}
			base := maps.Clone(served)
			live = append(live, nr)
			svc.set(live)
			mu.Unlock()
			until(step+": "+nr.ID+" forwards", func(s map[peerPair]int) bool {
				n := 0
				for p, c := range s {
					if p.via == nr.ID {
						n += c - base[p]
					}
				}
				return n >= 20
			})
			setPhase(step + " stop " + old.ID)
			mu.Lock()
			live = slices.DeleteFunc(live, func(r *replicas.Replica) bool { return r == old })
			svc.set(live)
			lock := inUse[old]
			mu.Unlock()
			lock.Lock() // no client request to it is left
			c.Stop(index[old])
			connected(step + ": after " + old.ID + " stopped")
			setPhase(step + " " + old.ID + " replaced")
			everyPair(step+": forwarding between the live replicas", 10)
		}
		// Each new replica counted what it forwarded.
		mu.Lock()
		rs := slices.Clone(live)
		mu.Unlock()
		for _, r := range rs {
			m, err := scrapetest.Get(nil, r.URL+"/metrics")
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Value("sandgate_node_forwarded_total", "route", "operation", "result", "answered"); got == 0 {
				t.Errorf("%s: %s: sandgate_node_forwarded_total{operation, answered} = 0", step, r.ID)
			}
		}
		setPhase(step + " done")
	}

	connected("before the rotation")
	everyPair("before the rotation", 20)

	writeFile(t, c.PeerTokenFile(), oldTok+"\n"+newTok+"\n") // 1. old, new: the new one accepted everywhere
	roll("step 1")
	writeFile(t, c.PeerTokenFile(), newTok+"\n"+oldTok+"\n") // 2. new, old: the new one sent
	roll("step 2")
	writeFile(t, c.PeerTokenFile(), newTok+"\n") // 3. new: the old one no longer accepted
	roll("step 3")
	stop()
	clients.Wait()

	if n := refused.Load(); n != 0 {
		var kinds []string
		refusals.Range(func(k, _ any) bool { kinds = append(kinds, k.(string)); return true })
		t.Errorf("%d of %d forwarded requests refused during the rotation: %v", n, sent.Load(), kinds)
	}
	moves.Range(func(k, _ any) bool { t.Logf("answered while its node moved: %s", k); return true })
	t.Logf("%d forwarded requests, %d refused, %d answered node_offline or unknown while their node moved", sent.Load(), refused.Load(), moved.Load())

	// The old token is retired: a forwarded request carrying it is
	// refused by a replica holding the node; the new one is answered.
	mu.Lock()
	final := slices.Clone(live)
	mu.Unlock()
	var node string
	var holder *replicas.Replica
	for i, id := range ids {
		if h := svc.holderOf(id.NodeID, agents[i]); h != nil {
			node, holder = id.NodeID, h
			break
		}
	}
	if holder == nil {
		t.Fatal("after the rotation no node is connected")
	}
	other := final[0]
	if other == holder {
		other = final[1]
	}
	for _, tok := range []string{oldTok, newTok} {
		code, b, err := operation(context.Background(), holder, node, tok, other.ID)
		if want := tok == newTok; err != nil || (code == http.StatusOK) != want || (!want && code != http.StatusUnauthorized) {
			t.Errorf("a forwarded request with the %s peer token after the rotation: %d %s %v", map[bool]string{true: "new", false: "old"}[want], code, b, err)
		}
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range []string{oldTok, newTok, c.APIToken} {
			if bytes.Contains(b, []byte(tok)) {
				t.Errorf("%s contains a token", l)
			}
		}
	}
}
