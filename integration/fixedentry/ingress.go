// Package fixedentry is an in-process stand-in for a compute cluster's
// "fixed entry" with the Alibaba OpenSandbox Ingress (opensandbox/ingress
// v1.0.7, unchanged at the reference snapshot) behind it, running in URI
// mode: a request for /<sandbox-id>/<port>/<path>?<query> is reverse-proxied
// to http://<pod IP>:<port>/<path>?<query>.
//
// No registry serves the ingress, so this package reproduces what
// docs/wire-facts.md §X2.2, §X2.4 and §X2.6 measured on the
// real program, byte for byte where the reference gives bytes: path parsing
// on the decoded path, prefix stripping with the query untouched, the
// headers it deletes and adds, immediate flushing of text/event-stream, and
// the text/plain "OpenSandbox Ingress: ..." errors. Where the reference is
// silent, the ingress source was followed (re-implemented, not copied):
// requests pass through a net/http ServeMux exactly as in the ingress's
// main.go, so unclean paths such as "/sbx/44772//x" get the mux's 307
// redirect to the cleaned path, and /status.ok answers 200 "OK"; a panic
// in the proxy (notably http.ErrAbortHandler when an upstream body breaks
// mid-copy) is recovered and answered with http.Error(panic text, 502),
// which after a committed response only appends the text to the body.
//
// Not emulated: header mode, OSEP-0011 signed routes and secure sandboxes
// (every sandbox is treated as not secure, so signed-looking paths parse
// as legacy paths, which is what the ingress does for non-secure
// sandboxes), the "ambiguous sandbox id" case, renew-intent publishing,
// and the gorilla WebSocket relay of §X2.5 (upgrade requests are tunnelled
// by httputil.ReverseProxy with all headers, whatever their Connection
// header).
package fixedentry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	networkingv1 "k8s.io/api/networking/v1"
)

// Header names the ingress handles (docs/wire-facts.md §X2.2).
const (
	// IngressToHeader is the header-mode route header; URI mode deletes it
	// from proxied requests.
	IngressToHeader = "OpenSandbox-Ingress-To"
	// SecureAccessHeader carries a secure-access token; it is deleted from
	// proxied requests.
	SecureAccessHeader = "OpenSandbox-Secure-Access"
	// PoweredByHeader is added to every proxied response with the value
	// PoweredByValue (the ingress spells it Reverse-Proxy-Server-PowerBy;
	// this is its canonical wire form).
	PoweredByHeader = "Reverse-Proxy-Server-Powerby"
	// PoweredByValue is the value of PoweredByHeader.
	PoweredByValue = "OpenSandbox-ingress"
	// EndpointsAnnotation is the BatchSandbox annotation the real ingress
	// reads the pod IP from; it appears in the missing-endpoint error.
	EndpointsAnnotation = "sandbox.opensandbox.io/endpoints"
)

// Sandbox is what the ingress knows about one sandbox (a BatchSandbox in
// the real cluster, §X2.4).
type Sandbox struct {
	// Ready reports status.ready >= 1. A not-ready sandbox gets 503
	// "sandbox not ready: <ns>/<id> (ready: 0/1)".
	Ready bool
	// Endpoint is the pod IP from the endpoints annotation, e.g.
	// "127.0.0.1"; "" stands for a missing annotation (503).
	Endpoint string
	// Ports optionally maps a logical port of the URI (e.g. 44772) to the
	// "host:port" actually dialled, because stand-in servers listen on
	// ephemeral loopback ports. The upstream Host header is still
	// "<Endpoint>:<logical port>", as the real ingress sends. Ports not in
	// the map are dialled at Endpoint:port.
	Ports map[int]string
	// Namespace of the BatchSandbox, used in error texts; "" = "default".
	Namespace string
}

