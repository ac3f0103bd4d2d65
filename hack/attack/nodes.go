package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/hack/gatewayproc"
	"github.com/sandgate/sandgate/node/proto"
	"github.com/sandgate/sandgate/nodecore/hub"
)

var (
	installation = "11111111-2222-4333-8444-555555555555"
	fingerprint  = strings.Repeat("f", 64)
	specDigest   = strings.Repeat("5a", 32)
)

// enrolled is one enrolled node.
type enrolled struct{ id, secret string }

// nodeGateway starts the gateway with n enrolled nodes and the node
// connect handler; extra is more of the site (e.g. the internal API).
func nodeGateway(o options, n int, extra string) (*gateway, []enrolled, error) {
	dir, err := os.MkdirTemp("", "attack-")
	if err != nil {
		return nil, nil, err
	}
	nodes := make([]enrolled, n)
	var rec strings.Builder
	rec.WriteString("nodes:\n")
	for i := range nodes {
		nodes[i] = enrolled{id: uuid.NewString(), secret: randomHex(24)}
		fmt.Fprintf(&rec, "  - {node_id: %q, enabled: true, credential_sha256: %q, installation_id: %q, provider: docker, backend_fingerprint: %q, deployment_generation: 1, specification_digest: %q}\n",
			nodes[i].id, sum(nodes[i].secret), installation, fingerprint, specDigest)
	}
	if err := os.WriteFile(dir+"/nodes.yaml", []byte(rec.String()), 0o600); err != nil {
		return nil, nil, err
	}
	g, err := start(o, dir, fmt.Sprintf("\t\tnodes {\n\t\t\tcredentials file %s/nodes.yaml\n\t\t}", dir),
		"http://127.0.0.1:%s {\n\tsandbox_node_connect\n"+extra+"}\n")
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	return g, nodes, nil
}

// baseline lets the freshly started gateway settle, resets its memory
// peak and returns its memory before the attack.
func (g *gateway) baseline() (memory, error) {
	time.Sleep(2 * time.Second) // the settling time itself, not synchronisation
	if err := g.ResetPeak(); err != nil {
		return memory{}, err
	}
	return g.memory(), nil
}

// join dials node n, sends its hello and reads the welcome.
func (g *gateway) join(n enrolled) (*websocket.Conn, *proto.Welcome, error) {
	ws, err := g.dial(n)
	if err != nil {
		return nil, nil, err
	}
	b, err := proto.Encode(hello(n))
	if err == nil {
		err = ws.WriteMessage(websocket.TextMessage, b)
	}
	var data []byte
	if err == nil {
		_, data, err = ws.ReadMessage()
	}
	if err != nil {
		ws.Close()
		return nil, nil, fmt.Errorf("no welcome: %w", err)
	}
	f, err := proto.Decode(data)
	w, ok := f.(*proto.Welcome)
	if err != nil || !ok {
		ws.Close()
		return nil, nil, fmt.Errorf("the first frame is not a welcome: %v", err)
	}
	return ws, w, nil
}

func (g *gateway) close() {
	g.Stop()
	_ = os.RemoveAll(g.dir)
}

// dial opens node n's WebSocket.
func (g *gateway) dial(n enrolled) (*websocket.Conn, error) {
	h := http.Header{"Authorization": {"Bearer " + n.secret}}
	d := websocket.Dialer{HandshakeTimeout: 30 * time.Second}
	ws, resp, err := d.Dial("ws://127.0.0.1:"+g.port+hub.ConnectPath+"?node_id="+n.id, h)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	return ws, err
}

func hello(n enrolled) *proto.Hello {
	return &proto.Hello{NodeID: n.id, InstallationID: installation, Provider: proto.ProviderDocker,
		BackendFingerprint: fingerprint, DeploymentGeneration: 1, SpecificationDigest: specDigest, MaxActive: 8,
		Health: health()}
}

func health() proto.Health {
	return proto.Health{ProviderReady: true, ObservedAt: time.Now().UTC(), Host: proto.HostMeasurements{CPUCount: 8,
		CPUPercent: 10, MemoryTotalBytes: 32 << 30, MemoryUsedBytes: 8 << 30, DiskTotalBytes: 1 << 40, DiskUsedBytes: 1 << 38}}
}

