package sandgate

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"

	"github.com/sandgate/sandgate/caddymodules/internal/argcount"
	"github.com/sandgate/sandgate/caddymodules/internal/clusterconfig"
	"github.com/sandgate/sandgate/caddymodules/internal/nodeconfig"
)

func init() {
	httpcaddyfile.RegisterGlobalOption(AppName, parseGlobalOption)
}

// parseGlobalOption sets up the sandgate app from the global option block.
func parseGlobalOption(d *caddyfile.Dispenser, existing any) (any, error) {
	if existing != nil {
		d.Next() // the option name, so the error carries its file and line
		return nil, d.Err("the sandgate global option may appear only once")
	}
	app := new(App)
	if err := app.UnmarshalCaddyfile(d); err != nil {
		return nil, err
	}
	return httpcaddyfile.App{Name: AppName, Value: caddyconfig.JSON(app, nil)}, nil
}

// UnmarshalCaddyfile sets up the app from Caddyfile tokens. Syntax (a
// global option):
//
//	sandgate {
//		token_key <kid> <algorithm> <file>
//		token_leeway <duration>
//		credentials <source> ...
//		authorizer <source> ...
//		cluster <id> <fixed_entry> {
//			execd_access_token <{env.NAME} or {file./path}>
//			execd_token_secret <{env.NAME} or {file./path}>   # may repeat (rotation)
//			host <name[:port]>
//		}
//		nodes {
//			credentials <source> ...
//			owner_epoch <n>
//			deployment <generation> <specification_digest> {
//				serving_generation <generation>
//			}
//			hello_timeout <duration>
//			idle_timeout <duration>
//			online_window <duration>
//			write_timeout <duration>
//			response_grace <duration>
//			close_grace <duration>
//			heartbeat_interval <duration>
//			reconnect_wait <duration>
//			shutdown_grace <duration>
//			state_dir <dir>
//			store file | kubernetes
//			releases <dir>
//			pool <name> {
//				generation <n> release <source>
//				generation <n> digest <specification_digest>
//				target <n>
//				serving <n>
//			}
//			presence <store> ...
//			api <host:port> {
//				token_sha256 <64 hex> [<64 hex>...]
//			}
//		}
//		kubernetes {
//			kubeconfig <path> | in_cluster
//			context <name>
//			namespace <ns>
//			replica <id>
//			qps <n>
//			burst <n>
//		}
//	}
//
// token_key may repeat (one per kid); cluster may repeat (one per ID).
// credentials takes a module of the sandgate.credentials namespace and its
// own syntax, e.g. "credentials file <path>" or "credentials http <url> {…}".
// authorizer (optional) takes a module of the sandgate.authorizer
// namespace, e.g. "authorizer http <corectl URL> {…}".
// The nodes block configures the sandbox-node connection service (see
// Nodes): its credentials take a module of the sandgate.node_credentials
// namespace, e.g. "credentials file <path>"; every other subdirective is
// optional and takes the default of the spec. pool may repeat (one per
// name); inside it generation may repeat (one per generation number).
// store is where Core's node state (pools and their deployments,
// placements, enrolment tokens and enrolled nodes) lives: "file" (the
// default) in state_dir, or in memory without one, for a single gateway;
// "kubernetes" in the Portal cluster's kube-apiserver (NodePool,
// NodePlacements, NodeEnrolmentToken, EnrolledNode objects of
// nodes.sandgate.io in the kubernetes block's namespace), shared by
// several replicas, which needs the kubernetes block, refuses state_dir
// and turns enrolment on (docs/scale-out.md "Node state").
// api (optional; see NodeAPI, default: none) has the app serve the
// internal node API itself on that one TCP address, with a plain net/http
// server outside Caddy's HTTP server, accepting the API tokens of the
// token_sha256 digests (at least one; the line may repeat).
// kubernetes (optional; see Kubernetes) is the Portal cluster connection
// that several replicas share their state through; "kubernetes" alone is
// the in-cluster default.
func (a *App) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // option name
	if err := argcount.Check(d, "sandgate", 0, 0, ""); err != nil {
		return err
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "token_key":
			// The shipped deploy/ Caddyfile takes the kid from
			// {$SANDGATE_TOKEN_KID}, which adds no argument when unset.
			if err := argcount.Check(d, "token_key", 3, 3, "<kid> <algorithm> <key file>"); err != nil {
				return err
			}
			args := d.RemainingArgs()
			k := TokenKey{KID: args[0], Algorithm: args[1], File: args[2]}
			for _, old := range a.TokenKeys {
				if old.KID == k.KID {
					return d.Errf("token_key %q already specified", k.KID)
				}
			}
			a.TokenKeys = append(a.TokenKeys, k)
		case "token_leeway":
			if a.TokenLeeway != 0 {
				return d.Err("token_leeway already specified")
			}
			if err := argcount.Check(d, "token_leeway", 1, 1, "<duration>"); err != nil {
				return err
			}
			d.NextArg()
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil {
				return d.Errf("bad token_leeway %q: %v", d.Val(), err)
			}
			if dur <= 0 {
				return d.Errf("token_leeway must be positive")
			}
			a.TokenLeeway = caddy.Duration(dur)
		case "credentials":
			if a.CredentialsRaw != nil {
				return d.Err("credentials already specified")
			}
			if err := argcount.Check(d, "credentials", 1, -1, "<source> ..."); err != nil {
				return err
			}
			d.NextArg()
			name := d.Val()
			mod, err := caddyfile.UnmarshalModule(d, "sandgate.credentials."+name)
			if err != nil {
				return err
			}
			a.CredentialsRaw = caddyconfig.JSONModuleObject(mod, "source", name, nil)
		case "authorizer":
			if a.AuthorizerRaw != nil {
				return d.Err("authorizer already specified")
			}
			if err := argcount.Check(d, "authorizer", 1, -1, "<source> ..."); err != nil {
				return err
			}
			d.NextArg()
			name := d.Val()
			mod, err := caddyfile.UnmarshalModule(d, "sandgate.authorizer."+name)
			if err != nil {
				return err
			}
			a.AuthorizerRaw = caddyconfig.JSONModuleObject(mod, "source", name, nil)
		case "cluster":
			id, c, err := clusterconfig.Parse(d)
			if err != nil {
				return err
			}
			if _, dup := a.Clusters[id]; dup {
				return d.Errf("cluster %q already specified", id)
			}
			if a.Clusters == nil {
				a.Clusters = map[string]*Cluster{}
			}
			a.Clusters[id] = c
		case "nodes":
			if a.Nodes != nil {
				return d.Err("nodes already specified")
			}
			if err := argcount.Check(d, "nodes", 0, 0, ""); err != nil {
				return err
			}
			n, err := nodeconfig.ParseNodes(d)
			if err != nil {
				return err
			}
			a.Nodes = n
		case "kubernetes":
			if a.Kubernetes != nil {
				return d.Err("kubernetes already specified")
			}
			k, err := nodeconfig.ParseKubernetes(d)
			if err != nil {
				return err
			}
			a.Kubernetes = k
		default:
			return d.Errf("unrecognized sandgate subdirective %q", d.Val())
		}
	}
	return nil
}

// Interface guard.
var _ caddyfile.Unmarshaler = (*App)(nil)
