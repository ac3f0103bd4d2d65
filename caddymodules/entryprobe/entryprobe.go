// Package entryprobe is the Caddy adapter of the fixed-entry probe relay
// (package gateway/entryprobe): the "fixed_entry_probe" handler, through
// which corectl sends its readiness pings and probe-source discovery dials
// so they leave the gateway exactly as the data plane's requests do (same
// transport, same source address, same Host).
package entryprobe

import (
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sandgate/sandgate/caddymodules/internal/tokendigest"
	"github.com/sandgate/sandgate/caddymodules/sandgate"
	"github.com/sandgate/sandgate/gateway/entryprobe"
)

func init() {
	caddy.RegisterModule(Relay{})
	httpcaddyfile.RegisterHandlerDirective("fixed_entry_probe", parseRelay)
	// It serves its own paths and passes every other request on, like
	// sandbox_node_api, so it goes right before respond.
	httpcaddyfile.RegisterDirectiveOrder("fixed_entry_probe", httpcaddyfile.Before, "respond")
}

// Relay is the "fixed_entry_probe" handler: the probe relay under
// /internal/v1/fixed-entries (entryprobe.Handler), authenticated with its
// own bearer token. GET lists the sandgate app's clusters with their fixed
// entry and the Host the data plane sends; POST <id>/probe sends one
// readiness ping or probe-source echo to that cluster's fixed entry with
// the first e2b_dataplane handler's transport and Host. Every other path
// goes to the next handler. Serve it on a private listener reachable from
// corectl (in deploy/: the internal port 30086). JSON:
//
//	{"handler": "fixed_entry_probe", "token_sha256": ["<64 hex>"]}
//
// The configuration needs an e2b_dataplane handler (in any server): until
// one is provisioned the probes answer 503 no_data_plane.
type Relay struct {
	// TokenSHA256 are the lowercase hex SHA-256 digests of the accepted
	// relay tokens (corectl's -probe-relay-token-file); several allow
	// rotation. Placeholders are expanded. At least one is required.
	TokenSHA256 []string `json:"token_sha256,omitempty"`

	handler *entryprobe.Handler
}

// CaddyModule returns the Caddy module information.
func (Relay) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.fixed_entry_probe", New: func() caddy.Module { return new(Relay) }}
}

// Provision parses the token digests and wires the relay to the sandgate
// app's clusters and data-plane transport. Errors name a bad digest by
// index, never its value.
func (h *Relay) Provision(ctx caddy.Context) error {
	tokens, err := tokendigest.Parse(h.TokenSHA256)
	if err != nil {
		return err
	}
	a, err := ctx.App(sandgate.AppName)
	if err != nil {
		return fmt.Errorf("loading the sandgate app: %w", err)
	}
	app, ok := a.(*sandgate.App)
	if !ok {
		return fmt.Errorf("app %q is %T, not the sandgate app", sandgate.AppName, a)
	}
	h.handler = &entryprobe.Handler{Tokens: tokens, Targets: app.FixedEntries, Transport: app.DataPlaneTransport, Logger: ctx.Logger()}
	return nil
}

// ServeHTTP serves the relay's paths and passes the others on.
func (h *Relay) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if !entryprobe.Owns(r.URL.Path) {
		return next.ServeHTTP(w, r)
	}
	h.handler.ServeHTTP(w, r)
	return nil
}

func parseRelay(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	r := new(Relay)
	err := r.UnmarshalCaddyfile(h.Dispenser)
	return r, err
}

// UnmarshalCaddyfile sets up the handler. Syntax:
//
//	fixed_entry_probe [<matcher>] {
//		token_sha256 <sha256 hex of a relay token>
//	}
//
// token_sha256 is required and may repeat (token rotation).
func (h *Relay) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	tokens, err := tokendigest.UnmarshalBlock(d, "fixed_entry_probe")
	h.TokenSHA256 = append(h.TokenSHA256, tokens...)
	return err
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Relay)(nil)
	_ caddyhttp.MiddlewareHandler = (*Relay)(nil)
	_ caddyfile.Unmarshaler       = (*Relay)(nil)
)
