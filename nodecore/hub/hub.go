// Package hub is Core's end of the sandbox-node protocol (spec
// node-protocol.md "Connection", "Provider requests" and the frames of
// "Generation control"): it accepts the WebSocket a sandbox node dials,
// authenticates it, runs hello/welcome, heartbeats and retention, keeps the
// nodes' presence and last health, and sends provider operations to a node
// and waits for their outcome.
//
// A Hub is a plain Go value with no Caddy dependency. The gateway keeps one
// Hub in the "sandgate" app (caddymodules/sandgate), shared through a
// caddy.UsagePool, so that a config reload hands the same Hub, with its
// live connections, to the new config; Configure then swaps in the new
// settings (credential store, owner epoch, deployment, timers) without
// touching a connection.
//
// Frames are encoded and decoded strictly by package proto. Each
// connection has one reader goroutine and at most one writer at a time.
package hub

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/credential"
	"github.com/sandgate/sandgate/nodecore/placement"
	"github.com/sandgate/sandgate/nodecore/pool"
)

// ConnectPath is the path nodes dial (spec "Connection").
const ConnectPath = "/api/v1/sandbox-node/connect"

// Default timers (spec "Connection").
const (
	// DefaultHelloTimeout: a node must send hello within 15 s.
	DefaultHelloTimeout = 15 * time.Second
	// DefaultIdleTimeout: either end closes after 35 s without a frame.
	DefaultIdleTimeout = 35 * time.Second
	// DefaultOnlineWindow: a node is online while its last heartbeat is
	// less than 45 s old.
	DefaultOnlineWindow = 45 * time.Second
	// DefaultWriteTimeout bounds one frame write (not from the spec).
	DefaultWriteTimeout = 10 * time.Second
	// DefaultResponseGrace is how much longer than a request's timeout_ms
	// Core waits for its response before reporting outcome unknown (spec:
	// "Core still bounds its own wait").
	DefaultResponseGrace = 2 * time.Second
	// DefaultCloseGrace is how long Core waits for the node's close frame
	// after sending its own, before dropping the TCP connection.
	DefaultCloseGrace = time.Second
	// DefaultHeartbeatInterval is the heartbeat period of the protocol
	// (spec "Connection": "The node sends a heartbeat every 10 seconds").
	DefaultHeartbeatInterval = 10 * time.Second
	// DefaultReconnectWait is how long an operation for a node whose
	// connection Core retired for a replaced credential waits for the
	// node's new connection (not from the spec: a node reconnects within
	// its backoff minimum, 1 s for nodeagent, plus Core's close grace).
	DefaultReconnectWait = 10 * time.Second
	// MaxReconnectWaiters is how many operations may wait at once, over
	// all nodes of a hub, for the new connection of a node whose
	// connection was retired (Timers.Reconnect); a further operation is
	// refused at once with ErrOffline. It bounds the goroutines and
	// timers a burst of operations can hold during rotations (not from
	// the spec: sandgate's choice).
	MaxReconnectWaiters = 4096
)

// Timers are the hub's timeouts. A zero field takes its default.
type Timers struct {
	// Hello is how long after the upgrade the node has to send hello.
	Hello time.Duration
	// Idle closes a connection that has received no frame for this long.
	Idle time.Duration
	// Online is the age below which a node's last heartbeat (or hello)
	// keeps it online.
	Online time.Duration
	// Write bounds the write of one frame.
	Write time.Duration
	// ResponseGrace is added to a request's timeout_ms to bound Core's wait
	// for the response.
	ResponseGrace time.Duration
	// CloseGrace is how long Core waits for the node's close frame.
	CloseGrace time.Duration
	// Heartbeat is the period nodes send heartbeats with. Heartbeats
	// faster than that close the connection with CloseFlood: a
	// connection may send Idle/Heartbeat + 2 heartbeats at once (those a
	// network stall shorter than the idle timeout can queue up), then one
	// per half period on average (see heartbeatBudget).
	Heartbeat time.Duration
	// Reconnect is how long an operation waits for a node whose connection
	// Core retired because the node's credential was replaced (a rotation:
	// the heartbeat's re-authentication failed with
	// credential.ErrMismatch), counted from the operation's start; and how
	// long after the retired connection ended such waits are still begun.
	// An operation for a node that is offline for any other reason is
	// refused at once (ErrOffline), as before; so is one that would be
	// the MaxReconnectWaiters+1st to wait.
	Reconnect time.Duration
}

