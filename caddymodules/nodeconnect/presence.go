package nodeconnect

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandgate/sandgate/caddymodules/sandgate"
	"github.com/sandgate/sandgate/node/presence"
)

func init() {
	caddy.RegisterModule(KubernetesPresence{})
}

// serviceAccountNamespace is where Kubernetes mounts the pod's namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// maxPeerTokenFile bounds the peer token file.
const maxPeerTokenFile = 64 << 10

// KubernetesPresence is the "kubernetes" node presence
// (sandgate.node_presence.kubernetes): several gateway replicas share node
// presence and the owner epoch through coordination.k8s.io Leases in the
// Portal cluster (package node/presence), and the internal node API
// forwards a request about a node held by another replica to it, with a
// peer token. Caddyfile, inside the sandgate nodes block:
//
//	presence kubernetes {
//		advertise <url>          # required: this replica's internal node API, as the others reach it
//		peer_token_file <path>   # required: one token a line; the first is sent, all are accepted
//		namespace <namespace>    # default: the pod's own namespace
//		replica_id <id>          # default: the host name (the pod name)
//		kubeconfig <path>        # default: the in-cluster configuration
//		lease_duration <d>       # default 30s, at least 15s
//		renew_interval <d>       # default lease_duration/3
//		qps <n>                  # apiserver requests per second, default 500 (burst twice that)
//	}
//
// JSON: {"store": "kubernetes", "advertise": "http://{env.POD_IP}:30086",
// "peer_token_file": "/etc/sandgate/peer/token", …}. Placeholders are
// expanded in every string. The ServiceAccount needs get, list, create
// and update on leases in that namespace (deploy/portal).
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
	// Namespace holds the Leases. Default: the pod's namespace.
	Namespace string `json:"namespace,omitempty"`
	// ReplicaID is this replica's holder identity. Default: the host name.
	ReplicaID string `json:"replica_id,omitempty"`
	// Kubeconfig is a kubeconfig file. Default: the in-cluster
	// configuration (the pod's ServiceAccount).
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// LeaseDuration is how long a claim outlives its last renewal.
	// Default 30s.
	LeaseDuration caddy.Duration `json:"lease_duration,omitempty"`
	// RenewInterval is the shortest time between two renewals of a
	// node's Lease (the hub asks at each heartbeat). Default
	// lease_duration/3. The apiserver takes nodes/renew_interval writes
	// per second from all replicas together.
	RenewInterval caddy.Duration `json:"renew_interval,omitempty"`
	// QPS limits apiserver requests per second (burst: twice). Default
	// 500.
	QPS int `json:"qps,omitempty"`

	*presence.Leases
	sendToken   string
	acceptToken [][sha256.Size]byte
}

// CaddyModule returns the Caddy module information.
func (KubernetesPresence) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "sandgate.node_presence.kubernetes", New: func() caddy.Module { return new(KubernetesPresence) }}
}

// Provision builds the apiserver client and the presence, and reads the
// peer tokens. Errors name the setting; token values are never shown.
//
// The Lease watch that answers "which replica holds this node" runs until
// the config is unloaded.
func (k *KubernetesPresence) Provision(ctx caddy.Context) error {
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
	ns := repl.ReplaceAll(k.Namespace, "")
	if ns == "" {
		b, err := os.ReadFile(serviceAccountNamespace)
		if err != nil {
			return errors.New("presence kubernetes: namespace is not set and the pod's namespace file cannot be read")
		}
		ns = strings.TrimSpace(string(b))
	}
	id := repl.ReplaceAll(k.ReplicaID, "")
	if id == "" {
		if id, err = os.Hostname(); err != nil {
			return fmt.Errorf("presence kubernetes: replica_id is not set and the host name is unknown: %w", err)
		}
	}
	var cfg *rest.Config
	if kc := repl.ReplaceAll(k.Kubeconfig, ""); kc != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kc)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("presence kubernetes: the apiserver configuration: %w", err)
	}
	qps := k.QPS
	if qps == 0 {
		qps = 500
	}
	if qps < 0 {
		return errors.New("presence kubernetes: qps must be positive")
	}
	cfg.QPS, cfg.Burst = float32(qps), 2*qps
	cfg.UserAgent = "sandgate-gateway"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("presence kubernetes: %w", err)
	}
	l, err := presence.New(presence.Config{Leases: cs.CoordinationV1(), Namespace: ns, ReplicaID: id,
		Address: strings.TrimSuffix(adv, "/"), LeaseDuration: time.Duration(k.LeaseDuration),
		RenewInterval: time.Duration(k.RenewInterval)})
	if err != nil {
		return err
	}
	l.Start(ctx)
	k.Leases, k.sendToken, k.acceptToken = l, send, accept
	return nil
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
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		if seen[opt] {
			return d.Errf("%s already specified", opt)
		}
		seen[opt] = true
		if !d.NextArg() {
			return d.ArgErr()
		}
		v := d.Val()
		if d.NextArg() {
			return d.ArgErr()
		}
		switch opt {
		case "advertise":
			k.Advertise = v
		case "peer_token_file":
			k.PeerTokenFile = v
		case "namespace":
			k.Namespace = v
		case "replica_id":
			k.ReplicaID = v
		case "kubeconfig":
			k.Kubeconfig = v
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
		case "qps":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return d.Errf("bad qps %q: must be a positive integer", v)
			}
			k.QPS = n
		default:
			return d.Errf("unrecognized presence kubernetes subdirective %q", opt)
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
	_ caddyfile.Unmarshaler = (*KubernetesPresence)(nil)
	_ sandgate.NodePresence = (*KubernetesPresence)(nil)
)
