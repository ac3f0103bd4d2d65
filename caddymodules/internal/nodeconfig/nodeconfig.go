// Package nodeconfig is the node half of the sandgate app's configuration:
// the JSON types of its nodes and kubernetes blocks, their Caddyfile
// syntax, and their translation into the settings of Core's node side
// (core.Config) and of the Portal cluster connection (portal.Config). The
// app (caddymodules/sandgate) names these types as its own (type aliases),
// so its JSON is these structs'; only the app imports this package.
package nodeconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/sandgate/sandgate/caddymodules/internal/argcount"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/core"
	"github.com/sandgate/sandgate/nodecore/hub"
	"github.com/sandgate/sandgate/nodecore/portal"
)

// Nodes is the node connection service's configuration (spec
// node-protocol.md "Connection"). JSON:
//
//	"nodes": {
//	  "credentials": {"source": "file", "path": "/etc/sandgate/nodes.yaml"},
//	  "owner_epoch": 1,
//	  "deployment": {"generation": 2, "specification_digest": "<64 hex>", "serving_generation": 1},
//	  "hello_timeout": "15s", "idle_timeout": "35s", "online_window": "45s",
//	  "write_timeout": "10s", "response_grace": "2s", "close_grace": "1s",
//	  "heartbeat_interval": "10s", "reconnect_wait": "10s",
//	  "api": {"listen": "127.0.0.1:30087", "token_sha256": ["<64 hex>"]}
//	}
//
// Changing any of these with a reload keeps every node connection: the
// hub takes the new settings when the new config starts.
type Nodes struct {
	// CredentialsRaw is the node credential source, a module in the
	// sandgate.node_credentials namespace chosen by its "source" key
	// ("file"). Required.
	CredentialsRaw json.RawMessage `json:"credentials,omitempty" caddy:"namespace=sandgate.node_credentials inline_key=source"`

	// PresenceRaw makes several gateway replicas share node presence and
	// the owner epoch, a module in the sandgate.node_presence namespace
	// chosen by its "store" key ("kubernetes": Leases). Absent: this
	// gateway is the only replica (presence in memory, every welcome
	// carries owner_epoch).
	PresenceRaw json.RawMessage `json:"presence,omitempty" caddy:"namespace=sandgate.node_presence inline_key=store"`

	// OwnerEpoch is Core's owner epoch, sent in welcome and checked on
	// every heartbeat; > 0, default 1. Raising it (with a reload) closes
	// each connection at its next heartbeat (close code 4005) so the node
	// reconnects under the new epoch; it may not decrease while the
	// gateway runs (the reload is refused).
	OwnerEpoch int64 `json:"owner_epoch,omitempty"`

	// Deployment is advertised to generation-managing nodes in welcome and
	// heartbeat_ack: the target generation to prepare and the generation
	// to keep serving. Without it such nodes are refused (close code 4006).
	Deployment *core.Deployment `json:"deployment,omitempty"`

	// HelloTimeout: a node must send hello this soon after the upgrade.
	// Default 15s.
	HelloTimeout caddy.Duration `json:"hello_timeout,omitempty"`
	// IdleTimeout: a connection with no frame for this long is closed.
	// Default 35s.
	IdleTimeout caddy.Duration `json:"idle_timeout,omitempty"`
	// OnlineWindow: a node is online while its last heartbeat is younger.
	// Default 45s.
	OnlineWindow caddy.Duration `json:"online_window,omitempty"`
	// WriteTimeout bounds the write of one frame. Default 10s.
	WriteTimeout caddy.Duration `json:"write_timeout,omitempty"`
	// ResponseGrace is how much longer than a request's timeout_ms Core
	// waits for the response before reporting outcome unknown. Default 2s.
	ResponseGrace caddy.Duration `json:"response_grace,omitempty"`
	// CloseGrace is how long Core waits for the node's close frame after
	// sending its own. Default 1s.
	CloseGrace caddy.Duration `json:"close_grace,omitempty"`
	// HeartbeatInterval is the period the nodes send heartbeats with
	// (nodeagent's timers.heartbeat). Default 10s, the protocol's. A
	// connection whose heartbeats come faster is closed with close code
	// 4007: beyond a burst of idle_timeout/heartbeat_interval + 2
	// heartbeats (5 with the defaults) it may send one per half interval.
	HeartbeatInterval caddy.Duration `json:"heartbeat_interval,omitempty"`
	// ReconnectWait: when a node's credential is replaced (its record's
	// digest changed), Core retires the node's connection at its next
	// heartbeat (no new operation is written on it; closed with 4003 once
	// the pending ones are answered) and an operation for the node waits
	// up to this long for the node's new connection instead of being
	// refused with node_offline (docs/runbook.md "Node credentials").
	// Default 10s.
	ReconnectWait caddy.Duration `json:"reconnect_wait,omitempty"`
	// ShutdownGrace: when the gateway exits (SIGTERM, caddy stop), new
	// node connects and dispatches are refused at once, the dispatches
	// under way get up to this long to have their outcome, and then every
	// node connection is closed with 1001 so that nodes reconnect to
	// another replica at once. Default 15s. (Reloads keep the
	// connections.) With API, the requests in flight on the app's API
	// server get the same grace when it stops (at exit or in a reload
	// that replaces it).
	ShutdownGrace caddy.Duration `json:"shutdown_grace,omitempty"`

	// StateDir is the directory of Core's durable node state when this
	// gateway is the only replica: the pools' run-time deployments
	// (pools.json), the placements (placements.jsonl), and, with
	// enrolment, the enrolled nodes and used enrolment tokens
	// (enrolment.json). Created (mode 0700) when missing. Placeholders such
	// as {env.STATE_DIR} are expanded. Default: none, the state is kept in
	// memory only (it survives `caddy reload`, not a restart) and
	// enrolment is off. Not with Store "kubernetes".
	StateDir string `json:"state_dir,omitempty"`

	// Store is where that durable node state lives: "file" (the default:
	// state_dir, or memory without one) for one gateway, or "kubernetes"
	// for several replicas: NodePool, NodePlacements, NodeEnrolmentToken
	// and EnrolledNode objects (group nodes.sandgate.io) in the namespace
	// of the sandgate app's kubernetes block, which is required, with
	// only credential and token SHA-256s stored; the CRDs are
	// deploy/portal/crds/ (docs/scale-out.md "Node state"). With
	// "kubernetes" enrolment is on and state_dir is refused. Errors at
	// provision: without the kubernetes block, with state_dir, an unknown
	// value, or objects the apiserver does not let the gateway list.
	Store string `json:"store,omitempty"`

	// Releases is the release store directory (`caddy sandgate-release
	// publish --store <dir>`), whose releases pools bind generations to and
	// whose manifests and artifacts the machine API serves. Default: none
	// (no release downloads; pools bind generations by digest only).
	Releases string `json:"releases,omitempty"`

	// Pools are the node pools by name (1..63 characters of [a-z0-9-]).
	// A node belongs to the pool of its enrolment (default "default").
	// Each generation-managing node is told its pool's deployment. Replaces
	// Deployment, which is the "default" pool's deployment written the old
	// way (both for "default" is an error).
	Pools map[string]*core.Pool `json:"pools,omitempty"`

	// API, when set, has the sandgate app serve the internal node API
	// (package nodecore/api, the sandbox_node_api handler's) itself, on
	// a listener of its own with a plain net/http server outside Caddy's
	// HTTP server (see API). Absent (the default): the app serves no
	// API; a sandbox_node_api handler on a Caddy site still can, with or
	// without it.
	API *API `json:"api,omitempty"`
}

