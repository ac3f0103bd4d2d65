package sandgate

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/sandgate/sandgate/caddymodules/internal/nodeconfig"
	"github.com/sandgate/sandgate/caddymodules/internal/tokendigest"
	"github.com/sandgate/sandgate/nodecore/api"
)

// NodeAPI is the nodes block's api setting (nodeconfig.API, whose JSON
// it is): the internal node API served by the app on a listener of its
// own.
type NodeAPI = nodeconfig.API

// NodeAPIHandler returns the internal node API (package nodecore/api)
// over this config's node hub, accepting the API tokens of the given
// SHA-256 digests and logging refusals to logger; with several replicas
// (the nodes block's presence) it forwards to the replica holding a node,
// with the presence's peer tokens, and reports the forwarding to the node
// metrics. It returns nil when the config has no nodes block. The
// sandbox_node_api handler and the app's own listener (the nodes block's
// api) are both built here.
func (a *App) NodeAPIHandler(tokens [][sha256.Size]byte, logger *zap.Logger) *api.Handler {
	if a.core == nil {
		return nil
	}
	h := &api.Handler{Hub: a.core.Hub(), Tokens: tokens, Logger: logger}
	if p := a.presence; p != nil {
		h.Peers = p
		h.PeerToken, h.PeerTokens = p.PeerTokens()
		h.Observer = a.core.Metrics() // sandgate_node_forwarded_total, sandgate_node_forward_duration_seconds
	}
	return h
}

// nodeAPIServer is the app's own server of the internal node API: built
// at Provision, listening from Start to Stop.
type nodeAPIServer struct {
	addr    caddy.NetworkAddress
	handler http.Handler
	logger  *zap.Logger
	// answered counts each answer by its status
	// (sandgate_node_api_requests_total).
	answered func(status int)

	ln  net.Listener // from Start, under the connection limit; closed once by Stop (onceCloseListener)
	srv *http.Server

	// shutdownDelay is the http app's shutdown_delay, read at Start
	// (checkSites): how long an exiting process keeps the listener open
	// after Stop, as Caddy keeps its sites'; siteAddrs are that app's
	// listen addresses (sitesListening).
	shutdownDelay time.Duration
	siteAddrs     []caddy.NetworkAddress
}

// provisionNodeAPI checks the nodes block's api setting and builds its
// handler. The error names the field, and a bad digest by its index only.
func (a *App) provisionNodeAPI(cfg *NodeAPI) error {
	addr, err := cfg.Address()
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	tokens, err := tokendigest.Parse(cfg.TokenSHA256)
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	logger := a.logger.Named("node_api")
	a.nodeAPI = &nodeAPIServer{addr: addr, logger: logger, handler: a.NodeAPIHandler(tokens, logger), answered: a.core.Metrics().APIAnswered}
	return nil
}

// checkSites refuses, with siteConflict, an api address where a server
// of ctx's http app listens, and takes that app's shutdown_delay and
// listen addresses for stop (sitesListening). No http app: nil. ctx must
// be the config's, its apps all provisioned (Start).
func (s *nodeAPIServer) checkSites(ctx caddy.Context) error {
	httpApp := configuredHTTPApp(ctx)
	if httpApp == nil {
		return nil // no site to collide with
	}
	s.shutdownDelay = time.Duration(httpApp.ShutdownDelay)
	for _, srv := range httpApp.Servers {
		for _, l := range srv.Listen {
			if na, err := caddy.ParseNetworkAddress(l); err == nil {
				s.siteAddrs = append(s.siteAddrs, na.Expand()...)
			}
		}
	}
	return siteConflict(s.addr, httpApp)
}

// validateSites is checkSites' refusal for the app's Validate, so that
// `caddy validate` and `caddy adapt --validate` report it too: it loads
// ctx's http app if it is configured and not loaded yet (Caddy provisions
// each app once, whichever asks first), and reads nothing into s. An http
// app that fails to load is left for Caddy to report as its own error.
func (s *nodeAPIServer) validateSites(ctx caddy.Context) error {
	httpApp := configuredHTTPApp(ctx)
	if httpApp == nil {
		return nil
	}
	return siteConflict(s.addr, httpApp)
}

// configuredHTTPApp returns ctx's http app, loading it if it is configured
// and not loaded yet, or nil when the config has none or it fails to load
// (Caddy reports that failure as the http app's own error).
func configuredHTTPApp(ctx caddy.Context) *caddyhttp.App {
	app, err := ctx.AppIfConfigured("http")
	if err != nil {
		return nil
	}
	httpApp, _ := app.(*caddyhttp.App)
	return httpApp
}

