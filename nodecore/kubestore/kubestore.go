// Package kubestore keeps Core's durable node state in the Portal
// cluster's kube-apiserver, so that several gateway replicas share it: the
// pools and their deployments (pool.Backend), the placements of
// allocations on deployment generations (placement.Store), and the
// enrolment tokens and enrolled nodes (credential.Store, the machine API's
// Enroller, the admin API's Enrolments). The objects are the resources of
// package nodecore/apis/v1alpha1, in one namespace; the design, the bounds and
// the figures are in docs/scale-out.md "Node state".
//
// Every write is conditional on the resourceVersion it was computed from
// (a create, or an update or delete with that version): of two replicas
// changing one object at once, exactly one succeeds, and the other reads
// the object again and computes its change anew (or is refused, for a
// token already used). Each replica reads from its own view, which a
// watch (a client-go informer) keeps up to date; its own writes enter its
// view at once, the others' when the watch delivers them (typically
// within milliseconds; docs/scale-out.md "Node state"). Where a stale
// view could be unsafe the store reads the apiserver itself: an enrolment reads its
// token, a retention answer reads the node's placements once per
// connection (placement.Syncer), a node ID or token the view does not
// know is read once (rate-limited).
package kubestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/sandgate/sandgate/nodecore/apis/v1alpha1"
)

// Defaults of Config.
const (
	DefaultSyncTimeout    = 30 * time.Second
	DefaultRequestTimeout = 10 * time.Second
	// DefaultRefreshQPS limits the reads of node IDs and tokens that a
	// replica's view does not know (burst: twice).
	DefaultRefreshQPS = 20
)

// Config configures a Store.
type Config struct {
	// REST reaches the Portal cluster's kube-apiserver (a copy of
	// portal.Cluster.RESTConfig()). Required.
	REST *rest.Config
	// Namespace holds the objects. Required.
	Namespace string
	// Context bounds the watches: they stop when it ends (the Portal
	// connection's context) or at Close. Default: none (Close only).
	Context context.Context
	// SyncTimeout bounds Open's wait for the first list of each watch.
	// Default DefaultSyncTimeout.
	SyncTimeout time.Duration
	// RequestTimeout bounds each apiserver request of a store method.
	// Default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// RefreshQPS limits the reads of node IDs and tokens the view does not
	// know, per second (burst twice). Default DefaultRefreshQPS.
	RefreshQPS float32
	// Now is the clock of token expiry and enrolment times. Default
	// time.Now.
	Now func() time.Time
	// Logger receives what the stores cannot act on (a malformed object, a
	// token that could not be given back); nil: none. Secrets are never
	// logged.
	Logger *zap.Logger
}

// Store is one replica's connection to the shared node state. Open it
// once per replica (it starts four watches) and share it across config
// reloads.
type Store struct {
	cfg     Config
	client  client.WithWatch
	ctx     context.Context
	cancel  context.CancelFunc
	refresh flowcontrol.RateLimiter

	poolInformer      toolscache.SharedIndexInformer
	placementInformer toolscache.SharedIndexInformer
	tokenInformer     toolscache.SharedIndexInformer
	nodeInformer      toolscache.SharedIndexInformer

	poolBackend *poolBackend
	placements  *Placements
	enrolment   *Enrolment
}

// Scheme returns a scheme with the built-in types and v1alpha1's.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1.AddToScheme(s)
	return s
}

// ErrSync: the objects cannot be listed (the apiserver is unreachable,
// the nodes.sandgate.io CRDs are not installed, or the identity may not
// list them), or a watch did not deliver its first list within
// SyncTimeout.
var ErrSync = errors.New("kubestore: the node state could not be read from the apiserver")