// API is the nodes block's api setting: the internal node API served by
// the sandgate app on one TCP address, outside Caddy's HTTP server (no
// TLS, access log, matchers or caddy_http_* metrics; docs/node-connect.md
// "Internal API"). JSON:
//
//	"api": {"listen": "127.0.0.1:30087", "token_sha256": ["<64 hex>"]}
//
// Caddyfile, inside the nodes block:
//
//	api <host:port> {
//		token_sha256 <64 hex> [<64 hex>...]   # repeatable; at least one
//	}
//
// A reload that keeps the address keeps serving (the new configuration
// listens beside the old one until the old one stops); one that removes
// the setting closes the listener.
type API struct {
	// Listen is the network address served: one host and one port
	// (caddy.ParseNetworkAddress syntax, network tcp, tcp4 or tcp6; no
	// port range, no Unix socket), e.g. "127.0.0.1:30087". An empty host
	// is every interface: keep the API on a private one. It must not be
	// the address of a Caddy site: the app refuses the config (in its
	// Validate, so `caddy validate` too, and again at Start) when a server
	// of the http app listens on the same port on an overlapping host
	// (SiteConflict). No scheme or path, no port 0. Placeholders such as
	// {env.POD_IP} are expanded. Required.
	Listen string `json:"listen,omitempty"`
	// TokenSHA256 are the lowercase hex SHA-256 digests of the accepted
	// API tokens, as sandbox_node_api's (package
	// caddymodules/internal/tokendigest); several allow rotation.
	// Placeholders such as {env.NODE_API_TOKEN_SHA256} are expanded. At
	// least one is required.
	TokenSHA256 []string `json:"token_sha256,omitempty"`
}