// withDefaults returns t with zero fields set to their defaults.
func (t Timers) withDefaults() Timers {
	set := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	set(&t.Hello, DefaultHelloTimeout)
	set(&t.Idle, DefaultIdleTimeout)
	set(&t.Online, DefaultOnlineWindow)
	set(&t.Write, DefaultWriteTimeout)
	set(&t.ResponseGrace, DefaultResponseGrace)
	set(&t.CloseGrace, DefaultCloseGrace)
	set(&t.Heartbeat, DefaultHeartbeatInterval)
	set(&t.Reconnect, DefaultReconnectWait)
	return t
}

// Config is the hub's settings; Configure replaces them as a whole.
type Config struct {
	// Credentials authenticates nodes on connect and on every heartbeat.
	// Required.
	Credentials credential.Store
	// OwnerEpoch is Core's current owner epoch, > 0: the epoch sent in
	// welcome (with a Presence, the lowest epoch a claim may carry), and a
	// connection welcomed under a lower one is superseded at its next
	// heartbeat. It may not decrease while the hub runs.
	OwnerEpoch int64
	// Deployment is what generation-managing nodes are told to prepare and
	// serve (welcome and heartbeat_ack). Without it such nodes are refused
	// (close code CloseNoDeployment); nodes without generation management
	// never need it.
	Deployment *proto.Deployment
	// Pools, when set, gives each node pool's deployment, and replaces
	// Deployment: a generation-managing node is told the deployment of its
	// enrolled pool (credential.Node.Pool), and is refused (close code
	// CloseNoDeployment) while its pool has none. A *pool.Registry is one.
	Pools Deployments
	// Placements, when set, records the generation each allocation sent
	// to a generation-managing node is placed on, from before its first
	// request until a successful kill; retention keeps every generation
	// in use. Without it retention keeps only the target and serving
	// generations.
	Placements placement.Store
	// Timers are the timeouts; zero fields take the defaults.
	Timers Timers
	// Logger receives connection events; nil means no logging. Secrets and
	// frame contents are never logged.
	Logger *zap.Logger
	// Presence claims nodes cluster-wide when several gateway replicas
	// serve node connections (package nodecore/presence); each welcome then
	// carries the epoch of its claim, which is at least OwnerEpoch. nil:
	// this hub is the only one, and every welcome carries OwnerEpoch.
	Presence Presence
	// Observer receives dispatch outcomes and refusals for metrics; nil
	// observes nothing.
	Observer Observer
}

// Deployments gives the deployment of a node pool (package nodecore/pool's
// Registry implements it); false when the pool has none.
type Deployments interface {
	// Deployment returns pool's current deployment; false when it has
	// none.
	Deployment(pool string) (proto.Deployment, bool)
}

// deploymentFor returns the deployment a node of pool poolName is told
// under cfg, or nil.
func deploymentFor(cfg *Config, poolName string) *proto.Deployment {
	if cfg.Pools == nil {
		return cfg.Deployment
	}
	if poolName == "" {
		poolName = pool.Default
	}
	d, ok := cfg.Pools.Deployment(poolName)
	if !ok {
		return nil
	}
	return &d
}

