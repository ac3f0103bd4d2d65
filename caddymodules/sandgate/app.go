// Package sandgate is the Caddy app "sandgate": the gateway state that the
// data-plane handler and the node-connect handlers share and that must
// outlive a config reload: token verification keys, the resource
// credential source, the compute cluster registry, and the node hub (the
// live sandbox-node connections and their presence).
//
// Caddy reloads by provisioning a new module tree before the old one is
// cleaned up. Keys and clusters are cheap to re-read from config; the
// credential sources keep their state (a file's last good version and its
// watcher, an HTTP source's cache) in a caddy.UsagePool keyed by their
// configuration, so a reload hands the same source to the new config and a
// broken credentials file is never "lost" to a reload.
//
// The app configures; it composes nothing itself. Its data-plane half
// (dataplane.go) provisions the keys, the credential source, the
// authorizer and the clusters. Its node half (nodes.go) turns the nodes
// block into a core.Config and opens Core's node side with package
// nodecore/core, which composes the hub, the pools, the placements, the
// enrolment, the releases and the node credentials; the hub and the state
// stores live in this package's UsagePool (core.Shared), so a reload
// keeps every node connection and only the last config's cleanup closes
// them. The nodes and kubernetes blocks' types and Caddyfile syntax are
// package caddymodules/internal/nodeconfig's.
package sandgate

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/sandgate/sandgate/caddymodules/internal/dataplaneapp"
	"github.com/sandgate/sandgate/gateway/authorizer"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/gateway/dataplane"
	"github.com/sandgate/sandgate/gateway/token"
	"github.com/sandgate/sandgate/internal/buildinfo"
	"github.com/sandgate/sandgate/internal/gcpolicy"
	"github.com/sandgate/sandgate/nodecore/core"
	"github.com/sandgate/sandgate/nodecore/portal"
)

func init() {
	caddy.RegisterModule(App{})
}

// AppName is the app's module ID and its key under "apps" in JSON config.
const AppName = dataplaneapp.AppName

// DefaultTokenLeeway is the clock-skew allowance for token exp/nbf.
const DefaultTokenLeeway = 5 * time.Second

// App is the "sandgate" app. JSON:
//
//	"apps": {"sandgate": {
//	  "token_keys": [{"kid": "k1", "algorithm": "HS256", "file": "/etc/sandgate/k1.key"}],
//	  "token_leeway": "5s",
//	  "credentials": {"source": "file", "path": "/etc/sandgate/credentials.yaml"},
//	  "clusters": {"cluster-a": {"fixed_entry": "http://10.0.0.5:80", "host": "sandbox.example.com", "execd_access_token": "{env.EXECD_TOKEN}"}},
//	  "nodes": {
//	    "credentials": {"source": "file", "path": "/etc/sandgate/nodes.yaml"},
//	    "owner_epoch": 1,
//	    "deployment": {"generation": 2, "specification_digest": "<64 hex>", "serving_generation": 1},
//	    "hello_timeout": "15s", "idle_timeout": "35s", "online_window": "45s",
//	    "api": {"listen": "127.0.0.1:30087", "token_sha256": ["<64 hex>"]}
//	  },
//	  "kubernetes": {"namespace": "sandgate", "replica": "{env.POD_NAME}"}
//	}}
type App struct {
	// TokenKeys verify X-Access-Token JWTs, selected by the token's "kid"
	// header. At least one is required. Several keys allow rotation: add
	// the new key, switch the signer, remove the old key once its tokens
	// have expired.
	TokenKeys []TokenKey `json:"token_keys,omitempty"`

	// TokenLeeway is the allowed clock skew when checking a token's exp and
	// nbf, from 0 to 5m. Default 5s.
	TokenLeeway caddy.Duration `json:"token_leeway,omitempty"`

	// CredentialsRaw is the resource credential source, a module in the
	// sandgate.credentials namespace chosen by its "source" key ("file" or
	// "http"). Required.
	CredentialsRaw json.RawMessage `json:"credentials,omitempty" caddy:"namespace=sandgate.credentials inline_key=source"`

	// AuthorizerRaw is the sandbox authorizer, a module in the
	// sandgate.authorizer namespace chosen by its "source" key ("http").
	// Optional: without it the data plane serves every request whose
	// token, credential and cluster pass.
	AuthorizerRaw json.RawMessage `json:"authorizer,omitempty" caddy:"namespace=sandgate.authorizer inline_key=source"`

	// Clusters are the compute clusters by cluster ID, the ClusterID of
	// resource credentials.
	Clusters map[string]*Cluster `json:"clusters,omitempty"`

	// Nodes configures the sandbox-node connection service (the
	// sandbox_node_connect and sandbox_node_api handlers, and with its
	// api setting the app's own listener of the internal node API).
	// Absent: no node hub, and those handlers refuse to provision.
	Nodes *Nodes `json:"nodes,omitempty"`

	// Kubernetes is how this replica reaches the Portal cluster, whose
	// kube-apiserver several gateway replicas share their state through
	// (see Kubernetes). Absent: no Portal cluster; the gateway is the only
	// replica.
	Kubernetes *Kubernetes `json:"kubernetes,omitempty"`

	ctx         caddy.Context // from Provision: Start reads the http app's servers
	verifier    *token.Verifier
	credentials credential.Source
	authorizer  authorizer.Authorizer
	logger      *zap.Logger

	portal    *portal.Cluster // the Portal cluster, when Kubernetes is set
	portalKey string          // its key in portals; "" when not held

	core     *core.Core     // Core's node side, when Nodes is set
	nodeAPI  *nodeAPIServer // the app's internal node API server, when Nodes.API is set
	presence NodePresence   // several replicas: Nodes.PresenceRaw
	prevApp  *App           // the running app Start replaced
	running  int32          // 1 between Start and Stop (sync/atomic; the App is copied by value in CaddyModule)
	stopped  bool           // Stop has run; guarded by currentMu

	// dataPlaneTransport is the first e2b_dataplane's transport: written
	// only while the configuration is provisioned (one goroutine), read
	// once it serves.
	dataPlaneTransport http.RoundTripper
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: AppName, New: func() caddy.Module { return new(App) }}
}

