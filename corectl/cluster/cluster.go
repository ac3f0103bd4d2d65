// Package cluster is corectl's configuration of compute clusters (issue 5
// "Model"): for each cluster ID, how to reach its apiserver, the fixed
// entry and its ingress class/host/OpenSandbox backend (the managed
// Ingress copies them, spec §5.2), the DNS selectors of the platform DNS
// rule (spec §5.3), the allocation label, and the CNI qualification record
// (spec §5.3) with the gate that uses it, and the secret each sandbox's
// execd access token is derived from (execdtoken.go). It also builds the
// clients.
//
// The configuration is a YAML or JSON file, decoded strictly (see Parse);
// docs/corectl.md shows a complete example.
package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// DefaultAllocationLabel is the pod-template label that carries the
// allocation identity when a cluster does not name another (spec §5.3
// "allocation-id: <allocationID>").
const DefaultAllocationLabel = "allocation-id"

// MaxFileSize bounds the configuration file, in bytes (1 MiB).
const MaxFileSize = 1 << 20

// Sentinel errors.
var (
	// ErrInvalidConfig: the configuration file does not decode strictly or
	// fails validation; the message names the field, never a secret.
	ErrInvalidConfig = errors.New("cluster: invalid configuration")
	// ErrUnknownCluster: no cluster has the requested ID.
	ErrUnknownCluster = errors.New("cluster: unknown cluster")
	// ErrCNIUnqualified: the cluster's CNI qualification record is
	// missing, or bound to another cluster, CNI implementation, version or
	// configuration fingerprint than the cluster runs (spec §5.3); new
	// enforced PUTs are refused.
	ErrCNIUnqualified = errors.New("cluster: CNI qualification record missing or invalidated")
)

// Config is the whole configuration file.
type Config struct {
	// Clusters lists the compute clusters; IDs are unique.
	Clusters []Cluster `json:"clusters"`
	// Templates says where template default network policies are stored.
	Templates TemplateStore `json:"templates"`
	// SandboxTemplates are the pods of the E2B template IDs a create may
	// name (see SandboxTemplate); IDs are unique. A create naming an ID
	// that is not here is refused (404 template_not_found).
	SandboxTemplates []SandboxTemplate `json:"sandboxTemplates,omitempty"`
	// Domain is the E2B domain of every cluster that names none (its
	// Domain): the DNS name under which the gateway serves
	// <port>-<sandboxID>.<domain> (e2b_dataplane hosts). Empty: corectl
	// answers domain null (the fixed-address mode).
	Domain string `json:"domain,omitempty"`
}

// TemplateStore is where SandboxTemplateNetwork objects live: one cluster
// of Clusters and a namespace in it.
type TemplateStore struct {
	// ClusterID names the cluster (one of Clusters).
	ClusterID string `json:"clusterId"`
	// Namespace is the namespace of the template objects.
	Namespace string `json:"namespace"`
}