// Hub holds the live node connections, the nodes' presence, and the
// current Config. Its methods are safe for concurrent use.
type Hub struct {
	cfg atomic.Pointer[Config]

	mu        sync.Mutex
	nodes     map[string]*presence // by node ID; kept after a disconnect
	maxEpoch  int64
	closed    bool // no new connects or dispatches (Shutdown or Close began)
	conns     sync.WaitGroup
	inflight  sync.WaitGroup // Dispatch calls under way; Add only while !closed
	closeOnce sync.Once
	// welcomed is closed (and replaced) whenever a connection turns live
	// and when the hub closes, waking the operations that wait for a
	// retired node's new connection; guarded by mu.
	welcomed chan struct{}
	// waiters counts the operations waiting for a retired node's new
	// connection; at most maxWaiters (MaxReconnectWaiters; tests lower it).
	waiters    atomic.Int64
	maxWaiters int64

	// clock is the presence clock (heartbeat times, the online window);
	// tests replace it. Deadlines on the sockets use real time.
	clock func() time.Time
}

func (h *Hub) now() time.Time { return h.clock() }

// New returns a hub with no configuration; connections are refused (503)
// until Configure is called.
func New() *Hub {
	return &Hub{nodes: map[string]*presence{}, clock: time.Now, welcomed: make(chan struct{}),
		maxWaiters: MaxReconnectWaiters}
}

// CheckConfig reports whether Configure would accept cfg: a credential
// store, a positive owner epoch not lower than any epoch the hub has been
// configured with, a valid deployment, and no negative timer. The error
// names the problem.
func (h *Hub) CheckConfig(cfg Config) error {
	if cfg.Credentials == nil {
		return errors.New("hub: a node credential store is required")
	}
	if cfg.OwnerEpoch <= 0 {
		return errors.New("hub: the owner epoch must be positive")
	}
	h.mu.Lock()
	maxEpoch := h.maxEpoch
	h.mu.Unlock()
	if cfg.OwnerEpoch < maxEpoch {
		return fmt.Errorf("hub: the owner epoch may not decrease while the gateway runs (now %d, configured %d)", maxEpoch, cfg.OwnerEpoch)
	}
	if d := cfg.Deployment; d != nil {
		if d.Generation <= 0 || !proto.IsDigest(d.SpecificationDigest) ||
			(d.ServingGeneration != nil && *d.ServingGeneration <= 0) {
			return errors.New("hub: the deployment needs a positive generation, a lowercase SHA-256 specification digest and a positive serving generation if any")
		}
	}
	t := cfg.Timers
	for _, d := range []time.Duration{t.Hello, t.Idle, t.Online, t.Write, t.ResponseGrace, t.CloseGrace, t.Heartbeat} {
		if d < 0 {
			return errors.New("hub: timers may not be negative")
		}
	}
	if t := t.withDefaults(); t.Heartbeat >= t.Idle {
		return fmt.Errorf("hub: the heartbeat interval (%s) must be shorter than the idle timeout (%s)", t.Heartbeat, t.Idle)
	}
	return nil
}

// Configure checks cfg (CheckConfig) and makes it the hub's settings. Live
// connections keep running: the next heartbeat is re-authenticated with
// the new store and checked against the new owner epoch (a connection
// welcomed under a lower epoch is then closed with CloseEpochSuperseded),
// and heartbeat_acks carry the new deployment.
func (h *Hub) Configure(cfg Config) error {
	_, err := h.Apply(cfg)
	return err
}

// Apply is Configure that also returns undo, which puts back the settings
// cfg replaced, provided no other settings have been applied since (then
// undo does nothing), and never lowers the owner epoch: the restored
// settings keep the higher of the two epochs. The gateway applies a new
// config's settings when it starts and undoes them if that config is
// stopped before it ever took over (a reload that failed later on).
func (h *Hub) Apply(cfg Config) (undo func(), err error) {
	if err := h.CheckConfig(cfg); err != nil {
		return func() {}, err
	}
	cfg.Timers = cfg.Timers.withDefaults()
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Deployment != nil {
		d := *cfg.Deployment
		if d.ServingGeneration != nil {
			s := *d.ServingGeneration
			d.ServingGeneration = &s
		}
		cfg.Deployment = &d
	}
	h.mu.Lock()
	h.maxEpoch = max(h.maxEpoch, cfg.OwnerEpoch)
	h.mu.Unlock()
	applied := &cfg
	prev := h.cfg.Swap(applied)
	return func() {
		if prev == nil {
			return // never leave the hub unconfigured
		}
		back := *prev
		back.OwnerEpoch = max(back.OwnerEpoch, applied.OwnerEpoch)
		h.cfg.CompareAndSwap(applied, &back)
	}, nil
}

