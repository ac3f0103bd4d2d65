// Package e2bdataplane is the Caddy HTTP handler "e2b_dataplane": the E2B
// envd data plane the official SDKs reach at http://<portal>:30083. It is a
// thin adapter: the checks and the envd→execd translation live in package
// dataplane; this module wires them to the "sandgate" app (token keys,
// credential source, clusters), to Caddy's reverse_proxy HTTP transport
// (pooling, dial and response timeouts) and to Caddy's metrics registry.
package e2bdataplane

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"

	"github.com/sandgate/sandgate/caddymodules/internal/dataplaneapp"
	"github.com/sandgate/sandgate/gateway/dataplane"
	"github.com/sandgate/sandgate/gateway/drain"
	"github.com/sandgate/sandgate/gateway/execd"
	"github.com/sandgate/sandgate/gateway/upstream"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler is the "e2b_dataplane" HTTP handler. It is terminal: it answers
// every request it gets (unsupported routes with Connect unimplemented or a
// 404) and never calls the next handler.
//
// It needs the "sandgate" app (see package sandgate) for token keys,
// credentials and clusters.
type Handler struct {
	// HomeDir resolves relative paths and is the default working directory
	// of commands. Default "/home/user".
	HomeDir string `json:"home_dir,omitempty"`

	// Users maps the user names the SDK sends (user= in the SDKs) to the
	// uid/gid execd runs commands as and the owner of written files. A name
	// not listed is refused as invalid_argument. Default: none.
	Users map[string]*User `json:"users,omitempty"`

	// DefaultUser is the user assumed when the SDK names none; it must be in
	// Users. Default: none, so commands run as execd's own identity.
	DefaultUser string `json:"default_user,omitempty"`

	// KeepaliveInterval is the keepalive period of command streams when the
	// SDK sends no Keepalive-Ping-Interval header. Default 90s, as envd.
	KeepaliveInterval caddy.Duration `json:"keepalive_interval,omitempty"`

	// MaxMessageSize bounds one Connect request message, in bytes.
	// Default 4194304 (4 MiB).
	MaxMessageSize int64 `json:"max_message_size,omitempty"`

	// MaxDecompressedSize bounds what one gzip-encoded file write
	// (files.write with gzip) may decompress to, in bytes; a larger one is
	// refused with WRITE_TOO_LARGE (HTTP 507, the SDKs'
	// NotEnoughSpaceError) and nothing is written. Default 1073741824
	// (1 GiB).
	MaxDecompressedSize int64 `json:"max_decompressed_size,omitempty"`

	// MaxDecompressionRatio bounds the decompressed bytes of a gzip write
	// per compressed byte, checked once it is past 16 MiB; more is refused
	// like MaxDecompressedSize. Default 100.
	MaxDecompressionRatio int64 `json:"max_decompression_ratio,omitempty"`

	// MaxListingSize bounds execd's answer to one directory listing, in
	// bytes; a larger one is refused with EXECD_PROTOCOL. Code in a
	// sandbox can answer in execd's place, so every answer is read
	// against a limit. Default 4194304 (4 MiB).
	MaxListingSize int64 `json:"max_listing_size,omitempty"`

	// MaxListingEntries bounds the entries of one listing. Default 16384.
	MaxListingEntries int `json:"max_listing_entries,omitempty"`

	// MaxUpstreamCalls bounds the unary calls (and command-stream polls)
	// decoding execd answers at once, over all sandboxes (a unary call
	// counts from execd's first answer to it on, not while it waits for
	// execd); one more is GATEWAY_BUSY (Connect unavailable, REST 502).
	// Default 16.
	MaxUpstreamCalls int `json:"max_upstream_calls,omitempty"`

	// MaxUpstreamCallsPerSandbox is MaxUpstreamCalls for one sandbox.
	// Default 4.
	//
	// A call beyond these bounds (or MaxProcessCallsPerCredential) waits
	// up to UpstreamWait for a slot, then is refused with GATEWAY_BUSY.
	MaxUpstreamCallsPerSandbox int `json:"max_upstream_calls_per_sandbox,omitempty"`

	// MaxProcessCallsPerCredential bounds the calls reading every process
	// record (commands.list, a selection by tag) in progress for one
	// resource credential. Default 2.
	MaxProcessCallsPerCredential int `json:"max_process_calls_per_credential,omitempty"`

	// MaxRequestsPerCredential bounds the requests of one resource
	// credential (a tenant) in progress at once over all its sandboxes,
	// each from its checks' end to its answer's end (a command stream, a
	// download or a write for as long as it lasts); one more is refused
	// at once with GATEWAY_BUSY. Counted for the process, across `caddy
	// reload`. Default 1024.
	MaxRequestsPerCredential int `json:"max_requests_per_credential,omitempty"`

	// MaxRequests is MaxRequestsPerCredential over all credentials; one
	// more is refused at once with GATEWAY_BUSY. Default 4096, or
	// MaxRequestsPerCredential when that is larger; set below
	// MaxRequestsPerCredential (its default, 1024, when unset), Provision
	// fails naming both.
	MaxRequests int `json:"max_requests,omitempty"`

	// UpstreamWait is how long a call waits for a slot of the bounds
	// above (not MaxRequestsPerCredential's or MaxRequests'). Default 30s.
	UpstreamWait caddy.Duration `json:"upstream_wait,omitempty"`

	// TokenTarget, when true, serves requests that carry neither
	// E2b-Sandbox-Id nor E2b-Sandbox-Port by taking the sandbox from the
	// verified token (Python SDK 2.24's Sandbox.connect() sends neither).
	// The token is signed and names exactly one sandbox and the envd
	// service, and the cluster still comes from the re-read credential, so
	// this widens nothing a token holder could not already reach; it only
	// drops the second, redundant statement of the target. Default false.
	TokenTarget bool `json:"token_target,omitempty"`

	// ExtendedOperations, when true, also serves the envd operations that
	// manage processes outliving their stream and the filesystem calls
	// beyond spec §3.3's six: Process List, Connect, SendSignal,
	// SendInput, CloseStdin and Update (a process started with stdin: true
	// gets a stdin through FIFOs in process_dir; a pty, a terminal),
	// Filesystem Stat, MakeDir, Move and WatchDir (by polling execd's
	// listing); and
	// Process/Start then runs an execd background command. Default false,
	// so the six-operation contract of spec §3.3 stays the default
	// (docs/dataplane.md "Extended operations").
	ExtendedOperations bool `json:"extended_operations,omitempty"`

	// ProcessDir is the sandbox directory where, with ExtendedOperations,
	// the process records and outputs are kept. Absolute. Default
	// "/tmp/.sandgate/processes".
	ProcessDir string `json:"process_dir,omitempty"`

	// TransportRaw is the upstream transport to the fixed entries, a module
	// of the http.reverse_proxy.transport namespace; only "http" is
	// supported. Default: Caddy's HTTP transport with its defaults. Its
	// max_response_header (the largest head of an answer read, in bytes)
	// defaults to 65536 here, not Go's 10 MiB: a sandbox's code writes the
	// answers; a larger head is a 502.
	TransportRaw json.RawMessage `json:"transport,omitempty" caddy:"namespace=http.reverse_proxy.transport inline_key=protocol"`

	// UnaryClient chooses what sends the bodyless execd calls whose answers
	// are read whole (listings, file info, deletes, command status):
	// "builtin" is the data plane's own HTTP/1.1 client (package
	// gateway/upstream) with the transport block's dialer, timeouts and
	// limits; "transport" is the transport block itself, as every other
	// call. Default "builtin" (it costs less CPU per call; docs/benchmarks.md
	// "Issue 33: an upstream client of the data plane's own"), or
	// "transport" when the transport block cannot have it beside it: one
	// without HTTP/1.1 among its versions, or with HTTP/3. "builtin" named
	// with such a transport is a configuration error. docs/dataplane.md
	// "The unary client".
	UnaryClient string `json:"unary_client,omitempty"`

	// Hosts, when set, turns on host routing (E2B_DOMAIN): the domains
	// whose <port>-<sandboxID>.<domain> hosts this handler serves; a
	// request to any other Host is refused with HOST_NOT_SERVED. Port
	// 49983 is the envd data plane with the sandbox from the Host; any
	// other port is forwarded to the sandbox's cluster's fixed entry
	// (package portroute). Default: none, the fixed-address mode.
	Hosts []string `json:"hosts,omitempty"`

	// MaxPortRequestsPerSandbox bounds the port requests (host routing, a
	// port other than 49983) of one sandbox in progress at once; one more
	// is refused with TOO_MANY_PORT_REQUESTS (429). A WebSocket counts
	// until it closes. Default 1024.
	MaxPortRequestsPerSandbox int `json:"max_port_requests_per_sandbox,omitempty"`

	// MaxPortRequests is MaxPortRequestsPerSandbox over all sandboxes;
	// one more is refused with GATEWAY_BUSY (503). Default 4096, or
	// MaxPortRequestsPerSandbox when that is larger; set below
	// MaxPortRequestsPerSandbox, Provision fails. Both are used only with
	// Hosts.
	MaxPortRequests int `json:"max_port_requests,omitempty"`

	// StreamCloseDelay is how long a port's WebSockets (host routing) run
	// on after a `caddy reload` replaced this configuration, before the
	// gateway closes them (a Close frame, 1001 going away, then the
	// connection), as reverse_proxy's stream_close_delay does for its own:
	// clients that do not reconnect well keep their connections through a
	// reload within it, and those WebSockets still hold this
	// configuration's port request places meanwhile. Default 0: closed at
	// the reload. Used only with Hosts; a process exit closes them at once.
	StreamCloseDelay caddy.Duration `json:"stream_close_delay,omitempty"`

	// DrainGrace is how long the command streams and file transfers in
	// flight may run on once the server begins to shut down for the
	// process exit (a rollout's SIGTERM, after Caddy's shutdown_delay);
	// those still running then end with GATEWAY_DRAINING (package drain,
	// docs/runbook.md "Rollouts and draining"), those of configurations a
	// reload replaced included. A reload alone drains nothing: the old
	// configuration's streams run on, as Caddy lets them. Keep it below
	// Caddy's grace_period, which closes the connections when it runs out.
	// Default 25s.
	DrainGrace caddy.Duration `json:"drain_grace,omitempty"`

	dp    *dataplane.Handler
	hosts *hostRouting
	drain *drain.Drainer
	unary *upstream.Transport
}