// Provision loads the token keys, the credential source and the clusters.
// It returns an error naming the key, source or cluster that is invalid.
func (a *App) Provision(ctx caddy.Context) error {
	a.ctx = ctx
	a.logger = ctx.Logger()
	if err := buildinfo.Register(ctx.GetMetricsRegistry(), "gateway"); err != nil {
		return err
	}
	repl := caddy.NewReplacer()
	leeway := time.Duration(a.TokenLeeway)
	if a.TokenLeeway == 0 {
		leeway = DefaultTokenLeeway
	}
	keys := make([]token.Key, 0, len(a.TokenKeys))
	for i, k := range a.TokenKeys {
		key, err := token.LoadKey(k.KID, k.Algorithm, repl.ReplaceAll(k.File, ""))
		if err != nil {
			return fmt.Errorf("token key %d (kid %q): %w", i, k.KID, err)
		}
		keys = append(keys, key)
	}
	if len(keys) > 0 {
		v, err := token.NewVerifier(keys, leeway)
		if err != nil {
			return fmt.Errorf("token keys: %w", err)
		}
		a.verifier = v
	}
	if a.CredentialsRaw != nil {
		mod, err := ctx.LoadModule(a, "CredentialsRaw")
		if err != nil {
			return fmt.Errorf("loading the credential source: %w", err)
		}
		src, ok := mod.(credential.Source)
		if !ok {
			return fmt.Errorf("credential source module %T does not implement credential.Source", mod)
		}
		a.credentials = src
	}
	if a.AuthorizerRaw != nil {
		mod, err := ctx.LoadModule(a, "AuthorizerRaw")
		if err != nil {
			return fmt.Errorf("loading the sandbox authorizer: %w", err)
		}
		az, ok := mod.(authorizer.Authorizer)
		if !ok {
			return fmt.Errorf("authorizer module %T does not implement authorizer.Authorizer", mod)
		}
		a.authorizer = az
	}
	for id, c := range a.Clusters {
		if c == nil {
			return fmt.Errorf("cluster %q: empty definition", id)
		}
		if err := c.Provision(repl); err != nil {
			return fmt.Errorf("cluster %q: %w", id, err)
		}
	}
	if a.Kubernetes != nil {
		if err := a.provisionKubernetes(); err != nil {
			return fmt.Errorf("kubernetes: %w", err)
		}
	}
	if a.Nodes != nil {
		if err := a.provisionNodes(ctx); err != nil {
			return fmt.Errorf("nodes: %w", err)
		}
	}
	return nil
}

// Validate checks that keys and a credential source are configured (the
// nodes block is checked by Provision), and that no server of the
// config's http app listens on the nodes block's api address (see
// siteConflict; Start checks it again). Caddy calls it right after
// Provision, for `caddy run` and `caddy reload` as for `caddy validate`
// and `caddy adapt --validate`.
func (a *App) Validate() error {
	if a.verifier == nil {
		return errors.New("sandgate: at least one token key is required")
	}
	if a.credentials == nil {
		return errors.New("sandgate: a credential source is required")
	}
	if a.TokenLeeway < 0 || time.Duration(a.TokenLeeway) > 5*time.Minute {
		return errors.New("sandgate: token_leeway must be between 0 and 5m")
	}
	if a.nodeAPI != nil {
		if err := a.nodeAPI.validateSites(a.ctx); err != nil {
			return fmt.Errorf("nodes: %w", err)
		}
	}
	return nil
}

