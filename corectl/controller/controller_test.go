package controller

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/egress"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/kubetest"
	"github.com/sandgate/sandgate/corectl/sandbox"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

var env *kubetest.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	kubetest.Main(m, &env)
}

var ctx = context.Background()

// TestEgressRecoveryWaitsForTheGracePeriod: a policy that entered
// Verifying recently belongs to a PUT that may still be running; the
// recovery requeues it for the rest of the grace period and changes
// nothing. Once the grace period has passed it finishes the update.
func TestEgressRecoveryWaitsForTheGracePeriod(t *testing.T) {
	ns := env.Namespace(t)
	env.BatchSandbox(t, ns, "sbx", map[string]string{"allocation-id": "a1"})
	c := kubetest.Cluster("c1", ns)
	eng := &egress.Engine{Client: env.Client, Cluster: c}
	sb, err := sandbox.Get(ctx, env.Client, ns, "sbx", "allocation-id")
	if err != nil {
		t.Fatal(err)
	}
	started := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	spec := egress.Compile(c, "allocation-id", "a1", []string{"10.0.0.0/8"})
	np := &networkingv1.NetworkPolicy{}
	np.Name, np.Namespace = "sandbox-egress-a1", ns
	np.Labels = sb.IdentityLabels("c1")
	np.Annotations = map[string]string{egress.AnnotationVerificationState: "Verifying", v1alpha1.AnnotationVerifyingSince: started.Format(time.RFC3339)}
	np.Spec = spec
	if err := env.Client.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	now := started.Add(30 * time.Second)
	r := &EgressRecovery{Engine: eng, Reader: env.Client, Grace: time.Minute, Now: func() time.Time { return now }}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "sandbox-egress-a1"}}
	res, err := r.Reconcile(ctx, req)
	if err != nil || res.RequeueAfter != 30*time.Second {
		t.Fatalf("young Verifying: %+v, %v; want RequeueAfter 30s", res, err)
	}
	got := &networkingv1.NetworkPolicy{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(np), got); err != nil || got.ResourceVersion != np.ResourceVersion {
		t.Fatalf("the young policy was written: %v", err)
	}
	now = started.Add(2 * time.Minute)
	if res, err := r.Reconcile(ctx, req); err != nil || res.RequeueAfter != 0 {
		t.Fatalf("old Verifying: %+v, %v", res, err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(np), got); err != nil || got.Annotations[egress.AnnotationVerificationState] != "Verified" {
		t.Fatalf("after the grace period: %v %v", got.Annotations, err)
	}
}

// countingReader counts the reads made through it.
type countingReader struct {
	client.Reader
	reads atomic.Int64
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.reads.Add(1)
	return c.Reader.Get(ctx, key, obj, opts...)
}

// TestIngressReconcilerAsksTheCacheFirst: a request for an allowlist the
// cache does not hold (a managed Ingress's event during a create, before
// the allowlist exists) ends as NoChange with no request to the
// apiserver; one the cache holds runs the cycle, which reads the
// apiserver.
func TestIngressReconcilerAsksTheCacheFirst(t *testing.T) {
	ns := env.Namespace(t)
	env.BatchSandbox(t, ns, "sbx", map[string]string{"allocation-id": "a1"})
	c := kubetest.Cluster("c1", env.Namespace(t))
	c.Ingress.Host = ns + ".example.test"
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var live atomic.Int64
	cache := &countingReader{Reader: env.Client}
	eng := &ingressallow.Engine{Client: interceptor.NewClient(wc, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			live.Add(1)
			return c.Get(ctx, key, obj, opts...)
		},
	}), Cluster: c}
	r := &IngressReconciler{Engine: eng, Reader: cache}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "sbx"}}
	if res, err := r.Reconcile(ctx, req); err != nil || res != (reconcile.Result{}) {
		t.Fatalf("Reconcile without an allowlist = %+v, %v", res, err)
	}
	if cache.reads.Load() != 1 || live.Load() != 0 {
		t.Fatalf("without an allowlist: %d cache reads, %d apiserver reads; want 1 and 0", cache.reads.Load(), live.Load())
	}
	if _, err := eng.SetDesired(ctx, ns, "sbx", []v1alpha1.IngressRule{{CIDR: "198.51.100.0/24"}}); err != nil {
		t.Fatal(err)
	}
	live.Store(0)
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatalf("Reconcile with an allowlist: %v", err)
	}
	if live.Load() == 0 {
		t.Fatal("the cycle did not read the apiserver")
	}
	al := &v1alpha1.SandboxIngressAllowlist{}
	if err := env.Client.Get(ctx, req.NamespacedName, al); err != nil || al.Status.VerificationState != v1alpha1.StateVerified {
		t.Fatalf("allowlist after the cycle: %+v, %v", al.Status, err)
	}
}

