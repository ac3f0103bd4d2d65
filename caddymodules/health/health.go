// Package health holds the "sandgate_health" handler: the gateway's
// liveness and readiness routes for Kubernetes probes and load balancers.
package health

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sandgate/sandgate/caddymodules/internal/argcount"
	"github.com/sandgate/sandgate/caddymodules/sandgate"
)

func init() {
	caddy.RegisterModule(Handler{})
	httpcaddyfile.RegisterHandlerDirective("sandgate_health", parseCaddyfile)
	// Probes must answer before any catch-all route.
	httpcaddyfile.RegisterDirectiveOrder("sandgate_health", httpcaddyfile.Before, "respond")
}

// Paths the handler serves; every other path goes to the next handler.
const (
	LivenessPath  = "/healthz"
	ReadinessPath = "/readyz"
)

// Handler is the "sandgate_health" handler. It answers
//
//	GET /healthz   200 "ok" while the process serves HTTP (liveness)
//	GET /readyz    200 when every check passes, else 503
//
// and passes every other path on. The readiness body lists the checks,
// one per line, "[+]<check> ok" or "[-]<check> failed: <reason>", as
// Kubernetes components do:
//
//   - shutdown: the server is not shutting down (Caddy's
//     {http.shutting_down}; with the global shutdown_delay option the
//     gateway keeps serving for that long after SIGTERM while this check
//     already fails, so load balancers move away first);
//   - sandgate: the sandgate app is running (token keys, credential
//     source, clusters provisioned);
//   - nodes: with a nodes block, the node hub accepts connections and
//     dispatches (not draining);
//   - presence: with several replicas (presence kubernetes), the watch
//     of the node Leases has loaded.
//
// A method other than GET or HEAD is answered 405. JSON:
//
//	{"handler": "sandgate_health"}
type Handler struct {
	app *sandgate.App
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.sandgate_health", New: func() caddy.Module { return new(Handler) }}
}

// Provision finds the sandgate app. Errors: the app is missing.
func (h *Handler) Provision(ctx caddy.Context) error {
	a, err := ctx.App(sandgate.AppName)
	if err != nil {
		return fmt.Errorf("loading the sandgate app: %w", err)
	}
	app, ok := a.(*sandgate.App)
	if !ok {
		return fmt.Errorf("app %q is %T, not the sandgate app", sandgate.AppName, a)
	}
	h.app = app
	return nil
}

// check is one readiness check: its name and why it fails ("" passes).
type check struct {
	name, failure string
}

// ServeHTTP serves the two paths and passes the others on.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if r.URL.Path != LivenessPath && r.URL.Path != ReadinessPath {
		return next.ServeHTTP(w, r)
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
		return nil
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if r.URL.Path == LivenessPath {
		_, _ = w.Write([]byte("ok\n"))
		return nil
	}
	checks := []check{{name: "shutdown"}, {name: "sandgate"}}
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		if v, _ := repl.Get("http.shutting_down"); v == true {
			checks[0].failure = "the server is shutting down"
		}
	}
	if !h.app.Running() {
		checks[1].failure = "the sandgate app is not running"
	}
	if hub := h.app.NodeHub(); hub != nil {
		c := check{name: "nodes"}
		if !hub.Accepting() {
			c.failure = "the node hub is draining or closed"
		}
		checks = append(checks, c)
	}
	if p := h.app.NodePresence(); p != nil {
		c := check{name: "presence"}
		if !p.Synced() {
			c.failure = "the node Leases are not loaded yet"
		}
		checks = append(checks, c)
	}
	var b strings.Builder
	status := http.StatusOK
	for _, c := range checks {
		if c.failure != "" {
			status = http.StatusServiceUnavailable
			fmt.Fprintf(&b, "[-]%s failed: %s\n", c.name, c.failure)
		} else {
			fmt.Fprintf(&b, "[+]%s ok\n", c.name)
		}
	}
	if status == http.StatusOK {
		b.WriteString("readyz check passed\n")
	} else {
		b.WriteString("readyz check failed\n")
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
	return nil
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(Handler)
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return m, err
}

// UnmarshalCaddyfile sets up the handler. Syntax (no arguments, no
// block):
//
//	sandgate_health
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if err := argcount.Check(d, "sandgate_health", 0, 0, ""); err != nil {
		return err
	}
	if d.NextBlock(0) {
		return d.Err("sandgate_health takes no block")
	}
	return nil
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ caddyfile.Unmarshaler       = (*Handler)(nil)
)
