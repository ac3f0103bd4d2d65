// Package replicas runs several gateway processes (bin/caddy) as replicas
// of one gateway: they share node presence and the owner epoch through
// Leases in a kube-apiserver (the "kubernetes" node presence), each
// serving node connect on its own loopback port and, as the shipped
// configuration does, the internal node API on another from the sandgate
// app's own listener (the nodes block's api), which presence advertises
// to the other replicas for forwarding.
// The scale-out test (integration/scaleout), the peer token rotation
// (integration/rotation: replicas added and stopped one at a time) and the
// load tool (hack/scaleload) use it.
package replicas

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/freeport"
	"github.com/sandgate/sandgate/node/sim"
	"github.com/sandgate/sandgate/nodecore/api"
)

// Config describes the replicas.
type Config struct {
	// Caddy is the gateway binary (bin/caddy). Required.
	Caddy string
	// Replicas is how many gateway processes run (at least 1).
	Replicas int
	// Nodes are the enrolled nodes.
	Nodes []sim.Identity
	// Kubeconfig is the content of a kubeconfig that reaches the
	// apiserver holding the Leases; Namespace must exist there. Without
	// it the replicas run without presence (only meaningful with one).
	Kubeconfig []byte
	Namespace  string
	// LeaseDuration is the presence's lease_duration (default 15s).
	LeaseDuration time.Duration
	// HeartbeatInterval is the nodes' heartbeat period, the gateway's
	// heartbeat_interval (default 10s).
	HeartbeatInterval time.Duration
	// LogLevel is the gateways' log level (default INFO).
	LogLevel string
	// Output, when set, returns the writer of replica i's output (nil:
	// discarded). Add calls it once per replica: the attempts of a replica
	// started again after a bind race all write to that writer.
	Output func(i int) io.Writer
	// Env is added to every gateway's environment.
	Env []string
	// NodeStore "kubernetes" keeps the replicas' node state (pools,
	// enrolment, placements) in the apiserver of Kubeconfig (`store
	// kubernetes`; the nodes.sandgate.io CRDs must be installed). Default:
	// each replica's memory.
	NodeStore string
	// NodesExtra is added to every replica's nodes block as is (e.g. pool
	// blocks). Default none.
	NodesExtra string
	// Admin turns on each replica's Caddy admin endpoint on a loopback
	// port (Replica.Admin), for profiles (/debug/pprof/). Default off.
	Admin bool
	// PeerToken is the content of the replicas' peer token file
	// (Cluster.PeerTokenFile: one token a line, the first sent, all
	// accepted; each replica reads it when it starts). Default: one
	// random token.
	PeerToken string
}

// Replica is one gateway process.
type Replica struct {
	// ID is its replica ID (holder identity).
	ID string
	// URL is its base URL: node connect, the machine API and /metrics
	// (a Caddy site).
	URL string
	// APIURL is its internal node API's base URL: the sandgate app's
	// own listener (the nodes block's api), as presence advertises it.
	APIURL string
	// PID is its process ID.
	PID int
	// Admin is its Caddy admin endpoint (host:port), with Config.Admin.
	Admin string

	cmd    *exec.Cmd
	exited chan error
}

