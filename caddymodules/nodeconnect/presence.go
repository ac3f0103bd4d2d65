package nodeconnect

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate/caddymodules/internal/argcount"
	"github.com/sandgate/sandgate/caddymodules/sandgate"
	"github.com/sandgate/sandgate/nodecore/portal"
	"github.com/sandgate/sandgate/nodecore/presence"
)

func init() {
	caddy.RegisterModule(KubernetesPresence{})
}

// maxPeerTokenFile bounds the peer token file.
const maxPeerTokenFile = 64 << 10

// KubernetesPresence is the "kubernetes" node presence
// (sandgate.node_presence.kubernetes): several gateway replicas share node
// presence and the owner epoch through coordination.k8s.io Leases in the
// Portal cluster (package nodecore/presence), and the internal node API
// forwards a request about a node held by another replica to it, with a
// peer token. It uses the sandgate app's Portal cluster connection (the
// kubernetes block: kubeconfig, namespace, replica, rate limits).
// Caddyfile, inside the sandgate nodes block:
//
//	presence kubernetes {
//		advertise <url>          # required: this replica's internal node API, as the others reach it
//		peer_token_file <path>   # required: one token a line; the first is sent, all are accepted
//		lease_duration <d>       # default 30s, at least 15s
//		renew_interval <d>       # default lease_duration/3
//	}
//
// JSON: {"store": "kubernetes", "advertise": "http://{env.POD_IP}:30086",
// "peer_token_file": "/etc/sandgate/peer/token", "lease_duration": "30s"}.
// Placeholders are expanded in every string. The ServiceAccount needs
// get, list, watch, create and update on leases in the Portal namespace
// (docs/scale-out.md).
type KubernetesPresence struct {
	// Advertise is the base URL of this replica's internal node API as
	// the other replicas reach it, e.g. http://{env.POD_IP}:30086.
	// Required.
	Advertise string `json:"advertise,omitempty"`
	// PeerTokenFile holds the peer tokens, one a line (blank lines and
	// lines starting with # are skipped): the first is sent with forwarded
	// requests, each is accepted, so a rotation adds the new token as a
	// second line, then moves it first, then removes the old one. Each
	// token is at least 32 bytes. Required.
	PeerTokenFile string `json:"peer_token_file,omitempty"`
	// LeaseDuration is how long a claim outlives its last renewal.
	// Default 30s.
	LeaseDuration caddy.Duration `json:"lease_duration,omitempty"`
	// RenewInterval is the shortest time between two renewals of a
	// node's Lease (the hub asks at each heartbeat). Default
	// lease_duration/3. The apiserver takes nodes/renew_interval writes
	// per second from all replicas together.
	RenewInterval caddy.Duration `json:"renew_interval,omitempty"`

	*presence.Leases
	address     string
	sendToken   string
	acceptToken [][sha256.Size]byte
	leasesKey   string // the Leases' key in leasesPool; "" when not held
}

// leaseRenewals counts the node Lease renewals of this process by result
// (presence.RenewWritten, RenewLost, RenewFailed):
//
//	sandgate_node_lease_renewals_total{result}   counter: written, lost, failed
//
// With the defaults the replicas together write about nodes/renew_interval
// a second; failed means the apiserver refused or did not answer.
var leaseRenewals = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "sandgate", Subsystem: "node", Name: "lease_renewals_total",
	Help: "Node Lease renewals written, lost (another holder: the connection is closed) or failed (apiserver), by result.",
}, []string{"result"})

// leasesPool shares a replica's presence across config reloads, keyed by
// the Portal cluster connection and the presence settings: a reload keeps
// the Lease watch (readiness does not drop) and the epoch counter's group
// commit.
var leasesPool = caddy.NewUsagePool()

// pooledLeases stops the Lease watch when the last config releases it.
type pooledLeases struct {
	*presence.Leases
	stop context.CancelFunc
}

// Destruct implements caddy.Destructor.
func (p pooledLeases) Destruct() error {
	p.stop()
	return nil
}

// CaddyModule returns the Caddy module information.
func (KubernetesPresence) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "sandgate.node_presence.kubernetes", New: func() caddy.Module { return new(KubernetesPresence) }}
}

// Provision checks advertise, reads the peer tokens and registers
// sandgate_node_lease_renewals_total in Caddy's metrics registry. Errors
// name the setting; token values are never shown. Connect then binds the
// presence to the Portal cluster.
func (k *KubernetesPresence) Provision(ctx caddy.Context) error {
	if reg := ctx.GetMetricsRegistry(); reg != nil {
		if err := reg.Register(leaseRenewals); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return err
			}
		}
	}
	repl := caddy.NewReplacer()
	adv := repl.ReplaceAll(k.Advertise, "")
	u, err := url.Parse(adv)
	if adv == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" && u.Path != "/" {
		return errors.New("presence kubernetes: advertise must be an http:// or https:// base URL (this replica's internal node API)")
	}
	send, accept, err := readPeerTokens(repl.ReplaceAll(k.PeerTokenFile, ""))
	if err != nil {
		return err
	}
	k.address, k.sendToken, k.acceptToken = strings.TrimSuffix(adv, "/"), send, accept
	return nil
}