// Address parses Listen, placeholders expanded, as one TCP host and
// port. The error starts with "listen".
func (a *API) Address() (caddy.NetworkAddress, error) {
	return parseAPIAddress(caddy.NewReplacer().ReplaceAll(a.Listen, ""))
}

// parseAPIAddress parses s as one TCP host and port; the error starts
// with "listen". Refused: an empty s, a scheme or a path, a network other
// than tcp, tcp4 or tcp6, a port range, no port, and port 0.
func parseAPIAddress(s string) (caddy.NetworkAddress, error) {
	if s == "" {
		return caddy.NetworkAddress{}, fmt.Errorf("listen is required (a host:port such as 127.0.0.1:30087)")
	}
	if strings.Contains(s, "://") {
		return caddy.NetworkAddress{}, fmt.Errorf("listen %q: a host:port, without a scheme or a path", s)
	}
	na, err := caddy.ParseNetworkAddress(s)
	if err != nil {
		return na, fmt.Errorf("listen %q: %v", s, err)
	}
	switch {
	case strings.ContainsAny(na.Network, ":.[]"):
		// "127.0.0.1:30087/path": Caddy reads what precedes the slash
		// as the network.
		return na, fmt.Errorf("listen %q: a host:port, without a scheme or a path", s)
	case !isTCP(na.Network):
		return na, fmt.Errorf("listen %q: the network must be tcp, not %s", s, na.Network)
	case na.PortRangeSize() != 1:
		return na, fmt.Errorf("listen %q: must be one port, not a range", s)
	case na.StartPort == 0 && strings.HasSuffix(s, ":0"):
		return na, fmt.Errorf("listen %q: port 0 is not allowed (the API needs a port its clients know)", s)
	case na.StartPort == 0:
		return na, fmt.Errorf("listen %q: needs a port (host:port)", s)
	}
	return na, nil
}

// SiteConflict returns the first of listen (the listen addresses of one
// of Caddy's HTTP servers, placeholders expanded, as its provisioning
// leaves them) that may accept the connections meant for api, an address
// from Address: a TCP address (tcp, tcp4 or tcp6; other networks such as
// udp for HTTP/3 are not compared) whose port range holds api's port, on
// a host that overlaps api's. Hosts overlap when either is empty or an
// unspecified IP (0.0.0.0, ::: every interface), when both are the same
// IP, or when they are the same name (case-insensitive; names are not
// resolved, so "localhost" and "127.0.0.1" are not seen to overlap). An
// address that does not parse is skipped (Caddy refuses it itself). ok is
// false when none overlaps.
//
// Caddy's listeners set SO_REUSEPORT, so such a site and the API would
// both bind the address and the kernel would split the connections
// between them: the sandgate app refuses the config with it.
func SiteConflict(api caddy.NetworkAddress, listen []string) (addr string, ok bool) {
	for _, l := range listen {
		na, err := caddy.ParseNetworkAddress(l)
		if err != nil || !isTCP(na.Network) || !isTCP(api.Network) {
			continue
		}
		if api.StartPort < na.StartPort || api.StartPort > na.EndPort {
			continue
		}
		if hostsOverlap(api.Host, na.Host) {
			return l, true
		}
	}
	return "", false
}

func isTCP(network string) bool { return network == "tcp" || network == "tcp4" || network == "tcp6" }

// hostsOverlap: see SiteConflict.
func hostsOverlap(a, b string) bool {
	ipA, errA := netip.ParseAddr(a)
	ipB, errB := netip.ParseAddr(b)
	switch {
	case a == "" || b == "" || (errA == nil && ipA.IsUnspecified()) || (errB == nil && ipB.IsUnspecified()):
		return true
	case errA == nil && errB == nil:
		return ipA.Unmap().WithZone("") == ipB.Unmap().WithZone("")
	}
	return strings.EqualFold(a, b)
}

