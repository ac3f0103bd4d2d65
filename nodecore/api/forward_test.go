package api

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/freeport"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/credential"
	"github.com/sandgate/sandgate/nodecore/hub"
)

const peerToken = "peer-token-between-replicas-DO-NOT-LOG"

// fakePeers is the Lease view of a test: the holder of each node, with a
// possibly stale cached answer.
type fakePeers struct {
	self string
	mu   *sync.Mutex
	// holder is the fresh answer; cached, when set, the cached one.
	holder, cached map[string]Peer
	replicas       *[]Peer
}

func (p fakePeers) Self() string { return p.self }

func (p fakePeers) Holder(_ context.Context, node string, fresh bool) (Peer, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.cached[node]; ok && !fresh {
		return c, true, nil
	}
	h, ok := p.holder[node]
	return h, ok, nil
}

func (p fakePeers) Replicas(context.Context) ([]Peer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Peer(nil), (*p.replicas)...), nil
}

// cluster is several replicas sharing one Lease view.
type cluster struct {
	t        *testing.T
	creds    *credential.File
	mu       sync.Mutex
	holder   map[string]Peer
	cached   map[string]Peer
	replicas []Peer
}

type replicaEnv struct {
	*apiEnv
	id       string
	forwards *forwardLog
}

// forwardLog records a replica's ForwardObserver calls as "route/result".
type forwardLog struct {
	mu  sync.Mutex
	got []string
}

func (l *forwardLog) Forwarded(route, result string, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d < 0 {
		result += "(negative duration)"
	}
	l.got = append(l.got, route+"/"+result)
}

// take returns the calls recorded since the last take.
func (l *forwardLog) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := strings.Join(l.got, " ")
	l.got = nil
	return out
}

func newCluster(t *testing.T) *cluster {
	return &cluster{t: t, creds: testCreds(t), holder: map[string]Peer{}, cached: map[string]Peer{}}
}

