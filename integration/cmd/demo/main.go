// Command demo runs the README's main job: the gateway built from
// xcaddy.toml (bin/caddy) with Caddyfile.example as is, a local fixed entry
// with an execd stand-in behind it, a control-API stub, and a short session
// of the official E2B JS SDK through the gateway on :30083, printing what it
// did; then it lists the sandbox nodes through the internal node API, which
// Caddyfile.example serves from the sandgate app's own listener (the nodes
// block's api) with the demo token integration/demo/node-api-token.txt.
//
// Usage (from the repository root, after `make bin/caddy` and `npm ci` in
// integration/js; `make demo` does all three, without -serve):
//
//	go run ./integration/cmd/demo [-serve]
//
// Everything listens on 127.0.0.1: the gateway's data plane on 30083 (and,
// from Caddyfile.example, node connect on 30085, the node API on 30086 and
// Caddy's admin API on 2019), the fixed entry on 30090, the control API on
// 30084. Before starting anything it binds each of those ports once, plainly
// (without SO_REUSEPORT, so an earlier gateway's listener counts too), and
// exits 1 naming the first one in use. With -serve it keeps everything
// running after the session, prints how to call the gateway with curl and
// the SDK, and on SIGINT or SIGTERM stops what it started and exits 0. A
// SIGINT or SIGTERM before the session ended stops what it started, removes
// its temporary directories and exits 130 or 143; a second SIGINT during
// that stop exits at once. It asks the kernel for a SIGTERM when its parent
// dies (`go run`, which a SIGTERM kills without passing it on). It exits 1
// with the reason if a piece fails.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/hack/gatewayproc"
	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/nodecore/api"
	"github.com/sandgate/sandgate/nodecore/hub"
	"golang.org/x/sys/unix"
)

const sandboxID = "sbxdemo"

// demoPorts are the ports the demo needs on 127.0.0.1, with what listens
// there: the three the demo passes to the harness and those
// Caddyfile.example names (its admin, nodes' connect and api lines).
var demoPorts = []struct {
	port int
	what string
}{
	{30083, "the gateway's data plane"},
	{30084, "the control-API stub"},
	{30085, "node connect (Caddyfile.example)"},
	{30086, "the internal node API (Caddyfile.example's nodes { api })"},
	{30090, "the fixed entry stand-in"},
	{2019, "Caddy's admin API (Caddyfile.example's admin localhost:2019)"},
}

// checkPorts binds each of demoPorts on 127.0.0.1 and closes it again: a
// plain bind fails with EADDRINUSE when anything holds the port, an
// earlier gateway's SO_REUSEPORT listener included (which Caddy would
// otherwise share the port with). The error names the first port in use,
// what the demo needs it for, and how to find its holder.
func checkPorts() error {
	for _, p := range demoPorts {
		addr := fmt.Sprintf("127.0.0.1:%d", p.port)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("port %d (%s) is in use on 127.0.0.1: stop what listens there first "+
					"(an earlier gateway? `ss -ltnp 'sport = :%d'` names it)", p.port, p.what, p.port)
			}
			return fmt.Errorf("port %d (%s): %w", p.port, p.what, err)
		}
		l.Close()
	}
	return nil
}

// init asks the kernel for a SIGTERM when the demo's parent dies: `go run`
// (make demo), which a SIGTERM kills without passing it on. In init the
// main goroutine runs on the process's main thread, the task the parent
// forked, which is the one the setting must be made on.
func init() {
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0, 0, 0)
}

func main() {
	serve := flag.Bool("serve", false, "keep the gateway and the stand-ins running after the session until SIGINT or SIGTERM, and print how to call them")
	flag.Parse()
	d := &demo{signalled: make(chan struct{})}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		d.signal(sig)
		// A second Ctrl-C while the first signal's stop runs: stop now. A
		// later SIGTERM is ignored: the kernel sends one again each time a
		// process the demo was reparented to dies (PR_SET_PDEATHSIG).
		for s := range sigs {
			if s == os.Interrupt {
				os.Exit(exitCode(sig))
			}
		}
	}()
	err := d.run(*serve)
	d.close()
	if sig, served := d.ended(); sig != nil && !served {
		fmt.Fprintf(os.Stderr, "demo: stopped by %v before the session ended\n", sig)
		os.Exit(exitCode(sig))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// exitCode is the exit status of a demo a signal stopped: 128 + its
// number, as a shell reports a process it killed (130 SIGINT, 143 SIGTERM).
func exitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}