// Accepting reports whether the hub takes new connects and dispatches:
// configured, and neither draining (Shutdown) nor closed.
func (h *Hub) Accepting() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.closed && h.cfg.Load() != nil
}

// Configured reports whether Configure has been called.
func (h *Hub) Configured() bool { return h.cfg.Load() != nil }

// config returns the current settings, or nil before Configure.
func (h *Hub) config() *Config { return h.cfg.Load() }

// Shutdown stops the hub gracefully: from now on connects are refused
// with 503 and dispatches with ErrClosed; it waits until the dispatches
// under way have their outcome (each is bounded by its timeout_ms plus the
// response grace), or until ctx ends, and then closes every connection
// with CloseGoingAway (Close), so that nodes reconnect to another gateway
// at once. It returns ctx's error when the wait was cut short (the
// dispatches still waiting then end with outcome unknown), else nil.
func (h *Hub) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	h.wakeLocked()
	h.mu.Unlock()
	drained := make(chan struct{})
	go func() {
		h.inflight.Wait()
		close(drained)
	}()
	var err error
	select {
	case <-drained:
	case <-ctx.Done():
		err = ctx.Err()
	}
	_ = h.Close()
	return err
}

// Close closes every connection with CloseGoingAway and waits for their
// goroutines to end (each waits at most its close grace for the node's
// close frame, after at most Timers.Write for its own close frame's
// write; the close frames are written concurrently, so that a node that
// does not read delays no other node's). Pending operations end with outcome unknown. New
// connections are refused with 503 afterwards. Close is idempotent.
func (h *Hub) Close() error {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		h.closed = true
		h.wakeLocked()
		var live []*conn
		for _, p := range h.nodes {
			if p.conn != nil {
				live = append(live, p.conn)
			}
		}
		h.mu.Unlock()
		// Each connection's close frame is written on a goroutine of its
		// own: a node that stops reading holds its socket's writer, and
		// its close frame waits up to Timers.Write for it; the other
		// nodes' close frames must not wait behind it.
		for _, c := range live {
			go c.fail(CloseGoingAway, "the gateway is closing the node connection service")
		}
		h.conns.Wait()
	})
	return nil
}

