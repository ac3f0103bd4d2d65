package sandgate

import (
	"net/http"

	"github.com/sandgate/sandgate/caddymodules/internal/clusterconfig"
	"github.com/sandgate/sandgate/gateway/authorizer"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/gateway/dataplane"
	"github.com/sandgate/sandgate/gateway/entryprobe"
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

// Cluster is one compute cluster (caddymodules/internal/clusterconfig).
type Cluster = clusterconfig.Cluster

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
	if !ok || c == nil || !c.Provisioned() {
		return dataplane.Cluster{}, false
	}
	return c.Dataplane(id), true
}

// FixedEntries returns every provisioned cluster's fixed entry, the
// Host the data plane sends it (empty: the URL's) and its execd access
// token, by cluster ID, for the probe relay (fixed_entry_probe).
func (a *App) FixedEntries() map[string]entryprobe.Target {
	out := make(map[string]entryprobe.Target, len(a.Clusters))
	for id, c := range a.Clusters {
		if c != nil && c.Provisioned() {
			out[id] = c.Target()
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
