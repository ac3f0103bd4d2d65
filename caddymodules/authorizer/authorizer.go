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
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/sandgate/sandgate/caddymodules/internal/argcount"
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
	// BearerTokenFile names a file of corectl's internal tokens, one a
	// line (corectl's -internal-token-file format); the first is sent as
	// Authorization: Bearer. corectl accepts every line, so one file
	// (one Secret) serves a rotation: "old, new" then "new, old" then
	// "new" (docs/runbook.md). Read when the gateway provisions; excludes
	// an Authorization header.
	BearerTokenFile string `json:"bearer_token_file,omitempty"`

	a *authorizer.HTTP
}

// CaddyModule returns the Caddy module information.
func (HTTP) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "sandgate.authorizer.http", New: func() caddy.Module { return new(HTTP) }}
}

// Provision builds the authorizer. It fails on a bad URL, a literal
// secret header, or a cache_ttl or timeout out of range.
func (h *HTTP) Provision(ctx caddy.Context) error {
	repl := caddy.NewReplacer()
	raw := repl.ReplaceAll(h.URL, "")
	if err := secret.CheckURLUserInfo("authorizer http", raw); err != nil {
		return err
	}
	hdr, err := h.ResolveHeaders(repl, "authorizer http")
	if err != nil {
		return err
	}
	if h.BearerTokenFile != "" {
		if hdr.Get("Authorization") != "" {
			return fmt.Errorf("authorizer http: bearer_token_file and an Authorization header exclude each other")
		}
		tok, err := firstToken(repl.ReplaceAll(h.BearerTokenFile, ""))
		if err != nil {
			return fmt.Errorf("authorizer http: bearer_token_file: %w", err)
		}
		hdr.Set("Authorization", "Bearer "+tok)
	}
	a, err := authorizer.NewHTTP(authorizer.HTTPConfig{BaseURL: raw, Header: hdr,
		CacheTTL: time.Duration(h.CacheTTL), Timeout: time.Duration(h.Timeout),
		Observe: registerMetrics(ctx.GetMetricsRegistry()).observe})
	if err != nil {
		return err
	}
	h.a = a
	return nil
}

// MaxTokenFileSize bounds the bearer_token_file, in bytes (4 KiB, as
// corectl's -internal-token-file).
const MaxTokenFileSize = 4 << 10

// firstToken reads the token file at path (at most MaxTokenFileSize) and
// returns its first non-blank line without a trailing CR: at least 32
// bytes, no spaces. Errors never contain the file's content.
func firstToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxTokenFileSize+1))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > MaxTokenFileSize {
		return "", fmt.Errorf("%s is larger than %d bytes", path, MaxTokenFileSize)
	}
	for _, line := range strings.Split(string(b), "\n") {
		tok := strings.TrimSuffix(line, "\r")
		if tok == "" {
			continue
		}
		if len(tok) < 32 || strings.ContainsAny(tok, " \t\r") {
			return "", fmt.Errorf("%s: the first token must be at least 32 bytes without spaces", path)
		}
		return tok, nil
	}
	return "", fmt.Errorf("%s holds no token", path)
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
//		bearer_token_file <path>
//		cache_ttl <duration>
//		timeout <duration>
//	}
//
// header may repeat; a header carrying a credential (Authorization, …)
// must hold an {env.NAME} or {file./path} placeholder.
func (h *HTTP) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // authorizer name
	if err := argcount.Check(d, "authorizer http", 1, 1, "<corectl base URL>"); err != nil {
		return err
	}
	d.NextArg()
	h.URL = d.Val()
	if err := secret.CheckURLUserInfo("authorizer http", h.URL); err != nil {
		return d.Err(err.Error())
	}
	for d.NextBlock(0) {
		if d.Val() == "bearer_token_file" {
			if h.BearerTokenFile != "" {
				return d.Err("bearer_token_file already specified")
			}
			if err := argcount.Check(d, "bearer_token_file", 1, 1, "<path>"); err != nil {
				return err
			}
			d.NextArg()
			h.BearerTokenFile = d.Val()
			continue
		}
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