// NodeStatus is one node as the hub sees it: its enrolment, its presence
// and its last health report.
type NodeStatus struct {
	// NodeID is the node's UUID.
	NodeID string `json:"node_id"`
	// Enrolled: the node has a record in the credential store.
	Enrolled bool `json:"enrolled"`
	// State is "disconnected", "connecting" (authenticated, no welcome
	// yet), "live" or "closing".
	State string `json:"state"`
	// Online: live, welcomed under an owner epoch that is not superseded,
	// and the last heartbeat (or hello) is younger than the online window
	// (spec: "Core counts the node as online").
	Online bool `json:"online"`
	// ConnectionID is the current (or last) welcome's connection_id.
	ConnectionID string `json:"connection_id,omitempty"`
	// OwnerEpoch is the owner epoch the current (or last) connection was
	// welcomed under.
	OwnerEpoch int64 `json:"owner_epoch,omitempty"`
	// ConnectedAt is when the current (or last) connection was welcomed.
	ConnectedAt *time.Time `json:"connected_at,omitempty"`
	// LastHeartbeatAt is when the last heartbeat (or hello) was received.
	LastHeartbeatAt *time.Time `json:"last_heartbeat_at,omitempty"`
	// DisconnectedAt is when the last connection ended, while
	// disconnected.
	DisconnectedAt *time.Time `json:"disconnected_at,omitempty"`
	// CloseCode is the WebSocket close code Core sent when the last
	// connection ended (0: none, e.g. the node closed it), while
	// disconnected.
	CloseCode int `json:"close_code,omitempty"`
	// CloseReason is the fixed reason the last connection ended for, while
	// disconnected.
	CloseReason string `json:"close_reason,omitempty"`
	// Hello is the identity the node stated in its last hello.
	Hello *HelloSummary `json:"hello,omitempty"`
	// Health is the last health report, with an unknown diagnostic stored
	// as provider_unavailable.
	Health *proto.Health `json:"health,omitempty"`
	// Pool is the node pool of the node's enrolment (enrolled nodes).
	Pool string `json:"pool,omitempty"`
	// Deployment is the deployment the node is told (generation-managing
	// enrolled nodes whose pool has one).
	Deployment *proto.Deployment `json:"deployment,omitempty"`
	// Generations are the node's generations, by ascending generation:
	// the latest observation of each generation the node reported
	// (generation-managing nodes), and every generation allocations are
	// placed on (with no state when the node has not reported it).
	Generations []GenerationStatus `json:"generations,omitempty"`
	// Pending is the number of requests waiting for a response on the
	// current connection.
	Pending int `json:"pending"`
	// Replica is the gateway replica this status comes from, set by the
	// internal node API when several replicas serve (package nodecore/api).
	Replica string `json:"replica,omitempty"`
}

// GenerationStatus is one generation of one node as Core knows it.
type GenerationStatus struct {
	// Generation is the deployment generation.
	Generation int64 `json:"generation"`
	// SpecificationDigest is the digest the node reported; absent when it
	// has not reported the generation.
	SpecificationDigest string `json:"specification_digest,omitempty"`
	// State is the node's latest report: "ready", "preparing" or
	// "failed"; absent when it has not reported the generation. Core
	// counts a generation ready on a node only from such a report.
	State proto.GenerationState `json:"state,omitempty"`
	// Diagnostic is the report's diagnostic (unknown codes stored as
	// provider_unavailable).
	Diagnostic string `json:"diagnostic,omitempty"`
	// ObservedAt is when Core received the latest report.
	ObservedAt *time.Time `json:"observed_at,omitempty"`
	// Target: the generation (and digest, when reported) is the pool's
	// target.
	Target bool `json:"target,omitempty"`
	// Serving: the generation is the pool's serving generation.
	Serving bool `json:"serving,omitempty"`
	// Placements counts the allocations Core has placed on this generation
	// of the node and not yet seen killed; a generation with placements is
	// kept by every retention answer.
	Placements int `json:"placements"`
}

// HelloSummary is the identity and capacity part of a hello (the members
// of proto.Hello of the same names).
type HelloSummary struct {
	// InstallationID is the UUID of the node's installation.
	InstallationID string `json:"installation_id"`
	// Provider is the node's provider.
	Provider proto.Provider `json:"provider"`
	// BackendFingerprint is the provider backend's lowercase SHA-256 hex.
	BackendFingerprint string `json:"backend_fingerprint"`
	// DeploymentGeneration is the enrolled deployment generation.
	DeploymentGeneration int64 `json:"deployment_generation"`
	// SpecificationDigest is the enrolled generation's specification digest.
	SpecificationDigest string `json:"specification_digest"`
	// MaxActive is how many operations the node runs at once, 1..32.
	MaxActive int `json:"max_active"`
	// MaxRetained is how many generations the node can retain.
	MaxRetained int `json:"max_retained"`
	// GenerationManagement says whether the node manages generations.
	GenerationManagement bool `json:"generation_management"`
}

// Connection states of NodeStatus.State.
const (
	StateDisconnected = "disconnected"
	StateConnecting   = "connecting"
	StateLive         = "live"
	StateClosing      = "closing"
)

