// Package presence keeps the sandbox nodes' presence in Kubernetes
// coordination.k8s.io/v1 Leases, so that several gateway replicas share
// one view of which replica holds each node's connection (spec
// node-protocol.md "Connection": one connection per node identity, 409 for
// a second), and allocates the owner epoch of every welcome from one
// cluster-wide counter. It implements hub.Presence for the hub and
// answers "which replica holds this node" for the internal node API's
// forwarding. The fencing argument is in docs/scale-out.md.
//
// Objects, all in one namespace of the Portal cluster:
//
//   - one Lease per node, "sandgate-node-<node ID>": spec.holderIdentity
//     is the replica holding the node's connection (cleared when it is
//     released), renewTime is renewed with the node's heartbeats,
//     leaseDurationSeconds bounds how long a replica that died keeps it;
//     annotations sandgate.io/owner-epoch (the epoch of the holder's
//     claim) and sandgate.io/holder-address (the base URL of the holder's
//     internal node API);
//   - one Lease "sandgate-owner-epoch" whose annotation
//     sandgate.io/owner-epoch is the highest epoch ever allocated; every
//     allocation is an update of it with a resourceVersion precondition.
//
// Every write is conditional on the resourceVersion read before it
// (optimistic concurrency); a conflict is re-read, never overwritten.
package presence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/sandgate/sandgate/nodecore/hub"
)

// Names, labels and annotations of the objects.
const (
	// NodeLeasePrefix + node ID names a node's Lease.
	NodeLeasePrefix = "sandgate-node-"
	// EpochLeaseName names the owner-epoch counter.
	EpochLeaseName = "sandgate-owner-epoch"
	// LabelKind is "node" on node Leases and "owner-epoch" on the counter.
	LabelKind = "sandgate.io/lease-kind"
	// LabelManagedBy is app.kubernetes.io/managed-by: sandgate-gateway.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is LabelManagedBy's value.
	ManagedByValue = "sandgate-gateway"
	// AnnotationEpoch holds an owner epoch, a positive decimal integer.
	AnnotationEpoch = "sandgate.io/owner-epoch"
	// AnnotationAddress holds the holder's internal node API base URL.
	AnnotationAddress = "sandgate.io/holder-address"
	// AnnotationNode holds the node ID on a node Lease.
	AnnotationNode = "sandgate.io/node-id"
)

// Kinds of LabelKind.
const (
	KindNode  = "node"
	KindEpoch = "owner-epoch"
)

// Results of Config.Renewed.
const (
	// RenewWritten: the Lease's renewTime was written.
	RenewWritten = "written"
	// RenewLost: the Lease names another holder or epoch, or is gone
	// (hub.ErrLost: the connection is closed).
	RenewLost = "lost"
	// RenewFailed: the apiserver refused or did not answer; the next
	// heartbeat tries again.
	RenewFailed = "failed"
)

// DefaultLeaseDuration is Config.LeaseDuration's default: three heartbeat
// periods of the protocol (10 s each).
const DefaultLeaseDuration = 30 * time.Second

// Config configures a Leases.
type Config struct {
	// Leases reaches the Portal cluster's Leases (a clientset's
	// CoordinationV1()). Required.
	Leases coordinationclient.LeasesGetter
	// Namespace holds the Leases. Required.
	Namespace string
	// ReplicaID is this replica's holder identity (e.g. the pod name);
	// unique among the replicas. Required, at most 128 bytes.
	ReplicaID string
	// Address is the base URL of this replica's internal node API as the
	// other replicas reach it (e.g. http://<pod IP>:30086). Required.
	Address string
	// LeaseDuration is how long a claim lasts without renewal; the hub
	// renews it with every heartbeat (10 s). Default
	// DefaultLeaseDuration; at least 15 s.
	LeaseDuration time.Duration
	// RenewInterval is the shortest time between two renewals of a claim:
	// the hub asks at every heartbeat, and a renewal less than
	// RenewInterval×4/5 after the last one is skipped. Default
	// LeaseDuration/3 (every heartbeat with the defaults); the apiserver
	// then takes nodes/RenewInterval Lease writes per second.
	RenewInterval time.Duration
	// Renewed, when set, is called after each renewal that wrote or
	// tried to write a node's Lease (not for one skipped within
	// RenewInterval), with RenewWritten, RenewLost or RenewFailed: for
	// metrics (about nodes/RenewInterval writes per second are expected).
	Renewed func(result string)
	// Now is the clock (default time.Now). Lease expiry compares the
	// Lease's renewTime, written by another replica's clock, with this
	// one: the replicas' clocks must agree to well within LeaseDuration.
	Now func() time.Time
}

