package nodeconnect

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/nodecore/api"
	"github.com/sandgate/sandgate/nodecore/hub"
)

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// binaryCaddyfile is the gateway configuration of the binary test; body is
// the answer of the unrelated route /extra.
func binaryCaddyfile(f files, admin, body string) string {
	return fmt.Sprintf(`{
	admin %s
	auto_https off
	default_bind 127.0.0.1
	persist_config off
	sandgate {
		token_key k1 HS256 %s
		credentials file %s
		nodes {
			credentials file %s
			owner_epoch 3
			hello_timeout 5s
			idle_timeout 10s
			heartbeat_interval 100ms
		}
	}
}

http://127.0.0.1:%s {
	respond /extra %q 200
	sandbox_node_connect
	sandbox_node_api {
		token_sha256 %s
	}
}
`, admin, f.key, f.creds, f.nodes, f.port, body, hexSum(apiToken))
}

// TestBinaryReloadKeepsConnection runs the built gateway (bin/caddy, `make
// build`), connects a node, reloads the config through the admin API
// (POST /load) with a changed unrelated route, and checks that the
// connection survives: the new route is served, heartbeats keep being
// acknowledged on the same connection, and an operation goes through it
// with the next sequence number. The gateway's log must not contain the
// node credential or the API token.
func TestBinaryReloadKeepsConnection(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin", "caddy")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the gateway binary %s is missing; run `make build` first", bin)
	}
	f := newFiles(t)
	admin := "127.0.0.1:" + freePort(t)
	cfPath := filepath.Join(f.dir, "Caddyfile")
	write(t, cfPath, binaryCaddyfile(f, admin, "v1"))

	var logs lockedBuffer
	cmd := exec.Command(bin, "run", "--config", cfPath, "--adapter", "caddyfile")
	cmd.Dir = f.dir
	cmd.Env = append(os.Environ(), "HOME="+f.dir, "XDG_DATA_HOME="+f.dir, "XDG_CONFIG_HOME="+f.dir)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(timeout):
			_ = cmd.Process.Kill()
			<-exited
		}
		out := logs.String()
		for _, s := range []string{nodeSecret, apiToken} {
			if strings.Contains(out, s) {
				t.Errorf("the gateway log contains a secret")
			}
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", out)
		}
	})
	base := "http://127.0.0.1:" + f.port
	waitFor(t, "the gateway to listen", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("the gateway exited: %v", err)
		default:
		}
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+f.port, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})

	n := dialNode(t, base, -1)
	if err := n.Heartbeat(t.Context()); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	if status, res := apiOperation(t, base); status != http.StatusOK || res.Outcome != "success" || res.Sequence != 1 {
		t.Fatalf("operation before the reload: %d %+v", status, res)
	}
	if status, body := get(t, base+"/extra"); body != "v1" {
		t.Fatalf("/extra = %d %q", status, body)
	}

	// caddy reload: POST the changed Caddyfile to the admin API.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+admin+"/load",
		strings.NewReader(binaryCaddyfile(f, admin, "v2")))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "text/caddyfile")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /load: %d", resp.StatusCode)
	}
	waitOneListener(t, base)
	if status, body := get(t, base+"/extra"); body != "v2" {
		t.Fatalf("after the reload /extra = %d %q, want v2", status, body)
	}

	for range 3 {
		if err := n.Heartbeat(t.Context()); err != nil {
			t.Fatalf("heartbeat after the reload: %v", err)
		}
	}
	if n.Err() != nil || n.LastAck().ConnectionID != n.Welcome().ConnectionID {
		t.Fatalf("connection after the reload: err %v, ack %+v", n.Err(), n.LastAck())
	}
	var st hub.NodeStatus
	if status := apiGet(t, base, api.Prefix+"/"+nodeID, &st); status != http.StatusOK || !st.Online ||
		st.ConnectionID != n.Welcome().ConnectionID || st.OwnerEpoch != 3 {
		t.Fatalf("API status after the reload: %d %+v", status, st)
	}
	if status, res := apiOperation(t, base); status != http.StatusOK || res.Outcome != "success" || res.Sequence != 2 ||
		res.ConnectionID != n.Welcome().ConnectionID {
		t.Fatalf("operation after the reload: %d %+v", status, res)
	}
}