// checkDigest reports whether a token_sha256 value written without a
// placeholder is 64 lowercase hexadecimal digits (a placeholder is
// checked once expanded, at provision).
func checkDigest(v string) bool {
	return strings.Contains(v, "{") || proto.IsDigest(v)
}

// parseAPI parses the api subdirective (syntax: see API); d is on its
// name. Errors: not exactly one address, an address that is not one TCP
// host and port, a bad digest (named by its index), a digest given
// twice, any other subdirective, and a block without token_sha256.
func parseAPI(d *caddyfile.Dispenser) (*API, error) {
	var addr string
	if err := argcount.Check(d, "api", 1, 1, "<host:port>"); err != nil {
		return nil, err
	}
	d.Args(&addr)
	if !strings.Contains(addr, "{") {
		if _, err := parseAPIAddress(addr); err != nil {
			return nil, d.Errf("api: %v", err)
		}
	}
	a := &API{Listen: addr}
	for nest := d.Nesting(); d.NextBlock(nest); {
		switch d.Val() {
		case "token_sha256":
			if err := argcount.Check(d, "token_sha256", 1, -1, "<64 hex> [<64 hex>...]"); err != nil {
				return nil, err
			}
			d.NextArg()
			for {
				v := d.Val()
				if !checkDigest(v) {
					return nil, d.Errf("api: token_sha256[%d]: must be 64 lowercase hexadecimal digits", len(a.TokenSHA256))
				}
				if slices.Contains(a.TokenSHA256, v) {
					return nil, d.Errf("api: token_sha256[%d] already specified", len(a.TokenSHA256))
				}
				a.TokenSHA256 = append(a.TokenSHA256, v)
				if !d.NextArg() {
					break
				}
			}
		default:
			return nil, d.Errf("unrecognized api subdirective %q", d.Val())
		}
	}
	if len(a.TokenSHA256) == 0 {
		return nil, d.Err("api needs at least one token_sha256")
	}
	return a, nil
}

// DefaultShutdownGrace is Nodes.ShutdownGrace's default.
const DefaultShutdownGrace = 15 * time.Second

// CoreConfig is the nodes block as Core's node side takes it,
// placeholders expanded; the error names the setting. The credential
// source, presence, Portal connection, logger, metrics and Shared are the
// app's to fill in.
func (n *Nodes) CoreConfig() (core.Config, error) {
	repl := caddy.NewReplacer()
	cfg := core.Config{
		OwnerEpoch: n.OwnerEpoch, Deployment: n.Deployment, Pools: n.Pools,
		StateDir: repl.ReplaceAll(n.StateDir, ""), Store: n.Store, Releases: repl.ReplaceAll(n.Releases, ""),
		Timers: hub.Timers{
			Hello: time.Duration(n.HelloTimeout), Idle: time.Duration(n.IdleTimeout),
			Online: time.Duration(n.OnlineWindow), Write: time.Duration(n.WriteTimeout),
			ResponseGrace: time.Duration(n.ResponseGrace), CloseGrace: time.Duration(n.CloseGrace),
			Heartbeat: time.Duration(n.HeartbeatInterval), Reconnect: time.Duration(n.ReconnectWait),
		},
	}
	if err := cfg.Check(); err != nil {
		return cfg, err
	}
	for _, t := range []struct {
		name string
		d    caddy.Duration
	}{
		{"hello_timeout", n.HelloTimeout}, {"idle_timeout", n.IdleTimeout}, {"online_window", n.OnlineWindow},
		{"write_timeout", n.WriteTimeout}, {"response_grace", n.ResponseGrace}, {"close_grace", n.CloseGrace},
		{"heartbeat_interval", n.HeartbeatInterval}, {"reconnect_wait", n.ReconnectWait},
		{"shutdown_grace", n.ShutdownGrace},
	} {
		if t.d < 0 {
			return cfg, fmt.Errorf("%s must not be negative", t.name)
		}
		if time.Duration(t.d) > time.Hour {
			return cfg, fmt.Errorf("%s must be at most 1h", t.name)
		}
	}
	return cfg, nil
}

