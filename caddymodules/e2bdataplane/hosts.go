package e2bdataplane

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/sandgate/sandgate/caddymodules/internal/dataplaneapp"
	"github.com/sandgate/sandgate/gateway/authorizer"
	"github.com/sandgate/sandgate/gateway/dataplane"
	"github.com/sandgate/sandgate/gateway/portroute"
	"github.com/sandgate/sandgate/gateway/sandboxhost"
)

// hostRouting is the handler's host routing, set up by provisionHosts when
// Hosts is configured (docs/dataplane.md "Host routing").
type hostRouting struct {
	table  *sandboxhost.Table
	router *portroute.Router
	admit  *portroute.Admission
	proxy  *reverseproxy.Handler
	m      *metrics
}

// Placeholder variables the port proxy's upstream is taken from.
const (
	varPortDial = "sandgate_port_dial"
)

// codeHostMismatch: a routing header that disagrees with the Host (400).
const codeHostMismatch = "HOST_HEADER_MISMATCH"

// provisionHosts builds the host table, the port router and the
// reverse_proxy that forwards port requests with the data plane's
// transport rt (its pooling, timeouts and TLS); port requests are counted
// in m. It dials nothing.
func (h *Handler) provisionHosts(ctx caddy.Context, app dataplaneapp.App, rt http.RoundTripper, m *metrics) error {
	if len(h.Hosts) == 0 {
		return nil
	}
	table, err := sandboxhost.NewTable(h.Hosts)
	if err != nil {
		return fmt.Errorf("hosts: %w", err)
	}
	deps := portroute.Deps{Tokens: app.Tokens(), Credentials: app.Credentials(), Clusters: app}
	if a := app.Authorizer(); a != nil {
		deps.Authorizer = a
		deps.Locator, _ = a.(authorizer.Locator)
	}
	router, err := portroute.New(deps)
	if err != nil {
		return err
	}
	admit, err := portroute.NewAdmission(h.MaxPortRequestsPerSandbox, h.MaxPortRequests, processPortCounts)
	if err != nil {
		return fmt.Errorf("max_port_requests_per_sandbox, max_port_requests: %w", err)
	}
	proxy := &reverseproxy.Handler{
		Transport: rt,
		Upstreams: reverseproxy.UpstreamPool{{Dial: "{http.vars." + varPortDial + "}"}},
		// No FlushInterval: reverse_proxy's default already writes
		// every part of a streamed answer as it comes (server-sent
		// events, an answer without a Content-Length: chunked or
		// close-delimited, HTTP/2 bidirectional streams), and sends an
		// answer with a Content-Length as net/http's buffers fill, in
		// one write for a small one. Flushing those too (-1) cost a
		// second write and a timer per answer (docs/benchmarks.md
		// "Sandbox port requests"). WebSocket upgrades are
		// reverse_proxy's own.
		// How long its WebSockets run on after a reload (Cleanup).
		StreamCloseDelay: h.StreamCloseDelay,
	}
	if err := proxy.Provision(ctx); err != nil {
		return fmt.Errorf("hosts: the port proxy: %w", err)
	}
	h.hosts = &hostRouting{table: table, router: router, admit: admit, proxy: proxy, m: m}
	return nil
}

// processPortCounts are the port requests in progress of the process, a
// package variable so that they outlive every configuration: across a
// `caddy reload` the requests and WebSockets the replaced configuration
// still runs count against the new one's bounds, and a reload does not
// give a sandbox a second full bound, whatever the reload changes (the
// served domains too: a sandbox is one sandbox under any of them, and a
// configuration without host routing in between keeps them too). Every
// handler with host routing shares them, each checking its own bounds
// against them (docs/dataplane.md "How many at once"); the in-progress
// gauge reads them.
var processPortCounts = portroute.NewCounts()

// processRequests are the data plane's requests in progress of the
// process (dataplane.Deps.Requests), per credential and in all, a package
// variable for the same reason as processPortCounts: the command streams
// and transfers a replaced configuration still runs count against the
// new one's max_requests_per_credential and max_requests, and a reload
// does not give a tenant a second full bound. The in-progress gauge reads
// them.
var processRequests = dataplane.NewRequestCounts()

