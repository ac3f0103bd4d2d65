package controller

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/ingressallow"
	"github.com/sandgate/sandgate/corectl/kubetest"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// snippet is the annotation the test's admission webhook puts on the
// sandbox's carrier at every create and update, as a cluster-wide
// "add security headers" mutation would.
const snippet = "nginx.ingress.kubernetes.io/configuration-snippet"

// snippetWebhook serves a mutating admission webhook on 127.0.0.1 that
// adds snippet to every Ingress it is asked about, and registers it with
// the apiserver for the Ingresses of namespace ns labelled with sandbox ID
// id (so no other test's objects are touched). It is removed when t ends.
func snippetWebhook(t *testing.T, ns, id string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "snippet-webhook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	hook := &admission.Webhook{Handler: admission.HandlerFunc(func(_ context.Context, req admission.Request) admission.Response {
		ing := &networkingv1.Ingress{}
		if err := json.Unmarshal(req.Object.Raw, ing); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		if ing.Annotations == nil {
			ing.Annotations = map[string]string{}
		}
		ing.Annotations[snippet] = `more_set_headers "X-Frame-Options: DENY";`
		out, err := json.Marshal(ing)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		return admission.PatchResponseFromRaw(req.Object.Raw, out)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: hook, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })

	url := "https://" + ln.Addr().String() + "/mutate"
	none := admissionregistrationv1.SideEffectClassNone
	fail := admissionregistrationv1.Fail
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-snippet"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "snippet.sandgate.test",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"networking.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"ingresses"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.LabelSandboxID: id}},
			SideEffects:             &none,
			FailurePolicy:           &fail,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cfg) })

	// The apiserver picks the configuration up asynchronously: write a
	// probe Ingress (same selector labels, another host and path, so it
	// claims nothing of the sandbox's) until the webhook has mutated it.
	pt := networkingv1.PathTypePrefix
	probe := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "webhook-probe", Namespace: ns, Labels: map[string]string{v1alpha1.LabelSandboxID: id}},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: "probe.invalid", IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{Path: "/probe/", PathType: &pt, Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "probe", Port: networkingv1.ServiceBackendPort{Number: 80}}}}},
		}}}}},
	}
	if err := env.Client.Create(ctx, probe); err != nil {
		t.Fatal(err)
	}
	n := 0
	kubetest.Eventually(t, 30*time.Second, "the admission webhook to be called", func() (bool, error) {
		if probe.Annotations[snippet] != "" {
			return true, nil
		}
		n++
		probe.Annotations = map[string]string{"probe": string(rune('a' + n%26))}
		err := env.Client.Update(ctx, probe)
		return err == nil && probe.Annotations[snippet] != "", err
	})
	if err := env.Client.Delete(ctx, probe); err != nil {
		t.Fatal(err)
	}
}

// cycleCounter counts the ingress cycles of allowlist target that read
// it at generation minGen or later, and calls onPing with that count
// when a cycle of allowlist other reads other's carrier carrying the
// annotation pingKey=ping (a cycle that started after that edit).
type cycleCounter struct {
	mu     sync.Mutex
	target string
	minGen int64
	count  int
	other  string
	ping   string
	onPing func(count int)
}

const pingKey = "example.test/ping"

func (c *cycleCounter) client(t *testing.T) client.Client {
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return interceptor.NewClient(wc, interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := cl.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			switch o := obj.(type) {
			case *v1alpha1.SandboxIngressAllowlist:
				if key.Name == c.target && c.minGen > 0 && o.Generation >= c.minGen {
					c.count++
				}
			case *networkingv1.Ingress:
				if key.Name == ingressallow.IngressName(c.other) && c.ping != "" && o.Annotations[pingKey] == c.ping && c.onPing != nil {
					c.onPing(c.count)
					c.onPing = nil
				}
			}
			return nil
		},
	})
}

