// Command demo runs the README's main job: the gateway built from
// xcaddy.toml (bin/caddy) with Caddyfile.example as is, a local fixed entry
// with an execd stand-in behind it, a control-API stub, and a short session
// of the official E2B JS SDK through the gateway on :30083, printing what it
// did; then it lists the sandbox nodes through the internal node API, which
// Caddyfile.example serves from the sandgate app's own listener (the nodes
// block's api) with the demo token integration/demo/node-api-token.txt.
//
// Usage (from the repository root, after `make bin/caddy` and `npm ci` in
// integration/js; `make demo` does all three):
//
//	go run ./integration/cmd/demo
//
// Everything listens on 127.0.0.1: the gateway's data plane on 30083 (and,
// from Caddyfile.example, node connect on 30085, the node API on 30086 and
// Caddy's admin API on 2019), the fixed entry on 30090, the control API on
// 30084. It exits 1 with the reason if a piece
// fails.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/nodecore/api"
	"github.com/sandgate/sandgate/nodecore/hub"
)

const sandboxID = "sbxdemo"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	caddyfile, err := os.ReadFile(filepath.Join(root, "Caddyfile.example"))
	if err != nil {
		return fmt.Errorf("run the demo from the repository root: %w", err)
	}
	var gatewayLog bytes.Buffer
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
	defer env.Close()

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
	return nil
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
