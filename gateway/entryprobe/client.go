package entryprobe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/internal/strictjson"
)

// MaxAnswer bounds a relay answer corectl reads, in bytes.
const MaxAnswer = 64 << 10

// ErrRelay: the relay refused the request or could not be reached; the
// message carries the relay's error code, never the token.
var ErrRelay = errors.New("entryprobe: the gateway's probe relay failed")

// ErrMismatch: the relay's clusters are not corectl's (Check).
var ErrMismatch = errors.New("entryprobe: the gateway and corectl disagree on a cluster's fixed entry or host")

// Client is corectl's side of the relay.
//
// When URL's host is a name (a Kubernetes headless Service of the gateway,
// e.g. http://gateway-probe-relay:30086), every request resolves it and the
// requests go round-robin over its addresses, so that a discovery's dials
// are spread over every gateway replica and the discovered probe sources
// cover each replica's source. An IP address is used as is.
type Client struct {
	// URL is the base URL of the gateway's internal listener serving the
	// relay (fixed_entry_probe), without Prefix.
	URL string
	// Token is the bearer token (the gateway holds its SHA-256).
	Token string
	// HTTP sends the requests; nil is a client with a 10 s timeout.
	HTTP *http.Client
	// Resolver resolves URL's host; nil is net.DefaultResolver.
	Resolver *net.Resolver

	next atomic.Uint64
}

// Cluster returns a Prober for cluster id through the relay.
func (c *Client) Cluster(id string) Prober { return relayProber{c: c, id: id} }

type relayProber struct {
	c  *Client
	id string
}

func (p relayProber) Probe(ctx context.Context, path string) (Answer, error) {
	return p.c.Probe(ctx, p.id, path)
}

// Probe asks the relay to probe path at cluster id's fixed entry. Errors:
// ErrPath (nothing sent), ErrRelay (wrapping the relay's code, e.g.
// fixed_entry_unreachable), ctx's error.
func (c *Client) Probe(ctx context.Context, id, path string) (Answer, error) {
	if err := ValidPath(path); err != nil {
		return Answer{}, err
	}
	body, _ := json.Marshal(ProbeRequest{Path: path})
	var a Answer
	if err := c.do(ctx, http.MethodPost, Prefix+"/"+url.PathEscape(id)+"/probe", body, &a,
		strictjson.Schema{Required: map[string][]string{"": {"status", "body", "host"}}}); err != nil {
		return Answer{}, err
	}
	return a, nil
}

// Clusters returns the relay's clusters. Errors wrap ErrRelay.
func (c *Client) Clusters(ctx context.Context) ([]Cluster, error) {
	var out Clusters
	if err := c.do(ctx, http.MethodGet, Prefix, nil, &out, strictjson.Schema{Required: map[string][]string{
		"": {"clusters"}, "/clusters/-": {"id", "fixed_entry", "host"}}}); err != nil {
		return nil, err
	}
	return out.Clusters, nil
}

// Check compares the relay's clusters with want (corectl's: ID, fixed
// entry, and the managed Ingresses' host, "" for none): every wanted
// cluster must be on the gateway with the same fixed entry (SameEntry:
// default ports, host case and trailing slashes aside) and, when the wanted host is set, a Host whose name
// (HostName) is that host. The error wraps ErrMismatch and names every
// disagreeing cluster with both values, or wraps ErrRelay.
func (c *Client) Check(ctx context.Context, want []Cluster) error {
	got, err := c.Clusters(ctx)
	if err != nil {
		return err
	}
	byID := map[string]Cluster{}
	for _, g := range got {
		byID[g.ID] = g
	}
	var problems []string
	for _, w := range want {
		g, ok := byID[w.ID]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("cluster %s: not on the gateway", w.ID))
		case SameEntry(g.FixedEntry, w.FixedEntry) != nil:
			problems = append(problems, fmt.Sprintf("cluster %s: the gateway's fixed entry is %s, corectl's %s", w.ID, g.FixedEntry, w.FixedEntry))
		case w.Host != "" && HostName(g.Host) != HostName(w.Host):
			problems = append(problems, fmt.Sprintf("cluster %s: the gateway sends Host %s, the managed Ingresses' host is %s (set host %s in the gateway's cluster block)",
				w.ID, g.Host, w.Host, w.Host))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrMismatch, strings.Join(problems, "; "))
	}
	return nil
}

