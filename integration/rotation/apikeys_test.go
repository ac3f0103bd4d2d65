package rotation

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
	kwait "k8s.io/apimachinery/pkg/util/wait"

	"github.com/sandgate/sandgate/integration/harness"
)

// apiClients call corectl's control API through its Service the whole
// time, as the SDK does (list, get, create and delete), with the key the
// test gives them; any answer but a success is a refusal.
type apiClients struct {
	r       *rig
	stop    context.CancelFunc
	done    sync.WaitGroup
	sent    atomic.Int64
	refused atomic.Int64
	// refusals are "phase: call: status or error" of each refusal.
	refusals sync.Map
	// phases counts the requests sent in each phase (the rig's phase
	// when the request was sent), in the order the phases began.
	phaseMu    sync.Mutex
	phaseNames []string
	phaseSent  map[string]int
	// answered is closed and replaced at each success.
	mu       sync.Mutex
	answered chan struct{}
	ok       int
}

// call sends one request with the rig's current key; the status, or an
// error for a transport failure.
func (c *apiClients) call(ctx context.Context, method, path, body string) (int, []byte, error) {
	req, _ := http.NewRequestWithContext(ctx, method, c.r.front+path, strings.NewReader(body))
	req.Header.Set("X-API-Key", c.r.key())
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := keepAliveClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// Each API client's pace, calls a second: a busy SDK user's, which one
// credential's share of one replica's apiserver requests
// (fairshare.DefaultRate, 300 a second) holds with room to spare: each
// call takes 1 from the share and its apiserver requests (docs/corectl.md
// "Per-credential limits", apiserver shares), so a list 1, a getInfo of this test's
// sandbox (no network rules) 1 + 5, a create and its kill 1 + 16 to 26
// and 1 + 17: 20 + 60 + 140 to 180 = 220 to 260 a second, if every call
// reached the same replica. Unpaced, the list client alone
// called about 1,000 times a second and was refused by the share
// (429 rate_limited), which is not what this test is about.
const (
	listRate   = 20
	getRate    = 10
	createRate = 4
)

// startAPIClients starts three clients: one lists the sandboxes, one gets
// sb, one creates a sandbox and deletes it, each at its pace (listRate,
// getRate, createRate).
func startAPIClients(r *rig, sb sandbox) *apiClients {
	ctx, cancel := context.WithCancel(context.Background())
	c := &apiClients{r: r, stop: cancel, answered: make(chan struct{}), phaseSent: map[string]int{}}
	note := func(phase, what string, code int, b []byte, err error, want int) bool {
		if ctx.Err() != nil {
			return false
		}
		c.sent.Add(1)
		c.phaseMu.Lock()
		if c.phaseSent[phase] == 0 {
			c.phaseNames = append(c.phaseNames, phase)
		}
		c.phaseSent[phase]++
		c.phaseMu.Unlock()
		if err != nil || code != want {
			c.refused.Add(1)
			c.refusals.Store(fmt.Sprintf("%s: %s: %d %.200s %v", phase, what, code, b, err), true)
			return false
		}
		c.mu.Lock()
		c.ok++
		close(c.answered)
		c.answered = make(chan struct{})
		c.mu.Unlock()
		return true
	}
	loops := []func(){
		func() {
			ph := r.phase.Load().(string)
			code, b, err := c.call(ctx, "GET", "/v2/sandboxes", "")
			note(ph, "list", code, b, err, http.StatusOK)
		},
		func() {
			ph := r.phase.Load().(string)
			code, b, err := c.call(ctx, "GET", "/sandboxes/"+sb.id, "")
			note(ph, "get", code, b, err, http.StatusOK)
		},
		func() {
			ph := r.phase.Load().(string)
			code, b, err := c.call(ctx, "POST", "/sandboxes", `{"templateID":"base","timeout":60}`)
			var created struct{ SandboxID string }
			if !note(ph, "create", code, b, err, http.StatusCreated) || json.Unmarshal(b, &created) != nil {
				return
			}
			ph = r.phase.Load().(string)
			code, b, err = c.call(ctx, "DELETE", "/sandboxes/"+created.SandboxID, "")
			note(ph, "delete", code, b, err, http.StatusNoContent)
		},
	}
	for i, loop := range loops {
		pace := rate.NewLimiter(rate.Limit([]int{listRate, getRate, createRate}[i]), 1)
		c.done.Add(1)
		go func() {
			defer c.done.Done()
			for pace.Wait(ctx) == nil {
				loop()
			}
		}()
	}
	return c
}

// succeeded waits until the clients have n more successes than at the
// call.
func (c *apiClients) succeeded(what string, n int) {
	t := c.r.t
	t.Helper()
	c.mu.Lock()
	want := c.ok + n
	c.mu.Unlock()
	deadline := time.After(wait)
	for {
		c.mu.Lock()
		got, ch := c.ok, c.answered
		c.mu.Unlock()
		if got >= want {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%s: the API clients had %d successes of %d", what, got-want+n, n)
		}
	}
}

// end stops the clients and reports: no request refused; the log gives
// how many were sent in each phase.
func (c *apiClients) end() {
	c.stop()
	c.done.Wait()
	t := c.r.t
	if n := c.refused.Load(); n != 0 {
		var kinds []string
		c.refusals.Range(func(k, _ any) bool { kinds = append(kinds, k.(string)); return true })
		t.Errorf("%d of %d control-API requests refused during the rotation: %v", n, c.sent.Load(), kinds)
	}
	var phases []string
	for _, p := range c.phaseNames {
		phases = append(phases, fmt.Sprintf("%s %d", p, c.phaseSent[p]))
	}
	t.Logf("%d control-API requests, %d refused (sent in each phase: %s)", c.sent.Load(), c.refused.Load(), strings.Join(phases, ", "))
}

// keyStatus is the status replica p answers a list with key.
func keyStatus(t *testing.T, p *corectlProc, key string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+p.addr+"/v2/sandboxes", nil)
	req.Header.Set("X-API-Key", key)
	resp, err := dataPlaneClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// reread waits until every live replica, each the same process as
// before the edit, answers key with want: the file was re-read without a
// restart.
func (r *rig) reread(what, key string, want int) {
	r.t.Helper()
	start := time.Now()
	for _, p := range r.live {
		err := kwait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, wait, true, func(context.Context) (bool, error) {
			return keyStatus(r.t, p, key) == want, nil
		})
		if err != nil {
			r.t.Fatalf("%s: %s never answered %d: %v", what, p.name, want, err)
		}
	}
	r.t.Logf("%s: every running replica answered %d within %s of the edit, none restarted", what, want, time.Since(start).Round(time.Millisecond))
}

