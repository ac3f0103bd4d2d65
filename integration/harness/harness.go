// Package harness starts the real processes and the stand-ins of an E2B
// data-plane session on loopback: the built gateway (bin/caddy) with a
// Caddyfile, a fixed entry with the OpenSandbox Ingress in URI mode, an execd
// behind it, and a control-API stub that hands the SDK tokens minted with the
// gateway's key. The integration tests and the README demo share it.
package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/gateway/token"
	"github.com/sandgate/sandgate/integration/controlapi"
	"github.com/sandgate/sandgate/integration/execdstub"
	"github.com/sandgate/sandgate/integration/fixedentry"
	"github.com/sandgate/sandgate/internal/freeport"
)

// Grant says what token the control API hands out for one sandbox ID.
type Grant struct {
	// CredentialID is the token's credential_id claim.
	CredentialID string
	// SandboxID is the token's sandbox_id claim; empty means the sandbox
	// asked for.
	SandboxID string
	// Key is the signing key; nil means the harness's primary key.
	Key *token.SigningKey
	// TTL is the token lifetime; 0 means one hour; negative gives an
	// expired token.
	TTL time.Duration
	// NoToken: the control API hands out no envdAccessToken, so the SDK
	// sends no X-Access-Token.
	NoToken bool
}

// Config describes one environment.
type Config struct {
	// RepoRoot is the repository root (bin/caddy, integration/js).
	RepoRoot string
	// Caddyfile is the gateway configuration. The placeholders
	// {{ADDR}} (gateway listen address), {{ADMIN}}, {{KEY}} (primary HMAC
	// key file), {{CREDENTIALS}} (credentials file) and {{FIXED_ENTRY}}
	// (fixed entry URL) are replaced. Empty means DefaultCaddyfile.
	Caddyfile string
	// Credentials is the content of the credentials file.
	Credentials string
	// CredentialsFile, when set, is used instead of writing Credentials.
	CredentialsFile string
	// KeyFile and KeyID, when set, name the HMAC (HS256) key the control
	// API signs with instead of a generated one.
	KeyFile string
	KeyID   string
	// Grants maps sandbox IDs to the tokens the control API hands out.
	Grants map[string]Grant
	// Sandboxes are the sandbox IDs the fixed entry knows and routes to the
	// execd stand-in.
	Sandboxes []string
	// ExecdVersion selects the execd stand-in's behaviour (HEAD, v1.0.18).
	ExecdVersion string
	// SandboxRoot is the host directory that stands for the sandbox's "/";
	// empty creates one (with home/user, root and tmp) in the environment's
	// directory. Two environments may share one.
	SandboxRoot string
	// ExecdAccessToken, when set, is the X-EXECD-ACCESS-TOKEN the execd
	// stand-in requires on every request (execd's --access-token).
	ExecdAccessToken string
	// GatewayAddr is the gateway's listen address; empty picks a free
	// loopback port.
	GatewayAddr string
	// FixedEntryAddr is the fixed entry's listen address; empty picks a
	// free loopback port.
	FixedEntryAddr string
	// FixedEntryListener, when set, is a listener the caller bound for the
	// fixed entry (FixedEntryAddr is then ignored): its address can be
	// written into another program's configuration before Start, and no
	// other process can take the port meanwhile. Start serves the fixed
	// entry on it and the Env's Close closes it; closing it again after a
	// failed Start is harmless.
	FixedEntryListener net.Listener
	// ControlAddr is the control API's address; empty picks a free port.
	ControlAddr string
	// Listens are further "host:port" addresses the Caddyfile has the
	// gateway bind (sites on ports the caller picked; the host an IP
	// literal). Start waits until the gateway alone listens on each, as on
	// its own address: a port another process took meanwhile, or shares
	// (SO_REUSEPORT), fails the start with ErrBindRace, and the caller may
	// pick again. Default none.
	Listens []string
	// Env is added to the gateway's environment.
	Env []string
	// Stderr receives the gateway's log; nil discards it.
	Stderr io.Writer
}

