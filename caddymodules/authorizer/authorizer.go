// Package authorizer holds the Caddy modules of the sandgate.authorizer
// namespace: the sandbox authorizer the data plane asks last, before a
// request is served (spec §3.3, the ProviderAuthorizer; plain Go in
// gateway/authorizer). Configured in the sandgate app:
//
//	sandgate {
//		authorizer http http://corectl.corectl-system:8090 {
//			header Authorization "Bearer {file./run/secrets/corectl-internal}"
//		}
//	}
//
// Without an authorizer the data plane serves every request whose token,
// credential and cluster pass (the behaviour before the authorizer).
package authorizer

import (
	"context"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/sandgate/sandgate/caddymodules/internal/endpoint"
	"github.com/sandgate/sandgate/caddymodules/internal/secret"
	"github.com/sandgate/sandgate/gateway/authorizer"
)

func init() {
	caddy.RegisterModule(HTTP{})
}

// HTTP is the "http" authorizer, module sandgate.authorizer.http: it asks
// corectl's internal authorization endpoint (GET <url>/internal/v1/authorize)
// whether the token's credential may still reach the token's sandbox, and
// caches each answer for at most cache_ttl (default and maximum 1s). A
// deleted, deleting, expired or another credential's sandbox is refused
// within about a second of the change (SANDBOX_NOT_FOUND,
// SANDBOX_DELETING, SANDBOX_EXPIRED); when corectl cannot answer the
// request is refused (AUTHORIZER_UNAVAILABLE).
type HTTP struct {
	// URL is corectl's API base URL, e.g.
	// "http://corectl.corectl-system:8090". Required; no user info.
	URL string `json:"url"`
	// Settings: headers (Authorization: "Bearer {env.NAME}" or
	// "{file./path}" holding corectl's -internal-token-file secret),
	// cache_ttl (default and maximum 1s) and timeout (default 2s).
	endpoint.Settings

	a *authorizer.HTTP
}

// CaddyModule returns the Caddy module information.
func (HTTP) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "sandgate.authorizer.http", New: func() caddy.Module { return new(HTTP) }}
}

// Provision builds the authorizer. It fails on a bad URL, a literal
// secret header, or a cache_ttl or timeout out of range.
func (h *HTTP) Provision(caddy.Context) error {
	repl := caddy.NewReplacer()
	raw := repl.ReplaceAll(h.URL, "")
	if err := secret.CheckURLUserInfo("authorizer http", raw); err != nil {
		return err
	}
	hdr, err := h.ResolveHeaders(repl, "authorizer http")
	if err != nil {
		return err
	}
	a, err := authorizer.NewHTTP(authorizer.HTTPConfig{BaseURL: raw, Header: hdr,
		CacheTTL: time.Duration(h.CacheTTL), Timeout: time.Duration(h.Timeout)})
	if err != nil {
		return err
	}
	h.a = a
	return nil
}

// Authorize implements authorizer.Authorizer.
func (h *HTTP) Authorize(ctx context.Context, credentialID, sandboxID string) (authorizer.Decision, error) {
	return h.a.Authorize(ctx, credentialID, sandboxID)
}

// Locate implements authorizer.Locator (a sandbox by its ID alone, for
// the host routing's port requests).
func (h *HTTP) Locate(ctx context.Context, sandboxID string) (authorizer.Decision, error) {
	return h.a.Locate(ctx, sandboxID)
}

// Recheck implements authorizer.Rechecker (an answer without the cache,
// asked when a command stream breaks).
func (h *HTTP) Recheck(ctx context.Context, credentialID, sandboxID string) (authorizer.Decision, error) {
	return h.a.Recheck(ctx, credentialID, sandboxID)
}

// UnmarshalCaddyfile sets up the authorizer. Syntax:
//
//	authorizer http <corectl base URL> {
//		header <name> <value>
//		cache_ttl <duration>
//		timeout <duration>
//	}
//
// header may repeat; a header carrying a credential (Authorization, …)
// must hold an {env.NAME} or {file./path} placeholder.
func (h *HTTP) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // authorizer name
	if !d.NextArg() {
		return d.ArgErr()
	}
	h.URL = d.Val()
	if d.NextArg() {
		return d.ArgErr()
	}
	if err := secret.CheckURLUserInfo("authorizer http", h.URL); err != nil {
		return d.Err(err.Error())
	}
	for d.NextBlock(0) {
		ok, err := h.UnmarshalBlock(d)
		if err != nil {
			return err
		}
		if !ok {
			return d.Errf("unrecognized authorizer http subdirective %q", d.Val())
		}
	}
	return nil
}

// Interface guards.
var (
	_ caddy.Provisioner     = (*HTTP)(nil)
	_ caddyfile.Unmarshaler = (*HTTP)(nil)
	_ authorizer.Rechecker  = (*HTTP)(nil)
	_ authorizer.Locator    = (*HTTP)(nil)
)
