package sandgate

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/caddyserver/caddy/v2"

	"github.com/sandgate/sandgate/caddymodules/internal/secret"
	"github.com/sandgate/sandgate/gateway/authorizer"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/gateway/dataplane"
	"github.com/sandgate/sandgate/gateway/entryprobe"
	"github.com/sandgate/sandgate/gateway/execdtoken"
	"github.com/sandgate/sandgate/gateway/token"
)

// The data-plane half of the app: token keys, clusters, and what the
// e2b_dataplane and fixed_entry_probe handlers read of it.

// TokenKey is one token verification key.
type TokenKey struct {
	// KID is the key ID the token's "kid" header names. Required.
	KID string `json:"kid"`
	// Algorithm is the only JWT algorithm accepted with this key: HS256,
	// HS384, HS512, EdDSA, RS256/384/512, PS256/384/512 or ES256/384/512.
	// Required; "none" is refused.
	Algorithm string `json:"algorithm"`
	// File is the key file: the HMAC secret (at least 32 bytes), or a PEM
	// public or private key for the asymmetric algorithms. Placeholders such
	// as {env.KEY_DIR} are expanded. Required.
	File string `json:"file"`
}

// Cluster is one compute cluster.
type Cluster struct {
	// FixedEntry is the cluster's fixed entry: an http or https URL whose
	// host leads to the cluster's OpenSandbox Ingress in URI mode. Requests
	// go to <fixed_entry>/<sandboxID>/44772/<execd path>. Required.
	FixedEntry string `json:"fixed_entry"`
	// ExecdAccessToken, when set, is sent to execd as X-EXECD-ACCESS-TOKEN.
	// It is a secret, so it must be an {env.NAME} or {file./path}
	// placeholder, resolved at provision time (a placeholder that resolves
	// to nothing is an error); a literal value is refused (secret.Check),
	// because the configuration is served by GET /config/ and saved to
	// autosave.json. Default: none (OpenSandbox's Kubernetes deployments run
	// execd without a token, docs/wire-facts.md §X1.1).
	ExecdAccessToken string `json:"execd_access_token,omitempty"`
	// ExecdTokenSecret, when set (instead of ExecdAccessToken), is the
	// cluster secret each sandbox's execd token is derived from:
	// execdtoken.Derive(secret, sandboxID), the value the control plane
	// gives the sandbox's execd as EXECD_ACCESS_TOKEN, so no two sandboxes
	// share a token and no sandbox sees the secret. A placeholder like
	// ExecdAccessToken, resolving to at least 32 bytes. Default: none.
	ExecdTokenSecret string `json:"execd_token_secret,omitempty"`
	// ExtraExecdTokenSecrets are further secrets like ExecdTokenSecret,
	// held during a rotation (docs/runbook.md "Execd token secret"): the
	// sandboxes created under the old secret and those created under the
	// new one run at once, and each sandbox is sent the token its execd
	// accepts (execdtoken.Chooser; ExecdTokenSecret's is tried first). In
	// the Caddyfile, the second and later execd_token_secret lines. At
	// most execdtoken.MaxSecrets-1; each a placeholder of at least 32
	// bytes. Default: none.
	ExtraExecdTokenSecrets []string `json:"extra_execd_token_secrets,omitempty"`
	// Host is the Host header of every request to the fixed entry: the
	// data plane's and the probes it relays for corectl
	// (fixed_entry_probe). It must be the host of the fixed entry's
	// Ingress rules, corectl's ingress.host for this cluster, which corectl
	// checks through the relay at start (docs/deploy.md "Restricted
	// sandboxes"). A DNS name (RFC 1123 subdomain, at most 253
	// characters), optionally with ":<port>"; placeholders are expanded at
	// provision. Default: the fixed entry URL's host and port.
	Host string `json:"host,omitempty"`

	fixedEntry   *url.URL
	token        string
	tokenSecrets [][]byte
	host         string
}