// Leases is the Lease-backed presence of one gateway replica. Its methods
// are safe for concurrent use.
type Leases struct {
	cfg    Config
	epochs *counter

	// informer watches the node Leases once Start ran; Holder and
	// Replicas read its store when it has synced.
	informer cache.SharedIndexInformer
}

// New checks cfg and returns the replica's presence. Errors name the bad
// setting.
func New(cfg Config) (*Leases, error) {
	switch {
	case cfg.Leases == nil:
		return nil, errors.New("presence: a Leases client is required")
	case cfg.Namespace == "":
		return nil, errors.New("presence: a namespace is required")
	case cfg.ReplicaID == "" || len(cfg.ReplicaID) > 128:
		return nil, errors.New("presence: a replica ID of 1 to 128 bytes is required")
	case cfg.Address == "":
		return nil, errors.New("presence: this replica's address is required")
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.LeaseDuration < 15*time.Second {
		return nil, errors.New("presence: the lease duration must be at least 15s (the heartbeat is 10s)")
	}
	if cfg.RenewInterval <= 0 {
		cfg.RenewInterval = cfg.LeaseDuration / 3
	}
	if cfg.RenewInterval >= cfg.LeaseDuration {
		return nil, errors.New("presence: the renew interval must be shorter than the lease duration")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	l := &Leases{cfg: cfg}
	l.epochs = &counter{l: l}
	return l, nil
}

// LeaseName returns the name of nodeID's Lease.
func LeaseName(nodeID string) string { return NodeLeasePrefix + nodeID }

func (l *Leases) client() coordinationclient.LeaseInterface {
	return l.cfg.Leases.Leases(l.cfg.Namespace)
}

// expired reports whether lease's claim has lapsed at now (or was
// released).
func (l *Leases) expired(lease *coordinationv1.Lease, now time.Time) bool {
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		return true
	}
	if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return true
	}
	return !now.Before(lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second))
}

// remaining is how long a live lease lasts from now without a renewal
// (its renew time plus its duration); 0 for an expired one.
func (l *Leases) remaining(lease *coordinationv1.Lease, now time.Time) time.Duration {
	if l.expired(lease, now) {
		return 0
	}
	return lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second).Sub(now)
}

func holder(lease *coordinationv1.Lease) string {
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// epochOf parses an object's owner-epoch annotation; 0 when absent.
func epochOf(obj metav1.Object) (int64, error) {
	v, ok := obj.GetAnnotations()[AnnotationEpoch]
	if !ok {
		return 0, nil
	}
	e, err := strconv.ParseInt(v, 10, 64)
	if err != nil || e <= 0 {
		return 0, fmt.Errorf("presence: Lease %s: annotation %s is not a positive integer", obj.GetName(), AnnotationEpoch)
	}
	return e, nil
}

// maxAttempts bounds the re-reads after write conflicts.
const maxAttempts = 5

// Acquire implements hub.Presence: it claims nodeID's Lease for this
// replica when the Lease is absent, released, expired or already this
// replica's, with an owner epoch from the cluster-wide counter (at least
// minEpoch). It returns a *hub.HeldError (hub.ErrHeld with the claim's
// remaining time) while another replica's claim is live, hub.ErrHeld
// when other replicas keep winning the race for it; other errors
// are the apiserver's.
func (l *Leases) Acquire(ctx context.Context, nodeID string, minEpoch int64) (hub.Claim, error) {
	c := l.client()
	name := LeaseName(nodeID)
	for range maxAttempts {
		cur, err := c.Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("presence: read Lease %s: %w", name, err)
		}
		exists := err == nil
		if exists && holder(cur) != l.cfg.ReplicaID && !l.expired(cur, l.cfg.Now()) {
			return nil, &hub.HeldError{Remaining: l.remaining(cur, l.cfg.Now())}
		}
		epoch, err := l.epochs.next(ctx, minEpoch)
		if err != nil {
			return nil, err
		}
		written := l.cfg.Now()
		now := metav1.NewMicroTime(written)
		secs := int32(l.cfg.LeaseDuration / time.Second)
		id := l.cfg.ReplicaID
		var want *coordinationv1.Lease
		if exists {
			want = cur.DeepCopy()
			if holder(cur) != id {
				t := int32(0)
				if cur.Spec.LeaseTransitions != nil {
					t = *cur.Spec.LeaseTransitions
				}
				t++
				want.Spec.LeaseTransitions = &t
			}
		} else {
			want = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.cfg.Namespace,
				Labels: map[string]string{LabelKind: KindNode, LabelManagedBy: ManagedByValue}}}
			zero := int32(0)
			want.Spec.LeaseTransitions = &zero
		}
		if want.Annotations == nil {
			want.Annotations = map[string]string{}
		}
		want.Annotations[AnnotationEpoch] = strconv.FormatInt(epoch, 10)
		want.Annotations[AnnotationAddress] = l.cfg.Address
		want.Annotations[AnnotationNode] = nodeID
		want.Spec.HolderIdentity = &id
		want.Spec.LeaseDurationSeconds = &secs
		want.Spec.AcquireTime = &now
		want.Spec.RenewTime = &now
		var got *coordinationv1.Lease
		if exists {
			got, err = c.Update(ctx, want, metav1.UpdateOptions{})
		} else {
			got, err = c.Create(ctx, want, metav1.CreateOptions{})
		}
		switch {
		case err == nil:
			return &claim{l: l, nodeID: nodeID, epoch: epoch, lease: got, renewed: written}, nil
		case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
			continue // someone wrote it meanwhile: read again
		default:
			return nil, fmt.Errorf("presence: write Lease %s: %w", name, err)
		}
	}
	return nil, hub.ErrHeld
}

