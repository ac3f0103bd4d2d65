package cluster

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

const good = `
clusters:
  - id: cluster-4
    kubeconfig: /etc/corectl/cluster-4.kubeconfig
    fixedEntry: http://10.0.0.1:30090
    ingress:
      className: nginx
      host: sandbox.example.test
      namespace: opensandbox-system
      backendService: opensandbox-ingress
      backendPort: 80
    dns:
      namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}
      podSelector: {matchLabels: {k8s-app: kube-dns}}
    cni: {implementation: calico, version: v3.28.1, fingerprint: "sha256:abc"}
    cniQualification: {clusterId: cluster-4, implementation: calico, version: v3.28.1, fingerprint: "sha256:abc", qualifiedAt: "2026-09-01T00:00:00Z"}
templates: {clusterId: cluster-4, namespace: corectl-system}
`

func TestParseValidConfig(t *testing.T) {
	cfg, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	c, err := cfg.Lookup("cluster-4")
	if err != nil || c.AllocationLabelKey() != DefaultAllocationLabel || c.Ingress.BackendPort.IntVal != 80 {
		t.Fatalf("Lookup = %+v, %v", c, err)
	}
	if err := c.CNIGate(); err != nil {
		t.Fatalf("CNIGate = %v", err)
	}
	if _, err := cfg.Lookup("nope"); !errors.Is(err, ErrUnknownCluster) {
		t.Fatalf("Lookup(nope) = %v", err)
	}
}

func TestParseRefusesInvalidConfig(t *testing.T) {
	for _, tc := range []struct{ name, from, to string }{
		{"unknown field", "    fixedEntry:", "    bogus: 1\n    fixedEntry:"},
		{"both kubeconfig and inCluster", "    fixedEntry:", "    inCluster: true\n    fixedEntry:"},
		{"bad fixed entry", "http://10.0.0.1:30090", "ftp://x"},
		{"empty DNS selector", "podSelector: {matchLabels: {k8s-app: kube-dns}}", "podSelector: {}"},
		{"bad class", "className: nginx", "className: Nginx_Class"},
		{"bad host", "host: sandbox.example.test", "host: -bad-"},
		{"bad port", "backendPort: 80", "backendPort: 70000"},
		{"templates cluster unknown", "templates: {clusterId: cluster-4", "templates: {clusterId: cluster-9"},
		{"YAML number for a string", "version: v3.28.1, fingerprint: \"sha256:abc\"}\n    cniQ", "version: 3, fingerprint: \"sha256:abc\"}\n    cniQ"},
		{"missing CNI facts", "cni: {implementation: calico, version: v3.28.1, fingerprint: \"sha256:abc\"}", "cni: {implementation: calico}"},
		{"bad allocation label", "    fixedEntry:", "    allocationLabel: 'bad label'\n    fixedEntry:"},
		{"negative client qps", "    fixedEntry:", "    client: {qps: -2}\n    fixedEntry:"},
		{"negative client burst", "    fixedEntry:", "    client: {burst: -1}\n    fixedEntry:"},
		{"burst with limiting off", "    fixedEntry:", "    client: {qps: -1, burst: 5}\n    fixedEntry:"},
		{"client qps as a string", "    fixedEntry:", "    client: {qps: \"fast\"}\n    fixedEntry:"},
		{"negative request timeout", "    fixedEntry:", "    client: {requestTimeout: -1s}\n    fixedEntry:"},
		{"request timeout without a unit", "    fixedEntry:", "    client: {requestTimeout: 30}\n    fixedEntry:"},
		{"unknown client field", "    fixedEntry:", "    client: {rate: 5}\n    fixedEntry:"},
	} {
		data := strings.Replace(good, tc.from, tc.to, 1)
		if data == good {
			t.Fatalf("%s: replacement did not apply", tc.name)
		}
		if _, err := Parse([]byte(data)); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", tc.name, err)
		}
	}
	block := good[strings.Index(good, "  - id:"):strings.Index(good, "templates:")]
	dup := strings.Replace(good, "templates:", block+"templates:", 1)
	if _, err := Parse([]byte(dup)); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "duplicate id") {
		t.Errorf("duplicate cluster: %v", err)
	}
}