// Open lists each kind of object once (a failure is reported at once),
// starts the watches and waits until each has listed its objects. Errors:
// a bad Config, ErrSync (with the apiserver's cause).
func Open(cfg Config) (*Store, error) {
	if cfg.REST == nil || cfg.Namespace == "" {
		return nil, errors.New("kubestore: REST and Namespace are required")
	}
	if cfg.SyncTimeout <= 0 {
		cfg.SyncTimeout = DefaultSyncTimeout
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.RefreshQPS <= 0 {
		cfg.RefreshQPS = DefaultRefreshQPS
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	parent := cfg.Context
	if parent == nil {
		parent = context.Background()
	}
	c, err := client.NewWithWatch(cfg.REST, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, fmt.Errorf("kubestore: %w", err)
	}
	// One list of each kind first: a missing CRD, a missing right or an
	// unreachable apiserver is reported at once, with its cause.
	for _, l := range []client.ObjectList{&v1.NodePoolList{}, &v1.NodePlacementsList{}, &v1.NodeEnrolmentTokenList{}, &v1.EnrolledNodeList{}} {
		lctx, done := context.WithTimeout(parent, cfg.RequestTimeout)
		err := c.List(lctx, l, client.InNamespace(cfg.Namespace), client.Limit(1))
		done()
		if err != nil {
			return nil, fmt.Errorf("%w (namespace %s): %v", ErrSync, cfg.Namespace, err)
		}
	}
	ctx, cancel := context.WithCancel(parent)
	s := &Store{cfg: cfg, client: c, ctx: ctx, cancel: cancel,
		refresh: flowcontrol.NewTokenBucketRateLimiter(cfg.RefreshQPS, int(2*cfg.RefreshQPS))}
	s.poolInformer = s.informer(&v1.NodePool{}, func() client.ObjectList { return &v1.NodePoolList{} })
	s.placementInformer = s.informer(&v1.NodePlacements{}, func() client.ObjectList { return &v1.NodePlacementsList{} })
	s.tokenInformer = s.informer(&v1.NodeEnrolmentToken{}, func() client.ObjectList { return &v1.NodeEnrolmentTokenList{} })
	s.nodeInformer = s.informer(&v1.EnrolledNode{}, func() client.ObjectList { return &v1.EnrolledNodeList{} })
	s.poolBackend = &poolBackend{s: s}
	s.placements = newPlacements(s)
	s.enrolment = newEnrolment(s)
	for _, inf := range []toolscache.SharedIndexInformer{s.poolInformer, s.placementInformer, s.tokenInformer, s.nodeInformer} {
		go inf.RunWithContext(ctx)
	}
	wait, done := context.WithTimeout(ctx, cfg.SyncTimeout)
	defer done()
	if !toolscache.WaitForCacheSync(wait.Done(), s.poolInformer.HasSynced, s.placementInformer.HasSynced,
		s.tokenInformer.HasSynced, s.nodeInformer.HasSynced) {
		cancel()
		return nil, fmt.Errorf("%w within %s (namespace %s; are the nodes.sandgate.io CRDs installed and may the gateway list them?)", ErrSync, cfg.SyncTimeout, cfg.Namespace)
	}
	return s, nil
}

// Close stops the watches. The stores keep answering from their last
// view; writes still reach the apiserver.
func (s *Store) Close() error {
	s.cancel()
	return nil
}

// Namespace returns the namespace of the objects.
func (s *Store) Namespace() string { return s.cfg.Namespace }

// Placements returns the placement store.
func (s *Store) Placements() *Placements { return s.placements }

// Enrolment returns the enrolment store.
func (s *Store) Enrolment() *Enrolment { return s.enrolment }

// informer returns a watch of the objects of one kind in the namespace.
func (s *Store) informer(obj client.Object, newList func() client.ObjectList) toolscache.SharedIndexInformer {
	ns := s.cfg.Namespace
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			l := newList()
			err := s.client.List(ctx, l, &client.ListOptions{Namespace: ns, Raw: &opts})
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return s.client.Watch(ctx, newList(), &client.ListOptions{Namespace: ns, Raw: &opts})
		},
	}
	return toolscache.NewSharedIndexInformer(lw, obj, 0, toolscache.Indexers{})
}

// request returns the context of one apiserver request.
func (s *Store) request() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.ctx, s.cfg.RequestTimeout)
}

// handlers adapts add/update and delete callbacks to an informer's event
// handler; a deletion's final state unknown to the watch is unwrapped.
func handlers[T client.Object](put func(T), del func(T)) toolscache.ResourceEventHandlerFuncs {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if t, ok := o.(T); ok {
				put(t)
			}
		},
		UpdateFunc: func(_, o any) {
			if t, ok := o.(T); ok {
				put(t)
			}
		},
		DeleteFunc: func(o any) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if t, ok := o.(T); ok {
				del(t)
			}
		},
	}
}

// conflict reports whether err says the object changed, appeared or went
// away since the version a write was conditional on.
func conflict(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err)
}

// labels returns the labels of an object the gateway writes.
func labels(pool string) map[string]string {
	l := map[string]string{v1.LabelManagedBy: v1.ManagedByValue}
	if pool != "" {
		l[v1.LabelPool] = pool
	}
	return l
}
