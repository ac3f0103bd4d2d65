//go:build !sandgate_plainapi

package nodeconnect

import (
	"net/http"

	"go.uber.org/zap"
)

// servePlainAPI does nothing in the gateway as built for use; the
// measurement build's version (build tag sandgate_plainapi, plainapi.go)
// also serves the internal node API outside Caddy's server.
func servePlainAPI(http.Handler, *zap.Logger) {}