// BenchmarkReconcileSandboxNetworks measures sandbox networks reconciled
// against the real apiserver: per sandbox, an egress PUT (write, read
// back, selector and conflict checks, CNI gate, LKG write, read back; the
// conflict check's list through an egress.PolicyLister, as corectl wires
// it) and
// an ingress cycle (persist desired, Verifying, write the managed
// Ingress, read back, path-claim enumeration, status). The engines use a
// client with the cluster's default client limits
// (cluster.DefaultClientQPS/Burst), as corectl does. It reports
// networks/min, the CPU per network of this process (the engines and
// the benchmark), kube-apiserver and etcd, and the requests the engines
// sent per network (counted at the client's transport). workers=1 runs one sandbox at a
// time; more workers run sandboxes concurrently, as the API and the
// reconciler do under load.
func BenchmarkReconcileSandboxNetworks(b *testing.B) {
	for _, workers := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			ns := env.Namespace(b)
			ingNS := env.Namespace(b)
			c := kubetest.Cluster("c1", ingNS)
			c.Ingress.Host = ns + ".example.test"
			cfg := rest.CopyConfig(env.Config)
			c.ApplyClientLimits(cfg)
			var requests atomic.Int64
			cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt, &requests} }
			cl, err := client.New(cfg, client.Options{Scheme: env.Scheme})
			if err != nil {
				b.Fatal(err)
			}
			policies, err := egress.NewPolicyLister(cfg)
			if err != nil {
				b.Fatal(err)
			}
			eg := &egress.Engine{Client: cl, Cluster: c, Policies: policies}
			in := &ingressallow.Engine{Client: cl, Cluster: c}
			ir := &IngressReconciler{Engine: in}
			for i := 0; i < b.N; i++ {
				env.BatchSandbox(b, ns, fmt.Sprintf("s%d", i), map[string]string{"allocation-id": fmt.Sprintf("a%d", i)})
			}
			var next atomic.Int64
			var failed atomic.Int64
			cpu0, err := kubetest.ReadCPU()
			if err != nil {
				b.Fatal(err)
			}
			requests.Store(0)
			b.ResetTimer()
			start := time.Now()
			done := make(chan struct{}, workers)
			for w := 0; w < workers; w++ {
				go func() {
					defer func() { done <- struct{}{} }()
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						id := fmt.Sprintf("s%d", i)
						res, err := eg.Put(ctx, ns, id, []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")})
						if err != nil || res.Outcome != egress.OutcomeVerified {
							failed.Add(1)
							continue
						}
						if _, err := in.SetDesired(ctx, ns, id, []v1alpha1.IngressRule{{CIDR: "198.51.100.0/24"}}); err != nil {
							failed.Add(1)
							continue
						}
						if _, err := ir.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: id}}); err != nil {
							failed.Add(1)
						}
					}
				}()
			}
			for w := 0; w < workers; w++ {
				<-done
			}
			elapsed := time.Since(start)
			b.StopTimer()
			cpu1, err := kubetest.ReadCPU()
			if err != nil {
				b.Fatal(err)
			}
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d of %d sandbox networks failed", n, b.N)
			}
			used := cpu1.Sub(cpu0)
			perNet := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
			b.ReportMetric(float64(b.N)/elapsed.Minutes(), "networks/min")
			b.ReportMetric(perNet(used.Self), "corectl-cpu-ms/network")
			b.ReportMetric(perNet(used.APIServer), "apiserver-cpu-ms/network")
			b.ReportMetric(perNet(used.Etcd), "etcd-cpu-ms/network")
			b.ReportMetric(float64(requests.Load())/float64(b.N), "requests/network")
		})
	}
}

// countingTransport counts the requests its RoundTripper sends.
type countingTransport struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.n.Add(1)
	return t.rt.RoundTrip(r)
}

// BenchmarkClientRequestFloor measures what one request costs the client
// alone: a GET of one small NetworkPolicy through controller-runtime's
// client (protobuf, HTTP/2 over TLS to the real apiserver), client-side
// limiting off, with inflight=1 (one request at a time: each waits for
// its answer, so every answer wakes an idle thread) and 8 in flight. It
// reports this process's CPU per request (utime+stime from /proc), the
// floor under BenchmarkReconcileSandboxNetworks' requests/network (docs/
// benchmarks.md "Sandbox networks per minute").
func BenchmarkClientRequestFloor(b *testing.B) {
	for _, inflight := range []int{1, 8} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			ns := env.Namespace(b)
			cfg := rest.CopyConfig(env.Config)
			cfg.QPS, cfg.Burst = -1, 0
			cl, err := client.New(cfg, client.Options{Scheme: env.Scheme})
			if err != nil {
				b.Fatal(err)
			}
			key := client.ObjectKey{Namespace: ns, Name: "p"}
			if err := cl.Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: ns}}); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			var failed atomic.Int64
			cpu0, err := kubetest.ReadCPU()
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			done := make(chan struct{}, inflight)
			for w := 0; w < inflight; w++ {
				go func() {
					defer func() { done <- struct{}{} }()
					for next.Add(1) <= int64(b.N) {
						if err := cl.Get(ctx, key, &networkingv1.NetworkPolicy{}); err != nil {
							failed.Add(1)
						}
					}
				}()
			}
			for w := 0; w < inflight; w++ {
				<-done
			}
			b.StopTimer()
			cpu1, err := kubetest.ReadCPU()
			if err != nil {
				b.Fatal(err)
			}
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d of %d GETs failed", n, b.N)
			}
			b.ReportMetric(float64(cpu1.Sub(cpu0).Self.Microseconds())/float64(b.N), "client-cpu-us/request")
		})
	}
}