// Cluster is one compute cluster.
type Cluster struct {
	// ID is the cluster ID, as resource credentials name it (clusterId). It
	// must be a valid label value: it is written into labels.
	ID string `json:"id"`
	// Kubeconfig is the path of a kubeconfig file for the cluster's
	// apiserver; exactly one of Kubeconfig and InCluster is set.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// KubeContext selects a context of Kubeconfig ("" = current context).
	KubeContext string `json:"kubeContext,omitempty"`
	// InCluster uses the pod's service account (corectl runs in this
	// cluster).
	InCluster bool `json:"inCluster,omitempty"`
	// Client is client-go's client-side rate limit for this cluster's
	// apiserver; zero values take the defaults (ClientLimits).
	Client ClientLimits `json:"client,omitempty"`
	// Domain is the E2B domain corectl answers for this cluster's
	// sandboxes (create, connect, GET): the SDK then reaches envd at
	// 49983-<sandboxID>.<domain> and a port at <port>-<sandboxID>.<domain>
	// (getHost). Default Config.Domain; a DNS subdomain.
	Domain string `json:"domain,omitempty"`
	// FixedEntry is the cluster's fixed entry URL ("http://host:port"),
	// informational for corectl (the data plane dials it).
	FixedEntry string `json:"fixedEntry"`
	// Ingress describes the fixed entry's Ingress, which every managed
	// Ingress copies.
	Ingress IngressCarrier `json:"ingress"`
	// AllocationLabel is the BatchSandbox pod-template label carrying the
	// allocation ID; default DefaultAllocationLabel.
	AllocationLabel string `json:"allocationLabel,omitempty"`
	// DNS selects the cluster DNS pods the platform DNS rule allows
	// (UDP and TCP 53).
	DNS DNSSelector `json:"dns"`
	// CNI is what the cluster runs now, stated in the configuration; set
	// exactly one of CNI and CNISource.
	CNI CNIFacts `json:"cni,omitempty"`
	// CNISource reads what the cluster runs now from the cluster itself
	// (see CNISource); set exactly one of CNI and CNISource.
	CNISource *CNISource `json:"cniSource,omitempty"`
	// CNIQualification is the qualification record; nil means missing.
	CNIQualification *CNIQualification `json:"cniQualification,omitempty"`
	// CNIQualificationRequired turns the gate on; nil means true. Setting
	// false for a cluster is the explicit exception of spec §5.3.
	CNIQualificationRequired *bool `json:"cniQualificationRequired,omitempty"`
	// ExecdTokenSecretFile, when set, is the path of the cluster secret
	// each sandbox's execd access token is derived from
	// (execdtoken.Derive(secret, sandboxID)): the same file the gateway's
	// execd_token_secret reads for this cluster. Validate (and corectl's
	// daemon at start) reads it (LoadExecdTokenSecret: at most
	// MaxExecdTokenSecretBytes, one trailing newline dropped, at least 32
	// bytes left); a create then sets the derived token as
	// EXECD_ACCESS_TOKEN on the execd container and readiness pings send
	// it. The secret is never logged, put in an error or in a sandbox.
	// Empty: no token is set (execd runs without one unless the template
	// sets it).
	ExecdTokenSecretFile string `json:"execdTokenSecretFile,omitempty"`
	// ExecdContainer names the container of every sandbox template's pod
	// that runs execd and gets EXECD_ACCESS_TOKEN; empty: each template's
	// sandbox container (SandboxTemplate.Container, default the first),
	// where OpenSandbox's bootstrap starts execd. Only with
	// ExecdTokenSecretFile; every template's pod must have it.
	ExecdContainer string `json:"execdContainer,omitempty"`

	// cniObserved holds the readings of CNISource (set by Validate),
	// shared by copies of the Cluster.
	cniObserved *cniObservation
	// execdSecret is ExecdTokenSecretFile's content (set by Validate).
	execdSecret *execdSecret
}

// Defaults of ClientLimits. client-go's own defaults (5 requests/s,
// burst 10) throttle back-to-back sandbox creates to about one per
// second, since one create makes about 20 apiserver requests; these
// leave the apiserver's API Priority and Fairness to protect it instead,
// and are sized for corectl's target of 5,000 sandbox networks per minute
// (docs/benchmarks.md).
const (
	// DefaultClientQPS is the steady requests per second of one client.
	DefaultClientQPS = 300
	// DefaultClientBurst is the burst above DefaultClientQPS.
	DefaultClientBurst = 600
)

// ClientLimits is client-go's token-bucket rate limit (rest.Config QPS
// and Burst). client-go applies it to each REST client corectl builds
// for the cluster: controller-runtime makes one per resource type, so the
// limit holds per resource type (Ingresses, NetworkPolicies,
// BatchSandboxes, …) and leader election and events have their own.
type ClientLimits struct {
	// QPS is the steady rate in requests per second; 0 means
	// DefaultClientQPS; -1 turns client-side limiting off (the
	// apiserver's API Priority and Fairness still applies). Other negative
	// values are invalid.
	QPS float32 `json:"qps,omitempty"`
	// Burst is how many requests may go at once above the steady rate; 0
	// means DefaultClientBurst when QPS is 0, else twice QPS rounded up.
	// It must be 0 when QPS is -1.
	Burst int `json:"burst,omitempty"`
	// RequestTimeout bounds each request of corectl's uncached client of
	// the cluster (the API's, the engines' and the create's reads and
	// writes; not the informers' watches), e.g. "30s"; 0 means
	// DefaultRequestTimeout. A hung apiserver then fails its own
	// cluster's requests after this long instead of holding them.
	RequestTimeout metav1.Duration `json:"requestTimeout,omitzero"`
}