// demo holds what the run started, for the signal handler to stop. Only
// main exits (but for a second Ctrl-C): a signal stops what runs, and
// main then closes everything and exits with the signal's status.
type demo struct {
	mu        sync.Mutex
	env       *harness.Env
	sig       os.Signal     // the first signal received; nil before
	signalled chan struct{} // closed at the first signal
	served    bool          // -serve's session had ended when the signal came
	serving   bool          // -serve: the session is done, waiting for a signal
}

// signal records the first signal and, unless -serve is only waiting for
// it, stops the gateway and the stand-ins at once, so that a session in
// progress ends (its SDK calls fail) and main can exit. Before the
// harness has started them, main closes them when harness.Start returns
// (setEnv).
func (d *demo) signal(sig os.Signal) {
	d.mu.Lock()
	if d.sig != nil {
		d.mu.Unlock()
		return
	}
	d.sig, d.served = sig, d.serving
	close(d.signalled)
	env, serving := d.env, d.serving
	d.mu.Unlock()
	if env != nil && !serving {
		d.close()
	}
}

// ended returns the signal that stopped the demo (nil: none) and whether
// it came after -serve's session, the normal end of -serve.
func (d *demo) ended() (os.Signal, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sig, d.served
}

// setEnv records env, or reports false when a signal came while the
// harness was starting it (main then closes it).
func (d *demo) setEnv(env *harness.Env) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.env = env
	return d.sig == nil
}

// close stops the gateway and the stand-ins and removes the temporary
// directories (harness.Env.Close, which runs once: a second caller waits
// for the first).
func (d *demo) close() {
	d.mu.Lock()
	env := d.env
	d.mu.Unlock()
	if env != nil {
		env.Close()
	}
}

func (d *demo) run(serve bool) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	caddyfile, err := os.ReadFile(filepath.Join(root, "Caddyfile.example"))
	if err != nil {
		return fmt.Errorf("run the demo from the repository root: %w", err)
	}
	if err := checkPorts(); err != nil {
		return err
	}
	var gatewayLog gatewayproc.Output
	env, err := harness.Start(harness.Config{
		RepoRoot:        root,
		Caddyfile:       string(caddyfile),
		KeyFile:         filepath.Join(root, "integration/demo/token-hmac.key"),
		KeyID:           "demo",
		CredentialsFile: filepath.Join(root, "integration/demo/credentials.yaml"),
		Grants:          map[string]harness.Grant{sandboxID: {CredentialID: "demo-credential"}},
		Sandboxes:       []string{sandboxID},
		GatewayAddr:     "127.0.0.1:30083",
		FixedEntryAddr:  "127.0.0.1:30090",
		ControlAddr:     "127.0.0.1:30084",
		Stderr:          &gatewayLog,
	})
	if err != nil {
		return fmt.Errorf("%w\ngateway log:\n%s", err, gatewayLog.String())
	}
	if !d.setEnv(env) {
		return errors.New("stopped by a signal while starting") // main closes env
	}

	fmt.Println("sandgate demo")
	fmt.Println("  gateway (bin/caddy, Caddyfile.example): http://127.0.0.1:30083")
	fmt.Println("  fixed entry + OpenSandbox Ingress stand-in (URI mode): " + env.FixedEntry)
	fmt.Println("  control API stub (hands out tokens):    " + env.Control)
	fmt.Println("  sandbox " + sandboxID + " → cluster demo-cluster → execd stand-in")
	fmt.Println()

	cmd := exec.Command("node", "sdk.mjs", "demo")
	cmd.Dir = filepath.Join(root, "integration/js")
	cmd.Env = append(os.Environ(), "E2B_PACKAGE=e2b-2.51.0", "E2B_API_URL="+env.Control,
		"E2B_SANDBOX_URL="+env.Gateway, "SANDBOX_ID="+sandboxID, "SCENARIO_DIR=/home/user/demo")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("the E2B SDK session failed: %w\ngateway log:\n%s", err, gatewayLog.String())
	}
	var res struct {
		Package string `json:"package"`
		Result  struct {
			Run             json.RawMessage `json:"run"`
			Write           json.RawMessage `json:"write"`
			Read            json.RawMessage `json:"read"`
			List            json.RawMessage `json:"list"`
			ListAfterRemove json.RawMessage `json:"listAfterRemove"`
		} `json:"result"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil {
		return fmt.Errorf("the SDK session printed %q: %w", out, err)
	}
	fmt.Printf("E2B JS SDK %s, Sandbox.connect(%q) through the gateway:\n", strings.TrimPrefix(res.Package, "e2b-"), sandboxID)
	fmt.Printf("  commands.run(`echo \"hello from $(uname -s)\"; echo to-stderr >&2`)\n    → %s\n", res.Result.Run)
	fmt.Printf("  files.write('/home/user/demo/hello.txt', 'hello world\\n')\n    → %s\n", res.Result.Write)
	fmt.Printf("  files.read('/home/user/demo/hello.txt')\n    → %s\n", res.Result.Read)
	fmt.Printf("  files.list('/home/user/demo')\n    → %s\n", res.Result.List)
	fmt.Printf("  files.remove('/home/user/demo/hello.txt'); files.list('/home/user/demo')\n    → %s\n", res.Result.ListAfterRemove)

	nodes, err := listNodes(root)
	if err != nil {
		return fmt.Errorf("the internal node API: %w\ngateway log:\n%s", err, gatewayLog.String())
	}
	fmt.Println()
	fmt.Println("internal node API (the sandgate app's listener, nodes { api } of Caddyfile.example):")
	fmt.Println("  GET " + nodeAPI + api.Prefix)
	for _, n := range nodes {
		fmt.Printf("    → %s enrolled %v, %s, online %v\n", n.NodeID, n.Enrolled, n.State, n.Online)
	}
	if !serve {
		return nil
	}
	fmt.Println()
	fmt.Print(serveHelp(env.Control))
	d.mu.Lock()
	d.serving = true
	d.mu.Unlock()
	<-d.signalled
	sig, _ := d.ended()
	fmt.Fprintf(os.Stderr, "demo: %v: stopping\n", sig)
	return nil
}