func (c *Cluster) provision(repl *caddy.Replacer) error {
	u, err := dataplane.ParseFixedEntry(repl.ReplaceAll(c.FixedEntry, ""))
	if err != nil {
		return err
	}
	c.fixedEntry = u
	if c.host, err = dataplane.CheckHost(repl.ReplaceAll(c.Host, "")); err != nil {
		return err
	}
	if c.token, err = secret.Resolve(repl, "execd_access_token", c.ExecdAccessToken); err != nil {
		return err
	}
	if c.ExecdTokenSecret != "" && c.ExecdAccessToken != "" {
		return errors.New("execd_access_token and execd_token_secret exclude each other")
	}
	if len(c.ExtraExecdTokenSecrets) > 0 && c.ExecdTokenSecret == "" {
		return errors.New("extra_execd_token_secrets needs execd_token_secret")
	}
	if 1+len(c.ExtraExecdTokenSecrets) > execdtoken.MaxSecrets {
		return fmt.Errorf("at most %d execd token secrets per cluster", execdtoken.MaxSecrets)
	}
	c.tokenSecrets = nil
	for i, v := range append([]string{c.ExecdTokenSecret}, c.ExtraExecdTokenSecrets...) {
		name := "execd_token_secret"
		if i > 0 {
			name = fmt.Sprintf("extra_execd_token_secrets[%d]", i-1)
		}
		s, err := secret.Resolve(repl, name, v)
		if err != nil || s == "" {
			return err
		}
		if err := execdtoken.Check([]byte(s)); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		c.tokenSecrets = append(c.tokenSecrets, []byte(s))
	}
	return nil
}

// Tokens returns the token verifier.
func (a *App) Tokens() *token.Verifier { return a.verifier }

// Credentials returns the resource credential source.
func (a *App) Credentials() credential.Source { return a.credentials }

// Authorizer returns the sandbox authorizer, nil when none is configured.
func (a *App) Authorizer() authorizer.Authorizer { return a.authorizer }

// Cluster returns the cluster with the given ID; it implements
// dataplane.Clusters.
func (a *App) Cluster(id string) (dataplane.Cluster, bool) {
	c, ok := a.Clusters[id]
	if !ok || c == nil || c.fixedEntry == nil {
		return dataplane.Cluster{}, false
	}
	return dataplane.Cluster{ID: id, FixedEntry: c.fixedEntry, ExecdAccessToken: c.token, ExecdTokenSecrets: c.tokenSecrets, Host: c.host}, true
}

// FixedEntries returns every provisioned cluster's fixed entry, the
// Host the data plane sends it (empty: the URL's) and its execd access
// token, by cluster ID, for the probe relay (fixed_entry_probe).
func (a *App) FixedEntries() map[string]entryprobe.Target {
	out := make(map[string]entryprobe.Target, len(a.Clusters))
	for id, c := range a.Clusters {
		if c != nil && c.fixedEntry != nil {
			out[id] = entryprobe.Target{FixedEntry: c.fixedEntry, Host: c.host, ExecdAccessToken: c.token, ExecdTokenSecrets: c.tokenSecrets}
		}
	}
	return out
}

// SetDataPlaneTransport records the transport an e2b_dataplane handler of
// this configuration sends to the fixed entries with (the first one
// recorded is kept), so the probe relay sends corectl's probes exactly as
// the data plane sends its requests. Call it only from a handler's
// Provision.
func (a *App) SetDataPlaneTransport(rt http.RoundTripper) {
	if a.dataPlaneTransport == nil {
		a.dataPlaneTransport = rt
	}
}

// DataPlaneTransport returns the transport SetDataPlaneTransport recorded,
// nil when this configuration has no e2b_dataplane (yet: handlers are
// provisioned in configuration order).
func (a *App) DataPlaneTransport() http.RoundTripper {
	return a.dataPlaneTransport
}