// Kubernetes is how this gateway replica reaches the Portal cluster's
// kube-apiserver (package nodecore/portal): the connection that the node
// presence (presence kubernetes) and the cluster-wide node stores share.
// JSON, under "apps" → "sandgate":
//
//	"kubernetes": {"kubeconfig": "/etc/sandgate/kubeconfig", "context": "portal",
//	  "namespace": "sandgate", "replica": "{env.POD_NAME}", "qps": 500, "burst": 1000}
//
// Every field is optional: {} is the in-cluster configuration (the pod's
// ServiceAccount), the pod's namespace, and the host name (the pod name)
// as the replica. Placeholders are expanded in every string.
//
// Caddyfile, inside the sandgate global option:
//
//	kubernetes {
//		kubeconfig <path>    # or: in_cluster (the default)
//		context <name>       # the kubeconfig context; default its current one
//		namespace <ns>       # default: the context's namespace, in cluster the pod's
//		replica <id>         # default: the host name (the pod name)
//		qps <n>              # default 500
//		burst <n>            # default 2×qps
//	}
//
// "kubernetes" alone (no block) is the in-cluster default.
type Kubernetes struct {
	// Kubeconfig is the path of a kubeconfig file. Default: the
	// in-cluster configuration.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// Context is the kubeconfig context. Default: the file's current
	// context. Only with Kubeconfig.
	Context string `json:"context,omitempty"`
	// Namespace holds the gateway's objects (node Leases, the owner epoch
	// counter, the node stores). Default: the kubeconfig context's
	// namespace, or in the cluster the pod's own.
	Namespace string `json:"namespace,omitempty"`
	// Replica is this replica's identity, the holder of its Leases: a
	// DNS-1123 subdomain, unique among the replicas. Default: the host
	// name (in a pod, the pod name).
	Replica string `json:"replica,omitempty"`
	// QPS limits the requests per second from this replica to the
	// apiserver. Default 500.
	QPS int `json:"qps,omitempty"`
	// Burst is how many requests may exceed QPS at once. Default 2×QPS.
	Burst int `json:"burst,omitempty"`
}

// PortalConfig returns the Portal cluster connection's settings,
// placeholders expanded, and the key the app shares the connection under
// across reloads: the settings and the kubeconfig file's SHA-256, so a
// reload after the file changed (a rotated credential) connects again.
// Errors: the kubeconfig file cannot be read.
func (k *Kubernetes) PortalConfig() (portal.Config, string, error) {
	repl := caddy.NewReplacer()
	cfg := portal.Config{
		Kubeconfig: repl.ReplaceAll(k.Kubeconfig, ""),
		Context:    repl.ReplaceAll(k.Context, ""),
		Namespace:  repl.ReplaceAll(k.Namespace, ""),
		Replica:    repl.ReplaceAll(k.Replica, ""),
		QPS:        float32(k.QPS),
		Burst:      k.Burst,
	}
	// The key holds the kubeconfig's digest too, so a reload after the
	// file changed (a rotated credential) connects again.
	var digest [sha256.Size]byte
	if cfg.Kubeconfig != "" {
		b, err := os.ReadFile(cfg.Kubeconfig)
		if err != nil {
			return cfg, "", fmt.Errorf("kubeconfig: %w", err)
		}
		digest = sha256.Sum256(b)
	}
	key, err := json.Marshal(struct {
		portal.Config
		Digest string
	}{cfg, hex.EncodeToString(digest[:])})
	if err != nil {
		return cfg, "", err
	}
	return cfg, string(key), nil
}

// ParseKubernetes parses the kubernetes block (syntax: see Kubernetes);
// the error carries the Caddyfile position.
func ParseKubernetes(d *caddyfile.Dispenser) (*Kubernetes, error) {
	if err := argcount.Check(d, "kubernetes", 0, 0, ""); err != nil {
		return nil, err
	}
	k := new(Kubernetes)
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		if seen[opt] {
			return nil, d.Errf("%s already specified", opt)
		}
		seen[opt] = true
		if opt == "in_cluster" {
			if err := argcount.Check(d, opt, 0, 0, ""); err != nil {
				return nil, err
			}
			continue
		}
		// The name first: a misspelt one is not a count error.
		syntax, known := map[string]string{"kubeconfig": "<path>", "context": "<name>", "namespace": "<ns>",
			"replica": "<id>", "qps": "<n>", "burst": "<n>"}[opt]
		if !known {
			return nil, d.Errf("unrecognized kubernetes subdirective %q", opt)
		}
		if err := argcount.Check(d, opt, 1, 1, syntax); err != nil {
			return nil, err
		}
		d.NextArg()
		v := d.Val()
		switch opt {
		case "kubeconfig":
			k.Kubeconfig = v
		case "context":
			k.Context = v
		case "namespace":
			k.Namespace = v
		case "replica":
			k.Replica = v
		case "qps", "burst":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return nil, d.Errf("bad %s %q: must be a positive integer", opt, v)
			}
			if opt == "qps" {
				k.QPS = n
			} else {
				k.Burst = n
			}
		}
	}
	switch {
	case seen["in_cluster"] && (seen["kubeconfig"] || seen["context"]):
		return nil, d.Err("kubernetes: in_cluster and kubeconfig/context exclude each other")
	case seen["context"] && !seen["kubeconfig"]:
		return nil, d.Err("kubernetes: context needs kubeconfig")
	}
	return k, nil
}