// serveHelp is what -serve prints once everything runs: a token minted by
// the gateway's own command (no secret printed) and the calls to try.
func serveHelp(control string) string {
	return `running until Ctrl-C (SIGINT) or SIGTERM. Try, from the repository root:
  TOKEN=$(bin/caddy sandgate-token --key integration/demo/token-hmac.key --algorithm HS256 --kid demo \
    --credential demo-credential --sandbox ` + sandboxID + `)
  curl -s -m 10 -w '\n' http://127.0.0.1:30083/filesystem.Filesystem/ListDir -H 'Content-Type: application/json' \
    -H 'E2b-Sandbox-Id: ` + sandboxID + `' -H 'E2b-Sandbox-Port: 49983' -H "X-Access-Token: $TOKEN" \
    -d '{"path":"/home/user","depth":1}'
  curl -s -m 10 -H "Authorization: Bearer $(cat integration/demo/node-api-token.txt)" ` + nodeAPI + api.Prefix + `
  (cd integration/js && node --input-type=module -e "
    import { Sandbox } from 'e2b-2.51.0'
    const sbx = await Sandbox.connect('` + sandboxID + `', { apiKey: 'e2b_demo', apiUrl: '` + control + `',
      sandboxUrl: 'http://127.0.0.1:30083' })
    console.log((await sbx.commands.run('uname -a')).stdout)")
`
}

// nodeAPI is where Caddyfile.example serves the internal node API.
const nodeAPI = "http://127.0.0.1:30086"

// listNodes asks the gateway's internal node API for every node, with the
// demo's API token; an answer other than 200 with at least one node is an
// error.
func listNodes(root string) ([]hub.NodeStatus, error) {
	tok, err := os.ReadFile(filepath.Join(root, "integration/demo/node-api-token.txt"))
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest(http.MethodGet, nodeAPI+api.Prefix, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s %s", api.Prefix, resp.Status, body)
	}
	var list api.Nodes
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("GET %s answered %q: %w", api.Prefix, body, err)
	}
	if len(list.Nodes) == 0 {
		return nil, fmt.Errorf("GET %s listed no node; integration/demo/nodes.yaml enrols one", api.Prefix)
	}
	return list.Nodes, nil
}