// Request is one request as the ingress received it, for test assertions.
type Request struct {
	// Seq is the request's arrival number on this Ingress: 1 for the first
	// request ever received, counting across ResetRequests (compare with
	// Received and RequestsAfter).
	Seq uint64
	// Method is the request method.
	Method string
	// RequestURI is the request target exactly as on the request line.
	RequestURI string
	// Path is the decoded URL path (what the route is parsed from).
	Path string
	// RawPath is the escaped form of the URL path.
	RawPath string
	// RawQuery is the query string without '?'.
	RawQuery string
	// Host is the Host header as received.
	Host string
	// Header is a copy of the request headers as received, before the
	// ingress deleted or added any.
	Header http.Header
	// ContentLength is the request body's declared length: -1 for a
	// chunked body, 0 for none.
	ContentLength int64
	// SandboxID and Port are the parsed route; zero values when the route
	// did not parse.
	SandboxID string
	// Port is the logical port of the route.
	Port int
	// UpstreamPath is the path sent upstream; "" if not proxied.
	UpstreamPath string
	// UpstreamHost is the Host header sent upstream; "" if not proxied.
	UpstreamHost string
	// Status is the status code the ingress answered with (0 if the
	// handler wrote nothing, e.g. after a panic before any write).
	Status int
}

// Ingress is the fixed entry + OpenSandbox Ingress stand-in. It is an
// http.Handler; serve it on 127.0.0.1. The zero value is not usable; call
// New.
type Ingress struct {
	mu        sync.Mutex
	sandboxes map[string]Sandbox
	resolve   func(id string) (Sandbox, bool)
	nginx     *Nginx
	// reqs holds the most recent requests, oldest first; an in-flight
	// request fills in its own *Request, so a reset or a trim never
	// invalidates what a handler still writes to.
	reqs        []*Request
	received    uint64
	recordLimit int

	mux       *http.ServeMux
	transport *http.Transport
	proxy     *httputil.ReverseProxy
}

type ctxKey struct{}

// upstream is the per-request routing decision handed from the handler to
// the ReverseProxy Director, and the request's record (nil when the record
// is off).
type upstream struct {
	dial string
	host string
	rec  *Request
}

// DefaultRecordLimit is how many of the most recent requests an Ingress
// keeps for Requests unless SetRecordLimit changes it.
const DefaultRecordLimit = 4096

// New returns an Ingress with no sandboxes that records the most recent
// DefaultRecordLimit requests.
func New() *Ingress {
	in := &Ingress{sandboxes: map[string]Sandbox{}, recordLimit: DefaultRecordLimit}
	in.transport = http.DefaultTransport.(*http.Transport).Clone()
	in.proxy = &httputil.ReverseProxy{
		Director: func(req *http.Request) {
			up, _ := req.Context().Value(ctxKey{}).(*upstream)
			req.URL.Scheme = "http"
			if up != nil {
				req.URL.Host = up.dial
				req.Host = up.host
			}
			req.Header.Del(IngressToHeader)
		},
		ModifyResponse: func(res *http.Response) error {
			res.Header.Add(PoweredByHeader, PoweredByValue)
			return nil
		},
		Transport: in.transport,
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	in.mux = http.NewServeMux()
	in.mux.Handle("/", http.HandlerFunc(in.serveProxy))
	in.mux.HandleFunc("/status.ok", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("OK"))
	})
	return in
}

// SetSandbox adds or replaces sandbox id.
func (in *Ingress) SetSandbox(id string, s Sandbox) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.sandboxes[id] = s
}

// SetResolver sets a function consulted for sandbox IDs not added with
// SetSandbox, the way the real ingress resolves a sandbox from its
// BatchSandbox (docs/wire-facts.md §X2.4: status.ready and the endpoints
// annotation); false means "not found" (404). nil removes it. It is called
// without the Ingress's lock held.
func (in *Ingress) SetResolver(r func(id string) (Sandbox, bool)) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.resolve = r
}

