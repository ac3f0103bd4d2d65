package probesource_test

import (
	"context"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/probesource"
	"github.com/sandgate/sandgate/integration/fixedentry"
	networkingv1 "k8s.io/api/networking/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var env *kubetest.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	kubetest.Main(m, &env)
}

// echoEntry is a fixed entry whose nginx answers the echo snippet of the
// Ingresses that exist in ns, from a NAT pool that rotates per request.
type echoEntry struct {
	ns string

	mu   sync.Mutex
	pool []string
	next int
}

func (e *echoEntry) source(string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.pool[e.next%len(e.pool)]
	e.next++
	return s
}

func (e *echoEntry) route(path string) (fixedentry.NginxRoute, bool) {
	var list networkingv1.IngressList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(e.ns)); err != nil {
		return fixedentry.NginxRoute{}, false
	}
	for _, ing := range list.Items {
		for _, r := range ing.Spec.Rules {
			for _, p := range r.HTTP.Paths {
				if path == p.Path && ing.Annotations[probesource.AnnotationSnippet] == probesource.EchoSnippet {
					return fixedentry.NginxRoute{Echo: true}, true
				}
			}
		}
	}
	return fixedentry.NginxRoute{}, false
}

// TestDiscoverer checks discovery (every NAT-pool address as a /32, the
// echo Ingress's shape and its confirmed deletion, the ingress host sent),
// the TTL cache, Invalidate, and failure when nothing echoes.
func TestDiscoverer(t *testing.T) {
	ns := env.Namespace(t)
	e := &echoEntry{ns: ns, pool: []string{"10.0.0.7", "10.0.0.5", "10.0.0.7"}}
	fe := fixedentry.New()
	fe.SetNginx(&fixedentry.Nginx{Source: e.source, Route: e.route})
	srv := httptest.NewServer(fe)
	defer srv.Close()
	c := kubetest.Cluster("c-probe", ns)
	c.FixedEntry = srv.URL
	now := time.Now()
	d := &probesource.Discoverer{Client: env.Client, Cluster: c, Interval: 10 * time.Millisecond, Budget: 20 * time.Second,
		Now: func() time.Time { return now }}
	ctx := context.Background()
	echoes := func() (n int) {
		for _, r := range fe.Requests() {
			if strings.HasPrefix(r.Path, probesource.EchoPathPrefix) && r.Status == 200 {
				n++
				if r.Host != c.Ingress.Host {
					t.Fatalf("echo request Host %q", r.Host)
				}
			}
		}
		return n
	}

	p, err := d.Sources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p, []string{"10.0.0.5/32", "10.0.0.7/32"}) || echoes() != 20 {
		t.Fatalf("sources %v after %d echoes", p, echoes())
	}
	var list networkingv1.IngressList
	if err := env.Client.List(ctx, &list, client.InNamespace(ns), client.HasLabels{v1alpha1.LabelProbeEcho}); err != nil || len(list.Items) != 0 {
		t.Fatalf("echo Ingress left: %v %v", list.Items, err)
	}
	// Cached within the TTL.
	if _, err := d.Sources(ctx); err != nil || echoes() != 20 {
		t.Fatalf("cached call dialled again (%d echoes, %v)", echoes(), err)
	}
	// Expired: rediscovered.
	now = now.Add(11 * time.Minute)
	if _, err := d.Sources(ctx); err != nil || echoes() != 40 {
		t.Fatalf("expired cache: %d echoes, %v", echoes(), err)
	}
	// Invalidated: rediscovered.
	d.Invalidate()
	if _, err := d.Sources(ctx); err != nil || echoes() != 60 {
		t.Fatalf("invalidated cache: %d echoes, %v", echoes(), err)
	}
	// Nothing echoes: an error, no stale result, no Ingress left.
	fe.SetNginx(nil)
	d.Invalidate()
	d.Budget = time.Second
	if p, err := d.Sources(ctx); err == nil || p != nil {
		t.Fatalf("discovery without an echo = %v, %v", p, err)
	}
	if err := env.Client.List(ctx, &list, client.InNamespace(ns), client.HasLabels{v1alpha1.LabelProbeEcho}); err != nil || len(list.Items) != 0 {
		t.Fatalf("echo Ingress left after failure: %v %v", list.Items, err)
	}
}
