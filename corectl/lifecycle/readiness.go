package lifecycle

// The readiness check of a create: execd's ping through the fixed entry
// (spec §4.2), and the probe-source rewrite on a 403 (spec §5.2.2 IV).

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sandgate/sandgate/corectl/apis/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// onForbidden handles a 403 from the fixed entry during readiness (spec
// §5.2.2 IV): the probe source may have moved (NAT pool drift), so the
// cache is dropped, the sources rediscovered, and the carrier rewritten
// with them and verified by the ingress engine (RewriteProbeSources): with
// the user set the allowlist was last verified with, which is a PUT's
// when one was made since the BatchSandbox appeared, not necessarily this
// create's; dropping any annotation a carrier may not carry, as every
// cycle's write does; under the sandbox's lock. An unrestricted create
// (no carrier of its own) does the same when a PUT made the sandbox
// restricted meanwhile (its allowlist exists: one read, on a 403 only).
// Without discovery, or unrestricted without an allowlist, it does
// nothing.
func (c *creation) onForbidden(ctx context.Context) error {
	if c.o.Probe == nil {
		return nil
	}
	if len(c.ingressSet) == 0 {
		err := c.o.Client.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: c.id}, &v1alpha1.SandboxIngressAllowlist{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read SandboxIngressAllowlist %s/%s: %w", c.ns, c.id, err)
		}
	}
	c.o.Probe.Invalidate()
	p, err := c.o.Probe.Sources(ctx)
	if err != nil {
		return fmt.Errorf("rediscover the probe source: %w", err)
	}
	return c.o.Ingress.RewriteProbeSources(ctx, c.ns, c.id, p)
}

// FirstReadyInterval is the first pause between readiness attempts; the
// pauses double from it up to Orchestrator.ReadyInterval.
const FirstReadyInterval = 10 * time.Millisecond

// readyBudget is ReadyBudget or its default, 60 s.
func (o *Orchestrator) readyBudget() time.Duration {
	if o.ReadyBudget > 0 {
		return o.ReadyBudget
	}
	return 60 * time.Second
}

// ExecdAccessTokenHeader carries execd's access token on a readiness ping
// (docs/wire-facts.md §X1.2).
const ExecdAccessTokenHeader = "X-EXECD-ACCESS-TOKEN"

// readiness polls GET <fixedEntry>/<id>/44772/ping (with the sandbox's
// execd token in ExecdAccessTokenHeader when the cluster derives one,
// cluster.Cluster.ExecdToken) until it answers 200 or
// the budget is spent (spec §4.2), pausing FirstReadyInterval after the
// first attempt and twice as long after each next one, up to
// ReadyInterval.
func (o *Orchestrator) readiness(ctx context.Context, id string, onForbidden func(context.Context) error) error {
	budget := o.readyBudget()
	maxInterval := o.ReadyInterval
	if maxInterval <= 0 {
		maxInterval = 200 * time.Millisecond
	}
	interval := min(FirstReadyInterval, maxInterval)
	hc := o.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Second}
	}
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	url := strings.TrimRight(o.Cluster.FixedEntry, "/") + fmt.Sprintf("/%s/%d/ping", id, ExecdPort)
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if h := o.Cluster.Ingress.Host; h != "" {
			req.Host = h // the managed Ingress rules match this host
		}
		if tok, _ := o.Cluster.ExecdToken(id); tok != "" {
			// execd checks its token on /ping too. Through the gateway's
			// relay the header is not forwarded; the gateway derives the
			// same value from the same secret.
			req.Header.Set(ExecdAccessTokenHeader, tok)
		}
		resp, err := hc.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d", resp.StatusCode)
			if resp.StatusCode == http.StatusForbidden && onForbidden != nil {
				if err := onForbidden(ctx); err != nil {
					last += "; " + err.Error()
				}
			}
		} else {
			last = err.Error()
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("GET /%s/%d/ping through the fixed entry did not answer 200 within %s (last: %s)", id, ExecdPort, budget, last)
		case <-t.C:
		}
		interval = min(2*interval, maxInterval)
	}
}