// DefaultCaddyfile is a loopback gateway in the shape of Caddyfile.example.
const DefaultCaddyfile = `{
	admin {{ADMIN}}
	auto_https off
	default_bind 127.0.0.1
	persist_config off
	sandgate {
		token_key primary HS256 {{KEY}}
		credentials file {{CREDENTIALS}}
		cluster cluster-a {{FIXED_ENTRY}}
	}
}

http://{{ADDR}} {
	e2b_dataplane {
		home_dir /home/user
		user root 0 0 /root
		transport http {
			dial_timeout 3s
			response_header_timeout 30s
		}
	}
}
`

// Env is a running environment. Close stops everything.
type Env struct {
	// Root is the host directory that stands for the sandbox's "/".
	Root string
	// Dir is a scratch directory for the test.
	Dir   string
	Execd *execdstub.Server
	// ExecdAddr is the execd stand-in's host:port (what a fixed-entry
	// resolver maps port 44772 to).
	ExecdAddr  string
	Ingress    *fixedentry.Ingress
	FixedEntry string
	Control    string
	Gateway    string
	Admin      string
	KeyFile    string
	CredFile   string
	Key        token.SigningKey

	cmd     *exec.Cmd
	servers []*http.Server
	waitErr chan error
	once    sync.Once

	tokMu  sync.Mutex
	minted []string
}

// Start builds nothing: bin/caddy must exist (make build). It returns an
// error naming the piece that failed to start.
func Start(cfg Config) (_ *Env, err error) {
	dir, err := os.MkdirTemp("", "sandgate-env-")
	if err != nil {
		return nil, err
	}
	e := &Env{Dir: dir, Root: cfg.SandboxRoot, waitErr: make(chan error, 1)}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	if e.Root == "" {
		e.Root = filepath.Join(dir, "sandbox")
		for _, d := range []string{"home/user", "root", "tmp"} {
			if err := os.MkdirAll(filepath.Join(e.Root, d), 0o755); err != nil {
				return nil, err
			}
		}
	}

	// Key and credentials.
	kid := cfg.KeyID
	e.KeyFile = cfg.KeyFile
	if e.KeyFile == "" {
		e.KeyFile, kid = filepath.Join(dir, "primary.key"), "primary"
		secret := make([]byte, 32)
		_, _ = rand.Read(secret)
		if err := os.WriteFile(e.KeyFile, []byte(hex.EncodeToString(secret)), 0o600); err != nil {
			return nil, err
		}
	}
	if e.Key, err = token.LoadSigningKey(kid, "HS256", e.KeyFile); err != nil {
		return nil, err
	}
	e.CredFile = cfg.CredentialsFile
	if e.CredFile == "" {
		e.CredFile = filepath.Join(dir, "credentials.yaml")
		if err := os.WriteFile(e.CredFile, []byte(cfg.Credentials), 0o600); err != nil {
			return nil, err
		}
	}

	// execd behind the fixed entry.
	e.Execd = execdstub.New(execdstub.Config{Root: e.Root, GracefulShutdown: 50 * time.Millisecond, Version: cfg.ExecdVersion,
		AccessToken: cfg.ExecdAccessToken})
	execdAddr, err := e.serve("127.0.0.1:0", e.Execd)
	if err != nil {
		return nil, fmt.Errorf("execd stand-in: %w", err)
	}
	e.ExecdAddr = execdAddr
	e.Ingress = fixedentry.New()
	for _, id := range cfg.Sandboxes {
		e.Ingress.SetSandbox(id, fixedentry.Sandbox{Ready: true, Endpoint: "127.0.0.1", Namespace: "default",
			Ports: map[int]string{44772: execdAddr}})
	}
	var feAddr string
	if cfg.FixedEntryListener != nil {
		feAddr = e.serveOn(cfg.FixedEntryListener, e.Ingress)
	} else {
		feAddr, err = e.serve(orLoopback(cfg.FixedEntryAddr), e.Ingress)
	}
	if err != nil {
		return nil, fmt.Errorf("fixed entry stand-in: %w", err)
	}
	e.FixedEntry = "http://" + feAddr

	ctl := &controlapi.Server{CreateID: firstOr(cfg.Sandboxes, "sbxlocal1"), Token: func(id string) (string, error) {
		g, ok := cfg.Grants[id]
		if !ok {
			return "", errors.New("no grant")
		}
		if g.NoToken {
			return "", nil
		}
		return e.Mint(id, g)
	}}
	ctlAddr, err := e.serve(orLoopback(cfg.ControlAddr), ctl)
	if err != nil {
		return nil, fmt.Errorf("control API stub: %w", err)
	}
	e.Control = "http://" + ctlAddr

	// The gateway. Its ports were free a moment before it starts; another
	// process on the machine may take one in between, so a start that
	// fails to bind is retried on new ports (a few times).
	for attempt := 1; ; attempt++ {
		err := e.startOnFreePorts(cfg, dir)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrBindRace) || attempt == 5 {
			return nil, err
		}
		e.waitErr = make(chan error, 1)
	}
	return e, nil
}