// ParseNodes parses the block of the nodes subdirective (syntax: see
// the sandgate app's UnmarshalCaddyfile); the error carries the
// Caddyfile position.
func ParseNodes(d *caddyfile.Dispenser) (*Nodes, error) {
	n := new(Nodes)
	seen := map[string]bool{}
	durations := map[string]*caddy.Duration{
		"hello_timeout": &n.HelloTimeout, "idle_timeout": &n.IdleTimeout, "online_window": &n.OnlineWindow,
		"write_timeout": &n.WriteTimeout, "response_grace": &n.ResponseGrace, "close_grace": &n.CloseGrace,
		"heartbeat_interval": &n.HeartbeatInterval, "reconnect_wait": &n.ReconnectWait,
		"shutdown_grace": &n.ShutdownGrace,
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		if seen[opt] {
			return nil, d.Errf("%s already specified", opt)
		}
		seen[opt] = true
		if target, ok := durations[opt]; ok {
			if err := argcount.Check(d, opt, 1, 1, "<duration>"); err != nil {
				return nil, err
			}
			d.NextArg()
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil || dur <= 0 || dur > time.Hour {
				return nil, d.Errf("bad %s %q: must be a positive duration up to 1h", opt, d.Val())
			}
			*target = caddy.Duration(dur)
			continue
		}
		switch opt {
		case "credentials":
			if err := argcount.Check(d, opt, 1, -1, "<source> ..."); err != nil {
				return nil, err
			}
			d.NextArg()
			name := d.Val()
			mod, err := caddyfile.UnmarshalModule(d, "sandgate.node_credentials."+name)
			if err != nil {
				return nil, err
			}
			n.CredentialsRaw = caddyconfig.JSONModuleObject(mod, "source", name, nil)
		case "store":
			if err := argcount.Check(d, opt, 1, 1, "file|kubernetes"); err != nil {
				return nil, err
			}
			d.NextArg()
			v := d.Val()
			if v != core.StoreFile && v != core.StoreKubernetes {
				return nil, d.Errf("bad store %q: must be file or kubernetes", v)
			}
			n.Store = v
		case "state_dir", "releases":
			if err := argcount.Check(d, opt, 1, 1, "<dir>"); err != nil {
				return nil, err
			}
			d.NextArg()
			v := d.Val()
			if opt == "state_dir" {
				n.StateDir = v
			} else {
				n.Releases = v
			}
		case "pool":
			if err := argcount.Check(d, opt, 1, 1, "<name>"); err != nil {
				return nil, err
			}
			d.NextArg()
			name := d.Val()
			if _, dup := n.Pools[name]; dup {
				return nil, d.Errf("pool %q already specified", name)
			}
			delete(seen, "pool") // one pool line per name, checked above
			p, err := parsePool(d)
			if err != nil {
				return nil, err
			}
			if n.Pools == nil {
				n.Pools = map[string]*core.Pool{}
			}
			n.Pools[name] = p
		case "presence":
			if err := argcount.Check(d, opt, 1, -1, "<source> ..."); err != nil {
				return nil, err
			}
			d.NextArg()
			name := d.Val()
			mod, err := caddyfile.UnmarshalModule(d, "sandgate.node_presence."+name)
			if err != nil {
				return nil, err
			}
			n.PresenceRaw = caddyconfig.JSONModuleObject(mod, "store", name, nil)
		case "api":
			a, err := parseAPI(d)
			if err != nil {
				return nil, err
			}
			n.API = a
		case "owner_epoch":
			if err := argcount.Check(d, opt, 1, 1, "<n>"); err != nil {
				return nil, err
			}
			d.NextArg()
			e, err := strconv.ParseInt(d.Val(), 10, 64)
			if err != nil || e <= 0 {
				return nil, d.Errf("bad owner_epoch %q: must be a positive integer", d.Val())
			}
			n.OwnerEpoch = e
		case "deployment":
			var gen, digest string
			if err := argcount.Check(d, opt, 2, 2, "<generation> <specification_digest>"); err != nil {
				return nil, err
			}
			d.Args(&gen, &digest)
			dep := &core.Deployment{SpecificationDigest: digest}
			g, err := strconv.ParseInt(gen, 10, 64)
			if err != nil || g <= 0 {
				return nil, d.Errf("bad deployment generation %q: must be a positive integer", gen)
			}
			dep.Generation = g
			if !proto.IsDigest(digest) {
				return nil, d.Errf("bad deployment specification digest: must be 64 lowercase hexadecimal digits")
			}
			for nest := d.Nesting(); d.NextBlock(nest); {
				switch d.Val() {
				case "serving_generation":
					if dep.ServingGeneration != 0 {
						return nil, d.Err("serving_generation already specified")
					}
					if err := argcount.Check(d, "serving_generation", 1, 1, "<generation>"); err != nil {
						return nil, err
					}
					d.NextArg()
					s, err := strconv.ParseInt(d.Val(), 10, 64)
					if err != nil || s <= 0 {
						return nil, d.Errf("bad serving_generation %q: must be a positive integer", d.Val())
					}
					dep.ServingGeneration = s
				default:
					return nil, d.Errf("unrecognized deployment subdirective %q", d.Val())
				}
			}
			n.Deployment = dep
		default:
			return nil, d.Errf("unrecognized nodes subdirective %q", opt)
		}
	}
	if n.CredentialsRaw == nil && n.StateDir == "" && n.Store != core.StoreKubernetes {
		return nil, d.Err("nodes: credentials is required (e.g. credentials file <path>), or a state_dir or store kubernetes for enrolled nodes")
	}
	// Provision refuses it too (for JSON configs), but only after it has
	// connected to the Portal cluster; caddy adapt and validate say it here.
	if n.Store == core.StoreKubernetes && n.StateDir != "" {
		return nil, d.Err("nodes: store kubernetes keeps the node state in the Portal cluster: remove state_dir")
	}
	return n, nil
}

