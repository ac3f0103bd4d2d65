package rotation

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/hack/gatewayproc"
	"github.com/sandgate/sandgate/integration/harness"
	"github.com/sandgate/sandgate/internal/freeport"
)

// nodeAPIGateway is one gateway replica serving the internal node API.
type nodeAPIGateway struct {
	proc *gatewayproc.Process
	stop func() // proc.Stop, once (a second Stop would wait for ever)
	url  string
	log  *bytes.Buffer
	// inUse is read-held by each client request to this gateway, from
	// its choice to its answer: the roll takes it before stopping the
	// gateway, as the Service stops sending to a pod before the kubelet
	// signals it.
	inUse sync.RWMutex
}

// TestNodeAPITokenRotationWithProcesses follows docs/runbook.md "Internal
// node API token" with bin/caddy replicas (each roll starts a new process
// with the new settings, moves the clients' traffic to it once it listens
// and stops the old one) and clients calling the internal node API
// (GET /internal/v1/sandbox-nodes) the whole time: step 1 puts the new
// token's digest in the slot, step 2 switches every client to the new
// token, step 3 moves the new digest to the current one and resets the
// slot to 64 f's. No request is refused; the old token is refused at the
// end, and neither token appears in a gateway's log. Both ways of serving
// the API: the nodes block's api listener (as Caddyfile.example and
// deploy/ ship it) and the sandbox_node_api handler on a site.
func TestNodeAPITokenRotationWithProcesses(t *testing.T) {
	for _, tc := range []struct {
		name string
		// config returns the nodes block's lines after state_dir and the
		// sites, serving the API on port with the two digests.
		config func(port, current, slot string) (nodes, sites string)
	}{
		{"app api listener", func(port, current, slot string) (string, string) {
			return fmt.Sprintf(`
			api 127.0.0.1:%s {
				token_sha256 %s
				token_sha256 %s
			}`, port, current, slot), ""
		}},
		{"sandbox_node_api site", func(port, current, slot string) (string, string) {
			return "", fmt.Sprintf(`
http://127.0.0.1:%s {
	sandbox_node_api {
		token_sha256 %s
		token_sha256 %s
	}
}
`, port, current, slot)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { testNodeAPITokenRotation(t, tc.config) })
	}
}

func testNodeAPITokenRotation(t *testing.T, config func(port, current, slot string) (nodes, sites string)) {
	root := repoRoot(t)
	caddy := filepath.Join(root, "bin", "caddy")
	dir := t.TempDir()
	const oldTok, newTok = "node-api-token-old-0123456789abcdef0123456789", "node-api-token-new-0123456789abcdef0123456789"
	none := strings.Repeat("f", 64)
	key := filepath.Join(dir, "k1.key")
	writeFile(t, key, "node-api-rotation-hmac-secret-0123456789abcdef")
	creds := filepath.Join(dir, "credentials.yaml")
	writeFile(t, creds, "credentials: []\n")
	var gens int
	var all []*nodeAPIGateway
	start := func(current, slot string) *nodeAPIGateway {
		gens++
		gdir := filepath.Join(dir, fmt.Sprintf("gateway-%d", gens))
		if err := os.MkdirAll(gdir, 0o700); err != nil {
			t.Fatal(err)
		}
		// The site's port is bound by the gateway: picked again when it was
		// taken before the gateway listened.
		var g *nodeAPIGateway
		for attempt := 1; ; attempt++ {
			port, err := freeport.Port()
			if err != nil {
				t.Fatal(err)
			}
			nodes, sites := config(port, current, slot)
			cf := fmt.Sprintf(`{
	admin off
	auto_https off
	default_bind 127.0.0.1
	persist_config off
	sandgate {
		token_key k1 HS256 %s
		credentials file %s
		nodes {
			state_dir %s%s
		}
	}
}
%s`, key, creds, filepath.Join(gdir, "state"), nodes, sites)
			g = &nodeAPIGateway{url: "http://127.0.0.1:" + port, log: &bytes.Buffer{}}
			bind := &harness.BindWatch{}
			g.proc, err = gatewayproc.Start(caddy, gdir, cf, io.MultiWriter(g.log, bind))
			if err != nil {
				t.Fatal(err)
			}
			err = g.proc.WaitListening("127.0.0.1:" + port)
			if err == nil {
				break
			}
			g.proc.Stop()
			if !bind.Lost(err) || attempt == 5 {
				t.Fatalf("gateway %d: %v\n%s", gens, err, g.log)
			}
			t.Logf("gateway %d, start attempt %d: %v; again with a new port", gens, attempt, err)
		}
		g.stop = sync.OnceFunc(g.proc.Stop)
		t.Cleanup(g.stop)
		all = append(all, g)
		return g
	}

	// The clients: GET the node list from the live gateways in turn, with
	// the token they hold.
	var mu sync.Mutex
	live := []*nodeAPIGateway{start(sha256Hex(oldTok), none)}
	clientToken := oldTok
	phase := "start"
	var next int
	var sent, refused atomic.Int64
	var refusals sync.Map
	ask := func(ctx context.Context, g *nodeAPIGateway, tok string) (int, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", g.url+"/internal/v1/sandbox-nodes", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := dataPlaneClient.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	ctx, stop := context.WithCancel(context.Background())
	var clients sync.WaitGroup
	// served counts the answers of each gateway, to wait for traffic.
	served := map[*nodeAPIGateway]int{}
	changed := make(chan struct{})
	for range 4 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for ctx.Err() == nil {
				mu.Lock()
				g, tok, ph := live[next%len(live)], clientToken, phase
				next++
				g.inUse.RLock()
				mu.Unlock()
				code, err := ask(ctx, g, tok)
				g.inUse.RUnlock()
				if ctx.Err() != nil {
					return
				}
				sent.Add(1)
				if err != nil || code != http.StatusOK {
					refused.Add(1)
					refusals.Store(fmt.Sprintf("%s: %d %v", ph, code, err), true)
					continue
				}
				mu.Lock()
				served[g]++
				close(changed)
				changed = make(chan struct{})
				mu.Unlock()
			}
		}()
	}
	defer func() { stop(); clients.Wait() }()
	// answered waits until g has answered n more requests.
	answered := func(g *nodeAPIGateway, n int) {
		t.Helper()
		mu.Lock()
		want := served[g] + n
		mu.Unlock()
		deadline := time.After(wait)
		for {
			mu.Lock()
			got, ch := served[g], changed
			mu.Unlock()
			if got >= want {
				return
			}
			select {
			case <-ch:
			case <-deadline:
				t.Fatalf("the gateway answered %d requests", got-want+n)
			}
		}
	}
	// roll replaces the gateway with one of the new settings: it joins
	// once it listens and has answered, then the old one stops.
	roll := func(step, current, slot string) {
		mu.Lock()
		phase = step + " gateway roll"
		old := live[0]
		mu.Unlock()
		g := start(current, slot)
		mu.Lock()
		live = []*nodeAPIGateway{old, g}
		mu.Unlock()
		answered(g, 20)
		mu.Lock()
		live = []*nodeAPIGateway{g}
		mu.Unlock()
		old.inUse.Lock() // no request to it is left
		old.stop()
		answered(g, 20)
		mu.Lock()
		phase = step + " done"
		mu.Unlock()
	}
	answered(live[0], 20)

	roll("step 1", sha256Hex(oldTok), sha256Hex(newTok)) // 1. the slot: the new digest
	mu.Lock()                                            // 2. every client switches to the new token
	clientToken, phase = newTok, "step 2"
	g := live[0]
	mu.Unlock()
	answered(g, 20)
	roll("step 3", sha256Hex(newTok), none) // 3. the new digest current, the slot 64 f's

	stop()
	clients.Wait()
	if n := refused.Load(); n != 0 {
		var kinds []string
		refusals.Range(func(k, _ any) bool { kinds = append(kinds, k.(string)); return true })
		t.Errorf("%d of %d node API requests refused during the rotation: %v", n, sent.Load(), kinds)
	}
	t.Logf("%d node API requests, none refused", sent.Load())
	mu.Lock()
	g = live[0]
	mu.Unlock()
	if code, err := ask(context.Background(), g, oldTok); err != nil || code != http.StatusUnauthorized {
		t.Errorf("the old token after the rotation: %d %v, want 401", code, err)
	}
	for i, g := range all {
		if s := g.log.String(); strings.Contains(s, oldTok) || strings.Contains(s, newTok) {
			t.Errorf("gateway %d's log contains a node API token", i+1)
		}
	}
}