// ErrBindRace reports a gateway that did not get a port picked for it to
// itself at start: another process took the port meanwhile and the
// gateway exited saying "address already in use", or the other process
// listens there too (a Caddy: SO_REUSEPORT, the same user) and the
// gateway was stopped. Start tries its own picks again; a caller whose
// Caddyfile names addresses of its own gets it (wrapped) and may pick
// again.
var ErrBindRace = errors.New("a port picked for the gateway was taken before it listened")

// startOnFreePorts picks the gateway's and its admin API's ports, writes
// the Caddyfile and starts the gateway; ErrBindRace when a port was taken
// between the pick and the gateway's listen, or when another process
// listens on the gateway's address or, when the Caddyfile took the picked
// admin address ({{ADMIN}}), on that one too.
func (e *Env) startOnFreePorts(cfg Config, dir string) error {
	gwAddr := cfg.GatewayAddr
	var err error
	if gwAddr == "" {
		if gwAddr, err = pickAddr(); err != nil {
			return err
		}
	}
	adminAddr, err := pickAddr()
	if err != nil {
		return err
	}
	e.Gateway, e.Admin = "http://"+gwAddr, adminAddr
	caddyfile := cfg.Caddyfile
	if caddyfile == "" {
		caddyfile = DefaultCaddyfile
	}
	adminPicked := strings.Contains(caddyfile, "{{ADMIN}}")
	caddyfile = e.Expand(caddyfile)
	cfPath := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfPath, []byte(caddyfile), 0o600); err != nil {
		return err
	}
	return e.startGateway(cfg, cfPath, adminPicked)
}

// pickAddr picks the gateway's and its admin API's addresses; tests
// replace it to hand out a port another process holds.
var pickAddr = freeport.Addr

// CaddyBinary returns the path of the built gateway.
func CaddyBinary(repoRoot string) string { return filepath.Join(repoRoot, "bin", "caddy") }