// replica starts one replica: a hub, its API with the cluster's peers,
// on an httptest server.
func (c *cluster) replica(id string) *replicaEnv {
	t := c.t
	h := hub.New()
	if err := h.Configure(hub.Config{Credentials: c.creds, OwnerEpoch: 3, Timers: hub.Timers{ResponseGrace: 50 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	api := &Handler{Hub: h, Tokens: [][sha256.Size]byte{sha256.Sum256([]byte(apiToken))},
		Peers:      fakePeers{self: id, mu: &c.mu, holder: c.holder, cached: c.cached, replicas: &c.replicas},
		PeerTokens: [][sha256.Size]byte{sha256.Sum256([]byte(peerToken))}, PeerToken: peerToken,
		Observer: &forwardLog{}}
	mux := http.NewServeMux()
	mux.Handle(hub.ConnectPath, h)
	mux.Handle(Prefix, api)
	mux.Handle(Prefix+"/", api)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { _ = h.Close(); srv.Close() })
	return &replicaEnv{apiEnv: &apiEnv{t: t, hub: h, srv: srv}, id: id, forwards: api.Observer.(*forwardLog)}
}

// holds records r as the holder of node (fresh and in every cache).
func (c *cluster) holds(node string, r *replicaEnv) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := Peer{ID: r.id, URL: r.srv.URL}
	c.holder[node] = p
	for _, q := range c.replicas {
		if q.ID == p.ID {
			return
		}
	}
	c.replicas = append(c.replicas, p)
}

// TestForwardOperation: an operation sent to replica B for a node live on
// replica A is forwarded and answered exactly as A answers it (the
// connection, sequence and outcome are A's); the node gets it once. A
// refusal on A (generation_not_ready) comes back with its status and
// code. A forwarded request for a node B does not hold is never forwarded
// again.
func TestForwardOperation(t *testing.T) {
	c := newCluster(t)
	a, b := c.replica("replica-a"), c.replica("replica-b")
	na := a.node(nodeA, secretA, true, nil)
	c.holds(nodeA, a)

	var res OperationResult
	if st := b.call(http.MethodPost, Prefix+"/"+nodeA+"/operations", apiToken, infoBody, &res); st != 200 || res.Outcome != "success" {
		t.Fatalf("forwarded operation = %d %+v", st, res)
	}
	if res.ConnectionID != na.Welcome().ConnectionID || res.Sequence != 1 || na.Requests() != 1 {
		t.Fatalf("result %+v, node saw %d requests", res, na.Requests())
	}
	var refused Error
	create := `{"operation":"create","deployment_generation":2,"timeout_ms":2000,
		"reference":{"tenant_id":"t1","environment_id":"e1","allocation_id":"a2"},"bootstrap":{"image":"busybox"}}`
	if st := b.call(http.MethodPost, Prefix+"/"+nodeA+"/operations", apiToken, create, &refused); st != 409 || refused.Error.Code != "generation_not_ready" {
		t.Fatalf("forwarded refusal = %d %+v", st, refused)
	}
	// GET <node> is answered by the holder.
	var s hub.NodeStatus
	if st := b.call(http.MethodGet, Prefix+"/"+nodeA, apiToken, "", &s); st != 200 || s.State != hub.StateLive || s.Replica != "replica-a" || !s.Online {
		t.Fatalf("GET through B = %d %+v", st, s)
	}
	// B's metrics count each forwarded request; A forwarded nothing.
	if got := b.forwards.take(); got != "operation/answered operation/answered node/answered" {
		t.Errorf("B's forwards: %q", got)
	}
	if got := a.forwards.take(); got != "" {
		t.Errorf("A's forwards: %q", got)
	}

	// A peer request for a node its receiver does not hold: node_offline
	// with the not-held mark, never forwarded on.
	req, _ := http.NewRequest(http.MethodPost, b.srv.URL+Prefix+"/"+nodeA+"/operations", strings.NewReader(infoBody))
	req.Header.Set("Authorization", "Bearer "+peerToken)
	req.Header.Set(ForwardedHeader, "replica-c")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get(NotHeldHeader) != "replica-b" || na.Requests() != 1 {
		t.Fatalf("peer request on a non-holder: %d %q, node saw %d", resp.StatusCode, resp.Header.Get(NotHeldHeader), na.Requests())
	}
}

// TestForwardStaleHolder: the cached holder is wrong (the node moved);
// that replica answers not-held, the forwarder reads the Lease again and
// reaches the right one.
func TestForwardStaleHolder(t *testing.T) {
	c := newCluster(t)
	a, b, stale := c.replica("replica-a"), c.replica("replica-b"), c.replica("replica-c")
	na := a.node(nodeA, secretA, true, nil)
	c.holds(nodeA, a)
	c.mu.Lock()
	c.cached[nodeA] = Peer{ID: stale.id, URL: stale.srv.URL}
	c.mu.Unlock()
	var res OperationResult
	if st := b.call(http.MethodPost, Prefix+"/"+nodeA+"/operations", apiToken, infoBody, &res); st != 200 || res.Outcome != "success" || na.Requests() != 1 {
		t.Fatalf("through a stale holder = %d %+v (node saw %d)", st, res, na.Requests())
	}
	if got := b.forwards.take(); got != "operation/answered" {
		t.Errorf("B's forwards: %q", got)
	}

	// The Lease names the stale replica even when read again: it answers
	// not-held both times, and B answers with its own refusal.
	c.holds(nodeA, stale)
	var refused Error
	if st := b.call(http.MethodPost, Prefix+"/"+nodeA+"/operations", apiToken, infoBody, &refused); st != 503 || refused.Error.Code != "node_offline" || na.Requests() != 1 {
		t.Fatalf("only a stale holder = %d %+v (node saw %d)", st, refused, na.Requests())
	}
	if got := b.forwards.take(); got != "operation/not_held" {
		t.Errorf("B's forwards: %q", got)
	}
}

// TestForwardHolderUnreachable: a holder that cannot be reached gets
// nothing sent (node_offline); a holder that takes the request and dies
// before answering leaves the outcome unknown (disconnected), as a lost
// node connection does.
func TestForwardHolderUnreachable(t *testing.T) {
	c := newCluster(t)
	b := c.replica("replica-b")
	deadAddr, held, err := freeport.Refusing()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })
	dead := "http://" + deadAddr
	c.mu.Lock()
	c.holder[nodeA] = Peer{ID: "replica-dead", URL: dead}
	c.mu.Unlock()
	var refused Error
	if st := b.call(http.MethodPost, Prefix+"/"+nodeA+"/operations", apiToken, infoBody, &refused); st != 503 || refused.Error.Code != "node_offline" {
		t.Fatalf("unreachable holder = %d %+v", st, refused)
	}
	if got := b.forwards.take(); got != "operation/not_sent" {
		t.Errorf("B's forwards: %q", got)
	}

	got := make(chan struct{}, 1)
	dying := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		got <- struct{}{}
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	}))
	defer dying.Close()
	c.mu.Lock()
	c.holder[nodeA] = Peer{ID: "replica-dying", URL: dying.URL}
	c.mu.Unlock()
	var res OperationResult
	if st := b.call(http.MethodPost, Prefix+"/"+nodeA+"/operations", apiToken, infoBody, &res); st != 200 ||
		res.Outcome != "unknown" || res.Reason != hub.ReasonDisconnected || res.ErrorCode != proto.ErrUnconfirmed || !res.Sent {
		t.Fatalf("holder died mid-request = %d %+v", st, res)
	}
	<-got
	if got := b.forwards.take(); got != "operation/no_answer" {
		t.Errorf("B's forwards: %q", got)
	}
}