// DefaultRequestTimeout is ClientLimits.RequestTimeout's default.
const DefaultRequestTimeout = 30 * time.Second

// EffectiveTimeout returns RequestTimeout with its default filled in.
func (l ClientLimits) EffectiveTimeout() time.Duration {
	if l.RequestTimeout.Duration > 0 {
		return l.RequestTimeout.Duration
	}
	return DefaultRequestTimeout
}

// Effective returns the QPS and burst client-go is given: the defaults
// filled in; (-1, 0) when limiting is off.
func (l ClientLimits) Effective() (qps float32, burst int) {
	switch {
	case l.QPS < 0:
		return -1, 0
	case l.QPS == 0 && l.Burst == 0:
		return DefaultClientQPS, DefaultClientBurst
	case l.QPS == 0:
		return DefaultClientQPS, l.Burst
	case l.Burst == 0:
		return l.QPS, int(math.Ceil(float64(l.QPS) * 2))
	}
	return l.QPS, l.Burst
}

func (l ClientLimits) validate() error {
	switch {
	case l.QPS < 0 && l.QPS != -1:
		return fmt.Errorf("client.qps %v is negative (use -1 to turn client-side limiting off)", l.QPS)
	case math.IsNaN(float64(l.QPS)) || math.IsInf(float64(l.QPS), 0):
		return errors.New("client.qps is not a number")
	case l.Burst < 0:
		return fmt.Errorf("client.burst %d is negative", l.Burst)
	case l.QPS == -1 && l.Burst != 0:
		return errors.New("client.burst must be absent when client.qps is -1")
	case l.RequestTimeout.Duration < 0:
		return fmt.Errorf("client.requestTimeout %s is negative", l.RequestTimeout.Duration)
	}
	return nil
}

// IngressCarrier is the ingress class, host and OpenSandbox ingress
// backend of the fixed entry, and where managed Ingresses go.
type IngressCarrier struct {
	// ClassName is the ingress class (spec.ingressClassName).
	ClassName string `json:"className"`
	// Host is the fixed entry's host rule ("" = no host, all hosts).
	Host string `json:"host,omitempty"`
	// Namespace holds the managed Ingresses and the backend Service (an
	// Ingress can only route to a Service in its own namespace).
	Namespace string `json:"namespace"`
	// BackendService is the OpenSandbox ingress Service name.
	BackendService string `json:"backendService"`
	// BackendPort is its port, a number or a port name.
	BackendPort intstr.IntOrString `json:"backendPort"`
}