// startGateway starts the gateway with the Caddyfile at cfPath and waits
// until it alone listens on e.Gateway, with checkAdmin on e.Admin, and on
// cfg.Listens.
func (e *Env) startGateway(cfg Config, cfPath string, checkAdmin bool) error {
	bin := CaddyBinary(cfg.RepoRoot)
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("the gateway binary %s is missing; run `make build` first", bin)
	}
	e.cmd = exec.Command(bin, "run", "--config", cfPath, "--adapter", "caddyfile")
	e.cmd.Dir = cfg.RepoRoot
	e.cmd.Env = append(append(os.Environ(), "HOME="+e.Dir, "XDG_DATA_HOME="+e.Dir, "XDG_CONFIG_HOME="+e.Dir), cfg.Env...)
	bind := &BindWatch{}
	out := io.Writer(bind)
	if cfg.Stderr != nil {
		out = io.MultiWriter(cfg.Stderr, bind)
	}
	e.cmd.Stdout, e.cmd.Stderr = out, out
	if err := e.cmd.Start(); err != nil {
		return fmt.Errorf("starting the gateway: %w", err)
	}
	go func() { e.waitErr <- e.cmd.Wait() }()
	// Wait until the gateway answers, or exits. A dial that succeeds
	// counts only once the gateway process alone listens there: when the
	// port was taken meanwhile, the dial reaches the other process and
	// the gateway exits with "address already in use" or, when the other
	// process is a Caddy too (SO_REUSEPORT, the same user), both listen
	// and share the connections; then the gateway is stopped and the
	// start is a bind race too. The admin address the harness picked is
	// held to the same rule once the site listens (Caddy binds its admin
	// endpoint with SO_REUSEPORT as well, and before its apps, so it
	// normally listens by then): another Caddy there would take Reload's
	// configuration and answer the tests' /metrics scrapes. The check
	// holds for the start only: a process that binds a port with
	// SO_REUSEPORT later shares it unnoticed (freeport.Listeners).
	deadline := time.Now().Add(30 * time.Second)
	addrs := []string{strings.TrimPrefix(e.Gateway, "http://")}
	if checkAdmin {
		addrs = append(addrs, e.Admin)
	}
	addrs = append(addrs, cfg.Listens...)
	next := 0 // the gateway alone listens on addrs[:next]
	for {
		for next < len(addrs) {
			alone, err := freeport.ListeningAlone(e.cmd.Process.Pid, addrs[next])
			if errors.Is(err, freeport.ErrShared) {
				_ = e.cmd.Process.Kill()
				e.waitErr <- <-e.waitErr // Close waits for it too
				return fmt.Errorf("%w: %w", ErrBindRace, err)
			}
			if err != nil {
				return err
			}
			if !alone {
				break
			}
			next++
		}
		if next == len(addrs) {
			return nil
		}
		select {
		case err := <-e.waitErr:
			e.waitErr <- err
			if bind.InUse() {
				return fmt.Errorf("%w: the gateway exited while starting: %v", ErrBindRace, err)
			}
			return fmt.Errorf("the gateway exited while starting: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the gateway did not start listening on %s within 30s", addrs[next])
		}
	}
}

// PID returns the gateway's process ID.
func (e *Env) PID() int { return e.cmd.Process.Pid }

// Signal sends sig to the gateway process.
func (e *Env) Signal(sig os.Signal) error { return e.cmd.Process.Signal(sig) }

// WaitExit waits up to d for the gateway process to exit and returns its
// exit error (nil: status 0); ok is false when it was still running.
func (e *Env) WaitExit(d time.Duration) (exitErr error, ok bool) {
	select {
	case err := <-e.waitErr:
		e.waitErr <- err // Close waits for it too
		return err, true
	case <-time.After(d):
		return nil, false
	}
}

// Mint returns a token for sandbox id as g describes.
func (e *Env) Mint(id string, g Grant) (string, error) {
	key := e.Key
	if g.Key != nil {
		key = *g.Key
	}
	sbx := g.SandboxID
	if sbx == "" {
		sbx = id
	}
	ttl := g.TTL
	now := time.Now()
	if ttl == 0 {
		ttl = time.Hour
	}
	if ttl < 0 {
		now = now.Add(ttl - time.Minute)
		ttl = time.Second
	}
	tok, err := key.Mint(token.Target{CredentialID: g.CredentialID, SandboxID: sbx, Port: 49983}, ttl, now)
	if err == nil {
		e.tokMu.Lock()
		e.minted = append(e.minted, tok)
		e.tokMu.Unlock()
	}
	return tok, err
}

// MintedTokens returns every token Mint has returned so far, those the
// control API handed to the SDK included, so tests can check that none of
// them leaks into a log.
func (e *Env) MintedTokens() []string {
	e.tokMu.Lock()
	defer e.tokMu.Unlock()
	return append([]string(nil), e.minted...)
}