// User is one SDK user's identity inside the sandbox.
type User struct {
	// UID is the numeric user ID commands run as.
	UID uint32 `json:"uid"`
	// GID is the numeric group ID commands run as.
	GID uint32 `json:"gid"`
	// Home is the user's home directory; default the handler's home_dir.
	Home string `json:"home,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.e2b_dataplane", New: func() caddy.Module { return new(Handler) }}
}

// Provision wires the handler to the sandgate app, the transport and the
// metrics registry. It fails if the app is not configured or the transport
// is not Caddy's HTTP transport.
func (h *Handler) Provision(ctx caddy.Context) error {
	app, err := dataplaneapp.From(ctx)
	if err != nil {
		return err
	}
	if app.Tokens() == nil || app.Credentials() == nil {
		return errors.New("e2b_dataplane needs the sandgate global option with token keys and a credential source")
	}

	var rt *reverseproxy.HTTPTransport
	if h.TransportRaw != nil {
		mod, err := ctx.LoadModule(h, "TransportRaw")
		if err != nil {
			return fmt.Errorf("loading the transport: %w", err)
		}
		t, ok := mod.(*reverseproxy.HTTPTransport)
		if !ok {
			return fmt.Errorf("transport %T is not supported; use transport http", mod)
		}
		rt = t
	} else {
		t := new(reverseproxy.HTTPTransport)
		if err := t.Provision(ctx); err != nil {
			return fmt.Errorf("provisioning the default transport: %w", err)
		}
		rt = t
	}
	boundAnswerHeads(rt)
	unary, err := h.unaryClient(rt)
	if err != nil {
		return err
	}

	cfg := dataplane.Config{
		HomeDir:            h.HomeDir,
		DefaultUser:        h.DefaultUser,
		KeepaliveInterval:  time.Duration(h.KeepaliveInterval),
		TokenTarget:        h.TokenTarget,
		ExtendedOperations: h.ExtendedOperations,
		ProcessDir:         h.ProcessDir,
		Users:              map[string]dataplane.User{},
	}
	if h.MaxMessageSize < 0 || h.MaxMessageSize > 64<<20 {
		return errors.New("max_message_size must be between 1 and 67108864 bytes")
	}
	cfg.MaxMessageBytes = uint32(h.MaxMessageSize)
	if h.MaxDecompressedSize < 0 {
		return errors.New("max_decompressed_size must be positive")
	}
	if h.MaxDecompressionRatio < 0 {
		return errors.New("max_decompression_ratio must be positive")
	}
	cfg.MaxDecompressedBytes, cfg.MaxDecompressionRatio = h.MaxDecompressedSize, h.MaxDecompressionRatio
	if h.MaxListingSize < 0 || h.MaxListingEntries < 0 || h.MaxUpstreamCalls < 0 || h.MaxUpstreamCallsPerSandbox < 0 || h.MaxProcessCallsPerCredential < 0 {
		return errors.New("max_listing_size, max_listing_entries, max_upstream_calls, max_upstream_calls_per_sandbox and max_process_calls_per_credential must be positive")
	}
	cfg.MaxListingBytes, cfg.MaxListingEntries = h.MaxListingSize, h.MaxListingEntries
	cfg.MaxUpstreamCalls, cfg.MaxUpstreamCallsPerSandbox = h.MaxUpstreamCalls, h.MaxUpstreamCallsPerSandbox
	cfg.MaxProcessCallsPerCredential = h.MaxProcessCallsPerCredential
	if h.MaxRequestsPerCredential < 0 || h.MaxRequests < 0 {
		return errors.New("max_requests_per_credential and max_requests must be positive")
	}
	if perCredential := cmp.Or(h.MaxRequestsPerCredential, dataplane.DefaultMaxRequestsPerCredential); h.MaxRequests > 0 && h.MaxRequests < perCredential {
		// Named here, the default included: dataplane.New's own check
		// knows neither directive.
		def := ""
		if h.MaxRequestsPerCredential == 0 {
			def = " (its default)"
		}
		return fmt.Errorf("max_requests %d is below max_requests_per_credential %d%s: max_requests must be at least max_requests_per_credential", h.MaxRequests, perCredential, def)
	}
	cfg.MaxRequestsPerCredential, cfg.MaxRequests = h.MaxRequestsPerCredential, h.MaxRequests
	if h.UpstreamWait < 0 {
		return errors.New("upstream_wait must be positive")
	}
	cfg.UpstreamWait = time.Duration(h.UpstreamWait)
	for name, u := range h.Users {
		if u == nil {
			return fmt.Errorf("user %q: empty definition", name)
		}
		if u.Home != "" && !path.IsAbs(u.Home) {
			return fmt.Errorf("user %q: home must be an absolute path", name)
		}
		cfg.Users[name] = dataplane.User{UID: u.UID, GID: u.GID, Home: u.Home}
	}
	keepTokensOutOfAccessLogs(ctx)
	// The probe relay (fixed_entry_probe) sends corectl's probes with this
	// transport, so they leave exactly as the data plane's requests do.
	app.SetDataPlaneTransport(rt)
	m := registerMetrics(ctx.GetMetricsRegistry())
	if h.DrainGrace < 0 {
		return errors.New("drain_grace must be positive")
	}
	h.drain = drain.New(time.Duration(h.DrainGrace), m.inFlight)
	if srv, ok := ctx.Context.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server); ok && srv != nil {
		log, d := ctx.Logger(), h.drain
		srv.RegisterOnShutdown(func() {
			if !caddy.Exiting() {
				// A reload: the requests of this configuration run on
				// (Caddy's behaviour); the process exit drains them.
				drains.Retire(d)
				return
			}
			log.Info("server shutting down: draining command streams and file transfers",
				zap.Duration("drain_grace", d.Grace()), zap.Int("commands", d.InFlight(drain.KindCommand)),
				zap.Int("transfers", d.InFlight(drain.KindTransfer)), zap.Int("reloaded_configurations", drains.Retired()))
			drains.BeginAll(d)
		})
		// At the exit Caddy waits for this server's requests, not for
		// those of servers a reload replaced: wait for them here (within
		// grace_period).
		srv.RegisterOnStop(func(stop context.Context) error {
			if !caddy.Exiting() {
				return nil
			}
			return drains.Wait(stop)
		})
	}
	observe := func(o dataplane.Outcome) {
		m.observe(o)
		setAccessLogLevel(o)
	}
	dp, err := dataplane.New(cfg, dataplane.Deps{
		Tokens:      app.Tokens(),
		Credentials: app.Credentials(),
		Clusters:    app,
		Execd:       &execd.Client{Transport: rt, Unary: unary},
		Logger:      ctx.Logger(),
		Observe:     observe,
		Authorizer:  app.Authorizer(),
		Drain:       h.drain,
		Requests:    processRequests,
		Shared:      processShared,
	})
	if err != nil {
		return err
	}
	h.dp = dp
	return h.provisionHosts(ctx, app, rt, m)
}

// boundAnswerHeads gives rt a bound on each answer's head of
// upstream.DefaultMaxResponseHeaderBytes (64 KiB, the unary client's
// default) when its transport block sets no max_response_header: every
// answer through a fixed entry comes from a sandbox (execd, or the
// tenant's own server on a port), whose code can answer a head of any
// size, and Go's default of 10 MiB let each request cost that much
// (docs/dataplane.md "Bounded cost per request and per tenant").
func boundAnswerHeads(rt *reverseproxy.HTTPTransport) {
	if rt.MaxResponseHeaderSize == 0 && rt.Transport != nil {
		rt.Transport.MaxResponseHeaderBytes = upstream.DefaultMaxResponseHeaderBytes
	}
}

// unaryClient returns the RoundTripper of the unary execd calls as
// UnaryClient says, built on rt.
func (h *Handler) unaryClient(rt *reverseproxy.HTTPTransport) (http.RoundTripper, error) {
	switch h.UnaryClient {
	case "transport":
		return rt, nil
	case "", "builtin":
		if rt.Transport == nil || !slices.Contains(rt.Versions, "1.1") || slices.Contains(rt.Versions, "3") {
			if h.UnaryClient == "" {
				return rt, nil // the default yields to a transport it cannot stand beside
			}
			return nil, errors.New("unary_client builtin needs a transport with HTTP/1.1 among its versions and without HTTP/3")
		}
		t, err := upstream.New(upstream.FromHTTPTransport(rt.Transport, rt))
		if err != nil {
			return nil, err
		}
		h.unary = t
		return t, nil
	default:
		return nil, fmt.Errorf("unary_client %q: must be builtin or transport", h.UnaryClient)
	}
}

// Cleanup closes the unary client's idle connections when a reload
// replaces this configuration (Caddy's transport closes its own) and
// cleans up the host routing's reverse_proxy, which Caddy does not know of
// (provisionHosts builds it): that closes the WebSockets it tunnels, at
// once or after StreamCloseDelay, as Caddy's reverse_proxy does its own at
// a reload.
func (h *Handler) Cleanup() error {
	if h.unary != nil {
		h.unary.CloseIdleConnections()
	}
	if h.hosts != nil {
		return h.hosts.proxy.Cleanup()
	}
	return nil
}

// drains holds the drainers of configurations a reload replaced while
// streams still ran on them: the process exit drains them too.
var drains drain.Group

// setAccessLogLevel logs the access of a request whose sandbox is gone
// (SANDBOX_NOT_FOUND, SANDBOX_DELETING, SANDBOX_EXPIRED, SANDBOX_NOT_READY,
// SANDBOX_UNREACHABLE) at info level: an answer about the sandbox, which
// Caddy's access log would otherwise show at error level for its 5xx
// status (a Connect unavailable is a 503), and so is a request refused at
// its credential's own bound (GATEWAY_BUSY of max_requests_per_credential:
// the tenant's matter). The platform's own failures, the gateway's
// max_requests among them, keep Caddy's level.
func setAccessLogLevel(o dataplane.Outcome) {
	if o.Context != nil && (o.Code.SandboxGone() || o.OwnBound()) {
		caddyhttp.SetVar(o.Context, caddyhttp.LogLevelVar, "info")
	}
}

// keepTokensOutOfAccessLogs turns off the access log of requests whose
// Host names no site of the data plane's server, when that server logs
// requests by host (a site address with a host name) and has no logger
// for other hosts. Such a request never reaches the data plane (Caddy
// answers it itself), but Caddy's default access logger, outside the
// site's "log" block and its X-Access-Token filter, would record its
// headers, bearer tokens included (issue 29). A server logging every host
// to one logger (a site address without a host, as Caddyfile.example's
// ":30083") keeps its behaviour.
func keepTokensOutOfAccessLogs(ctx caddy.Context) {
	srv, ok := ctx.Context.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || srv == nil || srv.Logs == nil || srv.Logs.DefaultLoggerName != "" || len(srv.Logs.LoggerNames) == 0 {
		return
	}
	srv.Logs.SkipUnmappedHosts = true
}

// ServeHTTP serves the data plane; it never calls next.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if h.hosts != nil {
		return h.serveHost(w, r, next)
	}
	h.dp.ServeHTTP(w, r)
	return nil
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