// parsePool parses the block of a pool subdirective (syntax: see the
// sandgate app's UnmarshalCaddyfile).
func parsePool(d *caddyfile.Dispenser) (*core.Pool, error) {
	p := new(core.Pool)
	// positive reads the next argument as a positive integer.
	positive := func(what string) (int64, error) {
		d.NextArg()
		v, err := strconv.ParseInt(d.Val(), 10, 64)
		if err != nil || v <= 0 {
			return 0, d.Errf("bad %s %q: must be a positive integer", what, d.Val())
		}
		return v, nil
	}
	for nest := d.Nesting(); d.NextBlock(nest); {
		switch opt := d.Val(); opt {
		case "generation":
			if err := argcount.Check(d, opt, 3, 3, "<n> release <source> or <n> digest <specification_digest>"); err != nil {
				return nil, err
			}
			g, err := positive("generation")
			if err != nil {
				return nil, err
			}
			var kind, value string
			d.Args(&kind, &value)
			pg := core.PoolGeneration{Generation: g}
			switch kind {
			case "release":
				pg.Release = value
			case "digest":
				if !proto.IsDigest(value) {
					return nil, d.Errf("generation %d: the digest must be 64 lowercase hexadecimal digits", g)
				}
				pg.SpecificationDigest = value
			default:
				return nil, d.Errf("generation %d: %q is neither release nor digest", g, kind)
			}
			for _, old := range p.Generations {
				if old.Generation == g {
					return nil, d.Errf("generation %d already specified", g)
				}
			}
			p.Generations = append(p.Generations, pg)
		case "target", "serving":
			if err := argcount.Check(d, opt, 1, 1, "<n>"); err != nil {
				return nil, err
			}
			v, err := positive(opt)
			if err != nil {
				return nil, err
			}
			if opt == "target" {
				if p.Target != 0 {
					return nil, d.Err("target already specified")
				}
				p.Target = v
			} else {
				if p.Serving != 0 {
					return nil, d.Err("serving already specified")
				}
				p.Serving = v
			}
		default:
			return nil, d.Errf("unrecognized pool subdirective %q", opt)
		}
	}
	return p, nil
}
