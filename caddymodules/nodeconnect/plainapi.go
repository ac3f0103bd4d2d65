//go:build sandgate_plainapi

package nodeconnect

import (
	"net"
	"net/http"
	"os"
	"sync"

	"go.uber.org/zap"
)

// plainAPIOnce starts the plain server once per process.
var plainAPIOnce sync.Once

// servePlainAPI is part of a measurement build only (`go run
// ./hack/buildgateway -tags sandgate_plainapi -o bin/caddy-plainapi`):
// with SANDGATE_PLAIN_NODE_API=<loopback host:port> in the gateway's
// environment, the first sandbox_node_api handler provisioned also serves
// the internal node API on that address from a plain net/http server,
// outside Caddy's HTTP server, so that `hack/nodeload -api-addr` measures
// what Caddy's server adds to the hub's round trip (docs/benchmarks.md
// "Issue 33: the internal node API outside Caddy's server"). That server
// has no TLS, access log or Caddy metrics, keeps the first configuration's
// handler across reloads and is never stopped: it is not a way to run the
// gateway. An address that is not a loopback IP and port is refused
// (logged, nothing served).
func servePlainAPI(h http.Handler, logger *zap.Logger) {
	addr := os.Getenv("SANDGATE_PLAIN_NODE_API")
	if addr == "" {
		return
	}
	plainAPIOnce.Do(func() {
		host, _, err := net.SplitHostPort(addr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			logger.Error("SANDGATE_PLAIN_NODE_API must be a loopback IP and port; not served", zap.String("address", addr))
			return
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			logger.Error("SANDGATE_PLAIN_NODE_API: not served", zap.Error(err))
			return
		}
		logger.Warn("measurement build: the internal node API is also served outside Caddy's server", zap.String("address", addr))
		go func() { _ = http.Serve(ln, h) }()
	})
}
