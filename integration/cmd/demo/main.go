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
// the SDK, and stops on SIGINT or SIGTERM. A SIGINT or SIGTERM at any time
// stops what it started and removes its temporary directory (exit status
// 130 or 143). It exits 1 with the reason if a piece fails.
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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/hack/gatewayproc"
	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/nodecore/api"
	"github.com/sandgate/sandgate/nodecore/hub"
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

func main() {
	serve := flag.Bool("serve", false, "keep the gateway and the stand-ins running after the session until SIGINT or SIGTERM, and print how to call them")
	flag.Parse()
	d := &demo{stop: make(chan os.Signal, 1)}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		if d.serving.Load() {
			d.stop <- sig // the end -serve waits for: run returns, main exits 0
			return
		}
		d.close()
		code := 130
		if sig == syscall.SIGTERM {
			code = 143
		}
		os.Exit(code)
	}()
	err := d.run(*serve)
	d.close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// demo holds what the run started, for the signal handler to stop.
type demo struct {
	mu      sync.Mutex
	env     *harness.Env
	closed  bool
	serving atomic.Bool    // -serve: the session is done, a signal ends the demo normally
	stop    chan os.Signal // the signal that ended -serve
}

// setEnv records env, or closes it at once when a signal already closed
// the demo (it then reports false).
func (d *demo) setEnv(env *harness.Env) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		env.Close()
		return false
	}
	d.env = env
	return true
}

// close stops the gateway and the stand-ins and removes the temporary
// directory (harness.Env.Close); later calls do nothing.
func (d *demo) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.closed = true
	if d.env != nil {
		d.env.Close()
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
		return errors.New("stopped by a signal while starting")
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
	d.serving.Store(true)
	sig := <-d.stop
	fmt.Fprintf(os.Stderr, "demo: %v: stopping\n", sig)
	return nil
}

// serveHelp is what -serve prints once everything runs: a token minted by
// the gateway's own command (no secret printed) and the calls to try.
func serveHelp(control string) string {
	return `running until Ctrl-C (SIGINT) or SIGTERM. Try, from the repository root:
  TOKEN=$(bin/caddy sandgate-token --key integration/demo/token-hmac.key --algorithm HS256 --kid demo \
    --credential demo-credential --sandbox ` + sandboxID + `)
  curl -s -w '\n' http://127.0.0.1:30083/filesystem.Filesystem/ListDir -H 'Content-Type: application/json' \
    -H 'E2b-Sandbox-Id: ` + sandboxID + `' -H 'E2b-Sandbox-Port: 49983' -H "X-Access-Token: $TOKEN" \
    -d '{"path":"/home/user","depth":1}'
  curl -s -w '\n' -H "Authorization: Bearer $(cat integration/demo/node-api-token.txt)" ` + nodeAPI + api.Prefix + `
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
