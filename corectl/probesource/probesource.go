// Package probesource discovers the control-plane probe source of a
// compute cluster (spec §5.2.2 III): the source address the fixed entry's
// nginx sees for corectl's own requests (after any NAT), which must be in a
// restricted sandbox's allowlist for the readiness check to pass.
//
// Discovery creates a temporary echo Ingress in the cluster's ingress
// namespace (a random long path /sandbox-probe-echo-<hex>, the managed-by,
// cluster and probe-echo labels, the annotation
// nginx.ingress.kubernetes.io/configuration-snippet: return 200
// "$remote_addr"; and no whitelist; its backend is the OpenSandbox ingress
// Service only because the Ingress API requires one: the snippet answers
// before any backend), waits until the fixed entry answers on that path,
// dials it Dials times, collects the distinct addresses as /32s, and
// deletes the Ingress and confirms it is gone. The result is cached with a
// TTL; Invalidate drops it (a 403 during readiness). Leftover echo
// Ingresses are removed by the orphan scan (package lifecycle) as soon as
// the lifetime they record is over (AnnotationEchoLifetime).
package probesource

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	"github.com/sandgate/sandgate/corectl/cluster"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AnnotationSnippet is ingress-nginx's configuration-snippet annotation.
const AnnotationSnippet = "nginx.ingress.kubernetes.io/configuration-snippet"

// EchoSnippet makes nginx answer 200 with the source address it sees.
const EchoSnippet = `return 200 "$remote_addr";`

// AnnotationEchoLifetime records on an echo Ingress how long the discovery
// that created it can use it (a Go duration: the discovery's budget plus
// the time its deletion may take, plus a margin). Past its
// creationTimestamp plus that, the Ingress is a leftover of a discovery
// that died (its corectl was killed), and the orphan scan removes it
// without waiting its usual grace (EchoExpired).
const AnnotationEchoLifetime = "network.sandgate.io/probe-echo-lifetime"

// echoDeleteTimeout bounds the deletion of an echo Ingress after its
// discovery.
const echoDeleteTimeout = 10 * time.Second

// echoMargin is added to an echo Ingress's recorded lifetime, for the time
// between its creation and the start of its budget.
const echoMargin = 5 * time.Second

// EchoExpired reports whether ing, an echo Ingress, has outlived the
// lifetime it records (AnnotationEchoLifetime) at now. An Ingress without
// a readable lifetime (written before the annotation existed) never
// expires this way.
func EchoExpired(ing *networkingv1.Ingress, now time.Time) bool {
	d, err := time.ParseDuration(ing.Annotations[AnnotationEchoLifetime])
	if err != nil || d <= 0 {
		return false
	}
	return !now.Before(ing.CreationTimestamp.Add(d))
}

// EchoPathPrefix prefixes the random path of an echo Ingress.
const EchoPathPrefix = "/sandbox-probe-echo-"

// ErrDiscovery: no probe source could be discovered (the echo Ingress was
// not answered within the budget, or could not be written).
var ErrDiscovery = errors.New("probesource: discovery failed")

// Discoverer discovers and caches the probe sources of one cluster. It is
// safe for concurrent use; concurrent callers share one discovery.
type Discoverer struct {
	// Client writes the echo Ingress (uncached).
	Client client.Client
	// Cluster gives the fixed entry, ingress namespace, class, host and
	// backend.
	Cluster *cluster.Cluster
	// HTTP dials the fixed entry (default: 5 s timeout per request).
	HTTP *http.Client
	// Dials is how many answers are collected (default 20), to cover a
	// NAT pool.
	Dials int
	// TTL is how long a result is reused (default 10 min).
	TTL time.Duration
	// Budget bounds one discovery (default 30 s).
	Budget time.Duration
	// Interval is the pause between attempts while the echo Ingress is
	// not yet served (default 100 ms).
	Interval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu      sync.Mutex // serialises discoveries
	cached  []string
	expires time.Time
}

func (d *Discoverer) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

// Sources returns the cached probe-source CIDRs (normalised /32s, sorted),
// discovering them when the cache is empty or expired. The error wraps
// ErrDiscovery.
func (d *Discoverer) Sources(ctx context.Context) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cached != nil && d.now().Before(d.expires) {
		return slices.Clone(d.cached), nil
	}
	p, err := d.discover(ctx)
	if err != nil {
		return nil, err
	}
	ttl := d.TTL
	if ttl <= 0 {
		ttl = 10 * time.Minute
	}
	d.cached, d.expires = p, d.now().Add(ttl)
	return slices.Clone(p), nil
}

