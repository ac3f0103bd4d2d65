package nodeconnect

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sandgate/sandgate/caddymodules/internal/argcount"
	"github.com/sandgate/sandgate/caddymodules/internal/tokendigest"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("sandbox_node_connect", parseConnect)
	httpcaddyfile.RegisterHandlerDirective("sandbox_node_api", parseAPI)
	// Both handlers serve their own paths and pass every other request
	// on, so they go early among the terminal handlers: right before
	// respond (and so before a catch-all respond, metrics, e2b_dataplane
	// and reverse_proxy of the same site).
	httpcaddyfile.RegisterDirectiveOrder("sandbox_node_connect", httpcaddyfile.Before, "respond")
	httpcaddyfile.RegisterDirectiveOrder("sandbox_node_api", httpcaddyfile.Before, "respond")
}

func parseConnect(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	c := new(Connect)
	err := c.UnmarshalCaddyfile(h.Dispenser)
	return c, err
}

func parseAPI(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	a := new(API)
	err := a.UnmarshalCaddyfile(h.Dispenser)
	return a, err
}

// UnmarshalCaddyfile sets up the handler. Syntax (no arguments, no block;
// the settings are the sandgate app's nodes block):
//
//	sandbox_node_connect [<matcher>]
func (h *Connect) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if err := argcount.Check(d, "sandbox_node_connect", 0, 0, ""); err != nil {
		return err
	}
	if d.NextBlock(0) {
		return d.Err("sandbox_node_connect takes no block: its settings are the nodes block of the sandgate global option")
	}
	return nil
}

// UnmarshalCaddyfile sets up the handler. Syntax:
//
//	sandbox_node_api [<matcher>] {
//		token_sha256 <sha256 hex of an API token>
//	}
//
// token_sha256 is required and may repeat (token rotation).
func (h *API) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	tokens, err := tokendigest.UnmarshalBlock(d, "sandbox_node_api")
	h.TokenSHA256 = append(h.TokenSHA256, tokens...)
	return err
}

// Interface guards.
var (
	_ caddyfile.Unmarshaler = (*Connect)(nil)
	_ caddyfile.Unmarshaler = (*API)(nil)
)