// maxObservedGenerations bounds the generation observations kept per node.
const maxObservedGenerations = proto.MaxRetainedGenerations

// presence is what the hub keeps about one node; guarded by Hub.mu.
type presence struct {
	nodeID        string
	conn          *conn // non-nil while connecting, live or closing
	connectionID  string
	epoch         int64
	connectedAt   time.Time
	lastHeartbeat time.Time
	disconnected  time.Time
	closeCode     int
	closeReason   string
	hello         *HelloSummary
	health        *proto.Health
	generations   map[int64]observed
	// handoverUntil: the node's last connection was retired for a
	// replaced credential and ended; operations wait for its new
	// connection until then (Timers.Reconnect). Zero once it is welcomed.
	handoverUntil time.Time
	// connects is the node's connect budget (ConnectBurst, ConnectEvery;
	// presence clock), taken by every connect that finds the slot free.
	connects budget
}

// awaited reports whether an operation for p, which is not online, should
// wait for the node's next connection: its connection is being retired for
// a replaced credential, or ended so less than Timers.Reconnect ago; h.mu
// is held.
func (p *presence) awaited(now time.Time) bool {
	if p.conn != nil && p.conn.retiring.Load() {
		return true
	}
	return now.Before(p.handoverUntil)
}

// wakeLocked wakes every operation waiting for a node's connection;
// h.mu is held.
func (h *Hub) wakeLocked() {
	close(h.welcomed)
	h.welcomed = make(chan struct{})
}

// observed is the latest observation of one generation.
type observed struct {
	obs proto.GenerationObservation
	at  time.Time
}

// status builds the NodeStatus of p at now under cfg; h.mu is held.
func (p *presence) status(now time.Time, cfg *Config) NodeStatus {
	s := NodeStatus{NodeID: p.nodeID, State: StateDisconnected, ConnectionID: p.connectionID, OwnerEpoch: p.epoch,
		CloseCode: p.closeCode, CloseReason: p.closeReason, Hello: p.hello}
	if p.conn != nil {
		s.State = p.conn.state
		s.Pending = p.conn.pendingCount()
		s.CloseCode, s.CloseReason = 0, ""
	} else if !p.disconnected.IsZero() {
		t := p.disconnected
		s.DisconnectedAt = &t
	}
	if !p.connectedAt.IsZero() {
		t := p.connectedAt
		s.ConnectedAt = &t
	}
	if !p.lastHeartbeat.IsZero() {
		t := p.lastHeartbeat
		s.LastHeartbeatAt = &t
	}
	if p.health != nil {
		hc := *p.health
		s.Health = &hc
	}
	if len(p.generations) > 0 {
		s.Generations = make([]GenerationStatus, 0, len(p.generations))
		for _, o := range p.generations {
			at := o.at
			s.Generations = append(s.Generations, GenerationStatus{Generation: o.obs.Generation,
				SpecificationDigest: o.obs.SpecificationDigest, State: o.obs.State, Diagnostic: o.obs.Diagnostic,
				ObservedAt: &at})
		}
		sort.Slice(s.Generations, func(i, j int) bool { return s.Generations[i].Generation < s.Generations[j].Generation })
	}
	s.Online = p.online(now, cfg)
	return s
}

// online reports whether p counts as online; h.mu is held. The
// connection's epoch must not be superseded: without a Presence it equals
// the configured owner epoch; with one, each claim's epoch is at least
// the configured one at the time it was allocated. A connection retired
// for a replaced credential is not online.
func (p *presence) online(now time.Time, cfg *Config) bool {
	return cfg != nil && p.conn != nil && p.conn.state == StateLive && p.epoch >= cfg.OwnerEpoch &&
		now.Sub(p.lastHeartbeat) < cfg.Timers.Online && !p.conn.retiring.Load()
}

