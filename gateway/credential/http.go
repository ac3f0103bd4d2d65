package credential

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

const (
	// IDPlaceholder is replaced in HTTPConfig.URL by url.PathEscape(id).
	IDPlaceholder = "{id}"

	// DefaultCacheTTL is HTTPConfig.CacheTTL when zero (1 s, so a disabled
	// or removed credential is refused within about a second).
	DefaultCacheTTL = time.Second
	// MaxCacheTTL is the largest accepted HTTPConfig.CacheTTL (1 minute).
	MaxCacheTTL = time.Minute
	// DefaultTimeout is HTTPConfig.Timeout when zero (2 s).
	DefaultTimeout = 2 * time.Second
	// MaxTimeout is the largest accepted HTTPConfig.Timeout (1 minute).
	MaxTimeout = time.Minute
	// MaxResponseSize is the largest accepted response body, in bytes
	// (64 KiB).
	MaxResponseSize = 64 << 10

	// cacheSweepSize is the cache size above which expired entries are
	// swept on insert.
	cacheSweepSize = 1024
)

// HTTPConfig configures an HTTP Source.
type HTTPConfig struct {
	// URL is an absolute http or https URL containing IDPlaceholder ("{id}")
	// in its path, e.g. "https://portal.example/api/credentials/{id}"; the
	// placeholder is replaced by url.PathEscape(id). Required.
	URL string
	// Header is added to every request, e.g. Authorization for the Portal.
	// Values never appear in errors. Optional.
	Header http.Header
	// CacheTTL is how long found, not-found and disabled answers are
	// cached: 0 means DefaultCacheTTL; otherwise 1ns..MaxCacheTTL.
	CacheTTL time.Duration
	// Timeout bounds each fetch: 0 means DefaultTimeout; otherwise
	// 1ns..MaxTimeout.
	Timeout time.Duration
	// Client is the HTTP client to use. Nil means a client that does not
	// follow redirects (a redirect is then an unexpected status).
	Client *http.Client
}

// HTTP is a Source that fetches credentials with GET from a URL template.
//
// Response handling: 200 with a single JSON credential object (decoded
// strictly like the file format's elements, at most MaxResponseSize bytes,
// whose id equals the requested id) → found, or ErrDisabled if
// enabled=false; 404 → ErrNotFound; anything else (other status, transport
// error, timeout, malformed body, id mismatch) → ErrUnavailable. Found,
// disabled and not-found answers are cached for CacheTTL; ErrUnavailable is
// never cached. Concurrent lookups of one id share a single in-flight
// request.
type HTTP struct {
	url     string
	header  http.Header
	ttl     time.Duration
	timeout time.Duration
	client  *http.Client

	group singleflight.Group
	mu    sync.Mutex
	cache map[string]cacheEntry

	// now is the clock for cache expiry; tests replace it.
	now func() time.Time
	// onJoin, if set (tests only), runs after a Lookup has joined the
	// in-flight request for its id.
	onJoin func()
}

type cacheEntry struct {
	res     result
	expires time.Time
}

type result struct {
	cred Credential
	err  error
}

var _ Source = (*HTTP)(nil)

