// Package nodeconnect holds the Caddy modules of the sandbox-node
// connection service (spec node-protocol.md): the handler nodes dial
// (http.handlers.sandbox_node_connect), the internal node API
// (http.handlers.sandbox_node_api) and the node credential file source
// (sandgate.node_credentials.file).
//
// They are thin adapters. The connections, presence and dispatch live in
// package nodecore/hub, whose one Hub is held by the "sandgate" app across
// config reloads: a handler only routes a request to the app's hub, so a
// reload that replaces the handlers (or any other part of the config)
// leaves every node connection running. The API's HTTP shape is package
// nodecore/api; node credentials are package credential.
package nodeconnect

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sandgate/sandgate/caddymodules/sandgate"
	"github.com/sandgate/sandgate/nodecore/hub"
	"github.com/sandgate/sandgate/nodecore/machineserver"
)

func init() {
	caddy.RegisterModule(Connect{})
	caddy.RegisterModule(API{})
	caddy.RegisterModule(CredentialFile{})
}

// Connect is the "sandbox_node_connect" handler: Core's end of the
// sandbox-node WebSocket, GET /api/v1/sandbox-node/connect?node_id=<uuid>
// with "Authorization: Bearer <node credential>", and the machine API
// beside it (package nodecore/machineserver: POST and GET
// /api/v1/sandbox-node/enrol, GET /api/v1/sandbox-node/config, GET
// /api/v1/sandbox-node/releases/…; docs/node-machine-api.md). It passes
// every other path to the next handler, so it can share a site with other
// handlers. It has no settings of its own: the node credentials,
// owner epoch, deployment and timers are the sandgate app's nodes block.
//
// Before the upgrade it answers 401 for a missing or rejected credential
// (with WWW-Authenticate), 409 while a connection of the node is
// connecting, live or closing, 400 for a malformed node_id, 405 for
// another method and 503 while the service is closing. After the upgrade
// the connection belongs to the app's hub; see package nodecore/hub for the
// protocol and close codes. JSON:
//
//	{"handler": "sandbox_node_connect"}
type Connect struct {
	hub     *hub.Hub
	machine *machineserver.Handler
}

// CaddyModule returns the Caddy module information.
func (Connect) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.sandbox_node_connect", New: func() caddy.Module { return new(Connect) }}
}

// Provision finds the node hub of the sandgate app. It fails when the app
// has no nodes block.
func (h *Connect) Provision(ctx caddy.Context) error {
	app, err := sandgateApp(ctx)
	if err != nil {
		return err
	}
	h.hub = app.NodeHub()
	m := &machineserver.Handler{Credentials: app.NodeCredentials(), Pools: app.NodePools(), Releases: app.Releases(),
		Logger: ctx.Logger()}
	if e := app.NodeEnrolment(); e != nil {
		m.Enrolment = e
	}
	h.machine = m
	return nil
}

// sandgateApp returns the sandgate app, which must have a nodes block.
func sandgateApp(ctx caddy.Context) (*sandgate.App, error) {
	a, err := ctx.App(sandgate.AppName)
	if err != nil {
		return nil, fmt.Errorf("loading the sandgate app: %w", err)
	}
	app, ok := a.(*sandgate.App)
	if !ok {
		return nil, fmt.Errorf("app %q is %T, not the sandgate app", sandgate.AppName, a)
	}
	if app.NodeHub() == nil {
		return nil, errors.New("the sandgate app has no nodes block: add `nodes { credentials file <path> }` to the sandgate global option")
	}
	return app, nil
}

// appHub returns the sandgate app's node hub.
func appHub(ctx caddy.Context) (*hub.Hub, error) {
	app, err := sandgateApp(ctx)
	if err != nil {
		return nil, err
	}
	return app.NodeHub(), nil
}

// ServeHTTP serves the connect path and passes other paths on. Refusals
// before the upgrade are returned as caddyhttp errors with their status.
func (h *Connect) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if machineserver.Owns(r.URL.Path) {
		h.machine.ServeHTTP(w, r)
		return nil
	}
	if r.URL.Path != hub.ConnectPath {
		return next.ServeHTTP(w, r)
	}
	if err := h.hub.Connect(w, r); err != nil {
		status := http.StatusInternalServerError
		var he *hub.HTTPError
		if errors.As(err, &he) {
			status = he.Status
		}
		return caddyhttp.Error(status, err)
	}
	return nil
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Connect)(nil)
	_ caddyhttp.MiddlewareHandler = (*Connect)(nil)
)
