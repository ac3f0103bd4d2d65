package hub

import (
	"errors"
	"time"

	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/pool"
)

// Observer receives the hub's events, for metrics (the gateway's are in
// caddymodules/sandgate). Its methods must be quick and safe for
// concurrent use; a nil Observer in Config observes nothing.
type Observer interface {
	// Dispatched reports one Dispatch: the operation, its outcome (the
	// Result's outcome, "success", "failed", "unsupported" or "unknown",
	// or the RefusalCode of a refusal) and how long it took.
	Dispatched(op proto.Operation, outcome string, d time.Duration)
	// HubTime reports the hub's own part of one Dispatch that got the
	// node's response: from Dispatch's start to the request frame
	// written, plus from the response frame's first byte read to
	// Dispatch's return (decoding, matching, waking the caller,
	// classifying). The node's turn and the wire in between are left
	// out. Operations without a response (refused, unsupported, timed
	// out, disconnected) are not reported.
	HubTime(op proto.Operation, d time.Duration)
	// FrameRefused reports a connection Core closed because of a frame
	// the node sent, by class (Refused* constants).
	FrameRefused(class string)
	// ConnectRefused reports a connect request refused before the
	// upgrade, by HTTP status (400, 401, 405, 409, 503).
	ConnectRefused(status int)
}

// Classes of Observer.FrameRefused: the close code Core sent for a frame.
const (
	// RefusedInvalid: close 1002, a frame that is invalid or unexpected
	// (codec refusal, wrong type, another connection, out of sequence).
	RefusedInvalid = "invalid"
	// RefusedBinary: close 1003, a binary message.
	RefusedBinary = "binary"
	// RefusedTooBig: close 1009, a message over the read limit.
	RefusedTooBig = "too_big"
	// RefusedIdentity: close 4002, hello's identity differs from the
	// enrolment.
	RefusedIdentity = "identity"
	// RefusedEpoch: close 4004, a frame under another owner epoch than
	// the welcome's.
	RefusedEpoch = "epoch"
)

// refusedClass maps a close code Core sends for a frame to its class, ""
// for close codes that do not refuse a frame.
func refusedClass(code int) string {
	switch code {
	case CloseProtocolError:
		return RefusedInvalid
	case CloseUnsupportedData:
		return RefusedBinary
	case CloseMessageTooBig:
		return RefusedTooBig
	case CloseIdentityMismatch:
		return RefusedIdentity
	case CloseEpochMismatch:
		return RefusedEpoch
	}
	return ""
}

// Refusal codes of Dispatch errors (RefusalCode); the internal node API
// answers with them.
const (
	RefusalInvalidRequest = "invalid_request"
	RefusalNotFound       = "not_found"
	RefusalNodeOffline    = "node_offline"
	RefusalNotReady       = "generation_not_ready"
	RefusalTooManyPending = "too_many_pending"
	RefusalUnavailable    = "unavailable"
)

// RefusalCode classifies an error of Dispatch: invalid_request,
// not_found (unknown node), node_offline, generation_not_ready,
// too_many_pending, or unavailable (hub closed, the caller gone, anything
// else).
func RefusalCode(err error) string {
	switch {
	case errors.Is(err, ErrInvalidRequest):
		return RefusalInvalidRequest
	case errors.Is(err, ErrUnknownNode):
		return RefusalNotFound
	case errors.Is(err, ErrOffline):
		return RefusalNodeOffline
	case errors.Is(err, ErrNotReady):
		return RefusalNotReady
	case errors.Is(err, ErrTooManyPending):
		return RefusalTooManyPending
	}
	return RefusalUnavailable
}

// Stats counts the hub's connections and readiness at one instant.
type Stats struct {
	// Connecting, Live and Closing count connections by state.
	Connecting, Live, Closing int
	// Online counts online nodes (NodeStatus.Online).
	Online int
	// GenerationsReady maps a node pool and deployment generation to the
	// number of online nodes of that pool that report the generation
	// ready (a node without generation management: its enrolled
	// generation while its provider is ready).
	GenerationsReady map[PoolGeneration]int
}

// PoolGeneration is one deployment generation of one node pool.
type PoolGeneration struct {
	// Pool is the node pool (pool.Default for nodes enrolled without one).
	Pool string
	// Generation is the deployment generation.
	Generation int64
}

// Stats returns the current counts. It takes the hub's lock once and
// walks every node: O(nodes).
func (h *Hub) Stats() Stats {
	cfg := h.config()
	now := h.now()
	st := Stats{GenerationsReady: map[PoolGeneration]int{}}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.nodes {
		if p.conn == nil {
			continue
		}
		switch p.conn.state {
		case StateConnecting:
			st.Connecting++
		case StateLive:
			st.Live++
		case StateClosing:
			st.Closing++
		}
		if !p.online(now, cfg) {
			continue
		}
		st.Online++
		poolName := p.conn.node.Pool
		if poolName == "" {
			poolName = pool.Default
		}
		if p.conn.gm {
			for g, o := range p.generations {
				if o.obs.State == proto.GenerationReady {
					st.GenerationsReady[PoolGeneration{poolName, g}]++
				}
			}
		} else if p.hello != nil && p.ready(p.hello.DeploymentGeneration, false) {
			st.GenerationsReady[PoolGeneration{poolName, p.hello.DeploymentGeneration}]++
		}
	}
	return st
}

// observer returns cfg's observer or a no-op one.
func observerOf(cfg *Config) Observer {
	if cfg == nil || cfg.Observer == nil {
		return nopObserver{}
	}
	return cfg.Observer
}

type nopObserver struct{}

func (nopObserver) Dispatched(proto.Operation, string, time.Duration) {}
func (nopObserver) HubTime(proto.Operation, time.Duration)            {}
func (nopObserver) FrameRefused(string)                               {}
func (nopObserver) ConnectRefused(int)                                {}