// closeCode returns the close code in err, or -1.
func closeCode(err error) int {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return -1
}

// helloAttack: o.nodes enrolled nodes each send one hello of o.size bytes
// (a valid hello padded with JSON whitespace) at the same time, streamed
// in 1 MiB pieces, then wait for the gateway's answer.
func helloAttack(o options) error {
	describe(o)
	g, nodes, err := nodeGateway(o, o.nodes, "")
	if err != nil {
		return err
	}
	defer g.close()
	before, err := g.baseline()
	if err != nil {
		return err
	}
	fmt.Printf("%d nodes each send a %s hello at once\n", len(nodes), mib(o.size))
	var wg sync.WaitGroup
	results := make([]string, len(nodes))
	start := time.Now()
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = sendHello(g, n, o.size)
		}()
	}
	wg.Wait()
	fmt.Printf("all answered in %s: %s\n", time.Since(start).Round(time.Millisecond), summarize(results))
	g.report(o, before)
	return nil
}

// sendHello sends one padded hello and returns what the gateway answered.
func sendHello(g *gateway, n enrolled, size int) string {
	ws, err := g.dial(n)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer ws.Close()
	b, err := proto.Encode(hello(n))
	if err != nil {
		return err.Error()
	}
	written := make(chan error, 1)
	go func() {
		w, err := ws.NextWriter(websocket.TextMessage)
		if err != nil {
			written <- err
			return
		}
		if _, err := w.Write(b); err != nil {
			written <- err
			return
		}
		chunk := bytes.Repeat([]byte{' '}, 1<<20)
		for left := size - len(b); left > 0; left -= len(chunk) {
			if _, err := w.Write(chunk[:min(left, len(chunk))]); err != nil {
				written <- err
				return
			}
		}
		written <- w.Close()
	}()
	_ = ws.SetReadDeadline(time.Now().Add(2 * time.Minute))
	_, data, err := ws.ReadMessage()
	switch {
	case err != nil && closeCode(err) >= 0:
		return fmt.Sprintf("close %d", closeCode(err))
	case err != nil:
		return "read: " + err.Error()
	}
	f, err := proto.Decode(data)
	if err != nil {
		return "invalid frame from the gateway"
	}
	return f.FrameType()
}

// summarize counts equal results.
func summarize(results []string) string {
	counts := map[string]int{}
	var order []string
	for _, r := range results {
		if counts[r] == 0 {
			order = append(order, r)
		}
		counts[r]++
	}
	var parts []string
	for _, r := range order {
		parts = append(parts, fmt.Sprintf("%d× %s", counts[r], r))
	}
	return strings.Join(parts, ", ")
}

// heartbeatAttack: one welcomed node sends heartbeats back to back for
// o.duration or until the gateway closes the connection.
func heartbeatAttack(o options) error { return flood(o, false) }

// pongAttack: one welcomed node sends unsolicited WebSocket pongs back to
// back for o.duration or until the gateway closes the connection.
func pongAttack(o options) error { return flood(o, true) }

// flood sends heartbeats, or pongs when pongs is set, back to back from
// one welcomed node and reports what the gateway answered and its CPU.
func flood(o options, pongs bool) error {
	describe(o)
	g, nodes, err := nodeGateway(o, 1, "")
	if err != nil {
		return err
	}
	defer g.close()
	ws, w, err := g.join(nodes[0])
	if err != nil {
		return err
	}
	defer ws.Close()
	hb, err := proto.Encode(&proto.Heartbeat{ConnectionID: w.ConnectionID, OwnerEpoch: w.OwnerEpoch,
		Health: health()})
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	var sent atomic.Int64
	go func() {
		deadline := time.Now().Add(o.duration)
		for time.Now().Before(deadline) {
			select {
			case <-stop:
				return
			default:
			}
			if pongs {
				if ws.WriteMessage(websocket.PongMessage, []byte("p")) != nil {
					return
				}
			} else if ws.WriteMessage(websocket.TextMessage, hb) != nil {
				return
			}
			sent.Add(1)
		}
	}()
	cpu0, t0, err := gatewayproc.CPUTicks(g.Pid)
	if err != nil {
		return err
	}
	acks, end := 0, "the flood ran its whole duration"
	_ = ws.SetReadDeadline(time.Now().Add(o.duration))
	for {
		if _, _, err := ws.ReadMessage(); err != nil {
			if c := closeCode(err); c >= 0 {
				end = fmt.Sprintf("the gateway closed the connection with %d", c)
			}
			break
		}
		acks++
	}
	close(stop)
	cpu1, t1, err := gatewayproc.CPUTicks(g.Pid)
	if err != nil {
		return err
	}
	d := t1.Sub(t0)
	if pongs {
		fmt.Printf("%s after %s: %d pongs sent (%.0f/s); gateway CPU %.1f%% of one core over that time\n",
			end, d.Round(time.Millisecond), sent.Load(), float64(sent.Load())/d.Seconds(), gatewayproc.CPUPercent(cpu1-cpu0, d))
		return nil
	}
	fmt.Printf("%s after %s: %d heartbeat_acks (%.0f/s); gateway CPU %.1f%% of one core over that time\n",
		end, d.Round(time.Millisecond), acks, float64(acks)/d.Seconds(), gatewayproc.CPUPercent(cpu1-cpu0, d))
	return nil
}

