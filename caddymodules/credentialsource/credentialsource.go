// Package credentialsource holds the Caddy modules of the
// sandgate.credentials namespace: where the gateway re-reads the resource
// credential a token names (spec §3.3: "re-read the
// resource credential by CredentialID, require the credential to still be
// enabled").
//
// The sources themselves are plain Go in package credential. Each module
// keeps its source in a package-level caddy.UsagePool keyed by its
// configuration, so a config reload reuses the running source (with its
// last good file version, its watcher and its cache) instead of starting
// over.
package credentialsource

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/sandgate/sandgate/caddymodules/internal/argcount"
	"github.com/sandgate/sandgate/caddymodules/internal/endpoint"
	"github.com/sandgate/sandgate/caddymodules/internal/secret"
	"github.com/sandgate/sandgate/caddymodules/internal/sourcemetrics"
	"github.com/sandgate/sandgate/gateway/credential"
)

func init() {
	caddy.RegisterModule(File{})
	caddy.RegisterModule(HTTP{})
}

// pool holds the running sources across config reloads.
var pool = caddy.NewUsagePool()

// pooled wraps a source so the pool can close it when the last config
// using it is cleaned up.
type pooled struct {
	credential.Source
	close func() error
}

// Destruct closes the source; called by the pool.
func (p pooled) Destruct() error {
	if p.close == nil {
		return nil
	}
	return p.close()
}

// File is the "file" credential source: a JSON or YAML file of resource
// credentials, reloaded when it changes. A broken file keeps the last good
// version (and logs why); a credential that is disabled or removed in the
// file is refused within a second of the change, and every credential
// once the file has been missing for 5 s (filewatch.DefaultMissingGrace;
// replacing the file atomically never makes it missing). Its state is
// exported as metrics (package sourcemetrics, kind "resource"): alert on
// sandgate_credential_source_stale_seconds.
//
// File format:
//
//	credentials:
//	  - id: cred-a
//	    enabled: true
//	    resourceSpecId: spec-small
//	    resourceGroupId: group-1
//	    projectNamespace: team-a
//	    clusterId: cluster-a
type File struct {
	// Path is the credentials file. Relative paths are taken from the
	// working directory. Placeholders such as {env.CRED_FILE} are expanded.
	// Required.
	Path string `json:"path"`

	key string
	src credential.Source
}

// CaddyModule returns the Caddy module information.
func (File) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "sandgate.credentials.file", New: func() caddy.Module { return new(File) }}
}

// Provision opens the file, or reuses the source a previous config opened.
// It returns the file's load error on first open.
func (f *File) Provision(ctx caddy.Context) error {
	p := caddy.NewReplacer().ReplaceAll(f.Path, "")
	if p == "" {
		return fmt.Errorf("a credentials file path is required")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return err
	}
	logger := ctx.Logger()
	f.key = "file:" + abs
	sourcemetrics.Register(ctx.GetMetricsRegistry())
	v, _, err := pool.LoadOrNew(f.key, func() (caddy.Destructor, error) {
		src, err := credential.OpenFile(abs, logger)
		if err != nil {
			return nil, err
		}
		unexport := sourcemetrics.Add("resource", src)
		return pooled{Source: src, close: func() error { unexport(); return src.Close() }}, nil
	})
	if err != nil {
		return err
	}
	f.src = v.(pooled).Source
	return nil
}

// Lookup implements credential.Source.
func (f *File) Lookup(ctx context.Context, id string) (credential.Credential, error) {
	return f.src.Lookup(ctx, id)
}

// Cleanup releases this config's use of the source.
func (f *File) Cleanup() error {
	if f.key == "" {
		return nil
	}
	_, err := pool.Delete(f.key)
	return err
}

// UnmarshalCaddyfile sets up the source. Syntax:
//
//	credentials file <path>
func (f *File) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // source name
	if err := argcount.Check(d, "credentials file", 1, 1, "<path>"); err != nil {
		return err
	}
	d.NextArg()
	f.Path = d.Val()
	if d.NextBlock(0) {
		return d.Err("credentials file takes no block")
	}
	return nil
}

// HTTP is the "http" credential source: it asks an HTTP endpoint (a
// Portal) for one credential by ID, so the Portal stays the source of
// truth. GET <url with {id} replaced> answers 200 with the credential JSON
// object, or 404 when there is none. Answers are cached for CacheTTL; a
// failed request is not cached and is refused as CREDENTIAL_UNAVAILABLE.
type HTTP struct {
	// URL is the endpoint; the placeholder {id} is replaced by the
	// path-escaped credential ID, e.g.
	// "https://portal.internal/api/v1/credentials/{id}". Required. User
	// info (user:password@) is refused: it would put a secret in the
	// configuration; send it in a header with a placeholder. So is a
	// literal value of a query parameter whose name says it is a
	// credential (token=, api_key=, …): write it as {env.NAME} or
	// {file./path}, resolved at provision time.
	URL string `json:"url"`
	// Settings: headers (e.g. Authorization for the Portal, as
	// "Bearer {env.PORTAL_TOKEN}"), cache_ttl (how long an answer — found,
	// disabled or not found — is reused, up to 1m; a disabled credential
	// is refused at most cache_ttl after the Portal changes; default 1s)
	// and timeout (one request; default 2s).
	endpoint.Settings

	key string
	src credential.Source
}