// Invalidate drops the cached result; the next Sources rediscovers.
func (d *Discoverer) Invalidate() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cached = nil
}

// EchoIngress returns the echo Ingress for path (EchoPathPrefix + hex).
func EchoIngress(c *cluster.Cluster, path string) *networkingv1.Ingress {
	class := c.Ingress.ClassName
	prefix := networkingv1.PathTypePrefix
	b := &networkingv1.IngressServiceBackend{Name: c.Ingress.BackendService}
	if c.Ingress.BackendPort.Type == intstr.Int {
		b.Port.Number = c.Ingress.BackendPort.IntVal
	} else {
		b.Port.Name = c.Ingress.BackendPort.StrVal
	}
	return &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{
			Name:      strings.TrimPrefix(path, "/"),
			Namespace: c.Ingress.Namespace,
			Labels: map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelClusterID: c.ID,
				v1alpha1.LabelProbeEcho: "true"},
			Annotations: map[string]string{AnnotationSnippet: EchoSnippet},
		},
		Spec: networkingv1.IngressSpec{
			IngressClassName: &class,
			Rules: []networkingv1.IngressRule{{
				Host: c.Ingress.Host,
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
					Paths: []networkingv1.HTTPIngressPath{{Path: path, PathType: &prefix,
						Backend: networkingv1.IngressBackend{Service: b}}},
				}},
			}},
		},
	}
}

func (d *Discoverer) discover(ctx context.Context) ([]string, error) {
	budget := d.Budget
	if budget <= 0 {
		budget = 30 * time.Second
	}
	dials := d.Dials
	if dials <= 0 {
		dials = 20
	}
	interval := d.Interval
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	hc := d.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Second}
	}
	rnd := make([]byte, 16)
	_, _ = rand.Read(rnd)
	path := EchoPathPrefix + hex.EncodeToString(rnd)
	ing := EchoIngress(d.Cluster, path)
	ing.Annotations[AnnotationEchoLifetime] = (budget + echoDeleteTimeout + echoMargin).String()
	if err := d.Client.Create(ctx, ing); err != nil {
		return nil, fmt.Errorf("%w: create echo Ingress: %s", ErrDiscovery, err.Error())
	}
	// Always delete it, even when ctx ended.
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), echoDeleteTimeout)
		defer cancel()
		_ = deleteConfirm(dctx, d.Client, ing)
	}()

	dctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	url := strings.TrimRight(d.Cluster.FixedEntry, "/") + path
	seen := map[netip.Addr]bool{}
	got := 0
	var last string
	for got < dials {
		addr, err := dial(dctx, hc, url, d.Cluster.Ingress.Host)
		if err == nil {
			seen[addr] = true
			got++
			continue // answers come back to back once the Ingress is served
		}
		last = err.Error()
		t := time.NewTimer(interval)
		select {
		case <-dctx.Done():
			t.Stop()
			if got > 0 {
				// Some answers: use them (the NAT pool may be partly sampled).
				return cidrs(seen), nil
			}
			return nil, fmt.Errorf("%w: the fixed entry did not echo within %s (last: %s)", ErrDiscovery, budget, last)
		case <-t.C:
		}
	}
	return cidrs(seen), nil
}

func cidrs(seen map[netip.Addr]bool) []string {
	var out []string
	for a := range seen {
		out = append(out, netip.PrefixFrom(a, a.BitLen()).String())
	}
	slices.Sort(out)
	return out
}

// dial asks the echo path once; the answer must be 200 with an IPv4
// address as the body.
func dial(ctx context.Context, hc *http.Client, url, host string) (netip.Addr, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return netip.Addr{}, err
	}
	if host != "" {
		req.Host = host
	}
	resp, err := hc.Do(req)
	if err != nil {
		return netip.Addr{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	if resp.StatusCode != http.StatusOK {
		return netip.Addr{}, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	a, err := netip.ParseAddr(strings.TrimSpace(string(b)))
	if err != nil || !a.Is4() {
		return netip.Addr{}, fmt.Errorf("the echo answer is not an IPv4 address")
	}
	return a, nil
}

func deleteConfirm(ctx context.Context, c client.Client, obj client.Object) error {
	if err := c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
		if err == nil {
			return errors.New("still exists")
		}
		return err
	}
	return nil
}