// TestWebhookAddingASnippetBacksOff: an admission webhook re-adds a
// refused snippet annotation to a managed carrier at every write, so every
// cycle for a new desired version fails its read-back, fails to restore
// the LKG (the restore gets the snippet too) and ends Indeterminate, a
// transient failure. The cycle's own carrier writes must not wake the
// next cycle at once (which would spin at apiserver speed, two carrier
// writes and eight requests per turn, for as long as the webhook stays):
// the retry waits for the controller's rate limiter.
//
// The controller runs with one worker and a rate limiter whose first
// delay is an hour, so a retry that waits for it does not come during the
// test. After the failed cycle, an edit of another sandbox's carrier is
// queued behind the failed cycle's own Ingress events (one watch delivers
// them in resourceVersion order, and the queue is first in, first out
// within a priority); when that other sandbox's cycle starts, every
// wake-up the failed cycle's writes caused has already run. Exactly one
// cycle of the failing allowlist must have run by then.
func TestWebhookAddingASnippetBacksOff(t *testing.T) {
	ns := env.Namespace(t)
	ingNS := env.Namespace(t)
	env.BatchSandbox(t, ns, "sbx", map[string]string{"allocation-id": "a1"})
	env.BatchSandbox(t, ns, "other", map[string]string{"allocation-id": "a2"})
	// A cluster ID of its own (with the namespace's sequence number, for
	// -count > 1): the manager's watches select by it, so other tests'
	// allowlists are not reconciled here.
	c := kubetest.Cluster("webhook-"+strings.SplitN(ns, "-", 2)[0], ingNS)
	c.Ingress.Host = ns + ".example.test"

	counter := &cycleCounter{target: "sbx", other: "other"}
	eng := &ingressallow.Engine{Client: counter.client(t), Cluster: c}
	// The recheck after a cycle's own write is an hour away too.
	runReconciler(t, &IngressReconciler{Engine: eng, Workers: 1, CycleWriteRecheck: time.Hour,
		RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Hour, time.Hour)})

	state := func(id string) *v1alpha1.SandboxIngressAllowlist {
		al := &v1alpha1.SandboxIngressAllowlist{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: id}, al); err != nil {
			t.Fatal(err)
		}
		return al
	}
	for _, id := range []string{"sbx", "other"} {
		if _, err := eng.SetDesired(ctx, ns, id, []v1alpha1.IngressRule{{CIDR: "198.51.100.0/24"}}); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, 30*time.Second, id+" verified", func() (bool, error) {
			return state(id).Status.VerificationState == v1alpha1.StateVerified, nil
		})
	}
	snippetWebhook(t, ingNS, "sbx")

	// ping edits the other sandbox's carrier by hand (an annotation the
	// cycle keeps) and returns how many counted cycles of sbx had run when
	// a cycle of the other sandbox read that edit.
	pings := 0
	ping := func() int {
		t.Helper()
		seen := make(chan int, 1)
		pings++
		counter.mu.Lock()
		counter.ping = fmt.Sprint(pings)
		counter.onPing = func(n int) { seen <- n }
		counter.mu.Unlock()
		ing := &networkingv1.Ingress{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ingNS, Name: ingressallow.IngressName("other")}, ing); err != nil {
			t.Fatal(err)
		}
		ing.Annotations[pingKey] = fmt.Sprint(pings)
		if err := env.Client.Update(ctx, ing); err != nil {
			t.Fatal(err)
		}
		select {
		case n := <-seen:
			return n
		case <-time.After(30 * time.Second):
			t.Fatal("the other sandbox's cycle did not run")
			return 0
		}
	}
	// Twice: the queue is empty and no cycle of sbx runs after the second.
	ping()
	ping()

	counter.mu.Lock()
	counter.minGen = state("sbx").Generation + 1
	counter.mu.Unlock()
	if _, err := eng.SetDesired(ctx, ns, "sbx", []v1alpha1.IngressRule{{CIDR: "192.0.2.0/24"}}); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 30*time.Second, "sbx's cycle to fail", func() (bool, error) {
		return state("sbx").Status.VerificationState == v1alpha1.StateIndeterminate, nil
	})
	if ran := ping(); ran != 1 {
		t.Fatalf("%d cycles of the failing allowlist ran before the next event; want 1 (its own writes must not wake it, its retry waits for the rate limiter)", ran)
	}
	st := state("sbx").Status
	if st.LastErrorCode != ingressallow.CodeCarrierMismatch || !slices.Equal(st.LastVerified, []string{"198.51.100.0/24"}) {
		t.Fatalf("status = %+v", st)
	}
}