// Nginx emulates the ingress-nginx layer of the fixed entry in front of
// the OpenSandbox ingress (spec §5.2, §5.2.2): the source address nginx
// sees, per-path source allowlists (whitelist-source-range) and the
// `return 200 "$remote_addr";` configuration snippet of probe-echo
// Ingresses, and (Upstream) rules whose Service nginx proxies to itself.
type Nginx struct {
	// Source maps the TCP peer address ("ip:port") to the address nginx
	// sees as $remote_addr (a NAT); nil means the peer's IP.
	Source func(remoteAddr string) string
	// Route returns what nginx applies to a request path: Echo answers
	// 200 with $remote_addr and goes nowhere else; Whitelist, when
	// Restricted, is the CIDR list a source must be in (else 403 nginx's
	// "403 Forbidden" page). ok false means no Ingress rule: the request
	// goes on to the OpenSandbox ingress unrestricted.
	Route func(path string) (r NginxRoute, ok bool)
	// Upstream, when set, is asked for every request a rule matched and
	// allowed: an ok answer is the "host:port" nginx proxies the request
	// to itself, path and Host unchanged, as ingress-nginx proxies to the
	// endpoints of the rule's Service (the Native Browser's sb-* carrier);
	// otherwise the request goes on to the OpenSandbox ingress.
	Upstream func(r NginxRoute) (dial string, ok bool)
	// Host, when set, is the host of the fixed entry's Ingress rules (and
	// so of every managed Ingress: corectl copies it): nginx matches rules
	// by Host, so a request whose Host name (port and case aside) is
	// another matches none of them and gets the default server's 404 page,
	// restricted or not. "" matches every Host.
	Host string
}

// NginxNotFound is the body of nginx's 404 page.
const NginxNotFound = "<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n<center><h1>404 Not Found</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"

// ingress-nginx's annotations the emulation reads from Ingress objects.
const (
	// AnnotationWhitelist is the source allowlist of an Ingress.
	AnnotationWhitelist = "nginx.ingress.kubernetes.io/whitelist-source-range"
	// AnnotationSnippet is the configuration snippet; EchoSnippet in it
	// makes the path answer $remote_addr.
	AnnotationSnippet = "nginx.ingress.kubernetes.io/configuration-snippet"
	// EchoSnippet is the probe-source echo snippet.
	EchoSnippet = `return 200 "$remote_addr";`
)

// IngressRoute is ingress-nginx's decision for a request path from a
// list of Ingress objects: among the rules for host (a rule without a
// host matches every host; "" matches every rule), the longest Prefix
// path that is path or a parent of it; an echo snippet answers, a
// whitelist-source-range restricts; the route names the path's Service
// backend. ok false: no Ingress matched.
func IngressRoute(ings []networkingv1.Ingress, host, path string) (r NginxRoute, ok bool) {
	var best *networkingv1.Ingress
	var bestPath *networkingv1.HTTPIngressPath
	bestLen := -1
	for i := range ings {
		ing := &ings[i]
		for _, rule := range ing.Spec.Rules {
			if rule.HTTP == nil || (host != "" && rule.Host != "" && !strings.EqualFold(rule.Host, host)) {
				continue
			}
			for i2, p := range rule.HTTP.Paths {
				bare := strings.TrimSuffix(p.Path, "/")
				if (path == bare || strings.HasPrefix(path, bare+"/")) && len(bare) > bestLen {
					best, bestLen, bestPath = ing, len(bare), &rule.HTTP.Paths[i2]
				}
			}
		}
	}
	if best == nil {
		return NginxRoute{}, false
	}
	if best.Annotations[AnnotationSnippet] == EchoSnippet {
		return NginxRoute{Echo: true}, true
	}
	v, restricted := best.Annotations[AnnotationWhitelist]
	r = NginxRoute{Restricted: restricted, Whitelist: strings.Split(v, ","), Namespace: best.Namespace}
	if b := bestPath.Backend.Service; b != nil {
		r.Service, r.ServicePort = b.Name, b.Port.Number
	}
	return r, true
}

