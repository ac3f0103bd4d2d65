package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sandgate/sandgate/internal/bearer"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/hub"
)

// Peer is another gateway replica as this one reaches it.
type Peer struct {
	// ID is its replica ID.
	ID string
	// URL is the base URL of its internal node API (scheme, host, port).
	URL string
}

// Peers finds the gateway replica that holds a node's connection when
// several replicas serve node connections (package nodecore/presence
// implements it with Kubernetes Leases).
type Peers interface {
	// Self returns this replica's ID.
	Self() string
	// Holder returns the replica holding nodeID's connection; ok is false
	// when none does. fresh bypasses any cache.
	Holder(ctx context.Context, nodeID string, fresh bool) (p Peer, ok bool, err error)
	// Replicas returns the replicas that hold at least one node.
	Replicas(ctx context.Context) ([]Peer, error)
}

// ForwardObserver receives the result of each request a replica forwarded
// to another one, for metrics (the sandgate app exports them as
// sandgate_node_forwarded_total and sandgate_node_forward_duration_seconds).
// Calls come from many goroutines at once.
type ForwardObserver interface {
	// Forwarded reports one forwarded request: route is RouteOperation,
	// RouteNode or RouteList; result one of the Forward* results; d the
	// time from the holder lookup to the answer (for a list, the time of
	// the one replica's answer).
	Forwarded(route, result string, d time.Duration)
}

// Routes of ForwardObserver.Forwarded.
const (
	// RouteOperation is POST <node>/operations.
	RouteOperation = "operation"
	// RouteNode is GET <node>.
	RouteNode = "node"
	// RouteList is GET of the list: one call per replica asked.
	RouteList = "list"
)

// Results of ForwardObserver.Forwarded.
const (
	// ForwardAnswered: a replica answered and its answer was used as is.
	ForwardAnswered = "answered"
	// ForwardNotHeld: the replica(s) asked did not hold the node; this
	// replica answered from its own hub.
	ForwardNotHeld = "not_held"
	// ForwardNotSent: the replica could not be reached before the request
	// was written (an operation: 503 node_offline, nothing sent).
	ForwardNotSent = "not_sent"
	// ForwardNoAnswer: the request was written and no (usable) answer came
	// back (an operation: outcome unknown, reason disconnected).
	ForwardNoAnswer = "no_answer"
)

// observe reports a forwarded request to h.Observer, if any.
func (h *Handler) observe(route, result string, since time.Time) {
	if h.Observer != nil {
		h.Observer.Forwarded(route, result, time.Since(since))
	}
}

// forwardResult classifies forward's outcome.
func forwardResult(a *answer, err error) string {
	switch {
	case errors.Is(err, errNotSent):
		return ForwardNotSent
	case err != nil:
		return ForwardNoAnswer
	case a.notHeld:
		return ForwardNotHeld
	}
	return ForwardAnswered
}

// Headers of replica-to-replica requests.
const (
	// ForwardedHeader names the replica that forwarded a request; the
	// receiver then authenticates it with a peer token and serves it from
	// its own hub only (never forwarding again).
	ForwardedHeader = "Sandgate-Forwarded-By"
	// NotHeldHeader on the answer to a forwarded request names the
	// answering replica when the node is not live there (its refusal is
	// node_offline): the forwarder reads the node's Lease again and tries
	// the replica it names, once.
	NotHeldHeader = "Sandgate-Not-Held"
)

// maxForwardedAnswer bounds an answer read from a peer: a response frame
// (72 MiB) in JSON with the envelope around it.
const maxForwardedAnswer = proto.MaxRequestFrame + 1<<20

// forwardTimeout bounds a forwarded operation beyond its caller's
// context: the longest timeout_ms, the response grace and some slack.
const forwardTimeout = 150 * time.Second

// defaultClient forwards when Handler.Client is nil.
var defaultClient = &http.Client{Transport: &http.Transport{
	Proxy: nil, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second,
	ResponseHeaderTimeout: forwardTimeout, DisableCompression: true,
}}

func (h *Handler) client() *http.Client {
	if h.Client != nil {
		return h.Client
	}
	return defaultClient
}

// peerAuthorized reports whether r carries a peer token.
func (h *Handler) peerAuthorized(r *http.Request) bool { return bearer.MatchesDigest(r, h.PeerTokens) }