// TestForwardAuthentication: a forwarded request needs the peer token (an
// API token is refused), and the peer token is not an API token.
func TestForwardAuthentication(t *testing.T) {
	c := newCluster(t)
	b := c.replica("replica-b")
	for _, tc := range []struct {
		token     string
		forwarded bool
	}{{apiToken, true}, {peerToken, false}, {"", true}} {
		req, _ := http.NewRequest(http.MethodGet, b.srv.URL+Prefix, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		if tc.forwarded {
			req.Header.Set(ForwardedHeader, "replica-x")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("token %q forwarded=%v: %d, want 401", tc.token, tc.forwarded, resp.StatusCode)
		}
	}
}

// TestListMergesReplicas: the list on any replica shows every node with
// the replica holding it; a replica that cannot be asked makes the list
// partial and is named.
func TestListMergesReplicas(t *testing.T) {
	c := newCluster(t)
	a, b := c.replica("replica-a"), c.replica("replica-b")
	a.node(nodeA, secretA, true, nil)
	c.holds(nodeA, a)
	b.node(nodeB, secretB, true, nil)
	c.holds(nodeB, b)
	var list Nodes
	if st := b.call(http.MethodGet, Prefix, apiToken, "", &list); st != 200 || len(list.Nodes) != 2 || list.Partial {
		t.Fatalf("list = %d %+v", st, list)
	}
	for _, s := range list.Nodes {
		want := map[string]string{nodeA: "replica-a", nodeB: "replica-b"}[s.NodeID]
		if s.Replica != want || s.State != hub.StateLive || !s.Enrolled {
			t.Errorf("%s: %+v, want live on %s", s.NodeID, s, want)
		}
	}
	if got := b.forwards.take(); got != "list/answered" {
		t.Errorf("B's forwards: %q", got)
	}
	c.mu.Lock()
	c.replicas = append(c.replicas, Peer{ID: "replica-gone", URL: "http://127.0.0.1:1"})
	c.mu.Unlock()
	raw := new(json.RawMessage)
	if st := a.call(http.MethodGet, Prefix, apiToken, "", raw); st != 200 {
		t.Fatalf("list with a replica gone = %d", st)
	}
	if err := json.Unmarshal(*raw, &list); err != nil || !list.Partial || len(list.UnreachableReplicas) != 1 || list.UnreachableReplicas[0] != "replica-gone" {
		t.Fatalf("list with a replica gone = %s", *raw)
	}
	if got := a.forwards.take(); got != "list/answered list/not_sent" && got != "list/not_sent list/answered" {
		t.Errorf("A's forwards: %q", got)
	}
}