// NginxRoute is what Nginx.Route returns for one path.
type NginxRoute struct {
	// Echo: the configuration snippet return 200 "$remote_addr".
	Echo bool
	// Restricted: a whitelist-source-range applies.
	Restricted bool
	// Whitelist is the allowed sources (CIDRs or IPs).
	Whitelist []string
	// Namespace, Service and ServicePort are the matched Ingress's
	// namespace and the Service backend of the matched path (ServicePort
	// 0 for a named port).
	Namespace, Service string
	// ServicePort is the backend Service's port number.
	ServicePort int32
}

// SetNginx installs (or, with nil, removes) the ingress-nginx emulation.
func (in *Ingress) SetNginx(n *Nginx) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.nginx = n
}

// nginxGate applies the emulation; true when it answered.
func (in *Ingress) nginxGate(w http.ResponseWriter, r *http.Request) bool {
	in.mu.Lock()
	n := in.nginx
	in.mu.Unlock()
	if n == nil || n.Route == nil {
		return false
	}
	src, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		src = r.RemoteAddr
	}
	if n.Source != nil {
		src = n.Source(r.RemoteAddr)
	}
	if n.Host != "" {
		h := r.Host
		if name, _, err := net.SplitHostPort(h); err == nil {
			h = name
		}
		if !strings.EqualFold(strings.TrimSuffix(h, "."), n.Host) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, NginxNotFound)
			return true
		}
	}
	rt, ok := n.Route(r.URL.Path)
	if !ok {
		return false
	}
	if rt.Echo {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, src)
		return true
	}
	if !rt.Restricted {
		return in.nginxUpstream(w, r, n, rt)
	}
	ip, err := netip.ParseAddr(src)
	if err == nil {
		for _, c := range rt.Whitelist {
			if p, perr := netip.ParsePrefix(c); perr == nil && p.Contains(ip) {
				return in.nginxUpstream(w, r, n, rt)
			} else if a, aerr := netip.ParseAddr(c); aerr == nil && a == ip {
				return in.nginxUpstream(w, r, n, rt)
			}
		}
	}
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(http.StatusForbidden)
	_, _ = io.WriteString(w, "<html>\r\n<head><title>403 Forbidden</title></head>\r\n<body>\r\n<center><h1>403 Forbidden</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n")
	return true
}

// nginxUpstream proxies a request nginx let through to n.Upstream's
// answer for rt, if any (true: answered).
func (in *Ingress) nginxUpstream(w http.ResponseWriter, r *http.Request, n *Nginx, rt NginxRoute) bool {
	if n.Upstream == nil {
		return false
	}
	dial, ok := n.Upstream(rt)
	if !ok {
		return false
	}
	p := &httputil.ReverseProxy{
		Director:  func(req *http.Request) { req.URL.Scheme, req.URL.Host = "http", dial },
		Transport: in.transport,
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	p.ServeHTTP(w, r)
	return true
}

// RemoveSandbox forgets sandbox id; later requests for it get 404.
func (in *Ingress) RemoveSandbox(id string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.sandboxes, id)
}

// SetRecordLimit sets how many of the most recent requests are kept for
// Requests: older ones are dropped as new ones arrive (Received still
// counts them). 0 keeps none, for load tests; a negative n is 0. Lowering
// the limit drops the oldest records at once.
func (in *Ingress) SetRecordLimit(n int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.recordLimit = max(n, 0)
	in.trimLocked()
}

// trimLocked drops the records beyond the limit, oldest first.
func (in *Ingress) trimLocked() {
	if extra := len(in.reqs) - in.recordLimit; extra > 0 {
		clear(in.reqs[:extra])
		in.reqs = in.reqs[extra:]
	}
}

// Requests returns a copy of the requests recorded so far (at most the
// record limit, the most recent ones), in arrival order.
func (in *Ingress) Requests() []Request {
	return in.RequestsAfter(0)
}

