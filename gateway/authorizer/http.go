package authorizer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/ttlcache"
)

const (
	// DefaultCacheTTL is HTTPConfig.CacheTTL when zero, and its maximum:
	// an answer is reused for at most a second, so a change reaches the
	// data plane within about a second (plus corectl's informer delay).
	DefaultCacheTTL = time.Second
	// DefaultTimeout is HTTPConfig.Timeout when zero (2 s).
	DefaultTimeout = 2 * time.Second
	// MaxTimeout is the largest accepted HTTPConfig.Timeout (30 s).
	MaxTimeout = 30 * time.Second
	// MaxAnswerSize bounds the answer body, in bytes (4 KiB).
	MaxAnswerSize = 4 << 10
	// MaxCacheEntries bounds the cache (credential, sandbox pairs).
	MaxCacheEntries = 100_000
)

// HTTPConfig configures an HTTP authorizer.
type HTTPConfig struct {
	// BaseURL is corectl's API, an absolute http or https URL without
	// query or fragment, e.g. "http://corectl.corectl-system:8090";
	// Path is appended. Required.
	BaseURL string
	// Header is sent with every request (Authorization: Bearer <corectl's
	// internal token>). Values never appear in errors.
	Header http.Header
	// CacheTTL is how long an answer is reused: 0 means DefaultCacheTTL;
	// otherwise 1ns..DefaultCacheTTL. An allowed answer is never reused
	// past the sandbox's end time.
	CacheTTL time.Duration
	// Timeout bounds one request: 0 means DefaultTimeout; otherwise
	// 1ns..MaxTimeout.
	Timeout time.Duration
	// Client is the HTTP client; nil means one that follows no redirects.
	Client *http.Client
	// Observe, if set, is called once per request sent to corectl (a
	// cached answer sends none) with its outcome, "allowed", the refusal
	// Reason ("not_found", "deleting", "expired", "not_ready") or
	// "unavailable" (no valid answer: an error, a timeout, a bad status or
	// body), and its duration (metrics).
	Observe func(outcome string, d time.Duration)
}

// HTTP asks corectl's endpoint and caches the answers (see the package
// documentation). Concurrent requests for one (credential, sandbox) pair
// share one request to corectl.
type HTTP struct {
	endpoint string
	header   http.Header
	ttl      time.Duration
	timeout  time.Duration
	client   *http.Client
	cache    *ttlcache.Cache[result]
	now      func() time.Time
	observe  func(string, time.Duration)
}

type result struct {
	d   Decision
	err error
}

var _ Authorizer = (*HTTP)(nil)

// NewHTTP validates cfg and returns the authorizer. Errors wrap
// ErrInvalidConfig and never contain Header values.
func NewHTTP(cfg HTTPConfig) (*HTTP, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("%w: the base URL must be an absolute http or https URL without query, fragment or user info", ErrInvalidConfig)
	}
	ttl, timeout := cfg.CacheTTL, cfg.Timeout
	if ttl == 0 {
		ttl = DefaultCacheTTL
	}
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if ttl < 0 || ttl > DefaultCacheTTL {
		return nil, fmt.Errorf("%w: cache TTL %s is outside (0, %s]", ErrInvalidConfig, ttl, DefaultCacheTTL)
	}
	if timeout < 0 || timeout > MaxTimeout {
		return nil, fmt.Errorf("%w: timeout %s is outside (0, %s]", ErrInvalidConfig, timeout, MaxTimeout)
	}
	client := cfg.Client
	if client == nil {
		client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return &HTTP{endpoint: strings.TrimRight(cfg.BaseURL, "/") + Path, header: cfg.Header.Clone(), ttl: ttl, timeout: timeout,
		client: client, cache: ttlcache.New[result](MaxCacheEntries), now: time.Now, observe: cfg.Observe}, nil
}

// Authorize implements Authorizer: a cached answer younger than the TTL
// (and, when allowed, before the sandbox's end), or one request to
// corectl. Errors wrap ErrUnavailable (also when ctx ends first) and name
// no header value.
func (h *HTTP) Authorize(ctx context.Context, credentialID, sandboxID string) (Decision, error) {
	return h.answer(ctx, credentialID, sandboxID, h.cache.Get)
}

var _ Locator = (*HTTP)(nil)

// Locate implements Locator: like Authorize, cached per sandbox, with the
// question that names no credential. An allowed answer without a
// cluster is ErrUnavailable.
func (h *HTTP) Locate(ctx context.Context, sandboxID string) (Decision, error) {
	// Credential IDs are never empty, so this key is no Authorize key.
	return h.answer(ctx, "", sandboxID, h.cache.Get)
}

var _ Rechecker = (*HTTP)(nil)