// Start makes this config's node settings the node hub's (a reload's new
// config takes over the running hub here, its connections untouched),
// then, with the nodes block's api, listens on its address and serves the
// internal node API there (the only goroutines of the app's own; the
// error of a listen that fails names the address), and logs the
// configured clusters. It refuses to start, before listening, when a
// server of this config's http app listens on the api address (the same
// port on an overlapping host, nodeconfig.SiteConflict): the error names
// the server and its address. (Validate refuses it first; Start checks
// again with the http app as it has been provisioned.)
func (a *App) Start() error {
	gcPolicy.Do(func() { // once per process: package internal/gcpolicy (GOGC under Caddy's memory limit)
		a.logger.Info("garbage-collection policy", zap.Stringer("gc", gcpolicy.Apply()))
	})
	if a.core != nil {
		if err := a.core.Start(); err != nil {
			return fmt.Errorf("nodes: %w", err)
		}
	}
	if a.nodeAPI != nil {
		if err := a.nodeAPI.checkSites(a.ctx); err != nil {
			a.core.Stop(false, 0) // puts back what core.Start replaced
			return fmt.Errorf("nodes: %w", err)
		}
		if err := a.nodeAPI.start(); err != nil {
			a.core.Stop(false, 0) // puts back what core.Start replaced
			return fmt.Errorf("nodes: %w", err)
		}
	}
	currentMu.Lock()
	a.prevApp, current = current, a
	currentMu.Unlock()
	ids := make([]string, 0, len(a.Clusters))
	for id := range a.Clusters {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	a.logger.Info("sandgate app started", zap.Strings("clusters", ids), zap.Int("token_keys", len(a.TokenKeys)),
		zap.Bool("nodes", a.core != nil))
	atomic.StoreInt32(&a.running, 1)
	return nil
}

var gcPolicy sync.Once

// current is the running sandgate app, the one whose Start ran last and
// was not undone; the admin routes act on it. Guarded by currentMu.
var (
	currentMu sync.Mutex
	current   *App
)

// Current returns the running sandgate app (the one whose Start ran last
// and was not undone), nil when none runs; the admin routes
// (admin.api.sandgate) act on it.
func Current() *App {
	currentMu.Lock()
	defer currentMu.Unlock()
	return current
}

// Running reports whether the app has started and not stopped.
func (a *App) Running() bool { return atomic.LoadInt32(&a.running) == 1 }

// Stop puts back the node hub settings this config's Start replaced when
// no later config has replaced them since: that is the case of a reload
// that failed after this app started, while the previous config keeps
// running. (A config stopped because a newer one took over changes
// nothing.) The credential sources and the hub itself are released by
// Cleanup.
//
// When the process is exiting, Stop also begins draining the node hub
// (Nodes.ShutdownGrace): no new node connects or dispatches, the
// dispatches under way finish, then every node connection is closed with
// 1001; Cleanup waits for that drain.
//
// With the nodes block's api, Stop first closes that listener (a reload
// whose config keeps the address goes on serving from the new config's;
// a process that exits keeps it serving for the http app's
// shutdown_delay first) and shuts its server down: the requests in flight
// get up to Nodes.ShutdownGrace for their answer, then their connections
// are closed. When the process is exiting Cleanup waits for that, and for
// the shutdowns of the servers of configs a reload replaced (Stop returns
// at once, so that the http app's Stop, which Caddy calls before or after
// it, spends its shutdown_delay alongside the API's); a reload does not
// wait.
func (a *App) Stop() error {
	atomic.StoreInt32(&a.running, 0)
	currentMu.Lock()
	a.stopped = true
	// A reload that failed after this app started hands the admin routes
	// back to the app still running; a stopped predecessor is no one.
	if current == a {
		current = a.prevApp
		if current != nil && current.stopped {
			current = nil
		}
	}
	a.prevApp = nil
	currentMu.Unlock()
	if a.core != nil {
		grace := time.Duration(a.Nodes.ShutdownGrace)
		if grace == 0 {
			grace = DefaultShutdownGrace
		}
		if a.nodeAPI != nil {
			a.nodeAPI.stop(caddy.Exiting(), grace)
		}
		if caddy.Exiting() {
			a.logger.Info("draining node connections", zap.Duration("shutdown_grace", grace))
		}
		a.core.Stop(caddy.Exiting(), grace)
	}
	return nil
}

// Cleanup releases this config's references to the node hub and the
// Portal cluster connection; the hub, and every node connection, is
// closed when no config holds it any more, and so is the connection (its
// watches end). When the process is exiting it first waits for the
// internal node API servers' shutdowns (Stop).
func (a *App) Cleanup() error {
	if caddy.Exiting() {
		// The API servers' delays and answers in flight, this config's
		// and those of configs a reload replaced, before the process
		// exits.
		nodeAPIShutdowns.Wait()
	}
	var err error
	if a.core != nil {
		err = a.core.Close() // a second Close releases nothing
	}
	// Last: the hub's drain above may still release Leases through it.
	if a.portalKey != "" {
		_, perr := portals.Delete(a.portalKey)
		err = errors.Join(err, perr)
		a.portalKey = ""
	}
	return err
}

// Interface guards.
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.Validator    = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
	_ dataplane.Clusters = (*App)(nil)
	_ dataplaneapp.App   = (*App)(nil)
)