// RequestsAfter returns a copy of the recorded requests whose Seq is above
// seq, in arrival order: RequestsAfter(Received()) taken before an action
// gives the requests the action caused, as long as they fit in the record
// limit.
func (in *Ingress) RequestsAfter(seq uint64) []Request {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]Request, 0, len(in.reqs))
	for _, r := range in.reqs {
		if r.Seq <= seq {
			continue
		}
		c := *r
		c.Header = c.Header.Clone()
		out = append(out, c)
	}
	return out
}

// Received returns how many requests the Ingress has received since New,
// recorded or not; ResetRequests does not change it.
func (in *Ingress) Received() uint64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.received
}

// ResetRequests clears the request record. Requests still in flight finish
// normally; their records are no longer listed.
func (in *Ingress) ResetRequests() {
	in.mu.Lock()
	defer in.mu.Unlock()
	clear(in.reqs)
	in.reqs = in.reqs[:0]
}

// CloseIdleConnections closes idle upstream connections.
func (in *Ingress) CloseIdleConnections() { in.transport.CloseIdleConnections() }

// statusWriter records the status code; Unwrap lets http.ResponseController
// (used by ReverseProxy for flushing and upgrades) reach the real writer.
type statusWriter struct {
	http.ResponseWriter
	status int
}

// WriteHeader records the final status. A second final status is dropped
// here instead of by net/http (which would only log "superfluous
// response.WriteHeader call"); 1xx statuses pass through.
func (sw *statusWriter) WriteHeader(code int) {
	if code >= 200 {
		if sw.status != 0 {
			return
		}
		sw.status = code
	}
	sw.ResponseWriter.WriteHeader(code)
}

func (sw *statusWriter) Write(p []byte) (int, error) {
	if sw.status == 0 {
		sw.status = http.StatusOK
	}
	return sw.ResponseWriter.Write(p)
}

func (sw *statusWriter) Unwrap() http.ResponseWriter { return sw.ResponseWriter }

// ServeHTTP logs the request, then serves it through a ServeMux with the
// ingress's two handlers: /status.ok and the proxy on "/".
func (in *Ingress) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	in.mu.Lock()
	in.received++
	var rec *Request
	if in.recordLimit > 0 {
		rec = &Request{
			Seq: in.received, Method: r.Method, RequestURI: r.RequestURI, Path: r.URL.Path, RawPath: r.URL.EscapedPath(),
			RawQuery: r.URL.RawQuery, Host: r.Host, Header: r.Header.Clone(), ContentLength: r.ContentLength,
		}
		in.reqs = append(in.reqs, rec)
		in.trimLocked()
	}
	in.mu.Unlock()
	sw := &statusWriter{ResponseWriter: w}
	if rec != nil {
		defer func() {
			in.mu.Lock()
			rec.Status = sw.status
			in.mu.Unlock()
		}()
	}
	if in.nginxGate(sw, r) {
		return
	}
	up := &upstream{rec: rec}
	in.mux.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), ctxKey{}, up)))
}

// ingressError answers like the ingress: text/plain via http.Error with
// the body "OpenSandbox Ingress: <err>\n" (§X2.6).
func ingressError(w http.ResponseWriter, err error, status int) {
	http.Error(w, fmt.Sprintf("OpenSandbox Ingress: %v", err), status)
}

var (
	errNotFound = errors.New("sandbox not found")
	errNotReady = errors.New("sandbox not ready")
)