// processShared is the data plane's state that outlives a configuration
// (dataplane.Deps.Shared), a package variable for the same reason: after
// a reload the new configuration relays a terminal's input and resizes
// through the WebSocket a stream of the replaced one still holds, and the
// deferred cleanups, PTY kills, PTY streams and large output lines the
// replaced configuration still runs count against the same bounds.
var processShared = dataplane.NewShared()

// serveHost serves a request when host routing is configured: a Host
// that is not a sandbox host of a served domain is refused; envd's port
// goes to the data plane with the sandbox from the Host; any other port
// is forwarded to the sandbox's cluster's fixed entry.
func (h *Handler) serveHost(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	tgt, err := h.hosts.table.Parse(r.Host)
	if err != nil {
		h.hosts.refuse(w, &portroute.Refusal{Code: portroute.CodeHostNotServed, Message: "this gateway serves no such host"})
		return nil
	}
	if tgt.Port == sandboxhost.EnvdPort {
		if !hostHeader(r.Header, dataplane.HeaderSandboxID, tgt.SandboxID) || !hostHeader(r.Header, dataplane.HeaderSandboxPort, "49983") {
			writeRefusal(w, http.StatusBadRequest, codeHostMismatch, "the routing headers disagree with the Host")
			return nil
		}
		h.dp.ServeHTTP(w, r)
		return nil
	}
	route, refusal := h.hosts.router.Decide(r.Context(), tgt, r.Header)
	if refusal != nil {
		h.hosts.refuse(w, refusal)
		return nil
	}
	release, refusal := h.hosts.admit.Admit(tgt.SandboxID)
	if refusal != nil {
		h.hosts.refuse(w, refusal)
		return nil
	}
	defer release()
	out := r.Clone(r.Context())
	// Neither token is for the sandbox.
	out.Header.Del(portroute.HeaderTrafficToken)
	out.Header.Del(dataplane.HeaderAccessToken)
	out.Host = route.Host
	u := *r.URL
	u.Path = route.PathPrefix + r.URL.Path
	if r.URL.RawPath != "" {
		u.RawPath = route.PathPrefix + r.URL.RawPath
	}
	out.URL = &u
	caddyhttp.SetVar(out.Context(), varPortDial, route.Dial)
	err = h.hosts.proxy.ServeHTTP(&portAnswerWriter{ResponseWriter: w}, out, next)
	// The trailers the proxy put in the header once the body was copied.
	portroute.ScrubAnswer(w.Header())
	h.hosts.m.portServed(err)
	return err
}

// refuse answers a refused port request and counts it.
func (hr *hostRouting) refuse(w http.ResponseWriter, r *portroute.Refusal) {
	hr.m.portRefused(string(r.Code))
	writeRefusal(w, r.Code.Status(), string(r.Code), r.Message)
}

// portAnswerWriter scrubs each head of a port's answer as it is written
// (portroute.ScrubAnswer: the gateway's own header names removed, cookies
// host-only): the final answer, a 1xx and a WebSocket's 101 alike.
type portAnswerWriter struct {
	http.ResponseWriter
	wrote bool
}

// WriteHeader writes the head scrubbed.
func (w *portAnswerWriter) WriteHeader(code int) {
	portroute.ScrubAnswer(w.Header())
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write writes body bytes, the head first if nothing wrote it.
func (w *portAnswerWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the writer underneath (Flush,
// Hijack).
func (w *portAnswerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// hostHeader makes header name say want: set when absent; false when it
// is sent with another value or more than once.
func hostHeader(hdr http.Header, name, want string) bool {
	switch v := hdr.Values(name); {
	case len(v) == 0:
		hdr.Set(name, want)
		return true
	default:
		return len(v) == 1 && v[0] == want
	}
}

// writeRefusal answers {"code": status, "message": msg} with the stable
// code in the Sandgate-Error-Code header, envd's REST error shape.
func writeRefusal(w http.ResponseWriter, status int, code, msg string) {
	body, _ := json.Marshal(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status, msg})
	w.Header().Set(dataplane.ErrorHeader, code)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