// claim is one held node Lease.
type claim struct {
	l      *Leases
	nodeID string
	epoch  int64

	mu      sync.Mutex
	lease   *coordinationv1.Lease // as last written
	renewed time.Time             // the renewTime last written (not when the write returned)
}

// Epoch implements hub.Claim.
func (c *claim) Epoch() int64 { return c.epoch }

// ours reports whether lease is still this claim's.
func (c *claim) ours(lease *coordinationv1.Lease) bool {
	e, err := epochOf(lease)
	return err == nil && holder(lease) == c.l.cfg.ReplicaID && e == c.epoch
}

// Renew implements hub.Claim: renewTime = now, conditional on the Lease
// being unchanged since this claim last wrote it; after a conflict it
// reads the Lease again and renews only if it is still this claim's.
// Errors: hub.ErrLost when the Lease has another holder or epoch (or is
// gone), the apiserver's otherwise.
func (c *claim) Renew(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.l.cfg.Now().Sub(c.renewed) < c.l.cfg.RenewInterval*4/5 {
		return nil
	}
	err := c.write(ctx)
	if f := c.l.cfg.Renewed; f != nil {
		switch {
		case err == nil:
			f(RenewWritten)
		case errors.Is(err, hub.ErrLost):
			f(RenewLost)
		default:
			f(RenewFailed)
		}
	}
	return err
}

// write renews the Lease (Renew without the interval check; c.mu held).
func (c *claim) write(ctx context.Context) error {
	cl := c.l.client()
	cur := c.lease
	for range maxAttempts {
		if !c.ours(cur) {
			return hub.ErrLost
		}
		want := cur.DeepCopy()
		written := c.l.cfg.Now()
		now := metav1.NewMicroTime(written)
		want.Spec.RenewTime = &now
		got, err := cl.Update(ctx, want, metav1.UpdateOptions{})
		switch {
		case err == nil:
			// The next renewal is due RenewInterval after the renewTime
			// the Lease now carries: counted from when the write
			// returned, a slow apiserver (a write taking longer than
			// heartbeat - RenewInterval×4/5) made every other heartbeat
			// skip its renewal, so the Lease aged by two heartbeats
			// between writes and looked expired to the other replicas.
			c.lease, c.renewed = got, written
			return nil
		case apierrors.IsConflict(err):
			cur, err = cl.Get(ctx, want.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return hub.ErrLost
			}
			if err != nil {
				return fmt.Errorf("presence: read Lease %s: %w", want.Name, err)
			}
		case apierrors.IsNotFound(err):
			return hub.ErrLost
		default:
			return fmt.Errorf("presence: renew Lease %s: %w", want.Name, err)
		}
	}
	return fmt.Errorf("presence: renew Lease %s: %d conflicts in a row", cur.Name, maxAttempts)
}

// Release implements hub.Claim: it clears the holder (keeping the Lease,
// its epoch and transitions for kubectl get), conditional on the Lease
// still being this claim's; a Lease that is no longer this claim's is
// left alone.
func (c *claim) Release(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.l.client()
	cur := c.lease
	for range maxAttempts {
		if !c.ours(cur) {
			return nil
		}
		want := cur.DeepCopy()
		want.Spec.HolderIdentity = nil
		delete(want.Annotations, AnnotationAddress)
		got, err := cl.Update(ctx, want, metav1.UpdateOptions{})
		switch {
		case err == nil:
			c.lease = got
			return nil
		case apierrors.IsConflict(err):
			cur, err = cl.Get(ctx, want.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("presence: read Lease %s: %w", want.Name, err)
			}
		case apierrors.IsNotFound(err):
			return nil
		default:
			return fmt.Errorf("presence: release Lease %s: %w", want.Name, err)
		}
	}
	return fmt.Errorf("presence: release Lease %s: %d conflicts in a row", cur.Name, maxAttempts)
}

// Interface guards.
var (
	_ hub.Presence = (*Leases)(nil)
	_ hub.Claim    = (*claim)(nil)
)