// Recheck implements Rechecker: one request to corectl whatever the cache
// holds (concurrent Rechecks of one pair share it); the answer replaces
// the cached one, so the pair's next Authorize sees it too. Errors as
// Authorize.
func (h *HTTP) Recheck(ctx context.Context, credentialID, sandboxID string) (Decision, error) {
	return h.answer(ctx, credentialID, sandboxID, h.cache.Refresh)
}

// answer is Authorize and Recheck, get being the cache's Get or Refresh.
func (h *HTTP) answer(ctx context.Context, credentialID, sandboxID string,
	get func(context.Context, string, ttlcache.Load[result]) (result, error)) (Decision, error) {
	key := credentialID + "\x00" + sandboxID
	r, err := get(ctx, key, func(ctx context.Context) (result, time.Time) {
		d, err := h.ask(ctx, credentialID, sandboxID)
		if err != nil {
			return result{err: err}, time.Time{}
		}
		until := h.now().Add(h.ttl)
		if d.Allowed && !d.EndAt.IsZero() && d.EndAt.Before(until) {
			until = d.EndAt
		}
		return result{d: d}, until
	})
	if err != nil {
		return Decision{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if r.err != nil {
		return Decision{}, r.err
	}
	// An allowed answer whose end time has passed meanwhile.
	if r.d.Allowed && !r.d.EndAt.IsZero() && !h.now().Before(r.d.EndAt) {
		return Decision{Reason: ReasonExpired}, nil
	}
	return r.d, nil
}

// ask sends one request, reads the answer strictly and observes it.
func (h *HTTP) ask(ctx context.Context, credentialID, sandboxID string) (Decision, error) {
	start := time.Now()
	d, err := h.askOnce(ctx, credentialID, sandboxID)
	if h.observe != nil {
		outcome := "allowed"
		switch {
		case err != nil:
			outcome = "unavailable"
		case !d.Allowed:
			outcome = string(d.Reason)
		}
		h.observe(outcome, time.Since(start))
	}
	return d, err
}

// askOnce sends one request and reads the answer strictly.
func (h *HTTP) askOnce(ctx context.Context, credentialID, sandboxID string) (Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	q := url.Values{"credential": {credentialID}, "sandbox": {sandboxID}}
	if credentialID == "" {
		q.Del("credential")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.endpoint+"?"+q.Encode(), nil)
	if err != nil {
		return Decision{}, fmt.Errorf("%w: cannot build the request", ErrUnavailable)
	}
	for k, vs := range h.header {
		req.Header[k] = vs
	}
	req.Header.Set("Accept", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL carries the IDs; report only the cause
		}
		return Decision{}, fmt.Errorf("%w: request failed: %w", ErrUnavailable, err)
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxAnswerSize))
		_ = resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		return Decision{}, fmt.Errorf("%w: unexpected HTTP status %d", ErrUnavailable, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerSize+1))
	if err != nil || len(body) > MaxAnswerSize {
		return Decision{}, fmt.Errorf("%w: the answer is unreadable or larger than %d bytes", ErrUnavailable, MaxAnswerSize)
	}
	d, err := decodeAnswer(body)
	switch {
	case err != nil:
		return d, err
	case credentialID == "" && d.Allowed && d.ClusterID == "":
		return Decision{}, fmt.Errorf("%w: malformed answer: a located sandbox without its cluster", ErrUnavailable)
	case credentialID != "" && (d.ClusterID != "" || d.TrafficTokenRequired):
		return Decision{}, fmt.Errorf("%w: malformed answer: cluster or trafficTokenRequired in a credential's answer", ErrUnavailable)
	}
	return d, nil
}

// decodeAnswer reads an Answer strictly: one JSON object with known
// members, a known reason exactly when refused, an RFC 3339 endAt.
func decodeAnswer(body []byte) (Decision, error) {
	var a Answer
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	bad := func(why string) (Decision, error) {
		return Decision{}, fmt.Errorf("%w: malformed answer: %s", ErrUnavailable, why)
	}
	if err := dec.Decode(&a); err != nil {
		return bad("not the answer object")
	}
	if dec.More() {
		return bad("trailing data")
	}
	if !a.Allowed {
		switch a.Reason {
		case ReasonNotFound, ReasonDeleting, ReasonExpired, ReasonNotReady:
			if a.Cluster != "" || a.TrafficTokenRequired {
				return bad("refused with a cluster")
			}
			return Decision{Reason: a.Reason}, nil
		}
		return bad("refused without a known reason")
	}
	if a.Reason != "" {
		return bad("allowed with a reason")
	}
	d := Decision{Allowed: true, ClusterID: a.Cluster, TrafficTokenRequired: a.TrafficTokenRequired}
	if a.EndAt != "" {
		t, err := time.Parse(time.RFC3339Nano, a.EndAt)
		if err != nil {
			return bad("endAt is not RFC 3339")
		}
		d.EndAt = t
	}
	return d, nil
}
