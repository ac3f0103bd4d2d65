package presence

import (
	"context"
	"fmt"
	"sort"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandgate/sandgate/node/api"
)

// Peer is a gateway replica as another replica reaches it: its replica
// ID (the Leases' holder identity) and the base URL of its internal node
// API.
type Peer = api.Peer

// Leases answers the internal node API's questions about other replicas.
var _ api.Peers = (*Leases)(nil)

// Self returns this replica's ID.
func (l *Leases) Self() string { return l.cfg.ReplicaID }

// Holder returns the replica whose claim on nodeID's Lease is live; ok is
// false when none is (no Lease, released, expired). fresh reads the
// Lease; otherwise an answer up to HolderTTL old may come from the cache.
// Errors are the apiserver's.
func (l *Leases) Holder(ctx context.Context, nodeID string, fresh bool) (Peer, bool, error) {
	now := l.cfg.Now()
	if !fresh {
		l.hmu.Lock()
		e, hit := l.holders[nodeID]
		l.hmu.Unlock()
		if hit && now.Sub(e.at) < l.cfg.HolderTTL {
			return e.peer, e.ok, nil
		}
	}
	lease, err := l.client().Get(ctx, LeaseName(nodeID), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l.store(nodeID, Peer{}, false, now)
		return Peer{}, false, nil
	}
	if err != nil {
		return Peer{}, false, fmt.Errorf("presence: read Lease %s: %w", LeaseName(nodeID), err)
	}
	p, ok := l.peerOf(lease, now)
	l.store(nodeID, p, ok, now)
	return p, ok, nil
}

// Replicas returns the replicas that hold a live claim on at least one
// node, sorted by ID, from one list of the node Leases. Errors are the
// apiserver's.
func (l *Leases) Replicas(ctx context.Context) ([]Peer, error) {
	list, err := l.client().List(ctx, metav1.ListOptions{LabelSelector: labels.Set{LabelKind: KindNode}.String()})
	if err != nil {
		return nil, fmt.Errorf("presence: list node Leases: %w", err)
	}
	now := l.cfg.Now()
	seen := map[string]Peer{}
	for i := range list.Items {
		if p, ok := l.peerOf(&list.Items[i], now); ok {
			seen[p.ID] = p
		}
	}
	out := make([]Peer, 0, len(seen))
	for _, p := range seen {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// peerOf returns the live holder of lease and its address.
func (l *Leases) peerOf(lease *coordinationv1.Lease, now time.Time) (Peer, bool) {
	if l.expired(lease, now) {
		return Peer{}, false
	}
	addr := lease.Annotations[AnnotationAddress]
	if addr == "" {
		return Peer{}, false
	}
	return Peer{ID: holder(lease), URL: addr}, true
}

// remember caches the holder this replica just wrote.
func (l *Leases) remember(nodeID string, lease *coordinationv1.Lease) {
	now := l.cfg.Now()
	p, ok := l.peerOf(lease, now)
	l.store(nodeID, p, ok, now)
}

// forget drops nodeID's cached holder.
func (l *Leases) forget(nodeID string) {
	l.hmu.Lock()
	delete(l.holders, nodeID)
	l.hmu.Unlock()
}

func (l *Leases) store(nodeID string, p Peer, ok bool, at time.Time) {
	l.hmu.Lock()
	defer l.hmu.Unlock()
	if len(l.holders) >= maxHolderCache {
		l.holders = map[string]holderEntry{}
	}
	l.holders[nodeID] = holderEntry{peer: p, ok: ok, at: at}
}
