package cluster

import (
	"fmt"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/sandbox"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// NewScheme returns a scheme with client-go's built-in types and corectl's
// v1alpha1 types, and BatchSandbox as sandbox.Cached (sandbox.AddToScheme;
// corectl writes and reads BatchSandboxes whole as unstructured, which
// needs no registration).
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	// BatchSandboxes asked for as *sandbox.Cached decode into that small
	// type (the informer cache, the orphan scan); as unstructured, whole.
	if err := sandbox.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// RESTConfig returns the apiserver connection of c: the in-cluster
// configuration, or the kubeconfig file (and context), with c's client
// limits (ApplyClientLimits). The user agent is "corectl/<cluster ID>".
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if c.InCluster {
		cfg, err = rest.InClusterConfig()
	} else {
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: c.Kubeconfig}
		over := &clientcmd.ConfigOverrides{CurrentContext: c.KubeContext}
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, over).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", c.ID, err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "corectl/" + c.ID
	c.ApplyClientLimits(cfg)
	return cfg, nil
}

// RequestConfig returns a copy of cfg whose every request is bounded by
// c's request timeout (ClientLimits.EffectiveTimeout, default
// DefaultRequestTimeout): rest.Config.Timeout, client-go's http.Client
// timeout over the whole request, the answer's body included. It is the
// configuration of every corectl client that makes single requests (the
// uncached client, the Events sink, SelfSubjectAccessReviews, pods/log,
// the protobuf listers); not of the informers' watches, which last, nor of
// leader election's Lease client, which controller-runtime bounds by half
// the renew deadline. A request to a hung apiserver then fails with a
// timeout error (net.Error with Timeout() true) instead of holding its
// caller.
func (c *Cluster) RequestConfig(cfg *rest.Config) *rest.Config {
	rc := rest.CopyConfig(cfg)
	rc.Timeout = c.Client.EffectiveTimeout()
	return rc
}

// NetworkingProtobufClient returns a REST client for networking.k8s.io/v1
// on the apiserver of cfg (a copy is taken; the same credentials, client
// limits and timeout) that sends protobuf and asks for answers in accept,
// an Accept header value; what it decodes itself it decodes with
// client-go's scheme. client-go gives each REST client a token bucket of
// its own (cfg's QPS and Burst). The protobuf list readers of the orphan
// scan (package scanmeta) and of the egress conflict step
// (egress.PolicyLister) are made with it. Errors: those of
// rest.RESTClientFor.
func NetworkingProtobufClient(cfg *rest.Config, accept string) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	gv := networkingv1.SchemeGroupVersion
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = accept
	c.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	return rest.RESTClientFor(c)
}

// ApplyClientLimits sets cfg's QPS and Burst from c.Client
// (ClientLimits.Effective) and clears any RateLimiter, so client-go builds
// its token bucket from them.
func (c *Cluster) ApplyClientLimits(cfg *rest.Config) {
	cfg.QPS, cfg.Burst = c.Client.Effective()
	cfg.RateLimiter = nil
}