// DNSSelector is the destination of the platform DNS rule: pods matching
// PodSelector in namespaces matching NamespaceSelector.
type DNSSelector struct {
	// NamespaceSelector selects the DNS namespace, e.g. matchLabels
	// kubernetes.io/metadata.name: kube-system.
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`
	// PodSelector selects the DNS pods, e.g. matchLabels k8s-app: kube-dns.
	PodSelector metav1.LabelSelector `json:"podSelector"`
}

// CNIFacts identifies a CNI deployment.
type CNIFacts struct {
	// Implementation is the CNI, e.g. "calico".
	Implementation string `json:"implementation"`
	// Version is its version, e.g. "v3.28.1".
	Version string `json:"version"`
	// Fingerprint is a digest of the relevant CNI configuration.
	Fingerprint string `json:"fingerprint"`
}

// CNIQualification is a CNI qualification record (spec §5.3): the cluster
// and CNI facts the qualification matrix passed on.
type CNIQualification struct {
	// ClusterID is the cluster the record was made for.
	ClusterID string `json:"clusterId"`
	CNIFacts  `json:",inline"`
	// QualifiedAt is when the matrix passed (RFC 3339), informational.
	QualifiedAt string `json:"qualifiedAt,omitempty"`
}

// AllocationLabelKey returns AllocationLabel or DefaultAllocationLabel.
func (c *Cluster) AllocationLabelKey() string {
	if c.AllocationLabel == "" {
		return DefaultAllocationLabel
	}
	return c.AllocationLabel
}

// CNIGate reports whether new enforced writes may proceed: nil when the
// gate is off for this cluster or the qualification record exists and is
// bound to this cluster ID and the CNI implementation, version and
// fingerprint the cluster runs now (CurrentCNI: the static cni facts, or
// the latest reading of cniSource); otherwise an error wrapping
// ErrCNIUnqualified that says which binding failed (also when cniSource's
// facts are unknown: fail closed).
func (c *Cluster) CNIGate() error {
	_, err := c.CNIGateReason()
	return err
}

// Lookup returns the cluster with the given ID, or an error wrapping
// ErrUnknownCluster.
func (cfg *Config) Lookup(id string) (*Cluster, error) {
	for i := range cfg.Clusters {
		if cfg.Clusters[i].ID == id {
			return &cfg.Clusters[i], nil
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownCluster, id)
}

// Load reads and parses the configuration file at path (see Parse).
func Load(path string) (*Config, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Size() > MaxFileSize {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrInvalidConfig, path, MaxFileSize)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes a configuration (YAML or JSON) strictly — unknown or
// duplicate fields are errors, and YAML scalars keep their YAML type (quote
// values such as `off` or `4` meant as strings) — and validates it with
// Validate. Errors
// wrap ErrInvalidConfig.
func Parse(data []byte) (*Config, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidConfig, MaxFileSize)
	}
	var cfg Config
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidConfig, err.Error())
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidConfig, err.Error())
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// Validate checks every cluster and the template store. Rules: at least
// one cluster; IDs unique, non-empty valid label values; exactly one of
// kubeconfig and inCluster; fixedEntry an http(s) URL with a host;
// client.qps 0, positive or -1 and client.burst 0 or positive (0 with -1);
// ingress.className, namespace and backendService valid names, host a
// DNS-1123 subdomain or empty, backendPort set; allocationLabel a valid
// label key; DNS selectors valid and not empty (an empty selector would
// allow port 53 to every pod); templates.clusterId one of the clusters and
// templates.namespace a valid namespace; sandboxTemplates with unique,
// valid IDs and a sandbox container with an image and cpu and memory
// limits (see SandboxTemplate); execdTokenSecretFile readable, at most
// MaxExecdTokenSecretBytes and at least 32 bytes of secret (it is read
// here); execdContainer a container of every sandbox template. Errors wrap
// ErrInvalidConfig and name the field, never the secret.
func (cfg *Config) Validate() error {
	if len(cfg.Clusters) == 0 {
		return fmt.Errorf("%w: clusters is empty", ErrInvalidConfig)
	}
	seen := map[string]bool{}
	for i := range cfg.Clusters {
		c := &cfg.Clusters[i]
		if c.Domain == "" {
			c.Domain = cfg.Domain
		}
		if c.Domain != "" {
			if errs := validation.IsDNS1123Subdomain(c.Domain); len(errs) > 0 {
				return fmt.Errorf("%w: clusters[%d]: domain: %s", ErrInvalidConfig, i, strings.Join(errs, "; "))
			}
		}
		if err := c.validate(); err != nil {
			return fmt.Errorf("%w: clusters[%d]: %s", ErrInvalidConfig, i, err.Error())
		}
		if seen[c.ID] {
			return fmt.Errorf("%w: clusters[%d]: duplicate id %q", ErrInvalidConfig, i, c.ID)
		}
		seen[c.ID] = true
	}
	if !seen[cfg.Templates.ClusterID] {
		return fmt.Errorf("%w: templates.clusterId %q is not one of the clusters", ErrInvalidConfig, cfg.Templates.ClusterID)
	}
	if errs := validation.IsDNS1123Label(cfg.Templates.Namespace); len(errs) > 0 {
		return fmt.Errorf("%w: templates.namespace: %s", ErrInvalidConfig, strings.Join(errs, "; "))
	}
	ids := map[string]bool{}
	for i := range cfg.SandboxTemplates {
		t := &cfg.SandboxTemplates[i]
		if err := t.validate(); err != nil {
			return fmt.Errorf("%w: sandboxTemplates[%d]: %s", ErrInvalidConfig, i, err.Error())
		}
		if ids[t.ID] {
			return fmt.Errorf("%w: sandboxTemplates[%d]: duplicate id %q", ErrInvalidConfig, i, t.ID)
		}
		ids[t.ID] = true
	}
	for i := range cfg.Clusters {
		c := &cfg.Clusters[i]
		if c.ExecdContainer == "" {
			continue
		}
		for j := range cfg.SandboxTemplates {
			if _, err := SandboxContainer(&cfg.SandboxTemplates[j].Pod, c.ExecdContainer); err != nil {
				return fmt.Errorf("%w: clusters[%d]: execdContainer %q: sandboxTemplates[%d] has no container of that name", ErrInvalidConfig, i, c.ExecdContainer, j)
			}
		}
	}
	return nil
}

func (c *Cluster) validate() error {
	if c.ID == "" {
		return errors.New("id is empty")
	}
	if errs := validation.IsValidLabelValue(c.ID); len(errs) > 0 {
		return fmt.Errorf("id: %s", strings.Join(errs, "; "))
	}
	if (c.Kubeconfig == "") == !c.InCluster {
		return errors.New("set exactly one of kubeconfig and inCluster")
	}
	u, err := url.Parse(c.FixedEntry)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("fixedEntry must be an http or https URL with a host")
	}
	in := c.Ingress
	for _, f := range []struct{ name, v string }{{"ingress.className", in.ClassName}, {"ingress.namespace", in.Namespace}, {"ingress.backendService", in.BackendService}} {
		if errs := validation.IsDNS1123Label(f.v); len(errs) > 0 {
			return fmt.Errorf("%s: %s", f.name, strings.Join(errs, "; "))
		}
	}
	if in.Host != "" {
		if errs := validation.IsDNS1123Subdomain(in.Host); len(errs) > 0 {
			return fmt.Errorf("ingress.host: %s", strings.Join(errs, "; "))
		}
	}
	switch in.BackendPort.Type {
	case intstr.Int:
		if errs := validation.IsValidPortNum(int(in.BackendPort.IntVal)); len(errs) > 0 {
			return fmt.Errorf("ingress.backendPort: %s", strings.Join(errs, "; "))
		}
	case intstr.String:
		if errs := validation.IsValidPortName(in.BackendPort.StrVal); len(errs) > 0 {
			return fmt.Errorf("ingress.backendPort: %s", strings.Join(errs, "; "))
		}
	}
	if errs := validation.IsQualifiedName(c.AllocationLabelKey()); len(errs) > 0 {
		return fmt.Errorf("allocationLabel: %s", strings.Join(errs, "; "))
	}
	for _, s := range []struct {
		name string
		sel  metav1.LabelSelector
	}{{"dns.namespaceSelector", c.DNS.NamespaceSelector}, {"dns.podSelector", c.DNS.PodSelector}} {
		if len(s.sel.MatchLabels) == 0 && len(s.sel.MatchExpressions) == 0 {
			return fmt.Errorf("%s is empty (it would select everything)", s.name)
		}
		if _, err := metav1.LabelSelectorAsSelector(&s.sel); err != nil {
			return fmt.Errorf("%s: %s", s.name, err.Error())
		}
	}
	if c.CNISource != nil {
		if c.CNI != (CNIFacts{}) {
			return errors.New("set exactly one of cni and cniSource")
		}
		if err := c.CNISource.validate(); err != nil {
			return err
		}
		if c.cniObserved == nil {
			c.cniObserved = &cniObservation{}
		}
	} else if slices.Contains([]string{c.CNI.Implementation, c.CNI.Version, c.CNI.Fingerprint}, "") {
		return errors.New("cni.implementation, cni.version and cni.fingerprint are required (or cniSource)")
	}
	if c.ExecdContainer != "" {
		if c.ExecdTokenSecretFile == "" {
			return errors.New("execdContainer needs execdTokenSecretFile")
		}
		if errs := validation.IsDNS1123Label(c.ExecdContainer); len(errs) > 0 {
			return fmt.Errorf("execdContainer: %s", strings.Join(errs, "; "))
		}
	}
	if err := c.LoadExecdTokenSecret(); err != nil {
		return err
	}
	return c.Client.validate()
}
