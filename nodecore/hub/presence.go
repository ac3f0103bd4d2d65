package hub

import (
	"context"
	"errors"
	"time"
)

// Presence claims a node's connection cluster-wide when several gateway
// replicas serve node connections (package nodecore/presence keeps the claims
// in Kubernetes Leases). Without one (Config.Presence nil) the hub's own
// memory is the only record: one replica.
//
// The hub calls Acquire while it authenticates a connect request, before
// the upgrade, and only when no connection of the node is connecting, live
// or closing on this replica; it calls Renew with the node's heartbeats
// and Release once the connection has ended.
type Presence interface {
	// Acquire claims nodeID for this replica and allocates the owner epoch
	// its welcome carries: greater than every epoch handed out before, by
	// any replica, and at least minEpoch (the configured owner epoch).
	// Errors: ErrHeld when another replica's claim is live (the connect is
	// answered 409), as a *HeldError when the claim's remaining time is
	// known (the 409 then carries Retry-After); any other error makes the
	// connect fail with 503.
	Acquire(ctx context.Context, nodeID string, minEpoch int64) (Claim, error)
}

// Claim is one replica's hold on one node's connection.
type Claim interface {
	// Epoch is the owner epoch allocated to this claim, > 0.
	Epoch() int64
	// Renew extends the claim; the hub calls it with each heartbeat, at
	// most one call at a time per claim. Errors: ErrLost when another
	// replica holds the node now (the hub then closes the connection with
	// CloseEpochSuperseded); other errors are transient and the claim is
	// tried again at the next heartbeat.
	Renew(ctx context.Context) error
	// Release gives the claim up so that another replica may take the
	// node at once; it does nothing when the claim was lost. Best effort:
	// an unreleased claim expires by itself.
	Release(ctx context.Context) error
}

// Errors of Presence.
var (
	// ErrHeld: another replica holds a live claim on the node.
	ErrHeld = errors.New("hub: another gateway replica holds the node's connection")
	// ErrLost: the claim was taken over by another replica.
	ErrLost = errors.New("hub: the node's claim was taken over by another gateway replica")
)

// HeldError is ErrHeld with the time the other replica's claim has left
// unless it is renewed: a connect refused with it is answered 409 with
// Retry-After, so that a node whose replica died tries again when the
// dead replica's claim lapses rather than at the end of an exponential
// backoff that may be much later. errors.Is(err, ErrHeld) holds.
type HeldError struct {
	// Remaining is how long the claim lasts without a renewal, > 0.
	Remaining time.Duration
}

// Error says the node is held and for how long.
func (e *HeldError) Error() string {
	return ErrHeld.Error() + " (for " + e.Remaining.Round(time.Second).String() + " unless renewed)"
}

// Unwrap returns ErrHeld.
func (e *HeldError) Unwrap() error { return ErrHeld }

// presenceTimeout bounds one Presence call made by the hub.
const presenceTimeout = 10 * time.Second
