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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/sandgate/sandgate/nodecore/api"
)

// Peer is a gateway replica as another replica reaches it: its replica
// ID (the Leases' holder identity) and the base URL of its internal node
// API.
type Peer = api.Peer

// Leases answers the internal node API's questions about other replicas.
var _ api.Peers = (*Leases)(nil)

// Self returns this replica's ID.
func (l *Leases) Self() string { return l.cfg.ReplicaID }

// nodeSelector selects the node Leases.
var nodeSelector = labels.Set{LabelKind: KindNode}.String()

// Start watches the node Leases (a client-go informer, one list and then
// a watch) until ctx ends, so that Holder and Replicas answer from memory
// instead of asking the apiserver for every forwarded request. Call it
// once; before its first list has arrived, and without it, they read from
// the apiserver.
func (l *Leases) Start(ctx context.Context) {
	c := l.client()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = nodeSelector
			return c.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = nodeSelector
			return c.Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &coordinationv1.Lease{}, 0, cache.Indexers{})
	l.informer = inf
	go inf.RunWithContext(ctx)
}

// Synced reports whether Start's watch has its first list (false without
// Start).
func (l *Leases) Synced() bool { return l.informer != nil && l.informer.HasSynced() }

// Holder returns the replica whose claim on nodeID's Lease is live; ok is
// false when none is (no Lease, released, expired). fresh reads the Lease
// from the apiserver; otherwise the watched copy answers (a change reaches
// it within the watch's delay, typically milliseconds). Errors are the
// apiserver's.
func (l *Leases) Holder(ctx context.Context, nodeID string, fresh bool) (Peer, bool, error) {
	now := l.cfg.Now()
	if !fresh && l.Synced() {
		obj, exists, err := l.informer.GetStore().GetByKey(l.cfg.Namespace + "/" + LeaseName(nodeID))
		if err == nil {
			if !exists {
				return Peer{}, false, nil
			}
			if lease, ok := obj.(*coordinationv1.Lease); ok {
				p, ok := l.peerOf(lease, now)
				return p, ok, nil
			}
		}
	}
	lease, err := l.client().Get(ctx, LeaseName(nodeID), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Peer{}, false, nil
	}
	if err != nil {
		return Peer{}, false, fmt.Errorf("presence: read Lease %s: %w", LeaseName(nodeID), err)
	}
	p, ok := l.peerOf(lease, now)
	return p, ok, nil
}

// Replicas returns the replicas that hold a live claim on at least one
// node, sorted by ID: from the watched Leases, or one list of them.
// Errors are the apiserver's.
func (l *Leases) Replicas(ctx context.Context) ([]Peer, error) {
	var leases []*coordinationv1.Lease
	if l.Synced() {
		for _, o := range l.informer.GetStore().List() {
			if lease, ok := o.(*coordinationv1.Lease); ok {
				leases = append(leases, lease)
			}
		}
	} else {
		list, err := l.client().List(ctx, metav1.ListOptions{LabelSelector: nodeSelector})
		if err != nil {
			return nil, fmt.Errorf("presence: list node Leases: %w", err)
		}
		for i := range list.Items {
			leases = append(leases, &list.Items[i])
		}
	}
	now := l.cfg.Now()
	seen := map[string]Peer{}
	for _, lease := range leases {
		if p, ok := l.peerOf(lease, now); ok {
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