// sdkResult is what sdk.mjs prints for the "apiKeyTraffic" and
// "sandboxList" scenarios.
type sdkResult struct {
	Calls  int               `json:"calls"`
	Rounds int               `json:"rounds"`
	Errors []json.RawMessage `json:"errors"`
	// OK and Error: sandboxList's attempt.
	OK    bool `json:"ok"`
	Error *struct {
		Name    string `json:"name"`
		Message string `json:"message"`
	} `json:"error"`
}

// sdkProcess is `node sdk.mjs <scenario>` of integration/js running.
type sdkProcess struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan error
}

// startSDK starts `node sdk.mjs scenario` with the E2B JS SDK 2.51.0 and
// env added to the environment.
func startSDK(t *testing.T, root, scenario string, env ...string) *sdkProcess {
	t.Helper()
	dir := filepath.Join(root, "integration", "js")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b-2.51.0", "package.json")); err != nil {
		t.Fatalf("the E2B JS SDK is not installed (%v): cd integration/js && npm ci", err)
	}
	p := &sdkProcess{cmd: exec.Command("node", "sdk.mjs", scenario), done: make(chan error, 1)}
	p.cmd.Dir = dir
	p.cmd.Env = append(append(os.Environ(), "E2B_PACKAGE=e2b-2.51.0"), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// result waits for the scenario's end and decodes what it printed.
func (p *sdkProcess) result(t *testing.T) sdkResult {
	t.Helper()
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("node sdk.mjs: %v\n%s\n%s", err, p.stdout.String(), p.stderr.String())
		}
	case <-time.After(wait):
		t.Fatalf("node sdk.mjs did not end\n%s", p.stderr.String())
	}
	var out struct {
		Result sdkResult `json:"result"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(p.stdout.Bytes()), &out); err != nil {
		t.Fatalf("sdk.mjs printed %q: %v", p.stdout.String(), err)
	}
	return out.Result
}

// TestAPIKeyRotationWithProcesses follows docs/runbook.md "API keys" with
// two bin/corectl replicas behind a Service, keys.yaml in a directory laid
// out as the kubelet mounts the Secret corectl-api-keys (an edit swaps
// ..data), and clients calling the control API the whole time as the SDK
// does (list, get, create and delete), data-plane traffic beside them.
// Step 1 adds the new key's entry: every running replica accepts the new
// key without a restart, then corectl rolls (as an apply of the generated
// Secret does) and the new replicas accept it too. Step 2 switches the
// clients to the new key, the E2B JS SDK 2.51.0 among them (list,
// getInfo, create and kill, round after round, until the end). Step 3
// removes the old entry: every running replica refuses the old key
// without a restart, then corectl rolls. No request with a listed key is
// refused; at the end the old key is refused (401, and the SDK's
// AuthenticationError) and the new one accepted, and neither key is in a
// log.
func TestAPIKeyRotationWithProcesses(t *testing.T) {
	const newKey = "e2b_rotation_key_new_0123456789abcdef0123456789"
	keyFile := filepath.Join(t.TempDir(), "primary.key")
	writeFile(t, keyFile, "api-key-rotation-hmac-secret-0123456789abcdef")
	r := newRig(t, func(*rig) []string {
		return []string{"-token-key-id", "primary", "-token-key-algorithm", "HS256", "-token-key-file", keyFile}
	}, func(r *rig, step int) string {
		return strings.Replace(strings.Replace(harness.DefaultCaddyfile, "token_key primary HS256 {{KEY}}", "token_key primary HS256 "+keyFile, 1),
			"cluster cluster-a {{FIXED_ENTRY}}", "cluster cluster-a {{FIXED_ENTRY}}\n\t\t"+authorizerBlock(r.front, r.internal, step), 1)
	})
	sb := r.create(600)
	r.startTraffic(func() sandbox { return sb })
	clients := startAPIClients(r, sb)
	t.Cleanup(func() { clients.stop(); clients.done.Wait() })
	r.answered("before the rotation", 20, r.live...)
	clients.succeeded("before the rotation", 20)

	// 1. The new key's entry beside the old one.
	r.phase.Store("step 1 edit")
	r.keys.update(map[string]string{"keys.yaml": keysFile(oldAPIKey, newKey)})
	r.reread("step 1", newKey, http.StatusOK)
	r.rollCorectl("step 1")
	for _, p := range r.live {
		if st := keyStatus(t, p, newKey); st != http.StatusOK {
			t.Fatalf("step 1: %s, started after the edit, answers the new key %d", p.name, st)
		}
	}
	clients.succeeded("step 1", 20)

	// 2. The clients switch to the new key; the JS SDK runs with it until
	// the end.
	r.phase.Store("step 2")
	r.apiKey.Store(newKey)
	clients.succeeded("step 2", 20)
	ready, stopFile := filepath.Join(r.dir, "sdk.ready"), filepath.Join(r.dir, "sdk.stop")
	sdk := startSDK(t, r.root, "apiKeyTraffic", "E2B_API_KEY="+newKey, "E2B_API_URL="+r.front, "E2B_SANDBOX_URL="+r.h.Gateway,
		"READY_FILE="+ready, "STOP_FILE="+stopFile)
	if err := kwait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, wait, true, func(context.Context) (bool, error) {
		_, err := os.Stat(ready)
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the SDK's first round did not end: %v\n%s", err, sdk.stderr.String())
	}

	// 3. The old entry removed.
	r.phase.Store("step 3 edit")
	r.keys.update(map[string]string{"keys.yaml": keysFile(newKey)})
	r.reread("step 3", oldAPIKey, http.StatusUnauthorized)
	r.rollCorectl("step 3")
	clients.succeeded("step 3", 20)
	writeFile(t, stopFile, "")
	res := sdk.result(t)
	clients.end()
	r.endTraffic()
	if len(res.Errors) != 0 || res.Rounds == 0 {
		t.Errorf("the JS SDK with the new key: %d calls in %d rounds, failed: %s", res.Calls, res.Rounds, res.Errors)
	}
	t.Logf("the JS SDK with the new key: %d calls in %d rounds, none failed", res.Calls, res.Rounds)

	// The old key is retired on every replica; the SDK sees it refused.
	for _, p := range r.live {
		if st := keyStatus(t, p, oldAPIKey); st != http.StatusUnauthorized {
			t.Errorf("%s answers the old key %d, want 401", p.name, st)
		}
		if st := keyStatus(t, p, newKey); st != http.StatusOK {
			t.Errorf("%s answers the new key %d, want 200", p.name, st)
		}
	}
	old := startSDK(t, r.root, "sandboxList", "E2B_API_KEY="+oldAPIKey, "E2B_API_URL="+r.front).result(t)
	if old.OK || old.Error == nil || old.Error.Name != "AuthenticationError" {
		t.Errorf("Sandbox.list with the old key: ok %v, error %+v; want an AuthenticationError", old.OK, old.Error)
	}
	logs := []string{r.gatewayLog}
	for _, p := range r.all {
		logs = append(logs, p.log)
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(oldAPIKey)) || bytes.Contains(b, []byte(newKey)) {
			t.Errorf("%s contains an API key", l)
		}
	}
	for _, out := range []string{sdk.stdout.String(), sdk.stderr.String()} {
		if strings.Contains(out, oldAPIKey) || strings.Contains(out, newKey) {
			t.Errorf("the SDK's output contains an API key")
		}
	}
}
