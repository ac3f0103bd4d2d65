package sandgate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/sandgate/sandgate/nodecore/portal"
)

// portals holds the Portal cluster connections across config reloads,
// keyed by their resolved settings: a reload with the same kubernetes
// block keeps the connection (and the watches that live as long as it).
var portals = caddy.NewUsagePool()

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

// pooledPortal lets the pool close the connection when the last config
// releases it.
type pooledPortal struct{ *portal.Cluster }

// Destruct implements caddy.Destructor.
func (p pooledPortal) Destruct() error { return p.Close() }

// provisionKubernetes connects to the Portal cluster, or takes the
// connection an earlier config made with the same settings and the same
// kubeconfig content.
func (a *App) provisionKubernetes() error {
	k := a.Kubernetes
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
			return fmt.Errorf("kubeconfig: %w", err)
		}
		digest = sha256.Sum256(b)
	}
	key, err := json.Marshal(struct {
		portal.Config
		Digest string
	}{cfg, hex.EncodeToString(digest[:])})
	if err != nil {
		return err
	}
	v, _, err := portals.LoadOrNew(string(key), func() (caddy.Destructor, error) {
		c, err := portal.Connect(cfg)
		if err != nil {
			return nil, err
		}
		return pooledPortal{c}, nil
	})
	if err != nil {
		return err
	}
	a.portalKey, a.portal = string(key), v.(pooledPortal).Cluster
	return nil
}

// PortalCluster returns the connection to the Portal cluster, or nil
// without a kubernetes block. It lives while a config that has the same
// kubernetes block runs, across reloads; watches that serve the whole
// replica use its Context.
func (a *App) PortalCluster() *portal.Cluster { return a.portal }

// unmarshalKubernetes parses the kubernetes block (syntax: see
// Kubernetes).
func unmarshalKubernetes(d *caddyfile.Dispenser) (*Kubernetes, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
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
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			continue
		}
		if !d.NextArg() {
			return nil, d.ArgErr()
		}
		v := d.Val()
		if d.NextArg() {
			return nil, d.ArgErr()
		}
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
		default:
			return nil, d.Errf("unrecognized kubernetes subdirective %q", opt)
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