// answer is a peer's answer to a forwarded request.
type answer struct {
	status  int
	body    []byte
	notHeld bool
}

// errNotSent: the forwarded request never reached the peer whole, so the
// peer cannot have acted on it.
var errNotSent = errors.New("api: the replica holding the node could not be reached")

// forward sends one request to peer and reads its answer. It returns
// errNotSent when the request was not written completely (dial failure, a
// write error), and another error when it was written but no answer
// arrived (the peer may have acted on it).
func (h *Handler) forward(ctx context.Context, peer Peer, method, path string, body []byte) (*answer, error) {
	ctx, cancel := context.WithTimeout(ctx, forwardTimeout)
	defer cancel()
	var wrote bool
	var mu sync.Mutex
	trace := &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		mu.Lock()
		wrote = i.Err == nil
		mu.Unlock()
	}}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), method, strings.TrimSuffix(peer.URL, "/")+path, rd)
	if err != nil {
		return nil, errNotSent
	}
	req.Header.Set("Authorization", "Bearer "+h.PeerToken)
	req.Header.Set(ForwardedHeader, h.Peers.Self())
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.client().Do(req)
	if err != nil {
		mu.Lock()
		sent := wrote
		mu.Unlock()
		if !sent {
			return nil, errNotSent
		}
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxForwardedAnswer+1))
	if err != nil || len(b) > maxForwardedAnswer {
		return nil, errors.New("api: the answer of the replica holding the node was cut off or too large")
	}
	return &answer{status: resp.StatusCode, body: b, notHeld: resp.Header.Get(NotHeldHeader) != ""}, nil
}

// forwardToHolder sends a request about nodeID to the replica holding
// it. It asks the (possibly cached) holder first; when that answer leads
// nowhere — no holder, this replica, a replica that cannot be reached
// before anything was sent, or one that answers that it does not hold the
// node — it reads the Lease again and tries the holder it names, once. ok
// is false when no other replica holds the node (the caller answers from
// its own hub); err is forward's for the last replica tried.
func (h *Handler) forwardToHolder(ctx context.Context, nodeID, method, path string, body []byte) (a *answer, ok bool, err error) {
	tried := ""
	for _, fresh := range []bool{false, true} {
		peer, held, lerr := h.Peers.Holder(ctx, nodeID, fresh)
		if lerr != nil {
			h.log("looking up the replica holding a node failed", zap.String("node_id", nodeID), zap.Error(lerr))
			break
		}
		if !held || peer.ID == h.Peers.Self() {
			continue
		}
		if peer.ID == tried {
			break
		}
		tried = peer.ID
		a, err = h.forward(ctx, peer, method, path, body)
		switch {
		case errors.Is(err, errNotSent), err == nil && a.notHeld:
			continue
		default:
			return a, true, err
		}
	}
	if tried == "" {
		return nil, false, nil
	}
	return a, true, err
}

func (h *Handler) log(msg string, fields ...zap.Field) {
	if h.Logger != nil {
		h.Logger.Info(msg, fields...)
	}
}

// writeAnswer passes a peer's answer on.
func writeAnswer(w http.ResponseWriter, a *answer) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// forwardOperation forwards an operation on a node that is not online
// here. It returns false when no other replica holds the node (the caller
// answers with its own refusal). A forward that never reached the holder
// is answered node_offline (nothing was sent to the node); one that
// reached it but got no answer is answered like a lost connection:
// outcome unknown, reason disconnected (the operation may have been sent;
// observe it, never replay it).
func (h *Handler) forwardOperation(w http.ResponseWriter, r *http.Request, nodeID string, body []byte) bool {
	start := time.Now()
	a, ok, err := h.forwardToHolder(r.Context(), nodeID, http.MethodPost, r.URL.Path, body)
	if ok {
		h.observe(RouteOperation, forwardResult(a, err), start)
	}
	switch {
	case !ok:
		return false
	case errors.Is(err, errNotSent):
		h.log("forwarding a node operation failed before it was sent", zap.String("node_id", nodeID), zap.Error(err))
		writeError(w, http.StatusServiceUnavailable, hub.RefusalNodeOffline, "the gateway replica holding the node could not be reached")
	case err != nil:
		h.log("a forwarded node operation got no answer", zap.String("node_id", nodeID), zap.Error(err))
		writeJSON(w, http.StatusOK, OperationResult{Outcome: proto.OutcomeUnknown.String(), ErrorCode: proto.ErrUnconfirmed,
			Reason: hub.ReasonDisconnected, Sent: true})
	case a.notHeld:
		return false
	default:
		writeAnswer(w, a)
	}
	return true
}