// adminClient is Reload's HTTP client: http.DefaultClient's transport
// with a bound on the request (a reload answers once the new
// configuration runs, in seconds), so an admin endpoint that hangs fails
// the reload rather than the test's whole package at its -timeout.
var adminClient = &http.Client{Timeout: 2 * time.Minute}

// Expand fills the placeholders of a Caddyfile as Start did (Config.
// Caddyfile: {{ADDR}}, {{ADMIN}}, {{KEY}}, {{CREDENTIALS}},
// {{FIXED_ENTRY}}) with this environment's values, for Reload.
func (e *Env) Expand(caddyfile string) string {
	return strings.NewReplacer("{{ADDR}}", strings.TrimPrefix(e.Gateway, "http://"), "{{ADMIN}}", e.Admin, "{{KEY}}", e.KeyFile,
		"{{CREDENTIALS}}", e.CredFile, "{{FIXED_ENTRY}}", e.FixedEntry).Replace(caddyfile)
}

// Reload posts a new Caddyfile to the gateway's admin API (caddy reload);
// the request is bounded by ctx and by 2 minutes.
func (e *Env) Reload(ctx context.Context, caddyfile string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+e.Admin+"/load", strings.NewReader(caddyfile))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/caddyfile")
	resp, err := adminClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("reload: HTTP %d: %s", resp.StatusCode, b)
	}
	return nil
}

// Close stops the gateway and the stand-ins and removes the directories.
func (e *Env) Close() {
	e.once.Do(func() {
		if e.cmd != nil && e.cmd.Process != nil {
			_ = e.cmd.Process.Signal(os.Interrupt)
			select {
			case <-e.waitErr:
			case <-time.After(10 * time.Second):
				_ = e.cmd.Process.Kill()
				<-e.waitErr
			}
		}
		for _, s := range e.servers {
			_ = s.Close()
		}
		if e.Execd != nil {
			e.Execd.Close()
		}
		_ = os.RemoveAll(e.Dir)
	})
}

func (e *Env) serve(addr string, h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	return e.serveOn(ln, h), nil
}

// serveOn serves h on ln until the Env closes; ln's address.
func (e *Env) serveOn(ln net.Listener, h http.Handler) string {
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	e.servers = append(e.servers, s)
	go func() { _ = s.Serve(ln) }()
	return ln.Addr().String()
}

func orLoopback(addr string) string {
	if addr == "" {
		return "127.0.0.1:0"
	}
	return addr
}

func firstOr(s []string, def string) string {
	if len(s) > 0 {
		return s[0]
	}
	return def
}

// BindWatch is a writer of a gateway's output that remembers whether it
// said a listen failed with "address already in use" (a picked port taken
// before the gateway bound it); it keeps only the last few bytes to find
// the phrase across writes. The zero value is ready; it is safe for the
// concurrent writes of a process's two streams. harness and
// integration/replicas start their gateways with one.
type BindWatch struct {
	mu   sync.Mutex
	tail []byte
	seen bool
}

const addrInUse = "address already in use"

// Write looks for the phrase in p (and the bytes before it); it never
// fails.
func (b *BindWatch) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.seen {
		buf := append(b.tail, p...)
		b.seen = bytes.Contains(buf, []byte(addrInUse))
		if n := len(addrInUse) - 1; len(buf) > n {
			buf = buf[len(buf)-n:]
		}
		b.tail = append(b.tail[:0], buf...)
	}
	return len(p), nil
}

// InUse reports whether the output written so far said "address already
// in use".
func (b *BindWatch) InUse() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seen
}

// Lost reports whether a gateway start that failed with err lost a port
// it was given to another process, so that the caller may pick new ports
// and start again: its output said "address already in use" (InUse), or
// err is freeport.ErrShared (another socket listens on the port too).
func (b *BindWatch) Lost(err error) bool {
	return b.InUse() || errors.Is(err, freeport.ErrShared)
}
