// Package portal is a gateway replica's connection to the Portal cluster:
// the kube-apiserver that holds what several gateway replicas share (node
// presence Leases and the owner epoch counter, package nodecore/presence; the
// cluster-wide node stores), the namespace those objects live in, and
// this replica's identity among the others (docs/scale-out.md).
//
// A Cluster is built from a Config without contacting the apiserver; its
// clients are client-go's, rate-limited together (Config.QPS), and its
// Context lives until Close, so that watches shared by several users (an
// informer) can outlive one of them.
package portal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ServiceAccountNamespace is the file in which Kubernetes mounts a pod's
// namespace; in the cluster, the namespace defaults to its content.
const ServiceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// DefaultQPS is Config.QPS's default: requests per second to the
// apiserver from one replica, all users together. client-go's own default
// (5) would let 200 nodes connecting at once wait tens of seconds for
// their Lease writes.
const DefaultQPS = 500

// UserAgent is the User-Agent of the gateway's requests (apiserver audit
// logs and metrics show it).
const UserAgent = "sandgate-gateway"

// Config says how a replica reaches the Portal cluster.
type Config struct {
	// Kubeconfig is the path of a kubeconfig file. Empty: the in-cluster
	// configuration (the pod's ServiceAccount token and CA, and
	// KUBERNETES_SERVICE_HOST/PORT).
	Kubeconfig string
	// Context is the kubeconfig context to use. Empty: the file's
	// current context. Only with Kubeconfig.
	Context string
	// Namespace holds the gateway's objects: a DNS-1123 label. Empty: the
	// namespace of the kubeconfig context ("default" when it names none),
	// or in the cluster the pod's own (ServiceAccountNamespace).
	Namespace string
	// Replica is this replica's identity, the holder identity of its
	// Leases: a DNS-1123 subdomain (a pod name is one). Empty: the host
	// name, which in a pod is the pod's name.
	Replica string
	// QPS limits the requests per second to the apiserver from this
	// replica, every user of the Cluster together. Default DefaultQPS.
	QPS float32
	// Burst is how many requests may go above QPS at once. Default 2×QPS.
	Burst int
}

// Cluster is one replica's connection to the Portal cluster. Its methods
// are safe for concurrent use.
type Cluster struct {
	config    *rest.Config
	clientset kubernetes.Interface
	namespace string
	replica   string
	ctx       context.Context
	cancel    context.CancelFunc
}

// Connect checks cfg and builds the clients; it does not contact the
// apiserver. Errors name the setting at fault ("portal: kubeconfig …",
// "portal: namespace …", "portal: replica …", "portal: qps …") and never
// show a credential.
func Connect(cfg Config) (*Cluster, error) {
	if cfg.QPS < 0 || cfg.Burst < 0 {
		return nil, errors.New("portal: qps and burst must be positive")
	}
	if cfg.Context != "" && cfg.Kubeconfig == "" {
		return nil, errors.New("portal: a kubeconfig context needs a kubeconfig file")
	}
	var rc *rest.Config
	ns := cfg.Namespace
	if cfg.Kubeconfig != "" {
		if _, err := os.Stat(cfg.Kubeconfig); err != nil {
			return nil, fmt.Errorf("portal: kubeconfig: %w", err)
		}
		cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: cfg.Kubeconfig},
			&clientcmd.ConfigOverrides{CurrentContext: cfg.Context})
		var err error
		if rc, err = cc.ClientConfig(); err != nil {
			return nil, fmt.Errorf("portal: kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
		if ns == "" {
			if ns, _, err = cc.Namespace(); err != nil {
				return nil, fmt.Errorf("portal: kubeconfig %s: %w", cfg.Kubeconfig, err)
			}
		}
	} else {
		var err error
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("portal: no kubeconfig is set and the in-cluster configuration is unavailable: %w", err)
		}
		if ns == "" {
			b, err := os.ReadFile(ServiceAccountNamespace)
			if err != nil {
				return nil, errors.New("portal: namespace is not set and the pod's namespace file cannot be read")
			}
			ns = strings.TrimSpace(string(b))
		}
	}
	replica := cfg.Replica
	if replica == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("portal: replica is not set and the host name is unknown: %w", err)
		}
		replica = h
	}
	rc.QPS, rc.Burst = cfg.QPS, cfg.Burst
	if rc.QPS == 0 {
		rc.QPS = DefaultQPS
	}
	if rc.Burst == 0 {
		rc.Burst = int(2 * rc.QPS)
	}
	rc.UserAgent = UserAgent
	return newCluster(rc, ns, replica)
}

// newCluster checks the namespace and replica and builds the clientset.
func newCluster(rc *rest.Config, namespace, replica string) (*Cluster, error) {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return nil, fmt.Errorf("portal: namespace %q: %s", namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(replica); len(errs) > 0 {
		return nil, fmt.Errorf("portal: replica %q (set it, e.g. to the pod name): %s", replica, strings.Join(errs, "; "))
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("portal: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Cluster{config: rc, clientset: cs, namespace: namespace, replica: replica, ctx: ctx, cancel: cancel}, nil
}

// ForConfig returns a Cluster over an existing client configuration (a
// test's apiserver); namespace and replica are checked as in Connect,
// and the configuration's own rate limits are kept.
func ForConfig(rc *rest.Config, namespace, replica string) (*Cluster, error) {
	return newCluster(rest.CopyConfig(rc), namespace, replica)
}

// RESTConfig returns a copy of the client configuration, for a client of
// another kind (controller-runtime's client, a dynamic client). Clients
// built from it have rate limiters of their own.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.config) }

// Clientset returns the typed client-go clientset (shared; rate-limited
// by Config.QPS and Burst).
func (c *Cluster) Clientset() kubernetes.Interface { return c.clientset }

// Namespace returns the namespace of the gateway's objects.
func (c *Cluster) Namespace() string { return c.namespace }

// Replica returns this replica's identity.
func (c *Cluster) Replica() string { return c.replica }

// Context returns a context that ends when the Cluster is closed: the
// lifetime of watches that serve every user of the Cluster.
func (c *Cluster) Context() context.Context { return c.ctx }

// Close ends Context. The clients stay usable (a request in flight is not
// cut off), but watches started with Context stop.
func (c *Cluster) Close() error {
	c.cancel()
	return nil
}