// TestClientLimits: the client block of a cluster sets client-go's QPS and
// Burst; absent values take the documented defaults, a QPS alone gets a
// burst of twice it, and -1 turns client-side limiting off (client-go
// builds no rate limiter for a negative QPS).
func TestClientLimits(t *testing.T) {
	for _, tc := range []struct {
		name, block string
		qps         float32
		burst       int
	}{
		{"absent", "", DefaultClientQPS, DefaultClientBurst},
		{"both", "    client: {qps: 50, burst: 70}\n", 50, 70},
		{"qps alone", "    client: {qps: 12.5}\n", 12.5, 25},
		{"burst alone", "    client: {burst: 900}\n", DefaultClientQPS, 900},
		{"off", "    client: {qps: -1}\n", -1, 0},
	} {
		cfg, err := Parse([]byte(strings.Replace(good, "    fixedEntry:", tc.block+"    fixedEntry:", 1)))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		c := &cfg.Clusters[0]
		rc := &rest.Config{QPS: 1000, Burst: 2000, RateLimiter: flowcontrol.NewFakeAlwaysRateLimiter()}
		c.ApplyClientLimits(rc)
		if rc.QPS != tc.qps || rc.Burst != tc.burst || rc.RateLimiter != nil {
			t.Errorf("%s: QPS %v burst %d limiter %v, want %v %d nil", tc.name, rc.QPS, rc.Burst, rc.RateLimiter, tc.qps, tc.burst)
		}
	}
}

// TestRequestTimeout: client.requestTimeout bounds the uncached client's
// requests; absent, it is DefaultRequestTimeout.
func TestRequestTimeout(t *testing.T) {
	for _, tc := range []struct {
		name, block string
		want        time.Duration
	}{
		{"absent", "", DefaultRequestTimeout},
		{"set", "    client: {requestTimeout: 5s}\n", 5 * time.Second},
		{"beside the limits", "    client: {qps: 50, requestTimeout: 2m}\n", 2 * time.Minute},
	} {
		cfg, err := Parse([]byte(strings.Replace(good, "    fixedEntry:", tc.block+"    fixedEntry:", 1)))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := cfg.Clusters[0].Client.EffectiveTimeout(); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestRequestConfig: the request configuration is a copy with the
// cluster's request timeout (its default when unset); the configuration
// it was made from keeps no timeout (the watches' configuration).
func TestRequestConfig(t *testing.T) {
	base := &rest.Config{Host: "https://apiserver.test", QPS: 7}
	for _, tc := range []struct {
		set, want time.Duration
	}{{0, DefaultRequestTimeout}, {2 * time.Second, 2 * time.Second}} {
		c := &Cluster{ID: "c", Client: ClientLimits{RequestTimeout: metav1.Duration{Duration: tc.set}}}
		rc := c.RequestConfig(base)
		if rc.Timeout != tc.want || rc.Host != base.Host || rc.QPS != 7 {
			t.Errorf("requestTimeout %s: config timeout %s (host %q, QPS %v), want %s", tc.set, rc.Timeout, rc.Host, rc.QPS, tc.want)
		}
		if base.Timeout != 0 {
			t.Fatalf("RequestConfig changed the configuration it was given: timeout %s", base.Timeout)
		}
	}
}

// TestNetworkingProtobufClient: the client asks networking.k8s.io/v1 at
// the configuration's apiserver for the given Accept, sends protobuf, and
// leaves the configuration it was made from as it was.
func TestNetworkingProtobufClient(t *testing.T) {
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL}
	rc, err := NetworkingProtobufClient(cfg, "application/vnd.kubernetes.protobuf,application/json")
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Post().Namespace("ns").Resource("networkpolicies").Body(&networkingv1.NetworkPolicy{}).Do(context.Background()).Error(); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.URL.Path != "/apis/networking.k8s.io/v1/namespaces/ns/networkpolicies" ||
		got.Header.Get("Accept") != "application/vnd.kubernetes.protobuf,application/json" ||
		got.Header.Get("Content-Type") != "application/vnd.kubernetes.protobuf" {
		t.Fatalf("request %v %v", got.URL, got.Header)
	}
	if cfg.ContentType != "" || cfg.GroupVersion != nil || cfg.APIPath != "" {
		t.Fatalf("the configuration given was changed: %+v", cfg)
	}
}
