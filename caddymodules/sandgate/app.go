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
// broken credentials file is never "lost" to a reload. The node hub lives
// in this package's own UsagePool: every config with a nodes block holds a
// reference, so a reload keeps every node connection and only the last
// config's cleanup closes them.
package sandgate

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sandgate/sandgate/caddymodules/secret"
	"github.com/sandgate/sandgate/gateway/authorizer"
	"github.com/sandgate/sandgate/gateway/credential"
	"github.com/sandgate/sandgate/gateway/dataplane"
	"github.com/sandgate/sandgate/gateway/entryprobe"
	"github.com/sandgate/sandgate/gateway/execdtoken"
	"github.com/sandgate/sandgate/gateway/portal"
	"github.com/sandgate/sandgate/gateway/token"
	"github.com/sandgate/sandgate/node/api"
	nodecredential "github.com/sandgate/sandgate/node/credential"
	"github.com/sandgate/sandgate/node/enrolment"
	"github.com/sandgate/sandgate/node/hub"
	"github.com/sandgate/sandgate/node/placement"
	"github.com/sandgate/sandgate/node/pool"
	"github.com/sandgate/sandgate/node/release"
)

func init() {
	caddy.RegisterModule(App{})
}

// AppName is the app's module ID and its key under "apps" in JSON config.
const AppName = "sandgate"

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
//	    "hello_timeout": "15s", "idle_timeout": "35s", "online_window": "45s"
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
	// sandbox_node_connect and sandbox_node_api handlers). Absent: no node
	// hub, and those handlers refuse to provision.
	Nodes *Nodes `json:"nodes,omitempty"`

	// Kubernetes is how this replica reaches the Portal cluster, whose
	// kube-apiserver several gateway replicas share their state through
	// (see Kubernetes). Absent: no Portal cluster; the gateway is the only
	// replica.
	Kubernetes *Kubernetes `json:"kubernetes,omitempty"`

	verifier    *token.Verifier
	credentials credential.Source
	authorizer  authorizer.Authorizer
	logger      *zap.Logger

	portal    *portal.Cluster // the Portal cluster, when Kubernetes is set
	portalKey string          // its key in portals; "" when not held

	hub       *hub.Hub     // the shared hub, when Nodes is set
	presence  NodePresence // several replicas: Nodes.PresenceRaw
	pooled    *pooledHub   // its pool entry
	hubHeld   bool         // this config holds a reference in hubs
	hubConfig hub.Config
	hubUndo   func() // puts back the hub settings Start replaced

	running   int32                // 1 between Start and Stop (sync/atomic; the App is copied by value in CaddyModule)
	stateDir  string               // absolute; "" without state_dir
	releases  *release.Store       // nil without a release store
	pools     *pool.Registry       // shared across reloads
	poolsKey  string               // the registry's key in registries; "" when not held
	poolSpecs map[string]pool.Spec // this config's pools
	poolsUndo func()               // puts back the pools Start replaced
	prevApp   *App                 // the running app Start replaced

	placements      placement.Store      // shared across reloads
	placementsKey   string               // its key in placementStores
	placementsHeld  bool                 // this config holds a reference
	enrolment       enrolment.Enrolments // enrolled nodes and tokens; nil without state_dir or store kubernetes
	enrolmentKey    string               // its key in enrolments; "" when not held
	kubeStoreKey    string               // store kubernetes: its key in kubeStores; "" when not held
	nodeCredentials nodecredential.Store // the operator's file merged with the enrolled nodes
	stopped         bool                 // Stop has run; guarded by currentMu

	// dataPlaneTransport is the first e2b_dataplane's transport: written
	// only while the configuration is provisioned (one goroutine), read
	// once it serves.
	dataPlaneTransport http.RoundTripper
}

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
	// Host is the Host header of every request to the fixed entry: the
	// data plane's and the probes it relays for corectl
	// (fixed_entry_probe). It must be the host of the fixed entry's
	// Ingress rules, corectl's ingress.host for this cluster, which corectl
	// checks through the relay at start (docs/deploy.md "Restricted
	// sandboxes"). A DNS name (RFC 1123 subdomain, at most 253
	// characters), optionally with ":<port>"; placeholders are expanded at
	// provision. Default: the fixed entry URL's host and port.
	Host string `json:"host,omitempty"`

	fixedEntry  *url.URL
	token       string
	tokenSecret []byte
	host        string
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: AppName, New: func() caddy.Module { return new(App) }}
}

// Provision loads the token keys, the credential source and the clusters.
// It returns an error naming the key, source or cluster that is invalid.
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
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
		if err := c.provision(repl); err != nil {
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

func (c *Cluster) provision(repl *caddy.Replacer) error {
	u, err := fixedEntryURL(repl.ReplaceAll(c.FixedEntry, ""))
	if err != nil {
		return err
	}
	c.fixedEntry = u
	if c.host, err = hostHeader(repl.ReplaceAll(c.Host, "")); err != nil {
		return err
	}
	if c.token, err = secret.Resolve(repl, "execd_access_token", c.ExecdAccessToken); err != nil {
		return err
	}
	if c.ExecdTokenSecret != "" && c.ExecdAccessToken != "" {
		return errors.New("execd_access_token and execd_token_secret exclude each other")
	}
	s, err := secret.Resolve(repl, "execd_token_secret", c.ExecdTokenSecret)
	if err != nil || s == "" {
		return err
	}
	if err := execdtoken.Check([]byte(s)); err != nil {
		return fmt.Errorf("execd_token_secret: %w", err)
	}
	c.tokenSecret = []byte(s)
	return nil
}

// hostHeader checks a cluster's host setting: "" (the fixed entry's own
// host), or a DNS-1123 subdomain with an optional port.
func hostHeader(h string) (string, error) {
	if h == "" {
		return "", nil
	}
	name, port := h, ""
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		name, port = h[:i], h[i+1:]
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return "", fmt.Errorf("host %q: the port must be 1 to 65535", h)
		}
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("host %q must be a lowercase DNS name (RFC 1123 subdomain), optionally with :<port>", h)
	}
	return h, nil
}

