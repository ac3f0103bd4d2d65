package nodeconnect

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sandgate/sandgate/caddymodules/internal/tokendigest"
	"github.com/sandgate/sandgate/nodecore/api"
)

// API is the "sandbox_node_api" handler: the internal node API (package
// nodecore/api) under /internal/v1/sandbox-nodes, authenticated with its own
// bearer token. It lists the nodes with their presence and last health and
// sends one provider operation to a node and waits for its outcome; every
// other path goes to the next handler. Serve it on a private listener. JSON:
//
//	{"handler": "sandbox_node_api", "token_sha256": ["<64 hex>"]}
//
// The reference of the routes and bodies is docs/node-connect.md.
type API struct {
	// TokenSHA256 are the lowercase hex SHA-256 digests of the accepted API
	// tokens; several allow rotation. Only digests are configured: the
	// tokens themselves never appear in the config. Placeholders such as
	// {env.NODE_API_TOKEN_SHA256} are expanded. At least one is required.
	TokenSHA256 []string `json:"token_sha256,omitempty"`

	handler *api.Handler
}

// CaddyModule returns the Caddy module information.
func (API) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.sandbox_node_api", New: func() caddy.Module { return new(API) }}
}

// Provision parses the token digests and finds the sandgate app's node
// hub. Errors name the bad digest by index, never its value.
func (h *API) Provision(ctx caddy.Context) error {
	tokens, err := tokendigest.Parse(h.TokenSHA256)
	if err != nil {
		return err
	}
	app, err := sandgateApp(ctx)
	if err != nil {
		return err
	}
	h.handler = app.NodeAPIHandler(tokens, ctx.Logger())
	return nil
}

// ServeHTTP serves the API's paths and passes the others on.
func (h *API) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if !api.Owns(r.URL.Path) {
		return next.ServeHTTP(w, r)
	}
	h.handler.ServeHTTP(w, r)
	return nil
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*API)(nil)
	_ caddyhttp.MiddlewareHandler = (*API)(nil)
)
