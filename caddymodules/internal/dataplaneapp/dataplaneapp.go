// Package dataplaneapp is what the data-plane handlers need of the
// "sandgate" Caddy app: the token verifier, the resource credential
// source, the sandbox authorizer, the clusters and the transport record
// the probe relay shares. The handler looks the app up through this
// interface instead of the app's type, so the data plane links nothing of
// the node side the app also configures (the import rule is in
// docs/architecture.md and is tested by the module root's wings test).
package dataplaneapp

import (
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"

	"github.com/sandgate/sandgate/gateway/authorizer"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/gateway/dataplane"
	"github.com/sandgate/sandgate/gateway/token"
)

// AppName is the sandgate app's module ID and its key under "apps" in
// JSON config.
const AppName = "sandgate"

// App is the data plane's view of the sandgate app.
type App interface {
	// Tokens returns the token verifier, nil without token keys.
	Tokens() *token.Verifier
	// Credentials returns the resource credential source, nil without one.
	Credentials() credential.Source
	// Authorizer returns the sandbox authorizer, nil when none is
	// configured.
	Authorizer() authorizer.Authorizer
	// SetDataPlaneTransport records the transport the data plane sends to
	// the fixed entries with (the first one recorded is kept); call it
	// only from a handler's Provision.
	SetDataPlaneTransport(rt http.RoundTripper)
	// Cluster returns a compute cluster by ID (dataplane.Clusters).
	dataplane.Clusters
}

// From returns the configuration's sandgate app. Errors: the app cannot
// be loaded (its own provisioning error), or the module under AppName is
// not a sandgate app.
func From(ctx caddy.Context) (App, error) {
	a, err := ctx.App(AppName)
	if err != nil {
		return nil, fmt.Errorf("getting the sandgate app: %w", err)
	}
	app, ok := a.(App)
	if !ok {
		return nil, fmt.Errorf("app %q is %T, not the sandgate app", AppName, a)
	}
	return app, nil
}