// CaddyModule returns the Caddy module information.
func (HTTP) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "sandgate.credentials.http", New: func() caddy.Module { return new(HTTP) }}
}

// Provision builds the source, or reuses the one a previous config with the
// same settings built (and its cache).
func (h *HTTP) Provision(ctx caddy.Context) error {
	repl := caddy.NewReplacer()
	cfg := credential.HTTPConfig{
		// ReplaceKnown: {id} is the source's own placeholder, not Caddy's;
		// ReplaceAll would erase it.
		URL:      repl.ReplaceKnown(h.URL, ""),
		Header:   http.Header{},
		CacheTTL: time.Duration(h.CacheTTL),
		Timeout:  time.Duration(h.Timeout),
	}
	if err := secret.CheckURLUserInfo("credentials http", cfg.URL); err != nil {
		return err
	}
	if err := checkURLQuery(h.URL); err != nil {
		return err
	}
	hdr, err := h.ResolveHeaders(repl, "credentials http")
	if err != nil {
		return err
	}
	cfg.Header = hdr
	h.key = fmt.Sprintf("http:%s|%v|%d|%d", cfg.URL, cfg.Header, cfg.CacheTTL, cfg.Timeout)
	v, _, err := pool.LoadOrNew(h.key, func() (caddy.Destructor, error) {
		src, err := credential.NewHTTP(cfg)
		if err != nil {
			return nil, err
		}
		return pooled{Source: src}, nil
	})
	if err != nil {
		return err
	}
	h.src = v.(pooled).Source
	ctx.Logger().Debug("credential source ready", zap.String("source", "http"))
	return nil
}

// Lookup implements credential.Source.
func (h *HTTP) Lookup(ctx context.Context, id string) (credential.Credential, error) {
	return h.src.Lookup(ctx, id)
}

// Cleanup releases this config's use of the source.
func (h *HTTP) Cleanup() error {
	if h.key == "" {
		return nil
	}
	_, err := pool.Delete(h.key)
	return err
}

// checkURLQuery refuses a literal value for a query parameter whose name
// says it carries a credential (api_key=…, token=…: secret.SensitiveHeader
// applied to the name) in the configured URL raw.
func checkURLQuery(raw string) error {
	_, query, ok := strings.Cut(raw, "?")
	if !ok {
		return nil
	}
	for _, kv := range strings.Split(query, "&") {
		name, value, _ := strings.Cut(kv, "=")
		if secret.SensitiveHeader(name) {
			if err := secret.Check("credentials http URL query parameter "+name, value); err != nil {
				return err
			}
		}
	}
	return nil
}

// UnmarshalCaddyfile sets up the source. Syntax:
//
//	credentials http <url> {
//		header <name> <value>
//		cache_ttl <duration>
//		timeout <duration>
//	}
//
// header may repeat. The value of a header that carries a credential
// (Authorization, …) must hold an {env.NAME} or {file./path} placeholder,
// e.g. header Authorization "Bearer {env.PORTAL_TOKEN}"; a literal or a
// {$VAR} (expanded while adapting) is refused, so the secret never lands
// in the adapted JSON.
func (h *HTTP) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // source name
	if err := argcount.Check(d, "credentials http", 1, 1, "<url>"); err != nil {
		return err
	}
	d.NextArg()
	h.URL = d.Val()
	if err := secret.CheckURLUserInfo("credentials http", h.URL); err != nil {
		return d.Err(err.Error())
	}
	if err := checkURLQuery(h.URL); err != nil {
		return d.Err(err.Error())
	}
	for d.NextBlock(0) {
		ok, err := h.UnmarshalBlock(d)
		if err != nil {
			return err
		}
		if !ok {
			return d.Errf("unrecognized credentials http subdirective %q", d.Val())
		}
	}
	return nil
}

// Interface guards.
var (
	_ caddy.Provisioner     = (*File)(nil)
	_ caddy.CleanerUpper    = (*File)(nil)
	_ caddyfile.Unmarshaler = (*File)(nil)
	_ credential.Source     = (*File)(nil)
	_ caddy.Provisioner     = (*HTTP)(nil)
	_ caddy.CleanerUpper    = (*HTTP)(nil)
	_ caddyfile.Unmarshaler = (*HTTP)(nil)
	_ credential.Source     = (*HTTP)(nil)
)