// NewHTTP validates cfg and returns an HTTP Source.
//
// Errors wrap ErrInvalidConfig: URL missing, not absolute http(s), without
// IDPlaceholder in its path (a placeholder in the query or fragment would
// not be escaped safely by url.PathEscape), or CacheTTL / Timeout negative
// or above their maximum. Errors never contain Header values.
func NewHTTP(cfg HTTPConfig) (*HTTP, error) {
	i := strings.Index(cfg.URL, IDPlaceholder)
	if i < 0 {
		return nil, fmt.Errorf("%w: URL must contain %s", ErrInvalidConfig, IDPlaceholder)
	}
	if j := strings.IndexAny(cfg.URL, "?#"); j >= 0 && j < i {
		return nil, fmt.Errorf("%w: %s must be in the URL path, not its query or fragment", ErrInvalidConfig, IDPlaceholder)
	}
	u, err := url.Parse(strings.ReplaceAll(cfg.URL, IDPlaceholder, "x"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: URL must be an absolute http or https URL", ErrInvalidConfig)
	}
	ttl, err := durationOrDefault("CacheTTL", cfg.CacheTTL, DefaultCacheTTL, MaxCacheTTL)
	if err != nil {
		return nil, err
	}
	timeout, err := durationOrDefault("Timeout", cfg.Timeout, DefaultTimeout, MaxTimeout)
	if err != nil {
		return nil, err
	}
	client := cfg.Client
	if client == nil {
		client = &http.Client{
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return &HTTP{
		url:     cfg.URL,
		header:  cfg.Header.Clone(),
		ttl:     ttl,
		timeout: timeout,
		client:  client,
		cache:   make(map[string]cacheEntry),
		now:     time.Now,
	}, nil
}

func durationOrDefault(name string, d, def, maxD time.Duration) (time.Duration, error) {
	switch {
	case d == 0:
		return def, nil
	case d < 0 || d > maxD:
		return 0, fmt.Errorf("%w: %s %s is outside (0, %s]", ErrInvalidConfig, name, d, maxD)
	}
	return d, nil
}

// Lookup returns the credential with the given id, from the cache if a
// found/not-found/disabled answer for id is younger than CacheTTL, else by
// fetching it (sharing any fetch already in flight for id). Errors wrap
// ErrNotFound, ErrDisabled (credential returned too) or ErrUnavailable (also
// when ctx ends first; the shared fetch continues for other callers, bounded
// by Timeout). Errors name the id and reason, never header values.
func (h *HTTP) Lookup(ctx context.Context, id string) (Credential, error) {
	if err := checkLookupID(id); err != nil {
		return Credential{}, err
	}
	if r, ok := h.cached(id); ok {
		return r.cred, r.err
	}
	fetchCtx := context.WithoutCancel(ctx)
	ch := h.group.DoChan(id, func() (any, error) {
		r := h.fetch(fetchCtx, id)
		if r.err == nil || errors.Is(r.err, ErrNotFound) || errors.Is(r.err, ErrDisabled) {
			h.store(id, r)
		}
		return r, nil
	})
	if h.onJoin != nil {
		h.onJoin()
	}
	select {
	case res := <-ch:
		r := res.Val.(result)
		return r.cred, r.err
	case <-ctx.Done():
		return Credential{}, fmt.Errorf("%w: credential %q: %w", ErrUnavailable, id, ctx.Err())
	}
}

func (h *HTTP) cached(id string) (result, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.cache[id]
	if !ok {
		return result{}, false
	}
	if !h.now().Before(e.expires) {
		delete(h.cache, id)
		return result{}, false
	}
	return e.res, true
}

func (h *HTTP) store(id string, r result) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	if len(h.cache) >= cacheSweepSize {
		for k, e := range h.cache {
			if !now.Before(e.expires) {
				delete(h.cache, k)
			}
		}
	}
	h.cache[id] = cacheEntry{res: r, expires: now.Add(h.ttl)}
}

// fetch performs one GET for id and classifies the answer.
func (h *HTTP) fetch(ctx context.Context, id string) result {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	unavailable := func(format string, args ...any) result {
		return result{err: fmt.Errorf("%w: credential %q: "+format, append([]any{ErrUnavailable, id}, args...)...)}
	}
	target := strings.ReplaceAll(h.url, IDPlaceholder, url.PathEscape(id))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return unavailable("cannot build request")
	}
	for k, vs := range h.header {
		req.Header[k] = vs
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json")
	}
	resp, err := h.client.Do(req)
	if err != nil {
		// url.Error's text contains the URL; report only the cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return unavailable("request failed: %w", err)
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxResponseSize))
		_ = resp.Body.Close()
	}()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return result{err: fmt.Errorf("%w: credential %q", ErrNotFound, id)}
	default:
		return unavailable("unexpected HTTP status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseSize+1))
	if err != nil {
		return unavailable("reading response: %w", err)
	}
	if len(body) > MaxResponseSize {
		return unavailable("response larger than %d bytes", MaxResponseSize)
	}
	c, err := decodeCredential(body)
	if err != nil {
		return unavailable("bad response: %s", err.Error())
	}
	if c.ID != id {
		return unavailable("response is for a different credential id")
	}
	cred, err := answer(c)
	return result{cred: cred, err: err}
}