// WaitCheck repeats Check until it passes, fails with ErrMismatch (a
// definite answer), or wait has passed (the last ErrRelay is returned);
// the pauses start at 200 ms and double up to 5 s.
func (c *Client) WaitCheck(ctx context.Context, want []Cluster, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	pause := 200 * time.Millisecond
	for {
		err := c.Check(ctx, want)
		if err == nil || errors.Is(err, ErrMismatch) {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("the gateway's probe relay at %s did not answer within %s: %w", c.URL, wait, err)
		case <-t.C:
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// do sends one request to the relay and decodes a 200 answer strictly
// into out.
func (c *Client) do(ctx context.Context, method, path string, body []byte, out any, schema strictjson.Schema) error {
	base, host, err := c.base(ctx)
	if err != nil {
		return err
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrRelay, err.Error())
	}
	req.Host = host
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %s", ErrRelay, shortError(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer+1))
	if err != nil {
		return fmt.Errorf("%w: reading the answer: %s", ErrRelay, shortError(err))
	}
	if len(b) > MaxAnswer {
		return fmt.Errorf("%w: the answer is larger than %d bytes", ErrRelay, MaxAnswer)
	}
	if resp.StatusCode != http.StatusOK {
		var e Error
		if json.Unmarshal(b, &e) == nil && e.Error.Code != "" {
			return fmt.Errorf("%w: HTTP %d %s: %s", ErrRelay, resp.StatusCode, e.Error.Code, e.Error.Message)
		}
		return fmt.Errorf("%w: HTTP %d", ErrRelay, resp.StatusCode)
	}
	if err := strictjson.Decode(b, out, schema); err != nil {
		return fmt.Errorf("%w: the answer does not decode: %s", ErrRelay, err.Error())
	}
	return nil
}

// base returns the URL to send the next request to (one address of URL's
// host, round-robin) and the Host header (URL's host).
func (c *Client) base(ctx context.Context) (string, string, error) {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", "", fmt.Errorf("%w: the relay URL must be an http(s) URL with a host", ErrRelay)
	}
	host := u.Host
	name, port := u.Hostname(), u.Port()
	if net.ParseIP(name) != nil || u.Scheme == "https" {
		// An address, or TLS (whose certificate names the host): as is.
		return strings.TrimRight(u.String(), "/"), host, nil
	}
	r := c.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	addrs, err := r.LookupHost(ctx, name)
	if err != nil || len(addrs) == 0 {
		return "", "", fmt.Errorf("%w: resolving %s: %v", ErrRelay, name, err)
	}
	slices.Sort(addrs)
	a := addrs[int(c.next.Add(1)-1)%len(addrs)]
	if port != "" {
		a = net.JoinHostPort(a, port)
	} else if strings.Contains(a, ":") {
		a = "[" + a + "]"
	}
	v := *u
	v.Host = a
	return strings.TrimRight(v.String(), "/"), host, nil
}

// ErrHost: a request given to Transport names another Host than the one
// the gateway sent the probe with.
var ErrHost = errors.New("entryprobe: the request's Host is not the Host the gateway sends")

// Transport returns an http.RoundTripper that sends every GET it is given
// to cluster id's fixed entry through the relay (Probe on the request's
// path less the path of base, corectl's fixed entry URL, which the
// gateway's own fixed entry URL carries; the scheme, host and query of the
// request's URL are not used) and answers
// with the fixed entry's status and the first MaxBody bytes of its body.
// corectl's readiness check and probe-source discovery use it in place of
// a direct connection. A request whose Host is set must have the Host the
// gateway sent (HostName equal), else ErrHost: Check at start makes that
// so. Other methods and paths are refused (ErrPath) without a request.
func (c *Client) Transport(id, base string) http.RoundTripper {
	prefix := ""
	if u, err := url.Parse(base); err == nil {
		prefix = strings.TrimRight(u.Path, "/")
	}
	return relayTransport{c: c, id: id, prefix: prefix}
}

type relayTransport struct {
	c      *Client
	id     string
	prefix string
}

func (t relayTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
	if req.Method != http.MethodGet {
		return nil, fmt.Errorf("%w (method %s)", ErrPath, req.Method)
	}
	p, ok := strings.CutPrefix(req.URL.Path, t.prefix)
	if !ok {
		return nil, fmt.Errorf("%w (outside the fixed entry's path %s)", ErrPath, t.prefix)
	}
	a, err := t.c.Probe(req.Context(), t.id, p)
	if err != nil {
		return nil, err
	}
	if req.Host != "" && HostName(req.Host) != HostName(a.Host) {
		return nil, fmt.Errorf("%w: asked for %s, the gateway sent %s", ErrHost, req.Host, a.Host)
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", a.Status, http.StatusText(a.Status)), StatusCode: a.Status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: io.NopCloser(strings.NewReader(a.Body)), ContentLength: int64(len(a.Body)),
		Request: req,
	}, nil
}

// SameEntry returns nil when a and b name the same fixed entry: the same
// scheme, host (case aside) and port (the scheme's default port written
// or not) and the same path (trailing slashes aside); otherwise an error
// saying they differ (either may also be unparsable).
func SameEntry(a, b string) error {
	ua, errA := url.Parse(a)
	ub, errB := url.Parse(b)
	if errA != nil || errB != nil {
		return fmt.Errorf("%s and %s are not both URLs", a, b)
	}
	norm := func(u *url.URL) string {
		port := u.Port()
		if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
			port = ""
		}
		return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Hostname()) + ":" + port + strings.TrimRight(u.EscapedPath(), "/")
	}
	if norm(ua) != norm(ub) {
		return fmt.Errorf("%s is not %s", a, b)
	}
	return nil
}