// siteConflict returns an error naming the server and the address when a
// server of httpApp (in the servers' name order) listens where the API at
// addr would (nodeconfig.SiteConflict): with SO_REUSEPORT both would bind
// it and the kernel would split the connections between them. The listen
// addresses' placeholders are expanded as the http app's Provision
// expands them, since httpApp may still be provisioning (its handlers
// load this app): one that does not expand is skipped, left to that app.
func siteConflict(addr caddy.NetworkAddress, httpApp *caddyhttp.App) error {
	names := make([]string, 0, len(httpApp.Servers))
	for name := range httpApp.Servers {
		names = append(names, name)
	}
	sort.Strings(names)
	repl := caddy.NewReplacer()
	for _, name := range names {
		var listen []string
		for _, l := range httpApp.Servers[name].Listen {
			if out, err := repl.ReplaceOrErr(l, true, true); err == nil {
				listen = append(listen, out)
			}
		}
		if l, found := nodeconfig.SiteConflict(addr, listen); found {
			return fmt.Errorf("api: listen %s: the http app's server %q listens on %s, the same port on an overlapping host "+
				"(both would bind it and split its connections); give the API a port of its own", addr, name, l)
		}
	}
	return nil
}

// start listens with Caddy's listener (SO_REUSEPORT: a reload's new
// config listens beside the old one until the old one stops) and serves
// the API alone (api.NewServer: other paths 404, a refused request's
// connection closed) within api.DefaultServerLimits (headers within 10 s
// and 64 KiB, the whole request within 1 min, each answer within 1 min,
// 5 min idle, 4096 connections; the handler's wait for an operation's
// outcome is not bounded by them).
func (s *nodeAPIServer) start() error {
	l, err := s.addr.Listen(context.Background(), 0, net.ListenConfig{})
	if err != nil {
		return fmt.Errorf("api: listen %s: %w", s.addr, err)
	}
	ln, ok := l.(net.Listener)
	if !ok {
		if c, isCloser := l.(interface{ Close() error }); isCloser {
			_ = c.Close()
		}
		return fmt.Errorf("api: listen %s: got a %T, not a stream listener", s.addr, l)
	}
	// Caddy's listener counts each Close: closed once below the limit,
	// which closes what it wraps at each Close.
	s.ln = api.DefaultServerLimits.Listener(&onceCloseListener{Listener: ln})
	errorLog, err := zap.NewStdLogAt(s.logger, zap.WarnLevel)
	if err != nil {
		_ = s.ln.Close()
		return err
	}
	s.srv = api.NewServer(s.handler, api.DefaultServerLimits, errorLog, s.answered)
	go func() {
		// stop closes the listener before the server's Shutdown: Serve
		// then returns the listener's net.ErrClosed, not ErrServerClosed.
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			s.logger.Error("the internal node API server stopped", zap.Error(err))
		}
	}()
	s.logger.Info("serving the internal node API outside Caddy's HTTP server", zap.String("address", ln.Addr().String()))
	return nil
}

// stop closes the listener (a connection to the address is refused from
// then on, unless a newer config listens there too) and begins shutting
// the server down: the requests in flight get up to grace for their
// answer, then every connection is closed (nodeAPIShutdowns counts it
// until then). A reload closes the listener at once; a process that exits
// keeps it open, serving, for the http app's shutdown_delay first, as
// Caddy keeps its sites' listeners (unless the http app has stopped
// already: sitesListening), so that callers reach the replica while the
// endpoints that name it are being withdrawn (a Kubernetes Service's take
// a few seconds), instead of being refused.
func (s *nodeAPIServer) stop(exiting bool, grace time.Duration) {
	if s.srv == nil {
		return
	}
	delay := time.Duration(0)
	if exiting && s.sitesListening() {
		delay = s.shutdownDelay
	}
	if delay <= 0 {
		s.closeListener()
	} else {
		s.logger.Info("closing the internal node API listener after the shutdown delay", zap.Duration("shutdown_delay", delay))
	}
	nodeAPIShutdowns.Add(1)
	go func() {
		defer nodeAPIShutdowns.Done()
		if delay > 0 {
			time.Sleep(delay) // the listener serves meanwhile: nothing to wait for but the time
			s.closeListener()
		}
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			s.logger.Warn("internal node API requests still in flight after the grace; closing their connections",
				zap.Duration("shutdown_grace", grace))
		}
		_ = s.srv.Close()
	}()
}

// sitesListening reports whether a listener of the http app's servers
// is still open in Caddy's listener pool. Caddy stops its apps one after
// the other in no fixed order: when the http app stopped first, its
// shutdown_delay has been spent already and its listeners are closed, so
// the API's listener closes at once; otherwise its delay runs alongside
// the one the http app is about to spend.
func (s *nodeAPIServer) sitesListening() bool {
	for _, a := range s.siteAddrs {
		if caddy.ListenerUsage(a.Network, a.JoinHostPort(0)) > 0 {
			return true
		}
	}
	return false
}

func (s *nodeAPIServer) closeListener() {
	if err := s.ln.Close(); err != nil {
		s.logger.Warn("closing the internal node API listener", zap.Error(err))
	}
}

// nodeAPIShutdowns counts the app API servers' shutdowns under way, this
// config's and those a reload began and did not wait for: a process that
// exits waits for them all (each is bounded by its shutdown_grace).
var nodeAPIShutdowns sync.WaitGroup

// onceCloseListener closes its listener once: Stop closes it before the
// server's Shutdown does, and Caddy's listener counts each Close as a
// release of the address.
type onceCloseListener struct {
	net.Listener
	once sync.Once
	err  error
}

// Close closes the listener the first time and returns that result.
func (l *onceCloseListener) Close() error {
	l.once.Do(func() { l.err = l.Listener.Close() })
	return l.err
}