// forwardNode answers GET <node> from the replica holding the node; false
// when none other does or it could not be asked.
func (h *Handler) forwardNode(w http.ResponseWriter, r *http.Request, nodeID string) bool {
	start := time.Now()
	a, ok, err := h.forwardToHolder(r.Context(), nodeID, http.MethodGet, r.URL.Path, nil)
	if ok {
		res := forwardResult(a, err)
		if res == ForwardAnswered && a.status != http.StatusOK {
			res = ForwardNoAnswer
		}
		h.observe(RouteNode, res, start)
	}
	if !ok || err != nil || a.notHeld || a.status != http.StatusOK {
		return false
	}
	writeAnswer(w, a)
	return true
}

// mergeNodes adds the nodes of the other replicas to local: every replica
// holding a node is asked for its list (in parallel); a node's entry is
// the one of the replica where it is connecting, live or closing, else
// the most recently disconnected one. Replicas that cannot be asked are
// named in the answer's unreachable_replicas.
func (h *Handler) mergeNodes(ctx context.Context, local []hub.NodeStatus) Nodes {
	for i := range local {
		local[i].Replica = h.Peers.Self()
	}
	out := Nodes{Nodes: local}
	peers, err := h.Peers.Replicas(ctx)
	if err != nil {
		h.log("listing the gateway replicas failed", zap.Error(err))
		out.Partial = true
		return out
	}
	type got struct {
		peer  Peer
		nodes []hub.NodeStatus
		err   error
	}
	var wg sync.WaitGroup
	results := make(chan got, len(peers))
	for _, p := range peers {
		if p.ID == h.Peers.Self() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			a, err := h.forward(ctx, p, http.MethodGet, Prefix, nil)
			res := forwardResult(a, err)
			if err == nil && a.status != http.StatusOK {
				err = errors.New("status " + http.StatusText(a.status))
			}
			var n Nodes
			if err == nil {
				err = json.Unmarshal(a.body, &n)
			}
			if err != nil && res == ForwardAnswered {
				res = ForwardNoAnswer
			}
			h.observe(RouteList, res, start)
			results <- got{p, n.Nodes, err}
		}()
	}
	wg.Wait()
	close(results)
	byID := map[string]hub.NodeStatus{}
	for _, s := range local {
		byID[s.NodeID] = s
	}
	for res := range results {
		if res.err != nil {
			h.log("a gateway replica did not list its nodes", zap.String("replica", res.peer.ID), zap.Error(res.err))
			out.Partial = true
			out.UnreachableReplicas = append(out.UnreachableReplicas, res.peer.ID)
			continue
		}
		for _, s := range res.nodes {
			s.Replica = res.peer.ID
			cur, seen := byID[s.NodeID]
			if !seen || preferred(s, cur) {
				s.Enrolled = s.Enrolled || cur.Enrolled
				byID[s.NodeID] = s
			} else {
				cur.Enrolled = cur.Enrolled || s.Enrolled
				byID[s.NodeID] = cur
			}
		}
	}
	out.Nodes = make([]hub.NodeStatus, 0, len(byID))
	for _, s := range byID {
		out.Nodes = append(out.Nodes, s)
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].NodeID < out.Nodes[j].NodeID })
	sort.Strings(out.UnreachableReplicas)
	return out
}

// preferred reports whether a is a better account of a node than b: a
// connection beats none; between two disconnected records, the more
// recent one wins.
func preferred(a, b hub.NodeStatus) bool {
	ac, bc := a.State != hub.StateDisconnected, b.State != hub.StateDisconnected
	if ac != bc {
		return ac
	}
	if ac {
		return a.State == hub.StateLive && b.State != hub.StateLive
	}
	switch {
	case a.DisconnectedAt == nil:
		return false
	case b.DisconnectedAt == nil:
		return true
	}
	return a.DisconnectedAt.After(*b.DisconnectedAt)
}
