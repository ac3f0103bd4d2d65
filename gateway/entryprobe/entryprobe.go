// Package entryprobe sends corectl's probes of a compute cluster's fixed
// entry — the readiness ping of a new sandbox and the dials of probe-source
// discovery (spec §4.2, §5.2.2) — and, in the gateway, relays them through
// the data plane's own transport.
//
// Why a relay: the fixed entry's nginx admits a restricted sandbox's path
// only from the sources in its whitelist-source-range and only for the host
// of its Ingress rule. The gateway's data-plane requests and corectl's
// probes must therefore arrive with the same Host and from the same source
// (after any NAT), or a sandbox that passed corectl's readiness check is
// refused to the SDK (403 for another source, 404 for another host). When
// corectl sends its probes through the gateway's relay (Handler, served on
// the gateway's internal listener; Client on corectl's side), the probes
// leave through the data plane's transport with the data plane's Host: the
// discovered probe source is the data plane's source and the readiness
// check tests the data plane's path, by construction. corectl checks at
// start that the relay's clusters (ID, fixed entry, host) are its own
// (Check).
//
// Only two request shapes may be probed (ValidPath): GET
// /<sandboxID>/44772/ping (execd's ping, the readiness check) and GET
// /sandbox-probe-echo-<32 hex> (a discovery echo Ingress). The relay is
// therefore no general proxy into the compute clusters.
package entryprobe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/sandgate/sandgate/gateway/execdtoken"
)

// MaxBody bounds the part of a probed answer's body that is kept, in
// bytes (an echo answer is one IP address; a ping answer is not read).
const MaxBody = 256

// DefaultTimeout bounds one probe when the caller gives no deadline.
const DefaultTimeout = 5 * time.Second

// ExecdPort is execd's port in the OpenSandbox Ingress URI (/<id>/44772/…).
const ExecdPort = 44772

// EchoPathPrefix prefixes the path of a probe-source echo Ingress
// (corectl/probesource).
const EchoPathPrefix = "/sandbox-probe-echo-"

var (
	pingPath = regexp.MustCompile(`^/[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/44772/ping$`)
	echoPath = regexp.MustCompile(`^/sandbox-probe-echo-[0-9a-f]{32}$`)
)

// execdAccessTokenHeader carries execd's access token (gateway/execd's
// AccessTokenHeader; docs/wire-facts.md §X1.2).
const execdAccessTokenHeader = "X-EXECD-ACCESS-TOKEN"

// ErrPath: a path that is neither a readiness ping nor an echo path.
var ErrPath = errors.New("entryprobe: only /<sandboxID>/44772/ping and /sandbox-probe-echo-<32 hex> may be probed")

// ErrUnreachable: the fixed entry could not be reached (dial, TLS, timeout,
// a broken answer); the message names the cluster's entry, never a body.
var ErrUnreachable = errors.New("entryprobe: the fixed entry could not be reached")

// ValidPath returns nil for a path corectl may probe: a sandbox ID (a
// DNS-1123 label) followed by /44772/ping, or EchoPathPrefix followed by
// 32 lowercase hex digits; otherwise ErrPath.
func ValidPath(p string) error {
	if pingPath.MatchString(p) || echoPath.MatchString(p) {
		return nil
	}
	return ErrPath
}

// PingPath returns the readiness path of sandbox id.
func PingPath(id string) string { return fmt.Sprintf("/%s/%d/ping", id, ExecdPort) }

// Answer is what the fixed entry answered one probe.
type Answer struct {
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Body is the first MaxBody bytes of the body.
	Body string `json:"body"`
	// Host is the Host header the probe was sent with.
	Host string `json:"host"`
}

// Prober sends one probe of the fixed entry of one cluster.
type Prober interface {
	// Probe sends GET <fixed entry><path> and returns the answer. Errors:
	// ErrPath (nothing sent), ErrUnreachable, ctx's error, or the relay's
	// refusal (Client).
	Probe(ctx context.Context, path string) (Answer, error)
}

// Direct probes the fixed entry from this process.
type Direct struct {
	// FixedEntry is the fixed entry's base URL (http or https; a path
	// prefix is kept).
	FixedEntry *url.URL
	// Host is the Host header; "" sends the URL's host.
	Host string
	// ExecdAccessToken, when not empty, is sent as X-EXECD-ACCESS-TOKEN
	// on readiness pings (/<id>/44772/ping), which reach execd: an execd
	// started with a token answers a ping without it with 401. Echo
	// probes reach no execd and never carry it.
	ExecdAccessToken string
	// ExecdTokenSecrets, when set (instead of ExecdAccessToken), send each
	// ping the token of the sandbox it names,
	// execdtoken.Derive(secret, <id>). With several (a rotation, at most
	// execdtoken.MaxSecrets) the ping is sent with each secret's token in
	// order until execd answers other than 401; that answer, or the last
	// 401, is the probe's. A ping changes nothing, so sending it again is
	// harmless.
	ExecdTokenSecrets [][]byte
	// Transport sends the request; nil is http.DefaultTransport. The
	// gateway's relay gives the data plane's transport.
	Transport http.RoundTripper
	// Timeout bounds the probe when ctx has no earlier deadline; 0 is
	// DefaultTimeout.
	Timeout time.Duration
}

// Probe implements Prober.
func (d Direct) Probe(ctx context.Context, path string) (Answer, error) {
	if err := ValidPath(path); err != nil {
		return Answer{}, err
	}
	if d.FixedEntry == nil {
		return Answer{}, fmt.Errorf("%w: no fixed entry", ErrUnreachable)
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := *d.FixedEntry
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	tokens := []string{""}
	if pingPath.MatchString(path) {
		switch {
		case len(d.ExecdTokenSecrets) > 0:
			id, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
			tokens = tokens[:0]
			for _, s := range d.ExecdTokenSecrets {
				tokens = append(tokens, execdtoken.Derive(s, id))
			}
		case d.ExecdAccessToken != "":
			tokens[0] = d.ExecdAccessToken
		}
	}
	var a Answer
	var err error
	for _, tok := range tokens {
		if a, err = d.once(ctx, &u, tok); err != nil || a.Status != http.StatusUnauthorized {
			break
		}
	}
	return a, err
}

// once sends one GET to u with the execd token tok ("" for none).
func (d Direct) once(ctx context.Context, u *url.URL, tok string) (Answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return Answer{}, fmt.Errorf("%w: %s", ErrUnreachable, err.Error())
	}
	if d.Host != "" {
		req.Host = d.Host
	}
	req.Header.Set("User-Agent", "sandgate-probe")
	if tok != "" {
		req.Header.Set(execdAccessTokenHeader, tok)
	}
	rt := d.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && !isTimeout(err) {
			return Answer{}, ctxErr
		}
		return Answer{}, fmt.Errorf("%w: %s: %s", ErrUnreachable, d.FixedEntry.Redacted(), shortError(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	if err != nil {
		return Answer{}, fmt.Errorf("%w: %s: reading the answer: %s", ErrUnreachable, d.FixedEntry.Redacted(), shortError(err))
	}
	// Drain a little more so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	host := req.Host
	if host == "" {
		host = u.Host
	}
	return Answer{Status: resp.StatusCode, Body: string(b), Host: host}, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// shortError is err's text without the request URL net/http prepends.
func shortError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// HostName returns host without a port, lowercased: what nginx matches an
// Ingress rule's host against.
func HostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.ToLower(strings.TrimSuffix(host, "."))
}