// Connect implements sandgate.NodePresence: the presence's Leases live in
// the Portal cluster's namespace, held under its replica identity; the
// watch of the node Leases (which replica holds which node) runs while a
// config with the same settings does. cluster nil (no kubernetes block)
// is an error.
func (k *KubernetesPresence) Connect(cluster *portal.Cluster) error {
	if cluster == nil {
		return errors.New("presence kubernetes needs the Portal cluster connection: add a kubernetes block to the sandgate app")
	}
	key := fmt.Sprintf("%p|%s|%d|%d", cluster, k.address, k.LeaseDuration, k.RenewInterval)
	v, _, err := leasesPool.LoadOrNew(key, func() (caddy.Destructor, error) {
		l, err := presence.New(presence.Config{Leases: cluster.Clientset().CoordinationV1(),
			Namespace: cluster.Namespace(), ReplicaID: cluster.Replica(), Address: k.address,
			LeaseDuration: time.Duration(k.LeaseDuration), RenewInterval: time.Duration(k.RenewInterval),
			Renewed: func(result string) { leaseRenewals.WithLabelValues(result).Inc() }})
		if err != nil {
			return nil, err
		}
		ctx, stop := context.WithCancel(cluster.Context())
		l.Start(ctx)
		return pooledLeases{Leases: l, stop: stop}, nil
	})
	if err != nil {
		return err
	}
	k.leasesKey, k.Leases = key, v.(pooledLeases).Leases
	return nil
}

// Cleanup releases this config's reference to the shared presence.
func (k *KubernetesPresence) Cleanup() error {
	if k.leasesKey == "" {
		return nil
	}
	_, err := leasesPool.Delete(k.leasesKey)
	k.leasesKey = ""
	return err
}

// readPeerTokens reads the peer token file: the first token and the
// digests of all of them.
func readPeerTokens(path string) (string, [][sha256.Size]byte, error) {
	if path == "" {
		return "", nil, errors.New("presence kubernetes: peer_token_file is required")
	}
	f, err := os.Open(path)
	if err != nil {
		return "", nil, fmt.Errorf("presence kubernetes: peer_token_file: %w", err)
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(io.LimitReader(f, maxPeerTokenFile+1)); err != nil {
		return "", nil, fmt.Errorf("presence kubernetes: peer_token_file: %w", err)
	}
	if b.Len() > maxPeerTokenFile {
		return "", nil, fmt.Errorf("presence kubernetes: peer_token_file is over %d bytes", maxPeerTokenFile)
	}
	var send string
	var accept [][sha256.Size]byte
	sc := bufio.NewScanner(&b)
	for line := 1; sc.Scan(); line++ {
		tok := strings.TrimSpace(sc.Text())
		if tok == "" || strings.HasPrefix(tok, "#") {
			continue
		}
		if len(tok) < 32 {
			return "", nil, fmt.Errorf("presence kubernetes: peer_token_file line %d: a token must be at least 32 bytes", line)
		}
		if send == "" {
			send = tok
		}
		accept = append(accept, sha256.Sum256([]byte(tok)))
	}
	if send == "" {
		return "", nil, errors.New("presence kubernetes: peer_token_file holds no token")
	}
	return send, accept, nil
}

// PeerTokens implements sandgate.NodePresence.
func (k *KubernetesPresence) PeerTokens() (string, [][sha256.Size]byte) {
	return k.sendToken, k.acceptToken
}

// UnmarshalCaddyfile sets up the presence (syntax: see KubernetesPresence).
func (k *KubernetesPresence) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // "kubernetes"
	if err := argcount.Check(d, "presence kubernetes", 0, 0, ""); err != nil {
		return err
	}
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		if seen[opt] {
			return d.Errf("%s already specified", opt)
		}
		seen[opt] = true
		// The name first: a misspelt or moved one is not a count error.
		switch opt {
		case "namespace", "replica_id", "kubeconfig", "qps":
			return d.Errf("presence kubernetes: %s moved to the sandgate app's kubernetes block", opt)
		}
		syntax, known := map[string]string{"advertise": "<url>", "peer_token_file": "<path>",
			"lease_duration": "<duration>", "renew_interval": "<duration>"}[opt]
		if !known {
			return d.Errf("unrecognized presence kubernetes subdirective %q", opt)
		}
		if err := argcount.Check(d, opt, 1, 1, syntax); err != nil {
			return err
		}
		d.NextArg()
		v := d.Val()
		switch opt {
		case "advertise":
			k.Advertise = v
		case "peer_token_file":
			k.PeerTokenFile = v
		case "lease_duration":
			dur, err := caddy.ParseDuration(v)
			if err != nil || dur < 15*time.Second || dur > time.Hour {
				return d.Errf("bad lease_duration %q: must be a duration from 15s to 1h", v)
			}
			k.LeaseDuration = caddy.Duration(dur)
		case "renew_interval":
			dur, err := caddy.ParseDuration(v)
			if err != nil || dur <= 0 || dur > time.Hour {
				return d.Errf("bad renew_interval %q: must be a positive duration up to 1h", v)
			}
			k.RenewInterval = caddy.Duration(dur)
		}
	}
	if k.Advertise == "" || k.PeerTokenFile == "" {
		return d.Err("presence kubernetes needs advertise and peer_token_file")
	}
	return nil
}

// Interface guards.
var (
	_ caddy.Provisioner     = (*KubernetesPresence)(nil)
	_ caddy.CleanerUpper    = (*KubernetesPresence)(nil)
	_ caddyfile.Unmarshaler = (*KubernetesPresence)(nil)
	_ sandgate.NodePresence = (*KubernetesPresence)(nil)
)