// fixedEntryURL parses a cluster's fixed entry: an http or https URL with
// a host and no query, fragment or user info.
func fixedEntryURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("fixed_entry must be an http:// or https:// URL with a host")
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, errors.New("fixed_entry must not have a query, fragment or user info")
	}
	return u, nil
}

// Validate checks that keys and a credential source are configured (the
// nodes block is checked by Provision).
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
	return nil
}

// Start makes this config's node settings the node hub's (a reload's new
// config takes over the running hub here, its connections untouched) and
// logs the configured clusters. The app has no goroutines of its own.
func (a *App) Start() error {
	if a.pools != nil {
		undo, err := a.pools.Configure(a.poolSpecs)
		if err != nil {
			return fmt.Errorf("nodes: %w", err)
		}
		a.poolsUndo = undo
	}
	if a.hub != nil {
		undo, err := a.hub.Apply(a.hubConfig)
		if err != nil {
			if a.poolsUndo != nil {
				a.poolsUndo()
				a.poolsUndo = nil
			}
			return fmt.Errorf("nodes: %w", err)
		}
		a.hubUndo = undo
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
		zap.Bool("nodes", a.hub != nil))
	atomic.StoreInt32(&a.running, 1)
	return nil
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
	if a.hubUndo != nil {
		a.hubUndo()
		a.hubUndo = nil
	}
	if caddy.Exiting() && a.pooled != nil {
		grace := time.Duration(a.Nodes.ShutdownGrace)
		if grace == 0 {
			grace = DefaultShutdownGrace
		}
		a.logger.Info("draining node connections", zap.Duration("shutdown_grace", grace))
		a.pooled.drain(grace, a.logger)
	}
	// A process that exits keeps its pools as they are (the state file
	// must not go back); only a failed reload is undone.
	if a.poolsUndo != nil && !caddy.Exiting() {
		a.poolsUndo()
	}
	a.poolsUndo = nil
	return nil
}

// Cleanup releases this config's references to the node hub and the
// Portal cluster connection; the hub, and every node connection, is
// closed when no config holds it any more, and so is the connection (its
// watches end).
func (a *App) Cleanup() error {
	var err error
	if a.poolsKey != "" {
		_, err = registries.Delete(a.poolsKey)
		a.poolsKey = ""
	}
	if a.placementsHeld {
		_, perr := placementStores.Delete(a.placementsKey)
		err = errors.Join(err, perr)
		a.placementsHeld = false
	}
	if a.enrolmentKey != "" {
		_, eerr := enrolments.Delete(a.enrolmentKey)
		err = errors.Join(err, eerr)
		a.enrolmentKey = ""
	}
	if a.kubeStoreKey != "" {
		_, kerr := kubeStores.Delete(a.kubeStoreKey)
		err = errors.Join(err, kerr)
		a.kubeStoreKey = ""
	}
	if a.hubHeld {
		a.hubHeld = false
		_, herr := hubs.Delete(hubKey)
		err = errors.Join(err, herr)
	}
	// Last: the hub's drain above may still release Leases through it.
	if a.portalKey != "" {
		_, perr := portals.Delete(a.portalKey)
		err = errors.Join(err, perr)
		a.portalKey = ""
	}
	return err
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
	return dataplane.Cluster{ID: id, FixedEntry: c.fixedEntry, ExecdAccessToken: c.token, ExecdTokenSecret: c.tokenSecret, Host: c.host}, true
}

// FixedEntries returns every provisioned cluster's fixed entry, the
// Host the data plane sends it (empty: the URL's) and its execd access
// token, by cluster ID, for the probe relay (fixed_entry_probe).
func (a *App) FixedEntries() map[string]entryprobe.Target {
	out := make(map[string]entryprobe.Target, len(a.Clusters))
	for id, c := range a.Clusters {
		if c != nil && c.fixedEntry != nil {
			out[id] = entryprobe.Target{FixedEntry: c.fixedEntry, Host: c.host, ExecdAccessToken: c.token, ExecdTokenSecret: c.tokenSecret}
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

// NodeHub returns the node hub, or nil when the config has no nodes block.
func (a *App) NodeHub() *hub.Hub { return a.hub }

// NodePools returns the pool registry, or nil when the config has no
// nodes block.
func (a *App) NodePools() *pool.Registry { return a.pools }

// NodeEnrolment returns the enrolled-node store, or nil without a
// state_dir or store kubernetes.
func (a *App) NodeEnrolment() enrolment.Enrolments { return a.enrolment }

// NodeCredentials returns the store that authenticates nodes (the
// operator's file merged with the enrolled nodes), or nil without a nodes
// block.
func (a *App) NodeCredentials() nodecredential.Store { return a.nodeCredentials }

// Releases returns the release store, or nil when none is configured.
func (a *App) Releases() *release.Store { return a.releases }

// NodePresence returns the shared node presence of several replicas, or
// nil (one replica).
func (a *App) NodePresence() NodePresence { return a.presence }

// NodeForwardObserver returns the metrics of the internal node API's
// forwarding to other replicas (sandgate_node_forwarded_total,
// sandgate_node_forward_duration_seconds), or nil without a nodes block.
func (a *App) NodeForwardObserver() api.ForwardObserver {
	if m, ok := a.hubConfig.Observer.(*nodeMetrics); ok && m != nil {
		return m
	}
	return nil
}

// Interface guards.
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.Validator    = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
	_ dataplane.Clusters = (*App)(nil)
)