// serveProxy is the ingress proxy handler (§X2.2, §X2.6): route parse errors
// are 400 "invalid ingress route: ...", an unknown sandbox 404, a not-ready
// sandbox or one without endpoint 503; otherwise the request goes upstream
// with its path replaced, query/method/body/other headers untouched, Host
// set to "<endpoint>:<port>", OpenSandbox-Ingress-To and
// OpenSandbox-Secure-Access deleted and X-Forwarded-For appended. An
// unreachable upstream is ReverseProxy's bare 502 with an empty body.
func (in *Ingress) serveProxy(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if rcv := recover(); rcv != nil {
			text := fmt.Sprintf("%v", rcv)
			if err, ok := rcv.(error); ok {
				text = err.Error()
			}
			http.Error(w, text, http.StatusBadGateway)
		}
	}()
	up, _ := r.Context().Value(ctxKey{}).(*upstream)

	if r.URL == nil || r.URL.Path == "" {
		ingressError(w, errors.New("missing URI path"), http.StatusBadRequest)
		return
	}
	id, port, upPath, err := ParseRoute(r.URL.Path)
	if err != nil {
		ingressError(w, fmt.Errorf("invalid ingress route: %w", err), http.StatusBadRequest)
		return
	}
	in.mu.Lock()
	sb, ok := in.sandboxes[id]
	resolve := in.resolve
	if up != nil && up.rec != nil {
		up.rec.SandboxID, up.rec.Port = id, port
	}
	in.mu.Unlock()
	if !ok && resolve != nil {
		sb, ok = resolve(id)
	}
	ns := sb.Namespace
	if ns == "" {
		ns = "default"
	}
	switch {
	case !ok:
		ingressError(w, fmt.Errorf("%w: %s", errNotFound, id), http.StatusNotFound)
		return
	case !sb.Ready:
		ingressError(w, fmt.Errorf("%w: %s/%s (ready: 0/1)", errNotReady, ns, id), http.StatusServiceUnavailable)
		return
	case sb.Endpoint == "":
		ingressError(w, fmt.Errorf("%w: %s/%s: missing %s annotation", errNotReady, ns, id, EndpointsAnnotation), http.StatusServiceUnavailable)
		return
	}

	target := fmt.Sprintf("%s:%d", sb.Endpoint, port)
	dial := target
	if d, ok := sb.Ports[port]; ok {
		dial = d
	}
	r.URL.Path = upPath
	r.Host = target
	r.URL.Host = target
	r.Header.Del(IngressToHeader)
	r.Header.Del(SecureAccessHeader)
	if up != nil {
		up.dial, up.host = dial, target
		if up.rec != nil {
			in.mu.Lock()
			up.rec.UpstreamPath, up.rec.UpstreamHost = upPath, target
			in.mu.Unlock()
		}
	}
	in.proxy.ServeHTTP(w, r)
}

// ParseRoute parses a decoded URI-mode path the way the ingress's legacy
// parser does (§X2.2): the leading "/" is trimmed and the rest split with
// SplitN(path, "/", 3) into id, port and rest; id must be non-empty; port
// must be decimal 1–65535 without leading zeros (strconv.Atoi, so "+80" is
// accepted, as in the ingress); the upstream path is "/"+rest, or "/" when
// rest is empty or absent. The error texts are the ingress's.
func ParseRoute(p string) (id string, port int, upstreamPath string, err error) {
	parts := strings.SplitN(strings.TrimPrefix(p, "/"), "/", 3)
	if len(parts) < 2 {
		return "", 0, "", fmt.Errorf("invalid URI path format: expected '/<sandbox-id>/<sandbox-port>/<path-to-request>', got: %s", p)
	}
	if parts[0] == "" {
		return "", 0, "", errors.New("missing sandbox-id or sandbox-port in URI path")
	}
	port, err = parsePort(parts[1])
	if err != nil {
		return "", 0, "", fmt.Errorf("invalid port format: %w", err)
	}
	upstreamPath = "/"
	if len(parts) == 3 && parts[2] != "" {
		upstreamPath = "/" + parts[2]
	}
	return parts[0], port, upstreamPath, nil
}

func parsePort(s string) (int, error) {
	if len(s) > 1 && s[0] == '0' {
		return 0, errors.New("port must not have leading zeros")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("invalid port %q", s)
	}
	return n, nil
}