// Cluster is the running replicas.
type Cluster struct {
	// Replicas are the gateway processes started, in start order (a
	// stopped one stays at its index).
	Replicas []*Replica
	// APIToken is the internal node API's token.
	APIToken string
	// Dir holds the generated files.
	Dir string

	cfg    Config
	client *http.Client
	once   sync.Once
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func sum(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}

// Caddyfile returns the configuration of replica id listening on port,
// with the internal node API on apiPort and its admin endpoint on admin
// ("off": none).
func (c *Cluster) caddyfile(cfg Config, id, port, apiPort, admin string) string {
	presence, kube := "", ""
	if cfg.NodeStore != "" {
		presence = "\n\t\t\tstore " + cfg.NodeStore
	}
	if cfg.NodesExtra != "" {
		presence += "\n" + cfg.NodesExtra
	}
	if cfg.Kubeconfig != nil {
		presence += fmt.Sprintf(`
			presence kubernetes {
				advertise http://127.0.0.1:%s
				peer_token_file %s
				lease_duration %s
			}`, apiPort, filepath.Join(c.Dir, "peer-token"), cfg.LeaseDuration)
		kube = fmt.Sprintf(`
		kubernetes {
			kubeconfig %s
			namespace %s
			replica %s
		}`, filepath.Join(c.Dir, "kubeconfig"), cfg.Namespace, id)
	}
	level := cfg.LogLevel
	if level == "" {
		level = "INFO"
	}
	return fmt.Sprintf(`{
	admin %s
	auto_https off
	default_bind 127.0.0.1
	persist_config off
	log {
		level %s
	}
	sandgate {
		token_key k1 HS256 %s
		credentials file %s
		nodes {
			credentials file %s
			heartbeat_interval %s
			shutdown_grace 5s
			api 127.0.0.1:%s {
				token_sha256 %s
			}%s
		}%s
	}
}

http://127.0.0.1:%s {
	sandgate_health
	metrics /metrics
	sandbox_node_connect
}
`, admin, level, filepath.Join(c.Dir, "hmac.key"), filepath.Join(c.Dir, "credentials.yaml"), filepath.Join(c.Dir, "nodes.yaml"),
		cfg.HeartbeatInterval, apiPort, sum(c.APIToken), presence, kube, port)
}

// Start writes the files and starts the replicas, each once it listens.
// Errors name the replica that did not start.
func Start(cfg Config) (_ *Cluster, err error) {
	if cfg.Replicas < 1 || cfg.Caddy == "" {
		return nil, errors.New("replicas: Caddy and at least one replica are required")
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 15 * time.Second
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 10 * time.Second
	}
	dir, err := os.MkdirTemp("", "sandgate-replicas-")
	if err != nil {
		return nil, err
	}
	if cfg.PeerToken == "" {
		cfg.PeerToken = randomHex(32) + "\n"
	}
	c := &Cluster{Dir: dir, APIToken: randomHex(24), cfg: cfg,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}}}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	files := map[string]string{
		"nodes.yaml":       sim.CredentialsFile(cfg.Nodes),
		"hmac.key":         randomHex(32),
		"credentials.yaml": "credentials:\n  - {id: c, enabled: true, projectNamespace: p, clusterId: c}\n",
		"peer-token":       cfg.PeerToken,
		"kubeconfig":       string(cfg.Kubeconfig),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return nil, err
		}
	}
	for range cfg.Replicas {
		if _, err := c.Add(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Add starts one more replica, replica-<n> with n its index in Replicas
// (a new pod of a rolling update: its own ID, port and files, the
// cluster's configuration and the peer token file as it is now), and
// returns it once it listens. Errors name the replica. It appends to
// Replicas: not to be called while Dispatch or Nodes run. A replica that
// exits at start because a port picked for it was taken meanwhile
// ("address already in use") or shares one with another process is
// started again on new ports, up to 5 times; Config.Output is asked for
// the replica's writer once, and every attempt writes to it.
func (c *Cluster) Add() (*Replica, error) {
	var out io.Writer
	if c.cfg.Output != nil {
		out = c.cfg.Output(len(c.Replicas))
	}
	for attempt := 1; ; attempt++ {
		r, err := c.add(attempt > 1, out)
		if !errors.Is(err, errBindRace) || attempt == 5 {
			return r, err
		}
	}
}

// pickPort picks a replica's ports; tests replace it to hand out a port
// another process holds.
var pickPort = freeport.Port

// errBindRace reports a replica that did not get a port picked for it to
// itself: another process took the port between the pick and the
// replica's listen (the replica exited with "address already in use") or
// listens there too (SO_REUSEPORT; the replica was stopped).
var errBindRace = errors.New("a port picked for the replica was taken before it listened")

// add picks the ports of replica-<len(Replicas)> and starts it, its
// output to out (nil: discarded); again replaces the last replica of
// Replicas (one that exited with errBindRace) instead of appending.
func (c *Cluster) add(again bool, out io.Writer) (*Replica, error) {
	cfg := c.cfg
	i := len(c.Replicas)
	if again {
		i--
	}
	id := fmt.Sprintf("replica-%d", i)
	port, err := pickPort()
	if err != nil {
		return nil, err
	}
	apiPort, err := pickPort()
	if err != nil {
		return nil, err
	}
	admin := "off"
	if cfg.Admin {
		p, err := pickPort()
		if err != nil {
			return nil, err
		}
		admin = "127.0.0.1:" + p
	}
	cf := filepath.Join(c.Dir, id+".Caddyfile")
	if err := os.WriteFile(cf, []byte(c.caddyfile(cfg, id, port, apiPort, admin)), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(cfg.Caddy, "run", "--config", cf, "--adapter", "caddyfile")
	home := filepath.Join(c.Dir, id)
	cmd.Env = append(append(os.Environ(), "HOME="+home, "XDG_DATA_HOME="+home, "XDG_CONFIG_HOME="+home), cfg.Env...)
	bind := &harness.BindWatch{}
	cmd.Stdout, cmd.Stderr = bind, bind
	if out != nil {
		w := io.MultiWriter(out, bind)
		cmd.Stdout, cmd.Stderr = w, w
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("replicas: starting %s: %w", id, err)
	}
	r := &Replica{ID: id, URL: "http://127.0.0.1:" + port, APIURL: "http://127.0.0.1:" + apiPort, PID: cmd.Process.Pid, cmd: cmd, exited: make(chan error, 1)}
	if cfg.Admin {
		r.Admin = admin
	}
	go func() { r.exited <- cmd.Wait() }()
	if again {
		c.Replicas[i] = r
	} else {
		c.Replicas = append(c.Replicas, r)
	}
	if err := r.waitListening(); err != nil {
		if bind.InUse() {
			return nil, fmt.Errorf("replicas: %s: %w: %w", id, errBindRace, err)
		}
		return nil, err
	}
	return r, nil
}

// PeerTokenFile is the path of the replicas' peer token file; a replica
// reads it when it starts (Add), so an edit reaches the replicas started
// after it, as a Secret edit reaches the pods of a rolling update.
func (c *Cluster) PeerTokenFile() string { return filepath.Join(c.Dir, "peer-token") }

// waitListening waits until the replica accepts connections on its site,
// on its internal node API (Caddy starts its apps in no fixed order) and,
// with Config.Admin, on its admin endpoint, the replica's process alone
// listening on each. A port taken meanwhile answers the dial from
// another process; when that process is a Caddy too (SO_REUSEPORT, the
// same user; Caddy's admin endpoint binds so as well), both listen and
// share the connections: the replica is then stopped and the error is
// errBindRace. The check holds for the start only: a process that binds
// one of the ports with SO_REUSEPORT later shares it unnoticed
// (freeport.Listeners).
func (r *Replica) waitListening() error {
	addrs := []string{strings.TrimPrefix(r.URL, "http://"), strings.TrimPrefix(r.APIURL, "http://")}
	if r.Admin != "" {
		addrs = append(addrs, r.Admin)
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		listening := true
		for _, addr := range addrs {
			alone, err := freeport.ListeningAlone(r.PID, addr)
			if errors.Is(err, freeport.ErrShared) {
				_ = r.cmd.Process.Kill()
				r.exited <- <-r.exited
				return fmt.Errorf("replicas: %s: %w: %w", r.ID, errBindRace, err)
			}
			if err != nil {
				return fmt.Errorf("replicas: %s: %w", r.ID, err)
			}
			if !alone {
				listening = false
				break
			}
		}
		if listening {
			return nil
		}
		select {
		case err := <-r.exited:
			r.exited <- err
			return fmt.Errorf("replicas: %s exited while starting: %v", r.ID, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("replicas: %s did not listen within 60s", r.ID)
}

// Kill sends SIGKILL to replica i and waits for it to die.
func (c *Cluster) Kill(i int) error {
	r := c.Replicas[i]
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	err := <-r.exited
	r.exited <- err
	return nil
}

// Stop ends replica i as the kubelet ends a pod: SIGTERM (the gateway
// drains, closing its node connections with 1001 and releasing their
// Leases), then SIGKILL after 30 s; it returns once the process exited.
func (c *Cluster) Stop(i int) {
	r := c.Replicas[i]
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-r.exited:
		r.exited <- err
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		err := <-r.exited
		r.exited <- err
	}
}

// Close stops every replica (SIGTERM, then SIGKILL after 20 s) and removes
// the files.
func (c *Cluster) Close() {
	c.once.Do(func() {
		var wg sync.WaitGroup
		for _, r := range c.Replicas {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = r.cmd.Process.Signal(syscall.SIGTERM)
				select {
				case err := <-r.exited:
					r.exited <- err
				case <-time.After(20 * time.Second):
					_ = r.cmd.Process.Kill()
				}
			}()
		}
		wg.Wait()
		_ = os.RemoveAll(c.Dir)
	})
}

// URLs returns the replicas' base URLs.
func (c *Cluster) URLs() []string {
	out := make([]string, len(c.Replicas))
	for i, r := range c.Replicas {
		out[i] = r.URL
	}
	return out
}

// Answer is the internal node API's answer to one operation: the HTTP
// status and either the result (200) or the refusal.
type Answer struct {
	// Status is the HTTP status.
	Status int
	// Result is the operation's result, on 200.
	Result api.OperationResult
	// Refusal is the error body, on any other status.
	Refusal api.Error
}

// Dispatch sends one operation (an api.OperationRequest body) for nodeID
// through replica i's internal node API. Errors are transport errors.
func (c *Cluster) Dispatch(ctx context.Context, i int, nodeID string, body []byte) (Answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Replicas[i].APIURL+api.Prefix+"/"+nodeID+"/operations", bytes.NewReader(body))
	if err != nil {
		return Answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.APIToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return Answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Answer{}, err
	}
	a := Answer{Status: resp.StatusCode}
	if resp.StatusCode == http.StatusOK {
		err = json.Unmarshal(b, &a.Result)
	} else {
		err = json.Unmarshal(b, &a.Refusal)
	}
	return a, err
}

// Nodes lists the nodes through replica i's internal node API.
func (c *Cluster) Nodes(ctx context.Context, i int) (api.Nodes, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Replicas[i].APIURL+api.Prefix, nil)
	if err != nil {
		return api.Nodes{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.APIToken)
	resp, err := c.client.Do(req)
	if err != nil {
		return api.Nodes{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return api.Nodes{}, fmt.Errorf("replicas: list on %s: %s", c.Replicas[i].ID, resp.Status)
	}
	var n api.Nodes
	err = json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(&n)
	return n, err
}