// Nodes returns every node the credential store enrols or the hub has
// seen since it started, sorted by node ID.
func (h *Hub) Nodes() []NodeStatus {
	cfg := h.config()
	now := h.now()
	h.mu.Lock()
	out := make([]NodeStatus, 0, len(h.nodes))
	for _, p := range h.nodes {
		out = append(out, p.status(now, cfg))
	}
	h.mu.Unlock()
	seen := make(map[string]int, len(out))
	for i := range out {
		seen[out[i].NodeID] = i
	}
	if cfg != nil {
		for _, n := range cfg.Credentials.Nodes() {
			i, ok := seen[n.NodeID]
			if !ok {
				out = append(out, NodeStatus{NodeID: n.NodeID, State: StateDisconnected})
				i = len(out) - 1
			}
			out[i].Enrolled = true
			enrich(&out[i], cfg, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

// Placements returns the allocations Core has placed on the node's
// generations (nil without Config.Placements).
func (h *Hub) Placements(nodeID string) []placement.Placement {
	cfg := h.config()
	if cfg == nil || cfg.Placements == nil {
		return nil
	}
	return cfg.Placements.List(nodeID)
}

// ReleasePlacement forgets one placement: the operator has established
// that the allocation is gone (e.g. its kill's outcome was unknown and
// the sandbox is confirmed absent). It reports whether the placement was
// recorded. Errors: ErrClosed without Config.Placements, or the store's.
func (h *Hub) ReleasePlacement(p placement.Placement) (bool, error) {
	cfg := h.config()
	if cfg == nil || cfg.Placements == nil {
		return false, ErrClosed
	}
	return cfg.Placements.Release(p)
}

// enrich adds to s what Core knows from the node's enrolment n: its pool,
// the deployment it is told, the roles of its generations and their
// placements.
func enrich(s *NodeStatus, cfg *Config, n credential.Node) {
	s.Pool = n.Pool
	if s.Pool == "" {
		s.Pool = pool.Default
	}
	var d *proto.Deployment
	if n.GenerationManagement {
		d = deploymentFor(cfg, s.Pool)
		s.Deployment = d
	}
	byGen := make(map[int64]int, len(s.Generations))
	for i := range s.Generations {
		byGen[s.Generations[i].Generation] = i
	}
	if cfg.Placements != nil {
		for _, pl := range cfg.Placements.List(n.NodeID) {
			i, ok := byGen[pl.Generation]
			if !ok {
				s.Generations = append(s.Generations, GenerationStatus{Generation: pl.Generation})
				i = len(s.Generations) - 1
				byGen[pl.Generation] = i
			}
			s.Generations[i].Placements++
		}
	}
	for i := range s.Generations {
		g := &s.Generations[i]
		if d != nil {
			g.Target = g.Generation == d.Generation && (g.SpecificationDigest == "" || g.SpecificationDigest == d.SpecificationDigest)
			g.Serving = d.ServingGeneration != nil && g.Generation == *d.ServingGeneration
		}
	}
	sort.Slice(s.Generations, func(i, j int) bool { return s.Generations[i].Generation < s.Generations[j].Generation })
}

// Node returns the status of one node, and false when the node is neither
// enrolled nor seen.
func (h *Hub) Node(nodeID string) (NodeStatus, bool) {
	cfg := h.config()
	now := h.now()
	h.mu.Lock()
	p, seen := h.nodes[nodeID]
	var s NodeStatus
	if seen {
		s = p.status(now, cfg)
	}
	h.mu.Unlock()
	var enrolment *credential.Node
	if cfg != nil {
		if n, ok := credential.Find(cfg.Credentials, nodeID); ok {
			enrolment = &n
		}
	}
	if !seen {
		if enrolment == nil {
			return NodeStatus{}, false
		}
		s = NodeStatus{NodeID: nodeID, State: StateDisconnected}
	}
	s.Enrolled = enrolment != nil
	if enrolment != nil {
		enrich(&s, cfg, *enrolment)
	}
	return s, true
}