// responseAttack: o.nodes welcomed nodes each get one info request
// through the internal API and answer it with a response of o.size bytes
// (a valid response padded with JSON whitespace), all at once: the
// largest frames the gateway must accept, and only while a request is
// pending.
func responseAttack(o options) error {
	describe(o)
	token := randomHex(24)
	g, nodes, err := nodeGateway(o, o.nodes, "\tsandbox_node_api {\n\t\ttoken_sha256 "+sum(token)+"\n\t}\n")
	if err != nil {
		return err
	}
	defer g.close()
	conns := make([]*websocket.Conn, len(nodes))
	for i, n := range nodes {
		ws, _, err := g.join(n)
		if err != nil {
			return err
		}
		defer ws.Close()
		conns[i] = ws
	}
	before, err := g.baseline()
	if err != nil {
		return err
	}
	fmt.Printf("%d nodes each answer one pending info request with a %s response at once\n", len(nodes), mib(o.size))
	var wg sync.WaitGroup
	results := make([]string, len(nodes))
	start := time.Now()
	for i, n := range nodes {
		wg.Add(2)
		go func() {
			defer wg.Done()
			results[i] = operation(g, token, n)
		}()
		go func() {
			defer wg.Done()
			answerPadded(conns[i], o.size)
		}()
	}
	wg.Wait()
	fmt.Printf("all answered in %s: %s\n", time.Since(start).Round(time.Millisecond), summarize(results))
	g.report(o, before)
	return nil
}

// operation sends one info operation to node n through the internal API
// and returns the HTTP status and outcome.
func operation(g *gateway, token string, n enrolled) string {
	body := `{"operation":"info","deployment_generation":1,"timeout_ms":60000,"reference":{"tenant_id":"t","environment_id":"e","allocation_id":"a"}}`
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:"+g.port+"/internal/v1/sandbox-nodes/"+n.id+"/operations", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "API: " + err.Error()
	}
	defer resp.Body.Close()
	var out struct {
		Outcome string `json:"outcome"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return fmt.Sprintf("%d %s", resp.StatusCode, out.Outcome)
}

// answerPadded reads the next request on ws and answers it with a
// response padded to size bytes.
func answerPadded(ws *websocket.Conn, size int) {
	_, data, err := ws.ReadMessage()
	if err != nil {
		return
	}
	f, err := proto.Decode(data)
	r, ok := f.(*proto.Request)
	if err != nil || !ok {
		return
	}
	now := time.Now().UTC().Truncate(time.Second)
	b, err := proto.Encode(&proto.Response{ID: r.ID, ConnectionID: r.ConnectionID, Info: &proto.Info{
		Reference: r.Reference, DeploymentGeneration: 1, State: proto.StateRunning, Image: "busybox:latest",
		CreatedAt: now, RenewedAt: now}})
	if err != nil {
		return
	}
	w, err := ws.NextWriter(websocket.TextMessage)
	if err != nil {
		return
	}
	_, _ = w.Write(b)
	chunk := bytes.Repeat([]byte{' '}, 1<<20)
	for left := size - len(b); left > 0; left -= len(chunk) {
		if _, err := w.Write(chunk[:min(left, len(chunk))]); err != nil {
			return
		}
	}
	_ = w.Close()
}
